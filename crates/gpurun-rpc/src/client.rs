//! The device side: the object behind `__llvm_rpc_client` and the ports a warp opens on it.
//!
//! A conversation is `open`, then a sequence of `send`s and `recv`s mirrored exactly by the
//! server (see [`crate::opcode`] for each opcode's sequence), then `drop`. The client always
//! speaks first. Dropping a port right after a `send` is allowed (fire and forget): the port stays
//! with the server until it has read the packet, and other warps skip it meanwhile.

use crate::host_waits::{HostWaits, CHECKS_BEFORE_SLEEP};
use crate::lanes::{HostLane, Lanes};
use crate::layout::{Buffer, Header, FIRST_PACKET_PAYLOAD, MAX_PORT_COUNT};
// Only the real constructor takes a layout; the loom model builds clients from parts.
#[cfg(not(loom))]
use crate::layout::{Doorbell, Layout};
use crate::sync::{self, AtomicU32};
use core::ptr;

/// Words of lock bits: one bit per port.
#[cfg(not(loom))]
pub(crate) const LOCK_WORDS: usize = MAX_PORT_COUNT as usize / 32;
/// Under loom, models use at most 32 ports (loom atomics are costly objects).
#[cfg(loom)]
pub(crate) const LOCK_WORDS: usize = 1;

/// LLVM libc's `rpc::Client` (2096 bytes): the port count, pointers into the shared allocation
/// as the device sees it, and the lock bits that keep two warps off one port.
///
/// On the device this is the global `__llvm_rpc_client`, filled in by the loader (from
/// [`Layout::client_image`]) before launch; declare it exported (`#[no_mangle]`) and initialised
/// with [`Client::uninit`]. The fields are read with volatile loads, so the compiler never folds
/// them to the placeholder values.
#[repr(C)]
pub struct Client {
    view: View,
    lock: [AtomicU32; LOCK_WORDS],
}

#[cfg(all(target_pointer_width = "64", not(loom)))]
const _: () = {
    assert!(core::mem::size_of::<Client>() == crate::layout::CLIENT_SIZE);
    assert!(core::mem::align_of::<Client>() == 8);
    assert!(core::mem::offset_of!(Client, view.doorbell) == 8);
    assert!(core::mem::offset_of!(Client, view.inbox) == 16);
    assert!(core::mem::offset_of!(Client, view.outbox) == 24);
    assert!(core::mem::offset_of!(Client, view.header) == 32);
    assert!(core::mem::offset_of!(Client, view.packet) == 40);
    assert!(core::mem::offset_of!(Client, lock) == crate::layout::CLIENT_LOCK_OFFSET);
};

// SAFETY: the pointer fields are written once (by the constructor or the loader) and only read
// afterwards; everything they point to is accessed through atomics or under the port protocol,
// and the lock words are atomics. Sharing the object between threads/warps is the design.
unsafe impl Sync for Client {}
// SAFETY: as above; the object holds no thread-affine state.
unsafe impl Send for Client {}

/// The pointer fields: the start of [`Client`]'s layout, read once per port.
#[repr(C)]
#[derive(Clone, Copy)]
struct View {
    port_count: u32,
    doorbell: *mut u8,
    inbox: *const AtomicU32,
    outbox: *const AtomicU32,
    header: *mut Header,
    packet: *mut Buffer,
}

impl Client {
    /// A placeholder for the device global
    /// (`#[no_mangle] static __llvm_rpc_client: Client = Client::uninit();`); the loader
    /// overwrites it before launch. A client still in this state has no ports:
    /// [`Client::open`] returns `None`.
    #[cfg(not(loom))]
    pub const fn uninit() -> Client {
        Client {
            view: View {
                port_count: 0,
                doorbell: ptr::null_mut(),
                inbox: ptr::null(),
                outbox: ptr::null(),
                header: ptr::null_mut(),
                packet: ptr::null_mut(),
            },
            lock: [const { AtomicU32::new(0) }; LOCK_WORDS],
        }
    }

    /// A client over the shared allocation at `base` (the address the client's code will use:
    /// on the host emulation backend, the host pointer).
    ///
    /// # Safety
    /// `base` must point to an allocation of `layout.allocation_size()` bytes, aligned to 64,
    /// zeroed before first use, that stays valid and shared only through this protocol while the
    /// client (or any copy of its bytes) is in use. Clients and the server of one allocation must
    /// use the same layout.
    #[cfg(not(loom))]
    pub unsafe fn new(layout: &Layout, base: *mut u8) -> Client {
        // SAFETY: all offsets are within the allocation the caller vouches for.
        unsafe {
            Client {
                view: View {
                    port_count: layout.port_count(),
                    // The legacy layout has no doorbell: its first bytes are mailboxes.
                    doorbell: if layout.has_doorbell() {
                        base
                    } else {
                        ptr::null_mut()
                    },
                    inbox: base.add(layout.client_inbox_offset()) as *const AtomicU32,
                    outbox: base.add(layout.client_outbox_offset()) as *const AtomicU32,
                    header: base.add(layout.header_offset()) as *mut Header,
                    packet: base.add(layout.packet_offset()) as *mut Buffer,
                },
                lock: [const { AtomicU32::new(0) }; LOCK_WORDS],
            }
        }
    }

    /// A client over separately allocated regions (used by the loom models, whose atomics
    /// cannot live in raw bytes).
    ///
    /// # Safety
    /// Each pointer must address `port_count` elements (`packet`: `port_count * lane_size`)
    /// shared with one server through this protocol; `port_count` must be at most 32 under loom.
    #[cfg(loom)]
    pub unsafe fn from_parts(
        port_count: u32,
        inbox: *const AtomicU32,
        outbox: *const AtomicU32,
        header: *mut Header,
        packet: *mut Buffer,
    ) -> Client {
        Client {
            view: View {
                port_count,
                doorbell: ptr::null_mut(),
                inbox,
                outbox,
                header,
                packet,
            },
            lock: [AtomicU32::new(0)],
        }
    }

    #[inline(always)]
    fn view(&self) -> View {
        // SAFETY: the fields are plain data inside `self`; volatile reads keep the compiler from
        // replacing them with the values of a static's initializer that the loader overwrote.
        unsafe {
            View {
                port_count: ptr::read_volatile(&self.view.port_count),
                doorbell: ptr::read_volatile(&self.view.doorbell),
                inbox: ptr::read_volatile(&self.view.inbox),
                outbox: ptr::read_volatile(&self.view.outbox),
                header: ptr::read_volatile(&self.view.header),
                packet: ptr::read_volatile(&self.view.packet),
            }
        }
    }

    /// Takes port `index` for the lanes in `mask` if no other warp holds it. The lock bits are
    /// contended by warps of this device only: device-scope ordering, as LLVM's client.
    #[inline(always)]
    fn try_lock<L: Lanes>(&self, lanes: &L, mask: u64, index: u32) -> bool {
        let word = &self.lock[(index / 32) as usize % LOCK_WORDS];
        let bit = 1u32 << (index % 32);
        // Every executing lane takes part; lanes outside `mask` OR in nothing, so that a thread
        // running alongside the warp (independent thread scheduling) can never own the lock.
        let in_mask = mask & (1u64 << lanes.lane_id()) != 0;
        let before = sync::lock_fetch_or(word, if in_mask { bit } else { 0 });
        let already_set = lanes.ballot(mask, before & bit != 0);
        // At most one lane can have found the bit clear; if one did, the warp holds the lock.
        let holding = already_set != mask;
        if holding {
            sync::lock_acquire_fence();
        }
        holding
    }

    #[inline(always)]
    fn unlock<L: Lanes>(&self, lanes: &L, mask: u64, index: u32) {
        sync::lock_release_fence();
        if lanes.is_first_lane(mask) {
            let word = &self.lock[(index / 32) as usize % LOCK_WORDS];
            sync::lock_fetch_and(word, !(1u32 << (index % 32)));
        }
        lanes.sync(mask);
    }

    /// Opens a port for `OPCODE` for the calling warp, spinning until one is free. Returns
    /// `None` only if the loader never filled in this client (no ports).
    ///
    /// The opcode is a constant, as in LLVM's client (`open<opcode>()`): each opcode's open is
    /// its own code, so lanes of one warp that diverged into, say, a `println` and an
    /// `eprintln` can never be regrouped into one active mask and share a port whose header
    /// names only one of the two.
    // Without the hint the host build called it and got the `Port` back through memory
    // (written field by field, read back in 16-byte moves): store-forwarding stalls that, with
    // `send`/`recv` also not inlined, doubled a round trip's instructions (bench row "RPC round
    // trip on one thread"). LLVM's client is `inline` as well.
    #[inline]
    pub fn open<'a, const OPCODE: u32, L: Lanes>(&'a self, lanes: &'a L) -> Option<Port<'a, L>> {
        self.open_port(lanes, OPCODE)
    }

    /// [`Client::open`] with an opcode chosen at run time, for a host thread: it is alone in its
    /// "warp" (its mask is its own lane), so no other lane can join its port.
    #[inline]
    pub fn open_on_host<'a>(
        &'a self,
        lane: &'a HostLane,
        opcode: u32,
    ) -> Option<Port<'a, HostLane>> {
        self.open_port(lane, opcode)
    }

    #[inline(always)]
    fn open_port<'a, L: Lanes>(&'a self, lanes: &'a L, opcode: u32) -> Option<Port<'a, L>> {
        let view = self.view();
        if view.port_count == 0 || view.port_count > MAX_PORT_COUNT {
            return None;
        }
        let waits = host_waits(lanes, view.doorbell);
        let mut index = 0u32;
        let mut laps = 0u32;
        // Set while this lap counts as a sleeper on the opener sequence (see `host_waits`).
        let mut sleep_token = None;
        loop {
            if index == 0 && laps >= CHECKS_BEFORE_SLEEP {
                sleep_token = waits.map(|waits| waits.opener_prepare());
            }
            let mask = lanes.lane_mask();
            // Lanes that diverged and re-converged must agree on the port they try.
            index = lanes.broadcast(mask, index);
            if self.try_lock(lanes, mask, index) {
                // SAFETY: `index < port_count`, inside the mailbox arrays of the allocation.
                let (inbox, outbox) = unsafe {
                    (
                        sync::load_mailbox(&*view.inbox.add(index as usize)),
                        sync::load_mailbox(&*view.outbox.add(index as usize)),
                    )
                };
                let inbox = lanes.broadcast(mask, inbox);
                let outbox = lanes.broadcast(mask, outbox);
                if inbox == outbox {
                    // Order our header writes after the server's last reads of this port (it
                    // handed the port back with a release). Without this the header store races
                    // with the server's read of the previous request's header (found by Miri).
                    sync::acquire_fence();
                    if lanes.is_first_lane(mask) {
                        // SAFETY: the port is ours (locked and client-owned), so nobody else
                        // touches its header until our first send publishes it.
                        unsafe {
                            let header = view.header.add(index as usize);
                            ptr::addr_of_mut!((*header).opcode).write(opcode);
                            ptr::addr_of_mut!((*header).mask).write(mask);
                        }
                    }
                    lanes.sync(mask);
                    notify(lanes, mask, view.doorbell);
                    if let (Some(waits), Some(token)) = (waits, sleep_token) {
                        waits.opener_sleep(token, false);
                    }
                    return Some(Port {
                        client: self,
                        lanes,
                        view,
                        lane_mask: mask,
                        index,
                        out: outbox,
                        receive: false,
                        owns_buffer: true,
                        waits,
                    });
                }
                // Still with the server (a fire-and-forget send not yet read): try the next.
                self.unlock(lanes, mask, index);
            }
            index += 1;
            if index == view.port_count {
                index = 0;
                match (waits, sleep_token.take()) {
                    // A whole lap found no free port since the token was taken: sleep until a
                    // port is unlocked or handed back.
                    (Some(waits), Some(token)) => waits.opener_sleep(token, true),
                    _ => lanes.sleep_briefly(laps),
                }
                laps = laps.saturating_add(1);
            }
        }
    }
}

/// The host waits block the doorbell record names, when this lane can block and the host
/// installed one.
#[inline(always)]
fn host_waits<L: Lanes>(lanes: &L, doorbell: *mut u8) -> Option<HostWaits> {
    #[cfg(loom)]
    {
        // The loom models have no doorbell, and their waits must stay yields.
        let _ = (lanes, doorbell);
        None
    }
    #[cfg(not(loom))]
    {
        if !lanes.blocking_waits() || doorbell.is_null() {
            return None;
        }
        let record = doorbell as *const Doorbell;
        // SAFETY: a non-null doorbell pointer is the start of the shared allocation, where the
        // loader wrote the 64-byte record before launch (volatile: written outside our view).
        let words = unsafe { ptr::read_volatile(ptr::addr_of!((*record).host_waits)) };
        // SAFETY: a host that names a block there allocated it as `host_waits` requires
        // (zeroed, `Layout::host_waits_size()` bytes, outliving the launch).
        unsafe { HostWaits::new(words as usize as *const AtomicU32) }
    }
}

/// Rings the doorbell, if the loader installed one: counts one more open request and, when it is
/// the first, posts the event id and raises the interrupt (as LLVM libc's client does at open).
#[inline(always)]
fn notify<L: Lanes>(lanes: &L, mask: u64, doorbell: *mut u8) {
    #[cfg(loom)]
    {
        // The loom models have no doorbell (`from_parts` leaves it null).
        let _ = (lanes, mask, doorbell);
    }
    #[cfg(not(loom))]
    {
        if doorbell.is_null() {
            return;
        }
        let record = doorbell as *const Doorbell;
        // SAFETY: a non-null doorbell pointer is the start of the shared allocation (current
        // layout), where the loader wrote the 64-byte record before launch; the reads are
        // volatile because the record is outside what the compiler can see change.
        let (value, mailbox, event_id) = unsafe {
            (
                ptr::read_volatile(ptr::addr_of!((*record).value)),
                ptr::read_volatile(ptr::addr_of!((*record).mailbox)),
                ptr::read_volatile(ptr::addr_of!((*record).event_id)),
            )
        };
        if value == 0 {
            return;
        }
        let event_id = lanes.broadcast(mask, event_id);
        if lanes.is_first_lane(mask) {
            // SAFETY: the loader points `value` at an 8-byte aligned u64 counter that outlives
            // the launch and is only accessed atomically.
            let counter = unsafe { &*(value as usize as *const sync::AtomicU64) };
            if sync::doorbell_ring(counter) == 0 {
                if mailbox != 0 {
                    // SAFETY: as for `value`: the loader's event mailbox, a live aligned u64.
                    let mailbox = unsafe { &*(mailbox as usize as *const sync::AtomicU64) };
                    sync::doorbell_post(mailbox, u64::from(event_id));
                }
                sync::release_fence();
                lanes.signal_interrupt(event_id);
            }
        }
    }
}

/// A port held by one warp; closes (unlocks) on drop.
pub struct Port<'a, L: Lanes> {
    client: &'a Client,
    lanes: &'a L,
    view: View,
    lane_mask: u64,
    index: u32,
    /// Our last outbox value; never re-read from memory.
    out: u32,
    /// The previous operation was a `recv`.
    receive: bool,
    /// We own the packet (it is safe to write without waiting).
    owns_buffer: bool,
    /// Sleep and wake instead of polling (host lanes with a host that installed the block).
    waits: Option<HostWaits>,
}

impl<L: Lanes> Port<'_, L> {
    /// The port's index in the shared allocation.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The lanes taking part (the active mask at open).
    pub fn lane_mask(&self) -> u64 {
        self.lane_mask
    }

    #[inline(always)]
    fn inbox_word(&self) -> &AtomicU32 {
        // SAFETY: `index < port_count`: inside the client inbox array.
        unsafe { &*self.view.inbox.add(self.index as usize) }
    }

    #[inline(always)]
    fn load_inbox(&self) -> u32 {
        let value = sync::load_mailbox(self.inbox_word());
        self.lanes.broadcast(self.lane_mask, value)
    }

    #[inline(always)]
    fn wait_for_ownership(&self, mut inbox: u32) {
        // The client owns the packet when both mailboxes agree.
        let mut attempt = 0u32;
        while inbox != self.out {
            match self.waits {
                Some(waits) if attempt >= CHECKS_BEFORE_SLEEP => {
                    waits.sleep_on_port(self.index, self.inbox_word(), inbox)
                }
                _ => self.lanes.sleep_briefly(attempt),
            }
            attempt = attempt.saturating_add(1);
            inbox = self.load_inbox();
        }
        sync::acquire_fence();
    }

    /// Hands the packet over. As in LLVM's client, every active lane releases its own writes
    /// (a system-scope fence) and then stores the new outbox value itself, so whichever lane's
    /// store the server sees first, that lane's slot is published; the warp barrier before it
    /// orders every lane's slot before every lane's fence as well.
    #[inline(always)]
    fn invert_outbox(&mut self) {
        let next = self.out ^ 1;
        self.lanes.sync(self.lane_mask);
        sync::release_fence();
        // SAFETY: `index < port_count`: inside the client outbox array. Every lane stores the
        // same value.
        unsafe { sync::store_mailbox(&*self.view.outbox.add(self.index as usize), next) };
        if let Some(waits) = self.waits {
            if self.lanes.is_first_lane(self.lane_mask) {
                waits.wake_server();
            }
        }
        self.out = next;
    }

    #[inline(always)]
    fn my_slot(&self) -> *mut Buffer {
        let slot =
            self.index as usize * self.lanes.lane_size() as usize + self.lanes.lane_id() as usize;
        // SAFETY: `index < port_count` and `lane_id < lane_size`: inside the packet array.
        unsafe { self.view.packet.add(slot) }
    }

    /// Fills this lane's 64-byte slot with `fill(slot, lane_id)` and hands the packet over.
    #[inline]
    pub fn send(&mut self, fill: impl FnOnce(&mut Buffer, u32)) {
        let inbox = if self.owns_buffer {
            self.out
        } else {
            self.load_inbox()
        };
        self.wait_for_ownership(inbox);
        // SAFETY: the packet is ours until we flip the outbox, and only this lane uses its slot.
        fill(unsafe { &mut *self.my_slot() }, self.lanes.lane_id());
        self.invert_outbox();
        self.owns_buffer = false;
        self.receive = false;
    }

    /// The first half of every receive: hands a packet received before back (two receives in
    /// a row), then waits until the server's reply is ours.
    #[inline(always)]
    fn wait_for_reply(&mut self) {
        if self.receive {
            self.invert_outbox();
            self.owns_buffer = false;
        }
        let inbox = if self.owns_buffer {
            self.out
        } else {
            self.load_inbox()
        };
        self.wait_for_ownership(inbox);
    }

    /// Waits for the server's reply and reads this lane's slot with `use_reply(slot, lane_id)`.
    #[inline]
    pub fn recv(&mut self, use_reply: impl FnOnce(&Buffer, u32)) {
        self.wait_for_reply();
        // SAFETY: the packet is ours until we flip the outbox again.
        use_reply(unsafe { &*self.my_slot() }, self.lanes.lane_id());
        self.receive = true;
        self.owns_buffer = true;
    }

    /// `send(fill)` then `recv(use_reply)`.
    #[inline]
    pub fn send_and_recv(
        &mut self,
        fill: impl FnOnce(&mut Buffer, u32),
        use_reply: impl FnOnce(&Buffer, u32),
    ) {
        self.send(fill);
        self.recv(use_reply);
    }

    /// Sends `data` (this lane's own bytes; lanes may send different lengths): a first packet
    /// with the length and up to 56 bytes, then 64 bytes per packet until every lane is done.
    pub fn send_n(&mut self, data: &[u8]) {
        self.send_n_parts(&[data]);
    }

    /// [`Port::send_n`] of the concatenation of `parts`, without copying them into one buffer
    /// first (the device's panic handler has no allocator): the server receives one byte string.
    pub fn send_n_parts(&mut self, parts: &[&[u8]]) {
        let size = parts
            .iter()
            .fold(0usize, |sum, part| sum.saturating_add(part.len()));
        self.send(|buffer, _| {
            buffer.data[0] = size as u64;
            store_parts(&mut buffer.as_bytes_mut()[8..], parts, 0);
        });
        let mut offset = FIRST_PACKET_PAYLOAD;
        while self.lanes.ballot(self.lane_mask, offset < size) != 0 {
            self.send(|buffer, _| store_parts(buffer.as_bytes_mut(), parts, offset));
            offset += 64;
        }
    }

    /// A `recv` that another `recv` will follow: this lane's slot is copied out and the packet
    /// handed back at once, so the server writes the next one while we store this copy (the next
    /// `recv` would otherwise flip first and only then wait). Only for a `recv` followed by a
    /// `recv`: after the last one of a sequence the packet must stay with us.
    #[inline(always)]
    fn recv_handing_back(&mut self, use_reply: impl FnOnce(&Buffer)) {
        self.wait_for_reply();
        // SAFETY: the packet is ours until the flip below; the copy is read before it (the flip
        // starts with a release fence).
        let reply = unsafe { ptr::read(self.my_slot()) };
        self.invert_outbox();
        self.owns_buffer = false;
        self.receive = false;
        use_reply(&reply);
    }

    /// Receives a byte string sent with `send_n` into `dst`, returning its full length. Bytes past
    /// `dst.len()` are received and dropped.
    pub fn recv_n(&mut self, dst: &mut [u8]) -> u64 {
        let mut size = 0u64;
        self.recv(|buffer, _| {
            size = buffer.data[0];
            let payload = &buffer.as_bytes()[8..];
            copy_into(
                dst,
                payload.get(..clamp(size, payload.len())).unwrap_or(&[]),
            );
        });
        let mut offset = FIRST_PACKET_PAYLOAD as u64;
        let mut more = self.lanes.ballot(self.lane_mask, offset < size) != 0;
        while more {
            // Whether any lane has a packet after this one: then this one is handed back early.
            let more_after = self
                .lanes
                .ballot(self.lane_mask, offset < size.saturating_sub(64))
                != 0;
            let mut use_reply = |buffer: &Buffer| {
                if offset < size {
                    load_chunk(dst, offset, size - offset, buffer.as_bytes());
                }
            };
            if more_after {
                self.recv_handing_back(&mut use_reply);
            } else {
                self.recv(|buffer, _| use_reply(buffer));
            }
            offset += 64;
            more = more_after;
        }
        size
    }
}

/// Fills `packet` with the bytes of the concatenation of `parts` from `offset` on: a whole
/// 64-byte packet from one part at once (one fixed-size copy instead of a byte loop), else what
/// is left, part by part. Nothing here can panic.
#[inline(always)]
fn store_parts(packet: &mut [u8], parts: &[&[u8]], mut offset: usize) {
    let mut packet = packet;
    for part in parts {
        let Some(rest) = part.get(offset..) else {
            // The packet starts past this part.
            offset = offset.saturating_sub(part.len());
            continue;
        };
        offset = 0;
        if let (Some(to), Some(from)) = (packet.first_chunk_mut::<64>(), rest.first_chunk::<64>()) {
            *to = *from;
            return;
        }
        copy_into(packet, rest);
        match packet.get_mut(rest.len()..) {
            Some(unfilled) if !unfilled.is_empty() => packet = unfilled,
            _ => return,
        }
    }
}

/// Stores the first `min(remaining, 64)` bytes of `packet` at `dst[offset..]`, dropping what does
/// not fit: a fixed-size copy for a whole packet that fits, else the byte loop. Cannot panic.
#[inline(always)]
fn load_chunk(dst: &mut [u8], offset: u64, remaining: u64, packet: &[u8; 64]) {
    let Some(rest) = dst.get_mut(clamp(offset, dst.len())..) else {
        return;
    };
    if remaining >= 64 {
        if let Some(full) = rest.first_chunk_mut::<64>() {
            *full = *packet;
            return;
        }
    }
    copy_into(rest, packet.get(..clamp(remaining, 64)).unwrap_or(&[]));
}

/// Copies as many bytes as fit (`min` of both lengths). Written without slicing so that the
/// client path has no panic branch: the device panic handler itself reports through it.
#[inline(always)]
fn copy_into(dst: &mut [u8], src: &[u8]) {
    for (to, from) in dst.iter_mut().zip(src) {
        *to = *from;
    }
}

/// `min(value, limit)` as a usize.
#[inline(always)]
fn clamp(value: u64, limit: usize) -> usize {
    if value < limit as u64 {
        value as usize
    } else {
        limit
    }
}

impl<L: Lanes> Drop for Port<'_, L> {
    fn drop(&mut self) {
        self.lanes.sync(self.lane_mask);
        // The client never hands the packet back on close: after a send it is the server's,
        // after a recv the next opener may write it directly.
        self.client.unlock(self.lanes, self.lane_mask, self.index);
        if let Some(waits) = self.waits {
            if self.lanes.is_first_lane(self.lane_mask) {
                waits.wake_openers();
            }
        }
    }
}
