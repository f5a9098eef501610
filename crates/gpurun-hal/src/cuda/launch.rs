//! One kernel launch: `cuLaunchKernel` with the packed argument block on the module's
//! non-blocking stream, between the module's two timing events (`timing`); its state is the
//! stream's (`cuStreamQuery`). The shared loop (`crate::launch_loop`) does the rest.

use super::device::record_fault;
use super::driver::{calls, DriverError};
use super::timing::LaunchEvents;
use crate::kernel_args::KernelArg;
use crate::launch_loop::{Launch, LaunchState};
use crate::LaunchShape;
use cudarc::driver::sys::{self, CUfunction, CUresult, CUstream};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The kernel's parameter buffer: `args` laid out as a C struct in 8-byte-aligned storage, and
/// its size in bytes: up to the end of the last parameter, *without* the struct's tail padding.
/// The driver wants exactly the kernel's parameter bytes: for `(int *, short)` 10, and a padded
/// 16 fails with "too many resources requested for launch" (LLVM's offload plugin had this bug,
/// llvm-project PR 172249).
pub fn param_buffer(args: &[KernelArg]) -> (Vec<u64>, usize) {
    let packed = crate::kernel_args::pack_c_struct(args);
    let mut words = vec![0u64; packed.len().div_ceil(8)];
    for (word, chunk) in words.iter_mut().zip(packed.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_ne_bytes(bytes);
    }
    (words, packed.len())
}

/// A launch the driver has not been handed yet, movable to a helper thread.
pub(crate) struct RawLaunch {
    pub(crate) context: sys::CUcontext,
    pub(crate) function: CUfunction,
    pub(crate) shape: LaunchShape,
    pub(crate) stream: CUstream,
    /// The parameter buffer (see [`param_buffer`]), owned here until the driver copied it.
    pub(crate) words: Vec<u64>,
    pub(crate) args_size: usize,
    /// Recorded on `stream` around the launch call, when the module has them.
    pub(crate) events: Option<LaunchEvents>,
}

// SAFETY: the handles are driver objects usable from any thread once the context is made
// current there (which `issue` does); the argument words are owned.
unsafe impl Send for RawLaunch {}

impl RawLaunch {
    /// Makes the context current and launches; whether both timing events were recorded
    /// around the launch call.
    pub(crate) fn issue(mut self) -> Result<bool, DriverError> {
        // SAFETY: the context was retained by the device and outlives this call; the function
        // belongs to its loaded module, the stream is live, and the words hold the packed
        // parameters (`args_size` bytes), alive until the call returns. The events are the
        // module's, of the same context.
        unsafe {
            calls::context_set_current(self.context)?;
            let started = self.events.is_some_and(|e| e.record_start(self.stream));
            calls::launch_kernel(
                self.function,
                self.shape.blocks,
                self.shape.threads,
                self.shape.shared_bytes,
                self.stream,
                self.words.as_mut_ptr().cast(),
                self.args_size,
            )?;
            Ok(started && self.events.is_some_and(|e| e.record_stop(self.stream)))
        }
    }
}

/// A launch on a module's stream. A fault it ends with is recorded for the whole process
/// ([`record_fault`]): the driver is unusable in this process afterwards.
pub(crate) struct CudaLaunch {
    kernel: String,
    context: sys::CUcontext,
    stream: CUstream,
    /// With `CUDA_LAUNCH_BLOCKING=1` the launch call returns only when the kernel has finished,
    /// and the kernel may be waiting for our RPC server: it is issued from this thread instead.
    issuer: Mutex<Issuer>,
    events: Option<LaunchEvents>,
}

enum Issuer {
    /// `timed`: both timing events were recorded around the launch call.
    Issued {
        timed: bool,
    },
    Pending(JoinHandle<Result<bool, DriverError>>),
    /// The launch call itself failed: with a sticky error, or any error on the helper thread.
    Failed(DriverError),
}

impl Issuer {
    /// Takes in the helper thread's outcome once it has one; false while the launch call still
    /// runs there. An issued or failed launch stays as it is.
    fn settle(&mut self) -> bool {
        match self {
            Issuer::Pending(handle) if !handle.is_finished() => return false,
            Issuer::Pending(_) => {}
            Issuer::Issued { .. } | Issuer::Failed(_) => return true,
        }
        if let Issuer::Pending(handle) = std::mem::replace(self, Issuer::Issued { timed: false }) {
            // Any failure of a launch issued in the background leaves the launch undone; the
            // module cannot be trusted after it.
            *self = match handle.join().unwrap_or(Err(DriverError {
                call: "cuLaunchKernel",
                code: CUresult::CUDA_ERROR_UNKNOWN,
            })) {
                Ok(timed) => Issuer::Issued { timed },
                Err(error) => Issuer::Failed(error),
            };
        }
        true
    }
}

// SAFETY: the context and stream are driver handles usable from any thread once the context is
// current there, which `state` makes it.
unsafe impl Send for CudaLaunch {}
// SAFETY: as above; the only mutable part is behind a mutex.
unsafe impl Sync for CudaLaunch {}

impl CudaLaunch {
    /// Issues `raw` on this thread, or on a helper thread when the driver blocks in the launch
    /// call. A sticky failure becomes a launch in the `Faulted` state; anything else an error.
    /// `kernel` names the kernel in the record of a fault.
    pub(crate) fn start(
        raw: RawLaunch,
        kernel: &str,
        blocking: bool,
    ) -> Result<CudaLaunch, DriverError> {
        let (context, stream, events) = (raw.context, raw.stream, raw.events);
        let issuer = if blocking {
            let handle = std::thread::Builder::new()
                .name("gpurun-cuda-launch".into())
                .spawn(move || raw.issue())
                .map_err(|_| DriverError {
                    call: "cuLaunchKernel (helper thread)",
                    code: CUresult::CUDA_ERROR_OPERATING_SYSTEM,
                })?;
            Issuer::Pending(handle)
        } else {
            match raw.issue() {
                Ok(timed) => Issuer::Issued { timed },
                Err(error) if error.is_sticky() => Issuer::Failed(error),
                Err(error) => return Err(error),
            }
        };
        Ok(CudaLaunch {
            kernel: kernel.to_owned(),
            context,
            stream,
            issuer: Mutex::new(issuer),
            events,
        })
    }
}

impl Launch for CudaLaunch {
    fn state(&self) -> LaunchState {
        let mut issuer = self.issuer.lock().unwrap_or_else(PoisonError::into_inner);
        if !issuer.settle() {
            return LaunchState::Running;
        }
        if let Issuer::Failed(error) = &*issuer {
            record_fault(&self.kernel, error);
            return LaunchState::Faulted(error.describe());
        }
        drop(issuer);
        // SAFETY: the context is retained by the device; the watchdog calls this from its own
        // thread, where the context must be made current first.
        let status = match unsafe { calls::context_set_current(self.context) } {
            // SAFETY: the stream lives as long as the module, which outlives the launch.
            Ok(()) => unsafe { calls::stream_query(self.stream) },
            Err(error) => error.code,
        };
        match status {
            CUresult::CUDA_SUCCESS => LaunchState::Done,
            CUresult::CUDA_ERROR_NOT_READY => LaunchState::Running,
            code => {
                let error = DriverError {
                    call: "cuStreamQuery",
                    code,
                };
                record_fault(&self.kernel, &error);
                LaunchState::Faulted(error.describe())
            }
        }
    }

    fn device_time(&self) -> Option<Duration> {
        let events = self.events?;
        let issuer = self.issuer.lock().unwrap_or_else(PoisonError::into_inner);
        if !matches!(*issuer, Issuer::Issued { timed: true }) {
            return None;
        }
        drop(issuer);
        // SAFETY: the context is retained by the device; the events belong to it and were both
        // recorded for this launch, which has ended (the loop asks only then).
        unsafe {
            calls::context_set_current(self.context).ok()?;
            events.elapsed()
        }
    }

    fn finish(self: Box<Self>, _settled: bool) {
        // Nothing to release: the stream and the timing events belong to the module (which is
        // leaked when the launch did not settle), the parameters were copied.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(words: &[u64], len: usize) -> Vec<u8> {
        words
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .take(len)
            .collect()
    }

    #[test]
    fn parameter_buffer_is_the_c_struct_in_aligned_words() {
        let args = crate::kernel_args::start_args(2, 0x1122_3344_5566_7788, 0x99, 0xabc);
        let (words, size) = param_buffer(&args);
        assert_eq!(size, 32);
        assert_eq!(words.as_ptr() as usize % 8, 0);
        let mut expected = vec![2, 0, 0, 0, 0, 0, 0, 0];
        expected.extend_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        expected.extend_from_slice(&0x99u64.to_le_bytes());
        expected.extend_from_slice(&0xabcu64.to_le_bytes());
        assert_eq!(bytes(&words, size), expected);
    }

    #[test]
    fn parameter_buffer_ends_at_the_last_parameter() {
        // struct { void *p; int n; } is 16 bytes, but the kernel's parameters are 12.
        let (words, size) = param_buffer(&[KernelArg::U64(7), KernelArg::I32(-1)]);
        assert_eq!(size, 12);
        let mut expected = 7u64.to_le_bytes().to_vec();
        expected.extend_from_slice(&(-1i32).to_le_bytes());
        assert_eq!(bytes(&words, size), expected);
        // (ptr, u64, u32): 20 bytes, not 24.
        let args = [KernelArg::U64(1), KernelArg::U64(2), KernelArg::U32(3)];
        assert_eq!(param_buffer(&args).1, 20);
        // Interior padding stays: (u32, u64) puts the u64 at offset 8.
        assert_eq!(param_buffer(&[KernelArg::U32(1), KernelArg::U64(2)]).1, 16);
        assert_eq!(param_buffer(&[KernelArg::I32(1)]).1, 4);
        assert_eq!(param_buffer(&[]), (vec![], 0));
    }
}
