//! gpurun-test's argument and length checks on a real PTX image: the host app's kernels
//! (fixtures/host-app/kernels) built for nvptx with the nightly, launched offline on the
//! scripted backend, which "runs" them by completing at once.

use std::path::Path;
use std::time::Duration;

use gpurun_e2e::{fixtures_dir, tool_missing};
use gpurun_hal::scripted::{Script, SCRIPT_ENV};
use gpurun_test::{BackendKind, Error, Gpu, LaunchShape};

#[test]
fn real_ptx_signatures_are_checked() {
    let kernels = fixtures_dir().join("host-app/kernels");
    let built = match gpurun_test::DeviceCrate::new(kernels)
        .target("nvptx")
        .build()
    {
        Ok(built) => built,
        Err(error) => {
            // The nvptx build needs the nightly with rust-src and llvm-tools (scripts/setup.sh).
            tool_missing(&format!(
                "cannot build the host app's kernels for nvptx: {error}"
            ));
            return;
        }
    };
    // The script the scripted backend reads in this process: no kernel named, so every launch
    // completes at once.
    let script = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kernel-signatures-script.json");
    std::fs::write(&script, serde_json::to_vec(&Script::default()).unwrap()).unwrap();
    std::env::set_var(SCRIPT_ENV, &script);
    let gpu = Gpu::open(
        &built.path,
        Some(BackendKind::Scripted),
        Duration::from_secs(10),
    )
    .unwrap();
    let x = gpu.buffer_from(&[1.0f32, 2.0]).unwrap();
    let mut y = gpu.buffer::<f32>(2).unwrap();
    let shape = LaunchShape::blocks(1).threads(2);
    gpu.launch("saxpy", shape, (2.0f32, &x, &mut y, 2usize))
        .unwrap();
    let wrong_type = gpu
        .launch("saxpy", shape, (2.0f64, &x, &mut y, 2usize))
        .unwrap_err();
    assert_eq!(
        wrong_type.to_string(),
        "wrong arguments for kernel `saxpy`: argument 0 (`a`) is a 32-bit float in the kernel, but \
         an f64 was passed"
    );
    let too_few = gpu
        .launch("saxpy", shape, (2.0f32, &x, &mut y))
        .unwrap_err();
    assert!(
        too_few.to_string().contains(
            "it takes 4 argument(s) (a: a 32-bit float, x: a pointer, y: a pointer, n: a 64-bit \
             integer), not 3"
        ),
        "{too_few}"
    );
    let error = gpu
        .launch("divide", shape, (&x, &x, 5u64, 2usize))
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("argument 2 (`out`) is a pointer in the kernel, but a u64 was passed"),
        "{error}"
    );
    // The kernel descriptor's declared lengths travel through the PTX too.
    let too_small = gpu
        .launch("saxpy", shape, (2.0f32, &x, &mut y, 3usize))
        .unwrap_err();
    assert!(
        matches!(too_small, Error::BufferTooSmall(_))
            && too_small
                .to_string()
                .contains("`x` needs 3 elements of 4 bytes (x = n = 3), but the buffer holds 2"),
        "{too_small}"
    );
}
