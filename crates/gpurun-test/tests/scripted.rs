//! How a host-driven launch ends, against the scripted backend in this process: output comes
//! back, a device panic is an `Err` with its message and location and leaves the image usable,
//! a fault, a timeout, `exit()` and `abort()` are errors of their own. No fixture or nightly.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use gpurun_hal::scripted::{test, ImageSpec, Script, Step, SCRIPT_ENV};
use gpurun_test::{BackendKind, Error, Gpu, LaunchEnd, LaunchShape, Memory};

const KERNELS: [&str; 7] = [
    "prints", "panics", "faults", "hangs", "exits", "aborts", "quiet",
];

fn kernel(name: &str) -> String {
    test(name).kernel
}

/// Writes the image and the script once; the backend reads the script's path from the
/// environment, set here before any test opens it.
fn image() -> &'static PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("gpurun-test-scripted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("kernels.ptx");
        let descs = KERNELS.iter().map(|name| test(name)).collect();
        std::fs::write(&image, ImageSpec::with_tests(descs).ptx().unwrap()).unwrap();
        let steps = |name: &str| -> Vec<Step> {
            match name {
                "prints" => vec![Step::Print("hello\n".into()), Step::Eprint("warn\n".into())],
                "panics" => vec![
                    Step::Print("before\n".into()),
                    Step::Panic {
                        message: "bad input 7".into(),
                        file: "src/lib.rs".into(),
                        line: 42,
                    },
                ],
                "faults" => vec![Step::Fault("illegal address".into())],
                "hangs" => vec![Step::Hang],
                "exits" => vec![Step::Exit(3)],
                "aborts" => vec![Step::Abort],
                _ => Vec::new(),
            }
        };
        let script = Script {
            kernels: KERNELS
                .iter()
                .map(|name| (kernel(name), steps(name)))
                .collect::<HashMap<_, _>>(),
            devices: 1,
            ..Script::default()
        };
        let script_path = dir.join("script.json");
        std::fs::write(&script_path, serde_json::to_vec(&script).unwrap()).unwrap();
        // Every test reads it only after this, through the OnceLock.
        std::env::set_var(SCRIPT_ENV, &script_path);
        image
    })
}

fn open(timeout: Duration) -> Gpu {
    Gpu::open(image(), Some(BackendKind::Scripted), timeout).unwrap()
}

/// Launches the scripted kernel `name` on one block, which must fail.
fn launch_error(gpu: &Gpu, name: &str) -> Error {
    gpu.launch(&kernel(name), LaunchShape::blocks(1), ())
        .unwrap_err()
}

#[test]
fn output_comes_back_and_is_echoed() {
    let gpu = open(Duration::from_secs(10));
    let output = gpu
        .launch(&kernel("prints"), LaunchShape::blocks(1), ())
        .unwrap();
    assert_eq!(output.stdout_text(), "hello\n");
    assert_eq!(output.stderr_text(), "warn\n");
}

#[test]
fn a_panic_is_an_error_with_message_location_and_output() {
    let gpu = open(Duration::from_secs(10));
    let error = launch_error(&gpu, "panics");
    let Error::Panicked(panic) = &error else {
        panic!("not a panic: {error}");
    };
    assert_eq!(
        (
            panic.report.message.as_str(),
            panic.report.file.as_str(),
            panic.report.line
        ),
        ("bad input 7", "src/lib.rs", 42)
    );
    assert_eq!(panic.output.stdout_text(), "before\n");
    let text = error.to_string();
    assert!(
        text.contains("panicked at src/lib.rs:42:") && text.ends_with("bad input 7"),
        "{text}"
    );
    // A panic ends only the thread: the image still runs kernels.
    gpu.launch(&kernel("quiet"), LaunchShape::blocks(1), ())
        .unwrap();
}

#[test]
fn a_fault_is_an_error_and_the_image_refuses_more_launches() {
    let gpu = open(Duration::from_secs(10));
    let error = launch_error(&gpu, "faults");
    assert!(
        matches!(&error, Error::Ended { end: LaunchEnd::Faulted(error), .. } if error.contains("illegal address")),
        "{error}"
    );
    let again = launch_error(&gpu, "quiet");
    assert!(again.to_string().contains("earlier failure"), "{again}");
}

#[test]
fn a_hang_times_out() {
    let gpu = open(Duration::from_millis(200));
    let error = launch_error(&gpu, "hangs");
    assert!(
        matches!(
            error,
            Error::Ended {
                end: LaunchEnd::TimedOut(_),
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn exit_and_abort_are_errors() {
    let error = launch_error(&open(Duration::from_secs(10)), "exits");
    assert!(
        matches!(
            error,
            Error::Ended {
                end: LaunchEnd::Exited(3),
                ..
            }
        ),
        "{error}"
    );
    let error = launch_error(&open(Duration::from_secs(10)), "aborts");
    assert!(
        matches!(
            error,
            Error::Ended {
                end: LaunchEnd::Aborted,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn a_missing_kernel_is_refused_before_launch() {
    let gpu = open(Duration::from_secs(10));
    let error = gpu.launch("nope", LaunchShape::blocks(1), ()).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("no kernel named `nope`") && text.contains(&kernel("quiet")),
        "{text}"
    );
}

#[test]
fn buffers_round_trip_and_belong_to_their_image() {
    let gpu = open(Duration::from_secs(10));
    let mut buffer = gpu.buffer_from(&[1u32, 2, 3]).unwrap();
    assert_eq!(buffer.memory(), Memory::Device);
    assert_eq!(buffer.host_ptr(), None, "only copies reach device memory");
    assert_eq!(buffer.to_vec().unwrap(), [1, 2, 3]);
    buffer.write(&[9]).unwrap();
    assert_eq!(buffer.to_vec().unwrap(), [9, 2, 3]);
    let mut first_two = [0u32; 2];
    buffer.read_into(&mut first_two).unwrap();
    assert_eq!(first_two, [9, 2]);
    // Longer copies are refused, and copy nothing.
    assert!(matches!(
        buffer.write(&[7; 4]),
        Err(Error::CopyTooLong { given: 4, len: 3 })
    ));
    assert!(matches!(
        buffer.read_into(&mut [0; 4]),
        Err(Error::CopyTooLong { given: 4, len: 3 })
    ));
    assert_eq!(buffer.to_vec().unwrap(), [9, 2, 3]);
    assert_eq!(gpu.buffer::<f64>(4).unwrap().to_vec().unwrap(), [0.0; 4]);
    assert!(gpu.buffer::<u64>(0).unwrap().is_empty());
    assert!(matches!(
        gpu.buffer::<u64>(usize::MAX),
        Err(Error::TooLarge { .. })
    ));
    let other = open(Duration::from_secs(10));
    let error = other
        .launch(&kernel("quiet"), LaunchShape::blocks(1), (1u32, &buffer))
        .unwrap_err();
    assert!(
        matches!(error, Error::ForeignBuffer { index: 1, .. }),
        "{error}"
    );
}

#[test]
fn mapped_buffers_are_host_memory_the_host_reaches_directly() {
    let gpu = open(Duration::from_secs(10));
    let mut mapped = gpu.mapped_buffer_from(&[1.5f32, 2.5]).unwrap();
    assert_eq!(mapped.memory(), Memory::Mapped);
    let host = mapped.host_ptr().expect("mapped memory has a host address");
    // SAFETY: the buffer holds two f32s at `host`, and no kernel runs.
    unsafe { host.add(1).write(4.0) };
    assert_eq!(mapped.to_vec().unwrap(), [1.5, 4.0]);
    mapped.write(&[0.5]).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { host.read() }, 0.5);
    assert_eq!(
        gpu.mapped_buffer::<u16>(3).unwrap().to_vec().unwrap(),
        [0; 3]
    );
}

#[test]
fn arguments_a_ptx_kernel_does_not_take_are_refused_before_launch() {
    let gpu = open(Duration::from_secs(10));
    // The scripted image's kernels are PTX `.entry`s without parameters; `prints` would print
    // if it ran.
    let error = gpu
        .launch(&kernel("prints"), LaunchShape::blocks(1), (1u32,))
        .unwrap_err();
    assert!(matches!(error, Error::Arguments { .. }), "{error}");
    assert_eq!(
        error.to_string(),
        format!(
            "wrong arguments for kernel `{}`: it takes 0 argument(s) (), not 1",
            kernel("prints")
        )
    );
}
