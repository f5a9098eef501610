//! libtest's console output in its three formats (pretty, terse, json), byte for byte where we
//! can, plus `--list` and the `--logfile` log. Everything is written through one writer and
//! flushed after each event, so a later hang or crash cannot lose earlier results.

use std::io::{self, Write};
use std::time::Duration;

use crate::bench::{bench_line, rate, BenchReport, Unit};
use crate::command_line::Format;
use crate::outcome::Verdict;
use crate::outcome::{ShouldPanic, TestDesc};
use crate::report::Reported;
use crate::time::Grade;

/// libtest's terse mode prints a progress count after this many characters.
const TERSE_MAX_COLUMN: usize = 88;

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";
const RESET: &str = "\x1b[0m";

/// Counts for the summary line.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Counts {
    pub passed: usize,
    pub failed: usize,
    pub ignored: usize,
    pub measured: usize,
    pub filtered_out: usize,
}

/// The console reporter: one per run, driven by the runner from a single thread.
pub(crate) struct Console<'w> {
    out: &'w mut dyn Write,
    format: Format,
    color: bool,
    multithreaded: bool,
    report_time: bool,
    show_output: bool,
    /// Benchmarks are measured (`--bench`): their names are padded to this width, as libtest
    /// pads a benchmark's name to the longest one's.
    bench_name_width: Option<usize>,
    total: usize,
    terse_count: usize,
    terse_column: usize,
    pub(crate) counts: Counts,
    failures: Vec<(String, Vec<u8>)>,
    /// Tests that failed `--ensure-time` only: libtest lists them in a section of their own.
    time_failures: Vec<(String, Vec<u8>)>,
    successes: Vec<(String, Vec<u8>)>,
    ignored_with_reason: Vec<(String, String)>,
}

/// How the console is set up for one run.
pub(crate) struct ConsoleOptions {
    pub format: Format,
    pub color: bool,
    pub multithreaded: bool,
    pub report_time: bool,
    pub show_output: bool,
    /// `Some(width)` with `--bench`: the longest benchmark name of the suite.
    pub bench_name_width: Option<usize>,
}

impl<'w> Console<'w> {
    pub(crate) fn new(out: &'w mut dyn Write, options: ConsoleOptions) -> Self {
        Self {
            out,
            format: options.format,
            color: options.color,
            multithreaded: options.multithreaded,
            report_time: options.report_time,
            show_output: options.show_output,
            bench_name_width: options.bench_name_width,
            total: 0,
            terse_count: 0,
            terse_column: 0,
            counts: Counts::default(),
            failures: Vec::new(),
            time_failures: Vec::new(),
            successes: Vec::new(),
            ignored_with_reason: Vec::new(),
        }
    }

    /// Writes bytes as they are (uncaptured device output, annotations).
    pub(crate) fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.out.flush()
    }

    fn plain(&mut self, text: &str) -> io::Result<()> {
        self.out.write_all(text.as_bytes())?;
        self.out.flush()
    }

    fn colored(&mut self, text: &str, color: &str) -> io::Result<()> {
        if self.color {
            write!(self.out, "{color}{text}{RESET}")?;
        } else {
            self.out.write_all(text.as_bytes())?;
        }
        self.out.flush()
    }

    /// `running N tests`, or the json `started` event.
    pub(crate) fn run_start(&mut self, test_count: usize, filtered_out: usize) -> io::Result<()> {
        self.total = test_count;
        self.counts.filtered_out = filtered_out;
        match self.format {
            Format::Pretty | Format::Terse => {
                let noun = if test_count == 1 { "test" } else { "tests" };
                self.plain(&format!("\nrunning {test_count} {noun}\n"))
            }
            Format::Json => self.plain(&format!(
                "{{ \"type\": \"suite\", \"event\": \"started\", \"test_count\": {test_count} }}\n"
            )),
        }
    }

    fn test_line(&self, test: &TestDesc) -> String {
        // libtest shows the mode of a test that will actually run.
        if !test.ignored && test.should_panic != ShouldPanic::No {
            format!("test {} - should panic ... ", test.name)
        } else {
            format!("test {} ... ", self.padded(test))
        }
    }

    /// A measured benchmark's name padded as libtest pads it; any other name as it is.
    fn padded(&self, test: &TestDesc) -> String {
        match (self.bench_name_width, test.bench) {
            (Some(width), Some(_)) => format!("{:<width$}", test.name),
            _ => test.name.clone(),
        }
    }

    /// Whether `test` is a benchmark to measure, whose terse line libtest writes in full.
    fn measures(&self, test: &TestDesc) -> bool {
        self.bench_name_width.is_some() && test.bench.is_some()
    }

    /// Called when a test is handed out (or, for an ignored test, about to be reported).
    pub(crate) fn test_start(&mut self, test: &TestDesc) -> io::Result<()> {
        match self.format {
            Format::Pretty if !self.multithreaded => self.plain(&self.test_line(test)),
            Format::Terse if !self.multithreaded && self.measures(test) => {
                self.plain(&self.test_line(test))
            }
            Format::Pretty | Format::Terse => Ok(()),
            Format::Json => self.plain(&format!(
                "{{ \"type\": \"test\", \"event\": \"started\", \"name\": \"{}\" }}\n",
                json_escape(&test.name)
            )),
        }
    }

    /// libtest's warning about a test that is still running.
    pub(crate) fn slow_test(&mut self, test: &TestDesc, after: Duration) -> io::Result<()> {
        match self.format {
            Format::Pretty | Format::Terse => self.plain(&format!(
                "test {} has been running for over {} seconds\n",
                test.name,
                after.as_secs()
            )),
            Format::Json => self.plain(&format!(
                "{{ \"type\": \"test\", \"event\": \"timeout\", \"name\": \"{}\" }}\n",
                json_escape(&test.name)
            )),
        }
    }

    /// Reports one finished (or ignored) test.
    pub(crate) fn test_result(&mut self, test: &TestDesc, reported: &Reported) -> io::Result<()> {
        match reported.verdict {
            Verdict::Passed => self.counts.passed += 1,
            Verdict::Failed { .. } | Verdict::TimeLimitExceeded => self.counts.failed += 1,
            Verdict::Ignored => self.counts.ignored += 1,
            Verdict::Measured => self.counts.measured += 1,
        }
        match self.format {
            Format::Pretty => self.pretty_result(test, reported)?,
            Format::Terse => self.terse_result(test, reported)?,
            Format::Json => self.json_result(test, reported)?,
        }
        match &reported.verdict {
            Verdict::Passed => self
                .successes
                .push((test.name.clone(), reported.captured.clone())),
            Verdict::Failed { message } => {
                let mut output = reported.captured.clone();
                if let Some(message) = message {
                    output.extend_from_slice(format!("note: {message}").as_bytes());
                }
                self.failures.push((test.name.clone(), output));
            }
            Verdict::TimeLimitExceeded => self
                .time_failures
                .push((test.name.clone(), reported.captured.clone())),
            Verdict::Ignored => {
                if let Some(reason) = &test.ignore_reason {
                    self.ignored_with_reason
                        .push((test.name.clone(), reason.clone()));
                }
            }
            // libtest keeps no section for benchmarks.
            Verdict::Measured => {}
        }
        Ok(())
    }

    /// `bench: <line>`, in cyan, then any comparison with a baseline.
    fn bench_result(&mut self, test: &TestDesc, reported: &Reported) -> io::Result<()> {
        self.colored("bench", CYAN)?;
        let line = match &reported.bench {
            Some(bench) => bench_line(
                &bench.measured.summary,
                test.bench.and_then(|b| b.throughput),
            ),
            None => String::new(),
        };
        self.plain(&format!(": {line}\n"))?;
        match reported.bench.as_ref().and_then(|b| b.comparison.as_ref()) {
            Some(comparison) => self.plain(&comparison.lines()),
            None => Ok(()),
        }
    }

    fn pretty_result(&mut self, test: &TestDesc, reported: &Reported) -> io::Result<()> {
        if self.multithreaded {
            self.plain(&self.test_line(test))?;
        }
        match &reported.verdict {
            Verdict::Measured => return self.bench_result(test, reported),
            Verdict::Passed => self.colored("ok", GREEN)?,
            Verdict::Failed { .. } => self.colored("FAILED", RED)?,
            Verdict::TimeLimitExceeded => self.colored("FAILED (time limit exceeded)", RED)?,
            Verdict::Ignored => match &test.ignore_reason {
                Some(reason) => self.colored(&format!("ignored, {reason}"), YELLOW)?,
                None => self.colored("ignored", YELLOW)?,
            },
        }
        if self.report_time && !matches!(reported.verdict, Verdict::Ignored) {
            // libtest's ` <0.123s>`, coloured against the thresholds; the device's own time of
            // the launch follows where the backend measured it.
            let time = format!(" <{:.3}s>", reported.duration.as_secs_f64());
            match reported.grade {
                Grade::Fine => self.plain(&time)?,
                Grade::Warn => self.colored(&time, YELLOW)?,
                Grade::Critical => self.colored(&time, RED)?,
            }
            if let Some(device) = reported.device_time {
                self.plain(&format!(" <device {:.3}s>", device.as_secs_f64()))?;
            }
        }
        self.plain("\n")
    }

    fn terse_result(&mut self, test: &TestDesc, reported: &Reported) -> io::Result<()> {
        match &reported.verdict {
            Verdict::Measured => {
                if self.multithreaded {
                    self.plain(&self.test_line(test))?;
                }
                self.bench_result(test, reported)
            }
            Verdict::Passed => self.terse_char(".", GREEN),
            Verdict::Ignored => self.terse_char("i", YELLOW),
            Verdict::Failed { .. } | Verdict::TimeLimitExceeded => {
                if self.terse_column != 0 {
                    self.terse_progress()?;
                }
                self.terse_count += 1;
                self.plain(&format!("{} --- ", test.name))?;
                self.colored("FAILED", RED)?;
                self.plain("\n")
            }
        }
    }

    fn terse_char(&mut self, text: &str, color: &str) -> io::Result<()> {
        self.colored(text, color)?;
        self.terse_count += 1;
        self.terse_column += 1;
        if self.terse_column % TERSE_MAX_COLUMN == TERSE_MAX_COLUMN - 1 {
            self.terse_progress()?;
        }
        Ok(())
    }

    fn terse_progress(&mut self) -> io::Result<()> {
        self.terse_column = 0;
        self.plain(&format!(" {}/{}\n", self.terse_count, self.total))
    }

    fn json_result(&mut self, test: &TestDesc, reported: &Reported) -> io::Result<()> {
        if let (Verdict::Measured, Some(bench)) = (&reported.verdict, &reported.bench) {
            return self.plain(&json_bench(test, bench));
        }
        let (event, message) = match &reported.verdict {
            Verdict::Passed => ("ok", None),
            Verdict::Failed { message } => ("failed", message.clone()),
            Verdict::TimeLimitExceeded => ("failed", None),
            Verdict::Ignored => ("ignored", test.ignore_reason.clone()),
            // Without its numbers (never made so): reported as having run.
            Verdict::Measured => ("ok", None),
        };
        let mut line = format!(
            "{{ \"type\": \"test\", \"name\": \"{}\", \"event\": \"{event}\"",
            json_escape(&test.name)
        );
        if self.report_time && !matches!(reported.verdict, Verdict::Ignored | Verdict::Measured) {
            line.push_str(&format!(
                ", \"exec_time\": {}",
                reported.duration.as_secs_f64()
            ));
            if let Some(device) = reported.device_time {
                line.push_str(&format!(", \"device_time\": {}", device.as_secs_f64()));
            }
        }
        let show_stdout = self.show_output || !matches!(reported.verdict, Verdict::Passed);
        if show_stdout && !reported.captured.is_empty() {
            line.push_str(&format!(
                ", \"stdout\": \"{}\"",
                json_escape(&String::from_utf8_lossy(&reported.captured))
            ));
        }
        if let Some(message) = message {
            line.push_str(&format!(", \"message\": \"{}\"", json_escape(&message)));
        }
        if reported.verdict == Verdict::TimeLimitExceeded {
            line.push_str(", \"reason\": \"time limit exceeded\"");
        }
        line.push_str(" }\n");
        self.plain(&line)
    }

    /// The failures (and, with `--show-output`, successes) sections and the summary line.
    pub(crate) fn run_finish(&mut self, elapsed: Duration) -> io::Result<()> {
        let Counts {
            passed,
            failed,
            ignored,
            measured,
            filtered_out,
        } = self.counts;
        if self.format == Format::Json {
            let event = if failed == 0 { "ok" } else { "failed" };
            return self.plain(&format!(
                "{{ \"type\": \"suite\", \"event\": \"{event}\", \"passed\": {passed}, \"failed\": {failed}, \"ignored\": {ignored}, \"measured\": {measured}, \"filtered_out\": {filtered_out}, \"exec_time\": {} }}\n",
                elapsed.as_secs_f64()
            ));
        }
        if self.show_output {
            let successes = std::mem::take(&mut self.successes);
            self.sections("successes", &successes)?;
        }
        if failed != 0 {
            let failures = std::mem::take(&mut self.failures);
            if !failures.is_empty() {
                self.sections("failures", &failures)?;
            }
            let time_failures = std::mem::take(&mut self.time_failures);
            if !time_failures.is_empty() {
                self.sections("failures (time limit exceeded)", &time_failures)?;
            }
        }
        self.plain("\ntest result: ")?;
        if failed == 0 {
            self.colored("ok", GREEN)?;
        } else {
            self.colored("FAILED", RED)?;
        }
        self.plain(&format!(
            ". {passed} passed; {failed} failed; {ignored} ignored; {measured} measured; {filtered_out} filtered out; finished in {:.2}s\n\n",
            elapsed.as_secs_f64()
        ))?;
        // libtest's terse mode explains a lone ignored test, since `i` says nothing.
        if self.format == Format::Terse && self.total == 1 && ignored == 1 {
            if let Some((name, reason)) = self.ignored_with_reason.first() {
                let text = format!("test: {name}, ignore_message: {reason}\n\n");
                self.plain(&text)?;
            }
        }
        Ok(())
    }

    fn sections(&mut self, title: &str, entries: &[(String, Vec<u8>)]) -> io::Result<()> {
        let heading = format!("\n{title}:\n");
        self.plain(&heading)?;
        let mut blocks = String::new();
        for (name, output) in entries {
            if !output.is_empty() {
                blocks.push_str(&format!("---- {name} stdout ----\n"));
                blocks.push_str(&String::from_utf8_lossy(output));
                blocks.push('\n');
            }
        }
        if !blocks.is_empty() {
            self.plain("\n")?;
            self.plain(&blocks)?;
        }
        self.plain(&heading)?;
        let mut names: Vec<&str> = entries.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        for name in names {
            self.plain(&format!("    {name}\n"))?;
        }
        Ok(())
    }

    /// `--list`: `NAME: test` lines, `NAME: benchmark` for benchmarks (plus libtest's counts
    /// in pretty format, or json discovery events). Nothing else reaches stdout: nextest parses
    /// it strictly.
    pub(crate) fn list(&mut self, tests: &[TestDesc]) -> io::Result<()> {
        let kind = |test: &TestDesc| match test.bench {
            Some(_) => "benchmark",
            None => "test",
        };
        let benchmarks = tests.iter().filter(|test| test.bench.is_some()).count();
        let plain_tests = tests.len() - benchmarks;
        match self.format {
            Format::Pretty | Format::Terse => {
                for test in tests {
                    self.plain(&format!("{}: {}\n", test.name, kind(test)))?;
                }
                if self.format == Format::Pretty {
                    if !tests.is_empty() {
                        self.plain("\n")?;
                    }
                    let plural = |count: usize, noun: &str| match count {
                        1 => format!("1 {noun}"),
                        n => format!("{n} {noun}s"),
                    };
                    self.plain(&format!(
                        "{}, {}\n",
                        plural(plain_tests, "test"),
                        plural(benchmarks, "benchmark")
                    ))?;
                }
                Ok(())
            }
            Format::Json => {
                self.plain("{ \"type\": \"suite\", \"event\": \"discovery\" }\n")?;
                for test in tests {
                    self.plain(&format!(
                        "{{ \"type\": \"{}\", \"event\": \"discovered\", \"name\": \"{}\", \"ignore\": {}, \"ignore_message\": \"{}\", \"source_path\": \"{}\", \"start_line\": 0, \"start_col\": 0, \"end_line\": 0, \"end_col\": 0 }}\n",
                        kind(test),
                        json_escape(&test.name),
                        test.ignored,
                        json_escape(test.ignore_reason.as_deref().unwrap_or("")),
                        json_escape(test.source_file.as_deref().unwrap_or("")),
                    ))?;
                }
                let ignored = tests.iter().filter(|t| t.ignored).count();
                self.plain(&format!(
                    "{{ \"type\": \"suite\", \"event\": \"completed\", \"tests\": {plain_tests}, \"benchmarks\": {benchmarks}, \"total\": {}, \"ignored\": {ignored} }}\n",
                    tests.len()
                ))
            }
        }
    }
}

/// One line of libtest's `--logfile` format for a finished test (a benchmark's: its bench line
/// and its name).
pub(crate) fn log_line(test: &TestDesc, reported: &Reported) -> String {
    if let (Verdict::Measured, Some(bench)) = (&reported.verdict, &reported.bench) {
        let line = bench_line(
            &bench.measured.summary,
            test.bench.and_then(|b| b.throughput),
        );
        return format!("{line} {}\n", test.name);
    }
    let status = match (&reported.verdict, &test.ignore_reason) {
        (Verdict::Passed, _) => "ok".to_owned(),
        (Verdict::Failed { message: None }, _) => "failed".to_owned(),
        (Verdict::Failed { message: Some(m) }, _) => format!("failed: {m}"),
        (Verdict::TimeLimitExceeded, _) => "failed (time limit exceeded)".to_owned(),
        (Verdict::Ignored, Some(reason)) => format!("ignored: {reason}"),
        (Verdict::Ignored, None) => "ignored".to_owned(),
        (Verdict::Measured, _) => "ok".to_owned(),
    };
    format!("{status} {}\n", test.name)
}

/// libtest's JSON event of a measured benchmark (`median` and `deviation` in nanoseconds per
/// iteration, `mib_per_second` for declared bytes, which libtest fills with its MB/s), with
/// what libtest does not report after its fields: the rate of declared elements, the samples,
/// the iterations per launch, the median absolute deviation, the outliers and the timer.
fn json_bench(test: &TestDesc, bench: &BenchReport) -> String {
    let summary = &bench.measured.summary;
    let mut line = format!(
        "{{ \"type\": \"bench\", \"name\": \"{}\", \"median\": {}, \"deviation\": {}",
        json_escape(&test.name),
        summary.median,
        summary.deviation
    );
    match rate(summary, test.bench.and_then(|b| b.throughput)) {
        Some((rate, Unit::MegaBytes)) => line.push_str(&format!(", \"mib_per_second\": {rate}")),
        Some((rate, Unit::MegaElements)) => {
            line.push_str(&format!(", \"melem_per_second\": {rate}"))
        }
        None => {}
    }
    line.push_str(&format!(
        ", \"samples\": {}, \"iterations\": {}, \"median_abs_dev\": {}, \"outliers\": {}, \"timer\": \"{}\"",
        summary.samples,
        bench.measured.iterations,
        summary.median_abs_dev,
        summary.outliers,
        json_escape(&bench.measured.timer)
    ));
    if let Some(comparison) = &bench.comparison {
        line.push_str(&format!(
            ", \"baseline\": \"{}\", \"change\": {}, \"change_lower\": {}, \"change_upper\": {}, \"p_value\": {}, \"verdict\": \"{}\"",
            json_escape(&comparison.baseline),
            comparison.change,
            comparison.lower,
            comparison.upper,
            comparison.p_value,
            comparison.verdict.key()
        ));
    }
    line.push_str(" }\n");
    line
}

/// Escapes a string for a JSON string literal the way libtest does (control characters as
/// `\uXXXX` or their short forms).
pub(crate) fn json_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => escaped.push_str("\\\""),
            '\\' => escaped.push_str("\\\\"),
            '\n' => escaped.push_str("\\n"),
            '\r' => escaped.push_str("\\r"),
            '\t' => escaped.push_str("\\t"),
            '\x08' => escaped.push_str("\\b"),
            '\x0c' => escaped.push_str("\\f"),
            c if c.is_ascii_control() => escaped.push_str(&format!("\\u{:04x}", c as u32)),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escape_matches_libtest() {
        assert_eq!(
            json_escape("a\"b\\c\nd\te\x01\x7f"),
            "a\\\"b\\\\c\\nd\\te\\u0001\\u007f"
        );
        let parsed: String =
            serde_json::from_str(&format!("\"{}\"", json_escape("x\u{1b}[0m\r"))).unwrap();
        assert_eq!(parsed, "x\u{1b}[0m\r");
    }
}
