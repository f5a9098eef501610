//! The driver-error layer of the HSA backend: `Result` on top of `hsa_status_t` (an [`HsaError`]
//! names the call, the status as the header spells it and the runtime's own description), and
//! how HSA failures become [`BackendError`]s and fault texts.

use crate::{BackendError, BackendKind};
use hsa_sys::*;
use std::ffi::{c_char, CStr};

/// A failed HSA call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{call} failed with {}{}", status_text(*.status), describe(*.status, .description))]
pub struct HsaError {
    /// The C function that failed (`hsa_init`).
    pub call: &'static str,
    pub status: hsa_status_t,
    /// What `hsa_status_string` says, when it says anything.
    pub description: Option<String>,
}

fn status_text(status: hsa_status_t) -> String {
    match hsa_sys::status_name(status) {
        Some(name) => name.to_owned(),
        None => format!("HSA status {status:#x}"),
    }
}

fn describe(status: hsa_status_t, description: &Option<String>) -> String {
    let Some(text) = description else {
        return String::new();
    };
    // ROCr's descriptions repeat the status name ("HSA_STATUS_ERROR_X: ..."): say it once.
    let text = hsa_sys::status_name(status)
        .and_then(|name| text.strip_prefix(name))
        .map(|rest| rest.trim_start_matches(':').trim_start())
        .unwrap_or(text);
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// Converts a status into a `Result`, asking the runtime to describe failures.
pub(crate) trait StatusExt {
    fn result(self, lib: &HsaLib, call: &'static str) -> Result<(), HsaError>;
}

impl StatusExt for hsa_status_t {
    fn result(self, lib: &HsaLib, call: &'static str) -> Result<(), HsaError> {
        // INFO_BREAK is how an iteration callback stops early: not an error.
        if self == HSA_STATUS_SUCCESS || self == HSA_STATUS_INFO_BREAK {
            return Ok(());
        }
        Err(HsaError {
            call,
            status: self,
            description: status_string(lib, self),
        })
    }
}

/// `hsa_status_string`, which ROCr answers even before `hsa_init` succeeded.
pub(crate) fn status_string(lib: &HsaLib, status: hsa_status_t) -> Option<String> {
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: `text` is a valid out-pointer; the runtime stores a pointer to a static string.
    let asked = unsafe { (lib.hsa_status_string)(status, &mut text) };
    if asked != HSA_STATUS_SUCCESS || text.is_null() {
        return None;
    }
    // SAFETY: on success the runtime points `text` at a NUL-terminated string it owns for the
    // life of the process.
    let text = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    let text = text.trim().trim_end_matches('.').to_owned();
    (!text.is_empty()).then_some(text)
}

/// A failed runtime call (including `hsa_init` refusing to start, e.g. with
/// `HSA_STATUS_ERROR_OUT_OF_RESOURCES` on a machine without an AMD GPU) →
/// [`BackendError::Runtime`], with the status name and the runtime's description.
pub(crate) fn runtime(error: HsaError) -> BackendError {
    BackendError::Runtime {
        backend: BackendKind::Hsa,
        message: error.to_string(),
    }
}

/// Anything else the backend finds wrong with the runtime's answers → [`BackendError::Runtime`].
pub(crate) fn runtime_message(message: impl Into<String>) -> BackendError {
    BackendError::Runtime {
        backend: BackendKind::Hsa,
        message: message.into(),
    }
}

/// The library is absent or too old → [`BackendError::NotAvailable`], whose text starts with
/// "no HSA runtime found (libhsa-runtime64.so.1)".
pub(crate) fn not_available(message: String) -> BackendError {
    BackendError::NotAvailable(message)
}

/// Text for a GPU memory fault reported through the system event handler.
pub(crate) fn describe_memory_fault(fault: &hsa_amd_gpu_memory_fault_info_t) -> String {
    const REASONS: &[(u32, &str)] = &[
        (
            HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT,
            "page not present or supervisor privilege",
        ),
        (HSA_AMD_MEMORY_FAULT_READ_ONLY, "write to a read-only page"),
        (HSA_AMD_MEMORY_FAULT_NX, "execute on a no-execute page"),
        (HSA_AMD_MEMORY_FAULT_HOST_ONLY, "access to a host-only page"),
        (HSA_AMD_MEMORY_FAULT_DRAMECC, "DRAM ECC failure"),
        (HSA_AMD_MEMORY_FAULT_IMPRECISE, "imprecise fault address"),
        (HSA_AMD_MEMORY_FAULT_SRAMECC, "SRAM ECC failure"),
        (HSA_AMD_MEMORY_FAULT_HANG, "GPU reset after a hang"),
    ];
    let reasons: Vec<&str> = REASONS
        .iter()
        .filter(|(bit, _)| fault.fault_reason_mask & bit != 0)
        .map(|(_, text)| *text)
        .collect();
    let reasons = if reasons.is_empty() {
        format!("reason mask {:#x}", fault.fault_reason_mask)
    } else {
        reasons.join(", ")
    };
    format!(
        "GPU memory access fault at address {:#x} ({reasons})",
        fault.virtual_address
    )
}

/// Text for a queue that the runtime put into the error state (the queue callback's status).
pub(crate) fn describe_queue_error(status: hsa_status_t, description: Option<String>) -> String {
    let name = status_name(status)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("HSA status {status:#x}"));
    match description {
        Some(text) => format!("the GPU queue failed with {name}: {text}"),
        None => format!("the GPU queue failed with {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_call_status_and_description() {
        let error = HsaError {
            call: "hsa_init",
            status: hsa_sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES,
            description: Some("The runtime failed to allocate the necessary resources".into()),
        };
        assert_eq!(
            error.to_string(),
            "hsa_init failed with HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to \
             allocate the necessary resources"
        );
    }

    #[test]
    fn a_description_repeating_the_status_name_says_it_once() {
        let error = HsaError {
            call: "hsa_init",
            status: hsa_sys::HSA_STATUS_ERROR_OUT_OF_RESOURCES,
            description: Some("HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed".into()),
        };
        assert_eq!(
            error.to_string(),
            "hsa_init failed with HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed"
        );
    }

    #[test]
    fn unknown_status_is_shown_in_hex() {
        let error = HsaError {
            call: "hsa_queue_create",
            status: 0x2042,
            description: None,
        };
        assert_eq!(
            error.to_string(),
            "hsa_queue_create failed with HSA status 0x2042"
        );
    }

    #[test]
    fn memory_fault_lists_every_reason_bit() {
        let fault = hsa_amd_gpu_memory_fault_info_t {
            agent: hsa_agent_t { handle: 1 },
            virtual_address: 0xdead_0000,
            fault_reason_mask: HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT | HSA_AMD_MEMORY_FAULT_HANG,
        };
        assert_eq!(
            describe_memory_fault(&fault),
            "GPU memory access fault at address 0xdead0000 (page not present or supervisor \
             privilege, GPU reset after a hang)"
        );
    }

    #[test]
    fn memory_fault_with_unknown_bits_shows_the_mask() {
        let fault = hsa_amd_gpu_memory_fault_info_t {
            agent: hsa_agent_t { handle: 1 },
            virtual_address: 0,
            fault_reason_mask: 1 << 20,
        };
        assert!(describe_memory_fault(&fault).ends_with("(reason mask 0x100000)"));
    }

    #[test]
    fn queue_error_names_the_status() {
        assert_eq!(
            describe_queue_error(HSA_STATUS_ERROR_EXCEPTION, None),
            "the GPU queue failed with HSA_STATUS_ERROR_EXCEPTION"
        );
    }

    #[test]
    fn runtime_errors_are_attributed_to_the_hsa_backend() {
        let error = runtime(HsaError {
            call: "hsa_init",
            status: HSA_STATUS_ERROR_OUT_OF_RESOURCES,
            description: None,
        });
        assert_eq!(
            error.to_string(),
            "hsa backend: hsa_init failed with HSA_STATUS_ERROR_OUT_OF_RESOURCES"
        );
    }
}
