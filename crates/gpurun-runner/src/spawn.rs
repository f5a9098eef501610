//! Starting worker processes so that none outlives the process that started it, however that
//! process ends (an exit, a panic, SIGTERM, SIGINT, SIGKILL).
//!
//! Two guards, because no single one covers every case:
//!
//! - **Parent-death signal (Linux).** The child asks the kernel, before it executes the worker
//!   program, for SIGKILL when its parent goes (`PR_SET_PDEATHSIG`). The kernel sends it while
//!   the parent exits, whatever ended it, so a worker stuck in a hung kernel dies with its
//!   parent. The "parent" is the *thread* that created the child, not the process: a worker
//!   started from a short-lived thread (a test thread of the harness, which leaves when its test
//!   is done while other tests still use the worker) would be killed with that thread. So every
//!   worker is started from one thread that lives as long as the process ([`spawn_worker`]).
//! - **The command pipe.** The parent holds the only write end of the worker's stdin; when the
//!   parent is gone the worker reads the end of its commands and leaves at once, even with a
//!   kernel still running (see `worker::run`). This also covers systems without a parent-death
//!   signal.
//!
//! Terminal signals need no forwarding of ours: workers stay in the parent's process group, so
//! a Ctrl-C (or nextest's signal to a test's group) reaches them too, and a signal sent to the
//! parent alone ends it, which ends its workers through the guards above.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc::{self, Sender, SyncSender};
use std::sync::{Mutex, OnceLock, PoisonError};

/// A command to start and where to send the result.
type Request = (Command, SyncSender<io::Result<Child>>);

/// The thread that starts every worker; it lives until the process ends (the sender is never
/// dropped), so a worker's parent thread never ends before the process does.
static SPAWNER: OnceLock<Mutex<Sender<Request>>> = OnceLock::new();

/// Starts `command` as a worker process tied to this process's lifetime (see the module
/// documentation). Blocks until the process has started or failed to.
pub(crate) fn spawn_worker(mut command: Command) -> io::Result<Child> {
    end_with_parent(&mut command);
    let spawner = match SPAWNER.get() {
        Some(spawner) => spawner,
        None => {
            let (sender, requests) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("gpurun-spawner".into())
                .spawn(move || {
                    for (mut command, reply) in requests {
                        let _ = reply.send(command.spawn());
                    }
                })?;
            // Two callers may race here: the loser's thread ends with its unused channel.
            SPAWNER.get_or_init(|| Mutex::new(sender))
        }
    };
    let (reply, result) = mpsc::sync_channel(1);
    let sent = spawner
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send((command, reply));
    if sent.is_err() {
        return Err(io::Error::other("the worker spawner thread is gone"));
    }
    result
        .recv()
        .map_err(|_| io::Error::other("the worker spawner thread ended during a spawn"))?
}

/// Has the child ask for SIGKILL when its parent thread ends, and end at once if the parent
/// is already gone by then (it then has another parent: the reaper that adopted it).
#[cfg(target_os = "linux")]
fn end_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and calls only `prctl` and
    // `getppid`, which are async-signal-safe, and builds an `io::Error` from an errno, which
    // does not allocate.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() as u32 != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Elsewhere only the command pipe ends a worker whose parent is gone.
#[cfg(not(target_os = "linux"))]
fn end_with_parent(_command: &mut Command) {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    /// A worker started from a thread that then ends lives on: the parent-death signal must
    /// follow the process, not the thread that asked for the worker.
    #[test]
    fn a_worker_outlives_the_thread_that_asked_for_it() {
        let (mut child, tid) = std::thread::spawn(|| {
            let mut command = Command::new("sh");
            command.args(["-c", "cat >/dev/null"]).stdin(Stdio::piped());
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            (spawn_worker(command).expect("sh starts"), tid)
        })
        .join()
        .expect("the spawning thread");
        // The kernel sends a parent-death signal while the thread exits, before it leaves
        // /proc: once it has left, a signal tied to it has been sent.
        let task = Path::new("/proc/self/task").join(tid.to_string());
        let deadline = Instant::now() + Duration::from_secs(30);
        while task.exists() {
            assert!(Instant::now() < deadline, "thread {tid} never ended");
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(child.stdin.take());
        let status = child.wait().expect("the child ends");
        assert!(
            status.success(),
            "the worker ended with the thread that started it: {status:?}"
        );
    }
}
