//! Test descriptors (`__gpurun_desc_*`) as the host sees them: `gpurun_abi`'s [`TestDesc`]s
//! built with `gpurun_abi::desc`, which holds the one encoder and the one decoder of the format.

use crate::ImageError;
use gpurun_abi::desc::{self, DecodeError};
use gpurun_abi::{Bench, LaunchShape, ShouldPanic, TestDesc};

/// Why [`encode_descriptor`] refused its input.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct EncodeError(desc::EncodeError);

/// Encodes a descriptor for `desc` (its `name` and `kernel` are not part of the encoding), with
/// the same encoder the attribute macros use at compile time. For tests and tools.
pub fn encode_descriptor(test: &TestDesc) -> Result<Vec<u8>, EncodeError> {
    let fields = test.fields();
    let mut out = vec![0; desc::encoded_len(fields.path, fields.expected, fields.ignore_reason)];
    desc::write(&mut out, &fields).map_err(EncodeError)?;
    Ok(out)
}

/// Decodes the descriptor stored in symbol `symbol` whose kernel is `kernel` (the wavefront a
/// panic ends is the image's to fill in, from the kernel).
pub fn decode_descriptor(symbol: &str, kernel: &str, bytes: &[u8]) -> Result<TestDesc, ImageError> {
    let bad = |reason: String| ImageError::BadDescriptor {
        symbol: symbol.to_owned(),
        reason,
    };
    let fields = desc::decode(bytes).map_err(|error| match error {
        DecodeError::Version(found) => ImageError::UnsupportedTestAbi {
            found,
            oldest: desc::OLDEST_TEST_ABI_VERSION,
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
    let ignored = fields.ignored();
    Ok(TestDesc {
        name: name.to_owned(),
        full_path: fields.path.to_owned(),
        kernel: kernel.to_owned(),
        ignored,
        ignore_reason: (ignored && !fields.ignore_reason.is_empty())
            .then(|| fields.ignore_reason.to_owned()),
        should_panic: ShouldPanic::of(&fields),
        gpu_only: fields.gpu_only(),
        shape: LaunchShape::grid(fields.blocks, fields.threads).shared_bytes(fields.shared_bytes),
        panic_ends_wavefront: None,
        source_file: None,
        bench: fields.bench().then_some(Bench {
            throughput: fields.throughput,
        }),
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
            gpu_only: true,
            shape: LaunchShape::grid([4, 1, 1], [32, 2, 1]).shared_bytes(2048),
            panic_ends_wavefront: None,
            source_file: None,
            bench: None,
        }
    }

    #[test]
    fn round_trip() {
        let desc = sample();
        let bytes = encode_descriptor(&desc).unwrap();
        assert_eq!(bytes.len(), 52 + 17 + 8 + 4);
        assert_eq!(decode_descriptor("d", &desc.kernel, &bytes).unwrap(), desc);
        let bench = TestDesc {
            should_panic: ShouldPanic::No,
            bench: Some(Bench {
                throughput: Some(gpurun_abi::Throughput::Elements(1024)),
            }),
            ..sample()
        };
        let bytes = encode_descriptor(&bench).unwrap();
        assert_eq!(
            decode_descriptor("d", &bench.kernel, &bytes).unwrap(),
            bench
        );
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
        let version = patch(4, 4);
        assert!(version.contains("version 4") && version.contains("update cargo-gpurun"));
        let version = patch(4, 0);
        assert!(
            version.contains("version 0") && version.contains("rebuild the image"),
            "{version}"
        );
        assert!(patch(5, 0x80).contains("unknown flag"));
        assert!(patch(7, 1).contains("reserved"));
        assert!(patch(8, 0).contains("zero dimension"));
        assert!(patch(52, 0xff).contains("UTF-8"));
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
