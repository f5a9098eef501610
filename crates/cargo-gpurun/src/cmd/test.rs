//! `cargo gpurun test`: build the device crates, then run every image's `#[gpurun::test]`s
//! through the harness, one worker process per concurrent test.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use gpurun_build::suite::{self, DEFAULT_TEST_TIMEOUT};
use gpurun_build::{BuiltImage, DeviceTarget, TargetKind};
use gpurun_hal::BackendKind;
use gpurun_harness::time::TestKind;
use gpurun_harness::HarnessArgs;
use gpurun_runner::{WorkerExecutor, WorkerOptions};

use super::device::{backend_for, options, DeviceArgs};
use super::worker::worker_spec;
use crate::cli::CargoArgs;
use crate::exit_code;

/// `cargo gpurun test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub cargo: CargoArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Build the test images but do not run them.
    #[arg(long)]
    pub no_run: bool,
    /// Arguments for the test harness (libtest's: filters, --exact, --list, ...), after `--`.
    #[arg(last = true, allow_hyphen_values = true)]
    pub harness_args: Vec<OsString>,
}

pub fn run(args: &TestArgs) -> anyhow::Result<ExitCode> {
    let mut build_options = args.cargo.build_options();
    if build_options.targets.is_empty() {
        let target = suite::auto_target(args.device.backend, args.device.require_gpu)?;
        build_options.targets = vec![target.short_name().to_string()];
    } else if args.device.require_gpu {
        let targets = build_options
            .targets
            .iter()
            .map(|name| DeviceTarget::parse(name))
            .collect::<Result<Vec<_>, _>>()?;
        suite::require_gpu(&targets)?;
    }
    let images = gpurun_build::build_for_test(&build_options)?;
    if args.no_run {
        return Ok(ExitCode::SUCCESS);
    }
    let mut argv: Vec<OsString> = vec!["cargo-gpurun-test".into()];
    argv.extend(args.harness_args.iter().cloned());
    let mut harness_args = match HarnessArgs::parse_args(argv) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    };
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut worst = exit_code::SUCCESS;
    for suite in suite::test_suites(images) {
        let built = &suite.built;
        // A broken image fails its own suite; the others still run and report.
        let (tests, kind) = match suite.image {
            Ok(Some(image)) => (
                image.tests().to_vec(),
                backend_for(args.device.backend, &image),
            ),
            Ok(None) => (Vec::new(), Ok(suite::backend_for_target(built.target))),
            Err(error) => {
                eprintln!("{:>12} {}", "Running", suite_header(built, &cwd));
                eprintln!("error: {error}");
                worst = worst.max(exit_code::ERROR);
                continue;
            }
        };
        let kind = kind?;
        eprintln!("{:>12} {}", "Running", suite_header(built, &cwd));
        let timeout = harness_args
            .test_timeout
            .or(suite::test_timeout(built)?)
            .unwrap_or(DEFAULT_TEST_TIMEOUT);
        let executor = test_executor(&args.device, kind, &built.path, &harness_args, timeout)?;
        harness_args.suite_name = Some(suite.name.clone());
        // libtest times a tests/ target's tests as integration tests.
        harness_args.test_kind = match built.kind {
            TargetKind::Test => TestKind::Integration,
            TargetKind::Lib | TargetKind::Bin | TargetKind::Example => TestKind::Unit,
        };
        let code = gpurun_harness::run_to_exit_code(&harness_args, tests, Arc::new(executor));
        // One `--junit` file for the whole run: later suites add theirs to it.
        harness_args.junit_append = true;
        if code != exit_code::SUCCESS {
            worst = worst.max(code);
        }
    }
    Ok(exit_code::code(worst))
}

/// What cargo prints after `Running`: `unittests src/lib.rs (target/debug/libfoo.so)` for a
/// lib, bin or example, `tests/foo.rs (target/debug/deps/foo-1234)` for a tests/ target; the
/// image path relative to `cwd` where it is below it.
fn suite_header(built: &BuiltImage, cwd: &Path) -> String {
    let path = built.path.strip_prefix(cwd).unwrap_or(&built.path);
    let prefix = match built.kind {
        TargetKind::Test => "",
        TargetKind::Lib | TargetKind::Bin | TargetKind::Example => "unittests ",
    };
    format!("{prefix}{} ({})", built.source.display(), path.display())
}

/// The executor that runs an image's tests: one worker per device in use
/// ([`gpurun_runner::test_devices`]), sized so that the harness's test threads all have a slot.
pub fn test_executor(
    device: &DeviceArgs,
    kind: BackendKind,
    image: &Path,
    harness_args: &HarnessArgs,
    timeout: Duration,
) -> anyhow::Result<WorkerExecutor> {
    let ordinals = gpurun_runner::test_devices(device.device, kind)?;
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
