//! `cargo gpurun bench`: build the device crates in release mode and measure their
//! `#[gpurun::bench]`es on the device, as `cargo bench` does for libtest's benchmarks (the
//! harness gets `--bench`; baselines live in the target directory's `gpurun-bench/`).

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args;

use super::device::DeviceArgs;
use super::test::{run_suites, BenchRun, TestArgs};
use crate::cli::CargoArgs;

/// `cargo gpurun bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub cargo: CargoArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Build the benchmarks but do not run them.
    #[arg(long)]
    pub no_run: bool,
    /// Cold runs: flush the GPU's L2 cache before every timed launch (CUDA; no effect on the
    /// host emulation and HSA, which say so).
    #[arg(long)]
    pub flush_l2: bool,
    /// Arguments for the harness after `--`: filters, --exact, --test (run the tests too),
    /// --save-baseline NAME, --baseline NAME, --noise-threshold, --significance-level,
    /// --warm-up-time, --measurement-time, --format json, ...
    #[arg(last = true, allow_hyphen_values = true)]
    pub harness_args: Vec<OsString>,
}

pub fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    if args.device.sanitize.is_some() {
        bail!(
            "benchmarks are not measured under compute-sanitizer: run `cargo gpurun test \
             --sanitize` for its findings"
        );
    }
    // The bench profile is release's, as with `cargo bench`; on the host emulation the memory
    // checks would time the checker, not the kernel (`cargo gpurun test` checks the same code).
    let cargo = CargoArgs {
        release: true,
        emulation_checks: false,
        ..args.cargo.clone()
    };
    let mut harness_args: Vec<OsString> = vec!["--bench".into()];
    harness_args.extend(args.harness_args.iter().cloned());
    let test = TestArgs {
        cargo,
        device: args.device.clone(),
        no_run: args.no_run,
        coverage: false,
        harness_args,
    };
    run_suites(
        &test,
        Some(BenchRun {
            flush_l2: args.flush_l2,
        }),
    )
}
