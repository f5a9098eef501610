//! The HSA backend against a fake runtime (crates/gpurun-fake-driver, named by
//! `$GPURUN_HSA_LIB`): which runtime calls it makes, with which arguments, in which order
//! (issue 14). No GPU needed; the fake records every call to a log file and runs nothing.
//!
//! Each scenario runs in a child process (this test binary again, `fake_runtime_child`): the
//! backend loads the runtime once per process and `hsa_init`/`hsa_shut_down` count per process.
//!
//! The code object is the committed gfx90a sample of gpurun-image's tests, with one dynamic
//! symbol (an 8-byte init-array entry) renamed and resized to stand for the 24-byte
//! `__gpurun_launch_shape` global, so the launch-shape write (issue 14 item 2) is exercised.

#![cfg(target_os = "linux")]

mod common;

use common::{fake_driver_library, first, positions, read_calls, Call};
use gpurun_hal::handlers::Collect;
use gpurun_hal::hsa::HsaBackend;
use gpurun_hal::{Backend, BackendError, LaunchEnd, LaunchShape, LoadOptions};
use gpurun_image::Image;
use object::{Object, ObjectSection};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Which scenario the child runs.
const SCENARIO_ENV: &str = "GPURUN_FAKE_HSA_SCENARIO";
/// The fake's log file and settings (see gpurun-fake-driver's `hsa` module).
const LOG_ENV: &str = "GPURUN_FAKE_DRIVER_LOG";
const FAIL_ENV: &str = "GPURUN_FAKE_HSA_FAIL";
const RUNNING_POLLS_ENV: &str = "GPURUN_FAKE_HSA_RUNNING_POLLS";
const FAULT_ENV: &str = "GPURUN_FAKE_HSA_FAULT";
const QUEUE_ERROR_ENV: &str = "GPURUN_FAKE_HSA_QUEUE_ERROR";

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../gpurun-image/tests/data/sample-gfx90a.elf"
);
/// The sample's symbol that is renamed to `__gpurun_launch_shape`.
const STAND_IN: &str = "__init_array_object_sample_init_hook_101";
const KERNEL: &str = "_begin";
const SHAPE: LaunchShape = LaunchShape {
    threads: [64, 1, 1],
    blocks: [2, 1, 1],
};
const LIMIT: Option<Duration> = Some(Duration::from_secs(20));

/// The sample code object with [`STAND_IN`] renamed in `.dynstr` and resized in `.dynsym` to be
/// the launch-shape global.
fn code_object() -> Vec<u8> {
    let mut bytes = std::fs::read(SAMPLE).expect("the committed gfx90a sample");
    let shape_name = gpurun_abi::symbols::LAUNCH_SHAPE;
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
            let size = gpurun_abi::shape::BYTES as u64;
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
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-hsa");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join(format!("{scenario}-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fake_runtime_child", "--ignored", "--nocapture"])
        .env("GPURUN_HSA_LIB", fake_driver_library())
        .env(LOG_ENV, &log)
        .env(SCENARIO_ENV, scenario)
        .env_remove(FAIL_ENV)
        .env_remove(RUNNING_POLLS_ENV)
        .env_remove(FAULT_ENV)
        .env_remove(QUEUE_ERROR_ENV)
        .envs(settings.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("scenario done"),
        "{scenario}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let calls = read_calls(&log);
    assert!(
        calls
            .first()
            .is_some_and(|call| call.function == "hsa_init"),
        "{scenario}: the runtime was not used or hsa_init was not first: {calls:#?}"
    );
    calls
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
            let again = module
                .launch(KERNEL, SHAPE, &[], LIMIT, &mut sink)
                .expect_err("a faulted module refuses the next launch");
            assert!(again.to_string().contains(expected), "{again}");
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

/// Issue 14: opening, loading, one launch and the teardown, in the order the HSA API needs.
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

    // The queue, on the GPU, multi-producer, no segment limits; then the RPC client installed.
    let queue = first(
        &calls,
        "hsa_queue_create",
        "agent=0xa200 size=64 type=0 private=0xffffffff group=0xffffffff",
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

    // The launch: shape words, kernel lookup, kernel arguments, signal, slot, doorbell.
    let shape_words = gpurun_abi::shape::to_bytes(SHAPE.threads, SHAPE.blocks);
    let shape_hex: String = shape_words.iter().map(|b| format!("{b:02x}")).collect();
    let shape_copy = first(
        &calls,
        "hsa_amd_memory_async_copy",
        &format!("dst=__gpurun_launch_shape src=fine+0 data={shape_hex}"),
    );
    let kernel = first(
        &calls,
        "hsa_executable_get_symbol_by_name",
        "name=_begin.kd",
    );
    let kernarg = first(&calls, "hsa_amd_memory_pool_allocate", "pool=kernarg");
    let slot = first(&calls, "hsa_queue_add_write_index_relaxed", "add=1 index=0");
    let doorbell = first(&calls, "hsa_signal_store_screlease", "doorbell ");
    for (a, b) in [
        (client_copy, shape_copy),
        (shape_copy, kernel),
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

    // When the doorbell rings the packet is whole: its header (barrier, kernel dispatch,
    // system-scope fences) and the fields.
    let packet = &calls[doorbell].details;
    assert!(
        packet.contains("index=0 header=0x1502 setup=1 workgroup=64x1x1 grid=128x1x1")
            && packet.contains("kernel=_begin.kd")
            && packet.contains(&format!("completion={completion_handle} "))
            && packet.ends_with(" started"),
        "{packet}"
    );
    // The kernel arguments: no explicit ones, so the implicit block first: block counts 2,1,1
    // and workgroup sizes 64,1,1.
    let kernarg_hex = packet.split("kernarg=").nth(1).unwrap();
    assert!(
        kernarg_hex.starts_with("020000000100000001000000400001000100"),
        "{kernarg_hex}"
    );

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
    let kernarg_freed = first(
        &calls,
        "hsa_amd_memory_pool_free",
        &format!("ptr={kernarg_ptr}"),
    );
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
