//! Every fixture builds for nvptx, amdgcn (gfx1100, as every amdgcn debug build of the tests)
//! and the host, and the test list read from each test image (benchmarks included) equals the
//! one written in its source (program fixtures have none). Also: the PTX of the panic path has
//! no `trap` (a trap would poison the CUDA context instead of ending one thread).

use gpurun_e2e::{describe, fixtures_dir, gpu_images_dir, gpurun, host_images, text};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Test and benchmark names (`module::name`) and whether each is `#[ignore]`d, read from a
/// fixture's source
/// (`gpu_only` tests count as ignored when `emulated`: the host emulation reports them so).
/// Tests in a `#[cfg(test)]` module are left out: the images built here are the plain builds,
/// which do not have them (`cargo gpurun test` builds a `harness = false` lib in test mode).
fn tests_in_source(source: &str, emulated: bool) -> BTreeSet<(String, bool)> {
    // Name, indentation and whether it is `#[cfg(test)]`.
    let mut modules: Vec<(String, usize, bool)> = Vec::new();
    let mut pending: Option<bool> = None;
    let mut cfg_test = false;
    let mut found = BTreeSet::new();
    for line in source.lines() {
        let indent = line.len() - line.trim_start().len();
        let code = line.trim();
        if let Some(rest) = code.strip_prefix("mod ").and_then(|r| r.strip_suffix(" {")) {
            modules.push((rest.to_string(), indent, cfg_test));
        } else if code == "}" && modules.last().is_some_and(|(_, at, _)| *at == indent) {
            modules.pop();
        }
        cfg_test = code == "#[cfg(test)]";
        if code.starts_with("#[gpurun::test") || code.starts_with("#[gpurun::bench") {
            pending = Some(emulated && code.contains("gpu_only"));
        }
        if code.starts_with("#[ignore") {
            if let Some(ignored) = pending.as_mut() {
                *ignored = true;
            }
        }
        if let (Some(ignored), Some(at)) = (pending, code.find("fn ")) {
            let name: String = code[at + 3..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let mut path: Vec<&str> = modules.iter().map(|(m, _, _)| m.as_str()).collect();
            path.push(&name);
            if !modules.iter().any(|(_, _, cfg_test)| *cfg_test) {
                found.insert((path.join("::"), ignored));
            }
            pending = None;
        }
    }
    found
}

fn fixtures(emulated: bool) -> Vec<(String, BTreeSet<(String, bool)>)> {
    let mut all = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures dir")
        .map(|entry| entry.expect("entry").path())
        .collect();
    // The device crate of the host app is a member one level further down.
    dirs.push(fixtures_dir().join("host-app/kernels"));
    for dir in dirs {
        let Ok(source) = std::fs::read_to_string(dir.join("src/lib.rs")) else {
            continue;
        };
        if !source.contains("gpurun::") {
            continue; // not built on the device runtime
        }
        if source.contains("#[gpurun::main]") {
            // A program: `run` executes it rather than listing tests, so it must have none.
            assert!(
                !source.contains("#[gpurun::test") && !source.contains("#[gpurun::bench"),
                "{} mixes #[gpurun::main] and tests",
                dir.display()
            );
            continue;
        }
        let tests = tests_in_source(&source, emulated);
        if tests.is_empty() {
            // Every test is `#[cfg(test)]` (fixtures/unit-tests): the plain images built here
            // have none, and `run` takes an image without tests for a program. Its test-mode
            // images are checked in tests/e2e/harness.rs and tests/cli/build.rs.
            continue;
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
        let package = manifest
            .lines()
            .find_map(|line| line.strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .expect("a package name in Cargo.toml");
        let name = package.replace('-', "_");
        all.push((name, tests));
    }
    all.sort();
    all
}

/// Whether the GPU toolchain is here; without it the GPU checks say why and, under CI, fail.
fn gpu_toolchain_present() -> bool {
    let output = std::process::Command::new("rustup")
        .args(["component", "list", "--toolchain", "nightly", "--installed"])
        .output();
    let present = output.is_ok_and(|o| {
        let listed = text(&o.stdout);
        listed.contains("rust-src") && listed.contains("llvm-tools")
    });
    if !present {
        let message = "nightly with rust-src and llvm-tools is missing (run scripts/setup.sh)";
        gpurun_e2e::tool_missing(message);
    }
    present
}

/// Builds every fixture for `target` in [`gpu_images_dir`].
fn build_gpu(target: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["build", "--workspace", "--target", target];
    args.extend_from_slice(extra);
    let target_dir = gpu_images_dir();
    let output = gpurun(&args)
        .env("CARGO_TARGET_DIR", &target_dir)
        .output()
        .expect("cargo-gpurun runs");
    assert!(output.status.success(), "{}", describe(&output));
    let triple = if target == "nvptx" {
        "nvptx64-nvidia-cuda"
    } else {
        "amdgcn-amd-amdhsa"
    };
    target_dir.join(triple).join("debug")
}

fn listed(image: &Path, ignored_only: bool) -> BTreeSet<String> {
    let mut args = vec![
        "run",
        image.to_str().unwrap(),
        "--list",
        "--format",
        "terse",
    ];
    if ignored_only {
        args.push("--ignored");
    }
    let output = gpurun(&args).output().expect("cargo-gpurun runs");
    assert!(output.status.success(), "{}", describe(&output));
    text(&output.stdout)
        .lines()
        .filter_map(|line| {
            line.strip_suffix(": test")
                .or_else(|| line.strip_suffix(": benchmark"))
                .map(str::to_string)
        })
        .collect()
}

fn check_lists(emulated: bool, image_of: impl Fn(&str) -> PathBuf) {
    for (fixture, tests) in fixtures(emulated) {
        let image = image_of(&fixture);
        let all: BTreeSet<String> = tests.iter().map(|(name, _)| name.clone()).collect();
        let ignored: BTreeSet<String> = tests
            .iter()
            .filter(|(_, i)| *i)
            .map(|(name, _)| name.clone())
            .collect();
        assert_eq!(listed(&image, false), all, "tests of {}", image.display());
        assert_eq!(
            listed(&image, true),
            ignored,
            "ignored tests of {}",
            image.display()
        );
    }
}

#[test]
fn source_scanner_finds_nested_and_ignored_tests() {
    let source = "#[gpurun::test]\nfn a() {}\nmod m {\n    #[gpurun::test]\n    #[ignore]\n    fn b() {}\n}\n#[gpurun::test(threads = 4)] fn c() {}\n#[gpurun::test(gpu_only)]\nfn d() {}\n#[gpurun::bench(bytes = 4)]\nfn e(b: &mut Bencher) {}\n#[cfg(test)]\nmod tests {\n    #[gpurun::test]\n    fn only_in_test_mode() {}\n}\n";
    for emulated in [false, true] {
        let found = tests_in_source(source, emulated);
        let expected: BTreeSet<(String, bool)> = [
            ("a", false),
            ("m::b", true),
            ("c", false),
            ("d", emulated),
            ("e", false),
        ]
        .iter()
        .map(|(n, i)| (n.to_string(), *i))
        .collect();
        assert_eq!(found, expected);
    }
}

#[test]
fn host_images_list_the_tests_in_their_source() {
    let dir = host_images();
    check_lists(true, |fixture| dir.join(format!("lib{fixture}.so")));
}

#[test]
fn nvptx_images_list_their_tests_and_never_trap() {
    if !gpu_toolchain_present() {
        return;
    }
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| build_gpu("nvptx", &[]));
    check_lists(false, |fixture| dir.join(format!("{fixture}.ptx")));
    for (fixture, _) in fixtures(false) {
        let ptx = std::fs::read_to_string(dir.join(format!("{fixture}.ptx"))).expect("ptx");
        assert!(
            !ptx.lines()
                .any(|line| line.trim_start().starts_with("trap")),
            "{fixture}.ptx contains a trap"
        );
        // Panics end the thread with `exit` instead.
        if fixture == "basic" {
            assert!(ptx.contains("exit;"), "{fixture}.ptx has no exit");
        }
    }
}

#[test]
fn amdgcn_images_list_their_tests() {
    if !gpu_toolchain_present() {
        return;
    }
    // gfx1100, whose debug builds tests/cli/amdgpu_code.rs and tests/cli/build.rs also make in
    // this target directory: one amdgcn `core` for all of them.
    let dir = build_gpu("amdgcn", &["--arch", "gfx1100"]);
    check_lists(false, |fixture| dir.join(format!("{fixture}.elf")));
}
