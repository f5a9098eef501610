//! The atomic operations of the protocol, each with the scope it needs.
//!
//! - Mailbox words are shared with the other side of the PCIe/fabric link: relaxed loads and
//!   stores at **system** scope, ordered by acquire/release fences at system scope. On nvptx rustc
//!   emits `ld.relaxed.sys`, `st.relaxed.sys` and `fence.acq_rel.sys` for these (checked on the
//!   emitted PTX by `tests/ptx_scopes.rs`).
//! - Lock bits live in the client object in device memory and are contended only by warps of
//!   the same device: LLVM libc updates them with relaxed read-modify-writes at **device**
//!   scope, ordered by device-scope fences. On nvptx we do the same: the installed toolchain
//!   lowers `fetch_or`/`fetch_and` to `atom.global.or.b32` with no explicit scope or ordering,
//!   and every fence to `.sys`, so there we write `atom.relaxed.gpu.{or,and}.b32` and
//!   `fence.acq_rel.gpu` by hand. On amdgcn we cannot: Rust's atomics and fences carry no scope,
//!   and `asm!` is rejected on that target, so the lock RMWs and fences there are
//!   **system**-scope, which order at least as much as device scope. What that costs, measured
//!   with LLVM 22's `llc` on `atomicrmw or` to global memory: gfx90a and gfx1100 get the same
//!   instructions at both scopes (a `global_atomic_cmpswap ... glc` loop); gfx942 gets a
//!   `cmpswap ... sc0 sc1` loop where device scope is one `global_atomic_or ... sc0`, and gfx12 a
//!   `cmpswap` loop where device scope is one `global_atomic_or ... scope:SCOPE_DEV`.
//!   The end-to-end tests' `tests/nightly/gpu_codegen.rs` checks the gfx90a form.
//!
//! Under `cfg(loom)` the same functions use loom's atomics so the model checker sees every step.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicBool, AtomicU32};

/// The doorbell counter lives in raw shared memory, which loom cannot model: always core's.
pub use core::sync::atomic::AtomicU64;

use core::sync::atomic::Ordering;

/// Relaxed system-scope load of a mailbox word.
#[inline(always)]
pub(crate) fn load_mailbox(word: &AtomicU32) -> u32 {
    word.load(Ordering::Relaxed)
}

/// Relaxed system-scope store of a mailbox word.
#[inline(always)]
pub(crate) fn store_mailbox(word: &AtomicU32, value: u32) {
    word.store(value, Ordering::Relaxed)
}

/// Makes what the other side wrote before its release visible (system scope).
#[inline(always)]
pub(crate) fn acquire_fence() {
    fence(Ordering::Acquire)
}

/// Publishes our writes before the following mailbox store (system scope).
#[inline(always)]
pub(crate) fn release_fence() {
    fence(Ordering::Release)
}

/// Acquire fence after taking a port's lock, at device scope: the lock bits are contended only
/// by warps of this device (LLVM's client uses `__MEMORY_SCOPE_DEVICE` here). `fence.acq_rel.gpu`
/// on nvptx, where a plain fence would be system-scope; a plain (system-scope) fence elsewhere.
#[inline(always)]
pub(crate) fn lock_acquire_fence() {
    device_fence(Ordering::Acquire)
}

/// Release fence before dropping a port's lock, at device scope (see [`lock_acquire_fence`]).
#[inline(always)]
pub(crate) fn lock_release_fence() {
    device_fence(Ordering::Release)
}

#[inline(always)]
fn device_fence(order: Ordering) {
    #[cfg(all(target_arch = "nvptx64", not(loom)))]
    {
        let _ = order;
        // SAFETY: a memory fence with acquire-release semantics at GPU scope; it touches no
        // memory itself (not `nomem`: it orders the accesses around it).
        unsafe { core::arch::asm!("fence.acq_rel.gpu;", options(nostack, preserves_flags)) };
    }
    #[cfg(not(all(target_arch = "nvptx64", not(loom))))]
    {
        fence(order)
    }
}

/// Relaxed read-modify-write on a lock word, returning the previous value: device scope on
/// nvptx (`atom.relaxed.gpu.<ptx_op>.b32`), `word.<method>(bits, Relaxed)` elsewhere, which is
/// system scope on amdgcn (see the module docs: Rust cannot name a narrower one there). A macro
/// because the instruction must be a literal in `asm!`.
macro_rules! lock_rmw {
    ($word:expr, $bits:expr, $ptx_op:literal, $method:ident) => {{
        let (word, bits): (&AtomicU32, u32) = ($word, $bits);
        #[cfg(all(target_arch = "nvptx64", not(loom)))]
        {
            let previous: u32;
            // SAFETY: `word.as_ptr()` points to a live, aligned u32 that is only accessed
            // atomically; the instruction is an atomic OR/AND on that word (generic addressing)
            // with explicit relaxed ordering at GPU scope, which is what `fetch_or(Relaxed)` /
            // `fetch_and(Relaxed)` mean here.
            unsafe {
                core::arch::asm!(
                    concat!("atom.relaxed.gpu.", $ptx_op, ".b32 {previous}, [{word}], {bits};"),
                    previous = out(reg32) previous,
                    word = in(reg64) word.as_ptr(),
                    bits = in(reg32) bits,
                    options(nostack),
                );
            }
            previous
        }
        #[cfg(not(all(target_arch = "nvptx64", not(loom))))]
        {
            word.$method(bits, Ordering::Relaxed)
        }
    }};
}

/// Relaxed `fetch_or` on a lock word (device scope on nvptx, system scope on amdgcn); returns
/// the previous value.
#[inline(always)]
pub(crate) fn lock_fetch_or(word: &AtomicU32, bits: u32) -> u32 {
    lock_rmw!(word, bits, "or", fetch_or)
}

/// Relaxed `fetch_and` on a lock word (device scope on nvptx, system scope on amdgcn); returns
/// the previous value.
#[inline(always)]
pub(crate) fn lock_fetch_and(word: &AtomicU32, bits: u32) -> u32 {
    lock_rmw!(word, bits, "and", fetch_and)
}

/// Relaxed system-scope `fetch_add(1)` on the doorbell counter; returns the previous value.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn doorbell_ring(counter: &AtomicU64) -> u64 {
    #[cfg(target_arch = "nvptx64")]
    {
        let previous: u64;
        // SAFETY: an atomic add on a live, aligned u64 (the host's counter in pinned memory),
        // relaxed at system scope as the host reads it; rustc would emit it without a scope.
        unsafe {
            core::arch::asm!(
                "atom.relaxed.sys.add.u64 {previous}, [{counter}], 1;",
                previous = out(reg64) previous,
                counter = in(reg64) counter.as_ptr(),
                options(nostack),
            );
        }
        previous
    }
    #[cfg(not(target_arch = "nvptx64"))]
    {
        counter.fetch_add(1, Ordering::Relaxed)
    }
}

/// Relaxed system-scope store of the doorbell's event mailbox.
#[cfg(not(loom))]
#[inline(always)]
pub(crate) fn doorbell_post(mailbox: &AtomicU64, event_id: u64) {
    mailbox.store(event_id, Ordering::Relaxed)
}

/// Steps of [`host_backoff`] that spin: a reply a core away comes within them. A wait that can
/// sleep in the kernel until it is woken (host waits: both sides are host threads) does so
/// right after them, and never yields.
pub(crate) const SPIN_STEPS: u32 = 32;

/// One step of a host-side wait. `spins` counts the steps of this wait (start at 0): a few
/// immediate re-reads, then spin hints (`SPIN_STEPS` steps in all), then (with `std`) yields
/// to the OS scheduler, then sleeps of 50 µs growing to 1.6 ms, so that many emulated lanes on
/// few cores leave the CPU to the thread they wait for. Only waits that cannot be woken (a server
/// polling a GPU's memory, builds without the futex) reach the yields: on Linux's EEVDF
/// scheduler each `sched_yield` pushes the caller's deadline back a whole time slice, so
/// beside CPU-bound work (a loaded CI machine) a thread that waits by yielding is picked last,
/// long after what it waited for has come, and a conversation of many such waits stalls for
/// minutes (`tests/e2e/load.rs`). Under loom every step yields, as loom requires of spin loops.
#[inline]
pub fn host_backoff(spins: &mut u32) {
    #[cfg(loom)]
    {
        let _ = spins;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        *spins = spins.saturating_add(1);
        #[cfg(feature = "std")]
        {
            if *spins > 256 {
                // Longer waits sleep longer (50 µs up to 1.6 ms): a thousand emulated threads
                // waking every 50 µs would leave no CPU to the one they wait for.
                let doublings = ((*spins - 256) / 64).min(5);
                std::thread::sleep(core::time::Duration::from_micros(50 << doublings));
                return;
            }
            if *spins > SPIN_STEPS {
                std::thread::yield_now();
                return;
            }
        }
        // The first few checks re-read at once: a reply a core away often arrives within a
        // `pause` (tens of ns on recent x86), which would otherwise be added to every handoff.
        if *spins > 4 {
            core::hint::spin_loop();
        }
    }
}
