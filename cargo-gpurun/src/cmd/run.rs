//! `cargo gpurun run IMAGE [ARGS...]`: loader mode, compatible with LLVM's `llvm-gpu-loader`,
//! and the `target.runner` entry point. An image that carries `#[gpurun::test]` tests and no
//! `_start` runs as a test binary (libtest's command line), so one runner line serves both
//! `cargo run` and `cargo test`.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use gpurun_backend::select::{self, BackendChoice};
use gpurun_backend::worker::{Command, Event, RunEnd, Worker, WorkerEnd};
use gpurun_backend::BackendKind;
use gpurun_image::{Image, ImageKind};

use super::worker::{worker_spec, WorkerOptions};
use crate::executor::WorkerExecutor;
use crate::exit_code;

/// `cargo gpurun run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Threads per block in x.
    #[arg(long = "threads-x", visible_alias = "threads", default_value_t = 1)]
    pub threads_x: u32,
    /// Threads per block in y.
    #[arg(long, default_value_t = 1)]
    pub threads_y: u32,
    /// Threads per block in z.
    #[arg(long, default_value_t = 1)]
    pub threads_z: u32,
    /// Blocks in x.
    #[arg(long = "blocks-x", visible_alias = "blocks", default_value_t = 1)]
    pub blocks_x: u32,
    /// Blocks in y.
    #[arg(long, default_value_t = 1)]
    pub blocks_y: u32,
    /// Blocks in z.
    #[arg(long, default_value_t = 1)]
    pub blocks_z: u32,
    /// Launch these argument-less kernels, in order, instead of `_begin`/`_start`/`_end`.
    #[arg(long = "kernel", value_name = "NAME")]
    pub kernels: Vec<String>,
    /// Print each kernel's registers and local/shared memory before it runs.
    #[arg(long)]
    pub print_resource_usage: bool,
    /// Let the device program's `system()` run host commands (refused by default).
    #[arg(long)]
    pub allow_system: bool,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Stop the program after SECS seconds (exit status 124).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// The GPU image: `.ptx`, `.cubin`, AMDGPU code object, or host `.so`.
    pub image: PathBuf,
    /// Arguments for the device program (or libtest arguments for a test image).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// Which device runs the image; shared by `run` and `test`.
#[derive(Debug, Clone, Args)]
pub struct DeviceArgs {
    /// Backend: auto (from the image), cuda, hsa or host.
    #[arg(long, default_value = "auto", env = "GPURUN_BACKEND")]
    pub backend: BackendChoice,
    /// Device index within the backend [default: 0 for `run`; every visible device for `test`].
    #[arg(long)]
    pub device: Option<usize>,
    /// Warp size the host emulation uses: 1, 32 or 64.
    #[arg(long, default_value_t = 32, value_parser = parse_lane_size)]
    pub lane_size: u32,
    /// Stack size per device thread in bytes (CUDA, host emulation).
    #[arg(long, value_name = "BYTES")]
    pub stack_size: Option<usize>,
}

fn parse_lane_size(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(size @ (1 | 32 | 64)) => Ok(size),
        _ => Err(format!("lane size must be 1, 32 or 64, not `{text}`")),
    }
}

/// The image's kind in words, for error messages.
fn describe(kind: ImageKind) -> &'static str {
    match kind {
        ImageKind::Ptx => "an NVIDIA PTX image",
        ImageKind::Cubin => "an NVIDIA cubin",
        ImageKind::Amdgpu => "an AMDGPU code object",
        ImageKind::Host => "a host emulation image",
    }
}

/// Picks the backend for `image`, refusing combinations that cannot work.
pub fn backend_for(choice: BackendChoice, image: &Image) -> anyhow::Result<BackendKind> {
    let natural = select::kind_for_image(image.kind());
    match choice {
        BackendChoice::Auto => Ok(natural),
        BackendChoice::Only(kind) if kind == natural => Ok(kind),
        BackendChoice::Only(kind) => bail!(
            "the {kind} backend cannot run {}; it needs the {natural} backend",
            describe(image.kind())
        ),
    }
}

/// Adds what to do about a missing GPU to a worker start failure.
pub fn start_failure(kind: BackendKind, image: &Image, error: String) -> anyhow::Error {
    let hint = match kind {
        BackendKind::Host => String::new(),
        BackendKind::Cuda | BackendKind::Hsa => format!(
            "\n  {} needs a machine with that GPU; to run it without one, build the crate for \
             the host emulation (`cargo gpurun build --target host`) and run the `.so` it prints",
            describe(image.kind())
        ),
    };
    anyhow::anyhow!("{error}{hint}")
}

pub fn options(device: &DeviceArgs, kind: BackendKind) -> WorkerOptions {
    WorkerOptions {
        backend: kind,
        device: device.device.unwrap_or(0),
        lane_size: device.lane_size,
        stack_size: device.stack_size,
    }
}

/// The executor that runs an image's tests: one worker per device in use (the one `--device`
/// names, else every device the backend sees), sized so that the harness's test threads all
/// have a slot.
pub fn test_executor(
    device: &DeviceArgs,
    kind: BackendKind,
    image: &std::path::Path,
    harness_args: &gpurun_harness::HarnessArgs,
    timeout: Duration,
) -> anyhow::Result<WorkerExecutor> {
    let ordinals: Vec<usize> = match device.device {
        Some(ordinal) => vec![ordinal],
        None => match select::backend(kind).devices() {
            Ok(devices) if !devices.is_empty() => devices.iter().map(|d| d.ordinal).collect(),
            // A setting that makes no sense is the user's to fix before anything runs.
            Err(error @ gpurun_backend::BackendError::InvalidArgument(_)) => bail!(error),
            // A missing driver fails every test with the reason, libtest-style, in the worker.
            _ => vec![0],
        },
    };
    let base = options(device, kind);
    let specs = ordinals
        .into_iter()
        .map(|ordinal| {
            let options = WorkerOptions {
                device: ordinal,
                ..base.clone()
            };
            worker_spec(&options, image)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // A bad RUST_TEST_THREADS is reported by the harness itself.
    let concurrency = gpurun_harness::test_threads(harness_args).unwrap_or(1);
    Ok(WorkerExecutor::new(specs, concurrency, Some(timeout)))
}

pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let image = Image::read(&args.image)
        .with_context(|| format!("failed to load image `{}`", args.image.display()))?;
    let kind = backend_for(args.device.backend, &image)?;
    let options = options(&args.device, kind);
    if args.kernels.is_empty() && image.kernel("_start").is_none() && !image.tests().is_empty() {
        return run_test_image(args, &image, &options);
    }
    if args.kernels.is_empty() {
        image
            .require_entry("_start")
            .with_context(|| format!("cannot run `{}`", args.image.display()))?;
    }
    for kernel in &args.kernels {
        if image.kernel(kernel).is_none() {
            bail!("no kernel named `{kernel}` in `{}`", args.image.display());
        }
    }
    let mut spec = worker_spec(&options, &args.image)?;
    // Before the `--` that ends the worker's options. The device reads our stdin: the worker
    // reopens it through /proc (its own stdin is its command pipe).
    let at = spec.args.len().saturating_sub(1);
    let stdin = format!("/proc/{}/fd/0", std::process::id());
    spec.args.splice(at..at, ["--stdin".to_string(), stdin]);
    if args.allow_system {
        spec.args.insert(at, "--allow-system".into());
    }
    let worker = Worker::spawn(&spec, Duration::from_secs(120))
        .map_err(|error| start_failure(kind, &image, error.to_string()))?;
    let mut argv: Vec<Vec<u8>> = vec![args.image.as_os_str().as_encoded_bytes().to_vec()];
    argv.extend(args.args.iter().map(|arg| arg.as_encoded_bytes().to_vec()));
    let command = Command::RunMain {
        argv,
        envp: gpurun_backend::args::environment_strings(),
        threads: [args.threads_x, args.threads_y, args.threads_z],
        blocks: [args.blocks_x, args.blocks_y, args.blocks_z],
        kernels: args.kernels.clone(),
        print_resource_usage: args.print_resource_usage,
    };
    let timeout = match args.timeout {
        Some(secs) if secs.is_finite() && secs > 0.0 => Some(Duration::from_secs_f64(secs)),
        Some(secs) => bail!("--timeout must be a positive number of seconds, not {secs}"),
        None => None,
    };
    let mut panicked = false;
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let end = worker.run(0, &command, timeout, &mut |event| match event {
        Event::Stdout(bytes) => {
            let mut out = stdout.lock();
            let _ = out.write_all(&bytes);
            let _ = out.flush();
        }
        Event::Stderr(bytes) => {
            let mut err = stderr.lock();
            let _ = err.write_all(&bytes);
            let _ = err.flush();
        }
        Event::Panic(report) => {
            panicked = true;
            let [tx, ty, tz] = report.thread;
            let [bx, by, bz] = report.block;
            eprintln!(
                "device thread ({tx},{ty},{tz}) of block ({bx},{by},{bz}) panicked at {}:{}:{}:\n{}",
                report.file, report.line, report.column, report.message
            );
        }
        Event::Ready { .. } | Event::StartFailed { .. } | Event::Done(_) => {}
    });
    let _ = std::io::stdout().flush();
    match end {
        WorkerEnd::Done(RunEnd::Completed { status }) => {
            if panicked && status == 0 {
                Ok(exit_code::code(exit_code::PANICKED))
            } else {
                Ok(exit_code::code(status))
            }
        }
        WorkerEnd::Done(RunEnd::Exited { code }) => Ok(exit_code::code(code)),
        WorkerEnd::Done(RunEnd::Aborted) => {
            eprintln!("error: the device program aborted");
            let _ = std::io::stderr().flush();
            // Exit as a host abort would: killed by SIGABRT.
            std::process::abort()
        }
        WorkerEnd::Done(RunEnd::Faulted { error }) => bail!("device fault: {error}"),
        WorkerEnd::Done(RunEnd::Failed { error }) => bail!("{error}"),
        WorkerEnd::Done(RunEnd::TimedOut { .. }) | WorkerEnd::TimedOut(_) => {
            let secs = timeout.map_or(0.0, |t| t.as_secs_f64());
            eprintln!("error: the device program timed out after {secs}s");
            Ok(exit_code::code(exit_code::TIMED_OUT))
        }
        WorkerEnd::Died(how) => bail!("the device program crashed: {how}"),
    }
}

/// Runs a test image under libtest's command line (`target.runner` for test targets).
fn run_test_image(
    args: &RunArgs,
    image: &Image,
    options: &WorkerOptions,
) -> anyhow::Result<ExitCode> {
    let mut argv: Vec<OsString> = vec![args.image.clone().into_os_string()];
    argv.extend(args.args.iter().cloned());
    let harness_args = match gpurun_harness::HarnessArgs::parse_args(argv) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    };
    let timeout = harness_args
        .test_timeout
        .or(args
            .timeout
            .filter(|t| t.is_finite() && *t > 0.0)
            .map(Duration::from_secs_f64))
        .unwrap_or(super::test::DEFAULT_TEST_TIMEOUT);
    let executor = test_executor(
        &args.device,
        options.backend,
        &args.image,
        &harness_args,
        timeout,
    )?;
    let tests = super::test::test_cases(image);
    let code = gpurun_harness::run_to_exit_code(&harness_args, tests, Arc::new(executor));
    Ok(exit_code::code(code))
}
