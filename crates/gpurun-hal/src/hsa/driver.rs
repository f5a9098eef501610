//! The driver layer of the HSA backend, as `cuda/driver.rs` is CUDA's: every call into the
//! runtime's function table ([`calls`], each a thin `Result`), `Result` on top of
//! `hsa_status_t` (an [`HsaError`] names the call, the status as the header spells it and the
//! runtime's own description), and how HSA failures become [`BackendError`]s and fault texts.

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

/// Every runtime call of the backend (but `hsa_status_string`, above), each a thin `Result`
/// over one function of the `hsa-sys` table, as `cuda/driver.rs`'s `calls` are for CUDA: the
/// rest of the backend never touches the table. Functions that take raw handles, pointers or
/// attribute numbers whose value type the caller picks are `unsafe`: the caller vouches for
/// them, as documented on each. Everything but [`calls::init`] needs an initialised runtime.
pub(crate) mod calls {
    use super::{HsaError, StatusExt};
    use hsa_sys::*;
    use std::ffi::{c_void, CStr};

    /// Pushes each handle an iteration reports into the `Vec<T>` that `data` points to.
    unsafe extern "C" fn collect<T>(item: T, data: *mut c_void) -> hsa_status_t {
        // SAFETY: `data` is the `Vec<T>` passed by the iterating call below, borrowed for it.
        let items = unsafe { &mut *data.cast::<Vec<T>>() };
        items.push(item);
        HSA_STATUS_SUCCESS
    }

    /// `hsa_init`: one more reference on the runtime.
    pub(crate) fn init(lib: &HsaLib) -> Result<(), HsaError> {
        // SAFETY: takes no arguments and may be called any number of times.
        unsafe { (lib.hsa_init)() }.result(lib, "hsa_init")
    }

    /// # Safety
    /// Balances one successful [`init`]; nothing created through that reference is used after.
    pub(crate) unsafe fn shut_down(lib: &HsaLib) -> Result<(), HsaError> {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_shut_down)() }.result(lib, "hsa_shut_down")
    }

    /// A system attribute of plain type `T`.
    ///
    /// # Safety
    /// `attribute` must be documented with a value of type `T`.
    pub(crate) unsafe fn system_info<T: Default>(
        lib: &HsaLib,
        attribute: hsa_system_info_t,
    ) -> Result<T, HsaError> {
        let mut value = T::default();
        // SAFETY: per the caller, the attribute writes exactly a `T`.
        unsafe { (lib.hsa_system_get_info)(attribute, (&mut value as *mut T).cast()) }
            .result(lib, "hsa_system_get_info")?;
        Ok(value)
    }

    /// # Safety
    /// `handler` must stay callable for the life of the process, with `data` as its argument.
    pub(crate) unsafe fn register_system_event_handler(
        lib: &HsaLib,
        handler: hsa_amd_system_event_callback_t,
        data: *mut c_void,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_amd_register_system_event_handler)(handler, data) }
            .result(lib, "hsa_amd_register_system_event_handler")
    }

    /// Every agent, in the runtime's order.
    pub(crate) fn agents(lib: &HsaLib) -> Result<Vec<hsa_agent_t>, HsaError> {
        let mut agents: Vec<hsa_agent_t> = Vec::new();
        // SAFETY: `collect` pushes into the Vec that `data` points to, which outlives the call.
        unsafe {
            (lib.hsa_iterate_agents)(
                Some(collect::<hsa_agent_t>),
                (&mut agents as *mut Vec<_>).cast(),
            )
        }
        .result(lib, "hsa_iterate_agents")?;
        Ok(agents)
    }

    /// An agent attribute of plain type `T`.
    ///
    /// # Safety
    /// `attribute` must be documented with a value of type `T`.
    pub(crate) unsafe fn agent_info<T: Default>(
        lib: &HsaLib,
        agent: hsa_agent_t,
        attribute: hsa_agent_info_t,
    ) -> Result<T, HsaError> {
        let mut value = T::default();
        // SAFETY: per the caller, the attribute writes exactly a `T`.
        unsafe { agent_info_into(lib, agent, attribute, &mut value) }?;
        Ok(value)
    }

    /// Writes an agent attribute into `value` (a fixed-size array for string attributes).
    ///
    /// # Safety
    /// `attribute` must write at most `size_of_val(value)` bytes.
    pub(crate) unsafe fn agent_info_into<T: ?Sized>(
        lib: &HsaLib,
        agent: hsa_agent_t,
        attribute: hsa_agent_info_t,
        value: &mut T,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller, the attribute fits `value`.
        unsafe { (lib.hsa_agent_get_info)(agent, attribute, (value as *mut T).cast()) }
            .result(lib, "hsa_agent_get_info")
    }

    /// The ISAs an agent supports.
    pub(crate) fn agent_isas(lib: &HsaLib, agent: hsa_agent_t) -> Result<Vec<hsa_isa_t>, HsaError> {
        let mut isas: Vec<hsa_isa_t> = Vec::new();
        // SAFETY: `collect` pushes into the Vec that `data` points to, which outlives the call.
        unsafe {
            (lib.hsa_agent_iterate_isas)(
                agent,
                Some(collect::<hsa_isa_t>),
                (&mut isas as *mut Vec<_>).cast(),
            )
        }
        .result(lib, "hsa_agent_iterate_isas")?;
        Ok(isas)
    }

    /// Writes an ISA attribute into `value`.
    ///
    /// # Safety
    /// `attribute` must write at most `size_of_val(value)` bytes.
    pub(crate) unsafe fn isa_info<T: ?Sized>(
        lib: &HsaLib,
        isa: hsa_isa_t,
        attribute: hsa_isa_info_t,
        value: &mut T,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller, the attribute fits `value`.
        unsafe { (lib.hsa_isa_get_info_alt)(isa, attribute, (value as *mut T).cast()) }
            .result(lib, "hsa_isa_get_info_alt")
    }

    /// The memory pools of an agent.
    pub(crate) fn agent_memory_pools(
        lib: &HsaLib,
        agent: hsa_agent_t,
    ) -> Result<Vec<hsa_amd_memory_pool_t>, HsaError> {
        let mut pools: Vec<hsa_amd_memory_pool_t> = Vec::new();
        // SAFETY: `collect` pushes into the Vec that `data` points to, which outlives the call.
        unsafe {
            (lib.hsa_amd_agent_iterate_memory_pools)(
                agent,
                Some(collect::<hsa_amd_memory_pool_t>),
                (&mut pools as *mut Vec<_>).cast(),
            )
        }
        .result(lib, "hsa_amd_agent_iterate_memory_pools")?;
        Ok(pools)
    }

    /// A pool attribute of plain type `T`.
    ///
    /// # Safety
    /// `attribute` must be documented with a value of type `T`.
    pub(crate) unsafe fn pool_info<T: Default>(
        lib: &HsaLib,
        pool: hsa_amd_memory_pool_t,
        attribute: hsa_amd_memory_pool_info_t,
    ) -> Result<T, HsaError> {
        let mut value = T::default();
        // SAFETY: per the caller, the attribute writes exactly a `T`.
        unsafe {
            (lib.hsa_amd_memory_pool_get_info)(pool, attribute, (&mut value as *mut T).cast())
        }
        .result(lib, "hsa_amd_memory_pool_get_info")?;
        Ok(value)
    }

    /// `len` bytes from `pool`.
    pub(crate) fn pool_allocate(
        lib: &HsaLib,
        pool: hsa_amd_memory_pool_t,
        len: usize,
    ) -> Result<*mut c_void, HsaError> {
        let mut pointer: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; flags must be 0; a bad pool handle is an error status.
        unsafe { (lib.hsa_amd_memory_pool_allocate)(pool, len, 0, &mut pointer) }
            .result(lib, "hsa_amd_memory_pool_allocate")?;
        Ok(pointer)
    }

    /// Lets `agent` access the allocation at `pointer`.
    ///
    /// # Safety
    /// `pointer` must come from [`pool_allocate`] and not be freed.
    pub(crate) unsafe fn allow_access(
        lib: &HsaLib,
        agent: hsa_agent_t,
        pointer: *const c_void,
    ) -> Result<(), HsaError> {
        // SAFETY: one agent, no flags; `pointer` per the caller.
        unsafe { (lib.hsa_amd_agents_allow_access)(1, &agent, std::ptr::null(), pointer) }
            .result(lib, "hsa_amd_agents_allow_access")
    }

    /// Sets `words` 32-bit words at `pointer` to `value` (the runtime's fill: it reaches device
    /// memory the host cannot), and waits for it.
    ///
    /// # Safety
    /// `pointer` must be 4-aligned memory of the runtime (a pool allocation) holding `words`
    /// words, not used by a running kernel.
    pub(crate) unsafe fn memory_fill(
        lib: &HsaLib,
        pointer: *mut c_void,
        value: u32,
        words: usize,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_amd_memory_fill)(pointer, value, words) }
            .result(lib, "hsa_amd_memory_fill")
    }

    /// # Safety
    /// `pointer` must come from [`pool_allocate`], be freed once and not be used after.
    pub(crate) unsafe fn pool_free(lib: &HsaLib, pointer: *mut c_void) -> Result<(), HsaError> {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_amd_memory_pool_free)(pointer) }.result(lib, "hsa_amd_memory_pool_free")
    }

    /// A signal any agent may wait on, starting at `initial`.
    pub(crate) fn signal_create(lib: &HsaLib, initial: i64) -> Result<hsa_signal_t, HsaError> {
        let mut signal = hsa_signal_t::default();
        // SAFETY: no consumer list; a valid out-pointer.
        unsafe { (lib.hsa_signal_create)(initial, 0, std::ptr::null(), &mut signal) }
            .result(lib, "hsa_signal_create")?;
        Ok(signal)
    }

    /// # Safety
    /// `signal` must be live.
    pub(crate) unsafe fn signal_load_acquire(lib: &HsaLib, signal: hsa_signal_t) -> i64 {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_signal_load_scacquire)(signal) }
    }

    /// Waits (blocked) until `signal` is 0 or about `timeout` ticks pass; the last value seen.
    ///
    /// # Safety
    /// `signal` must be live.
    pub(crate) unsafe fn signal_wait_zero(lib: &HsaLib, signal: hsa_signal_t, timeout: u64) -> i64 {
        // SAFETY: per the caller.
        unsafe {
            (lib.hsa_signal_wait_scacquire)(
                signal,
                HSA_SIGNAL_CONDITION_EQ,
                0,
                timeout,
                HSA_WAIT_STATE_BLOCKED,
            )
        }
    }

    /// Waits (blocked) until one of `conditions` holds (signal, condition, compare value) or
    /// about `timeout` ticks pass; the index of the one that held, `None` at the timeout.
    /// Relaxed: load what the signals guard with acquire ordering afterwards.
    ///
    /// # Safety
    /// Every signal must be live.
    pub(crate) unsafe fn signal_wait_any(
        lib: &HsaLib,
        conditions: &[(hsa_signal_t, hsa_signal_condition_t, i64)],
        timeout: u64,
    ) -> Option<usize> {
        let mut signals: Vec<hsa_signal_t> = conditions.iter().map(|c| c.0).collect();
        let mut conds: Vec<hsa_signal_condition_t> = conditions.iter().map(|c| c.1).collect();
        let mut values: Vec<i64> = conditions.iter().map(|c| c.2).collect();
        let count = u32::try_from(conditions.len()).ok()?;
        // SAFETY: per the caller; three arrays of `count` entries, which the runtime only reads
        // (it takes them as non-const pointers); no satisfying value is asked for.
        let index = unsafe {
            (lib.hsa_amd_signal_wait_any)(
                count,
                signals.as_mut_ptr(),
                conds.as_mut_ptr(),
                values.as_mut_ptr(),
                timeout,
                HSA_WAIT_STATE_BLOCKED,
                std::ptr::null_mut(),
            )
        };
        usize::try_from(index)
            .ok()
            .filter(|&index| index < conditions.len())
    }

    /// The `amd_signal_t` ROCr keeps for `signal`: where its value lives and the event mailbox
    /// and id a device writes to wake a host thread waiting on it.
    ///
    /// # Safety
    /// `signal` must be live and come from ROCr (or a runtime with its layout), whose handles
    /// are the address of the signal's `amd_signal_t`.
    pub(crate) unsafe fn amd_signal(signal: hsa_signal_t) -> *mut amd_signal_t {
        signal.handle as usize as *mut amd_signal_t
    }

    /// # Safety
    /// `signal` must be live.
    pub(crate) unsafe fn signal_store_release(lib: &HsaLib, signal: hsa_signal_t, value: i64) {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_signal_store_screlease)(signal, value) }
    }

    /// # Safety
    /// `signal` must be live, destroyed once, and not waited on by anything afterwards.
    pub(crate) unsafe fn signal_destroy(
        lib: &HsaLib,
        signal: hsa_signal_t,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_signal_destroy)(signal) }.result(lib, "hsa_signal_destroy")
    }

    /// Starts a DMA copy of `len` bytes that decrements `done` when finished.
    ///
    /// # Safety
    /// `dst`/`src` must be valid for `len` bytes on their agents (device memory, or
    /// runtime-allocated or locked host memory) until `done` says the copy ended; `done` must be
    /// live until then.
    pub(crate) unsafe fn memory_async_copy(
        lib: &HsaLib,
        (dst, dst_agent): (*mut c_void, hsa_agent_t),
        (src, src_agent): (*const c_void, hsa_agent_t),
        len: usize,
        done: hsa_signal_t,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller; no dependencies.
        unsafe {
            (lib.hsa_amd_memory_async_copy)(
                dst,
                dst_agent,
                src,
                src_agent,
                len,
                0,
                std::ptr::null(),
                done,
            )
        }
        .result(lib, "hsa_amd_memory_async_copy")
    }

    /// A user-mode AQL queue of `size` packets on `agent`, with `callback` told about queue
    /// errors. It asks for no scratch up front: given no hint (`UINT32_MAX`), ROCr binds its
    /// default of 2 KiB per lane for every wavefront the GPU can hold to each new queue (about
    /// 1.3 GB on an MI300X), and a worker makes a queue per test slot; with 0 the first
    /// dispatch that needs scratch gets it, sized from its own private segment.
    ///
    /// # Safety
    /// `data` must stay valid for `callback` until the queue is destroyed.
    pub(crate) unsafe fn queue_create(
        lib: &HsaLib,
        agent: hsa_agent_t,
        size: u32,
        callback: hsa_queue_callback_t,
        data: *mut c_void,
    ) -> Result<*mut hsa_queue_t, HsaError> {
        let mut queue: *mut hsa_queue_t = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; `callback` and `data` per the caller; no private segment
        // expected (see above), u32::MAX for the group segment: no hint.
        unsafe {
            (lib.hsa_queue_create)(
                agent,
                size,
                HSA_QUEUE_TYPE_MULTI,
                callback,
                data,
                0,
                u32::MAX,
                &mut queue,
            )
        }
        .result(lib, "hsa_queue_create")?;
        Ok(queue)
    }

    /// # Safety
    /// `queue` must come from [`queue_create`], be destroyed once, and run nothing any more.
    pub(crate) unsafe fn queue_destroy(
        lib: &HsaLib,
        queue: *mut hsa_queue_t,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_queue_destroy)(queue) }.result(lib, "hsa_queue_destroy")
    }

    /// Turns on the packet processor's timestamps for every dispatch on `queue` from now on
    /// (ROCr checks the queue's flag as it processes each packet).
    ///
    /// # Safety
    /// `queue` must be live.
    pub(crate) unsafe fn queue_enable_profiling(
        lib: &HsaLib,
        queue: *mut hsa_queue_t,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller; 1 enables.
        unsafe { (lib.hsa_amd_profiling_set_profiler_enabled)(queue, 1) }
            .result(lib, "hsa_amd_profiling_set_profiler_enabled")
    }

    /// When a profiled dispatch started and completed, in system timestamp ticks, as its
    /// completion signal holds them (ROCr translates them from the GPU's clock).
    ///
    /// # Safety
    /// `signal` must be live and the completion signal of the last dispatch it served, which has
    /// completed, on a queue of `agent`.
    pub(crate) unsafe fn dispatch_time(
        lib: &HsaLib,
        agent: hsa_agent_t,
        signal: hsa_signal_t,
    ) -> Result<hsa_amd_profiling_dispatch_time_t, HsaError> {
        let mut time = hsa_amd_profiling_dispatch_time_t::default();
        // SAFETY: per the caller; a valid out-pointer.
        unsafe { (lib.hsa_amd_profiling_get_dispatch_time)(agent, signal, &mut time) }
            .result(lib, "hsa_amd_profiling_get_dispatch_time")?;
        Ok(time)
    }

    /// Reserves `count` packet slots; the first slot's index.
    ///
    /// # Safety
    /// `queue` must be live.
    pub(crate) unsafe fn queue_add_write_index(
        lib: &HsaLib,
        queue: *const hsa_queue_t,
        count: u64,
    ) -> u64 {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_queue_add_write_index_relaxed)(queue, count) }
    }

    /// # Safety
    /// `queue` must be live.
    pub(crate) unsafe fn queue_read_index(lib: &HsaLib, queue: *const hsa_queue_t) -> u64 {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_queue_load_read_index_scacquire)(queue) }
    }

    /// A reader over a code object in memory.
    ///
    /// # Safety
    /// `code_object` must outlive the reader.
    pub(crate) unsafe fn code_object_reader(
        lib: &HsaLib,
        code_object: &[u8],
    ) -> Result<hsa_code_object_reader_t, HsaError> {
        let mut reader = hsa_code_object_reader_t::default();
        // SAFETY: the bytes per the caller; a valid out-pointer.
        unsafe {
            (lib.hsa_code_object_reader_create_from_memory)(
                code_object.as_ptr().cast(),
                code_object.len(),
                &mut reader,
            )
        }
        .result(lib, "hsa_code_object_reader_create_from_memory")?;
        Ok(reader)
    }

    /// # Safety
    /// `reader` must come from [`code_object_reader`] and be destroyed once.
    pub(crate) unsafe fn code_object_reader_destroy(
        lib: &HsaLib,
        reader: hsa_code_object_reader_t,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_code_object_reader_destroy)(reader) }
            .result(lib, "hsa_code_object_reader_destroy")
    }

    /// An empty full-profile executable.
    pub(crate) fn executable_create(lib: &HsaLib) -> Result<hsa_executable_t, HsaError> {
        let mut executable = hsa_executable_t::default();
        // SAFETY: a valid out-pointer and an empty options string.
        unsafe {
            (lib.hsa_executable_create_alt)(
                HSA_PROFILE_FULL,
                HSA_DEFAULT_FLOAT_ROUNDING_MODE_ZERO,
                c"".as_ptr(),
                &mut executable,
            )
        }
        .result(lib, "hsa_executable_create_alt")?;
        Ok(executable)
    }

    /// Loads the reader's code object for `agent` into the executable.
    ///
    /// # Safety
    /// `executable` and `reader` must be live; the executable not frozen.
    pub(crate) unsafe fn executable_load_code_object(
        lib: &HsaLib,
        executable: hsa_executable_t,
        agent: hsa_agent_t,
        reader: hsa_code_object_reader_t,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller; empty options; the loaded-code-object handle is not wanted
        // (null is allowed).
        unsafe {
            (lib.hsa_executable_load_agent_code_object)(
                executable,
                agent,
                reader,
                c"".as_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result(lib, "hsa_executable_load_agent_code_object")
    }

    /// # Safety
    /// `executable` must be live.
    pub(crate) unsafe fn executable_freeze(
        lib: &HsaLib,
        executable: hsa_executable_t,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller; empty options.
        unsafe { (lib.hsa_executable_freeze)(executable, c"".as_ptr()) }
            .result(lib, "hsa_executable_freeze")
    }

    /// The validation result: 0 when the executable is valid for its agents.
    ///
    /// # Safety
    /// `executable` must be live.
    pub(crate) unsafe fn executable_validate(
        lib: &HsaLib,
        executable: hsa_executable_t,
    ) -> Result<u32, HsaError> {
        let mut problems = 0u32;
        // SAFETY: per the caller; a valid out-pointer.
        unsafe { (lib.hsa_executable_validate)(executable, &mut problems) }
            .result(lib, "hsa_executable_validate")?;
        Ok(problems)
    }

    /// # Safety
    /// `executable` must be live, destroyed once, and none of its kernels may run any more.
    pub(crate) unsafe fn executable_destroy(
        lib: &HsaLib,
        executable: hsa_executable_t,
    ) -> Result<(), HsaError> {
        // SAFETY: per the caller.
        unsafe { (lib.hsa_executable_destroy)(executable) }.result(lib, "hsa_executable_destroy")
    }

    /// The symbol `name` of the executable on `agent`; `None` when there is none.
    ///
    /// # Safety
    /// `executable` must be live.
    pub(crate) unsafe fn executable_symbol(
        lib: &HsaLib,
        executable: hsa_executable_t,
        name: &CStr,
        agent: hsa_agent_t,
    ) -> Result<Option<hsa_executable_symbol_t>, HsaError> {
        let mut symbol = hsa_executable_symbol_t::default();
        // SAFETY: per the caller; a NUL-terminated name, a valid out-pointer.
        let status = unsafe {
            (lib.hsa_executable_get_symbol_by_name)(executable, name.as_ptr(), &agent, &mut symbol)
        };
        if status == HSA_STATUS_ERROR_INVALID_SYMBOL_NAME {
            return Ok(None);
        }
        status.result(lib, "hsa_executable_get_symbol_by_name")?;
        Ok(Some(symbol))
    }

    /// A symbol attribute of plain type `T`.
    ///
    /// # Safety
    /// `symbol` must belong to a live executable; `attribute` must be documented with a value
    /// of type `T`.
    pub(crate) unsafe fn symbol_info<T: Default>(
        lib: &HsaLib,
        symbol: hsa_executable_symbol_t,
        attribute: hsa_executable_symbol_info_t,
    ) -> Result<T, HsaError> {
        let mut value = T::default();
        // SAFETY: per the caller, the attribute writes exactly a `T`.
        unsafe {
            (lib.hsa_executable_symbol_get_info)(symbol, attribute, (&mut value as *mut T).cast())
        }
        .result(lib, "hsa_executable_symbol_get_info")?;
        Ok(value)
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
        // AMD's statuses for a wave that faulted (hsa_ext_amd.h), by number.
        for (status, name) in [
            (41, "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"),
            (42, "HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION"),
            (43, "HSA_STATUS_ERROR_MEMORY_FAULT"),
            (44, "HSA_STATUS_CU_MASK_REDUCED"),
            (45, "HSA_STATUS_ERROR_OUT_OF_REGISTERS"),
            (46, "HSA_STATUS_ERROR_RESOURCE_BUSY"),
        ] {
            assert_eq!(
                describe_queue_error(status, None),
                format!("the GPU queue failed with {name}")
            );
        }
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
