//! Host emulation: the emulator runs each device thread on an OS thread and calls
//! `__gpurun_host_enter_thread` first, so ids live in thread-locals.

use std::cell::Cell;

pub use gpurun_abi::host::{HostThreadInfo, HOST_ABI_VERSION};

#[unsafe(no_mangle)]
#[used]
pub static __gpurun_host_abi_version: u32 = HOST_ABI_VERSION;

const UNSET: HostThreadInfo = HostThreadInfo::UNSET;

thread_local! {
    static CURRENT: Cell<HostThreadInfo> = const { Cell::new(UNSET) };
}

/// Called by the emulator on each emulated thread before any kernel.
///
/// # Safety
/// `info` must point at a valid [`HostThreadInfo`] whose barrier function (if any) stays callable
/// for as long as this thread runs device code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __gpurun_host_enter_thread(info: *const HostThreadInfo) {
    // SAFETY: the caller guarantees `info` is valid for reads.
    let info = unsafe { *info };
    CURRENT.with(|current| current.set(info));
    crate::export::install_host_panic_hook();
}

fn current() -> HostThreadInfo {
    CURRENT.with(Cell::get)
}

pub fn thread_idx() -> [u32; 3] {
    current().thread_idx
}

pub fn block_idx() -> [u32; 3] {
    current().block_idx
}

pub fn block_dim() -> [u32; 3] {
    current().block_dim
}

pub fn grid_dim() -> [u32; 3] {
    current().grid_dim
}

pub fn lane_size() -> u32 {
    current().lane_size.max(1)
}

pub fn lane_id() -> u32 {
    super::thread_index_in_block() % lane_size()
}

pub fn barrier() {
    let info = current();
    if let Some(wait) = info.barrier {
        // SAFETY: the emulator guarantees the callback and its context outlive the thread.
        unsafe { wait(info.barrier_context) }
    }
}

/// This block's shared memory region, which the emulator gives every thread of the block
/// ([`HostThreadInfo::shared_memory`], `gpurun_abi::host::HOST_SHARED_ALIGN`-aligned); null when
/// the launch asked for none.
pub fn shared_base<T>() -> *mut T {
    current().shared_memory.cast()
}

/// Bytes of the region (the launch's `shared_bytes`).
pub fn shared_bytes() -> usize {
    current().shared_memory_bytes
}

/// On the host a thread ends by unwinding to its kernel wrapper, which catches it.
pub fn end_thread() -> ! {
    std::panic::resume_unwind(Box::new(ThreadEnded))
}

/// Payload of the unwind that [`end_thread`] starts; not a panic.
pub(crate) struct ThreadEnded;

/// The emulated warp as the RPC client sees it: each emulated thread talks alone, in its own
/// lane slot of a port.
pub(crate) type Lanes = gpurun_rpc::lanes::HostLane;
