//! Benchmarks through the harness with the mock executor, whose launches take an exact time per
//! iteration: libtest's bench line, `--bench` and `--test`, terse, JSON, `--list`, the log file
//! and JUnit. The numbers here are the mock's, given, not measured.

use std::sync::Arc;
use std::time::Duration;

use gpurun_abi::{Bench, Throughput};
use gpurun_harness::testing::{bench, panicked, MockExecutor};
use gpurun_harness::{Conclusion, HarnessArgs, HarnessError, Session, TestDesc};
use std::path::Path;

fn parse(argv: &[&str]) -> HarnessArgs {
    let mut args = HarnessArgs::parse_args(std::iter::once("test-bin").chain(argv.iter().copied()))
        .expect("valid arguments");
    args.github_actions = false;
    args.github_step_summary = None;
    args
}

/// Runs `tests` with `argv` (plus no warm-up, to keep the mock quick): the conclusion, stdout
/// and what ran.
fn run(
    argv: &[&str],
    tests: Vec<TestDesc>,
    executor: MockExecutor,
) -> (Conclusion, String, Vec<String>) {
    run_in(None, argv, tests, executor).expect("the run completes")
}

/// [`run`] with baselines kept in `baselines`; the harness's error if it fails.
fn run_in(
    baselines: Option<&Path>,
    argv: &[&str],
    tests: Vec<TestDesc>,
    executor: MockExecutor,
) -> Result<(Conclusion, String, Vec<String>), HarnessError> {
    let mut all = vec!["--warm-up-time", "0"];
    all.extend_from_slice(argv);
    let mut args = parse(&all);
    args.baseline_dir = baselines.map(Path::to_path_buf);
    let executor = Arc::new(executor);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut session = Session::new(&args);
    let conclusion =
        session.run_with_output(&args, tests, executor.clone(), false, &mut out, &mut err)?;
    session.finish()?;
    Ok((conclusion, String::from_utf8(out).unwrap(), executor.ran()))
}

/// A suite of a test and three benchmarks: `copy` declares 3000 bytes per iteration, `flops`
/// 8 elements.
fn suite() -> Vec<TestDesc> {
    let with = |name: &str, throughput| TestDesc {
        bench: Some(Bench { throughput }),
        ..TestDesc::new(name)
    };
    vec![
        TestDesc::new("adds"),
        with("copy", Some(Throughput::Bytes(3000))),
        with("flops", Some(Throughput::Elements(8))),
        bench("floor_of_everything"),
    ]
}

fn executor() -> MockExecutor {
    MockExecutor::new()
        .with_bench("copy", Duration::from_nanos(1_500))
        .with_bench("flops", Duration::from_nanos(2))
        .with_bench("floor_of_everything", Duration::ZERO)
}

#[test]
fn bench_measures_benchmarks_after_the_tests_with_libtests_line() {
    let (conclusion, stdout, ran) = run(&["--bench", "--test-threads", "1"], suite(), executor());
    // The test is reported ignored (libtest's `--bench` without `--test`) and never runs.
    assert_eq!(ran, ["copy", "floor_of_everything", "flops"]);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>()[..6],
        [
            "",
            "running 4 tests",
            "test adds ... ignored",
            // Names padded to the longest benchmark's, the rate as libtest computes MB/s.
            "test copy                ... bench:       1,500.00 ns/iter (+/- 0.00) = 2000 MB/s",
            "test floor_of_everything ... bench:           0.00 ns/iter (+/- 0.00)",
            "test flops               ... bench:           2.00 ns/iter (+/- 0.00) = 4000 Melem/s",
        ]
    );
    assert!(stdout.contains(
        "test result: ok. 0 passed; 0 failed; 1 ignored; 3 measured; 0 filtered out; finished in "
    ));
    assert_eq!(
        (
            conclusion.num_measured,
            conclusion.num_ignored,
            conclusion.exit_code()
        ),
        (3, 1, 0)
    );
}

#[test]
fn bench_with_test_runs_both_and_without_bench_benchmarks_are_tests() {
    let (conclusion, stdout, ran) = run(
        &["--bench", "--test", "--test-threads", "1"],
        suite(),
        executor(),
    );
    assert!(stdout.contains("test adds ... ok\n"), "{stdout}");
    assert_eq!((conclusion.num_passed, conclusion.num_measured), (1, 3));
    assert_eq!(ran.first().map(String::as_str), Some("adds"));
    // No --bench: each benchmark is one more test, run (once) by the executor's `run`.
    let (conclusion, stdout, ran) = run(&["--test-threads", "1"], suite(), executor());
    assert!(stdout.contains("test copy ... ok\n"), "{stdout}");
    assert_eq!((conclusion.num_passed, conclusion.num_measured), (4, 0));
    assert_eq!(ran.len(), 4);
}

#[test]
fn a_failing_benchmark_fails_like_a_test() {
    let failing = executor().with("copy", panicked("out of bounds", 7, 1));
    let (conclusion, stdout, _) = run(&["--bench", "--test-threads", "1"], suite(), failing);
    assert!(
        stdout.contains("test copy                ... FAILED\n"),
        "{stdout}"
    );
    assert!(stdout.contains("out of bounds"), "{stdout}");
    assert_eq!((conclusion.num_failed, conclusion.num_measured), (1, 2));
    assert_eq!(conclusion.exit_code(), 101);
}

#[test]
fn terse_and_multithreaded_output_print_whole_bench_lines() {
    for argv in [
        &["--bench", "-q", "--test-threads", "1"][..],
        &["--bench", "-q", "--test-threads", "4"],
        &["--bench", "--test-threads", "4"],
    ] {
        let (_, stdout, _) = run(argv, suite(), executor());
        assert!(
            stdout.contains(
                "test copy                ... bench:       1,500.00 ns/iter (+/- 0.00) = 2000 MB/s\n"
            ),
            "{argv:?}: {stdout}"
        );
    }
}

#[test]
fn json_bench_events_are_libtests_with_more_fields() {
    let (_, stdout, _) = run(
        &["--bench", "--format", "json", "-Zunstable-options"],
        suite(),
        executor(),
    );
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let copy = events
        .iter()
        .find(|event| event["type"] == "bench" && event["name"] == "copy")
        .expect("copy's bench event");
    assert_eq!(copy["median"], 1500.0);
    assert_eq!(copy["deviation"], 0.0);
    assert_eq!(copy["mib_per_second"], 2000);
    assert_eq!(copy["timer"], "mock clock");
    assert!(copy["samples"].as_u64().unwrap() >= 10);
    assert!(copy["iterations"].as_u64().unwrap() >= 1);
    let flops = events
        .iter()
        .find(|event| event["type"] == "bench" && event["name"] == "flops")
        .unwrap();
    assert_eq!(flops["melem_per_second"], 4000);
    assert!(flops.get("mib_per_second").is_none());
    let last = events.last().unwrap();
    assert_eq!(last["type"], "suite");
    assert_eq!(last["measured"], 3);
    assert_eq!(last["ignored"], 1);
}

#[test]
fn list_names_benchmarks_as_libtest_does() {
    let (_, stdout, ran) = run(&["--list"], suite(), executor());
    assert!(ran.is_empty());
    assert_eq!(
        stdout,
        "adds: test\ncopy: benchmark\nfloor_of_everything: benchmark\nflops: benchmark\n\n1 test, 3 benchmarks\n"
    );
    let (_, json, _) = run(
        &["--list", "--format", "json", "-Zunstable-options"],
        suite(),
        executor(),
    );
    let events: Vec<serde_json::Value> = json
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(events[2]["type"], "benchmark");
    assert_eq!(events[1]["type"], "test");
    assert_eq!(events.last().unwrap()["benchmarks"], 3);
    assert_eq!(events.last().unwrap()["tests"], 1);
}

#[test]
fn the_log_file_and_junit_carry_the_numbers() {
    let dir = std::env::temp_dir().join(format!("gpurun-harness-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (log, junit) = (dir.join("log.txt"), dir.join("junit.xml"));
    let (log_arg, junit_arg) = (log.to_str().unwrap(), junit.to_str().unwrap());
    run(
        &["--bench", "--logfile", log_arg, "--junit", junit_arg],
        suite(),
        executor(),
    );
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("      1,500.00 ns/iter (+/- 0.00) = 2000 MB/s copy\n"),
        "{log}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    let document = roxmltree::Document::parse(&xml).unwrap();
    let copy = document
        .descendants()
        .find(|node| node.has_tag_name("testcase") && node.attribute("name") == Some("copy"))
        .expect("copy's test case");
    assert_eq!(copy.attribute("classname"), Some("benchmark::gpurun"));
    let property = |name: &str| {
        copy.descendants()
            .find(|node| node.has_tag_name("property") && node.attribute("name") == Some(name))
            .and_then(|node| node.attribute("value"))
            .map(str::to_owned)
    };
    assert_eq!(property("median_ns").as_deref(), Some("1500"));
    assert_eq!(property("mb_per_second").as_deref(), Some("2000"));
    assert_eq!(property("timer").as_deref(), Some("mock clock"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_saved_baseline_flags_a_slower_benchmark_and_not_an_unchanged_one() {
    let dir = std::env::temp_dir().join(format!("gpurun-harness-baseline-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Comparing with a baseline never saved is an error before anything runs.
    let missing = run_in(
        Some(&dir),
        &["--bench", "--baseline", "main"],
        suite(),
        executor(),
    );
    let error = missing.expect_err("no baseline yet").to_string();
    assert!(error.contains("no baseline `main`"), "{error}");
    let (_, stdout, _) = run_in(
        Some(&dir),
        &["--bench", "--save-baseline", "main"],
        suite(),
        executor(),
    )
    .unwrap();
    assert!(!stdout.contains("change:"), "{stdout}");
    assert!(dir.join("main.json").is_file());
    // `copy` now takes twice as long; `flops` is unchanged; the floor has nothing to compare.
    let slower = MockExecutor::new()
        .with_bench("copy", Duration::from_nanos(3_000))
        .with_bench("flops", Duration::from_nanos(2))
        .with_bench("floor_of_everything", Duration::ZERO);
    let (conclusion, stdout, _) = run_in(
        Some(&dir),
        &["--bench", "--baseline", "main", "--test-threads", "1"],
        suite(),
        slower,
    )
    .unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    let after = |name: &str| {
        let at = lines
            .iter()
            .position(|line| line.starts_with(&format!("test {name} ")))
            .unwrap_or_else(|| panic!("{stdout}"));
        (lines[at + 1], lines[at + 2])
    };
    let (change, verdict) = after("copy");
    assert!(
        change.starts_with("        change: [+100.00% +100.00% +100.00%] (p = 0.00 < 0.05)"),
        "{stdout}"
    );
    assert_eq!(verdict, "        Performance has regressed.");
    assert_eq!(
        after("flops").1,
        "        No change in performance detected."
    );
    assert_eq!(
        after("floor_of_everything").1,
        "        No change in performance detected."
    );
    // A regression is reported, not failed, as criterion does.
    assert_eq!(conclusion.exit_code(), 0);
    // The JSON event says the same.
    let slower = MockExecutor::new().with_bench("copy", Duration::from_nanos(3_000));
    let (_, json, _) = run_in(
        Some(&dir),
        &[
            "--bench",
            "--baseline",
            "main",
            "--format",
            "json",
            "-Zunstable-options",
            "copy",
        ],
        suite(),
        slower,
    )
    .unwrap();
    let copy: serde_json::Value = json
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|event| event["type"] == "bench")
        .expect("copy's bench event");
    assert_eq!(copy["baseline"], "main");
    assert_eq!(copy["verdict"], "regressed");
    assert_eq!(copy["change"], 1.0);
    std::fs::remove_dir_all(&dir).unwrap();
}
