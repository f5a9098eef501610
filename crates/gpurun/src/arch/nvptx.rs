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

// Warp operations (`crate::warp`): `activemask`, `bar.warp.sync`, `vote.sync` and `shfl.sync`
// with the caller's member mask, as independent thread scheduling (sm_70+) requires. None is
// `pure`: each must stay where the lanes of the mask meet.

/// `asm!` with the member mask as operand `{mask}`: the immediate `-1` for the full warp (a
/// constant mask folds to this branch), else a register.
macro_rules! with_mask {
    ($mask:expr, $template:literal, $($operands:tt)*) => {
        if $mask as u32 == u32::MAX {
            asm!($template, mask = const -1i32, $($operands)*)
        } else {
            asm!($template, mask = in(reg32) $mask as u32, $($operands)*)
        }
    };
}

pub fn active_mask() -> u64 {
    let mask: u32;
    // SAFETY: `activemask` only reports which threads of the warp execute it.
    unsafe { asm!("activemask.b32 {mask};", mask = out(reg32) mask, options(nomem, nostack)) };
    u64::from(mask)
}

pub fn sync_lanes(mask: u64) {
    // SAFETY: a warp barrier among the lanes of `mask` (the caller's contract: all of them
    // reach it). It orders memory among them, so it is not `nomem`.
    unsafe { with_mask!(mask, "bar.warp.sync {mask};", options(nostack)) };
}

pub fn ballot(mask: u64, predicate: bool) -> u64 {
    let votes: u32;
    // SAFETY: a vote among the lanes of `mask`; no memory access.
    unsafe {
        with_mask!(
            mask,
            "{{ .reg .pred p; setp.ne.u32 p, {predicate}, 0; vote.sync.ballot.b32 {votes}, p, {mask}; }}",
            votes = out(reg32) votes,
            predicate = in(reg32) u32::from(predicate),
            options(nomem, nostack),
        )
    };
    u64::from(votes)
}

pub fn vote_any(mask: u64, predicate: bool) -> bool {
    let any: u32;
    // SAFETY: a vote among the lanes of `mask`; no memory access.
    unsafe {
        with_mask!(
            mask,
            "{{ .reg .pred p, q; setp.ne.u32 p, {predicate}, 0; vote.sync.any.pred q, p, {mask}; selp.u32 {any}, 1, 0, q; }}",
            any = out(reg32) any,
            predicate = in(reg32) u32::from(predicate),
            options(nomem, nostack),
        )
    };
    any != 0
}

pub fn vote_all(mask: u64, predicate: bool) -> bool {
    let all: u32;
    // SAFETY: a vote among the lanes of `mask`; no memory access.
    unsafe {
        with_mask!(
            mask,
            "{{ .reg .pred p, q; setp.ne.u32 p, {predicate}, 0; vote.sync.all.pred q, p, {mask}; selp.u32 {all}, 1, 0, q; }}",
            all = out(reg32) all,
            predicate = in(reg32) u32::from(predicate),
            options(nomem, nostack),
        )
    };
    all != 0
}

/// Lane `source`'s `value` (a lane of `mask`, below 32).
fn shuffle_word(mask: u64, value: u32, source: u32) -> u32 {
    let result: u32;
    // SAFETY: a shuffle among the lanes of `mask`; `c` = 0x1f: the whole warp is one segment.
    unsafe {
        with_mask!(
            mask,
            "shfl.sync.idx.b32 {result}, {value}, {source}, 0x1f, {mask};",
            result = out(reg32) result,
            value = in(reg32) value,
            source = in(reg32) source,
            options(nomem, nostack),
        )
    };
    result
}

/// `value` of lane `source` (a lane of `mask`): 64-bit values move as two words.
pub fn shuffle(_op: u32, mask: u64, value: u64, wide: bool, source: u32) -> u64 {
    let low = u64::from(shuffle_word(mask, value as u32, source));
    if wide {
        low | u64::from(shuffle_word(mask, (value >> 32) as u32, source)) << 32
    } else {
        low
    }
}

/// `value` of lane `source`, the same lane in every caller: a shuffle here.
pub fn broadcast(mask: u64, value: u64, wide: bool, source: u32) -> u64 {
    shuffle(0, mask, value, wide, source)
}
