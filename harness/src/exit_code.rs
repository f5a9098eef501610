//! Exit codes of every `cargo gpurun` command and of the harness, in one table (the way
//! nextest-metadata does it); README "Exit status" lists the same.

/// The exit codes. Uninhabited: only the constants matter.
pub enum ExitCode {}

impl ExitCode {
    /// Every selected test passed (or none was selected), `--list` succeeded, or the device
    /// program returned 0.
    pub const OK: i32 = 0;

    /// An error before or around running: bad input, a missing driver, a device fault, a crash.
    pub const ERROR: i32 = 1;

    /// The command line could not be parsed (clap's code for usage errors).
    pub const USAGE: i32 = 2;

    /// At least one test failed, or a device thread panicked in `run`: libtest's and Rust's
    /// panic code, which cargo and CI scripts expect.
    pub const TESTS_FAILED: i32 = 101;

    /// The harness could not do its job: an output, `--logfile` or `--junit` file could not be
    /// written. Tests may have run; their results may be incomplete.
    pub const HARNESS_ERROR: i32 = 102;

    /// `run --timeout` ran out (as coreutils' `timeout`).
    pub const TIMED_OUT: i32 = 124;
}
