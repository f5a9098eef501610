//! The harness side of a worker: spawn it, send commands, collect events with a deadline, and
//! name what happened when it dies.

use super::protocol::{self, Command, Event, RunEnd};
use crate::BackendError;
use std::io::BufReader;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command as Process, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How to start a worker: `<exe> <args...> <image>` speaking the protocol on stdin/stdout.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// Program to run (normally `cargo-gpurun` itself).
    pub exe: PathBuf,
    /// Arguments before the image, e.g. `["gpurun", "__worker", "--backend", "host"]`.
    pub args: Vec<String>,
    pub image: PathBuf,
}

/// A running worker process with a loaded image.
pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    events: Receiver<std::io::Result<Event>>,
    /// Device description the worker reported when ready.
    pub device: String,
}

/// What a command produced, or why the worker is gone.
#[derive(Debug)]
pub enum WorkerEnd {
    /// The command finished and the worker is reusable (unless the end says otherwise).
    Done(RunEnd),
    /// The worker died or broke the protocol; the text says how (signal name, exit status).
    Died(String),
    /// The deadline passed; the worker has been killed.
    TimedOut(Duration),
}

impl Worker {
    /// Starts a worker and waits until it has opened the device and loaded the image.
    pub fn spawn(spec: &WorkerSpec, start_timeout: Duration) -> Result<Worker, BackendError> {
        let mut child = Process::new(&spec.exe)
            .args(&spec.args)
            .arg(&spec.image)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|source| BackendError::Io {
                context: format!("failed to start worker `{}`", spec.exe.display()),
                source,
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(BackendError::InvalidArgument("worker pipes missing".into()));
        };
        let (sender, events) = mpsc::channel();
        std::thread::Builder::new()
            .name("gpurun-worker-reader".into())
            .spawn(move || {
                let mut reader = BufReader::new(stdout);
                loop {
                    match protocol::read_event(&mut reader) {
                        Ok(Some(event)) => {
                            if sender.send(Ok(event)).is_err() {
                                return;
                            }
                        }
                        Ok(None) => return,
                        Err(error) => {
                            let _ = sender.send(Err(error));
                            return;
                        }
                    }
                }
            })
            .map_err(|source| BackendError::Io {
                context: "failed to start the worker reader thread".into(),
                source,
            })?;
        let mut worker = Worker {
            child,
            stdin,
            events,
            device: String::new(),
        };
        let deadline = Instant::now() + start_timeout;
        loop {
            match worker.next_event(Some(deadline)) {
                Ok(Event::Ready { device }) => {
                    worker.device = device;
                    return Ok(worker);
                }
                Ok(Event::StartFailed { error }) => {
                    worker.reap();
                    return Err(BackendError::NotAvailable(error));
                }
                Ok(Event::Stdout(_) | Event::Stderr(_) | Event::Panic(_) | Event::Done(_)) => {}
                Err(end) => {
                    return Err(BackendError::NotAvailable(match end {
                        WorkerEnd::TimedOut(after) => {
                            format!("worker did not start within {}s", after.as_secs())
                        }
                        WorkerEnd::Died(how) | WorkerEnd::Done(RunEnd::Failed { error: how }) => {
                            format!("worker failed to start: {how}")
                        }
                        WorkerEnd::Done(other) => format!("worker failed to start: {other:?}"),
                    }))
                }
            }
        }
    }

    /// Sends `command` and feeds every event to `on_event` until the command finishes, the
    /// worker dies, or `timeout` passes (then the worker is killed).
    pub fn run(
        &mut self,
        command: &Command,
        timeout: Option<Duration>,
        on_event: &mut dyn FnMut(Event),
    ) -> WorkerEnd {
        if let Err(error) = protocol::write_command(&mut self.stdin, command) {
            return WorkerEnd::Died(self.death(format!("could not send a command: {error}")));
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            match self.next_event(deadline) {
                Ok(Event::Done(end)) => return WorkerEnd::Done(end),
                Ok(event) => on_event(event),
                Err(WorkerEnd::TimedOut(_)) => {
                    self.kill();
                    // Output that arrived before the kill still counts.
                    while let Ok(Ok(event)) = self.events.try_recv() {
                        on_event(event);
                    }
                    return WorkerEnd::TimedOut(timeout.unwrap_or_default());
                }
                Err(end) => return end,
            }
        }
    }

    fn next_event(&mut self, deadline: Option<Instant>) -> Result<Event, WorkerEnd> {
        let received = match deadline {
            None => self
                .events
                .recv()
                .map_err(|_| RecvTimeoutError::Disconnected),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                self.events.recv_timeout(left)
            }
        };
        match received {
            Ok(Ok(event)) => Ok(event),
            Ok(Err(error)) => Err(WorkerEnd::Died(
                self.death(format!("sent a malformed message: {error}")),
            )),
            Err(RecvTimeoutError::Timeout) => Err(WorkerEnd::TimedOut(Duration::ZERO)),
            Err(RecvTimeoutError::Disconnected) => {
                Err(WorkerEnd::Died(self.death("closed its pipe".into())))
            }
        }
    }

    /// Describes the worker's end: waits for it and names the signal or exit status.
    fn death(&mut self, what: String) -> String {
        let status = self.reap();
        match status {
            Some(status) => format!("worker {what}; it {}", describe_exit(status)),
            None => format!("worker {what}"),
        }
    }

    fn reap(&mut self) -> Option<std::process::ExitStatus> {
        // Give a dying process a moment to finish exiting, then make sure it is gone.
        for _ in 0..50 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        self.child.wait().ok()
    }

    /// Kills the worker (it may be stuck in a hung kernel).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
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
