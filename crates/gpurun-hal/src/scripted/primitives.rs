//! A scripted image "loaded": its globals in host memory, the RPC client object the real one
//! would be, and kernels that play their steps.

use super::launch::ScriptedLaunch;
use super::Script;
use crate::handlers::DeviceMemory;
use crate::host::memory::HostMemory;
use crate::kernel_args::KernelArg;
use crate::module::{Primitives, Started};
use crate::{BackendError, LaunchShape, SharedAlloc};
use gpurun_abi::symbols;
use gpurun_image::Image;
use gpurun_rpc::Client;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) struct ScriptedPrimitives {
    script: Arc<Script>,
    kernels: Vec<String>,
    /// Every global but the RPC client, by name.
    globals: HashMap<String, Vec<u8>>,
    /// What `__llvm_rpc_client` is on a device: the loader's bytes land here.
    client: Box<Client>,
    has_client: bool,
    memory: HostMemory,
    /// The host's buffers (`alloc_device`), apart from the RPC heap in `memory`.
    buffers: HostMemory,
}

impl ScriptedPrimitives {
    pub(crate) fn new(script: Arc<Script>, image: &Image) -> ScriptedPrimitives {
        let globals = image
            .globals()
            .iter()
            .filter(|global| global.name != symbols::RPC_CLIENT)
            .map(|global| {
                let size = usize::try_from(global.size).unwrap_or(0).min(1 << 20);
                (global.name.clone(), vec![0; size])
            })
            .collect();
        ScriptedPrimitives {
            script,
            kernels: image.kernels().iter().map(|k| k.name.clone()).collect(),
            globals,
            client: Box::new(Client::uninit()),
            has_client: image.rpc_client().is_some(),
            memory: HostMemory::default(),
            buffers: HostMemory::default(),
        }
    }
}

impl Primitives for ScriptedPrimitives {
    fn rpc_lane_size(&self) -> u32 {
        1
    }

    fn max_block_threads(&mut self, kernel: &str) -> Option<u64> {
        self.script.max_block_threads.get(kernel).copied()
    }

    fn doorbell_counter(&mut self) -> Result<Option<SharedAlloc>, BackendError> {
        // Like the host emulation: the scripted client rings it, the server waits on it.
        self.memory.alloc_shared(8).map(Some)
    }

    fn host_waits(&mut self, size: usize) -> Result<Option<SharedAlloc>, BackendError> {
        // Every client is a host thread: both sides may sleep and wake each other.
        self.memory.alloc_shared(size).map(Some)
    }

    fn max_shared_bytes(&mut self, kernel: &str) -> Option<u64> {
        self.script.max_shared_bytes.get(kernel).copied()
    }

    fn alloc_device(&mut self, size: usize) -> Result<u64, BackendError> {
        self.buffers.alloc_device(size)
    }

    fn free_device(&mut self, address: u64) -> Result<(), BackendError> {
        self.buffers.release(address as usize);
        Ok(())
    }

    fn read_device(&mut self, address: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.buffers.read(address, out)
    }

    fn global_size(&self, name: &str) -> Option<u64> {
        if name == symbols::RPC_CLIENT {
            return self
                .has_client
                .then_some(std::mem::size_of::<Client>() as u64);
        }
        self.globals.get(name).map(|bytes| bytes.len() as u64)
    }

    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError> {
        if name == symbols::RPC_CLIENT {
            if bytes.len() > std::mem::size_of::<Client>() {
                return Err(BackendError::InvalidArgument(
                    "the client image is larger than the client".into(),
                ));
            }
            let target = (&mut *self.client as *mut Client).cast::<u8>();
            // SAFETY: `bytes` fits the boxed client, which no launch uses between launches; the
            // bytes are a client image for this layout, as a loader writes into the global.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), target, bytes.len()) };
            return Ok(());
        }
        let global = self
            .globals
            .get_mut(name)
            .ok_or_else(|| BackendError::MissingSymbol {
                what: "global",
                name: name.to_owned(),
            })?;
        global[..bytes.len()].copy_from_slice(bytes);
        Ok(())
    }

    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError> {
        self.globals
            .get(name)
            .map(|bytes| bytes[..len].to_vec())
            .ok_or_else(|| BackendError::MissingSymbol {
                what: "global",
                name: name.to_owned(),
            })
    }

    fn heap(&mut self) -> &mut dyn DeviceMemory {
        &mut self.memory
    }

    fn start(&mut self, kernel: &str, _shape: LaunchShape, _args: &[KernelArg]) -> Started {
        if !self.kernels.iter().any(|name| name == kernel) {
            return Err(BackendError::MissingSymbol {
                what: "kernel",
                name: kernel.to_owned(),
            });
        }
        let steps = self.script.kernels.get(kernel).cloned().unwrap_or_default();
        let client = self.has_client.then_some(&*self.client as *const Client);
        Ok(Box::new(ScriptedLaunch::start(steps, client)?))
    }

    fn alloc_host_visible(&mut self, size: usize) -> Result<SharedAlloc, BackendError> {
        self.memory.alloc_shared(size)
    }

    fn write_device(&mut self, address: u64, bytes: &[u8]) -> Result<(), BackendError> {
        self.buffers.write(address, bytes)
    }
}
