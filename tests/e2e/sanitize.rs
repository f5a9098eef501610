//! `--sanitize` without a GPU: the real binary runs the `sanitize` fixture's
//! nvptx image on the fake CUDA driver (crates/gpurun-fake-driver, as `libcuda.so` on
//! `LD_LIBRARY_PATH`) under a stand-in for compute-sanitizer (tests/sanitizer-stand-in, found
//! on `PATH` as NVIDIA's program is). The stand-in runs the real worker command it is given and
//! writes compute-sanitizer's report layout for the planted kernels the worker launched, read
//! from the fake driver's call log. Each case checks which tests fail, with which report, and
//! that the others keep their verdicts; then the errors of a run that cannot be sanitized, and
//! that a worker under the sanitizer (a grandchild) still ends with the run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpurun_e2e::fake_driver::{fake_cuda_in, LOG_ENV};
use gpurun_e2e::{
    assert_contains, assert_test_lines, describe, fresh_dir, gpu_images_dir, gpurun, host_image,
    json_lines, repo_root, text, HOST_BUILD_JSON,
};

use crate::lifetime::{ended, send, Run};

/// The fake driver's shared library linked as `libcuda.so` into a folder of its own.
fn fake_cuda_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        fake_cuda_in(Path::new(env!("CARGO_TARGET_TMPDIR")).join("sanitize-fake-cuda"))
    })
}

/// The `sanitize` fixture's PTX, alone in a folder: without the cubin the build writes beside
/// it, the worker hands the fake driver the PTX, whose kernels and globals it reads.
fn sanitize_ptx() -> &'static Path {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let mut args = HOST_BUILD_JSON[1..].to_vec();
        args[2] = "nvptx";
        args.extend(["-p", "sanitize"]);
        let output = gpurun(&args)
            .env("CARGO_TARGET_DIR", gpu_images_dir())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", describe(&output));
        let built = json_lines(&text(&output.stdout))
            .find_map(|message| {
                (message["package"] == "sanitize")
                    .then(|| message["path"].as_str().map(PathBuf::from))
                    .flatten()
            })
            .expect("the build names the sanitize image");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sanitize-image");
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("sanitize.ptx");
        std::fs::copy(&built, &image).unwrap();
        image
    })
}

/// A folder for one case's files, fresh.
fn case_dir(name: &str) -> PathBuf {
    fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("sanitize-{name}"),
    )
}

/// `cargo gpurun ARGS` on the fake CUDA driver (calls logged to `log`) with the stand-in
/// compute-sanitizer on `PATH`, reporting the kernels whose names contain `planted`.
fn sanitized(args: &[&str], log: &Path, planted: &str) -> Command {
    let path = std::env::join_paths(
        std::iter::once(repo_root().join("tests/sanitizer-stand-in")).chain(
            std::env::var_os("PATH")
                .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
                .unwrap_or_default(),
        ),
    )
    .unwrap();
    let mut command = gpurun(args);
    command
        .env("LD_LIBRARY_PATH", fake_cuda_dir())
        .env(LOG_ENV, log)
        .env("PATH", path)
        .env("STANDIN_PLANTED", planted)
        .env_remove("GPURUN_COMPUTE_SANITIZER")
        .env_remove("GPURUN_SANITIZE")
        .env_remove("CUDA_HOME");
    command
}

/// `cargo gpurun run --sanitize TOOL IMAGE ARGS` of the sanitize fixture's tests.
fn run_tests(name: &str, tool: &str, planted: &str, args: &[&str]) -> (Output, PathBuf) {
    let log = case_dir(name).join("calls.log");
    let image = sanitize_ptx().to_str().unwrap().to_owned();
    let mut all = vec!["run", "--sanitize", tool, &image];
    all.extend_from_slice(args);
    let output = sanitized(&all, &log, planted).output().unwrap();
    (output, log)
}

/// The sanitize fixture's tests, in the order they run.
const TESTS: [&str; 3] = [
    "a_writes_in_bounds",
    "b_writes_past_its_allocation",
    "c_passes_after",
];

/// Asserts the run's exit status and the verdict (`ok`, `FAILED`) of each of `TESTS`, in order.
#[track_caller]
fn assert_verdicts(output: &Output, status: i32, verdicts: [&str; 3]) {
    assert_eq!(output.status.code(), Some(status), "{}", describe(output));
    let results: Vec<(&str, &str)> = TESTS.into_iter().zip(verdicts).collect();
    assert_test_lines(output, &results);
}

/// The process ids that launched each kernel, from the fake driver's call log.
fn launches(log: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.split(' ').nth(1) == Some("cuLaunchKernel"))
        .filter_map(|line| {
            let pid = line.split(' ').next()?.to_owned();
            let kernel = line
                .split("function=")
                .nth(1)?
                .split(' ')
                .next()?
                .to_owned();
            Some((pid, kernel))
        })
        .collect()
}

#[test]
fn memcheck_findings_fail_only_the_test_whose_kernel_they_name() {
    let (output, log) = run_tests("memcheck", "memcheck", "b_writes_past", &[]);
    assert_verdicts(&output, 101, ["ok", "FAILED", "ok"]);
    let stdout = text(&output.stdout);
    for part in [
        "note: compute-sanitizer memcheck found 1 error in this test's launch of \
         `__gpurun_test_b_writes_past_its_allocation_",
        "========= Invalid __global__ write of size 4 bytes",
        "by thread (0,0,0) in block (0,0,0)",
        "Access at 0x7f3a20000010 is out of bounds",
        "in lib.rs:28",
    ] {
        assert_contains(&stdout, part, &output);
    }
    // The failure is b's alone: its section is the only one.
    assert_eq!(stdout.matches("found 1 error").count(), 1, "{stdout}");
    // Each test ran in a worker of its own.
    let launched = launches(&log);
    let mut workers: Vec<&str> = launched.iter().map(|(pid, _)| pid.as_str()).collect();
    workers.sort();
    workers.dedup();
    assert_eq!((launched.len(), workers.len()), (3, 3), "{launched:?}");
}

#[test]
fn tests_without_findings_keep_their_verdicts() {
    let (output, _) = run_tests("clean", "memcheck", "", &[]);
    assert_verdicts(&output, 0, ["ok", "ok", "ok"]);
    // Another tool, another record layout: a race fails the test that raced.
    let (output, _) = run_tests("racecheck", "racecheck", "c_passes_after", &[]);
    assert_verdicts(&output, 101, ["ok", "ok", "FAILED"]);
    assert_contains(
        &text(&output.stdout),
        "compute-sanitizer racecheck found 1 error",
        &output,
    );
    assert_contains(
        &text(&output.stdout),
        "Error: Race reported between Write access at __gpurun_test_c_passes_after_",
        &output,
    );
}

#[test]
fn errors_the_report_does_not_show_still_fail_the_test() {
    let (output, _) = {
        let log = case_dir("unreadable").join("calls.log");
        let image = sanitize_ptx().to_str().unwrap().to_owned();
        let output = sanitized(
            &[
                "run",
                "--sanitize",
                "memcheck",
                &image,
                "--exact",
                "a_writes_in_bounds",
            ],
            &log,
            "",
        )
        .env("STANDIN_MODE", "unreadable")
        .output()
        .unwrap();
        (output, log)
    };
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    assert_test_lines(&output, &[("a_writes_in_bounds", "FAILED")]);
    assert_contains(
        &text(&output.stdout),
        "exited with status 86 (it found errors), but its report names none that could be read",
        &output,
    );
}

#[test]
fn a_run_that_cannot_be_sanitized_is_a_clear_error() {
    let log = case_dir("errors").join("calls.log");
    let image = sanitize_ptx().to_str().unwrap().to_owned();
    let host = host_image("sanitize");
    let host = host.to_str().unwrap();
    // (arguments, environment, what the error says)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 6] = [
        (
            &["run", "--sanitize", "memcheck", &image],
            &[("GPURUN_COMPUTE_SANITIZER", "/nonexistent/compute-sanitizer")],
            "GPURUN_COMPUTE_SANITIZER=`/nonexistent/compute-sanitizer` is not an executable program",
        ),
        (
            &["run", "--sanitize", "memcheck", &image],
            &[("PATH", "/nonexistent"), ("CUDA_HOME", "/nonexistent/cuda")],
            "compute-sanitizer not found (looked on PATH, in /nonexistent/cuda/bin",
        ),
        (
            &["run", "--sanitize", "memcheck", host],
            &[],
            "checks CUDA kernels only, but this run uses the host backend",
        ),
        (
            &["test", "-p", "sanitize", "--target", "host", "--sanitize", "memcheck"],
            &[],
            "checks CUDA kernels only: build for nvptx, not `host`",
        ),
        (
            &["test", "-p", "sanitize", "--backend", "host,cuda", "--sanitize", "memcheck"],
            &[],
            "it takes one backend, cuda, not a list or `all`",
        ),
        (
            &["test", "-p", "sanitize", "--sanitize", "asan"],
            &[],
            "[possible values: memcheck, racecheck, initcheck, synccheck]",
        ),
    ];
    // A machine with the CUDA toolkit in its default place finds compute-sanitizer there.
    let toolkit_has_it = Path::new("/usr/local/cuda/bin/compute-sanitizer").exists();
    for (args, env, expected) in cases {
        if toolkit_has_it && expected.contains("not found") {
            eprintln!("note: not checked here: {expected} (this machine has /usr/local/cuda)");
            continue;
        }
        let output = sanitized(args, &log, "")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            matches!(output.status.code(), Some(1 | 2)),
            "{args:?}: {}",
            describe(&output)
        );
        let stderr = text(&output.stderr);
        assert_contains(&stderr, expected, &output);
        assert!(!stderr.contains("panicked"), "{}", describe(&output));
        assert!(launches(&log).is_empty(), "{args:?} ran something");
    }
}

/// The descendants of `pid` whose command line has `marker` (workers under the stand-in are
/// its children, grandchildren of the run).
fn descendants_with_arg(pid: u32, marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let processes: Vec<(u32, u32, bool)> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|child| {
            let (parent, _) = crate::lifetime::stat(child)?;
            let marked = std::fs::read(format!("/proc/{child}/cmdline")).is_ok_and(|cmdline| {
                cmdline
                    .split(|&b| b == 0)
                    .any(|arg| arg == marker.as_bytes())
            });
            Some((child, parent, marked))
        })
        .collect();
    let mut family = vec![pid];
    let mut found = Vec::new();
    while let Some(parent) = family.pop() {
        for &(child, _, marked) in processes.iter().filter(|(_, p, _)| *p == parent) {
            family.push(child);
            if marked {
                found.push(child);
            }
        }
    }
    found
}

/// Processes whose command line has `arg`.
fn processes_with_arg(arg: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| !ended(pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline
                    .split(|&b| b == 0)
                    .any(|word| word == arg.as_os_str().as_encoded_bytes())
            })
        })
        .collect()
}

/// A test that times out kills compute-sanitizer; the worker it ran (stuck in the kernel) must
/// go too, never wait for its slots. Several runs, as the worker may see its pipe close before
/// or after the sanitizer is gone.
#[test]
fn a_timed_out_sanitized_worker_does_not_outlive_the_run() {
    for attempt in 0..3 {
        let dir = case_dir(&format!("timeout-{attempt}"));
        // The image at a path of this case's own: its worker is the process that names it.
        let image = dir.join("sanitize.ptx");
        std::fs::copy(sanitize_ptx(), &image).unwrap();
        let image_arg = image.to_str().unwrap().to_owned();
        let output = sanitized(
            &[
                "run",
                "--sanitize",
                "memcheck",
                &image_arg,
                "--exact",
                "c_passes_after",
                "--test-timeout",
                "0.1",
            ],
            &dir.join("calls.log"),
            "",
        )
        .env("GPURUN_FAKE_CUDA_RUNNING_QUERIES", "4000000000")
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
        assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
        // 0.1 s, ten times as long under the sanitizer.
        assert_contains(&text(&output.stdout), "test timed out after 1s", &output);
        let ran = Instant::now();
        loop {
            let left = processes_with_arg(&image);
            if left.is_empty() {
                break;
            }
            if ran.elapsed() > Duration::from_secs(1) {
                for pid in &left {
                    // SAFETY: kill(2) of a worker this test's run started.
                    unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
                }
                panic!("attempt {attempt}: worker(s) {left:?} outlived the run by a second");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn a_worker_under_the_sanitizer_ends_with_its_run() {
    for signal in [libc::SIGKILL, libc::SIGTERM, libc::SIGINT] {
        let log = case_dir(&format!("lifetime-{signal}")).join("calls.log");
        let image = sanitize_ptx().to_str().unwrap().to_owned();
        // The kernel never ends (the fake stream stays busy) and the time limit is far away:
        // only the signal ends this run.
        let mut command = sanitized(
            &[
                "run",
                "--sanitize",
                "memcheck",
                &image,
                "--exact",
                "c_passes_after",
                "--test-timeout",
                "3600",
            ],
            &log,
            "",
        );
        command.env("GPURUN_FAKE_CUDA_RUNNING_QUERIES", "4000000000");
        let mut run = Run::start(command, &format!("sanitize-{signal}"));
        let parent = run.child.id();
        let deadline = Instant::now() + Duration::from_secs(600);
        let worker = loop {
            let launched = launches(&log);
            let in_kernel = descendants_with_arg(parent, "__worker")
                .into_iter()
                .find(|pid| launched.iter().any(|(by, _)| *by == pid.to_string()));
            if let Some(worker) = in_kernel {
                break worker;
            }
            if let Some(status) = run.child.try_wait().unwrap() {
                panic!(
                    "the run ended ({status}) before its kernel ran:\n{}",
                    run.log()
                );
            }
            assert!(Instant::now() < deadline, "no kernel ran:\n{}", run.log());
            std::thread::sleep(Duration::from_millis(5));
        };
        send(parent, signal);
        let status = run.child.wait().unwrap();
        assert!(!status.success(), "{status}");
        let reaped = Instant::now();
        while !ended(worker) {
            if reaped.elapsed() > Duration::from_secs(1) {
                // SAFETY: kill(2) of a process this test started (through the run).
                unsafe { libc::kill(worker as libc::pid_t, libc::SIGKILL) };
                panic!(
                    "signal {signal}: worker {worker} outlived its run by a second:\n{}",
                    run.log()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
