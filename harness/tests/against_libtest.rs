//! Diffs our output against the real libtest's: `tests/data/libtest_reference.rs` is compiled
//! with `rustc --test`, and it and `gpurun-mock-suite` (the same tests, scripted) run with the
//! same arguments. After masking what must differ (the host thread id that Rust prints where we
//! print device ids, the backtrace hint, the run time) stdout, stderr and exit code must match.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn reference_binary() -> PathBuf {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let out_dir = std::env::temp_dir().join(format!("gpurun-harness-ref-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let binary = out_dir.join("libtest_reference");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    // Relative source path, so panic locations read `libtest_reference.rs:L:C` as in the mock.
    let status = Command::new(&rustc)
        .current_dir(&data)
        .args(["--edition", "2021", "--test", "libtest_reference.rs", "-o"])
        .arg(&binary)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {rustc:?} to build the libtest reference: {e}"));
    assert!(
        status.success(),
        "rustc failed to build the libtest reference"
    );
    binary
}

fn run(binary: &Path, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .env_remove("RUST_TEST_THREADS")
        .env_remove("RUST_TEST_NOCAPTURE")
        .env_remove("GITHUB_ACTIONS")
        .output()
        .unwrap()
}

/// Masks the parts that legitimately differ.
fn normalize(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = Vec::new();
    for line in text.split('\n') {
        if line == "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace" {
            continue;
        }
        let mut line = line.to_owned();
        // `thread 'NAME' (ID) panicked at`: ID is a host thread id for Rust, device ids for us.
        if line.starts_with("thread '") {
            if let (Some(open), Some(close)) = (line.find("' ("), line.find(") panicked at ")) {
                if open < close {
                    line.replace_range(open + 1..close + 1, "");
                }
            }
        }
        if let Some(at) = line.find("finished in ") {
            line.truncate(at + "finished in ".len());
        }
        lines.push(line);
    }
    lines.join("\n")
}

#[test]
fn output_matches_real_libtest() {
    let reference = reference_binary();
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_gpurun-mock-suite"));
    let cases: &[&[&str]] = &[
        &[],
        &["-q"],
        &["--format", "terse"],
        &["--nocapture"],
        &["--show-output"],
        &["--show-output", "-q"],
        &["sp_", "adds"],
        &["--exact", "tests::adds", "tests::ign", "tests::sp"],
        &["--skip", "sp_exp", "--skip", "ign"],
        &["--exact", "--skip", "tests::fails"],
        &["--ignored"],
        &["--include-ignored"],
        &["no_such_test"],
        &["ign_reason", "-q"],
        &["ign_reason"],
    ];
    let mut mismatches = Vec::new();
    for case in cases {
        let args: Vec<&str> = case
            .iter()
            .copied()
            .chain(["--test-threads", "1"])
            .collect();
        let (want, got) = (run(&reference, &args), run(&ours, &args));
        for (stream, w, g) in [
            ("stdout", &want.stdout, &got.stdout),
            ("stderr", &want.stderr, &got.stderr),
        ] {
            let (w, g) = (normalize(w), normalize(g));
            if w != g {
                mismatches.push(format!(
                    "{stream} of {args:?}:\n--- libtest\n{w}\n--- ours\n{g}"
                ));
            }
        }
        if want.status.code() != got.status.code() {
            mismatches.push(format!(
                "exit code of {args:?}: libtest {:?}, ours {:?}",
                want.status.code(),
                got.status.code()
            ));
        }
    }
    // --list ignores --test-threads; compare it as given.
    for args in [
        &["--list"][..],
        &["--list", "--format", "terse"],
        &["--list", "--format", "terse", "--ignored"],
        &["--list", "sp_", "--skip", "wrong"],
    ] {
        let (want, got) = (run(&reference, args), run(&ours, args));
        if want.stdout != got.stdout || want.status.code() != got.status.code() {
            mismatches.push(format!(
                "{args:?}:\n--- libtest\n{}\n--- ours\n{}",
                String::from_utf8_lossy(&want.stdout),
                String::from_utf8_lossy(&got.stdout)
            ));
        }
    }
    let _ = std::fs::remove_dir_all(reference.parent().unwrap());
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n\n"));
}
