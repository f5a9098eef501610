//! One kernel launch: kernel arguments in the kernarg pool, an AQL dispatch packet published with
//! a release store of its header, the doorbell, then a wait on the completion signal while the
//! RPC server runs; GPU faults, queue errors and the deadline end the wait.

use super::error::{describe_queue_error, runtime, runtime_message};
use super::memory::{PoolBuffer, Signal};
use super::module::{HsaModule, Resources};
use super::packet::{
    dispatch_header, dispatch_packet, header_word, kernarg_block, with_stack_size,
};
use super::result::status_string;
use super::runtime::{fault_count, fault_text};
use crate::server::{Deadlines, Finish, Served, Sink, WaitLimits, EXIT_GRACE};
use crate::{BackendError, LaunchEnd, LaunchShape};
use hsa_sys::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Longest single wait on the completion signal; the RPC server runs between waits.
const MAX_WAIT: Duration = Duration::from_millis(1);
/// First wait after the server handled something: the device is likely to ask again soon.
const MIN_WAIT: Duration = Duration::from_micros(10);

/// How long to wait on the signal next: short while the device talks, growing while it is quiet.
#[derive(Debug)]
pub(crate) struct WaitBackoff {
    next: Duration,
}

impl WaitBackoff {
    pub(crate) fn new() -> WaitBackoff {
        WaitBackoff { next: MIN_WAIT }
    }

    pub(crate) fn busy(&mut self) {
        self.next = MIN_WAIT;
    }

    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(MAX_WAIT);
        wait
    }
}

/// A memory fault recorded since the launch began, else the queue's error: the launch failed.
pub(crate) fn check_health(
    queue_error: Option<String>,
    faults_before: usize,
    faults_now: usize,
    fault: impl Fn(usize) -> Option<String>,
) -> Option<String> {
    if faults_now > faults_before {
        return Some(fault(faults_before).unwrap_or_else(|| "GPU memory access fault".to_owned()));
    }
    queue_error
}

/// Waits for a dispatched kernel while serving RPC, independent of the runtime so it can be
/// tested: `wait(d)` waits up to `d` on the completion signal and says whether the kernel
/// finished; `serve()` handles one RPC request; `health()` names a fault or queue error.
/// An `Err` is a broken RPC conversation (the kernel may still run).
pub(crate) fn wait_for_kernel(
    wait: &mut dyn FnMut(Duration) -> bool,
    serve: &mut dyn FnMut() -> Result<Served, BackendError>,
    health: &mut dyn FnMut() -> Option<String>,
    limits: &WaitLimits,
) -> Result<Finish, BackendError> {
    let mut backoff = WaitBackoff::new();
    let mut ended: Option<LaunchEnd> = None;
    let mut deadlines = Deadlines::new(*limits);
    loop {
        let finished = wait(backoff.next_wait());
        // Serve until idle, also after completion: output and frees sent right before the
        // kernel returned are still pending.
        let mut handled = false;
        loop {
            match serve()? {
                Served::Idle => break,
                Served::Handled => handled = true,
                Served::End(end) => {
                    handled = true;
                    ended.get_or_insert(end);
                }
            }
        }
        if handled {
            backoff.busy();
        }
        if finished {
            return Ok(Finish {
                end: ended.unwrap_or(LaunchEnd::Completed),
                broken: None,
            });
        }
        if let Some(text) = health() {
            return Ok(Finish {
                end: LaunchEnd::Faulted(text.clone()),
                broken: Some(text),
            });
        }
        if let Some(finish) = deadlines.check(ended.as_ref()) {
            return Ok(finish);
        }
    }
}

/// A duration in the runtime's timestamp ticks, which `hsa_signal_wait_*` takes.
pub(crate) fn duration_to_ticks(duration: Duration, timestamp_hz: u64) -> u64 {
    let ticks = duration.as_nanos().saturating_mul(u128::from(timestamp_hz)) / 1_000_000_000;
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

impl HsaModule<'_> {
    /// Runs `kernel` once and waits for it (see the module docs).
    pub(crate) fn run(
        &mut self,
        kernel: &str,
        shape: LaunchShape,
        args: &[u8],
        timeout: Option<Duration>,
        sink: &mut dyn Sink,
    ) -> Result<LaunchEnd, BackendError> {
        if let Some(reason) = &self.broken {
            return Err(runtime_message(format!(
                "the module cannot run kernels after an earlier failure ({reason})"
            )));
        }
        let facts = with_stack_size(self.kernel(kernel)?, self.stack_size);
        let block = kernarg_block(args, &shape, facts.kernarg_segment_size)?;
        let lib = std::sync::Arc::clone(self.device.runtime.lib_arc());
        let gpu = self.device.gpu.agent;
        let kernargs =
            PoolBuffer::allocate(&lib, self.kernarg_pool(), block.len(), gpu).map_err(runtime)?;
        // SAFETY: kernarg memory is host-accessible and no kernel uses this block yet.
        unsafe { kernargs.write_host(&block) };
        let done = Signal::new(&lib, 1).map_err(runtime)?;
        let packet = dispatch_packet(&shape, &facts, kernargs.address(), done.handle)?;

        let faults_before = fault_count();
        self.publish(&packet, header_word(dispatch_header(), packet.setup))?;

        let timestamp_hz = self.device.runtime.timestamp_hz();
        let limits = WaitLimits {
            started: Instant::now(),
            timeout,
            exit_grace: EXIT_GRACE,
        };
        let Resources {
            queue, rpc, heap, ..
        } = &mut *self.res;
        let queue = &*queue;
        let outcome = wait_for_kernel(
            &mut |wait| done.wait_zero(duration_to_ticks(wait, timestamp_hz)) == 0,
            &mut || match rpc.as_mut() {
                Some(channel) => channel.server.poll(sink, heap),
                None => Ok(Served::Idle),
            },
            &mut || {
                let queue_error = queue
                    .error()
                    .map(|status| describe_queue_error(status, status_string(queue.lib(), status)));
                check_health(queue_error, faults_before, fault_count(), fault_text)
            },
            &limits,
        );
        match outcome {
            Ok(Finish { end, broken: None }) => {
                // The kernel finished: nothing references the arguments or the signal any more.
                drop(kernargs);
                drop(done);
                Ok(end)
            }
            Ok(Finish {
                end,
                broken: Some(reason),
            }) => {
                self.abandon(reason, kernargs, done);
                Ok(end)
            }
            Err(error) => {
                self.abandon(error.to_string(), kernargs, done);
                Err(error)
            }
        }
    }

    /// Marks the module unusable and leaks what a kernel that may still run can touch.
    fn abandon(&mut self, reason: String, kernargs: PoolBuffer, done: Signal) {
        self.broken.get_or_insert(reason);
        std::mem::forget(kernargs);
        std::mem::forget(done);
    }

    /// Reserves a slot, writes the packet body, then publishes the header with a release store
    /// and rings the doorbell. A slot reserved but never filled would stall the queue for good,
    /// so a failure after reserving marks the module broken.
    fn publish(
        &mut self,
        packet: &hsa_kernel_dispatch_packet_t,
        header: u32,
    ) -> Result<(), BackendError> {
        let queue = self.res.queue.raw;
        let lib = std::sync::Arc::clone(self.device.runtime.lib_arc());
        // SAFETY: `queue` is the live queue this module created; its descriptor is immutable.
        let (size, base, doorbell) = unsafe {
            (
                (*queue).size,
                (*queue).base_address,
                (*queue).doorbell_signal,
            )
        };
        if size == 0 || !size.is_power_of_two() || base.is_null() {
            return Err(runtime_message(format!(
                "the runtime gave a queue of {size} packets at {base:?}"
            )));
        }
        // SAFETY: the live queue; only this thread submits to it.
        let index = unsafe { (lib.hsa_queue_add_write_index_relaxed)(queue, 1) };
        // Wait for the slot to be free: packets before ours must have been consumed.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // SAFETY: reading the read index of the live queue.
            let read = unsafe { (lib.hsa_queue_load_read_index_scacquire)(queue) };
            if index.wrapping_sub(read) < u64::from(size) {
                break;
            }
            if Instant::now() > deadline {
                let reason = "the GPU queue stayed full for 10 s".to_owned();
                self.broken.get_or_insert(reason.clone());
                return Err(runtime_message(reason));
            }
            std::thread::yield_now();
        }
        let slot = (index & u64::from(size - 1)) as usize;
        let bytes = super::packet::packet_bytes(packet);
        // SAFETY: `slot` < size, so the 64-byte packet lies inside the queue's ring buffer, which
        // is 64-aligned; the packet processor ignores the slot until its header changes, and we
        // write everything but the header first.
        unsafe {
            let target = base.cast::<u8>().add(slot * 64);
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(4), target.add(4), 60);
            AtomicU32::from_ptr(target.cast::<u32>()).store(header, Ordering::Release);
            (lib.hsa_signal_store_screlease)(doorbell, index as i64);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn backoff_grows_to_a_millisecond_and_resets() {
        let mut backoff = WaitBackoff::new();
        assert_eq!(backoff.next_wait(), Duration::from_micros(10));
        assert_eq!(backoff.next_wait(), Duration::from_micros(20));
        for _ in 0..20 {
            backoff.next_wait();
        }
        assert_eq!(backoff.next_wait(), MAX_WAIT);
        backoff.busy();
        assert_eq!(backoff.next_wait(), MIN_WAIT);
    }

    #[test]
    fn a_new_memory_fault_fails_the_launch_with_its_text() {
        let text = check_health(None, 2, 3, |index| {
            (index == 2).then(|| "fault at 0x10".to_owned())
        });
        assert_eq!(text.as_deref(), Some("fault at 0x10"));
    }

    #[test]
    fn a_queue_error_fails_the_launch() {
        let text = check_health(Some("the GPU queue failed".into()), 0, 0, |_| None);
        assert_eq!(text.as_deref(), Some("the GPU queue failed"));
        assert_eq!(check_health(None, 4, 4, |_| None), None);
    }

    #[test]
    fn faults_recorded_by_the_event_handler_are_seen() {
        let before = fault_count();
        super::super::runtime::record_fault_for_test("GPU memory access fault at address 0x0");
        let text = check_health(None, before, fault_count(), fault_text);
        assert!(text.is_some_and(|text| text.contains("0x0")));
    }

    #[test]
    fn ticks_follow_the_timestamp_frequency() {
        assert_eq!(
            duration_to_ticks(Duration::from_millis(1), 1_000_000_000),
            1_000_000
        );
        assert_eq!(
            duration_to_ticks(Duration::from_millis(1), 100_000_000),
            100_000
        );
        assert_eq!(
            duration_to_ticks(Duration::from_nanos(1), 1_000),
            1,
            "never zero"
        );
        assert_eq!(duration_to_ticks(Duration::MAX, u64::MAX), u64::MAX);
    }

    fn limits(timeout: Option<Duration>) -> WaitLimits {
        WaitLimits {
            started: Instant::now(),
            timeout,
            exit_grace: Duration::from_millis(20),
        }
    }

    /// A kernel that finishes after `busy` waits.
    fn kernel(busy: u32) -> impl FnMut(Duration) -> bool {
        let mut waits = 0;
        move |_| {
            waits += 1;
            waits > busy
        }
    }

    /// A server that answers from a script, then stays idle.
    fn server(script: Vec<Served>) -> impl FnMut() -> Result<Served, BackendError> {
        let mut script = script.into_iter();
        move || Ok(script.next().unwrap_or(Served::Idle))
    }

    #[test]
    fn completion_ends_the_wait() {
        let finish = wait_for_kernel(
            &mut kernel(3),
            &mut server(vec![]),
            &mut || None,
            &limits(None),
        )
        .unwrap();
        assert_eq!(
            finish,
            Finish {
                end: LaunchEnd::Completed,
                broken: None
            }
        );
    }

    #[test]
    fn requests_pending_at_completion_are_still_served() {
        let served = Cell::new(0);
        let mut script = server(vec![Served::Handled, Served::Handled]);
        let mut serve = || {
            let answer = script();
            if matches!(answer, Ok(Served::Handled)) {
                served.set(served.get() + 1);
            }
            answer
        };
        let finish =
            wait_for_kernel(&mut kernel(0), &mut serve, &mut || None, &limits(None)).unwrap();
        assert_eq!(finish.end, LaunchEnd::Completed);
        assert_eq!(served.get(), 2);
    }

    #[test]
    fn exit_then_completion_keeps_the_module() {
        let finish = wait_for_kernel(
            &mut kernel(2),
            &mut server(vec![Served::End(LaunchEnd::Exited(3))]),
            &mut || None,
            &limits(None),
        )
        .unwrap();
        assert_eq!(
            finish,
            Finish {
                end: LaunchEnd::Exited(3),
                broken: None
            }
        );
    }

    #[test]
    fn exit_with_waves_still_running_ends_after_the_grace_period() {
        let finish = wait_for_kernel(
            &mut |_| false,
            &mut server(vec![Served::End(LaunchEnd::Aborted)]),
            &mut || None,
            &limits(None),
        )
        .unwrap();
        assert_eq!(finish.end, LaunchEnd::Aborted);
        assert!(finish
            .broken
            .unwrap()
            .contains("after the device's exit/abort"));
    }

    #[test]
    fn a_fault_ends_the_wait_and_breaks_the_module() {
        let mut checks = 0;
        let mut health = || {
            checks += 1;
            (checks == 3).then(|| "GPU memory access fault at address 0x8".to_owned())
        };
        let finish = wait_for_kernel(
            &mut |_| false,
            &mut server(vec![]),
            &mut health,
            &limits(None),
        )
        .unwrap();
        assert_eq!(
            finish.end,
            LaunchEnd::Faulted("GPU memory access fault at address 0x8".into())
        );
        assert!(finish.broken.is_some());
    }

    #[test]
    fn a_hang_times_out() {
        let timeout = Duration::from_millis(30);
        let finish = wait_for_kernel(
            &mut |_| false,
            &mut server(vec![]),
            &mut || None,
            &limits(Some(timeout)),
        )
        .unwrap();
        assert_eq!(finish.end, LaunchEnd::TimedOut(timeout));
        assert!(finish.broken.unwrap().contains("timeout"));
    }

    #[test]
    fn a_broken_rpc_conversation_is_an_error() {
        let mut serve = || {
            Err(BackendError::Rpc(
                "the device sent unknown opcode 0x1".into(),
            ))
        };
        let error =
            wait_for_kernel(&mut |_| false, &mut serve, &mut || None, &limits(None)).unwrap_err();
        assert!(error.to_string().contains("unknown opcode"));
    }

    #[test]
    fn waits_get_longer_while_the_device_is_quiet() {
        let mut seen = Vec::new();
        let mut wait = |duration: Duration| {
            seen.push(duration);
            seen.len() > 4
        };
        wait_for_kernel(&mut wait, &mut server(vec![]), &mut || None, &limits(None)).unwrap();
        assert!(seen.windows(2).all(|pair| pair[0] <= pair[1]), "{seen:?}");
        assert!(seen.iter().all(|wait| *wait <= MAX_WAIT));
    }
}
