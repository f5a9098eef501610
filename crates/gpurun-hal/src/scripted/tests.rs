//! The shared module and serve loop, driven by scripted devices: every way a launch ends, the
//! exit/abort precedence, deadlines, dead conversations, and what a broken module refuses.

use super::*;
use crate::handlers::Collect;
use crate::{LaunchEnd, LaunchShape};
use std::time::{Duration, Instant};

fn image(spec: &ImageSpec) -> Image {
    let text = spec.ptx().expect("descriptors encode");
    Image::parse(text.into_bytes(), None).expect("the scripted image parses")
}

/// An image with kernel `k` and an RPC client, and a backend where `k` plays `steps`.
fn setup(steps: Vec<Step>) -> (ScriptedBackend, Image) {
    let spec = ImageSpec {
        kernels: vec!["k".into()],
        rpc_client: true,
        ..ImageSpec::default()
    };
    let script = Script {
        kernels: [("k".to_owned(), steps)].into_iter().collect(),
        max_block_threads: [("k".to_owned(), 512)].into_iter().collect(),
        ..Script::default()
    };
    (ScriptedBackend::new(script), image(&spec))
}

/// Launches `k` once with `timeout`; returns the end, what the device sent, and whether the
/// module takes another launch.
fn run(
    steps: Vec<Step>,
    timeout: Option<Duration>,
) -> (Result<LaunchEnd, BackendError>, Collect, bool) {
    let (backend, image) = setup(steps);
    let mut device = backend.open(0).expect("scripted device");
    let mut module = device.load(&image, &LoadOptions::default()).expect("loads");
    let mut sink = Collect::default();
    let end = module.launch("k", LaunchShape::SINGLE, &[], timeout, &mut sink);
    // A second launch of a kernel that completes at once.
    let reusable = module
        .launch(
            "k",
            LaunchShape::SINGLE,
            &[],
            Some(Duration::from_millis(1)),
            &mut Collect::default(),
        )
        .is_ok();
    (end, sink, reusable)
}

fn print(text: &str) -> Step {
    Step::Print(text.into())
}

#[test]
fn completed_launch_delivers_output_in_order_and_the_module_stays_usable() {
    // A kernel that completes at once is reused in `run`, so keep this one short.
    let (end, sink, _) = run(
        vec![
            print("one\n"),
            Step::Eprint("two\n".into()),
            print(&"x".repeat(300)),
        ],
        None,
    );
    assert_eq!(end.unwrap(), LaunchEnd::Completed);
    assert_eq!(
        sink.stdout,
        format!("one\n{}", "x".repeat(300)).into_bytes()
    );
    assert_eq!(sink.stderr, b"two\n");
    let (backend, image) = setup(vec![print("again\n")]);
    let mut device = backend.open(0).unwrap();
    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
    for _ in 0..3 {
        let mut sink = Collect::default();
        let end = module.launch("k", LaunchShape::SINGLE, &[], None, &mut sink);
        assert_eq!(end.unwrap(), LaunchEnd::Completed);
        assert_eq!(sink.stdout, b"again\n");
    }
}

#[test]
fn a_panic_is_reported_and_the_launch_completes() {
    let (end, sink, reusable) = run(
        vec![Step::Panic {
            message: "index out of bounds".into(),
            file: "src/lib.rs".into(),
            line: 7,
        }],
        None,
    );
    assert_eq!(end.unwrap(), LaunchEnd::Completed);
    assert_eq!(sink.panics.len(), 1);
    assert_eq!(sink.panics[0].message, "index out of bounds");
    assert_eq!(
        (sink.panics[0].file.as_str(), sink.panics[0].line),
        ("src/lib.rs", 7)
    );
    assert!(reusable);
}

#[test]
fn exit_and_abort_end_the_launch_with_the_devices_word() {
    let (end, _, reusable) = run(vec![print("bye\n"), Step::Exit(3)], None);
    assert_eq!(end.unwrap(), LaunchEnd::Exited(3));
    assert!(reusable, "every thread ended, so the module is still sound");
    let (end, _, _) = run(vec![Step::Abort], None);
    assert_eq!(end.unwrap(), LaunchEnd::Aborted);
}

#[test]
fn the_first_exit_or_abort_decides_as_in_llvms_loader() {
    let exit_first = vec![
        Step::Thread(vec![Step::Exit(4)]),
        Step::SleepMs(100),
        Step::Abort,
    ];
    assert_eq!(run(exit_first, None).0.unwrap(), LaunchEnd::Exited(4));
    let abort_first = vec![
        Step::Thread(vec![Step::Abort]),
        Step::SleepMs(100),
        Step::Exit(4),
    ];
    assert_eq!(run(abort_first, None).0.unwrap(), LaunchEnd::Aborted);
    // An exit served before a fault is what the program asked for.
    let exit_then_fault = vec![Step::Exit(5)];
    assert_eq!(run(exit_then_fault, None).0.unwrap(), LaunchEnd::Exited(5));
}

#[test]
fn a_fault_ends_the_launch_with_its_text_and_breaks_the_module() {
    let (end, sink, reusable) = run(
        vec![
            print("before\n"),
            Step::Fault("CUDA_ERROR_ILLEGAL_ADDRESS".into()),
        ],
        None,
    );
    assert_eq!(
        end.unwrap(),
        LaunchEnd::Faulted("CUDA_ERROR_ILLEGAL_ADDRESS".into())
    );
    assert_eq!(sink.stdout, b"before\n", "output before the fault is kept");
    assert!(!reusable);
}

#[test]
fn a_hung_kernel_times_out_and_breaks_the_module() {
    let (end, _, reusable) = run(vec![Step::Hang], Some(Duration::from_millis(50)));
    assert_eq!(end.unwrap(), LaunchEnd::TimedOut(Duration::from_millis(50)));
    assert!(!reusable);
}

#[test]
fn threads_still_running_after_an_exit_get_the_grace_period() {
    let started = Instant::now();
    let (end, sink, reusable) = run(
        vec![
            Step::Thread(vec![Step::SleepMs(50), print("late\n"), Step::Hang]),
            Step::Exit(0),
        ],
        None,
    );
    assert_eq!(end.unwrap(), LaunchEnd::Exited(0));
    assert_eq!(
        sink.stdout, b"late\n",
        "output in the grace period is served"
    );
    assert!(started.elapsed() >= crate::launch_loop::EXIT_GRACE);
    assert!(!reusable);
}

#[test]
fn a_message_cut_off_by_a_fault_ends_as_the_fault_not_a_hang() {
    let (end, _, _) = run(
        vec![
            Step::StallMidMessage(1 << 20),
            Step::SleepMs(30),
            Step::Fault("trap".into()),
        ],
        None,
    );
    assert_eq!(end.unwrap(), LaunchEnd::Faulted("trap".into()));
}

#[test]
fn a_message_cut_off_by_the_kernels_end_is_an_error() {
    let (end, _, reusable) = run(vec![Step::StallMidMessage(1 << 20)], None);
    let error = end.unwrap_err().to_string();
    assert!(error.contains("middle of an RPC message"), "{error}");
    assert!(!reusable);
}

#[test]
fn a_message_cut_off_in_a_running_kernel_ends_at_the_timeout() {
    let (end, _, _) = run(
        vec![Step::StallMidMessage(1 << 20), Step::Hang],
        Some(Duration::from_millis(100)),
    );
    assert_eq!(
        end.unwrap(),
        LaunchEnd::TimedOut(Duration::from_millis(100))
    );
}

#[test]
fn rpc_malloc_and_free_are_served() {
    let (end, _, reusable) = run(
        vec![Step::MallocFree(4096), Step::MallocFree(u64::MAX)],
        None,
    );
    assert_eq!(end.unwrap(), LaunchEnd::Completed);
    assert!(reusable);
}

#[test]
fn bad_launches_are_errors_before_anything_runs() {
    let (backend, image) = setup(vec![Step::Hang]);
    let mut device = backend.open(0).unwrap();
    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
    let mut sink = Collect::default();
    let zero = LaunchShape::grid([1, 1, 1], [0, 1, 1]);
    let too_big = LaunchShape::grid([1, 1, 1], [1025, 1, 1]);
    // Within every device's limit but over this kernel's (its registers, on CUDA).
    let over_kernel = LaunchShape::grid([1, 1, 1], [64, 16, 1]);
    let error = module
        .launch("k", over_kernel, &[], None, &mut sink)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("at most 512 threads per block") && error.contains("asks for 1024"),
        "{error}"
    );
    for shape in [zero, too_big] {
        assert!(matches!(
            module.launch("k", shape, &[], None, &mut sink),
            Err(BackendError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        module.launch("nope", LaunchShape::SINGLE, &[], None, &mut sink),
        Err(BackendError::MissingSymbol { .. })
    ));
    assert!(backend.open(1).is_err());
}

#[test]
fn an_image_with_tests_but_no_rpc_client_does_not_load() {
    let spec = ImageSpec {
        tests: vec![test("adds")],
        rpc_client: false,
        ..ImageSpec::default()
    };
    let backend = ScriptedBackend::new(Script::default());
    let mut device = backend.open(0).unwrap();
    let loaded = device
        .load(&image(&spec), &LoadOptions::default())
        .map(drop);
    let error = loaded.expect_err("an image that cannot report its tests was loaded");
    assert!(
        error.to_string().contains("no `__llvm_rpc_client`"),
        "{error}"
    );
}

#[test]
fn scripts_round_trip_through_json() {
    let script = Script {
        kernels: [(
            "k".to_owned(),
            vec![
                print("a"),
                Step::Thread(vec![Step::Exit(1)]),
                Step::StallMidMessage(9),
            ],
        )]
        .into_iter()
        .collect(),
        devices: 2,
        ..Script::default()
    };
    let text = serde_json::to_string(&script).unwrap();
    assert_eq!(serde_json::from_str::<Script>(&text).unwrap(), script);
    let backend = ScriptedBackend::new(script);
    assert_eq!(backend.devices().unwrap().len(), 2);
}

#[test]
fn a_launch_over_the_images_declared_block_bound_is_refused() {
    let spec = ImageSpec {
        kernels: vec!["k".into()],
        rpc_client: true,
        max_threads: vec![("k".into(), 256)],
        ..ImageSpec::default()
    };
    let backend = ScriptedBackend::new(Script::default());
    let mut device = backend.open(0).unwrap();
    let mut module = device.load(&image(&spec), &LoadOptions::default()).unwrap();
    let mut sink = Collect::default();
    let shape = |threads| LaunchShape::grid([1, 1, 1], [threads, 1, 1]);
    assert_eq!(
        module
            .launch("k", shape(256), &[], None, &mut sink)
            .unwrap(),
        LaunchEnd::Completed
    );
    let error = module
        .launch("k", shape(257), &[], None, &mut sink)
        .unwrap_err()
        .to_string();
    assert!(error.contains("at most 256 threads per block"), "{error}");
}

#[test]
fn device_memory_is_zeroed_and_reads_stay_inside_it() {
    let (backend, image) = setup(vec![]);
    let mut device = backend.open(0).unwrap();
    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
    let address = module.alloc_device(16).unwrap();
    assert_eq!(module.read_device(address, 16).unwrap(), vec![0; 16]);
    assert_eq!(module.read_device(address + 12, 4).unwrap(), vec![0; 4]);
    for (at, len) in [(address + 12, 8), (address - 1, 4), (0, 4), (u64::MAX, 2)] {
        assert!(
            matches!(
                module.read_device(at, len),
                Err(BackendError::InvalidArgument(_))
            ),
            "{at:#x} {len}"
        );
    }
}

#[test]
fn device_memory_is_written_read_and_freed_through_the_module() {
    let (backend, image) = setup(vec![]);
    let mut device = backend.open(0).unwrap();
    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
    let address = module.alloc_device(8).unwrap();
    module.write_device(address + 2, &[1, 2, 3]).unwrap();
    assert_eq!(
        module.read_device(address, 8).unwrap(),
        [0, 0, 1, 2, 3, 0, 0, 0]
    );
    assert!(matches!(
        module.write_device(address + 6, &[1, 2, 3]),
        Err(BackendError::InvalidArgument(_))
    ));
    // Only a block's start frees it, once; afterwards it is not the module's any more.
    assert!(module.free_device(address + 1).is_err());
    module.free_device(address).unwrap();
    assert!(module.free_device(address).is_err());
    assert!(module.read_device(address, 1).is_err());
    assert!(module.write_device(address, &[1]).is_err());
    // Empty copies at a block's end are fine.
    let other = module.alloc_device(4).unwrap();
    assert_eq!(module.read_device(other + 4, 0).unwrap(), Vec::<u8>::new());
    module.write_device(other + 4, &[]).unwrap();
}

#[test]
fn a_refused_test_launch_names_the_test_not_its_kernel() {
    let mut test = gpurun_abi::TestDesc::new("tests::uses_too_much");
    test.kernel = "__gpurun_test_uses_too_much_79dd".into();
    let image = image(&ImageSpec::with_tests(vec![test.clone()]));
    let script = Script {
        kernels: [(test.kernel.clone(), vec![print("ran\n")])]
            .into_iter()
            .collect(),
        max_shared_bytes: [(test.kernel.clone(), 4096)].into_iter().collect(),
        max_block_threads: [(test.kernel.clone(), 256)].into_iter().collect(),
        ..Script::default()
    };
    let backend = ScriptedBackend::new(script);
    let mut device = backend.open(0).unwrap();
    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
    let mut sink = Collect::default();
    for shape in [
        LaunchShape::blocks(1).threads(32).shared_bytes(8192),
        LaunchShape::blocks(1).threads(512),
    ] {
        let error = module
            .launch(&test.kernel, shape, &[], None, &mut sink)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("test `tests::uses_too_much` can "),
            "{error}"
        );
        assert!(!error.contains("__gpurun_test"), "{error}");
    }
}

#[test]
fn shared_memory_over_the_kernels_limit_is_refused_before_the_launch() {
    let (_, image) = setup(vec![]);
    let script = Script {
        kernels: [("k".to_owned(), vec![print("ran\n")])]
            .into_iter()
            .collect(),
        max_shared_bytes: [("k".to_owned(), 4096)].into_iter().collect(),
        ..Script::default()
    };
    let backend = ScriptedBackend::new(script);
    let mut device = backend.open(0).unwrap();
    let mut module = device.load(&image, &LoadOptions::default()).unwrap();
    let mut sink = Collect::default();
    let shape = LaunchShape::blocks(2).threads(32);
    for fits in [0, 1, 4096] {
        let end = module.launch("k", shape.shared_bytes(fits), &[], None, &mut sink);
        assert_eq!(end.unwrap(), LaunchEnd::Completed, "{fits} bytes");
    }
    let error = module
        .launch("k", shape.shared_bytes(4097), &[], None, &mut sink)
        .unwrap_err();
    assert!(
        matches!(&error, BackendError::InvalidArgument(text)
            if text.contains("at most 4096 bytes of dynamic shared memory per block")
                && text.contains("asks for 4097")),
        "{error}"
    );
    assert_eq!(
        sink.stdout, b"ran\nran\nran\n",
        "the refused launch never ran"
    );
}
