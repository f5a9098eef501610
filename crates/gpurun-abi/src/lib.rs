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

pub use desc::Throughput;
pub use launch::LaunchShape;
#[cfg(feature = "alloc")]
pub use {desc::Bench, desc::ShouldPanic, desc::TestDesc, launch::LaunchEnd, report::PanicReport};

/// Writes `bytes` into `out` at `at` and returns where they end: the descriptor encoders' one
/// step (a `const fn`, so a loop instead of `copy_from_slice`).
const fn put(out: &mut [u8], at: usize, bytes: &[u8]) -> usize {
    let mut i = 0;
    while i < bytes.len() {
        out[at + i] = bytes[i];
        i += 1;
    }
    at + bytes.len()
}

/// Why a descriptor was rejected: the same two cases for test and kernel descriptors, each
/// format with its own `Problem`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError<Problem> {
    /// The descriptor is of another version (the image needs another cargo-gpurun).
    Version(u32),
    /// Anything else; says what is wrong.
    Malformed(Problem),
}

#[cfg(test)]
mod tests {
    extern crate std;
    use crate::DecodeError;
    use std::vec::Vec;

    /// A valid descriptor and its format's decoder (its error only), to check what the decoder
    /// refuses.
    pub(crate) struct Sample<'a, P> {
        pub bytes: &'a [u8],
        pub decode_error: &'a dyn Fn(&[u8]) -> Option<DecodeError<P>>,
    }

    impl<P: PartialEq + core::fmt::Debug> Sample<'_, P> {
        /// Asserts an error in every proper prefix, and `extended` with one zero byte appended.
        pub fn rejects_every_truncation_and_extension(&self, extended: P) {
            for len in 0..self.bytes.len() {
                assert!(
                    (self.decode_error)(&self.bytes[..len]).is_some(),
                    "len {len}"
                );
            }
            let mut longer = Vec::from(self.bytes);
            longer.push(0);
            assert_eq!(
                (self.decode_error)(&longer),
                Some(DecodeError::Malformed(extended))
            );
        }

        /// The error of the descriptor with byte `at` set to `value`.
        pub fn patched(&self, at: usize, value: u8) -> DecodeError<P> {
            let mut bytes = Vec::from(self.bytes);
            bytes[at] = value;
            (self.decode_error)(&bytes).expect("the patched descriptor is refused")
        }

        /// What is malformed in the descriptor with byte `at` set to `value`.
        pub fn malformed(&self, at: usize, value: u8) -> P {
            match self.patched(at, value) {
                DecodeError::Malformed(problem) => problem,
                other => panic!("{other:?}"),
            }
        }
    }
}
