//! Coverage of device code on the host emulation: `cargo gpurun test --coverage` (which lines of
//! `fixtures/coverage` the lcov report counts as run when one test runs at a time, at lane sizes
//! 32 and 64, and the HTML report beside it), and a host crate's trials under `cargo llvm-cov`
//! (`fixtures/host-coverage`).

use gpurun_e2e::{available, describe, fixtures_dir, gpurun, repo_root, text};
use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;

/// The coverage runs share one report folder (the fixtures' target directory's).
static REPORT: Mutex<()> = Mutex::new(());

const SOURCE: &str = "coverage/src/lib.rs";

/// The line of `source` (under fixtures/) that ends with the comment `// coverage: MARKER`.
fn marker_line(source: &str, marker: &str) -> u32 {
    let text = std::fs::read_to_string(fixtures_dir().join(source)).expect("fixture source");
    let wanted = format!("// coverage: {marker}");
    let index = text
        .lines()
        .position(|line| line.trim_end().ends_with(&wanted))
        .unwrap_or_else(|| panic!("no `{wanted}` in {source}"));
    u32::try_from(index + 1).expect("a line number")
}

/// The execution count of each instrumented line of `source` (under fixtures/), from an lcov
/// file.
fn line_counts(lcov: &str, source: &str) -> HashMap<u32, u64> {
    let mut counts = HashMap::new();
    let mut in_source = false;
    for line in lcov.lines() {
        if let Some(path) = line.strip_prefix("SF:") {
            in_source = path.ends_with(source);
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
    line_counts(&lcov, SOURCE)
}

/// In the report's `counts` for `source`, the line marked `ran` ran and the one marked
/// `not_ran` is instrumented and did not, in the coverage `run` (named in the failure).
#[track_caller]
fn assert_ran_and_not(
    counts: &HashMap<u32, u64>,
    source: &str,
    run: &str,
    ran: &str,
    not_ran: &str,
) {
    let (ran_line, not_ran_line) = (marker_line(source, ran), marker_line(source, not_ran));
    assert!(
        counts.get(&ran_line).is_some_and(|&n| n > 0),
        "{run}: line {ran_line} ({ran}) not run: {counts:?}"
    );
    assert_eq!(
        counts.get(&not_ran_line),
        Some(&0),
        "{run}: line {not_ran_line} ({not_ran}): {counts:?}"
    );
}

#[test]
fn coverage_counts_the_lines_each_test_ran_at_both_lane_sizes() {
    let _report = REPORT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let line = |marker| marker_line(SOURCE, marker);
    for lane_size in ["32", "64"] {
        for (filter, ran, not_ran) in [
            ("halves_even_numbers", "even branch", "odd branch"),
            ("grows_odd_numbers", "odd branch", "even branch"),
        ] {
            let counts = covered(filter, lane_size);
            let run = format!("{filter} at {lane_size} lanes");
            assert_ran_and_not(&counts, SOURCE, &run, ran, not_ran);
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

/// The kernels of `fixtures/host-coverage`, a member of the host crate's workspace.
const HOST_KERNELS_SOURCE: &str = "host-coverage/kernels/src/lib.rs";

/// `cargo llvm-cov` on `fixtures/host-coverage`, running the tests of its test target `target`
/// that match `filter`: the report's line counts for the kernels' source. `None` when
/// cargo-llvm-cov is missing (said, and a failure under CI).
fn llvm_cov_of(target: &str, filter: &str) -> Option<HashMap<u32, u64>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let installed = Command::new(&cargo)
        .args(["llvm-cov", "--version"])
        .output()
        .is_ok_and(|output| output.status.success());
    // It reads the profiles with the llvm-tools of the toolchain that runs it.
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map(|output| text(&output.stdout).trim().to_owned())
        .unwrap_or_default();
    let llvm_tools = std::fs::read_dir(std::path::Path::new(&sysroot).join("lib/rustlib"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|entry| entry.path().join("bin/llvm-profdata").is_file());
    if !available("cargo-llvm-cov", installed)
        || !available("the toolchain's llvm-tools component", llvm_tools)
    {
        return None;
    }
    // The repository's target directory, where the end-to-end tests' host crates build
    // gpurun-test and its dependencies (cargo-llvm-cov instruments only this workspace's crates,
    // through its rustc wrapper, which cargo's fingerprints leave out): only the fixture's own
    // crates are built here.
    let target_dir = repo_root().join("target");
    let lcov = target_dir.join("host-coverage.lcov");
    let output = Command::new(&cargo)
        .args(["llvm-cov", "--manifest-path"])
        .arg(fixtures_dir().join("host-coverage/Cargo.toml"))
        // The report covers the kernels' crate, whose own (no_std) lib is no host test.
        .args([
            "--workspace",
            "--exclude-from-test",
            "host-coverage-kernels",
        ])
        .args(["--test", target, "--lcov", "--output-path"])
        .arg(&lcov)
        .args(["--", filter])
        .current_dir(repo_root())
        .env("CARGO_LLVM_COV_TARGET_DIR", &target_dir)
        .env("GPURUN_BACKEND", "host")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("GPURUN_SANITIZE")
        .output()
        .expect("cargo llvm-cov runs");
    assert!(output.status.success(), "{}", describe(&output));
    assert!(
        text(&output.stdout).contains(&format!("{filter} ... ok")),
        "{}",
        describe(&output)
    );
    let report = std::fs::read_to_string(&lcov).expect("the lcov file");
    Some(line_counts(&report, HOST_KERNELS_SOURCE))
}

/// A host crate's tests under `cargo llvm-cov`: the report counts the kernel lines a trial ran
/// (in a worker process, from the host image gpurun-test built) and not the branch it did not
/// take, and the lines of a kernel a host-driven launch ran (in the test process).
#[test]
fn a_host_crates_trials_and_launches_under_cargo_llvm_cov_cover_its_kernels() {
    for (target, filter, ran, not_ran) in [
        ("coverage_trials", "keeps_small_values", "kept", "clamped"),
        (
            "coverage_trials",
            "clamps_large_values",
            "clamped",
            "launched kernel",
        ),
        (
            "coverage_launches",
            "add_one_adds_one_to_each_value",
            "launched kernel",
            "kept",
        ),
    ] {
        let Some(counts) = llvm_cov_of(target, filter) else {
            return;
        };
        assert_ran_and_not(&counts, HOST_KERNELS_SOURCE, filter, ran, not_ran);
    }
}
