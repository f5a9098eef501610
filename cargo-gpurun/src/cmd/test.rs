//! `cargo gpurun test`: build the device crates, then run every image's `#[gpurun::test]`s
//! through the harness, one worker process per concurrent test.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use gpurun_build::coverage::{self, Profiles};
use gpurun_build::suite::{self, Suite};
use gpurun_build::{BuiltImage, Platform, TargetKind};
use gpurun_hal::select::BackendChoice;
use gpurun_hal::BackendKind;
use gpurun_harness::time::TestKind;
use gpurun_harness::variants::VariantExecutor;
use gpurun_harness::{Executor, HarnessArgs};
use gpurun_runner::placement;
use gpurun_runner::{SuiteWorkers, WorkerExecutor, WorkerOptions};

use super::device::{backend_choice, backend_for, options, sanitizer, DeviceArgs, LaneSizes};
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
    let choice = backend_choice(&args.device)?;
    if let Some(tool) = args.device.sanitize {
        // Before the build: a wrong target or a missing sanitizer is the first thing to fix.
        for name in &build_options.targets {
            if gpurun_build::arch::parse_target(name)? != Platform::Nvptx {
                bail!(
                    "--sanitize runs compute-sanitizer, which checks CUDA kernels only: build \
                     for nvptx, not `{name}`"
                );
            }
        }
        gpurun_runner::Sanitizer::find(tool)?;
    }
    let several_backends = matches!(choice, BackendChoice::Each(_) | BackendChoice::All);
    let all_lanes = args.device.lane_size == LaneSizes::All;
    // Each test then runs once per backend or lane size, under a label.
    let several = several_backends || all_lanes;
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
    let mut argv: Vec<OsString> = vec!["cargo-gpurun-test".into()];
    argv.extend(args.harness_args.iter().cloned());
    let mut harness_args = match HarnessArgs::parse_args(argv) {
        Ok(parsed) => parsed,
        Err(error) => error.exit(),
    };
    if bench.is_some() {
        // Beside the build's other outputs, as `target/criterion` is beside cargo's.
        harness_args.baseline_dir =
            Some(gpurun_build::target_dir(&build_options)?.join("gpurun-bench"));
    }
    let mut noted_flush = false;
    let cwd = std::env::current_dir().unwrap_or_default();
    let mut worst = exit_code::SUCCESS;
    let suites = suite::test_suites(images);
    // One harness run per suite; with several backends, one per suite of all of them, each
    // test once per backend (`[host] adds`, `[cuda] adds`).
    let groups: Vec<Vec<Suite>> = if several_backends {
        group_across_targets(suites)
    } else {
        suites.into_iter().map(|suite| vec![suite]).collect()
    };
    for group in groups {
        let Some(first) = group.first() else {
            continue;
        };
        let built = &first.built;
        let header = group
            .iter()
            .map(|suite| suite_header(&suite.built, &cwd))
            .collect::<Vec<_>>();
        eprintln!("{:>12} {}", "Running", merge_headers(&header));
        harness_args.suite_name = Some(first.name.clone());
        // libtest times a tests/ target's tests as integration tests.
        harness_args.test_kind = match built.kind {
            TargetKind::Test => TestKind::Integration,
            TargetKind::Lib | TargetKind::Bin | TargetKind::Example => TestKind::Unit,
        };
        let mut tests = Vec::new();
        let mut variants = VariantExecutor::new();
        let mut single = None;
        let mut broken = false;
        for suite in &group {
            // A broken image fails its own suite; the others still run and report.
            let (image_tests, kind) = match &suite.image {
                Ok(Some(image)) => (image.tests().to_vec(), backend_for(&choice, image)?),
                Ok(None) => (Vec::new(), BackendKind::for_platform(suite.built.target)),
                Err(error) => {
                    eprintln!("error: {error}");
                    broken = true;
                    continue;
                }
            };
            let timeout = suite::time_limit(&suite.built, harness_args.test_timeout)?;
            // The host emulation runs at each lane size asked for; a GPU has its own.
            let lane_sizes = match kind {
                BackendKind::Host => args.device.lane_size.each(),
                _ => vec![args.device.lane_size.first()],
            };
            // Only host workers load instrumented images.
            let env = match (&coverage, kind) {
                (Some(profiles), BackendKind::Host) => vec![(
                    gpurun_runner::worker::PROFILE_FILE_ENV.to_owned(),
                    profiles.pattern().display().to_string(),
                )],
                _ => Vec::new(),
            };
            let flush_l2 = bench.is_some_and(|bench| bench.flush_l2);
            if flush_l2 && !kind.flushes_l2() && !noted_flush {
                noted_flush = true;
                eprintln!(
                    "note: --flush-l2 has no effect on the {kind} backend: it has no device \
                     cache to flush, so every launch runs as the last one left the caches"
                );
            }
            for lane_size in lane_sizes {
                let executor = Arc::new(
                    test_executor(
                        &args.device,
                        kind,
                        &suite.built.path,
                        &harness_args,
                        (timeout, emulation_checks, lane_size),
                        env.clone(),
                    )?
                    .flush_l2(flush_l2),
                );
                if !several {
                    tests = image_tests.clone();
                    single = Some(executor);
                    continue;
                }
                // `[lanes=64] adds`, with several backends `[host lanes=64] adds`, `[cuda] adds`.
                let label = match (all_lanes && kind == BackendKind::Host, several_backends) {
                    (true, true) => format!("{} lanes={lane_size}", kind.name()),
                    (true, false) => format!("lanes={lane_size}"),
                    (false, _) => kind.name().to_string(),
                };
                tests.extend(variants.add(&label, &image_tests, executor));
            }
        }
        if broken {
            worst = worst.max(exit_code::ERROR);
            if !several || tests.is_empty() {
                continue;
            }
        }
        let executor: Arc<dyn Executor> = match single {
            Some(executor) => executor,
            None => Arc::new(variants),
        };
        let code = gpurun_harness::run_to_exit_code(&harness_args, tests, executor);
        // One `--junit` file for the whole run: later suites add theirs to it.
        harness_args.junit_append = true;
        if code != exit_code::SUCCESS {
            worst = worst.max(code);
        }
    }
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

/// The suites of several targets grouped by what they test (package, kind of target, name),
/// each group in target order, the groups in the order of their first suite.
fn group_across_targets(suites: Vec<Suite>) -> Vec<Vec<Suite>> {
    let mut groups: Vec<Vec<Suite>> = Vec::new();
    for suite in suites {
        let same = |other: &Suite| {
            (&other.built.package, other.built.kind, &other.built.name)
                == (&suite.built.package, suite.built.kind, &suite.built.name)
        };
        match groups
            .iter_mut()
            .find(|group| group.first().is_some_and(same))
        {
            Some(group) => group.push(suite),
            None => groups.push(vec![suite]),
        }
    }
    groups
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

/// The executor that runs an image's tests: one worker per device in use
/// ([`gpurun_runner::test_devices`]), sized so that the harness's test threads all have a slot;
/// under `--sanitize`, compute-sanitizer runs each test in a worker of its own.
pub fn test_executor(
    device: &DeviceArgs,
    kind: BackendKind,
    image: &Path,
    harness_args: &HarnessArgs,
    (timeout, emulation_checks, lane_size): (Duration, bool, u32),
    env: Vec<(String, String)>,
) -> anyhow::Result<WorkerExecutor> {
    let workers = SuiteWorkers {
        exe: worker_exe()?,
        prefix: WORKER_PREFIX,
        options: WorkerOptions {
            lane_size,
            ..options(device, kind, emulation_checks)
        },
        device: device.device,
        sanitizer: sanitizer(device, kind)?,
        env,
    };
    // A bad RUST_TEST_THREADS is reported by the harness itself.
    let concurrency = gpurun_harness::test_threads(harness_args).unwrap_or(1);
    Ok(workers.executor(image, concurrency, timeout)?)
}
