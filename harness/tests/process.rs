//! The harness as a process (`gpurun-mock-suite`): exit codes, usage errors, the environment
//! variables it reads, and errors reported without a panic.

use std::process::{Command, Output};

fn mock(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpurun-mock-suite"));
    command
        .args(args)
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("RUST_TEST_NOCAPTURE")
        .env_remove("RUST_TEST_THREADS")
        .env_remove("RUST_TEST_TIME_UNIT")
        .env_remove("RUST_TEST_TIME_INTEGRATION");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn exit_codes_follow_libtest() {
    assert_eq!(mock(&[], &[]).status.code(), Some(101));
    assert_eq!(mock(&["adds", "sp_ok"], &[]).status.code(), Some(0));
    assert_eq!(mock(&["no_such_test"], &[]).status.code(), Some(0));
    assert_eq!(mock(&["--list"], &[]).status.code(), Some(0));
    let help = mock(&["--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("--test-threads"));
}

#[test]
fn usage_errors_exit_2_with_a_message() {
    for args in [
        &["--no-such-flag"][..],
        &["--test-threads", "many"],
        &["--partition", "count:5/4"],
        &["--format", "xml"],
    ] {
        let output = mock(args, &[]);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            text(&output.stderr).starts_with("error: "),
            "{args:?}: {}",
            text(&output.stderr)
        );
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn flags_cargo_and_ides_pass_are_accepted() {
    let output = mock(
        &[
            "-Z",
            "unstable-options",
            "--report-time",
            "--shuffle",
            "--ensure-time",
            "adds",
        ],
        &[],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains("test tests::adds ... ok <"));
}

#[test]
fn github_actions_env_turns_on_annotations() {
    let output = mock(
        &["fails", "--test-threads", "1"],
        &[("GITHUB_ACTIONS", "true")],
    );
    assert!(text(&output.stdout).contains(
        "::error file=libtest_reference.rs,line=7,col=83,title=tests%3A%3Afails::test panicked: boom 42\n"
    ));
    let plain = mock(&["fails", "--test-threads", "1"], &[]);
    assert!(!text(&plain.stdout).contains("::error"));
}

#[test]
fn rust_test_threads_is_honoured_and_checked() {
    let bad = mock(&[], &[("RUST_TEST_THREADS", "zero")]);
    assert_eq!(bad.status.code(), Some(102));
    assert_eq!(
        text(&bad.stderr),
        "error: RUST_TEST_THREADS is `zero`, should be a positive integer\n"
    );
    // One thread: the pretty format prints each name before its test runs, as libtest does.
    let one = mock(&["adds", "--nocapture"], &[("RUST_TEST_THREADS", "1")]);
    assert!(text(&one.stdout).contains("test tests::adds ... out of adds\nok\n"));
}

#[test]
fn unwritable_logfile_is_a_clear_error() {
    let output = mock(&["--logfile", "/nonexistent-dir/gpurun/log.txt"], &[]);
    assert_eq!(output.status.code(), Some(102));
    let stderr = text(&output.stderr);
    assert!(
        stderr
            .starts_with("error: failed to write the log file `/nonexistent-dir/gpurun/log.txt`: "),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
}

#[test]
fn rust_test_nocapture_env_and_no_capture_alias_disable_capture() {
    let uncaptured = "test tests::adds ... out of adds\nok\n";
    for (args, env) in [
        (
            &["adds", "--test-threads", "1"][..],
            &[("RUST_TEST_NOCAPTURE", "1")][..],
        ),
        (&["adds", "--test-threads", "1", "--no-capture"], &[]),
        (&["adds", "--test-threads", "1", "--nocapture"], &[]),
    ] {
        assert!(
            text(&mock(args, env).stdout).contains(uncaptured),
            "{args:?} {env:?}"
        );
    }
    let captured = mock(
        &["adds", "--test-threads", "1"],
        &[("RUST_TEST_NOCAPTURE", "0")],
    );
    assert!(text(&captured.stdout).contains("test tests::adds ... ok\n"));
}

#[test]
fn github_step_summary_is_appended_per_run() {
    let path =
        std::env::temp_dir().join(format!("gpurun-harness-summary-{}.md", std::process::id()));
    std::fs::write(&path, "# earlier step\n").unwrap();
    let path_text = path.to_str().unwrap();
    let env = [
        ("GITHUB_ACTIONS", "true"),
        ("GITHUB_STEP_SUMMARY", path_text),
    ];
    mock(&["fails", "adds", "--test-threads", "1"], &env);
    mock(&["adds"], &env);
    let summary = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        summary.starts_with("# earlier step\n### `gpurun`: FAILED\n"),
        "{summary}"
    );
    assert!(summary.contains("| 1 | 1 | 0 | 7 |"), "{summary}");
    assert!(summary.contains("| `tests::fails` | boom 42 at libtest_reference.rs:7:83 |\n"));
    assert!(summary.contains("### `gpurun`: ok\n"));
    // Without GITHUB_ACTIONS the variable is ignored.
    let untouched = std::env::temp_dir().join(format!(
        "gpurun-harness-nosummary-{}.md",
        std::process::id()
    ));
    mock(
        &["adds"],
        &[("GITHUB_STEP_SUMMARY", untouched.to_str().unwrap())],
    );
    assert!(!untouched.exists());
}

#[test]
fn time_threshold_variables_are_read_and_checked() {
    for value in ["abc", "200,100", "100"] {
        let output = mock(&["--ensure-time"], &[("RUST_TEST_TIME_UNIT", value)]);
        assert_eq!(output.status.code(), Some(2), "{value}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.starts_with("error: RUST_TEST_TIME_UNIT=") && stderr.contains(value),
            "{value}: {stderr}"
        );
    }
    // A critical time of 0 ms fails every passing test under --ensure-time, and only those.
    let output = mock(
        &["--ensure-time", "adds"],
        &[("RUST_TEST_TIME_UNIT", "0,0")],
    );
    assert_eq!(output.status.code(), Some(101));
    assert!(
        text(&output.stdout).contains("test tests::adds ... FAILED (time limit exceeded) <"),
        "{}",
        text(&output.stdout)
    );
    // Without --report-time or --ensure-time the variables are not read.
    let output = mock(&["adds"], &[("RUST_TEST_TIME_UNIT", "abc")]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}
