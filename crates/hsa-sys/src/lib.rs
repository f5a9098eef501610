//! Raw bindings for the subset of the HSA runtime (ROCr: `hsa.h`, `hsa_ext_amd.h`) that
//! cargo-gpurun uses, loaded at run time so that a binary built with them runs where ROCm is
//! absent.
//!
//! No crate of this name exists upstream; these bindings are written by hand, committed, and
//! checked against two sets of real headers (Debian 12's `libhsa-runtime-dev`, ROCm 5.2, and
//! Debian 13's, ROCm 6.1) by `tests/layout.rs` (sizes, field offsets, constant values and every
//! function's C type).
//!
//! [`HsaLib::load`] opens `libhsa-runtime64.so.1` (see [`default_candidates`]) and resolves every
//! function into a table of pointers; it returns a [`LoadError`] naming the library or symbol
//! that is missing, never panics. Calling through the table is `unsafe`: the caller upholds
//! the HSA API's own rules (initialised runtime, valid handles, buffers of the right size).
//! Safe wrappers live in `gpurun-hal`'s `hsa` module.
//!
//! Owns: the HSA types, constants and function signatures, and loading the library. Must not:
//! contain logic (decisions about the runtime's answers belong to `gpurun-hal`).

mod functions;
mod types;

pub use functions::{default_candidates, HsaLib, LoadError, FUNCTION_SIGNATURES, LIBRARY_ENV};
pub use types::*;
