//! What the client needs from the hardware that runs it: lanes of a warp acting together.
//!
//! A warp (NVIDIA, 32 lanes) or wavefront (AMD, 32 or 64 lanes) opens one port at a time; every
//! lane writes its own 64-byte slot of the port's packet. The protocol code is convergent: all
//! active lanes call the same [`Lanes`] operations in the same order, so implementations may use
//! warp-wide instructions (or, for emulated warps on host threads, a barrier).
//!
//! Implementations: [`HostLane`] (one host thread, alone in its "warp"), `arch::nvptx::Warp`
//! and `arch::amdgpu::Wave` (re-exported here as `Warp` on those targets).

use crate::layout::LayoutError;

#[cfg(target_arch = "amdgpu")]
pub use crate::arch::amdgpu::Wave as Warp;
#[cfg(target_arch = "nvptx64")]
pub use crate::arch::nvptx::Warp;

/// Warp-level operations used by the client.
///
/// All masks have bit `i` set for lane `i`. `mask` arguments are the lanes that take part in the
/// conversation (the mask the port was opened with); lanes outside it must not influence results.
pub trait Lanes {
    /// Lanes per warp: 1, 32 or 64. Must equal the shared layout's lane size.
    fn lane_size(&self) -> u32;
    /// This lane's index inside its warp.
    fn lane_id(&self) -> u32;
    /// The lanes executing this call together right now.
    fn lane_mask(&self) -> u64;
    /// Bit `i` set iff lane `i` is in `mask` and passed `predicate = true`.
    fn ballot(&self, mask: u64, predicate: bool) -> u64;
    /// The value held by the lowest lane of `mask`, returned to every lane.
    fn broadcast(&self, mask: u64, value: u32) -> u32;
    /// Waits until every lane of `mask` has reached this point (and orders their memory
    /// accesses before it against those after).
    fn sync(&self, mask: u64);
    /// Backs off briefly while waiting for the other side; `attempt` counts the failed checks of
    /// the current wait (from 0), so host implementations can escalate from spinning to
    /// yielding to sleeping. GPU implementations sleep a fixed short time.
    fn sleep_briefly(&self, attempt: u32);
    /// Whether this lane is a host thread that may sleep in the kernel and wake the server with
    /// a system call (see [`crate::host_waits`]); the client then uses the host waits block the
    /// doorbell record names. GPU lanes cannot.
    #[inline(always)]
    fn blocking_waits(&self) -> bool {
        false
    }
    /// Wakes a host thread sleeping on the doorbell (called by one lane on the 0 → 1 edge of
    /// the counter). AMD GPUs raise an interrupt for it; elsewhere the host sees the counter.
    #[inline(always)]
    fn signal_interrupt(&self, _event_id: u32) {}
    /// Whether this is the lowest lane of `mask` (the one that does per-warp work).
    #[inline(always)]
    fn is_first_lane(&self, mask: u64) -> bool {
        self.lane_id() == mask.trailing_zeros()
    }
}

/// One host thread acting as a single lane. With `lane_size` 1 it is a CPU client; with 32 or
/// 64 it is one emulated GPU thread that talks alone (active mask `1 << lane_id`) but uses its
/// own slot in a port's packet, as the host emulation backend needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostLane {
    lane_size: u32,
    lane_id: u32,
}

impl HostLane {
    /// A CPU client: lane 0 of a 1-lane warp.
    pub const SINGLE: HostLane = HostLane {
        lane_size: 1,
        lane_id: 0,
    };

    /// Lane `lane_id` of an emulated warp of `lane_size` lanes.
    pub const fn new(lane_size: u32, lane_id: u32) -> Result<HostLane, LayoutError> {
        if !matches!(lane_size, 1 | 32 | 64) || lane_id >= lane_size {
            return Err(LayoutError::LaneSize(lane_size));
        }
        Ok(HostLane { lane_size, lane_id })
    }
}

impl Lanes for HostLane {
    #[inline]
    fn lane_size(&self) -> u32 {
        self.lane_size
    }
    #[inline]
    fn lane_id(&self) -> u32 {
        self.lane_id
    }
    #[inline]
    fn lane_mask(&self) -> u64 {
        1u64 << self.lane_id
    }
    #[inline]
    fn ballot(&self, mask: u64, predicate: bool) -> u64 {
        if predicate {
            mask & (1u64 << self.lane_id)
        } else {
            0
        }
    }
    #[inline]
    fn broadcast(&self, _mask: u64, value: u32) -> u32 {
        value
    }
    #[inline]
    fn sync(&self, _mask: u64) {}
    #[inline]
    fn sleep_briefly(&self, attempt: u32) {
        let mut spins = attempt;
        crate::sync::host_backoff(&mut spins);
    }
    #[inline(always)]
    fn blocking_waits(&self) -> bool {
        crate::host_waits::SUPPORTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lane_is_alone_in_its_warp() {
        let lane = HostLane::new(32, 5).unwrap();
        assert_eq!(lane.lane_mask(), 1 << 5);
        assert_eq!(lane.ballot(u64::MAX, true), 1 << 5);
        assert_eq!(lane.ballot(u64::MAX, false), 0);
        assert_eq!(lane.ballot(1, true), 0);
        assert!(lane.is_first_lane(lane.lane_mask()));
        assert!(HostLane::new(32, 32).is_err());
        assert!(HostLane::new(16, 0).is_err());
    }
}
