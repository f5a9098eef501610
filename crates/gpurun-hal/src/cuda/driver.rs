//! CUDA driver status codes turned into backend errors.
//!
//! Messages carry the driver's own error name (`CUDA_ERROR_ILLEGAL_ADDRESS`), the call that
//! returned it and the driver's description, so a failed test reads like the driver's report.

use crate::{BackendError, BackendKind};
use cudarc::driver::sys::{self, CUresult};
use std::ffi::CStr;

/// A driver call that did not return `CUDA_SUCCESS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DriverError {
    pub(crate) call: &'static str,
    pub(crate) code: CUresult,
}

impl DriverError {
    /// The driver's name for the code, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
    pub(crate) fn name(&self) -> String {
        error_name(self.code)
    }

    /// A context that saw this error cannot run anything again (see [`is_sticky`]).
    pub(crate) fn is_sticky(&self) -> bool {
        is_sticky(self.code)
    }

    /// `CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)`.
    pub(crate) fn describe(&self) -> String {
        describe(&self.name(), error_description(self.code).as_deref())
    }
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.call, self.describe())
    }
}

impl From<DriverError> for BackendError {
    fn from(error: DriverError) -> Self {
        runtime(error.to_string())
    }
}

/// `NAME (description)`, or just the name when the driver gave no description.
fn describe(name: &str, description: Option<&str>) -> String {
    match description {
        Some(text) if !text.is_empty() => format!("{name} ({text})"),
        _ => name.to_owned(),
    }
}

/// A [`BackendError::Runtime`] of the CUDA backend.
pub(crate) fn runtime(message: impl Into<String>) -> BackendError {
    BackendError::Runtime {
        backend: BackendKind::Cuda,
        message: message.into(),
    }
}

/// Turns the status of the driver call `call` into a `Result`.
pub(crate) fn check(call: &'static str, code: CUresult) -> Result<(), DriverError> {
    if code == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(DriverError { call, code })
    }
}

/// The driver's name for `code` (`cuGetErrorName`). Falls back to the binding's variant name,
/// which is the same text, when the driver does not know the code.
///
/// Without a loaded driver the variant name is used directly: cudarc panics on a lookup in a
/// missing library.
pub(crate) fn error_name(code: CUresult) -> String {
    if !driver_loaded() {
        return format!("{code:?}");
    }
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `text` is a valid out-pointer; the driver stores a pointer to a static string.
    let status = unsafe { sys::cuGetErrorName(code, &mut text) };
    if status == CUresult::CUDA_SUCCESS && !text.is_null() {
        // SAFETY: on success the driver returned a NUL-terminated string with static lifetime.
        return unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned();
    }
    format!("{code:?}")
}

/// The driver's description of `code` (`cuGetErrorString`), when it has one.
fn error_description(code: CUresult) -> Option<String> {
    if !driver_loaded() {
        return None;
    }
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `text` is a valid out-pointer; the driver stores a pointer to a static string.
    let status = unsafe { sys::cuGetErrorString(code, &mut text) };
    if status == CUresult::CUDA_SUCCESS && !text.is_null() {
        // SAFETY: on success the driver returned a NUL-terminated string with static lifetime.
        Some(
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned(),
        )
    } else {
        None
    }
}

/// Errors after which the context is corrupted: every later call in it fails with the same code,
/// so the module must be thrown away (the harness replaces the worker process). These are the
/// codes the CUDA documentation marks "the process must be terminated and relaunched" (kernel
/// faults) plus the ones that mean the context or device is gone.
pub(crate) fn is_sticky(code: CUresult) -> bool {
    matches!(
        code,
        CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
            | CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_LAUNCH_TIMEOUT
            | CUresult::CUDA_ERROR_ASSERT
            | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
            | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUresult::CUDA_ERROR_INVALID_PC
            | CUresult::CUDA_ERROR_ECC_UNCORRECTABLE
            | CUresult::CUDA_ERROR_NVLINK_UNCORRECTABLE
            | CUresult::CUDA_ERROR_CONTAINED
            | CUresult::CUDA_ERROR_TENSOR_MEMORY_LEAK
            | CUresult::CUDA_ERROR_EXTERNAL_DEVICE
            | CUresult::CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUresult::CUDA_ERROR_DEINITIALIZED
    )
}

/// Finding the driver library and `cuInit`: the first driver calls of every path.
mod loading {
    use super::DriverError;
    use crate::BackendError;
    use cudarc::driver::sys::{self, CUresult};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    /// What a missing `libcuda.so` is reported as, everywhere.
    pub const NO_DRIVER: &str = "no NVIDIA driver found (libcuda.so)";

    /// Set once the driver library was found: only then may any `sys::cu*` function be called,
    /// because cudarc panics when asked to load a missing library.
    static DRIVER_LOADED: AtomicBool = AtomicBool::new(false);

    /// Whether the driver library has been found (and so driver calls are safe to make).
    pub(crate) fn driver_loaded() -> bool {
        DRIVER_LOADED.load(Ordering::Acquire)
    }

    /// The outcome of `cuInit`, which the driver allows once per process.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Driver {
        Ready,
        /// `cuInit` said there is no device (none installed, or `CUDA_VISIBLE_DEVICES` hides all).
        NoDevice,
    }

    /// Decides from the probe alone whether the driver can be used. Split out so both answers are
    /// tested on every machine.
    pub(crate) fn availability(library_present: bool) -> Result<(), BackendError> {
        if library_present {
            Ok(())
        } else {
            Err(BackendError::NotAvailable(NO_DRIVER.into()))
        }
    }

    /// Probes for `libcuda.so` and runs `cuInit(0)`, once per process. Never panics: the probe
    /// comes before any call that would make cudarc load the library.
    pub(crate) fn init() -> Result<Driver, BackendError> {
        /// `None`: no driver library; `Some(Err(code))`: `cuInit` failed.
        static INIT: OnceLock<Option<Result<Driver, CUresult>>> = OnceLock::new();
        let outcome = INIT.get_or_init(|| {
            // SAFETY: `is_culib_present` only tries `dlopen` on the candidate names.
            if availability(unsafe { sys::is_culib_present() }).is_err() {
                return None;
            }
            DRIVER_LOADED.store(true, Ordering::Release);
            // SAFETY: plain driver call with a flags value of 0, the only one defined.
            Some(match unsafe { sys::cuInit(0) } {
                CUresult::CUDA_SUCCESS => Ok(Driver::Ready),
                CUresult::CUDA_ERROR_NO_DEVICE => Ok(Driver::NoDevice),
                other => Err(other),
            })
        });
        match *outcome {
            None => Err(BackendError::NotAvailable(NO_DRIVER.into())),
            Some(Ok(driver)) => Ok(driver),
            Some(Err(code)) => Err(DriverError {
                call: "cuInit",
                code,
            }
            .into()),
        }
    }
}

#[cfg(test)]
pub(crate) use loading::availability;
pub use loading::NO_DRIVER;
pub(crate) use loading::{driver_loaded, init, Driver};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_faults_are_sticky() {
        for code in [
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_ASSERT,
            CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
            CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION,
        ] {
            assert!(is_sticky(code), "{code:?}");
        }
    }

    #[test]
    fn caller_errors_are_not_sticky() {
        for code in [
            CUresult::CUDA_SUCCESS,
            CUresult::CUDA_ERROR_NOT_READY,
            CUresult::CUDA_ERROR_INVALID_VALUE,
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_INVALID_PTX,
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
            CUresult::CUDA_ERROR_NOT_FOUND,
        ] {
            assert!(!is_sticky(code), "{code:?}");
        }
    }

    #[test]
    fn check_passes_success_and_names_the_call() {
        assert_eq!(check("cuInit", CUresult::CUDA_SUCCESS), Ok(()));
        let error = check("cuLaunchKernel", CUresult::CUDA_ERROR_INVALID_VALUE).unwrap_err();
        assert_eq!(error.call, "cuLaunchKernel");
        assert_eq!(error.code, CUresult::CUDA_ERROR_INVALID_VALUE);
        assert!(!error.is_sticky());
    }

    #[test]
    fn description_follows_the_name() {
        assert_eq!(
            describe(
                "CUDA_ERROR_ILLEGAL_ADDRESS",
                Some("an illegal memory access was encountered")
            ),
            "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"
        );
        assert_eq!(describe("CUDA_ERROR_UNKNOWN", None), "CUDA_ERROR_UNKNOWN");
        assert_eq!(
            describe("CUDA_ERROR_UNKNOWN", Some("")),
            "CUDA_ERROR_UNKNOWN"
        );
    }

    #[test]
    fn variant_name_is_the_driver_name() {
        // The fallback used without a driver must print what cuGetErrorName would.
        assert_eq!(
            format!("{:?}", CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
            "CUDA_ERROR_ILLEGAL_ADDRESS"
        );
    }
}
