//! AMD wavefronts through `core::arch::amdgpu` (inline assembly is rejected on this target).
//! The wave width (32 or 64) is what the code was compiled for.

use crate::lanes::Lanes;
use core::arch::amdgpu;

/// The calling thread's wavefront.
#[derive(Clone, Copy, Debug, Default)]
pub struct Wave;

impl Lanes for Wave {
    #[inline(always)]
    fn lane_size(&self) -> u32 {
        amdgpu::wavefrontsize()
    }

    #[inline(always)]
    fn lane_id(&self) -> u32 {
        // Counts the set bits of an all-ones mask below this lane: the lane index.
        amdgpu::mbcnt_hi(u32::MAX, amdgpu::mbcnt_lo(u32::MAX, 0))
    }

    #[inline(always)]
    fn lane_mask(&self) -> u64 {
        amdgpu::ballot(true)
    }

    #[inline(always)]
    fn ballot(&self, mask: u64, predicate: bool) -> u64 {
        amdgpu::ballot(predicate) & mask
    }

    #[inline(always)]
    fn broadcast(&self, _mask: u64, value: u32) -> u32 {
        // Lanes of a wave run in lock step and the first active lane is the lowest lane of the
        // port's mask (the whole active set opened the port).
        amdgpu::readfirstlane_u32(value)
    }

    #[inline(always)]
    fn sync(&self, _mask: u64) {
        amdgpu::wave_barrier();
    }

    #[inline(always)]
    fn sleep_briefly(&self, _attempt: u32) {
        amdgpu::s_sleep::<2>();
    }
}
