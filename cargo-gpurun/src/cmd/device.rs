//! Which device runs an image, shared by `run` and `test`: the `--backend`/`--device`/
//! `--lane-size`/`--stack-size`/`--sanitize` options, the backend an image needs, and the
//! worker options they make.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use gpurun_hal::select::BackendChoice;
use gpurun_hal::BackendKind;
use gpurun_image::Image;
use gpurun_runner::placement;
use gpurun_runner::sanitizer::{self, SANITIZE_ENV};
use gpurun_runner::{Sanitizer, SanitizerTool, WorkerOptions};

/// Which device runs the image; shared by `run` and `test`.
#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// Backend: auto (from the image), cuda, hsa, host; for `test` also a list (`host,cuda`) or
    /// `all` (every backend with a device): each test then runs on each, named `[host] NAME`.
    #[arg(long, default_value = "auto", env = "GPURUN_BACKEND")]
    pub backend: BackendChoice,
    /// Device index within the backend [default: 0 for `run`; every visible device for `test`].
    #[arg(long)]
    pub device: Option<usize>,
    /// Warp size the host emulation uses: 1, 32 or 64; for `test` also `all`: each test then
    /// runs at 32 and at 64 (the warps of NVIDIA and gfx9 AMD), named `[lanes=64] NAME`.
    #[arg(long, default_value = "32", value_parser = parse_lane_size)]
    pub lane_size: LaneSizes,
    /// The host emulation's seed: the poison of shared memory, the order blocks run in and where
    /// checked threads yield follow from it (and each kernel's name). Default: a fresh one per
    /// run, which every failure's output names so that the run can be repeated with it.
    #[arg(long, value_name = "N", env = gpurun_hal::host::EMULATION_SEED_ENV, value_parser = gpurun_hal::host::parse_seed)]
    pub emulation_seed: Option<u64>,
    /// Stack size per device thread in bytes (CUDA, host emulation).
    #[arg(long, value_name = "BYTES")]
    pub stack_size: Option<usize>,
    /// Fail unless a GPU runs the tests or program: no fallback to the host emulation, and an
    /// error naming why each GPU backend has no device.
    #[arg(long, env = gpurun_runner::placement::REQUIRE_GPU_ENV, value_parser = gpurun_runner::placement::parse_require_gpu)]
    pub require_gpu: bool,
    /// Run the CUDA workers under NVIDIA's compute-sanitizer with this tool (found on PATH, in
    /// CUDA_HOME, or at $GPURUN_COMPUTE_SANITIZER). Each test then runs in a worker of its own,
    /// with 10 times its time limit, and the device code findings of its report fail it.
    #[arg(long, value_name = "TOOL", env = SANITIZE_ENV, value_parser = PossibleValuesParser::new(SanitizerTool::NAMES).try_map(|name| name.parse::<SanitizerTool>()))]
    pub sanitize: Option<SanitizerTool>,
}

/// The host emulation's warp size, or each of the GPUs' (`--lane-size all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneSizes {
    One(u32),
    All,
}

impl LaneSizes {
    /// The lane sizes `all` runs each test at: NVIDIA's and gfx10+ AMD's 32, gfx9 AMD's 64.
    pub const ALL: [u32; 2] = [32, 64];

    /// Each lane size to run at.
    pub fn each(self) -> Vec<u32> {
        match self {
            LaneSizes::One(size) => vec![size],
            LaneSizes::All => LaneSizes::ALL.to_vec(),
        }
    }

    /// The one lane size, for what runs once (`run`, a GPU backend): the first of `all`.
    pub fn first(self) -> u32 {
        self.each()[0]
    }
}

fn parse_lane_size(text: &str) -> Result<LaneSizes, String> {
    match text.parse::<u32>() {
        Ok(size @ (1 | 32 | 64)) => Ok(LaneSizes::One(size)),
        _ if text == "all" => Ok(LaneSizes::All),
        _ => Err(format!("lane size must be 1, 32, 64 or all, not `{text}`")),
    }
}

/// The host emulation's seed of this run: `--emulation-seed`, else one drawn once per process.
pub fn seed(device: &DeviceArgs) -> u64 {
    static FRESH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    device
        .emulation_seed
        .unwrap_or_else(|| *FRESH.get_or_init(gpurun_hal::host::fresh_seed))
}

/// Adds what to do about a missing GPU to a worker start failure.
pub fn start_failure(kind: BackendKind, image: &Image, error: String) -> anyhow::Error {
    let hint = match kind {
        BackendKind::Host | BackendKind::Scripted => String::new(),
        // `cargo gpurun build --target host` gives a host image of every lib and bin (a bin
        // linked as a shared object), which is what a GPU image built through cargo came from.
        BackendKind::Cuda | BackendKind::Hsa => format!(
            "\n  {} needs a machine with that GPU; to run it without one, run `cargo gpurun \
             build --target host` in its crate and `cargo gpurun run` the host image it prints \
             for this lib or bin (the host emulation)",
            placement::image_in_words(image.kind())
        ),
    };
    anyhow::anyhow!("{error}{hint}")
}

/// The backend choice in effect: under `--sanitize`, CUDA ([`sanitizer::backend_choice`]).
pub fn backend_choice(device: &DeviceArgs) -> anyhow::Result<BackendChoice> {
    match device.sanitize {
        None => Ok(device.backend.clone()),
        Some(_) => Ok(sanitizer::backend_choice(&device.backend)?),
    }
}

/// The sanitizer `--sanitize` asks for on the `kind` backend: `None` without `--sanitize`; an
/// error for a backend other than CUDA, or when compute-sanitizer cannot be found.
pub fn sanitizer(device: &DeviceArgs, kind: BackendKind) -> anyhow::Result<Option<Sanitizer>> {
    let Some(tool) = device.sanitize else {
        return Ok(None);
    };
    Sanitizer::check_backend(kind)?;
    Ok(Some(Sanitizer::find(tool)?))
}

/// The worker options `device` asks for, with the host emulation's memory checks on or off
/// (they only apply to an image built for them) and its seed: the one given, else a fresh one
/// for this run (`gpurun_hal::host::seed_note`). The backend is the host emulation's until the
/// caller sets it.
pub fn options(device: &DeviceArgs, emulation_checks: bool) -> WorkerOptions {
    WorkerOptions {
        backend: BackendKind::Host,
        device: device.device.unwrap_or(0),
        lane_size: device.lane_size.first(),
        emulation_checks,
        emulation_seed: Some(seed(device)),
        stack_size: device.stack_size,
        allow_system: false,
        stdin: None,
    }
}
