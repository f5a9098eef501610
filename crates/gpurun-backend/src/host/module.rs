//! A host image loaded with `dlopen`.

use super::launch::{EnterThread, Entry, Grid, KernelFn};
use super::memory::HostMemory;
use crate::args::KernelArg;
use crate::server::{Deadlines, RpcServer, Served, Sink, WaitLimits};
use crate::{
    BackendError, LaunchEnd, LaunchShape, LoadOptions, Module, ResourceUsage, SharedAlloc,
};
use gpurun_image::{Image, ImageKind};
use gpurun_rpc::layout::Layout;
use std::time::Duration;

/// Stack of each emulated thread unless the user asks for another size.
const DEFAULT_STACK: usize = 1 << 20;

pub(crate) struct HostModule {
    // Field order matters: the library is unloaded last.
    server: Option<RpcServer>,
    memory: HostMemory,
    lane_size: u32,
    stack_size: usize,
    enter: EnterThread,
    globals: Vec<(String, u64)>,
    library: libloading::Library,
}

impl HostModule {
    pub fn load(image: &Image, options: &LoadOptions) -> Result<HostModule, BackendError> {
        if image.kind() != ImageKind::Host {
            return Err(BackendError::Incompatible(format!(
                "the host backend runs images built for the host, not {}",
                image.kind().describe()
            )));
        }
        let Some(path) = image.path() else {
            return Err(BackendError::InvalidArgument(
                "a host image must be loaded from a file".into(),
            ));
        };
        let lane_size = options.emulated_lane_size;
        if !matches!(lane_size, 1 | 32 | 64) {
            return Err(BackendError::InvalidArgument(format!(
                "emulated lane size must be 1, 32 or 64, not {lane_size}"
            )));
        }
        // dlopen needs a path with a slash, or it searches the library path instead.
        let path = std::path::absolute(path).map_err(|source| BackendError::Io {
            context: format!("failed to resolve `{}`", path.display()),
            source,
        })?;
        // SAFETY: loading runs the image's initialisers; the image is a device crate built for
        // the host by cargo-gpurun (checked by `gpurun-image`), run in a worker process.
        let library = unsafe { libloading::Library::new(&path) }.map_err(|error| {
            BackendError::Incompatible(format!("failed to load `{}`: {error}", path.display()))
        })?;
        // SAFETY: the symbol has this signature in every image made with gpurun-device
        // (host ABI version checked by gpurun-image).
        let enter = unsafe { library.get::<EnterThread>(b"__gpurun_host_enter_thread\0") }
            .map(|symbol| *symbol)
            .map_err(|_| BackendError::MissingSymbol {
                what: "host entry function",
                name: "__gpurun_host_enter_thread".into(),
            })?;
        let globals = image
            .globals()
            .iter()
            .map(|global| (global.name.clone(), global.size))
            .collect();
        let mut module = HostModule {
            server: None,
            memory: HostMemory::default(),
            lane_size,
            stack_size: options.stack_size.unwrap_or(DEFAULT_STACK),
            enter,
            globals,
            library,
        };
        if let Some(client) = image.global("__llvm_rpc_client") {
            let layout = Layout::for_client_symbol_size(client.size, options.rpc_ports, lane_size)
                .map_err(|error| {
                    BackendError::Incompatible(format!("`__llvm_rpc_client`: {error}"))
                })?;
            let buffer = module
                .memory
                .alloc_zeroed(layout.allocation_size())
                .ok_or_else(|| {
                    BackendError::InvalidArgument("no memory for the RPC buffer".into())
                })?;
            let client_image = layout.client_image(buffer as u64);
            module.write_global("__llvm_rpc_client", client_image.as_bytes())?;
            // SAFETY: `buffer` is a zeroed, 256-aligned block of the layout's size, owned by
            // `module.memory` for as long as the server exists.
            module.server = Some(unsafe { RpcServer::new(&layout, buffer) });
        }
        Ok(module)
    }

    fn symbol_address(&self, name: &str) -> Result<*mut u8, BackendError> {
        let mut c_name = name.as_bytes().to_vec();
        c_name.push(0);
        // SAFETY: with a pointer type, libloading hands back the symbol's address itself; we
        // only copy it.
        unsafe { self.library.get::<*mut u8>(&c_name) }
            .map(|symbol| *symbol)
            .map_err(|_| BackendError::MissingSymbol {
                what: "symbol",
                name: name.to_string(),
            })
    }

    fn global_size(&self, name: &str) -> Result<u64, BackendError> {
        self.globals
            .iter()
            .find(|(global, _)| global == name)
            .map(|(_, size)| *size)
            .ok_or_else(|| BackendError::MissingSymbol {
                what: "global",
                name: name.to_string(),
            })
    }
}

impl Module for HostModule {
    fn launch(
        &mut self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
        timeout: Option<Duration>,
        sink: &mut dyn Sink,
    ) -> Result<LaunchEnd, BackendError> {
        if args.len() > 6 {
            return Err(BackendError::InvalidArgument(format!(
                "the host backend passes at most 6 kernel arguments, `{kernel}` got {}",
                args.len()
            )));
        }
        let address = self
            .symbol_address(kernel)
            .map_err(|_| BackendError::MissingSymbol {
                what: "kernel",
                name: kernel.to_string(),
            })?;
        // SAFETY: `address` is an exported function of the image; every host kernel is an
        // `extern "C"` function of at most six integer arguments (see `KernelFn`).
        let kernel_fn: KernelFn = unsafe { std::mem::transmute::<*mut u8, KernelFn>(address) };
        let mut registers = [0u64; 6];
        for (slot, arg) in registers.iter_mut().zip(args) {
            *slot = arg.as_register();
        }
        let entry = Entry {
            enter: self.enter,
            kernel: kernel_fn,
        };
        let grid = Grid::start(entry, shape, registers, self.lane_size, self.stack_size)?;
        // As on a GPU: after an exit()/abort() the other threads get a short grace period
        // (their output is still served), and the caller's timeout ends the wait.
        let mut deadlines = Deadlines::new(WaitLimits::starting_now(timeout));
        let mut ended: Option<LaunchEnd> = None;
        let mut idle_rounds = 0u32;
        loop {
            let finished = grid.finished();
            if let Some(server) = self.server.as_mut() {
                match server.poll(sink, &mut self.memory)? {
                    Served::End(end) => {
                        ended.get_or_insert(end);
                        idle_rounds = 0;
                        continue;
                    }
                    Served::Handled => {
                        idle_rounds = 0;
                        continue;
                    }
                    Served::Idle => {}
                }
            }
            if finished {
                // Fire-and-forget requests (FREE) may still be pending.
                if let Some(server) = self.server.as_mut() {
                    if let Some(end) = server.drain(sink, &mut self.memory)? {
                        ended.get_or_insert(end);
                    }
                }
                grid.join();
                return Ok(ended.unwrap_or(LaunchEnd::Completed));
            }
            if let Some(finish) = deadlines.check(ended.as_ref()) {
                // Emulated threads cannot be stopped; the worker process ends after this.
                return Ok(finish.end);
            }
            // Spin briefly after activity, then back off so an idle kernel costs little CPU
            // (the same steps as the emulated threads' own waits).
            gpurun_rpc::sync::host_backoff(&mut idle_rounds);
        }
    }

    fn alloc_shared(&mut self, size: usize) -> Result<SharedAlloc, BackendError> {
        let block = self
            .memory
            .alloc_zeroed(size)
            .ok_or_else(|| BackendError::InvalidArgument(format!("no memory for {size} bytes")))?;
        Ok(SharedAlloc {
            host: block,
            device: block as u64,
            len: size,
        })
    }

    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError> {
        let size = self.global_size(name)?;
        if bytes.len() as u64 > size {
            return Err(BackendError::InvalidArgument(format!(
                "{} bytes do not fit the {size}-byte global `{name}`",
                bytes.len()
            )));
        }
        let address = self.symbol_address(name)?;
        // SAFETY: the global has `size >= bytes.len()` bytes at `address` in the loaded image,
        // and no device thread runs between launches.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), address, bytes.len()) };
        Ok(())
    }

    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError> {
        let size = self.global_size(name)?;
        if len as u64 > size {
            return Err(BackendError::InvalidArgument(format!(
                "cannot read {len} bytes from the {size}-byte global `{name}`"
            )));
        }
        let address = self.symbol_address(name)?;
        let mut bytes = vec![0u8; len];
        // SAFETY: as in `write_global`.
        unsafe { std::ptr::copy_nonoverlapping(address, bytes.as_mut_ptr(), len) };
        Ok(bytes)
    }

    fn resource_usage(&self, _kernel: &str) -> Option<ResourceUsage> {
        None
    }
}
