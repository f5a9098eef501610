//! Host-driven launches of a built `fixtures/host-app/kernels` image, checked against the CPU:
//! `launch_check IMAGE` loads the image on device 0 of its backend, launches `fill(out, n: usize,
//! value: u32)`, whose parameters `(ptr, u64, u32)` end with one narrower than the widest (the
//! parameter buffer must not be padded after it), and `saxpy(a: f32, x, y, n)`, and compares
//! both with what the CPU computes. `scripts/gpu-check.sh` builds it into its bundle for the
//! host-launch row, which runs where there is no Rust toolchain.
//!
//! Exit status 0 when both match, 1 when a launch fails or a result differs, 2 on bad usage.

use gpurun_test::{Error, Gpu, LaunchShape};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// Elements per launch: four blocks of 256 threads, the last one partly idle.
const ELEMENTS: usize = 1000;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, image] = args.as_slice() else {
        eprintln!("usage: launch_check IMAGE (a build of fixtures/host-app/kernels)");
        return ExitCode::from(2);
    };
    match check(Path::new(image)) {
        Ok(()) => {
            println!("launch_check: fill (ptr, u64, u32) and saxpy match the CPU");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("launch_check: {message}");
            ExitCode::FAILURE
        }
    }
}

fn check(image: &Path) -> Result<(), String> {
    let text = |error: Error| error.to_string();
    let gpu = Gpu::open(image, None, Duration::from_secs(30)).map_err(text)?;
    let shape = LaunchShape::blocks(ELEMENTS.div_ceil(256) as u32).threads(256);

    let value = 0x00c0_ffee_u32;
    let mut out = gpu.buffer::<u32>(ELEMENTS).map_err(text)?;
    gpu.launch("fill", shape, (&mut out, ELEMENTS, value))
        .map_err(text)?;
    let filled = out.to_vec().map_err(text)?;
    if let Some(at) = filled.iter().position(|&got| got != value) {
        return Err(format!(
            "fill: element {at} is {:#x}, not {value:#x}",
            filled[at]
        ));
    }

    let a = 2.0f32;
    let x: Vec<f32> = (0..ELEMENTS).map(|i| i as f32).collect();
    let y0: Vec<f32> = (0..ELEMENTS).map(|i| (ELEMENTS - i) as f32 * 0.5).collect();
    let xs = gpu.buffer_from(&x).map_err(text)?;
    let mut ys = gpu.buffer_from(&y0).map_err(text)?;
    gpu.launch("saxpy", shape, (a, &xs, &mut ys, ELEMENTS))
        .map_err(text)?;
    let got = ys.to_vec().map_err(text)?;
    // Integers and halves this small are exact in f32, on any device.
    let expected: Vec<f32> = x.iter().zip(&y0).map(|(x, y)| a * x + y).collect();
    if let Some(at) = (0..ELEMENTS).find(|&i| got[i] != expected[i]) {
        return Err(format!(
            "saxpy: element {at} is {}, not {}",
            got[at], expected[at]
        ));
    }
    Ok(())
}
