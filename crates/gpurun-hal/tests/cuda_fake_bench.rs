//! A benchmark's launches on the CUDA backend, against the fake driver (as
//! `cuda_fake_driver.rs` runs it: a child process whose driver calls are logged): each launch
//! passes its iteration count in the kernel's parameter buffer and sits between the two timing
//! events the device time is read from, and a cold launch (`--flush-l2`) is preceded, on its
//! stream and before its start event, by a write over a buffer the size of the L2 cache; the
//! same through `cargo gpurun run --flush-l2 IMAGE --bench` and its real worker.

#![cfg(target_os = "linux")]

mod common;

use common::{cargo_build, fake_driver_library, first, positions, read_calls, Call};
use gpurun_abi::{Bench, TestDesc, Throughput};
use gpurun_hal::cuda::CudaBackend;
use gpurun_hal::handlers::Collect;
use gpurun_hal::kernel_args::KernelArg;
use gpurun_hal::{Backend, LaunchEnd, LaunchShape, LoadOptions};
use gpurun_image::Image;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

const LOG_ENV: &str = "GPURUN_FAKE_DRIVER_LOG";
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

/// The fake driver linked as `libcuda.so` into a directory of this test binary's own.
fn fake_driver_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let library = fake_driver_library();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-driver-bench");
        std::fs::create_dir_all(&dir).unwrap();
        let staging = dir.join(format!("libcuda.so.{}", std::process::id()));
        let _ = std::fs::remove_file(&staging);
        std::os::unix::fs::symlink(library, &staging).unwrap();
        std::fs::rename(&staging, dir.join("libcuda.so")).unwrap();
        dir
    })
}

/// The driver calls of the child's launches.
fn bench_calls() -> &'static [Call] {
    static CALLS: OnceLock<Vec<Call>> = OnceLock::new();
    CALLS.get_or_init(|| {
        let dir = fake_driver_dir();
        let log = dir.join(format!("bench-{}.log", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let mut search = dir.as_os_str().to_owned();
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            search.push(":");
            search.push(old);
        }
        let output = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "bench_child", "--ignored", "--nocapture"])
            .env("LD_LIBRARY_PATH", search)
            .env(LOG_ENV, &log)
            .env(RUNNING_QUERIES_ENV, "2")
            .env_remove("CUDA_LAUNCH_BLOCKING")
            .env_remove("CUDA_MODULE_LOADING")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("scenario done"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let calls = read_calls(&log);
        assert!(
            calls.first().is_some_and(|call| call.function == "cuInit"),
            "{calls:#?}"
        );
        calls
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

/// The fake's record of a parameter buffer: its bytes in hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
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

/// The `cargo-gpurun` binary of this workspace, built once per test process.
fn gpurun_binary() -> PathBuf {
    cargo_build("cargo-gpurun", &["--bin", "cargo-gpurun"])
        .into_iter()
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the cargo-gpurun binary")
}

/// A test image with one benchmark, `copy` (4096 bytes per iteration), as `#[gpurun::bench]`
/// makes it: its descriptor, the descriptor version global, the RPC client and its kernel.
fn bench_image() -> String {
    let desc = TestDesc {
        full_path: "fake::copy".into(),
        bench: Some(Bench {
            throughput: Some(Throughput::Bytes(4096)),
        }),
        ..TestDesc::new("copy")
    };
    let bytes = gpurun_image::encode_descriptor(&desc).unwrap();
    let listed: Vec<String> = bytes.iter().map(u8::to_string).collect();
    format!(
        ".version 7.0\n.target sm_70\n.address_size 64\n\n\
         .visible .global .align 8 .b8 __llvm_rpc_client[2096];\n\
         .visible .global .align 4 .b8 __gpurun_test_abi_version[4] = {{3, 0, 0, 0}};\n\
         .visible .global .align 1 .b8 __gpurun_desc_copy_0[{}] = {{{}}};\n\n\
         .visible .entry __gpurun_test_copy_0(\n    .param .u64 __gpurun_test_copy_0_param_0\n)\n{{\n    ret;\n}}\n",
        bytes.len(),
        listed.join(", ")
    )
}

/// Through the CLI and the real worker: `--bench` measures the benchmark in libtest's line
/// (the fake driver's events always say the same time, so no iteration costs anything and the
/// count grows to its most), and `--flush-l2` writes over the L2 cache before every launch.
#[test]
fn cargo_gpurun_run_measures_a_benchmark_cold_through_its_worker() {
    let dir = fake_driver_dir().join(format!("worker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let image = dir.join("copy.ptx");
    std::fs::write(&image, bench_image()).unwrap();
    let log = dir.join("calls.log");
    let mut search = fake_driver_dir().as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        search.push(":");
        search.push(old);
    }
    let output = Command::new(gpurun_binary())
        .args(["gpurun", "run", "--backend", "cuda", "--flush-l2"])
        .arg(&image)
        .args(["--bench", "--warm-up-time", "0", "--measurement-time", "0"])
        .env("LD_LIBRARY_PATH", search)
        .env(LOG_ENV, &log)
        .env_remove("CUDA_LAUNCH_BLOCKING")
        .env_remove("CARGO_TARGET_DIR")
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success()
            && stdout.contains("test copy ... bench:           0.00 ns/iter (+/- 0.00)")
            && stdout.contains("0 ignored; 1 measured; 0 filtered out"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let calls = read_calls(&log);
    let launches = positions(&calls, "cuLaunchKernel", "function=__gpurun_test_copy_0");
    let fills = positions(&calls, "cuMemsetD8Async", &format!("bytes={L2_BYTES}"));
    assert_eq!(
        fills.len(),
        launches.len(),
        "one flush per launch: {calls:#?}"
    );
    let counts: Vec<u64> = launches
        .iter()
        .map(|&at| {
            let params = calls[at].value("params").unwrap_or_default();
            let bytes: Vec<u8> = (0..params.len())
                .step_by(2)
                .filter_map(|i| u8::from_str_radix(params.get(i..i + 2)?, 16).ok())
                .collect();
            u64::from_le_bytes(bytes.try_into().expect("8 parameter bytes"))
        })
        .collect();
    // Launches of none (the floor) and of a count grown from one to the most.
    assert!(counts.contains(&0) && counts.contains(&1), "{counts:?}");
    assert!(counts.contains(&(1 << 40)), "{counts:?}");
    for (&fill, &launch) in fills.iter().zip(&launches) {
        assert!(fill < launch - 1, "{calls:#?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
