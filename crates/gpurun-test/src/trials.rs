//! A device crate's `#[gpurun::test]`s as libtest-mimic trials, each run in a worker process
//! through the runner, judged by the harness's rules: every test suite `cargo gpurun test`
//! would run, spread over every device present.

use std::collections::HashMap;
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use gpurun_hal::BackendKind;
use gpurun_harness::bench::{measure, BenchOptions, Unmeasured};
use gpurun_harness::outcome::{judge, panic_text, Verdict};
use gpurun_harness::schedule::NEEDS_A_GPU;
use gpurun_harness::{Executor, HarnessArgs, JunitFile, TestDesc, TestRun};
use gpurun_runner::suite::test_suites;
use gpurun_runner::{sanitizer, PlanOptions, PlannedSuite, Sanitizer, WorkerOptions};
use libtest_mimic::{Arguments, Completion, Failed, Measurement, Trial};

use crate::{DeviceCrate, Error};

/// The first argument that makes a trial binary a worker process instead of a test run:
/// [`DeviceCrate::libtest_mimic_main`] starts its own executable with it, so no installed
/// `cargo-gpurun` is needed.
pub const WORKER_FLAG: &str = "--gpurun-worker";

impl DeviceCrate {
    /// The whole `main` of a `harness = false` test target: a worker when started as one (see
    /// [`WORKER_FLAG`]), else builds the crate and runs its device tests as trials with
    /// libtest's command line, and `cargo gpurun test`'s `--partition` and `--junit PATH`. A
    /// build failure is one `error:` line and exit status 101.
    pub fn libtest_mimic_main(&self) -> ExitCode {
        self.libtest_mimic_main_with(Vec::new())
    }

    /// [`DeviceCrate::libtest_mimic_main`] with trials of your own beside the device crate's:
    /// host-driven benchmarks ([`crate::bench::trial`]) in a `harness = false` bench target,
    /// say.
    pub fn libtest_mimic_main_with(&self, extra: Vec<Trial>) -> ExitCode {
        let argv: Vec<OsString> = std::env::args_os().collect();
        if argv.get(1).is_some_and(|arg| arg == WORKER_FLAG) {
            let status = gpurun_runner::worker::main(&argv[2..]);
            return ExitCode::from(u8::try_from(status).unwrap_or(1));
        }
        // `--junit PATH` and `--partition KIND:K/N` are ours (libtest-mimic has neither): the
        // harness reads them, libtest-mimic the rest.
        let (ours, theirs) = reporter_arguments(argv);
        let reports = match HarnessArgs::parse_args(ours) {
            Ok(parsed) => parsed,
            Err(error) => error.exit(),
        };
        let arguments = Arguments::from_iter(theirs);
        let recorder = reports.junit.as_ref().map(|_| Recorder::default());
        let partition = Partition {
            arguments: &arguments,
            reports: &reports,
        };
        let trials = self.trials_with(&arguments, Some(partition), recorder.clone());
        match trials {
            Ok(mut trials) => {
                trials.extend(extra);
                let conclusion = libtest_mimic::run(&arguments, trials);
                if let (Some(path), Some(recorder)) = (&reports.junit, recorder) {
                    if let Err(error) = recorder.junit(path.clone()).write() {
                        eprintln!("error: {error}");
                        return ExitCode::from(101);
                    }
                }
                conclusion.exit_code()
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::from(101)
            }
        }
    }

    /// The crate's device tests as trials, to run with `libtest_mimic::run` (alone or beside
    /// trials of your own). The process must handle [`WORKER_FLAG`] as
    /// [`DeviceCrate::libtest_mimic_main`] does, since the workers are this executable.
    ///
    /// The suites are those `cargo gpurun test` runs (`gpurun_runner::suite::test_suites`),
    /// planned as it plans them (`gpurun_runner::plan`):
    /// the lib's tests, then every `harness = false` tests/ target's and every example's. A
    /// trial is named by the test's path (`tests::adds`); when more than one suite has tests,
    /// each trial also carries its suite's name (the package for the lib, else the target's)
    /// as libtest-mimic's kind: `[integration] adds`, which filters, `--exact` and nextest
    /// match as a whole. With several backends (`GPURUN_BACKEND=host,cuda` or `all`) the crate
    /// is built for each and every test is a trial per backend, named `[host] adds`. Each
    /// suite's trials run on every device the backend sees, each test on the least busy one.
    ///
    /// With `GPURUN_SANITIZE=TOOL` (as `cargo gpurun test --sanitize TOOL`) the trials run on
    /// CUDA, each test in a worker of its own under compute-sanitizer; a test its report
    /// names fails.
    pub fn trials(&self, arguments: &Arguments) -> Result<Vec<Trial>, Error> {
        self.trials_with(arguments, None, None)
    }

    /// [`DeviceCrate::trials`], each suite cut to one `partition` of its tests, and each run
    /// kept by `recorder` for the JUnit report.
    fn trials_with(
        &self,
        arguments: &Arguments,
        partition: Option<Partition<'_>>,
        recorder: Option<Recorder>,
    ) -> Result<Vec<Trial>, Error> {
        // Before the build: a missing compute-sanitizer is the first thing to fix.
        let sanitizer = sanitizer::requested_by_env()?
            .map(Sanitizer::find)
            .transpose()?;
        let images = self.build_for_test()?;
        let plan = self
            .plan_options(arguments, sanitizer)?
            .plan(test_suites(images))
            .map_err(|error| Error::Devices(format!("{error:#}")))?;
        if let Some(error) = plan.suites.iter().flat_map(|suite| &suite.broken).next() {
            return Err(Error::Image {
                path: error.path.clone(),
                message: format!("{:#}", error.source),
            });
        }
        // Suites are named when more than one has tests.
        let with_tests: Vec<PlannedSuite> = plan
            .suites
            .into_iter()
            .filter(|suite| !suite.tests.is_empty())
            .collect();
        let name_suites = with_tests.len() > 1;
        let nocapture = arguments.nocapture;
        let mut trials = Vec::new();
        for suite in with_tests {
            let kind = if name_suites {
                suite.name.clone()
            } else {
                String::new()
            };
            let tests = match &partition {
                Some(partition) => partition.of(suite.tests),
                None => suite.tests,
            };
            if let Some(recorder) = &recorder {
                recorder.suite(&suite.name, &tests);
            }
            let executor = suite.executor;
            let suite_name = suite.name;
            trials.extend(tests.into_iter().map(|test| {
                let ignored = test.ignored;
                let name = test.name.clone();
                let executor = Arc::clone(&executor);
                if test.gpu_only && !executor.runs_on_gpu(&test) {
                    // Ignored, and not run even under --include-ignored, as `cargo gpurun test`.
                    return Trial::ignorable_test(name, || {
                        Ok(Completion::ignored_with(NEEDS_A_GPU))
                    })
                    .with_kind(kind.clone())
                    .with_ignored_flag(true);
                }
                let run = {
                    let (recorder, suite_name) = (recorder.clone(), suite_name.clone());
                    move |executor: &dyn Executor, test: &TestDesc| {
                        let run = executor.run(test);
                        if let Some(recorder) = &recorder {
                            recorder.ran(&suite_name, test, &run);
                        }
                        trial_result(test, run, nocapture)
                    }
                };
                if test.bench.is_some() {
                    // `cargo bench` measures it; `cargo test` runs it once, as a test.
                    return Trial::bench(name, move |test_mode| match test_mode {
                        true => run(&*executor, &test).map(|()| None),
                        false => measure_trial(&*executor, &test, nocapture).map(Some),
                    })
                    .with_kind(kind.clone())
                    .with_ignored_flag(ignored);
                }
                Trial::test(name, move || run(&*executor, &test))
                    .with_kind(kind.clone())
                    .with_ignored_flag(ignored)
            }));
        }
        Ok(trials)
    }
}

impl DeviceCrate {
    /// The plan's options for this crate's trials: every device its backend sees (`cargo gpurun
    /// test`'s choice), this executable started with [`WORKER_FLAG`] as the workers, warps of
    /// the crate's lane size on the host emulation, with one seed per process.
    fn plan_options(
        &self,
        arguments: &Arguments,
        sanitizer: Option<Sanitizer>,
    ) -> Result<PlanOptions, Error> {
        let exe = std::env::current_exe().map_err(|error| Error::Image {
            path: self.dir.clone(),
            message: format!("cannot find this test executable to start workers: {error}"),
        })?;
        let concurrency = arguments.test_threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        });
        Ok(PlanOptions {
            exe,
            prefix: vec![WORKER_FLAG.to_owned()],
            options: WorkerOptions {
                backend: BackendKind::Host,
                device: 0,
                lane_size: self.lane_size,
                // An image built without the checks (`GPURUN_EMULATION_CHECKS=off`) has none
                // to run.
                emulation_checks: true,
                emulation_seed: Some(emulation_seed()?),
                stack_size: None,
                allow_system: false,
                stdin: None,
            },
            device: None,
            choice: self
                .backend_choice(crate::BuildMode::Test)
                .map_err(Error::Devices)?,
            lane_sizes: vec![self.lane_size],
            sanitizer,
            host_env: Vec::new(),
            concurrency,
            time_limit: self.timeout,
            flush_l2: false,
        })
    }
}

/// Splits a trial binary's command line into ours (`--junit PATH`, `--partition KIND:K/N`,
/// also with `=`) and libtest-mimic's (the rest), each with the program name first.
fn reporter_arguments(argv: Vec<OsString>) -> (Vec<OsString>, Vec<OsString>) {
    const OURS: [&str; 2] = ["--junit", "--partition"];
    let mut args = argv.into_iter();
    let program = args.next().unwrap_or_default();
    let (mut ours, mut theirs) = (vec![program.clone()], vec![program]);
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if OURS.contains(&text.as_ref()) {
            ours.push(arg);
            ours.extend(args.next());
        } else if OURS
            .iter()
            .any(|flag| text.starts_with(&format!("{flag}=")))
        {
            ours.push(arg);
        } else {
            theirs.push(arg);
        }
    }
    (ours, theirs)
}

/// `--partition`, applied to each suite's tests as `cargo gpurun test` applies it: over the
/// tests that run, by name, with libtest-mimic's `--ignored`/`--include-ignored` in mind.
#[derive(Clone, Copy)]
struct Partition<'a> {
    arguments: &'a Arguments,
    reports: &'a HarnessArgs,
}

impl Partition<'_> {
    fn of(&self, tests: Vec<TestDesc>) -> Vec<TestDesc> {
        if self.reports.partition.is_none() {
            return tests;
        }
        let args = HarnessArgs {
            ignored: self.arguments.ignored,
            include_ignored: self.arguments.include_ignored,
            ..self.reports.clone()
        };
        let selected: std::collections::HashSet<String> =
            gpurun_harness::filter::select(&args, tests.clone())
                .tests
                .into_iter()
                .map(|test| test.name)
                .collect();
        // Kept as they were (libtest-mimic applies `--ignored` itself), only the shard's.
        tests
            .into_iter()
            .filter(|test| selected.contains(&test.name))
            .collect()
    }
}

/// The runs of trials, for `--junit`: each suite's tests, and how those that ran ended.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Recorded>>);

#[derive(Default)]
struct Recorded {
    suites: Vec<(String, Vec<TestDesc>)>,
    runs: HashMap<(String, String), TestRun>,
}

impl Recorder {
    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn suite(&self, name: &str, tests: &[TestDesc]) {
        self.lock().suites.push((name.to_owned(), tests.to_vec()));
    }

    fn ran(&self, suite: &str, test: &TestDesc, run: &TestRun) {
        let key = (suite.to_owned(), test.name.clone());
        self.lock().runs.insert(key, run.clone());
    }

    /// The report: every test that ran, and the ignored ones that did not as skipped (tests
    /// libtest-mimic's filters left out are not in it, as with libtest's JUnit).
    fn junit(&self, path: std::path::PathBuf) -> JunitFile {
        let recorded = self.lock();
        let mut junit = JunitFile::new(path);
        for (suite, tests) in &recorded.suites {
            let cases = tests.iter().filter_map(|test| {
                match recorded.runs.get(&(suite.clone(), test.name.clone())) {
                    Some(run) => Some((test, Some(run))),
                    None => test.ignored.then_some((test, None)),
                }
            });
            junit.add_suite(suite, cases);
        }
        junit
    }
}

/// The host emulation's seed of this test process: `GPURUN_EMULATION_SEED`, else one drawn
/// once, which every failing trial's output names.
fn emulation_seed() -> Result<u64, Error> {
    static FRESH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    match std::env::var(gpurun_hal::host::EMULATION_SEED_ENV) {
        Ok(text) => gpurun_hal::host::parse_seed(&text).map_err(|error| {
            Error::Devices(format!("{}: {error}", gpurun_hal::host::EMULATION_SEED_ENV))
        }),
        Err(_) => Ok(*FRESH.get_or_init(gpurun_hal::host::fresh_seed)),
    }
}

/// Measures one device benchmark (`cargo bench`) as `cargo gpurun bench` does, with its
/// default times: libtest-mimic's measurement, or the failure of the launch that stopped it.
fn measure_trial(
    executor: &dyn Executor,
    test: &TestDesc,
    nocapture: bool,
) -> Result<Measurement, Failed> {
    let mut measured = None;
    let run = executor.bench(test, &mut |launches| {
        measured = Some(measure(launches, &BenchOptions::default()));
    });
    trial_result(test, run, nocapture)?;
    match measured {
        Some(Ok(measured)) => Ok(crate::bench::measurement(&measured)),
        Some(Err(Unmeasured::NoDeviceTime)) => {
            Err("the backend measured no device time for the launches".into())
        }
        Some(Err(Unmeasured::Failed)) => Err("a launch of the benchmark failed".into()),
        None => Err("the benchmark was not measured".into()),
    }
}

/// The trial's result for a test's run: a failure message with what libtest would show for it
/// (device output, panic text with location, and the harness's note).
fn trial_result(test: &TestDesc, run: TestRun, nocapture: bool) -> Result<(), Failed> {
    let mut output = run.stdout;
    output.extend_from_slice(&run.stderr);
    let output = String::from_utf8_lossy(&output).into_owned();
    // With --nocapture (nextest always passes it) the output goes out as it would uncaptured;
    // the failure message keeps what says why: the panic with its location, and the note.
    if nocapture {
        eprint!("{output}");
    }
    let note = match judge(test, &run.end) {
        // `judge` applies no time limits (libtest-mimic has none), ran tests are not ignored,
        // and it measures nothing.
        Verdict::Passed | Verdict::TimeLimitExceeded | Verdict::Ignored | Verdict::Measured => {
            return Ok(())
        }
        Verdict::Failed { message } => message,
    };
    let mut message = if nocapture { String::new() } else { output };
    message.push_str(&panic_text(test, &run.end));
    if let Some(note) = note {
        if !message.is_empty() && !message.ends_with('\n') {
            message.push('\n');
        }
        message.push_str(&format!("note: {note}"));
    }
    let message = message.trim();
    if message.is_empty() {
        return Err("the device test failed".into());
    }
    Err(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpurun_hal::select::BackendChoice;
    use gpurun_harness::testing::{panic_report, panicked_end, CLEAN};
    use gpurun_harness::{LaunchEnd, ShouldPanic, TestEnd, TestRun};
    use std::time::Duration;

    /// Runs one device test as a trial does.
    fn run_trial(executor: &dyn Executor, test: &TestDesc, nocapture: bool) -> Result<(), Failed> {
        trial_result(test, executor.run(test), nocapture)
    }

    /// Plays back one fixed run.
    struct Fixed(TestRun);

    impl Executor for Fixed {
        fn run(&self, _test: &TestDesc) -> TestRun {
            self.0.clone()
        }
    }

    fn run(end: TestEnd, stdout: &str) -> Fixed {
        Fixed(TestRun {
            end,
            stdout: stdout.as_bytes().to_vec(),
            stderr: Vec::new(),
            duration: Duration::ZERO,
            device_time: None,
        })
    }

    fn panicked(message: &str) -> TestEnd {
        panicked_end(panic_report(message, 7, [0, 0, 0], [0, 0, 0]), 1)
    }

    fn failure(executor: &Fixed, test: &TestDesc) -> String {
        run_trial(executor, test, false)
            .expect_err("the trial should fail")
            .message()
            .map(str::to_owned)
            .unwrap_or_default()
    }

    #[test]
    fn a_panic_fails_with_output_message_and_location() {
        let test = TestDesc::new("tests::t");
        let message = failure(&run(panicked("boom"), "printed\n"), &test);
        assert!(message.starts_with("printed\n"), "{message}");
        assert!(
            message.contains("panicked at src/lib.rs:7:5:\nboom"),
            "{message}"
        );
        assert!(run_trial(&run(CLEAN, "ok\n"), &test, false).is_ok());
    }

    #[test]
    fn should_panic_follows_the_harness_rules() {
        let expected = TestDesc {
            should_panic: ShouldPanic::Expected("boom".into()),
            ..TestDesc::new("tests::t")
        };
        assert!(run_trial(&run(panicked("a boom"), ""), &expected, false).is_ok());
        let message = failure(&run(panicked("other"), ""), &expected);
        assert!(
            message.contains("note: panic did not contain expected string"),
            "{message}"
        );
        let message = failure(&run(CLEAN, ""), &expected);
        assert_eq!(message, "note: test did not panic as expected");
    }

    #[test]
    fn trials_run_at_the_crate_lane_size_on_the_backend_it_is_built_for() {
        let plan = DeviceCrate::new("kernels")
            .lane_size(64)
            .target("host")
            .plan_options(&Arguments::default(), None)
            .unwrap();
        assert_eq!(plan.lane_sizes, [64]);
        assert_eq!(plan.options.lane_size, 64);
        assert_eq!(plan.prefix, [WORKER_FLAG]);
        assert_eq!(plan.choice, BackendChoice::Only(BackendKind::Host));
    }

    #[test]
    fn junit_and_partition_are_taken_out_of_the_command_line() {
        let argv = |args: &[&str]| -> Vec<OsString> { args.iter().map(OsString::from).collect() };
        let (ours, theirs) = reporter_arguments(argv(&[
            "gpu",
            "--junit",
            "out.xml",
            "saxpy",
            "--partition=hash:2/3",
            "--exact",
        ]));
        assert_eq!(
            ours,
            argv(&["gpu", "--junit", "out.xml", "--partition=hash:2/3"])
        );
        assert_eq!(theirs, argv(&["gpu", "saxpy", "--exact"]));
        let reports = HarnessArgs::parse_args(ours).unwrap();
        assert_eq!(reports.junit, Some("out.xml".into()));
        assert!(reports.partition.is_some());
    }

    #[test]
    fn faults_and_timeouts_fail_with_a_note() {
        let test = TestDesc::new("tests::t");
        let fault = TestEnd::launch(LaunchEnd::Faulted("signal 11".into()));
        assert_eq!(
            failure(&run(fault, ""), &test),
            "note: device fault: signal 11"
        );
        let timeout = TestEnd::launch(LaunchEnd::TimedOut(Duration::from_secs(2)));
        assert_eq!(
            failure(&run(timeout, ""), &test),
            "note: test timed out after 2s"
        );
    }
}
