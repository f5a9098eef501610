//! `real-kernels-check IMAGE`: loads a build of `fixtures/real-kernels` on device 0 of its
//! backend (CUDA for PTX, HSA for an AMD code object, the host emulation for a host image),
//! launches each kernel on several sizes and compares with the CPU (`gpurun_e2e::real_kernels`,
//! the same checks as `tests/e2e/real_kernels.rs`). `scripts/gpu-check.sh` builds it into its
//! bundle, for a row that runs where there is no Rust toolchain.
//!
//! Prints one line per kernel; exit status 0 when every kernel matches, 1 when one does not (or
//! the image does not load), 2 on bad usage.

use gpurun_e2e::real_kernels;
use gpurun_test::Gpu;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, image] = args.as_slice() else {
        eprintln!("usage: real-kernels-check IMAGE (a build of fixtures/real-kernels)");
        return ExitCode::from(2);
    };
    let gpu = match Gpu::open(Path::new(image), None, Duration::from_secs(60)) {
        Ok(gpu) => gpu,
        Err(error) => {
            eprintln!("real-kernels-check: loading {image}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (lines, all_passed) = real_kernels::check_all(&gpu);
    for line in &lines {
        println!("real-kernels-check: {line}");
    }
    if all_passed {
        println!(
            "real-kernels-check: all {} kernels match the CPU",
            lines.len()
        );
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
