//! One kernel launch: kernel arguments in the kernarg pool, an AQL dispatch packet published with
//! a release store of its header, the doorbell, then a wait on the completion signal while the
//! RPC server runs; GPU faults, queue errors and the deadline end the wait.

use super::error::{describe_queue_error, runtime, runtime_message};
use super::memory::{PoolBuffer, Signal};
use super::module::HsaModule;
use super::packet::{dispatch_header, dispatch_packet, header_word, kernarg_block};
use super::result::status_string;
use super::runtime::{fault_count, fault_text};
use crate::server::{Served, Sink};
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

/// Why a launch stopped early, decided by [`check_health`].
pub(crate) fn check_health(
    queue_error: Option<String>,
    faults_before: usize,
    faults_now: usize,
    fault: impl Fn(usize) -> Option<String>,
) -> Option<LaunchEnd> {
    if faults_now > faults_before {
        let text = fault(faults_before).unwrap_or_else(|| "GPU memory access fault".to_owned());
        return Some(LaunchEnd::Faulted(text));
    }
    queue_error.map(LaunchEnd::Faulted)
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
        let facts = self.kernel(kernel)?;
        let block = kernarg_block(args, &shape, facts.kernarg_segment_size)?;
        let lib = std::sync::Arc::clone(self.device.runtime.lib_arc());
        let gpu = self.device.gpu.agent;
        let kernargs =
            PoolBuffer::allocate(&lib, self.kernarg_pool(), block.len(), gpu).map_err(runtime)?;
        // SAFETY: kernarg memory is host-accessible and no kernel uses this block yet.
        unsafe { kernargs.write_host(&block) };
        let done = Signal::new(&lib, 1).map_err(runtime)?;
        let mut packet = dispatch_packet(&shape, &facts, kernargs.address(), done.handle)?;
        packet.header = 0;

        let faults_before = fault_count();
        self.publish(&packet, header_word(dispatch_header(), packet.setup))?;

        let started = Instant::now();
        let mut backoff = WaitBackoff::new();
        let end = loop {
            let value = done.wait_zero(backoff.next_wait().as_nanos() as u64);
            match self.serve(sink, &mut backoff) {
                Ok(None) => {}
                Ok(Some(end)) => return Ok(self.abandon(end, kernargs, done)),
                Err(error) => {
                    // The kernel may still run: keep what it uses alive, fail the launch.
                    self.abandon(LaunchEnd::Faulted(error.to_string()), kernargs, done);
                    return Err(error);
                }
            }
            if value == 0 {
                break LaunchEnd::Completed;
            }
            let queue_error = self.res.queue.error().map(|status| {
                describe_queue_error(status, status_string(self.res.queue.lib(), status))
            });
            if let Some(end) = check_health(queue_error, faults_before, fault_count(), fault_text) {
                return Ok(self.abandon(end, kernargs, done));
            }
            if let Some(limit) = timeout {
                if started.elapsed() >= limit {
                    return Ok(self.abandon(LaunchEnd::TimedOut(limit), kernargs, done));
                }
            }
        };
        // The kernel finished: nothing references the arguments or the signal any more.
        drop(kernargs);
        drop(done);
        Ok(end)
    }

    /// Serves every pending RPC request; `Some` when the device ended the program.
    fn serve(
        &mut self,
        sink: &mut dyn Sink,
        backoff: &mut WaitBackoff,
    ) -> Result<Option<LaunchEnd>, BackendError> {
        let res = &mut *self.res;
        let Some(channel) = res.rpc.as_mut() else {
            return Ok(None);
        };
        let mut handled = false;
        loop {
            match channel.server.poll(sink, &mut res.heap)? {
                Served::Idle => break,
                Served::Handled => handled = true,
                // exit()/abort() on the device ends the whole program, as LLVM's loader does;
                // other waves may still run, so the module is not reused.
                Served::End(end) => return Ok(Some(end)),
            }
        }
        if handled {
            backoff.busy();
        }
        Ok(None)
    }

    /// Marks the module unusable and leaks what the still-running kernel may touch.
    fn abandon(&mut self, end: LaunchEnd, kernargs: PoolBuffer, done: Signal) -> LaunchEnd {
        if self.broken.is_none() {
            self.broken = Some(match &end {
                LaunchEnd::Faulted(text) => text.clone(),
                LaunchEnd::TimedOut(limit) => format!("a kernel ran past its {limit:?} deadline"),
                other => format!("{other:?}"),
            });
        }
        std::mem::forget(kernargs);
        std::mem::forget(done);
        end
    }

    /// Reserves a slot, writes the packet body, then publishes the header with a release store
    /// and rings the doorbell.
    fn publish(
        &mut self,
        packet: &hsa_kernel_dispatch_packet_t,
        header: u32,
    ) -> Result<(), BackendError> {
        let queue = self.res.queue.raw;
        let lib = self.res.queue.lib();
        // SAFETY: `queue` is the live queue this module created; only this thread submits to it.
        let (index, size, base, doorbell) = unsafe {
            let index = (lib.hsa_queue_add_write_index_relaxed)(queue, 1);
            (
                (index),
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
        // Wait for the slot to be free: packets before ours must have been consumed.
        let deadline = Instant::now() + Duration::from_secs(10);
        // SAFETY: reading the read index of the live queue.
        while index - unsafe { (lib.hsa_queue_load_read_index_scacquire)(queue) } >= u64::from(size)
        {
            if Instant::now() > deadline {
                return Err(runtime_message("the GPU queue stayed full for 10 s"));
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
        let end = check_health(None, 2, 3, |index| {
            (index == 2).then(|| "fault at 0x10".to_owned())
        });
        assert_eq!(end, Some(LaunchEnd::Faulted("fault at 0x10".into())));
    }

    #[test]
    fn a_queue_error_fails_the_launch() {
        let end = check_health(Some("the GPU queue failed".into()), 0, 0, |_| None);
        assert_eq!(end, Some(LaunchEnd::Faulted("the GPU queue failed".into())));
    }

    #[test]
    fn a_healthy_launch_goes_on() {
        assert_eq!(check_health(None, 4, 4, |_| None), None);
    }

    #[test]
    fn faults_recorded_by_the_event_handler_are_seen() {
        let before = fault_count();
        super::super::runtime::record_fault_for_test("GPU memory access fault at address 0x0");
        let end = check_health(None, before, fault_count(), fault_text);
        assert!(matches!(end, Some(LaunchEnd::Faulted(text)) if text.contains("0x0")));
    }
}
