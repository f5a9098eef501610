//! Finding the driver, listing devices and opening one (its primary context).

use super::driver::{calls, init, Driver, DriverError};
use crate::{BackendError, BackendKind, DeviceInfo};
use cudarc::driver::sys::{CUcontext, CUdevice, CUdevice_attribute};

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

/// Stack bytes per thread unless `--stack-size` says otherwise. LLVM's loader sets 3 KiB; our
/// panic report path alone takes about 1.3 KiB of frames (`ptxas -v`), so user code gets more
/// room. The driver reserves this for every resident thread (about 1.1 GB on an H100).
pub const DEFAULT_STACK_SIZE: usize = 4096;

/// One device with its primary context retained (released on drop).
pub struct CudaDevice {
    pub(crate) handle: CUdevice,
    pub(crate) context: CUcontext,
    pub(crate) info: DeviceInfo,
    /// Set when a module saw a fault or a timeout: the context may still be running a kernel
    /// that never ends, so it is not released (the process exit does that).
    pub(crate) poisoned: std::cell::Cell<bool>,
}

impl CudaDevice {
    /// Opens device `ordinal`: its primary context, retained until the device is dropped.
    /// [`super::CudaBackend`]'s `open` wraps this; its [`crate::module::LoadPrimitives`] gives
    /// an image's primitives without the shared module (for tests of the driver calls).
    pub fn open(ordinal: usize) -> Result<CudaDevice, BackendError> {
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

    /// Sets the per-thread stack size once per context (every slot of a worker shares the
    /// device's primary context), before any module of it loads: `requested`, else
    /// [`DEFAULT_STACK_SIZE`]. The driver's own default (1 KiB) is too small for the panic path
    /// through `core::fmt`, and ptxas cannot bound it (indirect calls), so a failing assert
    /// would become an illegal-address fault instead of a reported panic.
    pub(crate) fn set_stack_size(&self, requested: Option<usize>) -> Result<(), DriverError> {
        static CONFIGURED: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
        let mut configured = CONFIGURED
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if configured.contains(&self.info.ordinal) {
            return Ok(());
        }
        let bytes = requested.unwrap_or(DEFAULT_STACK_SIZE);
        calls::context_set_stack_size(bytes)?;
        configured.push(self.info.ordinal);
        Ok(())
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
    use super::super::driver::{availability, NO_DRIVER};
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
    fn driver_versions() {
        assert_eq!(driver_version_text(12080), "CUDA 12.8");
        assert_eq!(driver_version_text(13000), "CUDA 13.0");
        assert_eq!(driver_version_text(11040), "CUDA 11.4");
    }
}
