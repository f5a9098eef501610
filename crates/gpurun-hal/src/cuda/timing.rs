//! The device's own time of a launch: two timing events of the module, recorded on the kernel's
//! stream right before and right after `cuLaunchKernel`, read with `cuEventElapsedTime` once the
//! stream has finished. The pair is created once per module and reused by each of its launches
//! (they run one at a time); it is destroyed with the module, and leaked with it after a fault
//! or a timeout.

use super::driver::{calls, DriverError};
use cudarc::driver::sys::{CUevent, CUstream};
use std::time::Duration;

/// A module's start and stop events.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaunchEvents {
    start: CUevent,
    stop: CUevent,
}

// SAFETY: event handles are driver objects usable from any thread on which their context is
// current (the launch's helper thread makes it current before recording).
unsafe impl Send for LaunchEvents {}
// SAFETY: as above; the handles are only copied, never written through.
unsafe impl Sync for LaunchEvents {}

impl LaunchEvents {
    /// Two timing events of the current context.
    pub(crate) fn create() -> Result<LaunchEvents, DriverError> {
        let start = calls::event_create_timed()?;
        match calls::event_create_timed() {
            Ok(stop) => Ok(LaunchEvents { start, stop }),
            Err(error) => {
                // SAFETY: created just above and not handed out.
                let _ = unsafe { calls::event_destroy(start) };
                Err(error)
            }
        }
    }

    /// Records the start event on `stream`; whether it was recorded. A failure only costs the
    /// measurement: the launch goes ahead (a sticky error fails the launch call as well).
    ///
    /// # Safety
    /// The events' context must be current and `stream` a live stream of it.
    pub(crate) unsafe fn record_start(&self, stream: CUstream) -> bool {
        // SAFETY: per the caller.
        unsafe { calls::event_record(self.start, stream) }.is_ok()
    }

    /// Records the stop event on `stream`, after the kernel; whether it was recorded.
    ///
    /// # Safety
    /// As [`LaunchEvents::record_start`].
    pub(crate) unsafe fn record_stop(&self, stream: CUstream) -> bool {
        // SAFETY: per the caller.
        unsafe { calls::event_record(self.stop, stream) }.is_ok()
    }

    /// The time between the two events, once the stream has run past the stop event; `None`
    /// when the driver cannot say.
    ///
    /// # Safety
    /// The events' context must be current, and both events recorded for the same launch.
    pub(crate) unsafe fn elapsed(&self) -> Option<Duration> {
        // SAFETY: per the caller.
        let millis = unsafe { calls::event_elapsed_ms(self.start, self.stop) }.ok()?;
        millis_to_duration(millis)
    }

    /// # Safety
    /// The events' context must be current; no launch may still record or read them, and they
    /// are not used afterwards.
    pub(crate) unsafe fn destroy(self) {
        // SAFETY: per the caller; each event is destroyed once.
        unsafe {
            let _ = calls::event_destroy(self.start);
            let _ = calls::event_destroy(self.stop);
        }
    }
}

/// `cuEventElapsedTime`'s milliseconds as a duration, to the nanosecond; `None` for what no
/// launch can last (negative, NaN, infinite).
pub(crate) fn millis_to_duration(millis: f32) -> Option<Duration> {
    let nanos = f64::from(millis) * 1e6;
    (nanos.is_finite() && nanos >= 0.0).then(|| Duration::from_nanos(nanos.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_become_a_duration() {
        assert_eq!(millis_to_duration(1.5), Some(Duration::from_micros(1500)));
        assert_eq!(millis_to_duration(0.0), Some(Duration::ZERO));
        // The events' resolution is about half a microsecond.
        assert_eq!(millis_to_duration(0.0005), Some(Duration::from_nanos(500)));
        assert_eq!(millis_to_duration(60_000.0), Some(Duration::from_secs(60)));
    }

    #[test]
    fn impossible_times_are_none() {
        assert_eq!(millis_to_duration(-0.25), None);
        assert_eq!(millis_to_duration(f32::NAN), None);
        assert_eq!(millis_to_duration(f32::INFINITY), None);
    }
}
