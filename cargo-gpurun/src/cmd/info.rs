//! `cargo gpurun info`: every backend's devices, or why it has none.

use std::process::ExitCode;

use clap::Args;
use gpurun_hal::{select, BackendKind};

/// `cargo gpurun info`.
#[derive(Debug, Args)]
pub struct InfoArgs {}

pub fn run(_args: &InfoArgs) -> anyhow::Result<ExitCode> {
    let mut gpus = 0;
    for kind in [BackendKind::Cuda, BackendKind::Hsa, BackendKind::Host] {
        match select::backend(kind).devices() {
            Ok(devices) if devices.is_empty() => println!("{kind:<5} no devices"),
            Ok(devices) => {
                for device in devices {
                    if kind != BackendKind::Host {
                        gpus += 1;
                    }
                    let memory = device
                        .memory_bytes
                        .map(|bytes| format!(", {} MiB", bytes >> 20))
                        .unwrap_or_default();
                    let driver = device
                        .driver
                        .map(|driver| format!(", driver {driver}"))
                        .unwrap_or_default();
                    println!(
                        "{kind:<5} {}: {} ({}, {} lanes{memory}{driver})",
                        device.ordinal, device.name, device.arch, device.lane_size
                    );
                }
            }
            Err(error) => println!("{kind:<5} unavailable: {error}"),
        }
    }
    if gpus == 0 {
        eprintln!("error: no GPU found; `cargo gpurun test` will use the host emulation backend");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
