//! What a host crate's tests do to one GPU in one process, in the order that breaks a shared
//! context: `recovery_check IMAGE` (a build of `fixtures/host-app/kernels`) runs these steps on
//! device 0 of the image's backend and says of each whether it went as a user expects:
//!
//! 1. a device panic (`divide` by zero: "division by zero") comes back as a panic, not a
//!    fault: the stack holds the panic path;
//! 2. after every `Gpu` is dropped (the driver may reset the context), a new one still reports
//!    that panic as a panic: the stack size survived the reset;
//! 3. a fault (`fill` through the address 16) ends its launch with an error;
//! 4. a `Gpu` opened while the faulted one is still alive: on CUDA, whose driver refuses all
//!    work in a process after a fault, the open fails with `Error::EarlierFault` naming the fault;
//!    elsewhere it launches and computes correctly;
//! 5. the same for one opened after the faulted one is dropped.
//!
//! `scripts/gpu-check.sh` builds it into its bundle for the host-recovery row. Every step runs
//! even when an earlier one failed; exit status 0 when all went as expected, 1 otherwise, 2 on
//! bad usage.

use gpurun_test::{BackendKind, Error, Gpu, KernelArg, LaunchShape};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

const ELEMENTS: usize = 256;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, image] = args.as_slice() else {
        eprintln!("usage: recovery_check IMAGE (a build of fixtures/host-app/kernels)");
        return ExitCode::from(2);
    };
    let image = Path::new(image);
    let mut failed = 0;
    let mut step = |name: &str, result: Result<String, String>| match result {
        Ok(detail) => println!("recovery_check: {name} ok ({detail})"),
        Err(detail) => {
            failed += 1;
            println!("recovery_check: {name} FAILED: {detail}");
        }
    };

    step("panic", open(image).and_then(|gpu| expect_panic(&gpu)));
    step(
        "panic-after-reset",
        open(image).and_then(|gpu| expect_panic(&gpu)),
    );
    match open(image) {
        Ok(faulted) => {
            let backend = faulted.backend();
            step("fault", expect_fault(&faulted));
            step("open-beside-faulted", after_fault(image, backend));
            drop(faulted);
            step("open-after-faulted", after_fault(image, backend));
        }
        Err(error) => step("fault", Err(error)),
    }
    if failed == 0 {
        println!("recovery_check: all 5 steps as expected");
        ExitCode::SUCCESS
    } else {
        println!("recovery_check: {failed} steps not as expected");
        ExitCode::FAILURE
    }
}

fn open(image: &Path) -> Result<Gpu, String> {
    Gpu::open(image, None, Duration::from_secs(20)).map_err(|error| format!("open: {error}"))
}

/// `divide` with a zero denominator on thread 3: its panic, not a fault.
fn expect_panic(gpu: &Gpu) -> Result<String, String> {
    let num = gpu.buffer_from(&[7u32; 8]).map_err(|e| e.to_string())?;
    let den = gpu
        .buffer_from(&[1u32, 1, 1, 0, 1, 1, 1, 1])
        .map_err(|e| e.to_string())?;
    let mut out = gpu.buffer::<u32>(8).map_err(|e| e.to_string())?;
    match gpu.launch(
        "divide",
        LaunchShape::SINGLE.threads(8),
        (&num, &den, &mut out, 8usize),
    ) {
        Err(Error::Panicked(panic)) if panic.report.message.contains("division by zero") => {
            Ok(format!("thread {:?}", panic.report.thread))
        }
        Err(other) => Err(other.to_string()),
        Ok(_) => Err("the launch completed without a panic".into()),
    }
}

/// `fill` through the address 16: a fault that ends the launch.
fn expect_fault(gpu: &Gpu) -> Result<String, String> {
    let launched = gpu.launch(
        "fill",
        LaunchShape::SINGLE.threads(32),
        (KernelArg::U64(16), 32usize, 1u32),
    );
    match launched {
        Err(error @ Error::Ended { .. }) => Ok(error.to_string()),
        Err(other) => Err(format!("not a fault: {other}")),
        Ok(_) => Err("the launch completed".into()),
    }
}

/// A `Gpu` opened after a fault on `backend`: refused with the earlier fault on CUDA, computing
/// correctly elsewhere.
fn after_fault(image: &Path, backend: BackendKind) -> Result<String, String> {
    let opened = Gpu::open(image, None, Duration::from_secs(20));
    match (backend, opened) {
        (BackendKind::Cuda, Err(Error::EarlierFault { kernel, .. })) => {
            Ok(format!("refused: `{kernel}` faulted earlier"))
        }
        (BackendKind::Cuda, Ok(_)) => Err("opened on CUDA after a fault".into()),
        (_, Ok(gpu)) => expect_fill(&gpu),
        (_, Err(error)) => Err(format!("open: {error}")),
    }
}

/// `fill` on a real buffer, read back.
fn expect_fill(gpu: &Gpu) -> Result<String, String> {
    let mut out = gpu.buffer::<u32>(ELEMENTS).map_err(|e| e.to_string())?;
    gpu.launch(
        "fill",
        LaunchShape::SINGLE.threads(ELEMENTS as u32),
        (&mut out, ELEMENTS, 0x5eed_u32),
    )
    .map_err(|e| e.to_string())?;
    let got = out.to_vec().map_err(|e| e.to_string())?;
    match got.iter().position(|&value| value != 0x5eed) {
        None => Ok(format!("{ELEMENTS} elements")),
        Some(at) => Err(format!("element {at} is {:#x}", got[at])),
    }
}
