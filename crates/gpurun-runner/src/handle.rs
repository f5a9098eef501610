//! The harness side of a worker: spawn it, send commands to its slots, collect each slot's
//! events with a deadline, and name what happened when it dies.

use crate::protocol::{self, Command, Event, MAX_SLOTS};
use crate::sanitizer::Sanitizer;
use crate::worker::{SANITIZED_ENV, SLOTS_ENV};
use gpurun_abi::LaunchEnd;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command as Process, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// The CUDA driver's module loading mode, read at `cuInit`.
const MODULE_LOADING_ENV: &str = "CUDA_MODULE_LOADING";

/// Why a worker could not start (the device would not open, the image would not load, the
/// process would not spawn); the text reads on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// How to start a worker: `<exe> <args...> <image>` speaking the protocol on stdin/stdout.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// Program to run (normally `cargo-gpurun` itself).
    pub exe: PathBuf,
    /// Arguments before the image, e.g. `["gpurun", "__worker", "--backend", "host"]`.
    pub args: Vec<String>,
    pub image: PathBuf,
    /// Tests the worker runs at the same time, each in its own slot (stream, queue or library
    /// copy); at least 1.
    pub slots: usize,
    /// Variables added to the worker's environment (the scripted backend's script).
    pub env: Vec<(String, String)>,
    /// The backend the worker opens its device with.
    pub backend: gpurun_hal::BackendKind,
    /// compute-sanitizer to run the worker under (`--sanitize`), with its report in a file.
    pub sanitizer: Option<Sanitizer>,
}

impl WorkerSpec {
    /// Whether the worker writes a coverage profile as it ends: `LLVM_PROFILE_FILE` is set for
    /// it (`cargo gpurun test --coverage`) or inherited from this process (a host crate's tests
    /// under `cargo llvm-cov`). See [`crate::worker::PROFILE_FILE_ENV`].
    pub fn writes_profile(&self) -> bool {
        let profile = crate::worker::PROFILE_FILE_ENV;
        self.env.iter().any(|(key, _)| key == profile) || std::env::var_os(profile).is_some()
    }
}

/// Whether a worker's end is explained by one of its slots: a launch that ended the process on
/// purpose (an exit, an abort, a timeout: [`LaunchEnd::names_its_launch`]) or a kill by the
/// parent. A fault or a crash is not: on a GPU every stream of a poisoned context reports the
/// same error, and a crash takes every slot with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Breakage {
    Explained,
    Unexplained,
}

/// A running worker process with the image loaded in each of its slots. Shared by the threads
/// that run tests in its slots; each slot is used by one thread at a time.
pub struct WorkerHandle {
    /// The worker process, or the compute-sanitizer process that runs it.
    child: Mutex<Child>,
    status: OnceLock<Option<ExitStatus>>,
    /// Closed (taken) to tell the worker to leave.
    stdin: Mutex<Option<ChildStdin>>,
    /// The folder of compute-sanitizer's report, removed with the handle.
    sanitizer_log: Option<tempfile::TempDir>,
    slots: Vec<Mutex<Receiver<io::Result<Event>>>>,
    /// The first sign that the worker is going away, set by the event reader or by a kill.
    breakage: Arc<OnceLock<Breakage>>,
    /// Device description the worker reported when ready.
    pub device: String,
}

/// Why a command produced no launch end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The worker could not run the command (a missing kernel, a backend error); it is still
    /// usable.
    Refused(String),
    /// The worker died or broke the protocol; the text says how (signal name, exit status).
    Died(String),
}

/// Whether a launch's end leaves the worker unable to go on, and if so whether that slot alone
/// explains it.
pub(crate) fn breakage_of(end: &LaunchEnd) -> Option<Breakage> {
    if end.leaves_module_usable() {
        None
    } else if end.names_its_launch() {
        Some(Breakage::Explained)
    } else {
        Some(Breakage::Unexplained)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads the worker's frames and hands each to its slot's channel. A malformed stream or a slot
/// the worker does not have ends every slot with the error; the end of the stream disconnects
/// them all.
fn route_events(
    stdout: ChildStdout,
    slots: &[Sender<io::Result<Event>>],
    breakage: &OnceLock<Breakage>,
) {
    let mut reader = BufReader::new(stdout);
    loop {
        let error = match protocol::read_event(&mut reader) {
            Ok(Some((slot, event))) => match slots.get(slot as usize) {
                Some(sender) => {
                    if let Event::Ended(end) = &event {
                        if let Some(kind) = breakage_of(end) {
                            let _ = breakage.set(kind);
                        }
                    }
                    // A slot whose thread gave up (timed out) no longer listens.
                    let _ = sender.send(Ok(event));
                    continue;
                }
                None => io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("frame for slot {slot}, which it does not have"),
                ),
            },
            Ok(None) => {
                // Gone without a word about why (unless a fatal run end said so already): no
                // new test may start in it.
                let _ = breakage.set(Breakage::Unexplained);
                return;
            }
            Err(error) => error,
        };
        let _ = breakage.set(Breakage::Unexplained);
        for sender in slots {
            let _ = sender.send(Err(io::Error::new(error.kind(), error.to_string())));
        }
        return;
    }
}

/// How a worker ended after [`WorkerHandle::close`].
#[derive(Debug)]
pub struct WorkerEnd {
    /// The process's exit status (compute-sanitizer's, when it ran the worker); `None` when it
    /// had to be killed or could not be waited for.
    pub status: Option<ExitStatus>,
    /// compute-sanitizer's report, when it ran the worker (empty when it wrote none).
    pub sanitizer_report: Option<String>,
}

/// The worker's command line and environment: `exe args image`, or under a sanitizer
/// `compute-sanitizer OPTIONS -- exe args image` with its report in the given folder.
fn worker_command(
    spec: &WorkerSpec,
    slot_count: usize,
    sanitized: Option<(&Sanitizer, &Path)>,
) -> Process {
    let mut command = match sanitized {
        Some((sanitizer, log)) => {
            let mut command = Process::new(&sanitizer.program);
            command
                .args(sanitizer.arguments(&Sanitizer::log_file(log)))
                .arg(&spec.exe)
                .env(SANITIZED_ENV, "1");
            command
        }
        None => Process::new(&spec.exe),
    };
    if std::env::var_os(MODULE_LOADING_ENV).is_none() {
        // Lazy loading (the default since CUDA 12.2) loads a kernel at its first launch, which
        // then waits behind whatever another slot's stream runs, hung kernels too.
        command.env(MODULE_LOADING_ENV, "EAGER");
    }
    command
        .args(&spec.args)
        .arg(&spec.image)
        .envs(spec.env.iter().map(|(key, value)| (key, value)))
        .env(SLOTS_ENV, slot_count.to_string());
    command
}

impl WorkerHandle {
    /// Starts a worker and waits until every slot has opened the device and loaded the image.
    pub fn spawn(spec: &WorkerSpec, start_timeout: Duration) -> Result<WorkerHandle, StartError> {
        let slot_count = spec.slots.clamp(1, MAX_SLOTS);
        // The sanitizer and the folder of its report, made together.
        let sanitized = spec
            .sanitizer
            .as_ref()
            .map(|sanitizer| {
                tempfile::Builder::new()
                    .prefix("gpurun-sanitizer-")
                    .tempdir()
                    .map(|log| (sanitizer, log))
                    .map_err(|error| {
                        StartError(format!(
                            "failed to make a folder for compute-sanitizer's report: {error}"
                        ))
                    })
            })
            .transpose()?;
        let mut command = worker_command(
            spec,
            slot_count,
            sanitized
                .as_ref()
                .map(|(sanitizer, log)| (*sanitizer, log.path())),
        );
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let program = PathBuf::from(command.get_program());
        // Tied to this process: it ends when this process does, however that happens.
        let mut child = crate::spawn::spawn_worker(command).map_err(|source| {
            StartError(format!(
                "failed to start worker `{}`: {source}",
                program.display()
            ))
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(StartError("worker pipes missing".into()));
        };
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..slot_count).map(|_| mpsc::channel()).unzip();
        let breakage = Arc::new(OnceLock::new());
        let mut worker = WorkerHandle {
            child: Mutex::new(child),
            status: OnceLock::new(),
            stdin: Mutex::new(Some(stdin)),
            sanitizer_log: sanitized.map(|(_, log)| log),
            slots: receivers.into_iter().map(Mutex::new).collect(),
            breakage: Arc::clone(&breakage),
            device: String::new(),
        };
        std::thread::Builder::new()
            .name("gpurun-worker-reader".into())
            .spawn(move || route_events(stdout, &senders, &breakage))
            .map_err(|source| {
                StartError(format!(
                    "failed to start the worker reader thread: {source}"
                ))
            })?;
        let deadline = Instant::now() + start_timeout;
        for slot in 0..slot_count {
            worker.device = worker
                .wait_ready(slot, deadline, start_timeout)
                .map_err(|error| worker.with_sanitizer_report(error))?;
        }
        Ok(worker)
    }

    /// A start failure with compute-sanitizer's report added, when it ran the worker: it says
    /// why the sanitizer could not run it.
    fn with_sanitizer_report(&self, error: StartError) -> StartError {
        match self.sanitizer_report() {
            Some(report) if crate::sanitizer::has_records(&report) => StartError(format!(
                "{error}\ncompute-sanitizer's report:\n{}",
                report.trim_end()
            )),
            _ => error,
        }
    }

    /// compute-sanitizer's report so far, when it runs the worker.
    fn sanitizer_report(&self) -> Option<String> {
        let folder = self.sanitizer_log.as_ref()?;
        let bytes = std::fs::read(Sanitizer::log_file(folder.path())).unwrap_or_default();
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Tells the worker to leave (closes its command pipe) and waits up to `within` for the
    /// process to end (compute-sanitizer finishes its report first), killing it after that.
    /// The worker must have no launch running that the caller still wants.
    pub fn close(&self, within: Duration) -> WorkerEnd {
        drop(lock(&self.stdin).take());
        let status = *self.status.get_or_init(|| {
            let mut child = lock(&self.child);
            let deadline = Instant::now() + within;
            while Instant::now() < deadline {
                match child.try_wait() {
                    Ok(Some(status)) => return Some(status),
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                    Err(_) => break,
                }
            }
            let _ = child.kill();
            let _ = child.wait();
            None
        });
        WorkerEnd {
            status,
            sanitizer_report: self.sanitizer_report(),
        }
    }

    fn wait_ready(
        &self,
        slot: usize,
        deadline: Instant,
        start_timeout: Duration,
    ) -> Result<String, StartError> {
        loop {
            match self.next_event(slot, Some(deadline)) {
                Ok(Event::Ready { device }) => return Ok(device),
                Ok(Event::StartFailed { error }) => {
                    self.kill();
                    return Err(StartError(error));
                }
                Ok(
                    Event::Stdout(_)
                    | Event::Stderr(_)
                    | Event::Panic(_)
                    | Event::DeviceTime(_)
                    | Event::Ended(_)
                    | Event::Refused { .. },
                ) => {}
                Err(Wait::TimedOut) => {
                    self.kill();
                    return Err(StartError(format!(
                        "worker did not start within {}s",
                        start_timeout.as_secs()
                    )));
                }
                Err(Wait::Died(how)) => {
                    return Err(StartError(format!("worker failed to start: {how}")))
                }
            }
        }
    }

    /// How many tests the worker can run at once.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Why the worker is going away, if it is: `None` while it is healthy.
    pub(crate) fn breakage(&self) -> Option<Breakage> {
        self.breakage.get().copied()
    }

    /// Sends `command` to `slot` and feeds that slot's events to `on_event` until the command's
    /// launch ends, the worker dies, or `timeout` passes (then the worker is killed, with every
    /// slot, and the launch ends as [`LaunchEnd::TimedOut`]).
    pub fn run(
        &self,
        slot: usize,
        command: &Command,
        timeout: Option<Duration>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<LaunchEnd, RunError> {
        let Some(wire_slot) = u32::try_from(slot).ok().filter(|_| slot < self.slots.len()) else {
            return Err(RunError::Refused(format!("worker has no slot {slot}")));
        };
        let sent = match &mut *lock(&self.stdin) {
            Some(stdin) => protocol::write_command(stdin, wire_slot, command),
            None => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the worker was told to leave",
            )),
        };
        if let Err(error) = sent {
            let _ = self.breakage.set(Breakage::Unexplained);
            return Err(RunError::Died(
                self.death(format!("could not send a command: {error}")),
            ));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            match self.next_event(slot, deadline) {
                Ok(Event::Ended(end)) => return Ok(end),
                Ok(Event::Refused { error }) => return Err(RunError::Refused(error)),
                Ok(event) => on_event(event),
                Err(Wait::TimedOut) => {
                    self.kill();
                    // Output that arrived before the kill still counts.
                    let receiver = lock(&self.slots[slot]);
                    while let Ok(Ok(event)) = receiver.try_recv() {
                        on_event(event);
                    }
                    return Ok(LaunchEnd::TimedOut(timeout.unwrap_or_default()));
                }
                Err(Wait::Died(how)) => return Err(RunError::Died(how)),
            }
        }
    }

    fn next_event(&self, slot: usize, deadline: Option<Instant>) -> Result<Event, Wait> {
        let received = {
            let receiver = lock(&self.slots[slot]);
            match deadline {
                None => receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(deadline) => {
                    receiver.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                }
            }
        };
        match received {
            Ok(Ok(event)) => Ok(event),
            Ok(Err(error)) => Err(Wait::Died(
                self.death(format!("sent a malformed message: {error}")),
            )),
            Err(RecvTimeoutError::Timeout) => Err(Wait::TimedOut),
            Err(RecvTimeoutError::Disconnected) => {
                let _ = self.breakage.set(Breakage::Unexplained);
                Err(Wait::Died(self.death("closed its pipe".into())))
            }
        }
    }

    /// Describes the worker's end: waits for it and names the signal or exit status.
    fn death(&self, what: String) -> String {
        match self.reap() {
            Some(status) => format!("worker {what}; it {}", describe_exit(status)),
            None => format!("worker {what}"),
        }
    }

    fn reap(&self) -> Option<ExitStatus> {
        *self.status.get_or_init(|| {
            let mut child = lock(&self.child);
            // Give a dying process a moment to finish exiting, then make sure it is gone.
            for _ in 0..50 {
                if let Ok(Some(status)) = child.try_wait() {
                    return Some(status);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            child.wait().ok()
        })
    }

    /// Kills the worker (it may be stuck in a hung kernel), ending every slot's run. Its command
    /// pipe is closed first: under compute-sanitizer the process killed is the sanitizer, and
    /// the worker it runs leaves when its commands end.
    pub fn kill(&self) {
        let _ = self.breakage.set(Breakage::Explained);
        drop(lock(&self.stdin).take());
        let mut child = lock(&self.child);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Why no event came.
enum Wait {
    /// The deadline passed.
    TimedOut,
    /// The worker is gone; the text says how.
    Died(String),
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(PoisonError::into_inner);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// "was killed by SIGSEGV (segmentation fault)", "exited with status 3".
pub fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        let name = match signal {
            4 => "SIGILL (illegal instruction)",
            5 => "SIGTRAP (trace/breakpoint trap)",
            6 => "SIGABRT (abort)",
            7 => "SIGBUS (bus error)",
            8 => "SIGFPE (arithmetic exception)",
            9 => "SIGKILL (killed)",
            11 => "SIGSEGV (segmentation fault)",
            15 => "SIGTERM (terminated)",
            _ => return format!("was killed by signal {signal}"),
        };
        format!("was killed by {name}")
    } else {
        match status.code() {
            Some(code) => format!("exited with status {code}"),
            None => "ended".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn workers_load_cuda_modules_eagerly_with_their_slot_count() {
        let spec = WorkerSpec {
            exe: "worker".into(),
            args: vec!["--device".into(), "1".into()],
            image: "image.ptx".into(),
            slots: 3,
            env: vec![("GPURUN_SCRIPT".into(), "s.json".into())],
            backend: gpurun_hal::BackendKind::Scripted,
            sanitizer: None,
        };
        let command = worker_command(&spec, 3, None);
        let envs: Vec<(&OsStr, Option<&OsStr>)> = command.get_envs().collect();
        let has =
            |key: &str, value: &str| envs.contains(&(OsStr::new(key), Some(OsStr::new(value))));
        if std::env::var_os(MODULE_LOADING_ENV).is_none() {
            assert!(has(MODULE_LOADING_ENV, "EAGER"), "{envs:?}");
        }
        assert!(
            has(SLOTS_ENV, "3") && has("GPURUN_SCRIPT", "s.json"),
            "{envs:?}"
        );
        let args: Vec<&OsStr> = command.get_args().collect();
        assert_eq!(args, ["--device", "1", "image.ptx"]);
        assert!(!envs.iter().any(|(key, _)| *key == SANITIZED_ENV));
    }

    #[test]
    fn a_sanitized_worker_is_compute_sanitizer_running_the_worker_command() {
        let sanitizer = Sanitizer {
            tool: crate::SanitizerTool::Memcheck,
            program: "/cuda/bin/compute-sanitizer".into(),
        };
        let spec = WorkerSpec {
            exe: "worker".into(),
            args: vec!["gpurun".into(), "__worker".into()],
            image: "image.ptx".into(),
            slots: 1,
            env: Vec::new(),
            backend: gpurun_hal::BackendKind::Cuda,
            sanitizer: Some(sanitizer.clone()),
        };
        let command = worker_command(&spec, 1, Some((&sanitizer, Path::new("/tmp/log"))));
        assert_eq!(command.get_program(), "/cuda/bin/compute-sanitizer");
        let args: Vec<&OsStr> = command.get_args().collect();
        let options = sanitizer.arguments(&Sanitizer::log_file(Path::new("/tmp/log")));
        assert_eq!(
            &args[..options.len()],
            options.iter().map(|a| a.as_os_str()).collect::<Vec<_>>()
        );
        assert_eq!(
            &args[options.len()..],
            ["worker", "gpurun", "__worker", "image.ptx"]
        );
        let envs: Vec<(&OsStr, Option<&OsStr>)> = command.get_envs().collect();
        assert!(envs.contains(&(OsStr::new(SANITIZED_ENV), Some(OsStr::new("1")))));
    }
}
