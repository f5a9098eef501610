//! The harness end to end with the scripted `MockExecutor`: counts and summary line, failure
//! reports, recovery from faults and hangs, concurrency, JSON, JUnit, GitHub annotations,
//! `--nocapture`, `--list`, partitions and error paths.

use std::sync::Arc;
use std::time::Duration;

use gpurun_harness::testing::{
    ended, launched, panic_report, panicked, panicked_end, passed, MockExecutor,
};
use gpurun_harness::{
    Conclusion, Executor, HarnessArgs, HarnessError, LaunchEnd, Session, ShouldPanic, TestDesc,
    TestEnd, TestRun,
};

struct Outcome {
    conclusion: Conclusion,
    stdout: String,
    stderr: String,
    executor: Arc<MockExecutor>,
}

fn parse(argv: &[&str]) -> HarnessArgs {
    let mut args = HarnessArgs::parse_args(std::iter::once("test-bin").chain(argv.iter().copied()))
        .expect("valid arguments");
    // Independent of the environment; tests that want annotations set them.
    args.github_actions = false;
    args.github_step_summary = None;
    args.nocapture = argv.contains(&"--nocapture");
    args
}

/// A run of any executor (a session of one suite): the result, stdout and stderr.
fn run_executor(
    args: &HarnessArgs,
    tests: Vec<TestDesc>,
    executor: Arc<dyn Executor>,
    color: bool,
) -> (Result<Conclusion, HarnessError>, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut session = Session::new(args);
    let result = session.run_with_output(args, tests, executor, color, &mut out, &mut err);
    let result = result.and_then(|conclusion| session.finish().map(|()| conclusion));
    let text = |bytes| String::from_utf8(bytes).unwrap();
    (result, text(out), text(err))
}

fn run_args(args: &HarnessArgs, tests: Vec<TestDesc>, executor: MockExecutor) -> Outcome {
    let executor = Arc::new(executor);
    let (conclusion, stdout, stderr) = run_executor(args, tests, executor.clone(), false);
    Outcome {
        conclusion: conclusion.expect("the run completes"),
        stdout,
        stderr,
        executor,
    }
}

fn run(argv: &[&str], tests: Vec<TestDesc>, executor: MockExecutor) -> Outcome {
    run_args(&parse(argv), tests, executor)
}

fn tests(names: &[&str]) -> Vec<TestDesc> {
    names.iter().map(|name| TestDesc::new(*name)).collect()
}

fn summary_line(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|line| line.starts_with("test result: "))
        .expect("a summary line")
}

#[test]
fn summary_line_counts_passed_failed_ignored_and_filtered_out() {
    let mut suite = tests(&[
        "suite::pass_1",
        "suite::pass_2",
        "suite::pass_3",
        "suite::fail_1",
        "suite::fail_2",
        "suite::skipped",
        "other::a",
        "other::b",
        "other::c",
        "suite_but_not::d",
    ]);
    suite[5].ignored = true;
    let executor = MockExecutor::new()
        .with("suite::fail_1", panicked("one", 10, 1))
        .with("suite::fail_2", panicked("two", 20, 1));
    let outcome = run(&["suite::", "--test-threads", "1"], suite, executor);
    let summary = summary_line(&outcome.stdout);
    assert!(
        summary.starts_with(
            "test result: FAILED. 3 passed; 2 failed; 1 ignored; 0 measured; 4 filtered out; finished in "
        ),
        "{summary}"
    );
    assert!(summary.ends_with('s'));
    assert_eq!(outcome.conclusion.exit_code(), 101);
    assert_eq!(
        (
            outcome.conclusion.num_passed,
            outcome.conclusion.num_failed,
            outcome.conclusion.num_ignored,
            outcome.conclusion.num_filtered_out
        ),
        (3, 2, 1, 4)
    );
    assert!(outcome.stdout.starts_with("\nrunning 6 tests\n"));
    // Ignored tests never reach the executor; filtered ones neither.
    assert_eq!(outcome.executor.ran().len(), 5);
}

#[test]
fn all_passing_exits_zero() {
    let outcome = run(&[], tests(&["a", "b"]), MockExecutor::new());
    assert_eq!(outcome.conclusion.exit_code(), 0);
    assert!(summary_line(&outcome.stdout)
        .starts_with("test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out"));
    assert!(!outcome.stdout.contains("failures:"));
}

#[test]
fn a_fault_a_hang_and_other_abnormal_ends_fail_only_their_own_tests() {
    let suite = tests(&[
        "t1_pass", "t2_fault", "t3_pass", "t4_hang", "t5_pass", "t6_exit", "t7_abort", "t8_infra",
        "t9_pass",
    ]);
    let executor = MockExecutor::new()
        .with(
            "t2_fault",
            TestRun {
                stdout: b"before the fault\n".to_vec(),
                ..ended(TestEnd::launch(LaunchEnd::Faulted(
                    "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered".into(),
                )))
            },
        )
        .with(
            "t4_hang",
            ended(TestEnd::launch(LaunchEnd::TimedOut(Duration::from_secs(
                10,
            )))),
        )
        .with("t6_exit", ended(TestEnd::launch(LaunchEnd::Exited(3))))
        .with("t7_abort", ended(TestEnd::launch(LaunchEnd::Aborted)))
        .with(
            "t8_infra",
            ended(TestEnd::NotRun(
                "worker exited with signal 9 (SIGKILL)".into(),
            )),
        );
    let outcome = run(&["--test-threads", "1"], suite, executor);
    let out = &outcome.stdout;
    for (name, result) in [
        ("t1_pass", "ok"),
        ("t2_fault", "FAILED"),
        ("t3_pass", "ok"),
        ("t4_hang", "FAILED"),
        ("t5_pass", "ok"),
        ("t6_exit", "FAILED"),
        ("t7_abort", "FAILED"),
        ("t8_infra", "FAILED"),
        ("t9_pass", "ok"),
    ] {
        assert!(
            out.contains(&format!("test {name} ... {result}\n")),
            "{name}: {out}"
        );
    }
    assert!(out.contains(
        "---- t2_fault stdout ----\nbefore the fault\nnote: device fault: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered\n"
    ));
    assert!(out.contains("---- t4_hang stdout ----\nnote: test timed out after 10s\n"));
    assert!(out.contains("note: the device called exit(3) during the test\n"));
    assert!(out.contains("note: the device called abort() during the test\n"));
    assert!(out.contains("note: could not run the test: worker exited with signal 9 (SIGKILL)\n"));
    assert!(summary_line(out).starts_with("test result: FAILED. 4 passed; 5 failed; 0 ignored"));
    assert_eq!(outcome.executor.ran().len(), 9);
}

#[test]
fn a_failed_test_shows_its_output_the_panic_location_and_device_ids() {
    let test = launched("tests::lanes", [64, 1, 1], [4, 1, 1]);
    let run_result = TestRun {
        end: panicked_end(panic_report("lane 3 saw 7", 12, [3, 0, 0], [1, 0, 0]), 4),
        stdout: b"lane output\n".to_vec(),
        stderr: b"lane warning\n".to_vec(),
        duration: Duration::from_millis(3),
        device_time: None,
    };
    let outcome = run(
        &["--test-threads", "1"],
        vec![test],
        MockExecutor::new().with("tests::lanes", run_result),
    );
    let expected = "\nfailures:\n\n---- tests::lanes stdout ----\nlane output\nlane warning\n\nthread 'tests::lanes' (block (1,0,0), thread (3,0,0)) panicked at src/lib.rs:12:5:\nlane 3 saw 7\nnote: 4 of 256 device threads panicked; the first report is shown\n\n\nfailures:\n    tests::lanes\n\ntest result: FAILED.";
    assert!(outcome.stdout.contains(expected), "{}", outcome.stdout);
}

#[test]
fn should_panic_with_and_without_expected() {
    let mut suite = tests(&["sp_yes", "sp_none", "exp_match", "exp_other", "exp_none"]);
    suite[0].should_panic = ShouldPanic::Yes;
    suite[1].should_panic = ShouldPanic::Yes;
    for test in &mut suite[2..] {
        test.should_panic = ShouldPanic::Expected("overflow".into());
    }
    let executor = MockExecutor::new()
        .with("sp_yes", panicked("anything", 1, 1))
        .with("exp_match", panicked("attempt to add with overflow", 2, 1))
        .with("exp_other", panicked("index out of bounds", 3, 1));
    let outcome = run(&["--test-threads", "1"], suite, executor);
    let out = &outcome.stdout;
    assert!(out.contains("test sp_yes - should panic ... ok\n"));
    assert!(out.contains("test sp_none - should panic ... FAILED\n"));
    assert!(out.contains("test exp_match - should panic ... ok\n"));
    assert!(out.contains("test exp_other - should panic ... FAILED\n"));
    assert!(out.contains("test exp_none - should panic ... FAILED\n"));
    assert!(out.contains("---- sp_none stdout ----\nnote: test did not panic as expected\n"));
    assert!(out.contains(
        "index out of bounds\nnote: panic did not contain expected string\n      panic message: \"index out of bounds\"\n expected substring: \"overflow\"\n"
    ));
    assert!(summary_line(out).starts_with("test result: FAILED. 2 passed; 3 failed;"));
}

#[test]
fn concurrent_tests_overlap_and_their_output_stays_whole() {
    let names: Vec<String> = (0..8).map(|i| format!("par::t{i}")).collect();
    let mut executor = MockExecutor::new();
    for (i, name) in names.iter().enumerate() {
        let output: String = (0..50)
            .map(|line| format!("{name} line {line}\n"))
            .collect();
        let run = if i % 2 == 0 {
            passed(&output)
        } else {
            TestRun {
                stdout: output.into_bytes(),
                ..panicked(&format!("{name} failed"), 1, 1)
            }
        };
        executor = executor.with_delay(name, run, Duration::from_millis(150));
    }
    let mut suite: Vec<TestDesc> = names.iter().map(|n| TestDesc::new(n.as_str())).collect();
    suite.push(TestDesc {
        ignored: true,
        ..TestDesc::new("par::ignored")
    });
    let outcome = run(&["--test-threads", "4"], suite, executor);
    assert_eq!(outcome.executor.max_concurrency(), 4);
    let out = &outcome.stdout;
    // Every result line is whole.
    for (i, name) in names.iter().enumerate() {
        let verdict = if i % 2 == 0 { "ok" } else { "FAILED" };
        assert!(
            out.contains(&format!("test {name} ... {verdict}\n")),
            "{out}"
        );
    }
    assert!(out.contains("test par::ignored ... ignored\n"));
    // Each failure block holds exactly its own test's output, in order.
    for name in names.iter().skip(1).step_by(2) {
        let header = format!("---- {name} stdout ----\n");
        let start = out.find(&header).expect("a failure block") + header.len();
        let block = &out[start..];
        let expected: String = (0..50)
            .map(|line| format!("{name} line {line}\n"))
            .collect();
        assert!(block.starts_with(&expected), "block of {name} is mixed");
    }
    assert!(summary_line(out).starts_with("test result: FAILED. 4 passed; 4 failed; 1 ignored"));
}

#[test]
fn json_events_follow_libtest() {
    let mut suite = tests(&["j::ok", "j::fail", "j::ign", "j::sp"]);
    suite[2].ignored = true;
    suite[2].ignore_reason = Some("slow \"gpu\"".into());
    suite[3].should_panic = ShouldPanic::Yes;
    let executor = MockExecutor::new().with("j::ok", passed("quiet\n")).with(
        "j::fail",
        TestRun {
            stdout: b"tab\there\n".to_vec(),
            ..panicked("bad", 9, 1)
        },
    );
    let outcome = run(
        &[
            "-Z",
            "unstable-options",
            "--format",
            "json",
            "--test-threads",
            "1",
        ],
        suite,
        executor,
    );
    let events: Vec<serde_json::Value> = outcome
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect();
    assert_eq!(events[0]["type"], "suite");
    assert_eq!(events[0]["event"], "started");
    assert_eq!(events[0]["test_count"], 4);
    let result = |name: &str| {
        events
            .iter()
            .find(|e| e["name"] == name && e["event"] != "started")
            .unwrap_or_else(|| panic!("no result for {name}"))
            .clone()
    };
    assert_eq!(result("j::ok")["event"], "ok");
    assert!(
        result("j::ok").get("stdout").is_none(),
        "passing output is hidden"
    );
    let fail = result("j::fail");
    assert_eq!(fail["event"], "failed");
    let stdout = fail["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("tab\there\n\nthread 'j::fail' (block (0,0,0), thread (0,0,0)) panicked at src/lib.rs:9:5:\nbad\n"));
    assert_eq!(result("j::ign")["event"], "ignored");
    assert_eq!(result("j::ign")["message"], "slow \"gpu\"");
    assert_eq!(result("j::sp")["event"], "failed");
    assert_eq!(result("j::sp")["message"], "test did not panic as expected");
    let last = events.last().unwrap();
    assert_eq!(last["event"], "failed");
    assert_eq!(
        (
            &last["passed"],
            &last["failed"],
            &last["ignored"],
            &last["filtered_out"]
        ),
        (&1.into(), &2.into(), &1.into(), &0.into())
    );
    assert!(last["exec_time"].is_f64());
    let started = events.iter().filter(|e| e["event"] == "started").count();
    assert_eq!(started, 5, "suite start + one per test");
}

fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, tag: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children().find(|n| n.has_tag_name(tag))
}

#[test]
fn junit_report_is_valid_xml_with_failures_skips_and_output() {
    let dir = std::env::temp_dir().join(format!("gpurun-harness-junit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.xml");
    let mut suite = tests(&["x::pass", "x::panics", "x::faults", "x::skip", "x::binary"]);
    suite[3].ignored = true;
    suite[3].ignore_reason = Some("needs <gpu> & more".into());
    let executor = MockExecutor::new()
        .with("x::pass", passed("hello & <world>\n"))
        .with(
            "x::panics",
            TestRun {
                stderr: b"warn\n".to_vec(),
                ..panicked("expected 1, got 2", 40, 1)
            },
        )
        .with(
            "x::faults",
            ended(TestEnd::launch(LaunchEnd::Faulted("trap".into()))),
        )
        .with(
            "x::binary",
            TestRun {
                stdout: b"\x1b[31mred\x1b[0m\x00 \xff\n".to_vec(),
                ..passed("")
            },
        );
    let mut args = parse(&["--test-threads", "2", "--junit", path.to_str().unwrap()]);
    args.suite_name = Some("my-crate::lib".into());
    let outcome = run_args(&args, suite, executor);
    assert_eq!(outcome.conclusion.num_failed, 2);
    let xml = std::fs::read_to_string(&path).unwrap();
    let doc =
        roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML: {e}\n{xml}"));
    let testsuite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(testsuite.attribute("name"), Some("my-crate::lib"));
    assert_eq!(testsuite.attribute("tests"), Some("5"));
    assert_eq!(testsuite.attribute("failures"), Some("2"));
    let case = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some(name))
            .unwrap_or_else(|| panic!("no testcase {name}"))
    };
    let pass = case("x::pass");
    assert!(child(pass, "failure").is_none());
    assert_eq!(
        child(pass, "system-out").and_then(|n| n.text()),
        Some("hello & <world>\n")
    );
    let failure = child(case("x::panics"), "failure").unwrap();
    assert_eq!(
        failure.attribute("message"),
        Some("expected 1, got 2 at src/lib.rs:40:5")
    );
    assert_eq!(failure.attribute("type"), Some("panic"));
    let stderr = child(case("x::panics"), "system-err")
        .and_then(|n| n.text())
        .unwrap();
    assert!(stderr.starts_with("warn\n\nthread 'x::panics'"));
    let fault = child(case("x::faults"), "failure").unwrap();
    assert_eq!(fault.attribute("message"), Some("device fault: trap"));
    assert_eq!(fault.attribute("type"), Some("fault"));
    // Colour codes, NUL and invalid UTF-8 from the device cannot break the XML.
    assert_eq!(
        child(case("x::binary"), "system-out").and_then(|n| n.text()),
        Some("red \u{fffd}\n")
    );
    let skipped = child(case("x::skip"), "skipped").unwrap();
    assert_eq!(skipped.attribute("message"), Some("needs <gpu> & more"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn github_annotations_point_at_the_panic_location() {
    let mut suite = tests(&["gh::panics", "gh::faults", "gh::passes"]);
    suite[1].source_file = Some("src/fault.rs".into());
    let executor = MockExecutor::new()
        .with("gh::panics", panicked("left: 1\nright: 2 (100%)", 12, 1))
        .with(
            "gh::faults",
            ended(TestEnd::launch(LaunchEnd::Faulted(
                "illegal address".into(),
            ))),
        );
    let mut args = parse(&["--test-threads", "1"]);
    args.github_actions = true;
    let outcome = run_args(&args, suite.clone(), executor);
    let tail = outcome.stdout.split("test result: ").nth(1).unwrap();
    assert!(tail.contains(
        "\n::error file=src/lib.rs,line=12,col=5,title=gh%3A%3Apanics::test panicked: left: 1%0Aright: 2 (100%25)\n"
    ), "{tail}");
    assert!(tail.contains(
        "\n::error file=src/fault.rs,title=gh%3A%3Afaults::device fault: illegal address\n"
    ));
    assert_eq!(tail.matches("::error").count(), 2);

    // In json mode stdout stays pure JSON; annotations go to stderr.
    let mut json = parse(&["--format", "json", "--test-threads", "1"]);
    json.github_actions = true;
    let outcome = run_args(
        &json,
        suite,
        MockExecutor::new().with("gh::panics", panicked("p", 1, 1)),
    );
    assert!(!outcome.stdout.contains("::error"));
    assert!(outcome
        .stderr
        .starts_with("::error file=src/lib.rs,line=1,col=5,"));
}

#[test]
fn nocapture_prints_output_as_each_test_ends() {
    let executor = MockExecutor::new().with("a", passed("from a\n")).with(
        "b",
        TestRun {
            stdout: b"from b\n".to_vec(),
            stderr: b"err b\n".to_vec(),
            ..panicked("b broke", 3, 1)
        },
    );
    let outcome = run(
        &["--nocapture", "--test-threads", "1"],
        tests(&["a", "b"]),
        executor,
    );
    assert!(outcome
        .stdout
        .contains("test a ... from a\nok\ntest b ... from b\nFAILED\n"));
    // libtest: output already shown, so the failures section lists the name only.
    assert!(outcome.stdout.contains("\nfailures:\n\nfailures:\n    b\n"));
    assert_eq!(
        outcome.stderr,
        "err b\n\nthread 'b' (block (0,0,0), thread (0,0,0)) panicked at src/lib.rs:3:5:\nb broke\n"
    );
}

#[test]
fn show_output_lists_successes_with_their_output() {
    let outcome = run(
        &["--show-output", "--test-threads", "1"],
        tests(&["a", "b"]),
        MockExecutor::new().with("a", passed("from a\n")),
    );
    assert!(outcome
        .stdout
        .contains("\nsuccesses:\n\n---- a stdout ----\nfrom a\n\n\nsuccesses:\n    a\n    b\n"));
}

#[test]
fn list_prints_names_only_and_runs_nothing() {
    let mut suite = tests(&["b::two", "a::one", "c::three"]);
    suite[2].ignored = true;
    let outcome = run(
        &["--list", "--format", "terse"],
        suite.clone(),
        MockExecutor::new(),
    );
    assert_eq!(
        outcome.stdout,
        "a::one: test\nb::two: test\nc::three: test\n"
    );
    assert!(outcome.executor.ran().is_empty());
    let ignored = run(
        &["--list", "--format", "terse", "--ignored"],
        suite.clone(),
        MockExecutor::new(),
    );
    assert_eq!(ignored.stdout, "c::three: test\n");
    let pretty = run(&["--list", "one", "two"], suite, MockExecutor::new());
    assert_eq!(
        pretty.stdout,
        "a::one: test\nb::two: test\n\n2 tests, 0 benchmarks\n"
    );
}

#[test]
fn exact_filter_runs_one_test_as_nextest_asks() {
    let outcome = run(
        &["--exact", "m::t", "--nocapture"],
        tests(&["m::t", "m::t2", "x::m::t"]),
        MockExecutor::new(),
    );
    assert_eq!(outcome.executor.ran(), ["m::t"]);
    assert!(summary_line(&outcome.stdout)
        .contains("1 passed; 0 failed; 0 ignored; 0 measured; 2 filtered out"));
}

#[test]
fn partitions_split_the_run_between_jobs() {
    let names: Vec<String> = (0..7).map(|i| format!("p{i}")).collect();
    let suite: Vec<TestDesc> = names.iter().map(|n| TestDesc::new(n.as_str())).collect();
    let mut all = Vec::new();
    for shard in 1..=3 {
        let outcome = run(
            &[
                "--partition",
                &format!("count:{shard}/3"),
                "--test-threads",
                "1",
            ],
            suite.clone(),
            MockExecutor::new(),
        );
        let ran = outcome.executor.ran();
        assert_eq!(
            outcome.conclusion.num_filtered_out as usize,
            7 - ran.len(),
            "shard {shard}"
        );
        all.extend(ran);
    }
    all.sort();
    assert_eq!(all, names);
}

#[test]
fn an_executor_panic_fails_only_that_test() {
    struct Flaky;
    impl Executor for Flaky {
        fn run(&self, test: &TestDesc) -> TestRun {
            assert!(test.name != "boom", "executor bug");
            passed("")
        }
    }
    for threads in ["1", "2"] {
        let (conclusion, out, _) = run_executor(
            &parse(&["--test-threads", threads]),
            tests(&["a", "boom", "c"]),
            Arc::new(Flaky),
            false,
        );
        let conclusion = conclusion.unwrap();
        assert_eq!((conclusion.num_passed, conclusion.num_failed), (2, 1));
        assert!(out.contains("note: could not run the test: the executor panicked: executor bug"));
    }
}

#[test]
fn terse_output_wraps_with_a_progress_count() {
    let names: Vec<String> = (0..100).map(|i| format!("t{i:03}")).collect();
    let suite: Vec<TestDesc> = names.iter().map(|n| TestDesc::new(n.as_str())).collect();
    let outcome = run(&["-q", "--test-threads", "1"], suite, MockExecutor::new());
    let expected = format!(
        "\nrunning 100 tests\n{} 87/100\n{}\ntest result: ok.",
        ".".repeat(87),
        ".".repeat(13)
    );
    assert!(outcome.stdout.starts_with(&expected), "{}", outcome.stdout);
}

#[test]
fn colour_marks_the_verdicts_when_asked() {
    let executor = Arc::new(MockExecutor::new().with("b", panicked("x", 1, 1)));
    let (conclusion, out, _) = run_executor(
        &parse(&["--test-threads", "1"]),
        tests(&["a", "b"]),
        executor,
        true,
    );
    conclusion.unwrap();
    assert!(out.contains("test a ... \u{1b}[32mok\u{1b}[0m\n"));
    assert!(out.contains("test b ... \u{1b}[31mFAILED\u{1b}[0m\n"));
}

#[test]
fn unwritable_logfile_and_junit_paths_are_errors_not_panics() {
    let missing = std::env::temp_dir().join("gpurun-harness-no-such-dir/sub/file");
    let mut args = parse(&[]);
    args.logfile = Some(missing.clone());
    let unwritable = |args: HarnessArgs| {
        run_executor(&args, tests(&["a"]), Arc::new(MockExecutor::new()), false)
            .0
            .unwrap_err()
    };
    let error = unwritable(args);
    assert!(matches!(error, HarnessError::Logfile { .. }), "{error}");
    assert_eq!(error.exit_code(), 102);

    let mut args = parse(&[]);
    args.junit = Some(missing);
    let error = unwritable(args);
    assert!(
        error
            .to_string()
            .starts_with("failed to write the JUnit report to"),
        "{error}"
    );
}

/// A thousand tests, one and four at a time, each reported once. How long the harness takes
/// for them is measured by `cargo bench -p gpurun-e2e --bench harness`, not asserted here.
#[test]
fn a_thousand_tests_each_pass_once() {
    let names: Vec<String> = (0..1000).map(|i| format!("many::t{i:04}")).collect();
    let suite: Vec<TestDesc> = names.iter().map(|n| TestDesc::new(n.as_str())).collect();
    for threads in ["1", "4"] {
        let outcome = run(
            &["--test-threads", threads],
            suite.clone(),
            MockExecutor::new(),
        );
        assert_eq!(outcome.conclusion.num_passed, 1000);
        let mut ran = outcome.executor.ran();
        ran.sort();
        assert_eq!(ran, names, "{threads} thread(s)");
    }
}

#[test]
fn many_tests_with_scattered_durations_are_each_reported_once() {
    // 300 tests, 8 threads, delays of 0-3 ms from a fixed linear congruential sequence: bounded
    // (well under a second) and reproducible.
    let mut seed = 12345u64;
    let mut executor = MockExecutor::new();
    let mut suite = Vec::new();
    for i in 0..300 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let name = format!("stress::t{i:03}");
        let delay = Duration::from_micros((seed >> 33) % 3000);
        let run = if i % 7 == 0 {
            panicked(&format!("{name} failed"), 1, 1)
        } else {
            passed(&format!("{name} output\n"))
        };
        executor = executor.with_delay(&name, run, delay);
        suite.push(TestDesc {
            ignored: i % 11 == 0,
            ..TestDesc::new(name)
        });
    }
    let outcome = run(&["--test-threads", "8"], suite, executor);
    let ignored = (0..300).filter(|i| i % 11 == 0).count();
    let failed = (0..300).filter(|i| i % 7 == 0 && i % 11 != 0).count();
    let c = outcome.conclusion;
    assert_eq!(
        (
            c.num_passed as usize,
            c.num_failed as usize,
            c.num_ignored as usize
        ),
        (300 - ignored - failed, failed, ignored)
    );
    for i in 0..300 {
        let name = format!("stress::t{i:03}");
        let lines = outcome
            .stdout
            .lines()
            .filter(|line| line.starts_with(&format!("test {name} ... ")))
            .count();
        assert_eq!(lines, 1, "{name} reported {lines} times");
    }
    assert_eq!(outcome.executor.ran().len(), 300 - ignored);
    assert!(outcome.executor.max_concurrency() <= 8);
}

/// A passing run that took `wall` (and, where measured, `device` on the device).
fn timed(wall_ms: u64, device_ms: Option<u64>) -> TestRun {
    TestRun {
        duration: Duration::from_millis(wall_ms),
        device_time: device_ms.map(Duration::from_millis),
        ..passed("")
    }
}

/// Unit tests warn at 50 ms and fail `--ensure-time` at 100 ms; `slow` takes 200 ms and
/// `sluggish` 70 ms, `slow_fail` 200 ms and fails anyway.
fn timed_suite() -> (Vec<TestDesc>, MockExecutor) {
    let suite = tests(&["t::fast", "t::sluggish", "t::slow", "t::slow_fail"]);
    let executor = MockExecutor::new()
        .with("t::fast", timed(1, Some(1)))
        .with("t::sluggish", timed(70, None))
        .with("t::slow", timed(200, Some(150)))
        .with(
            "t::slow_fail",
            TestRun {
                duration: Duration::from_millis(200),
                ..panicked("boom", 3, 1)
            },
        );
    (suite, executor)
}

fn time_args(argv: &[&str]) -> HarnessArgs {
    let mut args = parse(argv);
    args.time_thresholds = gpurun_harness::time::Thresholds {
        unit: gpurun_harness::time::Threshold::millis(50, 100),
        integration: gpurun_harness::time::Threshold::millis(5_000, 10_000),
    };
    args
}

#[test]
fn ensure_time_fails_a_passing_test_past_its_critical_time_as_libtest_does() {
    let (suite, executor) = timed_suite();
    let outcome = run_args(
        &time_args(&["--test-threads", "1", "--ensure-time"]),
        suite,
        executor,
    );
    let out = &outcome.stdout;
    // --ensure-time implies --report-time; the device's time follows where it was measured.
    assert!(
        out.contains("test t::fast ... ok <0.001s> <device 0.001s>\n"),
        "{out}"
    );
    assert!(out.contains("test t::sluggish ... ok <0.070s>\n"), "{out}");
    assert!(
        out.contains("test t::slow ... FAILED (time limit exceeded) <0.200s> <device 0.150s>\n"),
        "{out}"
    );
    assert!(
        out.contains("test t::slow_fail ... FAILED <0.200s>\n"),
        "{out}"
    );
    assert!(
        out.contains("\nfailures (time limit exceeded):\n    t::slow\n"),
        "{out}"
    );
    assert!(out.contains("\nfailures:\n    t::slow_fail\n"), "{out}");
    assert!(summary_line(out).starts_with("test result: FAILED. 2 passed; 2 failed;"));
    assert_eq!(outcome.conclusion.num_failed, 2);

    // Integration tests have their own thresholds.
    let (suite, executor) = timed_suite();
    let mut args = time_args(&["--test-threads", "1", "--ensure-time"]);
    args.test_kind = gpurun_harness::time::TestKind::Integration;
    let outcome = run_args(&args, suite, executor);
    assert!(
        outcome.stdout.contains("test t::slow ... ok <0.200s>"),
        "{}",
        outcome.stdout
    );
    assert_eq!(outcome.conclusion.num_failed, 1);
}

#[test]
fn report_time_alone_shows_times_and_fails_nothing() {
    let (suite, executor) = timed_suite();
    let outcome = run_args(
        &time_args(&["--test-threads", "1", "--report-time"]),
        suite,
        executor,
    );
    assert!(
        outcome
            .stdout
            .contains("test t::slow ... ok <0.200s> <device 0.150s>\n"),
        "{}",
        outcome.stdout
    );
    assert_eq!(outcome.conclusion.num_failed, 1);
    // Without either flag no time is shown, as in libtest.
    let (suite, executor) = timed_suite();
    let outcome = run_args(&time_args(&["--test-threads", "1"]), suite, executor);
    assert!(
        outcome.stdout.contains("test t::slow ... ok\n"),
        "{}",
        outcome.stdout
    );
}

#[test]
fn json_and_junit_carry_exec_and_device_time() {
    let dir = std::env::temp_dir().join(format!("gpurun-harness-time-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.xml");
    let (suite, executor) = timed_suite();
    let outcome = run_args(
        &time_args(&[
            "--test-threads",
            "1",
            "--ensure-time",
            "--format",
            "json",
            "-Zunstable-options",
            "--junit",
            path.to_str().unwrap(),
        ]),
        suite,
        executor,
    );
    let events: Vec<serde_json::Value> = outcome
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let event = |name: &str| {
        events
            .iter()
            .find(|e| e["name"] == name && e["event"] != "started")
            .unwrap_or_else(|| panic!("no result for {name}: {}", outcome.stdout))
    };
    assert_eq!(event("t::slow")["event"], "failed");
    assert_eq!(event("t::slow")["reason"], "time limit exceeded");
    assert_eq!(event("t::slow")["exec_time"], 0.2);
    assert_eq!(event("t::slow")["device_time"], 0.15);
    assert!(event("t::sluggish").get("device_time").is_none());

    let xml = std::fs::read_to_string(&path).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let case = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("testcase") && n.attribute("name") == Some(name))
            .unwrap_or_else(|| panic!("no testcase {name}"))
    };
    // JUnit's time is the device's where measured, the wall time a property.
    assert_eq!(case("t::slow").attribute("time"), Some("0.150"));
    let wall = case("t::slow")
        .descendants()
        .find(|n| n.has_tag_name("property") && n.attribute("name") == Some("wall_time"))
        .unwrap();
    assert_eq!(wall.attribute("value"), Some("0.200000"));
    assert_eq!(case("t::sluggish").attribute("time"), Some("0.070"));
    let failure = child(case("t::slow"), "failure").unwrap();
    assert_eq!(failure.attribute("type"), Some("timeout"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `adds` and `stays` in two variants, `[host]` (all pass) and `[cuda]` (`adds` fails).
fn two_backends() -> (Vec<TestDesc>, gpurun_harness::variants::VariantExecutor) {
    let base = tests(&["adds", "stays"]);
    let mut executor = gpurun_harness::variants::VariantExecutor::new();
    let mut all = executor.add("host", &base, Arc::new(MockExecutor::new()));
    all.extend(executor.add(
        "cuda",
        &base,
        Arc::new(MockExecutor::new().with("[cuda] adds", panicked("wrong sum", 3, 1))),
    ));
    (all, executor)
}

fn run_variants(argv: &[&str]) -> (Conclusion, String) {
    let (tests, executor) = two_backends();
    let (conclusion, out, _) = run_executor(&parse(argv), tests, Arc::new(executor), false);
    (conclusion.unwrap(), out)
}

#[test]
fn variants_run_under_their_labels_and_the_summary_names_the_difference() {
    let (conclusion, out) = run_variants(&["--test-threads", "1"]);
    for line in [
        "test [cuda] adds ... FAILED\n",
        "test [cuda] stays ... ok\n",
        "test [host] adds ... ok\n",
        "test [host] stays ... ok\n",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    assert_eq!(conclusion.num_failed, 1);
    assert!(
        out.ends_with(
            "note: 1 test passes on some backends and fails on others: adds ([cuda] FAILED, \
             [host] ok)\n"
        ),
        "{out}"
    );

    // Filters see the label: one variant exactly, every variant of a name, or skip a backend.
    let (conclusion, out) = run_variants(&["--exact", "[cuda] adds"]);
    assert_eq!(
        (conclusion.num_passed, conclusion.num_failed),
        (0, 1),
        "{out}"
    );
    let (conclusion, _) = run_variants(&["adds"]);
    assert_eq!((conclusion.num_passed, conclusion.num_failed), (1, 1));
    let (conclusion, out) = run_variants(&["--skip", "[cuda]"]);
    assert_eq!((conclusion.num_passed, conclusion.num_failed), (2, 0));
    assert!(!out.contains("note: "), "{out}");
}

#[test]
fn gpu_only_tests_are_ignored_on_the_emulation_whatever_the_ignore_flags_say() {
    let suite = || {
        let mut suite = tests(&["timing", "plain", "slow"]);
        suite[0].gpu_only = true;
        suite[2].ignored = true;
        suite
    };
    for argv in [&[][..], &["--include-ignored"], &["--ignored"]] {
        let mut argv = argv.to_vec();
        argv.extend(["--test-threads", "1"]);
        let outcome = run(&argv, suite(), MockExecutor::new().emulating());
        assert!(
            outcome
                .stdout
                .contains("test timing ... ignored, needs a GPU\n"),
            "{argv:?}: {}",
            outcome.stdout
        );
        assert!(
            !outcome.executor.ran().contains(&"timing".to_owned()),
            "{argv:?}"
        );
    }
    // --include-ignored still runs the plainly ignored test.
    let outcome = run(
        &["--include-ignored", "--test-threads", "1"],
        suite(),
        MockExecutor::new().emulating(),
    );
    assert_eq!(outcome.executor.ran(), ["plain", "slow"]);
    // On a GPU the test runs like any other.
    let outcome = run(&["--test-threads", "1"], suite(), MockExecutor::new());
    assert!(
        outcome.stdout.contains("test timing ... ok\n"),
        "{}",
        outcome.stdout
    );
}
