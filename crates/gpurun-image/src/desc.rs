//! Test descriptors (`__gpurun_desc_*`) as the host sees them: owned [`TestDesc`]s built from
//! `gpurun_abi::desc`, which holds the one encoder and the one decoder of the format.

use crate::ImageError;
use gpurun_abi::desc::{self, DecodeError, Fields};

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
#[error("{0}")]
pub struct EncodeError(desc::EncodeError);

/// Encodes a descriptor for `desc` (its `name` and `kernel` are not part of the encoding), with
/// the same encoder the attribute macros use at compile time. For tests and tools.
pub fn encode_descriptor(test: &TestDesc) -> Result<Vec<u8>, EncodeError> {
    let (expected, mut flags) = match &test.should_panic {
        ShouldPanic::No => ("", 0),
        ShouldPanic::Yes => ("", desc::FLAG_SHOULD_PANIC),
        ShouldPanic::Expected(text) => (
            text.as_str(),
            desc::FLAG_SHOULD_PANIC | desc::FLAG_HAS_EXPECTED,
        ),
    };
    if test.ignored || test.ignore_reason.is_some() {
        flags |= desc::FLAG_IGNORE;
    }
    let fields = Fields {
        path: &test.full_path,
        expected,
        ignore_reason: test.ignore_reason.as_deref().unwrap_or(""),
        flags,
        threads: test.threads,
        blocks: test.blocks,
    };
    let mut out = vec![0; desc::encoded_len(fields.path, fields.expected, fields.ignore_reason)];
    desc::write(&mut out, &fields).map_err(EncodeError)?;
    Ok(out)
}

/// Decodes the descriptor stored in symbol `symbol` whose kernel is `kernel`.
pub fn decode_descriptor(symbol: &str, kernel: &str, bytes: &[u8]) -> Result<TestDesc, ImageError> {
    let bad = |reason: String| ImageError::BadDescriptor {
        symbol: symbol.to_owned(),
        reason,
    };
    let fields = desc::decode(bytes).map_err(|error| match error {
        DecodeError::Version(found) => ImageError::UnsupportedTestAbi {
            found,
            supported: desc::TEST_ABI_VERSION,
        },
        DecodeError::Malformed(problem) => bad(problem.to_string()),
    })?;
    let name = desc::libtest_name(fields.path).ok_or_else(|| {
        bad(format!(
            "test path `{}` is not `crate::...::name` (needs two or more non-empty segments)",
            fields.path
        ))
    })?;
    let should_panic = match (fields.should_panic(), fields.has_expected()) {
        (false, _) => ShouldPanic::No,
        (true, false) => ShouldPanic::Yes,
        (true, true) => ShouldPanic::Expected(fields.expected.to_owned()),
    };
    let ignored = fields.ignored();
    Ok(TestDesc {
        name: name.to_owned(),
        full_path: fields.path.to_owned(),
        kernel: kernel.to_owned(),
        ignored,
        ignore_reason: (ignored && !fields.ignore_reason.is_empty())
            .then(|| fields.ignore_reason.to_owned()),
        should_panic,
        threads: fields.threads,
        blocks: fields.blocks,
    })
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
        assert!(
            patch(5, desc::FLAG_IGNORE | desc::FLAG_HAS_EXPECTED).contains("without should_panic")
        );
        assert!(patch(5, desc::FLAG_SHOULD_PANIC | desc::FLAG_HAS_EXPECTED).contains("ignore flag"));
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
