//! The driver layer of the CUDA backend, in cudarc's `sys` -> `result` -> safe layering: finding
//! the library and `cuInit`, the one place that calls `cudarc::driver::sys` ([`calls`]: each
//! driver function this backend uses, as a `Result`), and driver status codes turned into
//! backend errors. Messages carry the driver's own error name (`CUDA_ERROR_ILLEGAL_ADDRESS`), the
//! call that returned it and the driver's description, so a failed test reads like the
//! driver's report.

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

/// Every driver call of the backend, each a thin `Result` over one `sys` function. Functions
/// that take raw driver handles or addresses are `unsafe`: the caller vouches for them, as
/// documented on each. All of them need the driver loaded ([`init`] succeeded), and those on a
/// context need it current on the calling thread.
pub(crate) mod calls {
    use super::{check, DriverError};
    use cudarc::driver::sys::{
        self, CUcontext, CUdevice, CUdevice_attribute, CUdeviceptr, CUfunction,
        CUfunction_attribute, CUjit_option, CUmodule, CUresult, CUstream,
    };
    use std::ffi::{c_void, CStr};

    pub(crate) fn device_count() -> Result<i32, DriverError> {
        let mut count = 0;
        // SAFETY: a valid out-pointer.
        check("cuDeviceGetCount", unsafe {
            sys::cuDeviceGetCount(&mut count)
        })?;
        Ok(count)
    }

    pub(crate) fn device_get(ordinal: i32) -> Result<CUdevice, DriverError> {
        let mut device: CUdevice = 0;
        // SAFETY: a valid out-pointer; a bad ordinal is an error code.
        check("cuDeviceGet", unsafe {
            sys::cuDeviceGet(&mut device, ordinal)
        })?;
        Ok(device)
    }

    pub(crate) fn device_name(device: CUdevice) -> Result<String, DriverError> {
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer's length is passed; a bad handle is an error code.
        check("cuDeviceGetName", unsafe {
            sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device)
        })?;
        // The driver NUL-terminates; the last byte stays 0 whatever it wrote.
        name[name.len() - 1] = 0;
        // SAFETY: `name` holds a NUL-terminated string (see above).
        Ok(unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    pub(crate) fn device_attribute(
        device: CUdevice,
        which: CUdevice_attribute,
    ) -> Result<i32, DriverError> {
        let mut value = 0;
        // SAFETY: a valid out-pointer; a bad handle is an error code.
        check("cuDeviceGetAttribute", unsafe {
            sys::cuDeviceGetAttribute(&mut value, which, device)
        })?;
        Ok(value)
    }

    pub(crate) fn device_total_memory(device: CUdevice) -> Result<usize, DriverError> {
        let mut bytes = 0usize;
        // SAFETY: a valid out-pointer; a bad handle is an error code.
        check("cuDeviceTotalMem", unsafe {
            sys::cuDeviceTotalMem_v2(&mut bytes, device)
        })?;
        Ok(bytes)
    }

    pub(crate) fn driver_version() -> Result<i32, DriverError> {
        let mut version = 0;
        // SAFETY: a valid out-pointer.
        check("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut version)
        })?;
        Ok(version)
    }

    pub(crate) fn primary_context_retain(device: CUdevice) -> Result<CUcontext, DriverError> {
        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; a bad handle is an error code.
        check("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut context, device)
        })?;
        Ok(context)
    }

    /// # Safety
    /// Balances one [`primary_context_retain`] of `device`; nothing may use the context after
    /// the last release.
    pub(crate) unsafe fn primary_context_release(device: CUdevice) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        check("cuDevicePrimaryCtxRelease", unsafe {
            sys::cuDevicePrimaryCtxRelease_v2(device)
        })
    }

    /// # Safety
    /// `context` must be a live (retained) context.
    pub(crate) unsafe fn context_set_current(context: CUcontext) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(context) })
    }

    /// The per-thread stack size of the current context.
    pub(crate) fn context_set_stack_size(bytes: usize) -> Result<(), DriverError> {
        // SAFETY: a plain setting of the current context.
        check("cuCtxSetLimit(CU_LIMIT_STACK_SIZE)", unsafe {
            sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_STACK_SIZE, bytes)
        })
    }

    /// A non-blocking stream of the current context (it never waits on the legacy stream).
    pub(crate) fn stream_create_non_blocking() -> Result<CUstream, DriverError> {
        let mut stream: CUstream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(
                &mut stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            )
        })?;
        Ok(stream)
    }

    /// The raw status of `cuStreamQuery`: `CUDA_SUCCESS` (done), `CUDA_ERROR_NOT_READY`, or an
    /// error.
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
        check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(stream)
        })
    }

    /// # Safety
    /// As [`stream_query`]; nothing uses the stream afterwards.
    pub(crate) unsafe fn stream_destroy(stream: CUstream) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        check("cuStreamDestroy", unsafe {
            sys::cuStreamDestroy_v2(stream)
        })
    }

    /// `cuModuleLoadDataEx` with the JIT's error and info logs (`log_bytes` each). On failure,
    /// the error and the error log's text.
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
        check("cuModuleUnload", unsafe { sys::cuModuleUnload(module) })
    }

    /// Address and size of a global; `None` when the module has no such global.
    ///
    /// # Safety
    /// `module` must be loaded in the current context.
    pub(crate) unsafe fn module_global(
        module: CUmodule,
        name: &CStr,
    ) -> Result<Option<(CUdeviceptr, usize)>, DriverError> {
        let (mut address, mut size) = (0, 0);
        // SAFETY: valid out-pointers, a NUL-terminated name; `module` per the caller.
        let status =
            unsafe { sys::cuModuleGetGlobal_v2(&mut address, &mut size, module, name.as_ptr()) };
        match status {
            CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
            status => check("cuModuleGetGlobal", status).map(|()| Some((address, size))),
        }
    }

    /// A kernel of the module; `None` when it has no such function.
    ///
    /// # Safety
    /// As [`module_global`].
    pub(crate) unsafe fn module_function(
        module: CUmodule,
        name: &CStr,
    ) -> Result<Option<CUfunction>, DriverError> {
        let mut function: CUfunction = std::ptr::null_mut();
        // SAFETY: a valid out-pointer, a NUL-terminated name; `module` per the caller.
        let status = unsafe { sys::cuModuleGetFunction(&mut function, module, name.as_ptr()) };
        match status {
            CUresult::CUDA_ERROR_NOT_FOUND => Ok(None),
            status => check("cuModuleGetFunction", status).map(|()| Some(function)),
        }
    }

    /// # Safety
    /// `function` must belong to a module loaded in the current context.
    pub(crate) unsafe fn function_attribute(
        function: CUfunction,
        which: CUfunction_attribute,
    ) -> Result<i32, DriverError> {
        let mut value = 0;
        // SAFETY: a valid out-pointer; `function` per the caller.
        check("cuFuncGetAttribute", unsafe {
            sys::cuFuncGetAttribute(&mut value, which, function)
        })?;
        Ok(value)
    }

    /// Launches `function` on `stream` with its parameters as one packed buffer (`params`, the
    /// C struct of its arguments, `size` bytes).
    ///
    /// # Safety
    /// `function` and `stream` must belong to the current context; `params` must hold `size`
    /// bytes laid out as the kernel's parameters (the driver copies them during the call).
    pub(crate) unsafe fn launch_kernel(
        function: CUfunction,
        blocks: [u32; 3],
        threads: [u32; 3],
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
                0,
                stream,
                std::ptr::null_mut(),
                extra,
            )
        })
    }

    /// `len` bytes (at least 1) of page-locked host memory mapped into every context's address
    /// space (`PORTABLE | DEVICEMAP`, never write-combined: the host reads it), and its device
    /// address.
    pub(crate) fn host_alloc_mapped(len: usize) -> Result<(*mut u8, CUdeviceptr), DriverError> {
        let mut host: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        // SAFETY: a valid out-pointer and documented flags.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut host, len.max(1), flags)
        })?;
        let mut device: CUdeviceptr = 0;
        // SAFETY: `host` was allocated with DEVICEMAP just now; flags must be 0.
        let mapped = check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0)
        });
        if let Err(error) = mapped {
            // SAFETY: allocated above and not handed out.
            let _ = unsafe { sys::cuMemFreeHost(host) };
            return Err(error);
        }
        Ok((host.cast(), device))
    }

    /// # Safety
    /// `host` must come from [`host_alloc_mapped`] and be freed once.
    pub(crate) unsafe fn host_free(host: *mut u8) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(host.cast()) })
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
        let mut pointer: CUdeviceptr = 0;
        // SAFETY: a valid out-pointer; `stream` per the caller.
        let status = unsafe {
            match stream {
                Some(stream) => sys::cuMemAllocAsync(&mut pointer, size, stream),
                None => sys::cuMemAlloc_v2(&mut pointer, size),
            }
        };
        check("cuMemAlloc", status)?;
        Ok(pointer)
    }

    /// # Safety
    /// `pointer` must come from [`device_alloc`] (with the same `stream`) and be freed once.
    pub(crate) unsafe fn device_free(
        pointer: CUdeviceptr,
        stream: Option<CUstream>,
    ) -> Result<(), DriverError> {
        // SAFETY: per the caller.
        let status = unsafe {
            match stream {
                Some(stream) => sys::cuMemFreeAsync(pointer, stream),
                None => sys::cuMemFree_v2(pointer),
            }
        };
        check("cuMemFree", status)
    }

    /// # Safety
    /// `address` must hold `bytes.len()` bytes of device memory of the current context.
    pub(crate) unsafe fn copy_to_device(
        address: CUdeviceptr,
        bytes: &[u8],
    ) -> Result<(), DriverError> {
        // SAFETY: per the caller; `bytes` is readable for its length.
        check("cuMemcpyHtoD", unsafe {
            sys::cuMemcpyHtoD_v2(address, bytes.as_ptr().cast(), bytes.len())
        })
    }

    /// # Safety
    /// `address` must hold `len` bytes of device memory of the current context.
    pub(crate) unsafe fn copy_from_device(
        address: CUdeviceptr,
        len: usize,
    ) -> Result<Vec<u8>, DriverError> {
        let mut bytes = vec![0u8; len];
        // SAFETY: per the caller; `bytes` has room for `len` bytes.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(bytes.as_mut_ptr().cast(), address, len)
        })?;
        Ok(bytes)
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
