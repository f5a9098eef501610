//! Math functions for kernels, with the same results on NVIDIA, AMD and the host emulation:
//! C's `<math.h>` names (`sinf`/`sin`, `expf`/`exp`, `powf`, `atan2`, `erf`, `tgamma`, ...).
//!
//! - Functions that round correctly by definition use the target's instruction:
//!   [`sqrtf`]/[`sqrt`], [`fmaf`]/[`fma`], [`floorf`]/[`floor`], [`ceilf`]/[`ceil`],
//!   [`truncf`]/[`trunc`], [`rintf`]/[`rint`], [`fabsf`]/[`fabs`], [`copysignf`]/[`copysign`],
//!   [`fminf`]/[`fmin`], [`fmaxf`]/[`fmax`] (NVIDIA `sqrt.rn`, `fma.rn`, `cvt.rmi`, ...; AMD
//!   `v_sqrt` with LLVM's correction, `v_fma`, `v_floor`, ...; the host's `std`), so the answer is
//!   the exactly rounded one everywhere.
//! - Everything else comes from the [`libm`] crate (Rust's port of musl's libm, pure Rust, no
//!   calls outside the image): the same code on every target, including the host emulation
//!   (not the host's C library), so a kernel computes the same bits in CI as on the GPU.
//!
//! Not used: CUDA's libdevice and AMD's ocml (bitcode the nvptx and amdgcn builds cannot link),
//! and `core`'s float methods that LLVM lowers to C library calls on GPUs (`sin`, `exp`, ...):
//! those would leave undefined symbols, which neither PTX nor ROCr's loader accepts.

pub use libm::*;

/// Picks `core`'s GPU form (a compiler intrinsic: one instruction, or a short exact sequence)
/// or `std`'s on the host; both round correctly.
macro_rules! native {
    ($($(#[$doc:meta])* $name:ident($($arg:ident),*) -> $ty:ident = $module:ident::$gpu:ident, $host:ident;)*) => {$(
        $(#[$doc])*
        #[inline]
        pub fn $name($($arg: $ty),*) -> $ty {
            #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
            {
                core::$module::math::$gpu($($arg),*)
            }
            #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
            {
                native!(@host $host, $($arg),*)
            }
        }
    )*};
    (@host $host:ident, $x:ident) => { $x.$host() };
    (@host $host:ident, $x:ident, $($rest:ident),*) => { $x.$host($($rest),*) };
}

native! {
    /// Square root, correctly rounded.
    sqrtf(x) -> f32 = f32::sqrt, sqrt;
    /// Square root, correctly rounded.
    sqrt(x) -> f64 = f64::sqrt, sqrt;
    /// `x * y + z` with one rounding.
    fmaf(x, y, z) -> f32 = f32::mul_add, mul_add;
    /// `x * y + z` with one rounding.
    fma(x, y, z) -> f64 = f64::mul_add, mul_add;
    /// Largest integer not above `x`.
    floorf(x) -> f32 = f32::floor, floor;
    /// Largest integer not above `x`.
    floor(x) -> f64 = f64::floor, floor;
    /// Smallest integer not below `x`.
    ceilf(x) -> f32 = f32::ceil, ceil;
    /// Smallest integer not below `x`.
    ceil(x) -> f64 = f64::ceil, ceil;
    /// `x` without its fraction.
    truncf(x) -> f32 = f32::trunc, trunc;
    /// `x` without its fraction.
    trunc(x) -> f64 = f64::trunc, trunc;
    /// The nearest integer, ties to even.
    rintf(x) -> f32 = f32::round_ties_even, round_ties_even;
    /// The nearest integer, ties to even.
    rint(x) -> f64 = f64::round_ties_even, round_ties_even;
}

/// `|x|`.
#[inline]
pub fn fabsf(x: f32) -> f32 {
    x.abs()
}

/// `|x|`.
#[inline]
pub fn fabs(x: f64) -> f64 {
    x.abs()
}

/// `x` with the sign of `y`.
#[inline]
pub fn copysignf(x: f32, y: f32) -> f32 {
    x.copysign(y)
}

/// `x` with the sign of `y`.
#[inline]
pub fn copysign(x: f64, y: f64) -> f64 {
    x.copysign(y)
}

/// The smaller of `x` and `y`; a NaN loses to a number.
#[inline]
pub fn fminf(x: f32, y: f32) -> f32 {
    x.min(y)
}

/// The smaller of `x` and `y`; a NaN loses to a number.
#[inline]
pub fn fmin(x: f64, y: f64) -> f64 {
    x.min(y)
}

/// The larger of `x` and `y`; a NaN loses to a number.
#[inline]
pub fn fmaxf(x: f32, y: f32) -> f32 {
    x.max(y)
}

/// The larger of `x` and `y`; a NaN loses to a number.
#[inline]
pub fn fmax(x: f64, y: f64) -> f64 {
    x.max(y)
}
