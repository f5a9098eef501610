//! The platforms device code is built for and runs on: one word for what the build calls a
//! target, an image's kind is for, and a backend runs.

use std::fmt;

use crate::ImageKind;

/// Where device code runs: an NVIDIA GPU, an AMD GPU, or the host CPU under the emulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Platform {
    /// NVIDIA GPUs (`nvptx64-nvidia-cuda`): a PTX image, plus a cubin when ptxas is present.
    Nvptx,
    /// AMD GPUs (`amdgcn-amd-amdhsa`): an ELF code object.
    Amdgcn,
    /// The host CPU, for the emulation backend: a `cdylib` (`.so`).
    Host,
}

impl Platform {
    /// Every platform, in the order `--target` help lists them.
    pub const ALL: [Platform; 3] = [Self::Nvptx, Self::Amdgcn, Self::Host];

    /// A full triple or a short name (`nvptx`, `amdgcn`, `host`), or a backend's name for its
    /// platform (`cuda`, `hsa`).
    pub fn parse(name: &str) -> Option<Platform> {
        match name {
            "nvptx" | "nvptx64" | "nvptx64-nvidia-cuda" | "cuda" => Some(Self::Nvptx),
            "amdgcn" | "amdgpu" | "amdgcn-amd-amdhsa" | "hsa" => Some(Self::Amdgcn),
            "host" => Some(Self::Host),
            _ => None,
        }
    }

    /// The short name used in messages and JSON.
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Nvptx => "nvptx",
            Self::Amdgcn => "amdgcn",
            Self::Host => "host",
        }
    }

    /// The rustc target triple, `None` for the host (cargo's default target).
    pub fn triple(self) -> Option<&'static str> {
        match self {
            Self::Nvptx => Some("nvptx64-nvidia-cuda"),
            Self::Amdgcn => Some("amdgcn-amd-amdhsa"),
            Self::Host => None,
        }
    }

    /// Whether this is a GPU (built with the nightly, `-Zbuild-std` and an architecture).
    pub fn is_gpu(self) -> bool {
        self != Self::Host
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

impl ImageKind {
    /// The platform an image of this kind runs on.
    pub fn platform(self) -> Platform {
        match self {
            ImageKind::Ptx | ImageKind::Cubin => Platform::Nvptx,
            ImageKind::Amdgpu => Platform::Amdgcn,
            ImageKind::Host => Platform::Host,
        }
    }
}
