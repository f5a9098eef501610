//! `#[gpurun::bench]` end to end on the host emulation (`fixtures/benches`): benchmarks run once
//! as tests without `--bench`, as libtest runs them.

use gpurun_tests::{assert_test_lines, describe, gpurun, host_images, text};

const FIXTURE: &str = "benches";

/// Every benchmark of the fixture, in name order.
const BENCHES: [&str; 5] = ["copy", "empty", "matmul", "spin", "steady"];

/// `cargo gpurun test` runs each benchmark as a test of one iteration: it passes, and nothing
/// is measured.
#[test]
fn benchmarks_run_once_as_tests_without_bench() {
    host_images();
    let output = gpurun(&["test", "-p", FIXTURE, "--target", "host"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let results: Vec<(&str, &str)> = BENCHES.iter().map(|name| (*name, "ok")).collect();
    assert_test_lines(&output, &results);
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured;"),
        "{}",
        describe(&output)
    );
}
