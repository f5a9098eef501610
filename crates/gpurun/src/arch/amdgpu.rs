//! AMD: ids, barrier and wave end through `core::arch::amdgpu` (inline asm is rejected on this
//! target); block and grid sizes from the kernel's AQL dispatch packet.

use core::arch::amdgpu;
use core::sync::atomic::Ordering;
use gpurun_abi::shape::dispatch_packet::{GRID_SIZE_X, GROUP_SEGMENT_SIZE, WORKGROUP_SIZE_X};
use gpurun_abi::shape::AMDGPU_RUNTIME_LDS;

pub(crate) type Lanes = gpurun_rpc::lanes::Warp;

unsafe extern "unadjusted" {
    /// `s_waitcnt`: `core::arch::amdgpu` has no wrapper. The immediate must be a constant.
    #[link_name = "llvm.amdgcn.s.waitcnt"]
    fn llvm_s_waitcnt(counters: i32);
    /// The shader clock: `s_memtime` on gfx9 and gfx10, `s_getreg` of `SHADER_CYCLES` (20 bits)
    /// on gfx11, a 64-bit register pair on gfx12.
    #[link_name = "llvm.readcyclecounter"]
    fn llvm_readcyclecounter() -> i64;
    /// The 100 MHz real-time counter: `s_memrealtime` on gfx9 and gfx10, `s_sendmsg_rtn` on
    /// gfx11 and later.
    #[link_name = "llvm.readsteadycounter"]
    fn llvm_readsteadycounter() -> i64;
}

/// The packet this launch was dispatched with: the loader fills in its workgroup and grid sizes
/// (docs/abi.md), and it stays valid, unchanged, while the kernel runs.
fn dispatch_packet() -> *const u8 {
    core::intrinsics::gpu::amdgpu_dispatch_ptr().cast()
}

/// Threads per workgroup along `axis` (the packet's u16 `workgroup_size_*`).
fn workgroup_size(axis: usize) -> u32 {
    // SAFETY: the dispatch packet is 64 bytes, 64-aligned, readable for the whole launch; the
    // field is an aligned u16 inside it.
    let size = unsafe {
        dispatch_packet()
            .add(WORKGROUP_SIZE_X + 2 * axis)
            .cast::<u16>()
            .read()
    };
    u32::from(size)
}

/// Work-items in the grid along `axis` (the packet's u32 `grid_size_*`).
fn grid_size(axis: usize) -> u32 {
    // SAFETY: as in `workgroup_size`; an aligned u32 field of the packet.
    unsafe {
        dispatch_packet()
            .add(GRID_SIZE_X + 4 * axis)
            .cast::<u32>()
            .read()
    }
}

pub fn thread_idx() -> [u32; 3] {
    [
        amdgpu::workitem_id_x(),
        amdgpu::workitem_id_y(),
        amdgpu::workitem_id_z(),
    ]
}

pub fn block_idx() -> [u32; 3] {
    [
        amdgpu::workgroup_id_x(),
        amdgpu::workgroup_id_y(),
        amdgpu::workgroup_id_z(),
    ]
}

pub fn block_dim() -> [u32; 3] {
    [workgroup_size(0), workgroup_size(1), workgroup_size(2)]
}

pub fn grid_dim() -> [u32; 3] {
    // The packet counts the grid in work-items; a partial last workgroup counts as one, as
    // HIP's `gridDim` does (the loader only makes whole ones).
    [0, 1, 2].map(|axis| grid_size(axis).div_ceil(workgroup_size(axis).max(1)))
}

pub fn lane_size() -> u32 {
    amdgpu::wavefrontsize()
}

pub fn lane_id() -> u32 {
    let low = amdgpu::mbcnt_lo(!0, 0);
    if lane_size() == 64 {
        amdgpu::mbcnt_hi(!0, low)
    } else {
        low
    }
}

/// A block barrier with HIP `__syncthreads` semantics: memory accesses before it are visible to
/// every thread of the block after it. `s_barrier` alone only synchronizes execution (and LLVM
/// may move memory accesses across it), so it needs a release before and an acquire after, at
/// workgroup scope as HIP's. Rust has no scoped fences, so the build tells which form is right
/// for the architecture (`gpurun_amdgpu_workgroup_in_one_cu`, see docs/abi.md):
/// - gfx9 (gfx90a, gfx942, ...): a workgroup runs on one compute unit, whose vector L1 every
///   wavefront of it shares, so workgroup scope needs only this wavefront's own memory operations
///   to have completed: compiler fences keep LLVM from moving accesses across, `s_waitcnt 0`
///   waits for them (loads, stores and LDS), and nothing is written back or invalidated.
/// - everything else (gfx10 and later run a workgroup on two compute units of a WGP with separate
///   L0 caches, and builds that do not say): system-scope fences, which order at least as much
///   (on gfx10/gfx11 this costs one L1 invalidate more than workgroup scope).
#[inline]
pub fn barrier() {
    #[cfg(gpurun_amdgpu_workgroup_in_one_cu)]
    {
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        // SAFETY: waits until this wavefront's outstanding memory operations are done (an
        // immediate of 0: vmcnt, expcnt and lgkmcnt all 0); no other effect.
        unsafe { llvm_s_waitcnt(0) };
        amdgpu::s_barrier();
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
    }
    #[cfg(not(gpurun_amdgpu_workgroup_in_one_cu))]
    {
        core::sync::atomic::fence(Ordering::Release);
        amdgpu::s_barrier();
        core::sync::atomic::fence(Ordering::Acquire);
    }
}

/// The start of this workgroup's dynamic shared memory (LDS after the kernel's static LDS),
/// aligned for `T`.
#[inline(always)]
pub fn shared_base<T>() -> *mut T {
    core::intrinsics::gpu::gpu_launch_sized_workgroup_mem::<T>()
}

/// Bytes of LDS from the start of the dynamic part (the launch's shared memory) to the end of
/// the workgroup's: the dispatch packet's group segment (the kernel's static LDS, the launch's
/// bytes, then the runtime's [`AMDGPU_RUNTIME_LDS`]) less where the dynamic part starts. A flat
/// address of LDS is the aperture base in its high 32 bits and the LDS offset in its low 32
/// bits, so that offset is the pointer's low half.
#[inline(always)]
fn dynamic_lds_bytes() -> u32 {
    // SAFETY: as in `workgroup_size`; an aligned u32 field of the packet.
    let total = unsafe {
        dispatch_packet()
            .add(GROUP_SEGMENT_SIZE)
            .cast::<u32>()
            .read()
    };
    let start = shared_base::<u8>() as usize as u32;
    total.saturating_sub(start)
}

/// Bytes of dynamic shared memory the launch gave each workgroup: the dynamic LDS less the
/// runtime's tail.
#[inline(always)]
pub fn shared_bytes() -> usize {
    dynamic_lds_bytes().saturating_sub(AMDGPU_RUNTIME_LDS) as usize
}

/// The block barrier with a vote: how many threads arrived with a true `predicate`, and how many
/// arrived. Two counters in the runtime's LDS tail (the first 4-aligned bytes after the launch's
/// shared memory): every thread zeroes them, a barrier, each wavefront's first active lane adds
/// its lanes' votes and its lane count, a barrier, every thread reads them, and a last barrier
/// keeps the next vote's zeroing after every read. Lanes that returned are out of EXEC, so they
/// neither vote nor count, as on NVIDIA.
pub fn barrier_vote(predicate: bool) -> (u32, u32) {
    let dynamic = dynamic_lds_bytes();
    if dynamic < AMDGPU_RUNTIME_LDS {
        panic!(
            "gpurun::barrier_count and its kind need the {AMDGPU_RUNTIME_LDS} bytes of LDS that \
             cargo-gpurun's HSA backend adds to every launch; this launch has none"
        );
    }
    // The first 4-aligned LDS offset after the launch's bytes, from the dynamic part's start.
    let start = shared_base::<u8>() as usize as u32;
    let tail = ((start + dynamic - AMDGPU_RUNTIME_LDS).next_multiple_of(4) - start) as usize;
    // SAFETY: `tail` and the word after it lie in this workgroup's LDS, inside the runtime's
    // tail (its 12 bytes leave two aligned words after any end of the launch's bytes), which no
    // other code touches; the words are only reached atomically.
    let (votes, lanes) = unsafe {
        let base = shared_base::<u8>().add(tail).cast::<u32>();
        (
            core::sync::atomic::AtomicU32::from_ptr(base),
            core::sync::atomic::AtomicU32::from_ptr(base.add(1)),
        )
    };
    votes.store(0, Ordering::Relaxed);
    lanes.store(0, Ordering::Relaxed);
    barrier();
    let active = active_mask();
    let voted = amdgpu::ballot(predicate) & active;
    if lane_id() == active.trailing_zeros() {
        votes.fetch_add(voted.count_ones(), Ordering::Relaxed);
        lanes.fetch_add(active.count_ones(), Ordering::Relaxed);
    }
    barrier();
    let counts = (votes.load(Ordering::Relaxed), lanes.load(Ordering::Relaxed));
    barrier();
    counts
}

/// Ends this wavefront's thread with `s_endpgm`, so the queue stays usable.
pub fn end_thread() -> ! {
    amdgpu::endpgm()
}

// Warp operations (`crate::warp`). A wavefront has one program counter and an EXEC mask: the
// lanes that execute an instruction are the active ones, so masks only select among them, and
// nothing waits for a lane outside EXEC (it reads as 0 in votes and `ds_bpermute`).

pub fn active_mask() -> u64 {
    amdgpu::ballot(true)
}

/// The lanes of a wavefront run in lock step: the wave barrier only keeps the compiler from
/// moving code across, and wavefront-scope fences need no instruction (LLVM's AMDGPU memory
/// model), so compiler fences order memory as HIP's `__syncwarp` does.
pub fn sync_lanes(_mask: u64) {
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
    amdgpu::wave_barrier();
    core::sync::atomic::compiler_fence(Ordering::SeqCst);
}

pub fn ballot(mask: u64, predicate: bool) -> u64 {
    amdgpu::ballot(predicate) & mask
}

pub fn vote_any(mask: u64, predicate: bool) -> bool {
    ballot(mask, predicate) != 0
}

pub fn vote_all(mask: u64, predicate: bool) -> bool {
    ballot(mask, !predicate) == 0
}

/// Lane `source`'s `value` through `ds_bpermute`, which takes the source as a byte address.
fn shuffle_word(value: u32, source: u32) -> u32 {
    // SAFETY: a cross-lane read through the LDS crossbar; it touches no LDS memory and reads 0
    // from an inactive lane.
    unsafe { amdgpu::ds_bpermute(source << 2, value) }
}

/// `value` of lane `source` (a lane of `mask`): 64-bit values move as two words.
pub fn shuffle(_op: u32, _mask: u64, value: u64, wide: bool, source: u32) -> u64 {
    let low = u64::from(shuffle_word(value as u32, source));
    if wide {
        low | u64::from(shuffle_word((value >> 32) as u32, source)) << 32
    } else {
        low
    }
}

/// `value` of lane `source`, the same lane in every caller: `v_readlane` into a scalar
/// register, cheaper than a permute. `readlane` needs a lane number that is the same in every
/// lane (a scalar register); `warp::broadcast` is safe, so a caller whose lanes disagree must
/// not make it undefined: the first active lane's `source` is taken, for every lane. (The host
/// emulation reports such a caller.)
pub fn broadcast(_mask: u64, value: u64, wide: bool, source: u32) -> u64 {
    let source = amdgpu::readfirstlane_u32(source);
    // SAFETY: `source` comes from `readfirstlane`, so it is uniform across the wavefront, as
    // `readlane` requires.
    unsafe {
        if wide {
            amdgpu::readlane_u64(value, source)
        } else {
            u64::from(amdgpu::readlane_u32(value as u32, source))
        }
    }
}

// Fences, the clock and sleep (`crate::arch`).

/// A workgroup-scope acquire-release fence, as `barrier` orders memory (see there): on gfx9,
/// where a workgroup runs on one compute unit, this wavefront's memory operations completed
/// (`s_waitcnt 0`) between compiler fences; elsewhere Rust's (system-scope) fence, which orders
/// at least as much.
pub fn fence_block() {
    #[cfg(gpurun_amdgpu_workgroup_in_one_cu)]
    {
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
        // SAFETY: waits until this wavefront's outstanding memory operations are done (an
        // immediate of 0: vmcnt, expcnt and lgkmcnt all 0); no other effect.
        unsafe { llvm_s_waitcnt(0) };
        core::sync::atomic::compiler_fence(Ordering::SeqCst);
    }
    #[cfg(not(gpurun_amdgpu_workgroup_in_one_cu))]
    {
        core::sync::atomic::fence(Ordering::AcqRel);
    }
}

/// Rust's fences carry no scope, and `asm!` is rejected here: a system-scope fence, which
/// orders at least as much as the agent scope asked for.
pub fn fence_device() {
    core::sync::atomic::fence(Ordering::AcqRel);
}

pub fn fence_system() {
    core::sync::atomic::fence(Ordering::AcqRel);
}

pub fn clock64() -> u64 {
    // SAFETY: reads the shader clock; no other effect.
    unsafe { llvm_readcyclecounter() as u64 }
}

/// Ticks of the real-time counter per nanosecond's worth: it counts at 100 MHz.
const NANOSECONDS_PER_REALTIME_TICK: u64 = 10;

/// Sleeps in `s_sleep 1` steps (about 64 clocks each) until the real-time counter has moved
/// `ns` on.
pub fn nanosleep(ns: u32) {
    let ticks = u64::from(ns).div_ceil(NANOSECONDS_PER_REALTIME_TICK);
    // SAFETY: reads the real-time counter; no other effect.
    let start = unsafe { llvm_readsteadycounter() } as u64;
    // SAFETY: as above.
    while (unsafe { llvm_readsteadycounter() } as u64).wrapping_sub(start) < ticks {
        amdgpu::s_sleep::<1>();
    }
}
