//! Test descriptors: one global per `#[gpurun::test]` (`__gpurun_desc_ID`), read from the image
//! so that tests are listed without running anything (docs/abi.md, "Tests").
//!
//! Layout (all integers little-endian): magic `GPRT`, version byte, flags byte, the throughput
//! unit byte of a benchmark (version 3; 0 before), a zero byte, threads x/y/z and blocks x/y/z as
//! `u32`s, the shared memory bytes per block as a `u32` (version 2), a benchmark's throughput per
//! iteration as a `u64` (version 3), the lengths of the module path, the expected panic text and
//! the ignore reason as `u16`s, a zero `u16`, then the three strings. Version 1 has no shared
//! memory field (a 40-byte header), version 2 no throughput (a 44-byte header); both are still
//! read, as tests without shared memory or benchmarks.
//!
//! [`write()`] is the only encoder (a `const fn`: the attribute macros build descriptors at
//! compile time through it, host tools at run time; it writes the current version) and
//! [`decode`] the only decoder. Decoding trusts nothing: lengths are checked against the
//! buffer, strings must be UTF-8, reserved bits and fields must be zero so that a future layout
//! is not misread as this one.

/// The descriptor layout version written (byte 4, and the value of `__gpurun_test_abi_version`).
pub const TEST_ABI_VERSION: u32 = 3;
/// The oldest layout version still read: images built by an older device runtime keep working.
pub const OLDEST_TEST_ABI_VERSION: u32 = 1;
/// Magic bytes at the start of every descriptor.
pub const MAGIC: [u8; 4] = *b"GPRT";
/// Size of the fixed header, before the strings (the largest of every version read).
pub const HEADER_LEN: usize = 52;
/// Size of version 2's header (no throughput field).
pub const HEADER_LEN_V2: usize = 44;
/// Size of version 1's header (no shared memory field).
pub const HEADER_LEN_V1: usize = 40;

/// Whether a descriptor (or an image's `__gpurun_test_abi_version`) of `version` can be read.
pub const fn is_supported_version(version: u32) -> bool {
    version >= OLDEST_TEST_ABI_VERSION && version <= TEST_ABI_VERSION
}

/// `#[ignore]`.
pub const FLAG_IGNORE: u8 = 1 << 0;
/// `#[should_panic]`.
pub const FLAG_SHOULD_PANIC: u8 = 1 << 1;
/// `#[should_panic(expected = "...")]`: the expected text is present.
pub const FLAG_HAS_EXPECTED: u8 = 1 << 2;
/// `#[gpurun::test(gpu_only)]`: the test means nothing on the host emulation.
pub const FLAG_GPU_ONLY: u8 = 1 << 3;
/// `#[gpurun::bench]`: a benchmark, whose kernel takes its iteration count (a `u64`).
pub const FLAG_BENCH: u8 = 1 << 4;
const KNOWN_FLAGS: u8 =
    FLAG_IGNORE | FLAG_SHOULD_PANIC | FLAG_HAS_EXPECTED | FLAG_GPU_ONLY | FLAG_BENCH;

/// Throughput unit byte (6): none.
const UNIT_NONE: u8 = 0;
/// Throughput unit byte (6): bytes per iteration (`bytes = N`).
const UNIT_BYTES: u8 = 1;
/// Throughput unit byte (6): elements per iteration (`elements = N`).
const UNIT_ELEMENTS: u8 = 2;

/// What one iteration of a benchmark processes, as its attribute declares it: the reporters add
/// a rate (MB/s, as libtest's `Bencher::bytes`, or elements per second) to its time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Throughput {
    /// `#[gpurun::bench(bytes = N)]`: bytes read and written per iteration.
    Bytes(u64),
    /// `#[gpurun::bench(elements = N)]`: elements processed per iteration.
    Elements(u64),
}

impl Throughput {
    /// The unit byte and the amount, as the descriptor stores them.
    const fn encoded(throughput: Option<Throughput>) -> (u8, u64) {
        match throughput {
            None => (UNIT_NONE, 0),
            Some(Throughput::Bytes(bytes)) => (UNIT_BYTES, bytes),
            Some(Throughput::Elements(elements)) => (UNIT_ELEMENTS, elements),
        }
    }
}

use crate::put;

/// Size of the descriptor for these strings.
pub const fn encoded_len(path: &str, expected: &str, ignore_reason: &str) -> usize {
    HEADER_LEN + path.len() + expected.len() + ignore_reason.len()
}

/// What a descriptor says, borrowing its strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields<'a> {
    /// `module_path!()::NAME` (crate name first).
    pub path: &'a str,
    /// The expected panic text (empty unless [`FLAG_HAS_EXPECTED`]).
    pub expected: &'a str,
    /// The ignore reason (empty when none was given).
    pub ignore_reason: &'a str,
    pub flags: u8,
    pub threads: [u32; 3],
    pub blocks: [u32; 3],
    /// Bytes of dynamic shared memory per block (`#[gpurun::test(shared = N)]`).
    pub shared_bytes: u32,
    /// A benchmark's declared throughput per iteration (only with [`FLAG_BENCH`]).
    pub throughput: Option<Throughput>,
}

impl Fields<'_> {
    pub const fn ignored(&self) -> bool {
        self.flags & FLAG_IGNORE != 0
    }
    pub const fn should_panic(&self) -> bool {
        self.flags & FLAG_SHOULD_PANIC != 0
    }
    pub const fn has_expected(&self) -> bool {
        self.flags & FLAG_HAS_EXPECTED != 0
    }
    pub const fn gpu_only(&self) -> bool {
        self.flags & FLAG_GPU_ONLY != 0
    }
    pub const fn bench(&self) -> bool {
        self.flags & FLAG_BENCH != 0
    }
}

const fn put_u32s(out: &mut [u8], at: usize, values: [u32; 3]) -> usize {
    let mut at = at;
    let mut i = 0;
    while i < 3 {
        at = put(out, at, &values[i].to_le_bytes());
        i += 1;
    }
    at
}

/// Why a descriptor cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// A string is longer than the `u16` length field allows; names which one.
    TooLong(&'static str),
    /// The output is not exactly [`encoded_len`] bytes.
    WrongSize,
}

impl core::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EncodeError::TooLong(what) => {
                write!(
                    f,
                    "cannot encode descriptor: {what} is longer than 65535 bytes"
                )
            }
            EncodeError::WrongSize => f.write_str("descriptor buffer has the wrong size"),
        }
    }
}

const fn short_len(text: &str, what: &'static str) -> Result<[u8; 2], EncodeError> {
    if text.len() > u16::MAX as usize {
        return Err(EncodeError::TooLong(what));
    }
    Ok((text.len() as u16).to_le_bytes())
}

/// Writes the descriptor of `fields` into `out`, which must be exactly [`encoded_len`] bytes.
pub const fn write(out: &mut [u8], fields: &Fields<'_>) -> Result<(), EncodeError> {
    if out.len() != encoded_len(fields.path, fields.expected, fields.ignore_reason) {
        return Err(EncodeError::WrongSize);
    }
    let lens = [
        short_len(fields.path, "the path"),
        short_len(fields.expected, "the expected text"),
        short_len(fields.ignore_reason, "the ignore reason"),
    ];
    let (unit, amount) = Throughput::encoded(fields.throughput);
    let mut at = put(out, 0, &MAGIC);
    out[at] = TEST_ABI_VERSION as u8;
    out[at + 1] = fields.flags;
    out[at + 2] = unit;
    at += 4; // version, flags, unit, a reserved byte
    at = put_u32s(out, at, fields.threads);
    at = put_u32s(out, at, fields.blocks);
    at = put(out, at, &fields.shared_bytes.to_le_bytes());
    at = put(out, at, &amount.to_le_bytes());
    let mut i = 0;
    while i < 3 {
        match lens[i] {
            Ok(len) => at = put(out, at, &len),
            Err(error) => return Err(error),
        }
        i += 1;
    }
    at += 2;
    at = put(out, at, fields.path.as_bytes());
    at = put(out, at, fields.expected.as_bytes());
    put(out, at, fields.ignore_reason.as_bytes());
    Ok(())
}

/// The descriptor of `fields` as an array, at compile time: `N` must be [`encoded_len`]. Fails
/// the build when a string is too long.
pub const fn encode<const N: usize>(fields: Fields<'_>) -> [u8; N] {
    let mut out = [0u8; N];
    match write(&mut out, &fields) {
        Ok(()) => out,
        Err(EncodeError::TooLong(_)) => panic!("test descriptor string too long"),
        Err(EncodeError::WrongSize) => panic!("test descriptor length mismatch"),
    }
}

/// Why a descriptor was rejected.
pub type DecodeError = crate::DecodeError<Problem>;

/// What is wrong with a malformed descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    ShorterThanHeader(usize),
    BadMagic([u8; 4]),
    UnknownFlags(u8),
    ReservedNotZero,
    ZeroDimension { threads: [u32; 3], blocks: [u32; 3] },
    LengthMismatch { expected: usize, found: usize },
    NotUtf8(&'static str),
    ReasonWithoutIgnore,
    ExpectedWithoutFlag,
    ExpectedWithoutShouldPanic,
    UnknownThroughputUnit(u8),
    ThroughputWithoutBench,
    AmountWithoutUnit,
    ShouldPanicBench,
}

impl core::fmt::Display for Problem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Problem::ShorterThanHeader(len) => {
                write!(
                    f,
                    "{len} bytes is shorter than the {HEADER_LEN}-byte header"
                )
            }
            Problem::BadMagic(magic) => write!(f, "bad magic {magic:02x?} (expected `GPRT`)"),
            Problem::UnknownFlags(bits) => write!(f, "unknown flag bits {bits:#04x}"),
            Problem::ReservedNotZero => f.write_str("reserved header fields are not zero"),
            Problem::ZeroDimension { threads, blocks } => write!(
                f,
                "launch shape has a zero dimension (threads {threads:?}, blocks {blocks:?})"
            ),
            Problem::LengthMismatch { expected, found } => write!(
                f,
                "its lengths add up to {expected} bytes but the symbol holds {found}"
            ),
            Problem::NotUtf8(what) => write!(f, "the {what} is not valid UTF-8"),
            Problem::ReasonWithoutIgnore => {
                f.write_str("an ignore reason is given but the ignore flag is not set")
            }
            Problem::ExpectedWithoutFlag => {
                f.write_str("expected panic text is given but its flag is not set")
            }
            Problem::ExpectedWithoutShouldPanic => {
                f.write_str("expected panic text flag set without should_panic")
            }
            Problem::UnknownThroughputUnit(unit) => write!(f, "unknown throughput unit {unit}"),
            Problem::ThroughputWithoutBench => {
                f.write_str("a throughput is declared but the bench flag is not set")
            }
            Problem::AmountWithoutUnit => {
                f.write_str("a throughput amount is given without its unit")
            }
            Problem::ShouldPanicBench => f.write_str("a benchmark cannot be should_panic"),
        }
    }
}

/// Decodes a descriptor of any supported version ([`is_supported_version`]).
pub fn decode(bytes: &[u8]) -> Result<Fields<'_>, DecodeError> {
    let bad = DecodeError::Malformed;
    // The part every version shares: magic, version, flags.
    let start = bytes
        .get(..8)
        .ok_or(bad(Problem::ShorterThanHeader(bytes.len())))?;
    if start[..4] != MAGIC {
        return Err(bad(Problem::BadMagic([
            start[0], start[1], start[2], start[3],
        ])));
    }
    let version = u32::from(start[4]);
    if !is_supported_version(version) {
        return Err(DecodeError::Version(version));
    }
    // Version 1 has no shared memory field: the string lengths come 4 bytes earlier; version 2
    // no throughput: 8 bytes earlier than version 3's.
    let (header_len, lengths_at) = match version {
        1 => (HEADER_LEN_V1, 32),
        2 => (HEADER_LEN_V2, 36),
        _ => (HEADER_LEN, 44),
    };
    let header = bytes
        .get(..header_len)
        .ok_or(bad(Problem::ShorterThanHeader(bytes.len())))?;
    let u16_at = |at: usize| u16::from_le_bytes([header[at], header[at + 1]]);
    let u32_at = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let flags = header[5];
    // Benchmarks came with version 3.
    let known = if version < 3 {
        KNOWN_FLAGS & !FLAG_BENCH
    } else {
        KNOWN_FLAGS
    };
    if flags & !known != 0 {
        return Err(bad(Problem::UnknownFlags(flags & !known)));
    }
    // Byte 6 is the throughput unit from version 3 on; reserved (0) before, as byte 7 is.
    if header[7] != 0 || u16_at(lengths_at + 6) != 0 || (version < 3 && header[6] != 0) {
        return Err(bad(Problem::ReservedNotZero));
    }
    let threads = [u32_at(8), u32_at(12), u32_at(16)];
    let blocks = [u32_at(20), u32_at(24), u32_at(28)];
    if threads.contains(&0) || blocks.contains(&0) {
        return Err(bad(Problem::ZeroDimension { threads, blocks }));
    }
    let shared_bytes = if version == 1 { 0 } else { u32_at(32) };
    let amount = if version < 3 {
        0
    } else {
        u64::from(u32_at(36)) | (u64::from(u32_at(40)) << 32)
    };
    let throughput = match (header[6], amount) {
        (UNIT_NONE, 0) => None,
        (UNIT_NONE, _) => return Err(bad(Problem::AmountWithoutUnit)),
        (UNIT_BYTES, bytes) => Some(Throughput::Bytes(bytes)),
        (UNIT_ELEMENTS, elements) => Some(Throughput::Elements(elements)),
        (unit, _) => return Err(bad(Problem::UnknownThroughputUnit(unit))),
    };
    let lens = [
        usize::from(u16_at(lengths_at)),
        usize::from(u16_at(lengths_at + 2)),
        usize::from(u16_at(lengths_at + 4)),
    ];
    // Each length is at most 65535, so the sum cannot overflow.
    let total = header_len + lens[0] + lens[1] + lens[2];
    if bytes.len() != total {
        return Err(bad(Problem::LengthMismatch {
            expected: total,
            found: bytes.len(),
        }));
    }
    let mut rest = &bytes[header_len..];
    let mut take = |len: usize, what: &'static str| {
        let (head, tail) = rest.split_at(len);
        rest = tail;
        core::str::from_utf8(head).map_err(|_| bad(Problem::NotUtf8(what)))
    };
    let fields = Fields {
        path: take(lens[0], "test path")?,
        expected: take(lens[1], "expected panic text")?,
        ignore_reason: take(lens[2], "ignore reason")?,
        flags,
        threads,
        blocks,
        shared_bytes,
        throughput,
    };
    if !fields.ignored() && !fields.ignore_reason.is_empty() {
        return Err(bad(Problem::ReasonWithoutIgnore));
    }
    if !fields.has_expected() && !fields.expected.is_empty() {
        return Err(bad(Problem::ExpectedWithoutFlag));
    }
    if fields.has_expected() && !fields.should_panic() {
        return Err(bad(Problem::ExpectedWithoutShouldPanic));
    }
    if fields.throughput.is_some() && !fields.bench() {
        return Err(bad(Problem::ThroughputWithoutBench));
    }
    if fields.bench() && fields.should_panic() {
        return Err(bad(Problem::ShouldPanicBench));
    }
    Ok(fields)
}

/// The libtest name of a test path: the crate segment dropped (`krate::a::b` -> `a::b`);
/// `None` unless there are two or more segments, none empty.
pub fn libtest_name(path: &str) -> Option<&str> {
    let (_, rest) = path.split_once("::")?;
    let well_formed = path.split("::").all(|segment| !segment.is_empty());
    well_formed.then_some(rest)
}

/// One test as the host knows it: the one description from the image to the reporter. The image
/// reader fills it from the descriptor and the kernel; the harness filters, runs, judges and
/// reports by it.
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDesc {
    /// The libtest name, e.g. `tests::adds` ([`libtest_name`] of the path).
    pub name: String,
    /// `module_path!()::NAME` as stored in the descriptor (crate name first).
    pub full_path: String,
    /// The kernel that runs the test (`__gpurun_test_ID`).
    pub kernel: String,
    /// `#[ignore]` was given.
    pub ignored: bool,
    /// The reason of `#[ignore = "..."]`.
    pub ignore_reason: Option<String>,
    /// `#[should_panic]`, with or without `expected`.
    pub should_panic: ShouldPanic,
    /// `#[gpurun::test(gpu_only)]`: reported as ignored ("needs a GPU") where it would run on
    /// the host emulation, whatever `--include-ignored` says.
    pub gpu_only: bool,
    /// The launch every run of the test uses.
    pub shape: crate::launch::LaunchShape,
    /// `Some(lanes)`: a device panic ends the panicking thread's whole wavefront of `lanes`
    /// threads (AMD GPUs, whose panic handler ends the wave with `s_endpgm`; the image reader
    /// takes the width from the kernel descriptor), so the failure output says which threads
    /// went with it. `None`: a panic ends only its thread (NVIDIA, the host emulation).
    pub panic_ends_wavefront: Option<u32>,
    /// The test's source file, where known (images do not record it), for annotations when no
    /// panic location is known.
    pub source_file: Option<String>,
    /// `Some` for a `#[gpurun::bench]`: its kernel takes the iteration count, a `u64`, and runs
    /// the body that many times (once when it runs as a test, as libtest runs a benchmark
    /// without `--bench`).
    pub bench: Option<Bench>,
}

/// What a benchmark declares beyond a test's attributes.
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bench {
    /// Bytes or elements per iteration, for the reported rate.
    pub throughput: Option<Throughput>,
}

#[cfg(feature = "alloc")]
use alloc::string::String;

#[cfg(feature = "alloc")]
impl TestDesc {
    /// A test named `name` (a libtest name) with a one-thread launch and no attributes; for
    /// tests and mock suites. The kernel name is a placeholder: tests read from an image carry
    /// the real symbol.
    pub fn new(name: impl Into<String>) -> TestDesc {
        let name: String = name.into();
        TestDesc {
            kernel: alloc::format!(
                "{}{}",
                crate::symbols::TEST_KERNEL_PREFIX,
                name.replace("::", "_")
            ),
            full_path: alloc::format!("krate::{name}"),
            name,
            ignored: false,
            ignore_reason: None,
            should_panic: ShouldPanic::No,
            gpu_only: false,
            shape: crate::launch::LaunchShape::SINGLE,
            panic_ends_wavefront: None,
            source_file: None,
            bench: None,
        }
    }

    /// This test's descriptor fields (its name and kernel are not part of the encoding).
    pub fn fields(&self) -> Fields<'_> {
        let (expected, mut flags) = self.should_panic.expected_and_flags();
        if self.ignored || self.ignore_reason.is_some() {
            flags |= FLAG_IGNORE;
        }
        if self.gpu_only {
            flags |= FLAG_GPU_ONLY;
        }
        if self.bench.is_some() {
            flags |= FLAG_BENCH;
        }
        Fields {
            path: &self.full_path,
            expected,
            ignore_reason: self.ignore_reason.as_deref().unwrap_or(""),
            flags,
            threads: self.shape.threads,
            blocks: self.shape.blocks,
            shared_bytes: self.shape.shared_bytes,
            throughput: self.bench.and_then(|bench| bench.throughput),
        }
    }
}

/// `#[should_panic]` as libtest knows it.
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShouldPanic {
    /// No attribute: the test passes when no thread panics.
    No,
    /// `#[should_panic]`: the test passes when some thread panics.
    Yes,
    /// `#[should_panic(expected = "...")]`: the panic message must contain this text.
    Expected(String),
}

#[cfg(feature = "alloc")]
impl ShouldPanic {
    /// Its descriptor fields: the `expected` text and the flag bits (the attribute macro
    /// encodes a test's descriptor with them, [`TestDesc::fields`] a test read back).
    pub fn expected_and_flags(&self) -> (&str, u8) {
        match self {
            ShouldPanic::No => ("", 0),
            ShouldPanic::Yes => ("", FLAG_SHOULD_PANIC),
            ShouldPanic::Expected(text) => (text.as_str(), FLAG_SHOULD_PANIC | FLAG_HAS_EXPECTED),
        }
    }

    /// What descriptor `fields` say.
    pub fn of(fields: &Fields<'_>) -> ShouldPanic {
        match (fields.should_panic(), fields.has_expected()) {
            (false, _) => ShouldPanic::No,
            (true, false) => ShouldPanic::Yes,
            (true, true) => ShouldPanic::Expected(fields.expected.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::Sample;

    const SAMPLE: Fields<'static> = Fields {
        path: "krate::math::adds",
        expected: "overflow",
        ignore_reason: "slow",
        flags: FLAG_IGNORE | FLAG_SHOULD_PANIC | FLAG_HAS_EXPECTED,
        threads: [32, 2, 1],
        blocks: [4, 1, 1],
        shared_bytes: 4096,
        throughput: None,
    };
    /// A benchmark: its flag and its declared bytes per iteration.
    const BENCH: Fields<'static> = Fields {
        path: "krate::copy",
        expected: "",
        ignore_reason: "",
        flags: FLAG_BENCH | FLAG_GPU_ONLY,
        threads: [256, 1, 1],
        blocks: [1, 1, 1],
        shared_bytes: 0,
        throughput: Some(Throughput::Bytes(1 << 33)),
    };
    const BENCH_LEN: usize = encoded_len(BENCH.path, BENCH.expected, BENCH.ignore_reason);
    const BENCH_BYTES: [u8; BENCH_LEN] = encode::<BENCH_LEN>(BENCH);
    const LEN: usize = encoded_len(SAMPLE.path, SAMPLE.expected, SAMPLE.ignore_reason);
    // Built at compile time, as the attribute macros do.
    const SAMPLE_BYTES: [u8; LEN] = encode::<LEN>(SAMPLE);

    #[test]
    fn round_trip() {
        assert_eq!(LEN, 52 + 17 + 8 + 4);
        assert_eq!(SAMPLE_BYTES[4], 3, "written as version 3");
        assert_eq!(SAMPLE_BYTES[32..36], 4096u32.to_le_bytes());
        assert_eq!(decode(&SAMPLE_BYTES), Ok(SAMPLE));
    }

    #[test]
    fn benchmarks_round_trip_with_their_throughput() {
        assert_eq!(BENCH_BYTES[5], FLAG_BENCH | FLAG_GPU_ONLY);
        assert_eq!(BENCH_BYTES[6], UNIT_BYTES);
        assert_eq!(BENCH_BYTES[36..44], (1u64 << 33).to_le_bytes());
        assert_eq!(decode(&BENCH_BYTES), Ok(BENCH));
        let elements = Fields {
            throughput: Some(Throughput::Elements(7)),
            ..BENCH
        };
        let mut bytes = BENCH_BYTES;
        write(&mut bytes, &elements).unwrap();
        assert_eq!(bytes[6], UNIT_ELEMENTS);
        assert_eq!(decode(&bytes), Ok(elements));
        let plain = Fields {
            throughput: None,
            ..BENCH
        };
        write(&mut bytes, &plain).unwrap();
        assert_eq!(decode(&bytes), Ok(plain));
    }

    #[test]
    fn benchmark_fields_that_contradict_are_refused() {
        let bench = Sample {
            bytes: &BENCH_BYTES,
            decode_error: &|bytes| decode(bytes).err(),
        };
        assert_eq!(bench.malformed(6, 3), Problem::UnknownThroughputUnit(3));
        assert_eq!(bench.malformed(6, UNIT_NONE), Problem::AmountWithoutUnit);
        assert_eq!(bench.malformed(5, 0), Problem::ThroughputWithoutBench);
        assert_eq!(
            bench.malformed(5, FLAG_BENCH | FLAG_SHOULD_PANIC),
            Problem::ShouldPanicBench
        );
        assert_eq!(bench.malformed(7, 1), Problem::ReservedNotZero);
    }

    /// The sample's bytes and their decoder.
    const ENCODED: Sample<'static, Problem> = Sample {
        bytes: &SAMPLE_BYTES,
        decode_error: &|bytes| decode(bytes).err(),
    };

    #[test]
    fn rejects_every_truncation_and_extension() {
        let mismatch = Problem::LengthMismatch {
            expected: LEN,
            found: LEN + 1,
        };
        ENCODED.rejects_every_truncation_and_extension(mismatch);
    }

    #[test]
    fn rejects_bad_fields() {
        assert!(matches!(ENCODED.malformed(0, b'X'), Problem::BadMagic(_)));
        assert_eq!(ENCODED.patched(4, 4), DecodeError::Version(4));
        assert_eq!(ENCODED.patched(4, 0), DecodeError::Version(0));
        assert_eq!(ENCODED.malformed(5, 0x80), Problem::UnknownFlags(0x80));
        assert_eq!(ENCODED.malformed(7, 1), Problem::ReservedNotZero);
        assert_eq!(ENCODED.malformed(50, 1), Problem::ReservedNotZero);
        assert!(matches!(
            ENCODED.malformed(8, 0),
            Problem::ZeroDimension { .. }
        ));
        assert_eq!(ENCODED.malformed(52, 0xff), Problem::NotUtf8("test path"));
        assert_eq!(
            ENCODED.malformed(5, FLAG_IGNORE | FLAG_HAS_EXPECTED),
            Problem::ExpectedWithoutShouldPanic
        );
        assert_eq!(
            ENCODED.malformed(5, FLAG_SHOULD_PANIC | FLAG_HAS_EXPECTED),
            Problem::ReasonWithoutIgnore
        );
    }

    #[test]
    fn wrong_sizes_and_long_strings_are_refused() {
        let mut short = [0u8; 10];
        assert_eq!(write(&mut short, &SAMPLE), Err(EncodeError::WrongSize));
        let long = [b'x'; 70_000];
        let path = core::str::from_utf8(&long).unwrap();
        let fields = Fields { path, ..SAMPLE };
        let mut out = [0u8; 52 + 70_000 + 12];
        assert_eq!(
            write(&mut out, &fields),
            Err(EncodeError::TooLong("the path"))
        );
    }

    /// Version 1's layout, as images built before shared memory carry it: no shared memory
    /// field, the string lengths at byte 32.
    fn version_1(fields: &Fields<'_>) -> [u8; LEN - 12] {
        let mut out = [0u8; LEN - 12];
        out[..4].copy_from_slice(&MAGIC);
        out[4] = 1;
        out[5] = fields.flags;
        for (i, value) in fields.threads.iter().chain(&fields.blocks).enumerate() {
            out[8 + 4 * i..12 + 4 * i].copy_from_slice(&value.to_le_bytes());
        }
        let strings = [fields.path, fields.expected, fields.ignore_reason];
        let mut at = HEADER_LEN_V1;
        for (i, text) in strings.iter().enumerate() {
            out[32 + 2 * i..34 + 2 * i].copy_from_slice(&(text.len() as u16).to_le_bytes());
            out[at..at + text.len()].copy_from_slice(text.as_bytes());
            at += text.len();
        }
        out
    }

    /// Version 2's layout, as images built before benchmarks carry it: no throughput, the
    /// string lengths at byte 36, the strings at 44.
    fn version_2(fields: &Fields<'_>) -> [u8; LEN - 8] {
        let mut out = [0u8; LEN - 8];
        let v1 = version_1(fields);
        out[..32].copy_from_slice(&v1[..32]);
        out[4] = 2;
        out[32..36].copy_from_slice(&fields.shared_bytes.to_le_bytes());
        out[36..42].copy_from_slice(&v1[32..38]);
        out[HEADER_LEN_V2..].copy_from_slice(&v1[HEADER_LEN_V1..]);
        out
    }

    #[test]
    fn version_2_descriptors_are_still_read_as_tests() {
        let old = version_2(&SAMPLE);
        assert_eq!(decode(&old), Ok(SAMPLE));
        let mut bench = old;
        bench[5] = FLAG_BENCH;
        assert_eq!(
            decode(&bench),
            Err(DecodeError::Malformed(Problem::UnknownFlags(FLAG_BENCH)))
        );
        // Byte 6 was reserved, not a throughput unit; its reserved field is at 42.
        for at in [6, 42] {
            let mut bad = old;
            bad[at] = 1;
            assert_eq!(
                decode(&bad),
                Err(DecodeError::Malformed(Problem::ReservedNotZero)),
                "byte {at}"
            );
        }
        for len in 0..old.len() {
            assert!(decode(&old[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn version_1_descriptors_are_still_read_without_shared_memory() {
        let old = version_1(&SAMPLE);
        assert_eq!(
            decode(&old),
            Ok(Fields {
                shared_bytes: 0,
                ..SAMPLE
            })
        );
        // Its reserved field is at 38, and its strings start at 40.
        let mut bad = old;
        bad[38] = 1;
        assert_eq!(
            decode(&bad),
            Err(DecodeError::Malformed(Problem::ReservedNotZero))
        );
        for len in 0..old.len() {
            assert!(decode(&old[..len]).is_err(), "len {len}");
        }
    }

    #[test]
    fn libtest_names_drop_the_crate() {
        assert_eq!(libtest_name("c::m::t"), Some("m::t"));
        assert_eq!(libtest_name("c::::t"), None);
        assert_eq!(libtest_name("lonely"), None);
        assert_eq!(libtest_name("::t"), None);
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn should_panic_round_trips_through_its_fields() {
        for should_panic in [
            ShouldPanic::No,
            ShouldPanic::Yes,
            ShouldPanic::Expected("overflow".into()),
        ] {
            let (expected, flags) = should_panic.expected_and_flags();
            let fields = Fields {
                expected,
                flags,
                ..SAMPLE
            };
            assert_eq!(ShouldPanic::of(&fields), should_panic);
        }
    }
}
