//! Exit statuses of `cargo gpurun`: the names this crate uses for the one table in
//! `gpurun_harness::ExitCode` (README, "Exit status").

use gpurun_harness::ExitCode as Table;
use std::process::ExitCode;

pub const SUCCESS: i32 = Table::OK;
pub const ERROR: i32 = Table::ERROR;
pub const USAGE: i32 = Table::USAGE;
/// Tests failed, or a device thread panicked in `run`.
pub const PANICKED: i32 = Table::TESTS_FAILED;
pub const TIMED_OUT: i32 = Table::TIMED_OUT;

/// A process exit code from a device status: the low 8 bits, as a host process would exit.
pub fn code(status: i32) -> ExitCode {
    ExitCode::from((status & 0xff) as u8)
}
