//! The shared allocation and the client object, byte for byte as LLVM libc lays them out.
//!
//! For `N` ports and lane size `L` (current layout, with the 64-byte doorbell first):
//!
//! | region | offset | size | written by |
//! | --- | --- | --- | --- |
//! | doorbell | 0 | 64 | host, once |
//! | mailbox A: client inbox, server outbox | 64 | 4·N | server |
//! | mailbox B: client outbox, server inbox | 64 + 4·N | 4·N | client |
//! | headers (mask, opcode) | 64 + 8·N | 16·N | client, at open |
//! | packets, `L` buffers of 64 bytes per port | 64 + 24·N | 64·L·N | both, in turn |
//!
//! The legacy layout (LLVM libc before 2026-03) is the same without the doorbell. The whole
//! allocation must be zero before first use (every port then belongs to the client):
//! [`Layout::zero`] does it.

use core::fmt;

/// Port limit of the current layout; it sizes the lock bit array of the client object.
pub const MAX_PORT_COUNT: u32 = 16384;
/// Port limit of the legacy layout (no doorbell).
pub const LEGACY_MAX_PORT_COUNT: u32 = 4096;
/// `sizeof(rpc::Client)` of the current layout.
pub const CLIENT_SIZE: usize = 2096;
/// `sizeof(rpc::Client)` of the legacy layout.
pub const LEGACY_CLIENT_SIZE: usize = 552;
/// Size of the doorbell record at the start of the current layout.
pub const DOORBELL_SIZE: usize = 64;
/// Lane sizes the protocol is defined for: a CPU client, an NVIDIA warp, an AMD wave32/wave64.
pub const SUPPORTED_LANE_SIZES: [u32; 3] = [1, 32, 64];
/// Payload bytes in the first packet of a `send_n` (the first 8 carry the length).
pub const FIRST_PACKET_PAYLOAD: usize = 56;

/// Offset of the lock array inside the current client object (after `port_count`, 4 bytes of
/// padding and five pointers).
pub const CLIENT_LOCK_OFFSET: usize = 48;
/// Offset of the lock array inside the legacy client object (no doorbell pointer).
pub const LEGACY_CLIENT_LOCK_OFFSET: usize = 40;

/// One lane's 64-byte slot of a port's packet.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Buffer {
    /// The payload as eight little-endian words; `data[0]` is the length in `send_n`.
    pub data: [u64; 8],
}

impl Buffer {
    /// The payload as bytes.
    pub fn as_bytes(&self) -> &[u8; 64] {
        // SAFETY: `[u64; 8]` and `[u8; 64]` have the same size, every bit pattern is a valid u8,
        // and the alignment requirement of the target (1) is weaker than the source's.
        unsafe { &*(self.data.as_ptr() as *const [u8; 64]) }
    }

    /// The payload as mutable bytes.
    pub fn as_bytes_mut(&mut self) -> &mut [u8; 64] {
        // SAFETY: as in `as_bytes`; every byte pattern is also a valid `[u64; 8]`, so writes
        // through the byte view cannot create an invalid value.
        unsafe { &mut *(self.data.as_mut_ptr() as *mut [u8; 64]) }
    }
}

/// Per-port header written by the client when it opens the port.
#[repr(C)]
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Header {
    /// Lanes taking part in the conversation (bit `i` = lane `i`).
    pub mask: u64,
    /// What the client asks for (see [`crate::opcode`]).
    pub opcode: u32,
    /// Tail padding, keeps the size at 16 as in C.
    pub padding: u32,
}

/// The doorbell record at offset 0 of the current layout. All zero means disabled. When `value`
/// is set, every client `open` adds one to the counter it points to (and, on the 0 → 1 edge,
/// posts `event_id` to `mailbox` and raises the device interrupt where the target can); the
/// server subtracts one when it closes the port. So the counter is the number of requests the
/// server has not finished, and a host thread can sleep while it is zero
/// (`Server::wait_for_request`). [`Layout::write_doorbell`] installs one.
#[repr(C, align(64))]
#[derive(Clone, Copy, Default, Debug)]
pub struct Doorbell {
    /// Host address of the counter of open requests (0 = no doorbell).
    pub value: u64,
    /// Host address of the interrupt event mailbox.
    pub mailbox: u64,
    /// Event id written to the mailbox.
    pub event_id: u32,
    /// Our extension, in bytes LLVM's record leaves as padding (zero unless a host writes it):
    /// the host address of the [`crate::host_waits`] block when every client is a host thread,
    /// so that waits sleep in the kernel instead of polling. Read only by clients whose
    /// [`crate::Lanes::blocking_waits`] is true; GPU clients ignore it.
    pub host_waits: u64,
}

#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(core::mem::size_of::<Buffer>() == 64);
    assert!(core::mem::align_of::<Buffer>() == 8);
    assert!(core::mem::size_of::<Header>() == 16);
    assert!(core::mem::size_of::<Doorbell>() == DOORBELL_SIZE);
    assert!(core::mem::offset_of!(Doorbell, event_id) == 16);
    assert!(core::mem::offset_of!(Doorbell, host_waits) == 24);
};

/// Why a layout cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// The port count is 0 or above the layout's limit.
    PortCount {
        /// The port count asked for.
        requested: u32,
        /// The most the layout supports.
        max: u32,
    },
    /// The lane size is not 1, 32 or 64.
    LaneSize(u32),
    /// The image's `__llvm_rpc_client` symbol has a size no known layout has.
    UnknownClientSize(u64),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayoutError::PortCount { requested, max } => {
                write!(f, "RPC port count {requested} is outside 1..={max}")
            }
            LayoutError::LaneSize(size) => {
                write!(f, "RPC lane size {size} is not one of 1, 32, 64")
            }
            LayoutError::UnknownClientSize(size) => write!(
                f,
                "`__llvm_rpc_client` is {size} bytes; known LLVM libc layouts have \
                 {CLIENT_SIZE} (current) or {LEGACY_CLIENT_SIZE} (before 2026-03)"
            ),
        }
    }
}

impl core::error::Error for LayoutError {}

/// Geometry of one shared allocation. All offsets are from the allocation's base.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    port_count: u32,
    lane_size: u32,
    doorbell: bool,
}

impl Layout {
    /// The current layout (doorbell first, up to [`MAX_PORT_COUNT`] ports).
    pub const fn new(port_count: u32, lane_size: u32) -> Result<Layout, LayoutError> {
        Layout::build(port_count, lane_size, true)
    }

    /// The legacy layout (no doorbell, up to [`LEGACY_MAX_PORT_COUNT`] ports).
    pub const fn legacy(port_count: u32, lane_size: u32) -> Result<Layout, LayoutError> {
        Layout::build(port_count, lane_size, false)
    }

    /// The layout an image expects, from the byte size of its `__llvm_rpc_client` symbol. The
    /// port count is clamped to that layout's limit (the loader must use the same count for the
    /// client object and the server).
    pub const fn for_client_symbol_size(
        symbol_size: u64,
        port_count: u32,
        lane_size: u32,
    ) -> Result<Layout, LayoutError> {
        let doorbell = if symbol_size == CLIENT_SIZE as u64 {
            true
        } else if symbol_size == LEGACY_CLIENT_SIZE as u64 {
            false
        } else {
            return Err(LayoutError::UnknownClientSize(symbol_size));
        };
        let max = if doorbell {
            MAX_PORT_COUNT
        } else {
            LEGACY_MAX_PORT_COUNT
        };
        let port_count = if port_count > max { max } else { port_count };
        Layout::build(port_count, lane_size, doorbell)
    }

    const fn build(port_count: u32, lane_size: u32, doorbell: bool) -> Result<Layout, LayoutError> {
        let max = if doorbell {
            MAX_PORT_COUNT
        } else {
            LEGACY_MAX_PORT_COUNT
        };
        if port_count == 0 || port_count > max {
            return Err(LayoutError::PortCount {
                requested: port_count,
                max,
            });
        }
        if !matches!(lane_size, 1 | 32 | 64) {
            return Err(LayoutError::LaneSize(lane_size));
        }
        Ok(Layout {
            port_count,
            lane_size,
            doorbell,
        })
    }

    /// Number of ports.
    pub const fn port_count(&self) -> u32 {
        self.port_count
    }

    /// Lanes per port (the client's warp width).
    pub const fn lane_size(&self) -> u32 {
        self.lane_size
    }

    /// Whether the allocation starts with the 64-byte doorbell (current layout).
    pub const fn has_doorbell(&self) -> bool {
        self.doorbell
    }

    /// Size of the client object this layout pairs with ([`CLIENT_SIZE`] or
    /// [`LEGACY_CLIENT_SIZE`]).
    pub const fn client_size(&self) -> usize {
        if self.doorbell {
            CLIENT_SIZE
        } else {
            LEGACY_CLIENT_SIZE
        }
    }

    const fn start(&self) -> usize {
        if self.doorbell {
            DOORBELL_SIZE
        } else {
            0
        }
    }

    /// Offset of the doorbell, if the layout has one.
    pub const fn doorbell_offset(&self) -> Option<usize> {
        if self.doorbell {
            Some(0)
        } else {
            None
        }
    }

    /// Mailbox A: written by the server, the client's inbox.
    pub const fn client_inbox_offset(&self) -> usize {
        self.start()
    }

    /// Mailbox B: written by the client, the server's inbox.
    pub const fn client_outbox_offset(&self) -> usize {
        self.start() + 4 * self.port_count as usize
    }

    /// The per-port [`Header`] array.
    pub const fn header_offset(&self) -> usize {
        self.start() + 8 * self.port_count as usize
    }

    /// The packet array: port `i`, lane `j` is at `packet_offset() + (i * lane_size + j) * 64`.
    pub const fn packet_offset(&self) -> usize {
        self.start() + 24 * self.port_count as usize
    }

    /// Bytes of the whole shared allocation (`[64] + 24·N + 64·N·L`).
    pub const fn allocation_size(&self) -> usize {
        self.packet_offset() + 64 * self.port_count as usize * self.lane_size as usize
    }

    /// Bytes of the zeroed, 64-byte aligned host block that makes waits block when both sides
    /// are host threads (see [`crate::host_waits`]).
    pub const fn host_waits_size(&self) -> usize {
        crate::host_waits::size(self.port_count)
    }

    /// Zeroes an allocation before first use, so that every port starts owned by the client and
    /// the doorbell is disabled.
    ///
    /// # Safety
    /// `base` must be valid for writes of [`Layout::allocation_size`] bytes and nobody may use the
    /// allocation concurrently.
    pub unsafe fn zero(&self, base: *mut u8) {
        // SAFETY: the caller guarantees `base` is writable for the allocation size and unused.
        unsafe { core::ptr::write_bytes(base, 0, self.allocation_size()) }
    }

    /// Writes the doorbell record at the start of the allocation (before any client runs; the
    /// server takes its counter separately, see [`crate::Server::attach_doorbell`], and never
    /// reads the record back from shared memory). Returns `false`, writing nothing, for the
    /// legacy layout, which has no doorbell.
    ///
    /// # Safety
    /// `base` must be valid for writes of [`Layout::allocation_size`] bytes, aligned to 64, and
    /// unused by any client at the time; the addresses in `record` must stay valid (and be
    /// reachable by the client at those addresses) while clients use the allocation.
    pub unsafe fn write_doorbell(&self, base: *mut u8, record: Doorbell) -> bool {
        if !self.doorbell {
            return false;
        }
        // SAFETY: the caller guarantees 64-byte alignment and room for the 64-byte record.
        unsafe { core::ptr::write(base as *mut Doorbell, record) };
        true
    }

    /// The bytes a loader copies into the image's `__llvm_rpc_client` symbol, for an allocation
    /// whose base the device sees at `device_base` (with unified addressing: the host pointer).
    pub fn client_image(&self, device_base: u64) -> ClientImage {
        let mut bytes = [0u8; CLIENT_SIZE];
        let addr = |offset: usize| device_base.wrapping_add(offset as u64);
        bytes[0..4].copy_from_slice(&self.port_count.to_le_bytes());
        let pointers: &[u64] = if self.doorbell {
            &[
                addr(0),
                addr(self.client_inbox_offset()),
                addr(self.client_outbox_offset()),
                addr(self.header_offset()),
                addr(self.packet_offset()),
            ]
        } else {
            &[
                addr(self.client_inbox_offset()),
                addr(self.client_outbox_offset()),
                addr(self.header_offset()),
                addr(self.packet_offset()),
            ]
        };
        for (slot, pointer) in bytes[8..].chunks_exact_mut(8).zip(pointers) {
            slot.copy_from_slice(&pointer.to_le_bytes());
        }
        // The lock array that follows stays zero: no port is locked.
        ClientImage {
            bytes,
            len: self.client_size(),
        }
    }
}

/// Raw bytes of a client object, ready to be copied into `__llvm_rpc_client`.
#[derive(Clone)]
pub struct ClientImage {
    bytes: [u8; CLIENT_SIZE],
    len: usize,
}

impl ClientImage {
    /// The object's bytes ([`CLIENT_SIZE`] or [`LEGACY_CLIENT_SIZE`] long).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl fmt::Debug for ClientImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientImage")
            .field("len", &self.len)
            .field("header", &&self.bytes[..48])
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_layout_offsets_match_the_spec() {
        let layout = Layout::new(4096, 32).unwrap();
        assert_eq!(layout.doorbell_offset(), Some(0));
        assert_eq!(layout.client_inbox_offset(), 64);
        assert_eq!(layout.client_outbox_offset(), 64 + 4 * 4096);
        assert_eq!(layout.header_offset(), 64 + 8 * 4096);
        assert_eq!(layout.packet_offset(), 64 + 24 * 4096);
        // Numbers derived in the spec (llvm-gpu-rpc.md §1.2).
        assert_eq!(layout.allocation_size(), 8_486_976);
        assert_eq!(Layout::new(4096, 64).unwrap().allocation_size(), 16_875_584);
        assert_eq!(Layout::new(8448, 32).unwrap().allocation_size(), 17_504_320);
        assert_eq!(Layout::new(9728, 64).unwrap().allocation_size(), 40_079_424);
        assert_eq!(layout.client_size(), 2096);
    }

    #[test]
    fn legacy_layout_has_no_doorbell() {
        let layout = Layout::legacy(4096, 32).unwrap();
        assert_eq!(layout.doorbell_offset(), None);
        assert_eq!(layout.client_inbox_offset(), 0);
        assert_eq!(layout.client_outbox_offset(), 4 * 4096);
        assert_eq!(layout.header_offset(), 8 * 4096);
        assert_eq!(layout.packet_offset(), 24 * 4096);
        assert_eq!(layout.allocation_size(), 24 * 4096 + 64 * 4096 * 32);
        assert_eq!(layout.client_size(), 552);
    }

    #[test]
    fn bad_geometry_is_an_error() {
        assert_eq!(
            Layout::new(0, 32),
            Err(LayoutError::PortCount {
                requested: 0,
                max: 16384
            })
        );
        assert!(Layout::new(16385, 32).is_err());
        assert!(Layout::legacy(4097, 32).is_err());
        assert_eq!(Layout::new(1, 16), Err(LayoutError::LaneSize(16)));
        assert!(Layout::new(16384, 64).is_ok());
    }

    #[test]
    fn layout_is_picked_from_the_client_symbol_size() {
        let current = Layout::for_client_symbol_size(2096, 20000, 32).unwrap();
        assert!(current.has_doorbell());
        assert_eq!(current.port_count(), 16384);
        let legacy = Layout::for_client_symbol_size(552, 20000, 64).unwrap();
        assert!(!legacy.has_doorbell());
        assert_eq!(legacy.port_count(), 4096);
        assert_eq!(
            Layout::for_client_symbol_size(560, 64, 32),
            Err(LayoutError::UnknownClientSize(560))
        );
        let message = Layout::for_client_symbol_size(8, 1, 1).unwrap_err();
        assert!(std::format!("{message}").contains("is 8 bytes"));
    }

    #[test]
    fn client_image_holds_the_five_pointers_and_a_zero_lock_array() {
        let layout = Layout::new(16, 32).unwrap();
        let base = 0x7f00_0000_0000u64;
        let image = layout.client_image(base);
        let bytes = image.as_bytes();
        assert_eq!(bytes.len(), 2096);
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(u32::from_le_bytes(bytes[0..4].try_into().unwrap()), 16);
        assert_eq!(word(8), base);
        assert_eq!(word(16), base + 64);
        assert_eq!(word(24), base + 64 + 64);
        assert_eq!(word(32), base + 64 + 128);
        assert_eq!(word(40), base + 64 + 384);
        assert!(bytes[CLIENT_LOCK_OFFSET..].iter().all(|&b| b == 0));

        let legacy = Layout::legacy(16, 32).unwrap().client_image(base);
        let bytes = legacy.as_bytes();
        assert_eq!(bytes.len(), 552);
        let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(word(8), base);
        assert_eq!(word(16), base + 64);
        assert_eq!(word(24), base + 128);
        assert_eq!(word(32), base + 384);
        assert_eq!(LEGACY_CLIENT_LOCK_OFFSET, 40);
        assert_eq!(LEGACY_CLIENT_LOCK_OFFSET + 4 * 4096 / 32, 552);
        assert!(bytes[LEGACY_CLIENT_LOCK_OFFSET..].iter().all(|&b| b == 0));
    }
}
