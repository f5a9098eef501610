//! Helpers shared by cargo-gpurun's integration tests (`mod common;` in each): the repository
//! root, running `cargo-gpurun gpurun` there, reading its output, and the checks for the nightly
//! toolchain and the tools that a test needs (reported as not run, and failing under `CI=true`).

// Each test crate uses only some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpurun_build::toolchain::Toolchain;

// As above: each test crate uses only some of these.
#[allow(unused_imports)]
pub use gpurun_e2e::{describe, in_ci, repo_root, text};

pub fn fixtures_manifest() -> PathBuf {
    gpurun_e2e::fixtures_dir().join("Cargo.toml")
}

/// `cargo-gpurun gpurun ARGS` in the repository root, building into `fixtures/target` whatever
/// target dir the test itself was built with.
pub fn gpurun(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cargo-gpurun"));
    command
        .arg("gpurun")
        .args(args)
        .current_dir(repo_root())
        .env_remove("CARGO_TARGET_DIR")
        // The expectations are for the default sm_70, whatever GPU this machine has.
        .env(gpurun_build::arch::ARCH_DETECT_ENV, "0");
    for (key, value) in envs {
        command.env(key, value);
    }
    command.output().expect("run cargo-gpurun")
}

/// The non-empty lines of stdout.
pub fn lines(output: &Output) -> Vec<String> {
    text(&output.stdout)
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The images of a successful `--message-format json` build.
pub fn built_images(output: &Output) -> Vec<serde_json::Value> {
    assert!(
        output.status.success(),
        "build failed:\n{}",
        text(&output.stderr)
    );
    text(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("JSON line"))
        .inspect(|image| assert_eq!(image["reason"], "gpurun-image"))
        .collect()
}

/// The `path` of each image of a successful `--message-format json` build.
pub fn built_image_paths(output: &Output) -> Vec<PathBuf> {
    built_images(output)
        .iter()
        .filter_map(|image| image["path"].as_str().map(PathBuf::from))
        .collect()
}

/// `true` when `what` is available; otherwise says why the test does not run (or fails under CI).
pub fn available(what: &str, present: bool) -> bool {
    if !present {
        gpurun_e2e::tool_missing(&format!(
            "{what} is missing (installed by scripts/setup.sh)"
        ));
    }
    present
}

/// The nightly toolchain with rust-src and llvm-tools, or `None` after saying why the test does
/// not run.
pub fn nightly() -> Option<Toolchain> {
    let toolchain = Toolchain::probe().ok();
    let ready = toolchain
        .as_ref()
        .is_some_and(|toolchain| toolchain.missing_components().is_empty());
    available("the nightly toolchain with rust-src and llvm-tools", ready)
        .then_some(toolchain)
        .flatten()
}
