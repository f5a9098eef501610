//! Kernel descriptors (`__gpurun_kdesc_NAME`) as the host sees them: an owned
//! [`KernelSignature`] built from `gpurun_abi::kernel`, which holds the one encoder and the one
//! decoder of the format.

use gpurun_abi::kernel::{self, DecodeError};
pub use gpurun_abi::kernel::{Factor, ParamKind};

use crate::ImageError;

/// The parameters of a `#[gpurun::kernel]`, as its descriptor records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSignature {
    pub params: Vec<KernelParam>,
}

/// One parameter of a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelParam {
    /// Its name in the source (empty for a pattern that is not a name).
    pub name: String,
    pub kind: ParamKind,
    /// Bytes of the value; for a pointer, of one element it points at.
    pub size: u32,
    /// For a pointer, the elements it must hold as a product of these (`#[gpurun::kernel(len(..))]`);
    /// empty: not declared.
    pub len: Vec<Factor>,
}

/// Decodes the kernel descriptor stored in symbol `symbol`.
pub fn decode_kernel_descriptor(symbol: &str, bytes: &[u8]) -> Result<KernelSignature, ImageError> {
    let signature = kernel::decode(bytes).map_err(|error| ImageError::BadDescriptor {
        symbol: symbol.to_owned(),
        reason: match error {
            DecodeError::Version(found) => format!(
                "kernel descriptor version {found}, but this cargo-gpurun reads version {}; \
                 update cargo-gpurun",
                kernel::KERNEL_ABI_VERSION
            ),
            DecodeError::Malformed(problem) => problem.to_string(),
        },
    })?;
    Ok(KernelSignature {
        params: signature
            .params()
            .map(|param| KernelParam {
                name: param.name.to_owned(),
                kind: param.kind,
                size: param.size,
                len: param.len().collect(),
            })
            .collect(),
    })
}

/// Encodes the descriptor of `signature` (for tests and tools that write images).
pub fn encode_kernel_descriptor(signature: &KernelSignature) -> Option<Vec<u8>> {
    let params: Vec<kernel::Param<'_>> = signature
        .params
        .iter()
        .map(|param| kernel::Param {
            name: &param.name,
            kind: param.kind,
            size: param.size,
            len: &param.len,
        })
        .collect();
    let mut out = vec![0; kernel::encoded_len(&params)];
    kernel::write(&mut out, &params).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors_name_the_symbol() {
        let signature = KernelSignature {
            params: vec![
                KernelParam {
                    name: "x".into(),
                    kind: ParamKind::Pointer,
                    size: 4,
                    len: vec![Factor::Param(1), Factor::Blocks],
                },
                KernelParam {
                    name: "n".into(),
                    kind: ParamKind::Integer,
                    size: 8,
                    len: Vec::new(),
                },
            ],
        };
        let bytes = encode_kernel_descriptor(&signature).unwrap();
        assert_eq!(decode_kernel_descriptor("k", &bytes).unwrap(), signature);
        let mut newer = bytes.clone();
        newer[4] = 2;
        let error = decode_kernel_descriptor("__gpurun_kdesc_k", &newer)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("`__gpurun_kdesc_k`") && error.contains("update cargo-gpurun"),
            "{error}"
        );
        let error = decode_kernel_descriptor("k", &bytes[..12])
            .unwrap_err()
            .to_string();
        assert!(error.contains("runs past the end"), "{error}");
    }
}
