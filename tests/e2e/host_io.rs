//! Device code reading host input over LLVM libc's stdio opcodes (`gpurun::io::{stdin, File,
//! system}`), on the host emulation backend: `cargo gpurun run` forwards its stdin, files are
//! opened by the host server, and `system()` runs only with `--allow-system`.

use gpurun_e2e::{assert_contains, describe, fresh_dir, run_fixture, text};
use std::io::Write;
use std::process::Stdio;

fn scratch(name: &str) -> std::path::PathBuf {
    fresh_dir(&std::env::temp_dir(), &format!("gpurun-e2e-host-io-{name}"))
}

/// `cargo gpurun run OPTIONS host-io ARGS` with no stdin.
fn run_host_io(options: &[&str], args: &[&str]) -> std::process::Output {
    run_fixture(options, "host-io", args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn device_reads_stdin_lines() {
    let mut child = run_fixture(&[], "host-io", &["stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let long = "x".repeat(1000);
    let input = format!("first\nsecond line\r\n{long}\nlast without newline");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(
        text(&output.stdout),
        format!("1: first\n2: second line\n3: {long}\n4: last without newline\n")
    );
}

#[test]
fn device_reads_and_writes_files_it_names() {
    let dir = scratch("files");
    let input = dir.join("in.txt");
    std::fs::write(&input, "alpha\nbeta\ngamma\n").unwrap();
    let output = run_host_io(&[], &["cat", input.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(text(&output.stdout), "alpha\nbeta\ngamma\n(3 lines)\n");

    let copy = dir.join("copy.bin");
    let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    std::fs::write(&input, &bytes).unwrap();
    let output = run_host_io(
        &[],
        &["copy", input.to_str().unwrap(), copy.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(std::fs::read(&copy).unwrap(), bytes);

    let missing = dir.join("missing.txt");
    let output = run_host_io(&[], &["cat", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A device that ends the program with a file still open loses nothing: the worker leaves with
/// `_exit` (so no exit-time handler runs under other slots), having flushed the C streams before
/// its last report, which the parent may answer by killing it.
#[test]
fn exit_with_a_file_open_keeps_what_was_written() {
    let dir = scratch("exit-open");
    let path = dir.join("out.txt");
    let output = run_host_io(&[], &["write-then-exit", path.to_str().unwrap(), "kept"]);
    assert_eq!(output.status.code(), Some(7), "{}", describe(&output));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn system_needs_allow_system() {
    let dir = scratch("system");
    let marker = dir.join("ran");
    let command = format!("touch {} && echo from-shell", marker.display());
    let refused = run_host_io(&[], &["system", &command]);
    assert_eq!(refused.status.code(), Some(0), "{}", describe(&refused));
    assert_eq!(text(&refused.stdout), "status -1\n");
    assert_contains(&text(&refused.stderr), "--allow-system", &refused);
    assert!(!marker.exists());

    let allowed = run_host_io(&["--allow-system"], &["system", &command]);
    assert_eq!(allowed.status.code(), Some(0), "{}", describe(&allowed));
    assert_eq!(text(&allowed.stdout), "from-shell\nstatus 0\n");
    assert!(marker.exists());
    std::fs::remove_dir_all(dir).unwrap();
}
