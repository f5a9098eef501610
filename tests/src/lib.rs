//! Helpers for the end-to-end tests: the real `cargo-gpurun` binary (built with escargot) and
//! the fixture images it builds for the host emulation backend.
//!
//! Owns: what the end-to-end tests and benchmarks share. Must not: reach into the crates'
//! internals; these tests drive the binary as a user would.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// The fixtures workspace.
pub fn fixtures_dir() -> PathBuf {
    repo_root().join("fixtures")
}

/// Path of the `cargo-gpurun` binary, built once per test process.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let run = escargot::CargoBuild::new()
            .package("cargo-gpurun")
            .bin("cargo-gpurun")
            .manifest_path(repo_root().join("Cargo.toml"))
            .current_target()
            .run()
            .unwrap_or_else(|e| panic!("building cargo-gpurun failed: {e}"));
        run.path().to_path_buf()
    })
}

/// `cargo gpurun ARGS` in the fixtures workspace.
pub fn gpurun(args: &[&str]) -> Command {
    let mut command = Command::new(binary());
    command.arg("gpurun").args(args).current_dir(fixtures_dir());
    command.env_remove("GITHUB_ACTIONS");
    // The fixtures have their own target directory; a developer's CARGO_TARGET_DIR is for the
    // main workspace.
    command.env_remove("CARGO_TARGET_DIR");
    command
}

/// Builds every fixture for the host once per test process and returns the image directory.
pub fn host_images() -> &'static Path {
    static IMAGES: OnceLock<PathBuf> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let output = gpurun(&["build", "--workspace", "--target", "host"])
            .output()
            .unwrap_or_else(|e| panic!("running cargo-gpurun failed: {e}"));
        assert!(
            output.status.success(),
            "building the fixtures for the host failed:\n{}",
            text(&output.stderr)
        );
        fixtures_dir().join("target/debug")
    })
}

/// The host image of fixture `name` (`lib<name>.so`, dashes as underscores).
pub fn host_image(name: &str) -> PathBuf {
    host_images().join(format!("lib{}.so", name.replace('-', "_")))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Output with both streams, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!(
        "status: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr)
    )
}

/// Median wall time of `runs` executions of `command()` (each must succeed).
pub fn median_time(runs: usize, mut command: impl FnMut() -> Command) -> std::time::Duration {
    let mut times: Vec<std::time::Duration> = (0..runs)
        .map(|_| {
            let started = std::time::Instant::now();
            let output = command()
                .output()
                .unwrap_or_else(|e| panic!("cannot run: {e}"));
            let took = started.elapsed();
            assert!(
                output.status.success(),
                "benchmark command failed:\n{}",
                describe(&output)
            );
            took
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Path of a binary of this crate, built once.
pub fn own_binary(name: &str) -> PathBuf {
    escargot::CargoBuild::new()
        .package("gpurun-tests")
        .bin(name)
        .manifest_path(repo_root().join("Cargo.toml"))
        .release()
        .run()
        .unwrap_or_else(|e| panic!("building {name} failed: {e}"))
        .path()
        .to_path_buf()
}
