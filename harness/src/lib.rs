//! The test harness of cargo-gpurun: given the tests read from a GPU image and an [`Executor`]
//! that runs one test, it behaves like libtest. It takes libtest's command line
//! ([`HarnessArgs`], including the flags libtest-mimic rejects), filters and lists tests, runs
//! them on `--test-threads` threads, applies `#[should_panic(expected = ..)]`, shows each failed
//! test's captured device output with its panic message and location, and prints libtest's
//! pretty, terse or JSON output, plus JUnit XML and GitHub annotations.
//!
//! ```no_run
//! use std::sync::Arc;
//! use gpurun_harness::{run_to_exit_code, HarnessArgs, TestDesc};
//! # fn executor() -> Arc<dyn gpurun_harness::Executor> { unimplemented!() }
//! let args = HarnessArgs::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit());
//! let tests = vec![TestDesc::new("tests::adds")];
//! std::process::exit(run_to_exit_code(&args, tests, executor()));
//! ```
//!
//! See `README.md` for the known differences from libtest.
//!
//! Owns: libtest's command line, filtering, partitions, scheduling on test threads, verdicts,
//! benchmarks' measurement, statistics and baselines ([`mod@bench`]), and every reporter (pretty,
//! terse, JSON, JUnit, GitHub annotations), plus the one table of exit codes. Must not: know backends, workers or images: tests come in as [`TestDesc`]s and
//! run through an [`Executor`].

pub mod bench;
pub mod command_line;
pub mod exit_code;
pub mod filter;
pub mod outcome;
mod report;
pub mod schedule;
#[doc(hidden)]
pub mod testing;
pub mod time;
pub mod variants;

pub use command_line::{ColorChoice, Format, HarnessArgs, Partition, PartitionKind};
pub use exit_code::ExitCode;
pub use outcome::{
    Executor, LaunchEnd, PanicReport, ShouldPanic, TestDesc, TestEnd, TestRun, Verdict,
};
pub use report::junit::{JunitError, JunitFile};
pub use schedule::{run_to_exit_code, test_threads, Conclusion, HarnessError, Session};
