//! Reporters: each consumes the same per-test results. `console` prints libtest's output,
//! `junit` writes JUnit XML, `github` prints GitHub Actions annotations.

pub(crate) mod console;
pub(crate) mod github;
pub(crate) mod junit;

use std::time::Duration;

use crate::outcome::{LaunchEnd, TestDesc, TestEnd, TestRun, Verdict};

/// A test's result as the reporters see it.
#[derive(Debug, Clone)]
pub(crate) struct Reported {
    pub verdict: Verdict,
    /// What libtest would have captured: device stdout, then stderr, then the panic text. Empty
    /// with `--nocapture` (the output was printed when the test ended).
    pub captured: Vec<u8>,
    pub duration: Duration,
    /// The device's time of the test's launch, where measured.
    pub device_time: Option<Duration>,
    /// How `duration` compares with the time thresholds (`Fine` without `--report-time`).
    pub grade: crate::time::Grade,
    /// A measured benchmark's numbers ([`Verdict::Measured`]).
    pub bench: Option<crate::bench::BenchReport>,
}

/// Everything known about one reported test, for the reporters that need more than the console.
pub(crate) struct Finished<'a> {
    pub test: &'a TestDesc,
    /// `None` for an ignored test (it never ran).
    pub run: Option<&'a TestRun>,
    pub reported: &'a Reported,
    /// Rust-style panic text (empty when nothing panicked).
    pub panic_text: &'a str,
}

/// The failure's type attribute and one-line summary (CI dashboards show the first line).
pub(crate) fn failure_summary(finished: &Finished<'_>) -> (&'static str, String) {
    let message = match &finished.reported.verdict {
        Verdict::Failed { message } => message.as_deref(),
        Verdict::TimeLimitExceeded => return ("timeout", "time limit exceeded".to_owned()),
        _ => None,
    };
    let Some(run) = finished.run else {
        return ("failure", message.unwrap_or("test failed").to_owned());
    };
    if run.end.sanitizer_findings().is_some() {
        return ("sanitizer", message.unwrap_or("test failed").to_owned());
    }
    let kind = match &run.end {
        TestEnd::Ran {
            end, first_panic, ..
        } => match end {
            LaunchEnd::Completed => {
                return match (first_panic, message) {
                    (_, Some(message)) => ("should_panic", message.to_owned()),
                    (Some(report), None) => (
                        "panic",
                        format!(
                            "{} at {}:{}:{}",
                            report.message, report.file, report.line, report.column
                        ),
                    ),
                    (None, None) => ("panic", "test panicked".to_owned()),
                };
            }
            LaunchEnd::Faulted(_) => "fault",
            LaunchEnd::TimedOut(_) => "timeout",
            LaunchEnd::Exited(_) => "exit",
            LaunchEnd::Aborted => "abort",
        },
        TestEnd::NotRun(_) => "infrastructure",
    };
    (kind, message.unwrap_or("test failed").to_owned())
}
