//! The device ABI, owned in one place: every name, number and byte layout that a device image
//! and the host must agree on (docs/abi.md).
//!
//! Owns: the symbol names the loader looks up or fills in ([`symbols`]), the test descriptor
//! format with its one encoder and one decoder ([`desc`]), the same for kernel descriptors
//! ([`kernel`]), the ABI versions, the host-emulation thread record [`host::HostThreadInfo`],
//! where AMD kernels read their launch shape ([`shape`]) and a launch's shape
//! ([`launch::LaunchShape`]). With the `alloc` feature, also the host's vocabulary of a test's
//! path, shared by crates that must not depend on each other (the image reader, the backends,
//! the worker protocol, the harness): the one test description (`desc::TestDesc`), how a launch
//! ended (`launch::LaunchEnd`) and a device panic report (`report::PanicReport`).
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
pub mod launch;
#[cfg(feature = "alloc")]
pub mod report;
pub mod shape;
pub mod symbols;

pub use launch::LaunchShape;
#[cfg(feature = "alloc")]
pub use {desc::ShouldPanic, desc::TestDesc, launch::LaunchEnd, report::PanicReport};
