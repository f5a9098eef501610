//! Blocking waits for when both sides of the protocol are host threads (the host emulation and
//! the scripted backend): after a short spin a waiting side sleeps in the kernel on the word it
//! waits for and the other side wakes it, instead of both polling on a timer. A GPU cannot make
//! the wake-up system call, so GPU clients and the servers of GPU launches keep polling.
//!
//! The host allocates a [`Layout::host_waits_size`](crate::Layout::host_waits_size) block of
//! zeroed words and hands its address to both sides: to the server with
//! [`Server::attach_host_waits`](crate::Server::attach_host_waits), to the clients in the
//! `host_waits` field of the doorbell record (bytes LLVM's record leaves as padding, so an
//! LLVM host leaves it zero). A client uses it only when its [`Lanes`](crate::Lanes) say it can
//! block ([`Lanes::blocking_waits`](crate::Lanes::blocking_waits)).
//!
//! Words of the block (32-bit, each group on its own cache line):
//!
//! | word | what |
//! | --- | --- |
//! | 0, 1 | server sleepers, server sequence: a server thread sleeps on the sequence while it waits for a client packet or for any request; a client bumps it after handing a packet over |
//! | 16, 17 | opener sleepers, opener sequence: clients sleep here when every port was busy for a while; bumped when a port may have become free, which wakes one of them |
//! | 32 + i | sleepers on port `i`: clients sleeping on port `i`'s client inbox word itself |
//!
//! No system call when nobody sleeps: a waker reads the sleeper count and only wakes when it is
//! non-zero. A sleeper counts itself, then (after a sequentially consistent fence) re-checks the
//! word it waits for; the waker stores the word, then (after the same kind of fence) reads the
//! count. Of two such fences one comes first, so either the sleeper sees the new value and does
//! not sleep, or the waker sees the sleeper and wakes it; the kernel's compare of the word (or
//! of the sequence, read before the re-check) closes the gap between the re-check and the sleep.

use crate::sync::AtomicU32;
use core::sync::atomic::{fence, Ordering};

/// Failed checks of a wait before it sleeps in the kernel: the spinning steps of
/// [`crate::sync::host_backoff`], within which a reply a core away usually comes (a sleep costs
/// a system call on each side), and not one more, so a waiter never sleeps on a timer first.
pub(crate) const CHECKS_BEFORE_SLEEP: u32 = crate::sync::SPIN_STEPS;

/// Whether this build can block: the futex call exists (Linux with `std`) and loom is off.
pub(crate) const SUPPORTED: bool = cfg!(all(feature = "std", target_os = "linux", not(loom)));

const SERVER_SLEEPERS: usize = 0;
const SERVER_SEQUENCE: usize = 1;
const OPENER_SLEEPERS: usize = 16;
const OPENER_SEQUENCE: usize = 17;
const PORT_SLEEPERS: usize = 32;

/// Bytes of the host waits block for `port_count` ports.
pub(crate) const fn size(port_count: u32) -> usize {
    4 * (PORT_SLEEPERS + port_count as usize)
}

/// Wakes a server sleeping on a host waits block when something outside the protocol changed
/// that the server's wait also watches (the host emulation: the kernel's last thread returned),
/// so it sees the change at once instead of at its timeout. Costs no system call while the
/// server is awake. The server must re-check that change after counting itself as a sleeper
/// (as `Server::wait_for_request_or` does).
#[derive(Clone, Copy)]
pub struct ServerWaker {
    waits: HostWaits,
}

// SAFETY: the block is shared memory accessed only atomically; `ServerWaker::new`'s caller
// keeps it alive for as long as any copy is used.
unsafe impl Send for ServerWaker {}
// SAFETY: as for `Send`: every access through it is atomic.
unsafe impl Sync for ServerWaker {}

impl ServerWaker {
    /// `None` where the build cannot block (see [`Server::attach_host_waits`](crate::Server::attach_host_waits)).
    ///
    /// # Safety
    /// `block` must be the host waits block the server was (or will be) attached to, and
    /// outlive every use of the waker.
    #[cfg(not(loom))]
    pub unsafe fn new(block: *const u8) -> Option<ServerWaker> {
        // SAFETY: forwarded; only the server words (below every port's) are used.
        unsafe { HostWaits::new(block as *const AtomicU32) }.map(|waits| ServerWaker { waits })
    }

    /// Call after making the change visible (a release store or stronger).
    pub fn wake(&self) {
        self.waits.wake_server();
    }
}

/// The host waits block of one allocation, as both sides see it.
#[derive(Clone, Copy)]
pub(crate) struct HostWaits {
    words: *const AtomicU32,
}

impl HostWaits {
    /// # Safety
    /// `words` must be null or point to a zeroed (then only atomically accessed), 4-aligned
    /// block of `size(port_count)` bytes that outlives every use of the returned value, and
    /// callers must pass port indices below that `port_count`.
    #[cfg(not(loom))]
    #[inline(always)]
    pub(crate) unsafe fn new(words: *const AtomicU32) -> Option<HostWaits> {
        if !SUPPORTED || words.is_null() {
            None
        } else {
            Some(HostWaits { words })
        }
    }

    #[inline(always)]
    fn word(&self, index: usize) -> &AtomicU32 {
        // SAFETY: `new`'s contract: the block holds `PORT_SLEEPERS + port_count` words and
        // callers pass indices inside it.
        unsafe { &*self.words.add(index) }
    }

    /// Client side, after handing a packet to the server: wakes a sleeping server.
    #[inline(always)]
    pub(crate) fn wake_server(&self) {
        fence(Ordering::SeqCst);
        self.wake_sleepers(SERVER_SLEEPERS, SERVER_SEQUENCE, futex::wake_all);
    }

    /// Wakes a client waiting for a free port (a port was unlocked or handed back). One, not
    /// all: one port came free, and when thousands of emulated threads wait for ports, waking
    /// all of them for each would make every one scan the ports for every message. A woken
    /// opener that finds no port sleeps again; the next port that comes free wakes another.
    #[inline(always)]
    pub(crate) fn wake_openers(&self) {
        fence(Ordering::SeqCst);
        self.wake_an_opener();
    }

    /// [`HostWaits::wake_openers`] after the caller's sequentially consistent fence.
    #[inline(always)]
    fn wake_an_opener(&self) {
        self.wake_sleepers(OPENER_SLEEPERS, OPENER_SEQUENCE, futex::wake_one);
    }

    /// Server side, after `mailbox` (port `port`'s client inbox) changed: wakes the clients
    /// sleeping on it and one waiting for a free port (see [`HostWaits::wake_openers`]).
    #[inline(always)]
    pub(crate) fn wake_port(&self, port: u32, mailbox: &AtomicU32) {
        fence(Ordering::SeqCst);
        if self
            .word(PORT_SLEEPERS + port as usize)
            .load(Ordering::Relaxed)
            != 0
        {
            futex::wake_all(mailbox);
        }
        self.wake_an_opener();
    }

    /// Wakes the sleepers of a sequence (`wake`: all, or one) if there are any. The caller
    /// changed what they wait for, then fenced (sequentially consistent) before this.
    #[inline(always)]
    fn wake_sleepers(&self, sleepers: usize, sequence: usize, wake: fn(&AtomicU32)) {
        if self.word(sleepers).load(Ordering::Relaxed) != 0 {
            // Release: a sleeper that reads the new sequence also sees what the caller changed.
            self.word(sequence).fetch_add(1, Ordering::Release);
            wake(self.word(sequence));
        }
    }

    /// Wakes every server sleeper whatever the count says (cancellation: rare, and the flag it
    /// sets is not one the sleepers' counts order against).
    pub(crate) fn wake_server_always(&self) {
        self.word(SERVER_SEQUENCE).fetch_add(1, Ordering::AcqRel);
        futex::wake_all(self.word(SERVER_SEQUENCE));
    }

    /// Client side: sleeps until port `port`'s client inbox `mailbox` differs from `current`
    /// (or a spurious wake-up). The caller re-checks.
    #[inline]
    pub(crate) fn sleep_on_port(&self, port: u32, mailbox: &AtomicU32, current: u32) {
        let sleepers = self.word(PORT_SLEEPERS + port as usize);
        sleepers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if mailbox.load(Ordering::Relaxed) == current {
            // The kernel sleeps only while the word still holds `current`.
            futex::wait(mailbox, current, None);
        }
        sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts a server sleeper and returns the sequence to sleep on; re-check the condition,
    /// then [`HostWaits::server_sleep`] (which uncounts it).
    #[inline]
    pub(crate) fn server_prepare(&self) -> u32 {
        self.prepare(SERVER_SLEEPERS, SERVER_SEQUENCE)
    }

    /// Sleeps until a client hands a packet over after [`HostWaits::server_prepare`] returned
    /// `token`, or `timeout` passes; `sleep` false only uncounts (the re-check found work).
    #[inline]
    pub(crate) fn server_sleep(
        &self,
        token: u32,
        sleep: bool,
        timeout: Option<core::time::Duration>,
    ) {
        self.finish(SERVER_SLEEPERS, SERVER_SEQUENCE, token, sleep, timeout);
    }

    /// As [`HostWaits::server_prepare`], for a client waiting for a free port.
    #[inline]
    pub(crate) fn opener_prepare(&self) -> u32 {
        self.prepare(OPENER_SLEEPERS, OPENER_SEQUENCE)
    }

    /// As [`HostWaits::server_sleep`], for a client waiting for a free port (no timeout).
    #[inline]
    pub(crate) fn opener_sleep(&self, token: u32, sleep: bool) {
        self.finish(OPENER_SLEEPERS, OPENER_SEQUENCE, token, sleep, None);
    }

    #[inline]
    fn prepare(&self, sleepers: usize, sequence: usize) -> u32 {
        self.word(sleepers).fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // Acquire: seeing a waker's bump means seeing the change it made before it, so the
        // re-check that follows cannot miss it.
        self.word(sequence).load(Ordering::Acquire)
    }

    #[inline]
    fn finish(
        &self,
        sleepers: usize,
        sequence: usize,
        token: u32,
        sleep: bool,
        timeout: Option<core::time::Duration>,
    ) {
        if sleep {
            futex::wait(self.word(sequence), token, timeout);
        }
        self.word(sleepers).fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(all(feature = "std", target_os = "linux", not(loom)))]
mod futex {
    use super::AtomicU32;
    use core::time::Duration;

    /// Sleeps while `word` holds `expected`, until a wake-up, a signal or `timeout`.
    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
        let time = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let time_ptr = time
            .as_ref()
            .map_or(core::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: FUTEX_WAIT reads the aligned u32 at `word` (a live atomic) and, if it equals
        // `expected`, sleeps; `time_ptr` is null or a live relative timespec. Every outcome
        // (woken, value changed, timeout, signal) is fine: callers re-check.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                time_ptr,
            );
        }
    }

    /// Wakes every thread sleeping on `word`.
    pub(super) fn wake_all(word: &AtomicU32) {
        wake(word, i32::MAX);
    }

    /// Wakes one thread sleeping on `word`, if any.
    pub(super) fn wake_one(word: &AtomicU32) {
        wake(word, 1);
    }

    fn wake(word: &AtomicU32, count: i32) {
        // SAFETY: FUTEX_WAKE only uses the address as a key; it does not access memory.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                count,
            );
        }
    }
}

/// Builds without the futex never construct a [`HostWaits`] (`SUPPORTED` is false); these
/// keep the calls type-checked.
#[cfg(not(all(feature = "std", target_os = "linux", not(loom))))]
mod futex {
    use super::AtomicU32;
    use core::time::Duration;

    pub(super) fn wait(_word: &AtomicU32, _expected: u32, _timeout: Option<Duration>) {}

    pub(super) fn wake_all(_word: &AtomicU32) {}

    pub(super) fn wake_one(_word: &AtomicU32) {}
}

#[cfg(all(test, feature = "std", target_os = "linux", not(loom)))]
mod tests {
    extern crate std;
    use super::*;
    use std::boxed::Box;
    use std::format;
    use std::sync::atomic::AtomicUsize;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    use std::vec::Vec;

    /// Whether thread `tid` of this process is asleep (state `S` in its `stat`).
    fn asleep(tid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
            .ok()
            .and_then(|stat| {
                // The state follows the command name, which is in parentheses.
                let after_name = stat.rsplit_once(')')?.1;
                after_name
                    .split_whitespace()
                    .next()
                    .map(|state| state == "S")
            })
            .unwrap_or(false)
    }

    /// A port that comes free wakes one of the openers sleeping for one, not all of them: with
    /// thousands of emulated threads waiting, waking all made each scan the ports for every
    /// message (a storm of 2048 panics took 26 s).
    #[test]
    fn a_freed_port_wakes_one_sleeping_opener() {
        const OPENERS: usize = 6;
        let block: &'static [AtomicU32] = Box::leak(
            (0..PORT_SLEEPERS + 1)
                .map(|_| AtomicU32::new(0))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        // Raw pointers are not `Send`: the threads get the block's address.
        let address = block.as_ptr() as usize;
        // SAFETY: the block is zeroed, leaked (it outlives every thread) and has a word per
        // port for one port.
        let waits = move || unsafe { HostWaits::new(address as *const AtomicU32) }.unwrap();
        let woken = Arc::new(AtomicUsize::new(0));
        let tids = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..OPENERS)
            .map(|_| {
                let (woken, tids) = (Arc::clone(&woken), Arc::clone(&tids));
                std::thread::spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    tids.lock().unwrap().push(unsafe { libc::gettid() });
                    let waits = waits();
                    let token = waits.opener_prepare();
                    waits.opener_sleep(token, true);
                    woken.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        // Every opener counted and asleep in the kernel before the port comes free.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = block[OPENER_SLEEPERS].load(Ordering::SeqCst) as usize == OPENERS && {
                let tids = tids.lock().unwrap();
                tids.len() == OPENERS && tids.iter().all(|&tid| asleep(tid))
            };
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "the openers never all slept");
            std::thread::sleep(Duration::from_millis(5));
        }
        waits().wake_openers();
        let deadline = Instant::now() + Duration::from_secs(60);
        while woken.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "no opener woke");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Give any other woken opener time to show.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            woken.load(Ordering::SeqCst),
            1,
            "one freed port woke several openers"
        );
        // The rest, one wake-up each.
        for _ in 1..OPENERS {
            waits().wake_openers();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while woken.load(Ordering::SeqCst) < OPENERS {
            assert!(Instant::now() < deadline, "an opener was never woken");
            std::thread::sleep(Duration::from_millis(5));
            // A wake-up may have reached an opener that had not slept yet: wake again.
            waits().wake_openers();
        }
        for thread in threads {
            thread.join().unwrap();
        }
    }
}
