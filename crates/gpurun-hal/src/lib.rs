//! The hardware layer, run inside a worker process: one family of object-safe traits
//! ([`Backend`], [`Device`], [`Module`]) over four backends chosen at run time: `cuda` (NVIDIA,
//! through cudarc), `hsa` (AMD, through our `hsa-sys`), `host` (CPU emulation of the device
//! crate built for the host) and `scripted` (a device that plays back a script, for tests).
//!
//! Owns: the one launch loop (serving RPC while a kernel runs) and the rule for how a launch
//! ends (`launch_loop.rs`, private), the one [`Module`] every backend's image becomes, with the
//! one RPC installation and the checks before a launch ([`module`]), the RPC opcode handlers
//! ([`handlers`]; the protocol itself is `gpurun-rpc`'s), and each backend's primitives (load,
//! symbols, globals, host-visible memory, start a launch, its state). In the spirit of
//! wgpu-hal, backends supply primitives and shared code decides, so
//! what the host emulation and the scripted backend test is what the GPUs run.
//!
//! Must not: spawn processes or know about tests, harnesses or workers (that is
//! `gpurun-runner`'s), or parse images (the caller hands a checked `gpurun_image::Image`).
//! Concurrency comes from loading the image several times, one module per thread, each with its
//! own stream or share of a queue, and its own RPC buffer.

pub mod cuda;
mod error;
pub mod handlers;
pub mod host;
pub mod hsa;
pub mod kernel_args;
mod launch_loop;
pub mod module;
mod rpc_buffer;
pub mod scripted;
pub mod select;

pub use error::BackendError;
pub use gpurun_abi::{LaunchEnd, LaunchShape};

use gpurun_image::{Image, Platform};
use std::time::Duration;

/// Which implementation runs the image; in serde by its [name](BackendKind::name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// NVIDIA GPUs through the CUDA driver API.
    Cuda,
    /// AMD GPUs through the HSA runtime (ROCr).
    Hsa,
    /// The device crate built for the host and run on CPU threads.
    Host,
    /// A device that plays back a script (tests of the loop, the worker and the runner).
    Scripted,
}

impl BackendKind {
    /// Every kind, in the order `auto` tries the GPU ones.
    pub const ALL: [BackendKind; 4] = [
        BackendKind::Cuda,
        BackendKind::Hsa,
        BackendKind::Host,
        BackendKind::Scripted,
    ];

    /// The kind a command-line name means.
    pub fn from_name(name: &str) -> Option<BackendKind> {
        BackendKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
    }

    /// Whether it runs device code on a GPU (not the host emulation or a script).
    pub fn is_gpu(self) -> bool {
        matches!(self, BackendKind::Cuda | BackendKind::Hsa)
    }

    /// The backend that runs device code of `platform` (its images, its build target).
    pub fn for_platform(platform: Platform) -> BackendKind {
        match platform {
            Platform::Nvptx => BackendKind::Cuda,
            Platform::Amdgcn => BackendKind::Hsa,
            Platform::Host => BackendKind::Host,
        }
    }

    /// The platform whose device code this backend runs (the scripted backend plays host
    /// images).
    pub fn platform(self) -> Platform {
        match self {
            BackendKind::Cuda => Platform::Nvptx,
            BackendKind::Hsa => Platform::Amdgcn,
            BackendKind::Host | BackendKind::Scripted => Platform::Host,
        }
    }

    /// What measures a launch's device time on this backend ([`Module::last_device_time`]),
    /// for benchmark reports: two events recorded around the launch on its stream (CUDA), the
    /// start and end timestamps the packet processor writes for the dispatch (HSA), the CPU
    /// time of the emulated thread that computed longest (the host emulation: a CPU's time, not
    /// a GPU's). The scripted backend measures nothing.
    pub fn launch_timer(self) -> &'static str {
        match self {
            BackendKind::Cuda => "CUDA events",
            BackendKind::Hsa => "HSA dispatch timestamps",
            BackendKind::Host => "host emulation thread CPU time",
            BackendKind::Scripted => "none (scripted)",
        }
    }

    /// Whether a benchmark's launches can flush the device's L2 cache first (`--flush-l2`):
    /// CUDA writes over a buffer the size of the L2 cache on the launch's stream. The HSA
    /// backend does not yet, and the host emulation has no device cache of its own.
    pub fn flushes_l2(self) -> bool {
        self == BackendKind::Cuda
    }

    /// The name used on the command line (`--backend cuda|hsa|host`).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cuda => "cuda",
            BackendKind::Hsa => "hsa",
            BackendKind::Host => "host",
            BackendKind::Scripted => "scripted",
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `cargo gpurun info` prints about one device, and what a build needs to pick an arch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub backend: BackendKind,
    /// Index within the backend (`--device N`).
    pub ordinal: usize,
    pub name: String,
    /// `sm_90`, `gfx90a`, or `host`.
    pub arch: String,
    /// Threads per warp/wavefront (the RPC lane size).
    pub lane_size: u32,
    pub memory_bytes: Option<u64>,
    /// Driver or runtime version, as the backend reports it.
    pub driver: Option<String>,
}

impl DeviceInfo {
    /// A device the host provides (emulated or scripted): no driver, no memory figure.
    pub fn on_host(backend: BackendKind, ordinal: usize, name: String, lane_size: u32) -> Self {
        DeviceInfo {
            backend,
            ordinal,
            name,
            arch: backend.name().into(),
            lane_size,
            memory_bytes: None,
            driver: None,
        }
    }
}

/// Stack per thread, beyond its static frames, for a kernel whose call depth nothing can bound
/// (recursion, indirect and `dyn` calls: `core::fmt`, which every panic message goes through):
/// what LLVM's AMDGPU loader gives such kernels. The HSA backend adds it to a dynamic-stack
/// kernel's private segment, the CUDA backend to the largest static frame of a module's kernels.
pub const DYNAMIC_STACK_SIZE: u32 = 16 * 1024;

/// Options that apply when an image is loaded.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// RPC ports to create (clamped to the layout's maximum).
    pub rpc_ports: u32,
    /// Per-thread stack size where the backend can set it (CUDA: the context's
    /// `CU_LIMIT_STACK_SIZE` is raised to it); `None`: the backend's own choice.
    pub stack_size: Option<usize>,
    /// Lane size the host emulation uses (1, 32 or 64). Ignored by GPU backends.
    pub emulated_lane_size: u32,
    /// What the device may do on the host beyond printing (`system()`, its stdin).
    pub host: handlers::HostAccess,
    /// Host functions the device may call (LLVM libc's HOST_CALL).
    pub host_functions: handlers::HostFunctions,
    /// Whether the host emulation checks the memory accesses of an image built for it
    /// (out-of-bounds accesses, reads of unwritten shared memory). Ignored by GPU backends and
    /// by images built without the checks.
    pub emulation_checks: bool,
    /// The host emulation's seed: each launch's poison for shared memory, the order its blocks
    /// run in and where its checked threads yield derive from it and the kernel's name. `None`:
    /// `GPURUN_EMULATION_SEED` ([`host::EMULATION_SEED_ENV`]), else a fresh one per load. Ignored
    /// by GPU backends.
    pub emulation_seed: Option<u64>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            rpc_ports: 1024,
            stack_size: None,
            emulated_lane_size: 32,
            host: handlers::HostAccess::default(),
            host_functions: handlers::HostFunctions::default(),
            emulation_checks: true,
            emulation_seed: None,
        }
    }
}

/// Registers, local/private and shared/group memory of one kernel, for `--print-resource-usage`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceUsage {
    pub registers: Option<u32>,
    pub local_bytes: Option<u64>,
    pub shared_bytes: Option<u64>,
}

/// A family of devices: lists them and opens one.
pub trait Backend {
    fn kind(&self) -> BackendKind;
    /// Devices this backend can see. An error says why none can be used (no driver, runtime
    /// init failed, ...).
    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError>;
    fn open(&self, ordinal: usize) -> Result<Box<dyn Device>, BackendError>;
}

/// One opened device.
pub trait Device {
    fn info(&self) -> &DeviceInfo;
    /// Loads an image that was already parsed and checked. Sets up the RPC buffer when the image
    /// defines `__llvm_rpc_client`.
    fn load(
        &mut self,
        image: &Image,
        options: &LoadOptions,
    ) -> Result<Box<dyn Module>, BackendError>;
}

/// A loaded image on one device.
pub trait Module {
    /// Launches `kernel` with `shape` and arguments `args` (in the order of the kernel's C
    /// signature), serving RPC through `sink` until it ends or `timeout` passes.
    fn launch(
        &mut self,
        kernel: &str,
        shape: LaunchShape,
        args: &[kernel_args::KernelArg],
        timeout: Option<Duration>,
        sink: &mut dyn handlers::Sink,
    ) -> Result<LaunchEnd, BackendError>;

    /// The device's own time of the last launch that completed, where the backend measures it
    /// (see `--report-time`); `None` after any other end.
    fn last_device_time(&self) -> Option<Duration>;

    /// Allocates `size` zeroed bytes of memory both sides can read and write; returns the
    /// address as the device sees it. Lives until the module is dropped.
    fn alloc_shared(&mut self, size: usize) -> Result<SharedAlloc, BackendError>;

    /// Allocates `size` zeroed bytes of device memory (where the device reaches it fastest:
    /// CUDA `cuMemAlloc`, the GPU's coarse-grained HSA pool, plain memory on the host
    /// emulation); returns its device address. Only the host reaches it, through
    /// [`Module::write_device`] and [`Module::read_device`] between launches; the RPC heap's
    /// `free` cannot release it. Lives until [`Module::free_device`] or the module is dropped.
    fn alloc_device(&mut self, size: usize) -> Result<u64, BackendError>;

    /// Copies `bytes` to `address`, which must lie in a block from [`Module::alloc_device`].
    /// Between launches only (on CUDA on the kernels' stream, ordered before the next launch).
    fn write_device(&mut self, address: u64, bytes: &[u8]) -> Result<(), BackendError>;

    /// Fills `out` from `address`, which must lie (with `out.len()` bytes) in a block from
    /// [`Module::alloc_device`]. Between launches only.
    fn read_device_into(&mut self, address: u64, out: &mut [u8]) -> Result<(), BackendError>;

    /// Reads `len` bytes at `address` (see [`Module::read_device_into`]).
    fn read_device(&mut self, address: u64, len: usize) -> Result<Vec<u8>, BackendError> {
        let mut bytes = vec![0; len];
        self.read_device_into(address, &mut bytes)?;
        Ok(bytes)
    }

    /// Frees the block from [`Module::alloc_device`] that starts at `address`. Between
    /// launches only.
    fn free_device(&mut self, address: u64) -> Result<(), BackendError>;

    /// Copies `bytes` into the global `name` of the loaded image.
    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError>;

    /// Reads `len` bytes from the global `name`.
    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError>;

    fn resource_usage(&self, kernel: &str) -> Option<ResourceUsage>;

    /// Flushes the device's L2 cache before the next launch (a benchmark's cold run,
    /// `--flush-l2`), ordered before it; `Ok(false)` where the backend cannot
    /// ([`BackendKind::flushes_l2`]).
    fn flush_l2(&mut self) -> Result<bool, BackendError> {
        Ok(false)
    }
}

/// Memory shared by host and device (see [`Module::alloc_shared`]).
#[derive(Clone, Copy, Debug)]
pub struct SharedAlloc {
    /// Where the host reads and writes it.
    pub host: *mut u8,
    /// Its address on the device (the same value under unified addressing).
    pub device: u64,
    pub len: usize,
}
