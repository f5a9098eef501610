//! Opcode numbers and the message sequence of each.
//!
//! An opcode is 32 bits; the top byte names who owns it. LLVM libc uses `'c'` (`0x63`), the
//! offload runtime `'o'`, flang-rt `'f'`; cargo-gpurun's own opcodes use `'g'` (`0x67`).
//!
//! Notation below: `C→` a client `send`, `←S` a server `send` (client `recv`); `send_n` /
//! `recv_n` move byte strings of any length. Each `C→` on one side is exactly one `recv` on the
//! other. Where a libc opcode's reply is the host function's return value, it is widened to u64
//! in `data[0]`.
//!
//! | opcode | sequence |
//! | --- | --- |
//! | [`NOOP`] | C→ one packet, ignored |
//! | [`EXIT`] | C→ empty; ←S empty; C→ `data[0]` low 32 bits = status. The host ends the program with it |
//! | [`WRITE_TO_STDOUT`], [`WRITE_TO_STDERR`] | C→ `send_n(bytes)`; ←S `data[0]` = bytes written |
//! | [`WRITE_TO_STREAM`] | C→ `data[0]` = host `FILE*`; C→ `send_n(bytes)`; ←S `data[0]` = bytes written |
//! | [`WRITE_TO_STDOUT_NEWLINE`] | as `WRITE_TO_STDOUT`; the host appends `\n` (counted) |
//! | [`MALLOC`] | C→ `data[0]` = size; ←S `data[0]` = device pointer (0 on failure) |
//! | [`FREE`] | C→ `data[0]` = pointer; no reply (the client closes at once) |
//! | [`HOST_CALL`] | C→ `send_n(argument blob)`; C→ `data[0]` = host function pointer; ←S `data[0]` = result |
//! | [`ABORT`] | C→ empty; ←S empty; C→ empty. The host aborts the program |
//! | [`TEST_INCREMENT`] | C→ `data[0]` = n; ←S `data[0]` = n + 1 |
//! | [`PANIC`] | C→ `send_n(report)`: [`PANIC_HEADER_BYTES`] of [`panic_header`] (the [`PanicLocation`] and the file's length), the file, the message; no reply |
//! | [`TEST_START`] | reserved |
//!
//! The other libc opcodes (streams, printf, files, `system`) follow LLVM libc's `rpc_server.h`;
//! the host server documents each sequence where it serves it (`gpurun-hal`'s
//! `server/stdio.rs`, `printf.rs`, `files.rs`).

/// Builds an opcode of class `class` (one ASCII byte) and number `number`.
pub const fn opcode(class: u8, number: u32) -> u32 {
    ((class as u32) << 24) | (number & 0x00ff_ffff)
}

/// LLVM libc's class.
pub const LIBC_CLASS: u8 = b'c';
/// The offload runtime's class (OpenMP / liboffload).
pub const OFFLOAD_CLASS: u8 = b'o';
/// flang-rt's class.
pub const FLANG_CLASS: u8 = b'f';
/// cargo-gpurun's class.
pub const GPURUN_CLASS: u8 = b'g';

/// The class byte of an opcode.
pub const fn class_of(opcode: u32) -> u8 {
    (opcode >> 24) as u8
}

macro_rules! libc_opcodes {
    ($($(#[$doc:meta])* $name:ident = $number:expr;)*) => {
        $($(#[$doc])* pub const $name: u32 = opcode(LIBC_CLASS, $number);)*
        /// Every LLVM libc opcode known here, with its name.
        pub const LIBC_OPCODES: &[(&str, u32)] = &[$((stringify!($name), $name)),*];
    };
}

libc_opcodes! {
    /// One packet, ignored.
    NOOP = 0;
    /// End the program with a status.
    EXIT = 1;
    /// Write bytes to stdout.
    WRITE_TO_STDOUT = 2;
    /// Write bytes to stderr.
    WRITE_TO_STDERR = 3;
    /// Write bytes to a host `FILE*`.
    WRITE_TO_STREAM = 4;
    /// Write bytes and a newline to stdout (`puts`).
    WRITE_TO_STDOUT_NEWLINE = 5;
    /// `fread` from a stream.
    READ_FROM_STREAM = 6;
    /// `fgets` from a stream.
    READ_FGETS = 7;
    /// `fopen`.
    OPEN_FILE = 8;
    /// `fclose`.
    CLOSE_FILE = 9;
    /// Allocate device memory.
    MALLOC = 10;
    /// Free device memory.
    FREE = 11;
    /// Call a host function with an argument blob.
    HOST_CALL = 12;
    /// Abort the program.
    ABORT = 13;
    /// `feof`.
    FEOF = 14;
    /// `ferror`.
    FERROR = 15;
    /// `clearerr`.
    CLEARERR = 16;
    /// `fseek`.
    FSEEK = 17;
    /// `ftell`.
    FTELL = 18;
    /// `fflush`.
    FFLUSH = 19;
    /// `ungetc`.
    UNGETC = 20;
    /// `printf` to stdout (naturally aligned arguments).
    PRINTF_TO_STDOUT = 21;
    /// `printf` to stderr.
    PRINTF_TO_STDERR = 22;
    /// `printf` to a stream.
    PRINTF_TO_STREAM = 23;
    /// `printf` to stdout (packed arguments).
    PRINTF_TO_STDOUT_PACKED = 24;
    /// `printf` to stderr (packed arguments).
    PRINTF_TO_STDERR_PACKED = 25;
    /// `printf` to a stream (packed arguments).
    PRINTF_TO_STREAM_PACKED = 26;
    /// `remove`.
    REMOVE = 27;
    /// `rename`.
    RENAME = 28;
    /// `system`.
    SYSTEM = 29;
    /// Test: add one to `data[0]`.
    TEST_INCREMENT = 0x8000;
    /// Test: a scripted sequence of sends and receives.
    TEST_INTERFACE = 0x8001;
    /// Test: `recv_n` then `send_n` echo.
    TEST_STREAM = 0x8002;
}

/// liboffload's host call (same protocol as [`HOST_CALL`]).
pub const OFFLOAD_HOST_CALL: u32 = opcode(OFFLOAD_CLASS, 0);

/// A device thread panicked: one byte string, [`panic_header`] then the file and the message.
/// One message, so a storm of panicking threads holds each port for one exchange.
pub const PANIC: u32 = opcode(GPURUN_CLASS, 3);
/// Reserved for test start reports.
pub const TEST_START: u32 = opcode(GPURUN_CLASS, 2);
/// What [`PANIC`] was before it became one message (message, file and location in three
/// sends); an image that still sends it was built by an older `gpurun` runtime.
pub const RETIRED_PANIC: u32 = opcode(GPURUN_CLASS, 1);

/// Bytes of a [`PANIC`] report before its file: the [`PanicLocation`]'s four words and the
/// file's length in bytes, little-endian.
pub const PANIC_HEADER_BYTES: usize = 36;

/// The start of a [`PANIC`] report; the file (`file_len` bytes) and the message follow it.
pub fn panic_header(location: &PanicLocation, file_len: usize) -> [u8; PANIC_HEADER_BYTES] {
    let file_len = u32::try_from(file_len).unwrap_or(u32::MAX);
    let bytes = location
        .to_words()
        .into_iter()
        .flat_map(u64::to_le_bytes)
        .chain(file_len.to_le_bytes());
    // Element by element: the device's panic handler calls this, so it has no panic path.
    let mut header = [0u8; PANIC_HEADER_BYTES];
    for (to, from) in header.iter_mut().zip(bytes) {
        *to = from;
    }
    header
}

/// A [`PANIC`] report split into its location, file and message; `None` when it is shorter
/// than its header or names a file longer than what follows.
pub fn parse_panic(report: &[u8]) -> Option<(PanicLocation, &[u8], &[u8])> {
    let (header, rest) = report.split_first_chunk::<PANIC_HEADER_BYTES>()?;
    let mut words = [0u64; 4];
    for (word, bytes) in words.iter_mut().zip(header.chunks_exact(8)) {
        *word = u64::from_le_bytes(bytes.try_into().ok()?);
    }
    let file_len = u32::from_le_bytes(*header.last_chunk::<4>()?);
    let (file, message) = rest.split_at_checked(usize::try_from(file_len).ok()?)?;
    Some((PanicLocation::from_words(words), file, message))
}

/// Where a device thread panicked, as a [`PANIC`] report's header packs it in four words:
///
/// | word | low 32 bits | high 32 bits |
/// | --- | --- | --- |
/// | 0 | line | column |
/// | 1 | thread x | thread y |
/// | 2 | thread z | block x |
/// | 3 | block y | block z |
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PanicLocation {
    /// Source line (1-based; 0 if unknown).
    pub line: u32,
    /// Source column (1-based; 0 if unknown).
    pub column: u32,
    /// Thread index in its block (x, y, z).
    pub thread: [u32; 3],
    /// Block index in the grid (x, y, z).
    pub block: [u32; 3],
}

impl PanicLocation {
    /// Packs into the first four words of a packet.
    pub const fn to_words(&self) -> [u64; 4] {
        const fn pair(low: u32, high: u32) -> u64 {
            low as u64 | (high as u64) << 32
        }
        [
            pair(self.line, self.column),
            pair(self.thread[0], self.thread[1]),
            pair(self.thread[2], self.block[0]),
            pair(self.block[1], self.block[2]),
        ]
    }

    /// Unpacks from the first four words of a packet.
    pub const fn from_words(words: [u64; 4]) -> PanicLocation {
        const fn low(word: u64) -> u32 {
            word as u32
        }
        const fn high(word: u64) -> u32 {
            (word >> 32) as u32
        }
        PanicLocation {
            line: low(words[0]),
            column: high(words[0]),
            thread: [low(words[1]), high(words[1]), low(words[2])],
            block: [high(words[2]), low(words[3]), high(words[3])],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_numbers_match_llvm() {
        assert_eq!(NOOP, 0x6300_0000);
        assert_eq!(EXIT, 0x6300_0001);
        assert_eq!(WRITE_TO_STDOUT, 0x6300_0002);
        assert_eq!(WRITE_TO_STDERR, 0x6300_0003);
        assert_eq!(WRITE_TO_STREAM, 0x6300_0004);
        assert_eq!(WRITE_TO_STDOUT_NEWLINE, 0x6300_0005);
        assert_eq!(MALLOC, 0x6300_000a);
        assert_eq!(FREE, 0x6300_000b);
        assert_eq!(HOST_CALL, 0x6300_000c);
        assert_eq!(ABORT, 0x6300_000d);
        assert_eq!(SYSTEM, 0x6300_001d);
        assert_eq!(TEST_INCREMENT, 0x6300_8000);
        assert_eq!(TEST_STREAM, 0x6300_8002);
        assert_eq!(OFFLOAD_HOST_CALL, 0x6f00_0000);
        assert_eq!(LIBC_OPCODES.len(), 33);
        assert!(LIBC_OPCODES.iter().all(|&(_, op)| class_of(op) == b'c'));
    }

    #[test]
    fn our_opcodes_are_in_their_own_class() {
        assert_eq!(PANIC, 0x6700_0003);
        assert_eq!(TEST_START, 0x6700_0002);
        assert!(LIBC_OPCODES
            .iter()
            .all(|&(_, op)| op != PANIC && op != TEST_START));
    }

    #[test]
    fn panic_location_round_trips() {
        let location = PanicLocation {
            line: 42,
            column: 7,
            thread: [1, 2, 3],
            block: [u32::MAX, 5, 6],
        };
        let words = location.to_words();
        assert_eq!(words[0], 42 | 7 << 32);
        assert_eq!(PanicLocation::from_words(words), location);
    }

    #[test]
    fn a_panic_report_splits_into_what_was_packed() {
        let location = PanicLocation {
            line: 12,
            column: 5,
            thread: [31, 1, 0],
            block: [7, 0, 2],
        };
        let file = b"src/lib.rs";
        let mut report = panic_header(&location, file.len()).to_vec();
        report.extend_from_slice(file);
        report.extend_from_slice(b"index out of bounds");
        assert_eq!(
            parse_panic(&report),
            Some((location, &file[..], &b"index out of bounds"[..]))
        );
        // An empty file and message are a whole report.
        let empty = panic_header(&location, 0);
        assert_eq!(parse_panic(&empty), Some((location, &[][..], &[][..])));
        // Too short for its header, or naming more file than it carries.
        assert_eq!(parse_panic(&report[..PANIC_HEADER_BYTES - 1]), None);
        let long_file = panic_header(&location, 100);
        assert_eq!(parse_panic(&long_file), None);
    }
}
