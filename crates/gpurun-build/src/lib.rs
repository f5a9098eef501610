//! The build pipeline of cargo-gpurun as a library: find the device crates of a workspace
//! (`cargo metadata`, selected as cargo selects packages), build each for its GPU target on the
//! nightly toolchain with `-Zbuild-std=core,alloc` (or for the host), check every image offline
//! ([`validate`]).
//!
//! The entry points are [`build`] (lib and bins, what `cargo gpurun build` prints) and
//! [`build_for_test`] (also the tests/ and example targets, see [`targets`], what `cargo gpurun
//! test` runs). nvptx images are linked by our own bitcode linker ([`nvptx_link`]), which
//! cargo reaches through `-Clinker`: the `gpurun-nvptx-link` executable of this crate, or any
//! program that calls [`nvptx_link::main`] when started under that name.
//!
//! Owns: the build pipeline (cargo, the nvptx linker, ptxas, the image checks), the toolchain
//! checks ([`toolchain`]), whether host images carry the emulation's checks ([`emulation`]).
//! Must not: parse command lines (callers fill a plain [`BuildOptions`]), run tests, or know devices:
//! which GPUs are present and which target to build when none is given are the runner's
//! (`gpurun_runner::placement`); the GPU's architecture comes in through
//! [`BuildOptions::gpu_arch`].

pub mod amdgcn;
pub mod arch;
mod cargo;
pub mod coverage;
mod crates;
pub mod emulation;
pub mod nvptx_link;
mod rustflags;
pub mod targets;
pub mod toolchain;
pub mod validate;

use std::collections::HashMap;
use std::path::PathBuf;

pub use cargo::NVPTX_LINKER_NAME;
pub use gpurun_image::Platform;

/// Where this crate's sources are: a library caller builds the `gpurun-nvptx-link` executable
/// from them (with escargot), wherever the crate came from (a checkout, cargo's registry), into
/// a target directory of its own (the sources may be cargo's registry, no place to build in).
pub const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

use crate::toolchain::ToolchainError;

/// What to build: the cargo-style options `cargo gpurun build`, `test` and `run` share, and
/// what `gpurun-test` asks for.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Path to Cargo.toml of the device crate or workspace.
    pub manifest_path: Option<PathBuf>,
    /// Device crate(s) to build (empty, as cargo: the package of the manifest in use, or at a
    /// virtual root the device crates of `default-members`, else of every member).
    pub packages: Vec<String>,
    /// Build every device crate of the workspace.
    pub workspace: bool,
    /// Build with the release profile.
    pub release: bool,
    /// Features to activate (each entry comma or space separated).
    pub features: Vec<String>,
    /// Activate all features.
    pub all_features: bool,
    /// Do not activate the `default` feature.
    pub no_default_features: bool,
    /// Targets by name: nvptx64-nvidia-cuda (nvptx), amdgcn-amd-amdhsa (amdgcn) or host; empty:
    /// nvptx.
    pub targets: Vec<String>,
    /// GPU architectures, at most one per target family (sm_NN for nvptx, gfxNNN for amdgcn);
    /// empty: `[package.metadata.gpurun]` `nvptx-arch`/`amdgcn-arch`/`arch`, else the GPU
    /// present, else sm_70 for nvptx.
    pub arch: Vec<String>,
    /// Do not print cargo's progress.
    pub quiet: bool,
    /// The executable rustc links nvptx images with. Default: this process's executable, which
    /// must then call [`nvptx_link::main`] when started as [`NVPTX_LINKER_NAME`] (as
    /// `cargo-gpurun` does); a library caller whose executable is not such a program (e.g.
    /// `gpurun-test` in a test binary) passes the `gpurun-nvptx-link` executable of this crate.
    pub nvptx_linker: Option<PathBuf>,
    /// Instrument host images for source-based coverage (`-Cinstrument-coverage`, with the
    /// nightly toolchain whose `llvm-tools` read the profiles), built in a target directory of
    /// their own ([`coverage::target_dir`]). Host images only: a GPU target is an error.
    pub coverage: bool,
    /// Host target: build the images for the emulation's memory checks (with the nightly
    /// toolchain: `-Zsanitizer=thread`, whose hooks the device runtime implements, and frame
    /// pointers), into `<target dir>/<host triple>/`. Without a nightly toolchain the images are
    /// built without them and a `warning:` line says so.
    pub emulation_checks: bool,
    /// Asks the GPU of a target's kind on this machine for its architecture, for a package
    /// with none given (`--arch`, `[package.metadata.gpurun]`): the runner's
    /// `placement::gpu_arch`, which the build cannot call itself (it knows targets, not
    /// devices). `None`: the default architecture.
    pub gpu_arch: Option<fn(Platform) -> Option<String>>,
}

/// What kind of cargo target an image came from. Ordered as `cargo test` runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// A `cdylib` (the usual shape of a device crate).
    Lib,
    /// A `[[bin]]`.
    Bin,
    /// A test target.
    Test,
    /// An example.
    Example,
}

/// One image a build produced.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BuiltImage {
    /// The cargo package name.
    pub package: String,
    /// The cargo target name (the library or binary name).
    pub name: String,
    /// What it was built for (its short name in the JSON output).
    #[serde(serialize_with = "serialize_platform")]
    pub target: Platform,
    /// The GPU architecture (`sm_70`, `gfx90a`); `None` for the host.
    pub arch: Option<String>,
    /// The image: `.ptx` (nvptx), `.elf` code object (amdgcn), `.so` (host).
    pub path: PathBuf,
    /// The cubin assembled from the PTX, when ptxas was found.
    pub cubin: Option<PathBuf>,
    /// Which kind of cargo target produced it.
    pub kind: TargetKind,
    /// The target's source file, relative to the package root (`src/lib.rs`, `tests/foo.rs`).
    pub source: PathBuf,
    /// The package root (the directory of its Cargo.toml): a coverage report covers the files
    /// under it. Not in the JSON output.
    #[serde(skip)]
    pub package_root: PathBuf,
    /// Kernels found in the image by the offline validation (empty for host images).
    pub kernels: Vec<String>,
    /// The package's `[package.metadata.gpurun]` table, if any, from the build's own `cargo
    /// metadata` (so settings like `test-timeout` need no second one). Not in the JSON output.
    #[serde(skip)]
    pub gpurun_metadata: Option<serde_json::Value>,
}

fn serialize_platform<S: serde::Serializer>(
    platform: &Platform,
    out: S,
) -> Result<S::Ok, S::Error> {
    out.serialize_str(platform.short_name())
}

/// Why a build failed. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// `--target` named something we do not build for.
    #[error("unknown target `{0}`: expected nvptx64-nvidia-cuda (nvptx), amdgcn-amd-amdhsa (amdgcn) or host")]
    UnknownTarget(String),
    /// `--arch` (or the package metadata) named an architecture the target does not have.
    #[error("unknown {target} architecture `{arch}`: {hint}")]
    UnknownArch {
        arch: String,
        target: Platform,
        hint: String,
    },
    /// amdgcn has no default architecture.
    #[error("no amdgcn architecture for `{package}`: pass `--arch gfx90a` (for example) or set `amdgcn-arch = \"gfx90a\"` under [package.metadata.gpurun]")]
    NoAmdgcnArch { package: String },
    /// `[package.metadata.gpurun]` has a value we cannot use.
    #[error("bad [package.metadata.gpurun] in `{package}`: {detail}")]
    BadMetadata { package: String, detail: String },
    /// `cargo metadata` failed.
    #[error("failed to read the workspace: {0}")]
    Metadata(String),
    /// A selected package is not a device crate.
    #[error("`{0}` is not a device crate: add [package.metadata.gpurun] to its Cargo.toml or depend on the gpurun crate")]
    NotDeviceCrate(String),
    /// `-p` named a package that is not in the workspace.
    #[error("package `{0}` is not a member of the workspace")]
    NoSuchPackage(String),
    /// Nothing to build.
    #[error("no device crates in the workspace at {0} (a device crate has [package.metadata.gpurun] or depends on the gpurun crate)")]
    NoDeviceCrates(PathBuf),
    /// The toolchain is not ready.
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    /// cargo itself could not be run, or the build failed (its diagnostics are already printed).
    #[error("failed to build {what}: {detail}")]
    Cargo { what: String, detail: String },
    /// The user's cargo configuration could not be read (for their `build.rustflags`).
    #[error("cannot read the cargo configuration: {0}")]
    Config(String),
    /// ptxas rejected the PTX we made.
    #[error("ptxas failed on {ptx}: {stderr}")]
    Ptxas { ptx: PathBuf, stderr: String },
    /// An image failed the offline validation.
    #[error("invalid image {path}: {source}")]
    Invalid {
        path: PathBuf,
        source: validate::ValidateError,
    },
    /// A package's Cargo.toml could not be read for its `[[test]]` targets.
    #[error("cannot read the [[test]] targets of `{package}`: {detail}")]
    Manifest { package: String, detail: String },
    /// `coverage` with a GPU target: coverage is measured on the host emulation only.
    #[error("coverage is measured on the host emulation only, not on {0}: build for the host (`--target host`), or leave out --target")]
    CoverageOnGpu(Platform),
    /// Files under the target directory could not be read or written.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// Builds the lib and bins of the selected device crates for every requested target and returns
/// the images, validated. Cargo's own progress and diagnostics go to stderr; nothing is printed on
/// stdout.
pub fn build(opts: &BuildOptions) -> Result<Vec<BuiltImage>, BuildError> {
    build_with(opts, Mode::Build)
}

/// Like [`build`], for `cargo gpurun test`: also builds each device crate's tests/ targets that
/// have `harness = false`, and its examples (see [`targets`] for what each device target can
/// build). Every target left out is named in one `warning:` or `note:` line on stderr.
pub fn build_for_test(opts: &BuildOptions) -> Result<Vec<BuiltImage>, BuildError> {
    build_with(opts, Mode::Test)
}

/// The target directory of the workspace `opts` builds in, as cargo resolves it
/// (`CARGO_TARGET_DIR`, `build.target-dir`): where the images land, and where a library caller
/// may build what the build needs (`gpurun-test` builds [`NVPTX_LINKER_NAME`] there).
pub fn target_dir(opts: &BuildOptions) -> Result<PathBuf, BuildError> {
    crates::Workspace::load(opts).map(|workspace| workspace.target_dir)
}

/// Which targets of the device crates a build makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The lib and bins: cargo's default targets.
    Build,
    /// What `cargo test` would run: lib, bins, tests/ and examples.
    Test,
}

fn build_with(opts: &BuildOptions, mode: Mode) -> Result<Vec<BuiltImage>, BuildError> {
    let targets = requested_targets(opts)?;
    arch::check_cli_arches(&targets, &opts.arch)?;
    if opts.coverage {
        if let Some(&gpu) = targets.iter().find(|target| target.is_gpu()) {
            return Err(BuildError::CoverageOnGpu(gpu));
        }
    }
    // `cargo metadata` and the toolchain probe are independent processes: run them side by
    // side, since together they are most of a no-op build's overhead over cargo's own. A
    // coverage build takes the nightly too: its llvm-tools must read the profiles it writes.
    let needs_toolchain = opts.coverage || targets.iter().any(|target| target.is_gpu());
    // Our own coverage run builds where it reports; otherwise cargo-llvm-cov's may be around us.
    let llvm_cov = (!opts.coverage)
        .then(coverage::CargoLlvmCov::detect)
        .flatten();
    let mut host_checks = opts.emulation_checks && targets.contains(&Platform::Host);
    if host_checks && (opts.coverage || llvm_cov.is_some()) {
        // The checks' instrumentation calls hooks in the device runtime on every access, and
        // coverage's counters are accesses in those hooks too: the two do not run together.
        host_checks = false;
        let by = if opts.coverage {
            "--coverage"
        } else {
            "cargo llvm-cov"
        };
        eprintln!(
            "note: under {by} the host images are built without the emulation's memory checks \
             (their instrumentation and coverage's counters do not run together)"
        );
    }
    let (workspace, toolchain) = std::thread::scope(|scope| {
        let probe = scope.spawn(|| {
            if needs_toolchain {
                Some(crate::toolchain::Toolchain::ensure_for_build())
            } else if host_checks {
                // The host needs no component of it.
                Some(crate::toolchain::Toolchain::probe())
            } else {
                None
            }
        });
        let workspace = crates::Workspace::load(opts);
        let toolchain = probe
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (workspace, toolchain)
    });
    // Workspace errors (bad input) come first: they are the user's to fix before any toolchain.
    let workspace = workspace?;
    let selected = workspace.select(opts)?;
    let toolchain = match toolchain {
        Some(probed) if needs_toolchain => Some(probed?.ready_for_build()?),
        Some(Ok(probed)) => Some(probed),
        Some(Err(error)) => {
            eprintln!(
                "warning: the host emulation's memory checks need the nightly toolchain ({error}); \
                 building the host images without them"
            );
            None
        }
        None => None,
    };
    let mut selections = HashMap::new();
    if mode == Mode::Test {
        for package in &selected {
            let selection = test_selection(package, opts)?;
            for line in &selection.left_out {
                eprintln!("{line}");
            }
            selections.insert(package.name.clone(), selection);
        }
    }
    if mode == Mode::Build && targets.contains(&Platform::Host) {
        let profile = if opts.release { "release" } else { "dev" };
        if let Some(panic) = workspace
            .profile_panic(profile)
            .filter(|panic| panic != "unwind")
        {
            // The host image differs from what the profile asks for: say so where it is made.
            eprintln!(
                "note: host images are built with panic = \"unwind\", not the \"{panic}\" of \
                 profile `{profile}`: the host emulation ends a panicking device thread by \
                 unwinding to its kernel wrapper, as a GPU ends just that thread"
            );
        }
    }
    let mut images = Vec::new();
    for target in targets {
        let emulation_checks = target == Platform::Host && host_checks && toolchain.is_some();
        // A host build we instrument (the emulation's checks, coverage) names the host's
        // triple, so that our rustflags stay off build scripts and proc macros (which rustc
        // loads uninstrumented); otherwise cargo builds for its default, the host.
        let instrumented_host = target == Platform::Host && (emulation_checks || opts.coverage);
        let triple = match (target.triple(), &toolchain) {
            (Some(triple), _) => Some(triple),
            (None, Some(toolchain)) if instrumented_host => Some(toolchain.host.as_str()),
            (None, _) => None,
        };
        // Only without RUSTFLAGS: cargo takes those alone, and ours are appended to them.
        let user_build_flags = match (triple, &toolchain) {
            (Some(triple), Some(toolchain)) if !cargo::rustflags_from_env() => {
                rustflags::hidden_build_flags(toolchain, triple)?
            }
            _ => Vec::new(),
        };
        let detected = std::cell::OnceCell::new();
        // Packages that share an architecture build in one cargo invocation.
        let mut groups: Vec<(Option<String>, Vec<&crates::DeviceCrate>)> = Vec::new();
        for package in &selected {
            let arch = arch::resolve_arch(
                target,
                arch::cli_arch_for(target, &opts.arch)?,
                &package.name,
                package.gpurun_metadata.as_ref(),
                // Asking the driver costs time: once per target, and only when needed.
                &mut || {
                    detected
                        .get_or_init(|| {
                            opts.gpu_arch
                                .and_then(|probe| arch::detect_arch(target, probe))
                        })
                        .clone()
                },
            )?;
            match groups
                .iter_mut()
                .find(|(group_arch, _)| *group_arch == arch)
            {
                Some((_, members)) => members.push(package),
                None => groups.push((arch, vec![package])),
            }
        }
        for (arch, packages) in groups {
            let request = cargo::CargoBuild {
                opts,
                target,
                arch: arch.as_deref(),
                packages: &packages,
                workspace: &workspace,
                toolchain: toolchain.as_ref(),
                user_build_flags: &user_build_flags,
                selection: cargo::Selection::Default,
                emulation_checks,
                triple,
                llvm_cov: llvm_cov.as_ref(),
            };
            let built = match mode {
                Mode::Build if target == Platform::Host => build_group_for_host(&request)?,
                Mode::Build => request.run()?,
                Mode::Test => build_group_for_test(&request, &selections)?,
            };
            for package in &packages {
                if !built.iter().any(|image| image.package == package.name) {
                    // Cargo succeeded but made nothing loadable: usually a missing crate-type.
                    eprintln!(
                        "warning: `{}` produced no {target} image (a device crate needs crate-type = [\"cdylib\"] or a [[bin]])",
                        package.name
                    );
                }
            }
            images.extend(built);
        }
    }
    Ok(images)
}

/// What `cargo gpurun test` builds of `package` (before the device target has its say).
fn test_selection(
    package: &crates::DeviceCrate,
    opts: &BuildOptions,
) -> Result<targets::TestSelection, BuildError> {
    let manifest_error = |detail: String| BuildError::Manifest {
        package: package.name.clone(),
        detail,
    };
    // Only a package with a lib or test targets needs its manifest read for their `harness`.
    let harness_false = if package
        .targets
        .iter()
        .any(|target| matches!(target.kind, TargetKind::Lib | TargetKind::Test))
    {
        let text = std::fs::read_to_string(&package.manifest_path)
            .map_err(|err| manifest_error(format!("{}: {err}", package.manifest_path.display())))?;
        targets::harness_false_targets(&text).map_err(manifest_error)?
    } else {
        Default::default()
    };
    let features = targets::EnabledFeatures::resolve(
        &package.name,
        &package.features,
        &opts.features,
        opts.all_features,
        opts.no_default_features,
    );
    Ok(targets::select_for_test(
        &package.name,
        &package.targets,
        &harness_false,
        |required| features.missing(required),
    ))
}

/// Builds one (target, architecture) group for `cargo gpurun test`: the plain libs and every
/// target the device target builds together in one cargo run (one per package when a target name
/// appears in several packages, since cargo's `--test NAME` selects it in all of them, or when
/// only some packages want their plain lib, since `--lib` applies to all), then each lib built in
/// test mode and each host executable target on its own.
fn build_group_for_test(
    group: &cargo::CargoBuild<'_>,
    selections: &HashMap<String, targets::TestSelection>,
) -> Result<Vec<BuiltImage>, BuildError> {
    let mut plans = Vec::new();
    for package in group.packages {
        let Some(selection) = selections.get(&package.name) else {
            continue;
        };
        let plan = selection.plan_for(group.target, &package.name);
        for line in &plan.left_out {
            eprintln!("{line}");
        }
        let plain_lib = plan.lib == targets::LibSuite::Plain;
        plans.push((*package, plain_lib, plan));
    }
    // Whether every package with a lib wants its plain build (or none does).
    let has_lib = |package: &crates::DeviceCrate| {
        package
            .targets
            .iter()
            .any(|target| target.kind == TargetKind::Lib)
    };
    let mut wanted = plans
        .iter()
        .filter(|(package, _, _)| has_lib(package))
        .map(|(_, plain_lib, _)| *plain_lib);
    let libs_agree = wanted
        .next()
        .is_none_or(|first| wanted.all(|plain_lib| plain_lib == first));
    let names_are_unique = plans.iter().all(|(package, _, plan)| {
        plan.together.iter().all(|selected| {
            group.packages.iter().all(|other| {
                other.name == package.name
                    || !other
                        .targets
                        .iter()
                        .any(|target| target.kind == selected.kind && target.name == selected.name)
            })
        })
    });
    let mut runs: Vec<(Vec<&crates::DeviceCrate>, bool, Vec<targets::Selected>)> = Vec::new();
    if names_are_unique && libs_agree {
        runs.push((
            plans.iter().map(|(package, _, _)| *package).collect(),
            plans.iter().any(|(_, lib, _)| *lib),
            plans
                .iter()
                .flat_map(|(_, _, plan)| plan.together.iter().cloned())
                .collect(),
        ));
    } else {
        for (package, lib, plan) in &plans {
            runs.push((vec![*package], *lib, plan.together.clone()));
        }
    }
    let mut images = Vec::new();
    for (packages, lib, together) in &runs {
        if !*lib && together.is_empty() {
            continue;
        }
        let request = cargo::CargoBuild {
            packages,
            selection: cargo::Selection::Only {
                lib: *lib,
                targets: together,
            },
            ..*group
        };
        images.extend(request.run()?);
    }
    for (package, _, plan) in &plans {
        if plan.lib == targets::LibSuite::UnitTests {
            let request = cargo::CargoBuild {
                packages: std::slice::from_ref(package),
                selection: cargo::Selection::LibUnitTests,
                ..*group
            };
            images.extend(request.run()?);
        }
        for selected in &plan.one_by_one {
            let request = cargo::CargoBuild {
                packages: std::slice::from_ref(package),
                selection: cargo::Selection::SharedObject(selected),
                ..*group
            };
            images.extend(request.run()?);
        }
    }
    Ok(images)
}

/// Builds one group for the host with `cargo gpurun build`: the libs in one cargo run, then
/// each bin on its own, linked as a shared object (as `cargo gpurun test` links executables for
/// the host, see [`targets`]): a device program is no host executable, and the emulation loads
/// shared objects only. Bins whose `required-features` are not enabled are left out, as cargo
/// leaves them out of a build.
fn build_group_for_host(group: &cargo::CargoBuild<'_>) -> Result<Vec<BuiltImage>, BuildError> {
    let has = |package: &crates::DeviceCrate, kind: TargetKind| {
        package.targets.iter().any(|target| target.kind == kind)
    };
    let with_lib: Vec<&crates::DeviceCrate> = group
        .packages
        .iter()
        .copied()
        .filter(|package| has(package, TargetKind::Lib))
        .collect();
    let mut images = Vec::new();
    if !with_lib.is_empty() {
        let request = cargo::CargoBuild {
            packages: &with_lib,
            selection: cargo::Selection::Only {
                lib: true,
                targets: &[],
            },
            ..*group
        };
        images.extend(request.run()?);
    }
    for package in group.packages {
        let features = targets::EnabledFeatures::resolve(
            &package.name,
            &package.features,
            &group.opts.features,
            group.opts.all_features,
            group.opts.no_default_features,
        );
        for bin in package.targets.iter().filter(|target| {
            target.kind == TargetKind::Bin && features.missing(&target.required_features).is_empty()
        }) {
            let selected = targets::Selected {
                kind: TargetKind::Bin,
                name: bin.name.clone(),
                executable: true,
            };
            let request = cargo::CargoBuild {
                packages: std::slice::from_ref(package),
                selection: cargo::Selection::SharedObject(&selected),
                ..*group
            };
            images.extend(request.run()?);
        }
    }
    Ok(images)
}

/// The `--target` values, parsed; nvptx when none is given.
fn requested_targets(opts: &BuildOptions) -> Result<Vec<Platform>, BuildError> {
    if opts.targets.is_empty() {
        return Ok(vec![Platform::Nvptx]);
    }
    let mut targets = Vec::new();
    for name in &opts.targets {
        let target = arch::parse_target(name)?;
        if !targets.contains(&target) {
            targets.push(target);
        }
    }
    Ok(targets)
}
