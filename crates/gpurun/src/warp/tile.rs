//! Tiles: a warp cut into groups of `N` consecutive lanes (cooperative groups'
//! `tiled_partition<N>` of a block, for `N` up to the lane size), each a group of its own for
//! the warp operations. A [`Tile`] is the caller's group: its mask, its ranks, and every warp
//! operation over its own lanes, with lanes numbered from the tile's first (rank 0 to `N - 1`),
//! so the same kernel code serves any `N` that divides the lane size.
//!
//! Each method is the warp function of the same name over [`Tile::mask`] (shuffles with the
//! tile as their segment, see [`super::shuffle_within`]): the same instructions and the same
//! meaning on every target, and the same rules (every lane of the tile that has not returned
//! makes the same call at the same call site).

use super::{WarpInteger, WarpNumber, WarpValue};

/// Methods that give the warp function of the same name the tile's mask and a value (after
/// `votes:`, a predicate), or (with `arg => within`) the `_within` form of a shuffle, with the
/// tile's size as its width.
macro_rules! over_the_tile {
    (votes: $($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[inline]
        #[cfg_attr(
            not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
            track_caller
        )]
        pub fn $name(self, predicate: bool) -> bool {
            super::$name(self.mask, predicate)
        }
    )*};
    ($($(#[$doc:meta])* $name:ident: $bound:ident $(, $arg:ident => $within:ident)?;)*) => {$(
        $(#[$doc])*
        #[inline]
        #[cfg_attr(
            not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
            track_caller
        )]
        pub fn $name<T: $bound>(self, value: T $(, $arg: u32)?) -> T {
            over_the_tile!(@call self, value, $name $(, $arg, $within)?)
        }
    )*};
    (@call $tile:ident, $value:ident, $name:ident) => {
        super::$name($tile.mask, $value)
    };
    (@call $tile:ident, $value:ident, $name:ident, $arg:ident, $within:ident) => {
        super::$within($tile.mask, $value, $arg, N)
    };
}

/// The caller's tile of `N` lanes: lanes `r * N .. (r + 1) * N` of its warp for its
/// `r = lane_id() / N`. `N` is a power of two from 1 to `lane_size()`: [`Tile::current`] panics
/// otherwise, on every target. In the last warp of a block whose size is not a multiple of
/// `lane_size()`, a tile has only the lanes the warp has ([`super::present`]); [`Tile::mask`]
/// says which.
///
/// ```no_run
/// use gpurun::warp::Tile;
/// // Sums of 8 consecutive lanes, whatever the lane size.
/// let tile = Tile::<8>::current();
/// let sum = tile.reduce_sum(gpurun::lane_id());
/// if tile.rank() == 0 {
///     // one lane per tile writes its tile's sum
/// }
/// # let _ = sum;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile<const N: u32> {
    /// The lane id of the tile's first lane.
    first: u32,
    /// The tile's lanes the warp has.
    mask: u64,
}

impl<const N: u32> Tile<N> {
    /// The tile of the calling lane. Panics unless `N` is a power of two from 1 to
    /// `lane_size()`.
    #[inline]
    #[track_caller]
    pub fn current() -> Tile<N> {
        // A tile is the caller's segment of `N` lanes, as for the shuffles' widths.
        let first = super::segment_base(N, "a tile's lane count");
        Tile {
            first,
            mask: super::low_bits(N) << first & super::present(),
        }
    }

    /// The warp lanes of the tile (bit `i`: lane `i` of the warp), as the warp functions take
    /// them.
    #[inline]
    pub fn mask(self) -> u64 {
        self.mask
    }

    /// How many lanes a tile has: `N` (fewer are present only in a block's partial last warp).
    #[inline]
    pub const fn size(self) -> u32 {
        N
    }

    /// The caller's place in its tile, from 0 to `N - 1` (`thread_rank()`).
    #[inline]
    pub fn rank(self) -> u32 {
        crate::lane_id() - self.first
    }

    /// Which tile of the block this is, counting from 0 in the order of the threads' linear
    /// index (`meta_group_rank()`): tiles never straddle two warps, as `N` divides the lane
    /// size.
    #[inline]
    pub fn index_in_block(self) -> u32 {
        crate::arch::thread_index_in_block() / N
    }

    /// Waits for the tile's lanes and orders their memory accesses ([`super::sync`]).
    #[inline]
    #[cfg_attr(
        not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
        track_caller
    )]
    pub fn sync(self) {
        super::sync(self.mask)
    }

    /// The predicates of the tile's lanes, bit `r` for rank `r` ([`super::ballot`] shifted
    /// to the tile's first lane).
    #[inline]
    #[cfg_attr(
        not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
        track_caller
    )]
    pub fn ballot(self, predicate: bool) -> u64 {
        super::ballot(self.mask, predicate) >> self.first
    }

    over_the_tile! {
        votes:
        /// Whether `predicate` holds on any lane of the tile ([`super::any`]).
        any;
        /// Whether `predicate` holds on every lane of the tile ([`super::all`]).
        all;
    }

    /// Whether the caller is the tile's lowest lane taking part ([`super::elect`]).
    #[inline]
    #[cfg_attr(
        not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
        track_caller
    )]
    pub fn elect(self) -> bool {
        super::elect(self.mask)
    }

    over_the_tile! {
        /// `value` of the lane of rank `rank % N` ([`super::shuffle_within`]).
        shuffle: WarpValue, rank => shuffle_within;
        /// `value` of the lane `delta` ranks below; the lowest `delta` ranks keep their own
        /// ([`super::shuffle_up_within`]).
        shuffle_up: WarpValue, delta => shuffle_up_within;
        /// `value` of the lane `delta` ranks above; the highest `delta` ranks keep their own
        /// ([`super::shuffle_down_within`]).
        shuffle_down: WarpValue, delta => shuffle_down_within;
        /// `value` of the lane of rank `rank() ^ lane_mask` when that is in the tile, else the
        /// caller's own ([`super::shuffle_xor_within`]).
        shuffle_xor: WarpValue, lane_mask => shuffle_xor_within;
        /// The sum of `value` over the tile, in every lane of it ([`super::reduce_sum`]).
        reduce_sum: WarpNumber;
        /// The minimum of `value` over the tile ([`super::reduce_min`]).
        reduce_min: WarpNumber;
        /// The maximum of `value` over the tile ([`super::reduce_max`]).
        reduce_max: WarpNumber;
        /// The bitwise AND of `value` over the tile ([`super::reduce_and`]).
        reduce_and: WarpInteger;
        /// The bitwise OR of `value` over the tile ([`super::reduce_or`]).
        reduce_or: WarpInteger;
        /// The bitwise XOR of `value` over the tile ([`super::reduce_xor`]).
        reduce_xor: WarpInteger;
        /// The sum of `value` over the caller and the tile's lanes below it
        /// ([`super::inclusive_scan_sum`]).
        inclusive_scan_sum: WarpNumber;
        /// The sum of `value` over the tile's lanes below the caller (zero in rank 0;
        /// [`super::exclusive_scan_sum`]).
        exclusive_scan_sum: WarpNumber;
    }
}
