//! `cargo gpurun test` and test images under `cargo gpurun run` (the `target.runner` path):
//! counts, summary lines, listing, filters, should_panic, JSON, JUnit, exit codes, recovery.

use gpurun_e2e::{
    assert_contains, assert_test_lines, describe, fixtures_dir, gpurun, host_images,
    host_target_dir, json_lines, lines_starting, run_fixture, summary, text, TARGETS_LIST,
};

/// What libtest prints for every test of `basic` (see fixtures/basic/src/lib.rs).
const BASIC_RESULTS: &[(&str, &str)] = &[
    ("barrier_orders_threads", "ok"),
    ("fails_with_assert", "FAILED"),
    ("grid_ids_are_in_range", "ok"),
    ("ignored", "ignored"),
    ("ignored_with_reason", "ignored, needs a second GPU"),
    ("nested::passes", "ok"),
    ("one_thread_panics", "FAILED"),
    ("passes", "ok"),
    ("should_panic_but_returns - should panic", "FAILED"),
    ("should_panic_expected_differs - should panic", "FAILED"),
    ("should_panic_expected_matches - should panic", "ok"),
    ("should_panic_panics - should panic", "ok"),
    ("three_dimensional_block", "ok"),
];

fn run_image(image: &str, args: &[&str]) -> std::process::Output {
    run_fixture(&[], image, args).output().unwrap()
}

/// Asserts that the summary line on `output`'s stdout starts with `start`.
#[track_caller]
fn assert_summary_starts(output: &std::process::Output, start: &str) {
    assert!(
        summary(&text(&output.stdout)).starts_with(start),
        "{}",
        describe(output)
    );
}

/// Asserts the `running N tests` line of a one-suite run and the start of its summary.
#[track_caller]
fn assert_one_suite(output: &std::process::Output, running: &str, summary_start: &str) {
    assert!(
        text(&output.stdout).lines().any(|line| line == running),
        "{}",
        describe(output)
    );
    assert_summary_starts(output, summary_start);
}

/// `cargo gpurun test -p PACKAGE --target host [-- HARNESS_ARGS]` after the fixtures' host
/// build; asserts that it exits with `code`.
#[track_caller]
fn test_on_host(package: &str, harness_args: &[&str], code: i32) -> std::process::Output {
    host_images();
    let mut args = vec!["test", "-p", package, "--target", "host"];
    if !harness_args.is_empty() {
        args.push("--");
        args.extend_from_slice(harness_args);
    }
    let output = gpurun(&args).output().unwrap();
    assert_eq!(output.status.code(), Some(code), "{}", describe(&output));
    output
}

/// The first JSON event that `wanted` accepts of a passing [`test_on_host`] run with
/// `HARNESS_ARGS --format json -Zunstable-options`.
#[track_caller]
fn json_event_on_host(
    package: &str,
    harness_args: &[&str],
    wanted: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let mut args = harness_args.to_vec();
    args.extend_from_slice(&["--format", "json", "-Zunstable-options"]);
    let output = test_on_host(package, &args, 0);
    json_lines(&text(&output.stdout))
        .find(wanted)
        .unwrap_or_else(|| panic!("{}", describe(&output)))
}

/// The checks `scripts/gpu-check.sh` runs on a GPU pass on the host emulation, each as the GPU
/// rows run them: a deep panic reported with its message, ten launch shapes one after another
/// in one module, many barriers, a failed float assert whose message keeps both values.
#[test]
fn launch_checks_pass_on_the_host() {
    for filter in [
        &["deep_panic"][..],
        &["dims_", "--test-threads", "1"],
        &["barrier_heavy"],
        &["float_assert"],
    ] {
        let output = test_on_host("launch-checks", filter, 0);
        let stdout = text(&output.stdout);
        let expected = match filter[0] {
            "dims_" => "test result: ok. 10 passed; 0 failed",
            _ => "test result: ok. 1 passed; 0 failed",
        };
        assert_contains(&stdout, expected, &output);
    }
}

#[test]
fn cargo_gpurun_test_reports_every_result_of_basic() {
    let output = test_on_host("basic", &[], 101);
    let stdout = text(&output.stdout);
    assert_test_lines(&output, BASIC_RESULTS);
    assert_summary_starts(&output, "test result: FAILED. 7 passed; 4 failed; 2 ignored; 0 measured; 0 filtered out; finished in");
    // The failure section shows captured device output and the panic with its location.
    for needle in [
        "---- fails_with_assert stdout ----\noutput before the failure\n",
        "panicked at basic/src/lib.rs:16:5:\nassertion `left == right` failed: arithmetic is broken",
        "thread (3,0,0)",
        "panic did not contain expected string",
        "test did not panic as expected",
    ] {
        assert_contains(&stdout, needle, &output);
    }
    // Cargo's header, the image path relative to the working directory (the fixtures).
    assert!(
        text(&output.stderr).lines().any(|line| line
            == format!(
                "     Running unittests src/lib.rs ({}/debug/libbasic.so)",
                host_target_dir()
            )),
        "{}",
        describe(&output)
    );
}

/// `cargo gpurun test --manifest-path fixtures/Cargo.toml -p targets --target host ARGS`: the
/// lib, tests/integration.rs and examples/demo.rs, each its own suite, in cargo's order (see
/// fixtures/targets).
fn test_targets(args: &[&str]) -> std::process::Output {
    let manifest = fixtures_dir().join("Cargo.toml");
    let mut all = vec![
        "test",
        "--manifest-path",
        manifest.to_str().unwrap(),
        "-p",
        "targets",
        "--target",
        "host",
    ];
    all.extend_from_slice(args);
    gpurun(&all).output().unwrap()
}

/// [`test_targets`] `-- HARNESS_ARGS` after the fixtures' host build.
fn run_targets(harness_args: &[&str]) -> std::process::Output {
    host_images();
    let mut args = vec!["--"];
    args.extend_from_slice(harness_args);
    test_targets(&args)
}

/// The `     Running ...` lines on stderr, with the hash of the image `deps/STEM-HASH` cut off.
fn running_headers(stderr: &str, stem: &str) -> Vec<String> {
    let deps = format!("/deps/{stem}-");
    stderr
        .lines()
        .filter(|line| line.starts_with("     Running "))
        .map(|line| match line.find(&deps) {
            Some(at) if line.ends_with(')') => format!("{}{deps}HASH)", &line[..at]),
            _ => line.to_owned(),
        })
        .collect()
}

/// Cargo's headers of the three suites of `fixtures/targets`, built for the host.
fn targets_headers() -> Vec<String> {
    let dir = host_target_dir();
    vec![
        format!("     Running unittests src/lib.rs ({dir}/debug/libtargets.so)"),
        format!("     Running tests/integration.rs ({dir}/debug/deps/integration-HASH)"),
        format!("     Running unittests examples/demo.rs ({dir}/debug/examples/demo)"),
    ]
}

#[test]
fn release_test_targets_load_on_the_host() {
    // The fixtures' release profile has `lto = true`, which once made the host's shared test
    // images fail to link (local-exec thread-locals in a shared object).
    let output = test_targets(&["--release"]);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let stdout = text(&output.stdout);
    for summary in [
        "test result: ok. 2 passed; 0 failed;",
        "test result: FAILED. 1 passed; 1 failed;",
        "test result: ok. 1 passed; 0 failed;",
    ] {
        assert!(stdout.contains(summary), "{summary}\n{}", describe(&output));
    }
}

#[test]
fn cargo_gpurun_test_runs_the_lib_tests_and_examples_as_suites() {
    let output = run_targets(&["--test-threads", "1"]);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert_eq!(
        running_headers(&stderr, "integration"),
        targets_headers(),
        "{}",
        describe(&output)
    );
    // The libtest test target is not built, and one line says so.
    assert_eq!(
        lines_starting(&stderr, "warning:"),
        ["warning: skipping test target `uses_libtest` of `targets` (tests/uses_libtest.rs): it \
          uses libtest, which cannot run on a GPU; set `harness = false` in its [[test]] section \
          of Cargo.toml"],
        "{}",
        describe(&output)
    );

    // One block per suite, in the order of the headers: its test lines, then its summary.
    let stdout = text(&output.stdout);
    let mut suites: Vec<(String, Vec<String>, String)> = Vec::new();
    for line in stdout.lines() {
        if line.starts_with("running ") {
            suites.push((line.to_owned(), Vec::new(), String::new()));
        } else if let Some((_, tests, summary)) = suites.last_mut() {
            if line.starts_with("test result:") {
                // Up to the time, which varies.
                *summary = line[..line.find("; finished").unwrap_or(line.len())].to_owned();
            } else if line.starts_with("test ") {
                tests.push(line.to_owned());
            }
        }
    }
    let expected = [
        (
            "running 2 tests",
            vec![
                "test lib_passes ... ok",
                "test lib_passes_on_every_thread ... ok",
            ],
            "test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out",
        ),
        (
            "running 2 tests",
            vec![
                "test integration_fails_on_purpose ... FAILED",
                "test integration_passes ... ok",
            ],
            "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        ),
        (
            "running 1 test",
            vec!["test demo_passes ... ok"],
            "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out",
        ),
    ];
    assert_eq!(suites.len(), expected.len(), "{}", describe(&output));
    for ((running, mut tests, summary), (want_running, want_tests, want_summary)) in
        suites.into_iter().zip(expected)
    {
        tests.sort();
        assert_eq!(running, want_running, "{}", describe(&output));
        assert_eq!(tests, want_tests, "{}", describe(&output));
        assert_eq!(summary, want_summary, "{}", describe(&output));
    }
    assert_contains(&stdout, "the integration suite fails on purpose", &output);
}

#[test]
fn cargo_gpurun_test_list_lists_every_suite() {
    let output = run_targets(&["--list"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(
        running_headers(&text(&output.stderr), "integration"),
        targets_headers(),
        "{}",
        describe(&output)
    );
    let stdout = text(&output.stdout);
    let listed: Vec<&str> = stdout.lines().filter(|line| !line.is_empty()).collect();
    assert_eq!(listed, TARGETS_LIST, "{}", describe(&output));
}

#[test]
fn a_lib_without_harness_runs_its_cfg_test_unit_tests() {
    // fixtures/unit-tests: `[lib] harness = false`, so its lib suite is the lib built in test
    // mode, where the `#[cfg(test)] mod tests` exists; the plain lib has no tests.
    let output = test_on_host("unit-tests", &["--test-threads", "1"], 0);
    // Cargo's header for a lib's unit tests, naming the test-mode executable (linked as a shared
    // object) instead of the plain `libunit_tests.so`.
    assert_eq!(
        running_headers(&text(&output.stderr), "unit_tests"),
        [format!(
            "     Running unittests src/lib.rs ({}/debug/deps/unit_tests-HASH)",
            host_target_dir()
        )],
        "{}",
        describe(&output)
    );
    let stdout = text(&output.stdout);
    let mut tests: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("test ") && !line.starts_with("test result:"))
        .collect();
    tests.sort_unstable();
    assert_eq!(
        tests,
        [
            "test tests::matches_the_closed_form_on_every_thread ... ok",
            "test tests::rejects_a_wrong_sum - should panic ... ok",
            "test tests::small_sums ... ok",
        ],
        "{}",
        describe(&output)
    );
    assert_one_suite(
        &output,
        "running 3 tests",
        "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; \
             finished in",
    );
}

#[test]
fn an_image_without_tests_is_a_suite_of_zero_tests() {
    // fixtures/hello is a program: its lib has no tests, and cargo would still run the suite.
    let output = test_on_host("hello", &[], 0);
    assert_one_suite(
        &output,
        "running 0 tests",
        "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out;",
    );
}

#[test]
fn filters_exact_skip_and_ignored() {
    let output = run_image("basic", &["passes", "three"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_summary_starts(
        &output,
        "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 10 filtered out;",
    );
    let exact = run_image("basic", &["--exact", "passes"]);
    assert_contains(
        summary(&text(&exact.stdout)),
        "1 passed; 0 failed; 0 ignored; 0 measured; 12 filtered out",
        &exact,
    );
    let skipped = run_image("basic", &["passes", "--skip", "nested"]);
    assert_contains(summary(&text(&skipped.stdout)), "1 passed;", &skipped);
    let ignored = run_image("basic", &["--ignored"]);
    let stdout = text(&ignored.stdout);
    // `ignored` panics when run; `ignored_with_reason` passes.
    assert_contains(&stdout, "test ignored ... FAILED", &ignored);
    assert_contains(&stdout, "test ignored_with_reason ... ok", &ignored);
    assert_eq!(ignored.status.code(), Some(101));
}

#[test]
fn list_terse_matches_libtest() {
    let output = run_image("basic", &["--list", "--format", "terse"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let mut expected: Vec<String> = BASIC_RESULTS
        .iter()
        .map(|(name, _)| format!("{}: test", name.trim_end_matches(" - should panic")))
        .collect();
    expected.sort();
    let listed: Vec<String> = text(&output.stdout).lines().map(str::to_string).collect();
    assert_eq!(listed, expected);
}

#[test]
fn json_events_are_valid_and_complete() {
    let output = run_image("basic", &["-Z", "unstable-options", "--format", "json"]);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let mut finished = 0;
    let mut suite_end = None;
    for line in text(&output.stdout).lines() {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
        match (event["type"].as_str(), event["event"].as_str()) {
            (Some("test"), Some("ok" | "failed" | "ignored")) => finished += 1,
            (Some("suite"), Some("failed")) => suite_end = Some(event),
            _ => {}
        }
    }
    assert_eq!(finished, 13);
    let suite_end = suite_end.expect("a suite `failed` event");
    assert_eq!(suite_end["passed"], 7);
    assert_eq!(suite_end["failed"], 4);
    assert_eq!(suite_end["ignored"], 2);
}

#[test]
fn junit_report_is_written_and_parses() {
    let path = std::env::temp_dir().join(format!("gpurun-junit-{}.xml", std::process::id()));
    let output = run_image("basic", &["--junit", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let xml = std::fs::read_to_string(&path).expect("the JUnit file exists");
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert_eq!(xml.matches("<testcase").count(), 13, "{xml}");
    assert_eq!(xml.matches("<failure").count(), 4, "{xml}");
    assert!(xml.contains("arithmetic is broken"), "{xml}");
    let _ = std::fs::remove_file(path);
}

#[test]
fn one_junit_report_holds_every_suite_of_a_run() {
    let path = std::env::temp_dir().join(format!("gpurun-junit-all-{}.xml", std::process::id()));
    // A report left from an earlier run is replaced, not added to.
    std::fs::write(&path, "stale").unwrap();
    let output = run_targets(&["--junit", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let xml = std::fs::read_to_string(&path).expect("the JUnit file exists");
    let _ = std::fs::remove_file(&path);
    assert!(xml.starts_with("<?xml"), "{xml}");
    for suite in ["targets", "integration", "demo"] {
        assert!(
            xml.contains(&format!("<testsuite name=\"{suite}\"")),
            "no suite {suite}:\n{xml}"
        );
    }
    assert_eq!(xml.matches("<testsuite ").count(), 3, "{xml}");
    assert_eq!(xml.matches("<testcase").count(), 5, "{xml}");
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
    assert!(
        xml.contains("tests=\"5\" failures=\"1\""),
        "the totals cover every suite:\n{xml}"
    );
}

#[test]
fn github_annotations_point_at_the_panic() {
    let output = run_fixture(&[], "basic", &["fails_with_assert"])
        .env("GITHUB_ACTIONS", "true")
        .output()
        .unwrap();
    let stdout = text(&output.stdout);
    assert_contains(
        &stdout,
        "::error file=basic/src/lib.rs,line=16,col=5",
        &output,
    );
}

#[test]
fn a_fault_and_a_hang_do_not_hide_the_other_results() {
    let output = run_image("recovery", &["--test-timeout", "2", "--test-threads", "2"]);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let stdout = text(&output.stdout);
    assert_test_lines(
        &output,
        &[
            ("a_passes_before", "ok"),
            ("b_faults", "FAILED"),
            ("c_passes_between", "ok"),
            ("d_hangs", "FAILED"),
            ("e_fails_after", "FAILED"),
            ("f_passes_after", "ok"),
        ],
    );
    for needle in [
        "SIGSEGV",
        "timed out after 2s",
        "a real failure after the hang",
    ] {
        assert_contains(&stdout, needle, &output);
    }
    assert_summary_starts(
        &output,
        "test result: FAILED. 3 passed; 3 failed; 0 ignored;",
    );
}

#[test]
fn many_tests_run_in_one_worker_load() {
    let output = run_image("many-tests", &["--test-threads", "2", "--format", "terse"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_summary_starts(&output, "test result: ok. 1000 passed; 0 failed;");
}

#[test]
fn test_timeout_comes_from_package_metadata() {
    host_images();
    // fixtures/recovery/Cargo.toml sets `test-timeout = 2`: the report says which timeout
    // ended the test (how fast is for no test to say on a loaded machine).
    let output = test_on_host("recovery", &["d_hangs"], 101);
    let stdout = text(&output.stdout);
    assert_contains(&stdout, "timed out after 2s", &output);
}

#[test]
fn lane_sizes_1_32_and_64_give_the_same_results() {
    for lane_size in ["1", "32", "64"] {
        let output = run_fixture(
            &["--lane-size", lane_size],
            "basic",
            &["--test-threads", "1"],
        )
        .output()
        .unwrap();
        assert!(
            summary(&text(&output.stdout))
                .starts_with("test result: FAILED. 7 passed; 4 failed; 2 ignored;"),
            "lane size {lane_size}: {}",
            describe(&output)
        );
    }
}

/// fixtures/shared-memory on the host emulation: threads of a block exchange values through
/// their block's shared memory across barriers, every block has its own, atomics work on it, a
/// declared layout (`shared_layout!`) hands out distinct aligned arrays, and a launch that
/// gives too little (or an index past an array) fails the test with a message; the same with
/// lanes of 1, 32 and 64.
#[test]
fn shared_memory_kernels_pass_on_the_host_with_lane_sizes_1_32_and_64() {
    host_images();
    for lane_size in ["1", "32", "64"] {
        let output = run_fixture(&["--lane-size", lane_size], "shared-memory", &[])
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "lane size {lane_size}: {}",
            describe(&output)
        );
        assert_test_lines(
            &output,
            &[
                ("a_block_sums_in_shared_memory", "ok"),
                (
                    "arrays_are_carved_one_after_another_at_their_alignment",
                    "ok",
                ),
                ("every_block_has_its_own_shared_memory", "ok"),
                ("atomics_work_on_shared_memory", "ok"),
                ("a_launch_without_shared_memory_has_none", "ok"),
                (
                    "an_array_larger_than_the_launch_gave_panics - should panic",
                    "ok",
                ),
                ("an_index_past_the_array_panics - should panic", "ok"),
                ("a_declared_layout_hands_out_distinct_aligned_arrays", "ok"),
                (
                    "a_layout_larger_than_the_launch_gave_panics - should panic",
                    "ok",
                ),
            ],
        );
        assert_summary_starts(&output, "test result: ok. 9 passed; 0 failed;");
    }
}

/// `--report-time` shows each test's wall time and the host emulation's own time of its launch,
/// in the pretty and JSON formats; `--ensure-time` with a critical time of 0 ms fails a test
/// that passed, as libtest does.
#[test]
fn report_time_shows_wall_and_device_time_and_ensure_time_fails_slow_tests() {
    let output = test_on_host(
        "basic",
        &["--report-time", "--test-threads", "1", "--exact", "passes"],
        0,
    );
    let stdout = text(&output.stdout);
    let line = stdout
        .lines()
        .find(|line| line.starts_with("test passes ... ok <"))
        .unwrap_or_else(|| panic!("{}", describe(&output)));
    assert!(
        line.contains("s> <device ") && line.ends_with("s>"),
        "{line}"
    );

    let event = json_event_on_host("basic", &["--report-time", "--exact", "passes"], |event| {
        event["name"] == "passes" && event["event"] == "ok"
    });
    assert!(event["exec_time"].as_f64().is_some(), "{event}");
    let device = event["device_time"].as_f64().expect("device_time");
    assert!(device <= event["exec_time"].as_f64().unwrap(), "{event}");

    let mut command = gpurun(&[
        "test",
        "-p",
        "basic",
        "--target",
        "host",
        "--",
        "--ensure-time",
        "--exact",
        "passes",
    ]);
    let output = command.env("RUST_TEST_TIME_UNIT", "0,0").output().unwrap();
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    assert_contains(
        &text(&output.stdout),
        "test passes ... FAILED (time limit exceeded) <",
        &output,
    );
    assert_contains(
        &text(&output.stdout),
        "failures (time limit exceeded):\n    passes\n",
        &output,
    );
}

/// `--require-gpu` (or `GPURUN_REQUIRE_GPU=1`) never falls back to the host emulation: the host
/// target is refused on any machine, and where no GPU is found the error names why each GPU
/// backend has none; `cargo gpurun run` refuses a host image the same way.
#[test]
fn require_gpu_refuses_the_host_emulation_and_names_why_there_is_no_gpu() {
    host_images();
    let output = gpurun(&["test", "-p", "basic", "--target", "host", "--require-gpu"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert_contains(
        &text(&output.stderr),
        "error: a GPU is required (--require-gpu or GPURUN_REQUIRE_GPU=1), but the host target \
         runs on the host emulation backend, not a GPU",
        &output,
    );
    assert!(output.stdout.is_empty(), "{}", describe(&output));

    let gpu_present = gpurun(&["info"]).output().unwrap().status.success();
    let output = gpurun(&["test", "-p", "basic"])
        .env("GPURUN_REQUIRE_GPU", "1")
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert!(
        !stderr.contains("running tests on the host emulation backend"),
        "{}",
        describe(&output)
    );
    if gpu_present {
        // basic fails four tests on purpose.
        assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    } else {
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
        assert_contains(&stderr, "but no GPU was found (cuda: ", &output);
        assert_contains(&stderr, "; hsa: ", &output);
        assert!(output.stdout.is_empty(), "{}", describe(&output));
    }

    let output = run_fixture(&["--require-gpu"], "hello", &[])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert_contains(&text(&output.stderr), "a GPU is required", &output);
}

/// `--backend host,cuda` builds each suite for both targets and runs every test on each, named
/// `[host] NAME` and `[cuda] NAME`; filters see the label; JUnit groups each backend's tests
/// under a classname of its own; and where the CUDA tests cannot run (no GPU here), the summary
/// says in one line which tests pass on one backend and fail on the other.
#[test]
fn several_backends_run_each_test_on_each_and_name_the_differences() {
    host_images();
    let junit =
        std::env::temp_dir().join(format!("gpurun-e2e-backends-{}.xml", std::process::id()));
    let on_both = |args: &[&str]| {
        let mut all = vec!["test", "-p", "basic", "--backend", "host,cuda"];
        all.extend_from_slice(args);
        gpurun(&all).output().unwrap()
    };
    let output = on_both(&[
        "--",
        "--test-threads",
        "2",
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let stdout = text(&output.stdout);
    for line in ["test [host] passes ... ok", "test [cuda] passes ... "] {
        assert_contains(&stdout, line, &output);
    }
    // One suite of both images, under cargo's header.
    assert_contains(
        &text(&output.stderr),
        &format!(
            "Running unittests src/lib.rs ({}/debug/libbasic.so, target/nvptx64-nvidia-cuda/",
            host_target_dir()
        ),
        &output,
    );
    let gpu_present = gpurun(&["info"]).output().unwrap().status.success();
    if !gpu_present {
        assert_contains(
            &stdout,
            "note: 7 tests pass on some backends and fail on others: barrier_orders_threads \
             ([cuda] FAILED, [host] ok)",
            &output,
        );
    }
    let xml = std::fs::read_to_string(&junit).unwrap();
    let _ = std::fs::remove_file(&junit);
    assert!(xml.contains("classname=\"basic::host\""), "{xml}");
    assert!(xml.contains("classname=\"basic::cuda\""), "{xml}");

    let output = on_both(&["--", "--exact", "[host] passes"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_contains(
        &text(&output.stdout),
        "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 25 filtered out",
        &output,
    );

    let output = on_both(&["--target", "host"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert_contains(
        &text(&output.stderr),
        "--backend with several backends picks the targets itself; leave out --target",
        &output,
    );
}

/// `#[gpurun::test(gpu_only)]` on the host emulation: reported as `ignored, needs a GPU`, and
/// not run even with `--include-ignored` (the test fails wherever it is not a GPU build).
#[test]
fn gpu_only_tests_are_ignored_on_the_host_emulation() {
    for extra in [&[][..], &["--include-ignored"], &["--ignored"]] {
        let mut args = vec!["--test-threads", "1"];
        args.extend_from_slice(extra);
        let output = test_on_host("gpu-only", &args, 0);
        assert_contains(
            &text(&output.stdout),
            "test runs_only_on_a_gpu ... ignored, needs a GPU\n",
            &output,
        );
    }
    let event = json_event_on_host("gpu-only", &["--include-ignored"], |event| {
        event["name"] == "runs_only_on_a_gpu" && event["event"] != "started"
    });
    assert_eq!(event["event"], "ignored", "{event}");
    assert_eq!(event["message"], "needs a GPU", "{event}");
}
