//! NVIDIA warps (32 lanes) through PTX inline assembly: `core::arch::nvptx` has no lane id,
//! vote, shuffle or sleep. Needs sm_70 / PTX 6.2 or newer (`activemask`, `nanosleep`).

use crate::lanes::Lanes;
use core::arch::asm;

/// The calling thread's warp.
#[derive(Clone, Copy, Debug, Default)]
pub struct Warp;

impl Lanes for Warp {
    #[inline(always)]
    fn lane_size(&self) -> u32 {
        32
    }

    #[inline(always)]
    fn lane_id(&self) -> u32 {
        let id: u32;
        // SAFETY: reads the %laneid special register; no memory access.
        unsafe {
            asm!("mov.u32 {id}, %laneid;", id = out(reg32) id, options(pure, nomem, nostack))
        };
        // The mask tells LLVM what the asm cannot: the id is below 32. Without it the overflow
        // check of `1 << lane_id` stays in the PTX, and ptxas 12.x/13.x (sm_90 and newer,
        // -O1 and up) proves that branch dead and then crashes when it led into the panic path
        // (a recursive call cycle through the panic handler). See docs/abi.md.
        id & 31
    }

    #[inline(always)]
    fn lane_mask(&self) -> u64 {
        let mask: u32;
        // SAFETY: `activemask` only reports which threads of the warp execute it.
        unsafe { asm!("activemask.b32 {mask};", mask = out(reg32) mask, options(nomem, nostack)) };
        u64::from(mask)
    }

    #[inline(always)]
    fn ballot(&self, mask: u64, predicate: bool) -> u64 {
        let votes: u32;
        // SAFETY: a warp vote among the lanes of `mask`, which all execute this call (the
        // protocol is convergent); it touches no memory.
        unsafe {
            asm!(
                "{{ .reg .pred p; setp.ne.u32 p, {predicate}, 0; vote.sync.ballot.b32 {votes}, p, {mask}; }}",
                votes = out(reg32) votes,
                predicate = in(reg32) u32::from(predicate),
                mask = in(reg32) mask as u32,
                options(nomem, nostack),
            )
        };
        u64::from(votes) & mask
    }

    #[inline(always)]
    fn broadcast(&self, mask: u64, value: u32) -> u32 {
        let first = mask.trailing_zeros();
        let result: u32;
        // SAFETY: a shuffle among the lanes of `mask` (all executing it) reading lane `first`'s
        // value; it touches no memory.
        unsafe {
            asm!(
                "shfl.sync.idx.b32 {result}, {value}, {first}, 31, {mask};",
                result = out(reg32) result,
                value = in(reg32) value,
                first = in(reg32) first,
                mask = in(reg32) mask as u32,
                options(nomem, nostack),
            )
        };
        result
    }

    #[inline(always)]
    fn sync(&self, mask: u64) {
        // SAFETY: a warp barrier among the lanes of `mask`, which all reach it. It also orders
        // memory among them, so it must not be marked `nomem`.
        unsafe { asm!("bar.warp.sync {mask};", mask = in(reg32) mask as u32, options(nostack)) };
    }

    #[inline(always)]
    fn sleep_briefly(&self, _attempt: u32) {
        // SAFETY: suspends the thread for about 64 ns; no other effect.
        unsafe { asm!("nanosleep.u32 64;", options(nomem, nostack)) };
    }
}
