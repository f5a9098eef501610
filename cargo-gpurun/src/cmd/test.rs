//! `cargo gpurun test`: build the device crates, then run every image's `#[gpurun::test]`s
//! through the harness, one worker process per concurrent test.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use gpurun_hal::select::{self, BackendChoice};
use gpurun_hal::BackendKind;
use gpurun_harness::HarnessArgs;

use super::device::{backend_for, DeviceArgs};
use super::suite::{self, test_cases, test_executor, DEFAULT_TEST_TIMEOUT};
use crate::build::{self, BuildOptions, BuiltImage, TargetKind};
use crate::exit_code;

/// `cargo gpurun test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    #[command(flatten)]
    pub build: BuildOptions,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Build the test images but do not run them.
    #[arg(long)]
    pub no_run: bool,
    /// Arguments for the test harness (libtest's: filters, --exact, --list, ...), after `--`.
    #[arg(last = true, allow_hyphen_values = true)]
    pub harness_args: Vec<OsString>,
}

/// `test-timeout` from the image's package's `[package.metadata.gpurun]`, if set. Public for
/// `gpurun-test`, whose trials and launches honour it too.
pub fn test_timeout(image: &BuiltImage) -> anyhow::Result<Option<Duration>> {
    let Some(value) = image
        .gpurun_metadata
        .as_ref()
        .and_then(|table| table.get("test-timeout"))
    else {
        return Ok(None);
    };
    match value.as_f64() {
        Some(secs) if secs.is_finite() && secs > 0.0 => Ok(Some(Duration::from_secs_f64(secs))),
        _ => anyhow::bail!(
            "`[package.metadata.gpurun] test-timeout` of `{}` must be a positive number of \
             seconds, not {value}",
            image.package
        ),
    }
}

/// With no `--target`, build for the GPU that is present, else for the host emulation (and say
/// so in one line). Public for `gpurun-test`, which builds device crates the same way.
pub fn auto_target(choice: BackendChoice) -> &'static str {
    match choice {
        BackendChoice::Only(BackendKind::Cuda) => return "nvptx",
        BackendChoice::Only(BackendKind::Hsa) => return "amdgcn",
        BackendChoice::Only(BackendKind::Host | BackendKind::Scripted) => return "host",
        BackendChoice::Auto => {}
    }
    let mut reasons = Vec::new();
    for (kind, target) in [(BackendKind::Cuda, "nvptx"), (BackendKind::Hsa, "amdgcn")] {
        match select::backend(kind).devices() {
            Ok(devices) if !devices.is_empty() => return target,
            Ok(_) => reasons.push(format!("{kind}: no devices")),
            Err(error) => reasons.push(format!("{kind}: {error}")),
        }
    }
    eprintln!(
        "note: no GPU found ({}); running tests on the host emulation backend",
        reasons.join("; ")
    );
    "host"
}

pub fn run(args: &TestArgs) -> anyhow::Result<ExitCode> {
    let mut build_options = args.build.clone();
    if build_options.targets.is_empty() {
        build_options.targets = vec![auto_target(args.device.backend).to_string()];
    }
    let images = build::build_for_test(&build_options)?;
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
            Ok(Some(image)) => (test_cases(&image), backend_for(args.device.backend, &image)),
            Ok(None) => (Vec::new(), Ok(suite::backend_for_target(built.target))),
            Err(error) => {
                eprintln!("{:>12} {}", "Running", suite_header(built, &cwd));
                eprintln!("error: {error:#}");
                worst = worst.max(exit_code::ERROR);
                continue;
            }
        };
        let kind = kind?;
        eprintln!("{:>12} {}", "Running", suite_header(built, &cwd));
        let timeout = harness_args
            .test_timeout
            .or(test_timeout(built)?)
            .unwrap_or(DEFAULT_TEST_TIMEOUT);
        let executor = test_executor(&args.device, kind, &built.path, &harness_args, timeout)?;
        harness_args.suite_name = Some(suite.name.clone());
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
