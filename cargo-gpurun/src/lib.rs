//! `cargo gpurun`: `cargo test` for GPU code written in Rust. A thin command line over the
//! libraries: the CLI ([`cli`]) and one module per subcommand ([`cmd`]); `main.rs` only calls
//! [`main_impl`]. Builds come from `gpurun-build`, tests run through `gpurun-runner` and
//! `gpurun-harness`.
//!
//! Owns: argument parsing, the commands and their exit codes. Must not: hold build, runner or
//! backend logic, be a dependency of another crate, or open a device: tests and programs run in
//! worker processes through `gpurun-runner`; only `cargo gpurun info` and the choice of a
//! default target ask a backend to list devices (which opens none), and the hidden `__worker`
//! subcommand is the worker process itself.

pub mod cli;
pub mod cmd;
pub mod exit_code;

use std::process::ExitCode;

use clap::Parser;

/// Runs the program: the nvptx linker when started through the linker link, else the CLI.
pub fn main_impl() -> ExitCode {
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_default();
    if gpurun_build::nvptx_link::invoked_as_linker(&argv0) {
        return gpurun_build::nvptx_link::main(&args.collect::<Vec<_>>());
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
