//! AMD wavefronts through `core::arch::amdgpu` (inline assembly is rejected on this target).
//! The wave width (32 or 64) is what the code was compiled for.

use crate::lanes::Lanes;
use core::arch::amdgpu;

unsafe extern "unadjusted" {
    /// `s_sendmsg`: `core::arch::amdgpu` has no wrapper and inline assembly is rejected here.
    /// The message id must be a constant.
    #[link_name = "llvm.amdgcn.s.sendmsg"]
    fn llvm_s_sendmsg(message: u32, m0: u32);
}

/// The message that raises a host interrupt carrying the value in M0 (the doorbell's event id).
const MSG_INTERRUPT: u32 = 1;

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

    #[inline(always)]
    fn signal_interrupt(&self, event_id: u32) {
        // SAFETY: `s_sendmsg` with MSG_INTERRUPT only raises an interrupt for the host driver,
        // which routes it to the doorbell's HSA signal by the event id; no memory is touched.
        unsafe { llvm_s_sendmsg(MSG_INTERRUPT, event_id) }
    }
}
