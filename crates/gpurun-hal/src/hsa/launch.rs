//! One kernel launch: kernel arguments in the kernarg pool, an AQL dispatch packet published with
//! a release store of its header, the doorbell; its state is the completion signal's, a fault the
//! event handler recorded, or the queue's error. The shared loop (`crate::launch_loop`) does the
//! rest, waiting on the completion signal while the device is quiet. The device time is the
//! dispatch's start and end timestamps, which the packet processor writes into the completion
//! signal (the queue has profiling enabled).
//!
//! Memory faults are the process's, not the launch's: ROCr reports them to one system event
//! handler without naming a queue, so a fault fails every launch running in the process (each
//! slot's), and after one no launch is dispatched at all. The runner re-runs the tests that were
//! in flight alone, each in a fresh worker, where the one that faults shows it as its own. A
//! queue error (the queue's callback) is the launch's: each module has its own queue.

use super::driver::status_string;
use super::driver::{calls, runtime_message};
use super::memory::{PoolBuffer, Signal};
use super::primitives::{HsaPrimitives, Queue, QueueState};
use super::runtime::{fault_count, fault_text};
use crate::launch_loop::{Launch, LaunchState, PauseWakes};
use crate::BackendError;
use hsa_sys::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A fault recorded since the launch began, else the queue's error: the launch failed.
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

/// A duration in the runtime's timestamp ticks, which `hsa_signal_wait_*` takes.
pub(crate) fn duration_to_ticks(duration: Duration, timestamp_hz: u64) -> u64 {
    let ticks = duration.as_nanos().saturating_mul(u128::from(timestamp_hz)) / 1_000_000_000;
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

/// The time between two system timestamps (`HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY` ticks);
/// `None` unless both are set and in order (a dispatch that was not profiled has zeros).
pub(crate) fn ticks_between(start: u64, end: u64, timestamp_hz: u64) -> Option<Duration> {
    if start == 0 || end < start || timestamp_hz == 0 {
        return None;
    }
    let nanos = u128::from(end - start) * 1_000_000_000 / u128::from(timestamp_hz);
    Some(Duration::from_nanos(u64::try_from(nanos).ok()?))
}

/// What a launch ends with when an earlier fault of the process was recorded: nothing is
/// dispatched, since the GPU's state for this process is lost (see the module docs).
pub(crate) fn earlier_fault(first_fault: &str) -> String {
    format!("{first_fault} (the GPU reported it earlier in this process; no kernel runs after it)")
}

/// A launch refused before dispatch: it ends at once as faulted with its text.
pub(crate) struct RefusedLaunch(pub(crate) String);

impl Launch for RefusedLaunch {
    fn state(&self) -> LaunchState {
        LaunchState::Faulted(self.0.clone())
    }

    fn pause(&self, _pause: Duration) {}

    fn finish(self: Box<Self>, _settled: bool) {}
}

/// A dispatched kernel.
pub(crate) struct HsaLaunch {
    pub(crate) lib: Arc<HsaLib>,
    /// Decremented to 0 by the packet processor when the kernel ends.
    pub(crate) done: Signal,
    /// The kernel's arguments; the kernel reads them until it ends. Freed as soon as the kernel
    /// is seen to end, so that a memory error in the free (ROCr's event for memory the GPU
    /// still holds) fails this launch rather than a later one.
    pub(crate) kernargs: Mutex<Option<PoolBuffer>>,
    pub(crate) queue: Arc<QueueState>,
    /// Memory faults recorded before the launch (the event handler counts them per process).
    pub(crate) faults_before: usize,
    pub(crate) timestamp_hz: u64,
    /// The GPU agent of the queue, which the dispatch's timestamps are asked of.
    pub(crate) gpu: hsa_agent_t,
    /// The module's RPC doorbell signal, when the device rings one: quiet waits wake on it too.
    pub(crate) doorbell: Option<hsa_signal_t>,
}

/// The shortest wait on a completion signal alone: ROCr spins 200 us, then sleeps in the kernel
/// driver for whole milliseconds of what is left, rounded down, and spins whenever that rounds
/// to 0 (`Signal::WaitAny`, `InterruptSignal::WaitRelaxed`), so a wait of 1 ms or less never
/// sleeps. 5 ms sleep at least 4 and spin at most about 1.2.
pub(crate) const SHORTEST_BLOCKED_WAIT: Duration = Duration::from_millis(5);

impl Launch for HsaLaunch {
    fn state(&self) -> LaunchState {
        if self.done.load() == 0 {
            drop(
                self.kernargs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take(),
            );
            return match check_health(None, self.faults_before, fault_count(), fault_text) {
                Some(text) => LaunchState::Faulted(text),
                None => LaunchState::Done,
            };
        }
        let queue_error = self.queue.error().map(|status| {
            super::driver::describe_queue_error(status, status_string(&self.lib, status))
        });
        match check_health(queue_error, self.faults_before, fault_count(), fault_text) {
            Some(text) => LaunchState::Faulted(text),
            None => LaunchState::Running,
        }
    }

    fn pause(&self, pause: Duration) {
        // Wakes as soon as the kernel ends, or the device opens an RPC request.
        match self.doorbell {
            Some(doorbell) => {
                let ticks = duration_to_ticks(pause, self.timestamp_hz);
                // SAFETY: the module's doorbell signal outlives its launches; `done` lives
                // as long as `self`.
                unsafe {
                    calls::signal_wait_any(
                        &self.lib,
                        &[
                            (doorbell, HSA_SIGNAL_CONDITION_NE, 0),
                            (self.done.handle, HSA_SIGNAL_CONDITION_LT, 1),
                        ],
                        ticks,
                    )
                };
            }
            None => {
                let pause = pause.max(SHORTEST_BLOCKED_WAIT);
                self.done
                    .wait_zero(duration_to_ticks(pause, self.timestamp_hz));
            }
        }
    }

    fn pause_wakes(&self) -> PauseWakes {
        match self.doorbell {
            Some(_) => PauseWakes::EndOrRequest,
            None => PauseWakes::End,
        }
    }

    fn device_time(&self) -> Option<Duration> {
        // SAFETY: `done` is alive for `self`'s lifetime and served only this dispatch, which
        // has completed (the loop asks only then); the queue is the module's, on `gpu`.
        let time = unsafe { calls::dispatch_time(&self.lib, self.gpu, self.done.handle) }.ok()?;
        ticks_between(time.start, time.end, self.timestamp_hz)
    }

    fn finish(self: Box<Self>, settled: bool) {
        if !settled {
            // The kernel may still read its arguments and decrement its signal.
            let kernargs = self
                .kernargs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            std::mem::forget(kernargs);
            std::mem::forget(self.done);
        }
    }
}

impl HsaPrimitives {
    /// Waits for a free slot, reserves it, writes the packet body, then publishes the header
    /// with a release store and rings the doorbell. The module is the queue's only producer and
    /// has no other launch in flight, so the slot is free at once; should it not become free
    /// within [`SLOT_WAIT`], nothing is reserved (the module is marked broken by the caller).
    pub(crate) fn publish(
        &mut self,
        packet: &hsa_kernel_dispatch_packet_t,
        header: u32,
    ) -> Result<(), BackendError> {
        let lib = Arc::clone(self.device.runtime.lib_arc());
        let reserved = Reservation::reserve(&lib, &self.res.queue)?;
        reserved.publish(&super::packet::packet_bytes(packet), header);
        Ok(())
    }
}

/// How long a launch waits for its queue to have a free slot.
const SLOT_WAIT: Duration = Duration::from_secs(10);

/// A packet slot reserved on a queue. Dropped without [`Reservation::publish`], it is filled
/// with a no-op barrier packet and the doorbell rung: the packet processor stops at a slot
/// whose header never becomes valid, which would stall the queue for good.
struct Reservation<'q> {
    lib: &'q Arc<HsaLib>,
    queue: *mut hsa_queue_t,
    index: u64,
    /// The 64-byte slot in the ring.
    slot: *mut u8,
    published: bool,
}

impl<'q> Reservation<'q> {
    fn reserve(lib: &'q Arc<HsaLib>, queue: &'q Queue) -> Result<Reservation<'q>, BackendError> {
        let raw = queue.raw;
        // SAFETY: `raw` is the live queue the module created; its descriptor is immutable.
        let (size, base) = unsafe { ((*raw).size, (*raw).base_address) };
        if size == 0 || !size.is_power_of_two() || base.is_null() {
            return Err(runtime_message(format!(
                "the runtime gave a queue of {size} packets at {base:?}"
            )));
        }
        let next = queue.reserved.load(Ordering::Relaxed);
        let deadline = Instant::now() + SLOT_WAIT;
        let read_index = || {
            // SAFETY: the read index of the live queue.
            unsafe { calls::queue_read_index(lib, raw) }
        };
        while next.wrapping_sub(read_index()) >= u64::from(size) {
            if Instant::now() > deadline {
                return Err(runtime_message(format!(
                    "the GPU queue had no free slot for {SLOT_WAIT:?} (an earlier packet never \
                     completed)"
                )));
            }
            std::thread::yield_now();
        }
        // SAFETY: the live queue, whose only producer is this module.
        let index = unsafe { calls::queue_add_write_index(lib, raw, 1) };
        queue
            .reserved
            .store(index.wrapping_add(1), Ordering::Relaxed);
        let slot = (index & u64::from(size - 1)) as usize;
        Ok(Reservation {
            lib,
            queue: raw,
            index,
            // SAFETY: `slot` < size: inside the ring of `size` 64-byte packets.
            slot: unsafe { base.cast::<u8>().add(slot * 64) },
            published: false,
        })
    }

    /// Writes `bytes` but the header word, then `header` with a release store, and rings.
    fn publish(mut self, bytes: &[u8; 64], header: u32) {
        self.write(bytes, header);
        self.published = true;
    }

    fn write(&self, bytes: &[u8; 64], header: u32) {
        // SAFETY: the slot is 64 bytes of the ring, free (the read index passed it) and ours
        // (reserved); the packet processor ignores it until its header changes, and everything
        // but the header is written first.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(4), self.slot.add(4), 60);
            AtomicU32::from_ptr(self.slot.cast::<u32>()).store(header, Ordering::Release);
            let doorbell = (*self.queue).doorbell_signal;
            calls::signal_store_release(self.lib, doorbell, self.index as i64);
        }
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.published {
            let (bytes, header) = super::packet::no_op_barrier();
            self.write(&bytes, header);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn timestamps_become_a_duration_at_the_system_frequency() {
        assert_eq!(
            ticks_between(5_000, 17_345, 100_000_000),
            Some(Duration::from_nanos(123_450))
        );
        assert_eq!(
            ticks_between(1, 1_000_001, 1_000_000_000),
            Some(Duration::from_millis(1))
        );
        assert_eq!(ticks_between(7, 7, 1_000), Some(Duration::ZERO));
        assert_eq!(ticks_between(1, u64::MAX, 1), None, "no duration that long");
    }

    #[test]
    fn unprofiled_or_impossible_timestamps_are_none() {
        assert_eq!(ticks_between(0, 0, 1_000_000_000), None);
        assert_eq!(ticks_between(0, 500, 1_000_000_000), None);
        assert_eq!(ticks_between(900, 500, 1_000_000_000), None);
        assert_eq!(ticks_between(1, 2, 0), None);
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
}
