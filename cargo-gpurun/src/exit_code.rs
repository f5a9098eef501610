//! Exit statuses of `cargo gpurun`, documented in one place (README, "Exit status").

use std::process::ExitCode;

/// Everything went well (or the device program returned 0).
pub const SUCCESS: i32 = 0;
/// An error before or around running: bad input, missing driver, device fault, crash.
pub const ERROR: i32 = 1;
/// A usage error on the command line (clap's and libtest's).
pub const USAGE: i32 = 2;
/// Tests failed, or a device thread panicked in `run` (Rust's panic status).
pub const PANICKED: i32 = 101;
/// `--timeout` ran out (as coreutils' `timeout`).
pub const TIMED_OUT: i32 = 124;

/// A process exit code from a device status: the low 8 bits, as a host process would exit.
pub fn code(status: i32) -> ExitCode {
    ExitCode::from((status & 0xff) as u8)
}
