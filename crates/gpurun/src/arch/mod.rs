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

/// After a block-scope atomic operation on the `size` bytes at `address` (a write when
/// `writes`): in a host image built for the emulation's memory checks, they learn its scope, so
/// that another block's atomic use of the bytes is reported as the race it is on NVIDIA.
/// Nothing elsewhere.
#[inline(always)]
#[cfg(not(target_arch = "nvptx64"))]
pub(crate) fn note_block_scoped_atomic(address: usize, size: usize, writes: bool) {
    #[cfg(all(gpurun_emulation_checks, not(target_arch = "amdgpu")))]
    checks::block_scoped_atomic(address, size, writes);
    #[cfg(not(all(gpurun_emulation_checks, not(target_arch = "amdgpu"))))]
    let _ = (address, size, writes);
}

/// The barrier votes where one vote answers how many threads voted true and how many arrived
/// (the host emulation's barrier, AMD's counters in LDS); NVIDIA has `barrier.red` for each.
#[cfg(not(target_arch = "nvptx64"))]
mod votes {
    use super::imp::barrier_vote;

    #[cfg_attr(not(target_arch = "amdgpu"), track_caller)]
    pub fn barrier_count(predicate: bool) -> u32 {
        barrier_vote(predicate).0
    }

    #[cfg_attr(not(target_arch = "amdgpu"), track_caller)]
    pub fn barrier_and(predicate: bool) -> bool {
        let (voted, arrived) = barrier_vote(predicate);
        voted == arrived
    }

    #[cfg_attr(not(target_arch = "amdgpu"), track_caller)]
    pub fn barrier_or(predicate: bool) -> bool {
        barrier_vote(predicate).0 > 0
    }
}
#[cfg(target_arch = "nvptx64")]
use imp as votes;
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
/// between threads). Where they do not, the GPUs pair each thread's barrier with whichever the
/// others reach next, which is defined but rarely what the kernel means: NVIDIA's
/// `barrier.sync` (not the aligned `bar.sync` of `__syncthreads`, which would be undefined
/// behaviour there) and AMD's `s_barrier`. The host emulation fails the test instead, naming
/// the lines and the threads. Threads that returned are not waited for, on every target.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn barrier() {
    imp::barrier()
}

/// [`barrier`] that also counts the threads of the block for which `predicate` is true
/// (`__syncthreads_count`): every thread that reaches it gets the same count. Threads that
/// returned from the kernel take no part. The rules of [`barrier`] apply: every thread of the
/// block reaches the same call. NVIDIA: `barrier.red.popc`; AMD: counters in LDS the HSA backend
/// adds to every launch, between three barriers; the host emulation counts at its barrier.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn barrier_count(predicate: bool) -> u32 {
    votes::barrier_count(predicate)
}

/// [`barrier`] that also says whether `predicate` is true for every thread of the block that
/// reaches it (`__syncthreads_and`); see [`barrier_count`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn barrier_and(predicate: bool) -> bool {
    votes::barrier_and(predicate)
}

/// [`barrier`] that also says whether `predicate` is true for any thread of the block
/// (`__syncthreads_or`); see [`barrier_count`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn barrier_or(predicate: bool) -> bool {
    votes::barrier_or(predicate)
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

/// An acquire-release fence whose ordering reaches the threads of this block (CUDA's
/// `cuda::atomic_thread_fence(memory_order_acq_rel, thread_scope_block)`): memory accesses of
/// this thread before it are ordered before those after it, as seen by threads of the block
/// that synchronize with it (an atomic they read, or a fence of theirs). Not a barrier: nothing
/// waits for other threads.
///
/// | NVIDIA | AMD | host emulation |
/// | --- | --- | --- |
/// | `fence.acq_rel.cta` | gfx9 (a workgroup on one compute unit): `s_waitcnt` for this wavefront's memory operations, no cache maintenance; other architectures: `core::sync::atomic::fence(AcqRel)`, which is system scope (Rust has no scoped fences on AMD: it orders more, and costs more) | `core::sync::atomic::fence(SeqCst)` |
#[inline]
pub fn fence_block() {
    imp::fence_block()
}

/// An acquire-release fence whose ordering reaches every thread of this device (CUDA's
/// `cuda::atomic_thread_fence(memory_order_acq_rel, thread_scope_device)`, close to
/// `__threadfence()`, which NVIDIA makes sequentially consistent): as [`fence_block`], for
/// threads of any block of the launch.
///
/// | NVIDIA | AMD | host emulation |
/// | --- | --- | --- |
/// | `fence.acq_rel.gpu` | `core::sync::atomic::fence(AcqRel)`, system scope (see [`fence_block`]) | `core::sync::atomic::fence(SeqCst)` |
#[inline]
pub fn fence_device() {
    imp::fence_device()
}

/// An acquire-release fence whose ordering reaches the host and other devices too (CUDA's
/// `cuda::atomic_thread_fence(memory_order_acq_rel, thread_scope_system)`): as [`fence_block`],
/// for memory the host or another device reads while the kernel runs (host memory mapped for
/// the GPU). For a sequentially consistent fence, `core::sync::atomic::fence(SeqCst)` is system
/// scope on every GPU target.
///
/// | NVIDIA | AMD | host emulation |
/// | --- | --- | --- |
/// | `fence.acq_rel.sys` | `core::sync::atomic::fence(AcqRel)` (system scope) | `core::sync::atomic::fence(SeqCst)` |
#[inline]
pub fn fence_system() {
    imp::fence_system()
}

/// A counter of this thread's clock: cycles of the SM or compute unit it runs on (CUDA's
/// `clock64()`, HIP's `clock64()`), for timing code inside a kernel.
///
/// **Only comparable within one thread**: each SM or compute unit (and each host thread) has
/// its own counter, started at its own time, so subtract two readings of the same thread
/// (`clock64().wrapping_sub(start)`) and never compare values of different threads or blocks.
/// The unit differs between targets (cycles of a GPU clock whose rate varies, nanoseconds on the
/// host): compare counts of one target with each other, not across targets.
///
/// | NVIDIA | AMD | host emulation |
/// | --- | --- | --- |
/// | `%clock64`: 64-bit cycles of the SM | LLVM's `readcyclecounter`: gfx9 and gfx10 `s_memtime` (64-bit shader clock); **gfx11 `s_getreg` of `SHADER_CYCLES`, only 20 bits**: it wraps about every million cycles (as HIP's `clock64()` there), so mask a difference with `0xF_FFFF` and keep what is timed short; gfx12 a 64-bit register | nanoseconds of a monotonic clock (`std::time::Instant`) since this thread's first reading |
#[inline]
pub fn clock64() -> u64 {
    imp::clock64()
}

/// Suspends this thread for about `ns` nanoseconds (CUDA's `__nanosleep(ns)`): a hint for
/// back-off in spin loops, not a precise delay; GPUs may wake it earlier or later.
///
/// | NVIDIA | AMD | host emulation |
/// | --- | --- | --- |
/// | `nanosleep.u32` (sm_70+; at most 1 ms each, in a loop for more), which sleeps between 0 and twice the time asked | `s_sleep` (about 64 clocks each) until LLVM's `readsteadycounter` (the 100 MHz real-time counter: `s_memrealtime` on gfx9, `s_sendmsg_rtn` on gfx11) has moved `ns` on | `std::thread::sleep` (at least `ns`; 0 yields) |
#[inline]
pub fn nanosleep(ns: u32) {
    imp::nanosleep(ns)
}
