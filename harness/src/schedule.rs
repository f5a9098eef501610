//! Runs the selected tests through an [`Executor`] and feeds every result to the reporters as it
//! arrives. With `--test-threads N > 1`, N worker threads call the executor at once; all printing
//! happens on the calling thread, one test at a time, so output is never mixed between tests.

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::num::NonZeroUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bench::baseline::{compare, Baseline, BaselineError, Saved};
use crate::bench::{measure, BenchOptions, BenchReport, Measured, Unmeasured};
use crate::command_line::{ColorChoice, Format, HarnessArgs};
use crate::exit_code::ExitCode;
use crate::filter::select;
use crate::outcome::{judge, panic_text, Executor, TestDesc, TestEnd, TestRun, Verdict};
use crate::report::console::{log_line, Console, ConsoleOptions};
use crate::report::github::{annotation, step_summary, BenchRow};
use crate::report::junit::{JunitError, JunitReport, JunitRun};
use crate::report::{failure_summary, Finished, Reported};
use crate::time::{Grade, Threshold};
use crate::variants::Differences;

/// The counts of a finished run; [`exit_code`](Self::exit_code) is libtest's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Conclusion {
    /// Tests that passed.
    pub num_passed: u64,
    /// Tests that failed.
    pub num_failed: u64,
    /// Tests reported as ignored.
    pub num_ignored: u64,
    /// Benchmarks measured (`--bench`).
    pub num_measured: u64,
    /// Tests removed by filters, `--skip`, `--ignored` or `--partition`.
    pub num_filtered_out: u64,
}

impl Conclusion {
    /// Whether any test failed.
    pub fn has_failed(&self) -> bool {
        self.num_failed > 0
    }

    /// [`ExitCode::TESTS_FAILED`] (101) if any test failed, else [`ExitCode::OK`].
    pub fn exit_code(&self) -> i32 {
        if self.has_failed() {
            ExitCode::TESTS_FAILED
        } else {
            ExitCode::OK
        }
    }
}

/// Why the harness could not complete a run (test failures are not errors: see [`Conclusion`]).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Writing the test output failed (a closed pipe, a full disk).
    #[error("failed to write the test output: {0}")]
    Output(#[source] io::Error),
    /// `--logfile` could not be created or written.
    #[error("failed to write the log file `{}`: {source}", path.display())]
    Logfile {
        /// The log file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// `--junit` could not be written.
    #[error(transparent)]
    Junit(#[from] JunitError),
    /// The GitHub step summary could not be appended to.
    #[error("failed to append to the GitHub step summary `{}`: {source}", path.display())]
    StepSummary {
        /// The summary file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A benchmark baseline could not be read or written.
    #[error(transparent)]
    Baseline(#[from] BaselineError),
    /// `RUST_TEST_THREADS` is set but is not a positive integer.
    #[error("RUST_TEST_THREADS is `{0}`, should be a positive integer")]
    TestThreadsEnv(String),
}

impl HarnessError {
    /// The process exit code for this error ([`ExitCode::HARNESS_ERROR`]).
    pub fn exit_code(&self) -> i32 {
        ExitCode::HARNESS_ERROR
    }
}

/// Lists or runs `tests` as libtest would with `args`, printing to stdout (and device stderr,
/// with `--nocapture`, to stderr), any error to stderr: a [`Session`] of one suite. Returns the
/// process exit code.
pub fn run_to_exit_code(
    args: &HarnessArgs,
    tests: Vec<TestDesc>,
    executor: Arc<dyn Executor>,
) -> i32 {
    let mut session = Session::new(args);
    let code = session.run_to_exit_code(args, tests, executor);
    code.max(session.finish_to_exit_code())
}

/// One run of several suites, as `cargo test` runs its test binaries one after another: each
/// suite is reported as it runs (its `running N tests` and summary), and what covers the whole
/// run, the `--junit` report with a `<testsuite>` per suite, is written once, by
/// [`Session::finish`].
pub struct Session {
    junit: Option<JunitRun>,
}

impl Session {
    /// A run whose whole-run reports go where `args` says (`--junit`).
    pub fn new(args: &HarnessArgs) -> Session {
        Session {
            junit: args.junit.clone().map(JunitRun::new),
        }
    }

    /// Runs one suite, printing to stdout and stderr, any error to stderr (see
    /// [`run_to_exit_code`]); `args.suite_name` names it. Returns its exit code.
    pub fn run_to_exit_code(
        &mut self,
        args: &HarnessArgs,
        tests: Vec<TestDesc>,
        executor: Arc<dyn Executor>,
    ) -> i32 {
        let mut stdout = io::stdout();
        let mut stderr = io::stderr();
        let color = match args.color.unwrap_or(ColorChoice::Auto) {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        };
        match self.run_with_output(args, tests, executor, color, &mut stdout, &mut stderr) {
            Ok(conclusion) => conclusion.exit_code(),
            Err(error) => print_error(error),
        }
    }

    /// Writes the whole run's reports.
    pub fn finish(self) -> Result<(), HarnessError> {
        if let Some(junit) = self.junit {
            junit.write()?;
        }
        Ok(())
    }

    /// [`Session::finish`], printing any error to stderr: 0, or the error's exit code.
    pub fn finish_to_exit_code(self) -> i32 {
        match self.finish() {
            Ok(()) => ExitCode::OK,
            Err(error) => print_error(error),
        }
    }

    /// [`Session::run_to_exit_code`] with explicit output streams and colour decision, and the
    /// suite's conclusion or error (for tests and embedding).
    pub fn run_with_output(
        &mut self,
        args: &HarnessArgs,
        tests: Vec<TestDesc>,
        executor: Arc<dyn Executor>,
        color: bool,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Conclusion, HarnessError> {
        // libtest pads a measured benchmark's name to the longest benchmark name, filtered or not.
        let bench_name_width = args.bench.then(|| {
            tests
                .iter()
                .filter(|test| test.bench.is_some())
                .map(|test| test.name.len())
                .max()
                .unwrap_or(0)
        });
        let mut selection = select_where_runnable(args, tests, executor.as_ref());
        if args.bench && !args.test {
            // libtest's `--bench` without `--test`: the tests are reported as ignored.
            for test in selection.tests.iter_mut().filter(|t| t.bench.is_none()) {
                test.ignored = true;
            }
        }
        let format = args.effective_format();
        let mut logfile = match &args.logfile {
            Some(path) => Some(LogFile::create(path.clone())?),
            None => None,
        };
        // Listing needs no thread count, so a bad RUST_TEST_THREADS only matters for a run.
        let threads = if args.list { 1 } else { test_threads(args)? };
        // --ensure-time implies --report-time, as in libtest.
        let report_time = args.report_time || args.ensure_time;
        let threshold = report_time.then(|| args.time_thresholds.of(args.test_kind));
        let mut console = Console::new(
            out,
            ConsoleOptions {
                format,
                color,
                multithreaded: threads > 1,
                report_time,
                show_output: args.show_output,
                bench_name_width,
            },
        );

        if args.list {
            console
                .list(&selection.tests)
                .map_err(HarnessError::Output)?;
            if let Some(log) = &mut logfile {
                for test in &selection.tests {
                    log.write(&format!("test {}\n", test.name))?;
                }
            }
            return Ok(Conclusion::default());
        }

        // The baseline to compare with is read before anything runs: a missing one is the first
        // thing to fix.
        let baseline = match (&args.baseline, args.bench) {
            (Some(name), true) => {
                Some((name.as_str(), Baseline::require(&args.baselines(), name)?))
            }
            _ => None,
        };
        let suite = args.suite_name.as_deref().unwrap_or("gpurun");
        let started = Instant::now();
        console
            .run_start(selection.tests.len(), selection.filtered_out)
            .map_err(HarnessError::Output)?;
        let mut sinks = Sinks {
            console,
            err,
            logfile,
            junit: self.junit.as_ref().map(|_| JunitReport::new(suite)),
            annotations: Vec::new(),
            failure_reasons: Vec::new(),
            bench_rows: Vec::new(),
            nocapture: args.nocapture,
            github: args.github_actions,
            threshold,
            ensure_time: args.ensure_time,
            differences: Differences::default(),
        };
        // With --bench, the benchmarks are measured after the tests, one at a time, as in libtest;
        // without it they run among the tests, once each.
        let (tests, benches): (Vec<TestDesc>, Vec<TestDesc>) = match args.bench {
            true => selection
                .tests
                .iter()
                .cloned()
                .partition(|test| test.bench.is_none()),
            false => (selection.tests.clone(), Vec::new()),
        };
        run_tests(
            &tests,
            executor.as_ref(),
            threads,
            SLOW_TEST_WARNING,
            &mut sinks,
        )?;
        let options = args.bench_options();
        let thresholds = args.change_thresholds();
        let mut to_save = Vec::new();
        for bench in &benches {
            sinks
                .console
                .test_start(bench)
                .map_err(HarnessError::Output)?;
            if bench.ignored {
                sinks.report(bench, None)?;
                continue;
            }
            let (run, measured) = run_bench(executor.as_ref(), bench, &options);
            if let Some(Ok(measured)) = &measured {
                to_save.push((bench.name.clone(), Saved::from(measured)));
            }
            let comparison = |measured: &Measured| {
                let (name, baseline) = baseline.as_ref()?;
                let saved = baseline.get(suite, &bench.name)?;
                Some(compare(name, &saved.samples, &measured.samples, thresholds))
            };
            sinks.report_bench(bench, run, measured, comparison)?;
        }
        if let (Some(name), true) = (&args.save_baseline, args.bench) {
            Baseline::save(&args.baselines(), name, suite, &to_save)?;
        }
        let elapsed = started.elapsed();
        sinks
            .console
            .run_finish(elapsed)
            .map_err(HarnessError::Output)?;
        if let Some(line) = sinks.differences.summary() {
            // After the summary line; in json mode stdout stays one JSON event per line.
            let result = if format == Format::Json {
                sinks.err.write_all(line.as_bytes())
            } else {
                sinks.console.write_raw(line.as_bytes())
            };
            result.map_err(HarnessError::Output)?;
        }

        let counts = sinks.console.counts;
        if let (Some(suite), Some(junit)) = (sinks.junit.take(), &mut self.junit) {
            junit.add(suite.finish(elapsed));
        }
        if !sinks.annotations.is_empty() {
            // Workflow commands must start a line; after the summary nothing else is printed. In
            // json mode stdout must stay parseable, and the runner reads commands on stderr too.
            let text = sinks.annotations.concat();
            let result = if format == Format::Json {
                sinks.err.write_all(text.as_bytes())
            } else {
                sinks.console_write(text.as_bytes())
            };
            result.map_err(HarnessError::Output)?;
        }
        if let Some(path) = &args.github_step_summary {
            let text = step_summary(
                suite,
                &counts,
                elapsed,
                &sinks.failure_reasons,
                &sinks.bench_rows,
            );
            // Appended: every test binary of a CI step adds its own section.
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut file| file.write_all(text.as_bytes()))
                .map_err(|source| HarnessError::StepSummary {
                    path: path.clone(),
                    source,
                })?;
        }
        Ok(Conclusion {
            num_passed: counts.passed as u64,
            num_failed: counts.failed as u64,
            num_ignored: counts.ignored as u64,
            num_measured: counts.measured as u64,
            num_filtered_out: counts.filtered_out as u64,
        })
    }
}

/// Prints `error` on stderr and returns its exit code.
fn print_error(error: HarnessError) -> i32 {
    eprintln!("error: {error}");
    error.exit_code()
}

/// How many tests run at once: `--test-threads`, else `RUST_TEST_THREADS`, else one per CPU,
/// as libtest decides it.
pub fn test_threads(args: &HarnessArgs) -> Result<usize, HarnessError> {
    if let Some(n) = args.test_threads {
        return Ok(n.get());
    }
    if let Some(value) = std::env::var_os("RUST_TEST_THREADS") {
        let text = value.to_string_lossy().into_owned();
        return text
            .parse::<NonZeroUsize>()
            .map(NonZeroUsize::get)
            .map_err(|_| HarnessError::TestThreadsEnv(text));
    }
    Ok(std::thread::available_parallelism().map_or(1, NonZeroUsize::get))
}

/// Why a `gpu_only` test is not run where the executor emulates the device.
pub const NEEDS_A_GPU: &str = "needs a GPU";

/// [`select`], with every `gpu_only` test that would not run on a GPU here reported as ignored
/// ([`NEEDS_A_GPU`]), whatever `--ignored` and `--include-ignored` say about ignored tests.
fn select_where_runnable(
    args: &HarnessArgs,
    mut tests: Vec<TestDesc>,
    executor: &dyn Executor,
) -> crate::filter::Selection {
    let mut needs_gpu = std::collections::HashSet::new();
    for test in &mut tests {
        if test.gpu_only && !executor.runs_on_gpu(test) {
            test.ignored = true;
            test.ignore_reason = Some(NEEDS_A_GPU.to_owned());
            needs_gpu.insert(test.name.clone());
        }
    }
    let mut selection = select(args, tests);
    for test in &mut selection.tests {
        if needs_gpu.contains(&test.name) {
            test.ignored = true;
        }
    }
    selection
}

/// Calls the executor; a panic inside it fails this test only.
fn run_one(executor: &dyn Executor, test: &TestDesc) -> TestRun {
    run_guarded(|| executor.run(test))
}

/// `run`, with a panic inside it turned into a test that did not run (it fails that test
/// only, not the harness).
fn run_guarded(run: impl FnOnce() -> TestRun) -> TestRun {
    let started = Instant::now();
    catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("non-string panic payload");
        TestRun {
            end: TestEnd::NotRun(format!("the executor panicked: {message}")),
            stdout: Vec::new(),
            stderr: Vec::new(),
            duration: started.elapsed(),
            device_time: None,
        }
    })
}

/// Measures `bench` through the executor; a panic inside it fails this benchmark only.
fn run_bench(
    executor: &dyn Executor,
    bench: &TestDesc,
    options: &BenchOptions,
) -> (TestRun, Option<Result<Measured, Unmeasured>>) {
    let mut measured = None;
    let run = run_guarded(|| {
        executor.bench(bench, &mut |launches| {
            measured = Some(measure(launches, options));
        })
    });
    (run, measured)
}

/// libtest warns about a test still running after this long; this crate's own tests wait less.
const SLOW_TEST_WARNING: Duration = Duration::from_secs(if cfg!(test) { 1 } else { 60 });

/// Hands tests to `threads` workers in name order, reporting ignored tests when their turn comes
/// and every result as soon as it arrives (libtest's scheduling). Even with one thread the
/// executor runs on a worker, so the reporting thread can warn about a test running longer than
/// `warn_after`, as libtest does.
fn run_tests(
    tests: &[TestDesc],
    executor: &dyn Executor,
    threads: usize,
    warn_after: Duration,
    sinks: &mut Sinks<'_, '_>,
) -> Result<(), HarnessError> {
    let runnable = tests.iter().filter(|t| !t.ignored).count();
    std::thread::scope(|scope| {
        let (job_tx, job_rx) = crossbeam_channel::unbounded::<usize>();
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<(usize, TestRun)>();
        for _ in 0..threads.min(runnable) {
            let job_rx = job_rx.clone();
            let done_tx = done_tx.clone();
            scope.spawn(move || {
                for index in job_rx {
                    let run = run_one(executor, &tests[index]);
                    if done_tx.send((index, run)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(done_tx);
        let mut in_flight = InFlight::default();
        for (index, test) in tests.iter().enumerate() {
            // An ignored test also waits for a free slot, as in libtest: with one thread it is
            // reported only after the test before it.
            while in_flight.started.len() >= threads {
                in_flight.receive_one(tests, &done_rx, warn_after, sinks)?;
            }
            if test.ignored {
                sinks
                    .console
                    .test_start(test)
                    .map_err(HarnessError::Output)?;
                sinks.report(test, None)?;
                continue;
            }
            sinks
                .console
                .test_start(test)
                .map_err(HarnessError::Output)?;
            // The workers outlive this loop, so the channel is open.
            if job_tx.send(index).is_err() {
                break;
            }
            in_flight.started.push((index, Instant::now(), false));
        }
        drop(job_tx);
        while !in_flight.started.is_empty() {
            in_flight.receive_one(tests, &done_rx, warn_after, sinks)?;
        }
        Ok(())
    })
}

/// The tests handed to workers and not yet reported: index, start, whether already warned about.
#[derive(Default)]
struct InFlight {
    started: Vec<(usize, Instant, bool)>,
}

impl InFlight {
    /// Waits for the next result and reports it, warning about slow tests meanwhile.
    fn receive_one(
        &mut self,
        tests: &[TestDesc],
        done_rx: &crossbeam_channel::Receiver<(usize, TestRun)>,
        warn_after: Duration,
        sinks: &mut Sinks<'_, '_>,
    ) -> Result<(), HarnessError> {
        loop {
            let next_warning = self
                .started
                .iter()
                .filter(|(_, _, warned)| !warned)
                .map(|(_, start, _)| *start + warn_after)
                .min();
            let received = match next_warning {
                Some(deadline) => done_rx.recv_deadline(deadline),
                None => done_rx
                    .recv()
                    .map_err(|_| crossbeam_channel::RecvTimeoutError::Disconnected),
            };
            match received {
                Ok((index, run)) => {
                    self.started.retain(|(i, _, _)| *i != index);
                    return sinks.report(&tests[index], Some(run));
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    let now = Instant::now();
                    for (index, start, warned) in &mut self.started {
                        if !*warned && now >= *start + warn_after {
                            *warned = true;
                            sinks
                                .console
                                .slow_test(&tests[*index], warn_after)
                                .map_err(HarnessError::Output)?;
                        }
                    }
                }
                // Only reachable if every worker died, which `run_one`'s catch_unwind prevents.
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(HarnessError::Output(io::Error::other(
                        "all test threads exited early",
                    )))
                }
            }
        }
    }
}

struct LogFile {
    path: PathBuf,
    file: File,
}

impl LogFile {
    fn create(path: PathBuf) -> Result<Self, HarnessError> {
        match File::create(&path) {
            Ok(file) => Ok(Self { path, file }),
            Err(source) => Err(HarnessError::Logfile { path, source }),
        }
    }

    fn write(&mut self, line: &str) -> Result<(), HarnessError> {
        self.file
            .write_all(line.as_bytes())
            .map_err(|source| HarnessError::Logfile {
                path: self.path.clone(),
                source,
            })
    }
}

/// Where each result goes.
struct Sinks<'w, 'e> {
    console: Console<'w>,
    err: &'e mut dyn Write,
    logfile: Option<LogFile>,
    junit: Option<JunitReport>,
    annotations: Vec<String>,
    /// Failed tests and one-line reasons, for the step summary.
    failure_reasons: Vec<(String, String)>,
    /// Measured benchmarks, for the step summary.
    bench_rows: Vec<BenchRow>,
    nocapture: bool,
    github: bool,
    /// The time thresholds, with `--report-time` or `--ensure-time`.
    threshold: Option<Threshold>,
    ensure_time: bool,
    /// How each variant of a test (`[host] adds`) ended, for the differential line.
    differences: Differences,
}

impl Sinks<'_, '_> {
    fn console_write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.console.write_raw(bytes)
    }

    /// Reports a benchmark that was measured: its numbers when every launch went well, else
    /// its failure, judged like a test's.
    fn report_bench(
        &mut self,
        test: &TestDesc,
        run: TestRun,
        measured: Option<Result<Measured, Unmeasured>>,
        comparison: impl FnOnce(&Measured) -> Option<crate::bench::baseline::Comparison>,
    ) -> Result<(), HarnessError> {
        let failed = |message: &str| Verdict::Failed {
            message: Some(message.to_owned()),
        };
        let outcome = match (judge(test, &run.end), measured) {
            (Verdict::Passed, Some(Ok(measured))) => Ok(BenchReport {
                comparison: comparison(&measured),
                measured,
            }),
            (Verdict::Passed, Some(Err(Unmeasured::NoDeviceTime))) => Err(failed(
                "the backend measured no device time for the launches: nothing to time the \
                 benchmark with",
            )),
            (Verdict::Passed, Some(Err(Unmeasured::Failed))) => {
                Err(failed("a launch of the benchmark failed"))
            }
            (Verdict::Passed, None) => Err(failed("the executor did not measure the benchmark")),
            (verdict, _) => Err(verdict),
        };
        match outcome {
            Ok(report) => self.deliver(test, Some(run), Verdict::Measured, Some(report)),
            Err(verdict) => self.deliver(test, Some(run), verdict, None),
        }
    }

    fn report(&mut self, test: &TestDesc, run: Option<TestRun>) -> Result<(), HarnessError> {
        let verdict = match &run {
            None => Verdict::Ignored,
            Some(run) => {
                let grade = self
                    .threshold
                    .map_or(Grade::Fine, |threshold| threshold.grade(run.duration));
                match judge(test, &run.end) {
                    Verdict::Passed if self.ensure_time && grade == Grade::Critical => {
                        Verdict::TimeLimitExceeded
                    }
                    verdict => verdict,
                }
            }
        };
        self.deliver(test, run, verdict, None)
    }

    /// Hands one reported result to every reporter.
    fn deliver(
        &mut self,
        test: &TestDesc,
        run: Option<TestRun>,
        verdict: Verdict,
        bench: Option<BenchReport>,
    ) -> Result<(), HarnessError> {
        let (reported, panic) = match &run {
            None => (
                Reported {
                    verdict,
                    captured: Vec::new(),
                    duration: Duration::ZERO,
                    device_time: None,
                    grade: Grade::Fine,
                    bench: None,
                },
                String::new(),
            ),
            Some(run) => {
                let grade = self
                    .threshold
                    .map_or(Grade::Fine, |threshold| threshold.grade(run.duration));
                let panic = panic_text(test, &run.end);
                let captured = if self.nocapture {
                    // Shown now, right after the test, as libtest shows uncaptured output while
                    // the test runs; the failures section then has only the `note:` lines.
                    self.console_write(&run.stdout)
                        .and_then(|()| self.err.write_all(&run.stderr))
                        .and_then(|()| self.err.write_all(panic.as_bytes()))
                        .and_then(|()| self.err.flush())
                        .map_err(HarnessError::Output)?;
                    Vec::new()
                } else {
                    let mut captured = run.stdout.clone();
                    captured.extend_from_slice(&run.stderr);
                    captured.extend_from_slice(panic.as_bytes());
                    captured
                };
                (
                    Reported {
                        verdict,
                        captured,
                        duration: run.duration,
                        device_time: run.device_time,
                        grade,
                        bench,
                    },
                    panic,
                )
            }
        };
        self.console
            .test_result(test, &reported)
            .map_err(HarnessError::Output)?;
        if let Some(log) = &mut self.logfile {
            log.write(&log_line(test, &reported))?;
        }
        let finished = Finished {
            test,
            run: run.as_ref(),
            reported: &reported,
            panic_text: &panic,
        };
        if let Some(junit) = &mut self.junit {
            junit.add(&finished);
        }
        if run.is_some() {
            // A measured benchmark ran as it should, as a passed test did.
            let fine = reported.verdict.passed() || reported.verdict == Verdict::Measured;
            self.differences.record(&test.name, fine);
        }
        if let Some(bench) = &reported.bench {
            self.bench_rows.push(BenchRow {
                name: test.name.clone(),
                summary: bench.measured.summary,
                throughput: test.bench.and_then(|b| b.throughput),
                timer: bench.measured.timer.clone(),
                comparison: bench.comparison.clone(),
            });
        }
        if reported.verdict.failed() {
            self.failure_reasons
                .push((test.name.clone(), failure_summary(&finished).1));
        }
        if self.github {
            if let Some(line) = annotation(&finished) {
                self.annotations.push(line);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::passed;

    /// Output that signals once libtest's slow-test warning has been written.
    struct WarningWatch {
        out: Vec<u8>,
        warned: Option<crossbeam_channel::Sender<()>>,
    }

    impl Write for WarningWatch {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.out.extend_from_slice(buf);
            let text = String::from_utf8_lossy(&self.out);
            if text.contains("has been running for over") || text.contains("\"event\": \"timeout\"")
            {
                if let Some(warned) = self.warned.take() {
                    let _ = warned.send(());
                }
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// "slow" ends only after its warning was written, so the warning is certain however late
    /// a loaded machine schedules the reporting thread.
    struct SlowUntilWarned(crossbeam_channel::Receiver<()>);

    impl Executor for SlowUntilWarned {
        fn run(&self, test: &TestDesc) -> TestRun {
            if test.name == "slow" {
                // Bounded: a harness that never warns fails the assertions instead of hanging.
                let _ = self.0.recv_timeout(Duration::from_secs(60));
            }
            passed("")
        }
    }

    #[test]
    fn a_long_test_gets_libtests_warning_once_and_still_reports() {
        for (threads, format) in [("1", "pretty"), ("2", "pretty"), ("1", "json")] {
            let mut args =
                HarnessArgs::parse_args(["bin", "--test-threads", threads, "--format", format])
                    .unwrap();
            // Never touch the real CI's step summary from a test.
            args.github_step_summary = None;
            let (warned_tx, warned_rx) = crossbeam_channel::bounded(1);
            let mut out = WarningWatch {
                out: Vec::new(),
                warned: Some(warned_tx),
            };
            let mut err = Vec::new();
            let tests = vec![TestDesc::new("fast"), TestDesc::new("slow")];
            let executor: Arc<dyn Executor> = Arc::new(SlowUntilWarned(warned_rx));
            let conclusion = Session::new(&args)
                .run_with_output(&args, tests, executor, false, &mut out, &mut err)
                .unwrap();
            assert_eq!(conclusion.num_passed, 2);
            let out = String::from_utf8(out.out).unwrap();
            let warning = if format == "json" {
                "{ \"type\": \"test\", \"event\": \"timeout\", \"name\": \"slow\" }\n"
            } else {
                "test slow has been running for over 1 seconds\n"
            };
            assert_eq!(out.matches(warning).count(), 1, "{out}");
            if threads == "1" && format == "pretty" {
                // As in libtest: the warning lands after the pending `test slow ... `.
                assert!(out
                    .contains("test slow ... test slow has been running for over 1 seconds\nok\n"));
            }
        }
    }
}
