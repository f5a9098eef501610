//! libtest's execution-time thresholds (`--report-time` colours, `--ensure-time` failures): a
//! warn and a critical time per kind of test, from `RUST_TEST_TIME_UNIT` and
//! `RUST_TEST_TIME_INTEGRATION` (`WARN_MS,CRITICAL_MS`), with libtest's defaults.

use std::time::Duration;

/// The kind of test a threshold applies to, as libtest tells them apart: a library's own tests
/// are unit tests, a `tests/` target's are integration tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TestKind {
    /// A library's (or program's) own tests.
    #[default]
    Unit,
    /// The tests of a `tests/` target.
    Integration,
}

/// When a test's time is worth a warning colour, and when (`--ensure-time`) it fails the test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threshold {
    /// At or above: shown in yellow.
    pub warn: Duration,
    /// At or above: shown in red, and a failure under `--ensure-time`.
    pub critical: Duration,
}

/// The thresholds of both kinds of test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub unit: Threshold,
    pub integration: Threshold,
}

impl Default for Thresholds {
    /// libtest's defaults: unit tests 50 ms / 100 ms, integration tests 500 ms / 1 s.
    fn default() -> Thresholds {
        Thresholds {
            unit: Threshold::millis(50, 100),
            integration: Threshold::millis(500, 1000),
        }
    }
}

impl Thresholds {
    /// libtest's defaults, each replaced by its variable where set.
    pub fn from_env() -> Result<Thresholds, ThresholdError> {
        let defaults = Thresholds::default();
        Ok(Thresholds {
            unit: Threshold::from_env("RUST_TEST_TIME_UNIT", defaults.unit)?,
            integration: Threshold::from_env("RUST_TEST_TIME_INTEGRATION", defaults.integration)?,
        })
    }

    /// The threshold for `kind`.
    pub fn of(&self, kind: TestKind) -> Threshold {
        match kind {
            TestKind::Unit => self.unit,
            TestKind::Integration => self.integration,
        }
    }
}

impl Threshold {
    /// `warn` and `critical` milliseconds.
    pub const fn millis(warn: u64, critical: u64) -> Threshold {
        Threshold {
            warn: Duration::from_millis(warn),
            critical: Duration::from_millis(critical),
        }
    }

    /// The value of `variable` where set, else `default`.
    fn from_env(variable: &'static str, default: Threshold) -> Result<Threshold, ThresholdError> {
        let Ok(value) = std::env::var(variable) else {
            return Ok(default);
        };
        let (warn, critical) = parse(&value).map_err(|reason| ThresholdError {
            variable,
            value,
            reason,
        })?;
        Ok(Threshold::millis(warn, critical))
    }

    /// How `time` compares with this threshold.
    pub fn grade(&self, time: Duration) -> Grade {
        if time >= self.critical {
            Grade::Critical
        } else if time >= self.warn {
            Grade::Warn
        } else {
            Grade::Fine
        }
    }
}

/// Where a test's time falls against its [`Threshold`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grade {
    Fine,
    Warn,
    Critical,
}

/// `WARN_MS,CRITICAL_MS`, warn not above critical.
fn parse(value: &str) -> Result<(u64, u64), &'static str> {
    let (warn, critical) = value
        .split_once(',')
        .ok_or("expected two numbers of milliseconds separated by a comma")?;
    let number = |text: &str| {
        text.trim()
            .parse::<u64>()
            .map_err(|_| "expected two numbers of milliseconds separated by a comma")
    };
    let (warn, critical) = (number(warn)?, number(critical)?);
    if warn > critical {
        return Err("the warn time must not be above the critical time");
    }
    Ok((warn, critical))
}

/// A threshold variable that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?}: {reason} (e.g. `{variable}=100,200`)")]
pub struct ThresholdError {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_libtest_reads_them() {
        assert_eq!(parse("100,200"), Ok((100, 200)));
        assert_eq!(parse("5,5"), Ok((5, 5)));
        assert!(parse("200,100").is_err());
        assert!(parse("100").is_err());
        assert!(parse("a,b").is_err());
        assert!(parse("-1,3").is_err());
    }

    #[test]
    fn times_are_graded_at_or_above_each_limit() {
        let threshold = Thresholds::default().of(TestKind::Unit);
        assert_eq!(threshold.grade(Duration::from_millis(49)), Grade::Fine);
        assert_eq!(threshold.grade(Duration::from_millis(50)), Grade::Warn);
        assert_eq!(threshold.grade(Duration::from_millis(100)), Grade::Critical);
    }
}
