//! The function-pointer table and the run-time loader.

#![allow(non_camel_case_types)]

use crate::types::*;
use std::ffi::{c_char, c_void, OsString};
use std::mem::ManuallyDrop;
use std::path::PathBuf;

/// Environment variable naming the exact runtime library to load instead of the default search
/// (a path or a soname). Useful to pick one ROCm install among several, and in tests.
pub const LIBRARY_ENV: &str = "GPURUN_HSA_LIB";

/// Why the runtime could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// None of the candidates could be opened.
    #[error("no HSA runtime found ({}){}", first_name(.tried), reasons(.tried))]
    NotFound {
        /// Each candidate and the loader's message for it.
        tried: Vec<(String, String)>,
    },
    /// The library opened but lacks a function we need (too old a ROCm).
    #[error("HSA runtime `{library}` lacks the function `{symbol}` (ROCm too old?)")]
    MissingSymbol { library: String, symbol: String },
}

fn first_name(tried: &[(String, String)]) -> String {
    tried
        .first()
        .map(|(name, _)| {
            // Keep the headline short: the soname, not a full path.
            name.rsplit('/').next().unwrap_or(name).to_owned()
        })
        .unwrap_or_else(|| "libhsa-runtime64.so.1".to_owned())
}

/// `; tried a, b (reason), ...`: a candidate that exists but failed to load (wrong machine, a
/// missing dependency) keeps the loader's reason, plain absence does not.
fn reasons(tried: &[(String, String)]) -> String {
    if tried.is_empty() {
        return String::new();
    }
    let names: Vec<String> = tried
        .iter()
        .map(|(name, reason)| {
            if reason.contains("No such file or directory") {
                name.clone()
            } else {
                format!("{name} ({reason})")
            }
        })
        .collect();
    format!("; tried {}", names.join(", "))
}

/// Where the runtime is looked for, in order: `$GPURUN_HSA_LIB` alone when it is set;
/// otherwise the soname and the development name through the dynamic loader's search path,
/// then `$ROCM_PATH/lib`, then `/opt/rocm/lib`.
pub fn default_candidates() -> Vec<OsString> {
    candidates_for(std::env::var_os(LIBRARY_ENV), std::env::var_os("ROCM_PATH"))
}

/// [`default_candidates`] for given values of `$GPURUN_HSA_LIB` and `$ROCM_PATH` (empty counts
/// as unset).
fn candidates_for(exact: Option<OsString>, rocm_path: Option<OsString>) -> Vec<OsString> {
    if let Some(exact) = exact.filter(|value| !value.is_empty()) {
        return vec![exact];
    }
    let names = ["libhsa-runtime64.so.1", "libhsa-runtime64.so"];
    let mut candidates: Vec<OsString> = names.iter().map(OsString::from).collect();
    let mut dirs = Vec::new();
    if let Some(rocm) = rocm_path.filter(|value| !value.is_empty()) {
        dirs.push(PathBuf::from(rocm).join("lib"));
    }
    dirs.push(PathBuf::from("/opt/rocm/lib"));
    for dir in dirs {
        for name in names {
            candidates.push(dir.join(name).into_os_string());
        }
    }
    candidates
}

/// Declares the table: one field per function, filled by [`HsaLib::from_library`], plus
/// [`FUNCTION_SIGNATURES`] so the layout test can compare each against the header.
macro_rules! functions {
    ($( fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) $( -> $ret:ty )? ; )+) => {
        /// The HSA runtime, opened, with every function we use resolved.
        ///
        /// The library is never closed: ROCr starts threads and registers exit handlers that
        /// must not outlive its code, so unloading it is unsafe at any point after `hsa_init`.
        pub struct HsaLib {
            library: ManuallyDrop<libloading::Library>,
            path: String,
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub $name: unsafe extern "C" fn( $( $ty ),* ) $( -> $ret )?,
            )+
        }

        impl HsaLib {
            /// Resolves every function from an opened library.
            fn from_library(library: libloading::Library, path: String) -> Result<Self, LoadError> {
                $(
                    // SAFETY: the symbol's C declaration in hsa.h / hsa_ext_amd.h has exactly
                    // this type (tests/layout.rs compiles that claim against the headers), and
                    // the pointer is used only while `library` stays loaded (it never unloads).
                    let $name = unsafe {
                        library
                            .get::<unsafe extern "C" fn( $( $ty ),* ) $( -> $ret )?>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                            .map(|symbol| *symbol)
                            .map_err(|_| LoadError::MissingSymbol {
                                library: path.clone(),
                                symbol: stringify!($name).to_owned(),
                            })?
                    };
                )+
                Ok(HsaLib { library: ManuallyDrop::new(library), path, $( $name ),+ })
            }
        }

        /// Every function in the table: `(name, return type, parameter types)`, as written in
        /// Rust; `tests/layout.rs` translates them to C and checks them against the headers.
        pub const FUNCTION_SIGNATURES: &[(&str, &str, &[&str])] = &[
            $( (
                stringify!($name),
                functions!(@ret $( $ret )?),
                &[ $( stringify!($ty) ),* ],
            ), )+
        ];
    };
    (@ret $ret:ty) => { stringify!($ret) };
    (@ret) => { "()" };
}

functions! {
    fn hsa_init() -> hsa_status_t;
    fn hsa_shut_down() -> hsa_status_t;
    fn hsa_status_string(status: hsa_status_t, status_string: *mut *const c_char) -> hsa_status_t;
    fn hsa_system_get_info(attribute: hsa_system_info_t, value: *mut c_void) -> hsa_status_t;

    fn hsa_iterate_agents(callback: hsa_agent_callback_t, data: *mut c_void) -> hsa_status_t;
    fn hsa_agent_get_info(agent: hsa_agent_t, attribute: hsa_agent_info_t, value: *mut c_void)
        -> hsa_status_t;
    fn hsa_agent_iterate_isas(agent: hsa_agent_t, callback: hsa_isa_callback_t, data: *mut c_void)
        -> hsa_status_t;
    fn hsa_isa_get_info_alt(isa: hsa_isa_t, attribute: hsa_isa_info_t, value: *mut c_void)
        -> hsa_status_t;

    fn hsa_signal_create(
        initial_value: hsa_signal_value_t,
        num_consumers: u32,
        consumers: *const hsa_agent_t,
        signal: *mut hsa_signal_t,
    ) -> hsa_status_t;
    fn hsa_signal_destroy(signal: hsa_signal_t) -> hsa_status_t;
    fn hsa_signal_load_relaxed(signal: hsa_signal_t) -> hsa_signal_value_t;
    fn hsa_signal_load_scacquire(signal: hsa_signal_t) -> hsa_signal_value_t;
    fn hsa_signal_store_relaxed(signal: hsa_signal_t, value: hsa_signal_value_t);
    fn hsa_signal_store_screlease(signal: hsa_signal_t, value: hsa_signal_value_t);
    fn hsa_signal_wait_scacquire(
        signal: hsa_signal_t,
        condition: hsa_signal_condition_t,
        compare_value: hsa_signal_value_t,
        timeout_hint: u64,
        wait_state_hint: hsa_wait_state_t,
    ) -> hsa_signal_value_t;
    fn hsa_amd_signal_wait_any(
        signal_count: u32,
        signals: *mut hsa_signal_t,
        conds: *mut hsa_signal_condition_t,
        values: *mut hsa_signal_value_t,
        timeout_hint: u64,
        wait_hint: hsa_wait_state_t,
        satisfying_value: *mut hsa_signal_value_t,
    ) -> u32;

    fn hsa_queue_create(
        agent: hsa_agent_t,
        size: u32,
        type_: hsa_queue_type32_t,
        callback: hsa_queue_callback_t,
        data: *mut c_void,
        private_segment_size: u32,
        group_segment_size: u32,
        queue: *mut *mut hsa_queue_t,
    ) -> hsa_status_t;
    fn hsa_queue_destroy(queue: *mut hsa_queue_t) -> hsa_status_t;
    fn hsa_queue_load_read_index_scacquire(queue: *const hsa_queue_t) -> u64;
    fn hsa_queue_add_write_index_relaxed(queue: *const hsa_queue_t, value: u64) -> u64;

    fn hsa_code_object_reader_create_from_memory(
        code_object: *const c_void,
        size: usize,
        code_object_reader: *mut hsa_code_object_reader_t,
    ) -> hsa_status_t;
    fn hsa_code_object_reader_destroy(code_object_reader: hsa_code_object_reader_t)
        -> hsa_status_t;
    fn hsa_executable_create_alt(
        profile: hsa_profile_t,
        default_float_rounding_mode: hsa_default_float_rounding_mode_t,
        options: *const c_char,
        executable: *mut hsa_executable_t,
    ) -> hsa_status_t;
    fn hsa_executable_load_agent_code_object(
        executable: hsa_executable_t,
        agent: hsa_agent_t,
        code_object_reader: hsa_code_object_reader_t,
        options: *const c_char,
        loaded_code_object: *mut hsa_loaded_code_object_t,
    ) -> hsa_status_t;
    fn hsa_executable_freeze(executable: hsa_executable_t, options: *const c_char) -> hsa_status_t;
    fn hsa_executable_validate(executable: hsa_executable_t, result: *mut u32) -> hsa_status_t;
    fn hsa_executable_destroy(executable: hsa_executable_t) -> hsa_status_t;
    fn hsa_executable_get_symbol_by_name(
        executable: hsa_executable_t,
        symbol_name: *const c_char,
        agent: *const hsa_agent_t,
        symbol: *mut hsa_executable_symbol_t,
    ) -> hsa_status_t;
    fn hsa_executable_symbol_get_info(
        executable_symbol: hsa_executable_symbol_t,
        attribute: hsa_executable_symbol_info_t,
        value: *mut c_void,
    ) -> hsa_status_t;

    fn hsa_amd_agent_iterate_memory_pools(
        agent: hsa_agent_t,
        callback: hsa_amd_memory_pool_callback_t,
        data: *mut c_void,
    ) -> hsa_status_t;
    fn hsa_amd_memory_pool_get_info(
        memory_pool: hsa_amd_memory_pool_t,
        attribute: hsa_amd_memory_pool_info_t,
        value: *mut c_void,
    ) -> hsa_status_t;
    fn hsa_amd_memory_pool_allocate(
        memory_pool: hsa_amd_memory_pool_t,
        size: usize,
        flags: u32,
        ptr: *mut *mut c_void,
    ) -> hsa_status_t;
    fn hsa_amd_memory_pool_free(ptr: *mut c_void) -> hsa_status_t;
    fn hsa_amd_agents_allow_access(
        num_agents: u32,
        agents: *const hsa_agent_t,
        flags: *const u32,
        ptr: *const c_void,
    ) -> hsa_status_t;
    fn hsa_amd_memory_async_copy(
        dst: *mut c_void,
        dst_agent: hsa_agent_t,
        src: *const c_void,
        src_agent: hsa_agent_t,
        size: usize,
        num_dep_signals: u32,
        dep_signals: *const hsa_signal_t,
        completion_signal: hsa_signal_t,
    ) -> hsa_status_t;
    fn hsa_amd_memory_fill(ptr: *mut c_void, value: u32, count: usize) -> hsa_status_t;
    fn hsa_amd_memory_lock(
        host_ptr: *mut c_void,
        size: usize,
        agents: *mut hsa_agent_t,
        num_agent: std::ffi::c_int,
        agent_ptr: *mut *mut c_void,
    ) -> hsa_status_t;
    fn hsa_amd_memory_unlock(host_ptr: *mut c_void) -> hsa_status_t;
    fn hsa_amd_register_system_event_handler(
        callback: hsa_amd_system_event_callback_t,
        data: *mut c_void,
    ) -> hsa_status_t;
    fn hsa_amd_profiling_set_profiler_enabled(
        queue: *mut hsa_queue_t,
        enable: std::ffi::c_int,
    ) -> hsa_status_t;
    fn hsa_amd_profiling_get_dispatch_time(
        agent: hsa_agent_t,
        signal: hsa_signal_t,
        time: *mut hsa_amd_profiling_dispatch_time_t,
    ) -> hsa_status_t;
}

impl HsaLib {
    /// Opens the runtime from [`default_candidates`].
    pub fn load() -> Result<Self, LoadError> {
        Self::load_from(&default_candidates())
    }

    /// Opens the first candidate that loads (a soname is searched the dynamic loader's way, a
    /// path is opened as is) and resolves every function from it.
    pub fn load_from(candidates: &[OsString]) -> Result<Self, LoadError> {
        let mut tried = Vec::new();
        for candidate in candidates {
            // SAFETY: loading ROCr runs its ELF constructors, which only set up its own state;
            // nothing else in this process depends on them.
            match unsafe { libloading::Library::new(candidate) } {
                Ok(library) => {
                    return Self::from_library(library, candidate.to_string_lossy().into_owned())
                }
                Err(error) => {
                    tried.push((candidate.to_string_lossy().into_owned(), error.to_string()))
                }
            }
        }
        Err(LoadError::NotFound { tried })
    }

    /// The candidate the runtime was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The underlying library, to resolve something outside this table.
    pub fn library(&self) -> &libloading::Library {
        &self.library
    }
}

impl std::fmt::Debug for HsaLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HsaLib")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_an_error_naming_it() {
        let candidates = [OsString::from("/nonexistent/libhsa-runtime64.so.1")];
        let error = HsaLib::load_from(&candidates).unwrap_err();
        let message = error.to_string();
        assert!(
            message.starts_with("no HSA runtime found (libhsa-runtime64.so.1)"),
            "{message}"
        );
        assert!(
            message.contains("/nonexistent/libhsa-runtime64.so.1"),
            "{message}"
        );
    }

    #[test]
    fn a_library_that_exists_but_fails_to_load_keeps_the_reason() {
        let not_a_library =
            std::env::temp_dir().join(format!("hsa-sys-not-elf-{}.so", std::process::id()));
        std::fs::write(&not_a_library, b"not an ELF file").unwrap();
        let candidates = [
            OsString::from("/nonexistent/libhsa-runtime64.so.1"),
            not_a_library.clone().into(),
        ];
        let message = HsaLib::load_from(&candidates).unwrap_err().to_string();
        std::fs::remove_file(&not_a_library).ok();
        assert!(
            message.starts_with("no HSA runtime found (libhsa-runtime64.so.1); tried /nonexistent/libhsa-runtime64.so.1, "),
            "{message}"
        );
        assert!(
            message.contains(&format!("{} (", not_a_library.display())),
            "{message}"
        );
    }

    #[test]
    fn empty_candidate_list_still_names_the_runtime() {
        let message = HsaLib::load_from(&[]).unwrap_err().to_string();
        assert_eq!(message, "no HSA runtime found (libhsa-runtime64.so.1)");
    }

    #[test]
    fn library_without_hsa_symbols_names_the_missing_symbol() {
        // libc is always loadable and has none of the HSA functions.
        let candidates = [OsString::from("libc.so.6")];
        match HsaLib::load_from(&candidates) {
            Err(LoadError::MissingSymbol { library, symbol }) => {
                assert_eq!(library, "libc.so.6");
                assert_eq!(symbol, "hsa_init");
            }
            other => panic!("expected a missing symbol, got {other:?}"),
        }
    }

    #[test]
    fn search_order_is_soname_then_rocm_path_then_opt_rocm() {
        let list = |exact: Option<&str>, rocm: Option<&str>| -> Vec<String> {
            candidates_for(exact.map(Into::into), rocm.map(Into::into))
                .into_iter()
                .map(|c| c.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            list(None, Some("/usr/local/rocm-6.2")),
            [
                "libhsa-runtime64.so.1",
                "libhsa-runtime64.so",
                "/usr/local/rocm-6.2/lib/libhsa-runtime64.so.1",
                "/usr/local/rocm-6.2/lib/libhsa-runtime64.so",
                "/opt/rocm/lib/libhsa-runtime64.so.1",
                "/opt/rocm/lib/libhsa-runtime64.so",
            ]
        );
        assert_eq!(list(None, Some("")), list(None, None));
        assert_eq!(list(None, None).len(), 4);
        assert_eq!(list(Some("/x/libhsa.so"), Some("/r")), ["/x/libhsa.so"]);
        assert_eq!(list(Some(""), None), list(None, None));
    }

    #[test]
    fn status_names_come_from_the_header_spelling() {
        assert_eq!(
            status_name(HSA_STATUS_ERROR_OUT_OF_RESOURCES),
            Some("HSA_STATUS_ERROR_OUT_OF_RESOURCES")
        );
        assert_eq!(status_name(HSA_STATUS_SUCCESS), Some("HSA_STATUS_SUCCESS"));
        assert_eq!(status_name(0xdead), None);
    }

    #[test]
    fn signatures_are_recorded_for_every_function() {
        let init = FUNCTION_SIGNATURES
            .iter()
            .find(|(name, _, _)| *name == "hsa_signal_store_relaxed")
            .unwrap();
        assert_eq!(init.1, "()");
        assert_eq!(init.2.len(), 2);
        assert!(FUNCTION_SIGNATURES.len() >= 30);
    }
}
