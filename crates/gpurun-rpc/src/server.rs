//! The host side: finds ports with pending requests and answers them.
//!
//! Nothing in the shared allocation is trusted. The lane mask is cut to the layout's lane size,
//! the opcode is read once and only reported, packet contents are copied in and out with
//! volatile accesses (the device may scribble on them at any time), and every length a device
//! sends in `send_n` decides only how many packets are drained: bytes go to destinations the
//! caller chooses and sizes. No method panics or indexes memory by a device-provided value.
//!
//! A wait for the device (the next packet of a conversation) can be abandoned from any thread
//! with [`Server::cancel`]; the port operation then returns [`ServerError::Cancelled`].
//!
//! Typical loop (the port closes on drop, handing the packet back if the server still has it):
//!
//! ```no_run
//! # fn demo(server: &gpurun_rpc::Server) -> Result<(), gpurun_rpc::ServerError> {
//! let mut resume = 0;
//! loop {
//!     let Some(mut port) = server.try_open(resume) else {
//!         resume = 0;
//!         continue; // back off here
//!     };
//!     resume = port.index() + 1;
//!     match port.opcode() {
//!         gpurun_rpc::opcode::TEST_INCREMENT => port.recv_and_send(|b, _| b.data[0] = b.data[0].wrapping_add(1))?,
//!         _ => { /* handle or report the unknown opcode */ }
//!     }
//! }
//! # }
//! ```

use crate::client::LOCK_WORDS;
use crate::host_waits::{HostWaits, CHECKS_BEFORE_SLEEP};
// Only the real constructor takes a layout; the loom model builds servers from parts.
#[cfg(not(loom))]
use crate::layout::Layout;
use crate::layout::{Buffer, Header, FIRST_PACKET_PAYLOAD};
use crate::sync::{self, AtomicBool, AtomicU32, AtomicU64};
use core::fmt;
use core::ptr;
use core::sync::atomic::AtomicU32 as HintWord;
use core::sync::atomic::Ordering;

/// Why a server port operation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerError {
    /// [`Server::cancel`] was called while the operation waited for the device.
    Cancelled,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerError::Cancelled => f.write_str("RPC wait for the device was cancelled"),
        }
    }
}

impl core::error::Error for ServerError {}

/// The host's view of one shared allocation, with its own (host-private) port locks so that
/// several host threads may serve the same allocation.
pub struct Server {
    port_count: u32,
    lane_size: u32,
    /// Mailbox B: the client's outbox.
    inbox: *const AtomicU32,
    /// Mailbox A: the client's inbox.
    outbox: *const AtomicU32,
    header: *const Header,
    packet: *mut Buffer,
    lock: [AtomicU32; LOCK_WORDS],
    cancelled: AtomicBool,
    /// The doorbell counter the host installed (null: none). Never read from shared memory.
    doorbell: *const AtomicU64,
    /// Sleep and wake instead of polling: every client is a host thread (see
    /// [`Server::attach_host_waits`]).
    waits: Option<HostWaits>,
    /// Which ports [`Server::next_request`] reads.
    hints: ScanHints,
}

/// How much of the port range [`Server::next_request`] reads. Hints only: any values keep every
/// scan correct; they decide how many mailbox words a call reads and how soon a request above
/// the usual range is seen.
///
/// Clients take the lowest free port, so requests stay on a few low ports, while a server with
/// 1024 ports (gpurun-hal's default) would read all 2048 mailbox words between two requests of
/// one busy client (~260 ns here, most of a host round trip). So a call reads the ports below
/// `busy_ports` (one past the highest port that had a request), and the whole range after
/// [`IDLE_CALLS_BEFORE_FULL_SCAN`] calls in a row found nothing (an idle server, or a request
/// above the range) and once every [`FULL_SCAN_PERIOD`] requests served (a request above the
/// range while the low ports stay busy waits for at most that many). Every [`SHRINK_PERIOD`]
/// requests the range shrinks to the ports served meanwhile. Plain core atomics, not modelled
/// by loom: racy updates only change how much is read.
struct ScanHints {
    busy_ports: HintWord,
    idle_calls: HintWord,
    served: HintWord,
    full_scan_due: HintWord,
    highest_served: HintWord,
}

/// See [`ScanHints`].
const IDLE_CALLS_BEFORE_FULL_SCAN: u32 = 128;
/// See [`ScanHints`].
const FULL_SCAN_PERIOD: u32 = 64;
/// See [`ScanHints`].
const SHRINK_PERIOD: u32 = 1024;

impl ScanHints {
    /// Whole-range scans until the first shrink: a new server behaves as one without hints.
    const fn new(port_count: u32) -> ScanHints {
        ScanHints {
            busy_ports: HintWord::new(port_count),
            idle_calls: HintWord::new(0),
            served: HintWord::new(0),
            full_scan_due: HintWord::new(0),
            highest_served: HintWord::new(0),
        }
    }

    /// The end of the range this call scans (`port_count` for a whole-range scan).
    #[inline]
    fn scan_end(&self, port_count: u32) -> u32 {
        if self.idle_calls.load(Ordering::Relaxed) >= IDLE_CALLS_BEFORE_FULL_SCAN {
            return port_count;
        }
        if self.full_scan_due.load(Ordering::Relaxed) != 0 {
            self.full_scan_due.store(0, Ordering::Relaxed);
            return port_count;
        }
        self.busy_ports.load(Ordering::Relaxed).clamp(1, port_count)
    }

    /// Records what a scan found: `Some(index)` of the port served, or `None`.
    #[inline]
    fn record(&self, found: Option<u32>) {
        let Some(index) = found else {
            let idle = self.idle_calls.load(Ordering::Relaxed);
            self.idle_calls
                .store(idle.saturating_add(1), Ordering::Relaxed);
            return;
        };
        self.idle_calls.store(0, Ordering::Relaxed);
        let next = index + 1;
        if next > self.busy_ports.load(Ordering::Relaxed) {
            self.busy_ports.store(next, Ordering::Relaxed);
        }
        if next > self.highest_served.load(Ordering::Relaxed) {
            self.highest_served.store(next, Ordering::Relaxed);
        }
        let served = self.served.load(Ordering::Relaxed).wrapping_add(1);
        self.served.store(served, Ordering::Relaxed);
        if served.is_multiple_of(FULL_SCAN_PERIOD) {
            self.full_scan_due.store(1, Ordering::Relaxed);
        }
        if served.is_multiple_of(SHRINK_PERIOD) {
            let highest = self.highest_served.load(Ordering::Relaxed);
            self.highest_served.store(0, Ordering::Relaxed);
            self.busy_ports.store(highest.max(1), Ordering::Relaxed);
        }
    }
}

// SAFETY: the pointers are fixed at construction; the memory they address is accessed with
// atomics (mailboxes) or only while holding a port (lock bit + ownership), and the locks and the
// cancel flag are atomics. The server is meant to be shared by host threads.
unsafe impl Sync for Server {}
// SAFETY: as above; no thread-affine state.
unsafe impl Send for Server {}

impl Server {
    /// A server over the shared allocation at `base` (a host pointer).
    ///
    /// # Safety
    /// `base` must point to `layout.allocation_size()` bytes, aligned to 64, zeroed before the
    /// first client used them (see [`Layout::zero`]), valid for reads and writes for the life of
    /// the server, and shared with clients only through this protocol (the device may write any
    /// bytes at any time; the server tolerates that).
    #[cfg(not(loom))]
    pub unsafe fn new(layout: &Layout, base: *mut u8) -> Server {
        // SAFETY: all offsets are within the allocation the caller vouches for.
        unsafe {
            Server {
                port_count: layout.port_count(),
                lane_size: layout.lane_size(),
                inbox: base.add(layout.client_outbox_offset()) as *const AtomicU32,
                outbox: base.add(layout.client_inbox_offset()) as *const AtomicU32,
                header: base.add(layout.header_offset()) as *const Header,
                packet: base.add(layout.packet_offset()) as *mut Buffer,
                lock: [const { AtomicU32::new(0) }; LOCK_WORDS],
                cancelled: AtomicBool::new(false),
                doorbell: ptr::null(),
                waits: None,
                hints: ScanHints::new(layout.port_count()),
            }
        }
    }

    /// A server over separately allocated regions (loom models). `inbox` is the client's outbox.
    ///
    /// # Safety
    /// As for [`crate::Client::from_parts`], with the mailbox roles swapped.
    #[cfg(loom)]
    pub unsafe fn from_parts(
        port_count: u32,
        lane_size: u32,
        inbox: *const AtomicU32,
        outbox: *const AtomicU32,
        header: *const Header,
        packet: *mut Buffer,
    ) -> Server {
        Server {
            port_count,
            lane_size,
            inbox,
            outbox,
            header,
            packet,
            lock: [AtomicU32::new(0)],
            cancelled: AtomicBool::new(false),
            doorbell: ptr::null(),
            waits: None,
            hints: ScanHints::new(port_count),
        }
    }

    /// Uses `counter` as the doorbell: the counter whose address the host wrote into the
    /// allocation's doorbell record ([`Layout::write_doorbell`]). Clients add one per open; each
    /// port this server closes subtracts one (never below zero, so a client that does not ring
    /// cannot wrap it). The address is taken from the host, never from the shared record, which
    /// the device could overwrite.
    ///
    /// # Safety
    /// `counter` must point to an aligned u64 that is only accessed atomically and outlives the
    /// server.
    pub unsafe fn attach_doorbell(&mut self, counter: *const AtomicU64) {
        self.doorbell = counter;
    }

    /// Sleeps in the kernel instead of polling, woken by the clients, using `block`: the host
    /// block whose address the host also wrote in the doorbell record's `host_waits` field
    /// (see [`crate::host_waits`]). Only for allocations whose every client is a host thread
    /// that can block ([`crate::Lanes::blocking_waits`]): a GPU cannot wake the server. Builds
    /// without the futex (not Linux, no `std`) ignore it and keep polling.
    ///
    /// # Safety
    /// `block` must point to [`Layout::host_waits_size`] zeroed bytes, 4-aligned, only accessed
    /// atomically, that outlive the server.
    #[cfg(not(loom))]
    pub unsafe fn attach_host_waits(&mut self, block: *const u8) {
        // SAFETY: forwarded from the caller; the block is sized for this layout's ports.
        self.waits = unsafe { HostWaits::new(block as *const AtomicU32) };
    }

    /// Whether this server sleeps on a host waits block ([`Server::attach_host_waits`]).
    pub fn has_host_waits(&self) -> bool {
        self.waits.is_some()
    }

    #[inline]
    fn doorbell(&self) -> Option<&AtomicU64> {
        // SAFETY: `attach_doorbell`'s contract: a live, aligned, atomically accessed u64.
        unsafe { self.doorbell.as_ref() }
    }

    /// With a doorbell: the number of requests clients opened that no server port has closed
    /// yet (0 means nothing to do). `None` without a doorbell: only a scan can tell.
    #[inline]
    pub fn open_requests(&self) -> Option<u64> {
        self.doorbell()
            .map(|counter| counter.load(Ordering::Relaxed))
    }

    /// Whether any port has a request pending (a full scan of the mailboxes).
    pub fn has_pending(&self) -> bool {
        (0..self.port_count).any(|index| {
            let (inbox, outbox) = self.mailboxes(index);
            inbox != outbox
        })
    }

    /// Blocks until there may be work, the server is cancelled, or `timeout` passes; returns
    /// whether work may be there. With a doorbell it watches the counter (one load per check);
    /// without one it scans the mailboxes. The wait spins briefly, then yields, then sleeps in
    /// growing steps up to 1.6 ms (see [`sync::host_backoff`]), so an idle kernel costs little
    /// CPU. A launch loop calls it when a poll found nothing, then polls again.
    ///
    /// With host waits ([`Server::attach_host_waits`]) it sleeps until a client hands a packet
    /// over instead, and "work" means a port with a pending packet (a request opened but not
    /// sent yet is nothing to do).
    #[cfg(all(feature = "std", not(loom)))]
    pub fn wait_for_request(&self, timeout: core::time::Duration) -> bool {
        self.wait_for_request_or(timeout, || false)
    }

    /// [`Server::wait_for_request`] that also returns (true) once `changed()` holds: something
    /// outside the protocol the caller watches, such as the kernel's end. With host waits it is
    /// re-checked after the server counts itself as a sleeper, so a [`ServerWaker`] woken after
    /// the change is never missed.
    ///
    /// [`ServerWaker`]: crate::host_waits::ServerWaker
    #[cfg(all(feature = "std", not(loom)))]
    pub fn wait_for_request_or(
        &self,
        timeout: core::time::Duration,
        changed: impl Fn() -> bool,
    ) -> bool {
        let started = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            if self.may_have_request() || changed() {
                return true;
            }
            let elapsed = started.elapsed();
            if self.cancelled.load(Ordering::Acquire) || elapsed >= timeout {
                return false;
            }
            match self.waits {
                Some(waits) if spins >= CHECKS_BEFORE_SLEEP => {
                    let token = waits.server_prepare();
                    let idle = !self.may_have_request()
                        && !changed()
                        && !self.cancelled.load(Ordering::Acquire);
                    waits.server_sleep(token, idle, Some(timeout - elapsed));
                }
                _ => sync::host_backoff(&mut spins),
            }
        }
    }

    /// [`Server::wait_for_request`]'s test. A zero doorbell counter rules requests out with one
    /// load (clients ring before they send). With host waits a request counts only once its
    /// packet is there (a scan), so that the server sleeps while a client prepares it.
    #[cfg(all(feature = "std", not(loom)))]
    fn may_have_request(&self) -> bool {
        match self.open_requests() {
            Some(0) => false,
            Some(_) if self.waits.is_none() => true,
            _ => self.has_pending(),
        }
    }

    /// Number of ports.
    #[inline]
    pub fn port_count(&self) -> u32 {
        self.port_count
    }

    /// Lanes per port.
    pub fn lane_size(&self) -> u32 {
        self.lane_size
    }

    /// Makes every current and future wait for the device return [`ServerError::Cancelled`]
    /// (e.g. when the kernel ended or faulted mid-conversation) until [`Server::resume`].
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Release);
        if let Some(waits) = self.waits {
            waits.wake_server_always();
        }
    }

    /// Lets waits for the device block again after [`Server::cancel`].
    pub fn resume(&self) {
        self.cancelled.store(false, Ordering::Release);
    }

    /// The (inbox, outbox) bits of a port. Only bit 0 counts: a device that writes other
    /// values must not make every ownership check succeed (the server would then never wait,
    /// and a drained `send_n` of a forged length would never end).
    #[inline]
    fn mailboxes(&self, index: u32) -> (u32, u32) {
        // SAFETY: callers pass `index < port_count`: inside both mailbox arrays.
        unsafe {
            (
                sync::load_mailbox(&*self.inbox.add(index as usize)) & 1,
                sync::load_mailbox(&*self.outbox.add(index as usize)) & 1,
            )
        }
    }

    #[inline]
    fn try_lock(&self, index: u32) -> bool {
        let bit = 1u32 << (index % 32);
        let before = sync::lock_fetch_or(&self.lock[(index / 32) as usize], bit);
        let holding = before & bit == 0;
        if holding {
            sync::acquire_fence();
        }
        holding
    }

    #[inline]
    fn unlock(&self, index: u32) {
        sync::release_fence();
        sync::lock_fetch_and(&self.lock[(index / 32) as usize], !(1u32 << (index % 32)));
    }

    /// The first port at or after `start` with a pending request that no other host thread
    /// holds. Scans to the end once; callers resume at `port.index() + 1` for fairness and wrap
    /// to 0 when this returns `None`.
    #[inline]
    pub fn try_open(&self, start: u32) -> Option<ServerPort<'_>> {
        self.scan(start, self.port_count, true)
    }

    /// The next port with a pending request in one circle from `start`: `start..end`, then
    /// `0..start`, where `end` is usually one past the highest port that has had requests and
    /// sometimes the port count (the server's scan hints: a request on a port above the usual
    /// range waits for at most 64 requests served, or 128 calls when nothing else is
    /// pending). Resuming at
    /// `port.index() + 1` keeps the service fair, and a request on a port below `start` is
    /// found in the same call instead of after an idle round (with one busy port,
    /// [`Server::try_open`] from `index + 1` finds nothing every other call).
    #[inline]
    pub fn next_request(&self, start: u32) -> Option<ServerPort<'_>> {
        self.next_request_in_range(start, true)
    }

    /// [`Server::next_request`] for a server only this thread uses (`&mut`): no other host
    /// thread can hold a port, so the host-private port locks are skipped (two locked
    /// read-modify-writes per request).
    #[inline]
    pub fn next_request_exclusive(&mut self, start: u32) -> Option<ServerPort<'_>> {
        self.next_request_in_range(start, false)
    }

    #[inline]
    fn next_request_in_range(&self, start: u32, lock: bool) -> Option<ServerPort<'_>> {
        let end = self.hints.scan_end(self.port_count);
        let start = start.min(end);
        let found = self
            .scan(start, end, lock)
            .or_else(|| self.scan(0, start, lock));
        self.hints.record(found.as_ref().map(ServerPort::index));
        found
    }

    /// The first port in `start..end` whose mailboxes differ (the server owns it), by an
    /// unlocked look. Eight ports per branch: a server with one busy port looks at every other
    /// port between two of its requests, and eight independent loads with one test take less
    /// time than a test per port (`cargo bench -p gpurun-rpc`, the idle-scan row).
    #[inline]
    fn first_pending(&self, start: u32, end: u32) -> Option<u32> {
        let mut index = start;
        while index + 8 <= end {
            let mut differ = 0u32;
            for offset in 0..8 {
                let (inbox, outbox) = self.mailboxes(index + offset);
                differ |= (inbox ^ outbox) << offset;
            }
            if differ != 0 {
                return Some(index + differ.trailing_zeros());
            }
            index += 8;
        }
        (index..end).find(|&index| {
            let (inbox, outbox) = self.mailboxes(index);
            inbox != outbox
        })
    }

    #[inline]
    fn scan(&self, start: u32, end: u32, lock: bool) -> Option<ServerPort<'_>> {
        let mut from = start;
        while let Some(index) = self.first_pending(from, end) {
            from = index + 1;
            if lock && !self.try_lock(index) {
                continue;
            }
            // Looked at again (under the lock when locking): another host thread may have
            // served the port since the unlocked look.
            let (inbox, outbox) = self.mailboxes(index);
            if inbox == outbox {
                if lock {
                    self.unlock(index);
                }
                continue;
            }
            sync::acquire_fence();
            // SAFETY: `index < port_count`; the header is plain data that the device may change
            // at any time, so it is read once, volatile, and only used as bounded values.
            let header = unsafe { ptr::read_volatile(self.header.add(index as usize)) };
            let lanes = if self.lane_size >= 64 {
                u64::MAX
            } else {
                (1u64 << self.lane_size) - 1
            };
            return Some(ServerPort {
                server: self,
                index,
                opcode: header.opcode,
                lane_mask: header.mask & lanes,
                out: outbox,
                receive: false,
                owns_buffer: true,
                locked: lock,
            });
        }
        None
    }
}

/// Per-lane lengths of a received `send_n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaneSizes {
    /// Lanes that sent (the port's lane mask).
    pub mask: u64,
    /// Length each lane announced (0 for lanes outside `mask`).
    pub sizes: [u64; 64],
}

impl LaneSizes {
    /// The length lane `lane` announced, if it took part.
    pub fn get(&self, lane: u32) -> Option<u64> {
        if lane < 64 && self.mask & (1u64 << lane) != 0 {
            Some(self.sizes[lane as usize])
        } else {
            None
        }
    }
}

/// Iterates the set bits of a lane mask, lowest first.
struct LaneBits(u64);

impl Iterator for LaneBits {
    type Item = u32;

    #[inline(always)]
    fn next(&mut self) -> Option<u32> {
        if self.0 == 0 {
            return None;
        }
        let lane = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(lane)
    }
}

/// A port with a pending request, held by this host thread; closes on drop.
pub struct ServerPort<'a> {
    server: &'a Server,
    index: u32,
    opcode: u32,
    lane_mask: u64,
    out: u32,
    receive: bool,
    owns_buffer: bool,
    /// Holds the host-private lock bit (not with [`Server::next_request_exclusive`]).
    locked: bool,
}

impl<'a> ServerPort<'a> {
    /// The server this port belongs to (e.g. to [`Server::cancel`] it from a callback).
    #[inline]
    pub fn server(&self) -> &'a Server {
        self.server
    }

    /// The request's opcode as the client wrote it (untrusted: match it, never index by it).
    #[inline]
    pub fn opcode(&self) -> u32 {
        self.opcode
    }

    /// Lanes taking part, limited to the layout's lane size.
    #[inline]
    pub fn lane_mask(&self) -> u64 {
        self.lane_mask
    }

    /// The port's index in the shared allocation.
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The lanes of the mask, lowest first (the mask is already cut to the lane size).
    #[inline(always)]
    fn lanes(&self) -> LaneBits {
        LaneBits(self.lane_mask)
    }

    /// Calls `f` with each lane of the mask, lowest first. With one lane per port (CPU clients)
    /// `f` gets the constant 0 behind a branch on the mask: the slot's address then does not
    /// wait for the header load that brought the mask, so the packet's cache line is fetched
    /// together with the header's instead of after it (one cross-core transfer less on the
    /// first packet of every request).
    #[inline(always)]
    fn each_lane(&self, mut f: impl FnMut(u32)) {
        if self.server.lane_size == 1 {
            if self.lane_mask != 0 {
                f(0);
            }
        } else {
            for lane in self.lanes() {
                f(lane);
            }
        }
    }

    #[inline]
    fn slot(&self, lane: u32) -> *mut Buffer {
        let slot = self.index as usize * self.server.lane_size as usize + lane as usize;
        // SAFETY: `index < port_count`, `lane < lane_size`: inside the packet array.
        unsafe { self.server.packet.add(slot) }
    }

    #[inline(always)]
    fn read_slot(&self, lane: u32) -> Buffer {
        let slot = self.slot(lane);
        let mut copy = Buffer::default();
        for (index, word) in copy.data.iter_mut().enumerate() {
            // SAFETY: the slot is inside the allocation (see `slot`) and aligned, `index` is
            // below 8; the device may race on it only if it breaks the protocol, so the reads
            // are volatile (one 8-byte load each): a copy of plain words that callbacks then
            // see, never a reference into shared memory.
            *word = unsafe { ptr::read_volatile(ptr::addr_of!((*slot).data[index])) };
        }
        copy
    }

    /// Overwrites a lane's whole slot with `words` (volatile, one 8-byte store each), without
    /// reading it first: for packets whose every word we replace.
    #[inline(always)]
    fn write_slot(&self, lane: u32, words: &[u8; 64]) {
        let slot = self.slot(lane);
        for (index, word) in words.chunks_exact(8).enumerate() {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(word);
            // SAFETY: as in `read_slot`; we own the packet while writing it, `index` is below 8.
            unsafe {
                ptr::write_volatile(
                    ptr::addr_of_mut!((*slot).data[index]),
                    u64::from_ne_bytes(bytes),
                )
            }
        }
    }

    /// Writes back the words of `buffer` that differ from `before` (what the slot held): the
    /// packet is changed in place, and cache lines of it we did not change are not taken from
    /// the client (with one busy port that saves a line transfer per round trip).
    #[inline(always)]
    fn write_slot_changes(&self, lane: u32, before: &Buffer, buffer: &Buffer) {
        let slot = self.slot(lane);
        for (index, (&old, &new)) in before.data.iter().zip(&buffer.data).enumerate() {
            if old != new {
                // SAFETY: as in `read_slot`; we own the packet while writing it, and `index`
                // is below 8.
                unsafe { ptr::write_volatile(ptr::addr_of_mut!((*slot).data[index]), new) }
            }
        }
    }

    /// This port's inbox bit alone: the wait loops poll it, and the outbox word (ours, never
    /// changed by the client) need not be re-read with it.
    #[inline(always)]
    fn load_inbox(&self) -> u32 {
        // SAFETY: `index < port_count`: inside the server inbox array.
        sync::load_mailbox(unsafe { &*self.server.inbox.add(self.index as usize) }) & 1
    }

    #[inline(always)]
    fn wait_for_ownership(&self, mut inbox: u32) -> Result<(), ServerError> {
        // The server owns the packet when the mailboxes differ.
        let mut spins = 0;
        while inbox == self.out {
            if self.server.cancelled.load(Ordering::Acquire) {
                // A packet that arrived since the last look is still served: a cancel gives
                // up on a device that stopped sending, not on one that was merely slow.
                inbox = self.load_inbox();
                if inbox == self.out {
                    return Err(ServerError::Cancelled);
                }
                break;
            }
            match self.server.waits {
                Some(waits) if spins >= CHECKS_BEFORE_SLEEP => {
                    // Sleep until a client hands a packet over or `cancel` (both wake us).
                    let token = waits.server_prepare();
                    let waiting = self.load_inbox() == self.out
                        && !self.server.cancelled.load(Ordering::Acquire);
                    waits.server_sleep(token, waiting, None);
                }
                _ => sync::host_backoff(&mut spins),
            }
            inbox = self.load_inbox();
        }
        sync::acquire_fence();
        Ok(())
    }

    #[inline]
    fn invert_outbox(&mut self) {
        self.invert_outbox_without_wake();
        self.wake_client();
    }

    /// The flip alone; the caller must call [`ServerPort::wake_client`] after it (it may do
    /// other work first: the wake only has to follow the store).
    #[inline(always)]
    fn invert_outbox_without_wake(&mut self) {
        let next = self.out ^ 1;
        sync::release_fence();
        sync::store_mailbox(self.outbox_word(), next);
        self.out = next;
    }

    /// With host waits: wakes a client sleeping on this port's mailbox after a flip.
    #[inline(always)]
    fn wake_client(&self) {
        if let Some(waits) = self.server.waits {
            waits.wake_port(self.index, self.outbox_word());
        }
    }

    #[inline(always)]
    fn outbox_word(&self) -> &AtomicU32 {
        // SAFETY: `index < port_count`: inside the server outbox array.
        unsafe { &*self.server.outbox.add(self.index as usize) }
    }

    #[inline(always)]
    fn acquire(&mut self) -> Result<(), ServerError> {
        let inbox = if self.owns_buffer {
            self.out ^ 1
        } else {
            self.load_inbox()
        };
        self.wait_for_ownership(inbox)
    }

    /// Lets `fill(slot, lane)` change each lane's slot and hands the packet to the client. As
    /// in LLVM's server the slot is not cleared first: `fill` sees what the packet held (the
    /// client's last request after a `recv`) and words it leaves alone go back unchanged.
    #[inline]
    pub fn send(&mut self, mut fill: impl FnMut(&mut Buffer, u32)) -> Result<(), ServerError> {
        self.acquire()?;
        self.each_lane(|lane| {
            let before = self.read_slot(lane);
            let mut buffer = before;
            fill(&mut buffer, lane);
            self.write_slot_changes(lane, &before, &buffer);
        });
        self.hand_over();
        Ok(())
    }

    /// Hands the packet to the client after our writes to it (nothing left to receive).
    #[inline]
    fn hand_over(&mut self) {
        self.invert_outbox();
        self.owns_buffer = false;
        self.receive = false;
    }

    /// Before waiting for the client's next packet: hands back the one a `recv` kept.
    #[inline]
    fn hand_back_received(&mut self) {
        if self.receive {
            self.invert_outbox();
            self.owns_buffer = false;
        }
    }

    /// Waits for the client's next packet and shows each lane's slot to `use_packet`.
    #[inline]
    pub fn recv(&mut self, mut use_packet: impl FnMut(&Buffer, u32)) -> Result<(), ServerError> {
        self.hand_back_received();
        self.acquire()?;
        self.each_lane(|lane| use_packet(&self.read_slot(lane), lane));
        self.receive = true;
        self.owns_buffer = true;
        Ok(())
    }

    /// A `recv` that another `recv` will follow: each lane's slot is copied out and the packet
    /// handed back at once, before `use_packet` sees the copies, so the client refills it while
    /// we process this one (the next `recv` would hand it back first anyway).
    #[inline]
    fn recv_handing_back(
        &mut self,
        mut use_packet: impl FnMut(&Buffer, u32),
    ) -> Result<(), ServerError> {
        self.hand_back_received();
        self.acquire()?;
        let mut copies = [const { core::mem::MaybeUninit::<Buffer>::uninit() }; 64];
        for lane in self.lanes() {
            copies[lane as usize].write(self.read_slot(lane));
        }
        self.invert_outbox_without_wake();
        self.owns_buffer = false;
        self.receive = false;
        for lane in self.lanes() {
            // SAFETY: the loop above wrote the copy of every lane of this same mask.
            use_packet(unsafe { copies[lane as usize].assume_init_ref() }, lane);
        }
        // The wake's fence waits for the flip to reach the client; after the copies, that wait
        // overlaps with them.
        self.wake_client();
        Ok(())
    }

    /// Receives a packet, lets `work` change each lane's slot in place, and sends it back (the
    /// words `work` leaves alone go back as the client sent them, as in LLVM's server).
    #[inline]
    pub fn recv_and_send(&mut self, work: impl FnMut(&mut Buffer, u32)) -> Result<(), ServerError> {
        self.hand_back_received();
        // One pass over the lanes: each slot is copied out, worked on and written back while we
        // own the packet, then a single flip hands it back (the `send` half needs no wait).
        self.send(work)
    }

    /// Sends each lane the bytes `data(lane)` (lengths may differ), mirroring the client's
    /// [`crate::client::Port::recv_n`].
    pub fn send_n<'d>(&mut self, mut data: impl FnMut(u32) -> &'d [u8]) -> Result<(), ServerError> {
        let mut slices: [&[u8]; 64] = [&[]; 64];
        let mut longest = 0;
        for lane in self.lanes() {
            let bytes = data(lane);
            longest = longest.max(bytes.len());
            slices[lane as usize] = bytes;
        }
        self.send(|buffer, lane| {
            let bytes = slices[lane as usize];
            buffer.data[0] = bytes.len() as u64;
            let first = bytes.len().min(FIRST_PACKET_PAYLOAD);
            buffer.as_bytes_mut()[8..8 + first].copy_from_slice(&bytes[..first]);
        })?;
        let mut offset = FIRST_PACKET_PAYLOAD;
        while offset < longest {
            self.acquire()?;
            for lane in self.lanes() {
                let rest = slices[lane as usize].get(offset..).unwrap_or(&[]);
                match rest.first_chunk::<64>() {
                    // A whole packet: written at once, the slot's old words never read.
                    Some(full) => self.write_slot(lane, full),
                    // A lane's last bytes (or none): as `send`, the words after them stay.
                    None if !rest.is_empty() => {
                        let before = self.read_slot(lane);
                        let mut buffer = before;
                        buffer.as_bytes_mut()[..rest.len()].copy_from_slice(rest);
                        self.write_slot_changes(lane, &before, &buffer);
                    }
                    None => {}
                }
            }
            self.hand_over();
            offset += 64;
        }
        Ok(())
    }

    /// Receives one `send_n` and streams it: `sink(lane, announced_len, offset, bytes)` is called
    /// once per lane with the first packet's bytes (`offset` 0, possibly empty) and again for each
    /// later chunk. The number of packets drained follows the longest announced length, so the
    /// conversation stays in step with the client; cancel the server to give up on a device that
    /// announced more than it sends.
    pub fn recv_n_chunks(
        &mut self,
        mut sink: impl FnMut(u32, u64, u64, &[u8]),
    ) -> Result<LaneSizes, ServerError> {
        let mut sizes = LaneSizes {
            mask: self.lane_mask,
            sizes: [0; 64],
        };
        let mut longest = 0u64;
        self.recv(|buffer, lane| {
            let size = buffer.data[0];
            sizes.sizes[lane as usize] = size;
            longest = longest.max(size);
            let first = size.min(FIRST_PACKET_PAYLOAD as u64) as usize;
            sink(lane, size, 0, &buffer.as_bytes()[8..8 + first]);
        })?;
        let mut offset = FIRST_PACKET_PAYLOAD as u64;
        while offset < longest {
            // A device can announce any length and keep flipping its mailbox: let a cancel
            // interrupt the drain even when no wait happens (checked every 64 packets).
            if offset % 4096 == 4096 - 8 && self.server.cancelled.load(Ordering::Relaxed) {
                return Err(ServerError::Cancelled);
            }
            let use_packet = |buffer: &Buffer, lane: u32| {
                let size = sizes.sizes[lane as usize];
                if offset < size {
                    let len = (size - offset).min(64) as usize;
                    sink(lane, size, offset, &buffer.as_bytes()[..len]);
                }
            };
            if offset + 64 < longest {
                self.recv_handing_back(use_packet)?;
            } else {
                // The last packet stays with us, as after any recv (a send may follow).
                self.recv(use_packet)?;
            }
            offset += 64;
        }
        Ok(sizes)
    }

    /// Receives one `send_n` into caller-chosen buffers: `dest(lane, announced_len)` is asked
    /// once per lane for where its bytes go (`None` drops them); bytes past the end of the given
    /// slice are dropped. Returns what each lane announced.
    pub fn recv_n<'d>(
        &mut self,
        mut dest: impl FnMut(u32, u64) -> Option<&'d mut [u8]>,
    ) -> Result<LaneSizes, ServerError> {
        let mut targets: [Option<&'d mut [u8]>; 64] = [const { None }; 64];
        self.recv_n_chunks(|lane, size, offset, bytes| {
            let target = &mut targets[lane as usize];
            if offset == 0 {
                *target = dest(lane, size);
            }
            if let Some(target) = target.as_deref_mut() {
                copy_clamped(target, offset, bytes);
            }
        })
    }

    /// Receives one `send_n` into vectors, keeping at most `limit` bytes per lane (the
    /// allocation never follows an unchecked device length). Returns `(lane, announced_len,
    /// bytes)` for every lane of the mask.
    #[cfg(feature = "alloc")]
    pub fn recv_n_to_vecs(
        &mut self,
        limit: usize,
    ) -> Result<alloc::vec::Vec<(u32, u64, alloc::vec::Vec<u8>)>, ServerError> {
        use alloc::vec::Vec;
        let mut out: Vec<(u32, u64, Vec<u8>)> = Vec::new();
        self.recv_n_chunks(|lane, size, offset, bytes| {
            if offset == 0 {
                let keep = size.min(limit as u64) as usize;
                out.push((lane, size, Vec::with_capacity(keep)));
            }
            if let Some((_, _, data)) = out.iter_mut().rev().find(|(l, _, _)| *l == lane) {
                let room = limit.saturating_sub(data.len());
                data.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
        })?;
        Ok(out)
    }
}

/// Copies `bytes` to `target[offset..]`, dropping whatever does not fit.
fn copy_clamped(target: &mut [u8], offset: u64, bytes: &[u8]) {
    if offset >= target.len() as u64 {
        return;
    }
    let start = offset as usize;
    let len = bytes.len().min(target.len() - start);
    target[start..start + len].copy_from_slice(&bytes[..len]);
}

impl Drop for ServerPort<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.owns_buffer {
            // Still holding the client's packet (last operation was a recv): give it back.
            self.invert_outbox();
        }
        if self.locked {
            self.server.unlock(self.index);
        } else {
            // Order our last packet accesses before a later request's, as the unlock's
            // release fence does on the locked path.
            sync::release_fence();
        }
        if let Some(counter) = self.server.doorbell() {
            // One request finished. Saturating, so a client that never rang cannot wrap it.
            let _ = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |open| {
                open.checked_sub(1)
            });
        }
    }
}
