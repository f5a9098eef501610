//! A libtest-compatible test binary over the scripted [`MockExecutor`]: the nine tests of the
//! repository's `tests/nightly/data/libtest_reference.rs` with the same outcomes, output and
//! panic locations, so `tests/nightly/against_libtest.rs` (package gpurun-e2e) can diff our
//! output against the real libtest's. Also the
//! subject of the harness's process-level tests (exit codes, environment, files).
//!
//! `cargo run -p gpurun-harness --bin gpurun-mock-suite -- [libtest args]`

use std::sync::Arc;

use gpurun_harness::testing::{passed, MockExecutor};
use gpurun_harness::{
    run_to_exit_code, HarnessArgs, PanicReport, ShouldPanic, TestDesc, TestEnd, TestRun,
};

const FILE: &str = "libtest_reference.rs";

fn test(name: &str, should_panic: ShouldPanic, ignore: Option<Option<&str>>) -> TestDesc {
    TestDesc {
        should_panic,
        ignored: ignore.is_some(),
        ignore_reason: ignore.flatten().map(str::to_owned),
        ..TestDesc::new(format!("tests::{name}"))
    }
}

/// A test whose source location is known, as libtest prints it for "did not panic" failures.
fn located(test: TestDesc, line: u32, column: u32) -> TestDesc {
    TestDesc {
        source_file: Some(format!("{FILE}:{line}:{column}")),
        ..test
    }
}

fn panicked_at(message: &str, line: u32, column: u32) -> TestRun {
    TestRun {
        end: TestEnd::completed(
            Some(PanicReport {
                message: message.to_owned(),
                file: FILE.to_owned(),
                line,
                column,
                thread: [0, 0, 0],
                block: [0, 0, 0],
            }),
            1,
        ),
        ..passed("")
    }
}

fn main() {
    let args = HarnessArgs::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
    let expected = || ShouldPanic::Expected("abc".to_owned());
    // Deliberately unsorted: the harness sorts by name, as libtest does.
    let tests = vec![
        test("sp_ok", ShouldPanic::Yes, None),
        test("adds", ShouldPanic::No, None),
        test("fails", ShouldPanic::No, None),
        test("ign", ShouldPanic::No, Some(None)),
        test("ign_reason", ShouldPanic::No, Some(Some("needs gpu"))),
        located(test("sp_nopanic", ShouldPanic::Yes, None), 11, 32),
        test("sp_exp_ok", expected(), None),
        test("sp_exp_wrong", expected(), None),
        located(test("sp_exp_nopanic", expected(), None), 14, 50),
    ];
    let fails = TestRun {
        stdout: b"some device output\n".to_vec(),
        stderr: b"err output\n".to_vec(),
        ..panicked_at("boom 42", 7, 83)
    };
    let executor = MockExecutor::new()
        .with("tests::adds", passed("out of adds\n"))
        .with("tests::fails", fails)
        .with("tests::sp_ok", panicked_at("x", 10, 42))
        .with("tests::sp_exp_ok", panicked_at("xxabcxx", 12, 64))
        .with("tests::sp_exp_wrong", panicked_at("nope \"q\"", 13, 67));
    std::process::exit(run_to_exit_code(&args, tests, Arc::new(executor)));
}
