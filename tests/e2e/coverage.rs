//! `cargo gpurun test --coverage` on the host emulation: which lines of `fixtures/coverage` the
//! lcov report counts as run when one test runs at a time, at lane sizes 32 and 64, and the HTML
//! report beside it.

use gpurun_e2e::{describe, fixtures_dir, gpurun, text};
use std::collections::HashMap;
use std::sync::Mutex;

/// The coverage runs share one report folder (the fixtures' target directory's).
static REPORT: Mutex<()> = Mutex::new(());

const SOURCE: &str = "coverage/src/lib.rs";

/// The line of `fixtures/coverage/src/lib.rs` that ends with the comment `// coverage: MARKER`.
fn marker_line(marker: &str) -> u32 {
    let source = std::fs::read_to_string(fixtures_dir().join(SOURCE)).expect("fixture source");
    let wanted = format!("// coverage: {marker}");
    let index = source
        .lines()
        .position(|line| line.trim_end().ends_with(&wanted))
        .unwrap_or_else(|| panic!("no `{wanted}` in {SOURCE}"));
    u32::try_from(index + 1).expect("a line number")
}

/// The execution count of each instrumented line of the fixture's source, from an lcov file.
fn line_counts(lcov: &str) -> HashMap<u32, u64> {
    let mut counts = HashMap::new();
    let mut in_source = false;
    for line in lcov.lines() {
        if let Some(path) = line.strip_prefix("SF:") {
            in_source = path.ends_with(SOURCE);
        } else if let (true, Some(entry)) = (in_source, line.strip_prefix("DA:")) {
            let mut fields = entry.split(',');
            if let (Some(Ok(line)), Some(Ok(count))) = (
                fields.next().map(str::parse::<u32>),
                fields.next().map(str::parse::<u64>),
            ) {
                counts.insert(line, count);
            }
        }
    }
    counts
}

/// Runs the fixture's tests matching `filter` with coverage at `lane_size`; the report's line
/// counts for the fixture's source.
fn covered(filter: &str, lane_size: &str) -> HashMap<u32, u64> {
    let output = gpurun(&[
        "test",
        "--coverage",
        "-p",
        "coverage",
        "--lane-size",
        lane_size,
        "--",
        filter,
    ])
    .output()
    .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("Coverage ") && stderr.contains("gpurun-coverage/lcov.info"),
        "{}",
        describe(&output)
    );
    let lcov = std::fs::read_to_string(fixtures_dir().join("target/gpurun-coverage/lcov.info"))
        .expect("the lcov file");
    // Only the device crate's own files: not the device runtime, core or other crates.
    for file in lcov.lines().filter_map(|line| line.strip_prefix("SF:")) {
        assert!(file.contains("fixtures/coverage/"), "{file} in the report");
    }
    line_counts(&lcov)
}

#[test]
fn coverage_counts_the_lines_each_test_ran_at_both_lane_sizes() {
    let _report = REPORT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let line = |marker| marker_line(marker);
    for lane_size in ["32", "64"] {
        for (filter, ran, not_ran) in [
            ("halves_even_numbers", "even branch", "odd branch"),
            ("grows_odd_numbers", "odd branch", "even branch"),
        ] {
            let counts = covered(filter, lane_size);
            assert!(
                counts.get(&line(ran)).is_some_and(|&n| n > 0),
                "{filter} at {lane_size} lanes: line {} ({ran}) not run: {counts:?}",
                line(ran)
            );
            assert_eq!(
                counts.get(&line(not_ran)),
                Some(&0),
                "{filter} at {lane_size} lanes: line {} ({not_ran})",
                line(not_ran)
            );
        }
        let (ran, not_ran) = match lane_size {
            "64" => ("wide warps", "narrow warps"),
            _ => ("narrow warps", "wide warps"),
        };
        let counts = covered("sees_its_lane_size", lane_size);
        // Every one of the 64 threads ran it.
        assert_eq!(counts.get(&line(ran)), Some(&64), "{counts:?}");
        assert_eq!(counts.get(&line(not_ran)), Some(&0), "{counts:?}");
    }
    let html =
        std::fs::read_to_string(fixtures_dir().join("target/gpurun-coverage/html/index.html"))
            .expect("the HTML report");
    assert!(html.contains(SOURCE), "the HTML index names no {SOURCE}");
}

#[test]
fn coverage_refuses_a_gpu_target_and_the_sanitizer() {
    for (args, expected) in [
        (
            &["--target", "nvptx"][..],
            "coverage is measured on the host emulation only, not on nvptx",
        ),
        (
            &["--sanitize", "memcheck"][..],
            "--coverage measures the host emulation and --sanitize runs CUDA",
        ),
    ] {
        let mut all = vec!["test", "--coverage", "-p", "coverage"];
        all.extend_from_slice(args);
        let output = gpurun(&all).output().unwrap();
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
        assert!(
            text(&output.stderr).contains(expected),
            "{}",
            describe(&output)
        );
    }
}
