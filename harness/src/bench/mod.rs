//! Benchmarks (`#[gpurun::bench]`, run with `--bench`): how the harness times one on the
//! device, what its samples say, and how that is printed, in libtest's formats.
//!
//! An [`Executor`](crate::Executor) gives the harness one benchmark's launches
//! ([`BenchLaunches`]): a launch of `n` iterations and the device's time of it. The harness
//! decides everything else here, the same for every backend:
//!
//! 1. **Floor.** Launches of no iterations time what every launch costs (starting it, the
//!    timer's own overhead, the benchmark's set-up before `iter`): the floor is the median of
//!    the most recent of them.
//! 2. **Calibration and warm-up.** Starting from one iteration, the count `n` grows until a
//!    launch of `n` iterations takes at least [`BenchOptions::launch_target`] longer than the
//!    floor (twice in a row); launches of that size then continue until the warm-up time has
//!    passed. Short launches suit a busy host too: a longer one is more likely to be
//!    preempted in the middle.
//! 3. **Samples.** Each sample is the quickest of three launches of `n` iterations (one, where
//!    a launch of a single iteration takes over 10 ms), less the floor, over `n`: the time per
//!    iteration. The quickest, since whatever else happens on the
//!    device or the host (another process's kernels, the scheduler preempting an emulated
//!    thread) only ever adds time to a launch: on a busy 2-core host a lone launch was delayed
//!    about half the time, three in a row rarely, which kept the median of an unchanged
//!    benchmark within a few percent from run to run where single launches moved it threefold.
//!    A launch of none is timed beside each sample (before or after it in turn), so the floor
//!    follows a device that warms up or a machine whose load changes.
//! 4. **When to stop.** Samples are taken until the median is settled (its relative standard
//!    error, from the median absolute deviation, under [`BenchOptions::settled`]) with at least
//!    [`MIN_SAMPLES`], or the measurement time is spent, or [`MAX_SAMPLES`] are taken.
//!
//! The report is libtest's: the median, `(+/- spread)` with the spread as libtest computes it
//! (the largest less the smallest sample after clamping them to their 5th and 95th
//! percentiles), and `= N MB/s` for a benchmark that declares its bytes (`= N Melem/s` for
//! elements, which libtest has no word for); the JSON event adds the sample count, the
//! iterations per launch, the median absolute deviation, the outliers and what timed it.

pub mod baseline;
pub mod stats;

use std::time::{Duration, Instant};

pub use gpurun_abi::Throughput;

pub use stats::Summary;

/// Fewest samples before the estimate may count as settled.
pub const MIN_SAMPLES: usize = 10;
/// Most samples taken (criterion's default sample size).
pub const MAX_SAMPLES: usize = 100;
/// Most iterations in one launch.
pub const MAX_ITERATIONS: u64 = 1 << 40;

/// How long a benchmark is measured (`--warm-up-time`, `--measurement-time`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchOptions {
    /// Launches before the samples, counting calibration (criterion's `--warm-up-time`).
    pub warm_up: Duration,
    /// The time budget for the samples (criterion's `--measurement-time`).
    pub measurement: Duration,
    /// How much longer than a launch of no iterations a timed launch must take.
    pub launch_target: Duration,
    /// Stop sampling once the median's relative standard error is below this.
    pub settled: f64,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            warm_up: Duration::from_millis(300),
            measurement: Duration::from_secs(2),
            // libtest aims each sample at 1 ms.
            launch_target: Duration::from_millis(1),
            settled: 0.005,
        }
    }
}

/// A benchmark launch that did not complete cleanly: the executor says how in its
/// [`TestRun`](crate::TestRun) (a panic, a fault, a timeout), and the harness stops measuring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchFailed;

/// One benchmark's launches, held by the executor for as long as the harness measures it (on
/// one device, in one module).
pub trait BenchLaunches {
    /// Launches the benchmark's kernel with `iterations` and waits for it: the device's time of
    /// the launch, `Ok(None)` when the backend measured none.
    fn launch(&mut self, iterations: u64) -> Result<Option<Duration>, LaunchFailed>;

    /// What times the launches, for the report (`CUDA events`, `host emulation thread CPU time`).
    fn timer(&self) -> String;
}

/// Why a benchmark has no measurement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmeasured {
    /// A launch failed; the executor's run says how.
    Failed,
    /// The backend does not time launches.
    NoDeviceTime,
}

/// What measuring one benchmark found.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Nanoseconds per iteration, one per sample.
    pub samples: Vec<f64>,
    /// Their statistics.
    pub summary: Summary,
    /// Iterations in each timed launch.
    pub iterations: u64,
    /// What timed the launches ([`BenchLaunches::timer`]).
    pub timer: String,
}

/// A measured benchmark as the reporters see it.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    /// What the measurement found.
    pub measured: Measured,
    /// How it compares with the baseline (`--baseline`), where that has the benchmark.
    pub comparison: Option<baseline::Comparison>,
}

/// Times one benchmark through `launches` as [the module](self) describes.
pub fn measure(
    launches: &mut dyn BenchLaunches,
    options: &BenchOptions,
) -> Result<Measured, Unmeasured> {
    let started = Instant::now();
    let mut time = |iterations: u64| -> Result<f64, Unmeasured> {
        match launches.launch(iterations) {
            Ok(Some(time)) => Ok(time.as_secs_f64() * 1e9),
            Ok(None) => Err(Unmeasured::NoDeviceTime),
            Err(LaunchFailed) => Err(Unmeasured::Failed),
        }
    };
    let mut floor = Floor::default();
    for _ in 0..FLOOR_START {
        floor.add(time(0)?);
    }
    // Calibration: grow the count until a launch of it stands out from the floor by the
    // target. The quickest of three launches of each count is taken (delays only ever add
    // time), and a count must stand out twice in a row: one stroke of bad luck, all three
    // launches delayed, must not settle on a count too small.
    let mut iterations = 1u64;
    let mut stood_out = false;
    let mut per_sample = LAUNCHES_PER_SAMPLE;
    loop {
        let timed = time(iterations)?
            .min(time(iterations)?)
            .min(time(iterations)?);
        floor.add(time(0)?);
        let target = options.launch_target.as_secs_f64() * 1e9;
        let difference = timed - floor.level();
        // A launch this long is delayed by little relative to itself, and three of them to a
        // sample would make a slow benchmark three times slower to measure.
        if timed > LONG_LAUNCH_NS {
            per_sample = 1;
        }
        if iterations >= MAX_ITERATIONS {
            break;
        }
        if difference >= target {
            if stood_out {
                break;
            }
            stood_out = true;
            continue;
        }
        stood_out = false;
        let factor = if difference > 0.0 {
            (1.2 * target / difference).ceil().clamp(2.0, 100.0)
        } else {
            10.0
        };
        iterations = iterations.saturating_mul(factor as u64).min(MAX_ITERATIONS);
    }
    while started.elapsed() < options.warm_up {
        time(iterations)?;
        floor.add(time(0)?);
    }
    let sampling = Instant::now();
    let mut samples = Vec::new();
    loop {
        // A launch of none beside each sample, before or after it in turn, keeps the floor
        // current as the device warms up or the machine's load changes.
        if samples.len() % 2 == 1 {
            floor.add(time(0)?);
        }
        let mut timed = f64::INFINITY;
        for _ in 0..per_sample {
            timed = timed.min(time(iterations)?);
        }
        if samples.len() % 2 == 0 {
            floor.add(time(0)?);
        }
        samples.push((timed - floor.level()) / iterations as f64);
        if samples.len() >= MAX_SAMPLES {
            break;
        }
        if samples.len() >= MIN_SAMPLES
            && (sampling.elapsed() >= options.measurement
                || Summary::of(&samples).relative_error() < options.settled)
        {
            break;
        }
    }
    Ok(Measured {
        summary: Summary::of(&samples),
        samples,
        iterations,
        timer: launches.timer(),
    })
}

/// Timed launches per sample, of which the quickest counts...
const LAUNCHES_PER_SAMPLE: usize = 3;
/// ...unless one takes longer than this (10 ms): then one.
const LONG_LAUNCH_NS: f64 = 1e7;
/// Launches of no iterations timed before calibration starts.
const FLOOR_START: usize = 5;
/// The most recent launches of no iterations the floor is taken from.
const FLOOR_WINDOW: usize = 15;
/// The device time of a launch of no iterations (what every launch costs), from the most
/// recent ones: their median, which a delayed launch does not move.
#[derive(Default)]
struct Floor {
    recent: Vec<f64>,
}

impl Floor {
    fn add(&mut self, time: f64) {
        if self.recent.len() == FLOOR_WINDOW {
            self.recent.remove(0);
        }
        self.recent.push(time);
    }

    fn level(&self) -> f64 {
        stats::median(&mut self.recent.clone())
    }
}

/// libtest's bench line after `bench: `: `   1,234.56 ns/iter (+/- 7.89)`, then the rate a
/// declared throughput gives (`= 512 MB/s`, bytes over nanoseconds times 1000, as libtest
/// computes it; elements likewise as `Melem/s`).
pub fn bench_line(summary: &Summary, throughput: Option<Throughput>) -> String {
    let mut line = format!(
        "{:>14} ns/iter (+/- {})",
        thousands(summary.median),
        thousands(summary.deviation)
    );
    match rate(summary, throughput) {
        Some((rate, Unit::MegaBytes)) => line.push_str(&format!(" = {rate} MB/s")),
        Some((rate, Unit::MegaElements)) => line.push_str(&format!(" = {rate} Melem/s")),
        None => {}
    }
    line
}

/// The unit of a [`rate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Millions of bytes per second (libtest's `MB/s`).
    MegaBytes,
    /// Millions of elements per second.
    MegaElements,
}

/// What one iteration's throughput comes to per second (in millions), as libtest computes MB/s
/// (`bytes * 1000 / ns`, in integers, with at least 1 ns); `None` without a throughput or
/// when it rounds to 0, which libtest does not show.
pub fn rate(summary: &Summary, throughput: Option<Throughput>) -> Option<(u64, Unit)> {
    let ns = (summary.median.max(0.0) as u64).max(1);
    let (amount, unit) = match throughput? {
        Throughput::Bytes(bytes) => (bytes, Unit::MegaBytes),
        Throughput::Elements(elements) => (elements, Unit::MegaElements),
    };
    let rate = amount.saturating_mul(1000) / ns;
    (rate != 0).then_some((rate, unit))
}

/// A number of nanoseconds as libtest's `fmt_thousands_sep` writes it: thousands separated by
/// commas, two decimals.
pub fn thousands(value: f64) -> String {
    let mut rest = value;
    let mut out = String::new();
    let mut started = false;
    for power in [9, 6, 3, 0] {
        let base = 10_u64.pow(power) as f64;
        if power == 0 || started || rest / base >= 1.0 {
            match (power, started) {
                (0, true) => out.push_str(&format!("{:06.2}", rest / base)),
                (0, false) => out.push_str(&format!("{:.2}", rest / base)),
                (_, true) => out.push_str(&format!("{:03}", (rest / base) as u64)),
                _ => out.push_str(&format!("{}", (rest / base) as u64)),
            }
            if power != 0 {
                out.push(',');
            }
            started = true;
        }
        rest %= base;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_as_libtest_writes_them() {
        assert_eq!(thousands(0.0), "0.00");
        assert_eq!(thousands(0.25), "0.25");
        assert_eq!(thousands(999.5), "999.50");
        assert_eq!(thousands(1_234.5), "1,234.50");
        assert_eq!(thousands(1_000_005.0), "1,000,005.00");
        assert_eq!(thousands(12_345_678_901.0), "12,345,678,901.00");
    }

    fn summary(median: f64, deviation: f64) -> Summary {
        Summary {
            median,
            deviation,
            ..Summary::of(&[median])
        }
    }

    #[test]
    fn the_bench_line_is_libtests_with_the_rate() {
        assert_eq!(
            bench_line(&summary(1_234.5, 67.0), None),
            "      1,234.50 ns/iter (+/- 67.00)"
        );
        // 4096 bytes in 1000 ns: 4096 MB/s, libtest's integer arithmetic.
        assert_eq!(
            bench_line(&summary(1_000.0, 0.0), Some(Throughput::Bytes(4096))),
            "      1,000.00 ns/iter (+/- 0.00) = 4096 MB/s"
        );
        assert_eq!(
            bench_line(&summary(2.0, 0.0), Some(Throughput::Elements(3))),
            "          2.00 ns/iter (+/- 0.00) = 1500 Melem/s"
        );
        // Under a nanosecond counts as one; a rate that rounds to nothing is not shown.
        assert_eq!(
            rate(&summary(0.2, 0.0), Some(Throughput::Bytes(5))),
            Some((5000, Unit::MegaBytes))
        );
        assert_eq!(
            rate(&summary(5_000_000.0, 0.0), Some(Throughput::Bytes(1))),
            None
        );
    }

    /// Launches whose device time is `floor + per_iteration * n`, counted.
    struct Linear {
        floor: f64,
        per_iteration: f64,
        counts: Vec<u64>,
        fail_after: Option<usize>,
    }

    impl BenchLaunches for Linear {
        fn launch(&mut self, iterations: u64) -> Result<Option<Duration>, LaunchFailed> {
            if self.fail_after == Some(self.counts.len()) {
                return Err(LaunchFailed);
            }
            self.counts.push(iterations);
            let ns = self.floor + self.per_iteration * iterations as f64;
            Ok(Some(Duration::from_nanos(ns as u64)))
        }

        fn timer(&self) -> String {
            "a line".into()
        }
    }

    fn linear(per_iteration: f64) -> Linear {
        Linear {
            floor: 5_000.0,
            per_iteration,
            counts: Vec::new(),
            fail_after: None,
        }
    }

    fn quick() -> BenchOptions {
        BenchOptions {
            warm_up: Duration::ZERO,
            measurement: Duration::from_millis(50),
            ..BenchOptions::default()
        }
    }

    #[test]
    fn calibration_grows_the_count_until_a_launch_stands_out_and_the_floor_cancels() {
        let mut launches = linear(10.0);
        let measured = measure(&mut launches, &quick()).unwrap();
        // 1 ms over the floor needs 100,000 iterations of 10 ns.
        assert!(measured.iterations >= 100_000, "{}", measured.iterations);
        assert!(
            (measured.summary.median - 10.0).abs() < 0.01,
            "{measured:?}"
        );
        assert_eq!(measured.timer, "a line");
        // A steady line settles at once: the fewest samples, each beside a launch of none.
        assert_eq!(measured.samples.len(), MIN_SAMPLES);
        let zeros = launches.counts.iter().filter(|&&n| n == 0).count();
        assert!(zeros >= FLOOR_START + MIN_SAMPLES, "{:?}", launches.counts);
        // Iterations that take longer than the target alone: one per launch.
        let measured = measure(&mut linear(2e6), &quick()).unwrap();
        assert_eq!(measured.iterations, 1);
    }

    /// Launches whose time is `per_iteration * n` over a floor, every other one delayed by
    /// `delay` ns, as a busy host's scheduler delays them.
    struct Delayed {
        per_iteration: f64,
        delay: f64,
        launches: u64,
    }

    impl BenchLaunches for Delayed {
        fn launch(&mut self, iterations: u64) -> Result<Option<Duration>, LaunchFailed> {
            self.launches += 1;
            let delay = if self.launches.is_multiple_of(2) {
                self.delay
            } else {
                0.0
            };
            let ns = 5_000.0 + delay + self.per_iteration * iterations as f64;
            Ok(Some(Duration::from_nanos(ns as u64)))
        }

        fn timer(&self) -> String {
            "a busy host".into()
        }
    }

    #[test]
    fn delays_of_every_other_launch_do_not_move_the_median() {
        let mut launches = Delayed {
            per_iteration: 10.0,
            delay: 3e6,
            launches: 0,
        };
        let measured = measure(&mut launches, &quick()).unwrap();
        assert!((measured.summary.median - 10.0).abs() < 0.5, "{measured:?}");
    }

    #[test]
    fn a_long_launch_is_one_sample() {
        let mut launches = linear(2e7);
        let measured = measure(&mut launches, &quick()).unwrap();
        assert_eq!(measured.iterations, 1);
        // Calibration's two rounds of three and a floor, then a launch and a floor a sample.
        let timed = launches.counts.iter().filter(|&&n| n == 1).count();
        assert_eq!(timed, 6 + measured.samples.len(), "{:?}", launches.counts);
    }

    #[test]
    fn nothing_to_measure_stops_at_the_most_iterations() {
        let measured = measure(&mut linear(0.0), &quick()).unwrap();
        assert_eq!(measured.iterations, MAX_ITERATIONS);
        assert_eq!(measured.summary.median, 0.0);
        // Never settled (a zero median): the measurement time decides.
        assert!(measured.samples.len() >= MIN_SAMPLES);
    }

    #[test]
    fn a_failed_launch_or_no_device_time_stops_the_measurement() {
        let mut failing = Linear {
            fail_after: Some(3),
            ..linear(10.0)
        };
        assert_eq!(measure(&mut failing, &quick()), Err(Unmeasured::Failed));
        struct Untimed;
        impl BenchLaunches for Untimed {
            fn launch(&mut self, _: u64) -> Result<Option<Duration>, LaunchFailed> {
                Ok(None)
            }
            fn timer(&self) -> String {
                String::new()
            }
        }
        assert_eq!(
            measure(&mut Untimed, &quick()),
            Err(Unmeasured::NoDeviceTime)
        );
    }
}
