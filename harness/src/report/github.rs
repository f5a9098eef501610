//! GitHub Actions annotations (`::error file=..,line=..::message`) for failed tests, so a failure
//! shows up on the line of the panic in the pull request, and the job's step summary.

use std::time::Duration;

use crate::bench::baseline::Comparison;
use crate::bench::{rate, thousands, Summary, Unit};
use crate::outcome::Verdict;
use crate::report::console::Counts;
use crate::report::Finished;
use gpurun_abi::Throughput;

/// One `::error` workflow command for a failed test, or `None` if the test did not fail.
pub(crate) fn annotation(finished: &Finished<'_>) -> Option<String> {
    let Verdict::Failed { message } = &finished.reported.verdict else {
        return None;
    };
    let report = finished.run.and_then(|run| run.end.first_panic());
    let mut properties = Vec::new();
    if let Some(report) = report {
        properties.push(format!("file={}", escape_property(&report.file)));
        properties.push(format!("line={}", report.line));
        properties.push(format!("col={}", report.column));
    } else if let Some(file) = &finished.test.source_file {
        properties.push(format!("file={}", escape_property(file)));
    }
    properties.push(format!("title={}", escape_property(&finished.test.name)));
    let text = match (report, message) {
        (Some(report), None) => format!("test panicked: {}", report.message),
        (Some(report), Some(message)) => format!("{message}\n(panic: {})", report.message),
        (None, Some(message)) => message.clone(),
        (None, None) => "test failed".to_owned(),
    };
    Some(format!(
        "::error {}::{}\n",
        properties.join(","),
        escape_data(&text)
    ))
}

/// One measured benchmark's row of the step summary.
pub(crate) struct BenchRow {
    pub name: String,
    pub summary: Summary,
    pub throughput: Option<Throughput>,
    pub timer: String,
    /// The comparison with a baseline, if any.
    pub comparison: Option<Comparison>,
}

/// A Markdown section for `$GITHUB_STEP_SUMMARY`: the counts, one line per failed test
/// (`failures` holds names and one-line reasons, in the order they failed) and a table of the
/// benchmarks measured.
pub(crate) fn step_summary(
    suite: &str,
    counts: &Counts,
    elapsed: Duration,
    failures: &[(String, String)],
    benches: &[BenchRow],
) -> String {
    let verdict = if counts.failed == 0 { "ok" } else { "FAILED" };
    // The measured column only where something was measured, as before benchmarks existed.
    let (measured_head, measured_rule, measured) = match counts.measured {
        0 => ("", "", String::new()),
        n => (" measured |", " ---: |", format!(" {n} |")),
    };
    let mut text = format!(
        "### `{}`: {verdict}\n\n| passed | failed | ignored |{measured_head} filtered out | time |\n| ---: | ---: | ---: |{measured_rule} ---: | ---: |\n| {} | {} | {} |{measured} {} | {:.2}s |\n",
        markdown_code(suite),
        counts.passed,
        counts.failed,
        counts.ignored,
        counts.filtered_out,
        elapsed.as_secs_f64()
    );
    if !benches.is_empty() {
        let compared = benches.iter().any(|row| row.comparison.is_some());
        let (head, rule) = match compared {
            true => (" change |", " --- |"),
            false => ("", ""),
        };
        text.push_str(&format!(
            "\n| benchmark | ns/iter | +/- | rate | timed by |{head}\n| --- | ---: | ---: | ---: | --- |{rule}\n",
        ));
        for row in benches {
            let rate = match rate(&row.summary, row.throughput) {
                Some((rate, Unit::MegaBytes)) => format!("{rate} MB/s"),
                Some((rate, Unit::MegaElements)) => format!("{rate} Melem/s"),
                None => String::new(),
            };
            let change = match (&row.comparison, compared) {
                (Some(comparison), _) => format!(
                    " {:+.2}% vs `{}`: {} |",
                    comparison.change * 100.0,
                    markdown_code(&comparison.baseline),
                    comparison.verdict.sentence()
                ),
                (None, true) => " |".to_owned(),
                (None, false) => String::new(),
            };
            text.push_str(&format!(
                "| `{}` | {} | {} | {rate} | {} |{change}\n",
                markdown_code(&row.name),
                thousands(row.summary.median),
                thousands(row.summary.deviation),
                row.timer.replace('|', "\\|")
            ));
        }
    }
    if !failures.is_empty() {
        text.push_str("\n| failed test | reason |\n| --- | --- |\n");
        for (name, reason) in failures {
            let reason = reason.replace('|', "\\|").replace(['\r', '\n'], " ");
            text.push_str(&format!("| `{}` | {reason} |\n", markdown_code(name)));
        }
    }
    text.push('\n');
    text
}

/// Text safe inside a Markdown code span in a table cell.
fn markdown_code(text: &str) -> String {
    text.replace('`', "'").replace('|', "\\|")
}

/// Escaping for the message part of a workflow command, per GitHub's runner.
fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escaping for a property value (`file=`, `title=`): also `:` and `,`, which delimit properties.
fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_summary_tabulates_counts_and_failures() {
        let counts = Counts {
            passed: 3,
            failed: 1,
            ignored: 1,
            measured: 0,
            filtered_out: 4,
        };
        let text = step_summary(
            "my-crate",
            &counts,
            Duration::from_millis(1234),
            &[("tests::a|b".into(), "boom\nat x | y".into())],
            &[],
        );
        assert_eq!(
            text,
            "### `my-crate`: FAILED\n\n| passed | failed | ignored | filtered out | time |\n| ---: | ---: | ---: | ---: | ---: |\n| 3 | 1 | 1 | 4 | 1.23s |\n\n| failed test | reason |\n| --- | --- |\n| `tests::a\\|b` | boom at x \\| y |\n\n"
        );
    }

    #[test]
    fn step_summary_tabulates_measured_benchmarks() {
        let counts = Counts {
            measured: 1,
            ..Counts::default()
        };
        let row = BenchRow {
            name: "copy".into(),
            summary: Summary {
                median: 1_500.0,
                deviation: 20.0,
                ..Summary::of(&[1_500.0])
            },
            throughput: Some(Throughput::Bytes(3_000)),
            timer: "CUDA events".into(),
            comparison: None,
        };
        let text = step_summary("benches", &counts, Duration::ZERO, &[], &[row]);
        assert_eq!(
            text,
            "### `benches`: ok\n\n| passed | failed | ignored | measured | filtered out | time |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n| 0 | 0 | 0 | 1 | 0 | 0.00s |\n\n| benchmark | ns/iter | +/- | rate | timed by |\n| --- | ---: | ---: | ---: | --- |\n| `copy` | 1,500.00 | 20.00 | 2000 MB/s | CUDA events |\n\n"
        );
    }

    #[test]
    fn escapes_follow_githubs_rules() {
        assert_eq!(escape_data("50% done\r\nnext"), "50%25 done%0D%0Anext");
        assert_eq!(escape_property("tests::a,b"), "tests%3A%3Aa%2Cb");
    }
}
