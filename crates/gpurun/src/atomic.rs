//! Atomics that `core::sync::atomic` lacks and kernels need, with the target's own instruction
//! where it has one: float add, min and max ([`AtomicF32`], [`AtomicF64`]) and CUDA's wrapping
//! increment and decrement ([`fetch_inc`], [`fetch_dec`]).
//!
//! `core::sync::atomic` itself works in kernels on every target, on device memory (buffers,
//! statics) and block-shared memory alike. These work on both too: they take generic
//! addresses (NVIDIA: `atom` without a state space; AMD: `flat_` instructions, which find out
//! at run time whether an address is global or LDS).
//!
//! Every operation here is **relaxed and device-wide**, as CUDA's `atomicAdd` and friends: it
//! is atomic with respect to every thread of the launch, and orders nothing else (use
//! `core::sync::atomic::fence` for that). What each target executes:
//!
//! | | NVIDIA | AMD | host emulation |
//! | --- | --- | --- | --- |
//! | float add | `atom.add.f32` / `atom.add.f64` (`.gpu` scope, relaxed) | `atomicrmw fadd` (agent scope): `global_atomic_add_f32` / `flat_atomic_add_f64` on gfx90a, `flat_atomic_add_f32` on gfx11; a compare-and-swap loop where the GPU has none | compare-and-swap loop |
//! | float min/max | compare-and-swap loop | `atomicrmw fmin`/`fmax`: native for f64 on gfx90a and f32 on gfx11, a compare-and-swap loop elsewhere | compare-and-swap loop |
//! | `fetch_inc` / `fetch_dec` | `atom.inc.u32` / `atom.dec.u32` | `atomicrmw uinc_wrap` / `udec_wrap` (`flat_atomic_inc`/`dec`) | compare-and-swap loop |
//!
//! Float min and max follow IEEE `minNum`/`maxNum` (as `f32::min`): a NaN operand loses to a
//! number; which zero wins between `-0.0` and `+0.0` is not specified. On AMD, float atomics
//! act on coarse-grained memory (device buffers); on fine-grained (host-coherent) memory
//! gfx90a's float atomics do not work at all, and the hardware may flush denormal results of
//! `fetch_add` to zero.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64};

macro_rules! atomic_float {
    ($name:ident, $float:ty, $align:literal, $bits:ty, $atomic_bits:ty, $add:ident, $min:ident, $max:ident) => {
        #[doc = concat!("An `", stringify!($float), "` that threads update atomically (see the [module](self) for what each target does).")]
        #[repr(C, align($align))]
        pub struct $name {
            value: UnsafeCell<$float>,
        }

        // SAFETY: every access goes through atomic operations.
        unsafe impl Sync for $name {}

        impl $name {
            pub const fn new(value: $float) -> Self {
                Self {
                    value: UnsafeCell::new(value),
                }
            }

            /// Views `ptr` as an atomic, like `core`'s `from_ptr`.
            ///
            /// # Safety
            /// `ptr` is valid, aligned for the type, for the whole lifetime `'a`, and every
            /// access to it during `'a` is atomic.
            pub const unsafe fn from_ptr<'a>(ptr: *mut $float) -> &'a Self {
                // SAFETY: the type is `repr(C)` around the value, aligned as its size (see the
                // assertion below), and the caller's contract.
                unsafe { &*ptr.cast::<Self>() }
            }

            fn as_ptr(&self) -> *mut $float {
                self.value.get()
            }

            fn bits(&self) -> &$atomic_bits {
                // SAFETY: same size and alignment; every access is atomic.
                unsafe { <$atomic_bits>::from_ptr(self.as_ptr().cast::<$bits>()) }
            }

            /// The value, read atomically (relaxed).
            pub fn load(&self) -> $float {
                <$float>::from_bits(self.bits().load(core::sync::atomic::Ordering::Relaxed))
            }

            /// Stores `value` atomically (relaxed).
            pub fn store(&self, value: $float) {
                self.bits()
                    .store(value.to_bits(), core::sync::atomic::Ordering::Relaxed)
            }

            /// Adds `value`, returning the previous value.
            pub fn fetch_add(&self, value: $float) -> $float {
                $add(self, value)
            }

            /// Stores the smaller of the current value and `value` (`f32::min` rules),
            /// returning the previous value.
            pub fn fetch_min(&self, value: $float) -> $float {
                $min(self, value)
            }

            /// Stores the larger of the current value and `value`, returning the previous
            /// value.
            pub fn fetch_max(&self, value: $float) -> $float {
                $max(self, value)
            }

            /// Replaces the value with `update(value)` in a compare-and-swap loop, returning the
            /// previous value: the fallback where a target has no instruction.
            #[allow(dead_code)]
            fn update(&self, update: impl Fn($float) -> $float) -> $float {
                let bits = self.bits();
                let mut current = bits.load(core::sync::atomic::Ordering::Relaxed);
                loop {
                    let new = update(<$float>::from_bits(current)).to_bits();
                    match bits.compare_exchange_weak(
                        current,
                        new,
                        core::sync::atomic::Ordering::Relaxed,
                        core::sync::atomic::Ordering::Relaxed,
                    ) {
                        Ok(previous) => return <$float>::from_bits(previous),
                        Err(seen) => current = seen,
                    }
                }
            }
        }

        const _: () = assert!(
            core::mem::size_of::<$name>() == core::mem::size_of::<$float>()
                && core::mem::align_of::<$name>() == core::mem::size_of::<$float>()
        );
    };
}

// Aligned as their size, as the integer atomics they are read through (an `f64` may be only
// 4-aligned on some hosts; `from_ptr` requires 8).
atomic_float!(AtomicF32, f32, 4, u32, AtomicU32, add_f32, min_f32, max_f32);
atomic_float!(AtomicF64, f64, 8, u64, AtomicU64, add_f64, min_f64, max_f64);

/// CUDA's `atomicInc`: stores `0` if the value is `>= limit`, else the value plus one; returns
/// the previous value. A ring index of `limit + 1` slots.
pub fn fetch_inc(atomic: &AtomicU32, limit: u32) -> u32 {
    imp::fetch_inc(atomic.as_ptr(), limit)
}

/// CUDA's `atomicDec`: stores `limit` if the value is `0` or `> limit`, else the value minus
/// one; returns the previous value.
pub fn fetch_dec(atomic: &AtomicU32, limit: u32) -> u32 {
    imp::fetch_dec(atomic.as_ptr(), limit)
}

/// `atomicInc`'s rule.
#[allow(dead_code)]
fn inc_wrapping(value: u32, limit: u32) -> u32 {
    if value >= limit {
        0
    } else {
        value + 1
    }
}

/// `atomicDec`'s rule.
#[allow(dead_code)]
fn dec_wrapping(value: u32, limit: u32) -> u32 {
    if value == 0 || value > limit {
        limit
    } else {
        value - 1
    }
}

#[cfg(target_arch = "nvptx64")]
use nvptx as imp;

#[cfg(target_arch = "nvptx64")]
mod nvptx {
    use super::{AtomicF32, AtomicF64};
    use core::arch::asm;

    pub(super) fn add_f32(atomic: &AtomicF32, value: f32) -> f32 {
        let previous: f32;
        // SAFETY: `atom.add.f32` on a generic address the reference makes valid and aligned.
        unsafe {
            asm!(
                "atom.add.f32 {previous}, [{address}], {value};",
                previous = out(reg32) previous,
                address = in(reg64) atomic.as_ptr(),
                value = in(reg32) value,
                options(nostack),
            )
        };
        previous
    }

    pub(super) fn add_f64(atomic: &AtomicF64, value: f64) -> f64 {
        let previous: f64;
        // SAFETY: `atom.add.f64` (sm_60+) on a generic address the reference makes valid and
        // aligned.
        unsafe {
            asm!(
                "atom.add.f64 {previous}, [{address}], {value};",
                previous = out(reg64) previous,
                address = in(reg64) atomic.as_ptr(),
                value = in(reg64) value,
                options(nostack),
            )
        };
        previous
    }

    pub(super) fn min_f32(atomic: &AtomicF32, value: f32) -> f32 {
        atomic.update(|current| current.min(value))
    }
    pub(super) fn max_f32(atomic: &AtomicF32, value: f32) -> f32 {
        atomic.update(|current| current.max(value))
    }
    pub(super) fn min_f64(atomic: &AtomicF64, value: f64) -> f64 {
        atomic.update(|current| current.min(value))
    }
    pub(super) fn max_f64(atomic: &AtomicF64, value: f64) -> f64 {
        atomic.update(|current| current.max(value))
    }

    pub(super) fn fetch_inc(address: *mut u32, limit: u32) -> u32 {
        let previous: u32;
        // SAFETY: `atom.inc.u32` on the address of an `AtomicU32`.
        unsafe {
            asm!(
                "atom.inc.u32 {previous}, [{address}], {limit};",
                previous = out(reg32) previous,
                address = in(reg64) address,
                limit = in(reg32) limit,
                options(nostack),
            )
        };
        previous
    }

    pub(super) fn fetch_dec(address: *mut u32, limit: u32) -> u32 {
        let previous: u32;
        // SAFETY: `atom.dec.u32` on the address of an `AtomicU32`.
        unsafe {
            asm!(
                "atom.dec.u32 {previous}, [{address}], {limit};",
                previous = out(reg32) previous,
                address = in(reg64) address,
                limit = in(reg32) limit,
                options(nostack),
            )
        };
        previous
    }
}

#[cfg(target_arch = "amdgpu")]
use amdgpu as imp;

#[cfg(target_arch = "amdgpu")]
mod amdgpu {
    use super::{AtomicF32, AtomicF64};

    // LLVM's older AMDGPU atomic intrinsics: inline assembly is rejected on this target and
    // Rust has no float `atomicrmw`, and LLVM upgrades each of these to the `atomicrmw` of the
    // same operation (agent scope, for coarse-grained memory), which it lowers to the GPU's
    // instruction or a compare-and-swap loop. `cargo-gpurun/tests/amdgpu_code.rs` checks
    // the instructions in gfx90a and gfx1100 code objects.
    unsafe extern "unadjusted" {
        #[link_name = "llvm.amdgcn.flat.atomic.fadd.f32.p0.f32"]
        fn flat_fadd_f32(address: *mut f32, value: f32) -> f32;
        #[link_name = "llvm.amdgcn.flat.atomic.fadd.f64.p0.f64"]
        fn flat_fadd_f64(address: *mut f64, value: f64) -> f64;
        #[link_name = "llvm.amdgcn.flat.atomic.fmin.f32.p0.f32"]
        fn flat_fmin_f32(address: *mut f32, value: f32) -> f32;
        #[link_name = "llvm.amdgcn.flat.atomic.fmax.f32.p0.f32"]
        fn flat_fmax_f32(address: *mut f32, value: f32) -> f32;
        #[link_name = "llvm.amdgcn.flat.atomic.fmin.f64.p0.f64"]
        fn flat_fmin_f64(address: *mut f64, value: f64) -> f64;
        #[link_name = "llvm.amdgcn.flat.atomic.fmax.f64.p0.f64"]
        fn flat_fmax_f64(address: *mut f64, value: f64) -> f64;
        /// `(address, limit, ordering, scope, volatile)`: upgraded to `atomicrmw uinc_wrap`
        /// with the ordering given (LLVM's numbering) at agent scope.
        #[link_name = "llvm.amdgcn.atomic.inc.i32.p0"]
        fn atomic_inc(
            address: *mut u32,
            limit: u32,
            ordering: u32,
            scope: u32,
            volatile: bool,
        ) -> u32;
        #[link_name = "llvm.amdgcn.atomic.dec.i32.p0"]
        fn atomic_dec(
            address: *mut u32,
            limit: u32,
            ordering: u32,
            scope: u32,
            volatile: bool,
        ) -> u32;
    }

    /// LLVM's `AtomicOrdering::Monotonic` (relaxed).
    const MONOTONIC: u32 = 2;
    /// Scope argument 0: the whole device (agent), as the upgraded float atomics.
    const AGENT: u32 = 0;

    macro_rules! forward {
        ($($name:ident($atomic:ty, $float:ty) => $intrinsic:ident;)*) => {$(
            pub(super) fn $name(atomic: &$atomic, value: $float) -> $float {
                // SAFETY: the reference makes the address valid and aligned.
                unsafe { $intrinsic(atomic.as_ptr(), value) }
            }
        )*};
    }

    forward! {
        add_f32(AtomicF32, f32) => flat_fadd_f32;
        add_f64(AtomicF64, f64) => flat_fadd_f64;
        min_f32(AtomicF32, f32) => flat_fmin_f32;
        max_f32(AtomicF32, f32) => flat_fmax_f32;
        min_f64(AtomicF64, f64) => flat_fmin_f64;
        max_f64(AtomicF64, f64) => flat_fmax_f64;
    }

    pub(super) fn fetch_inc(address: *mut u32, limit: u32) -> u32 {
        // SAFETY: the address of an `AtomicU32`; relaxed, agent scope, not volatile.
        unsafe { atomic_inc(address, limit, MONOTONIC, AGENT, false) }
    }

    pub(super) fn fetch_dec(address: *mut u32, limit: u32) -> u32 {
        // SAFETY: as in `fetch_inc`.
        unsafe { atomic_dec(address, limit, MONOTONIC, AGENT, false) }
    }
}

#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
use host as imp;

/// The host emulation: compare-and-swap loops (x86 and Arm have no float atomics).
#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
mod host {
    use super::{dec_wrapping, inc_wrapping, AtomicF32, AtomicF64};
    use core::sync::atomic::{AtomicU32, Ordering};

    pub(super) fn add_f32(atomic: &AtomicF32, value: f32) -> f32 {
        atomic.update(|current| current + value)
    }
    pub(super) fn add_f64(atomic: &AtomicF64, value: f64) -> f64 {
        atomic.update(|current| current + value)
    }
    pub(super) fn min_f32(atomic: &AtomicF32, value: f32) -> f32 {
        atomic.update(|current| current.min(value))
    }
    pub(super) fn max_f32(atomic: &AtomicF32, value: f32) -> f32 {
        atomic.update(|current| current.max(value))
    }
    pub(super) fn min_f64(atomic: &AtomicF64, value: f64) -> f64 {
        atomic.update(|current| current.min(value))
    }
    pub(super) fn max_f64(atomic: &AtomicF64, value: f64) -> f64 {
        atomic.update(|current| current.max(value))
    }

    fn update(address: *mut u32, rule: impl Fn(u32) -> u32) -> u32 {
        // SAFETY: the address of an `AtomicU32` the caller holds a reference to.
        let atomic = unsafe { AtomicU32::from_ptr(address) };
        match atomic.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(rule(v))) {
            Ok(previous) | Err(previous) => previous,
        }
    }

    pub(super) fn fetch_inc(address: *mut u32, limit: u32) -> u32 {
        update(address, |value| inc_wrapping(value, limit))
    }

    pub(super) fn fetch_dec(address: *mut u32, limit: u32) -> u32 {
        update(address, |value| dec_wrapping(value, limit))
    }
}

use imp::{add_f32, add_f64, max_f32, max_f64, min_f32, min_f64};
