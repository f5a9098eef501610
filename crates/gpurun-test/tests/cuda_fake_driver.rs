//! Host-driven launches on CUDA after a kernel fault, against the fake driver
//! (crates/gpurun-fake-driver, loaded as `libcuda.so` through `LD_LIBRARY_PATH`): the driver
//! refuses all work in a process after a fault, so every `Gpu` says so with
//! [`Error::EarlierFault`] instead of passing on the driver's echo of the fault from a load or a
//! copy. The scenario runs in a child process (this test binary again): the dynamic loader reads
//! `LD_LIBRARY_PATH` at process start, and the fault ends the driver's use for the process.

#![cfg(target_os = "linux")]

// Shared with gpurun-hal's fake-driver tests.
#[path = "../../gpurun-hal/tests/common/mod.rs"]
mod common;

use common::{fake_cuda_in, first, positions, read_calls, run_child, with_fake_cuda};
use gpurun_test::{BackendKind, Error, Gpu, LaunchEnd, LaunchShape};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The status the fake driver's kernels end with (see gpurun-fake-driver's `cuda` module).
const KERNEL_FAULT_ENV: &str = "GPURUN_FAKE_CUDA_KERNEL_FAULT";
/// Where the child writes its image.
const DIR_ENV: &str = "GPURUN_TEST_FAKE_CUDA_DIR";

/// A kernel storing its second argument through its first (a pointer, as rustc declares one).
const STORE_PTX: &str = "\
.version 7.0
.target sm_70
.address_size 64

.visible .entry gpurun_store(
    .param .u64 .ptr .align 1 gpurun_store_param_0,
    .param .u32 gpurun_store_param_1
)
{
    ret;
}
";

const TIMEOUT: Duration = Duration::from_secs(20);

/// What the parent starts: one `Gpu` faults while another is open beside it.
#[test]
#[ignore = "run by after_a_fault_every_gpu_names_it in a child process"]
fn fake_driver_child() {
    let dir = PathBuf::from(std::env::var_os(DIR_ENV).expect("started by the parent test"));
    let image = dir.join("store.ptx");
    std::fs::write(&image, STORE_PTX).unwrap();
    let open = || Gpu::open(&image, Some(BackendKind::Cuda), TIMEOUT);
    let beside = open().expect("the fake driver opens");
    let mut kept = beside.buffer::<u32>(1).unwrap();
    let faulting = open().expect("the fake driver opens twice");
    let mut out = faulting.buffer::<u32>(1).unwrap();
    let shape = LaunchShape::SINGLE;
    match faulting.launch("gpurun_store", shape, (&mut out, 42u32)) {
        Err(Error::Ended {
            end: LaunchEnd::Faulted(_),
            ..
        }) => {}
        other => panic!("expected the fault, got {other:?}"),
    }
    let earlier = |error: Error| match &error {
        Error::EarlierFault {
            backend: BackendKind::Cuda,
            kernel,
            fault,
        } => {
            assert_eq!(kernel, "gpurun_store");
            assert!(fault.starts_with("CUDA_ERROR_ILLEGAL_ADDRESS"), "{fault}");
            let text = error.to_string();
            assert!(
                text.contains("kernel `gpurun_store` faulted earlier")
                    && text.contains("cargo nextest run")
                    && text.contains("libtest_mimic_main"),
                "{text}"
            );
        }
        other => panic!("expected the earlier fault, got {other:?}"),
    };
    earlier(open().unwrap_err());
    earlier(
        beside
            .launch("gpurun_store", shape, (&mut kept, 1u32))
            .unwrap_err(),
    );
    earlier(kept.write(&[7]).unwrap_err());
    earlier(kept.to_vec().unwrap_err());
    earlier(beside.buffer::<u32>(1).unwrap_err());
    drop((kept, out));
    drop((beside, faulting));
    // Every `Gpu` gone: still refused.
    earlier(open().unwrap_err());
    println!("scenario done");
}

/// After a kernel fault on CUDA, opening a `Gpu` and launching or copying on one opened before
/// fail with [`Error::EarlierFault`], which names the kernel and the fault and says how to give
/// tests that may fault a process of their own; none of it reaches the driver.
#[test]
fn after_a_fault_every_gpu_names_it() {
    // The fake driver under the name the backend loads, in a directory of its own.
    let dir = fake_cuda_in(
        Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("gpurun-test-fake-cuda-{}", std::process::id())),
    );
    let log = dir.join("calls.log");
    let mut command = Command::new(std::env::current_exe().unwrap());
    with_fake_cuda(&mut command, &dir, &log)
        .env(KERNEL_FAULT_ENV, "CUDA_ERROR_ILLEGAL_ADDRESS")
        .env(DIR_ENV, &dir);
    run_child(&mut command, "fake_driver_child", "a fault");
    let calls = read_calls(&log);
    let launches = positions(&calls, "cuLaunchKernel", "");
    assert_eq!(launches.len(), 1, "{calls:#?}");
    let fault = first(&calls, "cuStreamQuery", "");
    assert_eq!(calls[fault].status, "CUDA_ERROR_ILLEGAL_ADDRESS");
    assert_eq!(positions(&calls, "cuModuleLoadDataEx", "").len(), 2);
    for function in [
        "cuModuleLoadDataEx",
        "cuDevicePrimaryCtxRetain",
        "cuLaunchKernel",
        "cuMemcpyHtoDAsync",
        "cuMemcpyDtoHAsync",
        "cuMemAlloc",
    ] {
        assert!(
            positions(&calls[fault..], function, "").is_empty(),
            "{function} after the fault: {calls:#?}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
