//! `cargo gpurun run IMAGE [ARGS...]`: loader mode, compatible with LLVM's `llvm-gpu-loader`,
//! and the `target.runner` entry point. An image that carries `#[gpurun::test]` tests and no
//! `_start` runs as a test binary (libtest's command line), so one runner line serves both
//! `cargo run` and `cargo test`.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use gpurun_hal::{LaunchEnd, LaunchShape};
use gpurun_harness::{HarnessArgs, Session};
use gpurun_image::Image;
use gpurun_runner::placement;
use gpurun_runner::sanitizer::{self, ERROR_EXIT_CODE, REPORT_WITHIN};
use gpurun_runner::suite::DEFAULT_TEST_TIMEOUT;
use gpurun_runner::{Command, Event, PlanOptions, RunError, WorkerHandle, WorkerOptions};

use super::device::{options, sanitizer, start_failure, DeviceArgs};
use super::test::plan_options;
use super::worker::worker_spec;
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
    /// A test image's benchmarks (`--bench`) run cold: the GPU's L2 cache is flushed before
    /// every timed launch (CUDA; no effect elsewhere, as `cargo gpurun bench --flush-l2`).
    #[arg(long)]
    pub flush_l2: bool,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// The host emulation's memory checks of an image built for them (`cargo gpurun build
    /// --target host` builds them in by default): `on` or `off`.
    #[arg(long, value_name = "on|off", default_value = "on", action = clap::ArgAction::Set, env = gpurun_build::emulation::EMULATION_CHECKS_ENV, value_parser = gpurun_build::emulation::parse_emulation_checks)]
    pub emulation_checks: bool,
    /// Stop the program after SECS seconds (exit status 124).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// The GPU image: `.ptx`, `.cubin`, AMDGPU code object, or host `.so`.
    pub image: PathBuf,
    /// Arguments for the device program (or libtest arguments for a test image).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

pub fn run(args: &RunArgs) -> anyhow::Result<ExitCode> {
    let image = Image::read(&args.image)
        .with_context(|| format!("failed to load image `{}`", args.image.display()))?;
    let kind = placement::backend_for(&args.device.backend, image.kind())?;
    if args.device.require_gpu {
        gpurun_runner::placement::require_gpu(&[image.kind().platform()])?;
    }
    let sanitizer = sanitizer(&args.device, kind)?;
    if args.device.lane_size == super::device::LaneSizes::All {
        bail!("`--lane-size all` runs each test at each lane size in `cargo gpurun test`; `run` takes one");
    }
    if args.kernels.is_empty() && image.kernel("_start").is_none() && !image.tests().is_empty() {
        return run_test_image(args, &image);
    }
    let options = WorkerOptions {
        backend: kind,
        ..options(&args.device, args.emulation_checks)
    };
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
    let options = WorkerOptions {
        allow_system: args.allow_system,
        // The device reads our stdin: the worker reopens it through /proc (its own stdin is
        // its command pipe).
        stdin: Some(format!("/proc/{}/fd/0", std::process::id()).into()),
        ..options
    };
    let spec = worker_spec(&options, &args.image, sanitizer.clone())?;
    let worker = WorkerHandle::spawn(&spec, Duration::from_secs(120))
        .map_err(|error| start_failure(kind, &image, error.to_string()))?;
    let mut argv: Vec<Vec<u8>> = vec![args.image.as_os_str().as_encoded_bytes().to_vec()];
    argv.extend(args.args.iter().map(|arg| arg.as_encoded_bytes().to_vec()));
    let command = Command::RunMain {
        argv,
        envp: gpurun_hal::kernel_args::environment_strings(),
        shape: LaunchShape::grid(
            [args.blocks_x, args.blocks_y, args.blocks_z],
            [args.threads_x, args.threads_y, args.threads_z],
        ),
        kernels: args.kernels.clone(),
        print_resource_usage: args.print_resource_usage,
    };
    let timeout = match args.timeout {
        Some(secs) if secs.is_finite() && secs > 0.0 => Some(Duration::from_secs_f64(secs)),
        Some(secs) => bail!("--timeout must be a positive number of seconds, not {secs}"),
        None => None,
    };
    let timeout = match &sanitizer {
        Some(sanitizer) => timeout.map(|limit| sanitizer.time_limit(limit)),
        None => timeout,
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
        Event::Ready { .. }
        | Event::StartFailed { .. }
        | Event::DeviceTime(_)
        | Event::Ended(_)
        | Event::Refused { .. } => {}
    });
    let _ = std::io::stdout().flush();
    let sanitizer_found = match &sanitizer {
        Some(sanitizer) => report_sanitizer(&worker, sanitizer),
        None => false,
    };
    match end {
        Ok(LaunchEnd::Completed) if panicked => Ok(exit_code::code(exit_code::PANICKED)),
        Ok(LaunchEnd::Completed) if sanitizer_found => Ok(exit_code::code(exit_code::ERROR)),
        Ok(LaunchEnd::Completed) => Ok(exit_code::code(exit_code::SUCCESS)),
        Ok(LaunchEnd::Exited(code)) => Ok(exit_code::code(code)),
        Ok(LaunchEnd::Aborted) => {
            eprintln!("error: the device program aborted");
            let _ = std::io::stderr().flush();
            // Exit as a host abort would: killed by SIGABRT.
            std::process::abort()
        }
        Ok(LaunchEnd::Faulted(error)) => bail!("device fault: {error}"),
        Ok(LaunchEnd::TimedOut(after)) => {
            eprintln!(
                "error: the device program timed out after {}s",
                after.as_secs_f64()
            );
            Ok(exit_code::code(exit_code::TIMED_OUT))
        }
        Err(RunError::Refused(error)) => bail!("{error}"),
        Err(RunError::Died(how)) => bail!("the device program crashed: {how}"),
    }
}

/// Lets the sanitized worker of a program leave, prints compute-sanitizer's report (every
/// launch in it is the program's) and says whether it found errors.
fn report_sanitizer(worker: &WorkerHandle, sanitizer: &gpurun_runner::Sanitizer) -> bool {
    let ended = worker.close(REPORT_WITHIN);
    let report = ended.sanitizer_report.unwrap_or_default();
    let records = sanitizer::parse_report(&report);
    let found = records.iter().any(|record| record.on_device)
        || ended.status.and_then(|status| status.code()) == Some(ERROR_EXIT_CODE);
    if found {
        eprintln!("{}", report.trim_end());
        eprintln!("error: compute-sanitizer {} found errors", sanitizer.tool);
    }
    found
}

/// Runs a test image under libtest's command line (`target.runner` for test targets).
fn run_test_image(args: &RunArgs, image: &Image) -> anyhow::Result<ExitCode> {
    let mut argv: Vec<OsString> = vec![args.image.clone().into_os_string()];
    argv.extend(args.args.iter().cloned());
    let harness_args = match gpurun_harness::HarnessArgs::parse_args(argv) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    };
    let time_limit = args
        .timeout
        .filter(|secs| secs.is_finite() && *secs > 0.0)
        .map_or(DEFAULT_TEST_TIMEOUT, Duration::from_secs_f64);
    let plan = PlanOptions {
        flush_l2: args.flush_l2,
        ..plan_options(&args.device, &harness_args, args.emulation_checks)?
    }
    .plan_image(
        suite_name(&args.image),
        args.image.clone(),
        image,
        time_limit,
    )?;
    for note in &plan.notes {
        eprintln!("note: {note}");
    }
    let mut session = Session::new(&harness_args);
    let mut worst = exit_code::SUCCESS;
    for suite in plan.suites {
        let harness_args = HarnessArgs {
            suite_name: Some(suite.name),
            ..harness_args.clone()
        };
        worst = worst.max(session.run_to_exit_code(&harness_args, suite.tests, suite.executor));
    }
    worst = worst.max(session.finish_to_exit_code());
    Ok(exit_code::code(worst))
}

/// The suite a test image is (its JUnit `<testsuite>`, the key of its benchmarks in a
/// baseline): the crate's name in the image's file name, without a host library's `lib` and
/// the `-HASH` cargo gives a target under `deps/`, so that rebuilds keep the name.
fn suite_name(image: &std::path::Path) -> String {
    let stem = image.file_stem().map_or_else(
        || "gpurun".into(),
        |stem| stem.to_string_lossy().into_owned(),
    );
    let stem = match image.extension().is_some_and(|extension| extension == "so") {
        true => stem.strip_prefix("lib").unwrap_or(&stem).to_owned(),
        false => stem,
    };
    match stem.rsplit_once('-') {
        Some((name, hash))
            if !name.is_empty()
                && hash.len() == 16
                && hash.bytes().all(|byte| byte.is_ascii_hexdigit()) =>
        {
            name.to_owned()
        }
        _ => stem,
    }
}

#[cfg(test)]
mod tests {
    use super::suite_name;
    use std::path::Path;

    #[test]
    fn a_test_images_suite_is_its_crate_without_cargos_hash() {
        for (image, suite) in [
            ("target/debug/libbenches.so", "benches"),
            ("deps/real_kernels-0123456789abcdef.ptx", "real_kernels"),
            ("deps/libmy_lib-0123456789abcdef.so", "my_lib"),
            ("demo.elf", "demo"),
            ("not-a-hash.ptx", "not-a-hash"),
        ] {
            assert_eq!(suite_name(Path::new(image)), suite, "{image}");
        }
    }
}
