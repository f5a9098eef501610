//! The one launch-and-serve loop every backend runs: while a kernel runs, answer its RPC
//! requests, watch its state, keep the deadlines, back off when idle, and decide how the launch
//! ended. Backends only say what state a launch is in ([`Launch`]); every rule lives here:
//!
//! - The first `exit()` or `abort()` served decides the end, as in LLVM's loader (which exits
//!   the process at the first one). A fault seen after it does not replace it.
//! - After an `exit()`/`abort()` the other threads get [`EXIT_GRACE`] to finish, with their
//!   output still served; then the launch ends regardless and the module is broken.
//! - A fault ends the launch as [`LaunchEnd::Faulted`] with the backend's text.
//! - The caller's timeout ends it as [`LaunchEnd::TimedOut`]; the module is broken.
//! - Requests sent right before the kernel ended are drained before the end is reported.
//! - A wait for the rest of an RPC message never outlives the conversation: a watchdog cancels
//!   it when the kernel has ended or faulted, or a deadline has passed (a device that announces a
//!   long message and stops sending cannot hang the worker).
//! - A broken RPC conversation (unknown opcode, absurd size) is an error and breaks the module.

use crate::handlers::RpcHandlers;
use crate::handlers::{DeviceMemory, Served, Sink};
use crate::{BackendError, LaunchEnd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long the other threads may keep running after one called `exit()` or `abort()`. LLVM's
/// loader ends the process at once; waiting a little keeps their output.
pub const EXIT_GRACE: Duration = Duration::from_secs(1);

/// The state of a launch as its backend sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchState {
    Running,
    /// Every thread has returned.
    Done,
    /// The device faulted; the text comes from the driver.
    Faulted(String),
}

/// A launch in progress, supplied by a backend. Shared with the watchdog thread, hence `Sync`.
pub trait Launch: Send + Sync {
    /// Where the launch is now. Cheap: called between requests.
    fn state(&self) -> LaunchState;

    /// Waits up to `pause` or until the state may have changed. The default sleeps; a backend
    /// with a completion signal waits on it instead.
    fn pause(&self, pause: Duration) {
        std::thread::sleep(pause);
    }

    /// What ends [`Launch::pause`] before its time. The default sleeps through everything.
    fn pause_wakes(&self) -> PauseWakes {
        PauseWakes::Never
    }

    /// The device's own time of the launch, from its start to its last thread's end, once it
    /// has ended; `None` where the backend does not measure it.
    fn device_time(&self) -> Option<Duration> {
        None
    }

    /// Releases what the launch holds. `settled` is false when the kernel may still run (a
    /// timeout, a fault, a broken conversation): then nothing it can touch may be freed.
    fn finish(self: Box<Self>, settled: bool);
}

/// What ends a backend's [`Launch::pause`] early, which decides how long the loop lets it wait
/// once the device is quiet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseWakes {
    /// Nothing: the pause is a sleep, kept short.
    Never,
    /// The kernel's end (a completion signal), not an RPC request: long waits only where the
    /// image talks no RPC.
    End,
    /// The kernel's end and the device opening an RPC request (AMD: an interrupt signal the RPC
    /// doorbell rings, waited on beside the completion signal): the loop waits in it up to
    /// [`QUIET_WAIT`] while the device is quiet.
    EndOrRequest,
}

/// The longest quiet wait in a [`Launch::pause`] that wakes on everything the loop serves
/// ([`PauseWakes`]): what it does not wake on (a fault reported to the runtime's event handler,
/// a queue error) is seen within it. Waits end at the launch's deadlines too.
pub const QUIET_WAIT: Duration = Duration::from_millis(50);

/// When a launch must end without the kernel's help.
#[derive(Clone, Copy, Debug)]
pub struct WaitLimits {
    pub started: Instant,
    pub timeout: Option<Duration>,
    /// See [`EXIT_GRACE`].
    pub exit_grace: Duration,
}

impl WaitLimits {
    /// Limits for a launch starting now.
    pub fn starting_now(timeout: Option<Duration>) -> WaitLimits {
        WaitLimits {
            started: Instant::now(),
            timeout,
            exit_grace: EXIT_GRACE,
        }
    }
}

/// How a launch ended, and whether the module can run another.
#[derive(Debug)]
pub struct Finish {
    pub end: Result<LaunchEnd, BackendError>,
    /// Why the module cannot be used again (a kernel may still run, or the context is dead).
    pub broken: Option<String>,
}

impl Finish {
    fn clean(end: LaunchEnd) -> Finish {
        Finish {
            end: Ok(end),
            broken: None,
        }
    }
}

/// The deadlines of one launch: the caller's timeout, and the grace period after an exit.
#[derive(Debug)]
struct Deadlines {
    limits: WaitLimits,
    grace_until: Option<Instant>,
}

impl Deadlines {
    fn new(limits: WaitLimits) -> Deadlines {
        Deadlines {
            limits,
            grace_until: None,
        }
    }

    /// Starts the grace period (once) after the device asked to end.
    fn device_ended(&mut self) -> Instant {
        let grace = self.limits.exit_grace;
        *self
            .grace_until
            .get_or_insert_with(|| Instant::now() + grace)
    }

    /// How long a quiet wait may last: [`QUIET_WAIT`], or less when a deadline comes sooner.
    fn quiet_wait(&self) -> Duration {
        let now = Instant::now();
        let timeout = self
            .limits
            .timeout
            .map(|limit| (self.limits.started + limit).saturating_duration_since(now));
        let grace = self
            .grace_until
            .map(|until| until.saturating_duration_since(now));
        [timeout, grace]
            .into_iter()
            .flatten()
            .fold(QUIET_WAIT, Duration::min)
    }

    /// The end of the launch if a deadline has passed. A kernel cannot be stopped from outside,
    /// so either leaves the module broken.
    fn check(&self, ended: Option<&LaunchEnd>) -> Option<Finish> {
        if let (Some(end), Some(until)) = (ended, self.grace_until) {
            if Instant::now() >= until {
                return Some(Finish {
                    end: Ok(end.clone()),
                    broken: Some(format!(
                        "the kernel was still running {:?} after the device's exit/abort",
                        self.limits.exit_grace
                    )),
                });
            }
        }
        let limit = self.limits.timeout?;
        (self.limits.started.elapsed() >= limit).then(|| Finish {
            end: Ok(LaunchEnd::TimedOut(limit)),
            broken: Some(format!("a kernel ran past its {limit:?} timeout")),
        })
    }
}

/// The pause between two looks at an idle launch: spin first (a kernel that prints or returns
/// soon is answered within microseconds), then wait longer and longer up to a millisecond (in
/// the kernel: the host emulation's device threads wake the server) so an idle long-running
/// kernel costs little CPU. Never a yield: see `gpurun_rpc::sync::host_backoff` for how
/// yielding waiters starve on a loaded machine.
#[derive(Debug)]
struct Backoff {
    idle: u32,
}

/// One step of [`Backoff`].
#[derive(Debug, PartialEq, Eq)]
enum Pause {
    Spin,
    Wait(Duration),
}

impl Backoff {
    const SPINS: u32 = 256;
    const FIRST: Duration = Duration::from_micros(10);
    const LONGEST: Duration = Duration::from_millis(1);

    fn new() -> Backoff {
        Backoff { idle: 0 }
    }

    fn busy(&mut self) {
        self.idle = 0;
    }

    fn next(&mut self) -> Pause {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= Self::SPINS {
            return Pause::Spin;
        }
        let doublings = (self.idle - Self::SPINS - 1).min(7);
        Pause::Wait((Self::FIRST * (1 << doublings)).min(Self::LONGEST))
    }
}

/// Requests served between two looks at the launch's state: under heavy output the state query
/// would otherwise cost as much as the requests.
const SERVE_BATCH: u32 = 64;
/// How often the watchdog looks.
const WATCH_PERIOD: Duration = Duration::from_millis(10);
/// How long one request may keep the server before the watchdog asks whether the conversation
/// is still alive.
const STALL: Duration = Duration::from_millis(20);

/// What the serving thread shares with its watchdog.
struct Watch {
    started: Instant,
    /// Nanoseconds after `started` at which the request being served began; `u64::MAX` when
    /// the server is not inside a request.
    serving_since: AtomicU64,
    /// Nanoseconds after `started` at which the exit grace period ends; `u64::MAX`: none.
    grace_until: AtomicU64,
    /// Set by the watchdog before it cancels the server's wait.
    cancelled: AtomicBool,
}

const NEVER: u64 = u64::MAX;

impl Watch {
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.started).as_nanos()).unwrap_or(NEVER - 1)
    }

    fn now(&self) -> u64 {
        self.nanos(Instant::now())
    }

    /// Whether the watchdog should stop the request being served now.
    fn must_cancel(&self, launch: &dyn Launch, timeout: Option<Duration>) -> bool {
        let since = self.serving_since.load(Ordering::Acquire);
        let now = self.now();
        if since == NEVER || now.saturating_sub(since) < STALL.as_nanos() as u64 {
            return false;
        }
        let past_timeout = timeout.is_some_and(|limit| self.started.elapsed() >= limit);
        let past_grace = now >= self.grace_until.load(Ordering::Acquire);
        past_timeout || past_grace || launch.state() != LaunchState::Running
    }
}

/// One launch the watchdog looks at: the serving thread's [`Watch`] and what it needs to judge
/// and stop a stalled request.
struct Watched<'a> {
    watch: &'a Watch,
    launch: &'a dyn Launch,
    rpc: &'a RpcHandlers,
    timeout: Option<Duration>,
}

impl Watched<'_> {
    /// Cancels the server's wait if it must stop; once only.
    fn look(&self) {
        if !self.watch.cancelled.load(Ordering::Acquire)
            && self.watch.must_cancel(self.launch, self.timeout)
        {
            self.watch.cancelled.store(true, Ordering::Release);
            self.rpc.cancel();
        }
    }
}

/// A registered [`Watched`] with its lifetime erased; see [`Watchdog::watch`] for why that is
/// sound.
struct WatchedPtr(*const Watched<'static>);

// SAFETY: the pointee is `Sync` in what the watchdog uses (atomics, `Launch: Sync`, the RPC
// server's `cancel`), and it outlives its registration (see `Watchdog::watch`).
unsafe impl Send for WatchedPtr {}

/// The watchdog's list of launches being served.
struct Registry {
    entries: Vec<(u64, WatchedPtr)>,
    next_id: u64,
    /// The watchdog waits without a timeout (nothing to watch for a while): wake it.
    asleep: bool,
}

/// One thread for the whole process that looks at every launch being served every
/// [`WATCH_PERIOD`], started on first use, so a launch starts no thread of its own.
struct Watchdog {
    registry: Mutex<Registry>,
    wake: Condvar,
}

/// How long the watchdog keeps ticking after its last launch ended before it waits untimed:
/// back-to-back launches (a test run) then never have to wake it.
const WATCHDOG_LINGER: Duration = Duration::from_secs(1);

impl Watchdog {
    /// The process's watchdog, or `None` when its thread could not be started.
    fn get() -> Option<&'static Watchdog> {
        static WATCHDOG: OnceLock<Option<&'static Watchdog>> = OnceLock::new();
        *WATCHDOG.get_or_init(|| {
            let watchdog: &'static Watchdog = Box::leak(Box::new(Watchdog {
                registry: Mutex::new(Registry {
                    entries: Vec::new(),
                    next_id: 0,
                    asleep: false,
                }),
                wake: Condvar::new(),
            }));
            std::thread::Builder::new()
                .name("gpurun-watchdog".into())
                .spawn(move || watchdog.run())
                .ok()
                .map(|_| watchdog)
        })
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        let mut registry = self.lock();
        let mut idle_since = Instant::now();
        loop {
            if registry.entries.is_empty() && idle_since.elapsed() >= WATCHDOG_LINGER {
                registry.asleep = true;
                registry = self
                    .wake
                    .wait(registry)
                    .unwrap_or_else(PoisonError::into_inner);
                registry.asleep = false;
                continue;
            }
            registry = self
                .wake
                .wait_timeout(registry, WATCH_PERIOD)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if registry.entries.is_empty() {
                continue;
            }
            idle_since = Instant::now();
            for (_, watched) in &registry.entries {
                // SAFETY: registered entries are alive: `Registration::drop` removes an entry
                // under this lock before its `Watched` goes away.
                unsafe { &*watched.0 }.look();
            }
        }
    }

    /// Watches `watched` until the returned registration is dropped.
    fn watch<'a>(&'static self, watched: &'a Watched<'a>) -> Registration {
        let pointer: *const Watched<'a> = watched;
        // SAFETY: only the lifetime changes. The watchdog dereferences the pointer only while
        // holding the registry lock, and the `Registration` (which cannot outlive `'a`, being
        // dropped in the same scope as `watched` in `serve_launch`) removes it under that lock.
        let pointer =
            unsafe { std::mem::transmute::<*const Watched<'a>, *const Watched<'static>>(pointer) };
        let mut registry = self.lock();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.entries.push((id, WatchedPtr(pointer)));
        if registry.asleep {
            self.wake.notify_one();
        }
        Registration { watchdog: self, id }
    }
}

/// Keeps a launch on the watchdog's list; removes it when dropped.
struct Registration {
    watchdog: &'static Watchdog,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.watchdog
            .lock()
            .entries
            .retain(|(id, _)| *id != self.id);
    }
}

/// Runs the loop for `launch` until it ends: serves `rpc` (when the image talks RPC) with
/// `memory` for its allocations and `sink` for its output.
pub fn serve_launch(
    launch: &dyn Launch,
    rpc: Option<&RpcHandlers>,
    memory: &mut dyn DeviceMemory,
    sink: &mut dyn Sink,
    limits: WaitLimits,
) -> Finish {
    let Some(rpc) = rpc else {
        return Loop::new(launch, None, limits).run(memory, sink);
    };
    let watch = Watch {
        started: limits.started,
        serving_since: AtomicU64::new(NEVER),
        grace_until: AtomicU64::new(NEVER),
        cancelled: AtomicBool::new(false),
    };
    let watched = Watched {
        watch: &watch,
        launch,
        rpc,
        timeout: limits.timeout,
    };
    let registration = Watchdog::get().map(|watchdog| watchdog.watch(&watched));
    // Without a watchdog the loop still runs; only a stalled conversation could then hang.
    let watch_ref = registration.is_some().then_some(&watch);
    let finish = Loop::new(launch, Some((rpc, watch_ref)), limits).run(memory, sink);
    drop(registration);
    if finish.broken.is_none() && watch.cancelled.load(Ordering::Acquire) {
        // The watchdog fired on a slow but whole conversation (the packet it waited for did
        // come): the next launch must be able to wait again.
        rpc.resume();
    }
    finish
}

struct Loop<'a> {
    launch: &'a dyn Launch,
    rpc: Option<(&'a RpcHandlers, Option<&'a Watch>)>,
    deadlines: Deadlines,
    /// The first exit or abort the device asked for.
    ended: Option<LaunchEnd>,
}

impl<'a> Loop<'a> {
    fn new(
        launch: &'a dyn Launch,
        rpc: Option<(&'a RpcHandlers, Option<&'a Watch>)>,
        limits: WaitLimits,
    ) -> Loop<'a> {
        Loop {
            launch,
            rpc,
            deadlines: Deadlines::new(limits),
            ended: None,
        }
    }

    fn run(mut self, memory: &mut dyn DeviceMemory, sink: &mut dyn Sink) -> Finish {
        let mut backoff = Backoff::new();
        // Whether the sink has heard of the current quiet spell.
        let mut told_idle = false;
        loop {
            let state = self.launch.state();
            let handled = match self.serve(memory, sink, state == LaunchState::Running) {
                Ok(handled) => handled,
                Err(error) => return self.broken_conversation(error),
            };
            match state {
                LaunchState::Running => {}
                LaunchState::Done => {
                    return Finish::clean(self.ended.unwrap_or(LaunchEnd::Completed));
                }
                LaunchState::Faulted(text) => {
                    return Finish {
                        end: Ok(self.ended.unwrap_or(LaunchEnd::Faulted(text.clone()))),
                        broken: Some(text),
                    }
                }
            }
            if let Some(finish) = self.deadlines.check(self.ended.as_ref()) {
                return finish;
            }
            if handled > 0 {
                backoff.busy();
                told_idle = false;
            } else {
                match backoff.next() {
                    Pause::Spin => std::hint::spin_loop(),
                    // The device has been quiet for a few hundred looks: the sink may write
                    // what it holds back.
                    Pause::Wait(_) if !told_idle => {
                        told_idle = true;
                        sink.idle();
                    }
                    Pause::Wait(pause) => self.wait_quietly(pause),
                }
            }
        }
    }

    /// Waits while the device is quiet. Where the backend's pause wakes on everything there is
    /// to serve (the kernel's end, and an RPC request where the image talks RPC), it waits
    /// there up to [`QUIET_WAIT`]. Else, with a doorbell, the server wakes when the device opens
    /// a request; else the launch's pause waits `pause` (HSA: on its completion signal).
    fn wait_quietly(&self, pause: Duration) {
        let wakes = self.launch.pause_wakes();
        let wakes_on_all = match self.rpc {
            None => wakes != PauseWakes::Never,
            Some((rpc, _)) => rpc.has_doorbell() && wakes == PauseWakes::EndOrRequest,
        };
        if wakes_on_all {
            return self.launch.pause(self.deadlines.quiet_wait());
        }
        match self.rpc {
            Some((rpc, _)) if rpc.has_doorbell() => {
                let launch = self.launch;
                rpc.wait_for_request_or(pause, || launch.state() != LaunchState::Running);
            }
            _ => self.launch.pause(pause),
        }
    }

    /// Serves up to a batch of requests while the kernel runs, or every pending one (a full idle
    /// pass) once it has ended. Returns how many were handled.
    fn serve(
        &mut self,
        memory: &mut dyn DeviceMemory,
        sink: &mut dyn Sink,
        running: bool,
    ) -> Result<u32, BackendError> {
        let Some((rpc, watch)) = self.rpc else {
            return Ok(0);
        };
        if !running {
            let ended = self.watched(watch, || rpc.drain(sink, memory))?;
            if let Some(end) = ended {
                self.device_ended(end);
            }
            return Ok(0);
        }
        let mut handled = 0;
        while handled < SERVE_BATCH {
            match self.watched(watch, || rpc.poll(sink, memory))? {
                Served::Idle => break,
                Served::Handled => {}
                Served::End(end) => self.device_ended(end),
            }
            handled += 1;
        }
        Ok(handled)
    }

    /// Runs one server call with the watchdog told that a request is being served.
    fn watched<T>(
        &self,
        watch: Option<&Watch>,
        call: impl FnOnce() -> Result<T, BackendError>,
    ) -> Result<T, BackendError> {
        let Some(watch) = watch else {
            return call();
        };
        watch.serving_since.store(watch.now(), Ordering::Release);
        let result = call();
        watch.serving_since.store(NEVER, Ordering::Release);
        result
    }

    fn device_ended(&mut self, end: LaunchEnd) {
        if self.ended.is_none() {
            self.ended = Some(end);
            let until = self.deadlines.device_ended();
            if let Some((_, Some(watch))) = self.rpc {
                watch
                    .grace_until
                    .store(watch.nanos(until), Ordering::Release);
            }
        }
    }

    /// The server failed: either the watchdog stopped a dead conversation (then the launch's
    /// state or a deadline says how it ended) or the device broke the protocol.
    fn broken_conversation(&self, error: BackendError) -> Finish {
        let by_watchdog =
            matches!(self.rpc, Some((_, Some(watch))) if watch.cancelled.load(Ordering::Acquire));
        if by_watchdog {
            if let LaunchState::Faulted(text) = self.launch.state() {
                return Finish {
                    end: Ok(self
                        .ended
                        .clone()
                        .unwrap_or(LaunchEnd::Faulted(text.clone()))),
                    broken: Some(text),
                };
            }
            if let Some(finish) = self.deadlines.check(self.ended.as_ref()) {
                return finish;
            }
            let reason = "the kernel ended in the middle of an RPC message".to_owned();
            return Finish {
                end: Err(BackendError::Rpc(reason.clone())),
                broken: Some(reason),
            };
        }
        // A broken conversation leaves the kernel waiting for an answer that never comes.
        Finish {
            broken: Some(error.to_string()),
            end: Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_spins_then_waits_longer_up_to_a_millisecond() {
        let mut backoff = Backoff::new();
        for _ in 0..Backoff::SPINS {
            assert_eq!(backoff.next(), Pause::Spin);
        }
        assert_eq!(backoff.next(), Pause::Wait(Backoff::FIRST));
        assert_eq!(backoff.next(), Pause::Wait(Duration::from_micros(20)));
        let longest = (0..20).map(|_| backoff.next()).last();
        assert_eq!(longest, Some(Pause::Wait(Duration::from_millis(1))));
        backoff.busy();
        assert_eq!(backoff.next(), Pause::Spin);
    }

    #[test]
    fn timeout_ends_the_wait_and_breaks_the_module() {
        let deadlines = Deadlines::new(WaitLimits {
            started: Instant::now() - Duration::from_secs(5),
            timeout: Some(Duration::from_secs(1)),
            exit_grace: EXIT_GRACE,
        });
        let finish = deadlines.check(None).expect("past the timeout");
        assert_eq!(
            finish.end.ok(),
            Some(LaunchEnd::TimedOut(Duration::from_secs(1)))
        );
        assert!(finish.broken.is_some());
    }

    #[test]
    fn quiet_waits_end_at_the_nearest_deadline() {
        let mut deadlines = Deadlines::new(WaitLimits {
            started: Instant::now(),
            timeout: None,
            exit_grace: Duration::from_millis(5),
        });
        assert_eq!(deadlines.quiet_wait(), QUIET_WAIT);
        deadlines.device_ended();
        assert!(deadlines.quiet_wait() <= Duration::from_millis(5));
        let past = Deadlines::new(WaitLimits {
            started: Instant::now() - Duration::from_secs(5),
            timeout: Some(Duration::from_secs(1)),
            exit_grace: EXIT_GRACE,
        });
        assert_eq!(past.quiet_wait(), Duration::ZERO);
    }

    #[test]
    fn exit_waits_for_the_grace_period() {
        let mut deadlines = Deadlines::new(WaitLimits {
            started: Instant::now(),
            timeout: None,
            exit_grace: Duration::from_millis(20),
        });
        assert!(deadlines.check(None).is_none());
        deadlines.device_ended();
        assert!(deadlines.check(Some(&LaunchEnd::Exited(3))).is_none());
        std::thread::sleep(Duration::from_millis(30));
        let finish = deadlines
            .check(Some(&LaunchEnd::Exited(3)))
            .expect("grace over");
        assert_eq!(finish.end.ok(), Some(LaunchEnd::Exited(3)));
    }
}
