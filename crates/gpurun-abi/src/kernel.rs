//! Kernel descriptors: one global per `#[gpurun::kernel] fn NAME` (`__gpurun_kdesc_NAME`), read
//! from the image so that a host-driven launch can check its arguments before the kernel runs
//! (docs/abi.md, "Kernel descriptors"): each parameter's name, kind and size, and for a pointer
//! the number of elements the kernel may touch, as the author declared it with
//! `#[gpurun::kernel(len(x = n, sums = blocks))]`.
//!
//! Layout (all integers little-endian): magic `GPRK`, version byte, parameter count byte, two
//! zero bytes; then per parameter: kind byte, factor count byte, name length `u16`, size `u32`,
//! the name, then each factor of its length as a tag byte, three zero bytes and a `u32`.
//!
//! [`write()`] is the only encoder (a `const fn`: the attribute macro builds descriptors at compile
//! time through it) and [`decode`] the only decoder. Decoding trusts nothing: every length is
//! checked against the buffer, names must be UTF-8, reserved bytes zero, a length only on a
//! pointer and its factors may name only integer parameters.

/// The kernel descriptor layout version (byte 4).
pub const KERNEL_ABI_VERSION: u8 = 1;
/// Magic bytes at the start of every kernel descriptor.
pub const MAGIC: [u8; 4] = *b"GPRK";
/// Size of the header, before the parameters.
pub const HEADER_LEN: usize = 8;
/// Size of a parameter's fixed part, before its name.
pub const PARAM_HEADER_LEN: usize = 8;
/// Size of one length factor.
pub const FACTOR_LEN: usize = 8;
/// The most parameters a descriptor holds (the count is a byte).
pub const MAX_PARAMS: usize = u8::MAX as usize;
/// The most factors in one length (the count is a byte).
pub const MAX_FACTORS: usize = u8::MAX as usize;

/// What a parameter is, as far as checking an argument goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// Anything else (a struct, an array, a fat pointer): only counted.
    Other = 0,
    /// An integer (or `bool`) of `size` bytes.
    Integer = 1,
    /// A float of `size` bytes.
    Float = 2,
    /// A thin pointer or reference; `size` is the size of what it points at.
    Pointer = 3,
}

impl ParamKind {
    const fn from_byte(byte: u8) -> Option<ParamKind> {
        Some(match byte {
            0 => ParamKind::Other,
            1 => ParamKind::Integer,
            2 => ParamKind::Float,
            3 => ParamKind::Pointer,
            _ => return None,
        })
    }
}

/// One factor of a pointer's length: the length is their product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Factor {
    /// A constant.
    Constant(u32),
    /// The value of the integer parameter with this index.
    Param(u32),
    /// Blocks in the grid (x * y * z).
    Blocks,
    /// Threads per block (x * y * z).
    Threads,
}

impl Factor {
    const fn tag_and_value(self) -> (u8, u32) {
        match self {
            Factor::Constant(value) => (0, value),
            Factor::Param(index) => (1, index),
            Factor::Blocks => (2, 0),
            Factor::Threads => (3, 0),
        }
    }

    fn from_parts(tag: u8, value: u32) -> Option<Factor> {
        match (tag, value) {
            (0, value) => Some(Factor::Constant(value)),
            (1, index) => Some(Factor::Param(index)),
            (2, 0) => Some(Factor::Blocks),
            (3, 0) => Some(Factor::Threads),
            _ => None,
        }
    }
}

/// One parameter, as the encoder takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param<'a> {
    pub name: &'a str,
    pub kind: ParamKind,
    /// Bytes of the value; for a pointer, of one element it points at.
    pub size: u32,
    /// A pointer's length in elements, as a product; empty: not declared.
    pub len: &'a [Factor],
}

/// Size of the descriptor of `params`.
pub const fn encoded_len(params: &[Param<'_>]) -> usize {
    let mut len = HEADER_LEN;
    let mut i = 0;
    while i < params.len() {
        len += PARAM_HEADER_LEN + params[i].name.len() + FACTOR_LEN * params[i].len.len();
        i += 1;
    }
    len
}

/// Why a descriptor cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// More than [`MAX_PARAMS`] parameters.
    TooManyParams,
    /// A name longer than 65535 bytes, or a length of more than [`MAX_FACTORS`] factors.
    TooLong,
    /// The output is not exactly [`encoded_len`] bytes.
    WrongSize,
}

use crate::put;

/// Writes the descriptor of `params` into `out`, which must be exactly [`encoded_len`] bytes.
pub const fn write(out: &mut [u8], params: &[Param<'_>]) -> Result<(), EncodeError> {
    if out.len() != encoded_len(params) {
        return Err(EncodeError::WrongSize);
    }
    if params.len() > MAX_PARAMS {
        return Err(EncodeError::TooManyParams);
    }
    let mut at = put(out, 0, &MAGIC);
    out[at] = KERNEL_ABI_VERSION;
    out[at + 1] = params.len() as u8;
    at += 4; // version, count, two reserved bytes
    let mut i = 0;
    while i < params.len() {
        let param = &params[i];
        if param.name.len() > u16::MAX as usize || param.len.len() > MAX_FACTORS {
            return Err(EncodeError::TooLong);
        }
        out[at] = param.kind as u8;
        out[at + 1] = param.len.len() as u8;
        at = put(out, at + 2, &(param.name.len() as u16).to_le_bytes());
        at = put(out, at, &param.size.to_le_bytes());
        at = put(out, at, param.name.as_bytes());
        let mut f = 0;
        while f < param.len.len() {
            let (tag, value) = param.len[f].tag_and_value();
            out[at] = tag;
            at = put(out, at + 4, &value.to_le_bytes());
            f += 1;
        }
        i += 1;
    }
    Ok(())
}

/// The descriptor of `params` as an array, at compile time: `N` must be [`encoded_len`]. Fails
/// the build when it cannot be encoded.
pub const fn encode<const N: usize>(params: &[Param<'_>]) -> [u8; N] {
    let mut out = [0u8; N];
    match write(&mut out, params) {
        Ok(()) => out,
        Err(EncodeError::TooManyParams) => {
            panic!("a kernel descriptor holds at most 255 parameters")
        }
        Err(EncodeError::TooLong) => panic!("kernel parameter name or length too long"),
        Err(EncodeError::WrongSize) => panic!("kernel descriptor length mismatch"),
    }
}

/// Why a kernel descriptor was rejected.
pub type DecodeError = crate::DecodeError<Problem>;

/// What is wrong with a malformed kernel descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    ShorterThanHeader(usize),
    BadMagic([u8; 4]),
    ReservedNotZero,
    /// Parameter `index` runs past the end of the descriptor.
    Truncated {
        index: usize,
    },
    UnknownKind {
        index: usize,
        kind: u8,
    },
    NameNotUtf8 {
        index: usize,
    },
    UnknownFactor {
        index: usize,
        tag: u8,
    },
    /// A length on a parameter that is not a pointer.
    LengthOnNonPointer {
        index: usize,
    },
    /// A factor names a parameter that does not exist or is not an integer.
    BadFactorParam {
        index: usize,
        names: u32,
    },
    /// Bytes left over after the last parameter.
    TrailingBytes(usize),
}

impl core::fmt::Display for Problem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Problem::ShorterThanHeader(len) => {
                write!(f, "{len} bytes is shorter than the {HEADER_LEN}-byte header")
            }
            Problem::BadMagic(magic) => write!(f, "bad magic {magic:02x?} (expected `GPRK`)"),
            Problem::ReservedNotZero => f.write_str("reserved bytes are not zero"),
            Problem::Truncated { index } => write!(f, "parameter {index} runs past the end"),
            Problem::UnknownKind { index, kind } => {
                write!(f, "parameter {index} has the unknown kind {kind}")
            }
            Problem::NameNotUtf8 { index } => {
                write!(f, "the name of parameter {index} is not valid UTF-8")
            }
            Problem::UnknownFactor { index, tag } => {
                write!(f, "the length of parameter {index} has the unknown factor {tag}")
            }
            Problem::LengthOnNonPointer { index } => {
                write!(f, "parameter {index} has a length but is not a pointer")
            }
            Problem::BadFactorParam { index, names } => write!(
                f,
                "the length of parameter {index} names parameter {names}, which is not an integer parameter"
            ),
            Problem::TrailingBytes(count) => {
                write!(f, "{count} bytes follow the last parameter")
            }
        }
    }
}

/// A decoded (and fully checked) descriptor, borrowing its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signature<'a> {
    count: usize,
    params: &'a [u8],
}

/// One parameter of a decoded descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamView<'a> {
    pub name: &'a str,
    pub kind: ParamKind,
    /// Bytes of the value; for a pointer, of one element it points at.
    pub size: u32,
    factors: &'a [u8],
}

impl<'a> ParamView<'a> {
    /// The factors of its length (none: not declared).
    pub fn len(&self) -> impl Iterator<Item = Factor> + 'a {
        self.factors.chunks_exact(FACTOR_LEN).filter_map(|chunk| {
            let value = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            Factor::from_parts(chunk[0], value)
        })
    }

    /// Whether a length was declared.
    pub fn has_len(&self) -> bool {
        !self.factors.is_empty()
    }
}

impl<'a> Signature<'a> {
    /// Number of parameters.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The parameters in order.
    pub fn params(&self) -> impl Iterator<Item = ParamView<'a>> + 'a {
        let mut rest = self.params;
        let mut index = 0;
        core::iter::from_fn(move || {
            let (param, tail) = next_param(rest, index).ok()?;
            rest = tail;
            index += 1;
            Some(param)
        })
    }
}

/// Reads parameter `index` at the start of `bytes`: it and what follows.
fn next_param(bytes: &[u8], index: usize) -> Result<(ParamView<'_>, &[u8]), Problem> {
    let truncated = Problem::Truncated { index };
    let header = bytes.get(..PARAM_HEADER_LEN).ok_or(truncated)?;
    let kind = ParamKind::from_byte(header[0]).ok_or(Problem::UnknownKind {
        index,
        kind: header[0],
    })?;
    let factor_count = usize::from(header[1]);
    let name_len = usize::from(u16::from_le_bytes([header[2], header[3]]));
    let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let rest = &bytes[PARAM_HEADER_LEN..];
    let factors_len = factor_count * FACTOR_LEN;
    if rest.len() < name_len + factors_len {
        return Err(truncated);
    }
    let (name, rest) = rest.split_at(name_len);
    let (factors, rest) = rest.split_at(factors_len);
    let name = core::str::from_utf8(name).map_err(|_| Problem::NameNotUtf8 { index })?;
    Ok((
        ParamView {
            name,
            kind,
            size,
            factors,
        },
        rest,
    ))
}

/// Decodes a kernel descriptor.
pub fn decode(bytes: &[u8]) -> Result<Signature<'_>, DecodeError> {
    let bad = DecodeError::Malformed;
    let header = bytes
        .get(..HEADER_LEN)
        .ok_or(bad(Problem::ShorterThanHeader(bytes.len())))?;
    if header[..4] != MAGIC {
        return Err(bad(Problem::BadMagic([
            header[0], header[1], header[2], header[3],
        ])));
    }
    if header[4] != KERNEL_ABI_VERSION {
        return Err(DecodeError::Version(u32::from(header[4])));
    }
    if header[6] != 0 || header[7] != 0 {
        return Err(bad(Problem::ReservedNotZero));
    }
    let count = usize::from(header[5]);
    let params = &bytes[HEADER_LEN..];
    // First pass: every parameter's kind (factors may name later parameters).
    let mut kinds = [ParamKind::Other; MAX_PARAMS];
    let mut rest = params;
    for (index, kind) in kinds.iter_mut().enumerate().take(count) {
        let (param, tail) = next_param(rest, index).map_err(bad)?;
        *kind = param.kind;
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(bad(Problem::TrailingBytes(rest.len())));
    }
    let mut rest = params;
    for index in 0..count {
        let (param, tail) = next_param(rest, index).map_err(bad)?;
        rest = tail;
        if param.has_len() && param.kind != ParamKind::Pointer {
            return Err(bad(Problem::LengthOnNonPointer { index }));
        }
        for chunk in param.factors.chunks_exact(FACTOR_LEN) {
            if chunk[1..4] != [0, 0, 0] {
                return Err(bad(Problem::ReservedNotZero));
            }
            let value = u32::from_le_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]);
            match Factor::from_parts(chunk[0], value) {
                None => {
                    return Err(bad(Problem::UnknownFactor {
                        index,
                        tag: chunk[0],
                    }))
                }
                Some(Factor::Param(names)) => {
                    let is_integer = usize::try_from(names)
                        .ok()
                        .filter(|&names| names < count)
                        .is_some_and(|names| kinds[names] == ParamKind::Integer);
                    if !is_integer {
                        return Err(bad(Problem::BadFactorParam { index, names }));
                    }
                }
                Some(_) => {}
            }
        }
    }
    Ok(Signature { count, params })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::Sample;

    const N: &[Factor] = &[Factor::Param(3)];
    const GRID: &[Factor] = &[Factor::Constant(2), Factor::Blocks, Factor::Threads];
    const SAXPY: &[Param<'static>] = &[
        Param {
            name: "a",
            kind: ParamKind::Float,
            size: 4,
            len: &[],
        },
        Param {
            name: "x",
            kind: ParamKind::Pointer,
            size: 4,
            len: N,
        },
        Param {
            name: "y",
            kind: ParamKind::Pointer,
            size: 4,
            len: GRID,
        },
        Param {
            name: "n",
            kind: ParamKind::Integer,
            size: 8,
            len: &[],
        },
    ];
    const LEN: usize = encoded_len(SAXPY);
    // Built at compile time, as the attribute macro does.
    const BYTES: [u8; LEN] = encode::<LEN>(SAXPY);

    #[test]
    fn round_trip() {
        assert_eq!(LEN, 8 + 4 * 8 + 4 + 8 + 3 * 8);
        let signature = decode(&BYTES).unwrap();
        assert_eq!(signature.count(), 4);
        let params: [ParamView<'_>; 4] = {
            let mut it = signature.params();
            core::array::from_fn(|_| it.next().unwrap())
        };
        for (view, param) in params.iter().zip(SAXPY) {
            assert_eq!(
                (view.name, view.kind, view.size),
                (param.name, param.kind, param.size)
            );
            assert!(view.len().eq(param.len.iter().copied()));
        }
        assert!(signature.params().nth(4).is_none());
    }

    #[test]
    fn no_parameters() {
        const EMPTY: [u8; HEADER_LEN] = encode::<HEADER_LEN>(&[]);
        assert_eq!(decode(&EMPTY).unwrap().count(), 0);
    }

    /// The sample's bytes and their decoder.
    const ENCODED: Sample<'static, Problem> = Sample {
        bytes: &BYTES,
        decode_error: &|bytes| decode(bytes).err(),
    };

    #[test]
    fn rejects_every_truncation_and_extension() {
        ENCODED.rejects_every_truncation_and_extension(Problem::TrailingBytes(1));
    }

    #[test]
    fn rejects_bad_fields() {
        assert!(matches!(ENCODED.malformed(0, b'X'), Problem::BadMagic(_)));
        assert_eq!(ENCODED.patched(4, 2), DecodeError::Version(2));
        assert_eq!(ENCODED.malformed(6, 1), Problem::ReservedNotZero);
        // Parameter 0 starts at 8: kind, factor count, name length, size, name.
        assert_eq!(
            ENCODED.malformed(8, 9),
            Problem::UnknownKind { index: 0, kind: 9 }
        );
        assert_eq!(
            ENCODED.malformed(16, 0xff),
            Problem::NameNotUtf8 { index: 0 }
        );
        // Parameter 1 (`x`) starts at 17; its factor at 26 names parameter 3 (`n`).
        assert_eq!(
            ENCODED.malformed(26, 7),
            Problem::UnknownFactor { index: 1, tag: 7 }
        );
        assert_eq!(
            ENCODED.malformed(30, 0),
            Problem::BadFactorParam { index: 1, names: 0 }
        );
        assert_eq!(
            ENCODED.malformed(30, 9),
            Problem::BadFactorParam { index: 1, names: 9 }
        );
        // `a` made a pointer would still have no length; `x` made a float has one.
        assert_eq!(
            ENCODED.malformed(17, ParamKind::Float as u8),
            Problem::LengthOnNonPointer { index: 1 }
        );
    }

    #[test]
    fn too_many_parameters_are_refused() {
        let one = Param {
            name: "",
            kind: ParamKind::Integer,
            size: 4,
            len: &[],
        };
        let params = [one; MAX_PARAMS + 1];
        let mut out = [0u8; HEADER_LEN + (MAX_PARAMS + 1) * PARAM_HEADER_LEN];
        assert_eq!(write(&mut out, &params), Err(EncodeError::TooManyParams));
        let mut short = [0u8; 3];
        assert_eq!(write(&mut short, &params), Err(EncodeError::WrongSize));
    }
}
