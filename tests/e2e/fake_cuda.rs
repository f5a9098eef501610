//! `cargo gpurun run --backend cuda` through its real worker process on the fake CUDA driver
//! (crates/gpurun-fake-driver as `libcuda.so`, whose calls are logged): the driver calls the
//! worker makes for LLVM libc's entry kernels (`_start`, `_end`), module loading and the stack,
//! launch timing, and a cold benchmark. The CUDA backend's own calls, without the CLI, are
//! gpurun-hal's tests (`tests/cuda_fake_driver.rs`, `tests/cuda_fake_bench.rs`), whose helpers
//! these share ([`gpurun_e2e::fake_driver`]).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gpurun_abi::{Bench, TestDesc, Throughput};
use gpurun_e2e::fake_driver::{
    fake_cuda_in, first, launches_are_timed, positions, read_cuda_log, with_fake_cuda, Call,
};
use gpurun_e2e::{fresh_dir, gpurun};
use gpurun_hal::cuda::STACK_BEYOND_FRAMES;

/// How many times the fake driver's `cuStreamQuery` says a kernel still runs.
const RUNNING_QUERIES_ENV: &str = "GPURUN_FAKE_CUDA_RUNNING_QUERIES";
/// The fake driver's L2 cache (`gpurun_fake_driver::cuda::L2_CACHE_BYTES`).
const L2_BYTES: usize = 50 * 1024 * 1024;

/// The fake driver as `libcuda.so` in a directory of this module's own, made once per test
/// process.
fn fake_cuda_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| fake_cuda_in(Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-cuda")))
}

/// A folder for one case's files, fresh.
fn case_dir(name: &str) -> PathBuf {
    fresh_dir(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("fake-cuda-{name}"),
    )
}

/// An image with LLVM libc's `_start(int, char **, char **, int *)` and nothing else.
const START_ONLY: &str = "\
.version 7.0
.target sm_70
.address_size 64

.visible .entry _start(
    .param .u32 _start_param_0,
    .param .u64 .ptr .align 1 _start_param_1,
    .param .u64 .ptr .align 1 _start_param_2,
    .param .u64 .ptr .align 1 _start_param_3
)
{
    ret;
}
";

/// [`START_ONLY`] plus an `_end` with the given parameter list.
fn with_end(params: &str) -> String {
    format!("{START_ONLY}\n.visible .entry _end({params})\n{{\n    ret;\n}}\n")
}

/// `cargo gpurun run --backend cuda OPTIONS` of the PTX image `ptx` through the real worker
/// process, against the fake driver, which must succeed; the driver calls.
fn run_through_worker(name: &str, ptx: &str, options: &[&str], env: &[(&str, &str)]) -> Vec<Call> {
    let dir = case_dir(name);
    let image = dir.join("start.ptx");
    std::fs::write(&image, ptx).unwrap();
    let log = dir.join("calls.log");
    let mut all = vec!["run", "--backend", "cuda"];
    all.extend_from_slice(options);
    all.push(image.to_str().unwrap());
    let mut command = gpurun(&all);
    with_fake_cuda(&mut command, fake_cuda_dir(), &log).envs(env.iter().copied());
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{name}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let calls = read_cuda_log(&log);
    std::fs::remove_dir_all(&dir).unwrap();
    calls
}

/// `_end` gets the exit status where the image declares `_end(int)` (LLVM
/// libc's start code until 2025, as its loaders passed it), and nothing where it is `_end()`
/// (the fake driver, like the real one, refuses parameters a kernel does not take).
#[test]
fn end_gets_the_status_where_it_takes_one() {
    for (params, expected) in [(".param .b32 _end_param_0", "00000000"), ("", "none")] {
        let calls = run_through_worker("end", &with_end(params), &[], &[]);
        let end = first(&calls, "cuLaunchKernel", "function=_end");
        assert_eq!(calls[end].status, "CUDA_SUCCESS", "{calls:#?}");
        assert_eq!(calls[end].value("params"), Some(expected), "_end({params})");
        assert!(first(&calls, "cuLaunchKernel", "function=_start") < end);
    }
}

/// Through the real worker: `cargo gpurun run` starts the driver with eager module loading
/// (unless the user chose a mode), and raises the stack after the module loads and before
/// anything launches, to `--stack-size` or the automatic size.
#[test]
fn worker_loads_eagerly_with_the_stack_set_first() {
    let stack_order = |calls: &[Call], value: &str| {
        let limits = positions(calls, "cuCtxSetLimit", "");
        assert_eq!(limits.len(), 1, "{calls:#?}");
        assert_eq!(
            calls[limits[0]].details,
            format!("CU_LIMIT_STACK_SIZE value={value}")
        );
        let read = first(calls, "cuCtxGetLimit", "CU_LIMIT_STACK_SIZE");
        let load = first(calls, "cuModuleLoadDataEx", "");
        assert!(load < read && read < limits[0], "{calls:#?}");
        assert!(limits[0] < first(calls, "cuLaunchKernel", ""), "{calls:#?}");
    };
    let calls = run_through_worker("default", START_ONLY, &[], &[]);
    assert_eq!(calls[0].details, "flags=0 CUDA_MODULE_LOADING=EAGER");
    stack_order(&calls, &STACK_BEYOND_FRAMES.to_string());

    let calls = run_through_worker("stack", START_ONLY, &["--stack-size", "8192"], &[]);
    stack_order(&calls, "8192");

    let calls = run_through_worker("lazy", START_ONLY, &[], &[("CUDA_MODULE_LOADING", "LAZY")]);
    assert_eq!(calls[0].details, "flags=0 CUDA_MODULE_LOADING=LAZY");
}

/// Through the real worker: `_start` and `_end` are each timed by the module's events, also with `CUDA_LAUNCH_BLOCKING=1`, where the launch call runs on a helper
/// thread.
#[test]
fn worker_times_every_launch() {
    let image = with_end("");
    for blocking in ["0", "1"] {
        let env = [
            (RUNNING_QUERIES_ENV, "2"),
            ("CUDA_LAUNCH_BLOCKING", blocking),
        ];
        let calls = run_through_worker("timed", &image, &[], &env);
        let launches = launches_are_timed(&calls, "");
        let kernels: Vec<&str> = launches
            .iter()
            .filter_map(|&at| calls[at].value("function"))
            .collect();
        assert_eq!(kernels, ["_start", "_end"], "blocking={blocking}");
    }
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
    let dir = case_dir("bench");
    let image = dir.join("copy.ptx");
    std::fs::write(&image, bench_image()).unwrap();
    let log = dir.join("calls.log");
    let mut command = gpurun(&["run", "--backend", "cuda", "--flush-l2"]);
    let output = with_fake_cuda(&mut command, fake_cuda_dir(), &log)
        .arg(&image)
        .args(["--bench", "--warm-up-time", "0", "--measurement-time", "0"])
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
    let calls = read_cuda_log(&log);
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
