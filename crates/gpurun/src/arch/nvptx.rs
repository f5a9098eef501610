//! NVIDIA: special registers through `core::arch::nvptx` and inline PTX; warp operations
//! through LLVM's NVVM intrinsics.

use core::arch::asm;
use core::arch::nvptx;

pub(crate) type Lanes = gpurun_rpc::lanes::Warp;

/// `pub fn $name() -> [u32; 3]`: the three special registers `$x`, `$y`, `$z`.
macro_rules! special_registers {
    ($($name:ident: $x:ident, $y:ident, $z:ident;)*) => {$(
        pub fn $name() -> [u32; 3] {
            // SAFETY: reading special registers has no preconditions.
            unsafe { [nvptx::$x() as u32, nvptx::$y() as u32, nvptx::$z() as u32] }
        }
    )*};
}

special_registers! {
    thread_idx: _thread_idx_x, _thread_idx_y, _thread_idx_z;
    block_idx: _block_idx_x, _block_idx_y, _block_idx_z;
    block_dim: _block_dim_x, _block_dim_y, _block_dim_z;
    grid_dim: _grid_dim_x, _grid_dim_y, _grid_dim_z;
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
    // SAFETY: `barrier.sync 0` without `.aligned`: defined wherever the block's threads call it
    // from (they meet at whichever barrier each reaches); it touches no memory itself.
    unsafe { llvm_barrier_sync(0) }
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
// with the caller's member mask, as independent thread scheduling (sm_70+) requires. They are
// LLVM's NVVM intrinsics, not inline PTX: LLVM knows those as convergent (it never moves one
// into or out of code that only some lanes run, nor duplicates it into branches), which it
// cannot know of an `asm!` block. A constant full mask folds to the immediate `-1`.
unsafe extern "unadjusted" {
    #[link_name = "llvm.nvvm.activemask"]
    fn llvm_activemask() -> i32;
    #[link_name = "llvm.nvvm.bar.warp.sync"]
    fn llvm_bar_warp_sync(mask: i32);
    #[link_name = "llvm.nvvm.vote.ballot.sync"]
    fn llvm_vote_ballot_sync(mask: i32, predicate: bool) -> i32;
    #[link_name = "llvm.nvvm.vote.any.sync"]
    fn llvm_vote_any_sync(mask: i32, predicate: bool) -> bool;
    #[link_name = "llvm.nvvm.vote.all.sync"]
    fn llvm_vote_all_sync(mask: i32, predicate: bool) -> bool;
    #[link_name = "llvm.nvvm.shfl.sync.idx.i32"]
    fn llvm_shfl_sync_idx(mask: i32, value: i32, source: i32, clamp: i32) -> i32;
    #[link_name = "llvm.nvvm.match.any.sync.i32"]
    fn llvm_match_any_sync_i32(mask: i32, value: i32) -> i32;
    #[link_name = "llvm.nvvm.match.any.sync.i64"]
    fn llvm_match_any_sync_i64(mask: i32, value: i64) -> i32;
    // The block barrier `barrier.sync` and `barrier.red.{popc,and,or}` on barrier 0, without
    // `.aligned` (PTX 6.0, sm_70+): the aligned forms (`bar.sync`, `__syncthreads`) are
    // undefined when the block's threads reach them from different call sites; these meet.
    #[link_name = "llvm.nvvm.barrier.cta.sync.all"]
    fn llvm_barrier_sync(barrier: i32);
    #[link_name = "llvm.nvvm.barrier.cta.red.popc.all"]
    fn llvm_barrier_popc(barrier: i32, predicate: bool) -> i32;
    #[link_name = "llvm.nvvm.barrier.cta.red.and.all"]
    fn llvm_barrier_and(barrier: i32, predicate: bool) -> bool;
    #[link_name = "llvm.nvvm.barrier.cta.red.or.all"]
    fn llvm_barrier_or(barrier: i32, predicate: bool) -> bool;
}

pub fn barrier_count(predicate: bool) -> u32 {
    // SAFETY: `barrier.red.popc` on barrier 0, as `barrier`'s `barrier.sync`.
    unsafe { llvm_barrier_popc(0, predicate) as u32 }
}

pub fn barrier_and(predicate: bool) -> bool {
    // SAFETY: as in `barrier_count`, `barrier.red.and`.
    unsafe { llvm_barrier_and(0, predicate) }
}

pub fn barrier_or(predicate: bool) -> bool {
    // SAFETY: as in `barrier_count`, `barrier.red.or`.
    unsafe { llvm_barrier_or(0, predicate) }
}

// `redux.sync` (sm_80+): only in builds for sm_80 or later (`-Ctarget-cpu`), where
// `crate::warp`'s reductions of 32-bit integers use it.
#[cfg(target_feature = "sm_80")]
unsafe extern "unadjusted" {
    #[link_name = "llvm.nvvm.redux.sync.add"]
    fn llvm_redux_sync_add(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.min"]
    fn llvm_redux_sync_min(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.max"]
    fn llvm_redux_sync_max(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.umin"]
    fn llvm_redux_sync_umin(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.umax"]
    fn llvm_redux_sync_umax(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.and"]
    fn llvm_redux_sync_and(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.or"]
    fn llvm_redux_sync_or(value: i32, mask: i32) -> i32;
    #[link_name = "llvm.nvvm.redux.sync.xor"]
    fn llvm_redux_sync_xor(value: i32, mask: i32) -> i32;
}

/// `op` of `value` (a 32-bit integer, `signed` or not) over the lanes of `mask` with one
/// `redux.sync` (sm_80+).
#[cfg(target_feature = "sm_80")]
#[inline(always)]
pub fn redux_sync(op: crate::warp::Reduction, signed: bool, mask: u64, value: u32) -> u32 {
    use crate::warp::Reduction;
    let (value, mask) = (value as i32, mask as u32 as i32);
    // SAFETY: a reduction among the lanes of `mask` (the caller's contract: all of them make
    // the call); no memory access.
    let result = unsafe {
        match (op, signed) {
            (Reduction::Sum, _) => llvm_redux_sync_add(value, mask),
            (Reduction::Min, true) => llvm_redux_sync_min(value, mask),
            (Reduction::Min, false) => llvm_redux_sync_umin(value, mask),
            (Reduction::Max, true) => llvm_redux_sync_max(value, mask),
            (Reduction::Max, false) => llvm_redux_sync_umax(value, mask),
            (Reduction::And, _) => llvm_redux_sync_and(value, mask),
            (Reduction::Or, _) => llvm_redux_sync_or(value, mask),
            (Reduction::Xor, _) => llvm_redux_sync_xor(value, mask),
        }
    };
    result as u32
}

pub fn active_mask() -> u64 {
    // SAFETY: `activemask` only reports which threads of the warp execute it.
    u64::from(unsafe { llvm_activemask() } as u32)
}

pub fn sync_lanes(mask: u64) {
    // SAFETY: a warp barrier among the lanes of `mask` (the caller's contract: all of them
    // reach it); it orders their memory accesses.
    unsafe { llvm_bar_warp_sync(mask as u32 as i32) }
}

pub fn ballot(mask: u64, predicate: bool) -> u64 {
    // SAFETY: a vote among the lanes of `mask`; no memory access.
    u64::from(unsafe { llvm_vote_ballot_sync(mask as u32 as i32, predicate) } as u32)
}

pub fn vote_any(mask: u64, predicate: bool) -> bool {
    // SAFETY: a vote among the lanes of `mask`; no memory access.
    unsafe { llvm_vote_any_sync(mask as u32 as i32, predicate) }
}

pub fn vote_all(mask: u64, predicate: bool) -> bool {
    // SAFETY: a vote among the lanes of `mask`; no memory access.
    unsafe { llvm_vote_all_sync(mask as u32 as i32, predicate) }
}

/// The lanes of `mask` whose `value` has the caller's bits: one `match.any.sync` (sm_70+, as
/// every architecture we build for), of 64 bits when `wide`.
pub fn match_any(mask: u64, value: u64, wide: bool) -> u64 {
    let mask = mask as u32 as i32;
    // SAFETY: a comparison among the lanes of `mask` (the caller's contract: all of them make
    // the call); no memory access.
    let lanes = unsafe {
        if wide {
            llvm_match_any_sync_i64(mask, value as i64)
        } else {
            llvm_match_any_sync_i32(mask, value as u32 as i32)
        }
    };
    u64::from(lanes as u32)
}

/// Lane `source`'s `value` (a lane of `mask`, below 32).
fn shuffle_word(mask: u64, value: u32, source: u32) -> u32 {
    // SAFETY: a shuffle among the lanes of `mask`; `c` = 0x1f: the whole warp is one segment.
    unsafe { llvm_shfl_sync_idx(mask as u32 as i32, value as i32, source as i32, 0x1f) as u32 }
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

// Fences, the clock and sleep (`crate::arch`): inline PTX, as `core::arch::nvptx` has none of
// them. The fences and the clock are not `nomem`: like CUDA's `clock64()` (an `asm volatile`
// with a memory clobber) LLVM must not move memory accesses across them.

pub fn fence_block() {
    // SAFETY: an acquire-release fence at CTA scope; it touches no memory itself.
    unsafe { asm!("fence.acq_rel.cta;", options(nostack, preserves_flags)) }
}

pub fn fence_device() {
    // SAFETY: an acquire-release fence at GPU scope; it touches no memory itself.
    unsafe { asm!("fence.acq_rel.gpu;", options(nostack, preserves_flags)) }
}

pub fn fence_system() {
    // SAFETY: an acquire-release fence at system scope; it touches no memory itself.
    unsafe { asm!("fence.acq_rel.sys;", options(nostack, preserves_flags)) }
}

pub fn clock64() -> u64 {
    let cycles: u64;
    // SAFETY: reads the %clock64 special register.
    unsafe { asm!("mov.u64 {0}, %clock64;", out(reg64) cycles, options(nostack, preserves_flags)) };
    cycles
}

/// The longest sleep one `nanosleep` instruction takes (PTX ISA: 1 ms).
const LONGEST_NANOSLEEP: u32 = 1_000_000;

pub fn nanosleep(ns: u32) {
    let mut rest = ns;
    while rest > 0 {
        let now = rest.min(LONGEST_NANOSLEEP);
        // SAFETY: suspends this thread for about `now` ns (sm_70+); no other effect.
        unsafe { asm!("nanosleep.u32 {0};", in(reg32) now, options(nomem, nostack)) };
        rest -= now;
    }
}
