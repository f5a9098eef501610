//! The device ABI, owned in one place: every name, number and byte layout that a device image
//! and the host must agree on (docs/abi.md).
//!
//! Owns: the symbol names the loader looks up or fills in ([`symbols`]), the test descriptor
//! format with its one encoder and one decoder ([`desc`]), the same for kernel descriptors
//! ([`kernel`]), the ABI versions, the host-emulation thread record [`host::HostThreadInfo`],
//! and where AMD kernels read their launch shape ([`shape`]). With the `alloc` feature, also the host's form
//! of a device panic report (`report::PanicReport`), shared by the RPC server and the harness,
//! which must not depend on each other.
//!
//! Must not: export symbols (the device runtime links it into images and the worker links it
//! into the host process; an exported symbol would appear in both), allocate outside the
//! host-only `alloc` feature, or depend on any crate (the worker protocol serializes the panic
//! report with serde's `remote` derive instead). Everything else is `no_std` plain data and `const fn`s, usable by
//! the device runtime, the attribute macros' expansion, the image parser and the backends alike.
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod desc;
pub mod host;
pub mod kernel;
#[cfg(feature = "alloc")]
pub mod report;
pub mod shape;
pub mod symbols;
