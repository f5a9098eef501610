//! Host emulation backend: runs the device crate built for the host (a `.so`) on CPU threads,
//! with the same RPC protocol, opcodes and exit codes as a GPU.
//!
//! Internals: the worker `dlopen`s the image once. Each launch starts one OS thread per device
//! thread ([`launch`]), after telling the image who the thread is through
//! `__gpurun_host_enter_thread`; the calling thread meanwhile serves RPC over a zeroed buffer
//! whose client object was copied into the image's `__llvm_rpc_client`. Each emulated thread
//! talks over RPC alone, in its own lane slot (lane size 1, 32 or 64), so the server's
//! multi-lane paths run with partial masks. A crash in device code kills the worker process,
//! never the harness.

mod launch;
mod memory;
mod module;

use crate::{Backend, BackendError, BackendKind, Device, DeviceInfo, LoadOptions, Module};
use gpurun_image::Image;

/// The host CPU as an emulated device.
pub struct HostBackend;

fn host_info() -> DeviceInfo {
    DeviceInfo {
        backend: BackendKind::Host,
        ordinal: 0,
        name: format!("host CPU emulation ({})", std::env::consts::ARCH),
        arch: "host".into(),
        lane_size: 32,
        memory_bytes: None,
        driver: None,
    }
}

impl Backend for HostBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Host
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        Ok(vec![host_info()])
    }

    fn open(&self, ordinal: usize) -> Result<Box<dyn Device>, BackendError> {
        if ordinal != 0 {
            return Err(BackendError::InvalidArgument(format!(
                "the host backend has one device (0), not {ordinal}"
            )));
        }
        Ok(Box::new(HostDevice { info: host_info() }))
    }
}

struct HostDevice {
    info: DeviceInfo,
}

impl Device for HostDevice {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn load(
        &mut self,
        image: &Image,
        options: &LoadOptions,
    ) -> Result<Box<dyn Module + '_>, BackendError> {
        Ok(Box::new(module::HostModule::load(image, options)?))
    }
}
