//! `sum-into-check LANE_SIZE`: builds and loads `fixtures/wrong-kernels` on the host emulation
//! with warps of LANE_SIZE (through `gpurun-test`, as a host crate would) and launches its
//! `sum_into` kernel (blocks racing for one word of a buffer) and
//! `sum_into_fixed`, printing how each ended: for `tests/e2e/strict.rs`, which runs it once per
//! emulation seed (`GPURUN_EMULATION_SEED`, read when the image loads).
//!
//! Prints `sum_into: ...` and `sum_into_fixed: ...` lines; exit status 0 when both ran as
//! expected (the first failing, the second summing right), 1 otherwise, 2 on bad usage.

use gpurun_test::LaunchShape;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, lane_size] = args.as_slice() else {
        eprintln!("usage: sum-into-check LANE_SIZE");
        return ExitCode::from(2);
    };
    let Ok(lane_size) = lane_size.parse::<u32>() else {
        eprintln!("sum-into-check: LANE_SIZE is a number, not `{lane_size}`");
        return ExitCode::from(2);
    };
    let fixture = gpurun_e2e::fixtures_dir().join("wrong-kernels");
    let loaded = gpurun_test::DeviceCrate::new(&fixture)
        .target("host")
        .lane_size(lane_size)
        .load();
    let gpu = match loaded {
        Ok(gpu) => gpu,
        Err(error) => {
            eprintln!("sum-into-check: loading {}: {error}", fixture.display());
            return ExitCode::FAILURE;
        }
    };
    let values: Vec<u32> = (1..=1000).collect();
    let n = values.len();
    let shape = LaunchShape::blocks(8).threads(128);
    let mut expected = true;
    for kernel in ["sum_into", "sum_into_fixed"] {
        let outcome = gpu.buffer_from(&values).and_then(|input| {
            let mut total = gpu.buffer::<u32>(1)?;
            gpu.launch(kernel, shape, (&input, n, &mut total))?;
            total.to_vec()
        });
        match outcome {
            Ok(total) => {
                println!("{kernel}: total {total:?}");
                expected &= kernel == "sum_into_fixed" && total == [500_500];
            }
            Err(error) => {
                println!("{kernel}: {error}");
                expected &= kernel == "sum_into";
            }
        }
    }
    if expected {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
