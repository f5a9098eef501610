//! A fake `libcuda.so`: the driver functions gpurun-hal's CUDA backend calls (its
//! `cuda/driver.rs` `calls`), under the names cudarc's dynamic loading looks up (`_v2` where the
//! header maps to one). cudarc resolves each symbol on its first call, so only these are needed.
//!
//! The device: one `sm_90`, warp size 32, 80 GiB, 50 MiB of L2 cache, driver 12.8, unified
//! addressing. Device and
//! pinned memory are host memory (zeroed, 4 KiB aligned), so copies really copy. A module's
//! globals and kernels come from its PTX (`.global` and `.entry` declarations; a cubin has none).
//! A launch records its shape and parameter bytes; its stream then answers `cuStreamQuery` with
//! `CUDA_ERROR_NOT_READY` for a while (the kernel "runs"), then success or the chosen fault.
//! An event recorded on a stream completes with the stream's work before it: until then
//! `cuEventElapsedTime` answers `CUDA_ERROR_NOT_READY`, after a fault the fault, and once both
//! events completed the time [`ELAPSED_MS_ENV`] names.
//!
//! Rules of the real driver that the fake enforces, so a backend that breaks them fails here:
//! - A launch's parameter buffer (`CU_LAUNCH_PARAM_BUFFER_SIZE`) must end at the kernel's last
//!   parameter, as declared in the PTX: a size with the struct's tail padding fails with
//!   `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` ("too many resources requested for launch"), a short
//!   one with `CUDA_ERROR_INVALID_VALUE`.
//! - A copy to the device is ordered only on its own stream: a `cuMemcpyHtoD` (the legacy
//!   stream) or a `cuMemcpyHtoDAsync` on another stream that no `cuStreamSynchronize` of that
//!   stream has completed may still be in flight when a kernel on a non-blocking stream starts.
//!   Such a launch is refused with `CUDA_ERROR_ILLEGAL_STATE`, naming the copy in the log.
//!
//! Set by the test (all optional):
//! - [`FAIL_ENV`]: `cuCtxSetLimit=CUDA_ERROR_INVALID_VALUE,...`: those functions fail with that
//!   status, doing nothing else (a failed `cuModuleLoadDataEx` writes a line to the JIT error
//!   log, as ptxas would).
//! - [`RUNNING_QUERIES_ENV`]: how many `cuStreamQuery` calls a launched kernel runs for (0).
//! - [`KERNEL_FAULT_ENV`]: the status a kernel ends with instead of success (sticky, as a real
//!   fault is).
//! - [`MEMORY_POOLS_ENV`]: `1` if the device supports memory pools (`cuMemAllocAsync`).
//! - [`MAX_THREADS_ENV`]: each kernel's `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK` (1024).
//! - [`ELAPSED_MS_ENV`]: the milliseconds `cuEventElapsedTime` answers (`0.25`).
//! - [`STATIC_SHARED_ENV`]: each kernel's static shared memory, `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`
//!   (0).
//! - [`LOCAL_BYTES_ENV`]: `kernel=bytes,...`: kernels' `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES` (their
//!   static frames; 0 for any other).
//! - [`MEMORY_MIB_ENV`]: the device's memory in MiB (80 GiB).
//!
//! The primary context is counted as the real driver counts it: retained, released, and made
//! again by the first retain after the last release. Its stack limit (`CU_LIMIT_STACK_SIZE`,
//! `cuCtxGetLimit`/`cuCtxSetLimit`) starts at the driver's 1024 bytes each time it is made, as on
//! an H200. The device holds 132 multiprocessors of 2048 threads.
//!
//! Shared memory as an H100 has it: 48 KiB per block by default
//! (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK`), 227 KiB once a kernel opts in
//! (`..._OPTIN`). Each kernel's `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` starts at 48 KiB
//! less its static shared memory; `cuFuncSetAttribute` raises it up to the opt-in limit, and a
//! launch asking for more dynamic shared memory than it allows fails with
//! `CUDA_ERROR_INVALID_VALUE`, as the real driver's does. `cuMemsetD8Async` is ordered on its
//! stream as a copy is.

// The exported functions are the CUDA driver API: its documentation is their contract.
#![allow(clippy::missing_safety_doc, non_snake_case)]

use crate::record::{hex, record, setting_u64};
use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUevent, CUevent_flags, CUfunction,
    CUfunction_attribute, CUjit_option, CUlimit, CUmodule, CUresult, CUstream, CUstream_flags,
};
use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

pub const FAIL_ENV: &str = "GPURUN_FAKE_CUDA_FAIL";
pub const RUNNING_QUERIES_ENV: &str = "GPURUN_FAKE_CUDA_RUNNING_QUERIES";
pub const KERNEL_FAULT_ENV: &str = "GPURUN_FAKE_CUDA_KERNEL_FAULT";
pub const MEMORY_POOLS_ENV: &str = "GPURUN_FAKE_CUDA_MEMORY_POOLS";
pub const MAX_THREADS_ENV: &str = "GPURUN_FAKE_CUDA_MAX_THREADS";
pub const ELAPSED_MS_ENV: &str = "GPURUN_FAKE_CUDA_ELAPSED_MS";
pub const STATIC_SHARED_ENV: &str = "GPURUN_FAKE_CUDA_STATIC_SHARED";
pub const LOCAL_BYTES_ENV: &str = "GPURUN_FAKE_CUDA_LOCAL_BYTES";
pub const MEMORY_MIB_ENV: &str = "GPURUN_FAKE_CUDA_MEMORY_MIB";

/// The stack limit of a newly made primary context, as the real driver sets it.
pub const DEFAULT_STACK_LIMIT: usize = 1024;

/// The L2 cache's size in bytes (an H100's 50 MiB), what a flush writes over.
pub const L2_CACHE_BYTES: i32 = 50 * 1024 * 1024;

/// Shared memory per block without and with a kernel's opt-in (an H100's).
pub const SHARED_PER_BLOCK: i32 = 48 * 1024;
pub const SHARED_PER_BLOCK_OPTIN: i32 = 227 * 1024;

/// The one device's primary context.
const CONTEXT: usize = 0xc000;
/// What the JIT error log says when a load is made to fail.
pub const JIT_ERROR_TEXT: &str = "ptxas fatal   : failure chosen by the fake driver";

/// Statuses a test may name in [`FAIL_ENV`] or [`KERNEL_FAULT_ENV`].
const NAMED_STATUSES: [CUresult; 17] = [
    CUresult::CUDA_ERROR_INVALID_VALUE,
    CUresult::CUDA_ERROR_OUT_OF_MEMORY,
    CUresult::CUDA_ERROR_NOT_INITIALIZED,
    CUresult::CUDA_ERROR_NO_DEVICE,
    CUresult::CUDA_ERROR_INVALID_DEVICE,
    CUresult::CUDA_ERROR_INVALID_IMAGE,
    CUresult::CUDA_ERROR_INVALID_CONTEXT,
    CUresult::CUDA_ERROR_INVALID_PTX,
    CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
    CUresult::CUDA_ERROR_NOT_FOUND,
    CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
    CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
    CUresult::CUDA_ERROR_LAUNCH_FAILED,
    CUresult::CUDA_ERROR_LAUNCH_TIMEOUT,
    CUresult::CUDA_ERROR_ASSERT,
    CUresult::CUDA_ERROR_UNKNOWN,
    CUresult::CUDA_ERROR_STUB_LIBRARY,
];

/// The status called `name`; an unknown name is recorded and reads as `CUDA_ERROR_UNKNOWN`, so
/// a mistyped test setting shows in the log.
fn status_named(name: &str) -> CUresult {
    NAMED_STATUSES
        .into_iter()
        .find(|status| format!("{status:?}") == name)
        .unwrap_or_else(|| {
            record(&format!("fake driver: unknown status `{name}`"));
            CUresult::CUDA_ERROR_UNKNOWN
        })
}

/// The failure [`FAIL_ENV`] chooses for `function`, if any.
fn chosen_failure(function: &str) -> Option<CUresult> {
    crate::record::chosen_failure(FAIL_ENV, function, status_named)
}

/// Each kernel's static shared memory ([`STATIC_SHARED_ENV`]).
fn static_shared() -> i32 {
    i32::try_from(setting_u64(STATIC_SHARED_ENV, 0)).unwrap_or(0)
}

/// The static frame [`LOCAL_BYTES_ENV`] gives `kernel`.
fn local_bytes(kernel: &str) -> i32 {
    let setting = std::env::var(LOCAL_BYTES_ENV).unwrap_or_default();
    setting
        .split(',')
        .filter_map(|entry| entry.trim().split_once('='))
        .find(|(name, _)| *name == kernel)
        .and_then(|(_, bytes)| bytes.trim().parse().ok())
        .unwrap_or(0)
}

/// The dynamic shared memory `function` may launch with.
fn dynamic_shared_allowed(state: &State, function: usize) -> i32 {
    state
        .dynamic_shared
        .get(&function)
        .copied()
        .unwrap_or(SHARED_PER_BLOCK - static_shared())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BlockKind {
    Device,
    PinnedHost,
    Global,
}

/// Memory handed out as device or pinned memory, or backing a module's global.
struct Block {
    len: usize,
    layout: Layout,
    kind: BlockKind,
    /// A global's name, shown in the log of copies to it.
    name: Option<String>,
}

struct Module {
    globals: HashMap<String, (u64, usize)>,
    /// Kernels (`.entry`) and their parameter bytes; `None` for a cubin (every name is found,
    /// any parameter size is taken).
    entries: Option<HashMap<String, usize>>,
}

/// A copy to the device that may still be in flight.
struct PendingCopy {
    /// The stream it is ordered on; 0 for the legacy stream.
    stream: usize,
    /// Where it went, as the log names it.
    place: String,
}

#[derive(Default)]
struct Stream {
    /// Created with `CU_STREAM_NON_BLOCKING`: not ordered after the legacy stream.
    non_blocking: bool,
    /// `cuStreamQuery` calls left before the running kernel ends.
    running: u64,
    /// How the last kernel ended, once it has: a sticky fault.
    fault: Option<CUresult>,
}

/// An event and where it was last recorded.
struct Event {
    /// Created without `CU_EVENT_DISABLE_TIMING`.
    timing: bool,
    /// The stream it was last recorded on.
    recorded_on: Option<usize>,
}

#[derive(Default)]
struct State {
    next_handle: usize,
    /// Retains of the primary context not yet released.
    primary_retains: u32,
    /// The primary context's stack limit; `None` until set in the context made last.
    stack_limit: Option<usize>,
    events: HashMap<usize, Event>,
    blocks: BTreeMap<u64, Block>,
    modules: HashMap<usize, Module>,
    /// Each function handle's kernel name and, from PTX, its parameter bytes.
    functions: HashMap<usize, (String, Option<usize>)>,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` of the functions it was set for.
    dynamic_shared: HashMap<usize, i32>,
    streams: HashMap<usize, Stream>,
    pending_copies: Vec<PendingCopy>,
    error_names: HashMap<CUresult, &'static CStr>,
}

impl State {
    fn handle(&mut self) -> usize {
        self.next_handle += 1;
        0x10_0000 + self.next_handle * 0x100
    }

    /// Zeroed memory of `len` bytes (at least 1); its address.
    fn allocate(&mut self, len: usize, kind: BlockKind, name: Option<String>) -> Option<u64> {
        let layout = Layout::from_size_align(len.max(1), 4096).ok()?;
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        if pointer.is_null() {
            return None;
        }
        let address = pointer as u64;
        self.blocks.insert(
            address,
            Block {
                len,
                layout,
                kind,
                name,
            },
        );
        Some(address)
    }

    /// Frees the block of `kind` starting at `address`; false if there is none.
    fn release(&mut self, address: u64, kind: BlockKind) -> bool {
        match self.blocks.get(&address) {
            Some(block) if block.kind == kind => {}
            _ => return false,
        }
        if let Some(block) = self.blocks.remove(&address) {
            // SAFETY: allocated by `allocate` with this layout, removed from the table so freed
            // once.
            unsafe { std::alloc::dealloc(address as *mut u8, block.layout) };
        }
        true
    }

    /// Whether `len` bytes at `address` lie inside one block, and how the log names the spot.
    fn locate(&self, address: u64, len: usize) -> Option<String> {
        let (&start, block) = self.blocks.range(..=address).next_back()?;
        let offset = address - start;
        if offset.checked_add(len as u64)? > block.len as u64 {
            return None;
        }
        Some(match &block.name {
            Some(name) if offset == 0 => name.clone(),
            Some(name) => format!("{name}+{offset}"),
            None => format!("{:?}+{offset}", block.kind),
        })
    }
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs one driver function: the chosen failure, else `body`; records `function details ->
/// status`.
fn call(function: &str, details: String, body: impl FnOnce() -> CUresult) -> CUresult {
    let status = chosen_failure(function).unwrap_or_else(body);
    record(&format!("{function} {details} -> {status:?}"));
    status
}

/// Stores `value` through the out-pointer `out`.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T) -> CUresult {
    if out.is_null() {
        return CUresult::CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null, and valid per the caller.
    unsafe { out.write(value) };
    CUresult::CUDA_SUCCESS
}

fn handle_of<T>(pointer: *mut T) -> usize {
    pointer as usize
}

fn pointer_of<T>(handle: usize) -> *mut T {
    handle as *mut T
}

/// Names with a byte count: a global's size, a kernel's parameter bytes.
pub type NamedSizes = Vec<(String, usize)>;

/// The `.global` variables (name, bytes) and `.entry` kernels (name, parameter bytes) of PTX
/// text.
pub fn ptx_symbols(ptx: &str) -> (NamedSizes, NamedSizes) {
    let (mut globals, mut entries) = (Vec::new(), Vec::new());
    let lines: Vec<&str> = ptx
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default().trim())
        .collect();
    for (at_line, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(at) = words.iter().position(|word| *word == ".entry") {
            if let Some(name) = words.get(at + 1) {
                let name = name.split('(').next().unwrap_or(name).to_owned();
                entries.push((name, entry_param_bytes(&lines[at_line..])));
            }
            continue;
        }
        if !words.contains(&".global") || words.contains(&".extern") {
            continue;
        }
        let declaration = line.split(['=', ';']).next().unwrap_or_default();
        if let Some((name, size)) = variable(declaration) {
            globals.push((name, size));
        }
    }
    (globals, entries)
}

/// Element size of a PTX type word (`.u32` -> 4).
fn element_size(word: &str) -> Option<usize> {
    match word {
        ".b8" | ".u8" | ".s8" => Some(1),
        ".b16" | ".u16" | ".s16" | ".f16" => Some(2),
        ".b32" | ".u32" | ".s32" | ".f32" => Some(4),
        ".b64" | ".u64" | ".s64" | ".f64" => Some(8),
        _ => None,
    }
}

/// `(name, bytes)` of a declaration like `.global .align 4 .b32 words[3]`.
fn variable(declaration: &str) -> Option<(String, usize)> {
    let words: Vec<&str> = declaration.split_whitespace().collect();
    let element = words.iter().find_map(|word| element_size(word))?;
    let last = words.last()?;
    let (name, count) = match last.split_once('[') {
        Some((name, rest)) => (name, rest.trim_end_matches(']').parse().unwrap_or(1)),
        None => (*last, 1usize),
    };
    Some((name.to_owned(), element * count))
}

/// The parameter bytes of the `.entry` starting at `lines[0]`, as the driver counts them: the
/// end of the last parameter, each at its alignment (`.align N`, else its element size), with no
/// padding after it.
fn entry_param_bytes(lines: &[&str]) -> usize {
    let mut header = String::new();
    for line in lines {
        header.push_str(line);
        header.push(' ');
        if line.contains(')') || line.contains('{') {
            break;
        }
    }
    let Some(list) = header
        .split_once('(')
        .and_then(|(_, rest)| rest.split(')').next())
    else {
        return 0;
    };
    let mut end = 0usize;
    for param in list.split(',').filter(|param| param.contains(".param")) {
        let words: Vec<&str> = param.split_whitespace().collect();
        let Some((_, size)) = variable(param) else {
            continue;
        };
        let type_at = words
            .iter()
            .position(|word| element_size(word).is_some())
            .unwrap_or(0);
        let element = element_size(words[type_at]).unwrap_or(1);
        // Only an `.align` before the type aligns the parameter (after `.ptr` it is the
        // pointee's).
        let align = words[..type_at]
            .iter()
            .position(|word| *word == ".align")
            .and_then(|at| words.get(at + 1)?.parse().ok())
            .unwrap_or(element);
        end = end.next_multiple_of(align.max(1)) + size;
    }
    end
}

/// How the driver answers a parameter buffer of `given` bytes for a kernel that takes
/// `expected`: exactly that many, or the error the real driver gives.
pub fn parameter_size_status(expected: usize, given: usize) -> CUresult {
    match given.cmp(&expected) {
        std::cmp::Ordering::Equal => CUresult::CUDA_SUCCESS,
        // What a struct's tail padding gets from the real driver.
        std::cmp::Ordering::Greater => CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,
        std::cmp::Ordering::Less => CUresult::CUDA_ERROR_INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    // The driver reads its loading mode here; recording it shows what the worker set.
    let loading = std::env::var("CUDA_MODULE_LOADING").unwrap_or_else(|_| "unset".into());
    call(
        "cuInit",
        format!("flags={flags} CUDA_MODULE_LOADING={loading}"),
        || CUresult::CUDA_SUCCESS,
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> CUresult {
    // SAFETY: an out-pointer per the API.
    call("cuDriverGetVersion", String::new(), || unsafe {
        put(version, 12080)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    // SAFETY: an out-pointer per the API.
    call("cuDeviceGetCount", String::new(), || unsafe {
        put(count, 1)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    call("cuDeviceGet", format!("ordinal={ordinal}"), || {
        if ordinal != 0 {
            return CUresult::CUDA_ERROR_INVALID_DEVICE;
        }
        // SAFETY: an out-pointer per the API.
        unsafe { put(device, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(
    name: *mut c_char,
    len: c_int,
    device: CUdevice,
) -> CUresult {
    call("cuDeviceGetName", format!("device={device}"), || {
        let text = b"Fake CUDA device (gpurun-fake-driver)\0";
        let Ok(len) = usize::try_from(len) else {
            return CUresult::CUDA_ERROR_INVALID_VALUE;
        };
        if name.is_null() || len == 0 {
            return CUresult::CUDA_ERROR_INVALID_VALUE;
        }
        let count = text.len().min(len);
        // SAFETY: the caller's buffer holds `len` bytes; the last byte written is a NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast(), name, count);
            name.add(count - 1).write(0);
        }
        CUresult::CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    which: CUdevice_attribute,
    device: CUdevice,
) -> CUresult {
    use CUdevice_attribute as A;
    call(
        "cuDeviceGetAttribute",
        format!("{which:?} device={device}"),
        || {
            let answer = match which {
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => 9,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => 0,
                A::CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
                A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => 132,
                A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => 2048,
                A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK => SHARED_PER_BLOCK,
                A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => SHARED_PER_BLOCK_OPTIN,
                A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE => L2_CACHE_BYTES,
                A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => {
                    i32::from(setting_u64(MEMORY_POOLS_ENV, 0) != 0)
                }
                _ => 0,
            };
            // SAFETY: an out-pointer per the API.
            unsafe { put(value, answer) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, device: CUdevice) -> CUresult {
    call("cuDeviceTotalMem", format!("device={device}"), || {
        let bytes_total = setting_u64(MEMORY_MIB_ENV, 80 << 10) << 20;
        // SAFETY: an out-pointer per the API.
        unsafe { put(bytes, usize::try_from(bytes_total).unwrap_or(usize::MAX)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(
    context: *mut CUcontext,
    device: CUdevice,
) -> CUresult {
    call(
        "cuDevicePrimaryCtxRetain",
        format!("device={device}"),
        || {
            // SAFETY: an out-pointer per the API.
            let status = unsafe { put(context, pointer_of(CONTEXT)) };
            if status == CUresult::CUDA_SUCCESS {
                state().primary_retains += 1;
            }
            status
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CUresult {
    call(
        "cuDevicePrimaryCtxRelease",
        format!("device={device}"),
        || {
            let mut state = state();
            let Some(retains) = state.primary_retains.checked_sub(1) else {
                return CUresult::CUDA_ERROR_INVALID_CONTEXT;
            };
            state.primary_retains = retains;
            if retains == 0 {
                // The context is destroyed; the next retain makes a new one, with the
                // driver's limits.
                state.stack_limit = None;
            }
            CUresult::CUDA_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(context: CUcontext) -> CUresult {
    let handle = handle_of(context);
    call("cuCtxSetCurrent", format!("context={handle:#x}"), || {
        if handle == CONTEXT || handle == 0 {
            CUresult::CUDA_SUCCESS
        } else {
            CUresult::CUDA_ERROR_INVALID_CONTEXT
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: CUlimit) -> CUresult {
    let answer = match limit {
        CUlimit::CU_LIMIT_STACK_SIZE => state().stack_limit.unwrap_or(DEFAULT_STACK_LIMIT),
        _ => 0,
    };
    // SAFETY: an out-pointer per the API.
    call(
        "cuCtxGetLimit",
        format!("{limit:?} value={answer}"),
        || unsafe { put(value, answer) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: CUlimit, value: usize) -> CUresult {
    call("cuCtxSetLimit", format!("{limit:?} value={value}"), || {
        if limit == CUlimit::CU_LIMIT_STACK_SIZE {
            state().stack_limit = Some(value);
        }
        CUresult::CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(status: CUresult, text: *mut *const c_char) -> CUresult {
    call("cuGetErrorName", format!("{status:?}"), || {
        let name = *state().error_names.entry(status).or_insert_with(|| {
            let owned = CString::new(format!("{status:?}")).unwrap_or_default();
            Box::leak(owned.into_boxed_c_str())
        });
        // SAFETY: an out-pointer per the API; the string is leaked, so static.
        unsafe { put(text, name.as_ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(status: CUresult, text: *mut *const c_char) -> CUresult {
    call("cuGetErrorString", format!("{status:?}"), || {
        let description = c"reported by the fake CUDA driver";
        // SAFETY: an out-pointer per the API; the string is static.
        unsafe { put(text, description.as_ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CUresult {
    call("cuStreamCreate", format!("flags={flags}"), || {
        let mut state = state();
        let handle = state.handle();
        let non_blocking = flags & CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint != 0;
        state.streams.insert(
            handle,
            Stream {
                non_blocking,
                ..Stream::default()
            },
        );
        // SAFETY: an out-pointer per the API.
        unsafe { put(stream, pointer_of(handle)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: CUstream) -> CUresult {
    let handle = handle_of(stream);
    call(
        "cuStreamDestroy",
        format!("stream={handle:#x}"),
        || match state().streams.remove(&handle) {
            Some(_) => CUresult::CUDA_SUCCESS,
            None => CUresult::CUDA_ERROR_INVALID_HANDLE,
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(stream: CUstream) -> CUresult {
    let handle = handle_of(stream);
    call("cuStreamQuery", format!("stream={handle:#x}"), || {
        let mut state = state();
        let Some(stream) = state.streams.get_mut(&handle) else {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        };
        if stream.running > 0 {
            stream.running -= 1;
            return CUresult::CUDA_ERROR_NOT_READY;
        }
        stream.fault.unwrap_or(CUresult::CUDA_SUCCESS)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: CUstream) -> CUresult {
    let handle = handle_of(stream);
    call("cuStreamSynchronize", format!("stream={handle:#x}"), || {
        let mut state = state();
        let Some(stream) = state.streams.get_mut(&handle) else {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        };
        stream.running = 0;
        let status = stream.fault.unwrap_or(CUresult::CUDA_SUCCESS);
        state.pending_copies.retain(|copy| copy.stream != handle);
        status
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CUresult {
    call("cuEventCreate", format!("flags={flags}"), || {
        let mut state = state();
        let handle = state.handle();
        let timing = flags & CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint == 0;
        state.events.insert(
            handle,
            Event {
                timing,
                recorded_on: None,
            },
        );
        // SAFETY: an out-pointer per the API.
        unsafe { put(event, pointer_of(handle)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: CUevent, stream: CUstream) -> CUresult {
    let (event, stream) = (handle_of(event), handle_of(stream));
    call(
        "cuEventRecord",
        format!("event={event:#x} stream={stream:#x}"),
        || {
            let mut state = state();
            if stream != 0 && !state.streams.contains_key(&stream) {
                return CUresult::CUDA_ERROR_INVALID_HANDLE;
            }
            let Some(recorded) = state.events.get_mut(&event) else {
                return CUresult::CUDA_ERROR_INVALID_HANDLE;
            };
            recorded.recorded_on = Some(stream);
            CUresult::CUDA_SUCCESS
        },
    )
}

/// How `cuEventElapsedTime` answers for an event: an error, or `None` once it has completed.
fn event_status(state: &State, event: usize) -> Option<CUresult> {
    let Some(Event {
        timing: true,
        recorded_on: Some(stream),
    }) = state.events.get(&event)
    else {
        // Unknown, created without timing, or never recorded.
        return Some(CUresult::CUDA_ERROR_INVALID_HANDLE);
    };
    let stream = state.streams.get(stream)?;
    if let Some(fault) = stream.fault.filter(|_| stream.running == 0) {
        return Some(fault);
    }
    (stream.running > 0).then_some(CUresult::CUDA_ERROR_NOT_READY)
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(
    milliseconds: *mut f32,
    start: CUevent,
    stop: CUevent,
) -> CUresult {
    let (start, stop) = (handle_of(start), handle_of(stop));
    let streams = {
        let state = state();
        let stream_of = |event| {
            state
                .events
                .get(&event)
                .and_then(|event: &Event| event.recorded_on)
                .map_or_else(|| "none".to_owned(), |stream| format!("{stream:#x}"))
        };
        format!(
            "start_stream={} stop_stream={}",
            stream_of(start),
            stream_of(stop)
        )
    };
    call(
        "cuEventElapsedTime",
        format!("start={start:#x} stop={stop:#x} {streams}"),
        || {
            let state = state();
            if let Some(status) = event_status(&state, start).or(event_status(&state, stop)) {
                return status;
            }
            let told = std::env::var(ELAPSED_MS_ENV)
                .ok()
                .and_then(|value| value.trim().parse().ok())
                .unwrap_or(0.25f32);
            // SAFETY: an out-pointer per the API.
            unsafe { put(milliseconds, told) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: CUevent) -> CUresult {
    let event = handle_of(event);
    call(
        "cuEventDestroy",
        format!("event={event:#x}"),
        || match state().events.remove(&event) {
            Some(_) => CUresult::CUDA_SUCCESS,
            None => CUresult::CUDA_ERROR_INVALID_HANDLE,
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut CUmodule,
    image: *const c_void,
    option_count: c_uint,
    options: *mut CUjit_option,
    values: *mut *mut c_void,
) -> CUresult {
    if image.is_null() {
        return call("cuModuleLoadDataEx", "image=null".into(), || {
            CUresult::CUDA_ERROR_INVALID_VALUE
        });
    }
    let count = option_count as usize;
    let (options, values) = if count == 0 || options.is_null() || values.is_null() {
        (&[][..], &[][..])
    } else {
        // SAFETY: the API passes `option_count` options and values.
        unsafe {
            (
                std::slice::from_raw_parts(options, count),
                std::slice::from_raw_parts(values, count),
            )
        }
    };
    // SAFETY: `image` points at a cubin (an ELF header, at least 4 bytes) or NUL-terminated PTX.
    let is_cubin = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), 4) } == b"\x7fELF";
    let ptx = if is_cubin {
        None
    } else {
        // SAFETY: PTX is NUL-terminated, per the API.
        Some(unsafe { CStr::from_ptr(image.cast()) }.to_string_lossy())
    };
    let what = match &ptx {
        Some(text) => format!("ptx_bytes={}", text.len()),
        None => "cubin".to_owned(),
    };
    let option_names: Vec<String> = options.iter().map(|o| format!("{o:?}")).collect();
    let details = format!("{what} options=[{}]", option_names.join(","));
    if let Some(status) = chosen_failure("cuModuleLoadDataEx") {
        write_jit_error_log(options, values);
        record(&format!("cuModuleLoadDataEx {details} -> {status:?}"));
        return status;
    }
    call("cuModuleLoadDataEx", details, || {
        let mut state = state();
        let handle = state.handle();
        let mut loaded = Module {
            globals: HashMap::new(),
            entries: None,
        };
        if let Some(ptx) = &ptx {
            let (globals, entries) = ptx_symbols(ptx);
            for (name, size) in globals {
                let Some(address) = state.allocate(size, BlockKind::Global, Some(name.clone()))
                else {
                    return CUresult::CUDA_ERROR_OUT_OF_MEMORY;
                };
                loaded.globals.insert(name, (address, size));
            }
            loaded.entries = Some(entries.into_iter().collect());
        }
        state.modules.insert(handle, loaded);
        // SAFETY: an out-pointer per the API.
        unsafe { put(module, pointer_of(handle)) }
    })
}

/// Writes [`JIT_ERROR_TEXT`] into the error log buffer among the JIT options, if there is one.
fn write_jit_error_log(options: &[CUjit_option], values: &[*mut c_void]) {
    let find = |wanted| options.iter().position(|&option| option == wanted);
    let (Some(buffer), Some(size)) = (
        find(CUjit_option::CU_JIT_ERROR_LOG_BUFFER),
        find(CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES),
    ) else {
        return;
    };
    // Integer option values travel in the pointer slot itself.
    let size = values[size] as usize;
    let buffer = values[buffer].cast::<u8>();
    if buffer.is_null() || size == 0 {
        return;
    }
    let count = JIT_ERROR_TEXT.len().min(size - 1);
    // SAFETY: the caller passed a buffer of `size` bytes; `count + 1 <= size`.
    unsafe {
        std::ptr::copy_nonoverlapping(JIT_ERROR_TEXT.as_ptr(), buffer, count);
        buffer.add(count).write(0);
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(module: CUmodule) -> CUresult {
    let handle = handle_of(module);
    call("cuModuleUnload", format!("module={handle:#x}"), || {
        let mut state = state();
        let Some(unloaded) = state.modules.remove(&handle) else {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        };
        for (address, _) in unloaded.globals.into_values() {
            state.release(address, BlockKind::Global);
        }
        CUresult::CUDA_SUCCESS
    })
}

/// The name at `name`, or `None` for a null pointer.
///
/// # Safety
/// `name` must be null or a NUL-terminated string.
unsafe fn name_at(name: *const c_char) -> Option<String> {
    if name.is_null() {
        return None;
    }
    // SAFETY: non-null, so NUL-terminated per the caller.
    let text = unsafe { CStr::from_ptr(name) };
    Some(text.to_string_lossy().into_owned())
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    address: *mut CUdeviceptr,
    bytes: *mut usize,
    module: CUmodule,
    name: *const c_char,
) -> CUresult {
    // SAFETY: a NUL-terminated name per the API.
    let name = unsafe { name_at(name) }.unwrap_or_default();
    let handle = handle_of(module);
    call("cuModuleGetGlobal", format!("name={name}"), || {
        let state = state();
        let Some(module) = state.modules.get(&handle) else {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        };
        let Some(&(start, size)) = module.globals.get(&name) else {
            return CUresult::CUDA_ERROR_NOT_FOUND;
        };
        // SAFETY: out-pointers per the API (either may be null: not wanted).
        unsafe {
            let _ = put(address, start);
            let _ = put(bytes, size);
        }
        CUresult::CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    function: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CUresult {
    // SAFETY: a NUL-terminated name per the API.
    let name = unsafe { name_at(name) }.unwrap_or_default();
    let handle = handle_of(module);
    call("cuModuleGetFunction", format!("name={name}"), || {
        let mut state = state();
        let Some(module) = state.modules.get(&handle) else {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        };
        let params = match &module.entries {
            Some(entries) => match entries.get(&name) {
                Some(&bytes) => Some(bytes),
                None => return CUresult::CUDA_ERROR_NOT_FOUND,
            },
            None => None,
        };
        let handle = state.handle();
        state.functions.insert(handle, (name.clone(), params));
        // SAFETY: an out-pointer per the API.
        unsafe { put(function, pointer_of(handle)) }
    })
}

/// [`call`] for an API on a function handle: recorded with `details` and the function's entry
/// name; `body` gets the handle, and a handle this driver never gave out is
/// `CUDA_ERROR_INVALID_HANDLE`.
fn call_on_function(
    api: &str,
    function: CUfunction,
    details: String,
    body: impl FnOnce(usize) -> CUresult,
) -> CUresult {
    let handle = handle_of(function);
    let name = state()
        .functions
        .get(&handle)
        .map(|(name, _)| name.clone())
        .unwrap_or_default();
    call(api, format!("{details} function={name}"), || {
        if name.is_empty() {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        }
        body(handle)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    value: *mut c_int,
    which: CUfunction_attribute,
    function: CUfunction,
) -> CUresult {
    use CUfunction_attribute as A;
    call_on_function(
        "cuFuncGetAttribute",
        function,
        format!("{which:?}"),
        |handle| {
            let answer = match which {
                A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => {
                    i32::try_from(setting_u64(MAX_THREADS_ENV, 1024)).unwrap_or(1024)
                }
                A::CU_FUNC_ATTRIBUTE_NUM_REGS => 64,
                A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES => {
                    let state = state();
                    let name = state.functions.get(&handle).map(|(name, _)| name.as_str());
                    local_bytes(name.unwrap_or_default())
                }
                A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES => static_shared(),
                A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                    dynamic_shared_allowed(&state(), handle)
                }
                _ => 0,
            };
            // SAFETY: an out-pointer per the API.
            unsafe { put(value, answer) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(
    function: CUfunction,
    which: CUfunction_attribute,
    value: c_int,
) -> CUresult {
    use CUfunction_attribute as A;
    call_on_function(
        "cuFuncSetAttribute",
        function,
        format!("{which:?} value={value}"),
        |handle| match which {
            A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                if value < 0 || value > SHARED_PER_BLOCK_OPTIN - static_shared() {
                    return CUresult::CUDA_ERROR_INVALID_VALUE;
                }
                state().dynamic_shared.insert(handle, value);
                CUresult::CUDA_SUCCESS
            }
            _ => CUresult::CUDA_ERROR_INVALID_VALUE,
        },
    )
}

/// The parameter buffer passed through `extra` (`CU_LAUNCH_PARAM_BUFFER_POINTER` and `_SIZE`).
///
/// # Safety
/// `extra` must be null or a `CU_LAUNCH_PARAM_END`-terminated list of key/value pairs.
unsafe fn parameter_bytes(extra: *mut *mut c_void) -> Option<Vec<u8>> {
    let (mut buffer, mut size): (*const u8, Option<usize>) = (std::ptr::null(), None);
    let mut at = 0;
    while !extra.is_null() {
        // SAFETY: the list is terminated by its END key, read before anything past it.
        let key = unsafe { *extra.add(at) } as usize;
        if key == 0 {
            break;
        }
        // SAFETY: every key but END is followed by its value.
        let value = unsafe { *extra.add(at + 1) };
        match key {
            1 => buffer = value.cast(),
            // SAFETY: the size key's value points at a `size_t`.
            2 if !value.is_null() => size = Some(unsafe { *value.cast::<usize>() }),
            _ => {}
        }
        at += 2;
    }
    let size = size?;
    if buffer.is_null() {
        return None;
    }
    // SAFETY: the buffer holds `size` bytes, per the API.
    Some(unsafe { std::slice::from_raw_parts(buffer, size) }.to_vec())
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    function: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: CUstream,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let (function, stream) = (handle_of(function), handle_of(stream));
    let (name, expected_params) = state()
        .functions
        .get(&function)
        .cloned()
        .unwrap_or_default();
    // SAFETY: `extra` per the API.
    let params = unsafe { parameter_bytes(extra) };
    let given = params.as_ref().map_or(0, Vec::len);
    let state_now = state();
    // A blocking stream is ordered after the legacy stream; a non-blocking one is not.
    let after_legacy = state_now
        .streams
        .get(&stream)
        .is_some_and(|launched_on| !launched_on.non_blocking);
    let unordered: Vec<String> = state_now
        .pending_copies
        .iter()
        .filter(|copy| copy.stream != stream && !(copy.stream == 0 && after_legacy))
        .map(|copy| match copy.stream {
            0 => format!("{} on the legacy stream", copy.place),
            other => format!("{} on stream {other:#x}", copy.place),
        })
        .collect();
    drop(state_now);
    let details = format!(
        "function={name} grid={grid_x}x{grid_y}x{grid_z} block={block_x}x{block_y}x{block_z} \
         shared={shared_bytes} stream={stream:#x} params={}{}",
        params.as_deref().map_or_else(|| "none".into(), hex),
        if kernel_params.is_null() {
            ""
        } else {
            " kernel_params=set"
        }
    );
    let details = if unordered.is_empty() {
        details
    } else {
        format!("{details} unordered_copies=[{}]", unordered.join(","))
    };
    call("cuLaunchKernel", details, || {
        let mut state = state();
        if name.is_empty() {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        }
        if let Some(expected) = expected_params {
            let status = parameter_size_status(expected, given);
            if status != CUresult::CUDA_SUCCESS {
                return status;
            }
        }
        if !unordered.is_empty() {
            return CUresult::CUDA_ERROR_ILLEGAL_STATE;
        }
        if i64::from(shared_bytes) > i64::from(dynamic_shared_allowed(&state, function)) {
            return CUresult::CUDA_ERROR_INVALID_VALUE;
        }
        let Some(stream) = state.streams.get_mut(&stream) else {
            return CUresult::CUDA_ERROR_INVALID_HANDLE;
        };
        if let Some(fault) = stream.fault {
            return fault;
        }
        stream.running = setting_u64(RUNNING_QUERIES_ENV, 0);
        stream.fault = std::env::var(KERNEL_FAULT_ENV)
            .ok()
            .map(|name| status_named(&name));
        CUresult::CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(
    host: *mut *mut c_void,
    bytes: usize,
    flags: c_uint,
) -> CUresult {
    call(
        "cuMemHostAlloc",
        format!("bytes={bytes} flags={flags:#x}"),
        || {
            let Some(address) = state().allocate(bytes, BlockKind::PinnedHost, None) else {
                return CUresult::CUDA_ERROR_OUT_OF_MEMORY;
            };
            // SAFETY: an out-pointer per the API.
            unsafe { put(host, pointer_of(address as usize)) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    device: *mut CUdeviceptr,
    host: *mut c_void,
    flags: c_uint,
) -> CUresult {
    let address = host as u64;
    call(
        "cuMemHostGetDevicePointer",
        format!("flags={flags}"),
        || {
            match state().blocks.get(&address) {
                // Unified addressing: the device sees pinned memory at its host address.
                // SAFETY: an out-pointer per the API.
                Some(block) if block.kind == BlockKind::PinnedHost => unsafe {
                    put(device, address)
                },
                _ => CUresult::CUDA_ERROR_INVALID_VALUE,
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(host: *mut c_void) -> CUresult {
    call("cuMemFreeHost", String::new(), || {
        match state().release(host as u64, BlockKind::PinnedHost) {
            true => CUresult::CUDA_SUCCESS,
            false => CUresult::CUDA_ERROR_INVALID_VALUE,
        }
    })
}

/// # Safety
/// `address` must be an out-pointer (see [`put`]).
unsafe fn device_alloc(address: *mut CUdeviceptr, bytes: usize) -> CUresult {
    let Some(pointer) = state().allocate(bytes, BlockKind::Device, None) else {
        return CUresult::CUDA_ERROR_OUT_OF_MEMORY;
    };
    // SAFETY: per the caller.
    unsafe { put(address, pointer) }
}

fn device_free(address: CUdeviceptr) -> CUresult {
    match state().release(address, BlockKind::Device) {
        true => CUresult::CUDA_SUCCESS,
        false => CUresult::CUDA_ERROR_INVALID_VALUE,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(address: *mut CUdeviceptr, bytes: usize) -> CUresult {
    // SAFETY: an out-pointer per the API.
    call("cuMemAlloc", format!("bytes={bytes}"), || unsafe {
        device_alloc(address, bytes)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    address: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    let stream = handle_of(stream);
    call(
        "cuMemAllocAsync",
        format!("bytes={bytes} stream={stream:#x}"),
        // SAFETY: an out-pointer per the API.
        || unsafe { device_alloc(address, bytes) },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(address: CUdeviceptr) -> CUresult {
    call("cuMemFree", format!("address={address:#x}"), || {
        device_free(address)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(address: CUdeviceptr, stream: CUstream) -> CUresult {
    let stream = handle_of(stream);
    call(
        "cuMemFreeAsync",
        format!("address={address:#x} stream={stream:#x}"),
        || device_free(address),
    )
}

/// Which way a copy goes.
#[derive(Clone, Copy)]
enum Way {
    ToDevice,
    FromDevice,
}

/// A copy between `host` and the device memory at `device`, on `stream` (`None`: the legacy
/// stream; a stream named must exist). A host-to-device copy is in flight until its stream is
/// synchronized; a device-to-host one is done at once (every launch has ended or been
/// synchronized in the fake when the backend reads).
///
/// # Safety
/// `host` must hold, or have room for, `bytes` bytes, per the API.
unsafe fn copy(
    function: &str,
    way: Way,
    device: CUdeviceptr,
    host: *mut c_void,
    bytes: usize,
    stream: Option<CUstream>,
) -> CUresult {
    let stream = match stream.map(handle_of) {
        Some(stream) if !state().streams.contains_key(&stream) => {
            return call(function, format!("stream={stream:#x}"), || {
                CUresult::CUDA_ERROR_INVALID_HANDLE
            });
        }
        stream => stream.unwrap_or(0),
    };
    let place = state().locate(device, bytes);
    let on = if stream == 0 {
        String::new()
    } else {
        format!(" stream={stream:#x}")
    };
    let side = match way {
        Way::ToDevice => "to",
        Way::FromDevice => "from",
    };
    call(
        function,
        format!(
            "{side}={} bytes={bytes}{on}",
            place.as_deref().unwrap_or("invalid")
        ),
        || {
            let Some(place) = &place else {
                return CUresult::CUDA_ERROR_INVALID_VALUE;
            };
            if host.is_null() {
                return CUresult::CUDA_ERROR_INVALID_VALUE;
            }
            match way {
                Way::ToDevice => {
                    // SAFETY: the destination lies in one of our blocks (checked); the source
                    // holds `bytes` bytes per the caller.
                    unsafe { std::ptr::copy(host.cast::<u8>(), device as *mut u8, bytes) };
                    state().pending_copies.push(PendingCopy {
                        stream,
                        place: place.clone(),
                    });
                }
                // SAFETY: the source lies in one of our blocks (checked); the destination has
                // room for `bytes` bytes per the caller.
                Way::FromDevice => unsafe {
                    std::ptr::copy(device as *const u8, host.cast::<u8>(), bytes)
                },
            }
            CUresult::CUDA_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    device: CUdeviceptr,
    value: u8,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    let stream = handle_of(stream);
    let place = state().locate(device, bytes);
    call(
        "cuMemsetD8Async",
        format!(
            "to={} bytes={bytes} value={value} stream={stream:#x}",
            place.as_deref().unwrap_or("invalid")
        ),
        || {
            let Some(place) = &place else {
                return CUresult::CUDA_ERROR_INVALID_VALUE;
            };
            let mut state = state();
            if !state.streams.contains_key(&stream) {
                return CUresult::CUDA_ERROR_INVALID_HANDLE;
            }
            // SAFETY: the destination lies in one of our blocks (checked).
            unsafe { std::ptr::write_bytes(device as *mut u8, value, bytes) };
            // Ordered only on its stream, as a copy is.
            state.pending_copies.push(PendingCopy {
                stream,
                place: place.clone(),
            });
            CUresult::CUDA_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    device: CUdeviceptr,
    host: *const c_void,
    bytes: usize,
) -> CUresult {
    // SAFETY: the source per the API; it is only read.
    unsafe {
        copy(
            "cuMemcpyHtoD",
            Way::ToDevice,
            device,
            host.cast_mut(),
            bytes,
            None,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    device: CUdeviceptr,
    host: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    let host = host.cast_mut();
    // SAFETY: the source per the API; it is only read.
    unsafe {
        copy(
            "cuMemcpyHtoDAsync",
            Way::ToDevice,
            device,
            host,
            bytes,
            Some(stream),
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    host: *mut c_void,
    device: CUdeviceptr,
    bytes: usize,
) -> CUresult {
    // SAFETY: the destination per the API.
    unsafe { copy("cuMemcpyDtoH", Way::FromDevice, device, host, bytes, None) }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    host: *mut c_void,
    device: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    // SAFETY: the destination per the API.
    unsafe {
        copy(
            "cuMemcpyDtoHAsync",
            Way::FromDevice,
            device,
            host,
            bytes,
            Some(stream),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_globals_and_entries_are_found() {
        let ptx = "\
.version 7.0
.target sm_70
.visible .global .align 8 .u64 gpurun_counter = 5;
.visible .global .align 1 .b8 __llvm_rpc_client[24];
.global .align 4 .b32 hidden_words[3]; // a comment
.extern .global .align 8 .u64 elsewhere;
.visible .entry gpurun_store(
.visible .entry _start()
";
        let (globals, entries) = ptx_symbols(ptx);
        assert_eq!(
            globals,
            [
                ("gpurun_counter".to_owned(), 8),
                ("__llvm_rpc_client".to_owned(), 24),
                ("hidden_words".to_owned(), 12),
            ]
        );
        let names: Vec<&str> = entries.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["gpurun_store", "_start"]);
    }

    #[test]
    fn entry_parameters_end_at_the_last_one() {
        let ptx = "\
.visible .entry fill(
    .param .u64 fill_param_0,
    .param .u64 fill_param_1,
    .param .u32 fill_param_2
)
{
.visible .entry _end(.param .b32 _end_param_0)
{
.visible .entry _start()
{
.visible .entry mixed(.param .u32 a, .param .u64 b, .param .u16 c)
.visible .entry pointers(.param .u32 a, .param .u64 .ptr .align 1 b)
.visible .entry aggregate(
    .param .u16 a,
    .param .align 8 .b8 b[12]
)
";
        let (_, entries) = ptx_symbols(ptx);
        assert_eq!(
            entries,
            [
                ("fill".to_owned(), 20),
                ("_end".to_owned(), 4),
                ("_start".to_owned(), 0),
                ("mixed".to_owned(), 18),
                ("pointers".to_owned(), 16),
                ("aggregate".to_owned(), 20),
            ]
        );
    }

    #[test]
    fn padded_parameter_buffers_are_refused_like_the_driver_does() {
        // (int *, short): 10 bytes; sizeof the struct (16) is "too many resources".
        assert_eq!(parameter_size_status(10, 10), CUresult::CUDA_SUCCESS);
        assert_eq!(
            parameter_size_status(10, 16),
            CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
        );
        assert_eq!(
            parameter_size_status(10, 8),
            CUresult::CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(parameter_size_status(0, 0), CUresult::CUDA_SUCCESS);
    }

    #[test]
    fn statuses_are_named_as_the_driver_names_them() {
        assert_eq!(
            status_named("CUDA_ERROR_ILLEGAL_ADDRESS"),
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
        );
        assert_eq!(status_named("NO_SUCH_STATUS"), CUresult::CUDA_ERROR_UNKNOWN);
    }

    #[test]
    fn copies_stay_inside_blocks() {
        let mut state = State::default();
        let address = state
            .allocate(16, BlockKind::Global, Some("g".into()))
            .unwrap();
        assert_eq!(state.locate(address, 16).as_deref(), Some("g"));
        assert_eq!(state.locate(address + 8, 8).as_deref(), Some("g+8"));
        assert_eq!(state.locate(address + 8, 9), None);
        assert!(!state.release(address, BlockKind::Device));
        assert!(state.release(address, BlockKind::Global));
        assert_eq!(state.locate(address, 1), None);
    }
}
