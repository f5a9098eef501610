//! Atomics with a scope and an ordering, as CUDA's `cuda::atomic_ref<T, thread_scope_...>`:
//! [`scoped`]`(&atomic, Scope::Block).fetch_add(1, Ordering::Relaxed)`.
//!
//! The scope says which threads the operation is atomic with and whose accesses its ordering
//! orders: [`Scope::Block`] only the calling thread's block (cheapest on NVIDIA, and enough for
//! block-shared memory), [`Scope::Device`] every thread of the launch (CUDA's `atomicAdd`),
//! [`Scope::System`] the host too. Two threads that use one value atomically must each be in the
//! other's scope: a block-scope operation on a value that another block also updates is a data
//! race on NVIDIA, and the host emulation reports it (racecheck) in an image built with its
//! memory checks.
//!
//! An ordering other than `Relaxed` is a relaxed operation at the scope with acquire-release
//! fences of the same scope around it as the ordering asks (`Release` before, `Acquire` after,
//! `SeqCst` a sequentially consistent fence before), as C++ allows any atomic to be built.
//!
//! | | NVIDIA | AMD | host emulation |
//! | --- | --- | --- | --- |
//! | operation | `atom.relaxed.{cta,gpu,sys}`, `ld`/`st.relaxed.{cta,gpu,sys}` | `core::sync::atomic`, relaxed (system scope: Rust names no narrower one there, and a wider scope is always correct) | `core::sync::atomic`, relaxed; a block-scope one also tells the memory checks its scope |
//! | float add | `atom.relaxed.*.add.f32`/`.f64` | as [`AtomicF32::fetch_add`] | compare-and-swap loop |
//! | min/max of floats | compare-and-swap loop | compare-and-swap loop | compare-and-swap loop |
//! | fences | [`crate::fence_block`] and its kind for the scope; `fence.sc.*` for `SeqCst` | [`crate::fence_block`] and its kind; `core::sync::atomic::fence(SeqCst)` | the same |

use core::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};

use super::{AtomicF32, AtomicF64};

/// Which threads an atomic operation is atomic with, and whose accesses its ordering orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The threads of the calling thread's block (CUDA's `thread_scope_block`, PTX `.cta`).
    Block,
    /// Every thread of the device (`thread_scope_device`, `.gpu`): what `core`'s atomics and
    /// CUDA's `atomicAdd` give on NVIDIA.
    Device,
    /// The device and the host (`thread_scope_system`, `.sys`): for host memory mapped for the
    /// GPU that the host reads or writes while the kernel runs.
    System,
}

/// `atomic` at `scope`: its operations take an `Ordering` as `core`'s do.
pub fn scoped<A>(atomic: &A, scope: Scope) -> Scoped<'_, A> {
    Scoped { atomic, scope }
}

/// An atomic viewed at a [`Scope`] (see [`scoped`]).
#[derive(Clone, Copy, Debug)]
pub struct Scoped<'a, A> {
    atomic: &'a A,
    scope: Scope,
}

/// A read-modify-write of one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rmw {
    Add,
    And,
    Or,
    Xor,
    Exchange,
    MinUnsigned,
    MaxUnsigned,
    MinSigned,
    MaxSigned,
    /// IEEE addition of the word's float (`f32` in a `u32`, `f64` in a `u64`).
    AddFloat,
}

/// A 32- or 64-bit word the targets operate on at a scope, relaxed.
pub(crate) trait Word: Copy + Eq {
    fn rmw(op: Rmw, address: *mut Self, value: Self, scope: Scope) -> Self;
    /// Compare-and-swap: the previous value (stored `new` if it was `current`).
    fn cas(address: *mut Self, current: Self, new: Self, scope: Scope) -> Self;
    fn load(address: *mut Self, scope: Scope) -> Self;
    fn store(address: *mut Self, value: Self, scope: Scope);
}

/// An acquire-release fence at `scope`: `gpurun`'s own ([`crate::fence_block`] and its kind).
#[inline(always)]
fn fence(scope: Scope) {
    match scope {
        Scope::Block => crate::arch::fence_block(),
        Scope::Device => crate::arch::fence_device(),
        Scope::System => crate::arch::fence_system(),
    }
}

/// The fence `order` asks for before a relaxed operation.
#[inline(always)]
fn before(order: Ordering, scope: Scope) {
    match order {
        Ordering::Release | Ordering::AcqRel => fence(scope),
        Ordering::SeqCst => imp::sequential_fence(scope),
        _ => {}
    }
}

/// The fence `order` asks for after a relaxed operation.
#[inline(always)]
fn after(order: Ordering, scope: Scope) {
    if matches!(
        order,
        Ordering::Acquire | Ordering::AcqRel | Ordering::SeqCst
    ) {
        fence(scope);
    }
}

/// A read-modify-write with `order`.
#[inline(always)]
fn ordered<W: Word>(op: Rmw, address: *mut W, value: W, order: Ordering, scope: Scope) -> W {
    before(order, scope);
    let previous = W::rmw(op, address, value, scope);
    after(order, scope);
    previous
}

/// A compare-and-swap with `success` and `failure` orderings.
#[inline(always)]
fn compare_exchange<W: Word>(
    address: *mut W,
    current: W,
    new: W,
    (success, failure): (Ordering, Ordering),
    scope: Scope,
) -> Result<W, W> {
    before(success, scope);
    let previous = W::cas(address, current, new, scope);
    if previous == current {
        after(success, scope);
        Ok(previous)
    } else {
        after(failure, scope);
        Err(previous)
    }
}

/// `update` applied in a compare-and-swap loop at `scope`, with `order`.
#[inline(always)]
fn update<W: Word>(address: *mut W, order: Ordering, scope: Scope, update: impl Fn(W) -> W) -> W {
    before(order, scope);
    let mut current = W::load(address, scope);
    let previous = loop {
        let seen = W::cas(address, current, update(current), scope);
        if seen == current {
            break seen;
        }
        current = seen;
    };
    after(order, scope);
    previous
}

#[inline(always)]
fn load<W: Word>(address: *mut W, order: Ordering, scope: Scope) -> W {
    match order {
        Ordering::Release | Ordering::AcqRel => {
            panic!("there is no such thing as a {order:?} load")
        }
        Ordering::SeqCst => imp::sequential_fence(scope),
        _ => {}
    }
    let value = W::load(address, scope);
    after(order, scope);
    value
}

#[inline(always)]
fn store<W: Word>(address: *mut W, value: W, order: Ordering, scope: Scope) {
    if matches!(order, Ordering::Acquire | Ordering::AcqRel) {
        panic!("there is no such thing as an {order:?} store");
    }
    before(order, scope);
    W::store(address, value, scope);
}

macro_rules! scoped_integer {
    ($($atomic:ty, $int:ty, $word:ty, $min:ident, $max:ident;)*) => {$(
        impl Scoped<'_, $atomic> {
            #[inline(always)]
            fn word(&self) -> *mut $word {
                self.atomic.as_ptr().cast()
            }

            /// The value (`Relaxed`, `Acquire` or `SeqCst`).
            #[inline(always)]
            pub fn load(&self, order: Ordering) -> $int {
                load(self.word(), order, self.scope) as $int
            }

            /// Stores `value` (`Relaxed`, `Release` or `SeqCst`).
            #[inline(always)]
            pub fn store(&self, value: $int, order: Ordering) {
                store(self.word(), value as $word, order, self.scope)
            }

            /// Stores `value`, returning the previous value.
            #[inline(always)]
            pub fn swap(&self, value: $int, order: Ordering) -> $int {
                ordered(Rmw::Exchange, self.word(), value as $word, order, self.scope) as $int
            }

            /// Stores `new` if the value is `current`: `Ok(previous)` if it did, else
            /// `Err(the value found)`.
            #[inline(always)]
            pub fn compare_exchange(
                &self,
                current: $int,
                new: $int,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$int, $int> {
                compare_exchange(
                    self.word(),
                    current as $word,
                    new as $word,
                    (success, failure),
                    self.scope,
                )
                .map(|value| value as $int)
                .map_err(|value| value as $int)
            }

            /// Adds `value` (wrapping), returning the previous value.
            #[inline(always)]
            pub fn fetch_add(&self, value: $int, order: Ordering) -> $int {
                ordered(Rmw::Add, self.word(), value as $word, order, self.scope) as $int
            }

            /// Subtracts `value` (wrapping), returning the previous value.
            #[inline(always)]
            pub fn fetch_sub(&self, value: $int, order: Ordering) -> $int {
                self.fetch_add(value.wrapping_neg(), order)
            }

            /// Bitwise and with `value`, returning the previous value.
            #[inline(always)]
            pub fn fetch_and(&self, value: $int, order: Ordering) -> $int {
                ordered(Rmw::And, self.word(), value as $word, order, self.scope) as $int
            }

            /// Bitwise or with `value`, returning the previous value.
            #[inline(always)]
            pub fn fetch_or(&self, value: $int, order: Ordering) -> $int {
                ordered(Rmw::Or, self.word(), value as $word, order, self.scope) as $int
            }

            /// Bitwise exclusive or with `value`, returning the previous value.
            #[inline(always)]
            pub fn fetch_xor(&self, value: $int, order: Ordering) -> $int {
                ordered(Rmw::Xor, self.word(), value as $word, order, self.scope) as $int
            }

            /// Stores the smaller of the value and `value`, returning the previous value.
            #[inline(always)]
            pub fn fetch_min(&self, value: $int, order: Ordering) -> $int {
                ordered(Rmw::$min, self.word(), value as $word, order, self.scope) as $int
            }

            /// Stores the larger of the value and `value`, returning the previous value.
            #[inline(always)]
            pub fn fetch_max(&self, value: $int, order: Ordering) -> $int {
                ordered(Rmw::$max, self.word(), value as $word, order, self.scope) as $int
            }
        }
    )*};
}

scoped_integer! {
    AtomicU32, u32, u32, MinUnsigned, MaxUnsigned;
    AtomicI32, i32, u32, MinSigned, MaxSigned;
    AtomicU64, u64, u64, MinUnsigned, MaxUnsigned;
    AtomicI64, i64, u64, MinSigned, MaxSigned;
}

macro_rules! scoped_float {
    ($($atomic:ty, $float:ty, $word:ty;)*) => {$(
        impl Scoped<'_, $atomic> {
            #[inline(always)]
            fn word(&self) -> *mut $word {
                self.atomic.as_ptr().cast()
            }

            /// The value (`Relaxed`, `Acquire` or `SeqCst`).
            #[inline(always)]
            pub fn load(&self, order: Ordering) -> $float {
                <$float>::from_bits(load(self.word(), order, self.scope))
            }

            /// Stores `value` (`Relaxed`, `Release` or `SeqCst`).
            #[inline(always)]
            pub fn store(&self, value: $float, order: Ordering) {
                store(self.word(), value.to_bits(), order, self.scope)
            }

            /// Stores `value`, returning the previous value.
            #[inline(always)]
            pub fn swap(&self, value: $float, order: Ordering) -> $float {
                let bits = ordered(Rmw::Exchange, self.word(), value.to_bits(), order, self.scope);
                <$float>::from_bits(bits)
            }

            /// Stores `new` if the value is `current`, comparing bits (as
            #[doc = concat!("[`", stringify!($atomic), "::compare_exchange`]).")]
            #[inline(always)]
            pub fn compare_exchange(
                &self,
                current: $float,
                new: $float,
                success: Ordering,
                failure: Ordering,
            ) -> Result<$float, $float> {
                compare_exchange(
                    self.word(),
                    current.to_bits(),
                    new.to_bits(),
                    (success, failure),
                    self.scope,
                )
                .map(<$float>::from_bits)
                .map_err(<$float>::from_bits)
            }

            /// Adds `value`, returning the previous value.
            #[inline(always)]
            pub fn fetch_add(&self, value: $float, order: Ordering) -> $float {
                let bits = ordered(Rmw::AddFloat, self.word(), value.to_bits(), order, self.scope);
                <$float>::from_bits(bits)
            }

            /// Subtracts `value`, returning the previous value.
            #[inline(always)]
            pub fn fetch_sub(&self, value: $float, order: Ordering) -> $float {
                self.fetch_add(-value, order)
            }

            /// Stores the smaller of the value and `value` (`f32::min` rules), returning the
            /// previous value.
            #[inline(always)]
            pub fn fetch_min(&self, value: $float, order: Ordering) -> $float {
                let rule = |bits| <$float>::from_bits(bits).min(value).to_bits();
                <$float>::from_bits(update(self.word(), order, self.scope, rule))
            }

            /// Stores the larger of the value and `value`, returning the previous value.
            #[inline(always)]
            pub fn fetch_max(&self, value: $float, order: Ordering) -> $float {
                let rule = |bits| <$float>::from_bits(bits).max(value).to_bits();
                <$float>::from_bits(update(self.word(), order, self.scope, rule))
            }
        }
    )*};
}

scoped_float! {
    AtomicF32, f32, u32;
    AtomicF64, f64, u64;
}

#[cfg(target_arch = "nvptx64")]
use nvptx as imp;

/// NVIDIA: each operation is one PTX instruction with the scope in it.
#[cfg(target_arch = "nvptx64")]
mod nvptx {
    use super::{Rmw, Scope, Word};
    use core::arch::asm;

    /// Runs `$mac!("cta" | "gpu" | "sys", ...)` for the scope: inline assembly takes its text
    /// as a literal.
    macro_rules! at_scope {
        ($scope:expr, $mac:ident!($($args:tt)*)) => {
            match $scope {
                Scope::Block => $mac!("cta", $($args)*),
                Scope::Device => $mac!("gpu", $($args)*),
                Scope::System => $mac!("sys", $($args)*),
            }
        };
    }

    macro_rules! atom {
        ($scope:literal, $op:expr, $reg:ident, $address:expr, $value:expr) => {{
            let previous;
            // SAFETY: a relaxed atomic on the address of an atomic the caller holds a
            // reference to (valid, aligned); it touches nothing else.
            unsafe {
                asm!(
                    concat!("atom.relaxed.", $scope, ".", $op, " {previous}, [{address}], {value};"),
                    previous = out($reg) previous,
                    address = in(reg64) $address,
                    value = in($reg) $value,
                    options(nostack),
                )
            };
            previous
        }};
    }

    macro_rules! cas {
        ($scope:literal, $op:expr, $reg:ident, $address:expr, $current:expr, $new:expr) => {{
            let previous;
            // SAFETY: as in `atom!`.
            unsafe {
                asm!(
                    concat!("atom.relaxed.", $scope, ".", $op, " {previous}, [{address}], {current}, {new};"),
                    previous = out($reg) previous,
                    address = in(reg64) $address,
                    current = in($reg) $current,
                    new = in($reg) $new,
                    options(nostack),
                )
            };
            previous
        }};
    }

    macro_rules! load {
        ($scope:literal, $op:expr, $reg:ident, $address:expr) => {{
            let value;
            // SAFETY: as in `atom!`.
            unsafe {
                asm!(
                    concat!("ld.relaxed.", $scope, ".", $op, " {value}, [{address}];"),
                    value = out($reg) value,
                    address = in(reg64) $address,
                    options(nostack, readonly),
                )
            };
            value
        }};
    }

    macro_rules! store {
        ($scope:literal, $op:expr, $reg:ident, $address:expr, $value:expr) => {
            // SAFETY: as in `atom!`.
            unsafe {
                asm!(
                    concat!("st.relaxed.", $scope, ".", $op, " [{address}], {value};"),
                    address = in(reg64) $address,
                    value = in($reg) $value,
                    options(nostack),
                )
            }
        };
    }

    macro_rules! word {
        ($word:ty, $reg:ident, $bits:literal, $float:literal) => {
            impl Word for $word {
                #[inline(always)]
                fn rmw(op: Rmw, address: *mut $word, value: $word, scope: Scope) -> $word {
                    match op {
                        Rmw::Add => {
                            at_scope!(scope, atom!(concat!("add.u", $bits), $reg, address, value))
                        }
                        Rmw::And => {
                            at_scope!(scope, atom!(concat!("and.b", $bits), $reg, address, value))
                        }
                        Rmw::Or => {
                            at_scope!(scope, atom!(concat!("or.b", $bits), $reg, address, value))
                        }
                        Rmw::Xor => {
                            at_scope!(scope, atom!(concat!("xor.b", $bits), $reg, address, value))
                        }
                        Rmw::Exchange => {
                            at_scope!(scope, atom!(concat!("exch.b", $bits), $reg, address, value))
                        }
                        Rmw::MinUnsigned => {
                            at_scope!(scope, atom!(concat!("min.u", $bits), $reg, address, value))
                        }
                        Rmw::MaxUnsigned => {
                            at_scope!(scope, atom!(concat!("max.u", $bits), $reg, address, value))
                        }
                        Rmw::MinSigned => {
                            at_scope!(scope, atom!(concat!("min.s", $bits), $reg, address, value))
                        }
                        Rmw::MaxSigned => {
                            at_scope!(scope, atom!(concat!("max.s", $bits), $reg, address, value))
                        }
                        Rmw::AddFloat => at_scope!(scope, atom!($float, $reg, address, value)),
                    }
                }

                #[inline(always)]
                fn cas(address: *mut $word, current: $word, new: $word, scope: Scope) -> $word {
                    at_scope!(
                        scope,
                        cas!(concat!("cas.b", $bits), $reg, address, current, new)
                    )
                }

                #[inline(always)]
                fn load(address: *mut $word, scope: Scope) -> $word {
                    at_scope!(scope, load!(concat!("b", $bits), $reg, address))
                }

                #[inline(always)]
                fn store(address: *mut $word, value: $word, scope: Scope) {
                    at_scope!(scope, store!(concat!("b", $bits), $reg, address, value))
                }
            }
        };
    }

    word!(u32, reg32, "32", "add.f32");
    word!(u64, reg64, "64", "add.f64");

    /// A sequentially consistent fence at `scope`.
    #[inline(always)]
    pub(super) fn sequential_fence(scope: Scope) {
        macro_rules! fence_sc {
            ($scope:literal,) => {
                // SAFETY: a memory fence; it touches no memory itself.
                unsafe { asm!(concat!("fence.sc.", $scope, ";"), options(nostack)) }
            };
        }
        at_scope!(scope, fence_sc!())
    }
}

#[cfg(not(target_arch = "nvptx64"))]
use portable as imp;

/// AMD and the host emulation: `core`'s atomics, relaxed, whose scope is the system's (Rust
/// names no narrower one; wider is always correct). On the host a block-scope operation also
/// tells the memory checks its scope, so that another block's use of the value is a race.
#[cfg(not(target_arch = "nvptx64"))]
mod portable {
    use super::{AtomicF32, AtomicF64, Rmw, Scope, Word};
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

    macro_rules! word {
        ($word:ty, $atomic:ty, $signed:ty, $atomic_float:ty, $float:ty) => {
            impl Word for $word {
                #[inline(always)]
                fn rmw(op: Rmw, address: *mut $word, value: $word, scope: Scope) -> $word {
                    // SAFETY: the address of an atomic the caller holds a reference to.
                    let atomic = unsafe { <$atomic>::from_ptr(address) };
                    let signed = |rule: fn($signed, $signed) -> $signed| {
                        move |old: $word| rule(old as $signed, value as $signed) as $word
                    };
                    let update = |rule: &dyn Fn($word) -> $word| match atomic.fetch_update(
                        Relaxed,
                        Relaxed,
                        |old| Some(rule(old)),
                    ) {
                        Ok(previous) | Err(previous) => previous,
                    };
                    let previous = match op {
                        Rmw::Add => atomic.fetch_add(value, Relaxed),
                        Rmw::And => atomic.fetch_and(value, Relaxed),
                        Rmw::Or => atomic.fetch_or(value, Relaxed),
                        Rmw::Xor => atomic.fetch_xor(value, Relaxed),
                        Rmw::Exchange => atomic.swap(value, Relaxed),
                        Rmw::MinUnsigned => atomic.fetch_min(value, Relaxed),
                        Rmw::MaxUnsigned => atomic.fetch_max(value, Relaxed),
                        Rmw::MinSigned => update(&signed(<$signed>::min)),
                        Rmw::MaxSigned => update(&signed(<$signed>::max)),
                        Rmw::AddFloat => {
                            // SAFETY: same size and alignment as the word.
                            let float = unsafe { <$atomic_float>::from_ptr(address.cast()) };
                            float.fetch_add(<$float>::from_bits(value)).to_bits()
                        }
                    };
                    note_scope(address, scope, true);
                    previous
                }

                #[inline(always)]
                fn cas(address: *mut $word, current: $word, new: $word, scope: Scope) -> $word {
                    // SAFETY: as in `rmw`.
                    let atomic = unsafe { <$atomic>::from_ptr(address) };
                    let previous = match atomic.compare_exchange(current, new, Relaxed, Relaxed) {
                        Ok(previous) | Err(previous) => previous,
                    };
                    note_scope(address, scope, true);
                    previous
                }

                #[inline(always)]
                fn load(address: *mut $word, scope: Scope) -> $word {
                    // SAFETY: as in `rmw`.
                    let value = unsafe { <$atomic>::from_ptr(address) }.load(Relaxed);
                    note_scope(address, scope, false);
                    value
                }

                #[inline(always)]
                fn store(address: *mut $word, value: $word, scope: Scope) {
                    // SAFETY: as in `rmw`.
                    unsafe { <$atomic>::from_ptr(address) }.store(value, Relaxed);
                    note_scope(address, scope, true);
                }
            }
        };
    }

    word!(u32, AtomicU32, i32, AtomicF32, f32);
    word!(u64, AtomicU64, i64, AtomicF64, f64);

    /// After a block-scope operation on `address`: the host emulation's checks learn its scope.
    #[inline(always)]
    fn note_scope<W>(address: *mut W, scope: Scope, writes: bool) {
        if scope == Scope::Block {
            crate::arch::note_block_scoped_atomic(
                address as usize,
                core::mem::size_of::<W>(),
                writes,
            );
        }
    }

    /// `core`'s sequentially consistent fence: system scope, the strongest.
    #[inline(always)]
    pub(super) fn sequential_fence(_scope: Scope) {
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    }
}
