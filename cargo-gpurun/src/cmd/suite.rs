//! Loading one test suite's image for `cargo gpurun test`, and telling a plain kernel crate (no
//! device runtime, so no tests) from a broken image of a crate with tests.

use std::path::Path;

use gpurun_backend::BackendKind;
use gpurun_image::Image;

use crate::build::{BuiltImage, DeviceTarget};

/// Every symbol the device runtime and `#[gpurun::test]` put in an image starts with this.
const RUNTIME_SYMBOL_PREFIX: &[u8] = b"__gpurun_";

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
