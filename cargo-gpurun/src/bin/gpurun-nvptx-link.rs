//! `gpurun-nvptx-link`: the nvptx linker of cargo-gpurun as an executable of its own, for
//! `.cargo/config.toml` (`[target.nvptx64-nvidia-cuda] linker = "gpurun-nvptx-link"`) after
//! `cargo install --path cargo-gpurun`. It runs the same code as the hidden
//! `cargo gpurun __nvptx-link` subcommand: rustc's llvm-bitcode-linker arguments in, PTX out.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cargo_gpurun::toolchain::{LLVM_TOOLS_DIR_ENV, TOOLCHAIN_ENV};

/// The directory under a sysroot's `lib/rustlib` that rustc names with `-L` when it links for
/// nvptx (it need not exist).
const NVPTX_SELF_CONTAINED: &str = "nvptx64-nvidia-cuda/lib/self-contained";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    use_the_calling_rustcs_llvm_tools(&args);
    match cargo_gpurun::cmd::nvptx_link::run(&args) {
        Ok(code) => code,
        Err(err) => {
            // rustc shows the linker's stderr under "linking with `gpurun-nvptx-link` failed".
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Links with the LLVM tools of the toolchain whose rustc called us, not those of whichever
/// toolchain is named `nightly`: bitcode from a newer LLVM does not load in an older
/// `llvm-link`, and a crate pinned to a dated nightly (rust-toolchain.toml) would otherwise get
/// another toolchain's tools. The user's `GPURUN_LLVM_TOOLS_DIR` / `GPURUN_TOOLCHAIN` win.
fn use_the_calling_rustcs_llvm_tools(args: &[OsString]) {
    let set = |var: &str| std::env::var_os(var).is_some_and(|value| !value.is_empty());
    if set(LLVM_TOOLS_DIR_ENV) || set(TOOLCHAIN_ENV) {
        return;
    }
    if let Some(dir) = sysroot_from_args(args).and_then(|sysroot| llvm_tools_dir_of(&sysroot)) {
        // The linker is single-threaded and has started nothing yet; the variable is how the
        // shared linker code is told where the tools are.
        std::env::set_var(LLVM_TOOLS_DIR_ENV, dir);
    }
}

/// rustc's sysroot, read from the `-L <sysroot>/lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained`
/// it passes (`-L DIR` or `-LDIR`). Arguments in an `@file` are not looked at: then the linker
/// falls back to the `nightly` toolchain's tools.
fn sysroot_from_args(args: &[OsString]) -> Option<PathBuf> {
    let mut previous_was_flag = false;
    for arg in args {
        let dir = if previous_was_flag {
            Some(Path::new(arg.as_os_str()))
        } else {
            arg.to_str()
                .and_then(|text| text.strip_prefix("-L"))
                .filter(|rest| !rest.is_empty())
                .map(Path::new)
        };
        previous_was_flag = arg == "-L";
        let Some(dir) = dir else { continue };
        let Some(rustlib) = strip_suffix_path(dir, NVPTX_SELF_CONTAINED) else {
            continue;
        };
        if rustlib.ends_with("lib/rustlib") {
            return rustlib.parent()?.parent().map(Path::to_path_buf);
        }
    }
    None
}

/// `path` without the trailing components `suffix`, if it ends with them.
fn strip_suffix_path<'a>(path: &'a Path, suffix: &str) -> Option<&'a Path> {
    if !path.ends_with(suffix) {
        return None;
    }
    let mut stripped = path;
    for _ in Path::new(suffix).components() {
        stripped = stripped.parent()?;
    }
    Some(stripped)
}

/// `<sysroot>/lib/rustlib/<host>/bin`, where rustup's `llvm-tools` component puts `llvm-link`,
/// `opt` and `llc`: the host directory that has them, else the one with any `bin` (so that a
/// missing component is reported for this toolchain's directory).
fn llvm_tools_dir_of(sysroot: &Path) -> Option<PathBuf> {
    let rustlib = sysroot.join("lib/rustlib");
    let mut bins: Vec<PathBuf> = std::fs::read_dir(&rustlib)
        .ok()?
        .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
        .filter(|bin| bin.is_dir())
        .collect();
    bins.sort();
    let with_tools = bins.iter().find(|bin| {
        cargo_gpurun::toolchain::NVPTX_LINK_TOOLS
            .iter()
            .all(|tool| cargo_gpurun::toolchain::find_llvm_tool_in(bin, tool).is_ok())
    });
    with_tools.or(bins.first()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn finds_the_sysroot_in_either_form_of_minus_l() {
        let split = os(&[
            "a.o",
            "-L",
            "/x/deps/raw-dylibs",
            "-L",
            "/tc/lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained",
            "-o",
            "a.ptx",
        ]);
        assert_eq!(sysroot_from_args(&split), Some(PathBuf::from("/tc")));
        let joined = os(&["-L/tc2/lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained"]);
        assert_eq!(sysroot_from_args(&joined), Some(PathBuf::from("/tc2")));
    }

    #[test]
    fn no_sysroot_without_the_rustlib_path() {
        for args in [
            &["a.o", "-o", "a.ptx"][..],
            &["-L", "/x/deps/raw-dylibs"],
            &["-L", "/tc/nvptx64-nvidia-cuda/lib/self-contained"],
            &["-L"],
            &["/tc/lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained"],
        ] {
            assert_eq!(sysroot_from_args(&os(args)), None, "{args:?}");
        }
    }

    #[test]
    fn tools_dir_is_the_host_bin_that_has_the_tools() {
        let sysroot = std::env::temp_dir().join(format!("gpurun-sysroot-{}", std::process::id()));
        let rustlib = sysroot.join("lib/rustlib");
        std::fs::create_dir_all(rustlib.join("aaa-other/bin")).unwrap();
        std::fs::create_dir_all(rustlib.join("nvptx64-nvidia-cuda/lib")).unwrap();
        let host_bin = rustlib.join("x86_64-unknown-linux-gnu/bin");
        std::fs::create_dir_all(&host_bin).unwrap();
        // Without the tools: the first `bin`, so the error names this toolchain's directory.
        assert_eq!(
            llvm_tools_dir_of(&sysroot),
            Some(rustlib.join("aaa-other/bin"))
        );
        for tool in cargo_gpurun::toolchain::NVPTX_LINK_TOOLS {
            let path = host_bin.join(tool);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        assert_eq!(llvm_tools_dir_of(&sysroot), Some(host_bin));
        assert_eq!(llvm_tools_dir_of(&sysroot.join("missing")), None);
        std::fs::remove_dir_all(&sysroot).unwrap();
    }
}
