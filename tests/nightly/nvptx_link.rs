//! The nvptx linker on hand-written LLVM IR, through the `gpurun-nvptx-link` executable: which
//! symbols survive internalization, archives (rlibs) with non-bitcode members, and bad inputs.
//! Needs the nightly's llvm-tools (for `llvm-as`/`llvm-ar`); says why it does not run without
//! them, and fails under `CI=true`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gpurun_build::toolchain;
use gpurun_e2e::{fresh_dir, nightly, nvptx_linker};

const MODULE: &str = r#"
target triple = "nvptx64-nvidia-cuda"

@__gpurun_desc_x_0123456789abcdef = global [4 x i8] c"GPRT"
@private_table = global [4 x i8] c"nope"

define ptx_kernel void @_start() {
  ret void
}

define ptx_kernel void @__gpurun_test_x_0123456789abcdef() {
  call void @helper()
  ret void
}

define ptx_kernel void @exported_by_rustc() {
  ret void
}

define void @helper() {
  ret void
}

define void @unused_public() {
  ret void
}
"#;

/// The nightly's llvm-tools directory (`llvm-as`, `llvm-ar`), or `None` after saying why the
/// test does not run.
fn tools() -> Option<PathBuf> {
    nightly().map(|toolchain| toolchain.rustlib_bin_dir())
}

fn scratch(name: &str) -> PathBuf {
    fresh_dir(Path::new(env!("CARGO_TARGET_TMPDIR")), name)
}

fn link(args: &[&Path]) -> Output {
    Command::new(nvptx_linker())
        .args(args)
        .env_remove(toolchain::LLVM_TOOLS_DIR_ENV)
        .output()
        .unwrap()
}

fn assemble(tools: &Path, dir: &Path) -> PathBuf {
    let source = dir.join("module.ll");
    std::fs::write(&source, MODULE).unwrap();
    let bitcode = dir.join("module.o");
    let status = Command::new(tools.join("llvm-as"))
        .arg(&source)
        .arg("-o")
        .arg(&bitcode)
        .status()
        .unwrap();
    assert!(status.success());
    bitcode
}

#[test]
fn keeps_exports_and_the_device_abi_and_drops_the_rest() {
    let Some(tools) = tools() else { return };
    let dir = scratch("link-exports");
    let bitcode = assemble(&tools, &dir);
    // Put it in an archive beside a metadata member, as rustc's rlibs are.
    let rmeta = dir.join("lib.rmeta");
    std::fs::write(&rmeta, b"rust metadata, not bitcode").unwrap();
    let rlib = dir.join("libmodule.rlib");
    let status = Command::new(tools.join("llvm-ar"))
        .arg("crs")
        .arg(&rlib)
        .arg(&rmeta)
        .arg(&bitcode)
        .status()
        .unwrap();
    assert!(status.success());

    let ptx = dir.join("out.ptx");
    // The tools are found from the sysroot in rustc's `-L .../self-contained` argument.
    let self_contained = tools
        .ancestors()
        .nth(2)
        .unwrap()
        .join("nvptx64-nvidia-cuda/lib/self-contained");
    let output = link(&[
        Path::new("-L"),
        &self_contained,
        Path::new("--export-symbol"),
        Path::new("exported_by_rustc"),
        &rlib,
        Path::new("--target"),
        Path::new("nvptx64-nvidia-cuda"),
        Path::new("--target-cpu"),
        Path::new("sm_80"),
        Path::new("-o"),
        &ptx,
        Path::new("-O0"),
        Path::new("--debug"),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&ptx).unwrap();
    assert!(text.contains(".target sm_80"), "{text}");
    for kept in [
        ".entry _start",
        ".entry __gpurun_test_x_0123456789abcdef",
        ".entry exported_by_rustc",
        "__gpurun_desc_x_0123456789abcdef",
    ] {
        assert!(text.contains(kept), "{kept} missing:\n{text}");
    }
    for dropped in ["unused_public", "private_table", ".func helper"] {
        assert!(!text.contains(dropped), "{dropped} kept:\n{text}");
    }
    assert!(
        !dir.join("out.gpurun-link").exists(),
        "work files are removed after a successful link"
    );
}

#[test]
fn refuses_inputs_that_are_not_bitcode() {
    if tools().is_none() {
        return;
    }
    let dir = scratch("link-not-bitcode");
    let input = dir.join("notes.o");
    std::fs::write(&input, b"\x7fELF not bitcode").unwrap();
    let output = link(&[&input, Path::new("-o"), &dir.join("out.ptx")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("error:") && stderr.contains("is not an LLVM bitcode file"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn refuses_unknown_arguments() {
    let output = link(&[Path::new("a.o"), Path::new("--frobnicate")]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown argument `--frobnicate`"),
        "{stderr}"
    );
}
