//! GPU tests inside plain `cargo test`, on stable Rust, for a host crate whose kernels live in a
//! device crate beside it. Two styles, both starting from a [`DeviceCrate`]:
//!
//! - **Device tests as trials.** A `[[test]]` target with `harness = false` whose `main` is
//!   [`DeviceCrate::libtest_mimic_main`] turns every `#[gpurun::test]` of the device crate into a
//!   `libtest_mimic::Trial`, so `cargo test`, `cargo test -- FILTER`, `--list`, `--ignored`,
//!   nextest and IDE runners see each device test with its own result; `--partition` and
//!   `--junit PATH` work as with `cargo gpurun test`. Each runs in a worker process (the test
//!   binary itself, started with [`WORKER_FLAG`]), so a fault or a timeout fails only its
//!   trial.
//!
//!   ```no_run
//!   // tests/gpu.rs, with `[[test]] name = "gpu", harness = false` in Cargo.toml
//!   fn main() -> std::process::ExitCode {
//!       gpurun_test::DeviceCrate::new("kernels").libtest_mimic_main()
//!   }
//!   ```
//!
//! - **Host-driven launches.** [`DeviceCrate::load`] opens the device in this process and loads
//!   the image: fill [`Buffer`]s, [`Gpu::launch`] a kernel with a tuple of arguments, read the
//!   results back and compare with a CPU reference.
//!
//!   ```no_run
//!   use gpurun_test::{DeviceCrate, LaunchShape};
//!   # fn main() -> Result<(), gpurun_test::Error> {
//!   let gpu = DeviceCrate::new("kernels").load()?;
//!   let x = gpu.buffer_from(&[1.0f32, 2.0, 3.0])?;
//!   let mut y = gpu.buffer_from(&[1.0f32; 3])?;
//!   gpu.launch("saxpy", LaunchShape::blocks(1).threads(256), (2.0f32, &x, &mut y, 3usize))?;
//!   assert_eq!(y.to_vec()?, [3.0, 5.0, 7.0]);
//!   # Ok(()) }
//!   ```
//!
//! - **Benchmarks.** In a `harness = false` target, `cargo bench` measures device benchmarks
//!   (`#[gpurun::bench]`, among the trials) and host-driven launches timed on the device
//!   ([`Gpu::launch_timed`], [`bench::trial`]), with the statistics `cargo gpurun bench` uses.
//!
//! The device crate is built through the same pipeline as `cargo gpurun build`
//! (`gpurun_build`), which runs the nightly cargo as a subprocess, so the caller stays
//! on stable: for the GPU present (CUDA, then HSA), else for the host emulation, once per
//! process. `GPURUN_BACKEND=host|cuda|hsa` or [`DeviceCrate::target`] pick one explicitly;
//! `GPURUN_SANITIZE=TOOL` runs the trials under compute-sanitizer, on CUDA.
//!
//! Owns: the libtest-mimic trials and host-driven launches with typed buffers. Must not:
//! duplicate the runner (trials run through `gpurun_runner::WorkerExecutor`, verdicts come from
//! `gpurun_harness::outcome::judge`) or the build pipeline.

pub mod bench;
mod gpu;
mod launch_args;
mod signature;
mod trials;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use gpurun_build::{BuildOptions, Platform, TargetKind};
use gpurun_hal::select::BackendChoice;
use gpurun_runner::sanitizer;

pub use gpu::{Buffer, Gpu, HostFunction, Memory, Output, Timed};
pub use gpurun_hal::kernel_args::KernelArg;
pub use gpurun_hal::LaunchShape;
pub use gpurun_hal::{BackendKind, LaunchEnd};
pub use launch_args::{Arg, DeviceCopy, ForeignBuffer, IntoKernelArg, KernelArgs};
pub use trials::WORKER_FLAG;

/// What can go wrong when building, loading or launching. Each message is one line, except
/// that a panic carries the device's output.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The build pipeline failed (cargo's diagnostics were printed on stderr).
    #[error("failed to build the device crate at {}: {message}", path.display())]
    Build { path: PathBuf, message: String },
    /// The device crate built no library image to load.
    #[error("the device crate at {} built no library image (it needs `crate-type = [\"cdylib\"]` under [lib])", path.display())]
    NoLibrary { path: PathBuf },
    /// The built image could not be read.
    #[error("failed to read the image {}: {message}", path.display())]
    Image { path: PathBuf, message: String },
    /// The backend refused: no driver, no device, a load or launch failure, bad arguments.
    #[error("{0}")]
    Backend(gpurun_hal::BackendError),
    /// A kernel of this process faulted earlier on a GPU whose driver refuses all work in the
    /// process after a fault (CUDA): no [`Gpu`] can load, launch or copy here any more, however it
    /// is opened. Only a new process can use the GPU again, so tests that may fault want a
    /// process of their own.
    #[error(
        "nothing more can run on the GPU in this test process: kernel `{kernel}` faulted earlier \
         ({fault}), and after a fault the {backend} driver refuses all work in the process. Run \
         tests that may fault in a process of their own: `cargo nextest run` runs each test in \
         its own process, and device tests as trials (`DeviceCrate::libtest_mimic_main`) run \
         each in a worker process"
    )]
    EarlierFault {
        backend: BackendKind,
        /// The kernel that faulted first.
        kernel: String,
        /// The driver's error for it.
        fault: String,
    },
    /// `GPURUN_SANITIZE` asks for a sanitizer these trials cannot run under (another backend
    /// than CUDA, no compute-sanitizer, an unknown tool).
    #[error("{0}")]
    Sanitizer(#[from] gpurun_runner::SanitizerError),
    /// The devices to run trials on cannot be listed (a bad `GPURUN_HOST_DEVICES`).
    #[error("{0}")]
    Devices(String),
    /// The image has no kernel of that name.
    #[error("no kernel named `{name}` in {}; its kernels: {available}", image.display())]
    NoKernel {
        name: String,
        image: PathBuf,
        available: String,
    },
    /// The arguments do not fit the kernel's signature (checked where the image records it:
    /// a `#[gpurun::kernel]`'s descriptor, PTX).
    #[error("wrong arguments for kernel `{kernel}`: {message}")]
    Arguments { kernel: String, message: String },
    /// A buffer holds fewer elements than the kernel declares for this launch
    /// (`#[gpurun::kernel(len(..))]`); nothing was launched.
    #[error("{0}")]
    BufferTooSmall(Box<BufferTooSmall>),
    /// A buffer passed to a launch was made by another [`Gpu`] (another loaded image).
    #[error("argument {index} of `{kernel}` is a buffer of another loaded image")]
    ForeignBuffer { kernel: String, index: usize },
    /// A buffer's size in bytes overflows.
    #[error("a buffer of {len} elements of {element_size} bytes is too large")]
    TooLarge { len: usize, element_size: usize },
    /// A copy into or out of a buffer names more elements than the buffer holds; nothing was
    /// copied.
    #[error("cannot copy {given} elements: the buffer holds {len}")]
    CopyTooLong { given: usize, len: usize },
    /// A device thread panicked; the first report is shown. The kernel ran to its end.
    #[error("{0}")]
    Panicked(Box<DevicePanic>),
    /// The launch ended other than by completing: a fault (illegal address, trap), a timeout
    /// (see [`DeviceCrate::timeout`]), an `exit()` or an `abort()` on the device. After a fault
    /// or a timeout the loaded image cannot run more kernels; after a fault on CUDA nothing more
    /// runs in the process ([`Error::EarlierFault`]).
    #[error("kernel `{kernel}` {}", ended(end))]
    Ended { kernel: String, end: LaunchEnd },
    /// [`Gpu::launch_timed`] on a backend that measures no device time (the scripted one).
    #[error("the {backend} backend measured no device time for kernel `{kernel}`")]
    Untimed {
        kernel: String,
        backend: BackendKind,
    },
}

impl From<gpurun_hal::BackendError> for Error {
    fn from(error: gpurun_hal::BackendError) -> Self {
        match error {
            gpurun_hal::BackendError::EarlierFault {
                backend,
                kernel,
                fault,
            } => Error::EarlierFault {
                backend,
                kernel,
                fault,
            },
            other => Error::Backend(other),
        }
    }
}

/// How [`Error::Ended`] words a launch's end.
fn ended(end: &LaunchEnd) -> String {
    match end {
        LaunchEnd::Completed => "completed".to_owned(),
        LaunchEnd::Faulted(error) => format!("faulted: {error}"),
        LaunchEnd::TimedOut(after) => format!("timed out after {after:?}"),
        LaunchEnd::Exited(code) => format!("called exit({code})"),
        LaunchEnd::Aborted => "called abort()".to_owned(),
    }
}

/// A panic on the device during a host-driven launch ([`Error::Panicked`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kernel `{kernel}` panicked at {file}:{line}:{column} (block {block:?}, thread {thread:?}{others}): {message}{note}",
    file = report.file, line = report.line, column = report.column, block = report.block,
    thread = report.thread, message = report.message,
    others = if *panicked_threads > 1 { format!(", one of {panicked_threads} threads that panicked") } else { String::new() },
    note = wavefront_note.as_ref().map(|note| format!("\n{note}")).unwrap_or_default())]
pub struct DevicePanic {
    pub kernel: String,
    /// The first panic reported: message, location, thread and block.
    pub report: gpurun_harness::PanicReport,
    /// How many device threads panicked.
    pub panicked_threads: u64,
    /// On AMD GPUs a panic ends its whole wavefront: which threads went with it (the same
    /// `note:` line `cargo gpurun test` prints). `None` where a panic ends only its thread.
    pub wavefront_note: Option<String>,
    /// What the kernel printed.
    pub output: Output,
}

/// A buffer too small for a launch ([`Error::BufferTooSmall`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("buffer too small for kernel `{kernel}`: `{param}` needs {needed} elements of {element_size} bytes ({param} = {rule}), but the buffer holds {actual}")]
pub struct BufferTooSmall {
    pub kernel: String,
    /// The pointer parameter, by name.
    pub param: String,
    /// Elements the declared length asks for, for this launch's arguments and shape.
    pub needed: u128,
    /// Elements (of the kernel's element type) the buffer holds.
    pub actual: u64,
    /// Bytes of one element, as the kernel sees it.
    pub element_size: u32,
    /// The declared length with the values it took: `n = 1000`, `blocks * threads = 4 * 64`.
    pub rule: String,
}

/// A device crate, by the directory of its `Cargo.toml`.
#[derive(Debug, Clone)]
pub struct DeviceCrate {
    dir: PathBuf,
    target: Option<String>,
    release: bool,
    /// `None`: the package's `[package.metadata.gpurun] test-timeout`, else [`DEFAULT_TIMEOUT`].
    timeout: Option<Duration>,
    lane_size: u32,
    /// `None`: as `GPURUN_EMULATION_CHECKS` says, else on.
    emulation_checks: Option<bool>,
}

/// A built image of a device crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltImage {
    /// The cargo package it belongs to.
    pub package: String,
    /// The image file (`.ptx`, `.elf` code object or host `.so`).
    pub path: PathBuf,
    /// What it was built for.
    pub target: Platform,
}

/// How long a kernel or device test may run unless [`DeviceCrate::timeout`] says otherwise: as
/// `cargo gpurun test`.
pub const DEFAULT_TIMEOUT: Duration = gpurun_runner::suite::DEFAULT_TEST_TIMEOUT;

/// The host emulation's warp size unless [`DeviceCrate::lane_size`] says otherwise: as `cargo
/// gpurun test`.
pub const DEFAULT_LANE_SIZE: u32 = 32;

impl DeviceCrate {
    /// The device crate in `dir`. A relative path is taken from the current directory, which
    /// `cargo test` and nextest set to the package root of the test being run.
    pub fn new(dir: impl AsRef<Path>) -> DeviceCrate {
        DeviceCrate {
            dir: dir.as_ref().to_path_buf(),
            target: None,
            release: false,
            timeout: None,
            lane_size: DEFAULT_LANE_SIZE,
            emulation_checks: None,
        }
    }

    /// Builds for this target (`nvptx`, `amdgcn`, `host` or a full triple) instead of the GPU
    /// present.
    pub fn target(mut self, target: impl Into<String>) -> DeviceCrate {
        self.target = Some(target.into());
        self
    }

    /// Builds with the release profile.
    pub fn release(mut self, release: bool) -> DeviceCrate {
        self.release = release;
        self
    }

    /// How long each device test or launched kernel may run. Default: the device crate's
    /// `[package.metadata.gpurun] test-timeout` (seconds), as for `cargo gpurun test`, else
    /// [`DEFAULT_TIMEOUT`].
    pub fn timeout(mut self, timeout: Duration) -> DeviceCrate {
        self.timeout = Some(timeout);
        self
    }

    /// The warp size the host emulation runs this crate's kernels and device tests with: 1, 32
    /// (the default, [`DEFAULT_LANE_SIZE`]) or 64, as `cargo gpurun test --lane-size`; another
    /// value fails the load. GPUs have their own.
    pub fn lane_size(mut self, lane_size: u32) -> DeviceCrate {
        self.lane_size = lane_size;
        self
    }

    /// Whether the host emulation checks the memory accesses of this crate's kernels and device
    /// tests (out-of-bounds accesses, reads of unwritten shared memory), as `cargo gpurun test
    /// --emulation-checks`: the host image is then built for them with the nightly toolchain.
    /// Default: on, unless `GPURUN_EMULATION_CHECKS=off`. GPUs have their own tools
    /// (`GPURUN_SANITIZE`).
    pub fn emulation_checks(mut self, on: bool) -> DeviceCrate {
        self.emulation_checks = Some(on);
        self
    }

    /// The timeout in effect for `built` (see [`DeviceCrate::timeout`]).
    pub fn effective_timeout(&self, built: &BuiltImage) -> Result<Duration, Error> {
        if let Some(timeout) = self.timeout {
            return Ok(timeout);
        }
        // The cached build's own image carries the package's metadata: no `cargo metadata` here.
        let images = self.build_cached(BuildMode::Lib)?;
        let image = images
            .iter()
            .find(|image| image.package == built.package && image.path == built.path);
        self.timeout_for(image)
    }

    /// The timeout for the tests or kernels of `image`: ours if set, else its package's
    /// `test-timeout` (as `cargo gpurun test` reads it), else [`DEFAULT_TIMEOUT`].
    fn timeout_for(&self, image: Option<&gpurun_build::BuiltImage>) -> Result<Duration, Error> {
        let Some(image) = image else {
            return Ok(self.timeout.unwrap_or(DEFAULT_TIMEOUT));
        };
        gpurun_runner::suite::time_limit(image, self.timeout).map_err(|error| Error::Build {
            path: self.dir.clone(),
            message: format!("{error:#}"),
        })
    }

    /// Builds the crate's library image, once per process for each directory, target and
    /// profile (later calls return the first result, failures included).
    pub fn build(&self) -> Result<BuiltImage, Error> {
        let images = self.build_cached(BuildMode::Lib)?;
        images
            .into_iter()
            .find(|image| image.kind == TargetKind::Lib)
            .map(|image| BuiltImage {
                package: image.package,
                path: image.path,
                target: image.target,
            })
            .ok_or_else(|| Error::NoLibrary {
                path: self.dir.clone(),
            })
    }

    /// Builds every target `cargo gpurun test` would (see [`BuildMode`]), for each backend
    /// `GPURUN_BACKEND` names, cached like [`DeviceCrate::build`].
    pub(crate) fn build_for_test(&self) -> Result<Vec<gpurun_build::BuiltImage>, Error> {
        self.build_cached(BuildMode::Test)
    }

    fn build_cached(&self, mode: BuildMode) -> Result<Vec<gpurun_build::BuiltImage>, Error> {
        type Key = (PathBuf, Option<String>, (bool, bool), BuildMode);
        type Built = Result<Vec<gpurun_build::BuiltImage>, String>;
        static BUILDS: Mutex<Option<HashMap<Key, Built>>> = Mutex::new(None);
        let dir = std::path::absolute(&self.dir).unwrap_or_else(|_| self.dir.clone());
        let checks = match self.emulation_checks {
            Some(on) => on,
            None => gpurun_build::emulation::emulation_checks_by_env().map_err(|message| {
                Error::Build {
                    path: dir.clone(),
                    message,
                }
            })?,
        };
        let key = (
            dir.clone(),
            self.target.clone(),
            (self.release, checks),
            mode,
        );
        // Held through the build: concurrent tests of one process wait for the one build.
        let mut builds = BUILDS.lock().unwrap_or_else(PoisonError::into_inner);
        let builds = builds.get_or_insert_with(HashMap::new);
        let result = builds
            .entry(key)
            .or_insert_with(|| self.build_now(&dir, mode, checks))
            .clone();
        result.map_err(|message| Error::Build { path: dir, message })
    }

    fn build_now(
        &self,
        dir: &Path,
        mode: BuildMode,
        emulation_checks: bool,
    ) -> Result<Vec<gpurun_build::BuiltImage>, String> {
        let required = gpurun_runner::placement::gpu_required_by_env()?;
        let targets = match &self.target {
            Some(target) => {
                let parsed =
                    gpurun_build::arch::parse_target(target).map_err(|error| error.to_string())?;
                if required {
                    gpurun_runner::placement::require_gpu(&[parsed])
                        .map_err(|error| error.to_string())?;
                }
                vec![parsed]
            }
            None => gpurun_runner::placement::targets_for(&self.backend_choice(mode)?, required)
                .map_err(|error| error.to_string())?,
        };
        if mode == BuildMode::Lib && targets.len() > 1 {
            return Err(
                "GPURUN_BACKEND names several backends; host-driven launches run on one \
                        (set it to one of them, or use DeviceCrate::target)"
                    .into(),
            );
        }
        let mut images = Vec::new();
        for target in targets {
            let mut options = BuildOptions {
                manifest_path: Some(dir.join("Cargo.toml")),
                targets: vec![target.short_name().to_owned()],
                release: self.release,
                quiet: true,
                emulation_checks,
                gpu_arch: Some(gpurun_runner::placement::gpu_arch),
                ..BuildOptions::default()
            };
            if target == Platform::Nvptx {
                let target_dir =
                    gpurun_build::target_dir(&options).map_err(|error| error.to_string())?;
                options.nvptx_linker = Some(nvptx_linker(&target_dir)?);
            }
            let built = match mode {
                BuildMode::Lib => gpurun_build::build(&options),
                BuildMode::Test => gpurun_build::build_for_test(&options),
            };
            images.extend(built.map_err(|error| error.to_string())?);
        }
        Ok(images)
    }

    /// The backends to build for and run on, as `cargo gpurun test` chooses them: the one of
    /// [`DeviceCrate::target`], else `GPURUN_BACKEND` (one backend, several, or `all`; unset:
    /// the GPU present), on CUDA for trials under `GPURUN_SANITIZE`.
    fn backend_choice(&self, mode: BuildMode) -> Result<BackendChoice, String> {
        if let Some(target) = &self.target {
            let platform =
                gpurun_build::arch::parse_target(target).map_err(|error| error.to_string())?;
            return Ok(BackendChoice::Only(BackendKind::for_platform(platform)));
        }
        let choice = match std::env::var("GPURUN_BACKEND") {
            Ok(name) => name.parse::<BackendChoice>()?,
            Err(_) => BackendChoice::Auto,
        };
        if mode == BuildMode::Test && sanitizer::requested_by_env().ok().flatten().is_some() {
            return sanitizer::backend_choice(&choice).map_err(|error| error.to_string());
        }
        Ok(choice)
    }

    /// Builds the crate (cached) and loads its image on the device in this process: device 0
    /// of the backend the image is for. See [`Gpu`] for what a fault does to the process.
    pub fn load(&self) -> Result<Gpu, Error> {
        let built = self.build()?;
        let timeout = self.effective_timeout(&built)?;
        Gpu::open_with_lane_size(&built.path, None, timeout, self.lane_size)
    }
}

/// What a build makes: `Lib` as `cargo gpurun build` (the lib and bins), for [`Gpu`]s;
/// `Test` as `cargo gpurun test` (also every `harness = false` tests/ target and the
/// examples), for trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum BuildMode {
    Lib,
    Test,
}

/// gpurun-build's `gpurun-nvptx-link`, built with escargot from the gpurun-build sources this
/// crate was built with. rustc runs the nvptx linker as an executable; `cargo gpurun` uses
/// itself, but a test binary cannot be one.
///
/// It is built into `<target_dir>/gpurun/nvptx-linker` (the device crate's target directory):
/// cargo would otherwise build it in the target directory of gpurun-build's own workspace,
/// which for a gpurun-build from crates.io is a `target/` inside cargo's registry.
fn nvptx_linker(target_dir: &Path) -> Result<PathBuf, String> {
    let manifest = Path::new(gpurun_build::MANIFEST_DIR).join("Cargo.toml");
    if !manifest.is_file() {
        return Err(format!(
            "cannot build the nvptx linker: gpurun-build's sources are not at {}",
            manifest.display()
        ));
    }
    let run = nvptx_linker_build(&manifest, target_dir)
        .run()
        .map_err(|error| format!("cannot build the nvptx linker: {error}"))?;
    Ok(run.path().to_path_buf())
}

/// The cargo build of `gpurun-nvptx-link` from gpurun-build's `manifest`, into
/// `<target_dir>/gpurun/nvptx-linker`.
fn nvptx_linker_build(manifest: &Path, target_dir: &Path) -> escargot::CargoBuild {
    escargot::CargoBuild::new()
        .manifest_path(manifest)
        .package("gpurun-build")
        .bin(gpurun_build::NVPTX_LINKER_NAME)
        .target_dir(target_dir.join("gpurun").join("nvptx-linker"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GPURUN_REQUIRE_GPU=1` turns a build for the host emulation into an error that says so,
    /// before anything is built. The only test of this binary that sets the variable.
    #[test]
    fn a_required_gpu_refuses_the_host_emulation() {
        std::env::set_var(gpurun_runner::placement::REQUIRE_GPU_ENV, "1");
        let result = DeviceCrate::new("/nonexistent/kernels")
            .target("host")
            .build();
        std::env::remove_var(gpurun_runner::placement::REQUIRE_GPU_ENV);
        let error = result.map(|_| ()).unwrap_err().to_string();
        assert!(
            error.contains("a GPU is required")
                && error.contains("runs on the host emulation backend, not a GPU"),
            "{error}"
        );
    }

    /// The nvptx linker is built in the device crate's target directory: without a target
    /// directory, cargo would build it in gpurun-build's own, which for a gpurun-build from
    /// crates.io is a `target/` inside cargo's registry (scripts/package-check.sh runs it from
    /// the packaged crates).
    #[test]
    fn the_nvptx_linker_builds_in_the_device_crates_target_dir() {
        let registry_sources = Path::new("/home/u/.cargo/registry/src/index/gpurun-build-0.1.0");
        let build = nvptx_linker_build(
            &registry_sources.join("Cargo.toml"),
            Path::new("/work/kernels/target"),
        );
        let command = build.into_command();
        let args: Vec<&std::ffi::OsStr> = command.get_args().collect();
        let target_dir = args
            .iter()
            .position(|arg| *arg == "--target-dir")
            .and_then(|at| args.get(at + 1));
        assert_eq!(
            target_dir.map(Path::new),
            Some(Path::new("/work/kernels/target/gpurun/nvptx-linker")),
            "{args:?}"
        );
    }

    /// A host-driven launch's panic error ends with the wavefront note where the image's
    /// kernel has one (AMDGPU), and says nothing more elsewhere.
    #[test]
    fn a_device_panic_shows_the_wavefront_note_when_there_is_one() {
        let report = gpurun_harness::testing::panic_report("bad input", 7, [70, 0, 0], [2, 0, 0]);
        let panic = |wavefront_note| DevicePanic {
            kernel: "divide".into(),
            report: report.clone(),
            panicked_threads: 1,
            wavefront_note,
            output: Output::default(),
        };
        let plain = panic(None).to_string();
        assert_eq!(
            plain,
            "kernel `divide` panicked at src/lib.rs:7:5 (block [2, 0, 0], thread [70, 0, 0]): bad input"
        );
        let note = gpurun_harness::outcome::wavefront_note(64, [256, 1, 1], Some(&report));
        let note = note.expect("a 256-thread block has several wavefronts");
        let on_amd = panic(Some(note.clone())).to_string();
        assert_eq!(on_amd, format!("{plain}\n{note}"));
        assert!(note.contains("(64,0,0) to (127,0,0)"), "{note}");
    }

    /// The timeout comes from the image the build made (its package's metadata, read by the
    /// build's one `cargo metadata`); an explicit one wins; a bad value is a build error.
    #[test]
    fn timeouts_come_from_the_built_image() {
        let image = |metadata: Option<serde_json::Value>| gpurun_build::BuiltImage {
            package: "timed".to_owned(),
            name: "timed".to_owned(),
            target: Platform::Host,
            arch: None,
            path: PathBuf::from("libtimed.so"),
            cubin: None,
            kind: TargetKind::Lib,
            source: PathBuf::from("src/lib.rs"),
            package_root: PathBuf::from("timed"),
            kernels: Vec::new(),
            gpurun_metadata: metadata,
        };
        let device_crate = DeviceCrate::new("timed");
        let three = image(Some(serde_json::json!({ "test-timeout": 3 })));
        assert_eq!(
            device_crate.timeout_for(Some(&three)).unwrap(),
            Duration::from_secs(3)
        );
        let half = image(Some(serde_json::json!({ "test-timeout": 0.5 })));
        assert_eq!(
            device_crate.timeout_for(Some(&half)).unwrap(),
            Duration::from_millis(500)
        );
        for unset in [
            image(None),
            image(Some(serde_json::json!({ "arch": "sm_80" }))),
        ] {
            assert_eq!(
                device_crate.timeout_for(Some(&unset)).unwrap(),
                DEFAULT_TIMEOUT
            );
        }
        assert_eq!(device_crate.timeout_for(None).unwrap(), DEFAULT_TIMEOUT);
        let explicit = device_crate.clone().timeout(Duration::from_secs(1));
        assert_eq!(
            explicit.timeout_for(Some(&three)).unwrap(),
            Duration::from_secs(1)
        );
        for bad in [
            serde_json::json!(0),
            serde_json::json!(-2),
            serde_json::json!("ten"),
        ] {
            let error = device_crate
                .timeout_for(Some(&image(Some(
                    serde_json::json!({ "test-timeout": bad }),
                ))))
                .unwrap_err();
            let message = error.to_string();
            assert!(
                message.contains("must be a positive number of seconds"),
                "{message}"
            );
        }
    }
}
