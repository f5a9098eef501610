//! `cargo gpurun` in workspaces made for each test in a scratch directory, as a user would meet
//! it: which packages a command selects (cargo's rules), a workspace that mixes a plain kernel
//! crate and a broken image with crates that have tests, and the user's `build.rustflags`.
//!
//! Every workspace builds into one shared target directory, so the device runtime is compiled
//! once for the host (and `core`/`alloc` once for nvptx).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpurun_e2e::{binary, describe, lines, nightly, repo_root, text};

fn scratch() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("workspaces")
}

/// `cargo-gpurun gpurun ARGS` in `cwd`, building into the shared target directory.
fn gpurun(cwd: &Path, args: &[&str]) -> Output {
    Command::new(binary())
        .arg("gpurun")
        .args(args)
        .current_dir(cwd)
        .env("CARGO_TARGET_DIR", scratch().join("target"))
        .env(gpurun_build::arch::ARCH_DETECT_ENV, "0")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .output()
        .expect("run cargo-gpurun")
}

/// [`gpurun`], which must succeed.
#[track_caller]
fn gpurun_ok(cwd: &Path, args: &[&str]) -> Output {
    let output = gpurun(cwd, args);
    assert!(output.status.success(), "{}", describe(&output));
    output
}

/// The kinds of member crate the tests put in a workspace.
#[derive(Clone, Copy)]
enum Member {
    /// A kernel crate without the device runtime (like `fixtures/bare-kernel`): a device crate
    /// by its `[package.metadata.gpurun]` table, with no tests. Its `user_flag_seen` kernel
    /// exists only under `--cfg gpurun_user_flag`.
    Kernel,
    /// A device crate on the `gpurun` crate with one passing `#[gpurun::test]`.
    Tested,
    /// An image that claims tests (it exports the test ABI version) but is no host emulation
    /// image: loading it fails.
    Broken,
    /// A plain host library: not a device crate.
    Plain,
}

const KERNEL_LIB: &str = r#"#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_gpu_kernel))]
#[cfg(not(target_arch = "nvptx64"))]
extern crate std;

#[cfg(target_arch = "nvptx64")]
#[no_mangle]
pub extern "gpu-kernel" fn kernel() {}
#[cfg(not(target_arch = "nvptx64"))]
#[no_mangle]
pub extern "C" fn kernel() {}

#[cfg(all(gpurun_user_flag, target_arch = "nvptx64"))]
#[no_mangle]
pub extern "gpu-kernel" fn user_flag_seen() {}

#[cfg(all(gpurun_target_flag, target_arch = "nvptx64"))]
#[no_mangle]
pub extern "gpu-kernel" fn target_flag_seen() {}

#[cfg(all(panic = "unwind", not(target_arch = "nvptx64")))]
#[no_mangle]
pub extern "C" fn host_unwinds() {}

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
"#;

fn write(path: &Path, contents: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

/// A fresh virtual workspace `name` with these members (and `default-members` when given).
fn workspace(name: &str, members: &[(&str, Member)], default_members: Option<&[&str]>) -> PathBuf {
    let root = scratch().join(name);
    let _ = std::fs::remove_dir_all(&root);
    let quoted = |names: &mut dyn Iterator<Item = &str>| {
        names
            .map(|name| format!("{name:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut manifest = format!(
        "[workspace]\nresolver = \"2\"\nmembers = [{}]\n",
        quoted(&mut members.iter().map(|(name, _)| *name))
    );
    if let Some(defaults) = default_members {
        manifest += &format!(
            "default-members = [{}]\n",
            quoted(&mut defaults.iter().copied())
        );
    }
    manifest += "\n[profile.dev]\npanic = \"abort\"\n";
    write(&root.join("Cargo.toml"), &manifest);
    // The fixtures' lock file: the device runtime's dependencies resolve offline, at the
    // versions the repository tests.
    std::fs::copy(
        repo_root().join("fixtures/Cargo.lock"),
        root.join("Cargo.lock"),
    )
    .unwrap();
    let device = repo_root().join("crates/gpurun");
    for (member, kind) in members {
        let dir = root.join(member);
        let mut manifest = format!(
            "[package]\nname = \"{member}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [lints.rust]\nunexpected_cfgs = {{ level = \"warn\", check-cfg = \
             [\"cfg(gpurun_user_flag)\", \"cfg(gpurun_target_flag)\"] }}\n\n"
        );
        let lib = match kind {
            Member::Kernel => {
                manifest += "[lib]\ncrate-type = [\"cdylib\"]\n\n[package.metadata.gpurun]\n";
                KERNEL_LIB.to_owned()
            }
            Member::Tested => {
                manifest += &format!(
                    "[lib]\ncrate-type = [\"cdylib\"]\n\n[dependencies]\n\
                     gpurun = {{ path = {:?} }}\n",
                    device.display().to_string()
                );
                "#![no_std]\n#[gpurun::test]\nfn adds() {\n    assert_eq!(1 + 1, 2);\n}\n"
                    .to_owned()
            }
            Member::Broken => {
                manifest += "[lib]\ncrate-type = [\"cdylib\"]\n\n[package.metadata.gpurun]\n";
                "#[no_mangle]\npub static __gpurun_test_abi_version: u32 = 1;\n\
                 #[no_mangle]\npub extern \"C\" fn kernel() {}\n"
                    .to_owned()
            }
            Member::Plain => "pub fn plain() {}\n".to_owned(),
        };
        write(&dir.join("Cargo.toml"), &manifest);
        write(&dir.join("src/lib.rs"), &lib);
    }
    root
}

/// The packages a `--message-format json` build in `cwd` reports, sorted.
fn built_packages(cwd: &Path, args: &[&str]) -> Vec<String> {
    let mut all = vec!["build", "--target", "host", "--message-format", "json"];
    all.extend_from_slice(args);
    let output = gpurun_ok(cwd, &all);
    let mut packages: Vec<String> = text(&output.stdout)
        .lines()
        .map(|line| {
            let image: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            image["package"].as_str().expect("package").to_owned()
        })
        .collect();
    packages.sort();
    packages
}

/// The image names of the suites a `cargo gpurun test` run announced on stderr, in order.
fn suites(output: &Output) -> Vec<String> {
    text(&output.stderr)
        .lines()
        .filter_map(|line| line.strip_prefix("     Running unittests src/lib.rs ("))
        .map(|rest| {
            let path = rest.trim_end_matches(')');
            Path::new(path)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn packages_are_selected_as_cargo_selects_them() {
    use Member::{Kernel, Plain};
    let members = [("alpha", Kernel), ("beta", Kernel), ("plain", Plain)];
    let root = workspace("selection", &members, None);
    let alpha_manifest = root.join("alpha/Cargo.toml");
    let alpha_manifest = alpha_manifest.to_str().unwrap();
    // --manifest-path of a member: that member only, wherever it runs from.
    assert_eq!(
        built_packages(&scratch(), &["--manifest-path", alpha_manifest]),
        ["alpha"]
    );
    // Inside a member's directory: that member.
    assert_eq!(built_packages(&root.join("beta"), &[]), ["beta"]);
    assert_eq!(built_packages(&root.join("beta/src"), &[]), ["beta"]);
    // At the virtual root: every device crate; --workspace from a member too.
    assert_eq!(built_packages(&root, &[]), ["alpha", "beta"]);
    assert_eq!(
        built_packages(&root.join("beta"), &["--workspace"]),
        ["alpha", "beta"]
    );
    assert_eq!(
        built_packages(&root.join("beta"), &["-p", "alpha"]),
        ["alpha"]
    );
    // A member that is not a device crate, selected alone, is refused.
    let output = gpurun(&root.join("plain"), &["build", "--target", "host"]);
    assert!(!output.status.success(), "{}", describe(&output));
    assert!(
        text(&output.stderr).contains("error: `plain` is not a device crate"),
        "{}",
        describe(&output)
    );

    // `default-members` at a virtual root; a member's directory still selects that member.
    let root = workspace("default-members", &members, Some(&["beta"]));
    assert_eq!(built_packages(&root, &[]), ["beta"]);
    assert_eq!(built_packages(&root.join("alpha"), &[]), ["alpha"]);
    assert_eq!(built_packages(&root, &["--workspace"]), ["alpha", "beta"]);

    // `cargo gpurun test` (and its `--list`) selects the same way.
    let output = gpurun_ok(
        &scratch(),
        &[
            "test",
            "--target",
            "host",
            "--manifest-path",
            alpha_manifest,
            "--",
            "--list",
        ],
    );
    assert_eq!(suites(&output), ["libalpha.so"], "{}", describe(&output));
    let output = gpurun_ok(&root, &["test", "--target", "host"]);
    assert_eq!(suites(&output), ["libbeta.so"], "{}", describe(&output));
}

#[test]
fn a_kernel_crate_is_a_suite_of_no_tests_and_a_broken_image_fails_only_its_suite() {
    use Member::{Broken, Kernel, Tested};
    let root = workspace(
        "suites",
        &[("broken", Broken), ("kernel", Kernel), ("tested", Tested)],
        None,
    );
    let output = gpurun(
        &root,
        &["test", "--target", "host", "--", "--test-threads", "1"],
    );
    // The broken image fails the run; the other two suites still run and report.
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert_eq!(
        suites(&output),
        ["libbroken.so", "libkernel.so", "libtested.so"],
        "{}",
        describe(&output)
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("error: failed to load image") && stderr.contains("libbroken.so"),
        "{}",
        describe(&output)
    );
    let stdout = text(&output.stdout);
    let results: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("running ") || line.starts_with("test adds"))
        .collect();
    assert_eq!(
        results,
        ["running 0 tests", "running 1 test", "test adds ... ok"],
        "{}",
        describe(&output)
    );

    // Listed as such: the kernel crate lists no test, the tested one its test.
    let output = gpurun_ok(
        &root,
        &[
            "test", "--target", "host", "-p", "kernel", "-p", "tested", "--", "--list",
        ],
    );
    assert_eq!(
        lines(&output),
        [
            "0 tests, 0 benchmarks",
            "adds: test",
            "1 test, 0 benchmarks"
        ],
        "{}",
        describe(&output)
    );
    let output = gpurun_ok(
        &root,
        &[
            "test", "--target", "host", "-p", "kernel", "--", "--list", "--format", "terse",
        ],
    );
    assert_eq!(text(&output.stdout), "", "{}", describe(&output));
}

#[test]
fn host_builds_unwind_and_say_so_when_the_profile_aborts() {
    use object::{Object, ObjectSymbol};
    // The scratch workspaces set `panic = "abort"` for `dev`, as device workspaces do.
    let root = workspace("host-panic", &[("unwinds", Member::Kernel)], None);
    let output = gpurun_ok(
        &root,
        &["build", "--target", "host", "--message-format", "json"],
    );
    assert!(
        text(&output.stderr).contains(
            "note: host images are built with panic = \"unwind\", not the \"abort\" of profile `dev`"
        ),
        "{}",
        describe(&output)
    );
    let image: serde_json::Value =
        serde_json::from_str(text(&output.stdout).trim()).expect("one JSON line");
    let bytes = std::fs::read(image["path"].as_str().expect("path")).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    assert!(
        file.dynamic_symbols()
            .any(|symbol| symbol.name() == Ok("host_unwinds")),
        "the host image was not built with panic = \"unwind\""
    );
}

/// The kernels of the one nvptx image a build in `cwd` made.
fn nvptx_kernels(cwd: &Path) -> Vec<String> {
    let output = gpurun_ok(
        cwd,
        &["build", "--target", "nvptx", "--message-format", "json"],
    );
    let image: serde_json::Value =
        serde_json::from_str(text(&output.stdout).trim()).expect("one JSON line");
    let mut kernels: Vec<String> = image["kernels"]
        .as_array()
        .expect("kernels")
        .iter()
        .map(|kernel| kernel.as_str().unwrap().to_owned())
        .collect();
    kernels.sort();
    kernels
}

#[test]
fn the_users_build_rustflags_reach_gpu_builds() {
    if nightly().is_none() {
        return;
    }
    let root = workspace("rustflags", &[("flagged", Member::Kernel)], None);
    let config = root.join(".cargo/config.toml");
    write(
        &config,
        "[build]\nrustflags = [\"--cfg\", \"gpurun_user_flag\"]\n",
    );
    assert_eq!(nvptx_kernels(&root), ["kernel", "user_flag_seen"]);
    // With target-level rustflags of their own, cargo takes those and not `build.rustflags`:
    // so do we (ours join theirs).
    write(
        &config,
        "[build]\nrustflags = [\"--cfg\", \"gpurun_user_flag\"]\n\
         [target.'cfg(target_arch = \"nvptx64\")']\nrustflags = [\"--cfg\", \"gpurun_target_flag\"]\n",
    );
    assert_eq!(nvptx_kernels(&root), ["kernel", "target_flag_seen"]);
}
