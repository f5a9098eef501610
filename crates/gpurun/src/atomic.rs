//! Atomics that `core::sync::atomic` lacks and kernels need, with the target's own instruction
//! where it has one and it is safe to use: floats ([`AtomicF32`], [`AtomicF64`]: add, subtract,
//! min, max, swap, compare-and-exchange) and CUDA's wrapping increment and decrement
//! ([`fetch_inc`], [`fetch_dec`]).
//!
//! `core::sync::atomic` itself works in kernels on every target, on device memory (buffers,
//! statics), block-shared memory and host memory mapped for the GPU alike. These take generic
//! addresses too (NVIDIA: `atom` without a state space; AMD: a run-time test for block-shared
//! memory, then `flat_`/`global_` or `ds_` instructions).
//!
//! Every operation here is **relaxed**, as CUDA's `atomicAdd` and friends: it is atomic with
//! respect to every thread of the launch, and orders nothing else (use
//! `core::sync::atomic::fence` for that, or [`scoped`] for operations with a [`Scope`] and an
//! `Ordering`, on these floats and on `core`'s integers). What each target executes:
//!
//! | | NVIDIA | AMD | host emulation |
//! | --- | --- | --- | --- |
//! | float add | `atom.relaxed.gpu.add.f32` / `.f64` | shared memory: `ds_add_f32`/`_f64`; elsewhere a compare-and-swap loop; `fetch_add_device`: `global_`/`flat_atomic_add_f32`/`_f64` where the GPU has them (gfx90a, gfx942, gfx11 for f32), else a compare-and-swap loop | compare-and-swap loop |
//! | float min/max | compare-and-swap loop | shared memory: `ds_min`/`ds_max`; elsewhere a compare-and-swap loop; `fetch_min_device`/`fetch_max_device`: native for f64 on gfx90a and gfx942 and f32 on gfx11, else a compare-and-swap loop | compare-and-swap loop |
//! | `fetch_inc` / `fetch_dec` | `atom.inc.u32` / `atom.dec.u32` | shared memory: `ds_inc`/`ds_dec`; elsewhere a compare-and-swap loop; `fetch_inc_device`/`fetch_dec_device`: `flat_`/`global_atomic_inc`/`dec` | compare-and-swap loop |
//!
//! Why AMD's defaults loop outside shared memory: no AMD GPU adds floats or wraps an increment
//! atomically over PCIe, so on host memory mapped for the GPU (fine-grained memory) the native
//! instructions lose updates, where a compare-and-swap (a PCIe atomic operation) does not. The
//! `_device` forms use the native instruction: they are `unsafe`, for memory the caller knows
//! is the GPU's own or block-shared. Native or looped, every AMD form is relaxed at device
//! scope with no cache write-back or invalidate around it (LLVM's float atomic intrinsics for
//! flat and global memory become sequentially consistent operations, which on gfx942 write back
//! and invalidate the caches around each one; these are reached through the forms whose
//! ordering is an argument). The native forms may flush a denormal result of a float add to
//! zero.
//!
//! Float min and max follow IEEE `minNum`/`maxNum` (as `f32::min`): a NaN operand loses to a
//! number; which zero wins between `-0.0` and `+0.0` is not specified.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64};

mod scoped;
pub use scoped::{scoped, Scope, Scoped};

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

            /// Adds `value`, returning the previous value. Atomic on any memory, host memory
            /// mapped for the GPU included (see the [module](self) for the cost on AMD).
            pub fn fetch_add(&self, value: $float) -> $float {
                imp::$add(self, value)
            }

            /// Stores the smaller of the current value and `value` (`f32::min` rules),
            /// returning the previous value. Atomic on any memory.
            pub fn fetch_min(&self, value: $float) -> $float {
                imp::$min(self, value)
            }

            /// Stores the larger of the current value and `value`, returning the previous
            /// value. Atomic on any memory.
            pub fn fetch_max(&self, value: $float) -> $float {
                imp::$max(self, value)
            }

            /// Subtracts `value`, returning the previous value: [`Self::fetch_add`] of `-value`,
            /// which IEEE arithmetic makes the same operation.
            pub fn fetch_sub(&self, value: $float) -> $float {
                self.fetch_add(-value)
            }

            /// Stores `value`, returning the previous value (relaxed; one atomic exchange of
            /// the bits on every target).
            pub fn swap(&self, value: $float) -> $float {
                <$float>::from_bits(
                    self.bits()
                        .swap(value.to_bits(), core::sync::atomic::Ordering::Relaxed),
                )
            }

            /// Stores `new` if the value is `current`, comparing **bits** (a NaN matches the same
            /// NaN bits, `0.0` does not match `-0.0`): `Ok(previous)` if it did, else
            /// `Err(the value found)`. Relaxed; one compare-and-swap on every target (CUDA's
            /// `atomicCAS` on the bits).
            pub fn compare_exchange(&self, current: $float, new: $float) -> Result<$float, $float> {
                self.bits()
                    .compare_exchange(
                        current.to_bits(),
                        new.to_bits(),
                        core::sync::atomic::Ordering::Relaxed,
                        core::sync::atomic::Ordering::Relaxed,
                    )
                    .map(<$float>::from_bits)
                    .map_err(<$float>::from_bits)
            }

            /// The address of the value, for code that passes it on (as `core`'s `as_ptr`).
            pub const fn as_ptr(&self) -> *mut $float {
                self.value.get()
            }

            /// [`Self::fetch_add`] with the GPU's own atomic instruction on AMD, where it has
            /// one; the same as `fetch_add` elsewhere.
            ///
            /// # Safety
            /// The value is in the GPU's own memory (a device buffer or a static) or in
            /// block-shared memory, not in host memory mapped for the GPU, where AMD's native
            /// float atomics are not atomic (concurrent updates would race).
            pub unsafe fn fetch_add_device(&self, value: $float) -> $float {
                imp::device::$add(self, value)
            }

            /// [`Self::fetch_min`] with the GPU's own instruction on AMD where it has one.
            ///
            /// # Safety
            /// As [`Self::fetch_add_device`].
            pub unsafe fn fetch_min_device(&self, value: $float) -> $float {
                imp::device::$min(self, value)
            }

            /// [`Self::fetch_max`] with the GPU's own instruction on AMD where it has one.
            ///
            /// # Safety
            /// As [`Self::fetch_add_device`].
            pub unsafe fn fetch_max_device(&self, value: $float) -> $float {
                imp::device::$max(self, value)
            }

            /// Replaces the value with `update(value)` in a compare-and-swap loop, returning the
            /// previous value: atomic on any memory, and the fallback where a target has no
            /// instruction.
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
/// the previous value. A ring index of `limit + 1` slots. Atomic on any memory.
pub fn fetch_inc(atomic: &AtomicU32, limit: u32) -> u32 {
    imp::fetch_inc(atomic.as_ptr(), limit)
}

/// CUDA's `atomicDec`: stores `limit` if the value is `0` or `> limit`, else the value minus
/// one; returns the previous value. Atomic on any memory.
pub fn fetch_dec(atomic: &AtomicU32, limit: u32) -> u32 {
    imp::fetch_dec(atomic.as_ptr(), limit)
}

/// [`fetch_inc`] with the GPU's own instruction on AMD; the same as `fetch_inc` elsewhere.
///
/// # Safety
/// `atomic` is in the GPU's own memory or in block-shared memory, not in host memory mapped
/// for the GPU, where AMD's native wrapping increment is not atomic.
pub unsafe fn fetch_inc_device(atomic: &AtomicU32, limit: u32) -> u32 {
    imp::device::fetch_inc(atomic.as_ptr(), limit)
}

/// [`fetch_dec`] with the GPU's own instruction on AMD; the same as `fetch_dec` elsewhere.
///
/// # Safety
/// As [`fetch_inc_device`].
pub unsafe fn fetch_dec_device(atomic: &AtomicU32, limit: u32) -> u32 {
    imp::device::fetch_dec(atomic.as_ptr(), limit)
}

/// The float operations as compare-and-swap loops, for targets without an instruction (and
/// AMD's default forms outside shared memory).
mod looped {
    use super::{AtomicF32, AtomicF64};

    macro_rules! looped {
        ($($name:ident($atomic:ty, $float:ty) => $rule:expr;)*) => {$(
            // NVIDIA adds with its own instruction.
            #[cfg_attr(target_arch = "nvptx64", allow(dead_code))]
            pub(super) fn $name(atomic: &$atomic, value: $float) -> $float {
                atomic.update(|current| $rule(current, value))
            }
        )*};
    }

    looped! {
        add_f32(AtomicF32, f32) => |current: f32, value| current + value;
        add_f64(AtomicF64, f64) => |current: f64, value| current + value;
        min_f32(AtomicF32, f32) => f32::min;
        max_f32(AtomicF32, f32) => f32::max;
        min_f64(AtomicF64, f64) => f64::min;
        max_f64(AtomicF64, f64) => f64::max;
    }
}

/// Replaces the `u32` at `address` with `rule(value)` in a relaxed compare-and-swap loop,
/// returning the previous value.
#[allow(dead_code)]
fn update_u32(address: *mut u32, rule: impl Fn(u32) -> u32) -> u32 {
    // SAFETY: the address of an `AtomicU32` the caller holds a reference to.
    let atomic = unsafe { AtomicU32::from_ptr(address) };
    let relaxed = core::sync::atomic::Ordering::Relaxed;
    match atomic.fetch_update(relaxed, relaxed, |value| Some(rule(value))) {
        Ok(previous) | Err(previous) => previous,
    }
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
    use super::scoped::{Rmw, Scope, Word};
    use super::{AtomicF32, AtomicF64};
    use core::arch::asm;

    /// NVIDIA's atomics are the same on every memory the GPU reaches: the `_device` forms are
    /// the defaults.
    pub(super) mod device {
        pub(in crate::atomic) use super::*;
    }

    /// `atom.relaxed.gpu.add.f32`: `atomicAdd`'s instruction.
    pub(super) fn add_f32(atomic: &AtomicF32, value: f32) -> f32 {
        let (address, bits) = (atomic.as_ptr().cast(), value.to_bits());
        f32::from_bits(u32::rmw(Rmw::AddFloat, address, bits, Scope::Device))
    }

    /// `atom.relaxed.gpu.add.f64` (sm_60+).
    pub(super) fn add_f64(atomic: &AtomicF64, value: f64) -> f64 {
        let (address, bits) = (atomic.as_ptr().cast(), value.to_bits());
        f64::from_bits(u64::rmw(Rmw::AddFloat, address, bits, Scope::Device))
    }

    pub(super) use super::looped::{max_f32, max_f64, min_f32, min_f64};

    /// `atom.inc.u32` and `atom.dec.u32`: CUDA's `atomicInc` and `atomicDec`.
    macro_rules! wrapping {
        ($($name:ident => $op:literal;)*) => {$(
            pub(super) fn $name(address: *mut u32, limit: u32) -> u32 {
                let previous: u32;
                // SAFETY: the instruction on the address of an `AtomicU32`.
                unsafe {
                    asm!(
                        concat!("atom.", $op, ".u32 {previous}, [{address}], {limit};"),
                        previous = out(reg32) previous,
                        address = in(reg64) address,
                        limit = in(reg32) limit,
                        options(nostack),
                    )
                };
                previous
            }
        )*};
    }

    wrapping! {
        fetch_inc => "inc";
        fetch_dec => "dec";
    }
}

#[cfg(target_arch = "amdgpu")]
use amdgpu as imp;

#[cfg(target_arch = "amdgpu")]
mod amdgpu {
    use super::{dec_wrapping, inc_wrapping, update_u32, AtomicF32, AtomicF64};

    // Inline assembly is rejected on this target and Rust has no float `atomicrmw`, so these
    // are LLVM's older AMDGPU atomic intrinsics, which LLVM upgrades to the `atomicrmw` of the
    // same operation on the pointer given, at agent scope, marked as not on fine-grained
    // memory. Only the forms that take an ordering keep it: the LDS ones (`ds.*`), used here on
    // generic pointers, and `atomic.inc`/`dec`. The flat and global float ones become
    // sequentially consistent, which on gfx942 writes back and invalidates the caches around
    // every operation. `tests/cli/amdgpu_code.rs` checks the instructions in gfx90a,
    // gfx942 and gfx1100 code objects.
    unsafe extern "unadjusted" {
        #[link_name = "llvm.amdgcn.ds.fadd.f32"]
        fn fadd_f32(
            address: *mut f32,
            value: f32,
            ordering: u32,
            scope: u32,
            volatile: bool,
        ) -> f32;
        #[link_name = "llvm.amdgcn.ds.fadd.f64"]
        fn fadd_f64(
            address: *mut f64,
            value: f64,
            ordering: u32,
            scope: u32,
            volatile: bool,
        ) -> f64;
        #[link_name = "llvm.amdgcn.ds.fmin.f32"]
        fn fmin_f32(
            address: *mut f32,
            value: f32,
            ordering: u32,
            scope: u32,
            volatile: bool,
        ) -> f32;
        #[link_name = "llvm.amdgcn.ds.fmax.f32"]
        fn fmax_f32(
            address: *mut f32,
            value: f32,
            ordering: u32,
            scope: u32,
            volatile: bool,
        ) -> f32;
        #[link_name = "llvm.amdgcn.ds.fmin.f64"]
        fn fmin_f64(
            address: *mut f64,
            value: f64,
            ordering: u32,
            scope: u32,
            volatile: bool,
        ) -> f64;
        #[link_name = "llvm.amdgcn.ds.fmax.f64"]
        fn fmax_f64(
            address: *mut f64,
            value: f64,
            ordering: u32,
            scope: u32,
            volatile: bool,
        ) -> f64;
        /// `(address, limit, ordering, scope, volatile)`: upgraded to `atomicrmw uinc_wrap`.
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
        /// Whether a generic address is in the LDS (block-shared memory) aperture.
        #[link_name = "llvm.amdgcn.is.shared"]
        fn is_shared(address: *const u8) -> bool;
    }

    /// LLVM's `AtomicOrdering::Monotonic` (relaxed).
    const MONOTONIC: u32 = 2;
    /// The scope argument, which the upgrade ignores (it uses agent scope).
    const AGENT: u32 = 0;

    /// Whether `address` is block-shared memory, where the native atomics are always atomic.
    fn shared<T>(address: *mut T) -> bool {
        // SAFETY: only compares the address with the LDS aperture; nothing is accessed.
        unsafe { is_shared(address.cast_const().cast()) }
    }

    /// The native, relaxed forms: for the GPU's own memory and block-shared memory.
    pub(super) mod device {
        use super::*;

        macro_rules! native {
            ($($name:ident($atomic:ty, $float:ty) => $intrinsic:ident;)*) => {$(
                pub(in crate::atomic) fn $name(atomic: &$atomic, value: $float) -> $float {
                    // SAFETY: the reference makes the address valid and aligned; relaxed, not
                    // volatile.
                    unsafe { $intrinsic(atomic.as_ptr(), value, MONOTONIC, AGENT, false) }
                }
            )*};
        }

        native! {
            add_f32(AtomicF32, f32) => fadd_f32;
            add_f64(AtomicF64, f64) => fadd_f64;
            min_f32(AtomicF32, f32) => fmin_f32;
            max_f32(AtomicF32, f32) => fmax_f32;
            min_f64(AtomicF64, f64) => fmin_f64;
            max_f64(AtomicF64, f64) => fmax_f64;
        }

        pub(in crate::atomic) fn fetch_inc(address: *mut u32, limit: u32) -> u32 {
            // SAFETY: the address of an `AtomicU32`; relaxed, not volatile.
            unsafe { atomic_inc(address, limit, MONOTONIC, AGENT, false) }
        }

        pub(in crate::atomic) fn fetch_dec(address: *mut u32, limit: u32) -> u32 {
            // SAFETY: as in `fetch_inc`.
            unsafe { atomic_dec(address, limit, MONOTONIC, AGENT, false) }
        }
    }

    /// The defaults: native in block-shared memory, a compare-and-swap loop (a PCIe atomic
    /// operation) anywhere else, since the memory may be the host's.
    macro_rules! safe {
        ($($name:ident($atomic:ty, $float:ty);)*) => {$(
            pub(super) fn $name(atomic: &$atomic, value: $float) -> $float {
                if shared(atomic.as_ptr()) {
                    device::$name(atomic, value)
                } else {
                    super::looped::$name(atomic, value)
                }
            }
        )*};
    }

    safe! {
        add_f32(AtomicF32, f32);
        add_f64(AtomicF64, f64);
        min_f32(AtomicF32, f32);
        max_f32(AtomicF32, f32);
        min_f64(AtomicF64, f64);
        max_f64(AtomicF64, f64);
    }

    pub(super) fn fetch_inc(address: *mut u32, limit: u32) -> u32 {
        if shared(address) {
            device::fetch_inc(address, limit)
        } else {
            update_u32(address, |value| inc_wrapping(value, limit))
        }
    }

    pub(super) fn fetch_dec(address: *mut u32, limit: u32) -> u32 {
        if shared(address) {
            device::fetch_dec(address, limit)
        } else {
            update_u32(address, |value| dec_wrapping(value, limit))
        }
    }
}

#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
use host as imp;

/// The host emulation: compare-and-swap loops (x86 and Arm have no float atomics).
#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
mod host {
    use super::{dec_wrapping, inc_wrapping, update_u32};

    /// Every host operation is a compare-and-swap loop: the `_device` forms are the same.
    pub(super) mod device {
        pub(in crate::atomic) use super::*;
    }

    pub(super) use super::looped::{add_f32, add_f64, max_f32, max_f64, min_f32, min_f64};

    pub(super) fn fetch_inc(address: *mut u32, limit: u32) -> u32 {
        update_u32(address, |value| inc_wrapping(value, limit))
    }

    pub(super) fn fetch_dec(address: *mut u32, limit: u32) -> u32 {
        update_u32(address, |value| dec_wrapping(value, limit))
    }
}
