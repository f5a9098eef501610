//! Tests running side by side in one worker's slots and across emulated devices: output stays
//! with its test, and an exit, an abort or a fault among them fails only the test that did it.

use gpurun_e2e::{assert_contains, assert_test_lines, describe, run_fixture, text};
use std::collections::BTreeMap;

const TALKERS: [&str; 8] = [
    "talks_a", "talks_b", "talks_c", "talks_d", "talks_e", "talks_f", "talks_g", "talks_h",
];

/// The `---- NAME stdout ----` sections of libtest's output, by test name.
fn captured_sections(stdout: &str) -> BTreeMap<String, Vec<String>> {
    let mut sections = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in stdout.lines() {
        if let Some(name) = line
            .strip_prefix("---- ")
            .and_then(|rest| rest.strip_suffix(" stdout ----"))
        {
            current = Some(name.to_string());
            sections.insert(name.to_string(), Vec::new());
        } else if line == "successes:" || line == "failures:" {
            current = None;
        } else if let Some(name) = &current {
            if let Some(lines) = sections.get_mut(name) {
                lines.push(line.to_string());
            }
        }
    }
    sections
}

fn run_concurrency(devices: &str, args: &[&str]) -> std::process::Output {
    run_fixture(&[], "concurrency", args)
        .env("GPURUN_HOST_DEVICES", devices)
        .output()
        .unwrap()
}

fn assert_talkers_kept_their_output(output: &std::process::Output) {
    let stdout = text(&output.stdout);
    let sections = captured_sections(&stdout);
    for name in TALKERS {
        assert_test_lines(output, &[(name, "ok")]);
        let lines = sections
            .get(name)
            .unwrap_or_else(|| panic!("no output section for {name}\n{}", describe(output)));
        let expected: Vec<String> = (0..200).map(|i| format!("{name} line {i}")).collect();
        let printed: Vec<&String> = lines.iter().filter(|l| l.contains(" line ")).collect();
        assert_eq!(
            printed,
            expected.iter().collect::<Vec<_>>(),
            "output of {name} is incomplete or mixed\n{}",
            describe(output)
        );
    }
}

#[test]
fn concurrent_tests_keep_their_output_apart() {
    for (devices, threads) in [("1", "8"), ("2", "4"), ("3", "8")] {
        let output = run_concurrency(devices, &["--test-threads", threads, "--show-output"]);
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
        assert_talkers_kept_their_output(&output);
        assert_contains(
            &text(&output.stdout),
            "test result: ok. 8 passed; 0 failed; 3 ignored; 0 measured;",
            &output,
        );
    }
}

#[test]
fn an_exit_an_abort_and_a_fault_fail_only_their_own_tests() {
    for devices in ["1", "2"] {
        let output = run_concurrency(
            devices,
            &["--test-threads", "11", "--include-ignored", "--show-output"],
        );
        assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
        assert_talkers_kept_their_output(&output);
        let stdout = text(&output.stdout);
        assert_test_lines(
            &output,
            &[
                ("exits", "FAILED"),
                ("aborts", "FAILED"),
                ("faults", "FAILED"),
            ],
        );
        let sections = captured_sections(&stdout);
        let own = |name: &str, reason: &str| {
            let lines = sections.get(name).map(|l| l.join("\n")).unwrap_or_default();
            assert!(
                lines.contains(reason),
                "{name} does not fail with `{reason}`:\n{lines}\n{}",
                describe(&output)
            );
        };
        own("exits", "exits: before the exit");
        own("exits", "exit(3)");
        own("aborts", "abort()");
        own("faults", "faults: before the fault");
        own("faults", "SIGSEGV");
        assert_contains(
            &stdout,
            "test result: FAILED. 8 passed; 3 failed; 0 ignored; 0 measured;",
            &output,
        );
    }
}

#[test]
fn a_bad_host_device_count_is_a_clear_error() {
    let output = run_concurrency("0", &[]);
    assert_ne!(output.status.code(), Some(0), "{}", describe(&output));
    assert_contains(
        &text(&output.stderr),
        "GPURUN_HOST_DEVICES must be a number from 1 to 64",
        &output,
    );
}
