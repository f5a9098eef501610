//! Diffs gpurun-harness's output against the real libtest's: `data/libtest_reference.rs` is
//! compiled with `rustc --test`, and it and the harness's `gpurun-mock-suite` (the same tests,
//! scripted) run with the same arguments. After masking what must differ (the host thread id that Rust prints where we
//! print device ids, the backtrace hint, the run time) stdout, stderr and exit code must match.
//! The JSON format is compared against a nightly libtest, which CI has.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use gpurun_e2e::{package_binary, tool_missing};

/// Builds the reference with `rustc` (plus `toolchain_args`, e.g. `+nightly`) into a fresh
/// temporary directory. `Err` if that toolchain cannot be run at all.
fn build_reference(name: &str, toolchain_args: &[&str]) -> Result<PathBuf, String> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("nightly/data");
    let out_dir =
        std::env::temp_dir().join(format!("gpurun-harness-ref-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let binary = out_dir.join("libtest_reference");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    // Relative source path, so panic locations read `libtest_reference.rs:L:C` as in the mock.
    let output = Command::new(&rustc)
        .current_dir(&data)
        .args(toolchain_args)
        .args(["--edition", "2021", "--test", "libtest_reference.rs", "-o"])
        .arg(&binary)
        .output()
        .map_err(|e| format!("cannot run {rustc:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{rustc:?} {toolchain_args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(binary)
}

/// The harness's `gpurun-mock-suite`, built once per test process.
fn mock_suite() -> &'static Path {
    static MOCK: OnceLock<PathBuf> = OnceLock::new();
    MOCK.get_or_init(|| package_binary("gpurun-harness", "gpurun-mock-suite"))
}

fn reference_binary() -> PathBuf {
    build_reference("stable", &[])
        .unwrap_or_else(|e| panic!("cannot build the libtest reference: {e}"))
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
    let ours = mock_suite();
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
        let (want, got) = (run(&reference, &args), run(ours, &args));
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
        let (want, got) = (run(&reference, args), run(ours, args));
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

/// JSON lines with the parts that must differ masked: run times, the thread ids inside captured
/// output, and the source positions of `--list` (the image does not record them).
fn normalize_json(bytes: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|line| {
            let mut event: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
            if let Some(object) = event.as_object_mut() {
                for key in [
                    "exec_time",
                    "source_path",
                    "start_line",
                    "start_col",
                    "end_line",
                    "end_col",
                ] {
                    if object.contains_key(key) {
                        object.insert(key.into(), serde_json::Value::Null);
                    }
                }
                if let Some(stdout) = object.get("stdout").and_then(|v| v.as_str()) {
                    let masked = normalize(stdout.as_bytes());
                    object.insert("stdout".into(), masked.into());
                }
            }
            event
        })
        .collect()
}

/// libtest's JSON format needs a nightly libtest (`-Z unstable-options`); CI has nightly.
#[test]
fn json_output_matches_nightly_libtest() {
    let reference = match build_reference("nightly", &["+nightly"]) {
        Ok(binary) => binary,
        Err(why) => {
            tool_missing(&format!(
                "the JSON comparison needs a nightly rustc ({why})"
            ));
            return;
        }
    };
    let ours = mock_suite();
    let mut mismatches = Vec::new();
    for case in [
        &["--test-threads", "1"][..],
        &["--test-threads", "1", "--show-output", "--report-time"],
        &["--test-threads", "1", "--nocapture", "sp_"],
        &["--test-threads", "1", "--ignored"],
        &["--list"],
        &["--list", "--ignored"],
    ] {
        let args: Vec<&str> = ["-Z", "unstable-options", "--format", "json"]
            .into_iter()
            .chain(case.iter().copied())
            .collect();
        let (want, got) = (run(&reference, &args), run(ours, &args));
        let (w, g) = (normalize_json(&want.stdout), normalize_json(&got.stdout));
        assert!(
            w.len() >= 3,
            "libtest printed too little JSON for {args:?}: {w:?}"
        );
        if w != g {
            mismatches.push(format!("{args:?}:\n--- libtest\n{w:#?}\n--- ours\n{g:#?}"));
        }
        if want.status.code() != got.status.code() {
            mismatches.push(format!("exit code of {args:?}"));
        }
    }
    let _ = std::fs::remove_dir_all(reference.parent().unwrap());
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n\n"));
}
