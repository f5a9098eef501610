//! What a build means for running tests, for every front-end through the [plan](crate::plan):
//! which built targets are test suites and their names, loading a suite's image (telling a
//! plain kernel crate, a suite of no tests, from a broken image of a crate with tests), and the
//! test-timeout rule.

use std::path::Path;
use std::time::Duration;

use gpurun_image::{Image, ImageError};

use gpurun_build::{BuiltImage, TargetKind};
use gpurun_image::Platform;

/// Every symbol the device runtime and `#[gpurun::test]` put in an image starts with this.
const RUNTIME_SYMBOL_PREFIX: &[u8] = gpurun_abi::symbols::RUNTIME_PREFIX.as_bytes();

/// Reads `built`'s image. `None` for an image the loader cannot read that names no `__gpurun_`
/// symbol at all: a kernel crate without the device runtime (like `fixtures/bare-kernel`),
/// which cannot hold a `#[gpurun::test]`, so its suite has 0 tests, as cargo's has for a lib
/// without tests. An unreadable image that may hold tests is an error.
pub fn load(built: &BuiltImage) -> Result<Option<Image>, LoadError> {
    let error = match Image::read(&built.path) {
        Ok(image) => return Ok(Some(image)),
        Err(error) => error,
    };
    let unreadable = |source| LoadError {
        path: built.path.clone(),
        source,
    };
    match mentions_runtime_symbols(&built.path) {
        Ok(false) => Ok(None),
        // Unreadable as bytes too: the image's own error says so.
        Ok(true) | Err(_) => Err(unreadable(error)),
    }
}

/// An image of a suite that may hold tests and cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("failed to load image `{}`: {source}", path.display())]
pub struct LoadError {
    pub path: std::path::PathBuf,
    #[source]
    pub source: ImageError,
}

/// One test suite of a build, as `cargo gpurun test` runs it.
pub struct Suite {
    pub built: BuiltImage,
    /// The suite's name, as libtest's harness gets it: the package for the lib, else the
    /// target's name.
    pub name: String,
    /// Its image ([`load`]): `None` for a crate without the device runtime (a suite of 0
    /// tests), an error for an image that cannot be read.
    pub image: Result<Option<Image>, LoadError>,
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
    let mut targets: Vec<Platform> = Vec::new();
    for image in images.iter() {
        if !targets.contains(&image.target) {
            targets.push(image.target);
        }
    }
    let target_rank = |target: Platform| targets.iter().position(|t| *t == target);
    images.sort_by(|a, b| {
        (target_rank(a.target), &a.package, a.kind, &a.name).cmp(&(
            target_rank(b.target),
            &b.package,
            b.kind,
            &b.name,
        ))
    });
}

/// Whether the file contains a `__gpurun_` name anywhere (ELF string tables and PTX text alike
/// hold the names of the symbols they define).
fn mentions_runtime_symbols(path: &Path) -> std::io::Result<bool> {
    let bytes = std::fs::read(path)?;
    Ok(bytes
        .windows(RUNTIME_SYMBOL_PREFIX.len())
        .any(|window| window == RUNTIME_SYMBOL_PREFIX))
}

/// A test that runs longer than this fails, unless `--test-timeout` or
/// `[package.metadata.gpurun] test-timeout = SECS` says otherwise. Generous: a debug build of a
/// big grid under emulation is slow, but a hang must still end.
pub const DEFAULT_TEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The time limit of each test (or launch) of `image`: `given` (the command line's, or
/// `gpurun-test`'s own) if any, else `test-timeout` from the image's package's
/// `[package.metadata.gpurun]`, else [`DEFAULT_TEST_TIMEOUT`]: `cargo gpurun test` and
/// `gpurun-test`'s trials and launches alike.
pub fn time_limit(image: &BuiltImage, given: Option<Duration>) -> Result<Duration, BadTimeLimit> {
    if let Some(limit) = given {
        return Ok(limit);
    }
    let Some(value) = image
        .gpurun_metadata
        .as_ref()
        .and_then(|table| table.get("test-timeout"))
    else {
        return Ok(DEFAULT_TEST_TIMEOUT);
    };
    match value.as_f64() {
        Some(secs) if secs.is_finite() && secs > 0.0 => Ok(Duration::from_secs_f64(secs)),
        _ => Err(BadTimeLimit {
            package: image.package.clone(),
            value: value.to_string(),
        }),
    }
}

/// A package's `test-timeout` that is not a time limit.
#[derive(Debug, thiserror::Error)]
#[error("bad [package.metadata.gpurun] in `{package}`: `test-timeout` must be a positive number of seconds, not {value}")]
pub struct BadTimeLimit {
    pub package: String,
    pub value: String,
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
