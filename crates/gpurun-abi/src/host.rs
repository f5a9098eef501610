//! The host emulation's thread record: what the emulator tells each emulated thread before it
//! calls the kernel (through [`crate::symbols::HOST_ENTER_THREAD`]).

use core::ffi::c_void;

/// Version of [`HostThreadInfo`] and of the host entry points (value of
/// [`crate::symbols::HOST_ABI_VERSION`] in a host image). Version 2 added the block's shared
/// memory at the end of the record.
pub const HOST_ABI_VERSION: u32 = 2;
/// The oldest version the emulator still runs: every version's record starts with the one
/// before it, so an older image reads the part it knows (and has no shared memory API).
pub const OLDEST_HOST_ABI_VERSION: u32 = 1;

/// Alignment of each block's shared memory region on the host emulation: the region is where
/// `gpurun::shared` puts values of any type a kernel would put in GPU shared memory.
pub const HOST_SHARED_ALIGN: usize = 256;

/// Who an emulated thread is. `#[repr(C)]`: the emulator and the image are built separately.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HostThreadInfo {
    pub abi_version: u32,
    /// Threads per emulated warp (1, 32 or 64): the RPC lane count.
    pub lane_size: u32,
    pub thread_idx: [u32; 3],
    pub block_idx: [u32; 3],
    pub block_dim: [u32; 3],
    pub grid_dim: [u32; 3],
    /// Context handed back to `barrier`.
    pub barrier_context: *const c_void,
    /// Blocks until every thread of this block has called it.
    pub barrier: Option<unsafe extern "C" fn(*const c_void)>,
    // Version 2.
    /// This block's shared memory ([`HOST_SHARED_ALIGN`]-aligned; null when the launch asked
    /// for none): the same region for every thread of the block, zeroed before the block runs.
    pub shared_memory: *mut u8,
    /// Its size in bytes (the launch's `shared_bytes`).
    pub shared_memory_bytes: usize,
}

/// `__gpurun_host_enter_thread` in a host image.
pub type EnterThread = unsafe extern "C" fn(*const HostThreadInfo);

impl HostThreadInfo {
    /// The record of a thread that no emulator entered (one thread, one block).
    pub const UNSET: HostThreadInfo = HostThreadInfo {
        abi_version: HOST_ABI_VERSION,
        lane_size: 1,
        thread_idx: [0; 3],
        block_idx: [0; 3],
        block_dim: [1; 3],
        grid_dim: [1; 3],
        barrier_context: core::ptr::null(),
        barrier: None,
        shared_memory: core::ptr::null_mut(),
        shared_memory_bytes: 0,
    };
}

// The layout, pinned: changing it needs a new HOST_ABI_VERSION. Version 1 is the first 72
// bytes, unchanged, so version 1 images still read their record from a version 2 emulator.
const _: () = {
    assert!(core::mem::offset_of!(HostThreadInfo, thread_idx) == 8);
    assert!(core::mem::offset_of!(HostThreadInfo, grid_dim) == 44);
    assert!(core::mem::offset_of!(HostThreadInfo, barrier_context) == 56);
    assert!(core::mem::offset_of!(HostThreadInfo, barrier) == 64);
    assert!(core::mem::offset_of!(HostThreadInfo, shared_memory) == 72);
    assert!(core::mem::offset_of!(HostThreadInfo, shared_memory_bytes) == 80);
    assert!(core::mem::size_of::<HostThreadInfo>() == 88);
};
