//! Errors raised while reading and validating an image.
//!
//! Every message is a lowercase fragment meant to follow
//! "failed to load image `x`: ", so callers add the path themselves.

use std::path::PathBuf;

/// Why an image could not be read or is not usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The file could not be read. The I/O error is part of the message rather than a
    /// `source()`, so that printing the whole chain does not repeat it.
    #[error("cannot read the file: {error}")]
    Io {
        /// The path that was read.
        path: PathBuf,
        /// The underlying I/O error.
        error: std::io::Error,
    },
    /// The file has no bytes at all.
    #[error("the file is empty")]
    Empty,
    /// Neither an ELF file nor PTX text.
    #[error(
        "unrecognized image format: not an ELF file and not PTX text (expected `.version` first)"
    )]
    UnknownFormat,
    /// An ELF file that ends before the data its headers point to.
    #[error("truncated ELF file: {reason}")]
    Truncated {
        /// What was cut off.
        reason: String,
    },
    /// An ELF file that is malformed in some other way.
    #[error("malformed ELF file: {reason}")]
    BadElf {
        /// What is wrong, as the ELF reader reported it.
        reason: String,
    },
    /// A valid ELF file for a machine we do not run (and not a host emulation image).
    #[error(
        "ELF for {machine} is not a GPU image (expected AMDGPU or NVIDIA CUDA code, or a host \
         emulation library exporting `__gpurun_host_abi_version`, `_start` or `__gpurun_test_*`)"
    )]
    NotAGpuImage {
        /// The ELF machine, in words (e.g. "x86-64").
        machine: String,
    },
    /// A relocatable object file (`ET_REL`), which must be linked before it can be loaded.
    #[error("this is a relocatable {machine} object file, not a linked image; link it first")]
    NotLinked {
        /// The ELF machine, in words.
        machine: String,
    },
    /// PTX text that cannot be parsed.
    #[error("invalid PTX at line {line}: {reason}")]
    BadPtx {
        /// 1-based line number.
        line: usize,
        /// What is wrong there.
        reason: String,
    },
    /// An image that defines no kernel at all.
    #[error("the {kind} image defines no kernels")]
    NoKernels {
        /// The kind of image, in words.
        kind: &'static str,
    },
    /// An AMDGPU kernel descriptor (`NAME.kd`) that cannot be read.
    #[error("bad kernel descriptor `{symbol}`: {reason}")]
    BadKernelDescriptor {
        /// The `.kd` symbol.
        symbol: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A test descriptor (`__gpurun_desc_*`) that does not follow docs/abi.md.
    #[error("invalid test descriptor `{symbol}`: {reason}")]
    BadDescriptor {
        /// The descriptor symbol.
        symbol: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The image has test descriptors but no `__gpurun_test_abi_version`.
    #[error("the image has test descriptors but no `__gpurun_test_abi_version` symbol")]
    MissingTestAbiVersion,
    /// `__gpurun_test_abi_version` exists but its value cannot be read.
    #[error("cannot read `__gpurun_test_abi_version`: {reason}")]
    BadTestAbiVersion {
        /// Why the value is unreadable.
        reason: String,
    },
    /// The image was built for a test ABI this version does not understand.
    #[error(
        "the image uses test ABI version {found}, but this cargo-gpurun reads versions {oldest} \
         to {supported}; {}",
        version_advice(*found, *oldest)
    )]
    UnsupportedTestAbi {
        /// The version found in the image.
        found: u32,
        /// The oldest version this crate reads.
        oldest: u32,
        /// The newest version this crate reads.
        supported: u32,
    },
    /// A host emulation image without a readable `__gpurun_host_abi_version`.
    #[error("host emulation image without a readable `__gpurun_host_abi_version` ({reason}); rebuild it with the gpurun crate")]
    MissingHostAbiVersion {
        /// What is missing or unreadable.
        reason: String,
    },
    /// A host emulation image built for a host ABI this version does not understand.
    #[error(
        "the host emulation image uses host ABI version {found}, but this cargo-gpurun reads \
         versions {oldest} to {supported}; {}",
        version_advice(*found, *oldest)
    )]
    UnsupportedHostAbi {
        /// The version found in the image.
        found: u32,
        /// The oldest version this crate reads.
        oldest: u32,
        /// The newest version this crate reads.
        supported: u32,
    },
    /// A constructor/destructor object whose name does not end in a `u16` priority.
    #[error("invalid priority in constructor/destructor symbol `{symbol}` (expected a trailing `_N`, N in 0..=65535)")]
    BadCtorDtorPriority {
        /// The offending symbol.
        symbol: String,
    },
    /// A kernel the caller needs (e.g. `_start`) is not in the image.
    #[error("the image has no kernel `{name}`; it defines: {}", list_kernels(.available, *.more))]
    MissingKernel {
        /// The kernel that was asked for.
        name: String,
        /// The first few kernels that do exist.
        available: Vec<String>,
        /// How many more kernels exist beyond `available`.
        more: usize,
    },
}

fn list_kernels(names: &[String], more: usize) -> String {
    if names.is_empty() {
        return "no kernels".to_owned();
    }
    let mut list = names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        list.push_str(&format!(" and {more} more"));
    }
    list
}

/// What to do about an image of an ABI version outside what this crate reads.
fn version_advice(found: u32, oldest: u32) -> &'static str {
    if found < oldest {
        "rebuild the image with a newer gpurun crate"
    } else {
        "update cargo-gpurun"
    }
}
