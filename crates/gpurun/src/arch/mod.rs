//! Thread identity and synchronisation, the same functions on every target: `nvptx.rs`,
//! `amdgpu.rs` and `host.rs` (the emulator) each define them, and this module picks one.

/// The hooks of a host image built for the emulation's memory checks.
#[cfg(all(
    gpurun_emulation_checks,
    not(any(target_arch = "nvptx64", target_arch = "amdgpu"))
))]
mod checks;
#[cfg(target_arch = "amdgpu")]
#[path = "amdgpu.rs"]
pub(crate) mod imp;
#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
#[path = "host.rs"]
pub(crate) mod imp;
#[cfg(target_arch = "nvptx64")]
#[path = "nvptx.rs"]
pub(crate) mod imp;

pub(crate) use imp::{end_thread, Lanes};
#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
pub use imp::{HostThreadInfo, HOST_ABI_VERSION};

/// This thread's index within its block, `(x, y, z)`.
#[inline]
pub fn thread_idx() -> [u32; 3] {
    imp::thread_idx()
}

/// This block's index within the grid, `(x, y, z)`.
#[inline]
pub fn block_idx() -> [u32; 3] {
    imp::block_idx()
}

/// Threads per block, `(x, y, z)`.
#[inline]
pub fn block_dim() -> [u32; 3] {
    imp::block_dim()
}

/// Blocks per grid, `(x, y, z)`.
#[inline]
pub fn grid_dim() -> [u32; 3] {
    imp::grid_dim()
}

/// Threads per warp (NVIDIA: 32) or wavefront (AMD: 32 or 64; host emulation: 1, 32 or 64).
#[inline]
pub fn lane_size() -> u32 {
    imp::lane_size()
}

/// This thread's lane within its warp/wavefront.
#[inline]
pub fn lane_id() -> u32 {
    imp::lane_id()
}

/// Waits until every thread of the block reaches the barrier (`__syncthreads`).
///
/// Every thread of the block that has not returned from the kernel must reach it **at the same
/// call site** (not from code only some threads run, nor in a loop whose trip count differs
/// between threads): NVIDIA's `bar.sync` is aligned (every thread must execute the same
/// instruction, or the behaviour is undefined), and on AMD each wavefront's `s_barrier` pairs
/// with whichever barrier the other wavefronts reach next. Threads that returned are not waited
/// for, on every target. The host emulation fails the test when threads of a block wait at
/// barriers of different lines, naming the lines and the threads.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn barrier() {
    imp::barrier()
}

/// Linear index of this thread in its block (x fastest).
pub fn thread_index_in_block() -> u32 {
    let [x, y, z] = thread_idx();
    let [dx, dy, _] = block_dim();
    x + dx * (y + dy * z)
}

/// Linear index of this thread in the whole grid.
pub fn global_thread_index() -> u64 {
    let [bx, by, bz] = block_idx();
    let [gx, gy, _] = grid_dim();
    let [dx, dy, dz] = block_dim();
    let block = u64::from(bx) + u64::from(gx) * (u64::from(by) + u64::from(gy) * u64::from(bz));
    block * u64::from(dx) * u64::from(dy) * u64::from(dz) + u64::from(thread_index_in_block())
}
