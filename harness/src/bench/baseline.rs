//! Baselines: a run's measurements saved under a name (`--save-baseline NAME`) and a later
//! run's compared with them (`--baseline NAME`), with criterion's conventions: a change counts
//! when it is significant (p below `--significance-level`, 0.05) and its whole confidence
//! interval lies beyond the noise threshold (`--noise-threshold`, 1%); the verdicts are
//! criterion's four. Unlike criterion, which compares means with a bootstrapped t-test, the
//! change here is the ratio of the medians (its interval bootstrapped) and its p-value comes
//! from a Mann-Whitney U test (ranks): a device's samples have a long tail (preemption on the
//! host emulation, clock changes on a GPU), which moves a mean and a t statistic far more than
//! a median or a rank.
//!
//! A baseline is one JSON file per name, `DIR/NAME.json`, holding each benchmark's samples by
//! suite (the image's name) and benchmark name; saving replaces the entries of the benchmarks
//! measured and keeps the others, so filtered runs and several suites add up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bench::stats::{median, percentile_of_sorted};
use crate::bench::Measured;

/// The layout version of a baseline file.
const VERSION: u32 = 1;

/// Resamples of the bootstrap of the change's interval.
const RESAMPLES: usize = 2000;

/// Why a baseline could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// `--baseline NAME` names no saved baseline.
    #[error("no baseline `{name}` at `{}`: save one first with --save-baseline {name}", path.display())]
    Missing {
        /// The name asked for.
        name: String,
        /// Where it would be.
        path: PathBuf,
    },
    /// The file could not be read or written.
    #[error("failed to {action} the baseline `{}`: {source}", path.display())]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a baseline of this version.
    #[error("the baseline `{}` is not one cargo-gpurun can read: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// One benchmark's saved measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Saved {
    /// Nanoseconds per iteration, one per sample.
    pub samples: Vec<f64>,
    /// Their median, for readers of the file.
    pub median: f64,
    /// Iterations per timed launch.
    pub iterations: u64,
    /// What timed the launches.
    pub timer: String,
}

impl From<&Measured> for Saved {
    fn from(measured: &Measured) -> Saved {
        Saved {
            samples: measured.samples.clone(),
            median: measured.summary.median,
            iterations: measured.iterations,
            timer: measured.timer.clone(),
        }
    }
}

/// A baseline file: every saved benchmark by suite, then by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    version: u32,
    suites: BTreeMap<String, BTreeMap<String, Saved>>,
}

/// Where the baseline `name` lives under `dir`.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

impl Baseline {
    /// Reads the baseline `name` from `dir`; `Ok(None)` when there is none.
    pub fn read(dir: &Path, name: &str) -> Result<Option<Baseline>, BaselineError> {
        let path = path(dir, name);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(BaselineError::Io {
                    action: "read",
                    path,
                    source,
                })
            }
        };
        let baseline: Baseline =
            serde_json::from_str(&text).map_err(|error| BaselineError::Malformed {
                path: path.clone(),
                message: error.to_string(),
            })?;
        if baseline.version != VERSION {
            return Err(BaselineError::Malformed {
                path,
                message: format!(
                    "its version is {}, this cargo-gpurun writes {VERSION}",
                    baseline.version
                ),
            });
        }
        Ok(Some(baseline))
    }

    /// The baseline `name` from `dir`, which must exist (`--baseline NAME`).
    pub fn require(dir: &Path, name: &str) -> Result<Baseline, BaselineError> {
        Baseline::read(dir, name)?.ok_or_else(|| BaselineError::Missing {
            name: name.to_owned(),
            path: path(dir, name),
        })
    }

    /// Benchmark `bench` of `suite`, if saved.
    pub fn get(&self, suite: &str, bench: &str) -> Option<&Saved> {
        self.suites.get(suite)?.get(bench)
    }

    /// Saves `measured` as `suite`'s `bench` into the baseline `name` under `dir` (created as
    /// needed), keeping every other entry of the file.
    pub fn save(
        dir: &Path,
        name: &str,
        suite: &str,
        measured: &[(String, Saved)],
    ) -> Result<(), BaselineError> {
        let mut baseline = Baseline::read(dir, name)?.unwrap_or(Baseline {
            version: VERSION,
            suites: BTreeMap::new(),
        });
        let entries = baseline.suites.entry(suite.to_owned()).or_default();
        for (bench, saved) in measured {
            entries.insert(bench.clone(), saved.clone());
        }
        let path = path(dir, name);
        let io = |source| BaselineError::Io {
            action: "write",
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let text =
            serde_json::to_string_pretty(&baseline).map_err(|error| BaselineError::Malformed {
                path: path.clone(),
                message: error.to_string(),
            })?;
        // Written beside it and renamed, so a reader never sees half a file.
        let staging = dir.join(format!(".{name}.json.{}", std::process::id()));
        std::fs::write(&staging, text).map_err(io)?;
        std::fs::rename(&staging, &path).map_err(io)
    }
}

/// What a comparison with a baseline concludes (criterion's four verdicts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Significantly slower, the whole interval beyond the noise threshold.
    Regressed,
    /// Significantly faster, the whole interval beyond the noise threshold.
    Improved,
    /// Significant, but not clearly beyond the noise threshold.
    WithinNoise,
    /// Not significant.
    NoChange,
}

impl Change {
    /// Criterion's sentence for it.
    pub fn sentence(self) -> &'static str {
        match self {
            Change::Regressed => "Performance has regressed.",
            Change::Improved => "Performance has improved.",
            Change::WithinNoise => "Change within noise threshold.",
            Change::NoChange => "No change in performance detected.",
        }
    }

    /// Its name in JSON and JUnit.
    pub fn key(self) -> &'static str {
        match self {
            Change::Regressed => "regressed",
            Change::Improved => "improved",
            Change::WithinNoise => "within_noise",
            Change::NoChange => "no_change",
        }
    }
}

/// How to judge a change (`--noise-threshold`, `--significance-level`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Relative changes within +/- this are noise (criterion's default 0.01).
    pub noise: f64,
    /// A change is significant below this p-value (criterion's default 0.05).
    pub significance: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            noise: 0.01,
            significance: 0.05,
        }
    }
}

/// A benchmark compared with its baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The baseline's name.
    pub baseline: String,
    /// The relative change of the median (`new / old - 1`).
    pub change: f64,
    /// Its 95% confidence interval (bootstrap percentiles).
    pub lower: f64,
    pub upper: f64,
    /// The probability of a difference of the medians at least this large if nothing changed.
    pub p_value: f64,
    /// The significance level it was judged at.
    pub significance: f64,
    /// The verdict.
    pub verdict: Change,
}

/// A small deterministic generator (xorshift64*): the same samples always give the same
/// interval and p-value.
struct Random(u64);

impl Random {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let value = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((value >> 32) as usize * bound) >> 32
    }
}

/// Compares `new` samples with a baseline's `old` ones (both non-empty for a verdict; a side
/// without samples, or a baseline median that is not positive, gives no change).
pub fn compare(name: &str, old: &[f64], new: &[f64], thresholds: Thresholds) -> Comparison {
    let no_change = |change: f64| Comparison {
        baseline: name.to_owned(),
        change,
        lower: change,
        upper: change,
        p_value: 1.0,
        significance: thresholds.significance,
        verdict: Change::NoChange,
    };
    let old_median = median(&mut old.to_vec());
    let new_median = median(&mut new.to_vec());
    if old.is_empty() || new.is_empty() || old_median <= 0.0 {
        return no_change(0.0);
    }
    let change = new_median / old_median - 1.0;
    let mut random = Random(0x9e37_79b9_7f4a_7c15 ^ (old.len() as u64) << 32 ^ new.len() as u64);
    let resample = |from: &[f64], into: &mut Vec<f64>, random: &mut Random| {
        into.clear();
        into.extend((0..from.len()).map(|_| from[random.below(from.len())]));
        median(into)
    };
    // The change's interval: resample each side with replacement.
    let (mut old_draw, mut new_draw) = (Vec::new(), Vec::new());
    let mut changes: Vec<f64> = (0..RESAMPLES)
        .filter_map(|_| {
            let old = resample(old, &mut old_draw, &mut random);
            let new = resample(new, &mut new_draw, &mut random);
            (old > 0.0).then(|| new / old - 1.0)
        })
        .collect();
    changes.sort_by(f64::total_cmp);
    if changes.is_empty() {
        return no_change(change);
    }
    let (lower, upper) = (
        percentile_of_sorted(&changes, 2.5),
        percentile_of_sorted(&changes, 97.5),
    );
    let p_value = mann_whitney_p(old, new);
    let verdict = if p_value >= thresholds.significance {
        Change::NoChange
    } else if lower > thresholds.noise {
        Change::Regressed
    } else if upper < -thresholds.noise {
        Change::Improved
    } else {
        Change::WithinNoise
    };
    Comparison {
        baseline: name.to_owned(),
        change,
        lower,
        upper,
        p_value,
        significance: thresholds.significance,
        verdict,
    }
}

/// The two-sided p-value of a Mann-Whitney U test of `old` against `new` (normal approximation
/// with the tie correction): how likely samples of one distribution rank at least this far
/// apart. 1 when every sample is equal.
fn mann_whitney_p(old: &[f64], new: &[f64]) -> f64 {
    let (n1, n2) = (old.len() as f64, new.len() as f64);
    let n = n1 + n2;
    let mut pooled: Vec<(f64, bool)> = old
        .iter()
        .map(|&value| (value, true))
        .chain(new.iter().map(|&value| (value, false)))
        .collect();
    pooled.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Average ranks over ties; the ties' sizes correct the variance.
    let (mut old_ranks, mut ties) = (0.0, 0.0);
    let mut at = 0;
    while at < pooled.len() {
        let end = at
            + pooled[at..]
                .iter()
                .take_while(|(value, _)| *value == pooled[at].0)
                .count();
        let rank = (at + end + 1) as f64 / 2.0;
        old_ranks += rank * pooled[at..end].iter().filter(|(_, old)| *old).count() as f64;
        let t = (end - at) as f64;
        ties += t * t * t - t;
        at = end;
    }
    let u = old_ranks - n1 * (n1 + 1.0) / 2.0;
    let mean = n1 * n2 / 2.0;
    let variance = n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)));
    if variance <= 0.0 {
        return 1.0;
    }
    // With the continuity correction.
    let z = ((u - mean).abs() - 0.5).max(0.0) / variance.sqrt();
    erfc(z / std::f64::consts::SQRT_2).min(1.0)
}

/// The complementary error function, for `x >= 0` (Numerical Recipes' `erfcc`, relative error
/// under 1.2e-7).
fn erfc(x: f64) -> f64 {
    let t = 1.0 / (1.0 + 0.5 * x);
    let poly = -x * x - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    t * poly.exp()
}

impl Comparison {
    /// Criterion's two lines: `change: [-1.20% +0.31% +1.75%] (p = 0.71 > 0.05)` and the
    /// verdict's sentence, each indented under the bench line.
    pub fn lines(&self) -> String {
        let relation = if self.p_value < self.significance {
            "<"
        } else {
            ">"
        };
        format!(
            "        change: [{:+.2}% {:+.2}% {:+.2}%] (p = {:.2} {relation} {:.2})\n        {}\n",
            self.lower * 100.0,
            self.change * 100.0,
            self.upper * 100.0,
            self.p_value,
            self.significance,
            self.verdict.sentence()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` samples around `center`, spread by a fixed pattern of +/- 5%.
    fn around(center: f64, count: usize) -> Vec<f64> {
        (0..count)
            .map(|i| center * (1.0 + 0.05 * ((i * 37 % 101) as f64 / 50.0 - 1.0)))
            .collect()
    }

    #[test]
    fn a_slowdown_beyond_the_noise_is_a_regression_and_a_speedup_an_improvement() {
        let thresholds = Thresholds::default();
        let slower = compare("main", &around(100.0, 50), &around(150.0, 50), thresholds);
        assert_eq!(slower.verdict, Change::Regressed, "{slower:?}");
        assert!(slower.lower > 0.4 && slower.upper < 0.6, "{slower:?}");
        assert!(slower.p_value < 0.01);
        let faster = compare("main", &around(150.0, 50), &around(100.0, 50), thresholds);
        assert_eq!(faster.verdict, Change::Improved, "{faster:?}");
        assert_eq!(faster.baseline, "main");
    }

    #[test]
    fn the_same_distribution_is_no_change_and_a_small_shift_is_noise() {
        let thresholds = Thresholds::default();
        let same = compare("main", &around(100.0, 40), &around(100.0, 60), thresholds);
        assert_eq!(same.verdict, Change::NoChange, "{same:?}");
        assert!(same.p_value > 0.05);
        // 3% slower, significant, but a 5% noise threshold covers it.
        let wide = Thresholds {
            noise: 0.05,
            ..thresholds
        };
        let shifted = compare("main", &around(100.0, 100), &around(103.0, 100), wide);
        assert_eq!(shifted.verdict, Change::WithinNoise, "{shifted:?}");
    }

    #[test]
    fn nothing_to_compare_is_no_change() {
        let thresholds = Thresholds::default();
        for (old, new) in [
            (vec![], vec![1.0]),
            (vec![1.0], vec![]),
            (vec![0.0, 0.0], vec![5.0]),
        ] {
            assert_eq!(
                compare("main", &old, &new, thresholds).verdict,
                Change::NoChange
            );
        }
    }

    #[test]
    fn the_rank_test_agrees_with_known_values() {
        // erfc(0) = 1, erfc(1) = 0.1572992, erfc(2) = 0.0046777.
        assert!((erfc(0.0) - 1.0).abs() < 1e-6);
        assert!((erfc(1.0) - 0.157_299_2).abs() < 1e-6);
        assert!((erfc(2.0) - 0.004_677_7).abs() < 1e-6);
        // Two separate groups of ten: U = 0, z = (50 - 0.5) / sqrt(175) = 3.742, p = 0.00018.
        let low: Vec<f64> = (0..10).map(f64::from).collect();
        let high: Vec<f64> = (10..20).map(f64::from).collect();
        assert!((mann_whitney_p(&low, &high) - 0.000_182).abs() < 1e-5);
        // Identical samples, and all ties: nothing to tell apart.
        assert!(mann_whitney_p(&low, &low) > 0.9);
        assert_eq!(mann_whitney_p(&[1.0, 1.0], &[1.0, 1.0, 1.0]), 1.0);
        // Constant but different: fully separated despite the ties.
        assert!(mann_whitney_p(&[1.0; 10], &[2.0; 10]) < 1e-4);
    }

    #[test]
    fn the_lines_follow_criterion() {
        let comparison = Comparison {
            baseline: "main".into(),
            change: 0.031,
            lower: -0.012,
            upper: 0.0755,
            p_value: 0.713,
            significance: 0.05,
            verdict: Change::NoChange,
        };
        assert_eq!(
            comparison.lines(),
            "        change: [-1.20% +3.10% +7.55%] (p = 0.71 > 0.05)\n        No change in performance detected.\n"
        );
    }

    #[test]
    fn saving_keeps_other_entries_and_reading_checks_the_file() {
        let dir = std::env::temp_dir().join(format!("gpurun-baseline-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(Baseline::read(&dir, "main").unwrap().is_none());
        assert!(Baseline::require(&dir, "main")
            .unwrap_err()
            .to_string()
            .contains("--save-baseline main"));
        let saved = |median: f64| Saved {
            samples: vec![median],
            median,
            iterations: 8,
            timer: "clock".into(),
        };
        Baseline::save(&dir, "main", "lib", &[("copy".into(), saved(1.0))]).unwrap();
        Baseline::save(&dir, "main", "lib", &[("empty".into(), saved(2.0))]).unwrap();
        Baseline::save(&dir, "main", "other", &[("copy".into(), saved(3.0))]).unwrap();
        Baseline::save(&dir, "main", "lib", &[("copy".into(), saved(4.0))]).unwrap();
        let baseline = Baseline::require(&dir, "main").unwrap();
        assert_eq!(baseline.get("lib", "copy"), Some(&saved(4.0)));
        assert_eq!(baseline.get("lib", "empty"), Some(&saved(2.0)));
        assert_eq!(baseline.get("other", "copy"), Some(&saved(3.0)));
        assert_eq!(baseline.get("other", "empty"), None);
        std::fs::write(path(&dir, "bad"), "{ \"version\": 99, \"suites\": {} }").unwrap();
        let error = Baseline::read(&dir, "bad").unwrap_err().to_string();
        assert!(error.contains("version is 99"), "{error}");
        std::fs::write(path(&dir, "bad"), "not json").unwrap();
        assert!(Baseline::read(&dir, "bad").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
