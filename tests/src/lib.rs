//! Helpers for the end-to-end tests: the real `cargo-gpurun` binary (built with escargot), the
//! fixture images it builds for the host emulation backend, and the checks for the nightly
//! toolchain and the tools a test needs (reported as not run, and failing under `CI=true`).
//!
//! Owns: what the package's tests and benchmarks share. Must not: reach into the crates'
//! internals; these tests drive the binary as a user would, and the libraries through their
//! public APIs.

pub mod real_kernels;

/// The fake driver (crates/gpurun-fake-driver): built, put where a process loads it as the CUDA
/// driver, and the calls it logs. The same module as gpurun-hal's fake-driver tests use.
#[cfg(target_os = "linux")]
#[path = "../../crates/gpurun-hal/tests/common/mod.rs"]
pub mod fake_driver;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use gpurun_build::toolchain::Toolchain;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// A fresh, empty directory in `parent` named `name` and this process's id (test processes
/// running side by side keep apart); whatever was there before is removed.
pub fn fresh_dir(parent: &Path, name: &str) -> PathBuf {
    let dir = parent.join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// The fixtures workspace.
pub fn fixtures_dir() -> PathBuf {
    repo_root().join("fixtures")
}

/// The target directory of the fixtures' GPU builds (nvptx, amdgcn), apart from
/// `fixtures/target`: cargo holds a build directory's lock through a whole cross build
/// (minutes with `-Zbuild-std` on a loaded machine), and every host build of the tests running
/// meanwhile would wait for it there. Every test that builds fixtures for a GPU target with the
/// default options builds here, so each image is built (and assembled by ptxas) once per run.
pub fn gpu_images_dir() -> PathBuf {
    fixtures_dir().join("target").join("gpu-images")
}

/// Fixture `fixture` loaded through `gpurun-test` on the host emulation with warps of
/// `lane_size` lanes; panics with the load error.
pub fn load_on_host(fixture: &str, lane_size: u32) -> gpurun_test::Gpu {
    gpurun_test::DeviceCrate::new(fixtures_dir().join(fixture))
        .target("host")
        .lane_size(lane_size)
        .load()
        .unwrap_or_else(|error| panic!("loading {fixture} (lane size {lane_size}): {error}"))
}

/// Builds binary `name` of workspace package `package` (for the current target, or with
/// `release` in release mode) and returns its path.
fn build_binary(package: &str, name: &str, release: bool) -> PathBuf {
    let build = escargot::CargoBuild::new()
        .package(package)
        .bin(name)
        .manifest_path(repo_root().join("Cargo.toml"));
    let build = if release {
        build.release()
    } else {
        build.current_target()
    };
    build
        .run()
        .unwrap_or_else(|e| panic!("building {name} failed: {e}"))
        .path()
        .to_path_buf()
}

/// Whether this helper library was built optimized (for the benchmarks): then the binary and
/// the fixture images are release builds too, as `cargo install` and `--release` users run
/// them, so that a benchmark does not compare a debug server with an optimized native baseline.
/// The end-to-end tests (debug) use debug builds, which build faster.
const RELEASE: bool = !cfg!(debug_assertions);

/// Path of binary `name` of `package` (built for the current target; release under the
/// benchmarks, see `RELEASE`).
pub fn package_binary(package: &str, name: &str) -> PathBuf {
    build_binary(package, name, RELEASE)
}

/// Path of the `cargo-gpurun` binary, built once per test process.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| package_binary("cargo-gpurun", "cargo-gpurun"))
}

/// Path of gpurun-build's nvptx linker, `gpurun-nvptx-link`, built once per test process.
pub fn nvptx_linker() -> &'static Path {
    static LINKER: OnceLock<PathBuf> = OnceLock::new();
    LINKER.get_or_init(|| package_binary("gpurun-build", "gpurun-nvptx-link"))
}

/// `cargo gpurun ARGS` in the fixtures workspace.
pub fn gpurun(args: &[&str]) -> Command {
    let mut command = Command::new(binary());
    command.arg("gpurun").args(args).current_dir(fixtures_dir());
    command.env_remove("GITHUB_ACTIONS");
    // A CI job that requires a GPU for its own run must not make these tests require one.
    command.env_remove("GPURUN_REQUIRE_GPU");
    // The fixtures have their own target directory; a developer's CARGO_TARGET_DIR is for the
    // main workspace.
    command.env_remove("CARGO_TARGET_DIR");
    command
}

/// The fixtures workspace's manifest.
pub fn fixtures_manifest() -> PathBuf {
    fixtures_dir().join("Cargo.toml")
}

/// `cargo gpurun ARGS` in the repository root with `envs` added, building into
/// `fixtures/target` (or a `CARGO_TARGET_DIR` in `envs`) for the default nvptx architecture
/// whatever GPU this machine has; its output.
pub fn gpurun_in_root(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut command = gpurun(args);
    command
        .current_dir(repo_root())
        .env(gpurun_build::arch::ARCH_DETECT_ENV, "0")
        .envs(envs.iter().copied());
    command.output().expect("run cargo-gpurun")
}

/// `cargo gpurun run OPTIONS IMAGE ARGS` with the host image of fixture `fixture`.
pub fn run_fixture(options: &[&str], fixture: &str, args: &[&str]) -> Command {
    let image = host_image(fixture);
    let mut all = vec!["run"];
    all.extend_from_slice(options);
    all.push(image.to_str().expect("a UTF-8 image path"));
    all.extend_from_slice(args);
    gpurun(&all)
}

/// Runs the ignored test `name` of fixture `fixture`'s host image alone, with warps of
/// `lane_size` lanes; it must fail. Its stdout, and its output for assertion messages.
pub fn run_failing_test_alone(fixture: &str, lane_size: &str, name: &str) -> (String, Output) {
    // A hang or deadlock would end as a timeout, whose message the callers' checks reject.
    let output = run_fixture(
        &["--lane-size", lane_size, "--timeout", "120"],
        fixture,
        &["--ignored", "--exact", name],
    )
    .output()
    .expect("run cargo-gpurun");
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    assert!(
        summary(&stdout).starts_with("test result: FAILED. 0 passed; 1 failed;"),
        "{}",
        describe(&output)
    );
    (stdout, output)
}

/// `cargo gpurun build --target host --message-format json`, without `cargo`: stdout has one
/// JSON line per image built (see [`json_lines`]).
pub const HOST_BUILD_JSON: [&str; 6] = [
    "gpurun",
    "build",
    "--target",
    "host",
    "--message-format",
    "json",
];

/// The JSON values of `stdout`, one a line (each line must be JSON).
pub fn json_lines(stdout: &str) -> impl Iterator<Item = serde_json::Value> + '_ {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("JSON line"))
}

/// The images of a successful `--message-format json` build, one a line of `output`'s stdout.
pub fn built_images(output: &Output) -> Vec<serde_json::Value> {
    assert!(
        output.status.success(),
        "build failed:\n{}",
        text(&output.stderr)
    );
    json_lines(&text(&output.stdout))
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

/// Builds every fixture for the host once per test process and returns the image directory:
/// `fixtures/target/<host triple>/debug` (or `release`) with the emulation's memory checks, the
/// default, which build with the nightly into the host triple's directory.
pub fn host_images() -> &'static Path {
    static IMAGES: OnceLock<PathBuf> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let mut args = vec![
            "build",
            "--workspace",
            "--target",
            "host",
            "--message-format",
            "json",
        ];
        if RELEASE {
            args.push("--release");
        }
        let output = gpurun(&args)
            .output()
            .unwrap_or_else(|e| panic!("running cargo-gpurun failed: {e}"));
        assert!(
            output.status.success(),
            "building the fixtures for the host failed:\n{}",
            text(&output.stderr)
        );
        let stdout = text(&output.stdout);
        let profile = if RELEASE { "release" } else { "debug" };
        // A lib's image, right in the profile's directory (bins and examples lie deeper).
        let dir = json_lines(&stdout)
            .filter_map(|line| line["path"].as_str().map(PathBuf::from))
            .filter_map(|path| path.parent().map(Path::to_path_buf))
            .find(|dir| dir.file_name().is_some_and(|name| name == profile));
        dir.expect("the build names a lib's image")
    })
}

/// libtest's closing `test result:` line of `stdout`, or `<no summary>`.
pub fn summary(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|line| line.starts_with("test result:"))
        .unwrap_or("<no summary>")
}

/// Runs every test of `fixture`'s host image with warps of 1, 32 and 64 lanes; each run must
/// pass with a summary starting `expected` (`test result: ok. N passed; ...`).
pub fn assert_passes_at_lane_sizes_1_32_and_64(fixture: &str, expected: &str) {
    host_images();
    for lane_size in ["1", "32", "64"] {
        let output = run_fixture(&["--lane-size", lane_size], fixture, &[])
            .output()
            .unwrap();
        assert!(
            output.status.success() && summary(&text(&output.stdout)).starts_with(expected),
            "lane size {lane_size}: {}",
            describe(&output)
        );
    }
}

/// The lib images of `packages` built for the host in release mode without the emulation's
/// memory checks (as `cargo gpurun bench` builds them), with `extra` build arguments (features),
/// by package name.
pub fn plain_release_images(packages: &[&str], extra: &[&str]) -> Vec<(String, PathBuf)> {
    let mut args = vec!["build"];
    for package in packages {
        args.extend(["-p", package]);
    }
    args.extend([
        "--target",
        "host",
        "--release",
        "--emulation-checks",
        "off",
        "--message-format",
        "json",
    ]);
    args.extend_from_slice(extra);
    let output = gpurun(&args).output().expect("cargo-gpurun runs");
    assert!(output.status.success(), "{}", describe(&output));
    let images: Vec<(String, PathBuf)> = json_lines(&text(&output.stdout))
        .filter(|line| line["reason"] == "gpurun-image" && line["kind"] == "lib")
        .filter_map(|line| {
            let package = line["package"].as_str()?.to_owned();
            Some((package, PathBuf::from(line["path"].as_str()?)))
        })
        .collect();
    assert_eq!(images.len(), packages.len(), "{}", describe(&output));
    images
}

/// Where the host images of the fixtures are built, relative to the fixtures' workspace:
/// `target/<host triple>` (`cargo gpurun` names the host's triple for the memory checks' build).
pub fn host_target_dir() -> String {
    host_images()
        .parent()
        .and_then(|dir| dir.strip_prefix(fixtures_dir()).ok())
        .map(|dir| dir.display().to_string())
        .expect("host images under the fixtures' target directory")
}

/// The host image of fixture `name` (`lib<name>.so`, dashes as underscores).
pub fn host_image(name: &str) -> PathBuf {
    host_images().join(format!("lib{}.so", name.replace('-', "_")))
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The non-empty lines of `output`'s stdout.
pub fn lines(output: &Output) -> Vec<String> {
    text(&output.stdout)
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
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

/// The lines of `text` that start with `prefix` (`note:`, `warning:`).
pub fn lines_starting<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .collect()
}

/// What `-- --list` prints for `fixtures/targets`, whose lib, tests/integration.rs and
/// examples/demo.rs are each a suite, in cargo's order (the same on every target).
pub const TARGETS_LIST: [&str; 8] = [
    "lib_passes: test",
    "lib_passes_on_every_thread: test",
    "2 tests, 0 benchmarks",
    "integration_fails_on_purpose: test",
    "integration_passes: test",
    "2 tests, 0 benchmarks",
    "demo_passes: test",
    "1 test, 0 benchmarks",
];

/// Asserts that `haystack` (read from `output`) contains `needle`; shows both streams if not.
#[track_caller]
pub fn assert_contains(haystack: &str, needle: &str, output: &Output) {
    assert!(haystack.contains(needle), "{}", describe(output));
}

/// Asserts libtest's `test NAME ... RESULT` line on stdout for each `(NAME, RESULT)`.
#[track_caller]
pub fn assert_test_lines(output: &Output, results: &[(&str, &str)]) {
    let stdout = text(&output.stdout);
    for (name, result) in results {
        let line = format!("test {name} ... {result}");
        assert!(
            stdout.lines().any(|l| l == line),
            "missing `{line}`\n{}",
            describe(output)
        );
    }
}

/// A tool the test needs is missing: under `CI=true`, where scripts/setup.sh installed every
/// tool, that is a failure; elsewhere the test prints `SKIPPED: message` and the caller returns.
pub fn tool_missing(message: &str) {
    assert!(!in_ci(), "{message}");
    eprintln!("SKIPPED: {message}");
}

/// `true` when `what` is available; otherwise says why the test does not run (or fails under
/// CI, see [`tool_missing`]).
pub fn available(what: &str, present: bool) -> bool {
    if !present {
        tool_missing(&format!(
            "{what} is missing (installed by scripts/setup.sh)"
        ));
    }
    present
}

/// The nightly toolchain (or `GPURUN_TOOLCHAIN`'s) with rust-src and llvm-tools, as device
/// builds use it; `None` after saying why the test does not run (see [`available`]).
pub fn nightly() -> Option<Toolchain> {
    let toolchain = Toolchain::probe().ok();
    let ready = toolchain
        .as_ref()
        .is_some_and(|toolchain| toolchain.missing_components().is_empty());
    available("the nightly toolchain with rust-src and llvm-tools", ready)
        .then_some(toolchain)
        .flatten()
}

/// Whether this is CI (`CI=true`), where every tool scripts/setup.sh installs must be present.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}

/// The run count of a benchmark: `GPURUN_BENCH_RUNS`, else `default`.
pub fn bench_runs(default: usize) -> usize {
    std::env::var("GPURUN_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `duration` in milliseconds, for a benchmark's table.
pub fn ms(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// How many times `baseline` `took` is (the "vs" column of a benchmark's table).
pub fn ratio(took: std::time::Duration, baseline: std::time::Duration) -> f64 {
    took.as_secs_f64() / baseline.as_secs_f64()
}

/// Median wall time of `runs` executions of `command()` (each must succeed).
pub fn median_time(runs: usize, command: impl FnMut() -> Command) -> std::time::Duration {
    median_time_checked(runs, command, |output| {
        assert!(
            output.status.success(),
            "benchmark command failed:\n{}",
            describe(output)
        );
    })
}

/// Median wall time of `runs` executions of `command()`, each of whose output `check` accepts
/// (it panics on one it does not).
pub fn median_time_checked(
    runs: usize,
    mut command: impl FnMut() -> Command,
    check: impl Fn(&Output),
) -> std::time::Duration {
    let mut times: Vec<std::time::Duration> = (0..runs.max(1))
        .map(|_| {
            let started = std::time::Instant::now();
            let output = command()
                .output()
                .unwrap_or_else(|e| panic!("cannot run: {e}"));
            let took = started.elapsed();
            check(&output);
            took
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Path of a binary of this crate, built once.
pub fn own_binary(name: &str) -> PathBuf {
    build_binary("gpurun-e2e", name, true)
}

/// Threads that spin until dropped, each wanting a whole core.
pub struct Hogs {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hogs {
    pub fn start(count: usize) -> Hogs {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..count)
            .map(|_| {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        Hogs { stop, threads }
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}
