//! `gpurun-nvptx-link`: the nvptx linker as an executable of its own, for `.cargo/config.toml`
//! (`[target.nvptx64-nvidia-cuda] linker = "gpurun-nvptx-link"`) and for library callers of the
//! build pipeline whose own executable cannot be the linker (`gpurun-test`). The linking is
//! `gpurun_build::nvptx_link`'s: rustc's llvm-bitcode-linker arguments in, PTX out.

fn main() -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    gpurun_build::nvptx_link::main(&args)
}
