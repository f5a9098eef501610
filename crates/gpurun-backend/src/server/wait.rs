//! What every backend's launch loop shares besides the RPC handlers: when a wait must end
//! without the kernel's help (the caller's deadline, or the grace period after the device called
//! `exit()`/`abort()`), and how that end is reported.

use crate::LaunchEnd;
use std::time::{Duration, Instant};

/// How long the other threads may keep running after one called `exit()` or `abort()`. LLVM's
/// loader ends the process at once; waiting a little keeps their output.
pub const EXIT_GRACE: Duration = Duration::from_secs(1);

/// When a launch must end without the kernel's help.
#[derive(Clone, Copy, Debug)]
pub struct WaitLimits {
    pub started: Instant,
    pub timeout: Option<Duration>,
    /// See [`EXIT_GRACE`].
    pub exit_grace: Duration,
}

impl WaitLimits {
    /// Limits for a launch starting now.
    pub fn starting_now(timeout: Option<Duration>) -> WaitLimits {
        WaitLimits {
            started: Instant::now(),
            timeout,
            exit_grace: EXIT_GRACE,
        }
    }
}

/// How a wait ended: the launch's end, and why the module is unusable if it is.
#[derive(Debug, PartialEq, Eq)]
pub struct Finish {
    pub end: LaunchEnd,
    pub broken: Option<String>,
}

/// Tracks the deadlines of one wait.
#[derive(Debug)]
pub struct Deadlines {
    limits: WaitLimits,
    grace_until: Option<Instant>,
}

impl Deadlines {
    pub fn new(limits: WaitLimits) -> Deadlines {
        Deadlines {
            limits,
            grace_until: None,
        }
    }

    /// The end of the wait if a deadline has passed: the grace period after `ended` (an exit or
    /// abort the device asked for), or the caller's timeout. A kernel cannot be stopped from
    /// outside, so either leaves the module broken (the worker process is replaced).
    pub fn check(&mut self, ended: Option<&LaunchEnd>) -> Option<Finish> {
        if let Some(end) = ended {
            let grace = self.limits.exit_grace;
            let until = *self
                .grace_until
                .get_or_insert_with(|| Instant::now() + grace);
            if Instant::now() >= until {
                return Some(Finish {
                    end: end.clone(),
                    broken: Some(format!(
                        "the kernel was still running {grace:?} after the device's exit/abort"
                    )),
                });
            }
        }
        let limit = self.limits.timeout?;
        (self.limits.started.elapsed() >= limit).then(|| Finish {
            end: LaunchEnd::TimedOut(limit),
            broken: Some(format!("a kernel ran past its {limit:?} timeout")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_ends_the_wait() {
        let mut deadlines = Deadlines::new(WaitLimits {
            started: Instant::now() - Duration::from_secs(5),
            timeout: Some(Duration::from_secs(1)),
            exit_grace: EXIT_GRACE,
        });
        let finish = deadlines.check(None).expect("past the timeout");
        assert_eq!(finish.end, LaunchEnd::TimedOut(Duration::from_secs(1)));
        assert!(finish.broken.is_some());
    }

    #[test]
    fn exit_waits_for_the_grace_period() {
        let mut deadlines = Deadlines::new(WaitLimits {
            started: Instant::now(),
            timeout: None,
            exit_grace: Duration::from_millis(20),
        });
        assert_eq!(deadlines.check(None), None);
        assert_eq!(deadlines.check(Some(&LaunchEnd::Exited(3))), None);
        std::thread::sleep(Duration::from_millis(30));
        let finish = deadlines
            .check(Some(&LaunchEnd::Exited(3)))
            .expect("grace over");
        assert_eq!(finish.end, LaunchEnd::Exited(3));
    }
}
