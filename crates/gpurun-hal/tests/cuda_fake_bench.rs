//! A benchmark's launches on the CUDA backend, against the fake driver (as
//! `cuda_fake_driver.rs` runs it: a child process whose driver calls are logged): each launch
//! passes its iteration count in the kernel's parameter buffer and sits between the two timing
//! events the device time is read from, and a cold launch (`--flush-l2`) is preceded, on its
//! stream and before its start event, by a write over a buffer the size of the L2 cache. (The
//! same through `cargo gpurun run --flush-l2 IMAGE --bench` and its real worker is an
//! end-to-end test: tests/e2e/fake_cuda.rs in the repository.)

#![cfg(target_os = "linux")]

mod common;

use common::{fake_cuda_in, first, hex, positions, read_cuda_log, run_child, with_fake_cuda, Call};
use gpurun_hal::cuda::CudaBackend;
use gpurun_hal::handlers::Collect;
use gpurun_hal::kernel_args::KernelArg;
use gpurun_hal::{Backend, LaunchEnd, LaunchShape, LoadOptions};
use gpurun_image::Image;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const RUNNING_QUERIES_ENV: &str = "GPURUN_FAKE_CUDA_RUNNING_QUERIES";
/// The fake driver's L2 cache (`gpurun_fake_driver::cuda::L2_CACHE_BYTES`).
const L2_BYTES: usize = 50 * 1024 * 1024;

/// A benchmark kernel as `#[gpurun::bench]` makes one: one `u64` parameter, the iterations.
const BENCH_PTX: &str = "\
.version 7.0
.target sm_70
.address_size 64

.visible .entry gpurun_bench(
    .param .u64 gpurun_bench_param_0
)
{
    ret;
}
";

/// The launches the child makes: iteration count and whether L2 is flushed first.
const LAUNCHES: [(u64, bool); 5] = [
    (7, false),
    (0, false),
    (1, true),
    (0, true),
    (1 << 40, false),
];

/// The fake driver as `libcuda.so` in a directory of this test binary's own.
fn fake_driver_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        fake_cuda_in(Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-driver-bench"))
    })
}

/// The driver calls of the child's launches.
fn bench_calls() -> &'static [Call] {
    static CALLS: OnceLock<Vec<Call>> = OnceLock::new();
    CALLS.get_or_init(|| {
        let dir = fake_driver_dir();
        let log = dir.join(format!("bench-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let mut command = Command::new(std::env::current_exe().unwrap());
        with_fake_cuda(&mut command, dir, &log).env(RUNNING_QUERIES_ENV, "2");
        run_child(&mut command, "bench_child", "launches");
        read_cuda_log(&log)
    })
}

/// The child: [`LAUNCHES`] in one module, through the `Module` API the worker uses.
#[test]
#[ignore = "run by the tests below in a child process"]
fn bench_child() {
    let image = Image::parse(BENCH_PTX.as_bytes().to_vec(), None).unwrap();
    let mut device = CudaBackend.open(0).expect("the fake driver opens");
    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
    let mut sink = Collect::default();
    for (iterations, flush) in LAUNCHES {
        if flush {
            assert!(module.flush_l2().unwrap(), "CUDA flushes L2");
        }
        let end = module
            .launch(
                "gpurun_bench",
                LaunchShape::SINGLE,
                &[KernelArg::U64(iterations)],
                Some(Duration::from_secs(20)),
                &mut sink,
            )
            .unwrap();
        assert_eq!(end, LaunchEnd::Completed);
        assert!(module.last_device_time().is_some(), "timed");
    }
    println!("scenario done");
}

/// Every launch passes its count as the kernel's one 8-byte parameter, and is timed by the
/// module's two events recorded on its stream right before and after it, read once it ended.
#[test]
fn each_launch_passes_its_iteration_count_between_its_timing_events() {
    let calls = bench_calls();
    let launches = positions(calls, "cuLaunchKernel", "function=gpurun_bench");
    assert_eq!(launches.len(), LAUNCHES.len(), "{calls:#?}");
    for (&at, (iterations, _)) in launches.iter().zip(LAUNCHES) {
        let launch = &calls[at];
        assert_eq!(
            launch.value("params"),
            Some(hex(&iterations.to_le_bytes()).as_str()),
            "{launch:?}"
        );
        let stream = launch.value("stream").unwrap();
        for around in [at - 1, at + 1] {
            assert!(
                calls[around].function == "cuEventRecord"
                    && calls[around].value("stream") == Some(stream),
                "{:#?}",
                &calls[at - 1..=at + 1]
            );
        }
        let next = launches
            .iter()
            .find(|&&later| later > at)
            .copied()
            .unwrap_or(calls.len());
        let read = positions(calls, "cuEventElapsedTime", "")
            .into_iter()
            .filter(|&read| read > at && read < next)
            .count();
        assert_eq!(read, 1, "launch of {iterations}: {calls:#?}");
    }
}

/// A cold launch: the L2 cache's size is asked once, a buffer that large allocated once, and
/// before each flushed launch's start event it is written over on the launch's stream (no
/// wait: the stream orders it). Launches without a flush write nothing.
#[test]
fn a_flushed_launch_writes_over_the_l2_cache_first_on_its_stream() {
    let calls = bench_calls();
    let asked = positions(
        calls,
        "cuDeviceGetAttribute",
        "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE",
    );
    assert_eq!(asked.len(), 1, "{calls:#?}");
    let allocated = positions(calls, "cuMemAlloc", &format!("bytes={L2_BYTES}"));
    assert_eq!(allocated.len(), 1, "{calls:#?}");
    assert_eq!(
        first(calls, "cuMemAlloc", &format!("bytes={L2_BYTES}")),
        allocated[0]
    );
    let fills = positions(calls, "cuMemsetD8Async", &format!("bytes={L2_BYTES}"));
    let launches = positions(calls, "cuLaunchKernel", "function=gpurun_bench");
    let flushed: Vec<usize> = launches
        .iter()
        .zip(LAUNCHES)
        .filter(|(_, (_, flush))| *flush)
        .map(|(&at, _)| at)
        .collect();
    assert_eq!(fills.len(), flushed.len(), "{calls:#?}");
    for (&fill, &launch) in fills.iter().zip(&flushed) {
        let start_event = launch - 1;
        let previous = launches.iter().rev().find(|&&at| at < launch).copied();
        assert!(
            fill < start_event && previous.is_none_or(|previous| previous < fill),
            "{calls:#?}"
        );
        assert_eq!(
            calls[fill].value("stream"),
            calls[launch].value("stream"),
            "{calls:#?}"
        );
        assert_eq!(calls[fill].status, "CUDA_SUCCESS", "{:?}", calls[fill]);
        let waits = positions(calls, "cuStreamSynchronize", "")
            .into_iter()
            .filter(|&at| fill < at && at < launch)
            .count();
        assert_eq!(waits, 0, "{calls:#?}");
    }
    assert!(asked[0] < allocated[0] && allocated[0] < fills[0]);
}
