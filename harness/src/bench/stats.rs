//! What a benchmark's samples say: libtest's summary (the median and the spread of the samples
//! winsorized at 5% and 95%) with the robust spread criterion and baselines use (the median
//! absolute deviation) and the outliers Tukey's fences find.

/// The `pct` percentile of sorted, non-empty `sorted`, interpolated between neighbours as
/// libtest's `percentile_of_sorted` does.
pub(crate) fn percentile_of_sorted(sorted: &[f64], pct: f64) -> f64 {
    let Some(&last) = sorted.last() else {
        return 0.0;
    };
    if sorted.len() == 1 || pct >= 100.0 {
        return last;
    }
    let rank = (pct / 100.0) * (sorted.len() - 1) as f64;
    let low = rank.floor();
    let fraction = rank - low;
    let at = low as usize;
    sorted[at] + (sorted[at + 1] - sorted[at]) * fraction
}

/// The median of `values` (sorted here); 0 for none.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile_of_sorted(values, 50.0)
}

/// The statistics of one benchmark's samples, in nanoseconds per iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// The median sample: what libtest reports as `ns/iter`.
    pub median: f64,
    /// The largest less the smallest sample after clamping them to their 5th and 95th
    /// percentiles: libtest's `(+/- ...)`.
    pub deviation: f64,
    /// The median absolute deviation from the median, scaled by 1.4826 to estimate a standard
    /// deviation of normal samples (libtest's and criterion's `median_abs_dev`).
    pub median_abs_dev: f64,
    /// The smallest and largest sample, unclamped.
    pub min: f64,
    pub max: f64,
    /// Samples beyond Tukey's fences (1.5 times the interquartile range outside the
    /// quartiles), as criterion counts outliers.
    pub outliers: usize,
    /// How many samples there are.
    pub samples: usize,
}

impl Summary {
    /// The summary of `samples`; all zeros for none.
    pub fn of(samples: &[f64]) -> Summary {
        let mut sorted: Vec<f64> = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let Some((&min, &max)) = sorted.first().zip(sorted.last()) else {
            return Summary {
                median: 0.0,
                deviation: 0.0,
                median_abs_dev: 0.0,
                min: 0.0,
                max: 0.0,
                outliers: 0,
                samples: 0,
            };
        };
        let median = percentile_of_sorted(&sorted, 50.0);
        let (low, high) = (
            percentile_of_sorted(&sorted, 5.0),
            percentile_of_sorted(&sorted, 95.0),
        );
        let winsorized = |value: f64| value.clamp(low, high);
        let deviation = winsorized(max) - winsorized(min);
        let mut distances: Vec<f64> = sorted.iter().map(|s| (s - median).abs()).collect();
        let median_abs_dev = self::median(&mut distances) * 1.4826;
        let (q1, q3) = (
            percentile_of_sorted(&sorted, 25.0),
            percentile_of_sorted(&sorted, 75.0),
        );
        let iqr = q3 - q1;
        let (low_fence, high_fence) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
        let outliers = sorted
            .iter()
            .filter(|&&s| s < low_fence || s > high_fence)
            .count();
        Summary {
            median,
            deviation,
            median_abs_dev,
            min,
            max,
            outliers,
            samples: sorted.len(),
        }
    }

    /// The median's relative standard error, estimated from the median absolute deviation
    /// (`1.2533 * MAD / sqrt(n)` over the median): how settled the estimate is. Infinite while
    /// the median is not positive.
    pub fn relative_error(&self) -> f64 {
        if self.median <= 0.0 || self.samples == 0 {
            return f64::INFINITY;
        }
        1.2533 * self.median_abs_dev / (self.samples as f64).sqrt() / self.median
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_as_libtest() {
        let sorted = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_of_sorted(&sorted, 0.0), 1.0);
        assert_eq!(percentile_of_sorted(&sorted, 50.0), 2.5);
        assert_eq!(percentile_of_sorted(&sorted, 100.0), 4.0);
        assert!((percentile_of_sorted(&sorted, 5.0) - 1.15).abs() < 1e-12);
        assert_eq!(percentile_of_sorted(&[7.0], 30.0), 7.0);
        assert_eq!(percentile_of_sorted(&[], 30.0), 0.0);
    }

    #[test]
    fn the_spread_is_winsorized_and_outliers_counted() {
        // Twenty samples around 100 and one far out: the median ignores it, the spread is
        // clamped at the 95th percentile, and it is the one outlier.
        let mut samples: Vec<f64> = (0..20).map(|i| 100.0 + f64::from(i % 5)).collect();
        samples.push(1000.0);
        let summary = Summary::of(&samples);
        assert_eq!(summary.median, 102.0);
        assert_eq!((summary.min, summary.max), (100.0, 1000.0));
        assert!(summary.deviation < 10.0, "{summary:?}");
        assert_eq!(summary.outliers, 1);
        assert_eq!(summary.samples, 21);
        // |x - 102| over the samples: median 1, scaled.
        assert!((summary.median_abs_dev - 1.4826).abs() < 1e-9);
        assert!(summary.relative_error() < 0.01);
    }

    #[test]
    fn no_samples_and_zero_medians_have_no_settled_estimate() {
        let none = Summary::of(&[]);
        assert_eq!(none.samples, 0);
        assert!(none.relative_error().is_infinite());
        assert!(Summary::of(&[0.0, 0.0]).relative_error().is_infinite());
    }
}
