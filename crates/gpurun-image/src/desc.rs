//! Test descriptors (`__gpurun_desc_*`), encoded as docs/abi.md "Tests" specifies.
//!
//! Decoding trusts nothing: every length is checked against the buffer, every string is
//! UTF-8 checked, and reserved bits and fields must be zero so that a future layout cannot
//! be misread as this one.

use crate::ImageError;

/// The test ABI version this crate reads (descriptor byte 4 and `__gpurun_test_abi_version`).
pub const TEST_ABI_VERSION: u32 = 1;
/// Magic bytes at the start of every descriptor.
pub const DESCRIPTOR_MAGIC: [u8; 4] = *b"GPRT";
/// Size of the fixed descriptor header, before the strings.
pub const DESCRIPTOR_HEADER_LEN: usize = 40;
/// Symbol prefix of test descriptors.
pub const DESC_PREFIX: &str = "__gpurun_desc_";
/// Symbol prefix of test kernels.
pub const TEST_KERNEL_PREFIX: &str = "__gpurun_test_";

const FLAG_IGNORE: u8 = 1 << 0;
const FLAG_SHOULD_PANIC: u8 = 1 << 1;
const FLAG_HAS_EXPECTED: u8 = 1 << 2;
const KNOWN_FLAGS: u8 = FLAG_IGNORE | FLAG_SHOULD_PANIC | FLAG_HAS_EXPECTED;

/// What a test expects of a panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShouldPanic {
    /// The test passes when no thread panics.
    No,
    /// The test passes when some thread panics.
    Yes,
    /// The test passes when a panic message contains this text.
    Expected(String),
}

/// One test, decoded from its descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDesc {
    /// The libtest name: the module path without the crate's first segment, joined by `::`.
    pub name: String,
    /// `module_path!()::NAME` as stored in the descriptor (crate name first).
    pub full_path: String,
    /// The kernel that runs the test (`__gpurun_test_ID`).
    pub kernel: String,
    /// `#[ignore]` was given.
    pub ignored: bool,
    /// The `#[ignore = ".."]` reason, if any.
    pub ignore_reason: Option<String>,
    /// `#[should_panic]` and its expected text.
    pub should_panic: ShouldPanic,
    /// Threads per block (x, y, z).
    pub threads: [u32; 3],
    /// Blocks per grid (x, y, z).
    pub blocks: [u32; 3],
}

/// Why [`encode_descriptor`] refused its input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("cannot encode descriptor: {0} is longer than 65535 bytes")]
pub struct EncodeError(&'static str);

/// Encodes a descriptor for `desc` (its `name` and `kernel` are not part of the encoding).
///
/// The device side builds the same bytes in const code; this is the host-side reference used
/// by tests and tools.
pub fn encode_descriptor(desc: &TestDesc) -> Result<Vec<u8>, EncodeError> {
    let path = desc.full_path.as_bytes();
    let expected: &[u8] = match &desc.should_panic {
        ShouldPanic::Expected(text) => text.as_bytes(),
        _ => &[],
    };
    let reason = desc.ignore_reason.as_deref().unwrap_or("").as_bytes();
    let len16 = |bytes: &[u8], what| u16::try_from(bytes.len()).map_err(|_| EncodeError(what));
    let (path_len, expected_len, reason_len) = (
        len16(path, "the path")?,
        len16(expected, "the expected text")?,
        len16(reason, "the ignore reason")?,
    );
    let mut flags = 0;
    if desc.ignored || desc.ignore_reason.is_some() {
        flags |= FLAG_IGNORE;
    }
    match desc.should_panic {
        ShouldPanic::No => {}
        ShouldPanic::Yes => flags |= FLAG_SHOULD_PANIC,
        ShouldPanic::Expected(_) => flags |= FLAG_SHOULD_PANIC | FLAG_HAS_EXPECTED,
    }
    let mut out =
        Vec::with_capacity(DESCRIPTOR_HEADER_LEN + path.len() + expected.len() + reason.len());
    out.extend_from_slice(&DESCRIPTOR_MAGIC);
    out.push(TEST_ABI_VERSION as u8);
    out.push(flags);
    out.extend_from_slice(&[0, 0]);
    for v in desc.threads.iter().chain(desc.blocks.iter()) {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in [path_len, expected_len, reason_len, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(path);
    out.extend_from_slice(expected);
    out.extend_from_slice(reason);
    Ok(out)
}

/// Decodes the descriptor stored in symbol `symbol` whose kernel is `kernel`.
pub fn decode_descriptor(symbol: &str, kernel: &str, bytes: &[u8]) -> Result<TestDesc, ImageError> {
    let bad = |reason: String| ImageError::BadDescriptor {
        symbol: symbol.to_owned(),
        reason,
    };
    let header = bytes.get(..DESCRIPTOR_HEADER_LEN).ok_or_else(|| {
        bad(format!(
            "{} bytes is shorter than the {DESCRIPTOR_HEADER_LEN}-byte header",
            bytes.len()
        ))
    })?;
    if header[..4] != DESCRIPTOR_MAGIC {
        return Err(bad(format!(
            "bad magic {:02x?} (expected `GPRT`)",
            &header[..4]
        )));
    }
    let version = u32::from(header[4]);
    if version != TEST_ABI_VERSION {
        return Err(ImageError::UnsupportedTestAbi {
            found: version,
            supported: TEST_ABI_VERSION,
        });
    }
    let flags = header[5];
    if flags & !KNOWN_FLAGS != 0 {
        return Err(bad(format!(
            "unknown flag bits {:#04x}",
            flags & !KNOWN_FLAGS
        )));
    }
    let u16_at = |at: usize| u16::from_le_bytes([header[at], header[at + 1]]);
    let u32_at = |at: usize| {
        u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    if u16_at(6) != 0 || u16_at(38) != 0 {
        return Err(bad("reserved header fields are not zero".to_owned()));
    }
    let threads = [u32_at(8), u32_at(12), u32_at(16)];
    let blocks = [u32_at(20), u32_at(24), u32_at(28)];
    if threads.contains(&0) || blocks.contains(&0) {
        return Err(bad(format!(
            "launch shape has a zero dimension (threads {threads:?}, blocks {blocks:?})"
        )));
    }
    let path_len = usize::from(u16_at(32));
    let expected_len = usize::from(u16_at(34));
    let reason_len = usize::from(u16_at(36));
    // Each length is at most 65535, so the sum cannot overflow usize.
    let total = DESCRIPTOR_HEADER_LEN + path_len + expected_len + reason_len;
    if bytes.len() != total {
        return Err(bad(format!(
            "its lengths add up to {total} bytes but the symbol holds {}",
            bytes.len()
        )));
    }
    let mut rest = &bytes[DESCRIPTOR_HEADER_LEN..];
    let mut take = |len: usize, what: &str| -> Result<String, ImageError> {
        let (head, tail) = rest.split_at(len);
        rest = tail;
        String::from_utf8(head.to_vec()).map_err(|_| bad(format!("the {what} is not valid UTF-8")))
    };
    let full_path = take(path_len, "test path")?;
    let expected = take(expected_len, "expected panic text")?;
    let reason = take(reason_len, "ignore reason")?;

    let ignored = flags & FLAG_IGNORE != 0;
    if !ignored && reason_len != 0 {
        return Err(bad(
            "an ignore reason is given but the ignore flag is not set".to_owned(),
        ));
    }
    if flags & FLAG_HAS_EXPECTED == 0 && expected_len != 0 {
        return Err(bad(
            "expected panic text is given but its flag is not set".to_owned()
        ));
    }
    let should_panic = match (
        flags & FLAG_SHOULD_PANIC != 0,
        flags & FLAG_HAS_EXPECTED != 0,
    ) {
        (false, false) => ShouldPanic::No,
        (true, false) => ShouldPanic::Yes,
        (true, true) => ShouldPanic::Expected(expected),
        (false, true) => {
            return Err(bad(
                "expected panic text flag set without should_panic".to_owned()
            ))
        }
    };
    let name = libtest_name(&full_path).ok_or_else(|| {
        bad(format!(
            "test path `{full_path}` is not `crate::...::name` (needs two or more non-empty segments)"
        ))
    })?;
    Ok(TestDesc {
        name,
        full_path,
        kernel: kernel.to_owned(),
        ignored,
        ignore_reason: ignored.then_some(reason).filter(|r| !r.is_empty()),
        should_panic,
        threads,
        blocks,
    })
}

/// Drops the crate segment: `krate::a::b` -> `a::b`; `None` unless there are at least two
/// non-empty segments.
fn libtest_name(full_path: &str) -> Option<String> {
    let segments: Vec<&str> = full_path.split("::").collect();
    if segments.len() < 2 || segments.iter().any(|s| s.is_empty()) {
        return None;
    }
    Some(segments[1..].join("::"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TestDesc {
        TestDesc {
            name: "math::adds".into(),
            full_path: "krate::math::adds".into(),
            kernel: "__gpurun_test_adds_00".into(),
            ignored: true,
            ignore_reason: Some("slow".into()),
            should_panic: ShouldPanic::Expected("overflow".into()),
            threads: [32, 2, 1],
            blocks: [4, 1, 1],
        }
    }

    #[test]
    fn round_trip() {
        let desc = sample();
        let bytes = encode_descriptor(&desc).unwrap();
        assert_eq!(bytes.len(), 40 + 17 + 8 + 4);
        assert_eq!(decode_descriptor("d", &desc.kernel, &bytes).unwrap(), desc);
        let plain = TestDesc {
            ignored: false,
            ignore_reason: None,
            should_panic: ShouldPanic::Yes,
            ..sample()
        };
        let bytes = encode_descriptor(&plain).unwrap();
        assert_eq!(
            decode_descriptor("d", &plain.kernel, &bytes).unwrap(),
            plain
        );
    }

    #[test]
    fn rejects_every_truncation_and_extension() {
        let bytes = encode_descriptor(&sample()).unwrap();
        for len in 0..bytes.len() {
            assert!(
                decode_descriptor("d", "k", &bytes[..len]).is_err(),
                "len {len}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_descriptor("d", "k", &longer).is_err());
    }

    #[test]
    fn rejects_bad_fields() {
        let good = encode_descriptor(&sample()).unwrap();
        let patch = |at: usize, v: u8| {
            let mut b = good.clone();
            b[at] = v;
            decode_descriptor("__gpurun_desc_x", "k", &b)
                .unwrap_err()
                .to_string()
        };
        assert!(patch(0, b'X').contains("bad magic"));
        let version = patch(4, 2);
        assert!(version.contains("version 2") && version.contains("update cargo-gpurun"));
        assert!(patch(5, 0x80).contains("unknown flag"));
        assert!(patch(6, 1).contains("reserved"));
        assert!(patch(8, 0).contains("zero dimension"));
        assert!(patch(40, 0xff).contains("UTF-8"));
        // Flag says no should_panic, but expected text is present.
        assert!(patch(5, FLAG_IGNORE | FLAG_HAS_EXPECTED).contains("without should_panic"));
        assert!(patch(5, FLAG_SHOULD_PANIC | FLAG_HAS_EXPECTED).contains("ignore flag"));
    }

    #[test]
    fn path_needs_a_crate_segment() {
        let desc = TestDesc {
            full_path: "lonely".into(),
            ..sample()
        };
        let bytes = encode_descriptor(&desc).unwrap();
        let err = decode_descriptor("d", "k", &bytes).unwrap_err().to_string();
        assert!(err.contains("`lonely`"), "{err}");
        assert_eq!(libtest_name("c::m::t").as_deref(), Some("m::t"));
        assert_eq!(libtest_name("c::::t"), None);
    }

    #[test]
    fn encode_rejects_huge_strings() {
        let desc = TestDesc {
            full_path: "x".repeat(70_000),
            ..sample()
        };
        assert!(encode_descriptor(&desc).is_err());
    }
}
