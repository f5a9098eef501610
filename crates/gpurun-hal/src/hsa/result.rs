//! `Result` on top of `hsa_status_t`: a status becomes an [`HsaError`] that names the call, the
//! status as the header spells it, and the runtime's own description (`hsa_status_string`).

use hsa_sys::{hsa_status_t, HsaLib, HSA_STATUS_INFO_BREAK, HSA_STATUS_SUCCESS};
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
}
