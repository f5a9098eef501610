//! cargo-gpurun as cargo's `target.runner` (and `gpurun-nvptx-link` as its linker) for nvptx:
//! plain `cargo +nightly test/run` and `cargo nextest` in `examples/plain-cargo-nvptx`, with the
//! runner and linker pointed at the binaries of this checkout through cargo's environment
//! variables (the example's `.cargo/config.toml` names the installed ones). Without a GPU the
//! tests are listed from the real PTX, and running one fails with the missing-driver message; on
//! a machine with an NVIDIA GPU the same tests check that the device code ran.

use gpurun_e2e::{
    assert_contains, binary, describe, json_lines, nvptx_linker, repo_root, text, HOST_BUILD_JSON,
};
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

const TRIPLE: &str = "nvptx64-nvidia-cuda";

/// The unit tests of the example's library (`src/lib.rs`, `[lib] harness = false`).
const LIB_TESTS: [&str; 2] = [
    "tests::triangle_matches_the_closed_form_on_every_thread",
    "tests::triangle_numbers",
];
/// Every `#[gpurun::test]` of `examples/plain-cargo-nvptx/tests/device.rs`, and the ignored one.
const DEVICE_TESTS: [&str; 5] = [
    "adds",
    "allocates",
    "every_lane_knows_its_index",
    "nested::ignored",
    "reports_panics",
];
const IGNORED_TESTS: [&str; 1] = ["nested::ignored"];

/// What the runner says when it cannot open a GPU (no `libcuda.so` on the machine).
const NO_DRIVER: &str = "no NVIDIA driver found";

fn example_dir() -> PathBuf {
    repo_root().join("examples/plain-cargo-nvptx")
}

/// The toolchain the example builds with: `GPURUN_TOOLCHAIN`, else `nightly` (as `cargo gpurun
/// build` picks it).
fn toolchain() -> String {
    std::env::var("GPURUN_TOOLCHAIN")
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "nightly".to_owned())
}

/// Whether the nightly with rust-src and llvm-tools is here; without it the tests say why and,
/// under CI (which must have it), fail.
fn nightly_present() -> bool {
    let toolchain = toolchain();
    let output = Command::new("rustup")
        .args([
            "component",
            "list",
            "--toolchain",
            &toolchain,
            "--installed",
        ])
        .output();
    let present = output.is_ok_and(|o| {
        let listed = text(&o.stdout);
        o.status.success() && listed.contains("rust-src") && listed.contains("llvm-tools")
    });
    if !present {
        let message = format!(
            "the {toolchain} toolchain with rust-src and llvm-tools is missing (run scripts/setup.sh)"
        );
        gpurun_e2e::tool_missing(&message);
    }
    present
}

/// `cargo +nightly ARGS` in the example, with the runner and linker of this checkout. Build
/// settings meant for the main workspace (its target directory, rustflags, an outer cargo's
/// toolchain) are removed, so every test shares the example's own `target/` and builds once.
fn cargo(args: &[&str]) -> Command {
    let runner = binary();
    let runner_text = runner.to_string_lossy();
    // cargo splits a runner given in the environment at whitespace.
    assert!(
        !runner_text.contains(char::is_whitespace),
        "the runner path `{runner_text}` has whitespace, which CARGO_TARGET_*_RUNNER cannot hold"
    );
    let mut command = Command::new("cargo");
    command
        .arg(format!("+{}", toolchain()))
        .args(args)
        .current_dir(example_dir());
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTDOC",
        "CARGO",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "GPURUN_BACKEND",
        "GITHUB_ACTIONS",
    ] {
        command.env_remove(var);
    }
    command
        .env("CARGO_TARGET_NVPTX64_NVIDIA_CUDA_LINKER", nvptx_linker())
        .env(
            "CARGO_TARGET_NVPTX64_NVIDIA_CUDA_RUNNER",
            format!("{runner_text} gpurun run"),
        );
    command
}

fn output_of(mut command: Command) -> Output {
    command
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo: {e}"))
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|name| name.to_string()).collect()
}

/// The names in libtest's `--list --format terse` output.
fn terse_list(stdout: &[u8]) -> BTreeSet<String> {
    text(stdout)
        .lines()
        .filter_map(|line| line.strip_suffix(": test").map(str::to_owned))
        .collect()
}

/// `cargo test ARGS -- --list --format terse [LIST_ARGS]`, which must succeed; the names listed.
fn cargo_test_list(cargo_args: &[&str], list_args: &[&str]) -> BTreeSet<String> {
    let mut args = vec!["test", "--target", TRIPLE];
    args.extend_from_slice(cargo_args);
    args.extend_from_slice(&["--", "--list", "--format", "terse"]);
    args.extend_from_slice(list_args);
    let output = output_of(cargo(&args));
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    terse_list(&output.stdout)
}

#[test]
fn cargo_test_lists_the_device_tests_from_the_ptx() {
    if !nightly_present() {
        return;
    }
    let all = output_of(cargo(&[
        "test", "--target", TRIPLE, "--", "--list", "--format", "terse",
    ]));
    assert_eq!(all.status.code(), Some(0), "{}", describe(&all));
    let every_test: BTreeSet<String> = set(&LIB_TESTS)
        .union(&set(&DEVICE_TESTS))
        .cloned()
        .collect();
    assert_eq!(terse_list(&all.stdout), every_test, "{}", describe(&all));
    // cargo ran our runner on each PTX test image it linked with our linker.
    let stderr = text(&all.stderr);
    for target in ["unittests src/lib.rs", "tests/device.rs"] {
        let running = stderr
            .lines()
            .find(|line| line.contains(&format!("Running {target} ")));
        assert!(
            running.is_some_and(|line| line.ends_with(".ptx)")),
            "no PTX test image for {target}\n{}",
            describe(&all)
        );
    }

    assert_eq!(cargo_test_list(&["--lib"], &[]), set(&LIB_TESTS));
    assert_eq!(
        cargo_test_list(&["--test", "device"], &[]),
        set(&DEVICE_TESTS)
    );
    assert_eq!(
        cargo_test_list(&["--test", "device"], &["--ignored"]),
        set(&IGNORED_TESTS)
    );
    assert_eq!(cargo_test_list(&[], &["--exact", "adds"]), set(&["adds"]));
    assert_eq!(
        cargo_test_list(&[], &["triangle", "--skip", "closed_form"]),
        set(&["tests::triangle_numbers"])
    );
}

#[test]
fn cargo_test_runs_each_test_on_the_gpu_or_says_there_is_none() {
    if !nightly_present() {
        return;
    }
    let output = output_of(cargo(&["test", "--target", TRIPLE, "--no-fail-fast"]));
    let stdout = text(&output.stdout);
    if stdout.contains(NO_DRIVER) {
        // No GPU: every test that is not ignored fails with the reason, libtest-style, and cargo
        // goes on to the next test image.
        assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
        let not_ignored = LIB_TESTS
            .iter()
            .chain(&DEVICE_TESTS)
            .filter(|n| !IGNORED_TESTS.contains(n));
        for name in not_ignored {
            assert!(
                stdout.contains(&format!("test {name} ... FAILED"))
                    || stdout.contains(&format!("test {name} - should panic ... FAILED")),
                "{name} did not fail for the missing driver\n{}",
                describe(&output)
            );
        }
        for summary in [
            "test result: FAILED. 0 passed; 2 failed; 0 ignored",
            "test result: FAILED. 0 passed; 4 failed; 1 ignored",
        ] {
            assert!(stdout.contains(summary), "{summary}\n{}", describe(&output));
        }
    } else {
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
        for summary in [
            "test result: ok. 2 passed; 0 failed; 0 ignored",
            "test result: ok. 4 passed; 0 failed; 1 ignored",
        ] {
            assert!(stdout.contains(summary), "{summary}\n{}", describe(&output));
        }
    }
}

#[test]
fn cargo_run_hands_the_ptx_program_to_the_runner() {
    if !nightly_present() {
        return;
    }
    let output = output_of(cargo(&["run", "--target", TRIPLE, "--", "first", "second"]));
    let stderr = text(&output.stderr);
    // cargo reached our runner with the linked program and the arguments, after a clean build.
    assert!(
        stderr.contains(&format!("{TRIPLE}/debug/hello.ptx first second")),
        "{}",
        describe(&output)
    );
    assert!(
        !stderr.contains("linking with") && !stderr.contains("error["),
        "{}",
        describe(&output)
    );
    if stderr.contains(NO_DRIVER) {
        // No GPU: one clear error line from the runner, exit status 1.
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
        assert!(
            stderr.contains(&format!("error: {NO_DRIVER}")),
            "{}",
            describe(&output)
        );
        // ... naming the host route that works for this bin (tested below).
        assert!(
            stderr
                .contains("`cargo gpurun build --target host` in its crate and `cargo gpurun run`"),
            "{}",
            describe(&output)
        );
        assert!(output.stdout.is_empty(), "{}", describe(&output));
    } else {
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
        let expected = "hello from GPU thread 0 (triangle number 0)\nargv[0] = ";
        let stdout = text(&output.stdout);
        assert!(stdout.starts_with(expected), "{}", describe(&output));
        assert!(
            stdout.ends_with("argv[1] = first\nargv[2] = second\n"),
            "{}",
            describe(&output)
        );
    }
}

/// What the runner's missing-GPU hint says to do for a program bin built through cargo: `cargo
/// gpurun build --target host` in its crate, then `cargo gpurun run` the host image it prints for
/// the bin. The bin is linked as a shared object there, which the host emulation loads.
#[test]
fn the_host_route_of_the_missing_gpu_hint_runs_the_program_bin() {
    let output = output_of({
        let mut command = Command::new(binary());
        command
            .args(HOST_BUILD_JSON)
            .current_dir(example_dir())
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS");
        command
    });
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let image = json_lines(&text(&output.stdout))
        .find(|image| image["kind"] == "bin" && image["name"] == "hello")
        .unwrap_or_else(|| panic!("no host image of bin `hello`\n{}", describe(&output)));
    let path = image["path"].as_str().expect("path").to_owned();
    let output = output_of({
        let mut command = Command::new(binary());
        command.args(["gpurun", "run", &path, "first", "second"]);
        command
    });
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stdout = text(&output.stdout);
    assert!(
        stdout.starts_with("hello from GPU thread 0 (triangle number 0)\nargv[0] = ")
            && stdout.ends_with("argv[1] = first\nargv[2] = second\n"),
        "{}",
        describe(&output)
    );
}

/// The tests `cargo nextest list --message-format oneline` prints, one `BINARY-ID NAME` line
/// each: `plain-cargo-nvptx` is the library's unit tests, `plain-cargo-nvptx::device` the test target.
fn nextest_list(stdout: &[u8]) -> BTreeSet<String> {
    text(stdout).lines().map(str::to_owned).collect()
}

/// The `BINARY-ID NAME` lines nextest should list, with or without the ignored test.
fn nextest_expected(with_ignored: bool) -> BTreeSet<String> {
    let lib = LIB_TESTS
        .iter()
        .map(|name| format!("plain-cargo-nvptx {name}"));
    let device = DEVICE_TESTS
        .iter()
        .filter(|name| with_ignored || !IGNORED_TESTS.contains(name))
        .map(|name| format!("plain-cargo-nvptx::device {name}"));
    lib.chain(device).collect()
}

#[test]
fn nextest_lists_and_runs_the_device_tests_through_the_runner() {
    if !nightly_present() {
        return;
    }
    let probe = cargo(&["nextest", "--version"]).output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        // nextest is optional (CI need not have it); the other tests cover the runner.
        let why = match probe {
            Ok(o) => text(&o.stderr)
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned(),
            Err(e) => e.to_string(),
        };
        eprintln!("SKIPPED: cargo-nextest is not installed ({why})");
        return;
    }
    // `cargo nextest list --message-format oneline [EXTRA]` succeeds and lists what it should.
    let assert_nextest_lists = |extra: &[&str], with_ignored: bool| {
        let mut args = vec![
            "nextest",
            "list",
            "--target",
            TRIPLE,
            "--message-format",
            "oneline",
        ];
        args.extend_from_slice(extra);
        let listed = output_of(cargo(&args));
        assert_eq!(listed.status.code(), Some(0), "{}", describe(&listed));
        assert_eq!(
            nextest_list(&listed.stdout),
            nextest_expected(with_ignored),
            "{}",
            describe(&listed)
        );
    };
    assert_nextest_lists(&[], false);
    // nextest asks the runner for ignored tests separately (`--list --format terse --ignored`).
    assert_nextest_lists(&["--run-ignored", "all"], true);

    // nextest runs each test in a runner process of its own (`--exact NAME --nocapture`).
    let run = output_of(cargo(&[
        "nextest",
        "run",
        "--target",
        TRIPLE,
        "--no-fail-fast",
    ]));
    let stderr = text(&run.stderr);
    if stderr.contains(NO_DRIVER) {
        assert_eq!(run.status.code(), Some(100), "{}", describe(&run));
        assert_contains(&stderr, "6 tests run: 0 passed, 6 failed, 1 skipped", &run);
        let one_test_per_process = stderr
            .lines()
            .filter(|line| line.contains("test result: FAILED. 0 passed; 1 failed; 0 ignored"))
            .count();
        assert_eq!(one_test_per_process, 6, "{}", describe(&run));
    } else {
        assert_eq!(run.status.code(), Some(0), "{}", describe(&run));
        assert_contains(&stderr, "6 tests run: 6 passed, 1 skipped", &run);
    }
}

#[test]
fn linker_binary_refuses_bad_input_with_one_error_line() {
    let run = |args: &[&str]| {
        let output = Command::new(nvptx_linker())
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run gpurun-nvptx-link: {e}"));
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{}", describe(&output));
        stderr
    };
    assert!(run(&[]).starts_with("error: bad linker arguments: no output file"));
    assert!(
        run(&["a.o", "-o", "a.ptx", "--target", "x86_64-unknown-linux-gnu"])
            .contains("only links nvptx64-nvidia-cuda")
    );
    // Reading the inputs comes after finding the LLVM tools, so this one needs the toolchain.
    if nightly_present() {
        let not_bitcode = repo_root().join("README.md");
        let output_dir = std::env::temp_dir().join(format!("gpurun-link-{}", std::process::id()));
        let out = output_dir.join("out.ptx");
        let stderr = run(&[not_bitcode.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert!(
            stderr.contains("README.md is not an LLVM bitcode file or archive"),
            "{stderr}"
        );
        assert!(!out.exists(), "no PTX from a failed link");
        let _ = std::fs::remove_dir_all(&output_dir);
    }
}

#[test]
fn linker_binary_uses_the_llvm_tools_of_the_rustc_that_calls_it() {
    if !nightly_present() {
        return;
    }
    let sysroot = Command::new("rustc")
        .arg(format!("+{}", toolchain()))
        .args(["--print", "sysroot"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .expect("rustc runs");
    assert!(sysroot.status.success(), "{}", describe(&sysroot));
    let sysroot = PathBuf::from(text(&sysroot.stdout).trim());
    let self_contained = sysroot.join("lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained");
    let output_dir = std::env::temp_dir().join(format!("gpurun-link-tools-{}", std::process::id()));
    let out = output_dir.join("out.ptx");
    // The linker on README.md with `extra` arguments, no `rustc` on PATH and no GPURUN_*
    // variables: it must fail (exit status 1) saying `expected`.
    let link_fails_with = |extra: &[&OsStr], expected: &str| {
        let output = Command::new(nvptx_linker())
            .arg(repo_root().join("README.md"))
            .args(extra)
            .arg("-o")
            .arg(&out)
            .env("PATH", "/nonexistent-dir")
            .env_remove("GPURUN_LLVM_TOOLS_DIR")
            .env_remove("GPURUN_TOOLCHAIN")
            .output()
            .expect("gpurun-nvptx-link runs");
        assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
        assert_contains(&text(&output.stderr), expected, &output);
    };
    // The tools can only come from the sysroot rustc names with `-L`, so the link gets as far as
    // reading its (non-bitcode) input.
    link_fails_with(
        &[OsStr::new("-L"), self_contained.as_os_str()],
        "README.md is not an LLVM bitcode file or archive",
    );
    // Without that `-L` it falls back to running `rustc +nightly`, which is not on this PATH.
    link_fails_with(&[], "cannot find the LLVM tools");
    let _ = std::fs::remove_dir_all(&output_dir);
}
