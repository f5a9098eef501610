//! A module's RPC buffer and server: installed once at load, in the layout the image's client
//! object has, and, where the backend sizes it for what the module launches
//! ([`Primitives::rpc_ports_for`]), grown before a launch that needs more ports.
//!
//! Why per launch: every slot (one per concurrent test) loads its own module with its own
//! buffer. Sized for the whole GPU (one port per wavefront it can hold: 9,728 on an MI300X, some
//! 40 MB of pinned fine-grained memory at 64 lanes per port), every slot of a 192-thread run
//! would pin that much; sized for its launches, a slot running tests of one block needs a few
//! ports. The wavefronts of one launch are all a module serves at a time, so sizing for the
//! launch keeps what LLVM's plugin guarantees by sizing for the GPU: every wavefront that can be
//! running has a port, and none spins on a full table while the holders cannot run.

use crate::handlers::RpcHandlers;
use crate::module::Primitives;
use crate::{BackendError, LaunchShape, LoadOptions, SharedAlloc};
use gpurun_abi::symbols;
use gpurun_image::Image;
use gpurun_rpc::layout::Doorbell;
use gpurun_rpc::Layout;
use std::sync::atomic::AtomicU64;

/// The ports to create at load: for the largest test of the image (and a one-thread launch, as
/// `_begin` and `_end` are) where the backend sizes per launch, else `requested`.
pub(crate) fn initial_ports<P: Primitives>(primitives: &P, image: &Image, requested: u32) -> u32 {
    let shapes = image
        .tests()
        .iter()
        .map(|test| test.shape)
        .chain([LaunchShape::SINGLE]);
    shapes
        .filter_map(|shape| primitives.rpc_ports_for(&shape))
        .max()
        .unwrap_or(requested)
}

/// The server of a module and the buffer it serves.
pub(crate) struct InstalledRpc {
    handlers: RpcHandlers,
    buffer: SharedAlloc,
    /// The size of the image's `__llvm_rpc_client`, which picks the layout.
    client_size: u64,
}

impl InstalledRpc {
    /// Installs a buffer of `ports` ports (see [`install_rpc`]) whose server lets the device
    /// do what `options` allow on the host.
    pub(crate) fn install<P: Primitives>(
        primitives: &mut P,
        client_size: u64,
        ports: u32,
        options: &LoadOptions,
    ) -> Result<InstalledRpc, BackendError> {
        let (mut handlers, buffer) = install_rpc(primitives, client_size, ports)?;
        handlers.configure(options.host.clone(), options.host_functions.clone());
        Ok(InstalledRpc {
            handlers,
            buffer,
            client_size,
        })
    }

    pub(crate) fn handlers(&self) -> &RpcHandlers {
        &self.handlers
    }

    /// Makes sure a launch of `shape` has the ports it needs: when the backend asks for more
    /// than are installed, installs a larger buffer (the client global then points at it) and
    /// a server over it that keeps the old one's host state (open files, stdin), and gives the
    /// old buffer back. Only between launches: nothing uses the old buffer any more.
    pub(crate) fn fit<P: Primitives>(
        &mut self,
        primitives: &mut P,
        shape: &LaunchShape,
    ) -> Result<(), BackendError> {
        let Some(needed) = primitives.rpc_ports_for(shape) else {
            return Ok(());
        };
        if needed <= self.handlers.port_count() {
            return Ok(());
        }
        let (mut handlers, buffer) = install_rpc(primitives, self.client_size, needed)?;
        handlers.keep_host_state_of(&mut self.handlers);
        // The old server goes before its buffer does.
        self.handlers = handlers;
        let old = std::mem::replace(&mut self.buffer, buffer);
        primitives.release_host_visible(&old);
        Ok(())
    }
}

/// The one RPC installation routine: a host-visible buffer (zeroed, as every backend's
/// [`Primitives::alloc_host_visible`] gives them) of `ports` ports in the layout the image's
/// client object has (told by its size), the client image pointing at it copied into
/// `__llvm_rpc_client`, and a server over it.
fn install_rpc<P: Primitives>(
    primitives: &mut P,
    client_size: u64,
    ports: u32,
) -> Result<(RpcHandlers, SharedAlloc), BackendError> {
    let layout = Layout::for_client_symbol_size(client_size, ports, primitives.rpc_lane_size())
        .map_err(|error| {
            BackendError::Incompatible(format!("unsupported `{}`: {error}", symbols::RPC_CLIENT))
        })?;
    let buffer = primitives.alloc_host_visible(layout.allocation_size())?;
    if !(buffer.host as usize).is_multiple_of(64) || buffer.len < layout.allocation_size() {
        return Err(BackendError::InvalidArgument(
            "the backend gave an RPC buffer that is too small or not 64-byte aligned".into(),
        ));
    }
    let counter = match layout.has_doorbell() {
        true => primitives.doorbell_counter()?,
        false => None,
    };
    let waits = match &counter {
        Some(_) => primitives.host_waits(layout.host_waits_size())?,
        None => None,
    };
    if let Some(counter) = &counter {
        let (mailbox, event_id) = primitives.doorbell_interrupt().unwrap_or((0, 0));
        let record = Doorbell {
            value: counter.device,
            mailbox,
            event_id,
            host_waits: waits.as_ref().map_or(0, |block| block.device),
        };
        // SAFETY: the buffer is `allocation_size()` host-writable bytes that nothing uses yet;
        // the counter lives as long as the buffer (both owned by the primitives) at the address
        // the device uses.
        unsafe { layout.write_doorbell(buffer.host, record) };
    }
    let client = layout.client_image(buffer.device);
    primitives.write_global(symbols::RPC_CLIENT, client.as_bytes())?;
    // SAFETY: zeroed, 64-aligned, `allocation_size()` long, owned by the module's primitives,
    // which are dropped after the server (field order of `LoadedModule`) and give a buffer back
    // only after `InstalledRpc::fit` dropped its server.
    let mut server = unsafe { RpcHandlers::new(&layout, buffer.host) };
    if let Some(counter) = counter {
        // SAFETY: 8 zeroed, 8-aligned bytes (host-visible blocks are 64-aligned) that the device
        // updates only atomically and that outlive the server, as the buffer does.
        unsafe { server.attach_doorbell(counter.host.cast::<AtomicU64>()) };
    }
    if let Some(block) = waits {
        // SAFETY: `host_waits_size()` zeroed, 64-aligned bytes owned by the primitives like the
        // buffer (so they outlive the server), accessed only atomically by both sides.
        unsafe { server.attach_host_waits(block.host) };
    }
    Ok((server, buffer))
}
