//! `cargo bench` for host-driven launches: a benchmark is a libtest-mimic trial whose body
//! times one kernel launch after another on the device ([`Gpu::launch_timed`](crate::Gpu::launch_timed)),
//! measured and reported as `cargo gpurun bench` measures device benchmarks
//! (`gpurun_harness::bench`): launches are counted out until they add up to a millisecond of
//! device time, each sample is the quickest of three such runs, per launch, and samples are
//! taken until the median settles or two seconds pass. Without `--bench` (`cargo test`) each
//! benchmark launches once, as libtest runs a benchmark as a test.
//!
//! ```no_run
//! // benches/gpu.rs, with `[[bench]] name = "gpu", harness = false` in Cargo.toml
//! use gpurun_test::{bench, DeviceCrate, LaunchShape};
//!
//! fn main() -> std::process::ExitCode {
//!     let saxpy = bench::trial("saxpy", |b| {
//!         let gpu = DeviceCrate::new("kernels").load()?;
//!         let n = 1 << 20;
//!         let x = gpu.buffer_from(&vec![1.0f32; n])?;
//!         let mut y = gpu.buffer::<f32>(n)?;
//!         let shape = LaunchShape::blocks(n.div_ceil(256) as u32).threads(256);
//!         b.bytes(3 * 4 * n as u64); // read x and y, write y
//!         b.iter(|| gpu.launch_timed("saxpy", shape, (2.0f32, &x, &mut y, n)))
//!     });
//!     let arguments = libtest_mimic::Arguments::from_args();
//!     libtest_mimic::run(&arguments, vec![saxpy]).exit_code()
//! }
//! ```
//!
//! The report is libtest-mimic's bench line (`N ns/iter (+/- M)`, in whole nanoseconds, with
//! no rate: libtest-mimic prints none); [`Bencher::measured`] has the full measurement.

use std::time::Duration;

use gpurun_harness::bench::{
    measure, rate, BenchLaunches, BenchOptions, LaunchFailed, Measured, Throughput, Unit,
    Unmeasured,
};
use libtest_mimic::{Failed, Measurement, Trial};

use crate::{Error, Timed};

/// A benchmark's handle: [`Bencher::iter`] times the launches.
#[derive(Debug)]
pub struct Bencher {
    /// `cargo test` rather than `cargo bench`: launch once, measure nothing.
    test_mode: bool,
    options: BenchOptions,
    throughput: Option<Throughput>,
    measured: Option<Measured>,
}

impl Bencher {
    /// A bencher for `cargo bench` (`test_mode` false) or `cargo test` (true).
    pub fn new(test_mode: bool) -> Bencher {
        Bencher {
            test_mode,
            options: BenchOptions::default(),
            throughput: None,
            measured: None,
        }
    }

    /// Sets how long each benchmark warms up and is measured (defaults: 0.3 s and 2 s).
    pub fn times(&mut self, warm_up: Duration, measurement: Duration) -> &mut Bencher {
        self.options.warm_up = warm_up;
        self.options.measurement = measurement;
        self
    }

    /// Declares the bytes one launch reads and writes, for [`Bencher::rate`].
    pub fn bytes(&mut self, bytes: u64) -> &mut Bencher {
        self.throughput = Some(Throughput::Bytes(bytes));
        self
    }

    /// Declares the elements one launch processes, for [`Bencher::rate`].
    pub fn elements(&mut self, elements: u64) -> &mut Bencher {
        self.throughput = Some(Throughput::Elements(elements));
        self
    }

    /// Times `launch`, one launch of a kernel ([`Gpu::launch_timed`](crate::Gpu::launch_timed)),
    /// called as many times as the measurement needs (once under `cargo test`). The first
    /// error of a launch stops it and is returned.
    pub fn iter(&mut self, mut launch: impl FnMut() -> Result<Timed, Error>) -> Result<(), Error> {
        if self.test_mode {
            return launch().map(drop);
        }
        let mut launches = Launches {
            launch: &mut launch,
            error: None,
        };
        match measure(&mut launches, &self.options) {
            Ok(measured) => {
                self.measured = Some(measured);
                Ok(())
            }
            // Only a launch's error stops these launches; it is kept.
            Err(Unmeasured::Failed | Unmeasured::NoDeviceTime) => {
                Err(launches.error.take().unwrap_or_else(|| {
                    Error::Devices("the measurement stopped without a launch's error".into())
                }))
            }
        }
    }

    /// What [`Bencher::iter`] measured (nanoseconds per launch), under `cargo bench`.
    pub fn measured(&self) -> Option<&Measured> {
        self.measured.as_ref()
    }

    /// The declared throughput per second, in millions (`MB/s` or `Melem/s`), as libtest
    /// computes MB/s from the median.
    pub fn rate(&self) -> Option<(u64, Unit)> {
        rate(&self.measured.as_ref()?.summary, self.throughput)
    }
}

/// Launches as the harness's measurement counts them: `n` launches in a row, their device
/// times added up; none take nothing (a launch's device time holds no host overhead to
/// subtract).
struct Launches<'f> {
    launch: &'f mut dyn FnMut() -> Result<Timed, Error>,
    /// The error that stopped the measurement.
    error: Option<Error>,
}

impl BenchLaunches for Launches<'_> {
    fn launch(&mut self, iterations: u64) -> Result<Option<Duration>, LaunchFailed> {
        let mut total = Duration::ZERO;
        for _ in 0..iterations {
            match (self.launch)() {
                Ok(timed) => total += timed.device_time,
                Err(error) => {
                    self.error = Some(error);
                    return Err(LaunchFailed);
                }
            }
        }
        Ok(Some(total))
    }

    fn timer(&self) -> String {
        "device time of each launch".to_owned()
    }
}

/// A `cargo bench` benchmark named `name`: `body` sets up (loads the crate, fills buffers) and
/// calls [`Bencher::iter`] with the launch to time; under `cargo test` it launches once. An
/// error fails the trial with its message.
pub fn trial(
    name: impl Into<String>,
    body: impl FnOnce(&mut Bencher) -> Result<(), Error> + Send + 'static,
) -> Trial {
    Trial::bench(name, move |test_mode| {
        let mut bencher = Bencher::new(test_mode);
        body(&mut bencher).map_err(|error| Failed::from(error.to_string()))?;
        Ok(bencher.measured.as_ref().map(measurement))
    })
}

/// libtest-mimic's measurement of `measured`: the median and libtest's spread, in whole
/// nanoseconds.
pub(crate) fn measurement(measured: &Measured) -> Measurement {
    Measurement {
        avg: measured.summary.median.max(0.0).round() as u64,
        variance: measured.summary.deviation.max(0.0).round() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Output;

    fn timed(ns: u64) -> Result<Timed, Error> {
        Ok(Timed {
            output: Output::default(),
            device_time: Duration::from_nanos(ns),
        })
    }

    #[test]
    fn launches_are_counted_out_and_measured_per_launch() {
        let mut bencher = Bencher::new(false);
        bencher
            .times(Duration::ZERO, Duration::from_millis(20))
            .bytes(2_000);
        let mut calls = 0u64;
        bencher
            .iter(|| {
                calls += 1;
                timed(1_000)
            })
            .unwrap();
        let measured = bencher.measured().expect("measured");
        assert_eq!(measured.summary.median, 1_000.0);
        assert!(measured.iterations >= 1_000, "{}", measured.iterations);
        assert!(calls > measured.iterations);
        assert_eq!(bencher.rate(), Some((2_000, Unit::MegaBytes)));
        assert_eq!(
            measurement(measured),
            Measurement {
                avg: 1_000,
                variance: 0
            }
        );
    }

    #[test]
    fn cargo_test_launches_once_and_an_error_stops_the_measurement() {
        let mut once = Bencher::new(true);
        let mut calls = 0;
        once.iter(|| {
            calls += 1;
            timed(5)
        })
        .unwrap();
        assert_eq!(calls, 1);
        assert!(once.measured().is_none());
        let mut failing = Bencher::new(false);
        let mut calls = 0;
        let error = failing
            .iter(|| {
                calls += 1;
                match calls {
                    1..=3 => timed(5),
                    _ => Err(Error::Devices("gone".into())),
                }
            })
            .unwrap_err();
        assert_eq!(error.to_string(), "gone");
        assert_eq!(calls, 4);
    }
}
