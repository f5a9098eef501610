//! Running cargo for one (target, architecture) group of device crates and turning its artifact
//! messages into validated images.
//!
//! Cargo is run directly rather than through escargot: GPU builds need the rustup toolchain
//! selector (`cargo +nightly`) before the subcommand and `-Z` flags, which escargot cannot put there.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cargo_metadata::{Artifact, Message};

use super::crates::{DeviceCrate, Workspace};
use super::targets::{is_lib_kind, Selected};
use super::{amdgcn, validate, BuildError, BuildOptions, BuiltImage, Platform, TargetKind};
use crate::toolchain::{self, Toolchain};

/// File name of the link (inside `<target dir>/gpurun/`) that rustc runs as the nvptx linker. A
/// fixed path keeps the rustflags, and so cargo's fingerprints, the same whichever copy of
/// `cargo-gpurun` runs the build; the name tells `main` to act as the linker.
pub const NVPTX_LINKER_NAME: &str = "gpurun-nvptx-link";

/// Version script for host executables linked as shared objects: without one, a shared object
/// exports every global symbol, Rust's own included (thousands, against a cdylib's handful).
/// Mangled Rust symbols (legacy `_ZN`, v0 `_R`), `rust_eh_personality` and `__rustc*` stay local;
/// the unmangled symbols of the device runtime and the test and kernel functions stay exported.
const HOST_EXPORTS: &str =
    "{\n  local:\n    _ZN*;\n    _R*;\n    rust_eh_personality;\n    __rustc*;\n};\n";

/// File name (inside `<target dir>/gpurun/`) of [`HOST_EXPORTS`]. Cargo does not track its
/// contents, so a change to them needs a new name to relink.
const HOST_EXPORTS_NAME: &str = "host-exports-v1.ver";

/// File name of cargo in a toolchain's `bin` directory.
const CARGO_EXE: &str = if cfg!(windows) { "cargo.exe" } else { "cargo" };

/// Which targets one cargo invocation builds.
#[derive(Debug, Clone, Copy)]
pub enum Selection<'a> {
    /// Cargo's default: the lib and the bins (`cargo gpurun build`).
    Default,
    /// The lib (when `lib`) and these targets, each named (`cargo gpurun test`).
    Only { lib: bool, targets: &'a [Selected] },
    /// One executable target of one package, linked as a shared object that the host backend
    /// can `dlopen`: `cargo rustc --test NAME -- -C link-arg=-shared ...`. The objects are those
    /// of the executable; the link argument comes after rustc's own `-pie`, so it wins, and the
    /// startup files that need a `main` are left out. A version script ([`HOST_EXPORTS`]) then
    /// exports what rustc's own for a cdylib would: the unmangled symbols.
    SharedObject(&'a Selected),
    /// The lib of one package in test mode (`[lib] harness = false`): `cargo rustc --lib
    /// --profile test`, the build `cargo test` makes of it (`cfg(test)` on, an executable
    /// without libtest). `--profile bench` with `--release`, which `cargo rustc` does not take
    /// together with `--profile`: bench inherits release, and also builds in test mode. On the
    /// host it is linked as a shared object, as in [`Selection::SharedObject`].
    LibUnitTests,
}

/// One cargo invocation.
pub struct CargoBuild<'a> {
    pub opts: &'a BuildOptions,
    pub target: Platform,
    pub arch: Option<&'a str>,
    pub packages: &'a [&'a DeviceCrate],
    pub workspace: &'a Workspace,
    /// The nightly toolchain (GPU targets, and the host with `emulation_checks`).
    pub toolchain: Option<&'a Toolchain>,
    /// The user's `build.rustflags` that our target rustflags would hide (see [`super::rustflags`]).
    pub user_build_flags: &'a [String],
    /// The targets to build.
    pub selection: Selection<'a>,
    /// Host target: build for the emulation's memory checks, with the nightly toolchain (see
    /// [`HOST_CHECKS_RUSTFLAGS`]).
    pub emulation_checks: bool,
    /// The triple cargo builds for: a GPU target's, or the host's for a host build we
    /// instrument (checks, coverage); `None`: cargo's default, the host.
    pub triple: Option<&'a str>,
    /// cargo-llvm-cov around this process, when it runs it (not with our own `coverage`).
    pub llvm_cov: Option<&'a crate::coverage::CargoLlvmCov>,
}

/// What makes a host image one the emulation checks the memory accesses of: ThreadSanitizer's
/// instrumentation (the device runtime implements its hooks, see `gpurun`'s `arch/checks.rs`),
/// which the precompiled standard library lacks (hence the allowed mismatch), without
/// ThreadSanitizer's own runtime (rustc links it into executables, whose hooks would clash with
/// ours: tests/ targets and examples are executables linked as shared objects), frame pointers
/// for the reports' walk to the kernel's line, and the cfg that turns the hooks on.
pub const HOST_CHECKS_RUSTFLAGS: [&str; 6] = [
    "-Zsanitizer=thread",
    "-Cunsafe-allow-abi-mismatch=sanitizer",
    "-Zexternal-clangrt",
    "-Cforce-frame-pointers=yes",
    "--cfg",
    "gpurun_emulation_checks",
];

impl CargoBuild<'_> {
    /// Runs cargo, then validates each image (and assembles cubins for nvptx).
    pub fn run(&self) -> Result<Vec<BuiltImage>, BuildError> {
        let mut command = self.command()?;
        let what = self.describe();
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|err| BuildError::Cargo {
                what: what.clone(),
                detail: format!("cannot run cargo: {err}"),
            })?;
        let mut artifacts = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            for message in Message::parse_stream(BufReader::new(stdout)) {
                match message {
                    Ok(Message::CompilerArtifact(artifact)) => artifacts.push(artifact),
                    // Anything else cargo prints on stdout (a build script's output with
                    // `cargo:warning`, or non-JSON text) is not ours to interpret.
                    Ok(_) => {}
                    Err(err) => {
                        return Err(BuildError::Cargo {
                            what,
                            detail: format!("cannot read cargo's output: {err}"),
                        })
                    }
                }
            }
        }
        let status = child.wait().map_err(|err| BuildError::Cargo {
            what: what.clone(),
            detail: format!("cannot wait for cargo: {err}"),
        })?;
        if !status.success() {
            return Err(BuildError::Cargo {
                what,
                detail: format!(
                    "cargo failed ({status}); its errors are above{}",
                    self.failure_hint()
                ),
            });
        }
        let mut found = Vec::new();
        for artifact in &artifacts {
            let Some(package) = self.package_of(artifact) else {
                continue;
            };
            if !self.selected(artifact) {
                continue;
            }
            for (path, kind) in self.images_of(artifact) {
                found.push((package, artifact, path, kind));
            }
        }
        // Finishing an image checks it and, for nvptx, runs ptxas on it: independent work per
        // image, and ptxas uses one core (26 debug fixtures took 15 s one after another).
        map_on_all_cores(&found, |(package, artifact, path, kind)| {
            self.finish_image(package, artifact, path.clone(), *kind)
        })
        .into_iter()
        .collect()
    }

    /// Whether an artifact of a selected package is an image this run was asked for, rather than
    /// a lib cargo built because another target depends on it (a lib with crate types `cdylib`
    /// and `rlib` is built for its tests/ targets and examples).
    fn selected(&self, artifact: &Artifact) -> bool {
        let is_lib = artifact.target.kind.iter().any(is_lib_kind);
        match self.selection {
            Selection::Default | Selection::Only { lib: true, .. } => true,
            Selection::Only { lib: false, .. } | Selection::SharedObject(_) => !is_lib,
            Selection::LibUnitTests => is_lib && artifact.profile.test,
        }
    }

    fn describe(&self) -> String {
        let names: Vec<&str> = self.packages.iter().map(|p| p.name.as_str()).collect();
        let mut what = names.join(", ");
        match self.selection {
            Selection::SharedObject(selected) => {
                what = format!("{what} {} {}", selected.cargo_flag(), selected.name);
            }
            Selection::LibUnitTests => what = format!("the unit tests of {what}'s lib"),
            Selection::Default | Selection::Only { .. } => {}
        }
        match self.arch {
            Some(arch) => format!("{what} for {} {arch}", self.target),
            None => format!("{what} for {}", self.target),
        }
    }

    /// Why a host tests/ target may fail to link where the lib did not: cargo also builds every
    /// bin of the package for it (for `CARGO_BIN_EXE_*`), as ordinary executables, and a device
    /// program (`#[gpurun::main]`) is none on the host (its `_start` kernel is the C runtime's
    /// entry point there).
    fn failure_hint(&self) -> &'static str {
        let Selection::SharedObject(selected) = self.selection else {
            return "";
        };
        let has_bins = self.packages.iter().any(|package| {
            package
                .targets
                .iter()
                .any(|target| target.kind == TargetKind::Bin)
        });
        if selected.kind == TargetKind::Test && has_bins {
            " (cargo links the package's bins for a tests/ target, as host executables, which \
             a device program's bin cannot be)"
        } else {
            ""
        }
    }

    /// `build`, or `rustc` to pass the link argument of [`Selection::SharedObject`].
    fn subcommand(&self) -> &'static str {
        match self.selection {
            Selection::SharedObject(_) | Selection::LibUnitTests => "rustc",
            Selection::Default | Selection::Only { .. } => "build",
        }
    }

    fn profile(&self) -> &'static str {
        if self.opts.release {
            "release"
        } else {
            "dev"
        }
    }

    fn command(&self) -> Result<Command, BuildError> {
        let mut command;
        if let (Platform::Host, Some(toolchain), Some(triple)) =
            (self.target, self.toolchain, self.triple)
        {
            command = toolchain_cargo(toolchain);
            command.arg(self.subcommand()).args(["--target", triple]);
            if std::env::var_os("CARGO_UNSTABLE_BUILD_STD").is_some()
                || super::rustflags::config_files_may_set(&["unstable", "build-std"])
            {
                // A crate set up for plain cargo on nvptx asks for `core` and `alloc` from source
                // in `[unstable]`, which the nightly applies to every target: on the host `std`
                // must then come from source too (its precompiled copy has another `core`).
                // Cargo appends to the list; it cannot be emptied.
                command.args(["--config", "unstable.build-std=[\"std\", \"panic_unwind\"]"]);
            }
            for var in ["RUSTC", "RUSTDOC", "CARGO"] {
                command.env_remove(var);
            }
            if self.opts.coverage {
                // The profiles must be read by this toolchain's llvm-tools; the coverage build
                // goes into a target directory of its own, so that it and a plain one do not
                // rebuild over each other.
                command.env(
                    "CARGO_TARGET_DIR",
                    crate::coverage::target_dir(&self.workspace.target_dir),
                );
            }
        } else if let (Some(triple), Some(toolchain)) = (self.target.triple(), self.toolchain) {
            command = toolchain_cargo(toolchain);
            command
                .arg(self.subcommand())
                .arg("-Zbuild-std=core,alloc")
                .args(["--target", triple]);
            if self.target == Platform::Amdgcn {
                // ROCr resolves undefined symbols of a code object only among agent symbols:
                // `memcmp`/`strlen` must be defined in the image (compiler_builtins' `mem`).
                command.arg(format!(
                    "-Zbuild-std-features={}",
                    validate::AMDGCN_BUILD_STD_FEATURES
                ));
            }
            for var in ["RUSTC", "RUSTDOC", "CARGO"] {
                command.env_remove(var);
            }
            command.env(toolchain::LLVM_TOOLS_DIR_ENV, toolchain.llvm_tools_dir());
        } else {
            command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
            command.arg(self.subcommand());
        }
        if let Some(llvm_cov) = self.llvm_cov {
            llvm_cov.apply(&mut command, self.target);
        }
        command
            .arg("--manifest-path")
            .arg(&self.workspace.manifest_path);
        for package in self.packages {
            command.args(["-p", &package.name]);
        }
        match self.selection {
            Selection::Default => {}
            Selection::Only { lib, targets } => {
                if lib {
                    command.arg("--lib");
                }
                for selected in targets {
                    command.args([selected.cargo_flag(), &selected.name]);
                }
            }
            Selection::SharedObject(selected) => {
                command.args([selected.cargo_flag(), &selected.name]);
            }
            Selection::LibUnitTests => {
                let profile = if self.opts.release { "bench" } else { "test" };
                command.args(["--lib", "--profile", profile]);
            }
        }
        if self.opts.release && !matches!(self.selection, Selection::LibUnitTests) {
            command.arg("--release");
        }
        for features in &self.opts.features {
            command.args(["--features", features]);
        }
        if self.opts.all_features {
            command.arg("--all-features");
        }
        if self.opts.no_default_features {
            command.arg("--no-default-features");
        }
        if self.opts.quiet {
            command.arg("--quiet");
        }
        command.arg("--message-format=json-render-diagnostics");
        if self.target == Platform::Amdgcn {
            // The target requires LTO. Incremental compilation together with LTO makes this
            // nightly's rustc panic ("cannot find embedded bitcode"), so it is off here.
            let profile = self.profile();
            command.args(["--config", &format!("profile.{profile}.lto=true")]);
            command.args(["--config", &format!("profile.{profile}.incremental=false")]);
            for setting in self
                .arch
                .map(|arch| amdgcn::arch_profile_config(arch, profile))
                .unwrap_or_default()
            {
                command.args(["--config", &setting]);
            }
        }
        // The profile's panic strategy is always `unwind`. The host emulation ends a panicking
        // device thread by unwinding to its kernel wrapper; device crates often set
        // `panic = "abort"` for the GPU, which would kill the whole emulated device instead. On
        // a GPU target `unwind` makes cargo pass no `-C panic`, so every crate gets the target's
        // own strategy, abort: the same code as with `abort`, but the plain and the test-mode
        // builds (whose units cargo builds with `unwind` anyway) then share `core` and every
        // dependency instead of building them twice, and a lib's test-mode build with `abort`
        // in the profile would make -Zbuild-std build `core` twice and fail with "duplicate
        // lang item" (rust-lang/cargo#7359).
        let profile = self.profile();
        command.args(["--config", &format!("profile.{profile}.panic=\"unwind\"")]);
        self.add_rustflags(&mut command)?;
        let shared_object = match self.selection {
            Selection::SharedObject(_) => true,
            Selection::LibUnitTests => self.target == Platform::Host,
            Selection::Default | Selection::Only { .. } => false,
        };
        if shared_object {
            // For this target's final link only (dependencies are not linked). `-Xlinker` keeps
            // a comma in the path whole, where `-Wl,` would split it.
            let exports = install_host_exports(&self.workspace.target_dir)?;
            // LTO would compile the thread-locals of std and the device runtime into this
            // executable's own code, with local-exec TLS, which a shared object cannot hold;
            // without it they stay in their libraries, compiled position-independent.
            let profile = self.profile();
            command.args(["--config", &format!("profile.{profile}.lto=false")]);
            command.args(["--", "-C", "link-arg=-shared", "-C", "link-arg=-Xlinker"]);
            command.arg("-C").arg({
                let mut arg = std::ffi::OsString::from("link-arg=--version-script=");
                arg.push(&exports);
                arg
            });
        }
        Ok(command)
    }

    /// Adds our rustflags without silently replacing the user's: cargo ignores
    /// `target.<triple>.rustflags` when `RUSTFLAGS`/`CARGO_ENCODED_RUSTFLAGS` is set, so then we
    /// append to those instead.
    fn add_rustflags(&self, command: &mut Command) -> Result<(), BuildError> {
        let Some(triple) = self.triple else {
            return Ok(());
        };
        let mut flags = Vec::new();
        if self.emulation_checks {
            flags.extend(HOST_CHECKS_RUSTFLAGS.iter().map(|flag| flag.to_string()));
        }
        if self.opts.coverage {
            flags.push(crate::coverage::RUSTFLAG.to_owned());
        }
        if let Some(arch) = self.arch {
            flags.push(format!("-Ctarget-cpu={arch}"));
        }
        if self.target == Platform::Nvptx {
            let linker = install_linker_link(
                &self.workspace.target_dir,
                self.opts.nvptx_linker.as_deref(),
            )?;
            flags.push(format!("-Clinker={}", linker.display()));
        }
        if self.target == Platform::Amdgcn {
            flags.extend(
                validate::AMDGCN_RUSTFLAGS
                    .iter()
                    .map(|flag| flag.to_string()),
            );
            flags.extend(self.arch.map(amdgcn::arch_rustflags).unwrap_or_default());
        }
        if let Some(mut all) = env_rustflag_list() {
            if self.target.is_gpu() && self.llvm_cov.is_some() {
                all = crate::coverage::without_instrumentation(all);
            }
            all.extend(flags);
            command.env_remove("RUSTFLAGS");
            command.env("CARGO_ENCODED_RUSTFLAGS", all.join("\x1f"));
        } else {
            let list: Vec<String> = self
                .user_build_flags
                .iter()
                .chain(&flags)
                .map(|flag| serde_json::Value::String(flag.clone()).to_string())
                .collect();
            command.args([
                "--config",
                &format!("target.{triple}.rustflags=[{}]", list.join(",")),
            ]);
        }
        Ok(())
    }

    fn package_of(&self, artifact: &Artifact) -> Option<&DeviceCrate> {
        self.packages
            .iter()
            .copied()
            .find(|package| package.manifest_path == artifact.manifest_path.as_std_path())
    }

    /// The image files of an artifact, with their kind.
    fn images_of(&self, artifact: &Artifact) -> Vec<(PathBuf, TargetKind)> {
        let kinds: Vec<String> = artifact
            .target
            .kind
            .iter()
            .map(|kind| kind.to_string())
            .collect();
        let kind = if kinds.iter().any(|kind| kind == "bin") {
            TargetKind::Bin
        } else if kinds.iter().any(|kind| kind == "test") {
            TargetKind::Test
        } else if kinds.iter().any(|kind| kind == "example") {
            TargetKind::Example
        } else {
            TargetKind::Lib
        };
        let has_extension = |extension: &str| {
            artifact
                .filenames
                .iter()
                .any(|path| path.extension() == Some(extension))
        };
        let wanted_extension = match self.target {
            Platform::Nvptx => Some("ptx"),
            Platform::Amdgcn => Some("elf"),
            // A cdylib (lib, or example declared so); else an executable, which is a shared
            // object when built as [`Selection::SharedObject`].
            Platform::Host if has_extension(std::env::consts::DLL_EXTENSION) => {
                Some(std::env::consts::DLL_EXTENSION)
            }
            Platform::Host => None,
        };
        match wanted_extension {
            Some(extension) => artifact
                .filenames
                .iter()
                .filter(|path| path.extension() == Some(extension))
                .map(|path| (path.clone().into_std_path_buf(), kind))
                .collect(),
            None => artifact
                .executable
                .iter()
                .map(|path| (path.clone().into_std_path_buf(), kind))
                .collect(),
        }
    }

    fn finish_image(
        &self,
        package: &DeviceCrate,
        artifact: &Artifact,
        path: PathBuf,
        kind: TargetKind,
    ) -> Result<BuiltImage, BuildError> {
        let invalid = |source| BuildError::Invalid {
            path: path.clone(),
            source,
        };
        let mut cubin = None;
        let kernels = match self.target {
            Platform::Nvptx => {
                let text = read(&path)?;
                let summary = validate::check_ptx(&text).map_err(invalid)?;
                if let Some(arch) = self.arch {
                    cubin = assemble_cubin(&path, arch, self.opts.release)?;
                }
                summary.entries
            }
            Platform::Amdgcn => {
                let bytes = std::fs::read(&path).map_err(|source| BuildError::Io {
                    context: format!("cannot read {}", path.display()),
                    source,
                })?;
                validate::check_amdgpu_code_object(&bytes)
                    .map_err(invalid)?
                    .kernels
            }
            Platform::Host => Vec::new(),
        };
        let package_root = package
            .manifest_path
            .parent()
            .unwrap_or(&package.manifest_path);
        let source = artifact.target.src_path.as_std_path();
        Ok(BuiltImage {
            package: package.name.clone(),
            name: artifact.target.name.clone(),
            source: source
                .strip_prefix(package_root)
                .unwrap_or(source)
                .to_owned(),
            package_root: package_root.to_owned(),
            target: self.target,
            arch: self.arch.map(str::to_owned),
            path,
            cubin,
            kind,
            kernels,
            gpurun_metadata: package.gpurun_metadata.clone(),
        })
    }
}

/// `work` applied to every item on as many threads as there are cores (at most one per item),
/// the results in the items' order.
fn map_on_all_cores<T: Sync, R: Send>(items: &[T], work: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, PoisonError};
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(work).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(index) else {
                    break;
                };
                let result = work(item);
                *results[index]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(result);
            });
        }
    });
    results
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .expect("every item was worked on: a panic would have ended the scope")
        })
        .collect()
}

/// `CARGO_ENCODED_RUSTFLAGS` and `RUSTFLAGS`, when set to something.
fn env_rustflags() -> (Option<String>, Option<String>) {
    let encoded = std::env::var("CARGO_ENCODED_RUSTFLAGS")
        .ok()
        .filter(|flags| !flags.is_empty());
    let plain = std::env::var("RUSTFLAGS")
        .ok()
        .filter(|flags| !flags.trim().is_empty());
    (encoded, plain)
}

/// The rustflags the environment gives cargo, one flag an entry (`CARGO_ENCODED_RUSTFLAGS`
/// before `RUSTFLAGS`, as cargo reads them), or `None` when it gives none.
fn env_rustflag_list() -> Option<Vec<String>> {
    match env_rustflags() {
        (Some(encoded), _) => Some(encoded.split('\x1f').map(str::to_owned).collect()),
        (None, Some(plain)) => Some(plain.split_whitespace().map(str::to_owned).collect()),
        (None, None) => None,
    }
}

/// Whether cargo takes its rustflags from the environment (and so ignores every config file's).
pub(super) fn rustflags_from_env() -> bool {
    let (encoded, plain) = env_rustflags();
    encoded.is_some() || plain.is_some()
}

/// The toolchain's cargo, with the environment the rustup proxy would give it.
pub(super) fn toolchain_cargo(toolchain: &Toolchain) -> Command {
    let mut command;
    // The toolchain's own cargo, started directly: going through the rustup proxy
    // (`cargo +nightly`) costs a noticeable part of a no-op build. RUSTUP_TOOLCHAIN makes
    // the `rustc` cargo runs the same toolchain's; drop what an outer cargo set.
    let cargo = toolchain.sysroot.join("bin").join(CARGO_EXE);
    if cargo.is_file() {
        command = Command::new(cargo);
    } else {
        command = Command::new("cargo");
        command.arg(format!("+{}", toolchain.name));
    }
    // The full toolchain name (the sysroot's directory name), as the rustup proxy would
    // set it: cargo's cache of rustc's answers is keyed by it, so a differing value
    // would make this build and a plain `cargo +nightly build` evict each other's.
    let full_name = toolchain
        .sysroot
        .file_name()
        .map_or_else(|| toolchain.name.clone().into(), ToOwned::to_owned);
    command.env("RUSTUP_TOOLCHAIN", full_name);
    // ... and so is RUSTUP_HOME, which the proxy sets too: the sysroot's grandparent.
    if let Some(rustup_home) = toolchain
        .sysroot
        .parent()
        .filter(|dir| dir.file_name().is_some_and(|name| name == "toolchains"))
        .and_then(Path::parent)
    {
        command.env("RUSTUP_HOME", rustup_home);
    }
    command
}

fn read(path: &Path) -> Result<String, BuildError> {
    std::fs::read_to_string(path).map_err(|source| BuildError::Io {
        context: format!("cannot read {}", path.display()),
        source,
    })
}

/// `<ptx stem>.cubin` next to the PTX, assembled by ptxas unless it is already newer than the PTX:
/// fully optimized for a release build, compiled fast for a debug one where ptxas can (see
/// [`validate::PtxasOptimization`]). Returns `None` (no cubin) when ptxas is not installed.
fn assemble_cubin(ptx: &Path, arch: &str, release: bool) -> Result<Option<PathBuf>, BuildError> {
    let cubin = ptx.with_extension("cubin");
    if is_newer(&cubin, ptx) {
        return Ok(Some(cubin));
    }
    let Some(ptxas) = toolchain::find_ptxas() else {
        // A stale cubin from an earlier build must not be mistaken for this PTX's.
        let _ = std::fs::remove_file(&cubin);
        return Ok(None);
    };
    // A ptxas crash fails the build too: the driver's JIT is the same compiler generation, so
    // it would likely crash the process that loads the PTX (docs/abi.md, "ptxas").
    let optimization = if release || !validate::ptxas_has_fast_compile(&ptxas) {
        validate::PtxasOptimization::Full
    } else {
        validate::PtxasOptimization::FastCompile
    };
    match validate::assemble_ptx_as(&ptxas, ptx, arch, &cubin, optimization) {
        Ok(()) => Ok(Some(cubin)),
        Err(validate::ValidateError::PtxasLacksArch { .. }) => {
            // The PTX is still good for any newer GPU, whose driver compiles it at load.
            eprintln!(
                "warning: {} ({}) cannot assemble for {arch}, so `{}` has no cubin; the driver \
                 compiles the PTX when it loads (ptxas 13 and later start at sm_75: build for \
                 the GPU's own architecture with `--arch`, or name an older ptxas in {})",
                ptxas.display(),
                toolchain::ptxas_version(&ptxas),
                ptx.display(),
                toolchain::PTXAS_ENV
            );
            Ok(None)
        }
        Err(err) => Err(BuildError::Ptxas {
            ptx: ptx.to_owned(),
            stderr: err.to_string(),
        }),
    }
}

/// Whether `path` exists and was modified no earlier than `than`.
fn is_newer(path: &Path, than: &Path) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|meta| meta.modified());
    match (modified(path), modified(than)) {
        (Ok(path_time), Ok(than_time)) => path_time >= than_time,
        _ => false,
    }
}

/// Writes [`HOST_EXPORTS`] to `<target dir>/gpurun/` unless it is there already, and returns its
/// path.
fn install_host_exports(target_dir: &Path) -> Result<PathBuf, BuildError> {
    let dir = target_dir.join("gpurun");
    let path = dir.join(HOST_EXPORTS_NAME);
    if std::fs::read_to_string(&path).is_ok_and(|text| text == HOST_EXPORTS) {
        return Ok(path);
    }
    let io_error = |context: String| move |source| BuildError::Io { context, source };
    std::fs::create_dir_all(&dir).map_err(io_error(format!("cannot create {}", dir.display())))?;
    // Written under a unique name and renamed, so a concurrent build never reads half a file.
    let temporary = dir.join(format!("{HOST_EXPORTS_NAME}.{}", std::process::id()));
    std::fs::write(&temporary, HOST_EXPORTS)
        .map_err(io_error(format!("cannot write {}", temporary.display())))?;
    std::fs::rename(&temporary, &path)
        .map_err(io_error(format!("cannot create {}", path.display())))?;
    Ok(path)
}

/// Points `<target dir>/gpurun/gpurun-nvptx-link` at `linker`, by default the running
/// executable, and returns it.
fn install_linker_link(target_dir: &Path, linker: Option<&Path>) -> Result<PathBuf, BuildError> {
    let io_error = |context: String| move |source| BuildError::Io { context, source };
    let exe = match linker {
        Some(linker) => linker.to_path_buf(),
        None => std::env::current_exe().map_err(io_error(
            "cannot find the cargo-gpurun executable".to_owned(),
        ))?,
    };
    let dir = target_dir.join("gpurun");
    let link = dir.join(NVPTX_LINKER_NAME);
    if std::fs::read_link(&link).is_ok_and(|current| current == exe) {
        return Ok(link);
    }
    std::fs::create_dir_all(&dir).map_err(io_error(format!("cannot create {}", dir.display())))?;
    // A unique temporary name, renamed over the old link, so concurrent builds never see none.
    let temporary = dir.join(format!("{NVPTX_LINKER_NAME}.{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    symlink(&exe, &temporary).map_err(io_error(format!(
        "cannot create the linker link {}",
        temporary.display()
    )))?;
    std::fs::rename(&temporary, &link)
        .map_err(io_error(format!("cannot create {}", link.display())))?;
    Ok(link)
}

#[cfg(unix)]
fn symlink(original: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(original, link)
}

#[cfg(not(unix))]
fn symlink(original: &Path, link: &Path) -> std::io::Result<()> {
    // No symlinks without privileges elsewhere: a copy has the same name and so the same effect.
    std::fs::copy(original, link).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every item is worked on once, on several threads where there are several cores, and the
    /// results keep the items' order.
    #[test]
    fn work_on_all_cores_keeps_the_items_order() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let items: Vec<u64> = (0..100).collect();
        let threads = std::sync::Mutex::new(std::collections::HashSet::new());
        let squares = map_on_all_cores(&items, |&n| {
            threads.lock().unwrap().insert(std::thread::current().id());
            // The first item waits (a while at most) for a second thread to take one.
            let waited = std::time::Instant::now();
            while n == 0
                && cores > 1
                && threads.lock().unwrap().len() < 2
                && waited.elapsed() < std::time::Duration::from_secs(30)
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            n * n
        });
        assert_eq!(squares, items.iter().map(|n| n * n).collect::<Vec<_>>());
        assert_eq!(threads.lock().unwrap().len() > 1, cores > 1);
        assert!(map_on_all_cores(&[] as &[u64], |&n| n).is_empty());
        assert_eq!(map_on_all_cores(&[7u64], |&n| n + 1), [8]);
    }
}
