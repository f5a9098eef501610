//! Warp operations with one meaning on NVIDIA (warps of 32), AMD (wavefronts of 32 or 64) and
//! the host emulation (warps of 1, 32 or 64 threads): shuffles, votes, the active mask and a
//! warp barrier, and on top of them reductions ([`reduce_sum`], [`reduce_min`], [`reduce_max`],
//! [`reduce_and`], [`reduce_or`], [`reduce_xor`]), prefix sums ([`inclusive_scan_sum`],
//! [`exclusive_scan_sum`]), [`elect`] and the lane masks relative to the caller
//! ([`lanemask_lt`] and friends), and [`Tile`]s: a warp cut into groups of `N` lanes, each with
//! every one of those operations over its own lanes.
//!
//! A warp is [`lane_size()`](crate::lane_size) consecutive threads of a block (linear index,
//! x fastest); [`lane_id()`](crate::lane_id) is a thread's place in it. When the block's size is
//! not a multiple of `lane_size()`, its last warp is partial: [`present()`] is the lanes it has,
//! [`lanes()`] the lanes a whole warp has. Every operation takes a `mask` of the lanes that take
//! part (bit `i`: lane `i`; [`FULL`] for the whole warp; bits at and above `lane_size()` are
//! ignored). As CUDA's `*_sync` intrinsics require, **every lane of the mask that has not
//! returned from the kernel must make the same call, at the same call site, with the same
//! mask**; the caller must be in its mask (every target panics where it is not), and the mask must
//! name only lanes the warp has.
//!
//! | | NVIDIA | AMD | host emulation |
//! | --- | --- | --- | --- |
//! | instructions | `shfl.sync.idx`, `vote.sync.{ballot,any,all}`, `bar.warp.sync`, `activemask`, each with the mask (independent thread scheduling, sm_70+) | `ds_bpermute` (shuffles), `v_readlane` ([`broadcast`]), `s_ballot`-style compares (votes), `EXEC` ([`active_mask`]) | an exchange among the warp's OS threads through the emulator |
//! | a lane of the mask returned from the kernel | not waited for; votes count it false; a shuffle reading it gets an unspecified value | the same (an ended lane is inactive; a shuffle reading it gets 0) | not waited for; votes count it false; **a shuffle reading it fails the test** |
//! | a lane of the mask is elsewhere (diverged) | waited for: the call completes when it makes the same call, or returns (a hang, ended by the time limit, if it never does) | not waited for (lanes outside `EXEC` read as 0 and vote false) | **fails the test** with a message naming the lanes and where they wait, as soon as they can never come (at the block barrier, in another warp operation) |
//! | lanes of the mask disagree on it | each lane waits for the lanes of its own mask to make the call with that mask, or return | each lane runs under `EXEC` as it is | **fails the test** when the calls can never complete (as above); completes as NVIDIA does when the missing lanes return |
//! | lanes of the mask make the call from different call sites (`if` and `else` both shuffle) | the lanes meet across the sites (sm_70+; undefined before) | each side runs on its own under half of `EXEC`: every lane reads 0 from the other half | **fails the test**, naming both lines and their lanes |
//! | the mask names lanes a partial warp lacks (`FULL` with 48 threads) | they are never active: not waited for, vote false, a shuffle reading one gets an unspecified value | outside `EXEC` from the start: vote false, a shuffle reading one gets 0 | **fails the test**, naming the missing lanes (use [`present()`]) |
//! | the caller is not in its mask | **fails the test** (a panic: PTX leaves it undefined) | **fails the test** (a panic) | fails the test, naming the line |
//!
//! **None of this is undefined behaviour**, so the functions are safe. For `shfl.sync`,
//! `vote.sync`, `match.sync`, `redux.sync` and `bar.warp.sync` (sm_70 and later, the only
//! NVIDIA targets we build for), PTX leaves one case undefined: a calling thread outside its
//! own member mask, which every target turns into a panic first. Otherwise PTX defines each as
//! waiting until every thread of the member mask that has not exited has made the same call
//! with the same mask: a mask some lanes never honour is a hang (the test's time limit ends
//! it), never a wrong memory access. A value read from a lane that returned is some bit
//! pattern, and every bit pattern is a valid [`WarpValue`].
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
//!
//! The reductions and scans take any mask, partial and non-contiguous ones included: they
//! combine exactly the values of the mask's lanes, whatever lanes it leaves out, and give the
//! same answer on every target (the same shuffles in the same order, see [`reduce_sum`]). They
//! are warp operations like the others: every lane of the mask makes the call, with the same
//! mask, and reads other lanes of the mask (one that returned from the kernel is read: an
//! unspecified value on GPUs, a failed test on the host emulation).

use crate::arch::imp;

mod tile;
use gpurun_abi::host::warp_op;
pub use tile::Tile;

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

/// A value the reductions and scans add and compare: every [`WarpValue`] (32- and 64-bit
/// integers and floats). Integers add wrapping (as `wrapping_add`). Floats take the minimum
/// and maximum as IEEE 754-2019's `minimumNumber` and `maximumNumber`: a NaN loses to any
/// number (the result is a NaN only when every value is), and `-0.0` is below `+0.0`; so every
/// target gives the same bits.
pub trait WarpNumber: WarpValue {
    /// The sum of no values: the first lane's [`exclusive_scan_sum`].
    #[doc(hidden)]
    const ZERO: Self;
    #[doc(hidden)]
    fn warp_add(self, other: Self) -> Self;
    #[doc(hidden)]
    fn warp_min(self, other: Self) -> Self;
    #[doc(hidden)]
    fn warp_max(self, other: Self) -> Self;
    /// The exclusive prefix sum out of the inclusive one, where subtracting is exact (integers).
    #[doc(hidden)]
    fn exclusive_from_inclusive(inclusive: Self, own: Self) -> Option<Self>;
    /// The reduction in one instruction, where the target has one (NVIDIA sm_80+, 32-bit
    /// integers: `redux.sync`).
    #[doc(hidden)]
    #[inline(always)]
    fn native_reduce(_op: Reduction, _mask: u64, _value: Self) -> Option<Self> {
        None
    }
}

/// An integer [`WarpNumber`]: the bitwise reductions ([`reduce_and`], [`reduce_or`],
/// [`reduce_xor`]) take these.
pub trait WarpInteger: WarpNumber {
    #[doc(hidden)]
    fn warp_and(self, other: Self) -> Self;
    #[doc(hidden)]
    fn warp_or(self, other: Self) -> Self;
    #[doc(hidden)]
    fn warp_xor(self, other: Self) -> Self;
}

/// Which reduction a target's own instruction is asked for ([`WarpNumber::native_reduce`]).
#[doc(hidden)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reduction {
    Sum,
    Min,
    Max,
    And,
    Or,
    Xor,
}

macro_rules! warp_integers {
    ($($ty:ty),*) => {$(
        impl WarpNumber for $ty {
            const ZERO: Self = 0;
            #[inline(always)]
            fn warp_add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            #[inline(always)]
            fn warp_min(self, other: Self) -> Self {
                Ord::min(self, other)
            }
            #[inline(always)]
            fn warp_max(self, other: Self) -> Self {
                Ord::max(self, other)
            }
            #[inline(always)]
            fn exclusive_from_inclusive(inclusive: Self, own: Self) -> Option<Self> {
                Some(inclusive.wrapping_sub(own))
            }
            #[cfg(all(target_arch = "nvptx64", target_feature = "sm_80"))]
            #[inline(always)]
            fn native_reduce(op: Reduction, mask: u64, value: Self) -> Option<Self> {
                // `redux.sync` reduces 32-bit integers only.
                if Self::WIDE {
                    return None;
                }
                let signed = <$ty>::MIN != 0;
                let bits = imp::redux_sync(op, signed, mask, value.to_bits() as u32);
                Some(Self::from_bits(u64::from(bits)))
            }
        }

        impl WarpInteger for $ty {
            #[inline(always)]
            fn warp_and(self, other: Self) -> Self {
                self & other
            }
            #[inline(always)]
            fn warp_or(self, other: Self) -> Self {
                self | other
            }
            #[inline(always)]
            fn warp_xor(self, other: Self) -> Self {
                self ^ other
            }
        }
    )*};
}

warp_integers!(u32, i32, u64, i64, usize, isize);

macro_rules! warp_floats {
    ($($ty:ty),*) => {$(
        impl WarpNumber for $ty {
            const ZERO: Self = 0.0;
            #[inline(always)]
            fn warp_add(self, other: Self) -> Self {
                self + other
            }
            /// `minimumNumber`: `other` when it is smaller, `self` is NaN, or both are zeros and
            /// `other` is `-0.0`.
            #[inline(always)]
            fn warp_min(self, other: Self) -> Self {
                if other < self || self.is_nan() || (other == self && other.is_sign_negative()) {
                    other
                } else {
                    self
                }
            }
            /// `maximumNumber`: `other` when it is larger, `self` is NaN, or both are zeros and
            /// `self` is `-0.0`.
            #[inline(always)]
            fn warp_max(self, other: Self) -> Self {
                if other > self || self.is_nan() || (other == self && self.is_sign_negative()) {
                    other
                } else {
                    self
                }
            }
            #[inline(always)]
            fn exclusive_from_inclusive(_inclusive: Self, _own: Self) -> Option<Self> {
                None
            }
        }
    )*};
}

warp_floats!(f32, f64);

/// `$mask` cut to the lanes a warp has, after checking that it holds the caller. A caller
/// outside its own mask is undefined behaviour in PTX (`shfl.sync`, `vote.sync`,
/// `bar.warp.sync`), and these functions are safe: on GPUs it panics (the test fails, as on the
/// host emulation, whose emulator checks it with the call site). A fixed message: formatting
/// the lane and mask would pull `core::fmt` into every kernel with a warp operation.
macro_rules! mask_with_caller {
    ($mask:expr, $operation:literal) => {{
        let mask = $mask & lanes();
        #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
        if mask >> crate::lane_id() & 1 == 0 {
            panic!(concat!(
                "warp::",
                $operation,
                " called by a lane with a mask that does not include it"
            ));
        }
        mask
    }};
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
/// returned from the kernel and waits for lanes elsewhere (a hang if they never come); AMD waits for none
/// (a wavefront runs in lock step: only the lanes in `EXEC` execute it); the host emulation does
/// not wait for lanes that returned and fails the test, naming the lanes and where they wait,
/// for lanes that can never come.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn sync(mask: u64) {
    imp::sync_lanes(mask_with_caller!(mask, "sync"))
}

/// Bit `i` set iff lane `i` of `mask` takes part and passed `predicate = true`
/// (`__ballot_sync`).
///
/// Lanes of `mask` that do not take part: a lane that returned from the kernel reads as false on
/// every target; a lane elsewhere (diverged) reads as false on AMD (outside `EXEC`), is waited
/// for on NVIDIA (a hang if it never comes), and fails the test on the host emulation, naming
/// the lanes.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn ballot(mask: u64, predicate: bool) -> u64 {
    let mask = mask_with_caller!(mask, "ballot");
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
    imp::vote_any(mask_with_caller!(mask, "any"), predicate)
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
    imp::vote_all(mask_with_caller!(mask, "all"), predicate)
}

/// The value of lane `source` when it is a lane of `mask`, else the caller's own: every lane
/// of the mask calls it (with its own `source`), whether it uses the result or not.
#[inline(always)]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
fn exchange<T: WarpValue>(op: u32, mask: u64, value: T, source: Option<u32>) -> T {
    let mask = mask_with_caller!(mask, "shuffle");
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
/// of `mask` that does not take part: NVIDIA gives an unspecified value (and waits, a hang if it
/// never comes, for a lane elsewhere rather than returned); AMD gives 0 (`ds_bpermute` reads 0 from a
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
/// outside `mask` gives each lane its own value. On AMD a non-uniform `source` is taken from the
/// lowest active lane (`readfirstlane`, which `v_readlane` needs); the host emulation fails the
/// test.
///
/// A `source` of `mask` that does not take part: NVIDIA gives an unspecified value, as
/// [`shuffle`]; AMD's `v_readlane` reads that lane's register whether it is active or not (a
/// stale value); the host emulation fails the test as [`shuffle`] does.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn broadcast<T: WarpValue>(mask: u64, value: T, source: u32) -> T {
    let mask = mask_with_caller!(mask, "broadcast");
    let source = source % crate::lane_size();
    let bits = imp::broadcast(mask, value.to_bits(), T::WIDE, source);
    if mask >> source & 1 == 1 {
        T::from_bits(bits)
    } else {
        value
    }
}

/// The first lane of the caller's segment when the warp is cut into segments of `width` lanes
/// (CUDA's `width` argument, cooperative groups' `tiled_partition`). `width` must be a power of
/// two from 1 to `lane_size()`; anything else panics, on every target, naming `what` it is.
#[inline]
#[track_caller]
fn segment_base(width: u32, what: &str) -> u32 {
    assert!(
        width.is_power_of_two() && width <= crate::lane_size(),
        "{what} must be a power of two from 1 to the lane size ({}), not {width}",
        crate::lane_size()
    );
    crate::lane_id() & !(width - 1)
}

/// What a shuffle's `width` is, in [`segment_base`]'s panic.
const SHUFFLE_WIDTH: &str = "a shuffle width";

/// [`shuffle`] within segments of `width` lanes (`__shfl_sync(mask, value, source, width)`):
/// `value` of lane `source % width` of the caller's segment. `width` is a power of two from 1 to
/// `lane_size()` (else a panic). One [`shuffle`] from a computed lane on every target, so lanes
/// of the mask outside the segment, and those that do not take part, behave as there.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn shuffle_within<T: WarpValue>(mask: u64, value: T, source: u32, width: u32) -> T {
    let base = segment_base(width, SHUFFLE_WIDTH);
    shuffle(mask, value, base + source % width)
}

/// [`shuffle_up`] within segments of `width` lanes (`__shfl_up_sync(.., width)`): lanes fewer
/// than `delta` from the start of their segment keep their own value. `width`: as in
/// [`shuffle_within`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn shuffle_up_within<T: WarpValue>(mask: u64, value: T, delta: u32, width: u32) -> T {
    let base = segment_base(width, SHUFFLE_WIDTH);
    let lane = crate::lane_id();
    let source = match lane - base >= delta {
        true => lane - delta,
        false => lane,
    };
    shuffle(mask, value, source)
}

/// [`shuffle_down`] within segments of `width` lanes (`__shfl_down_sync(.., width)`): lanes
/// fewer than `delta` from the end of their segment keep their own value. `width`: as in
/// [`shuffle_within`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn shuffle_down_within<T: WarpValue>(mask: u64, value: T, delta: u32, width: u32) -> T {
    let base = segment_base(width, SHUFFLE_WIDTH);
    let lane = crate::lane_id();
    let source = match (lane - base).checked_add(delta) {
        Some(offset) if offset < width => base + offset,
        _ => lane,
    };
    shuffle(mask, value, source)
}

/// [`shuffle_xor`] within segments of `width` lanes: `value` of lane `lane_id() ^ lane_mask`
/// when that lane is in the caller's segment, else the caller's own. (CUDA's
/// `__shfl_xor_sync(.., width)` also lets a lane read from an earlier segment; here no lane
/// reads outside its own, on every target.) `width`: as in [`shuffle_within`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn shuffle_xor_within<T: WarpValue>(mask: u64, value: T, lane_mask: u32, width: u32) -> T {
    let base = segment_base(width, SHUFFLE_WIDTH);
    let lane = crate::lane_id();
    let partner = lane ^ lane_mask;
    let source = match partner & !(width - 1) == base {
        true => partner,
        false => lane,
    };
    shuffle(mask, value, source)
}

/// The lanes of the warp below the caller (bits `0..lane_id()`; CUDA's `%lanemask_lt`).
///
/// Computed from [`lane_id()`](crate::lane_id) on every target, within [`lanes()`]; not a warp
/// operation (no mask, nothing waits). With [`ballot`], a lane's place among the lanes that
/// vote true: `(ballot(mask, keep) & lanemask_lt()).count_ones()`.
#[inline]
pub fn lanemask_lt() -> u64 {
    low_bits(crate::lane_id())
}

/// The lanes of the warp up to and including the caller (CUDA's `%lanemask_le`); see
/// [`lanemask_lt`].
#[inline]
pub fn lanemask_le() -> u64 {
    low_bits(crate::lane_id() + 1)
}

/// The lanes of the warp above the caller, within [`lanes()`] (CUDA's `%lanemask_gt`); see
/// [`lanemask_lt`].
#[inline]
pub fn lanemask_gt() -> u64 {
    lanes() & !lanemask_le()
}

/// The caller and the lanes of the warp above it, within [`lanes()`] (CUDA's `%lanemask_ge`);
/// see [`lanemask_lt`].
#[inline]
pub fn lanemask_ge() -> u64 {
    lanes() & !lanemask_lt()
}

/// True in exactly one lane of `mask`: the lowest lane of the mask that makes the call (CUDA's
/// `cg::coalesced_group::thread_rank() == 0`; sm_90's `elect.sync` picks the same lane).
///
/// A warp operation: a [`ballot`] of the mask (every lane of the mask makes the call).
///
/// | | NVIDIA | AMD | host emulation |
/// | --- | --- | --- | --- |
/// | instructions | `vote.sync.ballot` with the mask | `s_ballot`-style compare of `EXEC` | the emulator's exchange |
/// | a lane of the mask returned from the kernel | the lowest of the others | the same | the same |
/// | a lane of the mask elsewhere (diverged) | waited for (a hang if it never comes) | the lowest lane in `EXEC` | fails the test, naming the lanes |
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn elect(mask: u64) -> bool {
    let voters = ballot(mask, true);
    voters != 0 && voters.trailing_zeros() == crate::lane_id()
}

/// The lanes of `mask` whose `value` equals the caller's (CUDA's `__match_any_sync`), the
/// caller included: lanes that group themselves by a key, e.g. to let one lane per key update
/// memory for its group.
///
/// On nvptx it is one `match.any.sync` (sm_70+). Elsewhere it is a loop of warp operations:
/// take the lowest lane not yet grouped, [`shuffle`] its value to the mask, [`ballot`] who holds
/// it; once per distinct value. Values compare by their bits (so a float NaN matches the same
/// NaN bits, and `0.0` does not match `-0.0`). Lanes of the mask that do not take part are in no
/// group; as for [`ballot`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn match_any<T: WarpValue>(mask: u64, value: T) -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let mask = mask_with_caller!(mask, "match_any");
        imp::match_any(mask, value.to_bits(), T::WIDE) & mask
    }
    #[cfg(not(target_arch = "nvptx64"))]
    match_any_by_votes(mask, value)
}

/// [`match_any`] from shuffles and ballots, where there is no instruction for it.
#[cfg(not(target_arch = "nvptx64"))]
#[inline]
#[cfg_attr(not(target_arch = "amdgpu"), track_caller)]
fn match_any_by_votes<T: WarpValue>(mask: u64, value: T) -> u64 {
    let bits = value.to_bits();
    let mut ungrouped = ballot(mask, true);
    let mut mine = 0;
    // `ungrouped` is the same in every lane (a ballot), so every lane loops as often.
    while ungrouped != 0 {
        let leader = ungrouped.trailing_zeros();
        let key = shuffle(mask, value, leader).to_bits();
        let holders = ballot(mask, bits == key);
        if bits == key {
            mine = holders;
        }
        ungrouped &= !holders;
    }
    mine
}

/// Whether every lane of `mask` that takes part holds the same `value` as the caller (CUDA's
/// `__match_all_sync`, whose mask result is [`ballot`]`(mask, true)` when this is true). Values
/// compare by their bits, as in [`match_any`]: one [`shuffle`] from the lowest lane taking part
/// and one vote.
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn match_all<T: WarpValue>(mask: u64, value: T) -> bool {
    let bits = value.to_bits();
    let voters = ballot(mask, true);
    let first = shuffle(mask, value, voters.trailing_zeros() % crate::lane_size()).to_bits();
    all(mask, bits == first)
}

/// The lane of `mask` with `rank` lanes of `mask` below it (`rank < mask.count_ones()`): a
/// binary search on the counts of set bits, six steps.
#[inline(always)]
fn lane_of_rank(mask: u64, rank: u32) -> u32 {
    let (mut rest, mut rank, mut lane) = (mask, rank, 0);
    let mut width = 32;
    while width > 0 {
        let low = rest & ((1u64 << width) - 1);
        let below = low.count_ones();
        if rank >= below {
            rank -= below;
            rest >>= width;
            lane += width;
        } else {
            rest = low;
        }
        width /= 2;
    }
    lane
}

/// The caller's place among the lanes of `mask` (how many lanes of `mask` are below it).
#[inline(always)]
fn rank_in(mask: u64) -> u32 {
    (mask & lanemask_lt()).count_ones()
}

/// `combine` of the values of every lane of `mask`, in every lane of the mask, in the order
/// [`reduce_sum`] documents: a pairwise tree over the mask's lanes in lane order.
///
/// Whole warp: a butterfly of `shuffle_xor` (steps 1, 2, 4, ...), which gives every lane the
/// tree's value (each lane's pairs are the tree's, swapped, and the combinations commute).
/// Any other mask: the same tree over the lanes' ranks (the k-th lane of the mask plays lane
/// k), rank 0 ending with the total, which a shuffle from the mask's lowest lane gives every
/// lane; a lane whose partner is past the mask's last lane keeps its value (the partner counts
/// as the identity), so no lane outside the mask is read and none contributes.
#[inline(always)]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
fn reduce<T: WarpNumber>(mask: u64, value: T, op: Reduction, combine: fn(T, T) -> T) -> T {
    let mask = mask & lanes();
    if let Some(native) = T::native_reduce(op, mask, value) {
        return native;
    }
    let mut total = value;
    let mut step = 1;
    if mask == lanes() {
        while step < crate::lane_size() {
            total = combine(total, shuffle_xor(mask, total, step));
            step *= 2;
        }
        return total;
    }
    let (count, rank) = (mask.count_ones(), rank_in(mask));
    while step < count {
        let partner = rank + step;
        let source = if partner < count {
            lane_of_rank(mask, partner)
        } else {
            crate::lane_id()
        };
        let theirs = exchange(warp_op::SHUFFLE, mask, total, Some(source));
        if partner < count {
            total = combine(total, theirs);
        }
        step *= 2;
    }
    // A shuffle, not `broadcast`: lanes of other masks may make the same call in the same
    // instruction (AMD), where `v_readlane` would need one source lane for all of them.
    exchange(warp_op::SHUFFLE, mask, total, Some(mask.trailing_zeros()))
}

/// The sum of `value` over the lanes of `mask`, in every lane of the mask (`__reduce_add_sync`
/// for any [`WarpNumber`]); integers wrap.
///
/// Any mask works, partial and non-contiguous ones included: only the mask's lanes count. Floats
/// are added as a pairwise tree over the mask's lanes in lane order, the same on every target:
/// with `v0, v1, ...` the values of the mask's lanes from the lowest, `((v0 + v1) + (v2 + v3)) +
/// ((v4 + v5) + ...)`, a value without a partner passing up unchanged (not a left-to-right
/// sum, so it can differ from one in the last bits). Every lane gets the same bits.
///
/// | | NVIDIA | AMD | host emulation |
/// | --- | --- | --- | --- |
/// | whole warp ([`FULL`], [`lanes()`]) | a butterfly of `log2(lane_size())` `shfl.sync` (two per step for 64-bit values) | a butterfly of `ds_bpermute` | a butterfly of the emulator's exchanges |
/// | any other mask | the tree over the mask's lanes: up to `log2(count)` `shfl.sync` from computed lanes, then one from the mask's lowest lane | the same with `ds_bpermute` | the same through the emulator |
/// | 32-bit integers in a build for sm_80 or later (`-Ctarget-cpu`, the device's architecture) | one `redux.sync` (not for floats or 64-bit values: the tree) | — | — |
///
/// The build's default NVIDIA architecture is sm_70, which has no `redux.sync`: there 32-bit
/// integers take the shuffles too. Lanes of the mask that do not take part: as in [`shuffle`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn reduce_sum<T: WarpNumber>(mask: u64, value: T) -> T {
    reduce(mask, value, Reduction::Sum, T::warp_add)
}

/// The minimum of `value` over the lanes of `mask`, in every lane of the mask
/// (`__reduce_min_sync` for any [`WarpNumber`]). Floats: `minimumNumber` (a NaN loses to any
/// number, `-0.0` is below `+0.0`; see [`WarpNumber`]), so every target gives the same bits.
///
/// Which instructions each target runs, and any mask: as in [`reduce_sum`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn reduce_min<T: WarpNumber>(mask: u64, value: T) -> T {
    reduce(mask, value, Reduction::Min, T::warp_min)
}

/// The maximum of `value` over the lanes of `mask`, in every lane of the mask
/// (`__reduce_max_sync` for any [`WarpNumber`]). Floats: `maximumNumber` (a NaN loses to any
/// number, `+0.0` is above `-0.0`; see [`WarpNumber`]).
///
/// Which instructions each target runs, and any mask: as in [`reduce_sum`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn reduce_max<T: WarpNumber>(mask: u64, value: T) -> T {
    reduce(mask, value, Reduction::Max, T::warp_max)
}

/// The bitwise AND of `value` over the lanes of `mask`, in every lane of the mask
/// (`__reduce_and_sync` for any [`WarpInteger`]).
///
/// Which instructions each target runs, and any mask: as in [`reduce_sum`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn reduce_and<T: WarpInteger>(mask: u64, value: T) -> T {
    reduce(mask, value, Reduction::And, T::warp_and)
}

/// The bitwise OR of `value` over the lanes of `mask`, in every lane of the mask
/// (`__reduce_or_sync` for any [`WarpInteger`]).
///
/// Which instructions each target runs, and any mask: as in [`reduce_sum`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn reduce_or<T: WarpInteger>(mask: u64, value: T) -> T {
    reduce(mask, value, Reduction::Or, T::warp_or)
}

/// The bitwise XOR of `value` over the lanes of `mask`, in every lane of the mask
/// (`__reduce_xor_sync` for any [`WarpInteger`]).
///
/// Which instructions each target runs, and any mask: as in [`reduce_sum`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn reduce_xor<T: WarpInteger>(mask: u64, value: T) -> T {
    reduce(mask, value, Reduction::Xor, T::warp_xor)
}

/// The sum of `value` over the lanes of `mask` up to and including the caller, in lane order
/// (an inclusive prefix sum); integers wrap.
///
/// Any mask works, partial and non-contiguous ones included: the lanes of the mask are ranked
/// by lane id, and lane `k` of the mask gets `v0 + ... + vk` of the mask's lanes only. Floats are
/// added in the scan's order, the same on every target: step `d` = 1, 2, 4, ... adds to each
/// lane the partial sum of the lane `d` places below it in the mask (Hillis-Steele), not left
/// to right.
///
/// | | NVIDIA | AMD | host emulation |
/// | --- | --- | --- | --- |
/// | a mask of the lowest lanes ([`FULL`], [`lanes()`], [`present()`]) | `log2(count)` `shfl.sync` steps (two per step for 64-bit values) | `ds_bpermute` steps | the emulator's exchanges |
/// | any other mask | the same steps from lanes computed in the mask | the same | the same |
///
/// Lanes of the mask that do not take part: as in [`shuffle`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn inclusive_scan_sum<T: WarpNumber>(mask: u64, value: T) -> T {
    let mask = mask & lanes();
    let count = mask.count_ones();
    let mut sum = value;
    let mut step = 1;
    if mask & mask.wrapping_add(1) == 0 {
        // Lanes 0..count: a lane's rank is its lane id.
        let lane = crate::lane_id();
        while step < count {
            let below = shuffle_up(mask, sum, step);
            if lane >= step {
                sum = below.warp_add(sum);
            }
            step *= 2;
        }
        return sum;
    }
    let rank = rank_in(mask);
    while step < count {
        let source = if rank >= step {
            lane_of_rank(mask, rank - step)
        } else {
            crate::lane_id()
        };
        let below = exchange(warp_op::SHUFFLE, mask, sum, Some(source));
        if rank >= step {
            sum = below.warp_add(sum);
        }
        step *= 2;
    }
    sum
}

/// The sum of `value` over the lanes of `mask` below the caller, in lane order (an exclusive
/// prefix sum): 0 in the mask's lowest lane; integers wrap.
///
/// [`inclusive_scan_sum`] less the caller's own value: for integers by subtracting it (exact),
/// for floats by one more shuffle, of the inclusive sum of the mask's next lane below (so it is
/// exactly that lane's [`inclusive_scan_sum`]). Any mask, order and instructions: as in
/// [`inclusive_scan_sum`].
#[inline]
#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    track_caller
)]
pub fn exclusive_scan_sum<T: WarpNumber>(mask: u64, value: T) -> T {
    let inclusive = inclusive_scan_sum(mask, value);
    if let Some(exclusive) = T::exclusive_from_inclusive(inclusive, value) {
        return exclusive;
    }
    let below = mask & lanes() & lanemask_lt();
    let source = below.checked_ilog2().unwrap_or_else(crate::lane_id);
    let previous = exchange(warp_op::SHUFFLE, mask, inclusive, Some(source));
    if below != 0 {
        previous
    } else {
        T::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::{lane_of_rank, WarpNumber};

    /// `lane_of_rank` against walking the set bits, for masks of every density.
    #[test]
    fn lane_of_rank_finds_the_lane_with_that_many_mask_lanes_below() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for round in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let mask = match round % 4 {
                0 => state,
                1 => state & (state >> 1),
                2 => state | (state << 3),
                _ => state & (state >> 2) & (state >> 5),
            };
            let lanes: Vec<u32> = (0..64).filter(|lane| mask >> lane & 1 == 1).collect();
            for (rank, &lane) in lanes.iter().enumerate() {
                assert_eq!(
                    lane_of_rank(mask, rank as u32),
                    lane,
                    "{mask:#x} rank {rank}"
                );
            }
        }
        assert_eq!(lane_of_rank(u64::MAX, 63), 63);
        assert_eq!(lane_of_rank(1 << 63, 0), 63);
    }

    /// `minimumNumber` and `maximumNumber` give the same bits whichever operand comes first
    /// (but for which NaN when both are).
    #[test]
    fn float_minimum_and_maximum_commute() {
        let values = [
            f32::NAN,
            -0.0,
            0.0,
            -1.5,
            2.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for a in values {
            for b in values {
                if a.is_nan() && b.is_nan() {
                    continue;
                }
                assert_eq!(a.warp_min(b).to_bits(), b.warp_min(a).to_bits(), "{a} {b}");
                assert_eq!(a.warp_max(b).to_bits(), b.warp_max(a).to_bits(), "{a} {b}");
            }
        }
        assert!(f32::NAN.warp_min(1.0) == 1.0 && 1.0f32.warp_max(f32::NAN) == 1.0);
        assert!((-0.0f64).warp_max(0.0).is_sign_positive());
        assert!(0.0f64.warp_min(-0.0).is_sign_negative());
    }
}
