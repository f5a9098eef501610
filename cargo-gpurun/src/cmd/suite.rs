//! Running one image's `#[gpurun::test]`s, shared by `test` and by `run` on a test image:
//! loading a suite's image (telling a plain kernel crate, a suite of no tests, from a broken
//! image of a crate with tests), the harness's view of the tests and the executor that runs
//! them in workers.

use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use gpurun_hal::select;
use gpurun_hal::BackendKind;
use gpurun_harness::{ShouldPanic, TestCase};
use gpurun_image::Image;
use gpurun_runner::{WorkerExecutor, WorkerOptions};

use super::device::{options, DeviceArgs};
use super::worker::worker_spec;
use crate::build::{BuiltImage, DeviceTarget};

/// Every symbol the device runtime and `#[gpurun::test]` put in an image starts with this.
const RUNTIME_SYMBOL_PREFIX: &[u8] = gpurun_abi::symbols::RUNTIME_PREFIX.as_bytes();

/// Reads `built`'s image. `None` for an image the loader cannot read that names no `__gpurun_`
/// symbol at all: a kernel crate without the device runtime (like `fixtures/bare-kernel`),
/// which cannot hold a `#[gpurun::test]`, so its suite has 0 tests, as cargo's has for a lib
/// without tests. An unreadable image that may hold tests is an error.
pub fn load(built: &BuiltImage) -> Result<Option<Image>, anyhow::Error> {
    let error = match Image::read(&built.path) {
        Ok(image) => return Ok(Some(image)),
        Err(error) => error,
    };
    let error = anyhow::Error::new(error)
        .context(format!("failed to load image `{}`", built.path.display()));
    match mentions_runtime_symbols(&built.path) {
        Ok(false) => Ok(None),
        Ok(true) => Err(error),
        Err(io) => Err(error.context(io)),
    }
}

/// The backend that runs images built for `target`.
pub fn backend_for_target(target: DeviceTarget) -> BackendKind {
    match target {
        DeviceTarget::Nvptx => BackendKind::Cuda,
        DeviceTarget::Amdgcn => BackendKind::Hsa,
        DeviceTarget::Host => BackendKind::Host,
    }
}

/// Whether the file contains a `__gpurun_` name anywhere (ELF string tables and PTX text alike
/// hold the names of the symbols they define).
fn mentions_runtime_symbols(path: &Path) -> std::io::Result<bool> {
    let bytes = std::fs::read(path)?;
    Ok(bytes
        .windows(RUNTIME_SYMBOL_PREFIX.len())
        .any(|window| window == RUNTIME_SYMBOL_PREFIX))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_symbols_are_found_in_any_format() {
        let dir = std::env::temp_dir().join(format!("gpurun-suite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let with = dir.join("with.ptx");
        let without = dir.join("without.so");
        std::fs::write(&with, b".visible .entry __gpurun_test_adds()").unwrap();
        std::fs::write(&without, b"\x7fELF\0\0_start\0__gpurun").unwrap();
        assert!(mentions_runtime_symbols(&with).unwrap());
        assert!(!mentions_runtime_symbols(&without).unwrap());
        assert!(mentions_runtime_symbols(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
