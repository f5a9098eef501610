//! The driver layer of the CUDA backend, over cudarc's `result` layer (cudarc's `sys` only where
//! `result` has no wrapper): finding the library and `cuInit`, the one place that calls the
//! driver ([`calls`]: each driver function this backend uses, as a `Result` naming the call),
//! and driver status codes turned into backend errors. Messages carry the driver's own error name (`CUDA_ERROR_ILLEGAL_ADDRESS`), the
//! call that returned it and the driver's description, so a failed test reads like the
//! driver's report.

use crate::{BackendError, BackendKind};
use cudarc::driver::result;
use cudarc::driver::sys::CUresult;

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
    match result::DriverError(code).error_name() {
        Ok(name) => name.to_string_lossy().into_owned(),
        Err(_) => format!("{code:?}"),
    }
}

/// The driver's description of `code` (`cuGetErrorString`), when it has one.
fn error_description(code: CUresult) -> Option<String> {
    if !driver_loaded() {
        return None;
    }
    let error = result::DriverError(code);
    let text = error.error_string().ok()?;
    Some(text.to_string_lossy().into_owned())
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
    use cudarc::driver::result;
    use cudarc::driver::sys::{self, CUresult};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;

    /// What a missing `libcuda.so` is reported as, everywhere.
    pub const NO_DRIVER: &str = "no NVIDIA driver found (libcuda.so)";

    /// How a `libcuda.so` that is the CUDA toolkit's stub begins to be reported (its `cuInit`
    /// answers `CUDA_ERROR_STUB_LIBRARY`). cudarc tries `libcuda.so` before `libcuda.so.1`, so a
    /// toolkit `stubs` directory on `LD_LIBRARY_PATH` hides the driver's own library.
    pub const STUB_DRIVER: &str = "the libcuda.so loaded is the CUDA toolkit's stub library, \
                                   not the NVIDIA driver";

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
            Some(match result::init() {
                Ok(()) => Ok(Driver::Ready),
                Err(result::DriverError(CUresult::CUDA_ERROR_NO_DEVICE)) => Ok(Driver::NoDevice),
                Err(result::DriverError(other)) => Err(other),
            })
        });
        match *outcome {
            None => Err(BackendError::NotAvailable(NO_DRIVER.into())),
            Some(Ok(driver)) => Ok(driver),
            Some(Err(CUresult::CUDA_ERROR_STUB_LIBRARY)) => Err(BackendError::NotAvailable(
                stub_message(loaded_library_path().as_deref()),
            )),
            Some(Err(code)) => Err(DriverError {
                call: "cuInit",
                code,
            }
            .into()),
        }
    }

    /// What [`init`] says when the library found is the toolkit's stub, loaded from `path`.
    pub(crate) fn stub_message(path: Option<&std::path::Path>) -> String {
        let from = path.map_or_else(String::new, |path| format!(" (`{}`)", path.display()));
        format!(
            "{STUB_DRIVER}{from}: cuInit returned CUDA_ERROR_STUB_LIBRARY. A CUDA toolkit `stubs` \
             directory on LD_LIBRARY_PATH hides the driver's own libcuda.so.1; the stubs are for \
             linking only, so take that directory off LD_LIBRARY_PATH"
        )
    }

    /// The file the driver library was loaded from, as the dynamic loader names it.
    fn loaded_library_path() -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: only called once `cuInit` ran, so cudarc has loaded the library already; the
        // symbol is used for its address alone, never called.
        let address = unsafe {
            let symbol = sys::culib()
                .get::<unsafe extern "C" fn()>(b"cuInit\0")
                .ok()?;
            *symbol as *const std::ffi::c_void
        };
        // SAFETY: `Dl_info` is plain data, valid zeroed; `dladdr` fills it for an address
        // inside a loaded object and leaves it alone (returning 0) otherwise.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `info` outlives the call.
        if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: `dli_fname` is the loader's NUL-terminated name of a loaded object, which
        // stays loaded (cudarc never unloads it).
        let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
        Some(std::ffi::OsStr::from_bytes(name.to_bytes()).into())
    }
}

/// Every driver call of the backend, each a `Result` naming the call. Where cudarc's `result`
/// layer wraps the function, the call goes through it; the raw `sys` layer is used only for what
/// it lacks: `cuDriverGetVersion`, `cuStreamQuery` (its "not ready" is an answer, not an error),
/// `cuMemHostGetDevicePointer`, `cuModuleLoadDataEx` with JIT log options, and `cuLaunchKernel`
/// with one packed parameter buffer (`extra`, as LLVM's loaders pass it). Functions that take raw
/// driver handles or addresses are `unsafe`: the caller vouches for them, as documented on each.
/// All of them need the driver loaded ([`init`] succeeded), and those on a context need it
/// current on the calling thread.
pub(crate) mod calls {
    use super::{check, DriverError};
    use cudarc::driver::result::{self, stream::StreamKind};
    use cudarc::driver::sys::{
        self, CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUevent, CUevent_flags,
        CUfunction, CUfunction_attribute, CUjit_option, CUmodule, CUresult, CUstream,
    };
    use std::ffi::{c_void, CStr};

    /// Names the call a `result`-layer error came from.
    fn named(call: &'static str) -> impl Fn(result::DriverError) -> DriverError {
        move |error| DriverError {
            call,
            code: error.0,
        }
    }

    /// A `result`-layer lookup that answers `CUDA_ERROR_NOT_FOUND` for a missing name: `None`.
    fn found<T>(
        call: &'static str,
        outcome: Result<T, result::DriverError>,
    ) -> Result<Option<T>, DriverError> {
        match outcome {
            Ok(value) => Ok(Some(value)),
            Err(result::DriverError(CUresult::CUDA_ERROR_NOT_FOUND)) => Ok(None),
            Err(error) => Err(named(call)(error)),
        }
    }

    pub(crate) fn device_count() -> Result<i32, DriverError> {
        result::device::get_count().map_err(named("cuDeviceGetCount"))
    }

    pub(crate) fn device_get(ordinal: i32) -> Result<CUdevice, DriverError> {
        result::device::get(ordinal).map_err(named("cuDeviceGet"))
    }

    pub(crate) fn device_name(device: CUdevice) -> Result<String, DriverError> {
        result::device::get_name(device).map_err(named("cuDeviceGetName"))
    }

    pub(crate) fn device_attribute(
        device: CUdevice,
        which: CUdevice_attribute,
    ) -> Result<i32, DriverError> {
        // SAFETY: `device` comes from `device_get`; a bad handle is an error code.
        unsafe { result::device::get_attribute(device, which) }
            .map_err(named("cuDeviceGetAttribute"))
    }

    pub(crate) fn device_total_memory(device: CUdevice) -> Result<usize, DriverError> {
        // SAFETY: as for `device_attribute`.
        unsafe { result::device::total_mem(device) }.map_err(named("cuDeviceTotalMem"))
    }

    /// `cuDriverGetVersion` (no `result` wrapper).
    pub(crate) fn driver_version() -> Result<i32, DriverError> {
        let mut version = 0;
        // SAFETY: a valid out-pointer.
        check("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut version)
        })?;
        Ok(version)
    }

    pub(crate) fn primary_context_retain(device: CUdevice) -> Result<CUcontext, DriverError> {
        // SAFETY: `device` comes from `device_get`; a bad handle is an error code.
        unsafe { result::primary_ctx::retain(device) }.map_err(named("cuDevicePrimaryCtxRetain"))
    }

    /// # Safety
    /// Balances one [`primary_context_retain`] of `device`; nothing may use the context after
    /// the last release.
    pub(crate) unsafe fn primary_context_release(device: CUdevice) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::primary_ctx::release(device) }.map_err(named("cuDevicePrimaryCtxRelease"))
    }

    /// # Safety
    /// `context` must be a live (retained) context.
    pub(crate) unsafe fn context_set_current(context: CUcontext) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::ctx::set_current(context) }.map_err(named("cuCtxSetCurrent"))
    }

    /// The per-thread stack size of the current context.
    pub(crate) fn context_stack_size() -> Result<usize, DriverError> {
        result::ctx::get_limit(sys::CUlimit::CU_LIMIT_STACK_SIZE)
            .map_err(named("cuCtxGetLimit(CU_LIMIT_STACK_SIZE)"))
    }

    /// Sets the per-thread stack size of the current context. The driver waits for every
    /// running kernel of the context to end first.
    pub(crate) fn context_set_stack_size(bytes: usize) -> Result<(), DriverError> {
        result::ctx::set_limit(sys::CUlimit::CU_LIMIT_STACK_SIZE, bytes)
            .map_err(named("cuCtxSetLimit(CU_LIMIT_STACK_SIZE)"))
    }

    /// A non-blocking stream of the current context (it never waits on the legacy stream).
    pub(crate) fn stream_create_non_blocking() -> Result<CUstream, DriverError> {
        result::stream::create(StreamKind::NonBlocking).map_err(named("cuStreamCreate"))
    }

    /// The raw status of `cuStreamQuery`: `CUDA_SUCCESS` (done), `CUDA_ERROR_NOT_READY`, or an
    /// error (no `result` wrapper: "not ready" is an answer here).
    ///
    /// # Safety
    /// `stream` must be a live stream of the current context.
    pub(crate) unsafe fn stream_query(stream: CUstream) -> CUresult {
        // SAFETY: per the caller.
        unsafe { sys::cuStreamQuery(stream) }
    }

    /// # Safety
    /// As [`stream_query`].
    pub(crate) unsafe fn stream_synchronize(stream: CUstream) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::stream::synchronize(stream) }.map_err(named("cuStreamSynchronize"))
    }

    /// # Safety
    /// As [`stream_query`]; nothing uses the stream afterwards.
    pub(crate) unsafe fn stream_destroy(stream: CUstream) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::stream::destroy(stream) }.map_err(named("cuStreamDestroy"))
    }

    /// `cuModuleLoadDataEx` with the JIT's error and info logs (`log_bytes` each); cudarc's
    /// `module::load_data` passes no JIT options. On failure, the error and the error log's text.
    ///
    /// # Safety
    /// `image` must be a complete cubin or NUL-terminated PTX.
    pub(crate) unsafe fn module_load_with_logs(
        image: &[u8],
        log_bytes: usize,
    ) -> Result<CUmodule, (DriverError, Vec<u8>)> {
        let mut error_log = vec![0u8; log_bytes];
        let mut info_log = vec![0u8; log_bytes];
        let mut options = [
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            CUjit_option::CU_JIT_INFO_LOG_BUFFER,
            CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
        ];
        // Integer option values travel in the pointer slots themselves (the driver's convention).
        let mut values: [*mut c_void; 4] = [
            error_log.as_mut_ptr().cast(),
            log_bytes as *mut c_void,
            info_log.as_mut_ptr().cast(),
            log_bytes as *mut c_void,
        ];
        let mut module: CUmodule = std::ptr::null_mut();
        // SAFETY: `image` per the caller; the option arrays have the same length, and the log
        // buffers outlive the call with their sizes passed alongside.
        let status = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                image.as_ptr().cast(),
                options.len() as u32,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        match check("cuModuleLoadDataEx", status) {
            Ok(()) => Ok(module),
            Err(error) => Err((error, error_log)),
        }
    }

    /// # Safety
    /// `module` must be loaded in the current context; nothing of it runs or is used after.
    pub(crate) unsafe fn module_unload(module: CUmodule) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::module::unload(module) }.map_err(named("cuModuleUnload"))
    }

    /// Address and size of a global; `None` when the module has no such global.
    ///
    /// # Safety
    /// `module` must be loaded in the current context.
    pub(crate) unsafe fn module_global(
        module: CUmodule,
        name: &CStr,
    ) -> Result<Option<(CUdeviceptr, usize)>, DriverError> {
        // SAFETY: `module` per the caller; the name is NUL-terminated.
        let outcome = unsafe { result::module::get_global(module, name.to_owned()) };
        found("cuModuleGetGlobal", outcome)
    }

    /// A kernel of the module; `None` when it has no such function.
    ///
    /// # Safety
    /// As [`module_global`].
    pub(crate) unsafe fn module_function(
        module: CUmodule,
        name: &CStr,
    ) -> Result<Option<CUfunction>, DriverError> {
        // SAFETY: `module` per the caller; the name is NUL-terminated.
        let outcome = unsafe { result::module::get_function(module, name.to_owned()) };
        found("cuModuleGetFunction", outcome)
    }

    /// # Safety
    /// `function` must belong to a module loaded in the current context.
    pub(crate) unsafe fn function_attribute(
        function: CUfunction,
        which: CUfunction_attribute,
    ) -> Result<i32, DriverError> {
        // SAFETY: per the caller.
        unsafe { result::function::get_function_attribute(function, which) }
            .map_err(named("cuFuncGetAttribute"))
    }

    /// # Safety
    /// `function` must belong to a module loaded in the current context.
    pub(crate) unsafe fn function_set_attribute(
        function: CUfunction,
        which: CUfunction_attribute,
        value: i32,
    ) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::function::set_function_attribute(function, which, value) }
            .map_err(named("cuFuncSetAttribute"))
    }

    /// Launches `function` on `stream` with its parameters as one packed buffer (`params`, the
    /// C struct of its arguments, `size` bytes: up to the end of the last parameter, without
    /// the struct's tail padding, which the driver refuses). cudarc's `launch_kernel` takes one
    /// pointer per parameter instead, hence the raw call.
    ///
    /// # Safety
    /// `function` and `stream` must belong to the current context; `params` must hold `size`
    /// bytes laid out as the kernel's parameters (the driver copies them during the call).
    pub(crate) unsafe fn launch_kernel(
        function: CUfunction,
        blocks: [u32; 3],
        threads: [u32; 3],
        shared_bytes: u32,
        stream: CUstream,
        params: *mut c_void,
        size: usize,
    ) -> Result<(), DriverError> {
        let mut size_slot = size;
        // The driver's CU_LAUNCH_PARAM_* markers are the small integers 1, 2 and 0.
        let mut extra: [*mut c_void; 5] = [
            sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void,
            params,
            sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void,
            (&mut size_slot as *mut usize).cast(),
            sys::CU_LAUNCH_PARAM_END_AS_INT as usize as *mut c_void,
        ];
        let extra = if size == 0 {
            std::ptr::null_mut()
        } else {
            extra.as_mut_ptr()
        };
        let ([bx, by, bz], [tx, ty, tz]) = (blocks, threads);
        // SAFETY: per the caller; `extra` and the size slot live until the call returns.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                function,
                bx,
                by,
                bz,
                tx,
                ty,
                tz,
                shared_bytes,
                stream,
                std::ptr::null_mut(),
                extra,
            )
        })
    }

    /// An event of the current context that records timestamps (`CU_EVENT_DEFAULT`: not
    /// `CU_EVENT_DISABLE_TIMING`, which `cuEventElapsedTime` refuses).
    pub(crate) fn event_create_timed() -> Result<CUevent, DriverError> {
        result::event::create(CUevent_flags::CU_EVENT_DEFAULT).map_err(named("cuEventCreate"))
    }

    /// Records `event` on `stream`: it completes, with the GPU's timestamp, once the work
    /// issued to the stream before it has.
    ///
    /// # Safety
    /// `event` must come from [`event_create_timed`] and `stream` be a live stream, both of the
    /// current context.
    pub(crate) unsafe fn event_record(event: CUevent, stream: CUstream) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::event::record(event, stream) }.map_err(named("cuEventRecord"))
    }

    /// Milliseconds between two completed events (about half a microsecond's resolution).
    ///
    /// # Safety
    /// Both events must come from [`event_create_timed`] in the current context, not be
    /// destroyed, and have been recorded.
    pub(crate) unsafe fn event_elapsed_ms(
        start: CUevent,
        stop: CUevent,
    ) -> Result<f32, DriverError> {
        // SAFETY: per the caller.
        unsafe { result::event::elapsed(start, stop) }.map_err(named("cuEventElapsedTime"))
    }

    /// # Safety
    /// `event` must come from [`event_create_timed`], be destroyed once and not be used after.
    pub(crate) unsafe fn event_destroy(event: CUevent) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::event::destroy(event) }.map_err(named("cuEventDestroy"))
    }

    /// `len` bytes (at least 1) of page-locked host memory mapped into every context's address
    /// space (`PORTABLE | DEVICEMAP`, never write-combined: the host reads it), and its device
    /// address (`cuMemHostGetDevicePointer` has no `result` wrapper).
    pub(crate) fn host_alloc_mapped(len: usize) -> Result<(*mut u8, CUdeviceptr), DriverError> {
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: documented flags; the memory is zeroed by the caller before use.
        let host =
            unsafe { result::malloc_host(len.max(1), flags) }.map_err(named("cuMemHostAlloc"))?;
        let mut device: CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP just now; flags must be 0.
        let mapped = check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0)
        });
        if let Err(error) = mapped {
            // SAFETY: allocated above and not handed out.
            let _ = unsafe { result::free_host(host) };
            return Err(error);
        }
        Ok((host.cast(), device))
    }

    /// # Safety
    /// `host` must come from [`host_alloc_mapped`] and be freed once.
    pub(crate) unsafe fn host_free(host: *mut u8) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::free_host(host.cast()) }.map_err(named("cuMemFreeHost"))
    }

    /// `size` bytes of device memory; `stream`: stream-ordered on it (`cuMemAllocAsync`, only
    /// with memory pools).
    ///
    /// # Safety
    /// `stream`, when given, must be a live stream of the current context.
    pub(crate) unsafe fn device_alloc(
        size: usize,
        stream: Option<CUstream>,
    ) -> Result<CUdeviceptr, DriverError> {
        // SAFETY: `stream` per the caller; the memory is only handed out as an address.
        unsafe {
            match stream {
                Some(stream) => result::malloc_async(stream, size),
                None => result::malloc_sync(size),
            }
        }
        .map_err(named("cuMemAlloc"))
    }

    /// # Safety
    /// `pointer` must come from [`device_alloc`] (with the same `stream`) and be freed once.
    pub(crate) unsafe fn device_free(
        pointer: CUdeviceptr,
        stream: Option<CUstream>,
    ) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe {
            match stream {
                Some(stream) => result::free_async(pointer, stream),
                None => result::free_sync(pointer),
            }
        }
        .map_err(named("cuMemFree"))
    }

    /// Copies `bytes` to device memory in `stream`'s order and waits for the copy: a launch on
    /// that stream comes after it (a copy on the legacy stream would not order with our
    /// non-blocking streams), and `bytes` may be reused when this returns.
    ///
    /// # Safety
    /// `address` must hold `bytes.len()` bytes of device memory of the current context;
    /// `stream` must be a live stream of it with no kernel that may never end.
    pub(crate) unsafe fn copy_to_device(
        address: CUdeviceptr,
        bytes: &[u8],
        stream: CUstream,
    ) -> Result<(), DriverError> {
        // SAFETY: per the caller; `bytes` stays borrowed until the stream has finished the copy.
        unsafe {
            result::memcpy_htod_async(address, bytes, stream)
                .map_err(named("cuMemcpyHtoDAsync"))?;
            stream_synchronize(stream)
        }
    }

    /// Sets `len` bytes of device memory to zero in `stream`'s order and waits for it, as
    /// [`copy_to_device`] copies.
    ///
    /// # Safety
    /// As [`copy_to_device`], for `len` bytes at `address`.
    pub(crate) unsafe fn zero_device(
        address: CUdeviceptr,
        len: usize,
        stream: CUstream,
    ) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe {
            result::memset_d8_async(address, 0, len, stream).map_err(named("cuMemsetD8Async"))?;
            stream_synchronize(stream)
        }
    }

    /// Sets `len` bytes of device memory to zero in `stream`'s order, without waiting: the
    /// kernels launched on the stream afterwards run after it.
    ///
    /// # Safety
    /// `address` holds `len` bytes of device memory of the current context that no running
    /// kernel uses; `stream` belongs to that context.
    pub(crate) unsafe fn fill_device_async(
        address: CUdeviceptr,
        len: usize,
        stream: CUstream,
    ) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        unsafe { result::memset_d8_async(address, 0, len, stream) }
            .map_err(named("cuMemsetD8Async"))
    }

    /// Fills `out` from device memory in `stream`'s order (after the kernels launched on it)
    /// and waits for the copy.
    ///
    /// # Safety
    /// As [`copy_to_device`], for `out.len()` bytes at `address`.
    pub(crate) unsafe fn copy_from_device(
        address: CUdeviceptr,
        out: &mut [u8],
        stream: CUstream,
    ) -> Result<(), DriverError> {
        // SAFETY: per the caller; `out` stays borrowed until the stream has finished the copy.
        unsafe {
            result::memcpy_dtoh_async(out, address, stream).map_err(named("cuMemcpyDtoHAsync"))?;
            stream_synchronize(stream)
        }
    }
}

#[cfg(test)]
pub(crate) use loading::availability;
pub(crate) use loading::{driver_loaded, init, Driver};
pub use loading::{NO_DRIVER, STUB_DRIVER};

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
    fn stub_library_is_named_with_its_file_and_the_fix() {
        let path = std::path::Path::new("/usr/local/cuda/lib64/stubs/libcuda.so");
        let text = loading::stub_message(Some(path));
        assert!(text.starts_with(STUB_DRIVER), "{text}");
        assert!(
            text.contains("(`/usr/local/cuda/lib64/stubs/libcuda.so`)")
                && text.contains("CUDA_ERROR_STUB_LIBRARY")
                && text.contains("take that directory off LD_LIBRARY_PATH"),
            "{text}"
        );
        assert!(!loading::stub_message(None).contains("(`"));
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
