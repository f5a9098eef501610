//! Device runtime.
#![cfg_attr(any(target_arch = "nvptx64", target_arch = "amdgpu"), no_std)]
