//! The loaded library and one reference on the initialised runtime, plus the process-wide
//! memory-fault record fed by the system event handler.

use super::error::{describe_memory_fault, not_available, runtime};
use super::result::{HsaError, StatusExt};
use crate::BackendError;
use hsa_sys::*;
use std::ffi::{c_void, OsString};
use std::sync::{Arc, Mutex, OnceLock};

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

/// One `hsa_init` reference; `hsa_shut_down` when dropped (the runtime counts references).
pub(crate) struct Runtime {
    lib: Arc<HsaLib>,
    timestamp_hz: OnceLock<u64>,
}

impl Runtime {
    /// Initialises the runtime and makes sure GPU memory faults are reported to us rather than
    /// aborting the process.
    pub(crate) fn open(lib: Arc<HsaLib>) -> Result<Arc<Runtime>, BackendError> {
        // SAFETY: `hsa_init` takes no arguments and may be called any number of times.
        unsafe { (lib.hsa_init)() }
            .result(&lib, "hsa_init")
            .map_err(runtime)?;
        let opened = Arc::new(Runtime {
            lib,
            timestamp_hz: OnceLock::new(),
        });
        register_fault_handler(&opened.lib).map_err(runtime)?;
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
            let mut hz = 0u64;
            // SAFETY: TIMESTAMP_FREQUENCY is a uint64_t.
            let asked = unsafe {
                (self.lib.hsa_system_get_info)(
                    HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY,
                    (&mut hz as *mut u64).cast(),
                )
            };
            if asked == HSA_STATUS_SUCCESS && hz > 0 {
                hz
            } else {
                1_000_000_000
            }
        })
    }

    /// `HSA_SYSTEM_INFO_VERSION_MAJOR.MINOR`, e.g. `HSA 1.1`.
    pub(crate) fn version(&self) -> Option<String> {
        let mut major = 0u16;
        let mut minor = 0u16;
        // SAFETY: both attributes are documented as uint16_t; the out-pointers fit.
        let asked = unsafe {
            (self.lib.hsa_system_get_info)(
                HSA_SYSTEM_INFO_VERSION_MAJOR,
                (&mut major as *mut u16).cast(),
            ) | (self.lib.hsa_system_get_info)(
                HSA_SYSTEM_INFO_VERSION_MINOR,
                (&mut minor as *mut u16).cast(),
            )
        };
        (asked == HSA_STATUS_SUCCESS).then(|| format!("HSA {major}.{minor}"))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: balances the successful `hsa_init` of `open`. Every object created through
        // this runtime holds an `Arc<Runtime>`, so none outlives this call. A failure cannot be
        // acted on here and is ignored.
        let _ = unsafe { (self.lib.hsa_shut_down)() };
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

fn register_fault_handler(lib: &HsaLib) -> Result<(), HsaError> {
    // Once per process: the runtime keeps handlers for its whole life.
    static REGISTERED: Mutex<bool> = Mutex::new(false);
    let mut registered = REGISTERED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if *registered {
        return Ok(());
    }
    // SAFETY: the handler is a plain function that stays valid for the process; it ignores
    // `data`, so null is fine.
    unsafe {
        (lib.hsa_amd_register_system_event_handler)(Some(on_system_event), std::ptr::null_mut())
    }
    .result(lib, "hsa_amd_register_system_event_handler")?;
    *registered = true;
    Ok(())
}

/// Records a GPU memory fault and claims it as handled (`HSA_STATUS_SUCCESS`), so that ROCr
/// does not abort the process: the launch that faulted fails, the worker is replaced, and the
/// rest of the run goes on. (LLVM's loader returns an error here, letting ROCr abort.)
unsafe extern "C" fn on_system_event(
    event: *const hsa_amd_event_t,
    _data: *mut c_void,
) -> hsa_status_t {
    if event.is_null() {
        return HSA_STATUS_SUCCESS;
    }
    // SAFETY: the runtime passes a valid event for the duration of the call.
    let event = unsafe { *event };
    if event.event_type == HSA_AMD_GPU_MEMORY_FAULT_EVENT {
        let text = describe_memory_fault(&event.memory_fault);
        if let Ok(mut faults) = FAULTS.lock() {
            faults.push(text);
        }
    }
    HSA_STATUS_SUCCESS
}

#[cfg(test)]
pub(crate) fn record_fault_for_test(text: &str) {
    FAULTS.lock().unwrap().push(text.to_owned());
}
