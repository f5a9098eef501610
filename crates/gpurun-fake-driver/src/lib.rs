//! Fake GPU driver libraries for offline tests of gpurun-hal's GPU backends. Built as a cdylib
//! and linked under the vendor's file name (`libcuda.so`) into a directory the test puts first
//! on `LD_LIBRARY_PATH`, so the CUDA backend loads it through its normal search; the same
//! library is the HSA runtime (`hsa_*`), named to the HSA backend by `$GPURUN_HSA_LIB`.
//!
//! Each exported function records one line (`<pid> <function> <key arguments> -> <status>`)
//! in the file named by [`LOG_ENV`], then answers with plausible handles and values. Tests read
//! the file to check which calls the backend made, with which arguments, in which order.
//! Environment variables set by the test choose failures and device properties (see
//! [`cuda`] and [`hsa`]).
//!
//! Owns: the fake drivers and their log format. Must not: be loaded outside tests, or decide
//! anything the real driver would not (it answers, it never checks the backend's logic).

pub mod cuda;
pub mod hsa;
mod record;

/// The file every call is appended to, one line each. Unset: nothing is recorded.
pub const LOG_ENV: &str = "GPURUN_FAKE_DRIVER_LOG";
