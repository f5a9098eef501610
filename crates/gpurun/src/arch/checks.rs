//! The host emulation's memory checks, device side: a device crate built for them
//! (`cargo gpurun` passes `-Zsanitizer=thread --cfg gpurun_emulation_checks` on the host) has a
//! call to a ThreadSanitizer hook before every load, store, atomic operation and memory copy of
//! its code (ours included), raw pointers and slices alike. This module implements those hooks
//! instead of ThreadSanitizer's runtime: an access inside the memory the emulator checks (device
//! buffers, shared memory and the gaps around them, [`HostChecks`]) is handed to the emulator,
//! which keeps the shadow state and says when it found something; every other access costs two
//! loads and a compare.
//!
//! Every function here is built without the instrumentation (`#[sanitize(thread = "off")]`),
//! and the ones that run on every access call nothing instrumented: an instrumented copy inside
//! a hook would call the hook again, forever. The instrumentation turns atomic operations into
//! hook calls even in functions built without it, so the hooks ask the emulator to do each
//! atomic operation ([`HostChecks::atomic`]); copies are done by libc.
//!
//! A report becomes the thread's panic report, at the kernel's line; the thread then goes on
//! (the access is inside our own memory, so it cannot fault), and reports nothing more.

use core::intrinsics;
use gpurun_abi::host::{AccessCheck, AtomicOp, CheckReport, HostChecks};

/// What the emulator tells this image: the checked memory and how to do atomics. It writes the
/// record once, right after loading the image and before any thread runs (so plain reads from
/// the threads are not racing with the write); the name says to it that the image is built for
/// the checks (`gpurun_abi::symbols::HOST_MEMORY_CHECKS`).
#[unsafe(no_mangle)]
pub static mut __gpurun_host_checks: HostChecks = HostChecks::UNSET;

/// The emulator's record.
#[inline]
#[sanitize(thread = "off")]
fn host_checks() -> HostChecks {
    // SAFETY: written only before any emulated thread runs (see above). A plain load, not
    // `ptr::read`: a generic function of `core` would be compiled instrumented, and its load
    // would call the hooks back.
    unsafe { __gpurun_host_checks }
}

/// The frame pointer of the hook it is written in (the image is built with frame pointers for
/// the checks), which the emulator walks up to the kernel's own frames; 0 where we cannot read
/// it. A macro, so that it reads the hook's own frame.
macro_rules! frame {
    () => {{
        let frame: usize;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: reads a register.
        unsafe {
            core::arch::asm!("mov {}, rbp", out(reg) frame, options(nomem, nostack, preserves_flags))
        };
        #[cfg(target_arch = "aarch64")]
        // SAFETY: reads a register.
        unsafe {
            core::arch::asm!("mov {}, x29", out(reg) frame, options(nomem, nostack, preserves_flags))
        };
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            frame = 0;
        }
        frame
    }};
}

/// Hands an access inside the checked memory to the emulator.
#[inline]
#[sanitize(thread = "off")]
fn access(address: usize, size: usize, kind: u32, pc: usize, frame: usize) {
    let checks = host_checks();
    if address.wrapping_sub(checks.checked_start) < checks.checked_len {
        check(AccessCheck {
            address,
            size,
            kind,
            reserved: 0,
            pc,
            frame,
        });
    }
}

/// The emulator's side of an access, and the thread's report when it found something. Rare
/// enough (only accesses to checked memory) to be ordinary code.
#[cold]
#[inline(never)]
fn check(access: AccessCheck) {
    let info = super::imp::info();
    let Some(check_access) = info.check_access else {
        return;
    };
    // SAFETY: the emulator keeps the function and its context valid while the thread runs.
    if unsafe { check_access(info.warp_context, &access) } != AccessCheck::FOUND {
        return;
    }
    let Some(take_report) = info.take_report else {
        return;
    };
    let mut report = CheckReport::EMPTY;
    // The emulator skips the frames of this crate when it looks for the kernel's line: it gets
    // the crate's source directory in the report's file.
    let runtime_file = file!();
    let runtime_dir = runtime_file
        .strip_suffix("arch/checks.rs")
        .unwrap_or(runtime_file);
    report.set("", runtime_dir, 0, 0);
    // SAFETY: as above; the report is ours to fill.
    unsafe { take_report(info.warp_context, &mut report) };
    crate::rpc::report_panic(
        report.message().as_bytes(),
        report.file(),
        report.line,
        report.column,
    );
    super::imp::set_reported();
}

/// A block-scope atomic operation (`gpurun::atomic::scoped`), after the operation itself went
/// through the atomic hooks: the access again, marked with its scope.
#[inline(never)]
#[sanitize(thread = "off")]
pub(super) fn block_scoped_atomic(address: usize, size: usize, writes: bool) {
    let kind = match writes {
        true => READ | WRITE | ATOMIC | AccessCheck::BLOCK_SCOPE,
        false => READ | ATOMIC | AccessCheck::BLOCK_SCOPE,
    };
    let pc = intrinsics::return_address() as usize;
    access(address, size, kind, pc, frame!());
}

/// `extern "C"` hooks that check an access of a fixed size at their argument.
macro_rules! access_hooks {
    ($($name:ident => $size:expr, $kind:expr;)*) => {$(
        #[unsafe(no_mangle)]
        #[sanitize(thread = "off")]
        pub extern "C" fn $name(address: *const u8) {
            access(
                address as usize,
                $size,
                $kind,
                intrinsics::return_address() as usize,
                frame!(),
            );
        }
    )*};
}

const READ: u32 = AccessCheck::READ;
const WRITE: u32 = AccessCheck::WRITE;
const ATOMIC: u32 = AccessCheck::ATOMIC;

access_hooks! {
    __tsan_read1 => 1, READ;
    __tsan_read2 => 2, READ;
    __tsan_read4 => 4, READ;
    __tsan_read8 => 8, READ;
    __tsan_read16 => 16, READ;
    __tsan_write1 => 1, WRITE;
    __tsan_write2 => 2, WRITE;
    __tsan_write4 => 4, WRITE;
    __tsan_write8 => 8, WRITE;
    __tsan_write16 => 16, WRITE;
    __tsan_unaligned_read2 => 2, READ;
    __tsan_unaligned_read4 => 4, READ;
    __tsan_unaligned_read8 => 8, READ;
    __tsan_unaligned_read16 => 16, READ;
    __tsan_unaligned_write2 => 2, WRITE;
    __tsan_unaligned_write4 => 4, WRITE;
    __tsan_unaligned_write8 => 8, WRITE;
    __tsan_unaligned_write16 => 16, WRITE;
    __tsan_volatile_read1 => 1, READ;
    __tsan_volatile_read2 => 2, READ;
    __tsan_volatile_read4 => 4, READ;
    __tsan_volatile_read8 => 8, READ;
    __tsan_volatile_read16 => 16, READ;
    __tsan_volatile_write1 => 1, WRITE;
    __tsan_volatile_write2 => 2, WRITE;
    __tsan_volatile_write4 => 4, WRITE;
    __tsan_volatile_write8 => 8, WRITE;
    __tsan_volatile_write16 => 16, WRITE;
}

#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub extern "C" fn __tsan_read_range(address: *const u8, size: usize) {
    let pc = intrinsics::return_address() as usize;
    access(address as usize, size, READ, pc, frame!());
}

#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub extern "C" fn __tsan_write_range(address: *const u8, size: usize) {
    let pc = intrinsics::return_address() as usize;
    access(address as usize, size, WRITE, pc, frame!());
}

// ThreadSanitizer's runtime keeps a shadow call stack with these; the emulator walks frame
// pointers instead.
#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub extern "C" fn __tsan_func_entry(_caller: *const u8) {}

#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub extern "C" fn __tsan_func_exit() {}

/// Called by each instrumented module's constructor; the emulator needs no set-up here.
#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub extern "C" fn __tsan_init() {}

unsafe extern "C" {
    fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8;
    fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8;
    fn memset(dest: *mut u8, value: i32, n: usize) -> *mut u8;
}

/// The instrumentation turns copies and fills into these: check both ranges, then do them with
/// libc's (not instrumented) functions.
///
/// # Safety
/// As `memcpy`.
#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub unsafe extern "C" fn __tsan_memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    let (pc, frame) = (intrinsics::return_address() as usize, frame!());
    access(src as usize, n, READ, pc, frame);
    access(dest as usize, n, WRITE, pc, frame);
    // SAFETY: the caller's copy, as the compiler emitted it.
    unsafe { memcpy(dest, src, n) }
}

/// # Safety
/// As `memmove`.
#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub unsafe extern "C" fn __tsan_memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    let (pc, frame) = (intrinsics::return_address() as usize, frame!());
    access(src as usize, n, READ, pc, frame);
    access(dest as usize, n, WRITE, pc, frame);
    // SAFETY: the caller's move, as the compiler emitted it.
    unsafe { memmove(dest, src, n) }
}

/// # Safety
/// As `memset`.
#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub unsafe extern "C" fn __tsan_memset(dest: *mut u8, value: i32, n: usize) -> *mut u8 {
    let pc = intrinsics::return_address() as usize;
    access(dest as usize, n, WRITE, pc, frame!());
    // SAFETY: the caller's fill, as the compiler emitted it.
    unsafe { memset(dest, value, n) }
}

/// Does `op` through the emulator.
#[inline]
#[sanitize(thread = "off")]
fn atomic(mut op: AtomicOp) -> u64 {
    match host_checks().atomic {
        // SAFETY: the emulator keeps the function valid while the image is loaded; the address
        // is the instrumented code's own atomic operand.
        Some(atomic) => unsafe { atomic(&mut op) },
        None => plain_atomic(&mut op),
    }
    op.result
}

/// `op` without atomicity: only reached before the emulator has written its record, while the
/// image is being loaded and no emulated thread runs, so nothing else touches the memory.
#[cold]
#[sanitize(thread = "off")]
fn plain_atomic(op: &mut AtomicOp) {
    if op.op == AtomicOp::FENCE {
        return;
    }
    let address = op.address;
    // Plain loads and stores through places, as in `host_checks`.
    // SAFETY: the instrumented code's own (aligned, valid) atomic operand.
    let old = unsafe {
        match op.size {
            1 => u64::from(*(address as *const u8)),
            2 => u64::from(*(address as *const u16)),
            4 => u64::from(*(address as *const u32)),
            _ => *(address as *const u64),
        }
    };
    op.result = old;
    let new = match op.op {
        AtomicOp::LOAD => return,
        AtomicOp::STORE | AtomicOp::EXCHANGE => op.value,
        AtomicOp::ADD => old.wrapping_add(op.value),
        AtomicOp::SUB => old.wrapping_sub(op.value),
        AtomicOp::AND => old & op.value,
        AtomicOp::OR => old | op.value,
        AtomicOp::XOR => old ^ op.value,
        AtomicOp::NAND => !(old & op.value),
        AtomicOp::COMPARE_EXCHANGE if old == op.expected => op.value,
        _ => return,
    };
    // SAFETY: as above.
    unsafe {
        match op.size {
            1 => *(address as *mut u8) = new as u8,
            2 => *(address as *mut u16) = new as u16,
            4 => *(address as *mut u32) = new as u32,
            _ => *(address as *mut u64) = new,
        }
    }
}

/// Atomic hooks: check the access, then have the emulator do the operation.
macro_rules! atomic_hooks {
    ($($ty:ty: $load:ident, $store:ident, $cas:ident,
       $($rmw:ident = $op:ident),*;)*) => {$(
        /// # Safety
        /// As the atomic load the compiler emitted.
        #[unsafe(no_mangle)]
        #[sanitize(thread = "off")]
        pub unsafe extern "C" fn $load(address: *const $ty, _order: i32) -> $ty {
            let pc = intrinsics::return_address() as usize;
            let (address, size) = (address as usize, core::mem::size_of::<$ty>());
            access(address, size, READ | ATOMIC, pc, frame!());
            atomic(AtomicOp {
                op: AtomicOp::LOAD,
                size: size as u32,
                address,
                value: 0,
                expected: 0,
                result: 0,
            }) as $ty
        }

        /// # Safety
        /// As the atomic store the compiler emitted.
        #[unsafe(no_mangle)]
        #[sanitize(thread = "off")]
        pub unsafe extern "C" fn $store(address: *mut $ty, value: $ty, _order: i32) {
            let pc = intrinsics::return_address() as usize;
            let (address, size) = (address as usize, core::mem::size_of::<$ty>());
            access(address, size, WRITE | ATOMIC, pc, frame!());
            atomic(AtomicOp {
                op: AtomicOp::STORE,
                size: size as u32,
                address,
                value: value as u64,
                expected: 0,
                result: 0,
            });
        }

        $(
            /// # Safety
            /// As the atomic read-modify-write the compiler emitted.
            #[unsafe(no_mangle)]
            #[sanitize(thread = "off")]
            pub unsafe extern "C" fn $rmw(address: *mut $ty, value: $ty, _order: i32) -> $ty {
                let pc = intrinsics::return_address() as usize;
                let (address, size) = (address as usize, core::mem::size_of::<$ty>());
                access(address, size, READ | WRITE | ATOMIC, pc, frame!());
                atomic(AtomicOp {
                    op: AtomicOp::$op,
                    size: size as u32,
                    address,
                    value: value as u64,
                    expected: 0,
                    result: 0,
                }) as $ty
            }
        )*

        /// # Safety
        /// As the compare-exchange the compiler emitted.
        #[unsafe(no_mangle)]
        #[sanitize(thread = "off")]
        pub unsafe extern "C" fn $cas(
            address: *mut $ty,
            expected: $ty,
            desired: $ty,
            _order: i32,
            _failure_order: i32,
        ) -> $ty {
            let pc = intrinsics::return_address() as usize;
            let (address, size) = (address as usize, core::mem::size_of::<$ty>());
            access(address, size, READ | WRITE | ATOMIC, pc, frame!());
            atomic(AtomicOp {
                op: AtomicOp::COMPARE_EXCHANGE,
                size: size as u32,
                address,
                value: desired as u64,
                expected: expected as u64,
                result: 0,
            }) as $ty
        }
    )*};
}

atomic_hooks! {
    u8: __tsan_atomic8_load, __tsan_atomic8_store, __tsan_atomic8_compare_exchange_val,
        __tsan_atomic8_exchange = EXCHANGE, __tsan_atomic8_fetch_add = ADD,
        __tsan_atomic8_fetch_sub = SUB, __tsan_atomic8_fetch_and = AND,
        __tsan_atomic8_fetch_or = OR, __tsan_atomic8_fetch_xor = XOR,
        __tsan_atomic8_fetch_nand = NAND;
    u16: __tsan_atomic16_load, __tsan_atomic16_store, __tsan_atomic16_compare_exchange_val,
        __tsan_atomic16_exchange = EXCHANGE, __tsan_atomic16_fetch_add = ADD,
        __tsan_atomic16_fetch_sub = SUB, __tsan_atomic16_fetch_and = AND,
        __tsan_atomic16_fetch_or = OR, __tsan_atomic16_fetch_xor = XOR,
        __tsan_atomic16_fetch_nand = NAND;
    u32: __tsan_atomic32_load, __tsan_atomic32_store, __tsan_atomic32_compare_exchange_val,
        __tsan_atomic32_exchange = EXCHANGE, __tsan_atomic32_fetch_add = ADD,
        __tsan_atomic32_fetch_sub = SUB, __tsan_atomic32_fetch_and = AND,
        __tsan_atomic32_fetch_or = OR, __tsan_atomic32_fetch_xor = XOR,
        __tsan_atomic32_fetch_nand = NAND;
    u64: __tsan_atomic64_load, __tsan_atomic64_store, __tsan_atomic64_compare_exchange_val,
        __tsan_atomic64_exchange = EXCHANGE, __tsan_atomic64_fetch_add = ADD,
        __tsan_atomic64_fetch_sub = SUB, __tsan_atomic64_fetch_and = AND,
        __tsan_atomic64_fetch_or = OR, __tsan_atomic64_fetch_xor = XOR,
        __tsan_atomic64_fetch_nand = NAND;
}

#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub extern "C" fn __tsan_atomic_thread_fence(_order: i32) {
    atomic(AtomicOp {
        op: AtomicOp::FENCE,
        size: 8,
        address: 0,
        value: 0,
        expected: 0,
        result: 0,
    });
}

/// A compiler-only fence: nothing to do at run time.
#[unsafe(no_mangle)]
#[sanitize(thread = "off")]
pub extern "C" fn __tsan_atomic_signal_fence(_order: i32) {}
