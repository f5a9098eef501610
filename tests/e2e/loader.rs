//! `cargo gpurun run`: exit codes, output, panics, crashes, timeouts and bad input.

use gpurun_e2e::{assert_contains, describe, gpurun, host_image, run_fixture, text};
use std::time::{Duration, Instant};

fn run(image: &str, args: &[&str]) -> std::process::Output {
    run_fixture(&[], image, args)
        .output()
        .expect("cargo-gpurun runs")
}

#[test]
fn hello_prints_from_one_and_from_256_threads_with_lines_intact() {
    let one = run("hello", &[]);
    assert_eq!(one.status.code(), Some(0), "{}", describe(&one));
    assert_eq!(text(&one.stdout), "hello from thread 0 of block 0\n");

    let many = run_fixture(&["--threads", "128", "--blocks", "2"], "hello", &[])
        .output()
        .unwrap();
    assert_eq!(many.status.code(), Some(0), "{}", describe(&many));
    let stdout = text(&many.stdout);
    let mut lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 256, "{}", describe(&many));
    lines.sort();
    lines.dedup();
    assert_eq!(
        lines.len(),
        256,
        "every thread printed one distinct, intact line"
    );
    for block in 0..2 {
        for thread in 0..128 {
            let line = format!("hello from thread {thread} of block {block}");
            assert!(
                lines.binary_search(&line.as_str()).is_ok(),
                "missing `{line}`"
            );
        }
    }
}

#[test]
fn kernel_option_launches_plain_kernels_in_order() {
    let image = host_image("hello");
    let image = image.to_str().unwrap();
    let output = gpurun(&[
        "run",
        "--kernel",
        "say_hi",
        "--kernel",
        "say_hi",
        "--threads",
        "2",
        image,
    ])
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let mut lines: Vec<String> = text(&output.stdout).lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "hi from kernel thread 0",
            "hi from kernel thread 0",
            "hi from kernel thread 1",
            "hi from kernel thread 1"
        ]
    );
    let missing = gpurun(&["run", "--kernel", "nope", image])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1), "{}", describe(&missing));
    assert_contains(&text(&missing.stderr), "no kernel named `nope`", &missing);
    let usage = gpurun(&["run", "--print-resource-usage", "--kernel", "say_hi", image])
        .output()
        .unwrap();
    assert_contains(&text(&usage.stdout), "Executing kernel say_hi:", &usage);
}

#[test]
fn arguments_environment_and_exit_codes() {
    let output = run_fixture(&[], "args-env-exit", &["exit", "7", "--flag"])
        .env("GPURUN_FIXTURE_VAR", "visible")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(7), "{}", describe(&output));
    assert_eq!(
        text(&output.stdout),
        "arg 1: exit\narg 2: 7\narg 3: --flag\nGPURUN_FIXTURE_VAR=visible\n"
    );
    let returned = run("args-env-exit", &["return", "3"]);
    assert_eq!(returned.status.code(), Some(3), "{}", describe(&returned));
    let zero = run("args-env-exit", &[]);
    assert_eq!(zero.status.code(), Some(0), "{}", describe(&zero));
}

#[test]
fn abort_exits_like_a_host_abort() {
    use std::os::unix::process::ExitStatusExt;
    let output = run("args-env-exit", &["abort"]);
    assert_eq!(output.status.signal(), Some(6), "{}", describe(&output));
    assert_contains(&text(&output.stderr), "aborted", &output);
}

#[test]
fn alloc_works_on_the_device() {
    let output = run("alloc", &[]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(text(&output.stdout), "sum=131064401 len=1048576\n");
}

#[test]
fn a_panic_prints_message_and_location_and_fails() {
    let output = run("panics", &[]);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    assert_eq!(text(&output.stdout), "about to panic\n");
    let stderr = text(&output.stderr);
    assert_contains(
        &stderr,
        "panicked at panics/src/lib.rs:11:5:\nthe value was 42, expected 43",
        &output,
    );
}

#[test]
fn a_segfault_is_reported_with_its_signal() {
    let output = run("args-env-exit", &["segfault"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert_contains(&stderr, "SIGSEGV", &output);
    // What the device printed before the crash is not lost.
    assert_contains(&text(&output.stdout), "arg 1: segfault", &output);
}

#[test]
fn a_hang_stops_at_the_timeout() {
    // Long enough that the kernel reaches its print before the timeout on a loaded machine.
    let mut command = run_fixture(&["--timeout", "6"], "args-env-exit", &["hang"]);
    let started_timed = Instant::now();
    let output = command.output().unwrap();
    let took = started_timed.elapsed();
    assert_eq!(output.status.code(), Some(124), "{}", describe(&output));
    assert_contains(&text(&output.stderr), "timed out after 6s", &output);
    // Not before the timeout; how soon after it is a matter of load, not of behaviour.
    assert!(took >= Duration::from_secs(6), "took {took:?}");
    assert_contains(&text(&output.stdout), "arg 1: hang", &output);
}

/// No `--timeout`: a kernel that is still running may run forever, but a conversation whose
/// kernel has ended may not keep the host waiting for the rest of a message.
#[test]
fn a_message_cut_off_by_the_kernels_end_does_not_hang_without_a_timeout() {
    let mut child = run_fixture(&[], "args-env-exit", &["stall"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("`cargo gpurun run ... stall` still waits after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert_contains(
        &text(&output.stderr),
        "the kernel ended in the middle of an RPC message",
        &output,
    );
}

fn write_temp(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("gpurun-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn run_path(path: &std::path::Path) -> std::process::Output {
    gpurun(&["run", path.to_str().unwrap()]).output().unwrap()
}

/// One `error:` line (plus an optional hint) and exit status 1.
fn assert_clear_error(output: &std::process::Output, expected: &str) {
    assert_eq!(output.status.code(), Some(1), "{}", describe(output));
    let stderr = text(&output.stderr);
    assert!(stderr.starts_with("error: "), "{}", describe(output));
    assert!(
        stderr.contains(expected),
        "expected `{expected}` in:\n{}",
        describe(output)
    );
    assert!(!stderr.contains("panicked"), "{}", describe(output));
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let output = run_path(std::path::Path::new("/nonexistent/image.ptx"));
    assert_clear_error(&output, "No such file");
}

#[test]
fn a_truncated_elf_is_a_clear_error() {
    let original = std::fs::read(host_image("hello")).unwrap();
    let path = write_temp("truncated.so", &original[..100]);
    assert_clear_error(&run_path(&path), "failed to load image");
}

#[test]
fn a_foreign_elf_is_a_clear_error() {
    assert_clear_error(
        &run_path(std::path::Path::new("/bin/sh")),
        "not a GPU image",
    );
}

#[test]
fn an_image_without_start_is_a_clear_error() {
    // `recovery` has tests but no `_start`: with --kernel of a missing name, and as plain PTX
    // without entry points.
    let ptx =
        b".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry other()\n{\n\tret;\n}\n";
    let path = write_temp("no-start.ptx", ptx);
    assert_clear_error(&run_path(&path), "_start");
}

#[test]
fn a_gpu_image_without_that_gpu_names_the_fix() {
    let ptx =
        b".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry _start()\n{\n\tret;\n}\n";
    let path = write_temp("start.ptx", ptx);
    let output = run_path(&path);
    assert_clear_error(&output, "--target host");
}

/// fixtures/rpc-latency, the GPU check's RPC latency row: N empty prints from thread 0 print
/// nothing and exit 0; wrong arguments get a message and status 2.
#[test]
fn rpc_latency_makes_silent_round_trips() {
    let output = run_fixture(
        &["--threads", "4"],
        "rpc-latency",
        &["--round-trips", "200"],
    )
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(output.stdout.is_empty(), "{}", describe(&output));
    let output = run("rpc-latency", &["--round-trips", "many"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert_contains(
        &text(&output.stderr),
        "rpc-latency: --round-trips takes a number",
        &output,
    );
}
