//! The CUDA backend against a fake driver (crates/gpurun-fake-driver, loaded as `libcuda.so`
//! through `LD_LIBRARY_PATH`): which driver calls it makes, with which arguments, in which
//! order. No GPU needed; the fake records every call to a log file.
//!
//! Each scenario runs in a child process (this test binary again, `fake_driver_child`, through
//! the `Backend` API): the dynamic loader reads `LD_LIBRARY_PATH` at process start, `cuInit`
//! happens once per process, and a kernel fault ends the driver's use for the rest of the
//! process. The same driver calls through `cargo gpurun run` and its real worker process are
//! the end-to-end tests' (tests/e2e/fake_cuda.rs in the repository).

#![cfg(target_os = "linux")]

mod common;

use common::{
    fake_cuda_in, first, launches_are_timed, positions, read_cuda_log, run_child, run_log,
    with_fake_cuda, Call,
};
use gpurun_hal::cuda::{CudaBackend, CudaDevice, STACK_BEYOND_FRAMES, STUB_DRIVER};
use gpurun_hal::handlers::Collect;
use gpurun_hal::kernel_args::KernelArg;
use gpurun_hal::module::{LoadPrimitives, Primitives};
use gpurun_hal::{Backend, BackendError, Device, LaunchEnd, LaunchShape, LoadOptions, Module};
use gpurun_image::Image;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// Which scenario the child runs.
const SCENARIO_ENV: &str = "GPURUN_FAKE_CUDA_SCENARIO";
/// The fake driver's settings (see gpurun-fake-driver's `cuda` module).
const FAIL_ENV: &str = "GPURUN_FAKE_CUDA_FAIL";
const RUNNING_QUERIES_ENV: &str = "GPURUN_FAKE_CUDA_RUNNING_QUERIES";
const KERNEL_FAULT_ENV: &str = "GPURUN_FAKE_CUDA_KERNEL_FAULT";
const MEMORY_POOLS_ENV: &str = "GPURUN_FAKE_CUDA_MEMORY_POOLS";
const MAX_THREADS_ENV: &str = "GPURUN_FAKE_CUDA_MAX_THREADS";
const ELAPSED_MS_ENV: &str = "GPURUN_FAKE_CUDA_ELAPSED_MS";
/// The device time the `timed` scenario tells the fake driver (`ELAPSED_MS_ENV`), and expects.
const TOLD_MS: &str = "1.5";
const TOLD: Duration = Duration::from_micros(1500);
const STATIC_SHARED_ENV: &str = "GPURUN_FAKE_CUDA_STATIC_SHARED";
const LOCAL_BYTES_ENV: &str = "GPURUN_FAKE_CUDA_LOCAL_BYTES";
const MEMORY_MIB_ENV: &str = "GPURUN_FAKE_CUDA_MEMORY_MIB";
/// The static frames the stack tests give the kernels: `gpurun_fill`'s is the larger.
const FRAMES: &str = "gpurun_store=72,gpurun_fill=200";
const LARGEST_FRAME: usize = 200;

/// A kernel with a pointer and a 32-bit argument, one with `(ptr, u64, u32)` (the signature of
/// `fixtures/host-app`'s `fill`), and a global.
const TEST_PTX: &str = concat!(
    include_str!("data/store.ptx"),
    "
.visible .entry gpurun_fill(
    .param .u64 gpurun_fill_param_0,
    .param .u64 gpurun_fill_param_1,
    .param .u32 gpurun_fill_param_2
)
{
    ret;
}
"
);

/// [`TEST_PTX`] with LLVM libc's clock frequency global, which the loader fills in.
fn clock_ptx() -> String {
    format!("{TEST_PTX}\n.visible .global .align 8 .u64 __llvm_libc_clock_freq;\n")
}

const SHAPE: LaunchShape = LaunchShape::grid([2, 1, 1], [64, 1, 1]);

/// The fake driver as `libcuda.so` in a directory of this test binary's own, made once per test
/// process.
fn fake_driver_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| fake_cuda_in(Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-driver")))
}

/// Runs `scenario` in a child process against the fake driver, with `settings` in its
/// environment; returns the driver calls it made, in order.
fn run(scenario: &str, settings: &[(&str, &str)]) -> Vec<Call> {
    let dir = fake_driver_dir();
    let log = run_log(dir, scenario);
    let _ = std::fs::remove_file(&log);
    let mut command = Command::new(std::env::current_exe().unwrap());
    with_fake_cuda(&mut command, dir, &log)
        .env(SCENARIO_ENV, scenario)
        .envs(settings.iter().copied());
    run_child(&mut command, "fake_driver_child", scenario);
    read_cuda_log(&log)
}

fn the_image() -> Image {
    Image::parse(TEST_PTX.as_bytes().to_vec(), None).unwrap()
}

/// `image` loaded with the default options, and a 4-byte output buffer on the device.
fn load_with_output(device: &mut dyn Device, image: &Image) -> (Box<dyn Module>, u64) {
    let mut module = device.load(image, &LoadOptions::default()).unwrap();
    let out = module.alloc_device(4).unwrap();
    (module, out)
}

/// Launches `gpurun_store` in `shape`, storing 42 to `out`.
fn launch_store(
    module: &mut dyn Module,
    shape: LaunchShape,
    out: u64,
    sink: &mut Collect,
) -> Result<LaunchEnd, BackendError> {
    module.launch("gpurun_store", shape, &store_args(out), LIMIT, sink)
}

/// `gpurun_store`'s arguments: where to store, and 42.
fn store_args(out: u64) -> [KernelArg; 2] {
    [KernelArg::U64(out), KernelArg::U32(42)]
}

const LIMIT: Option<Duration> = Some(Duration::from_secs(20));

/// What the child does for each scenario; the parent checks the calls it caused.
#[test]
#[ignore = "run by the fake-driver tests in a child process"]
fn fake_driver_child() {
    let scenario = std::env::var(SCENARIO_ENV).expect("started by a fake-driver test");
    let image = the_image();
    if scenario == "stub" {
        // The toolkit's stub answers cuInit with CUDA_ERROR_STUB_LIBRARY.
        match CudaBackend.devices() {
            Err(BackendError::NotAvailable(text)) => {
                assert!(
                    text.starts_with(STUB_DRIVER)
                        && text.contains("/libcuda.so`")
                        && text.contains("LD_LIBRARY_PATH"),
                    "{text}"
                );
            }
            other => panic!("expected the stub library to be named, got {other:?}"),
        }
        println!("scenario done");
        return;
    }
    if scenario == "made_again" {
        // Every retain of the primary context released, then a new one: the driver makes the
        // context again, with its own stack limit.
        for _ in 0..2 {
            let mut device = CudaBackend.open(0).expect("the fake driver opens");
            drop(device.load(&image, &LoadOptions::default()).unwrap());
        }
        println!("scenario done");
        return;
    }
    if scenario == "device_dropped_first" {
        // A module outlives the device that loaded it (as gpurun-test's `Gpu` keeps only the
        // module): it shares the device, whose context stays until the module is gone.
        let mut device = CudaBackend.open(0).expect("the fake driver opens");
        let (mut module, out) = load_with_output(device.as_mut(), &image);
        drop(device);
        let mut sink = Collect::default();
        let end = launch_store(module.as_mut(), SHAPE, out, &mut sink).unwrap();
        assert_eq!(end, LaunchEnd::Completed);
        drop(module);
        println!("scenario done");
        return;
    }
    if scenario == "fault_ends_the_process" {
        fault_ends_the_process(&image);
        println!("scenario done");
        return;
    }
    if scenario == "memory_pools" {
        // The RPC heap, which only a running kernel's `malloc` reaches: through the
        // primitives of a module, as the launch loop calls them.
        let mut device = std::rc::Rc::new(CudaDevice::open(0).expect("the fake driver opens"));
        let mut primitives = device.primitives(&image, &LoadOptions::default()).unwrap();
        let out = primitives.alloc_device(4).unwrap();
        let launch = primitives.start("gpurun_store", SHAPE, &store_args(out));
        assert!(launch.is_ok());
        drop(launch);
        let block = primitives.heap().malloc(4);
        assert_ne!(block, 0);
        primitives.heap().free(block);
        drop(primitives);
        drop(device);
        println!("scenario done");
        return;
    }
    let mut device = CudaBackend.open(0).expect("the fake driver opens");
    let mut sink = Collect::default();
    match scenario.as_str() {
        "two_modules" => {
            let (mut module, out) = load_with_output(device.as_mut(), &image);
            for _ in 0..2 {
                let end = launch_store(module.as_mut(), SHAPE, out, &mut sink).unwrap();
                assert_eq!(end, LaunchEnd::Completed);
            }
            drop(module);
            // A second module of the same context: the stack is not set again.
            drop(device.load(&image, &LoadOptions::default()).unwrap());
        }
        "stack_size" => {
            // Exactly what is asked, then raised for a module that wants more, then not lowered
            // for one that wants less.
            let small = LoadOptions {
                stack_size: Some(8192),
                ..LoadOptions::default()
            };
            for options in [&small, &LoadOptions::default(), &small] {
                drop(device.load(&image, options).unwrap());
            }
        }
        "clamped" => {
            // The automatic size within an eighth of the memory; an explicit one as asked.
            let large = LoadOptions {
                stack_size: Some(65536),
                ..LoadOptions::default()
            };
            for options in [&LoadOptions::default(), &large] {
                drop(device.load(&image, options).unwrap());
            }
        }
        "clock" => {
            let clock = Image::parse(clock_ptx().into_bytes(), None).unwrap();
            drop(device.load(&clock, &LoadOptions::default()).unwrap());
        }
        "limit_fails" => {
            let error = device
                .load(&image, &LoadOptions::default())
                .err()
                .expect("loading fails when the stack cannot be set");
            assert!(matches!(&error, BackendError::Runtime { .. }), "{error:?}");
            let text = error.to_string();
            assert!(
                text.contains("cuCtxSetLimit(CU_LIMIT_STACK_SIZE) failed")
                    && text.contains("CUDA_ERROR_INVALID_VALUE"),
                "{text}"
            );
        }
        "jit_fails" => {
            let text = device
                .load(&image, &LoadOptions::default())
                .err()
                .expect("loading fails")
                .to_string();
            assert!(
                text.contains("CUDA_ERROR_INVALID_PTX")
                    && text.contains("JIT log:\nptxas fatal   : failure chosen by the fake driver"),
                "{text}"
            );
        }
        "block_limit" => {
            let (mut module, out) = load_with_output(device.as_mut(), &image);
            let error = launch_store(module.as_mut(), SHAPE, out, &mut sink).unwrap_err();
            assert!(
                matches!(&error, BackendError::InvalidArgument(text)
                    if text.contains("at most 32 threads per block")
                        && text.contains("(64 registers per thread)")
                        && text.contains("asks for 64")),
                "{error}"
            );
            let narrow = LaunchShape::grid([1, 1, 1], [32, 1, 1]);
            let end = launch_store(module.as_mut(), narrow, out, &mut sink).unwrap();
            assert_eq!(end, LaunchEnd::Completed);
        }
        "timed" | "untimed" => {
            // Two launches of one module; `untimed`: the driver refuses to record events.
            let expected = (scenario == "timed").then_some(TOLD);
            let (mut module, out) = load_with_output(device.as_mut(), &image);
            for _ in 0..2 {
                let end = launch_store(module.as_mut(), SHAPE, out, &mut sink).unwrap();
                assert_eq!(end, LaunchEnd::Completed);
                assert_eq!(module.last_device_time(), expected);
            }
            drop(module);
        }
        "fault" => {
            let (mut module, out) = load_with_output(device.as_mut(), &image);
            let end = launch_store(module.as_mut(), SHAPE, out, &mut sink).unwrap();
            assert!(
                matches!(&end, LaunchEnd::Faulted(text) if text.contains("CUDA_ERROR_ILLEGAL_ADDRESS")),
                "{end:?}"
            );
            assert_eq!(
                module.last_device_time(),
                None,
                "no time for a faulted launch"
            );
            let again = launch_store(module.as_mut(), SHAPE, out, &mut sink);
            assert!(again.is_err(), "{again:?}");
            drop(module);
        }
        "fill" => {
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            let out = module.alloc_device(64).unwrap();
            let args = [KernelArg::U64(out), KernelArg::U64(16), KernelArg::U32(7)];
            let end = module
                .launch("gpurun_fill", SHAPE, &args, LIMIT, &mut sink)
                .unwrap();
            assert_eq!(end, LaunchEnd::Completed);
            assert_eq!(module.read_device(out, 4).unwrap(), [0; 4]);
        }
        "buffers_and_shared" => {
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            let out = module.alloc_device(64).unwrap();
            module.write_device(out + 8, &[7; 8]).unwrap();
            for bytes in [65536, 81920, 1024] {
                let shape = SHAPE.shared_bytes(bytes);
                let end = launch_store(module.as_mut(), shape, out, &mut sink).unwrap();
                assert_eq!(end, LaunchEnd::Completed, "{bytes} bytes");
            }
            // The opt-in limit less the kernel's static shared memory (1 KiB here).
            let most = 227 * 1024 - 1024;
            let error = launch_store(
                module.as_mut(),
                SHAPE.shared_bytes(most + 1),
                out,
                &mut sink,
            )
            .unwrap_err()
            .to_string();
            assert!(
                error.contains(&format!("at most {most} bytes of dynamic shared memory"))
                    && error.contains("(it declares 1024 bytes of static shared memory)"),
                "{error}"
            );
            let mut expected = vec![0u8; 16];
            expected[8..].fill(7);
            assert_eq!(module.read_device(out, 16).unwrap(), expected);
            module.free_device(out).unwrap();
            drop(module);
        }
        other => panic!("unknown scenario {other}"),
    }
    drop(device);
    println!("scenario done");
}

/// A kernel faults in one module while a second device (the same primary context, retained
/// again) has a module with a buffer, and a third has none: afterwards that module launches,
/// copies and allocates nothing, the third device loads nothing, and the device cannot be
/// opened again, each refused with the one error that names the fault, before any driver call.
fn fault_ends_the_process(image: &Image) {
    let mut faulting = CudaBackend.open(0).expect("the fake driver opens");
    let mut other = CudaBackend.open(0).expect("the fake driver opens twice");
    let mut spare = CudaBackend.open(0).expect("the fake driver opens thrice");
    let mut sink = Collect::default();
    let (mut module, out) = load_with_output(faulting.as_mut(), image);
    let (mut beside, buffer) = load_with_output(other.as_mut(), image);
    let end = launch_store(module.as_mut(), SHAPE, out, &mut sink).unwrap();
    assert!(matches!(end, LaunchEnd::Faulted(_)), "{end:?}");
    let earlier = |error: BackendError| match error {
        BackendError::EarlierFault {
            backend,
            kernel,
            fault,
        } => {
            assert_eq!(backend, gpurun_hal::BackendKind::Cuda);
            assert_eq!(kernel, "gpurun_store");
            assert!(fault.starts_with("CUDA_ERROR_ILLEGAL_ADDRESS"), "{fault}");
        }
        other => panic!("expected the earlier fault, got {other:?}"),
    };
    earlier(launch_store(beside.as_mut(), SHAPE, buffer, &mut sink).unwrap_err());
    earlier(beside.write_device(buffer, &[1; 4]).unwrap_err());
    earlier(beside.read_device(buffer, 4).unwrap_err());
    earlier(beside.alloc_device(4).unwrap_err());
    earlier(beside.alloc_shared(4).unwrap_err());
    earlier(spare.load(image, &LoadOptions::default()).err().unwrap());
    earlier(CudaBackend.open(0).err().unwrap());
    earlier(CudaDevice::open(0).err().unwrap());
    // The text says what happened, for whoever reads only the message.
    let text = CudaBackend.open(0).err().unwrap().to_string();
    assert!(
        text.contains("kernel `gpurun_store` faulted earlier (CUDA_ERROR_ILLEGAL_ADDRESS")
            && text.contains("refuses all work in the process"),
        "{text}"
    );
    // Leaving without tearing anything down, as a worker does after a fault.
    std::mem::forget(module);
    std::mem::forget(beside);
    std::mem::forget((faulting, other, spare));
}

/// After a kernel fault nothing more reaches the driver: the fault's launch is the last
/// `cuLaunchKernel`, the module beside it copies nothing more, and no module loads and no
/// context is retained again, however the device is opened.
#[test]
fn fault_ends_the_process_use_of_the_driver() {
    let calls = run(
        "fault_ends_the_process",
        &[(KERNEL_FAULT_ENV, "CUDA_ERROR_ILLEGAL_ADDRESS")],
    );
    let launches = positions(&calls, "cuLaunchKernel", "");
    assert_eq!(launches.len(), 1, "{calls:#?}");
    let fault = first(&calls, "cuStreamQuery", "");
    assert_eq!(calls[fault].status, "CUDA_ERROR_ILLEGAL_ADDRESS");
    assert_eq!(positions(&calls, "cuModuleLoadDataEx", "").len(), 2);
    assert_eq!(positions(&calls, "cuDevicePrimaryCtxRetain", "").len(), 3);
    for function in [
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemAlloc",
        "cuMemHostAlloc",
        "cuModuleLoadDataEx",
        "cuDevicePrimaryCtxRetain",
        "cuDeviceGet",
    ] {
        let late: Vec<&Call> = calls[fault..]
            .iter()
            .filter(|call| call.function == function)
            .collect();
        assert!(late.is_empty(), "{function} after the fault: {late:#?}");
    }
}

/// Without `--stack-size`, each module load reads the context's stack limit and raises it,
/// while the context is current and before anything launches, to 16 KiB beyond the largest
/// static frame among the module's kernels (which the driver tells only of a loaded module);
/// a second module, for which the limit already suffices, reads it and leaves it. Also the
/// launch itself: non-blocking streams, the block limit asked once before the first launch, the
/// packed parameters, the kernel running until its stream says it is done, and the teardown
/// order; and no global is looked up that the image does not declare (LLVM libc's clock
/// frequency, the RPC client: a failed lookup is an error under compute-sanitizer).
#[test]
fn stack_is_raised_once_per_context() {
    let calls = run(
        "two_modules",
        &[(RUNNING_QUERIES_ENV, "3"), (LOCAL_BYTES_ENV, FRAMES)],
    );
    let stack = format!(
        "CU_LIMIT_STACK_SIZE value={}",
        STACK_BEYOND_FRAMES + LARGEST_FRAME
    );
    let limits = positions(&calls, "cuCtxSetLimit", "");
    assert_eq!(
        limits,
        positions(&calls, "cuCtxSetLimit", &stack),
        "only the stack limit is set, to 16 KiB beyond the largest frame: {calls:#?}"
    );
    assert_eq!(limits.len(), 1, "set once per context: {calls:#?}");
    let set_limit = limits[0];
    let loads = positions(&calls, "cuModuleLoadDataEx", "");
    assert_eq!(loads.len(), 2, "{calls:#?}");
    let reads = positions(&calls, "cuCtxGetLimit", "CU_LIMIT_STACK_SIZE");
    assert_eq!(reads.len(), 2, "read at each load: {calls:#?}");
    assert_eq!(calls[reads[0]].value("value"), Some("1024"));
    assert_eq!(
        calls[reads[1]].value("value"),
        Some((STACK_BEYOND_FRAMES + LARGEST_FRAME).to_string().as_str())
    );
    assert!(loads[0] < reads[0] && reads[0] < set_limit && set_limit < loads[1]);
    assert!(loads[1] < reads[1]);
    let frames = positions(
        &calls,
        "cuFuncGetAttribute",
        "CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES",
    );
    assert!(
        frames.iter().filter(|&&at| at < reads[0]).count() == 2,
        "both kernels' frames are asked before the first read: {calls:#?}"
    );
    let first_launch = first(&calls, "cuLaunchKernel", "");
    assert!(
        set_limit < first_launch,
        "the stack is set before any launch"
    );
    let retain = first(&calls, "cuDevicePrimaryCtxRetain", "");
    let current = positions(&calls, "cuCtxSetCurrent", "context=0xc000");
    assert!(
        current.iter().any(|&at| retain < at && at < reads[0]),
        "the context is current when its stack is set: {calls:#?}"
    );
    assert!(
        positions(&calls, "cuModuleGetGlobal", "").is_empty(),
        "globals the image lacks are looked up: {calls:#?}"
    );
    // The JIT's logs are asked for.
    assert!(calls[loads[0]]
        .details
        .contains("CU_JIT_ERROR_LOG_BUFFER,CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES"));

    // Two non-blocking streams per module (CU_STREAM_NON_BLOCKING = 1).
    let streams = positions(&calls, "cuStreamCreate", "");
    assert_eq!(streams.len(), 4);
    assert!(streams.iter().all(|&at| calls[at].details == "flags=1"));

    // The block limit is asked once, before the first launch.
    let launches = positions(&calls, "cuLaunchKernel", "function=gpurun_store");
    assert_eq!(launches.len(), 2, "{calls:#?}");
    let asked = positions(
        &calls,
        "cuFuncGetAttribute",
        "CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK function=gpurun_store",
    );
    assert_eq!(asked.len(), 1, "{calls:#?}");
    assert!(asked[0] < launches[0]);

    // Shape and parameters: struct { u64 out; u32 value; } without its tail padding: 12 bytes
    // (the fake driver, like the real one, refuses the padded 16).
    let launch = &calls[launches[0]];
    assert!(
        launch.details.contains("grid=2x1x1 block=64x1x1 shared=0"),
        "{launch:?}"
    );
    let params = launch.value("params").unwrap_or_default();
    assert_eq!(params.len(), 24, "12 bytes of parameters: {launch:?}");
    assert!(params.ends_with("2a000000"), "{launch:?}");

    // Writes to the device (zeroing the output word) go on the kernel's
    // stream and are waited for, never on the legacy stream, which a non-blocking stream does
    // not wait for (the fake driver refuses a launch such a write could race).
    let launch_stream = launch.value("stream").unwrap_or_default();
    assert!(
        positions(&calls, "cuMemcpyHtoD", "").is_empty(),
        "{calls:#?}"
    );
    let mut copies = positions(&calls, "cuMemcpyHtoDAsync", "");
    copies.extend(positions(&calls, "cuMemsetD8Async", ""));
    assert!(!copies.is_empty(), "{calls:#?}");
    let synchronized = positions(&calls, "cuStreamSynchronize", launch_stream);
    for &copy in &copies {
        assert_eq!(
            calls[copy].value("stream"),
            Some(launch_stream),
            "{calls:#?}"
        );
        assert!(
            synchronized.iter().any(|&at| at > copy),
            "copy {copy} is not waited for: {calls:#?}"
        );
    }

    // The kernel is not done until its stream says so; the second launch comes after that.
    let queries: Vec<usize> = positions(&calls, "cuStreamQuery", launch_stream)
        .into_iter()
        .filter(|&at| launches[0] < at && at < launches[1])
        .collect();
    let answers: Vec<&str> = queries
        .iter()
        .map(|&at| calls[at].status.as_str())
        .collect();
    assert_eq!(
        answers,
        [
            "CUDA_ERROR_NOT_READY",
            "CUDA_ERROR_NOT_READY",
            "CUDA_ERROR_NOT_READY",
            "CUDA_SUCCESS"
        ],
        "{calls:#?}"
    );

    // Without memory pools: plain allocations, freed when the module goes, before its streams
    // and the module itself; the context is released last.
    let alloc = first(&calls, "cuMemAlloc", "bytes=4");
    let free = first(&calls, "cuMemFree", "");
    let unload = first(&calls, "cuModuleUnload", "");
    assert!(alloc < launches[0] && launches[1] < free && free < unload);
    let destroys = positions(&calls, "cuStreamDestroy", "");
    assert!(destroys.len() == 4 && free < destroys[0] && destroys[1] < unload);
    assert_eq!(
        calls.last().map(|call| call.function.as_str()),
        Some("cuDevicePrimaryCtxRelease"),
        "{calls:#?}"
    );
    assert!(
        calls
            .iter()
            .all(|call| call.status == "CUDA_SUCCESS" || call.status == "CUDA_ERROR_NOT_READY"),
        "unexpected failures: {calls:#?}"
    );
}

/// An image that declares LLVM libc's clock frequency gets it looked up and written (8 bytes,
/// on the kernels' stream); [`stack_is_raised_once_per_context`] checks that an image without it
/// is not asked for it.
#[test]
fn clock_frequency_is_written_where_the_image_declares_it() {
    let calls = run("clock", &[]);
    let lookup = first(&calls, "cuModuleGetGlobal", "name=__llvm_libc_clock_freq");
    assert_eq!(calls[lookup].status, "CUDA_SUCCESS");
    let write = first(
        &calls,
        "cuMemcpyHtoDAsync",
        "to=__llvm_libc_clock_freq bytes=8",
    );
    assert!(lookup < write);
    assert!(
        positions(&calls, "cuModuleGetGlobal", "name=__llvm_rpc_client").is_empty(),
        "{calls:#?}"
    );
}

/// A primary context released to no retains is made again by the next retain, with the
/// driver's own 1 KiB stack: the second device's load reads that and sets the stack again (a
/// record of contexts already set, kept by the process, would miss it).
#[test]
fn a_context_made_again_gets_its_stack_again() {
    let calls = run("made_again", &[]);
    let retains = positions(&calls, "cuDevicePrimaryCtxRetain", "");
    let releases = positions(&calls, "cuDevicePrimaryCtxRelease", "");
    assert_eq!((retains.len(), releases.len()), (2, 2), "{calls:#?}");
    assert!(releases[0] < retains[1]);
    let reads = positions(&calls, "cuCtxGetLimit", "CU_LIMIT_STACK_SIZE value=1024");
    let sets = positions(
        &calls,
        "cuCtxSetLimit",
        &format!("CU_LIMIT_STACK_SIZE value={STACK_BEYOND_FRAMES}"),
    );
    assert_eq!((reads.len(), sets.len()), (2, 2), "{calls:#?}");
    assert!(retains[1] < reads[1] && reads[1] < sets[1], "{calls:#?}");
}

/// A module dropped after the device that loaded it frees everything it made (device memory,
/// pinned host blocks, streams, the module) before the primary context is released.
#[test]
fn a_module_keeps_its_device_until_it_is_dropped() {
    let calls = run("device_dropped_first", &[]);
    let releases = positions(&calls, "cuDevicePrimaryCtxRelease", "");
    assert_eq!(releases.len(), 1, "{calls:#?}");
    let mut freed = positions(&calls, "cuMemFreeHost", "");
    freed.extend(positions(&calls, "cuMemFree", "address"));
    freed.extend(positions(&calls, "cuModuleUnload", ""));
    freed.extend(positions(&calls, "cuStreamDestroy", ""));
    assert!(freed.len() >= 4, "{calls:#?}");
    assert!(
        freed.iter().all(|&at| at < releases[0]),
        "freed after the context was released: {calls:#?}"
    );
}

/// The automatic stack stays within an eighth of the device's memory: on a 4 GiB device that
/// holds 132 x 2048 threads, 1985 bytes. `--stack-size` is not lowered.
#[test]
fn automatic_stack_is_kept_within_an_eighth_of_memory() {
    let calls = run("clamped", &[(MEMORY_MIB_ENV, "4096")]);
    let sets: Vec<&str> = positions(&calls, "cuCtxSetLimit", "CU_LIMIT_STACK_SIZE")
        .into_iter()
        .filter_map(|at| calls[at].value("value"))
        .collect();
    assert_eq!(sets, ["1985", "65536"], "{calls:#?}");
}

/// A host-driven launch whose last parameter is narrower than the widest
/// (`fill(out: *mut u32, n: u64, value: u32)`) passes 20 bytes, not the padded 24 the fake
/// driver (like the real one) refuses; reading the result back happens on the kernel's stream.
#[test]
fn narrow_last_parameter_is_passed_without_tail_padding() {
    let calls = run("fill", &[]);
    let launch = first(&calls, "cuLaunchKernel", "function=gpurun_fill");
    assert_eq!(calls[launch].status, "CUDA_SUCCESS", "{calls:#?}");
    let params = calls[launch].value("params").unwrap_or_default();
    assert_eq!(params.len(), 40, "20 bytes: {:?}", calls[launch]);
    assert!(params.ends_with("100000000000000007000000"), "{params}");
    let read = first(&calls, "cuMemcpyDtoHAsync", "");
    assert!(read > launch);
    assert_eq!(calls[read].value("stream"), calls[launch].value("stream"));
    assert!(positions(&calls, "cuMemcpyDtoH", "").is_empty());
}

/// `--stack-size` (the load option) replaces the automatic size: the stack is set to exactly
/// that, not 16 KiB beyond the frames. A later module that wants more raises it; one that wants
/// less leaves it (another module of the context may need it).
#[test]
fn stack_size_option_overrides_the_default() {
    let calls = run("stack_size", &[(LOCAL_BYTES_ENV, FRAMES)]);
    let sets: Vec<&str> = positions(&calls, "cuCtxSetLimit", "CU_LIMIT_STACK_SIZE")
        .into_iter()
        .filter_map(|at| calls[at].value("value"))
        .collect();
    let automatic = (STACK_BEYOND_FRAMES + LARGEST_FRAME).to_string();
    assert_eq!(sets, ["8192", automatic.as_str()], "{calls:#?}");
    let reads: Vec<&str> = positions(&calls, "cuCtxGetLimit", "CU_LIMIT_STACK_SIZE")
        .into_iter()
        .filter_map(|at| calls[at].value("value"))
        .collect();
    assert_eq!(reads, ["1024", "8192", automatic.as_str()], "{calls:#?}");
}

/// A stack that cannot be set fails the load with the driver's error: the module it loaded is
/// unloaded again, and nothing launches.
#[test]
fn failed_stack_setting_stops_the_load() {
    let calls = run(
        "limit_fails",
        &[(FAIL_ENV, "cuCtxSetLimit=CUDA_ERROR_INVALID_VALUE")],
    );
    let set = first(&calls, "cuCtxSetLimit", "");
    assert_eq!(positions(&calls, "cuCtxSetLimit", "").len(), 1);
    assert_eq!(positions(&calls, "cuModuleLoadDataEx", "").len(), 1);
    assert!(set < first(&calls, "cuModuleUnload", ""), "{calls:#?}");
    assert!(positions(&calls, "cuLaunchKernel", "").is_empty());
}

/// A `libcuda.so` whose `cuInit` says it is the toolkit's stub is named as such, with the file
/// it was loaded from and what to change.
#[test]
fn stub_library_is_named() {
    let calls = run("stub", &[(FAIL_ENV, "cuInit=CUDA_ERROR_STUB_LIBRARY")]);
    assert_eq!(calls[0].status, "CUDA_ERROR_STUB_LIBRARY");
    assert!(
        positions(&calls, "cuDeviceGetCount", "").is_empty(),
        "{calls:#?}"
    );
}

/// A JIT failure reports the driver's error and the JIT's error log.
#[test]
fn jit_failure_shows_the_jit_log() {
    let calls = run(
        "jit_fails",
        &[(FAIL_ENV, "cuModuleLoadDataEx=CUDA_ERROR_INVALID_PTX")],
    );
    assert_eq!(positions(&calls, "cuModuleLoadDataEx", "").len(), 1);
}

/// The driver's block limit (set by the kernel's registers) is checked before the launch: an
/// over-wide block never reaches `cuLaunchKernel`.
#[test]
fn block_over_the_kernel_limit_is_refused_before_the_launch() {
    let calls = run("block_limit", &[(MAX_THREADS_ENV, "32")]);
    let launches = positions(&calls, "cuLaunchKernel", "");
    assert_eq!(launches.len(), 1, "{calls:#?}");
    assert!(calls[launches[0]].details.contains("block=32x1x1"));
}

/// With memory pools, the RPC heap (a running kernel's `malloc`) allocates stream-ordered on
/// the module's memory stream, never on the stream the kernel runs on (it would wait for the
/// kernel). The host's buffers are plain `cuMemAlloc`s.
#[test]
fn memory_pools_allocate_on_the_memory_stream() {
    let calls = run("memory_pools", &[(MEMORY_POOLS_ENV, "1")]);
    let alloc = first(&calls, "cuMemAllocAsync", "bytes=4");
    let launch = first(&calls, "cuLaunchKernel", "");
    let stream_of = |call: &Call| call.value("stream").map(str::to_owned);
    let (alloc_stream, launch_stream) = (stream_of(&calls[alloc]), stream_of(&calls[launch]));
    assert!(alloc_stream.is_some() && alloc_stream != launch_stream);
    assert_eq!(
        positions(&calls, "cuMemAlloc", "bytes=4").len(),
        1,
        "only the host's buffer: {calls:#?}"
    );
    assert!(first(&calls, "cuMemAlloc", "bytes=4") < launch);
    let free = first(&calls, "cuMemFreeAsync", "");
    assert_eq!(stream_of(&calls[free]), alloc_stream);
}

/// The device time of a launch is the time between two timing events recorded
/// on its stream around the launch call (`Module::last_device_time`), read once the stream is
/// done, with the events created once per module, reused, and destroyed with it.
#[test]
fn launches_are_timed_with_events_on_their_stream() {
    let settings = [(RUNNING_QUERIES_ENV, "3"), (ELAPSED_MS_ENV, TOLD_MS)];
    let calls = run("timed", &settings);
    assert_eq!(launches_are_timed(&calls, "gpurun_store").len(), 2);
}

/// With `CUDA_LAUNCH_BLOCKING=1` the launch call, and with it the events around it, move to a
/// helper thread; the time is the same.
#[test]
fn blocking_launches_are_timed_from_the_helper_thread() {
    let settings = [
        (RUNNING_QUERIES_ENV, "3"),
        (ELAPSED_MS_ENV, TOLD_MS),
        ("CUDA_LAUNCH_BLOCKING", "1"),
    ];
    let calls = run("timed", &settings);
    assert_eq!(launches_are_timed(&calls, "gpurun_store").len(), 2);
}

/// Events the driver will not record cost the measurement, not the launch: both launches
/// complete, with no device time and no reading.
#[test]
fn unrecorded_events_only_lose_the_time() {
    let settings = [(FAIL_ENV, "cuEventRecord=CUDA_ERROR_INVALID_VALUE")];
    let calls = run("untimed", &settings);
    assert_eq!(positions(&calls, "cuLaunchKernel", "").len(), 2);
    assert!(positions(&calls, "cuEventElapsedTime", "").is_empty());
    assert_eq!(positions(&calls, "cuEventDestroy", "").len(), 2);
}

/// A host-driven buffer is device memory (`cuMemAlloc`, not pinned host memory),
/// zeroed and copied on the kernels' stream, read back on it after the launches and freed with
/// `cuMemFree`; a launch's dynamic shared memory is `cuLaunchKernel`'s `sharedMemBytes`, with
/// the kernel's `MAX_DYNAMIC_SHARED_SIZE_BYTES` raised first where it is over the default 48
/// KiB (the fake driver, like the real one, refuses the launch otherwise), and a launch over
/// the device's opt-in limit never reaches the driver.
#[test]
fn buffers_are_device_memory_and_shared_memory_is_opted_into() {
    let calls = run("buffers_and_shared", &[(STATIC_SHARED_ENV, "1024")]);
    let launches = positions(&calls, "cuLaunchKernel", "function=gpurun_store");
    assert_eq!(launches.len(), 3, "the fourth is refused: {calls:#?}");
    let launch_stream = calls[launches[0]].value("stream").unwrap_or_default();
    for (&at, shared) in launches.iter().zip(["65536", "81920", "1024"]) {
        assert_eq!(calls[at].value("shared"), Some(shared), "{calls:#?}");
        assert_eq!(calls[at].status, "CUDA_SUCCESS", "{calls:#?}");
    }
    // Raised before the first launch that needs it, and again for more; not for less.
    let raised = positions(
        &calls,
        "cuFuncSetAttribute",
        "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES",
    );
    assert_eq!(raised.len(), 2, "{calls:#?}");
    assert!(calls[raised[0]].details.contains("value=65536"));
    assert!(calls[raised[1]].details.contains("value=81920"));
    assert!(launches[0] > raised[0] && raised[1] > launches[0] && launches[1] > raised[1]);

    // The buffer: device memory, zeroed and written on the kernels' stream before the first
    // launch, read after the last, freed before the module goes.
    let alloc = first(&calls, "cuMemAlloc", "bytes=64");
    assert!(positions(&calls, "cuMemHostAlloc", "bytes=64").is_empty());
    let zero = first(&calls, "cuMemsetD8Async", "bytes=64 value=0");
    let write = first(&calls, "cuMemcpyHtoDAsync", "to=Device+8 bytes=8");
    for at in [zero, write] {
        assert_eq!(calls[at].value("stream"), Some(launch_stream), "{calls:#?}");
        assert!(alloc < at && at < launches[0]);
    }
    let read = first(&calls, "cuMemcpyDtoHAsync", "from=Device+0 bytes=16");
    assert_eq!(calls[read].value("stream"), Some(launch_stream));
    assert!(read > launches[2]);
    let free = first(&calls, "cuMemFree", "");
    assert!(read < free && free < first(&calls, "cuModuleUnload", ""));
    assert_eq!(positions(&calls, "cuMemFree", "").len(), 1, "{calls:#?}");
}

/// A kernel fault ends the launch as a fault and the module is leaked, not torn down: no
/// stream, module or context release waits on a context that may still run the kernel. Its
/// timing events were recorded around the launch, then neither read nor destroyed (nor
/// recorded again: the module refuses the next launch).
#[test]
fn fault_leaks_the_module_and_context() {
    let calls = run("fault", &[(KERNEL_FAULT_ENV, "CUDA_ERROR_ILLEGAL_ADDRESS")]);
    assert_eq!(positions(&calls, "cuLaunchKernel", "").len(), 1);
    assert_eq!(positions(&calls, "cuEventRecord", "").len(), 2);
    for function in [
        "cuModuleUnload",
        "cuStreamDestroy",
        "cuMemFree",
        "cuDevicePrimaryCtxRelease",
        "cuEventElapsedTime",
        "cuEventDestroy",
    ] {
        assert!(
            positions(&calls, function, "").is_empty(),
            "{function} after a fault: {calls:#?}"
        );
    }
}

/// A launch call that fails with a sticky error (the context is lost) fails the launch as a
/// fault, whether it was issued on the caller's thread or, with `CUDA_LAUNCH_BLOCKING=1`, on
/// the helper thread: the launch call's own error decides, not the stream, which ran nothing.
/// The stop event is not recorded after it, and the events are neither read nor destroyed.
#[test]
fn sticky_launch_call_failure_is_a_fault() {
    for blocking in ["0", "1"] {
        let settings = [
            (FAIL_ENV, "cuLaunchKernel=CUDA_ERROR_ILLEGAL_ADDRESS"),
            ("CUDA_LAUNCH_BLOCKING", blocking),
        ];
        let calls = run("fault", &settings);
        let launch = first(&calls, "cuLaunchKernel", "");
        assert_eq!(calls[launch].status, "CUDA_ERROR_ILLEGAL_ADDRESS");
        let recorded = positions(&calls, "cuEventRecord", "");
        assert_eq!(recorded.len(), 1, "blocking={blocking}: {calls:#?}");
        assert!(recorded[0] < launch);
        for function in ["cuEventElapsedTime", "cuEventDestroy", "cuModuleUnload"] {
            assert!(
                positions(&calls, function, "").is_empty(),
                "blocking={blocking}: {function} after a failed launch: {calls:#?}"
            );
        }
    }
}
