//! JUnit XML (through `quick-junit`): one `<testsuite>` per run, one `<testcase>` per reported
//! test, failures with their message, the device's stdout/stderr kept as system-out/err.

use std::path::Path;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase as JunitCase, TestCaseStatus, TestSuite};

use crate::outcome::Verdict;
use crate::report::{failure_summary, Finished};
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
            Verdict::Passed => TestCaseStatus::success(),
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
        // Each backend's variants of a test (`[cuda] adds`) form a group of their own.
        match split_variant(&finished.test.name) {
            Some((label, _)) => {
                case.set_classname(format!("{}::{label}", self.suite.name.as_str()))
            }
            None => case.set_classname(self.suite.name.as_str()),
        };
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

    /// Writes the XML to `path`; with `append`, adds this suite to the report already there.
    pub(crate) fn write(
        mut self,
        path: &Path,
        elapsed: Duration,
        append: bool,
    ) -> Result<(), JunitError> {
        self.suite.set_time(elapsed);
        let mut report = match append {
            true => Self::read(path)?,
            false => Report::new("gpurun"),
        };
        let total = report.time.unwrap_or_default() + elapsed;
        report.set_time(total);
        report.add_test_suite(self.suite);
        let xml = report.to_string().map_err(JunitError::Serialize)?;
        std::fs::write(path, xml).map_err(|source| JunitError::Write {
            path: path.to_owned(),
            source,
        })
    }
}

impl JunitReport {
    fn read(path: &Path) -> Result<Report, JunitError> {
        let file = std::fs::File::open(path).map_err(|source| JunitError::Read {
            path: path.to_owned(),
            source,
        })?;
        Report::deserialize(std::io::BufReader::new(file)).map_err(|source| JunitError::Parse {
            path: path.to_owned(),
            message: source.to_string(),
        })
    }
}

/// Why the JUnit report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum JunitError {
    /// quick-junit could not serialize the report.
    #[error("failed to serialize the JUnit report: {0}")]
    Serialize(#[source] quick_junit::SerializeError),
    /// The report of earlier suites, to be added to, could not be read.
    #[error("failed to read the JUnit report `{}` to add to it: {source}", path.display())]
    Read {
        /// Where it was.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The report of earlier suites is not JUnit XML that quick-junit reads back.
    #[error("the JUnit report `{}` to add to is not valid: {message}", path.display())]
    Parse {
        /// Where it was.
        path: std::path::PathBuf,
        /// What the parser said.
        message: String,
    },
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
