//! `gpurun-nvptx-link`: the nvptx linker of cargo-gpurun as an executable of its own, for
//! `.cargo/config.toml` (`[target.nvptx64-nvidia-cuda] linker = "gpurun-nvptx-link"`) after
//! `cargo install --path cargo-gpurun`. One of the three ways into the one linker
//! (`cargo_gpurun::build::nvptx_link`), with the hidden `cargo gpurun __nvptx-link` and
//! `cargo gpurun build`'s own builds: rustc's llvm-bitcode-linker arguments in, PTX out.

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match cargo_gpurun::cmd::nvptx_link::run(&args) {
        Ok(code) => code,
        Err(err) => {
            // rustc shows the linker's stderr under "linking with `gpurun-nvptx-link` failed".
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
