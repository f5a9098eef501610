//! NVIDIA backend: the CUDA driver API through cudarc (`dynamic-loading`, so the binary runs
//! where no driver is installed and says so).
//!
//! Internals, following LLVM's nvptx loader:
//! - `cudarc::driver::sys::is_culib_present()` comes before every other driver call (cudarc
//!   panics when asked to load a missing library); then `cuInit` once per process.
//! - A device is its primary context. Contexts are current per thread, so each entry point
//!   makes it current first.
//! - Loading takes a cubin built for the GPU when one sits next to the PTX, else the PTX through
//!   `cuModuleLoadDataEx` with the JIT error log captured (cudarc's safe `load_module` needs
//!   nvrtc and passes no JIT options, hence the `sys` layer).
//! - Host memory the device reads (RPC buffer, argv/envp, return value, ctor arrays) is
//!   `cuMemHostAlloc(PORTABLE | DEVICEMAP)`, zeroed, never write-combined (see `memory`).
//! - Kernels run on a non-blocking stream; RPC `malloc`/`free` use a second one so they cannot
//!   wait behind the running kernel. The launching thread serves RPC and polls the stream.
//! - A sticky error (illegal address, trap, ...) or a timeout leaves the context unusable: the
//!   launch ends as `Faulted`/`TimedOut` and the module refuses further launches, so the
//!   harness replaces the worker process.
//! - `CUDA_VISIBLE_DEVICES` is applied by the driver itself: ordinals are those it leaves.

mod device;
mod error;
pub mod image;
mod launch;
mod memory;
mod module;

pub use device::{driver_version_text, sm_arch, sm_number, CudaDevice, NO_DRIVER};
pub use image::{choose_image, ImageChoice};
pub use module::{CudaModule, ImageFacts};

use crate::{
    server, Backend, BackendError, BackendKind, Device, DeviceInfo, LaunchEnd, LaunchShape,
    LoadOptions, Module, ResourceUsage, SharedAlloc,
};
use gpurun_image::Image;
use std::time::Duration;

pub const KIND: BackendKind = BackendKind::Cuda;

/// The CUDA driver as a [`Backend`]. Creating it touches nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct CudaBackend;

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        KIND
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        device::list()
    }

    fn open(&self, ordinal: usize) -> Result<Box<dyn Device>, BackendError> {
        Ok(Box::new(CudaDevice::open(ordinal)?))
    }
}

impl Device for CudaDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn load(
        &mut self,
        image: &Image,
        options: &LoadOptions,
    ) -> Result<Box<dyn Module + '_>, BackendError> {
        let facts = image_facts(image)?;
        Ok(Box::new(module::load(self, &facts, options)?))
    }
}

impl Module for CudaModule<'_> {
    fn launch(
        &mut self,
        kernel: &str,
        shape: LaunchShape,
        args: &[crate::args::KernelArg],
        timeout: Option<Duration>,
        sink: &mut dyn server::Sink,
    ) -> Result<LaunchEnd, BackendError> {
        self.launch_serving(kernel, shape, args, timeout, sink)
    }

    fn alloc_shared(&mut self, size: usize) -> Result<SharedAlloc, BackendError> {
        self.shared_alloc(size)
    }

    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError> {
        self.device.make_current()?;
        self.write_global_bytes(name, bytes)
    }

    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError> {
        self.device.make_current()?;
        self.read_global_bytes(name, len)
    }

    fn resource_usage(&self, kernel: &str) -> Option<ResourceUsage> {
        self.device.make_current().ok()?;
        self.usage(kernel)
    }
}

/// The parts of a parsed image that loading uses.
fn image_facts(image: &Image) -> Result<ImageFacts<'_>, BackendError> {
    use gpurun_image::ImageKind;
    let is_cubin = match image.kind() {
        ImageKind::Ptx => false,
        ImageKind::Cubin => true,
        other => {
            return Err(BackendError::Incompatible(format!(
                "the CUDA backend runs PTX or cubin images, not {other:?}"
            )))
        }
    };
    Ok(ImageFacts {
        path: image.path(),
        bytes: image.bytes(),
        is_cubin,
        globals: image.globals().iter().map(|g| g.name.as_str()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_without_driver_reports_it_through_the_trait() {
        let backend = crate::select::backend(BackendKind::Cuda);
        assert_eq!(backend.kind(), BackendKind::Cuda);
        // SAFETY: only dlopen attempts.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            // A GPU machine: listing must work (possibly with zero devices).
            let devices = backend.devices().unwrap();
            assert!(devices.iter().all(|d| d.arch.starts_with("sm_")));
            return;
        }
        match backend.devices() {
            Err(BackendError::NotAvailable(message)) => assert_eq!(message, NO_DRIVER),
            other => panic!("expected the missing-driver error, got {other:?}"),
        }
        match backend.open(0) {
            Err(BackendError::NotAvailable(message)) => assert_eq!(message, NO_DRIVER),
            Err(other) => panic!("expected the missing-driver error, got {other}"),
            Ok(_) => panic!("opened a CUDA device without a driver"),
        }
    }
}
