//! Block-shared memory: memory every thread of a block (an AMD workgroup) reads and writes,
//! much faster than device memory, sized at launch and gone when the block ends.
//!
//! A launch gives each block `shared_bytes` of it (`LaunchShape::blocks(4).threads(256)
//! .shared_bytes(4096)` from the host, `#[gpurun::test(threads = 256, shared = 4096)]` for a
//! device test), and a kernel carves it into typed arrays:
//!
//! ```ignore
//! #[gpurun::test(threads = 256, shared = 256 * 4)]
//! fn block_sum() {
//!     let partial = gpurun::shared::array::<u32>(256);
//!     let me = gpurun::arch::thread_index_in_block() as usize;
//!     // SAFETY: each thread writes only its own element, and reads after the barrier.
//!     unsafe { partial.write(me, me as u32) };
//!     gpurun::barrier();
//!     if me == 0 {
//!         // SAFETY: no thread writes between this barrier and the end of the kernel.
//!         let sum: u32 = unsafe { partial.as_slice() }.iter().sum();
//!         assert_eq!(sum, 255 * 256 / 2);
//!     }
//! }
//! ```
//!
//! What each target does: NVIDIA's is the kernel's `.extern .shared` array (the dynamic shared
//! memory `cuLaunchKernel` sizes with `sharedMemBytes`), AMD's the workgroup's LDS after the
//! kernel's static LDS (the dispatch packet's group segment), both through the nightly's
//! `core::intrinsics::gpu::gpu_launch_sized_workgroup_mem`. The host emulation gives every
//! block its own region, filled with a poison pattern before the block runs, and (with its
//! memory checks) fails a read of bytes no thread of the block wrote, and an access past the
//! launch's bytes. **GPUs do not zero it**: a block finds whatever an earlier block left there,
//! so write before you read.
//!
//! # What is safe
//!
//! Finding and sizing the memory is safe: [`bytes`], [`ptr`], [`array`](array()) and
//! [`SharedArray::then`] check that an array fits what the launch gave and is aligned, and
//! panic with what the launch should have asked for otherwise. Touching it is `unsafe`: every
//! thread of the block sees the same bytes, so a plain (non-atomic) access is sound only where
//! no other thread accesses the same element at the same time, with one of them writing. The
//! usual discipline upholds that: between two [`crate::barrier`]s, an element is either written
//! by one thread (and accessed by no other), or only read. A barrier orders everything before
//! it, in every thread of the block, before everything after it. The barrier itself must be
//! reached by every thread of the block (not from code only some threads run), as everywhere.
//!
//! Values are read as they are, so arrays hold [`Plain`] types only: ones for which every bit
//! pattern is a value (what an earlier block left is still some value).

use crate::arch::imp;

/// Types that may live in shared memory: `Copy`, and every bit pattern of their size is a
/// value of the type (integers, floats, arrays of them; no `bool`, `char`, references or
/// enums), so reading memory another block left behind yields a value.
///
/// # Safety
/// Implement it only for such types (a `#[repr(C)]` struct of `Plain` fields without padding
/// qualifies).
pub unsafe trait Plain: Copy {}

macro_rules! plain {
    ($($ty:ty),*) => { $(
        // SAFETY: a primitive number: every bit pattern is a value.
        unsafe impl Plain for $ty {}
    )* };
}
plain!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64);

// SAFETY: an array of values for which every bit pattern is a value has only such patterns.
unsafe impl<T: Plain, const N: usize> Plain for [T; N] {}

/// Bytes of shared memory this launch gives each block: `LaunchShape::shared_bytes`, a test's
/// `shared = N` (0 when it asks for none).
#[inline]
pub fn bytes() -> usize {
    imp::shared_bytes()
}

/// The start of this block's shared memory, aligned for `T` (on the host emulation as long
/// as `T`'s alignment is at most 256), the same address for every thread of the block. Only
/// the first [`bytes`] bytes are this block's; with none, it points nowhere usable (on the host
/// emulation it is null).
#[inline]
pub fn ptr<T>() -> *mut T {
    imp::shared_base::<T>()
}

/// `len` values of `T` at the start of this block's shared memory.
///
/// # Panics
/// When the launch gave fewer than `len * size_of::<T>()` bytes: the message says how many it
/// should ask for.
#[inline]
#[track_caller]
pub fn array<T: Plain>(len: usize) -> SharedArray<T> {
    SharedArray::at(0, len)
}

/// Declares a kernel's shared memory as named arrays: a struct of [`SharedArray`]s laid out one
/// after another at their alignments (as [`SharedArray::then`] does), with `BYTES`, what a
/// launch must give for it, as a constant for `shared = ...`, and `get()`, the arrays in this
/// block's shared memory.
///
/// ```
/// gpurun::shared_layout! {
///     /// One block's tiles of the matrix product.
///     struct Tiles {
///         a: [f32; 16 * 16],
///         b: [f32; 16 * 16],
///         row_done: [u32; 16],
///     }
/// }
///
/// // Two tiles of 1024 bytes and 16 words: what a launch gives, e.g. a device test's
/// // `#[gpurun::test(threads = (16, 16), shared = Tiles::BYTES)]`, whose kernel then takes
/// // the arrays with `let tiles = Tiles::get();` (tiles.a, tiles.b, tiles.row_done).
/// assert_eq!(Tiles::BYTES, 2 * 1024 + 64);
/// ```
///
/// Each declaration's arrays are distinct and aligned on every target. Two layouts both start
/// at the block's first byte, as [`array`](array()) does: a kernel takes one layout, and a
/// helper that needs scratch space takes a [`SharedArray`] from it (its field in the kernel's
/// layout), so no two helpers can be handed the same bytes. `get()` panics, naming the bytes to
/// ask for, when the launch gave fewer than `BYTES`.
#[macro_export]
macro_rules! shared_layout {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident : [$ty:ty; $len:expr]),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $crate::shared::SharedArray<$ty>,)+
        }

        impl $name {
            /// Bytes of shared memory per block the layout takes: what a launch gives for it
            /// (`shared = Self::BYTES`, `.shared_bytes(Self::BYTES)`).
            #[allow(dead_code)]
            $vis const BYTES: usize = {
                let mut end = 0;
                $(
                    end = match $crate::shared::__array_bounds(
                        end,
                        ::core::mem::size_of::<$ty>(),
                        ::core::mem::align_of::<$ty>(),
                        $len,
                    ).1 {
                        Some(end) => end,
                        None => panic!("the shared memory layout needs more than usize::MAX bytes"),
                    };
                )+
                end
            };

            /// The layout's arrays in this block's shared memory.
            ///
            /// # Panics
            /// When the launch gave fewer than `BYTES` bytes.
            #[allow(dead_code)]
            #[track_caller]
            $vis fn get() -> $name {
                let end = 0;
                $(
                    let $field = $crate::shared::SharedArray::<$ty>::__at(end, $len);
                    let end = $field.end_offset();
                )+
                let _ = end;
                $name { $($field,)+ }
            }
        }
    };
}

/// Where an array of `len` values of `size` bytes at alignment `align` starts and ends, in bytes
/// from the start of the block's shared memory, when it follows bytes `0..offset` (the end is
/// `None` past `usize::MAX`): the one layout rule of [`SharedArray::then`], [`array`](array())
/// and [`shared_layout!`] (whose `BYTES` it computes at compile time).
#[doc(hidden)]
pub const fn __array_bounds(
    offset: usize,
    size: usize,
    align: usize,
    len: usize,
) -> (usize, Option<usize>) {
    let start = offset.next_multiple_of(align);
    let end = match len.checked_mul(size) {
        Some(bytes) => start.checked_add(bytes),
        None => None,
    };
    (start, end)
}

/// `len` values of `T` in this block's shared memory: an array of [`array`](array()),
/// [`SharedArray::then`] or [`shared_layout!`]. A plain handle (`Copy`), holding no borrow:
/// accesses through it are `unsafe` (see the [module](self) documentation).
pub struct SharedArray<T> {
    start: *mut T,
    len: usize,
    /// Where it ends, in bytes from the start of the block's shared memory.
    end: usize,
}

impl<T> Clone for SharedArray<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SharedArray<T> {}

impl<T> core::fmt::Debug for SharedArray<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedArray")
            .field("start", &self.start)
            .field("len", &self.len)
            .finish()
    }
}

/// Why an array does not fit, as a panic message (kept out of line: it formats).
#[cold]
#[inline(never)]
#[track_caller]
fn does_not_fit(needed: usize, given: usize) -> ! {
    panic!(
        "the kernel's shared memory arrays need {needed} bytes per block, but the launch gives \
         {given}: launch with `.shared_bytes({needed})` (a test: `shared = {needed}`)"
    )
}

#[cold]
#[inline(never)]
#[track_caller]
fn misaligned(align: usize) -> ! {
    panic!("shared memory is not aligned for a type of alignment {align}")
}

#[cold]
#[inline(never)]
#[track_caller]
fn out_of_bounds(index: usize, len: usize) -> ! {
    panic!("shared memory index {index} is out of bounds for an array of {len}")
}

impl<T: Plain> SharedArray<T> {
    /// `len` values of `T` starting `offset` bytes (rounded up to `T`'s alignment) into the
    /// block's shared memory.
    #[track_caller]
    fn at(offset: usize, len: usize) -> SharedArray<T> {
        let align = core::mem::align_of::<T>();
        let given = bytes();
        let (start_offset, end) = __array_bounds(offset, core::mem::size_of::<T>(), align, len);
        let end = end.unwrap_or(usize::MAX);
        if end > given {
            does_not_fit(end, given);
        }
        let base = ptr::<T>();
        if !base.is_aligned() {
            misaligned(align);
        }
        let start = if base.is_null() {
            // No shared memory (the host emulation's null), so `end` is 0 and the array holds
            // nothing: a dangling, aligned start keeps `as_slice` sound on it.
            core::ptr::NonNull::<T>::dangling().as_ptr()
        } else {
            // In bounds: `end <= given`, the bytes the block has from `base`.
            base.cast::<u8>().wrapping_add(start_offset).cast()
        };
        SharedArray { start, len, end }
    }

    /// [`shared_layout!`]'s arrays: `len` values of `T` after the block's first `offset` bytes.
    #[doc(hidden)]
    #[track_caller]
    pub fn __at(offset: usize, len: usize) -> SharedArray<T> {
        SharedArray::at(offset, len)
    }

    /// `len` values of `U` right after this array (at `U`'s alignment): carve several arrays
    /// out of the block's shared memory, `let b = a.then::<f32>(256);`.
    ///
    /// # Panics
    /// As [`array`](array()), when the arrays together need more than the launch gave.
    #[track_caller]
    pub fn then<U: Plain>(self, len: usize) -> SharedArray<U> {
        SharedArray::at(self.end, len)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its first element, for raw access.
    pub fn as_ptr(&self) -> *mut T {
        self.start
    }

    /// Bytes from the start of the block's shared memory to its end: what a launch must give
    /// for it (and the arrays before it).
    pub fn end_offset(&self) -> usize {
        self.end
    }

    /// Element `index`, for raw access.
    ///
    /// # Panics
    /// When `index` is out of bounds.
    #[track_caller]
    pub fn element(&self, index: usize) -> *mut T {
        if index >= self.len {
            out_of_bounds(index, self.len);
        }
        // In bounds (checked above), inside the block's shared memory (checked in `at`).
        self.start.wrapping_add(index)
    }

    /// Reads element `index`.
    ///
    /// # Safety
    /// No other thread may write the element meanwhile (between the barriers around this
    /// read, no thread writes it; see the [module](self) documentation).
    ///
    /// # Panics
    /// When `index` is out of bounds.
    #[inline]
    #[track_caller]
    pub unsafe fn read(&self, index: usize) -> T {
        // SAFETY: in bounds and aligned (`element`, `at`); every bit pattern is a `T`
        // (`Plain`); no concurrent write, per the caller.
        unsafe { self.element(index).read() }
    }

    /// Writes element `index`.
    ///
    /// # Safety
    /// No other thread may read or write the element meanwhile (between the barriers around
    /// this write, it is this thread's alone).
    ///
    /// # Panics
    /// When `index` is out of bounds.
    #[inline]
    #[track_caller]
    pub unsafe fn write(&self, index: usize, value: T) {
        // SAFETY: in bounds and aligned; no concurrent access, per the caller.
        unsafe { self.element(index).write(value) }
    }

    /// The whole array as a slice.
    ///
    /// # Safety
    /// While the slice is used, no thread (this one included, through another handle or a raw
    /// pointer) may write the array.
    pub unsafe fn as_slice<'a>(&self) -> &'a [T] {
        // SAFETY: `len` aligned, initialised (`Plain`) values inside the block's shared memory,
        // which outlives any use in the kernel; unchanged while borrowed, per the caller.
        unsafe { core::slice::from_raw_parts(self.start, self.len) }
    }

    /// The whole array as a mutable slice.
    ///
    /// # Safety
    /// While the slice is used, no other access to the array may happen, from any thread
    /// (this one included, through another handle or a raw pointer).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice<'a>(&self) -> &'a mut [T] {
        // SAFETY: as in `as_slice`; exclusive while borrowed, per the caller.
        unsafe { core::slice::from_raw_parts_mut(self.start, self.len) }
    }
}
