//! A code object loaded on one GPU agent: the frozen, validated executable, its queue, the
//! host-visible blocks (RPC buffer, argv, ...) and what `malloc` over RPC handed out; the
//! primitives the shared module runs on.

use super::device::Opened;
use super::driver::runtime;
use super::driver::{calls, describe_queue_error, status_string, HsaError};
use super::launch::{earlier_fault, HsaLaunch, RefusedLaunch};
use super::memory::{copy_and_wait, PoolBuffer, RpcDoorbell, Signal};
use super::packet::{
    dispatch_header, dispatch_packet, header_word, kernarg_block, lane_private_limit,
    launch_private_size, KernelFacts,
};
use super::runtime::{fault_count, fault_text, Runtime};
use crate::handlers::DeviceMemory;
use crate::kernel_args::{pack_c_struct, KernelArg};
use crate::module::{Primitives, Started};
use crate::{BackendError, LaunchShape, LoadOptions, ResourceUsage, SharedAlloc};
use gpurun_abi::shape::AMDGPU_RUNTIME_LDS;
use hsa_sys::*;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// An executable, destroyed on drop.
struct Executable {
    lib: Arc<HsaLib>,
    handle: hsa_executable_t,
}

impl Drop for Executable {
    fn drop(&mut self) {
        // SAFETY: created by hsa_executable_create_alt and destroyed once; no kernel of it runs
        // any more (a module whose launch faulted or timed out is leaked instead, see launch.rs).
        let _ = unsafe { calls::executable_destroy(&self.lib, self.handle) };
    }
}

/// What the queue error callback records; shared (its address stays fixed for the runtime) with
/// the launches that check it.
#[derive(Default)]
pub(crate) struct QueueState {
    pub error: Mutex<Option<hsa_status_t>>,
}

impl QueueState {
    /// The status the runtime reported for this queue, once it failed.
    pub(crate) fn error(&self) -> Option<hsa_status_t> {
        *self
            .error
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A user-mode AQL queue on the GPU agent, one per module (so one per concurrently running
/// test), destroyed with the module, or leaked with it when a kernel may still run.
///
/// Why not fewer queues shared by the slots of a worker, as HIP shares four hardware queues
/// among streams: the packet processor advances a queue's read index only past completed
/// packets, in order, so one long kernel keeps every slot behind it from being reused, and a
/// queue error (or a hung kernel) ends every test on that queue. A queue per module has one
/// launch in flight at a time: it never fills, and what goes wrong on it is its test's alone.
/// The kernel driver multiplexes more user queues than the GPU has hardware queue slots.
pub(crate) struct Queue {
    lib: Arc<HsaLib>,
    pub raw: *mut hsa_queue_t,
    pub state: Arc<QueueState>,
    /// Packet slots reserved so far: the module is the queue's only producer, so this is the
    /// queue's write index.
    pub reserved: std::sync::atomic::AtomicU64,
}

// SAFETY: the queue descriptor is the runtime's, valid until `hsa_queue_destroy`; the module
// that owns the queue is its only producer.
unsafe impl Send for Queue {}
// SAFETY: as above; shared references only read the descriptor and the error state.
unsafe impl Sync for Queue {}

impl Queue {
    pub(crate) fn create(lib: &Arc<HsaLib>, gpu: hsa_agent_t) -> Result<Queue, HsaError> {
        // SAFETY: QUEUE_MIN_SIZE and QUEUE_MAX_SIZE are uint32_t.
        let min: u32 = unsafe { calls::agent_info(lib, gpu, HSA_AGENT_INFO_QUEUE_MIN_SIZE) }?;
        // SAFETY: as above.
        let max: u32 = unsafe { calls::agent_info(lib, gpu, HSA_AGENT_INFO_QUEUE_MAX_SIZE) }?;
        let size = queue_size(min, max);
        let state = Arc::new(QueueState::default());
        // SAFETY: `on_queue_error` matches the callback type; `data` points to the shared state,
        // which outlives the queue (Drop destroys the queue before its reference goes).
        let raw = unsafe {
            calls::queue_create(
                lib,
                gpu,
                size,
                Some(on_queue_error),
                Arc::as_ptr(&state).cast_mut().cast(),
            )
        }?;
        if raw.is_null() {
            return Err(HsaError {
                call: "hsa_queue_create",
                status: HSA_STATUS_ERROR_INVALID_QUEUE,
                description: Some("the runtime returned no queue".into()),
            });
        }
        let queue = Queue {
            lib: Arc::clone(lib),
            raw,
            state,
            reserved: std::sync::atomic::AtomicU64::new(0),
        };
        // Before any dispatch: the packet processor writes a dispatch's timestamps into its
        // completion signal only when the queue's profiling flag is set as it takes the packet.
        // SAFETY: the queue was created just above (and is destroyed by `queue`'s drop on error).
        unsafe { calls::queue_enable_profiling(lib, queue.raw) }?;
        Ok(queue)
    }
}

/// A power-of-two queue size within the agent's limits; small, since one launch runs at a time
/// (and a no-op barrier may fill a slot given up on).
pub(crate) fn queue_size(min: u32, max: u32) -> u32 {
    const WANTED: u32 = 64;
    let size = WANTED.clamp(min.max(1), max.max(1));
    size.checked_next_power_of_two()
        .unwrap_or(max)
        .min(max.max(1))
}

/// Runs on a runtime thread when the queue breaks (a fault, an illegal instruction, ...).
unsafe extern "C" fn on_queue_error(
    status: hsa_status_t,
    _queue: *mut hsa_queue_t,
    data: *mut c_void,
) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the QueueState of `Queue::create`, alive while the queue exists.
    let state = unsafe { &*data.cast::<QueueState>() };
    if let Ok(mut error) = state.error.lock() {
        error.get_or_insert(status);
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: created by hsa_queue_create and destroyed once, before `state` is dropped.
        let _ = unsafe { calls::queue_destroy(&self.lib, self.raw) };
    }
}

/// Device memory handed out through RPC MALLOC, from the GPU's coarse-grained pool.
pub(crate) struct DeviceHeap {
    lib: Arc<HsaLib>,
    pool: hsa_amd_memory_pool_t,
    gpu: hsa_agent_t,
    blocks: HashMap<u64, PoolBuffer>,
}

impl DeviceMemory for DeviceHeap {
    fn malloc(&mut self, size: u64) -> u64 {
        let Ok(size) = usize::try_from(size) else {
            return 0;
        };
        match PoolBuffer::allocate(&self.lib, self.pool, size, self.gpu) {
            Ok(block) => {
                let address = block.address();
                self.blocks.insert(address, block);
                address
            }
            Err(_) => 0,
        }
    }

    fn free(&mut self, address: u64) {
        // Dropping the block frees it; unknown addresses are ignored.
        self.blocks.remove(&address);
    }
}

/// An image loaded on one GPU.
pub struct HsaPrimitives {
    /// Everything a running kernel may touch; leaked instead of freed once a launch faulted or
    /// timed out (see `Drop`).
    pub(crate) res: Resources,
    kernels: HashMap<String, KernelFacts>,
    /// What the image says that the runtime does not.
    facts: ImageFacts,
    /// `LoadOptions::stack_size`: the stack a dynamic-stack kernel gets beyond its static frames
    /// (at least 16 KiB, `launch_private_size`).
    pub(crate) stack_size: Option<usize>,
    /// The GPU the module is loaded on (its runtime outlives `res` through `res`'s own share).
    pub(crate) device: Rc<Opened>,
}

/// The objects of a module, dropped in field order: the queue before what its kernels use.
pub(crate) struct Resources {
    pub queue: Queue,
    /// The RPC doorbell, once the RPC installation asked for one and the runtime's signals can
    /// wake a sleeping thread.
    pub doorbell: Option<RpcDoorbell>,
    pub heap: DeviceHeap,
    /// Device memory of the host's buffers (`alloc_device`), by address.
    buffers: HashMap<u64, PoolBuffer>,
    shared: Vec<PoolBuffer>,
    executable: Executable,
    /// Last: the runtime stays initialised while any of the above exists. A module leaked
    /// after a fault or timeout keeps this reference too, so `hsa_shut_down` never runs under
    /// a kernel that may still use the queue and memory (process exit cleans up instead).
    _runtime: Arc<Runtime>,
}

/// What a module needs from its image beyond the code object's bytes.
pub(crate) struct ImageFacts {
    /// RPC lanes: the wavefront size the image was built for.
    pub lane_size: u32,
    /// Where each kernel reads its hidden arguments.
    pub hidden: super::HiddenLayouts,
}

/// Loads `code_object` on the device: read, create, load, freeze and validate the executable;
/// then the queue.
pub(crate) fn load(
    device: &Rc<Opened>,
    code_object: &[u8],
    facts: ImageFacts,
    options: &LoadOptions,
) -> Result<HsaPrimitives, BackendError> {
    let lib = Arc::clone(device.runtime.lib_arc());
    let executable = load_executable(&lib, device, code_object)?;
    let queue = Queue::create(&lib, device.gpu.agent).map_err(runtime)?;
    let heap = DeviceHeap {
        lib: Arc::clone(&lib),
        pool: device.pools.coarse_grained,
        gpu: device.gpu.agent,
        blocks: HashMap::new(),
    };
    Ok(HsaPrimitives {
        device: Rc::clone(device),
        res: Resources {
            queue,
            doorbell: None,
            heap,
            buffers: HashMap::new(),
            shared: Vec::new(),
            executable,
            _runtime: Arc::clone(&device.runtime),
        },
        kernels: HashMap::new(),
        facts,
        stack_size: options.stack_size,
    })
}

fn load_executable(
    lib: &Arc<HsaLib>,
    device: &Opened,
    code_object: &[u8],
) -> Result<Executable, BackendError> {
    // SAFETY: the bytes outlive the reader, which is destroyed below before returning.
    let reader = unsafe { calls::code_object_reader(lib, code_object) }.map_err(runtime)?;
    let result = load_with_reader(lib, device, reader);
    // SAFETY: created above; the loaded executable does not depend on the reader.
    let _ = unsafe { calls::code_object_reader_destroy(lib, reader) };
    result
}

fn load_with_reader(
    lib: &Arc<HsaLib>,
    device: &Opened,
    reader: hsa_code_object_reader_t,
) -> Result<Executable, BackendError> {
    let handle = calls::executable_create(lib).map_err(runtime)?;
    let executable = Executable {
        lib: Arc::clone(lib),
        handle,
    };
    let arch = device.info.arch.clone();
    // SAFETY: a live executable, not frozen yet, and a live reader.
    unsafe { calls::executable_load_code_object(lib, handle, device.gpu.agent, reader) }.map_err(
        |error| {
            BackendError::Incompatible(format!("the code object does not load on {arch}: {error}"))
        },
    )?;
    // SAFETY: a live executable. No change is allowed after this.
    unsafe { calls::executable_freeze(lib, handle) }.map_err(runtime)?;
    // SAFETY: a live executable.
    let problems = unsafe { calls::executable_validate(lib, handle) }.map_err(runtime)?;
    if problems != 0 {
        return Err(BackendError::Incompatible(format!(
            "the code object does not match the GPU ({arch}): hsa_executable_validate reported \
             {problems:#x} (built for another gfx target or feature set?)"
        )));
    }
    Ok(executable)
}

impl HsaPrimitives {
    fn lib(&self) -> &Arc<HsaLib> {
        self.device.runtime.lib_arc()
    }

    /// Looks a symbol up by name (`foo.kd` for kernels, `foo` for variables).
    fn symbol(&self, name: &str) -> Result<hsa_executable_symbol_t, BackendError> {
        let c_name = CString::new(name).map_err(|_| {
            BackendError::InvalidArgument(format!("symbol name `{name}` contains NUL"))
        })?;
        // SAFETY: the executable lives as long as `self`.
        let symbol = unsafe {
            calls::executable_symbol(
                self.lib(),
                self.res.executable.handle,
                &c_name,
                self.device.gpu.agent,
            )
        }
        .map_err(runtime)?;
        symbol.ok_or_else(|| BackendError::MissingSymbol {
            what: if name.ends_with(".kd") {
                "kernel"
            } else {
                "global"
            },
            name: name.trim_end_matches(".kd").to_owned(),
        })
    }

    /// Reads one symbol attribute of plain type `T`.
    ///
    /// # Safety
    /// `attribute` must be documented with a value of type `T`.
    unsafe fn symbol_attribute<T: Default>(
        &self,
        symbol: hsa_executable_symbol_t,
        attribute: hsa_executable_symbol_info_t,
    ) -> Result<T, BackendError> {
        // SAFETY: the symbol belongs to the live executable; `T` per the caller.
        unsafe { calls::symbol_info(self.lib(), symbol, attribute) }.map_err(runtime)
    }

    /// Address and size of the global `name`.
    fn global(&self, name: &str) -> Result<(u64, u64), BackendError> {
        let symbol = self.symbol(name)?;
        // SAFETY: VARIABLE_ADDRESS is a uint64_t, VARIABLE_SIZE a uint32_t.
        let address: u64 =
            unsafe { self.symbol_attribute(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS) }?;
        // SAFETY: as above.
        let size: u32 =
            unsafe { self.symbol_attribute(symbol, HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE) }?;
        Ok((address, u64::from(size)))
    }

    /// Facts about kernel `name` (with or without the `.kd` suffix), cached.
    pub(crate) fn kernel(&mut self, name: &str) -> Result<KernelFacts, BackendError> {
        if let Some(facts) = self.kernels.get(name) {
            return Ok(*facts);
        }
        let facts = self.query_kernel(name)?;
        self.kernels.insert(name.to_owned(), facts);
        Ok(facts)
    }

    fn query_kernel(&self, name: &str) -> Result<KernelFacts, BackendError> {
        let descriptor = kernel_descriptor_name(name);
        let symbol = self.symbol(&descriptor)?;
        // SAFETY: each attribute's documented type is used: KERNEL_OBJECT uint64_t, the segment
        // sizes and alignment uint32_t, DYNAMIC_CALLSTACK bool.
        let facts = unsafe {
            KernelFacts {
                kernel_object: self
                    .symbol_attribute(symbol, HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT)?,
                kernarg_segment_size: self.symbol_attribute(
                    symbol,
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                )?,
                kernarg_segment_alignment: self.symbol_attribute(
                    symbol,
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT,
                )?,
                group_segment_size: self.symbol_attribute(
                    symbol,
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                )?,
                private_segment_size: self.symbol_attribute(
                    symbol,
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                )?,
                dynamic_stack: self.symbol_attribute::<bool>(
                    symbol,
                    HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK,
                )?,
            }
        };
        Ok(facts)
    }

    /// Copies `bytes` into device memory at `address` through a fine-grained staging buffer.
    fn copy_to_device(&self, address: u64, bytes: &[u8]) -> Result<(), BackendError> {
        let lib = self.lib();
        let staging = PoolBuffer::allocate(
            lib,
            self.device.pools.fine_grained,
            bytes.len(),
            self.device.gpu.agent,
        )
        .map_err(runtime)?;
        // SAFETY: fine-grained memory is host-accessible and nothing else uses it yet.
        unsafe { staging.write_host(bytes) };
        // SAFETY: `address` is a loaded global of at least `bytes.len()` bytes (checked by the
        // callers) and `staging` holds `bytes.len()` runtime-allocated bytes.
        unsafe {
            copy_and_wait(
                lib,
                address as *mut c_void,
                self.device.gpu.agent,
                staging.as_mut_ptr().cast(),
                self.device.cpu.agent,
                bytes.len(),
            )
        }
    }

    fn copy_from_device(&self, address: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let len = out.len();
        let lib = self.lib();
        let staging = PoolBuffer::allocate(
            lib,
            self.device.pools.fine_grained,
            len,
            self.device.gpu.agent,
        )
        .map_err(runtime)?;
        // SAFETY: as in `copy_to_device`, in the other direction.
        unsafe {
            copy_and_wait(
                lib,
                staging.as_mut_ptr().cast(),
                self.device.cpu.agent,
                address as *const c_void,
                self.device.gpu.agent,
                len,
            )?;
        }
        // SAFETY: the copy finished; `staging` holds `len` host-readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(staging.as_mut_ptr(), out.as_mut_ptr(), len) };
        Ok(())
    }

    pub(crate) fn write_global_bytes(
        &mut self,
        name: &str,
        bytes: &[u8],
    ) -> Result<(), BackendError> {
        let (address, size) = self.global(name)?;
        if bytes.len() as u64 > size {
            return Err(BackendError::InvalidArgument(format!(
                "{} bytes do not fit the {size}-byte global `{name}`",
                bytes.len()
            )));
        }
        self.copy_to_device(address, bytes)
    }

    pub(crate) fn read_global_bytes(
        &mut self,
        name: &str,
        len: usize,
    ) -> Result<Vec<u8>, BackendError> {
        let (address, size) = self.global(name)?;
        if len as u64 > size {
            return Err(BackendError::InvalidArgument(format!(
                "cannot read {len} bytes from the {size}-byte global `{name}`"
            )));
        }
        let mut bytes = vec![0; len];
        self.copy_from_device(address, &mut bytes)?;
        Ok(bytes)
    }

    pub(crate) fn alloc_shared_block(&mut self, size: usize) -> Result<SharedAlloc, BackendError> {
        let buffer = PoolBuffer::allocate(
            self.lib(),
            self.device.pools.fine_grained,
            size,
            self.device.gpu.agent,
        )
        .map_err(runtime)?;
        // SAFETY: fine-grained host memory of at least `size` bytes, unused so far.
        unsafe { std::ptr::write_bytes(buffer.as_mut_ptr(), 0, size) };
        let shared = SharedAlloc {
            host: buffer.as_mut_ptr(),
            device: buffer.address(),
            len: size,
        };
        self.res.shared.push(buffer);
        Ok(shared)
    }

    pub(crate) fn cached_usage(&self, kernel: &str) -> Option<ResourceUsage> {
        let facts = match self.kernels.get(kernel) {
            Some(facts) => *facts,
            None => self.query_kernel(kernel).ok()?,
        };
        Some(resource_usage(&facts))
    }

    pub(crate) fn kernarg_pool(&self) -> hsa_amd_memory_pool_t {
        self.device.pools.kernarg
    }
}

impl Primitives for HsaPrimitives {
    fn rpc_lane_size(&self) -> u32 {
        self.facts.lane_size
    }

    fn rpc_ports_for(&self, shape: &LaunchShape) -> Option<u32> {
        Some(rpc_port_count(
            shape,
            self.facts.lane_size,
            self.device.gpu.max_resident_waves,
        ))
    }

    fn release_host_visible(&mut self, block: &SharedAlloc) {
        // Dropping the buffer frees it.
        self.res
            .shared
            .retain(|buffer| buffer.address() != block.device);
    }

    fn clock_frequency(&self) -> Option<u64> {
        // SAFETY: TIMESTAMP_FREQUENCY is a uint64_t. Runtimes older than ROCm 5.3 do not know
        // the attribute; the image then keeps its built-in default.
        let frequency: Result<u64, _> = unsafe {
            calls::agent_info(
                self.lib(),
                self.device.gpu.agent,
                HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY,
            )
        };
        frequency.ok().filter(|hz| *hz > 0)
    }

    fn global_size(&self, name: &str) -> Option<u64> {
        self.global(name).ok().map(|(_, size)| size)
    }

    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError> {
        self.write_global_bytes(name, bytes)
    }

    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError> {
        self.read_global_bytes(name, len)
    }

    fn alloc_host_visible(&mut self, size: usize) -> Result<SharedAlloc, BackendError> {
        self.alloc_shared_block(size)
    }

    fn heap(&mut self) -> &mut dyn DeviceMemory {
        &mut self.res.heap
    }

    fn doorbell_counter(&mut self) -> Result<Option<SharedAlloc>, BackendError> {
        if self.res.doorbell.is_none() {
            self.res.doorbell = RpcDoorbell::new(self.lib()).map_err(runtime)?;
        }
        Ok(self.res.doorbell.as_ref().map(|doorbell| SharedAlloc {
            host: doorbell.counter as usize as *mut u8,
            device: doorbell.counter,
            len: 8,
        }))
    }

    fn doorbell_interrupt(&self) -> Option<(u64, u32)> {
        self.res
            .doorbell
            .as_ref()
            .map(|doorbell| (doorbell.mailbox, doorbell.event_id))
    }

    fn alloc_device(&mut self, size: usize) -> Result<u64, BackendError> {
        // The GPU's coarse-grained pool: its own memory, cached, which the host reaches only
        // through the runtime's copies (and where gfx90a's float atomics work, unlike on
        // fine-grained host memory).
        let buffer = PoolBuffer::allocate_words(
            self.lib(),
            self.device.pools.coarse_grained,
            size,
            self.device.gpu.agent,
        )
        .map_err(runtime)?;
        buffer.zero().map_err(runtime)?;
        let address = buffer.address();
        self.res.buffers.insert(address, buffer);
        Ok(address)
    }

    fn free_device(&mut self, address: u64) -> Result<(), BackendError> {
        // Dropping the buffer frees it.
        self.res.buffers.remove(&address);
        Ok(())
    }

    fn write_device(&mut self, address: u64, bytes: &[u8]) -> Result<(), BackendError> {
        self.copy_to_device(address, bytes)
    }

    fn max_shared_bytes(&mut self, kernel: &str) -> Option<u64> {
        let group = self.device.pools.group_segment_bytes?;
        let facts = self.kernel(kernel).ok()?;
        // Less the device runtime's own bytes, which every launch adds.
        Some(
            group
                .saturating_sub(u64::from(facts.group_segment_size))
                .saturating_sub(u64::from(AMDGPU_RUNTIME_LDS)),
        )
    }

    fn read_device(&mut self, address: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.copy_from_device(address, out)
    }

    fn start(&mut self, kernel: &str, shape: LaunchShape, args: &[KernelArg]) -> Started {
        let faults_before = fault_count();
        if let Some(first) = (faults_before > 0).then(|| fault_text(0)).flatten() {
            return Ok(Box::new(RefusedLaunch(earlier_fault(&first))));
        }
        if let Some(status) = self.res.queue.state.error() {
            // Never reached through a module (a queue error breaks it); no packet goes to a
            // queue in error.
            let text = describe_queue_error(status, status_string(self.lib(), status));
            return Ok(Box::new(RefusedLaunch(text)));
        }
        let facts = self.kernel(kernel)?;
        let private_size = launch_private_size(
            &facts,
            self.stack_size,
            lane_private_limit(self.device.gpu.wavefront_size),
            self.facts.hidden.code_object_v4(),
        )?;
        let block = kernarg_block(
            &pack_c_struct(args),
            &shape,
            facts.kernarg_segment_size,
            &self.facts.hidden.of(kernel),
            self.res.queue.raw as u64,
        )?;
        let lib = Arc::clone(self.lib());
        let gpu = self.device.gpu.agent;
        let kernargs =
            PoolBuffer::allocate(&lib, self.kernarg_pool(), block.len(), gpu).map_err(runtime)?;
        // SAFETY: kernarg memory is host-accessible and no kernel uses this block yet.
        unsafe { kernargs.write_host(&block) };
        let done = Signal::new(&lib, 1).map_err(runtime)?;
        let packet = dispatch_packet(
            &shape,
            &facts,
            private_size,
            kernargs.address(),
            done.handle,
        )?;
        self.publish(&packet, header_word(dispatch_header(), packet.setup))?;
        Ok(Box::new(HsaLaunch {
            lib,
            done,
            kernargs: Mutex::new(Some(kernargs)),
            queue: Arc::clone(&self.res.queue.state),
            faults_before,
            timestamp_hz: self.device.runtime.timestamp_hz(),
            gpu,
            doorbell: self
                .res
                .doorbell
                .as_ref()
                .map(|doorbell| doorbell.signal.handle),
        }))
    }

    fn resource_usage(&self, kernel: &str) -> Option<ResourceUsage> {
        self.cached_usage(kernel)
    }
}

/// RPC ports a launch of `shape` needs: one per wavefront of `lane_size` lanes of it that the
/// GPU can hold at once (`max_resident_waves`, when the agent says). A wavefront that finds no
/// free port spins, and on a full GPU the ones holding ports might not get to run: LLVM's
/// offload plugin therefore creates one port per wavefront of the whole GPU; a module serves one
/// launch at a time, so one per wavefront of that launch keeps the guarantee
/// (`crate::rpc_buffer`). The layout clamps it to its maximum.
pub fn rpc_port_count(shape: &LaunchShape, lane_size: u32, max_resident_waves: u32) -> u32 {
    let per_block = shape
        .threads_per_block()
        .div_ceil(u64::from(lane_size.max(1)));
    let waves = per_block.saturating_mul(shape.block_count());
    let resident = match max_resident_waves {
        0 => waves,
        known => u64::from(known),
    };
    u32::try_from(waves.min(resident).max(1)).unwrap_or(u32::MAX)
}

/// `NAME.kd`: HSA looks kernels up by their descriptor symbol.
pub fn kernel_descriptor_name(kernel: &str) -> String {
    if kernel.ends_with(".kd") {
        kernel.to_owned()
    } else {
        format!("{kernel}.kd")
    }
}

/// Resource usage from the kernel's descriptor as the runtime reports it: private (scratch)
/// bytes per work-item and group (LDS) bytes per workgroup. Register counts are not exposed by
/// HSA and are left out.
pub fn resource_usage(facts: &KernelFacts) -> ResourceUsage {
    ResourceUsage {
        registers: None,
        local_bytes: Some(u64::from(facts.private_segment_size)),
        shared_bytes: Some(u64::from(facts.group_segment_size)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_found_by_descriptor_name() {
        assert_eq!(kernel_descriptor_name("_start"), "_start.kd");
        assert_eq!(kernel_descriptor_name("_start.kd"), "_start.kd");
    }

    #[test]
    fn rpc_ports_cover_the_launchs_resident_waves() {
        let shape = |threads: u32, blocks: u32| LaunchShape::grid([blocks, 1, 1], [threads, 1, 1]);
        // MI300X: 304 CUs x 32 waves.
        let mi300x = 304 * 32;
        assert_eq!(rpc_port_count(&LaunchShape::SINGLE, 64, mi300x), 1);
        assert_eq!(rpc_port_count(&shape(64, 2), 64, mi300x), 2);
        assert_eq!(
            rpc_port_count(&shape(65, 2), 64, mi300x),
            4,
            "partial waves"
        );
        assert_eq!(rpc_port_count(&shape(1024, 1), 32, mi300x), 32, "wave32");
        assert_eq!(
            rpc_port_count(&shape(256, 100_000), 64, mi300x),
            mi300x,
            "no more than the GPU holds at once"
        );
        assert_eq!(
            rpc_port_count(&shape(256, 3), 64, 0),
            12,
            "unknown occupancy: the whole launch"
        );
    }

    #[test]
    fn queue_size_is_a_power_of_two_within_limits() {
        assert_eq!(queue_size(1, 131072), 64);
        assert_eq!(queue_size(128, 131072), 128);
        assert_eq!(queue_size(1, 16), 16);
        assert_eq!(queue_size(0, 0), 1);
    }

    #[test]
    fn resource_usage_reports_segments() {
        let usage = resource_usage(&KernelFacts {
            private_segment_size: 48,
            group_segment_size: 1024,
            ..KernelFacts::default()
        });
        assert_eq!(usage.local_bytes, Some(48));
        assert_eq!(usage.shared_bytes, Some(1024));
        assert_eq!(usage.registers, None);
    }

    #[test]
    fn queue_error_callback_keeps_the_first_status() {
        let state = Arc::new(QueueState::default());
        let data = (&*state as *const QueueState).cast_mut().cast();
        // SAFETY: `data` points to a live QueueState, as the runtime would pass it.
        unsafe {
            on_queue_error(HSA_STATUS_ERROR_EXCEPTION, std::ptr::null_mut(), data);
            on_queue_error(HSA_STATUS_ERROR, std::ptr::null_mut(), data);
            on_queue_error(HSA_STATUS_ERROR, std::ptr::null_mut(), std::ptr::null_mut());
        }
        assert_eq!(
            *state.error.lock().unwrap(),
            Some(HSA_STATUS_ERROR_EXCEPTION)
        );
    }
}
