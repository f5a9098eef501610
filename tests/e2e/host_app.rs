//! `fixtures/host-app`: a host crate that tests its kernels from plain `cargo test` on stable
//! through `gpurun-test`, with no cargo-gpurun installed: its device tests as trials
//! (tests/gpu.rs) and host-driven launches (tests/launch.rs), on the host emulation backend.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use gpurun_e2e::{describe, fixtures_dir, repo_root, text};

/// Every device test of `host-app/kernels` as `(trial, ignored, passes)`: the name each trial has
/// (the crate has two test suites, the lib and tests/integration.rs, so each trial names its
/// suite), whether it is `#[ignore]`d and whether it passes when it runs.
const DEVICE_TESTS: [(&str, bool, bool); 8] = [
    ("[host-app-kernels] faults", false, false),
    ("[host-app-kernels] hangs", true, false),
    ("[host-app-kernels] ignored_by_default", true, true),
    ("[host-app-kernels] saxpy_fails_on_purpose", false, false),
    ("[host-app-kernels] saxpy_of_one_element", false, true),
    ("[host-app-kernels] saxpy_on_every_thread", false, true),
    ("[host-app-kernels] zero_is_refused", false, true),
    (
        "[integration] integration_runs_on_every_thread",
        false,
        true,
    ),
];

/// The lib suite's trial named `name`.
fn lib(name: &str) -> String {
    format!("[host-app-kernels] {name}")
}

/// libtest-mimic's `test [KIND] NAME ... RESULT` line for `trial`, whose kind and name it pads
/// to the widest.
pub(crate) fn result_line<'a>(stdout: &'a str, trial: &str) -> Option<&'a str> {
    let start = format!("test {trial} ");
    stdout.lines().find(|line| {
        line.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .starts_with(&start)
    })
}

/// `cargo SUBCOMMAND` on the host app.
fn cargo(subcommand: &[&str], rest: &[&str]) -> Command {
    host_crate_cargo(
        &fixtures_dir().join("host-app/Cargo.toml"),
        subcommand,
        rest,
    )
}

/// `cargo SUBCOMMAND` on the host crate of `manifest`, on this workspace's target directory
/// (its host dependencies are this workspace's crates, already built there), on the host
/// emulation.
pub(crate) fn host_crate_cargo(manifest: &Path, subcommand: &[&str], rest: &[&str]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(subcommand)
        .arg("--manifest-path")
        .arg(manifest)
        .arg("--target-dir")
        .arg(repo_root().join("target"))
        .args(rest)
        .current_dir(repo_root())
        .env("GPURUN_BACKEND", "host")
        .env_remove("GPURUN_SANITIZE")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("GITHUB_ACTIONS");
    command
}

pub(crate) fn output_of(mut command: Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?} failed: {e}"))
}

/// The `---- NAME ----` section of libtest's failures.
fn failure_section<'a>(stdout: &'a str, name: &str) -> &'a str {
    let header = format!("---- {name} ----\n");
    let start = stdout
        .find(&header)
        .unwrap_or_else(|| panic!("no failure section for {name}:\n{stdout}"));
    let rest = &stdout[start + header.len()..];
    let end = rest
        .find("\n\n---- ")
        .or_else(|| rest.find("\n\nfailures:"))
        .unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn cargo_test_runs_each_device_test_as_its_own_trial() {
    let output = output_of(cargo(&["test"], &["--test", "gpu"]));
    // Two device tests fail on purpose.
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let stdout = text(&output.stdout);
    for (name, ignored, passes) in DEVICE_TESTS {
        let result = match (ignored, passes) {
            (true, _) => "ignored",
            (false, true) => "ok",
            (false, false) => "FAILED",
        };
        let found = result_line(&stdout, name)
            .unwrap_or_else(|| panic!("no result line for {name}:\n{}", describe(&output)));
        assert!(found.ends_with(result), "{found}\n{}", describe(&output));
    }
    assert!(
        stdout.contains("test result: FAILED. 4 passed; 2 failed; 2 ignored;"),
        "{}",
        describe(&output)
    );
    // The failing test: its output, the device's panic message and location.
    let failing = failure_section(&stdout, "saxpy_fails_on_purpose");
    assert!(failing.contains("computing saxpy\n"), "{failing}");
    assert!(
        failing.contains("panicked at host-app/kernels/src/lib.rs:")
            && failing.contains("assertion `left == right` failed: saxpy is off"),
        "{failing}"
    );
    // The faulting test fails alone, with the fault; the others ran in fresh workers.
    let faulting = failure_section(&stdout, "faults");
    assert!(
        faulting.contains("note: device fault:") && faulting.contains("SIGSEGV"),
        "{faulting}"
    );
}

/// The trials `cargo test --test gpu -- --list` lists on `backends` (`GPURUN_BACKEND`), and the
/// output.
fn list_gpu_trials(backends: &str) -> (BTreeSet<String>, Output) {
    let mut command = cargo(&["test"], &["--test", "gpu", "--", "--list"]);
    command.env("GPURUN_BACKEND", backends);
    let output = output_of(command);
    assert!(output.status.success(), "{}", describe(&output));
    let listed = text(&output.stdout)
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .map(str::to_owned)
        .collect();
    (listed, output)
}

/// `--partition` cuts each suite's trials as `cargo gpurun test` cuts a suite (round robin over
/// the tests that run, by name; the ignored ones in every shard), and `--junit` writes what ran
/// and what was ignored, a `<testsuite>` per suite.
#[test]
fn partitions_and_junit_work_in_plain_cargo_test() {
    let junit = std::env::temp_dir().join(format!("gpurun-trials-{}.xml", std::process::id()));
    let junit_arg = format!("--junit={}", junit.display());
    let output = output_of(cargo(
        &["test"],
        &[
            "--test",
            "gpu",
            "--",
            "--partition",
            "count:1/2",
            &junit_arg,
        ],
    ));
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let stdout = text(&output.stdout);
    let ran = |name: &str| result_line(&stdout, name).is_some();
    // The lib's tests that run, by name: faults, saxpy_fails_on_purpose, saxpy_of_one_element,
    // saxpy_on_every_thread, zero_is_refused; the first shard has every other one.
    for name in ["faults", "saxpy_of_one_element", "zero_is_refused", "hangs"] {
        assert!(ran(&lib(name)), "{name}\n{}", describe(&output));
    }
    for name in ["saxpy_fails_on_purpose", "saxpy_on_every_thread"] {
        assert!(!ran(&lib(name)), "{name}\n{}", describe(&output));
    }
    assert!(ran("[integration] integration_runs_on_every_thread"));
    assert!(
        stdout.contains("test result: FAILED. 3 passed; 1 failed; 2 ignored;"),
        "{}",
        describe(&output)
    );
    let xml = std::fs::read_to_string(&junit).expect("the JUnit report");
    let _ = std::fs::remove_file(&junit);
    for part in [
        "<testsuite name=\"host-app-kernels\" tests=\"5\"",
        "<testsuite name=\"integration\" tests=\"1\"",
        "<testcase name=\"faults\"",
        "<testcase name=\"zero_is_refused\"",
        "<testcase name=\"integration_runs_on_every_thread\"",
        "device fault",
    ] {
        assert!(xml.contains(part), "{part} in\n{xml}");
    }
    assert_eq!(xml.matches("<skipped").count(), 2, "{xml}");
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
    assert!(!xml.contains("saxpy_on_every_thread"), "{xml}");
    // The second shard runs the rest of the lib's tests.
    let output = output_of(cargo(
        &["test"],
        &["--test", "gpu", "--", "--partition=count:2/2"],
    ));
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("test result: FAILED. 1 passed; 1 failed; 2 ignored;"),
        "{}",
        describe(&output)
    );
}

#[test]
fn several_backends_make_a_trial_per_backend() {
    // Listing runs nothing: the nvptx build works offline, and no GPU is needed.
    let (listed, output) = list_gpu_trials("host,cuda");
    let expected: BTreeSet<String> = DEVICE_TESTS
        .iter()
        .flat_map(|(test, ..)| {
            let (suite, name) = test.split_once("] ").unwrap();
            ["host", "cuda"].map(|backend| format!("{suite}] [{backend}] {name}"))
        })
        .collect();
    assert_eq!(listed, expected, "{}", describe(&output));
}

#[test]
fn list_filter_and_ignored_work_as_with_libtest() {
    let (listed, output) = list_gpu_trials("host");
    let expected: BTreeSet<String> = DEVICE_TESTS
        .iter()
        .map(|(test, ..)| test.to_string())
        .collect();
    assert_eq!(listed, expected, "{}", describe(&output));

    let output = output_of(cargo(&["test"], &["--test", "gpu", "--", "saxpy_on"]));
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        text(&output.stdout)
            .contains("test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 7 filtered out"),
        "{}",
        describe(&output)
    );
    // A filter matches the suite's name too; `--exact` takes the whole listed name.
    let output = output_of(cargo(&["test"], &["--test", "gpu", "--", "[integration]"]));
    assert!(
        output.status.success()
            && text(&output.stdout).contains(
                "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 7 filtered out"
            ),
        "{}",
        describe(&output)
    );
    let output = output_of(cargo(
        &["test"],
        &[
            "--test",
            "gpu",
            "--",
            "--exact",
            &lib("saxpy_of_one_element"),
        ],
    ));
    assert!(
        output.status.success() && text(&output.stdout).contains("test result: ok. 1 passed;"),
        "{}",
        describe(&output)
    );

    // The ignored tests: one passes, one hangs and fails alone at the device crate's
    // `test-timeout` (2 s, from its [package.metadata.gpurun]).
    let output = output_of(cargo(&["test"], &["--test", "gpu", "--", "--ignored"]));
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let stdout = text(&output.stdout);
    assert!(
        result_line(&stdout, &lib("ignored_by_default")).is_some_and(|line| line.ends_with("ok"))
            && stdout.contains(
                "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 6 filtered out"
            ),
        "{}",
        describe(&output)
    );
    let hang = failure_section(&stdout, "hangs");
    assert!(hang.contains("note: test timed out after 2s"), "{hang}");
}

#[test]
fn gpurun_sanitize_is_honoured_or_refused_never_ignored() {
    // Each case: (GPURUN_SANITIZE, GPURUN_COMPUTE_SANITIZER, what stderr says). The stand-in
    // is found but the host emulation cannot be sanitized; a program that is not there and an
    // unknown tool are errors before anything is built.
    let stand_in = repo_root().join("tests/sanitizer-stand-in/compute-sanitizer");
    let missing = repo_root().join("tests/sanitizer-stand-in/not-there");
    let cases = [
        (
            "memcheck",
            stand_in.as_path(),
            "checks CUDA kernels only, but this run uses the host backend",
        ),
        (
            "memcheck",
            missing.as_path(),
            "is not an executable program",
        ),
        ("bogus", stand_in.as_path(), "unknown sanitizer `bogus`"),
    ];
    for (tool, program, says) in cases {
        let mut command = cargo(&["test"], &["--test", "gpu"]);
        command
            .env("GPURUN_SANITIZE", tool)
            .env("GPURUN_COMPUTE_SANITIZER", program);
        let output = output_of(command);
        assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
        assert!(text(&output.stderr).contains(says), "{}", describe(&output));
        assert!(
            !text(&output.stdout).contains("test result:"),
            "no trial may run unsanitized:\n{}",
            describe(&output)
        );
    }
}

#[test]
fn trials_spread_over_every_device_present() {
    // Two emulated devices, tests side by side: every trial passes wherever it ran.
    let mut command = cargo(
        &["test"],
        &[
            "--test",
            "gpu",
            "--",
            "--test-threads",
            "4",
            "--skip",
            "faults",
            "--skip",
            "fails_on_purpose",
        ],
    );
    command.env("GPURUN_HOST_DEVICES", "2");
    let output = output_of(command);
    assert!(
        output.status.success()
            && text(&output.stdout).contains("test result: ok. 4 passed; 0 failed; 2 ignored;"),
        "{}",
        describe(&output)
    );
    let mut command = cargo(&["test"], &["--test", "gpu"]);
    command.env("GPURUN_HOST_DEVICES", "0");
    let output = output_of(command);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    assert!(
        text(&output.stderr).contains("error: GPURUN_HOST_DEVICES must be a number from 1 to 64"),
        "{}",
        describe(&output)
    );
}

#[test]
fn host_driven_launches_pass() {
    let output = output_of(cargo(&["test"], &["--test", "launch"]));
    assert!(output.status.success(), "{}", describe(&output));
    let stdout = text(&output.stdout);
    for name in [
        "saxpy_matches_the_cpu",
        "block_sums_match_the_cpu",
        "block_sums_in_shared_memory_sized_at_launch_match_the_cpu",
        "good_input_prints_and_divides",
        "a_missing_kernel_is_an_error_naming_the_kernels",
        "a_buffer_of_another_image_is_refused",
        "two_loaded_images_print_each_to_their_own_launch",
        "wrong_argument_count_or_types_are_errors_before_launch",
        "a_buffer_too_small_for_the_launch_is_an_error_before_launch",
        "a_kernel_without_declared_lengths_launches_as_before",
        "kernels_call_host_functions_and_a_wrong_key_is_an_error",
        // A kernel panic is an `Err` with the device's message and location, on the host
        // emulation too (the kernel wrapper ends only the panicking emulated thread).
        "bad_input_is_an_error_with_the_device_message_and_location",
    ] {
        assert!(
            stdout.contains(&format!("test {name} ... ok")),
            "{name}\n{stdout}"
        );
    }
}

#[test]
fn nextest_runs_each_trial_in_its_own_process() {
    let probe = output_of(cargo(&["nextest", "--version"], &[]));
    if !probe.status.success() {
        // scripts/setup.sh installs it (CI's machine image has it preinstalled).
        gpurun_e2e::tool_missing(&format!(
            "cargo-nextest is not installed (run scripts/setup.sh): {}",
            text(&probe.stderr).lines().next().unwrap_or_default()
        ));
        return;
    }
    let output = output_of(cargo(
        &["nextest", "run"],
        &["--test", "gpu", "--no-fail-fast", "--run-ignored", "all"],
    ));
    assert!(!output.status.success(), "{}", describe(&output));
    let stderr = text(&output.stderr);
    // `--run-ignored all`: the ignored tests run too.
    for (name, _, passes) in DEVICE_TESTS {
        let status = if passes { "PASS" } else { "FAIL" };
        assert!(
            stderr
                .lines()
                .any(|line| line.trim_start().starts_with(status)
                    && line.ends_with(&format!("host-app::gpu {name}"))),
            "{name} should be {status}:\n{}",
            describe(&output)
        );
    }
    // Counts only: nextest adds notes such as `5 passed (2 slow)` on a loaded machine.
    assert_eq!(
        nextest_counts(&stderr),
        Some((8, 5, 3)),
        "{}",
        describe(&output)
    );
    // Under nextest (which passes --nocapture) the failure still names the device's panic.
    assert!(
        stderr.contains("assertion `left == right` failed: saxpy is off"),
        "{}",
        describe(&output)
    );
}

/// The GPU check's host-launch row (`crates/gpurun-test/examples/launch_check.rs`), here on the
/// host emulation: `fill` with its `(ptr, u64, u32)` parameters and `saxpy` match the CPU.
#[test]
fn launch_check_example_passes_on_the_host_emulation() {
    let example = escargot::CargoBuild::new()
        .package("gpurun-test")
        .example("launch_check")
        .manifest_path(repo_root().join("Cargo.toml"))
        .current_target()
        .run()
        .unwrap_or_else(|e| panic!("building launch_check failed: {e}"));
    let output = example
        .command()
        .arg(gpurun_e2e::host_image("host-app-kernels"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        text(&output.stdout).contains("fill (ptr, u64, u32) and saxpy match the CPU"),
        "{}",
        describe(&output)
    );
}

/// The run, passed and failed counts of nextest's summary line `N tests run: P passed[ (notes)],
/// F failed, ...`, whatever notes it adds to each count.
fn nextest_counts(stderr: &str) -> Option<(u32, u32, u32)> {
    let line = stderr.lines().find(|line| line.contains(" tests run: "))?;
    let (run, counts) = line.split_once(" tests run: ")?;
    let run = run.split_whitespace().last()?.parse().ok()?;
    // Each count is `NUMBER WORD`, maybe followed by a note in parentheses.
    let count = |what: &str| {
        counts.split(", ").find_map(|part| {
            let mut words = part.split_whitespace();
            let number = words.next()?.parse().ok()?;
            (words.next()? == what).then_some(number)
        })
    };
    Some((run, count("passed")?, count("failed")?))
}

#[test]
fn nextest_summary_counts_ignore_notes() {
    assert_eq!(
        nextest_counts("     Summary [  2.1s] 8 tests run: 5 passed, 3 failed, 0 skipped"),
        Some((8, 5, 3))
    );
    assert_eq!(
        nextest_counts("     Summary [144.0s] 8 tests run: 5 passed (2 slow), 3 failed, 0 skipped"),
        Some((8, 5, 3))
    );
    assert_eq!(nextest_counts("no summary"), None);
}
