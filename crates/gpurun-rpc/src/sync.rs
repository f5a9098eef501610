//! The atomic operations of the protocol, each with the scope it needs.
//!
//! - Mailbox words are shared with the other side of the PCIe/fabric link: relaxed loads and
//!   stores at **system** scope, ordered by acquire/release fences at system scope. On nvptx rustc
//!   emits `ld.relaxed.sys`, `st.relaxed.sys` and `fence.acq_rel.sys` for these (checked on the
//!   emitted PTX by `tests/ptx_scopes.rs`).
//! - Lock bits live in the client object in device memory and are contended only by warps of
//!   the same device: relaxed read-modify-writes at **device** scope. On nvptx the installed
//!   toolchain lowers `fetch_or`/`fetch_and` to `atom.global.or.b32` with no explicit scope or
//!   ordering, so there we write `atom.relaxed.gpu.{or,and}.b32` by hand.
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

/// Relaxed device-scope read-modify-write on a lock word, returning the previous value:
/// `atom.relaxed.gpu.<ptx_op>.b32` on nvptx, `word.<method>(bits, Relaxed)` elsewhere. A macro
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

/// Relaxed device-scope `fetch_or` on a lock word; returns the previous value.
#[inline(always)]
pub(crate) fn lock_fetch_or(word: &AtomicU32, bits: u32) -> u32 {
    lock_rmw!(word, bits, "or", fetch_or)
}

/// Relaxed device-scope `fetch_and` on a lock word; returns the previous value.
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
