//! Running one image's `#[gpurun::test]`s, shared by `test` and by `run` on a test image: the
//! harness's view of the tests and the executor that runs them in workers.

use std::time::Duration;

use anyhow::bail;
use gpurun_hal::select;
use gpurun_hal::BackendKind;
use gpurun_harness::{ShouldPanic, TestCase};
use gpurun_image::Image;
use gpurun_runner::{WorkerExecutor, WorkerOptions};

use super::device::{options, DeviceArgs};
use super::worker::worker_spec;

/// The harness's view of an image's tests.
pub fn test_cases(image: &Image) -> Vec<TestCase> {
    image
        .tests()
        .iter()
        .map(|desc| TestCase {
            name: desc.name.clone(),
            kernel: desc.kernel.clone(),
            ignored: desc.ignored,
            ignore_reason: desc.ignore_reason.clone(),
            should_panic: match &desc.should_panic {
                gpurun_image::ShouldPanic::No => ShouldPanic::No,
                gpurun_image::ShouldPanic::Yes => ShouldPanic::Yes,
                gpurun_image::ShouldPanic::Expected(text) => ShouldPanic::Expected(text.clone()),
            },
            threads: desc.threads,
            blocks: desc.blocks,
            source_file: None,
        })
        .collect()
}

/// A test that runs longer than this fails, unless `--test-timeout` or
/// `[package.metadata.gpurun] test-timeout = SECS` says otherwise. Generous: a debug build of a
/// big grid under emulation is slow, but a hang must still end.
pub const DEFAULT_TEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The executor that runs an image's tests: one worker per device in use (the one `--device`
/// names, else every device the backend sees), sized so that the harness's test threads all
/// have a slot.
pub fn test_executor(
    device: &DeviceArgs,
    kind: BackendKind,
    image: &std::path::Path,
    harness_args: &gpurun_harness::HarnessArgs,
    timeout: Duration,
) -> anyhow::Result<WorkerExecutor> {
    let ordinals: Vec<usize> = match device.device {
        Some(ordinal) => vec![ordinal],
        None => match select::backend(kind).devices() {
            Ok(devices) if !devices.is_empty() => devices.iter().map(|d| d.ordinal).collect(),
            // A setting that makes no sense is the user's to fix before anything runs.
            Err(error @ gpurun_hal::BackendError::InvalidArgument(_)) => bail!(error),
            // A missing driver fails every test with the reason, libtest-style, in the worker.
            _ => vec![0],
        },
    };
    let base = options(device, kind);
    let specs = ordinals
        .into_iter()
        .map(|ordinal| {
            let options = WorkerOptions {
                device: ordinal,
                ..base.clone()
            };
            worker_spec(&options, image)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // A bad RUST_TEST_THREADS is reported by the harness itself.
    let concurrency = gpurun_harness::test_threads(harness_args).unwrap_or(1);
    Ok(WorkerExecutor::new(specs, concurrency, Some(timeout)))
}
