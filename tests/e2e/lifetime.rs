//! Workers never outlive their run: whatever ends the process that started a worker (SIGTERM,
//! SIGINT to it alone, SIGKILL), the worker ends too, even in the middle of a kernel that never
//! returns. For `cargo gpurun test`, `cargo gpurun run` and a host crate's trials (gpurun-test,
//! whose workers are the test binary itself), on the host emulation.
//!
//! Each case starts the run, waits until its worker runs the hung kernel (an emulated device
//! thread exists), stops the parent so that its own timeout cannot end the worker first, checks
//! the kernel still runs, sends the signal, reaps the parent and then gives the worker one
//! second to be gone.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpurun_e2e::{fixtures_dir, gpurun, host_image, host_images, text};

use crate::host_app::{host_crate_cargo, output_of};

/// How long a worker may take to go once its parent has been reaped.
const WORKER_GONE_WITHIN: Duration = Duration::from_secs(1);

/// How long a run may take to reach its hung kernel (it may build a fixture first).
const KERNEL_STARTS_WITHIN: Duration = Duration::from_secs(600);

/// The name of the host emulation's device threads: one exists once a kernel was launched.
const EMULATED_THREAD: &str = "gpurun-emulated";

/// What /proc says about process `pid`: its parent and its state letter, `None` once gone.
pub(crate) fn stat(pid: u32) -> Option<(u32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((parent, state))
}

/// Whether `pid` runs no more: gone, or a zombie that nobody reaped yet (it holds no memory,
/// no device and no CPU).
pub(crate) fn ended(pid: u32) -> bool {
    !matches!(stat(pid), Some((_, state)) if state != 'Z' && state != 'X')
}

/// The running children of `parent` whose command line contains `marker`.
fn children_with_arg(parent: u32, marker: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| matches!(stat(pid), Some((ppid, _)) if ppid == parent))
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline
                    .split(|&b| b == 0)
                    .any(|arg| arg == marker.as_bytes())
            })
        })
        .collect()
}

/// Whether `pid` has a thread named `name`.
fn has_thread(pid: u32, name: &str) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).any(|task| {
        std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == name)
    })
}

pub(crate) fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with a process id this test started and has not reaped.
    let sent = unsafe { libc::kill(pid as libc::pid_t, signal) };
    assert_eq!(sent, 0, "kill({pid}, {signal}) failed");
}

/// A run under test whose output goes to files (a pipe nobody reads could stall it).
pub(crate) struct Run {
    pub(crate) child: Child,
    output: PathBuf,
}

impl Run {
    pub(crate) fn start(mut command: Command, name: &str) -> Run {
        let output =
            std::env::temp_dir().join(format!("gpurun-lifetime-{name}-{}.log", std::process::id()));
        let file = std::fs::File::create(&output).expect("a log file");
        // SAFETY: the closure runs in the forked child and calls only signal(2), which is
        // async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                // A shell without job control starts background jobs with SIGINT ignored; the
                // run under test must meet the signal as a terminal would send it.
                for signal in [libc::SIGINT, libc::SIGTERM] {
                    libc::signal(signal, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("a log file"))
            .stderr(file);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        Run { child, output }
    }

    pub(crate) fn log(&self) -> String {
        text(&std::fs::read(&self.output).unwrap_or_default())
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.output);
    }
}

/// How one attempt went.
enum Attempt {
    /// The worker ended in time after its parent was killed by the signal.
    WorkerEnded,
    /// The parent's own timeout ended the kernel before the parent was stopped (a slow
    /// machine and a short test timeout): nothing was tested; try again.
    KernelEndedFirst,
}

/// Starts `command`, finds its worker (the child of `parent` that `worker_arg` marks) once it
/// runs the hung kernel, kills the parent with `signal` and checks the worker ends within
/// [`WORKER_GONE_WITHIN`]. `parent` is the started process's id, or for runs through cargo the
/// process that starts the workers (found through `find_parent`).
fn kill_during_a_hung_kernel(
    command: Command,
    name: &str,
    worker_arg: &str,
    signal: libc::c_int,
) -> Attempt {
    let mut run = Run::start(command, name);
    let parent = run.child.id();
    let deadline = Instant::now() + KERNEL_STARTS_WITHIN;
    let worker = loop {
        let in_kernel = children_with_arg(parent, worker_arg)
            .into_iter()
            .find(|&pid| has_thread(pid, EMULATED_THREAD));
        if let Some(worker) = in_kernel {
            break worker;
        }
        if let Some(status) = run.child.try_wait().expect("try_wait") {
            panic!(
                "{name}: the run ended ({status}) before its worker ran the hung kernel:\n{}",
                run.log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{name}: no worker ran the hung kernel within {KERNEL_STARTS_WITHIN:?}:\n{}",
            run.log()
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // Stopped, the parent cannot end the worker itself (at its test timeout).
    send(parent, libc::SIGSTOP);
    if ended(worker) || !has_thread(worker, EMULATED_THREAD) {
        return Attempt::KernelEndedFirst;
    }
    send(parent, signal);
    // A stopped process dies of SIGKILL at once; of other signals once continued.
    send(parent, libc::SIGCONT);
    let status = run.child.wait().expect("wait for the parent");
    let reaped = Instant::now();
    assert_eq!(
        status.signal(),
        Some(signal),
        "{name}: the parent did not die of signal {signal}: {status}\n{}",
        run.log()
    );
    while !ended(worker) {
        if reaped.elapsed() > WORKER_GONE_WITHIN {
            // Leave no spinning orphan behind, then fail.
            // SAFETY: kill(2); the worker is still running (checked just above).
            unsafe { libc::kill(worker as libc::pid_t, libc::SIGKILL) };
            panic!(
                "{name}: worker {worker} still ran {WORKER_GONE_WITHIN:?} after its parent died of signal {signal}:\n{}",
                run.log()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Attempt::WorkerEnded
}

/// Runs [`kill_during_a_hung_kernel`] for each signal, again when the parent's own timeout
/// won the race (at most a few times).
fn workers_end_with_their_parent(name: &str, worker_arg: &str, command: impl Fn() -> Command) {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGKILL] {
        let case = format!("{name}-{signal}");
        let attempts = 5;
        let tested = (0..attempts).any(|_| {
            matches!(
                kill_during_a_hung_kernel(command(), &case, worker_arg, signal),
                Attempt::WorkerEnded
            )
        });
        assert!(
            tested,
            "{case}: the test timeout ended the kernel first in all {attempts} attempts"
        );
    }
}

#[test]
fn cargo_gpurun_test_workers_end_with_it() {
    host_images();
    workers_end_with_their_parent("test", "__worker", || {
        // A timeout far away: only the signal ends this run.
        gpurun(&[
            "test",
            "-p",
            "recovery",
            "--target",
            "host",
            "--",
            "--exact",
            "d_hangs",
            "--test-timeout",
            "3600",
        ])
    });
}

#[test]
fn cargo_gpurun_run_worker_ends_with_it() {
    let image = host_image("args-env-exit");
    let image: &Path = &image;
    workers_end_with_their_parent("run", "__worker", || {
        let mut command = gpurun(&["run"]);
        command.arg(image).arg("hang");
        command
    });
}

/// The host app's trial binary, built by cargo (the host-app tests build it too).
fn host_app_trial_binary() -> PathBuf {
    let manifest = fixtures_dir().join("host-app/Cargo.toml");
    let output = output_of(host_crate_cargo(
        &manifest,
        &["test"],
        &["--test", "gpu", "--no-run", "--message-format=json"],
    ));
    assert!(output.status.success(), "{}", text(&output.stderr));
    gpurun_e2e::json_lines(&text(&output.stdout))
        .find_map(|message| {
            (message["target"]["name"] == "gpu")
                .then(|| message["executable"].as_str().map(PathBuf::from))
                .flatten()
        })
        .expect("cargo names the gpu test executable")
}

#[test]
fn gpurun_test_trial_workers_end_with_the_test_binary() {
    let binary = host_app_trial_binary();
    workers_end_with_their_parent("trials", gpurun_test::WORKER_FLAG, || {
        // As cargo runs it: from the package root, where `kernels` is. The hanging trial
        // times out after 2 s (its crate's test-timeout), hence the attempts.
        let mut command = Command::new(&binary);
        command
            .args(["--ignored", "--exact", "[host-app-kernels] hangs"])
            .current_dir(fixtures_dir().join("host-app"))
            .env("GPURUN_BACKEND", "host")
            .env_remove("GITHUB_ACTIONS");
        command
    });
}
