//! Device-crate builds: find the device crates of a workspace (`cargo metadata`), build each for
//! its GPU target on the nightly toolchain with `-Zbuild-std=core,alloc` (or for the host), and
//! return where every image landed, checked offline ([`validate`]).
//!
//! The entry point is [`build`]; `cargo gpurun build` prints its result, `cargo gpurun test`
//! builds and then runs the images. nvptx images are linked by our own bitcode linker
//! ([`nvptx_link`]), which cargo reaches through `-Clinker`.

pub mod arch;
mod cargo;
mod crates;
pub mod nvptx_link;
pub mod validate;

use std::path::PathBuf;

pub use arch::DeviceTarget;

use crate::toolchain::ToolchainError;

/// What to build: the cargo-style options `build`, `test` and `run` share (flatten it into a
/// subcommand's clap struct).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BuildOptions {
    /// Path to Cargo.toml of the device crate or workspace.
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
    /// Device crate(s) to build (default: the current package, or every device crate of a
    /// virtual workspace).
    #[arg(short = 'p', long = "package", value_name = "SPEC")]
    pub packages: Vec<String>,
    /// Build every device crate of the workspace.
    #[arg(long)]
    pub workspace: bool,
    /// Build with the release profile.
    #[arg(short = 'r', long)]
    pub release: bool,
    /// Features to activate (comma or space separated, repeatable).
    #[arg(short = 'F', long, value_name = "FEATURES")]
    pub features: Vec<String>,
    /// Activate all features.
    #[arg(long)]
    pub all_features: bool,
    /// Do not activate the `default` feature.
    #[arg(long)]
    pub no_default_features: bool,
    /// Target: nvptx64-nvidia-cuda (nvptx), amdgcn-amd-amdhsa (amdgcn) or host; repeatable
    /// [default: nvptx].
    #[arg(long = "target", value_name = "TARGET")]
    pub targets: Vec<String>,
    /// GPU architecture: sm_NN for nvptx, gfxNNN for amdgcn (repeatable, one per target family);
    /// default: `[package.metadata.gpurun]` `nvptx-arch`/`amdgcn-arch`/`arch`, else sm_70 for nvptx.
    #[arg(long, value_name = "ARCH")]
    pub arch: Vec<String>,
    /// Output format for the built images.
    #[arg(long, value_enum, default_value_t = MessageFormat::Human, value_name = "FMT")]
    pub message_format: MessageFormat,
    /// Do not print cargo's progress.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// How `cargo gpurun build` reports what it built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MessageFormat {
    /// One line per image.
    #[default]
    Human,
    /// One JSON object per image on stdout (`"reason": "gpurun-image"`).
    Json,
}

/// What kind of cargo target an image came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
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
    /// What it was built for.
    pub target: DeviceTarget,
    /// The GPU architecture (`sm_70`, `gfx90a`); `None` for the host.
    pub arch: Option<String>,
    /// The image: `.ptx` (nvptx), `.elf` code object (amdgcn), `.so` (host).
    pub path: PathBuf,
    /// The cubin assembled from the PTX, when ptxas was found.
    pub cubin: Option<PathBuf>,
    /// Which kind of cargo target produced it.
    pub kind: ImageKind,
    /// Kernels found in the image by the offline validation (empty for host images).
    pub kernels: Vec<String>,
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
        target: DeviceTarget,
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
    #[error("`{0}` is not a device crate: add [package.metadata.gpurun] to its Cargo.toml or depend on gpurun-device")]
    NotDeviceCrate(String),
    /// `-p` named a package that is not in the workspace.
    #[error("package `{0}` is not a member of the workspace")]
    NoSuchPackage(String),
    /// Nothing to build.
    #[error("no device crates in the workspace at {0} (a device crate has [package.metadata.gpurun] or depends on gpurun-device)")]
    NoDeviceCrates(PathBuf),
    /// The toolchain is not ready.
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    /// cargo itself could not be run, or the build failed (its diagnostics are already printed).
    #[error("failed to build {what}: {detail}")]
    Cargo { what: String, detail: String },
    /// ptxas rejected the PTX we made.
    #[error("ptxas failed on {ptx}: {stderr}")]
    Ptxas { ptx: PathBuf, stderr: String },
    /// An image failed the offline validation.
    #[error("invalid image {path}: {source}")]
    Invalid {
        path: PathBuf,
        source: validate::ValidateError,
    },
    /// Files under the target directory could not be read or written.
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// Builds the selected device crates for every requested target and returns the images,
/// validated. Cargo's own progress and diagnostics go to stderr; nothing is printed on stdout.
pub fn build(opts: &BuildOptions) -> Result<Vec<BuiltImage>, BuildError> {
    let targets = requested_targets(opts)?;
    arch::check_cli_arches(&targets, &opts.arch)?;
    // `cargo metadata` and the toolchain probe are independent processes: run them side by
    // side, since together they are most of a no-op build's overhead over cargo's own.
    let needs_toolchain = targets.iter().any(|target| target.is_gpu());
    let (workspace, toolchain) = std::thread::scope(|scope| {
        let probe =
            scope.spawn(|| needs_toolchain.then(crate::toolchain::Toolchain::ensure_for_build));
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
        Some(probed) => Some(probed?.ready_for_build()?),
        None => None,
    };
    let mut images = Vec::new();
    for target in targets {
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
                &mut || detected.get_or_init(|| arch::detect_arch(target)).clone(),
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
            };
            let built = request.run()?;
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

/// The `--target` values, parsed; nvptx when none is given.
fn requested_targets(opts: &BuildOptions) -> Result<Vec<DeviceTarget>, BuildError> {
    if opts.targets.is_empty() {
        return Ok(vec![DeviceTarget::Nvptx]);
    }
    let mut targets = Vec::new();
    for name in &opts.targets {
        let target = DeviceTarget::parse(name)?;
        if !targets.contains(&target) {
            targets.push(target);
        }
    }
    Ok(targets)
}
