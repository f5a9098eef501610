//! The loaded library and one reference on the initialised runtime, plus the process-wide
//! memory-fault record fed by the system event handler.

use super::driver::{calls, HsaError};
use super::driver::{describe_memory_fault, not_available, runtime};
use crate::BackendError;
use hsa_sys::*;
use std::ffi::{c_void, OsString};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Where to find the library: the default search (cached for the process) or an explicit list.
#[derive(Clone, Debug, Default)]
pub(crate) enum LibrarySource {
    #[default]
    Default,
    Candidates(Vec<OsString>),
}

impl LibrarySource {
    pub(crate) fn load(&self) -> Result<Arc<HsaLib>, BackendError> {
        match self {
            LibrarySource::Default => {
                static DEFAULT: OnceLock<Result<Arc<HsaLib>, String>> = OnceLock::new();
                DEFAULT
                    .get_or_init(|| HsaLib::load().map(Arc::new).map_err(|e| e.to_string()))
                    .clone()
                    .map_err(not_available)
            }
            LibrarySource::Candidates(candidates) => HsaLib::load_from(candidates)
                .map(Arc::new)
                .map_err(|e| not_available(e.to_string())),
        }
    }
}

/// The device through which ROCr reaches the AMD kernel driver (amdgpu's KFD): without it
/// there is no AMD GPU the runtime can use, whatever `hsa_init` says.
pub const AMD_KERNEL_DRIVER_DEVICE: &str = "/dev/kfd";

/// Whether [`AMD_KERNEL_DRIVER_DEVICE`] exists here.
pub fn amd_kernel_driver_present() -> bool {
    std::path::Path::new(AMD_KERNEL_DRIVER_DEVICE).exists()
}

/// One `hsa_init` reference; `hsa_shut_down` when dropped (the runtime counts references).
pub(crate) struct Runtime {
    lib: Arc<HsaLib>,
    timestamp_hz: OnceLock<u64>,
}

impl Runtime {
    /// The initialised runtime: the one already open for this library, else a new `hsa_init`
    /// with our memory-fault handler registered, so faults are reported to us rather than
    /// aborting the process. Sharing one instance matters: when the last reference goes,
    /// `hsa_shut_down` tears the runtime down together with its event handlers, and the next
    /// `hsa_init` needs them registered again.
    pub(crate) fn open(lib: Arc<HsaLib>) -> Result<Arc<Runtime>, BackendError> {
        static CURRENT: Mutex<Weak<Runtime>> = Mutex::new(Weak::new());
        let mut current = CURRENT
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(open) = current.upgrade() {
            if Arc::ptr_eq(&open.lib, &lib) {
                return Ok(open);
            }
        }
        calls::init(&lib).map_err(|error| match amd_kernel_driver_present() {
            // ROCr's own words for a missing driver are a resource error
            // (HSA_STATUS_ERROR_OUT_OF_RESOURCES on Debian's runtime); the user needs to hear
            // that there is no AMD GPU here, as for a missing runtime.
            false => not_available(format!(
                "no AMD GPU found: {AMD_KERNEL_DRIVER_DEVICE}, the AMD kernel driver's device, \
                 does not exist (the HSA runtime loaded, and {error})"
            )),
            true => runtime(error),
        })?;
        let opened = Arc::new(Runtime {
            lib,
            timestamp_hz: OnceLock::new(),
        });
        register_fault_handler(&opened.lib).map_err(runtime)?;
        *current = Arc::downgrade(&opened);
        Ok(opened)
    }

    pub(crate) fn lib(&self) -> &HsaLib {
        &self.lib
    }

    pub(crate) fn lib_arc(&self) -> &Arc<HsaLib> {
        &self.lib
    }

    /// Ticks per second of the system timestamp, the unit of signal wait timeouts (ROCr: 1 GHz
    /// on Linux; asked once, 1 GHz if the runtime does not say).
    pub(crate) fn timestamp_hz(&self) -> u64 {
        *self.timestamp_hz.get_or_init(|| {
            // SAFETY: TIMESTAMP_FREQUENCY is a uint64_t.
            let asked: Result<u64, _> =
                unsafe { calls::system_info(&self.lib, HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY) };
            asked.ok().filter(|&hz| hz > 0).unwrap_or(1_000_000_000)
        })
    }

    /// `HSA_SYSTEM_INFO_VERSION_MAJOR.MINOR`, e.g. `HSA 1.1`.
    pub(crate) fn version(&self) -> Option<String> {
        // SAFETY: both attributes are documented as uint16_t.
        let (major, minor): (u16, u16) = unsafe {
            (
                calls::system_info(&self.lib, HSA_SYSTEM_INFO_VERSION_MAJOR).ok()?,
                calls::system_info(&self.lib, HSA_SYSTEM_INFO_VERSION_MINOR).ok()?,
            )
        };
        Some(format!("HSA {major}.{minor}"))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: balances the successful `hsa_init` of `open`. Every object created through
        // this runtime holds an `Arc<Runtime>`, so none outlives this call. A failure cannot be
        // acted on here and is ignored.
        let _ = unsafe { calls::shut_down(&self.lib) };
    }
}

/// GPU memory faults seen so far in this process, in order. ROCr calls the handler on its own
/// thread; a launch in progress polls [`fault_count`] and reads the text.
static FAULTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// How many memory faults have been reported.
pub(crate) fn fault_count() -> usize {
    FAULTS.lock().map(|faults| faults.len()).unwrap_or(0)
}

/// The text of fault number `index` (0-based), if there is one.
pub(crate) fn fault_text(index: usize) -> Option<String> {
    FAULTS.lock().ok()?.get(index).cloned()
}

/// Registers [`on_system_event`] with a freshly initialised runtime. Registering it again with
/// a runtime that already has it is harmless: the first handler to claim a fault ends the search.
fn register_fault_handler(lib: &HsaLib) -> Result<(), HsaError> {
    // SAFETY: the handler is a plain function that stays valid for the process; it ignores
    // `data`, so null is fine.
    unsafe {
        calls::register_system_event_handler(lib, Some(on_system_event), std::ptr::null_mut())
    }
}

/// Records a GPU memory fault, a hardware exception (a hang the GPU was reset for, an ECC error)
/// or a memory error (ROCr could not free memory the GPU still uses) and claims it as handled
/// (`HSA_STATUS_SUCCESS`), so that ROCr does not abort the process: the launch that is running
/// or the next one fails with the text, the worker is replaced, and the rest of the run goes on.
/// (LLVM's loader returns an error here, letting ROCr abort.) Other events are not ours.
unsafe extern "C" fn on_system_event(
    event: *const hsa_amd_event_t,
    _data: *mut c_void,
) -> hsa_status_t {
    if event.is_null() {
        return HSA_STATUS_SUCCESS;
    }
    // SAFETY: the runtime passes a valid event for the duration of the call.
    let event = unsafe { *event };
    let text = match event.event_type {
        HSA_AMD_GPU_MEMORY_FAULT_EVENT => describe_memory_fault(&event.memory_fault),
        HSA_AMD_GPU_HW_EXCEPTION_EVENT => {
            // SAFETY: for this event the union holds the hardware exception, which is smaller
            // than the memory fault member whose bytes we copied (layout asserted in hsa-sys).
            let exception: hsa_amd_gpu_hw_exception_info_t =
                unsafe { std::mem::transmute_copy(&event.memory_fault) };
            describe_hw_exception(&exception)
        }
        HSA_AMD_GPU_MEMORY_ERROR_EVENT => {
            // SAFETY: for this event the union holds the memory error, laid out like the memory
            // fault whose bytes we copied (sizes asserted in hsa-sys).
            let error: hsa_amd_gpu_memory_error_info_t =
                unsafe { std::mem::transmute_copy(&event.memory_fault) };
            describe_memory_error(&error)
        }
        _ => return HSA_STATUS_ERROR,
    };
    if let Ok(mut faults) = FAULTS.lock() {
        faults.push(text);
    }
    HSA_STATUS_SUCCESS
}

/// A memory error in words.
fn describe_memory_error(error: &hsa_amd_gpu_memory_error_info_t) -> String {
    let reason = if error.error_reason_mask & HSA_AMD_MEMORY_ERROR_MEMORY_IN_USE != 0 {
        "memory the GPU still uses could not be freed".to_owned()
    } else {
        format!("reason mask {:#x}", error.error_reason_mask)
    };
    format!(
        "GPU memory error at address {:#x} on agent {:#x}: {reason}",
        error.virtual_address, error.agent.handle
    )
}

/// A hardware exception in words.
fn describe_hw_exception(exception: &hsa_amd_gpu_hw_exception_info_t) -> String {
    let cause = match exception.reset_cause {
        1 => "the GPU hung and was reset".to_owned(),
        2 => "an uncorrectable ECC error; the GPU was reset".to_owned(),
        other => format!("GPU hardware exception (reset cause {other})"),
    };
    format!(
        "GPU hardware exception on agent {:#x}: {cause}",
        exception.agent.handle
    )
}

#[cfg(test)]
pub(crate) fn record_fault_for_test(text: &str) {
    FAULTS.lock().unwrap().push(text.to_owned());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands `event` to the handler; returns its status and the fault texts it recorded.
    fn handle(event: &hsa_amd_event_t) -> (hsa_status_t, Vec<String>) {
        let before = fault_count();
        // SAFETY: a valid event, as the runtime passes it; `data` is unused.
        let status = unsafe { on_system_event(event, std::ptr::null_mut()) };
        (
            status,
            (before..fault_count()).filter_map(fault_text).collect(),
        )
    }

    /// Asserts that the handler claims `event` (SUCCESS: ROCr does not abort the process) and
    /// records a fault whose text contains each of `needles`.
    #[track_caller]
    fn assert_claimed_fault(event: &hsa_amd_event_t, needles: &[&str]) {
        let (status, texts) = handle(event);
        assert_eq!(status, HSA_STATUS_SUCCESS);
        assert!(
            texts
                .iter()
                .any(|text| needles.iter().all(|needle| text.contains(needle))),
            "{texts:?}"
        );
    }

    /// An event of `event_type` with a memory fault's payload (a memory error has its layout).
    fn memory_event(
        event_type: hsa_amd_event_type_t,
        agent: u64,
        virtual_address: u64,
        reason_mask: u32,
    ) -> hsa_amd_event_t {
        hsa_amd_event_t {
            event_type,
            memory_fault: hsa_amd_gpu_memory_fault_info_t {
                agent: hsa_agent_t { handle: agent },
                virtual_address,
                fault_reason_mask: reason_mask,
            },
        }
    }

    #[test]
    fn the_event_handler_records_memory_faults_and_claims_them() {
        let event = memory_event(
            HSA_AMD_GPU_MEMORY_FAULT_EVENT,
            3,
            0x1234_5000,
            HSA_AMD_MEMORY_FAULT_READ_ONLY,
        );
        assert_claimed_fault(&event, &["0x12345000", "read-only"]);
        // SAFETY: the handler checks for a null event before reading it.
        let status = unsafe { on_system_event(std::ptr::null(), std::ptr::null_mut()) };
        assert_eq!(status, HSA_STATUS_SUCCESS);
    }

    #[test]
    fn hardware_exceptions_are_faults_with_their_cause() {
        let exception = hsa_amd_gpu_hw_exception_info_t {
            agent: hsa_agent_t { handle: 7 },
            reset_type: 1,
            reset_cause: 1,
        };
        let mut event = hsa_amd_event_t {
            event_type: HSA_AMD_GPU_HW_EXCEPTION_EVENT,
            ..hsa_amd_event_t::default()
        };
        // SAFETY: the union payload's bytes, as the runtime fills them for this event.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&exception as *const hsa_amd_gpu_hw_exception_info_t).cast::<u8>(),
                (&mut event.memory_fault as *mut hsa_amd_gpu_memory_fault_info_t).cast::<u8>(),
                std::mem::size_of::<hsa_amd_gpu_hw_exception_info_t>(),
            );
        }
        assert_claimed_fault(&event, &["hung", "0x7"]);
        // An event that is not ours is left to the runtime.
        let other = hsa_amd_event_t {
            event_type: 3,
            ..hsa_amd_event_t::default()
        };
        assert_ne!(handle(&other).0, HSA_STATUS_SUCCESS);
    }

    /// ROCr aborts the process on a memory error no handler claims: it is a fault of ours.
    #[test]
    fn memory_errors_are_faults_and_claimed() {
        let event = memory_event(
            HSA_AMD_GPU_MEMORY_ERROR_EVENT,
            9,
            0x7f00_1000,
            HSA_AMD_MEMORY_ERROR_MEMORY_IN_USE,
        );
        assert_claimed_fault(
            &event,
            &["memory error at address 0x7f001000", "still uses"],
        );
    }
}
