//! The one [`Module`] every backend's loaded image becomes: [`LoadedModule`] over the backend's
//! [`Primitives`]. What is decided here is decided once for every backend: what loading sets up
//! (the clock frequency, the RPC buffer and client), the checks before a launch, the launch loop
//! (`launch_loop.rs`) and what a broken module refuses.

use crate::handlers::{DeviceMemory, Sink};
use crate::kernel_args::KernelArg;
use crate::launch_loop::{self, Launch, WaitLimits};
use crate::rpc_buffer::{initial_ports, InstalledRpc};
use crate::{
    BackendError, Device, DeviceInfo, LaunchEnd, LaunchShape, LoadOptions, Module, ResourceUsage,
    SharedAlloc,
};
use gpurun_abi::symbols;
use gpurun_image::Image;
use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::time::Duration;

pub use gpurun_abi::shape::MAX_BLOCK_THREADS;

/// What a backend supplies for one loaded image. Each is a thin wrapper over one or two driver
/// calls; nothing here decides how a launch ends.
pub trait Primitives {
    /// Lanes of an RPC packet: the warp or wavefront size (the emulated one on the host).
    fn rpc_lane_size(&self) -> u32;

    /// RPC ports a launch of `shape` needs, where the backend sizes its RPC buffer for what the
    /// module launches (HSA: one per wavefront of the launch that the GPU can hold at once);
    /// the module grows the buffer before a launch that needs more (`rpc_buffer.rs`).
    /// `None` (the default): `LoadOptions::rpc_ports`, installed once at load.
    fn rpc_ports_for(&self, _shape: &LaunchShape) -> Option<u32> {
        None
    }

    /// Takes back a block from [`Primitives::alloc_host_visible`] that the module no longer
    /// uses (an RPC buffer replaced by a larger one). The default keeps it until the module goes.
    fn release_host_visible(&mut self, _block: &SharedAlloc) {}

    /// The device's timer frequency for LLVM libc's `clock()` (`__llvm_libc_clock_freq`), if the
    /// backend knows it.
    fn clock_frequency(&self) -> Option<u64> {
        None
    }

    /// Size of the global `name` in the loaded image, `None` when it has none.
    fn global_size(&self, name: &str) -> Option<u64>;

    /// Copies `bytes` to the start of the global `name` (size already checked).
    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError>;

    /// Reads the first `len` bytes of the global `name` (size already checked).
    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError>;

    /// `size` zeroed bytes both sides can read and write, aligned to 64, owned by the module.
    fn alloc_host_visible(&mut self, size: usize) -> Result<SharedAlloc, BackendError>;

    /// Where the device counts the RPC requests it opened (LLVM's doorbell), if this backend
    /// can put a counter both sides update atomically: 8 zeroed host-visible bytes. The server
    /// then skips idle scans and waits on the counter. The default is none (the server scans).
    fn doorbell_counter(&mut self) -> Result<Option<SharedAlloc>, BackendError> {
        Ok(None)
    }

    /// With [`Primitives::doorbell_counter`]: the event mailbox address and event id the device
    /// uses to raise an interrupt when it rings (AMD: those of the interrupt signal whose value
    /// is the counter), so that a host thread can sleep until then. The default is none.
    fn doorbell_interrupt(&self) -> Option<(u64, u32)> {
        None
    }

    /// For backends whose every RPC client is a host thread (host emulation, scripted): `size`
    /// zeroed host bytes, aligned to 64, for `gpurun_rpc::host_waits`, so that both sides sleep
    /// until the other acts instead of polling. Needs a doorbell (its record names the block).
    /// The default is none: a GPU cannot wake a sleeping server.
    fn host_waits(&mut self, _size: usize) -> Result<Option<SharedAlloc>, BackendError> {
        Ok(None)
    }

    /// Device memory for RPC `malloc`/`free`.
    fn heap(&mut self) -> &mut dyn DeviceMemory;

    /// `size` zeroed bytes (`size` is at least 1) of device memory for the host's buffers
    /// ([`Module::alloc_device`]), apart from the RPC heap; its device address.
    fn alloc_device(&mut self, size: usize) -> Result<u64, BackendError>;

    /// Frees a block from [`Primitives::alloc_device`] (the module checked it is one).
    fn free_device(&mut self, address: u64) -> Result<(), BackendError>;

    /// Copies `bytes` to device memory at `address` (a range the module checked).
    fn write_device(&mut self, address: u64, bytes: &[u8]) -> Result<(), BackendError>;

    /// Fills `out` from device memory at `address` (a range the module checked).
    fn read_device(&mut self, address: u64, out: &mut [u8]) -> Result<(), BackendError>;

    /// The most dynamic shared memory per block a launch of `kernel` may ask for: what the
    /// device gives a block less what the kernel declares statically, where the backend can
    /// tell. A launch over it is refused before it starts.
    fn max_shared_bytes(&mut self, _kernel: &str) -> Option<u64> {
        None
    }

    /// Starts `kernel` (shape already checked) and returns at once.
    fn start(&mut self, kernel: &str, shape: LaunchShape, args: &[KernelArg]) -> Started;

    /// The most threads per block `kernel` can be launched with, where the backend can tell (on
    /// CUDA its register use sets it; a launch over it fails with a bare out-of-resources code).
    fn max_block_threads(&mut self, _kernel: &str) -> Option<u64> {
        None
    }

    /// Registers and memory of a kernel, where the backend can tell.
    fn resource_usage(&self, _kernel: &str) -> Option<ResourceUsage> {
        None
    }

    /// Evicts what the last launches left in the device's L2 cache, ordered before the next
    /// launch ([`Module::flush_l2`]); `Ok(false)` (the default) where the backend cannot.
    fn flush_l2(&mut self) -> Result<bool, BackendError> {
        Ok(false)
    }

    /// The module is broken and a kernel may still run: the primitives will never be dropped
    /// (see [`LoadedModule`]'s `Drop`); anything else that must not be released goes here.
    fn abandon(&mut self) {}
}

/// What an opened device of a backend supplies: loading an image's primitives.
pub trait LoadPrimitives {
    /// What a loaded image holds; it shares what it needs of the device (an `Rc`), so a module
    /// borrows nothing from the device that loaded it.
    type Primitives: Primitives + 'static;

    fn primitives(&mut self, image: &Image, opts: &LoadOptions) -> Loaded<Self>;
}

/// What [`Primitives::start`] returns.
pub type Started = Result<Box<dyn Launch>, BackendError>;

/// What [`LoadPrimitives::primitives`] returns.
pub type Loaded<L> = Result<<L as LoadPrimitives>::Primitives, BackendError>;

/// The one [`Device`] of every backend: its description and its loader.
pub struct OpenedDevice<L> {
    info: DeviceInfo,
    loader: L,
}

impl<L: LoadPrimitives> OpenedDevice<L> {
    /// A boxed device, as [`crate::Backend::open`] returns it.
    pub fn boxed(info: DeviceInfo, loader: L) -> Box<dyn Device>
    where
        L: 'static,
    {
        Box::new(OpenedDevice { info, loader })
    }
}

impl<L: LoadPrimitives> Device for OpenedDevice<L> {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn load(
        &mut self,
        image: &Image,
        options: &LoadOptions,
    ) -> Result<Box<dyn Module>, BackendError> {
        let primitives = self.loader.primitives(image, options)?;
        Ok(Box::new(LoadedModule::new(primitives, image, options)?))
    }
}

/// A loaded image on one device.
pub struct LoadedModule<P: Primitives> {
    rpc: Option<InstalledRpc>,
    /// Blocks from [`Module::alloc_device`]: `(address, size)`. Copies must stay inside one.
    device_blocks: Vec<(u64, usize)>,
    /// Block-size bounds the image declares per kernel (PTX `.maxntid`, AMDGPU
    /// `.max_flat_workgroup_size`).
    declared_max_threads: HashMap<String, u64>,
    /// The test each test kernel runs: a refusal names the test, not its mangled kernel.
    tests_by_kernel: HashMap<String, String>,
    /// Each launched kernel's block-size limit (declared and the backend's), asked of the
    /// backend once: on CUDA it is a driver call.
    block_limits: HashMap<String, Option<u64>>,
    /// Each kernel launched with shared memory: the most it may ask for, asked once.
    shared_limits: HashMap<String, Option<u64>>,
    /// Dropped by hand (see `Drop`): never once the module is broken.
    primitives: ManuallyDrop<P>,
    /// Why the module cannot run kernels any more.
    broken: Option<String>,
    /// See [`Module::last_device_time`].
    last_device_time: Option<Duration>,
}

impl<P: Primitives> Drop for LoadedModule<P> {
    fn drop(&mut self) {
        // The server first: it reads memory the primitives own.
        self.rpc = None;
        if self.broken.is_some() {
            // A kernel may still run and use the module's memory, queue or library: freeing any
            // of it could fault it or wait for it forever. Leak it all instead; the worker
            // process is replaced right after, and its exit frees everything.
            return;
        }
        // SAFETY: dropped once, here; the field is not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.primitives) };
    }
}

impl<P: Primitives> LoadedModule<P> {
    /// Finishes loading `image`, which the backend has loaded into `primitives`: fills in the
    /// clock frequency and, when the image talks RPC, lays out the RPC buffer (for the image's
    /// tests, where the backend sizes it per launch) and writes the client into
    /// `__llvm_rpc_client`. Only globals the image declares are looked up: a failed lookup is
    /// an error to a tool that watches the driver (compute-sanitizer reports CUDA's
    /// `CUDA_ERROR_NOT_FOUND` from `cuModuleGetGlobal` on every load of an image without them).
    pub fn new(
        mut primitives: P,
        image: &Image,
        options: &LoadOptions,
    ) -> Result<LoadedModule<P>, BackendError> {
        if let Some(hz) = primitives.clock_frequency() {
            if declared_global_size(&primitives, image, symbols::CLOCK_FREQ)
                .is_some_and(|size| size >= 8)
            {
                primitives.write_global(symbols::CLOCK_FREQ, &hz.to_le_bytes())?;
            }
        }
        let rpc = match declared_global_size(&primitives, image, symbols::RPC_CLIENT) {
            Some(size) => {
                let ports = initial_ports(&primitives, image, options.rpc_ports);
                Some(InstalledRpc::install(
                    &mut primitives,
                    size,
                    ports,
                    options,
                )?)
            }
            None if !image.tests().is_empty() => {
                // Results, output and panics of tests travel over RPC: without a client a
                // failing test would pass silently.
                return Err(BackendError::Incompatible(format!(
                    "the image has tests but no `{}` global to report them through",
                    symbols::RPC_CLIENT
                )));
            }
            None => None,
        };
        let declared_max_threads = image
            .kernels()
            .iter()
            .filter_map(|kernel| Some((kernel.name.clone(), u64::from(kernel.max_threads()?))))
            .collect();
        Ok(LoadedModule {
            rpc,
            device_blocks: Vec::new(),
            declared_max_threads,
            tests_by_kernel: image
                .tests()
                .iter()
                .map(|test| (test.kernel.clone(), test.name.clone()))
                .collect(),
            block_limits: HashMap::new(),
            shared_limits: HashMap::new(),
            primitives: ManuallyDrop::new(primitives),
            broken: None,
            last_device_time: None,
        })
    }

    fn global_size(&self, name: &str) -> Result<u64, BackendError> {
        self.primitives
            .global_size(name)
            .ok_or_else(|| BackendError::MissingSymbol {
                what: "global",
                name: name.to_owned(),
            })
    }

    /// The most threads per block `kernel` takes: the smaller of what the image declares and
    /// what the backend reports, if either says.
    fn block_limit(&mut self, kernel: &str) -> Option<u64> {
        if let Some(&limit) = self.block_limits.get(kernel) {
            return limit;
        }
        let declared = self.declared_max_threads.get(kernel).copied();
        let limit = match (declared, self.primitives.max_block_threads(kernel)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.block_limits.insert(kernel.to_owned(), limit);
        limit
    }

    /// How a refusal names what `kernel` runs: the test it is the kernel of, else the kernel.
    fn launched(&self, kernel: &str) -> String {
        match self.tests_by_kernel.get(kernel) {
            Some(test) => format!("test `{test}`"),
            None => format!("`{kernel}`"),
        }
    }

    /// Refuses a launch that asks for more shared memory per block than `kernel` can have.
    fn check_shared(&mut self, kernel: &str, shape: &LaunchShape) -> Result<(), BackendError> {
        if shape.shared_bytes == 0 {
            return Ok(());
        }
        let limit = match self.shared_limits.get(kernel) {
            Some(&limit) => limit,
            None => {
                let limit = self.primitives.max_shared_bytes(kernel);
                self.shared_limits.insert(kernel.to_owned(), limit);
                limit
            }
        };
        match limit {
            Some(max) if u64::from(shape.shared_bytes) > max => {
                let statically = self
                    .primitives
                    .resource_usage(kernel)
                    .and_then(|usage| usage.shared_bytes)
                    .filter(|&bytes| bytes > 0)
                    .map_or_else(String::new, |bytes| {
                        format!(" (it declares {bytes} bytes of static shared memory)")
                    });
                Err(BackendError::InvalidArgument(format!(
                    "{} can have at most {max} bytes of dynamic shared memory per block on this \
                     device{statically}, and the launch asks for {}: launch with less (a test's \
                     `shared = N`, `LaunchShape::shared_bytes`)",
                    self.launched(kernel),
                    shape.shared_bytes
                )))
            }
            _ => Ok(()),
        }
    }

    /// Checks that `len` bytes at `address` lie inside one block from [`Module::alloc_device`].
    fn check_device_range(&self, address: u64, len: usize) -> Result<(), BackendError> {
        let inside = self.device_blocks.iter().any(|&(start, size)| {
            address >= start
                && address
                    .checked_add(len as u64)
                    .is_some_and(|end| end <= start + size as u64)
        });
        if inside {
            Ok(())
        } else {
            Err(BackendError::InvalidArgument(format!(
                "{len} bytes at {address:#x} are not in device memory this module allocated"
            )))
        }
    }

    /// A broken module runs nothing and allocates nothing more.
    fn refuse_if_broken(&self) -> Result<(), BackendError> {
        match &self.broken {
            Some(reason) => Err(BackendError::InvalidArgument(format!(
                "the module cannot run kernels after an earlier failure ({reason}); the worker \
                 must be restarted"
            ))),
            None => Ok(()),
        }
    }

    fn mark_broken(&mut self, reason: String) {
        if self.broken.is_none() {
            self.primitives.abandon();
            self.broken = Some(reason);
        }
    }
}

/// The size of the global `name` in the loaded module, asked of the backend only where `image`
/// declares it.
fn declared_global_size<P: Primitives>(primitives: &P, image: &Image, name: &str) -> Option<u64> {
    image.global(name)?;
    primitives.global_size(name)
}

/// Shapes no backend can launch, refused before the driver sees them.
pub fn check_shape(shape: &LaunchShape) -> Result<(), BackendError> {
    if shape.threads.contains(&0) || shape.blocks.contains(&0) {
        return Err(BackendError::InvalidArgument(format!(
            "launch shape {shape} has a zero dimension"
        )));
    }
    let per_block = shape.threads_per_block();
    if per_block > MAX_BLOCK_THREADS {
        return Err(BackendError::InvalidArgument(format!(
            "{per_block} threads per block is over the limit of {MAX_BLOCK_THREADS}"
        )));
    }
    Ok(())
}

impl<P: Primitives> Module for LoadedModule<P> {
    fn launch(
        &mut self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
        timeout: Option<Duration>,
        sink: &mut dyn Sink,
    ) -> Result<LaunchEnd, BackendError> {
        self.refuse_if_broken()?;
        check_shape(&shape)?;
        if let Some(max) = self.block_limit(kernel) {
            let asked = shape.threads_per_block();
            if asked > max {
                let usage = self.primitives.resource_usage(kernel);
                let registers = usage
                    .and_then(|usage| usage.registers)
                    .map_or_else(String::new, |n| format!(" ({n} registers per thread)"));
                return Err(BackendError::InvalidArgument(format!(
                    "{} can run at most {max} threads per block on this device{registers}, and \
                     the launch asks for {asked}: launch fewer threads per block (a test's \
                     `threads = N`), or make the kernel use fewer registers",
                    self.launched(kernel)
                )));
            }
        }
        self.check_shared(kernel, &shape)?;
        if let Some(rpc) = &mut self.rpc {
            rpc.fit(&mut *self.primitives, &shape)?;
        }
        let launch = match self.primitives.start(kernel, shape, args) {
            Ok(launch) => launch,
            Err(error) => {
                // A driver or runtime failure while starting (a queue slot reserved and never
                // filled, a failed launch call) leaves the module in doubt; a missing kernel or
                // a bad argument does not.
                if matches!(error, BackendError::Runtime { .. }) {
                    self.mark_broken(error.to_string());
                }
                return Err(error);
            }
        };
        let primitives = &mut *self.primitives;
        let finish = launch_loop::serve_launch(
            &*launch,
            self.rpc.as_ref().map(InstalledRpc::handlers),
            primitives.heap(),
            sink,
            WaitLimits::starting_now(timeout),
        );
        self.last_device_time = match &finish.end {
            Ok(LaunchEnd::Completed) => launch.device_time(),
            _ => None,
        };
        launch.finish(finish.broken.is_none());
        if let Some(reason) = finish.broken {
            self.mark_broken(reason);
        }
        finish.end
    }

    fn last_device_time(&self) -> Option<Duration> {
        self.last_device_time
    }

    fn alloc_shared(&mut self, size: usize) -> Result<SharedAlloc, BackendError> {
        self.primitives.alloc_host_visible(size)
    }

    fn flush_l2(&mut self) -> Result<bool, BackendError> {
        self.refuse_if_broken()?;
        self.primitives.flush_l2()
    }

    fn alloc_device(&mut self, size: usize) -> Result<u64, BackendError> {
        self.refuse_if_broken()?;
        let address = self.primitives.alloc_device(size.max(1))?;
        self.device_blocks.push((address, size));
        Ok(address)
    }

    fn write_device(&mut self, address: u64, bytes: &[u8]) -> Result<(), BackendError> {
        self.check_device_range(address, bytes.len())?;
        if bytes.is_empty() {
            return Ok(());
        }
        self.primitives.write_device(address, bytes)
    }

    fn read_device_into(&mut self, address: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.check_device_range(address, out.len())?;
        if out.is_empty() {
            return Ok(());
        }
        self.primitives.read_device(address, out)
    }

    fn free_device(&mut self, address: u64) -> Result<(), BackendError> {
        let Some(at) = self
            .device_blocks
            .iter()
            .position(|&(start, _)| start == address)
        else {
            return Err(BackendError::InvalidArgument(format!(
                "{address:#x} is not the start of device memory this module allocated"
            )));
        };
        self.device_blocks.swap_remove(at);
        if self.broken.is_some() {
            // A kernel may still use it: it goes with the module, which is leaked.
            return Ok(());
        }
        self.primitives.free_device(address)
    }

    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError> {
        let size = self.global_size(name)?;
        if bytes.len() as u64 > size {
            return Err(BackendError::InvalidArgument(format!(
                "{} bytes do not fit the {size}-byte global `{name}`",
                bytes.len()
            )));
        }
        self.primitives.write_global(name, bytes)
    }

    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError> {
        let size = self.global_size(name)?;
        if len as u64 > size {
            return Err(BackendError::InvalidArgument(format!(
                "cannot read {len} bytes from the {size}-byte global `{name}`"
            )));
        }
        self.primitives.read_global(name, len)
    }

    fn resource_usage(&self, kernel: &str) -> Option<ResourceUsage> {
        self.primitives.resource_usage(kernel)
    }
}
