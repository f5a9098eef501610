//! Host emulation: the emulator runs each device thread on an OS thread and calls
//! `__gpurun_host_enter_thread` first, so ids live in thread-locals.

use std::cell::Cell;

/// Version of [`HostThreadInfo`] and of the host entry points; the emulator checks it.
pub const HOST_ABI_VERSION: u32 = 1;

#[unsafe(no_mangle)]
#[used]
pub static __gpurun_host_abi_version: u32 = HOST_ABI_VERSION;

/// Who an emulated thread is, passed by the emulator (`gpurun-backend`'s host backend).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HostThreadInfo {
    pub abi_version: u32,
    pub lane_size: u32,
    pub thread_idx: [u32; 3],
    pub block_idx: [u32; 3],
    pub block_dim: [u32; 3],
    pub grid_dim: [u32; 3],
    /// Context handed back to `barrier`.
    pub barrier_context: *const core::ffi::c_void,
    /// Blocks until every thread of this block has called it.
    pub barrier: Option<unsafe extern "C" fn(*const core::ffi::c_void)>,
}

// The emulator (gpurun-backend/src/host/launch.rs) and the device runtime
// (gpurun-device/src/arch/host.rs) each declare this struct: they cannot share a crate, since
// linking the device runtime into the worker would export its symbols next to the image's. These
// asserts pin the layout on both sides.
const _: () = {
    assert!(core::mem::size_of::<HostThreadInfo>() == 72);
    assert!(core::mem::offset_of!(HostThreadInfo, thread_idx) == 8);
    assert!(core::mem::offset_of!(HostThreadInfo, grid_dim) == 44);
    assert!(core::mem::offset_of!(HostThreadInfo, barrier_context) == 56);
    assert!(core::mem::offset_of!(HostThreadInfo, barrier) == 64);
};

const UNSET: HostThreadInfo = HostThreadInfo {
    abi_version: HOST_ABI_VERSION,
    lane_size: 1,
    thread_idx: [0; 3],
    block_idx: [0; 3],
    block_dim: [1; 3],
    grid_dim: [1; 3],
    barrier_context: core::ptr::null(),
    barrier: None,
};

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

/// On the host a thread ends by unwinding to its kernel wrapper, which catches it.
pub fn end_thread() -> ! {
    std::panic::resume_unwind(Box::new(ThreadEnded))
}

/// Payload of the unwind that [`end_thread`] starts; not a panic.
pub(crate) struct ThreadEnded;

/// The emulated warp as the RPC client sees it: each emulated thread talks alone, in its own
/// lane slot of a port.
pub(crate) type Lanes = gpurun_rpc::lanes::HostLane;
