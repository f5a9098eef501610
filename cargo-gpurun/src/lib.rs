//! `cargo gpurun`: `cargo test` for GPU code written in Rust. This library is the whole binary:
//! the CLI ([`cli`]), one module per subcommand ([`cmd`]), device-crate builds and our nvptx
//! linker ([`build`]), and toolchain discovery ([`toolchain`]). `main.rs` only calls
//! [`main_impl`], so tests and other tools can reuse every part, notably [`build::build`].
//!
//! Owns: argument parsing, the build pipeline (cargo, our nvptx linker, ptxas, the image checks)
//! and the commands. Must not: hold runner or backend logic, or open a device: tests and
//! programs run in worker processes through `gpurun-runner`; only `cargo gpurun info` and the
//! choice of a default target ask a backend to list devices (which opens none), and the hidden
//! `__worker` subcommand is the worker process itself.

pub mod build;
pub mod cli;
pub mod cmd;
pub mod exit_code;
pub mod toolchain;

use std::process::ExitCode;

use clap::Parser;

/// Runs the program: the nvptx linker when started through the linker link, else the CLI.
pub fn main_impl() -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    if build::nvptx_link::invoked_as_linker(&argv0) {
        return report(cmd::nvptx_link::run(&args.collect::<Vec<_>>()));
    }
    let cli::Cargo::Gpurun(app) = cli::Cargo::parse();
    report(cmd::dispatch(app))
}

/// Prints an error as one `error:` line (plus the full tool output where an error carries it)
/// and turns the outcome into the process exit code.
fn report(outcome: anyhow::Result<ExitCode>) -> ExitCode {
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
