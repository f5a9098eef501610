//! The AMD backend, on the HSA runtime (ROCr) through `hsa-sys`, loaded at run time.
//!
//! Internals, following LLVM's AMDHSA loader and the AMDGPU offload plugin:
//! - One initialised runtime is shared by everything open in the process (`hsa_init` once,
//!   `hsa_shut_down` when the last user goes), with a system event handler that records GPU
//!   memory faults, hardware exceptions and memory errors instead of letting ROCr abort the
//!   process. The record is the process's (ROCr names no queue): every launch running in the
//!   process ends with [`LaunchEnd::Faulted`](crate::LaunchEnd::Faulted), and none is dispatched
//!   after it; the runner re-runs the tests in flight alone. A queue error callback catches the
//!   other device errors.
//! - A device is a GPU agent with kernel dispatch plus its nearest CPU agent (the first one on
//!   runtimes before ROCm 6, which cannot say). Host memory the GPU
//!   reads (kernel arguments, RPC buffer, argv/envp) comes from the CPU's kernarg and
//!   fine-grained pools; device `malloc` over RPC from the GPU's coarse-grained pool.
//! - A module is a frozen, validated executable (one per concurrently running test: each slot
//!   of a worker loads its own) with an RPC buffer sized for what it launches
//!   (`crate::rpc_buffer`) and its own queue: a long kernel, a hung one or a queue error stays
//!   with its test (`primitives::Queue` says why queues are not shared). Kernels are found by
//!   their descriptors `NAME.kd`; the runtime reports their kernarg, group and private sizes.
//! - A launch writes the explicit arguments and the hidden ones where the kernel's metadata puts
//!   them, publishes an AQL dispatch packet (no barrier bit, system-scope fences, a private
//!   segment of the static size plus the stack a dynamic-stack kernel needs) with a release
//!   store of its header, rings the doorbell and waits on a completion signal while serving
//!   RPC. Where the image's RPC client has a doorbell, its counter is an interrupt signal's
//!   value: the device raises the signal's interrupt as it opens a request, so a quiet launch
//!   sleeps in one `hsa_amd_signal_wait_any` on that signal and the completion signal (up to
//!   `launch_loop::QUIET_WAIT`) instead of polling; without one, waits on the completion signal
//!   last at least 5 ms, since ROCr spins through any wait under a millisecond or two.
//!   A slot reserved and then given up is filled with a no-op barrier packet. A fault, a
//!   queue error or the deadline leaves the module marked broken and its memory and queue
//!   leaked, never freed under a kernel and never used again; the leaked module keeps its
//!   reference to the runtime, so `hsa_shut_down` never runs under it either.
//! - Every queue has profiling enabled from its creation, so the packet processor writes each
//!   dispatch's start and end timestamps into its completion signal; a completed launch's device
//!   time is their difference (`hsa_amd_profiling_get_dispatch_time`, system timestamp ticks at
//!   `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`).
//!
//! Status: nothing here has run on an AMD GPU (none is available to the project).
//! Checked offline: hsa-sys's types, constants and function types against Debian's ROCm 5.2
//! headers; the packet and kernarg bytes against the header's offsets and the kernel
//! descriptors of real gfx90a/gfx1100 code objects; the serving loop (completion, drain,
//! exit/abort grace, faults, timeouts, RPC errors) with scripted closures; the event handler and
//! queue callback with synthetic events; and the real runtime's refusal to start without a GPU.
//! Unrun on hardware: executable loading, pools and allocations, queue creation, packet
//! submission and doorbell, signal waits and the RPC doorbell's interrupt, async copies into globals, the RPC buffer as the GPU
//! sees it, ROCr's behaviour after a claimed memory fault, and the dispatch timestamps.

mod device;
mod driver;
mod launch;
mod memory;
pub mod packet;
mod primitives;
mod runtime;

pub use device::arch_from_isa_name;
pub use driver::HsaError;
pub use primitives::{kernel_descriptor_name, HsaPrimitives};
pub use runtime::{amd_kernel_driver_present, AMD_KERNEL_DRIVER_DEVICE};

use crate::module::{LoadPrimitives, Loaded, OpenedDevice};
use crate::{Backend, BackendError, BackendKind, Device, DeviceInfo, LoadOptions};
use device::Opened;
use gpurun_image::{Image, ImageKind};
use runtime::{LibrarySource, Runtime};
use std::ffi::OsString;
use std::rc::Rc;

/// Which backend this is.
pub const KIND: BackendKind = BackendKind::Hsa;

/// AMD GPUs through the HSA runtime. Creating one loads nothing; [`Backend::devices`] and
/// [`Backend::open`] load the library and initialise the runtime.
#[derive(Clone, Debug, Default)]
pub struct HsaBackend {
    library: LibrarySource,
}

impl HsaBackend {
    /// The runtime from the default search (`$GPURUN_HSA_LIB`, `libhsa-runtime64.so.1`,
    /// `$ROCM_PATH/lib`, `/opt/rocm/lib`).
    pub fn new() -> HsaBackend {
        HsaBackend::default()
    }

    /// The runtime from exactly these candidates (sonames or paths), in order.
    pub fn with_library_candidates(candidates: Vec<OsString>) -> HsaBackend {
        HsaBackend {
            library: LibrarySource::Candidates(candidates),
        }
    }

    fn runtime(&self) -> Result<std::sync::Arc<Runtime>, BackendError> {
        Runtime::open(self.library.load()?)
    }
}

/// The AMD GPUs `cargo gpurun info` lists, or why there are none: "no HSA runtime found
/// (libhsa-runtime64.so.1)" without the library, the runtime's own status when `hsa_init`
/// fails (e.g. `HSA_STATUS_ERROR_OUT_OF_RESOURCES` on a machine without an AMD GPU).
pub fn hsa_devices() -> Result<Vec<DeviceInfo>, BackendError> {
    HsaBackend::new().devices()
}

impl Backend for HsaBackend {
    fn kind(&self) -> BackendKind {
        KIND
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        let runtime = self.runtime()?;
        let agents = device::list_agents(&runtime).map_err(driver::runtime)?;
        let version = runtime.version();
        Ok(device::dispatch_gpus(&agents)
            .into_iter()
            .enumerate()
            .map(|(ordinal, agent)| {
                let memory = memory::device_memory_bytes(runtime.lib(), agent.agent);
                device::device_info(ordinal, agent, memory, version.clone())
            })
            .collect())
    }

    fn open(&self, ordinal: usize) -> Result<Box<dyn Device>, BackendError> {
        let opened = device::open(self.runtime()?, ordinal)?;
        Ok(OpenedDevice::boxed(
            opened.info.clone(),
            HsaDevice {
                opened: Rc::new(opened),
            },
        ))
    }
}

/// One opened AMD GPU.
pub struct HsaDevice {
    opened: Rc<Opened>,
}

impl LoadPrimitives for HsaDevice {
    type Primitives = HsaPrimitives;

    fn primitives(&mut self, image: &Image, opts: &LoadOptions) -> Loaded<Self> {
        check_image_kind(image)?;
        let lane_size = rpc_lane_size(image, self.opened.gpu.wavefront_size);
        primitives::load(
            &self.opened,
            image.bytes(),
            primitives::ImageFacts {
                lane_size,
                hidden: hidden_layouts(image),
            },
            opts,
        )
    }
}

/// Refuses images this backend cannot load, before any runtime call.
pub fn check_image_kind(image: &Image) -> Result<(), BackendError> {
    if image.kind() == ImageKind::Amdgpu {
        if image
            .global(gpurun_abi::symbols::RETIRED_LAUNCH_SHAPE)
            .is_some()
        {
            // Its kernels would read their block and grid sizes from a global nobody writes.
            return Err(BackendError::Incompatible(format!(
                "the image was built with an older gpurun crate, whose AMD kernels read their \
                 block and grid sizes from `{}`, which this loader no longer writes (they come \
                 from the dispatch packet now): rebuild it",
                gpurun_abi::symbols::RETIRED_LAUNCH_SHAPE
            )));
        }
        // Images built elsewhere get the build's check too: ROCr would refuse them anyway,
        // with a bare VARIABLE_UNDEFINED status.
        return match image
            .amdgpu()
            .and_then(|amdgpu| amdgpu.unresolvable_symbols())
        {
            Some(problem) => Err(BackendError::Incompatible(problem)),
            None => Ok(()),
        };
    }
    Err(BackendError::Incompatible(format!(
        "the HSA backend runs AMDGPU code objects, not {}",
        image.kind().describe()
    )))
}

/// Where each kernel of a code object reads its hidden arguments (from its metadata; see
/// [`packet::HiddenLayout::of`]), by kernel name.
pub fn hidden_layouts(image: &Image) -> HiddenLayouts {
    let abi_version = image.amdgpu().map_or(0, |amdgpu| amdgpu.abi_version);
    HiddenLayouts {
        by_kernel: image
            .kernels()
            .iter()
            .map(|kernel| {
                (
                    kernel.name.clone(),
                    packet::HiddenLayout::of(kernel, abi_version),
                )
            })
            .collect(),
        abi_version,
    }
}

/// [`hidden_layouts`]' answer.
#[derive(Clone, Debug, Default)]
pub struct HiddenLayouts {
    by_kernel: std::collections::HashMap<String, packet::HiddenLayout>,
    abi_version: u8,
}

impl HiddenLayouts {
    /// The image is a code object v4 (EI_ABIVERSION 2), whose static private sizes already
    /// count LLVM's assumed stack ([`packet::launch_private_size`]).
    pub fn code_object_v4(&self) -> bool {
        self.abi_version == 2
    }

    /// The layout of `kernel` (with or without `.kd`); a kernel the image does not list gets
    /// the one its code object version implies.
    pub fn of(&self, kernel: &str) -> packet::HiddenLayout {
        let name = kernel.strip_suffix(".kd").unwrap_or(kernel);
        self.by_kernel.get(name).cloned().unwrap_or_else(|| {
            packet::HiddenLayout::of(&gpurun_image::Kernel::new(name), self.abi_version)
        })
    }
}

/// The RPC lane size: the wavefront size the image's kernels were compiled for (wave32 or
/// wave64, from their descriptors; the widest wins, as in LLVM's loader), else the agent's.
pub fn rpc_lane_size(image: &Image, agent_wavefront: u32) -> u32 {
    image
        .kernels()
        .iter()
        .filter_map(|kernel| kernel.descriptor.as_ref())
        .map(|descriptor| descriptor.wavefront_size())
        .max()
        .unwrap_or(agent_wavefront)
}

#[cfg(test)]
mod tests;
