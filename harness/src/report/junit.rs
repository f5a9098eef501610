//! JUnit XML (through `quick-junit`): one `<testsuite>` per suite of a run, one `<testcase>` per reported
//! test, failures with their message, the device's stdout/stderr kept as system-out/err.

use std::path::PathBuf;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase as JunitCase, TestCaseStatus, TestSuite};

use crate::bench::{rate, BenchReport, Unit};
use crate::outcome::{judge, panic_text, TestDesc, TestRun, Verdict};
use crate::report::{failure_summary, Finished, Reported};
use crate::variants::split_variant;

/// Collects test results and writes the report at the end of the run.
pub(crate) struct JunitReport {
    suite: TestSuite,
}

impl JunitReport {
    pub(crate) fn new(suite_name: &str) -> Self {
        Self {
            suite: TestSuite::new(suite_name),
        }
    }

    pub(crate) fn add(&mut self, finished: &Finished<'_>) {
        let status = match &finished.reported.verdict {
            Verdict::Passed | Verdict::Measured => TestCaseStatus::success(),
            Verdict::Ignored => {
                let mut status = TestCaseStatus::skipped();
                if let Some(reason) = &finished.test.ignore_reason {
                    status.set_message(reason.as_str());
                }
                status
            }
            Verdict::TimeLimitExceeded => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                let (kind, summary) = failure_summary(finished);
                status.set_type(kind);
                status.set_message(summary);
                status
            }
            Verdict::Failed { message } => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                let (kind, summary) = failure_summary(finished);
                status.set_type(kind);
                status.set_message(summary);
                let mut description = finished.panic_text.trim_start().to_owned();
                if let Some(message) = message {
                    description.push_str(message);
                }
                if !description.is_empty() {
                    status.set_description(description);
                }
                status
            }
        };
        let mut case = JunitCase::new(finished.test.name.as_str(), status);
        // Each backend's variants of a test (`[cuda] adds`) form a group of their own; measured
        // benchmarks one of theirs, as libtest's JUnit output has them (`benchmark::...`).
        let suite = match &finished.reported.bench {
            Some(_) => format!("benchmark::{}", self.suite.name.as_str()),
            None => self.suite.name.as_str().to_owned(),
        };
        match split_variant(&finished.test.name) {
            Some((label, _)) => case.set_classname(format!("{suite}::{label}")),
            None => case.set_classname(suite),
        };
        if let Some(bench) = &finished.reported.bench {
            for (name, value) in bench_properties(finished.test, bench) {
                case.add_property(quick_junit::Property::new(name, value));
            }
        }
        // The device's own time of the launch where the backend measured it (what a GPU test
        // is about, without the worker's overhead), the wall time kept as a property; else the
        // wall time.
        match finished.reported.device_time {
            Some(device) => {
                case.set_time(device);
                case.add_property(quick_junit::Property::new(
                    "wall_time",
                    format!("{:.6}", finished.reported.duration.as_secs_f64()),
                ));
            }
            None => {
                case.set_time(finished.reported.duration);
            }
        }
        if let Some(run) = finished.run {
            if !run.stdout.is_empty() {
                case.set_system_out_lossy(&run.stdout);
            }
            let mut stderr = run.stderr.clone();
            stderr.extend_from_slice(finished.panic_text.as_bytes());
            if !stderr.is_empty() {
                case.set_system_err_lossy(&stderr);
            }
        }
        self.suite.add_test_case(case);
    }

    /// This suite's `<testsuite>`, `elapsed` long.
    pub(crate) fn finish(mut self, elapsed: Duration) -> TestSuite {
        self.suite.set_time(elapsed);
        self.suite
    }
}

/// The JUnit report of a whole run: one `<testsuite>` per suite, written once at the end.
pub(crate) struct JunitRun {
    path: PathBuf,
    report: Report,
}

impl JunitRun {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            report: Report::new("gpurun"),
        }
    }

    pub(crate) fn add(&mut self, suite: TestSuite) {
        let total = self.report.time.unwrap_or_default() + suite.time.unwrap_or_default();
        self.report.set_time(total);
        self.report.add_test_suite(suite);
    }

    /// Writes the XML to its path.
    pub(crate) fn write(self) -> Result<(), JunitError> {
        let xml = self.report.to_string().map_err(JunitError::Serialize)?;
        std::fs::write(&self.path, xml).map_err(|source| JunitError::Write {
            path: self.path,
            source,
        })
    }
}

/// A JUnit report put together outside a harness run, from tests that something else ran (a
/// host crate's trials, through libtest-mimic): a `<testsuite>` per suite, each case written
/// as a harness run writes it.
pub struct JunitFile {
    run: JunitRun,
}

impl JunitFile {
    /// A report to be written to `path`.
    pub fn new(path: PathBuf) -> JunitFile {
        JunitFile {
            run: JunitRun::new(path),
        }
    }

    /// Adds the suite `name`: each test with how it ran, judged by the harness's rules, or
    /// `None` for one reported as ignored.
    pub fn add_suite<'a>(
        &mut self,
        name: &str,
        tests: impl IntoIterator<Item = (&'a TestDesc, Option<&'a TestRun>)>,
    ) {
        let mut suite = JunitReport::new(name);
        let mut elapsed = Duration::ZERO;
        for (test, run) in tests {
            let reported = Reported {
                verdict: match run {
                    Some(run) => judge(test, &run.end),
                    None => Verdict::Ignored,
                },
                captured: Vec::new(),
                duration: run.map_or(Duration::ZERO, |run| run.duration),
                device_time: run.and_then(|run| run.device_time),
                grade: crate::time::Grade::Fine,
                bench: None,
            };
            let panic_text = run
                .map(|run| panic_text(test, &run.end))
                .unwrap_or_default();
            elapsed += reported.duration;
            suite.add(&Finished {
                test,
                run,
                reported: &reported,
                panic_text: &panic_text,
            });
        }
        self.run.add(suite.finish(elapsed));
    }

    /// Writes the report.
    pub fn write(self) -> Result<(), JunitError> {
        self.run.write()
    }
}

/// A measured benchmark's numbers as JUnit properties: nanoseconds per iteration (median,
/// libtest's spread, the median absolute deviation), the rate, the samples, the iterations per
/// launch, the outliers and the timer.
fn bench_properties(test: &TestDesc, bench: &BenchReport) -> Vec<(&'static str, String)> {
    let summary = &bench.measured.summary;
    let mut properties = vec![
        ("median_ns", format!("{}", summary.median)),
        ("deviation_ns", format!("{}", summary.deviation)),
        ("median_abs_dev_ns", format!("{}", summary.median_abs_dev)),
    ];
    match rate(summary, test.bench.and_then(|b| b.throughput)) {
        Some((rate, Unit::MegaBytes)) => properties.push(("mb_per_second", rate.to_string())),
        Some((rate, Unit::MegaElements)) => properties.push(("melem_per_second", rate.to_string())),
        None => {}
    }
    properties.extend([
        ("samples", summary.samples.to_string()),
        ("iterations", bench.measured.iterations.to_string()),
        ("outliers", summary.outliers.to_string()),
        ("timer", bench.measured.timer.clone()),
    ]);
    if let Some(comparison) = &bench.comparison {
        properties.extend([
            ("baseline", comparison.baseline.clone()),
            ("change", format!("{}", comparison.change)),
            ("p_value", format!("{}", comparison.p_value)),
            ("verdict", comparison.verdict.key().to_owned()),
        ]);
    }
    properties
}

/// Why the JUnit report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum JunitError {
    /// quick-junit could not serialize the report.
    #[error("failed to serialize the JUnit report: {0}")]
    Serialize(#[source] quick_junit::SerializeError),
    /// The file could not be written.
    #[error("failed to write the JUnit report to `{}`: {source}", path.display())]
    Write {
        /// Where it was to be written.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
