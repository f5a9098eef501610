//! Per-target implementations of [`crate::lanes::Lanes`]; each file is compiled only for its
//! target.

#[cfg(target_arch = "amdgpu")]
pub mod amdgpu;
#[cfg(target_arch = "nvptx64")]
pub mod nvptx;
