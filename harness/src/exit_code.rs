//! Exit codes of a test run, as documented constants (the way nextest-metadata does it).

/// Exit codes of `cargo gpurun test` and of the harness. Uninhabited: only the constants matter.
pub enum ExitCode {}

impl ExitCode {
    /// Every selected test passed (or none was selected), or `--list` succeeded.
    pub const OK: i32 = 0;

    /// The command line could not be parsed (clap's code for usage errors).
    pub const USAGE: i32 = 2;

    /// At least one test failed: libtest's code, which cargo and CI scripts expect.
    pub const TESTS_FAILED: i32 = 101;

    /// The harness could not do its job: an output, `--logfile` or `--junit` file could not be
    /// written. Tests may have run; their results may be incomplete.
    pub const HARNESS_ERROR: i32 = 102;
}
