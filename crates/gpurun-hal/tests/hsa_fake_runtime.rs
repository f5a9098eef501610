//! The HSA backend against a fake runtime (crates/gpurun-fake-driver, named by
//! `$GPURUN_HSA_LIB`): which runtime calls it makes, with which arguments, in which order. No
//! GPU needed; the fake records every call to a log file and runs nothing.
//!
//! Each scenario runs in a child process (this test binary again, `fake_runtime_child`): the
//! backend loads the runtime once per process and `hsa_init`/`hsa_shut_down` count per process.
//!
//! The code object is the committed gfx90a sample of gpurun-image's tests. One scenario renames
//! one of its dynamic symbols (an 8-byte init-array entry) to the retired
//! `__gpurun_launch_shape` global, as an image of an older device runtime has it.

#![cfg(target_os = "linux")]

mod common;

use common::{
    fake_driver_library, first, hex, positions, read_calls, run_child, run_log, Call, LOG_ENV,
};
use gpurun_hal::handlers::Collect;
use gpurun_hal::hsa::HsaBackend;
use gpurun_hal::kernel_args::KernelArg;
use gpurun_hal::{Backend, BackendError, LaunchEnd, LaunchShape, LoadOptions};
use gpurun_image::Image;
use object::{Object, ObjectSection};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Which scenario the child runs.
const SCENARIO_ENV: &str = "GPURUN_FAKE_HSA_SCENARIO";
/// The fake's settings (see gpurun-fake-driver's `hsa` module).
const FAIL_ENV: &str = "GPURUN_FAKE_HSA_FAIL";
const RUNNING_POLLS_ENV: &str = "GPURUN_FAKE_HSA_RUNNING_POLLS";
const FAULT_ENV: &str = "GPURUN_FAKE_HSA_FAULT";
const QUEUE_ERROR_ENV: &str = "GPURUN_FAKE_HSA_QUEUE_ERROR";
const MEMORY_ERROR_ENV: &str = "GPURUN_FAKE_HSA_MEMORY_ERROR";
const COMPUTE_UNITS_ENV: &str = "GPURUN_FAKE_HSA_COMPUTE_UNITS";
const WAVES_PER_CU_ENV: &str = "GPURUN_FAKE_HSA_WAVES_PER_CU";
const TIMESTAMP_HZ_ENV: &str = "GPURUN_FAKE_HSA_TIMESTAMP_HZ";
const DISPATCH_TICKS_ENV: &str = "GPURUN_FAKE_HSA_DISPATCH_TICKS";
const LONG_KERNEL_ENV: &str = "GPURUN_FAKE_HSA_LONG_KERNEL";
const CPUS_ENV: &str = "GPURUN_FAKE_HSA_CPUS";
/// What the `timed` scenario tells the fake (a 250 MHz system timestamp, unlike the GPU's
/// 100 MHz `s_memrealtime` counter; dispatches 12,345 ticks long), and the device time that
/// makes.
const TIMING: [(&str, &str); 2] = [
    (TIMESTAMP_HZ_ENV, "250000000"),
    (DISPATCH_TICKS_ENV, "12345"),
];
const DISPATCH_TIME: Duration = Duration::from_nanos(49_380);
/// Slots the `slots` scenario opens, as a worker with that many concurrent tests does.
const SLOTS: usize = 6;
/// The `busy` scenario: slots that run short kernels beside a long one, and how many each runs
/// (more than a 64-packet queue holds).
const BUSY_SLOTS: usize = 5;
const BUSY_LAUNCHES: usize = 70;
/// The sample's kernels the `busy` scenario runs long, and with a failing queue.
const SLOW: &str = "__gpurun_test_slow_00000000000000aa";
const BOOM: &str = "__gpurun_test_boom_00000000000000bb";

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../gpurun-image/tests/data/sample-gfx90a.elf"
);
/// Real code objects of `indirect(x: u32, out: *mut u32)`, whose metadata lists hidden
/// arguments in the code object v4 and v5 layouts (gpurun-image's tests/data/README.md).
const HIDDEN_ARGS_V4: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../gpurun-image/tests/data/hidden-args-gfx90a-v4.elf"
);
const HIDDEN_ARGS_V5: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../gpurun-image/tests/data/hidden-args-gfx90a-v5.elf"
);
/// `fixtures/benches` built for gfx90a: real `#[gpurun::bench]` kernels (tests/data/README.md).
const BENCHES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../gpurun-image/tests/data/benches-gfx90a.elf"
);
/// The iteration counts the `bench` scenario launches each benchmark with.
const BENCH_ITERATIONS: [u64; 3] = [7, 0, 1 << 40];
/// The sample's symbol that is renamed to `__gpurun_launch_shape` (scenario `retired_shape`).
const STAND_IN: &str = "__init_array_object_sample_init_hook_101";
const KERNEL: &str = "_begin";
const SHAPE: LaunchShape = LaunchShape::grid([2, 1, 1], [64, 1, 1]);
const LIMIT: Option<Duration> = Some(Duration::from_secs(20));

/// The sample code object.
fn code_object() -> Vec<u8> {
    std::fs::read(SAMPLE).expect("the committed gfx90a sample")
}

/// The sample code object with [`STAND_IN`] renamed in `.dynstr` and resized in `.dynsym` to be
/// the 24-byte launch-shape global of older device runtimes.
fn code_object_with_retired_shape() -> Vec<u8> {
    let mut bytes = code_object();
    let shape_name = gpurun_abi::symbols::RETIRED_LAUNCH_SHAPE;
    let (dynsym, dynstr) = {
        let file = object::File::parse(bytes.as_slice()).expect("an ELF file");
        let range = |name: &str| {
            file.section_by_name(name)
                .and_then(|section| section.file_range())
                .map(|(start, len)| (start as usize, len as usize))
                .expect("the sample has dynamic symbols")
        };
        (range(".dynsym"), range(".dynstr"))
    };
    let mut renamed = false;
    for entry in (dynsym.0..dynsym.0 + dynsym.1).step_by(24) {
        let name_at =
            dynstr.0 + u32::from_le_bytes(bytes[entry..entry + 4].try_into().unwrap()) as usize;
        if bytes[name_at..].starts_with(format!("{STAND_IN}\0").as_bytes()) {
            let mut name = shape_name.as_bytes().to_vec();
            name.resize(STAND_IN.len(), 0);
            bytes[name_at..name_at + name.len()].copy_from_slice(&name);
            let size = 24u64;
            bytes[entry + 16..entry + 24].copy_from_slice(&size.to_le_bytes());
            renamed = true;
        }
    }
    assert!(renamed, "the sample has `{STAND_IN}` in .dynsym");
    bytes
}

/// Runs `scenario` in a child process against the fake runtime, with `settings` in its
/// environment; returns the runtime calls it made, in order.
fn run(scenario: &str, settings: &[(&str, &str)]) -> Vec<Call> {
    run_with_output(scenario, settings).0
}

/// [`run`], also returning what the child printed.
fn run_with_output(scenario: &str, settings: &[(&str, &str)]) -> (Vec<Call>, String) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-hsa");
    std::fs::create_dir_all(&dir).unwrap();
    let log = run_log(&dir, scenario);
    let _ = std::fs::remove_file(&log);
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .env("GPURUN_HSA_LIB", fake_driver_library())
        .env(LOG_ENV, &log)
        .env(SCENARIO_ENV, scenario)
        .env_remove(FAIL_ENV)
        .env_remove(RUNNING_POLLS_ENV)
        .env_remove(FAULT_ENV)
        .env_remove(QUEUE_ERROR_ENV)
        .env_remove(MEMORY_ERROR_ENV)
        .env_remove(COMPUTE_UNITS_ENV)
        .env_remove(WAVES_PER_CU_ENV)
        .env_remove(TIMESTAMP_HZ_ENV)
        .env_remove(DISPATCH_TICKS_ENV)
        .env_remove(LONG_KERNEL_ENV)
        .env_remove(CPUS_ENV)
        .envs(settings.iter().copied());
    let stdout = run_child(&mut command, "fake_runtime_child", scenario);
    let calls = read_calls(&log);
    assert!(
        calls
            .first()
            .is_some_and(|call| call.function == "hsa_init"),
        "{scenario}: the runtime was not used or hsa_init was not first: {calls:#?}"
    );
    (calls, stdout)
}

fn last(calls: &[Call], function: &str, details: &str) -> usize {
    *positions(calls, function, details)
        .last()
        .unwrap_or_else(|| panic!("no {function} {details} in {calls:#?}"))
}

/// `a` comes before `b`, both by position.
#[track_caller]
fn before(calls: &[Call], a: usize, b: usize) {
    assert!(
        a < b,
        "{:?} should come before {:?}:\n{calls:#?}",
        calls[a],
        calls[b]
    );
}

/// The last call shuts the runtime down with nothing left alive, and no call was refused as
/// a double free or an unknown handle.
#[track_caller]
fn clean_teardown(calls: &[Call]) {
    let shut_down = calls.last().unwrap();
    assert_eq!(shut_down.function, "hsa_shut_down", "{calls:#?}");
    assert!(
        shut_down
            .details
            .ends_with("references=0 leaked blocks=0 signals=0 queues=0 executables=0 readers=0"),
        "{shut_down:?}"
    );
    let refused: Vec<&Call> = calls
        .iter()
        .filter(|call| {
            [
                "INVALID_ALLOCATION",
                "INVALID_SIGNAL",
                "INVALID_QUEUE",
                "INVALID_EXECUTABLE",
            ]
            .iter()
            .any(|status| call.status.contains(status))
        })
        .collect();
    assert!(refused.is_empty(), "refused calls: {refused:#?}");
}

/// Waits (in the child) until the fake runtime has logged a line containing `needle`.
fn wait_for_logged(needle: &str) {
    let log = std::env::var_os(LOG_ENV).expect("the parent names the log");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&log).is_ok_and(|text| text.contains(needle)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the fake never logged {needle}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// CPU time the calling thread has used (the launch loop and the runtime's waits run on it).
fn thread_cpu_time() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        usage
    };
    let time = |value: libc::timeval| {
        Duration::from_secs(value.tv_sec as u64) + Duration::from_micros(value.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// What the child does for each scenario; the parent checks the calls it caused.
#[test]
#[ignore = "run by the fake-runtime tests in a child process"]
fn fake_runtime_child() {
    let scenario = std::env::var(SCENARIO_ENV).expect("started by a fake-runtime test");
    let mut device = HsaBackend::new().open(0).expect("the fake runtime opens");
    let image = Image::parse(code_object(), None).expect("the sample parses");
    let mut sink = Collect::default();
    match scenario.as_str() {
        "launch" => {
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            let end = module.launch(KERNEL, SHAPE, &[], LIMIT, &mut sink).unwrap();
            assert_eq!(end, LaunchEnd::Completed);
            drop(module);
        }
        "timed" | "untimed" => {
            // Two launches of one module; `untimed`: the runtime will not give the timestamps.
            let expected = (scenario == "timed").then_some(DISPATCH_TIME);
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            for _ in 0..2 {
                let end = module.launch(KERNEL, SHAPE, &[], LIMIT, &mut sink).unwrap();
                assert_eq!(end, LaunchEnd::Completed);
                assert_eq!(module.last_device_time(), expected);
            }
            drop(module);
        }
        "bench" => {
            // Each benchmark of the image, launched as the worker launches one (its iteration
            // count as the one argument, in its own shape) and timed.
            let image = Image::read(BENCHES).unwrap();
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            assert!(!module.flush_l2().unwrap(), "HSA has no L2 flush");
            let benches: Vec<_> = image
                .tests()
                .iter()
                .filter(|test| test.bench.is_some())
                .collect();
            assert!(benches.len() >= 3, "{benches:?}");
            for test in benches {
                for iterations in BENCH_ITERATIONS {
                    let args = [KernelArg::U64(iterations)];
                    let end = module
                        .launch(&test.kernel, test.shape, &args, LIMIT, &mut sink)
                        .unwrap();
                    assert_eq!(end, LaunchEnd::Completed, "{}", test.kernel);
                    assert_eq!(module.last_device_time(), Some(DISPATCH_TIME));
                    let [x, y, z] = test.shape.threads;
                    println!("launched {} {x}x{y}x{z}", test.kernel);
                }
            }
            drop(module);
        }
        "profiling_fails" => {
            let error = device
                .load(&image, &LoadOptions::default())
                .err()
                .expect("loading fails without profiling");
            assert!(
                error.to_string().contains(
                    "hsa_amd_profiling_set_profiler_enabled failed with \
                     HSA_STATUS_ERROR_NOT_INITIALIZED"
                ),
                "{error}"
            );
        }
        "timeout" => {
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            let deadline = Duration::from_millis(300);
            let end = module
                .launch(KERNEL, SHAPE, &[], Some(deadline), &mut sink)
                .unwrap();
            // The deadline was kept: the launch came back, timed out.
            assert!(matches!(end, LaunchEnd::TimedOut(_)), "{end:?}");
            let again = module
                .launch(KERNEL, SHAPE, &[], LIMIT, &mut sink)
                .expect_err("a module whose kernel may still run refuses the next launch");
            assert!(
                again.to_string().contains("ran past its 300ms timeout"),
                "{again}"
            );
            drop(module);
        }
        "fault" | "queue_error" => {
            let expected = if scenario == "fault" {
                "GPU memory access fault at address 0xdead000 (page not present"
            } else {
                "the GPU queue failed with HSA_STATUS_ERROR_EXCEPTION"
            };
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            let end = module.launch(KERNEL, SHAPE, &[], LIMIT, &mut sink).unwrap();
            match &end {
                LaunchEnd::Faulted(text) => assert!(text.contains(expected), "{text}"),
                other => panic!("expected a fault, got {other:?}"),
            }
            assert_eq!(module.last_device_time(), None);
            let again = module
                .launch(KERNEL, SHAPE, &[], LIMIT, &mut sink)
                .expect_err("a faulted module refuses the next launch");
            assert!(again.to_string().contains(expected), "{again}");
            drop(module);
        }
        "hidden_args" => {
            // Both code object versions; the v5 kernel's stack is dynamic, so it is launched
            // again from a module that asks for a larger stack than a lane can have.
            let args = [KernelArg::U32(21), KernelArg::U64(0x7000)];
            for (path, options) in [
                (HIDDEN_ARGS_V4, LoadOptions::default()),
                (HIDDEN_ARGS_V5, LoadOptions::default()),
                (
                    HIDDEN_ARGS_V5,
                    LoadOptions {
                        stack_size: Some(1 << 20),
                        ..LoadOptions::default()
                    },
                ),
            ] {
                let image = Image::read(path).unwrap();
                let mut module = device.load(&image, &options).unwrap();
                let end = module
                    .launch("indirect", SHAPE, &args, LIMIT, &mut sink)
                    .unwrap();
                assert_eq!(end, LaunchEnd::Completed);
            }
        }
        "retired_shape" => {
            let image = Image::parse(code_object_with_retired_shape(), None).unwrap();
            let error = device
                .load(&image, &LoadOptions::default())
                .err()
                .expect("an image with the retired launch-shape global is refused");
            assert!(
                matches!(&error, BackendError::Incompatible(text)
                    if text.contains("__gpurun_launch_shape") && text.contains("rebuild it")),
                "{error}"
            );
        }
        "slots" => {
            // SLOTS slots, each with its device and module, as a worker's, all alive at once;
            // each runs a one-thread launch. Then one more slot runs a grid that fills the GPU,
            // whose buffer is what every slot got when buffers were sized for the whole GPU.
            let mut devices: Vec<_> = (0..SLOTS)
                .map(|_| HsaBackend::new().open(0).expect("the fake runtime opens"))
                .collect();
            let started = std::time::Instant::now();
            let mut modules: Vec<_> = devices
                .iter_mut()
                .map(|device| device.load(&image, &LoadOptions::default()).unwrap())
                .collect();
            for module in &mut modules {
                let end = module
                    .launch(KERNEL, LaunchShape::SINGLE, &[], LIMIT, &mut sink)
                    .unwrap();
                assert_eq!(end, LaunchEnd::Completed);
            }
            let per_slot = started.elapsed() / SLOTS as u32;
            let started = std::time::Instant::now();
            let mut whole = HsaBackend::new().open(0).unwrap();
            let mut module = whole.load(&image, &LoadOptions::default()).unwrap();
            let whole_gpu = LaunchShape::grid([304 * 32, 1, 1], [64, 1, 1]);
            let end = module
                .launch(KERNEL, whole_gpu, &[], LIMIT, &mut sink)
                .unwrap();
            assert_eq!(end, LaunchEnd::Completed);
            let whole_slot = started.elapsed();
            println!(
                "measured: load and one launch per slot {per_slot:?} for one-thread tests, \
                 {whole_slot:?} for a slot sized for the whole GPU ({:.1}x)",
                whole_slot.as_secs_f64() / per_slot.as_secs_f64().max(1e-9)
            );
            drop(module);
            drop(whole);
            drop(modules);
            drop(devices);
        }
        "busy" => {
            // A worker under a real test load: one slot runs a long test; one a test whose
            // queue fails, then (as a worker does after a fault) the next test in a new module;
            // and, once the long kernel runs, BUSY_SLOTS slots BUSY_LAUNCHES short tests each.
            std::thread::scope(|scope| {
                let long = scope.spawn(|| {
                    let mut device = HsaBackend::new().open(0).unwrap();
                    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
                    let mut sink = Collect::default();
                    module.launch(SLOW, LaunchShape::SINGLE, &[], LIMIT, &mut sink)
                });
                wait_for_logged(&format!("kernel={SLOW}.kd"));
                let faulty = scope.spawn(|| {
                    let mut device = HsaBackend::new().open(0).unwrap();
                    let mut sink = Collect::default();
                    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
                    let faulted = module.launch(BOOM, LaunchShape::SINGLE, &[], LIMIT, &mut sink);
                    // The broken module is leaked, as a worker's is.
                    std::mem::forget(module);
                    let mut next = device.load(&image, &LoadOptions::default()).unwrap();
                    let after = next.launch(KERNEL, LaunchShape::SINGLE, &[], LIMIT, &mut sink);
                    drop(next);
                    (faulted, after)
                });
                let busy: Vec<_> = (0..BUSY_SLOTS)
                    .map(|_| {
                        scope.spawn(|| {
                            let mut device = HsaBackend::new().open(0).unwrap();
                            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
                            let mut sink = Collect::default();
                            (0..BUSY_LAUNCHES)
                                .map(|_| {
                                    module.launch(
                                        KERNEL,
                                        LaunchShape::SINGLE,
                                        &[],
                                        LIMIT,
                                        &mut sink,
                                    )
                                })
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                for (slot, ends) in busy.into_iter().enumerate() {
                    for (launch, end) in ends.join().unwrap().into_iter().enumerate() {
                        assert!(
                            matches!(end, Ok(LaunchEnd::Completed)),
                            "slot {slot}, launch {launch}: {end:?}"
                        );
                    }
                }
                let (faulted, after) = faulty.join().unwrap();
                match faulted {
                    Ok(LaunchEnd::Faulted(text)) => assert!(
                        text.contains("the GPU queue failed with HSA_STATUS_ERROR_EXCEPTION"),
                        "{text}"
                    ),
                    other => panic!("the failing queue's test: {other:?}"),
                }
                assert!(
                    matches!(after, Ok(LaunchEnd::Completed)),
                    "the test after the fault: {after:?}"
                );
                let long = long.join().unwrap();
                assert!(
                    matches!(long, Ok(LaunchEnd::Completed)),
                    "the long test: {long:?}"
                );
            });
        }
        "idle" => {
            // One test whose kernel runs without a word over RPC (the fake holds it).
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            let (cpu_before, started) = (thread_cpu_time(), std::time::Instant::now());
            let end = module
                .launch(SLOW, LaunchShape::SINGLE, &[], LIMIT, &mut sink)
                .unwrap();
            let (cpu, wall) = (thread_cpu_time() - cpu_before, started.elapsed());
            assert_eq!(end, LaunchEnd::Completed);
            println!(
                "measured: host CPU time per idle second of a running kernel: {:.0} ms ({cpu:?} \
                 over {wall:?}, on the fake runtime's model of ROCr's waits)",
                1000.0 * cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9)
            );
            drop(module);
        }
        "memory_error" => {
            // The kernel ends; freeing its arguments fails with ROCr's memory error event.
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            let end = module.launch(KERNEL, SHAPE, &[], LIMIT, &mut sink).unwrap();
            let expected = "GPU memory error at address";
            match &end {
                LaunchEnd::Faulted(text) => {
                    assert!(
                        text.contains(expected) && text.contains("still uses"),
                        "{text}"
                    )
                }
                other => panic!("expected a fault, got {other:?}"),
            }
            // Another module of the process (another slot, with its own device) dispatches
            // nothing after it.
            let mut second = HsaBackend::new().open(0).expect("the fake runtime opens");
            let mut other = second.load(&image, &LoadOptions::default()).unwrap();
            let end = other.launch(KERNEL, SHAPE, &[], LIMIT, &mut sink).unwrap();
            match &end {
                LaunchEnd::Faulted(text) => assert!(
                    text.contains(expected) && text.contains("earlier in this process"),
                    "{text}"
                ),
                other => panic!("expected a fault, got {other:?}"),
            }
            drop(other);
            drop(second);
            drop(module);
        }
        "buffers_and_shared" => {
            let mut module = device.load(&image, &LoadOptions::default()).unwrap();
            let out = module.alloc_device(10).unwrap();
            module.write_device(out + 2, &[5; 8]).unwrap();
            let end = module
                .launch(KERNEL, SHAPE.shared_bytes(4096), &[], LIMIT, &mut sink)
                .unwrap();
            assert_eq!(end, LaunchEnd::Completed);
            // The group pool's 64 KiB less `_begin`'s static LDS (none) and the device
            // runtime's 12 bytes (`gpurun_abi::shape::AMDGPU_RUNTIME_LDS`).
            let error = module
                .launch(KERNEL, SHAPE.shared_bytes(65525), &[], LIMIT, &mut sink)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("at most 65524 bytes of dynamic shared memory")
                    && error.contains("asks for 65525"),
                "{error}"
            );
            let end = module
                .launch(KERNEL, SHAPE.shared_bytes(65524), &[], LIMIT, &mut sink)
                .unwrap();
            assert_eq!(end, LaunchEnd::Completed);
            let mut expected = vec![5u8; 10];
            expected[..2].fill(0);
            assert_eq!(module.read_device(out, 10).unwrap(), expected);
            module.free_device(out).unwrap();
            drop(module);
        }
        "load_fails" => {
            let error = device
                .load(&image, &LoadOptions::default())
                .err()
                .expect("loading fails");
            assert!(
                matches!(&error, BackendError::Incompatible(text)
                    if text.contains("does not load on gfx90a")
                        && text.contains("hsa_executable_load_agent_code_object failed with \
                                          HSA_STATUS_ERROR_INVALID_CODE_OBJECT")),
                "{error}"
            );
        }
        other => panic!("unknown scenario {other}"),
    }
    drop(device);
    println!("scenario done");
}

/// Opening, loading, one launch and the teardown, in the order the HSA API needs.
#[test]
fn launch_calls_come_in_order() {
    let calls = run("launch", &[(RUNNING_POLLS_ENV, "3")]);

    // Start: the fault handler right after init; agents and pools before any code object.
    let handler = first(
        &calls,
        "hsa_amd_register_system_event_handler",
        "handler=true",
    );
    assert_eq!(handler, 1, "{calls:#?}");
    let agents = first(&calls, "hsa_iterate_agents", "");
    let cpu_pools = first(&calls, "hsa_amd_agent_iterate_memory_pools", "agent=0xa100");
    let gpu_pools = first(&calls, "hsa_amd_agent_iterate_memory_pools", "agent=0xa200");
    let reader = first(&calls, "hsa_code_object_reader_create_from_memory", "");
    before(&calls, handler, agents);
    before(&calls, agents, cpu_pools);
    before(&calls, cpu_pools, reader);
    before(&calls, gpu_pools, reader);
    let size = std::fs::metadata(SAMPLE).unwrap().len();
    assert!(calls[reader].details.contains(&format!("bytes={size}")));

    // The executable: created, loaded for the GPU, frozen, validated; the reader goes after.
    let create = first(&calls, "hsa_executable_create_alt", "profile=1 rounding=1");
    let load = first(
        &calls,
        "hsa_executable_load_agent_code_object",
        "agent=0xa200",
    );
    let freeze = first(&calls, "hsa_executable_freeze", "");
    let validate = first(&calls, "hsa_executable_validate", "");
    let reader_gone = first(&calls, "hsa_code_object_reader_destroy", "");
    for (a, b) in [
        (reader, create),
        (create, load),
        (load, freeze),
        (freeze, validate),
        (validate, reader_gone),
    ] {
        before(&calls, a, b);
    }

    // The queue, on the GPU, multi-producer, with no scratch bound up front (ROCr would bind its
    // default for the whole GPU to every queue); then the RPC client installed.
    let queue = first(
        &calls,
        "hsa_queue_create",
        "agent=0xa200 size=64 type=0 private=0x0 group=0xffffffff",
    );
    before(&calls, validate, queue);
    let client = first(
        &calls,
        "hsa_executable_get_symbol_by_name",
        "name=__llvm_rpc_client",
    );
    let client_copy = first(
        &calls,
        "hsa_amd_memory_async_copy",
        "dst=__llvm_rpc_client ",
    );
    before(&calls, queue, client);
    before(&calls, client, client_copy);
    assert!(
        calls[client_copy].details.contains("bytes=2096"),
        "the whole client object: {:?}",
        calls[client_copy]
    );

    // The launch: kernel lookup, kernel arguments, signal, slot, doorbell. Nothing is copied
    // into the image for it: kernels read their shape from the dispatch packet.
    let kernel = first(
        &calls,
        "hsa_executable_get_symbol_by_name",
        "name=_begin.kd",
    );
    let kernarg = first(&calls, "hsa_amd_memory_pool_allocate", "pool=kernarg");
    let slot = first(&calls, "hsa_queue_add_write_index_relaxed", "add=1 index=0");
    let doorbell = first(&calls, "hsa_signal_store_screlease", "doorbell ");
    assert_eq!(
        positions(&calls, "hsa_amd_memory_async_copy", "").len(),
        1,
        "one copy into the image, the RPC client's, at load: {calls:#?}"
    );
    for (a, b) in [
        (client_copy, kernel),
        (kernel, kernarg),
        (kernarg, slot),
        (slot, doorbell),
    ] {
        before(&calls, a, b);
    }
    let completion = last(&calls, "hsa_signal_create", "initial=1");
    before(&calls, kernarg, completion);
    before(&calls, completion, slot);
    let completion_handle = calls[completion].value("signal").unwrap().to_owned();

    // When the doorbell rings the packet is whole: its header (kernel dispatch, system-scope
    // fences, no barrier bit) and the fields.
    let packet = &calls[doorbell].details;
    assert!(
        packet.contains("index=0 header=0x1402 setup=1 workgroup=64x1x1 grid=128x1x1")
            && packet.contains("kernel=_begin.kd")
            && packet.contains(&format!("completion={completion_handle} "))
            && packet.ends_with(" started"),
        "{packet}"
    );
    // The kernel arguments: the 24-byte segment of `_begin(argc, argv, envp)`, none passed; the
    // metadata lists no hidden argument for it, so nothing follows.
    let kernarg_hex = packet.split("kernarg=").nth(1).unwrap();
    assert_eq!(kernarg_hex, format!("{} started", "00".repeat(24)));

    // The kernel "runs" for three polls of its completion signal, then ends at 0; nothing
    // more is waited for after that.
    let polls: Vec<(usize, &str)> = calls
        .iter()
        .enumerate()
        .filter(|(_, call)| {
            (call.function == "hsa_signal_load_scacquire"
                || call.function == "hsa_signal_wait_scacquire")
                && call
                    .details
                    .contains(&format!("signal={completion_handle} "))
        })
        .map(|(at, call)| (at, call.details.rsplit("value=").next().unwrap_or("")))
        .collect();
    let values: Vec<&str> = polls.iter().map(|(_, value)| *value).collect();
    assert!(
        values.len() >= 4 && values[..3] == ["1", "1", "1"] && values[3] == "0",
        "{values:?}"
    );
    before(&calls, doorbell, polls[0].0);
    let ended = polls[3].0;
    let signal_gone = first(
        &calls,
        "hsa_signal_destroy",
        &format!("signal={completion_handle}"),
    );
    let kernarg_ptr = calls[kernarg].value("ptr").unwrap().to_owned();
    // The allocator may hand out an address freed before (the client's staging buffer).
    let kernarg_freed = positions(
        &calls,
        "hsa_amd_memory_pool_free",
        &format!("ptr={kernarg_ptr}"),
    )
    .into_iter()
    .find(|&at| at > kernarg)
    .unwrap_or_else(|| panic!("the kernel arguments are never freed: {calls:#?}"));
    before(&calls, ended, signal_gone);
    before(&calls, ended, kernarg_freed);

    // Teardown: the queue, then the executable, then the runtime; nothing leaked.
    let queue_gone = first(&calls, "hsa_queue_destroy", "");
    let executable_gone = first(&calls, "hsa_executable_destroy", "");
    before(&calls, kernarg_freed, queue_gone);
    before(&calls, queue_gone, executable_gone);
    clean_teardown(&calls);
    assert_eq!(positions(&calls, "hsa_shut_down", "").len(), 1);
    assert_eq!(positions(&calls, "hsa_init", "").len(), 1);
}

/// The device time of a launch is its dispatch's start and end timestamps,
/// which the packet processor writes into the completion signal of a dispatch on a queue with
/// profiling enabled: profiling is turned on for each queue right after it is created, before
/// any dispatch; the timestamps are asked of the GPU agent once the completion signal said the
/// dispatch is done, while the signal is still alive; they are system timestamp ticks, turned
/// into a duration with `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`.
#[test]
fn device_time_comes_from_the_completion_signal() {
    let mut settings = TIMING.to_vec();
    settings.push((RUNNING_POLLS_ENV, "2"));
    let calls = run("timed", &settings);
    let queue = first(&calls, "hsa_queue_create", "agent=0xa200");
    let queue_handle = calls[queue].value("queue").unwrap();
    let enabled = positions(&calls, "hsa_amd_profiling_set_profiler_enabled", "");
    assert_eq!(enabled, [queue + 1], "{calls:#?}");
    assert_eq!(
        calls[queue + 1].details,
        format!("queue={queue_handle} enable=1")
    );
    let doorbells = positions(&calls, "hsa_signal_store_screlease", "doorbell ");
    assert_eq!(doorbells.len(), 2);
    before(&calls, enabled[0], doorbells[0]);
    let asked = positions(&calls, "hsa_amd_profiling_get_dispatch_time", "");
    assert_eq!(asked.len(), 2, "{calls:#?}");
    for (n, (&doorbell, &asked)) in doorbells.iter().zip(&asked).enumerate() {
        let completion = calls[doorbell]
            .details
            .split("completion=")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap();
        let ask = &calls[asked];
        let tick = |key: &str| ask.value(key).and_then(|value| value.parse::<u64>().ok());
        assert!(
            ask.status == "HSA_STATUS_SUCCESS"
                && ask
                    .details
                    .starts_with(&format!("agent=0xa200 signal={completion} "))
                && tick("end")
                    .zip(tick("start"))
                    .is_some_and(|(end, start)| end - start == 12345),
            "launch {n}: {ask:?}"
        );
        let done = (doorbell..calls.len())
            .find(|&at| {
                calls[at].function.starts_with("hsa_signal_")
                    && calls[at].details.contains(&format!("signal={completion} "))
                    && calls[at].details.ends_with(" value=0")
            })
            .unwrap_or_else(|| panic!("launch {n} never completed: {calls:#?}"));
        // The first destroy of that signal after its launch: the allocator may give the next
        // launch's signal the same address.
        let destroyed = (doorbell..calls.len())
            .find(|&at| calls[at].is("hsa_signal_destroy", &format!("signal={completion}")))
            .unwrap_or_else(|| panic!("launch {n}'s signal never destroyed: {calls:#?}"));
        before(&calls, done, asked);
        before(&calls, asked, destroyed);
    }
    clean_teardown(&calls);
}

/// A benchmark's launches on HSA, as the worker makes them for `cargo gpurun bench`: each
/// dispatch of a `#[gpurun::bench]` kernel carries its iteration count as the first 8 bytes of
/// its kernarg segment and its launch's block size in the packet, and each launch's device time
/// is its dispatch's timestamps, asked once the dispatch is done (as for any launch).
#[test]
fn each_benchmark_launch_carries_its_iteration_count_and_is_timed() {
    let (calls, printed) = run_with_output("bench", &TIMING);
    let launched: Vec<(&str, &str)> = printed
        .lines()
        .filter_map(|line| line.strip_prefix("launched "))
        .filter_map(|line| line.split_once(' '))
        .collect();
    let doorbells = dispatched(&calls);
    assert_eq!(doorbells.len(), launched.len(), "{calls:#?}");
    let counts = BENCH_ITERATIONS.iter().cycle();
    for ((packet, (kernel, block)), iterations) in doorbells.iter().zip(&launched).zip(counts) {
        let kernarg = packet.split("kernarg=").nth(1).unwrap_or_default();
        assert!(
            kernarg.starts_with(&hex(&iterations.to_le_bytes())),
            "{kernel} with {iterations} iterations: {packet}"
        );
        assert!(
            packet.contains(&format!(" workgroup={block} ")),
            "{kernel}: {packet}"
        );
    }
    let asked = positions(&calls, "hsa_amd_profiling_get_dispatch_time", "");
    assert_eq!(asked.len(), launched.len(), "{calls:#?}");
    clean_teardown(&calls);
}

/// Timestamps the runtime will not give cost the measurement, not the launch.
#[test]
fn missing_timestamps_only_lose_the_time() {
    let calls = run(
        "untimed",
        &[(
            FAIL_ENV,
            "hsa_amd_profiling_get_dispatch_time=HSA_STATUS_ERROR_NOT_INITIALIZED",
        )],
    );
    assert_eq!(dispatched(&calls).len(), 2);
    clean_teardown(&calls);
}

/// A queue whose timestamps cannot be turned on fails the load with the runtime's error; the
/// queue is destroyed again and nothing leaks.
#[test]
fn a_queue_without_profiling_fails_the_load() {
    let calls = run(
        "profiling_fails",
        &[(
            FAIL_ENV,
            "hsa_amd_profiling_set_profiler_enabled=HSA_STATUS_ERROR_NOT_INITIALIZED",
        )],
    );
    let enabled = first(&calls, "hsa_amd_profiling_set_profiler_enabled", "");
    let destroyed = first(&calls, "hsa_queue_destroy", "");
    before(&calls, enabled, destroyed);
    assert!(dispatched(&calls).is_empty());
    clean_teardown(&calls);
}

/// The doorbell's packets (one per launch), in order.
fn dispatched(calls: &[Call]) -> Vec<&str> {
    positions(calls, "hsa_signal_store_screlease", "doorbell ")
        .into_iter()
        .map(|at| calls[at].details.as_str())
        .collect()
}

/// Real v4 and v5 code objects get their hidden arguments where their metadata puts them (v4:
/// global offsets stay 0 at 16..40; v5: block counts at 16, group sizes at 28, grid dimensions at
/// 80, the queue at 216). Their stacks are dynamic: the v4 kernel's static 16,400 bytes already
/// count LLVM's assumed 16 KiB of stack; the v5 kernel gets 16 KiB beyond its static 16 bytes,
/// or what `--stack-size` asks for up to what a wave64 lane can have.
#[test]
fn hidden_arguments_and_stacks_follow_the_code_object() {
    let calls = run("hidden_args", &[]);
    let packets = dispatched(&calls);
    assert_eq!(packets.len(), 3, "{calls:#?}");
    let kernarg = |packet: &str| packet.split("kernarg=").nth(1).unwrap().to_owned();
    let explicit = "15000000000000000070000000000000";
    // v4: 72 bytes; nothing hidden is non-zero.
    assert_eq!(
        kernarg(packets[0]),
        format!("{explicit}{}", "00".repeat(56) + " started"),
        "{}",
        packets[0]
    );
    assert!(packets[0].contains(" private=16400 "), "{}", packets[0]);
    // v5: block counts 2,1,1; group sizes 64,1,1; grid dims 1; the queue pointer.
    let v5 = kernarg(packets[1]);
    assert!(
        v5.starts_with(&format!(
            "{explicit}020000000100000001000000400001000100000000000000"
        )),
        "{v5}"
    );
    let byte = |at: usize| &v5[2 * at..2 * at + 2];
    assert_eq!(byte(80), "01", "grid dims: {v5}");
    // The queue the second launch went to: the last one created before it.
    let second = positions(&calls, "hsa_signal_store_screlease", "doorbell ")[1];
    let queue = positions(&calls, "hsa_queue_create", "agent=0xa200")
        .into_iter()
        .rfind(|&at| at < second)
        .unwrap();
    let queue_address = u64::from_str_radix(
        calls[queue]
            .value("queue")
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap();
    assert_eq!(
        &v5[2 * 216..2 * 224],
        queue_address
            .to_le_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>(),
        "queue pointer: {v5}"
    );
    assert!(packets[1].contains(" private=16400 "), "{}", packets[1]);
    assert!(packets[2].contains(" private=131056 "), "{}", packets[2]);
    clean_teardown(&calls);
}

/// An image of an older device runtime, whose AMD kernels read their shape from the
/// `__gpurun_launch_shape` global, is refused before the runtime sees it.
#[test]
fn an_image_with_the_retired_launch_shape_global_is_refused() {
    let calls = run("retired_shape", &[]);
    assert!(positions(&calls, "hsa_code_object_reader_create_from_memory", "").is_empty());
    clean_teardown(&calls);
}

/// A code object the runtime refuses: a clear error naming the call and status; the
/// executable and reader are released once each, no queue is created, nothing is leaked.
#[test]
fn failed_load_releases_everything_once() {
    let calls = run(
        "load_fails",
        &[(
            FAIL_ENV,
            "hsa_executable_load_agent_code_object=HSA_STATUS_ERROR_INVALID_CODE_OBJECT",
        )],
    );
    let load = first(&calls, "hsa_executable_load_agent_code_object", "");
    assert_eq!(calls[load].status, "HSA_STATUS_ERROR_INVALID_CODE_OBJECT");
    assert!(positions(&calls, "hsa_executable_freeze", "").is_empty());
    assert!(positions(&calls, "hsa_queue_create", "").is_empty());
    let destroyed = positions(&calls, "hsa_executable_destroy", "");
    assert_eq!(destroyed.len(), 1, "{calls:#?}");
    before(&calls, load, destroyed[0]);
    assert_eq!(
        positions(&calls, "hsa_code_object_reader_destroy", "").len(),
        1
    );
    clean_teardown(&calls);
}

/// Nothing a kernel that may still run can touch is released after its (single) dispatch, and
/// the runtime is not shut down under it.
#[track_caller]
fn nothing_released_after_the_dispatch(calls: &[Call]) {
    let doorbell = first(calls, "hsa_signal_store_screlease", "doorbell ");
    assert_eq!(
        positions(calls, "hsa_signal_store_screlease", "doorbell ").len(),
        1,
        "the refused second launch dispatched nothing"
    );
    for release in [
        "hsa_queue_destroy",
        "hsa_executable_destroy",
        "hsa_amd_memory_pool_free",
        "hsa_signal_destroy",
        "hsa_shut_down",
        // Not a release, but only a completed dispatch has timestamps to ask for.
        "hsa_amd_profiling_get_dispatch_time",
    ] {
        let after: Vec<&Call> = positions(calls, release, "")
            .into_iter()
            .filter(|&at| at > doorbell)
            .map(|at| &calls[at])
            .collect();
        assert!(after.is_empty(), "{release} after the dispatch: {after:#?}");
    }
}

/// A kernel that outlives its deadline: the launch ends as timed out within it, the module
/// refuses the next launch, and nothing the kernel may still touch is released (its queue,
/// completion signal, kernel arguments, RPC buffer and code stay alive); the runtime is not
/// shut down under it.
#[test]
fn timed_out_kernel_keeps_its_memory() {
    let calls = run("timeout", &[(RUNNING_POLLS_ENV, "1000000000000")]);
    let doorbell = first(&calls, "hsa_signal_store_screlease", "doorbell ");
    let completion = last(&calls, "hsa_signal_create", "initial=1");
    let completion_handle = calls[completion].value("signal").unwrap().to_owned();
    // The kernel was watched until the deadline.
    let watched = positions(&calls, "hsa_signal_load_scacquire", &completion_handle);
    assert!(
        watched.last().is_some_and(|&at| at > doorbell),
        "{calls:#?}"
    );
    nothing_released_after_the_dispatch(&calls);
}

/// A memory fault reported by the runtime's event handler while the kernel runs: the launch
/// ends as faulted with the address and reason, the module refuses the next launch naming
/// the fault, and nothing is released under the (possibly still running) kernel.
#[test]
fn faulted_kernel_ends_the_launch_and_keeps_its_memory() {
    let calls = run(
        "fault",
        &[
            (RUNNING_POLLS_ENV, "1000000000000"),
            (FAULT_ENV, "0xdead000"),
        ],
    );
    let handler = first(
        &calls,
        "hsa_amd_register_system_event_handler",
        "handler=true",
    );
    let doorbell = first(&calls, "hsa_signal_store_screlease", "doorbell ");
    let fault = first(&calls, "fake", "memory fault event address=0xdead000");
    before(&calls, handler, doorbell);
    before(&calls, doorbell, fault);
    assert_eq!(
        calls[fault].status, "HSA_STATUS_SUCCESS",
        "the handler claims the fault"
    );
    nothing_released_after_the_dispatch(&calls);
}

/// A queue error reported through the queue's callback while the kernel runs: the launch ends
/// as faulted naming the status, the module refuses the next launch, and nothing is released
/// under the kernel.
#[test]
fn queue_error_ends_the_launch_and_keeps_its_memory() {
    let calls = run(
        "queue_error",
        &[
            (RUNNING_POLLS_ENV, "1000000000000"),
            (QUEUE_ERROR_ENV, "HSA_STATUS_ERROR_EXCEPTION"),
        ],
    );
    let queue = first(&calls, "hsa_queue_create", "agent=0xa200");
    let queue_handle = calls[queue].value("queue").unwrap().to_owned();
    let doorbell = first(&calls, "hsa_signal_store_screlease", "doorbell ");
    let error = first(
        &calls,
        "fake",
        &format!("queue error queue={queue_handle} status=HSA_STATUS_ERROR_EXCEPTION"),
    );
    before(&calls, doorbell, error);
    nothing_released_after_the_dispatch(&calls);
}

/// ROCr's memory error event (memory the GPU still holds could not be freed) aborts the process
/// unless a handler claims it: the backend claims it as a fault. The launch whose kernel
/// arguments could not be freed ends faulted with it, and no later launch of the process (in
/// any slot) is dispatched.
#[test]
fn a_memory_error_is_a_fault_not_an_abort() {
    let calls = run(
        "memory_error",
        &[(RUNNING_POLLS_ENV, "2"), (MEMORY_ERROR_ENV, "kernarg")],
    );
    let event = first(&calls, "fake", "memory error event");
    assert_eq!(
        calls[event].status, "HSA_STATUS_SUCCESS",
        "the handler claims the memory error"
    );
    assert_eq!(
        positions(&calls, "hsa_signal_store_screlease", "doorbell ").len(),
        1,
        "the launch after the error dispatched nothing: {calls:#?}"
    );
}

/// What a slot costs on an MI300X-sized GPU (304 compute units x 32 waves): each slot's RPC
/// buffer fits what it launches (a few ports for one-block tests), not the 9,728 wavefronts
/// the GPU can hold (40 MB at 64 lanes a port), and each slot has its own queue. The
/// buffer grows for a launch that fills the GPU, and the smaller one is freed. Prints the RPC
/// memory per slot and the load-and-launch time of each kind of slot, measured in this run.
#[test]
fn rpc_buffers_fit_the_launch_and_each_slot_has_a_queue() {
    let (calls, output) = run_with_output(
        "slots",
        &[(COMPUTE_UNITS_ENV, "304"), (WAVES_PER_CU_ENV, "32")],
    );
    let client_size = 2096;
    let layout = |ports: u32| {
        gpurun_rpc::Layout::for_client_symbol_size(client_size, ports, 64)
            .unwrap()
            .allocation_size()
    };
    // The sample's largest test is 4 blocks of 64x2 threads: 8 wavefronts, 8 ports.
    let slot_buffer = layout(8);
    let whole_gpu_buffer = layout(304 * 32);
    assert_eq!(whole_gpu_buffer, 40_079_424);
    let fine: Vec<(usize, String)> = positions(&calls, "hsa_amd_memory_pool_allocate", "pool=fine")
        .into_iter()
        .map(|at| {
            let bytes = calls[at].value("bytes").unwrap().parse().unwrap();
            (bytes, calls[at].value("ptr").unwrap().to_owned())
        })
        .collect();
    let buffers: Vec<&(usize, String)> = fine
        .iter()
        .filter(|(bytes, _)| *bytes == slot_buffer || *bytes == whole_gpu_buffer)
        .collect();
    let small = buffers
        .iter()
        .filter(|(bytes, _)| *bytes == slot_buffer)
        .count();
    let large = buffers
        .iter()
        .filter(|(bytes, _)| *bytes == whole_gpu_buffer)
        .count();
    assert_eq!(
        (small, large),
        (SLOTS + 1, 1),
        "one small buffer per slot, one grown for the whole-GPU launch: {fine:?}"
    );
    assert!(
        fine.iter().all(|(bytes, _)| *bytes <= whole_gpu_buffer),
        "{fine:?}"
    );
    // The whole-GPU slot's first buffer is freed when it grows, before the launch.
    let grown_slot_first = &buffers[SLOTS].1;
    let grown = positions(
        &calls,
        "hsa_amd_memory_pool_allocate",
        &format!("bytes={whole_gpu_buffer}"),
    )[0];
    let freed = positions(
        &calls,
        "hsa_amd_memory_pool_free",
        &format!("ptr={grown_slot_first}"),
    )
    .into_iter()
    .find(|&at| at > grown)
    .expect("the smaller buffer is freed");
    let doorbells = positions(&calls, "hsa_signal_store_screlease", "doorbell ");
    assert_eq!(doorbells.len(), SLOTS + 1);
    before(&calls, freed, doorbells[SLOTS]);
    // Seven modules, seven queues.
    assert_eq!(positions(&calls, "hsa_queue_create", "").len(), SLOTS + 1);
    clean_teardown(&calls);
    println!(
        "measured on the fake runtime (MI300X-sized): RPC memory per slot {slot_buffer} bytes for \
         one-block tests, {whole_gpu_buffer} bytes sized for the whole GPU ({:.0}x)",
        whole_gpu_buffer as f64 / slot_buffer as f64,
    );
    for line in output.lines().filter(|line| line.starts_with("measured:")) {
        println!("{line}");
    }
}

/// A host-driven buffer is the GPU's coarse-grained memory with access for the GPU
/// agent, zeroed with the runtime's fill and copied through fine-grained staging memory, freed
/// before the runtime goes; a launch's dynamic shared memory is added to the kernel's static
/// group segment in the dispatch packet, up to the GPU's group-segment pool.
#[test]
fn buffers_are_coarse_grained_and_shared_memory_is_in_the_packet() {
    let calls = run("buffers_and_shared", &[]);
    // 10 bytes, rounded up to whole words for the fill.
    let alloc = first(
        &calls,
        "hsa_amd_memory_pool_allocate",
        "pool=coarse bytes=12",
    );
    let ptr = calls[alloc].value("ptr").unwrap().to_owned();
    let access = first(
        &calls,
        "hsa_amd_agents_allow_access",
        &format!("agents=1 first=0xa200 ptr={ptr}"),
    );
    let fill = first(
        &calls,
        "hsa_amd_memory_fill",
        "value=0x0 count=3 ptr=coarse+0",
    );
    before(&calls, alloc, access);
    before(&calls, access, fill);
    let write = first(
        &calls,
        "hsa_amd_memory_async_copy",
        "bytes=8 deps=0 dst=coarse+2",
    );
    assert!(
        calls[write].details.contains("src=fine+0"),
        "{:?}",
        calls[write]
    );
    let read = first(
        &calls,
        "hsa_amd_memory_async_copy",
        "bytes=10 deps=0 dst=fine+0 src=coarse+0",
    );
    let doorbells = positions(&calls, "hsa_signal_store_screlease", "doorbell ");
    assert_eq!(
        doorbells.len(),
        2,
        "the launch over the limit is refused: {calls:#?}"
    );
    before(&calls, fill, write);
    before(&calls, write, doorbells[0]);
    before(&calls, doorbells[1], read);
    for (&doorbell, group) in doorbells.iter().zip(["group=4108 ", "group=65536 "]) {
        assert!(
            calls[doorbell].details.contains(group),
            "{:?}",
            calls[doorbell]
        );
    }
    let freed = positions(&calls, "hsa_amd_memory_pool_free", &format!("ptr={ptr}"))
        .into_iter()
        .find(|&at| at > read)
        .unwrap_or_else(|| panic!("the buffer is never freed: {calls:#?}"));
    before(&calls, freed, first(&calls, "hsa_queue_destroy", ""));
    clean_teardown(&calls);
}

/// A worker under a real test load: a long test, BUSY_SLOTS slots running BUSY_LAUNCHES short
/// tests each beside it (more than a queue of 64 packets holds), and a test whose queue fails.
/// Each slot has its own queue: nothing waits for the long kernel (it ends once every other
/// kernel has, not at its 15 s limit), the failed queue ends only its own test, the next test
/// of that slot gets a new queue, and no packet goes to the failed queue after its error.
#[test]
fn slots_under_load_neither_wait_for_each_other_nor_share_a_fault() {
    let others = BUSY_SLOTS * BUSY_LAUNCHES + 1;
    let calls = run(
        "busy",
        &[
            (RUNNING_POLLS_ENV, "2"),
            (LONG_KERNEL_ENV, &format!("{SLOW},15,{others}")),
            (
                QUEUE_ERROR_ENV,
                &format!("HSA_STATUS_ERROR_EXCEPTION@{BOOM}"),
            ),
        ],
    );
    let ended = first(&calls, "fake", "long kernel ended");
    assert!(
        calls[ended]
            .details
            .ends_with(&format!("after {others} other kernels")),
        "a slot waited for the long kernel: {:?}",
        calls[ended]
    );
    // One queue per module: the long one, the failing one and its successor, and the busy ones.
    let queues = positions(&calls, "hsa_queue_create", "agent=0xa200");
    assert_eq!(queues.len(), BUSY_SLOTS + 3, "{calls:#?}");
    let error = first(&calls, "fake", "queue error queue=");
    let failed = calls[error].value("queue").unwrap().to_owned();
    let after_error: Vec<&Call> = positions(
        &calls,
        "hsa_signal_store_screlease",
        &format!("doorbell queue={failed} "),
    )
    .into_iter()
    .filter(|&at| at > error)
    .map(|at| &calls[at])
    .collect();
    assert!(
        after_error.is_empty(),
        "packets for the failed queue: {after_error:#?}"
    );
    assert!(
        positions(&calls, "hsa_queue_destroy", &format!("queue={failed}")).is_empty(),
        "the failed queue is kept with its broken module"
    );
}

/// A test whose kernel runs 50 ms without a word over RPC is waited for in waits that sleep in
/// the kernel driver (ROCr's waits sleep only in whole milliseconds of what is left of their
/// timeout, and spin below one: a 1 ms wait is all spin), not in waits that spin until their
/// timeout. Prints the host CPU time per idle second, as the fake's model of ROCr's waits
/// costs it.
#[test]
fn an_idle_kernel_is_waited_for_in_blocked_waits() {
    let (calls, output) = run_with_output("idle", &[(LONG_KERNEL_ENV, &format!("{SLOW},0.05"))]);
    for line in output.lines().filter(|line| line.starts_with("measured:")) {
        println!("{line}");
    }
    let doorbell = first(&calls, "hsa_signal_store_screlease", "doorbell ");
    let waits: Vec<&Call> = calls[doorbell..]
        .iter()
        .filter(|call| {
            call.function == "hsa_signal_wait_scacquire"
                || call.function == "hsa_amd_signal_wait_any"
        })
        .collect();
    assert!(
        waits.iter().any(|wait| wait.value("blocked") != Some("0")),
        "no wait slept: {waits:#?}"
    );
    let spun: Vec<&&Call> = waits
        .iter()
        .filter(|wait| wait.value("met") == Some("false") && wait.value("blocked") == Some("0"))
        .collect();
    assert!(
        spun.is_empty(),
        "{} of {} waits spun until their timeout: {:#?}",
        spun.len(),
        waits.len(),
        &spun[..spun.len().min(3)]
    );
    // The quiet waits also wake when the device opens an RPC request: the RPC client's doorbell
    // counts in an interrupt signal's value and raises that signal's interrupt, and the waits
    // are on that signal (value not 0) beside the completion signal (value below 1).
    let client = first(
        &calls,
        "hsa_amd_memory_async_copy",
        "dst=__llvm_rpc_client ",
    );
    assert_eq!(
        calls[client].value("interrupt"),
        Some("true"),
        "{:?}",
        calls[client]
    );
    let doorbell_signal = calls[client].value("doorbell").unwrap();
    let completion = last(&calls, "hsa_signal_create", "initial=1");
    let completion_signal = calls[completion].value("signal").unwrap();
    let expected = format!("signals={doorbell_signal}/1/0,{completion_signal}/2/1 ");
    assert!(
        waits
            .iter()
            .any(|wait| wait.function == "hsa_amd_signal_wait_any"
                && wait.details.starts_with(&expected)),
        "no wait on {expected}: {waits:#?}"
    );
    clean_teardown(&calls);
}

/// On a server with two sockets, host memory for the GPU (kernel arguments, the RPC buffer)
/// comes from the pools of the CPU agent the runtime names as the GPU's nearest, not from the
/// first CPU agent.
#[test]
fn host_memory_comes_from_the_gpus_nearest_cpu() {
    let calls = run("launch", &[(CPUS_ENV, "2")]);
    let asked = first(
        &calls,
        "hsa_agent_get_info",
        "agent=0xa200 attribute=0xa113",
    );
    let second = first(&calls, "hsa_amd_agent_iterate_memory_pools", "agent=0xa101");
    before(&calls, asked, second);
    assert!(
        positions(&calls, "hsa_amd_agent_iterate_memory_pools", "agent=0xa100").is_empty(),
        "the first socket's pools were used: {calls:#?}"
    );
    clean_teardown(&calls);
}
