//! Running one image's `#[gpurun::test]`s, shared by `test` and by `run` on a test image (and
//! by `gpurun-test`'s trials): which built targets are test suites and their names, loading a
//! suite's image (telling a plain kernel crate, a suite of no tests, from a broken image of a
//! crate with tests), the harness's view of the tests, the devices they run on and the
//! executor that runs them in workers.

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
use crate::build::{BuiltImage, DeviceTarget, TargetKind};

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

/// One test suite of a build, as `cargo gpurun test` runs it.
pub struct Suite {
    pub built: BuiltImage,
    /// The suite's name, as libtest's harness gets it: the package for the lib, else the
    /// target's name.
    pub name: String,
    /// Its image ([`load`]): `None` for a crate without the device runtime (a suite of 0
    /// tests), an error for an image that cannot be read.
    pub image: Result<Option<Image>, anyhow::Error>,
}

/// The test suites of `images` (from `build::build_for_test`), in cargo's order: per device
/// target (in build order), per package, the lib, then bins, tests/ and examples, each in name
/// order. A program is a suite only if it has tests; every other target is one even when empty
/// ("running 0 tests"), as with cargo.
pub fn test_suites(mut images: Vec<BuiltImage>) -> Vec<Suite> {
    sort_in_cargo_test_order(&mut images);
    images
        .into_iter()
        .filter_map(|built| {
            let image = load(&built);
            let no_tests = match &image {
                Ok(Some(image)) => image.tests().is_empty(),
                Ok(None) => true,
                Err(_) => false,
            };
            if built.kind == TargetKind::Bin && no_tests {
                return None;
            }
            let name = match built.kind {
                TargetKind::Lib => built.package.clone(),
                TargetKind::Bin | TargetKind::Test | TargetKind::Example => built.name.clone(),
            };
            Some(Suite { built, name, image })
        })
        .collect()
}

fn sort_in_cargo_test_order(images: &mut [BuiltImage]) {
    let mut targets: Vec<DeviceTarget> = Vec::new();
    for image in images.iter() {
        if !targets.contains(&image.target) {
            targets.push(image.target);
        }
    }
    let target_rank = |target: DeviceTarget| targets.iter().position(|t| *t == target);
    images.sort_by(|a, b| {
        (target_rank(a.target), &a.package, a.kind, &a.name).cmp(&(
            target_rank(b.target),
            &b.package,
            b.kind,
            &b.name,
        ))
    });
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

/// How many threads a device panic in `kernel` ends with it: its wavefront size on AMDGPU (from
/// the kernel descriptor; docs/abi.md), `None` where a panic ends only its thread.
pub fn panic_ends_wavefront(image: &Image, kernel: &str) -> Option<u32> {
    image
        .kernel(kernel)
        .and_then(|kernel| kernel.descriptor.as_ref())
        .map(|descriptor| descriptor.wavefront_size())
}

/// The harness's view of an image's tests. On AMDGPU a device panic ends the panicking thread's
/// whole wavefront (docs/abi.md), so each test carries its kernel's wavefront size, from the
/// kernel descriptor, for the failure output to say which threads went with it.
pub fn test_cases(image: &Image) -> Vec<TestCase> {
    image
        .tests()
        .iter()
        .map(|desc| TestCase {
            panic_ends_wavefront: panic_ends_wavefront(image, &desc.kernel),
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

/// The devices tests run on: `device` when given, else every device the backend sees; device
/// 0 when it sees none or has no driver (every test then fails with the reason, libtest-style,
/// in the worker). A setting that makes no sense (`GPURUN_HOST_DEVICES=0`) is an error.
pub fn test_devices(device: Option<usize>, kind: BackendKind) -> anyhow::Result<Vec<usize>> {
    Ok(match device {
        Some(ordinal) => vec![ordinal],
        None => match select::backend(kind).devices() {
            Ok(devices) if !devices.is_empty() => devices.iter().map(|d| d.ordinal).collect(),
            // A setting that makes no sense is the user's to fix before anything runs.
            Err(error @ gpurun_hal::BackendError::InvalidArgument(_)) => bail!(error),
            _ => vec![0],
        },
    })
}

/// The executor that runs an image's tests: one worker per device in use ([`test_devices`]),
/// sized so that the harness's test threads all have a slot.
pub fn test_executor(
    device: &DeviceArgs,
    kind: BackendKind,
    image: &std::path::Path,
    harness_args: &gpurun_harness::HarnessArgs,
    timeout: Duration,
) -> anyhow::Result<WorkerExecutor> {
    let ordinals = test_devices(device.device, kind)?;
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
