//! A loaded image: the CUDA module, its streams and everything else the seed loader sets up
//! before the first launch (constructor arrays); the primitives the shared module runs on.

use super::device::{automatic_stack_size, refuse_after_fault, CudaDevice};
use super::driver::{calls, runtime, DriverError};
use super::image::{
    check_ptx_target, choose_image, cubin_arch, pack_init_arrays, ImageChoice, GLOBALTIMER_HZ,
    INIT_ARRAY_BOUNDS,
};
use super::launch::{param_buffer, CudaLaunch, RawLaunch};
use super::memory::{DeviceHeap, PinnedHost};
use super::timing::LaunchEvents;
use crate::handlers::DeviceMemory;
use crate::kernel_args::KernelArg;
use crate::module::{Primitives, Started};
use crate::{BackendError, LaunchShape, ResourceUsage, SharedAlloc};
use cudarc::driver::sys::{CUfunction, CUmodule, CUresult, CUstream};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::path::Path;
use std::rc::Rc;

/// NVIDIA warps are 32 lanes: the RPC packet of a port has 32 buffers.
pub const LANE_SIZE: u32 = 32;

/// What loading needs to know about an image, independent of how it was parsed.
#[derive(Clone, Debug)]
pub struct ImageFacts<'a> {
    /// Where the image came from (cubins are looked up next to a PTX file).
    pub path: Option<&'a Path>,
    /// The image's bytes: PTX text or a cubin.
    pub bytes: &'a [u8],
    pub is_cubin: bool,
    /// Names of the image's global variables.
    pub globals: Vec<&'a str>,
    /// Names of the image's kernels.
    pub kernels: Vec<&'a str>,
    /// PTX: the `.target` architecture and the `.version`.
    pub ptx_target: Option<&'a str>,
    pub ptx_version: Option<(u32, u32)>,
    /// Constructor and destructor objects, each in priority order.
    pub ctors: Vec<&'a str>,
    pub dtors: Vec<&'a str>,
}

/// An image loaded into a device's primary context.
pub struct CudaPrimitives {
    pub(crate) module: CUmodule,
    /// Runs the kernels; non-blocking so it never waits on the legacy default stream.
    pub(crate) stream: CUstream,
    /// Serves device `malloc`/`free` while a kernel runs on `stream`.
    pub(crate) memory_stream: CUstream,
    pub(crate) heap: DeviceHeap,
    pub(crate) functions: HashMap<String, CUfunction>,
    /// Host-visible blocks handed out by `alloc_host_visible` (RPC buffer, argv, envp, ...).
    pub(crate) shared: Vec<PinnedHost>,
    /// Device memory of the host's buffers (`alloc_device`), from `cuMemAlloc`.
    pub(crate) buffers: HashSet<u64>,
    /// Each kernel's `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` as last read or set.
    pub(crate) dynamic_shared: HashMap<String, u32>,
    /// The constructor/destructor array the start code walks; must outlive the module.
    pub(crate) init_arrays: Option<PinnedHost>,
    /// `CUDA_LAUNCH_BLOCKING=1` makes `cuLaunchKernel` wait for the kernel, which would wait
    /// for our RPC server: launches then happen on a helper thread.
    pub(crate) launch_blocking: bool,
    /// Recorded around each launch for its device time; `None` only while loading.
    pub(crate) events: Option<LaunchEvents>,
    /// Device memory as large as the L2 cache, written over to flush it (`--flush-l2`), made
    /// at the first flush: its address and size (also in `buffers`, which frees it).
    pub(crate) l2_flush: Option<(u64, usize)>,
    /// Last: the blocks above are freed (by their own drops, after `Drop`) while the device,
    /// which may be this module's alone, still holds its context.
    pub(crate) device: Rc<CudaDevice>,
}

/// Loads an image: cubin when one for this GPU exists next to the PTX, else the PTX through the
/// driver's JIT. Then gives the context the stack the module needs (see
/// [`CudaDevice::ensure_stack`]): `stack_size` (`--stack-size`) where given, else
/// [`automatic_stack_size`] for its kernels' largest static frame, which only the loaded module
/// can tell. Set before anything of the module is launched.
pub(crate) fn load(
    device: &Rc<CudaDevice>,
    facts: &ImageFacts<'_>,
    stack_size: Option<usize>,
) -> Result<CudaPrimitives, BackendError> {
    refuse_after_fault()?;
    device.make_current()?;
    let module = load_module(device, facts)?;
    // From here on, dropping `loaded` on an error releases everything made so far.
    let mut loaded = CudaPrimitives {
        device: Rc::clone(device),
        module,
        stream: std::ptr::null_mut(),
        memory_stream: std::ptr::null_mut(),
        heap: DeviceHeap::new(std::ptr::null_mut(), false),
        functions: HashMap::new(),
        shared: Vec::new(),
        buffers: HashSet::new(),
        dynamic_shared: HashMap::new(),
        init_arrays: None,
        launch_blocking: std::env::var("CUDA_LAUNCH_BLOCKING").is_ok_and(|v| v.trim() == "1"),
        events: None,
        l2_flush: None,
    };
    loaded.stream = new_stream()?;
    loaded.memory_stream = new_stream()?;
    loaded.heap = DeviceHeap::new(loaded.memory_stream, device.supports_memory_pools());
    let stack = match stack_size {
        Some(bytes) => bytes,
        None => automatic_stack_size(loaded.largest_frame(&facts.kernels), device.stack_room()),
    };
    device.ensure_stack(stack)?;
    // Created once and reused by every launch of the module (they run one at a time).
    loaded.events = Some(LaunchEvents::create()?);
    loaded.set_up_init_arrays(&facts.ctors, &facts.dtors)?;
    Ok(loaded)
}

fn new_stream() -> Result<CUstream, DriverError> {
    calls::stream_create_non_blocking()
}

/// Size of each JIT log buffer: ptxas errors for a whole crate fit easily.
const JIT_LOG_BYTES: usize = 64 * 1024;

fn load_module(device: &CudaDevice, facts: &ImageFacts<'_>) -> Result<CUmodule, BackendError> {
    let device_sm = device.sm();
    let shown = facts
        .path
        .map_or_else(|| "the image".to_owned(), |p| format!("`{}`", p.display()));
    if facts.is_cubin {
        return load_with_log(facts.bytes)
            .map_err(|failure| runtime(failure.message(&shown, "cubin", None)));
    }
    check_ptx_target(facts.ptx_target, device_sm, &device.info.name)?;
    if let Some(path) = facts.path {
        if let ImageChoice::Cubin(cubin) = choose_image(path, device_sm, |candidate| {
            fresh_cubin_arch(candidate, path)
        }) {
            let bytes = std::fs::read(&cubin).map_err(|source| BackendError::Io {
                context: format!("failed to read `{}`", cubin.display()),
                source,
            })?;
            return load_with_log(&bytes).map_err(|failure| {
                runtime(failure.message(&format!("`{}`", cubin.display()), "cubin", None))
            });
        }
    }
    // The driver reads PTX as a C string.
    let mut ptx = facts.bytes.to_vec();
    if ptx.last() != Some(&0) {
        ptx.push(0);
    }
    let ptx_version = facts.ptx_version.map_or_else(
        || "unknown".to_owned(),
        |(major, minor)| format!("{major}.{minor}"),
    );
    let versions = PtxVersions {
        ptx: &ptx_version,
        driver: device.info.driver.as_deref().unwrap_or("unknown version"),
    };
    load_with_log(&ptx).map_err(|failure| runtime(failure.message(&shown, "PTX", Some(versions))))
}

/// A failed `cuModuleLoadDataEx` and what the JIT logged.
pub(crate) struct LoadFailure {
    pub(crate) error: DriverError,
    pub(crate) log: String,
}

/// The PTX ISA version of an image and the driver's version, for the "too new" hint.
#[derive(Clone, Copy)]
pub(crate) struct PtxVersions<'a> {
    pub(crate) ptx: &'a str,
    pub(crate) driver: &'a str,
}

impl LoadFailure {
    /// `failed to load `x.ptx` (PTX): CUDA_ERROR_INVALID_PTX (...)`, the JIT log, and a hint
    /// when the PTX is newer than the driver understands.
    pub(crate) fn message(&self, shown: &str, what: &str, ptx: Option<PtxVersions<'_>>) -> String {
        let mut message = format!("failed to load {shown} ({what}): {}", self.error.describe());
        if !self.log.is_empty() {
            message.push_str("\nJIT log:\n");
            message.push_str(&self.log);
        }
        if let Some(versions) = ptx {
            if self.error.code == CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION {
                message.push_str(&format!(
                    "\nthe PTX ISA version ({}) is newer than this driver ({}) supports: update \
                     the NVIDIA driver or build with an older PTX version",
                    versions.ptx, versions.driver
                ));
            }
        }
        message
    }
}

/// `cuModuleLoadDataEx` with the JIT's error log captured (cudarc's `load_module` offers no JIT
/// options, hence the driver layer's own call).
fn load_with_log(image: &[u8]) -> Result<CUmodule, LoadFailure> {
    // SAFETY: callers pass a complete cubin or NUL-terminated PTX.
    unsafe { calls::module_load_with_logs(image, JIT_LOG_BYTES) }.map_err(|(error, log)| {
        LoadFailure {
            error,
            log: log_text(&log),
        }
    })
}

/// The text in a JIT log buffer, up to its NUL.
pub(crate) fn log_text(buffer: &[u8]) -> String {
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end])
        .trim_end()
        .to_owned()
}

fn c_name(name: &str) -> Result<CString, BackendError> {
    CString::new(name)
        .map_err(|_| BackendError::InvalidArgument(format!("symbol name `{name}` contains NUL")))
}

impl CudaPrimitives {
    /// Address and size of a global, or `MissingSymbol`.
    pub(crate) fn global(&self, name: &str) -> Result<(u64, usize), BackendError> {
        let c = c_name(name)?;
        // SAFETY: the module is loaded in the current context (callers make it current).
        unsafe { calls::module_global(self.module, &c) }?.ok_or_else(|| {
            BackendError::MissingSymbol {
                what: "global",
                name: name.to_owned(),
            }
        })
    }

    pub(crate) fn write_global_bytes(&self, name: &str, bytes: &[u8]) -> Result<(), BackendError> {
        let (address, size) = self.global(name)?;
        if bytes.len() > size {
            return Err(BackendError::InvalidArgument(format!(
                "{} bytes do not fit the {size}-byte global `{name}`",
                bytes.len()
            )));
        }
        self.copy_to_device(address, bytes)
    }

    pub(crate) fn read_global_bytes(
        &self,
        name: &str,
        len: usize,
    ) -> Result<Vec<u8>, BackendError> {
        let (address, size) = self.global(name)?;
        if len > size {
            return Err(BackendError::InvalidArgument(format!(
                "cannot read {len} bytes from the {size}-byte global `{name}`"
            )));
        }
        let mut bytes = vec![0; len];
        self.copy_from_device(address, &mut bytes)?;
        Ok(bytes)
    }

    /// Copies to device memory on the kernels' stream, so the next launch comes after the copy
    /// (a copy on the legacy stream would not order with a non-blocking stream). Refused once a
    /// kernel may run on forever: the copy would wait behind it.
    fn copy_to_device(&self, address: u64, bytes: &[u8]) -> Result<(), BackendError> {
        self.check_stream_usable()?;
        // SAFETY: callers checked that `address` holds `bytes.len()` device bytes; the stream
        // is this module's, with no endless kernel on it (checked above).
        Ok(unsafe { calls::copy_to_device(address, bytes, self.stream) }?)
    }

    /// Reads device memory on the kernels' stream, after the launches before it.
    fn copy_from_device(&self, address: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.check_stream_usable()?;
        // SAFETY: as for `copy_to_device`, for `out.len()` bytes.
        Ok(unsafe { calls::copy_from_device(address, out, self.stream) }?)
    }

    /// Lets `kernel` take `bytes` of dynamic shared memory: a launch with more than its
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES` (48 KiB less its static shared memory
    /// until raised) fails, so the attribute is raised first where needed (the module checked
    /// `bytes` against the device's opt-in limit).
    fn allow_dynamic_shared(&mut self, kernel: &str, bytes: u32) -> Result<(), BackendError> {
        if bytes == 0 {
            return Ok(());
        }
        let function = self.function(kernel)?;
        use cudarc::driver::sys::CUfunction_attribute as A;
        let allowed = match self.dynamic_shared.get(kernel) {
            Some(&allowed) => allowed,
            None => {
                // SAFETY: a function of the module loaded in the current context.
                let value = unsafe {
                    calls::function_attribute(
                        function,
                        A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    )
                }?;
                u32::try_from(value).unwrap_or(0)
            }
        };
        let allowed = if bytes > allowed {
            let value = i32::try_from(bytes).map_err(|_| {
                BackendError::InvalidArgument(format!("{bytes} bytes of shared memory"))
            })?;
            // SAFETY: as above.
            unsafe {
                calls::function_set_attribute(
                    function,
                    A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    value,
                )
            }?;
            bytes
        } else {
            allowed
        };
        self.dynamic_shared.insert(kernel.to_owned(), allowed);
        Ok(())
    }

    /// Refuses driver work after a fault anywhere in the process ([`refuse_after_fault`]), and
    /// work on a stream that may wait behind a kernel that never ends.
    fn check_stream_usable(&self) -> Result<(), BackendError> {
        refuse_after_fault()?;
        if self.device.poisoned.get() {
            return Err(runtime(
                "the context may still run a faulted or timed-out kernel: no more copies",
            ));
        }
        Ok(())
    }

    /// Builds the constructor/destructor array the NVPTX start code walks (nvlink makes none):
    /// each `__init_array_object_*` global holds a function address, collected in priority
    /// order into pinned memory whose bounds go into `__init_array_start` and friends.
    fn set_up_init_arrays(&mut self, ctors: &[&str], dtors: &[&str]) -> Result<(), BackendError> {
        if ctors.is_empty() && dtors.is_empty() {
            return Ok(());
        }
        let read_address = |name: &&str| -> Result<u64, BackendError> {
            let bytes = self.read_global_bytes(name, 8)?;
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes);
            Ok(u64::from_le_bytes(word))
        };
        let ctors = ctors
            .iter()
            .map(read_address)
            .collect::<Result<Vec<_>, _>>()?;
        let dtors = dtors
            .iter()
            .map(read_address)
            .collect::<Result<Vec<_>, _>>()?;
        let count = ctors.len() + dtors.len();
        let mut block = PinnedHost::new(count * 8)?;
        let arrays = pack_init_arrays(&ctors, &dtors, block.device());
        block.write(&arrays.bytes);
        for (name, bound) in INIT_ARRAY_BOUNDS.iter().zip(arrays.bounds) {
            self.write_global_bytes(name, &bound.to_le_bytes())
                .map_err(|error| match error {
                    BackendError::MissingSymbol { .. } => BackendError::Incompatible(format!(
                        "the image has constructors or destructors but no `{name}` global for \
                         the start code to find them"
                    )),
                    other => other,
                })?;
        }
        self.init_arrays = Some(block);
        Ok(())
    }

    pub(crate) fn function(&mut self, kernel: &str) -> Result<CUfunction, BackendError> {
        if let Some(&function) = self.functions.get(kernel) {
            return Ok(function);
        }
        let c = c_name(kernel)?;
        // SAFETY: the module is loaded in the current context (callers make it current).
        let function = unsafe { calls::module_function(self.module, &c) }?.ok_or_else(|| {
            BackendError::MissingSymbol {
                what: "kernel",
                name: kernel.to_owned(),
            }
        })?;
        self.functions.insert(kernel.to_owned(), function);
        Ok(function)
    }

    /// The largest `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES` (static frame) among `kernels`, as far
    /// as the driver reports them; 0 where it reports none.
    fn largest_frame(&mut self, kernels: &[&str]) -> u64 {
        use cudarc::driver::sys::CUfunction_attribute as A;
        let mut largest = 0;
        for kernel in kernels {
            let Ok(function) = self.function(kernel) else {
                continue;
            };
            // SAFETY: a function of the module loaded in the current context.
            let bytes = unsafe {
                calls::function_attribute(function, A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
            };
            if let Some(bytes) = bytes.ok().and_then(|bytes| u64::try_from(bytes).ok()) {
                largest = largest.max(bytes);
            }
        }
        largest
    }

    pub(crate) fn usage(&self, kernel: &str) -> Option<ResourceUsage> {
        let c = c_name(kernel).ok()?;
        // SAFETY: the module is loaded in the current context (made current by the caller).
        let function = unsafe { calls::module_function(self.module, &c) }.ok()??;
        // SAFETY: a function of the loaded module.
        let attribute = |which| unsafe { calls::function_attribute(function, which) }.ok();
        use cudarc::driver::sys::CUfunction_attribute as A;
        Some(ResourceUsage {
            registers: attribute(A::CU_FUNC_ATTRIBUTE_NUM_REGS).and_then(|v| u32::try_from(v).ok()),
            local_bytes: attribute(A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
                .and_then(|v| u64::try_from(v).ok()),
            shared_bytes: attribute(A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
                .and_then(|v| u64::try_from(v).ok()),
        })
    }
}

impl Drop for CudaPrimitives {
    fn drop(&mut self) {
        // Errors cannot be reported from here.
        let _ = self.device.make_current();
        // Device memory first, on the stream it was allocated on, then the streams, then the
        // module. Pinned host blocks are freed by their own drops afterwards.
        self.heap.release_all();
        for buffer in std::mem::take(&mut self.buffers) {
            // SAFETY: allocated by `alloc_device` with `cuMemAlloc` and freed once; no kernel
            // runs (a module that may still run one is never dropped).
            let _ = unsafe { calls::device_free(buffer, None) };
        }
        // SAFETY: the streams, events and module were created by `load` and are destroyed
        // once; nothing uses them after this point (no launch runs: a module whose kernel may
        // still run is never dropped).
        unsafe {
            // A null stream is one a failed load never made (null would be the legacy stream).
            if !self.memory_stream.is_null() {
                let _ = calls::stream_synchronize(self.memory_stream);
            }
            if let Some(events) = self.events.take() {
                events.destroy();
            }
            for stream in [self.stream, self.memory_stream] {
                if !stream.is_null() {
                    let _ = calls::stream_destroy(stream);
                }
            }
            let _ = calls::module_unload(self.module);
        }
    }
}

impl Primitives for CudaPrimitives {
    fn rpc_lane_size(&self) -> u32 {
        LANE_SIZE
    }

    fn clock_frequency(&self) -> Option<u64> {
        Some(GLOBALTIMER_HZ)
    }

    fn global_size(&self, name: &str) -> Option<u64> {
        self.device.make_current().ok()?;
        self.global(name).ok().map(|(_, size)| size as u64)
    }

    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError> {
        self.device.make_current()?;
        self.write_global_bytes(name, bytes)
    }

    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError> {
        self.device.make_current()?;
        self.read_global_bytes(name, len)
    }

    fn alloc_host_visible(&mut self, size: usize) -> Result<SharedAlloc, BackendError> {
        refuse_after_fault()?;
        self.device.make_current()?;
        let block = PinnedHost::new(size)?;
        let alloc = SharedAlloc {
            host: block.host(),
            device: block.device(),
            len: block.len(),
        };
        self.shared.push(block);
        Ok(alloc)
    }

    fn heap(&mut self) -> &mut dyn DeviceMemory {
        &mut self.heap
    }

    fn alloc_device(&mut self, size: usize) -> Result<u64, BackendError> {
        self.device.make_current()?;
        self.check_stream_usable()?;
        // Synchronous `cuMemAlloc`, not stream-ordered: the memory is used on the kernels'
        // stream and copied to from the host, and lives across launches.
        // SAFETY: no stream: a plain allocation of the current context.
        let address = unsafe { calls::device_alloc(size, None) }?;
        // Zeroed on the kernels' stream, so the next launch comes after it.
        // SAFETY: `size` bytes just allocated; the stream is this module's and usable.
        if let Err(error) = unsafe { calls::zero_device(address, size, self.stream) } {
            // SAFETY: allocated above and handed out to no one.
            let _ = unsafe { calls::device_free(address, None) };
            return Err(error.into());
        }
        self.buffers.insert(address);
        Ok(address)
    }

    fn free_device(&mut self, address: u64) -> Result<(), BackendError> {
        self.device.make_current()?;
        if self.buffers.remove(&address) {
            // SAFETY: allocated by `alloc_device` and freed once; launches are synchronous, so
            // no kernel uses it now.
            unsafe { calls::device_free(address, None) }?;
        }
        Ok(())
    }

    fn write_device(&mut self, address: u64, bytes: &[u8]) -> Result<(), BackendError> {
        self.device.make_current()?;
        // The module checked that `address` holds `bytes.len()` device bytes.
        self.copy_to_device(address, bytes)
    }

    fn read_device(&mut self, address: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.device.make_current()?;
        // The module checked that `address` holds `out.len()` device bytes.
        self.copy_from_device(address, out)
    }

    /// Writes over a buffer the size of the L2 cache on the kernels' stream, as NVBench flushes
    /// it for a cold run: the next launch, ordered after it on the stream (and after its start
    /// event), finds none of the last launches' data in L2. The buffer is made at the first
    /// flush, from `CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE`; a device that reports no L2 has none
    /// to flush.
    fn flush_l2(&mut self) -> Result<bool, BackendError> {
        refuse_after_fault()?;
        self.device.make_current()?;
        self.check_stream_usable()?;
        let (address, size) = match self.l2_flush {
            Some(buffer) => buffer,
            None => {
                use cudarc::driver::sys::CUdevice_attribute as A;
                let size = calls::device_attribute(
                    self.device.handle,
                    A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                )?;
                let Ok(size @ 1..) = usize::try_from(size) else {
                    return Ok(false);
                };
                // SAFETY: no stream: a plain allocation of the current context.
                let address = unsafe { calls::device_alloc(size, None) }?;
                self.buffers.insert(address);
                self.l2_flush = Some((address, size));
                (address, size)
            }
        };
        // SAFETY: `size` bytes of device memory this module allocated and no kernel uses; the
        // stream is this module's and usable.
        unsafe { calls::fill_device_async(address, size, self.stream) }?;
        Ok(true)
    }

    fn start(&mut self, kernel: &str, shape: LaunchShape, args: &[KernelArg]) -> Started {
        refuse_after_fault()?;
        self.device.make_current()?;
        // Frees the device asked for during the last launch (see `DeviceHeap::free`).
        self.heap.release_deferred();
        let function = self.function(kernel)?;
        self.allow_dynamic_shared(kernel, shape.shared_bytes)?;
        let (words, args_size) = param_buffer(args);
        let raw = RawLaunch {
            context: self.device.context,
            function,
            shape,
            stream: self.stream,
            words,
            args_size,
            events: self.events,
        };
        Ok(Box::new(CudaLaunch::start(
            raw,
            kernel,
            self.launch_blocking,
        )?))
    }

    fn resource_usage(&self, kernel: &str) -> Option<ResourceUsage> {
        self.device.make_current().ok()?;
        self.usage(kernel)
    }

    fn max_block_threads(&mut self, kernel: &str) -> Option<u64> {
        self.device.make_current().ok()?;
        let function = self.function(kernel).ok()?;
        use cudarc::driver::sys::CUfunction_attribute as A;
        // SAFETY: a function of the module loaded in the current context.
        let max = unsafe {
            calls::function_attribute(function, A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
        };
        max.ok().and_then(|max| u64::try_from(max).ok())
    }

    fn max_shared_bytes(&mut self, kernel: &str) -> Option<u64> {
        self.device.make_current().ok()?;
        let device_limit = self.device.max_shared_bytes_per_block()?;
        let function = self.function(kernel).ok()?;
        use cudarc::driver::sys::CUfunction_attribute as A;
        // SAFETY: a function of the module loaded in the current context.
        let statically =
            unsafe { calls::function_attribute(function, A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) }
                .ok()
                .and_then(|bytes| u64::try_from(bytes).ok())
                .unwrap_or(0);
        Some(device_limit.saturating_sub(statically))
    }

    fn abandon(&mut self) {
        // The context may still run the kernel: releasing it could wait forever.
        self.device.poisoned.set(true);
    }
}

/// The architecture of the cubin at `candidate`, if it exists, parses, and is at least as new
/// as the PTX it was assembled from (a stale cubin would run old code).
pub(crate) fn fresh_cubin_arch(candidate: &Path, ptx: &Path) -> Option<gpurun_image::CudaArch> {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let (cubin_time, ptx_time) = (modified(candidate)?, modified(ptx)?);
    if cubin_time < ptx_time {
        return None;
    }
    cubin_arch(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jit_log_stops_at_nul() {
        let mut buffer = b"ptxas fatal   : Unresolved extern function 'x'\n".to_vec();
        buffer.resize(128, 0);
        assert_eq!(
            log_text(&buffer),
            "ptxas fatal   : Unresolved extern function 'x'"
        );
        assert_eq!(log_text(&[0; 16]), "");
        assert_eq!(log_text(b"no terminator"), "no terminator");
    }

    #[test]
    fn load_failure_shows_code_log_and_version_hint() {
        let versions = PtxVersions {
            ptx: "8.8",
            driver: "CUDA 12.2",
        };
        let failure = |code| LoadFailure {
            error: DriverError {
                call: "cuModuleLoadDataEx",
                code,
            },
            log: "ptxas application ptx input, line 5; fatal : Unsupported .version 8.8".into(),
        };
        let text = failure(CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION).message(
            "`k.ptx`",
            "PTX",
            Some(versions),
        );
        assert!(
            text.starts_with("failed to load `k.ptx` (PTX): CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
            "{text}"
        );
        assert!(
            text.contains("\nJIT log:\nptxas application ptx input"),
            "{text}"
        );
        assert!(text.contains("PTX ISA version (8.8) is newer than this driver (CUDA 12.2)"));
        // Other codes get no version hint; an empty log adds nothing.
        let mut other = failure(CUresult::CUDA_ERROR_INVALID_PTX);
        other.log.clear();
        let text = other.message("`k.ptx`", "PTX", Some(versions));
        assert!(!text.contains("newer than"), "{text}");
        assert!(!text.contains("JIT log"), "{text}");
    }

    #[test]
    fn stale_or_foreign_cubins_are_not_used() {
        use std::time::{Duration, SystemTime};
        let dir = std::env::temp_dir().join(format!("gpurun-cuda-cubin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ptx = dir.join("k.ptx");
        let cubin = dir.join("k.cubin");
        std::fs::write(&ptx, ".version 7.0\n.target sm_70\n").unwrap();
        // A real cubin (ptxas output for sm_70) from gpurun-image's samples.
        let sample =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../gpurun-image/tests/data/sample.cubin");
        std::fs::copy(&sample, &cubin).unwrap();
        let set_time = |path: &Path, time: SystemTime| {
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(time)
                .unwrap();
        };
        let now = SystemTime::now();
        set_time(&ptx, now - Duration::from_secs(10));
        set_time(&cubin, now);
        let arch = fresh_cubin_arch(&cubin, &ptx).unwrap();
        assert_eq!(arch.sm, 70);
        assert_eq!(
            choose_image(&ptx, 70, |c| fresh_cubin_arch(c, &ptx)),
            ImageChoice::Cubin(cubin.clone())
        );
        // The PTX was rebuilt after the cubin: the cubin is stale.
        set_time(&ptx, now + Duration::from_secs(10));
        assert_eq!(fresh_cubin_arch(&cubin, &ptx), None);
        assert_eq!(
            choose_image(&ptx, 70, |c| fresh_cubin_arch(c, &ptx)),
            ImageChoice::Ptx
        );
        // Not a cubin at all.
        std::fs::write(&cubin, b"not an elf").unwrap();
        set_time(&ptx, now - Duration::from_secs(10));
        assert_eq!(fresh_cubin_arch(&cubin, &ptx), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
