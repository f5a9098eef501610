//! NVIDIA: special registers through `core::arch::nvptx` and inline PTX.

use core::arch::asm;
use core::arch::nvptx;

pub(crate) type Lanes = gpurun_rpc::lanes::Warp;

pub fn thread_idx() -> [u32; 3] {
    // SAFETY: reading special registers has no preconditions.
    unsafe {
        [
            nvptx::_thread_idx_x() as u32,
            nvptx::_thread_idx_y() as u32,
            nvptx::_thread_idx_z() as u32,
        ]
    }
}

pub fn block_idx() -> [u32; 3] {
    // SAFETY: reading special registers has no preconditions.
    unsafe {
        [
            nvptx::_block_idx_x() as u32,
            nvptx::_block_idx_y() as u32,
            nvptx::_block_idx_z() as u32,
        ]
    }
}

pub fn block_dim() -> [u32; 3] {
    // SAFETY: reading special registers has no preconditions.
    unsafe {
        [
            nvptx::_block_dim_x() as u32,
            nvptx::_block_dim_y() as u32,
            nvptx::_block_dim_z() as u32,
        ]
    }
}

pub fn grid_dim() -> [u32; 3] {
    // SAFETY: reading special registers has no preconditions.
    unsafe {
        [
            nvptx::_grid_dim_x() as u32,
            nvptx::_grid_dim_y() as u32,
            nvptx::_grid_dim_z() as u32,
        ]
    }
}

pub fn lane_size() -> u32 {
    32
}

pub fn lane_id() -> u32 {
    let lane: u32;
    // SAFETY: reads the %laneid special register.
    unsafe { asm!("mov.u32 {0}, %laneid;", out(reg32) lane, options(pure, nomem, nostack)) };
    // Tells LLVM the range (below 32), so `1 << lane_id()` has no overflow-check branch that
    // crashes ptxas for sm_90 (see `gpurun_rpc`'s `Warp::lane_id`).
    lane & 31
}

pub fn barrier() {
    // SAFETY: bar.sync 0; every thread of the block must reach it, as documented on `barrier`.
    unsafe { nvptx::_syncthreads() }
}

/// The start of this block's dynamic shared memory (PTX `.extern .shared`), aligned for `T`.
#[inline(always)]
pub fn shared_base<T>() -> *mut T {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
}

/// Bytes of dynamic shared memory the launch gave each block (`cuLaunchKernel`'s
/// `sharedMemBytes`).
#[inline(always)]
pub fn shared_bytes() -> usize {
    let bytes: u32;
    // SAFETY: reads the %dynamic_smem_size special register (PTX ISA 4.1, sm_20 and later).
    unsafe {
        asm!("mov.u32 {0}, %dynamic_smem_size;", out(reg32) bytes, options(pure, nomem, nostack))
    };
    bytes as usize
}

/// Ends this thread without a trap, so the context stays usable.
pub fn end_thread() -> ! {
    // SAFETY: PTX `exit` ends the calling thread; nothing after it runs.
    unsafe { asm!("exit;", options(noreturn, nostack)) }
}
