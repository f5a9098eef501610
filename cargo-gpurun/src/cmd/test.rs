//! `cargo gpurun test`: build the device crates, then run every image's `#[gpurun::test]`s
//! through the harness, one worker process per concurrent test.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use gpurun_build::coverage::{self, Profiles};
use gpurun_build::{BuiltImage, Platform, TargetKind};
use gpurun_hal::select::BackendChoice;
use gpurun_harness::{HarnessArgs, Session};
use gpurun_runner::placement;
use gpurun_runner::suite::test_suites;
use gpurun_runner::{PlanOptions, Sanitizer};

use super::device::{backend_choice, options, DeviceArgs};
use super::worker::{worker_exe, WORKER_PREFIX};
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
    /// Measure which lines of the device crates the tests run, on the host emulation: the host
    /// images are built instrumented, and an lcov file and an HTML report are written under the
    /// target directory's `gpurun-coverage/` (GPU images, with several backends, run as usual).
    #[arg(long)]
    pub coverage: bool,
    /// Arguments for the test harness (libtest's: filters, --exact, --list, ...), after `--`.
    #[arg(last = true, allow_hyphen_values = true)]
    pub harness_args: Vec<OsString>,
}

pub fn run(args: &TestArgs) -> anyhow::Result<ExitCode> {
    run_suites(args, None)
}

/// What `cargo gpurun bench` adds to a test run (`--bench` is among the harness arguments).
#[derive(Debug, Clone, Copy)]
pub struct BenchRun {
    /// Flush the GPU's L2 cache before every timed launch (`--flush-l2`).
    pub flush_l2: bool,
}

/// Builds the device crates and runs each suite through the harness: their tests, or with
/// `bench` their benchmarks, each with the executors and baselines that needs.
pub fn run_suites(args: &TestArgs, bench: Option<BenchRun>) -> anyhow::Result<ExitCode> {
    if args.coverage && args.device.sanitize.is_some() {
        bail!("--coverage measures the host emulation and --sanitize runs CUDA: use one of them");
    }
    let mut build_options = args.cargo.build_options();
    // The build leaves the checks out of images it instruments for coverage (and says so); a
    // worker finds whether an image has them.
    let emulation_checks = build_options.emulation_checks;
    let mut argv: Vec<OsString> = vec!["cargo-gpurun-test".into()];
    argv.extend(args.harness_args.iter().cloned());
    let mut harness_args = match HarnessArgs::parse_args(argv) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    };
    if args.device.sanitize.is_some() {
        // Before the build: a wrong target is the first thing to fix.
        for name in &build_options.targets {
            if gpurun_build::arch::parse_target(name)? != Platform::Nvptx {
                bail!(
                    "--sanitize runs compute-sanitizer, which checks CUDA kernels only: build \
                     for nvptx, not `{name}`"
                );
            }
        }
    }
    // So is a missing compute-sanitizer, which this finds.
    let plan_options = plan_options(&args.device, &harness_args, emulation_checks)?;
    let choice = plan_options.choice.clone();
    let several_backends = matches!(choice, BackendChoice::Each(_) | BackendChoice::All);
    if build_options.targets.is_empty() && args.coverage && !several_backends {
        build_options.targets = vec![Platform::Host.short_name().to_owned()];
    } else if build_options.targets.is_empty() {
        let targets = placement::targets_for(&choice, args.device.require_gpu)?;
        build_options.targets = targets
            .iter()
            .map(|target| target.short_name().to_string())
            .collect();
    } else if several_backends {
        bail!("--backend with several backends picks the targets itself; leave out --target");
    } else if args.device.require_gpu {
        let targets = build_options
            .targets
            .iter()
            .map(|name| gpurun_build::arch::parse_target(name))
            .collect::<Result<Vec<_>, _>>()?;
        placement::require_gpu(&targets)?;
    }
    let images = build(&build_options, args.coverage)?;
    if args.no_run {
        return Ok(ExitCode::SUCCESS);
    }
    let coverage = match args.coverage {
        true => Some(Profiles::fresh(&gpurun_build::target_dir(&build_options)?)?),
        false => None,
    };
    let instrumented: Vec<BuiltImage> = match &coverage {
        Some(_) => images
            .iter()
            .filter(|image| image.target == Platform::Host)
            .cloned()
            .collect(),
        None => Vec::new(),
    };
    if bench.is_some() {
        // Beside the build's other outputs, as `target/criterion` is beside cargo's.
        harness_args.baseline_dir =
            Some(gpurun_build::target_dir(&build_options)?.join("gpurun-bench"));
    }
    // Only host workers load instrumented images.
    let host_env = match &coverage {
        Some(profiles) => vec![(
            gpurun_runner::worker::PROFILE_FILE_ENV.to_owned(),
            profiles.pattern().display().to_string(),
        )],
        None => Vec::new(),
    };
    let plan = PlanOptions {
        lane_sizes: args.device.lane_size.each(),
        host_env,
        flush_l2: bench.is_some_and(|bench| bench.flush_l2),
        ..plan_options
    }
    .plan(test_suites(images))?;
    for note in &plan.notes {
        eprintln!("note: {note}");
    }
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut worst = exit_code::SUCCESS;
    let mut session = Session::new(&harness_args);
    for suite in plan.suites {
        let header = suite
            .images
            .iter()
            .map(|built| suite_header(built, &cwd))
            .collect::<Vec<_>>();
        eprintln!("{:>12} {}", "Running", merge_headers(&header));
        for error in &suite.broken {
            eprintln!("error: {error}");
            worst = worst.max(exit_code::ERROR);
        }
        // A suite of one broken image has nothing to run.
        if !suite.broken.is_empty() && suite.tests.is_empty() {
            continue;
        }
        harness_args.suite_name = Some(suite.name);
        harness_args.test_kind = suite.test_kind;
        let code = session.run_to_exit_code(&harness_args, suite.tests, suite.executor);
        worst = worst.max(code);
    }
    worst = worst.max(session.finish_to_exit_code());
    if let Some(profiles) = coverage {
        let target_dir = gpurun_build::target_dir(&build_options)?;
        let out = coverage::root(&target_dir);
        let cwd = std::env::current_dir().unwrap_or_default();
        let shown = |path: &Path| {
            path.strip_prefix(&cwd)
                .unwrap_or(path)
                .display()
                .to_string()
        };
        match profiles.report(&instrumented.iter().collect::<Vec<_>>(), &out) {
            Ok(report) => {
                let percent = match report.lines {
                    0 => 0.0,
                    lines => 100.0 * report.lines_hit as f64 / lines as f64,
                };
                eprintln!(
                    "{:>12} {} of {} lines ({percent:.1}%) in {} file{}\n{:>12} {}\n{:>12} {}",
                    "Coverage",
                    report.lines_hit,
                    report.lines,
                    report.files,
                    if report.files == 1 { "" } else { "s" },
                    "lcov",
                    shown(&report.lcov),
                    "html",
                    shown(&report.html)
                );
            }
            Err(error) => {
                eprintln!("error: coverage: {error}");
                worst = worst.max(exit_code::ERROR);
            }
        }
    }
    Ok(exit_code::code(worst))
}

/// Builds the test images; with `coverage`, the host images instrumented and any GPU images
/// (several backends) as usual, in two builds.
fn build(options: &gpurun_build::BuildOptions, coverage: bool) -> anyhow::Result<Vec<BuiltImage>> {
    if !coverage {
        return Ok(gpurun_build::build_for_test(options)?);
    }
    let (hosts, gpus): (Vec<String>, Vec<String>) = options
        .targets
        .iter()
        .cloned()
        .partition(|name| Platform::parse(name).is_some_and(|target| !target.is_gpu()));
    if hosts.is_empty() {
        // Only GPU targets: nothing to measure, and the build says why.
        return Ok(gpurun_build::build_for_test(&gpurun_build::BuildOptions {
            coverage: true,
            ..options.clone()
        })?);
    }
    let mut images = Vec::new();
    if !gpus.is_empty() {
        images.extend(gpurun_build::build_for_test(&gpurun_build::BuildOptions {
            targets: gpus,
            ..options.clone()
        })?);
    }
    images.extend(gpurun_build::build_for_test(&gpurun_build::BuildOptions {
        targets: hosts,
        coverage: true,
        ..options.clone()
    })?);
    Ok(images)
}

/// cargo's `Running` header for one or several images of the same source: `unittests
/// src/lib.rs (target/debug/libfoo.so, target/nvptx64-nvidia-cuda/debug/foo.ptx)`.
fn merge_headers(headers: &[String]) -> String {
    let Some((first, rest)) = headers.split_first() else {
        return String::new();
    };
    let mut merged = first.clone();
    for header in rest {
        // Every header ends with `(PATH)`; the sources are the same.
        if let (Some(at), Some(open)) = (merged.rfind(')'), header.rfind('(')) {
            merged.insert_str(at, &format!(", {}", &header[open + 1..header.len() - 1]));
        }
    }
    merged
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

/// The plan's options `device` and the harness's arguments ask for, with one backend and lane
/// size; the caller sets those it has more of.
pub fn plan_options(
    device: &DeviceArgs,
    harness_args: &HarnessArgs,
    emulation_checks: bool,
) -> anyhow::Result<PlanOptions> {
    Ok(PlanOptions {
        exe: worker_exe()?,
        prefix: WORKER_PREFIX.iter().map(|arg| arg.to_string()).collect(),
        options: options(device, emulation_checks),
        device: device.device,
        choice: backend_choice(device)?,
        lane_sizes: vec![device.lane_size.first()],
        sanitizer: device.sanitize.map(Sanitizer::find).transpose()?,
        host_env: Vec::new(),
        // A bad RUST_TEST_THREADS is reported by the harness itself.
        concurrency: gpurun_harness::test_threads(harness_args).unwrap_or(1),
        time_limit: harness_args.test_timeout,
        flush_l2: false,
    })
}
