//! Finding the driver, listing devices and opening one (its primary context).

use super::driver::{calls, init, Driver, DriverError};
use crate::{BackendError, BackendKind, DeviceInfo};
use cudarc::driver::sys::{CUcontext, CUdevice, CUdevice_attribute};
use std::sync::OnceLock;

/// `sm_NN` for a compute capability.
pub fn sm_arch(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// The number in `sm_90` / `sm_90a` / `compute_90` (90), or `None` for anything else.
pub fn sm_number(arch: &str) -> Option<u32> {
    let digits = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))?;
    let digits = digits.trim_end_matches(['a', 'f']);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `cuDriverGetVersion`'s integer (1000 * major + 10 * minor) as `CUDA 12.8`.
pub fn driver_version_text(version: i32) -> String {
    format!("CUDA {}.{}", version / 1000, (version % 1000) / 10)
}

fn attribute(device: CUdevice, which: CUdevice_attribute) -> Result<i32, DriverError> {
    calls::device_attribute(device, which)
}

/// Number of devices the driver shows this process (after `CUDA_VISIBLE_DEVICES`).
pub(crate) fn device_count() -> Result<usize, BackendError> {
    if init()? == Driver::NoDevice {
        return Ok(0);
    }
    let count = calls::device_count()?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// The driver's handle for `ordinal`, with a clear error for an ordinal out of range.
pub(crate) fn device_handle(ordinal: usize) -> Result<CUdevice, BackendError> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(BackendError::InvalidArgument(format!(
            "no CUDA device {ordinal}: {count} visible{}",
            if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
                " (CUDA_VISIBLE_DEVICES is set)"
            } else {
                ""
            }
        )));
    }
    let ordinal_c = i32::try_from(ordinal)
        .map_err(|_| BackendError::InvalidArgument(format!("no CUDA device {ordinal}")))?;
    Ok(calls::device_get(ordinal_c)?)
}

/// Everything `cargo gpurun info` shows about one device.
pub(crate) fn describe(ordinal: usize) -> Result<DeviceInfo, BackendError> {
    let device = device_handle(ordinal)?;
    let name = calls::device_name(device)?;
    let major = attribute(
        device,
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
    )?;
    let minor = attribute(
        device,
        CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
    )?;
    let warp = attribute(device, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?;
    let memory = calls::device_total_memory(device)?;
    let version = calls::driver_version()?;
    Ok(DeviceInfo {
        backend: BackendKind::Cuda,
        ordinal,
        name,
        arch: sm_arch(major, minor),
        lane_size: u32::try_from(warp).unwrap_or(32),
        memory_bytes: Some(memory as u64),
        driver: Some(driver_version_text(version)),
    })
}

/// Every visible device, in ordinal order.
pub(crate) fn list() -> Result<Vec<DeviceInfo>, BackendError> {
    (0..device_count()?).map(describe).collect()
}

/// Stack bytes per thread a module gets beyond the largest static frame of its kernels, unless
/// `--stack-size` says otherwise: [`crate::DYNAMIC_STACK_SIZE`], what the HSA backend gives a
/// dynamic-stack kernel. Nothing in a CUDA image bounds a kernel's call depth: ptxas cannot
/// (recursion, indirect calls such as `core::fmt`'s), and the driver's
/// `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES` is the static frame alone (72 bytes, measured on an H200,
/// for `fixtures/launch-checks`' `deep_panic_is_reported`, which recurses 48 deep with 64-byte
/// frames before it panics). So the amount is a stated default, not a computed one; the earlier
/// 4 KiB made that test fault instead of reporting its panic.
pub const STACK_BEYOND_FRAMES: usize = crate::DYNAMIC_STACK_SIZE as usize;

/// The automatic stack is lowered where needed so that what the driver reserves for it stays
/// within one part in this many of the device's memory: the driver reserves the per-thread stack
/// for every thread the GPU can hold at once (on an H200, raising it from 1 KiB to 16 KiB took
/// 3.9 GiB more of its 140 GiB).
pub const STACK_MEMORY_SHARE: u64 = 8;

/// What bounds the automatic stack: how many threads the device holds at once (multiprocessors
/// times threads per multiprocessor) and its memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackRoom {
    pub resident_threads: u64,
    pub memory_bytes: u64,
}

/// The per-thread stack a module gets without `--stack-size`: [`STACK_BEYOND_FRAMES`] plus
/// `largest_frame` (the largest static frame among its kernels), lowered where `room` is known so
/// that the stack for every resident thread takes at most 1/[`STACK_MEMORY_SHARE`] of the memory.
pub fn automatic_stack_size(largest_frame: u64, room: Option<StackRoom>) -> usize {
    let wanted = (STACK_BEYOND_FRAMES as u64).saturating_add(largest_frame);
    let bytes = match room {
        Some(room) if room.resident_threads > 0 && room.memory_bytes > 0 => {
            wanted.min(room.memory_bytes / STACK_MEMORY_SHARE / room.resident_threads)
        }
        _ => wanted,
    };
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The first kernel fault of this process on CUDA: which kernel, and the driver's error.
#[derive(Debug)]
struct ProcessFault {
    kernel: String,
    fault: String,
}

/// Set once a kernel of this process faulted. Measured on an H200 (driver 580): after a kernel
/// fault (`CUDA_ERROR_ILLEGAL_ADDRESS`) every context of the process is dead and no new one can
/// be had. Retaining the primary context again after its last release, resetting it, or creating
/// a fresh context with `cuCtxCreate` all fail with the fault's error, as does loading a module
/// into a context retained before. So the backend refuses everything after a fault with one clear
/// error ([`refuse_after_fault`]) instead of the driver's echo of the fault from an unrelated
/// call.
static PROCESS_FAULT: OnceLock<ProcessFault> = OnceLock::new();

/// Records that `kernel` ended with `error`, if it is a fault that kills the process's use of the
/// driver (a sticky error); the first such fault is the one reported afterwards.
pub(crate) fn record_fault(kernel: &str, error: &DriverError) {
    if error.is_sticky() {
        let _ = PROCESS_FAULT.set(ProcessFault {
            kernel: kernel.to_owned(),
            fault: error.describe(),
        });
    }
}

/// [`BackendError::EarlierFault`] once a kernel of this process has faulted.
pub(crate) fn refuse_after_fault() -> Result<(), BackendError> {
    match PROCESS_FAULT.get() {
        Some(fault) => Err(BackendError::EarlierFault {
            backend: BackendKind::Cuda,
            kernel: fault.kernel.clone(),
            fault: fault.fault.clone(),
        }),
        None => Ok(()),
    }
}

/// One device with its primary context retained (released on drop).
pub struct CudaDevice {
    pub(crate) handle: CUdevice,
    pub(crate) context: CUcontext,
    pub(crate) info: DeviceInfo,
    /// Set when a module saw a fault or a timeout: the context may still be running a kernel
    /// that never ends, so it is not released (the process exit does that). After a timeout the
    /// process's CUDA still works (a kernel spinning forever does not stop a fresh context made
    /// beside it, measured on an H200), but this context cannot be reset under the kernel:
    /// `cuDevicePrimaryCtxReset` did not return for as long as the kernel ran.
    pub(crate) poisoned: std::cell::Cell<bool>,
}

impl CudaDevice {
    /// Opens device `ordinal`: its primary context, retained until the device is dropped.
    /// [`super::CudaBackend`]'s `open` wraps this; its [`crate::module::LoadPrimitives`] gives
    /// an image's primitives without the shared module (for tests of the driver calls). Refused
    /// without a driver call once a kernel of this process faulted ([`BackendError::EarlierFault`]).
    pub fn open(ordinal: usize) -> Result<CudaDevice, BackendError> {
        refuse_after_fault()?;
        let info = describe(ordinal)?;
        let handle = device_handle(ordinal)?;
        let context = calls::primary_context_retain(handle)?;
        let device = CudaDevice {
            handle,
            context,
            info,
            poisoned: std::cell::Cell::new(false),
        };
        device.make_current()?;
        Ok(device)
    }

    /// Makes the primary context current on the calling thread. Contexts are per thread in the
    /// driver API, and callers may move between threads, so every entry point calls this.
    pub(crate) fn make_current(&self) -> Result<(), DriverError> {
        // SAFETY: the context was retained in `open` and is released only in `drop`.
        unsafe { calls::context_set_current(self.context) }
    }

    /// Gives the current context at least `bytes` of stack per thread. The driver's own default
    /// (1 KiB) is too small for a panic formatted through `core::fmt`, and a stack overflow is an
    /// illegal-address fault, not a reported panic. The limit is read every time, because it
    /// belongs to the context, not to this process: a primary context released to no retains and
    /// retained again starts over at the driver's 1 KiB (measured on an H200). It is only raised,
    /// never lowered under another module of the context, and left alone when it is enough:
    /// `cuCtxSetLimit` waits for every running kernel of the context to end (measured), which
    /// would stall a slot's load behind another slot's test.
    pub(crate) fn ensure_stack(&self, bytes: usize) -> Result<(), DriverError> {
        if calls::context_stack_size()? < bytes {
            calls::context_set_stack_size(bytes)?;
        }
        Ok(())
    }

    /// The threads the device holds at once and its memory, where the driver says.
    pub(crate) fn stack_room(&self) -> Option<StackRoom> {
        let count = |which| {
            attribute(self.handle, which)
                .ok()
                .and_then(|value| u64::try_from(value).ok())
        };
        let processors = count(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let threads =
            count(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?;
        Some(StackRoom {
            resident_threads: processors.saturating_mul(threads),
            memory_bytes: self.info.memory_bytes?,
        })
    }

    /// Whether `cuMemAllocAsync` works here (stream-ordered allocation needs memory pools).
    pub(crate) fn supports_memory_pools(&self) -> bool {
        attribute(
            self.handle,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
        )
        .is_ok_and(|value| value != 0)
    }

    /// The most shared memory a block may have once a kernel opts in
    /// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`: 227 KiB on an H100).
    pub(crate) fn max_shared_bytes_per_block(&self) -> Option<u64> {
        attribute(
            self.handle,
            CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )
        .ok()
        .and_then(|bytes| u64::try_from(bytes).ok())
    }

    /// The device's compute capability as a number (90 for sm_90).
    pub(crate) fn sm(&self) -> u32 {
        sm_number(&self.info.arch).unwrap_or(0)
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        if self.poisoned.get() {
            return;
        }
        // SAFETY: balances the retain in `open`; errors cannot be reported from drop and leave
        // nothing to clean up.
        let _ = unsafe { calls::primary_context_release(self.handle) };
    }
}

#[cfg(test)]
mod tests {
    use super::super::driver::{availability, NO_DRIVER, STUB_DRIVER};
    use super::*;
    use cudarc::driver::sys;

    #[test]
    fn missing_library_is_reported_not_panicked() {
        match availability(false) {
            Err(BackendError::NotAvailable(message)) => assert_eq!(message, NO_DRIVER),
            other => panic!("unexpected {other:?}"),
        }
        assert!(availability(true).is_ok());
    }

    #[test]
    fn real_probe_never_panics() {
        // On CI (no NVIDIA driver) this takes the missing-library path for real; on a GPU
        // machine it initialises the driver. Either way it must return, not panic.
        // SAFETY: only dlopen attempts.
        let present = unsafe { sys::is_culib_present() };
        match init() {
            // A toolkit stub found before the driver (a `stubs` directory on LD_LIBRARY_PATH).
            Err(BackendError::NotAvailable(message)) if message.starts_with(STUB_DRIVER) => {
                assert!(present);
            }
            Err(BackendError::NotAvailable(message)) => {
                assert!(!present);
                assert_eq!(message, NO_DRIVER);
                assert!(list().is_err());
                assert!(matches!(
                    CudaDevice::open(0),
                    Err(BackendError::NotAvailable(_))
                ));
            }
            Ok(_) | Err(BackendError::Runtime { .. }) => assert!(present),
            Err(other) => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn compute_capability_names() {
        assert_eq!(sm_arch(9, 0), "sm_90");
        assert_eq!(sm_arch(8, 6), "sm_86");
        assert_eq!(sm_arch(12, 0), "sm_120");
        assert_eq!(sm_number("sm_90"), Some(90));
        assert_eq!(sm_number("sm_90a"), Some(90));
        assert_eq!(sm_number("sm_100f"), Some(100));
        assert_eq!(sm_number("compute_75"), Some(75));
        assert_eq!(sm_number("sm_"), None);
        assert_eq!(sm_number("gfx90a"), None);
        assert_eq!(sm_number("sm_9x"), None);
    }

    #[test]
    fn automatic_stack_is_the_frames_plus_16_kib_within_an_eighth_of_memory() {
        // An H200: 132 multiprocessors of 2048 threads, 143155 MiB. An eighth of it would allow
        // about 68 KiB per thread: the automatic size is not lowered.
        let h200 = StackRoom {
            resident_threads: 132 * 2048,
            memory_bytes: 143_155 << 20,
        };
        assert_eq!(automatic_stack_size(72, Some(h200)), 16 * 1024 + 72);
        assert_eq!(automatic_stack_size(0, None), 16 * 1024);
        // A small GPU: 2 GiB for 20 multiprocessors of 2048 threads. 16 KiB would reserve 640
        // MiB; an eighth of 2 GiB is 256 MiB, 6553 bytes per thread.
        let small = StackRoom {
            resident_threads: 20 * 2048,
            memory_bytes: 2 << 30,
        };
        assert_eq!(automatic_stack_size(72, Some(small)), 6553);
        // A driver that reports no threads or no memory does not lower it.
        for room in [
            StackRoom {
                resident_threads: 0,
                memory_bytes: 2 << 30,
            },
            StackRoom {
                resident_threads: 4096,
                memory_bytes: 0,
            },
        ] {
            assert_eq!(automatic_stack_size(8, Some(room)), 16 * 1024 + 8);
        }
        assert_eq!(automatic_stack_size(u64::MAX, None), usize::MAX);
    }

    #[test]
    fn driver_versions() {
        assert_eq!(driver_version_text(12080), "CUDA 12.8");
        assert_eq!(driver_version_text(13000), "CUDA 13.0");
        assert_eq!(driver_version_text(11040), "CUDA 11.4");
    }
}
