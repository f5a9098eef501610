//! `cargo gpurun build` run for real on the fixtures: nvptx (PTX + cubin, assembled for sm_70,
//! sm_80 and sm_90), amdgcn gfx1100 (code object checked with `object` and cross-checked with
//! `llvm-readobj`), the host `.so`, and every bad input the build must refuse with one clear line.
//!
//! The fixtures' GPU builds share the end-to-end tests' GPU target directory (so `core`/`alloc`
//! are built once per target in a run; every debug build for amdgcn is for gfx1100, as
//! tests/cli/amdgpu_code.rs's and tests/e2e/images.rs's are), their host builds `fixtures/target`, and they are
//! serialized with a lock. Tests that need the nightly toolchain or ptxas print why they do
//! not run when those are absent, and fail instead under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use gpurun_build::toolchain::{self, Toolchain};
use gpurun_build::validate;
use gpurun_e2e::{
    available, built_images, fixtures_manifest, gpu_images_dir, gpurun_in_root, in_ci, lines,
    lines_starting, nightly, repo_root, text, TARGETS_LIST,
};
use object::{Object, ObjectSymbol};

static FIXTURES_LOCK: Mutex<()> = Mutex::new(());

fn lock_fixtures() -> MutexGuard<'static, ()> {
    // A failed test poisons the lock; the fixtures are still usable by the next one.
    FIXTURES_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `SUBCOMMAND --manifest-path MANIFEST ARGS`: the arguments of `cargo gpurun` on a manifest.
fn manifest_args<'a>(subcommand: &'a str, manifest: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    let manifest = manifest.to_str().expect("a UTF-8 manifest path");
    [&[subcommand, "--manifest-path", manifest][..], args].concat()
}

/// `cargo gpurun SUBCOMMAND --manifest-path fixtures/Cargo.toml -p PACKAGE ARGS` in the
/// repository root with `envs`. A build for a GPU (named, or by default) goes into the end-to-end
/// tests' GPU target directory ([`gpu_images_dir`]) unless `envs` names one, so that each GPU
/// target's `core` and `alloc` are built once in a run; a host build into `fixtures/target`,
/// beside the end-to-end tests' host images.
fn gpurun_on_fixture(
    subcommand: &str,
    package: &str,
    args: &[&str],
    envs: &[(&str, &Path)],
) -> Output {
    let manifest = fixtures_manifest();
    let targets: Vec<&str> = args
        .windows(2)
        .filter(|pair| pair[0] == "--target")
        .map(|pair| pair[1])
        .collect();
    let for_gpu = targets.is_empty() || targets.iter().any(|target| *target != "host");
    let gpu_images = gpu_images_dir();
    let mut envs = envs.to_vec();
    if for_gpu && !envs.iter().any(|(key, _)| *key == "CARGO_TARGET_DIR") {
        envs.push(("CARGO_TARGET_DIR", &gpu_images));
    }
    let args = [&["-p", package][..], args].concat();
    gpurun_in_root(&manifest_args(subcommand, &manifest, &args), &envs)
}

/// The fixtures' lock, if the nightly toolchain is ready; else `None`, after saying why the test
/// does not run (see `nightly`).
fn lock_fixtures_with_nightly() -> Option<MutexGuard<'static, ()>> {
    let lock = lock_fixtures();
    nightly().map(|_| lock)
}

fn build_json(package: &str, target: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let args = [&["--target", target, "--message-format", "json"][..], extra].concat();
    built_images(&gpurun_on_fixture("build", package, &args, &[]))
}

fn image_path(image: &serde_json::Value, key: &str) -> PathBuf {
    PathBuf::from(
        image[key]
            .as_str()
            .unwrap_or_else(|| panic!("no {key} in {image}")),
    )
}

/// One error line on stderr (cargo's own diagnostics may come before it), and a failure status.
fn assert_one_line_error(output: &Output, expected: &str) {
    assert!(!output.status.success(), "unexpected success");
    let stderr = text(&output.stderr);
    let error_lines: Vec<&str> = stderr
        .lines()
        .filter(|line| line.starts_with("error:"))
        .collect();
    let last = error_lines.last().copied().unwrap_or_default();
    assert!(
        last.contains(expected),
        "expected an error line containing {expected:?}, stderr was:\n{stderr}"
    );
}

fn check_ptx_assembles_for(ptx: &Path, arches: &[&str]) {
    let Some(ptxas) = toolchain::find_ptxas() else {
        available("ptxas", false);
        return;
    };
    for arch in arches {
        let cubin = ptx.with_extension(format!("{arch}.test.cubin"));
        validate::assemble_ptx(&ptxas, ptx, arch, &cubin)
            .unwrap_or_else(|err| panic!("{} for {arch}: {err}", ptx.display()));
        assert!(std::fs::metadata(&cubin).unwrap().len() > 0);
        std::fs::remove_file(&cubin).unwrap();
    }
}

fn check_nvptx_image(image: &serde_json::Value, name: &str, ptxas_arches: &[&str]) {
    assert_eq!(image["target"], "nvptx");
    assert_eq!(image["arch"], "sm_70");
    assert_eq!(image["name"], name);
    let ptx = image_path(image, "path");
    assert_eq!(ptx.extension().unwrap(), "ptx");
    let summary = validate::check_ptx(&std::fs::read_to_string(&ptx).unwrap()).unwrap();
    assert_eq!(summary.target, "sm_70");
    assert!(summary.entries.iter().any(|entry| entry == "_start"));
    let kernels: Vec<&str> = image["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kernel| kernel.as_str().unwrap())
        .collect();
    assert_eq!(kernels, summary.entries);
    if available("ptxas", toolchain::find_ptxas().is_some()) {
        let cubin = image_path(image, "cubin");
        let bytes = std::fs::read(&cubin).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF", "cubin is an ELF file");
    }
    check_ptx_assembles_for(&ptx, ptxas_arches);
}

/// The one image of `package` built for `target` (an nvptx spelling), checked as the nvptx image
/// `name`, assembled for sm_70, sm_80 and sm_90.
fn only_nvptx_image(package: &str, target: &str, name: &str) -> serde_json::Value {
    let mut images = build_json(package, target, &[]);
    assert_eq!(images.len(), 1, "{images:?}");
    check_nvptx_image(&images[0], name, &["sm_70", "sm_80", "sm_90"]);
    images.remove(0)
}

#[test]
fn nvptx_build_of_a_bare_kernel() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    let image = only_nvptx_image("bare-kernel", "nvptx", "bare_kernel");
    // Only the entry point survives internalization: core's functions are gone or internal.
    let ptx = std::fs::read_to_string(image_path(&image, "path")).unwrap();
    assert!(!ptx.contains(".visible .func"), "{ptx}");
}

#[test]
fn nvptx_build_of_hello_on_the_device_runtime() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    // sm_90 crashed ptxas 12.9 before the lane id was masked (docs/abi.md, "ptxas"); every
    // fixture is assembled for every architecture in tests/ptxas.rs.
    only_nvptx_image("hello", "nvptx64-nvidia-cuda", "hello");
}

/// `cargo gpurun test -p targets --target TARGET EXTRA -- --list` in the repository root: listing
/// needs the images, not a GPU.
fn list_targets_fixture(target: &str, extra: &[&str]) -> Output {
    list_fixture("targets", target, extra)
}

/// `cargo gpurun test -p PACKAGE --target TARGET EXTRA -- --list` in the repository root.
fn list_fixture(package: &str, target: &str, extra: &[&str]) -> Output {
    let args = [&["--target", target][..], extra, &["--", "--list"]].concat();
    gpurun_on_fixture("test", package, &args, &[])
}

/// Each `     Running WHAT (IMAGE)` line of stderr, split.
fn running_suites(stderr: &str) -> Vec<(String, PathBuf)> {
    stderr
        .lines()
        .filter_map(|line| line.strip_prefix("     Running "))
        .map(|rest| {
            let (what, image) = rest
                .strip_suffix(')')
                .and_then(|rest| rest.split_once(" ("))
                .unwrap_or_else(|| panic!("not a suite header: {rest}"));
            (what.to_owned(), repo_root().join(image))
        })
        .collect()
}

#[test]
fn nvptx_test_builds_and_lists_the_tests_and_example_images() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    let output = list_targets_fixture("nvptx", &["-q"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let suites = running_suites(&text(&output.stderr));
    let what: Vec<&str> = suites.iter().map(|(what, _)| what.as_str()).collect();
    assert_eq!(
        what,
        [
            "unittests src/lib.rs",
            "tests/integration.rs",
            "unittests examples/demo.rs"
        ]
    );
    let debug = gpu_images_dir().join("nvptx64-nvidia-cuda/debug");
    assert_eq!(suites[0].1, debug.join("targets.ptx"));
    assert!(
        suites[1].1.starts_with(debug.join("deps"))
            && suites[1]
                .1
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("integration-")),
        "{}",
        suites[1].1.display()
    );
    assert_eq!(suites[2].1, debug.join("examples/demo.ptx"));
    // Each image is valid PTX whose test kernels are its own tests.
    for ((_, ptx), tests) in suites.iter().zip([2, 2, 1]) {
        assert_eq!(ptx.extension().unwrap(), "ptx");
        assert_eq!(ptx_test_kernels(ptx), tests, "{}", ptx.display());
    }
    assert_eq!(lines(&output), TARGETS_LIST);
}

/// Checks that `ptx` is valid PTX and counts its test kernels (`__gpurun_test_*` entries).
fn ptx_test_kernels(ptx: &Path) -> usize {
    let summary = validate::check_ptx(&std::fs::read_to_string(ptx).unwrap())
        .unwrap_or_else(|err| panic!("{}: {err}", ptx.display()));
    summary
        .entries
        .iter()
        .filter(|entry| entry.starts_with("__gpurun_test_"))
        .count()
}

#[test]
fn nvptx_test_builds_the_lib_in_test_mode_when_it_has_no_harness() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    // fixtures/unit-tests: `[lib] harness = false`, tests only in `#[cfg(test)] mod tests`.
    let output = list_fixture("unit-tests", "nvptx", &["-q"]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let suites = running_suites(&stderr);
    assert_eq!(suites.len(), 1, "{stderr}");
    let (what, ptx) = &suites[0];
    assert_eq!(what, "unittests src/lib.rs");
    // The test-mode build, an executable linked to PTX by our linker, not the plain cdylib.
    let deps = gpu_images_dir().join("nvptx64-nvidia-cuda/debug/deps");
    assert!(
        ptx.starts_with(&deps)
            && ptx.extension().is_some_and(|extension| extension == "ptx")
            && ptx
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("unit_tests-")),
        "{}",
        ptx.display()
    );
    assert_eq!(ptx_test_kernels(ptx), 3, "{}", ptx.display());
    assert_eq!(
        lines(&output),
        [
            "tests::matches_the_closed_form_on_every_thread: test",
            "tests::rejects_a_wrong_sum: test",
            "tests::small_sums: test",
            "3 tests, 0 benchmarks",
        ]
    );
}

#[test]
fn amdgcn_test_notes_it_cannot_build_the_lib_in_test_mode() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    let output = list_fixture("unit-tests", "amdgcn", &["--arch", "gfx1100", "-q"]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        lines_starting(&stderr, "note:"),
        [
            "note: the cfg(test) unit tests of the lib of `unit-tests` are not built for amdgcn: \
          cargo builds them as an executable, which amdgcn-amd-amdhsa cannot link; the lib's own \
          tests run instead"
        ],
        "{stderr}"
    );
    // The plain lib, which has none of the cfg(test) tests, is the lib suite there.
    let suites = running_suites(&stderr);
    assert_eq!(suites.len(), 1, "{stderr}");
    assert_eq!(suites[0].1.extension().unwrap(), "elf");
    assert_eq!(lines(&output), ["0 tests, 0 benchmarks"]);
}

#[test]
fn amdgcn_test_says_why_it_skips_executable_targets() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    let output = list_targets_fixture("amdgcn", &["--arch", "gfx1100", "-q"]);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        lines_starting(&stderr, "note:"),
        [
            "note: skipping test target `integration` of `targets` on amdgcn: cargo builds it as \
             an executable, which amdgcn-amd-amdhsa cannot link",
            "note: skipping example `demo` of `targets` on amdgcn: cargo builds it as an \
             executable, which amdgcn-amd-amdhsa cannot link (give the example crate-type = \
             [\"cdylib\"] to test it there)",
        ],
        "{stderr}"
    );
    let suites = running_suites(&stderr);
    assert_eq!(suites.len(), 1, "{stderr}");
    assert_eq!(suites[0].0, "unittests src/lib.rs");
    assert_eq!(suites[0].1.extension().unwrap(), "elf");
    assert_eq!(
        lines(&output),
        [
            "lib_passes: test",
            "lib_passes_on_every_thread: test",
            "2 tests, 0 benchmarks",
        ]
    );
}

#[test]
fn amdgcn_builds_of_a_bare_kernel_and_of_hello() {
    let _lock = lock_fixtures();
    let Some(toolchain) = nightly() else { return };
    // Two packages and two targets in one command: each --arch goes to its own family.
    let images = build_json(
        "bare-kernel",
        "amdgcn",
        &["-p", "hello", "--target", "host", "--arch", "gfx1100"],
    );
    let amdgcn: Vec<&serde_json::Value> = images
        .iter()
        .filter(|image| image["target"] == "amdgcn")
        .collect();
    assert_eq!(amdgcn.len(), 2, "{images:?}");
    assert_eq!(images.len(), 4, "{images:?}");
    let readobj = toolchain::find_llvm_tool_in(&toolchain.rustlib_bin_dir(), "llvm-readobj")
        .expect("llvm-readobj is part of llvm-tools");
    for image in amdgcn {
        assert_eq!(image["arch"], "gfx1100");
        let kernels: Vec<String> = image["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|kernel| kernel.as_str().unwrap().to_owned())
            .collect();
        // hello's body is the device runtime's to change; its entry kernels are fixed by the ABI.
        match image["name"].as_str().unwrap() {
            "bare_kernel" => assert_eq!(kernels, ["_start"]),
            "hello" => {
                for entry in ["_begin", "_start", "_end"] {
                    assert!(kernels.iter().any(|kernel| kernel == entry), "{kernels:?}");
                }
            }
            other => panic!("unexpected image {other}"),
        }
        let expected = &kernels;
        let path = image_path(image, "path");
        assert_eq!(path.extension().unwrap(), "elf");
        let bytes = std::fs::read(&path).unwrap();
        let summary = validate::check_amdgpu_code_object(&bytes).unwrap();
        assert_eq!(&summary.kernels, expected);
        assert_eq!(
            summary.target.as_deref(),
            Some("amdgcn-amd-amdhsa--gfx1100")
        );

        // Cross-check with LLVM's own reader.
        let output = Command::new(&readobj)
            .args(["--file-headers", "--notes", "--symbols"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(output.status.success());
        let listing = text(&output.stdout);
        assert!(listing.contains("EM_AMDGPU"), "{listing}");
        assert!(listing.contains("NT_AMDGPU_METADATA"), "{listing}");
        assert!(listing.contains("amdgcn-amd-amdhsa--gfx1100"), "{listing}");
        for kernel in expected {
            assert!(listing.contains(&format!("Name: {kernel}.kd")), "{listing}");
            let in_metadata = listing.lines().any(|line| {
                line.trim()
                    .strip_prefix(".name:")
                    .is_some_and(|name| name.trim() == *kernel)
            });
            assert!(in_metadata, "{kernel} not in the metadata:\n{listing}");
        }
    }
}

#[test]
fn amdgcn_arch_from_package_metadata() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    // bare-kernel sets `amdgcn-arch = "gfx1100"` in [package.metadata.gpurun].
    let images = build_json("bare-kernel", "amdgcn", &[]);
    assert_eq!(images[0]["arch"], "gfx1100");
}

#[test]
fn host_builds_are_cdylibs_exporting_the_entry_point() {
    let _lock = lock_fixtures();
    for package in ["bare-kernel", "hello"] {
        let images = build_json(package, "host", &[]);
        assert_eq!(images.len(), 1, "{images:?}");
        let image = &images[0];
        assert_eq!(image["target"], "host");
        assert_eq!(image["arch"], serde_json::Value::Null);
        let path = image_path(image, "path");
        assert_eq!(path.extension().unwrap(), std::env::consts::DLL_EXTENSION);
        let bytes = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*bytes).unwrap();
        assert!(
            file.exports()
                .unwrap()
                .iter()
                .any(|export| export.name() == b"_start")
                || file
                    .dynamic_symbols()
                    .any(|symbol| symbol.name() == Ok("_start") && !symbol.is_undefined()),
            "{package}: no _start in {}",
            path.display()
        );
    }
}

#[test]
fn human_output_names_each_image() {
    let _lock = lock_fixtures();
    let output = gpurun_on_fixture("build", "bare-kernel", &["--target", "host", "-q"], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    // Built for the memory checks (the default), in the host triple's directory.
    let line = stdout.trim();
    assert!(
        line.starts_with("Built host fixtures/target/")
            && line.ends_with("-linux-gnu/debug/libbare_kernel.so"),
        "{stdout}"
    );
}

/// A crate with manifest `manifest` and an empty lib, in scratch directory `dir_name`; the
/// manifest's path.
fn scratch_crate(dir_name: &str, manifest: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir_name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    dir.join("Cargo.toml")
}

#[test]
fn refuses_a_crate_that_is_not_a_device_crate() {
    // No gpurun metadata and no dependency on the `gpurun` crate.
    let manifest = scratch_crate(
        "plain-crate",
        "[package]\nname = \"plain\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    );
    let output = gpurun_in_root(&manifest_args("build", &manifest, &[]), &[]);
    assert_one_line_error(&output, "`plain` is not a device crate");
}

#[test]
fn refuses_unknown_targets_and_architectures() {
    let manifest = fixtures_manifest();
    let cases: &[(&[&str], &str)] = &[
        (&["--target", "riscv64gc"], "unknown target `riscv64gc`"),
        (
            &["--target", "nvptx", "--arch", "sm_1"],
            "unknown nvptx architecture `sm_1`",
        ),
        (
            &["--target", "nvptx", "--arch", "gfx90a"],
            "unknown nvptx architecture `gfx90a`",
        ),
        (
            &["--target", "amdgcn", "--arch", "gfx9999"],
            "unknown amdgcn architecture",
        ),
        (
            &["--target", "host", "--arch", "sm_70"],
            "the host target takes no --arch",
        ),
        (
            &["-p", "no-such-fixture"],
            "`no-such-fixture` is not a member",
        ),
    ];
    for (args, expected) in cases {
        let output = gpurun_in_root(&manifest_args("build", &manifest, args), &[]);
        assert_one_line_error(&output, expected);
    }
    // A device crate that names no amdgcn architecture (fixtures may add one at any time).
    let no_arch_manifest = scratch_crate(
        "device-without-arch",
        "[package]\nname = \"no-arch\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[package.metadata.gpurun]\n\n[workspace]\n",
    );
    let output = gpurun_in_root(
        &manifest_args("build", &no_arch_manifest, &["--target", "amdgcn"]),
        &[],
    );
    assert_one_line_error(
        &output,
        "no amdgcn architecture for `no-arch`: pass `--arch gfx90a`",
    );

    let output = gpurun_in_root(
        &manifest_args("build", Path::new("/no/such/Cargo.toml"), &[]),
        &[],
    );
    assert_one_line_error(&output, "does not exist");
}

#[test]
fn a_missing_llvm_tool_is_one_clear_error() {
    if nightly().is_none() {
        return;
    }
    let empty = Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-llvm-tools");
    std::fs::create_dir_all(&empty).unwrap();
    let output = gpurun_on_fixture(
        "build",
        "bare-kernel",
        &[],
        &[(toolchain::LLVM_TOOLS_DIR_ENV, &empty)],
    );
    assert_one_line_error(&output, "`llvm-link` not found in");
    assert_eq!(
        text(&output.stderr).lines().count(),
        1,
        "{}",
        text(&output.stderr)
    );

    // No such toolchain at all: one line that says how to install it.
    let output = gpurun_on_fixture(
        "build",
        "bare-kernel",
        &[],
        &[
            (toolchain::TOOLCHAIN_ENV, Path::new("no-such-toolchain")),
            ("RUSTUP_AUTO_INSTALL", Path::new("0")),
        ],
    );
    assert_one_line_error(
        &output,
        "install it with `rustup toolchain install no-such-toolchain",
    );
    assert_eq!(text(&output.stderr).lines().count(), 1);

    let doctor = gpurun_in_root(&["doctor"], &[(toolchain::LLVM_TOOLS_DIR_ENV, &empty)]);
    assert!(!doctor.status.success());
    let table = text(&doctor.stdout);
    let llc_row = table.lines().find(|line| line.starts_with("llc ")).unwrap();
    assert!(llc_row.contains("MISSING"), "{table}");
}

/// A tools directory whose `llc` fails loudly, the other tools being the real ones.
#[cfg(unix)]
fn tools_with_failing_llc(toolchain: &Toolchain) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("failing-llc-tools");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for tool in ["llvm-link", "opt"] {
        let real = toolchain::find_llvm_tool_in(&toolchain.rustlib_bin_dir(), tool).unwrap();
        std::os::unix::fs::symlink(real, dir.join(tool)).unwrap();
    }
    let llc = dir.join("llc");
    std::fs::write(
        &llc,
        "#!/bin/sh\necho 'llc: simulated codegen failure' >&2\necho 'second line of detail' >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&llc, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[cfg(unix)]
#[test]
fn a_failing_linker_tool_shows_its_output_and_fails() {
    let _lock = lock_fixtures();
    let Some(toolchain) = nightly() else { return };
    let tools = tools_with_failing_llc(&toolchain);
    // Make cargo relink the fixture (a no-op build would not run the linker at all).
    let source = repo_root().join("fixtures/bare-kernel/src/lib.rs");
    let ptx = gpu_images_dir().join("nvptx64-nvidia-cuda/debug/bare_kernel.ptx");
    let newer_than_ptx = std::fs::metadata(&ptx)
        .and_then(|meta| meta.modified())
        .map_or(std::time::SystemTime::now(), |time| {
            time.max(std::time::SystemTime::now()) + std::time::Duration::from_secs(1)
        });
    std::fs::File::options()
        .append(true)
        .open(&source)
        .unwrap()
        .set_modified(newer_than_ptx)
        .unwrap();
    let output = gpurun_on_fixture(
        "build",
        "bare-kernel",
        &["-q"],
        &[(toolchain::LLVM_TOOLS_DIR_ENV, &tools)],
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("llc: simulated codegen failure"),
        "{stderr}"
    );
    assert!(stderr.contains("second line of detail"), "{stderr}");
    assert_one_line_error(&output, "failed to build bare-kernel for nvptx sm_70");
}

#[test]
fn doctor_lists_every_component() {
    let output = gpurun_in_root(&["doctor"], &[]);
    let table = text(&output.stdout);
    for component in [
        "nightly toolchain",
        "rust-src",
        "llvm-tools",
        "llvm-link",
        "opt",
        "llc",
        "rust-lld",
        "ptxas",
        "libcuda.so",
        "libhsa-runtime64.so.1",
    ] {
        assert!(
            table.lines().any(|line| line.starts_with(component)),
            "no {component} row in\n{table}"
        );
    }
    // Exit status follows the required rows.
    let required_missing = table.lines().any(|line| line.contains("MISSING"));
    assert_eq!(output.status.success(), !required_missing, "{table}");
    if in_ci() {
        assert!(
            output.status.success(),
            "CI must have the toolchain:\n{table}"
        );
    }
}

#[cfg(unix)]
fn fake_ptxas(name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-ptxas");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[cfg(unix)]
#[test]
fn ptxas_errors_and_ptxas_crashes_fail_the_build() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    let images = build_json("bare-kernel", "nvptx", &[]);
    let ptx = image_path(&images[0], "path");
    // Ages the cubin (if any) so the next build assembles the PTX again. (Moving the PTX into
    // the future instead would make cargo think later source edits older than its output.)
    let make_ptx_newer_than_cubin = || {
        let cubin = ptx.with_extension("cubin");
        if cubin.exists() {
            let ptx_time = std::fs::metadata(&ptx).unwrap().modified().unwrap();
            std::fs::File::options()
                .append(true)
                .open(&cubin)
                .unwrap()
                .set_modified(ptx_time - std::time::Duration::from_secs(60))
                .unwrap();
        }
    };
    let build_with_ptxas = |ptxas: &Path| {
        gpurun_on_fixture(
            "build",
            "bare-kernel",
            &["--message-format", "json"],
            &[(toolchain::PTXAS_ENV, ptxas)],
        )
    };

    make_ptx_newer_than_cubin();
    let rejecting = fake_ptxas(
        "rejecting-ptxas",
        "echo 'ptxas fatal   : simulated rejection of the PTX' >&2\nexit 255",
    );
    let output = build_with_ptxas(&rejecting);
    assert_one_line_error(&output, "simulated rejection of the PTX");

    make_ptx_newer_than_cubin();
    let crashing = fake_ptxas("crashing-ptxas", "kill -SEGV $$");
    let output = build_with_ptxas(&crashing);
    // A crash fails the build: the driver's JIT would likely crash the same way at load time.
    assert_one_line_error(&output, "ptxas crashed");
    assert!(!ptx.with_extension("cubin").exists());

    // A ptxas without the architecture (13.x has no sm_70) leaves the image without a cubin,
    // with a warning: the PTX is fine for a newer GPU's driver.
    make_ptx_newer_than_cubin();
    let lacking = fake_ptxas(
        "lacking-ptxas",
        "case \"$1\" in --*) exit 0 ;; esac\n\
         echo \"ptxas fatal   : Value '${1#-arch=}' is not defined for option 'gpu-name'\" >&2\nexit 255",
    );
    let output = build_with_ptxas(&lacking);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot assemble for sm_70, so ") && stderr.contains("has no cubin"),
        "{stderr}"
    );
    assert!(built_images(&output)[0]["cubin"].is_null(), "{stderr}");
    assert!(!ptx.with_extension("cubin").exists());

    // With a working ptxas (or none) the next build is back to normal.
    let images = build_json("bare-kernel", "nvptx", &[]);
    assert_eq!(
        images[0]["cubin"].is_string(),
        toolchain::find_ptxas().is_some()
    );
}

#[cfg(unix)]
#[test]
fn debug_cubins_are_compiled_fast_where_ptxas_can_and_release_ones_fully() {
    let Some(_lock) = lock_fixtures_with_nightly() else {
        return;
    };
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-ptxas-arguments.log");
    // Records its arguments and writes the cubin it is asked for; `--help` lists the fast
    // option only in the `new` variant, as ptxas 12.8 and later do.
    let recording = |name: &str, help: &str| {
        fake_ptxas(
            name,
            &format!(
                "if [ \"$1\" = --help ]; then echo '{help}'; exit 0; fi\n\
                 echo \"$*\" >>'{}'\n\
                 while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo fake >\"$2\"; fi; shift; done",
                log.display()
            ),
        )
    };
    let new = recording("new-ptxas", "--Ofast-compile <0|min|mid|max>   (-Ofc)");
    let old = recording("old-ptxas", "--opt-level <N>   (-O)");
    let mut written = Vec::new();
    for (ptxas, release, fast) in [
        (&new, false, true),
        (&new, true, false),
        (&old, false, false),
    ] {
        // A fresh PTX build output, so that the cubin is assembled again.
        let _ = std::fs::remove_file(&log);
        let profile: &[&str] = if release { &["--release"] } else { &[] };
        let images = build_json("bare-kernel", "nvptx", profile);
        let cubin = image_path(&images[0], "path").with_extension("cubin");
        let _ = std::fs::remove_file(&cubin);
        let output = gpurun_on_fixture(
            "build",
            "bare-kernel",
            profile,
            &[(toolchain::PTXAS_ENV, ptxas)],
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let arguments = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            arguments.contains("--Ofast-compile=max"),
            fast,
            "release {release}, {}: {arguments}",
            ptxas.display()
        );
        assert!(arguments.contains("-arch=sm_"), "{arguments}");
        written.push(cubin);
    }
    // The fakes' cubins must not stand in for real ones in later builds.
    for cubin in written {
        let _ = std::fs::remove_file(cubin);
    }
}

/// A toolchain that is installed but lacks rust-src or llvm-tools, to exercise installing them.
fn toolchain_missing_components() -> Option<String> {
    for name in ["stable", "1.95.0"] {
        let probe = Command::new("rustc")
            .arg(format!("+{name}"))
            .args(["--print", "sysroot"])
            .env_remove("RUSTUP_TOOLCHAIN")
            .output();
        let Ok(output) = probe else { continue };
        if !output.status.success() {
            continue;
        }
        let sysroot = PathBuf::from(text(&output.stdout).trim());
        let has_src = sysroot
            .join("lib/rustlib/src/rust/library/core/src/lib.rs")
            .is_file();
        if !has_src {
            return Some(name.to_owned());
        }
    }
    eprintln!("not run: no installed toolchain lacks rust-src to test installing it");
    None
}

#[cfg(unix)]
#[test]
fn missing_components_are_installed_with_rustup_saying_so() {
    use std::os::unix::fs::PermissionsExt;
    let Some(name) = toolchain_missing_components() else {
        return;
    };
    // A stand-in rustup that records its arguments and installs nothing.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-rustup");
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("rustup-args");
    let _ = std::fs::remove_file(&record);
    let rustup = dir.join("rustup");
    std::fs::write(
        &rustup,
        format!("#!/bin/sh\necho \"$@\" >> '{}'\n", record.display()),
    )
    .unwrap();
    std::fs::set_permissions(&rustup, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(
        std::iter::once(dir.clone())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let envs: [(&str, &Path); 2] = [
        ("PATH", Path::new(&path)),
        (toolchain::TOOLCHAIN_ENV, Path::new(&name)),
    ];

    let output = gpurun_on_fixture("build", "bare-kernel", &[], &envs);
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "Installing missing rustup components for `{name}`: rust-src"
        )),
        "{stderr}"
    );
    assert_one_line_error(&output, "still absent after `rustup component add`");
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert!(
        recorded.starts_with("component add rust-src")
            && recorded
                .trim_end()
                .ends_with(&format!("--toolchain {name}")),
        "{recorded}"
    );

    let doctor = gpurun_in_root(&["doctor", "--fix"], &envs);
    assert!(!doctor.status.success(), "components are still missing");
    assert_eq!(std::fs::read_to_string(&record).unwrap().lines().count(), 2);
    let table = text(&doctor.stdout);
    let row = table
        .lines()
        .find(|line| line.starts_with("rust-src"))
        .unwrap();
    assert!(row.contains("MISSING"), "{table}");
}
