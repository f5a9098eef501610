//! Warp operations with one meaning on NVIDIA (warps of 32), AMD (wavefronts of 32 or 64) and
//! the host emulation (warps of 1, 32 or 64 threads): shuffles, votes, the active mask and a
//! warp barrier.
//!
//! A warp is [`lane_size()`](crate::lane_size) consecutive threads of a block (linear index,
//! x fastest); [`lane_id()`](crate::lane_id) is a thread's place in it. When the block's size is
//! not a multiple of `lane_size()`, its last warp is partial: [`present()`] is the lanes it has,
//! [`lanes()`] the lanes a whole warp has. Every operation takes a `mask` of the lanes that take
//! part (bit `i`: lane `i`; [`FULL`] for the whole warp; bits at and above `lane_size()` are
//! ignored). As CUDA's `*_sync` intrinsics require, **every lane of the mask that has not
//! returned from the kernel must make the same call, at the same call site, with the same
//! mask**; the caller must be in its mask, and the mask must name only lanes the warp has.
//!
//! | | NVIDIA | AMD | host emulation |
//! | --- | --- | --- | --- |
//! | instructions | `shfl.sync.idx`, `vote.sync.{ballot,any,all}`, `bar.warp.sync`, `activemask`, each with the mask (independent thread scheduling, sm_70+) | `ds_bpermute` (shuffles), `v_readlane` ([`broadcast`]), `s_ballot`-style compares (votes), `EXEC` ([`active_mask`]) | an exchange among the warp's OS threads through the emulator |
//! | a lane of the mask returned from the kernel | not waited for; votes count it false; a shuffle reading it gets an undefined value | the same (an ended lane is inactive; a shuffle reading it gets 0) | not waited for; votes count it false; **a shuffle reading it fails the test** |
//! | a lane of the mask is elsewhere (diverged) | hangs, or undefined results | not waited for (lanes outside `EXEC` read as 0 and vote false) | **fails the test** with a message naming the lanes and where they wait, as soon as they can never come (at the block barrier, in another warp operation) |
//! | lanes of the mask make the call from different call sites (`if` and `else` both shuffle) | the lanes meet across the sites (sm_70+; undefined before) | each side runs on its own under half of `EXEC`: every lane reads 0 from the other half | **fails the test**, naming both lines and their lanes |
//! | the mask names lanes a partial warp lacks (`FULL` with 48 threads) | they are never active: not waited for, vote false, a shuffle reading one gets an undefined value | outside `EXEC` from the start: vote false, a shuffle reading one gets 0 | **fails the test**, naming the missing lanes (use [`present()`]) |
//! | the caller is not in its mask | undefined | works | fails the test |
//!
//! Defined the same everywhere: a shuffle whose source lane is out of range (`shuffle_up`
//! below lane 0, `shuffle_down` past the last lane, `shuffle_xor` past the last lane) or **not
//! in the mask returns the caller's own value**; [`shuffle`] takes its source modulo
//! `lane_size()`, as CUDA's `__shfl_sync` does. [`active_mask`] is the lanes executing the call
//! together: on GPUs whatever has converged there; on the host emulation the lanes of the warp
//! that call it while each other lane waits elsewhere or has returned.
//!
//! On AMD, gfx9 (gfx90a, gfx942: wave64) shuffles across all 64 lanes. gfx10 and later build
//! as wave32 (LLVM's default for them, which `cargo gpurun` keeps): there `ds_bpermute` reaches
//! only its own 32-lane half of a wave64, so a crate that turns on `+wavefrontsize64` for those
//! architectures gets wrong shuffles across the halves.
//!
//! Values are any [`WarpValue`]: 32- and 64-bit integers and floats (64-bit ones move as two
//! 32-bit shuffles on GPUs).

use crate::arch::imp;
use gpurun_abi::host::warp_op;

/// Every lane of the warp (bits at and above `lane_size()` are ignored).
pub const FULL: u64 = u64::MAX;

/// A value a warp operation can move between lanes: up to 64 bits, as its bit pattern.
pub trait WarpValue: Copy + sealed::Sealed {
    /// Whether it needs two 32-bit words.
    #[doc(hidden)]
    const WIDE: bool;
    #[doc(hidden)]
    fn to_bits(self) -> u64;
    #[doc(hidden)]
    fn from_bits(bits: u64) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! warp_values {
    ($($ty:ty => $wide:expr, |$v:ident| $to:expr, |$b:ident| $from:expr;)*) => {$(
        impl sealed::Sealed for $ty {}
        impl WarpValue for $ty {
            const WIDE: bool = $wide;
            #[inline(always)]
            fn to_bits(self) -> u64 {
                let $v = self;
                $to
            }
            #[inline(always)]
            fn from_bits(bits: u64) -> Self {
                let $b = bits;
                $from
            }
        }
    )*};
}

warp_values! {
    u32 => false, |v| u64::from(v), |b| b as u32;
    i32 => false, |v| u64::from(v as u32), |b| b as u32 as i32;
    f32 => false, |v| u64::from(v.to_bits()), |b| f32::from_bits(b as u32);
    u64 => true, |v| v, |b| b;
    i64 => true, |v| v as u64, |b| b as i64;
    f64 => true, |v| v.to_bits(), |b| f64::from_bits(b);
    usize => true, |v| v as u64, |b| b as usize;
    isize => true, |v| v as u64, |b| b as isize;
}

/// The mask of every lane a whole warp has (`lane_size()` low bits). The last warp of a block
/// whose size is not a multiple of `lane_size()` has fewer: see [`present`].
#[inline]
pub fn lanes() -> u64 {
    low_bits(crate::lane_size())
}

/// The lanes this thread's warp has: [`lanes()`], except in the last warp of a block whose
/// size is not a multiple of `lane_size()` (a block of 48 threads in warps of 32 leaves its
/// second warp lanes 0-15). The mask a warp operation over "every lane" takes there.
#[inline]
pub fn present() -> u64 {
    let [x, y, z] = crate::block_dim();
    let threads = x * y * z;
    let size = crate::lane_size();
    let first = crate::arch::thread_index_in_block() / size * size;
    low_bits(threads.saturating_sub(first).min(size))
}

/// A mask of the `count` lowest lanes.
#[inline]
fn low_bits(count: u32) -> u64 {
    match count {
        64.. => u64::MAX,
        count => (1u64 << count) - 1,
    }
}

/// The lanes of this warp executing this call together (CUDA's `__activemask()`). Not a
/// synchronization: on GPUs, lanes that diverged may or may not have reconverged here.
///
/// What each target returns: NVIDIA `activemask` (the threads executing it together); AMD the
/// wavefront's `EXEC` (lanes that returned or sit in the other side of a branch are not in it);
/// host emulation: the lanes that call it while every other lane of the warp waits elsewhere (the
/// block barrier, another warp operation) or has returned.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn active_mask() -> u64 {
    imp::active_mask() & lanes()
}

/// Waits until every lane of `mask` has reached a `sync` with this mask, and orders their
/// memory accesses before it against those after (CUDA's `__syncwarp(mask)`).
///
/// Lanes of `mask` that do not come: NVIDIA (`bar.warp.sync`) does not wait for lanes that
/// returned from the kernel and hangs (or is undefined) for lanes elsewhere; AMD waits for none
/// (a wavefront runs in lock step: only the lanes in `EXEC` execute it); the host emulation does
/// not wait for lanes that returned and fails the test, naming the lanes and where they wait,
/// for lanes that can never come.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn sync(mask: u64) {
    imp::sync_lanes(mask & lanes())
}

/// Bit `i` set iff lane `i` of `mask` takes part and passed `predicate = true`
/// (`__ballot_sync`).
///
/// Lanes of `mask` that do not take part: a lane that returned from the kernel reads as false on
/// every target; a lane elsewhere (diverged) reads as false on AMD (outside `EXEC`), hangs or
/// is undefined on NVIDIA, and fails the test on the host emulation, naming the lanes.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn ballot(mask: u64, predicate: bool) -> u64 {
    let mask = mask & lanes();
    imp::ballot(mask, predicate) & mask
}

/// Whether `predicate` is true on any lane of `mask` that takes part (`__any_sync`).
///
/// Lanes of `mask` that do not take part count as false, as in [`ballot`] (and with the same
/// outcome per target for lanes elsewhere).
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn any(mask: u64, predicate: bool) -> bool {
    imp::vote_any(mask & lanes(), predicate)
}

/// Whether `predicate` is true on every lane of `mask` that takes part (`__all_sync`).
///
/// Lanes of `mask` that do not take part are not counted: a lane that returned from the kernel
/// does not make it false on any target; for a lane elsewhere, as in [`ballot`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn all(mask: u64, predicate: bool) -> bool {
    imp::vote_all(mask & lanes(), predicate)
}

/// The value of lane `source` when it is a lane of `mask`, else the caller's own: every lane
/// of the mask calls it (with its own `source`), whether it uses the result or not.
#[inline(always)]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
fn exchange<T: WarpValue>(op: u32, mask: u64, value: T, source: Option<u32>) -> T {
    let mask = mask & lanes();
    let source = source.filter(|&source| mask >> source & 1 == 1);
    let read = source.unwrap_or_else(crate::lane_id);
    let bits = imp::shuffle(op, mask, value.to_bits(), T::WIDE, read);
    if source.is_some() {
        T::from_bits(bits)
    } else {
        value
    }
}

/// `value` of lane `source % lane_size()` (`__shfl_sync`).
///
/// A source lane outside `mask` gives the caller its own `value` on every target. A source lane
/// of `mask` that does not take part: NVIDIA gives an undefined value (and hangs or is undefined
/// if that lane is elsewhere rather than returned); AMD gives 0 (`ds_bpermute` reads 0 from a
/// lane outside `EXEC`); the host emulation fails the test, saying the lane returned, or, for a
/// lane elsewhere, naming the lanes and where they wait. The same holds for every shuffle.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn shuffle<T: WarpValue>(mask: u64, value: T, source: u32) -> T {
    exchange(
        warp_op::SHUFFLE,
        mask,
        value,
        Some(source % crate::lane_size()),
    )
}

/// `value` of lane `lane_id() - delta`; lanes below `delta` keep their own (`__shfl_up_sync`).
///
/// A source lane outside `mask` or not taking part: as in [`shuffle`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn shuffle_up<T: WarpValue>(mask: u64, value: T, delta: u32) -> T {
    exchange(
        warp_op::SHUFFLE_UP,
        mask,
        value,
        crate::lane_id().checked_sub(delta),
    )
}

/// `value` of lane `lane_id() + delta`; lanes past the end keep their own
/// (`__shfl_down_sync`).
///
/// A source lane outside `mask` or not taking part: as in [`shuffle`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn shuffle_down<T: WarpValue>(mask: u64, value: T, delta: u32) -> T {
    let source = crate::lane_id()
        .checked_add(delta)
        .filter(|&source| source < crate::lane_size());
    exchange(warp_op::SHUFFLE_DOWN, mask, value, source)
}

/// `value` of lane `lane_id() ^ lane_mask`; a source past the end keeps its own
/// (`__shfl_xor_sync`): the butterfly of reductions.
///
/// A source lane outside `mask` or not taking part: as in [`shuffle`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn shuffle_xor<T: WarpValue>(mask: u64, value: T, lane_mask: u32) -> T {
    let source = Some(crate::lane_id() ^ lane_mask).filter(|&source| source < crate::lane_size());
    exchange(warp_op::SHUFFLE_XOR, mask, value, source)
}

/// `value` of lane `source`, which must be the same in every calling lane (a uniform value,
/// e.g. the lowest lane of a ballot): `v_readlane` on AMD, a shuffle elsewhere. A `source`
/// outside `mask` gives each lane its own value. On AMD a non-uniform `source` gives undefined
/// results; the host emulation fails the test.
///
/// A `source` of `mask` that does not take part: NVIDIA gives an undefined value, as
/// [`shuffle`]; AMD's `v_readlane` reads that lane's register whether it is active or not (a
/// stale, undefined value); the host emulation fails the test as [`shuffle`] does.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn broadcast<T: WarpValue>(mask: u64, value: T, source: u32) -> T {
    let mask = mask & lanes();
    let source = source % crate::lane_size();
    let bits = imp::broadcast(mask, value.to_bits(), T::WIDE, source);
    if mask >> source & 1 == 1 {
        T::from_bits(bits)
    } else {
        value
    }
}
