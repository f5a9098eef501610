//! Fake GPU driver libraries for offline tests of gpurun-hal's GPU backends. Built as a cdylib
//! and copied under the vendor's file name (`libcuda.so`) into a directory the test puts first
//! on `LD_LIBRARY_PATH`, so the backend loads it through its normal search.
//!
//! Each exported function records one line (`<pid> <function> <key arguments> -> <status>`)
//! in the file named by [`LOG_ENV`], then answers with plausible handles and values. Tests read
//! the file to check which calls the backend made, with which arguments, in which order.
//! Environment variables set by the test choose failures and device properties (see
//! [`cuda`]).
//!
//! Owns: the fake drivers and their log format. Must not: be loaded outside tests, or decide
//! anything the real driver would not (it answers, it never checks the backend's logic).

pub mod cuda;
mod record;

/// The file every call is appended to, one line each. Unset: nothing is recorded.
pub const LOG_ENV: &str = "GPURUN_FAKE_DRIVER_LOG";
