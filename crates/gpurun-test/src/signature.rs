//! Kernel signatures where the image records them, to refuse wrong arguments before launch.
//!
//! A `#[gpurun::kernel]` records its parameters in the image (`__gpurun_kdesc_NAME`, read by
//! `gpurun_image::Kernel::signature`) on every target: their names, kinds and sizes, and for
//! pointers declared with `len(..)` how many elements the launch needs. PTX also declares each
//! `.entry`'s parameters with their types (`.param .f32 saxpy_param_0`, `.param .u64 .ptr
//! .align 1 saxpy_param_1`), which covers kernels without a descriptor in PTX images. Elsewhere
//! (host `.so`s, cubins and AMDGPU code objects without descriptors) nothing is checked.

use std::collections::HashMap;

use gpurun_hal::kernel_args::KernelArg;
use gpurun_image::{Factor, KernelSignature, ParamKind};

use crate::launch_args::Arg;
use gpurun_hal::LaunchShape;

/// One declared parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Param {
    /// A pointer (`.u64 .ptr`): a buffer.
    Pointer,
    /// An integer of this many bytes (`.u32`, `.s64`, `.b32`, ...).
    Integer(usize),
    /// A float of this many bytes (`.f32`, `.f64`).
    Float(usize),
    /// Anything else (an aggregate `.b8 name[N]`, `.f16`, ...): only counted.
    Other,
}

/// A parameter with what the kernel descriptor adds to it (nothing for PTX).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamSpec {
    pub param: Param,
    /// Its name in the source.
    pub name: Option<String>,
    /// For a pointer: bytes of one element, and the declared length (empty: none).
    pub element_size: u32,
    pub len: Vec<Factor>,
}

impl ParamSpec {
    fn plain(param: Param) -> ParamSpec {
        ParamSpec {
            param,
            name: None,
            element_size: 0,
            len: Vec::new(),
        }
    }

    /// `argument 1 (`x`)`, or `argument 1` without a name.
    fn describe(&self, index: usize) -> String {
        match &self.name {
            Some(name) if !name.is_empty() => format!("argument {index} (`{name}`)"),
            _ => format!("argument {index}"),
        }
    }
}

impl std::fmt::Display for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Param::Pointer => write!(f, "a pointer"),
            Param::Integer(size) => write!(f, "a {}-bit integer", size * 8),
            Param::Float(size) => write!(f, "a {}-bit float", size * 8),
            Param::Other => write!(f, "an aggregate"),
        }
    }
}

/// The parameters a kernel descriptor records.
pub(crate) fn from_descriptor(signature: &KernelSignature) -> Vec<ParamSpec> {
    signature
        .params
        .iter()
        .map(|param| {
            let size = param.size as usize;
            ParamSpec {
                param: match param.kind {
                    ParamKind::Pointer => Param::Pointer,
                    ParamKind::Integer => Param::Integer(size),
                    ParamKind::Float => Param::Float(size),
                    ParamKind::Other => Param::Other,
                },
                name: Some(param.name.clone()),
                element_size: param.size,
                len: param.len.clone(),
            }
        })
        .collect()
}

/// The parameters of every `.entry` in PTX text.
pub(crate) fn ptx_signatures(ptx: &str) -> HashMap<String, Vec<ParamSpec>> {
    let mut signatures = HashMap::new();
    let mut rest = ptx;
    while let Some(at) = rest.find(".entry") {
        rest = &rest[at + ".entry".len()..];
        let Some(open) = rest.find('(') else { break };
        let name = rest[..open].trim();
        let Some(close) = rest[open..].find(')') else {
            break;
        };
        let list = &rest[open + 1..open + close];
        rest = &rest[open + close..];
        if name.is_empty() || name.contains(char::is_whitespace) {
            continue;
        }
        let params = list
            .split(',')
            .map(str::trim)
            .filter(|decl| !decl.is_empty())
            .map(|decl| ParamSpec::plain(parse_param(decl)))
            .collect();
        signatures.insert(name.to_string(), params);
    }
    signatures
}

fn parse_param(decl: &str) -> Param {
    let words: Vec<&str> = decl.split_whitespace().collect();
    let is_array = decl.contains('[');
    let Some(ty) = words
        .iter()
        .skip_while(|word| **word != ".param")
        .nth(1)
        .and_then(|ty| ty.strip_prefix('.'))
    else {
        return Param::Other;
    };
    if is_array {
        return Param::Other;
    }
    if words.contains(&".ptr") {
        return Param::Pointer;
    }
    let (kind, bits) = ty.split_at(1);
    match (kind, bits.parse::<usize>()) {
        ("u" | "s" | "b", Ok(bits @ (8 | 16 | 32 | 64))) => Param::Integer(bits / 8),
        ("f", Ok(bits @ (32 | 64))) => Param::Float(bits / 8),
        _ => Param::Other,
    }
}

/// Checks `args` against `params`; the error says what is wrong, for [`crate::Error::Arguments`].
pub(crate) fn check(params: &[ParamSpec], args: &[Arg]) -> Result<(), String> {
    if params.len() != args.len() {
        let list: Vec<String> = params
            .iter()
            .map(|spec| match &spec.name {
                Some(name) if !name.is_empty() => format!("{name}: {}", spec.param),
                _ => spec.param.to_string(),
            })
            .collect();
        return Err(format!(
            "it takes {} argument(s) ({}), not {}",
            params.len(),
            list.join(", "),
            args.len()
        ));
    }
    for (index, (spec, arg)) in params.iter().zip(args).enumerate() {
        let fits = match (spec.param, arg) {
            (Param::Other, _) => true,
            (Param::Pointer, Arg::Buffer { .. } | Arg::Raw(KernelArg::U64(_))) => true,
            (Param::Pointer, _) => false,
            (_, Arg::Buffer { .. }) => false,
            (Param::Integer(size), Arg::Scalar(value) | Arg::Raw(value)) => {
                !matches!(value, KernelArg::F32(_) | KernelArg::F64(_)) && value.size() == size
            }
            (Param::Float(size), Arg::Scalar(value) | Arg::Raw(value)) => {
                matches!(value, KernelArg::F32(_) | KernelArg::F64(_)) && value.size() == size
            }
        };
        if !fits {
            return Err(format!(
                "{} is {} in the kernel, but {} was passed",
                spec.describe(index),
                spec.param,
                arg.describe()
            ));
        }
    }
    Ok(())
}

/// A buffer smaller than its parameter's declared length, for [`crate::Error::BufferTooSmall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TooSmall {
    pub param: String,
    pub needed: u128,
    pub actual: u64,
    pub element_size: u32,
    /// The declared length with the values it took: `n = 1000`, `blocks * threads = 4 * 64`.
    pub rule: String,
}

/// Checks every buffer passed for a pointer with a declared length against that length, for
/// this launch shape. `args` must already fit `params` ([`check`]). A pointer passed as a raw
/// address has no known size and is not checked.
pub(crate) fn check_lengths(
    params: &[ParamSpec],
    args: &[Arg],
    shape: LaunchShape,
) -> Result<(), TooSmall> {
    for (index, (spec, arg)) in params.iter().zip(args).enumerate() {
        let Arg::Buffer { bytes, .. } = *arg else {
            continue;
        };
        if spec.len.is_empty() || spec.element_size == 0 {
            continue;
        }
        let mut needed: u128 = 1;
        let mut names = Vec::new();
        let mut values = Vec::new();
        for factor in &spec.len {
            let (name, value) = match *factor {
                Factor::Constant(value) => (value.to_string(), u128::from(value)),
                Factor::Blocks => ("blocks".to_string(), product(shape.blocks)),
                Factor::Threads => ("threads".to_string(), product(shape.threads)),
                Factor::Param(at) => {
                    let at = at as usize;
                    let name = params
                        .get(at)
                        .and_then(|spec| spec.name.clone())
                        .unwrap_or_else(|| format!("argument {at}"));
                    let value = args.get(at).map_or(0, |arg| integer_value(arg.value()));
                    (name, value)
                }
            };
            needed = needed.saturating_mul(value);
            values.push(value.to_string());
            names.push(name);
        }
        let actual = bytes as u64 / u64::from(spec.element_size);
        if needed > u128::from(actual) {
            let names = names.join(" * ");
            let values = values.join(" * ");
            let rule = if names == values {
                names
            } else {
                format!("{names} = {values}")
            };
            return Err(TooSmall {
                param: spec
                    .name
                    .clone()
                    .filter(|name| !name.is_empty())
                    .unwrap_or_else(|| format!("argument {index}")),
                needed,
                actual,
                element_size: spec.element_size,
                rule,
            });
        }
    }
    Ok(())
}

fn product(dims: [u32; 3]) -> u128 {
    dims.iter().map(|&d| u128::from(d)).product()
}

/// An integer argument as a count: a negative one counts as 0.
fn integer_value(value: KernelArg) -> u128 {
    match value {
        KernelArg::I32(v) => u128::try_from(v).unwrap_or(0),
        KernelArg::U32(v) => u128::from(v),
        KernelArg::U64(v) => u128::from(v),
        KernelArg::F32(_) | KernelArg::F64(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What this nightly's nvptx backend writes for `saxpy(a: f32, x: *const f32, y: *mut f32,
    /// n: usize)` and a parameterless test kernel.
    const PTX: &str = "
.visible .entry saxpy(
	.param .f32 saxpy_param_0,
	.param .u64 .ptr .align 1 saxpy_param_1,
	.param .u64 .ptr .align 1 saxpy_param_2,
	.param .u64 saxpy_param_3
)                                       // @saxpy
{
	ret;
}
.visible .entry __gpurun_test_x()
{
	ret;
}
.visible .entry odd(
	.param .align 4 .b8 odd_param_0[12],
	.param .s32 odd_param_1
)
{
	ret;
}
";

    fn buffer() -> Arg {
        Arg::Buffer {
            address: 0x1000,
            bytes: 16,
        }
    }

    fn kinds(params: &[ParamSpec]) -> Vec<Param> {
        params.iter().map(|spec| spec.param).collect()
    }

    #[test]
    fn ptx_parameters_are_read_with_their_kinds() {
        let signatures = ptx_signatures(PTX);
        assert_eq!(
            kinds(&signatures["saxpy"]),
            [
                Param::Float(4),
                Param::Pointer,
                Param::Pointer,
                Param::Integer(8)
            ]
        );
        assert_eq!(kinds(&signatures["__gpurun_test_x"]), []);
        assert_eq!(kinds(&signatures["odd"]), [Param::Other, Param::Integer(4)]);
    }

    #[test]
    fn matching_arguments_pass() {
        let saxpy = &ptx_signatures(PTX)["saxpy"];
        let args = [
            Arg::Scalar(KernelArg::F32(2.0)),
            buffer(),
            buffer(),
            Arg::Scalar(KernelArg::U64(3)),
        ];
        assert_eq!(check(saxpy, &args), Ok(()));
        let odd = &ptx_signatures(PTX)["odd"];
        let args = [
            Arg::Scalar(KernelArg::U64(1)),
            Arg::Scalar(KernelArg::I32(-1)),
        ];
        assert_eq!(check(odd, &args), Ok(()));
    }

    #[test]
    fn wrong_count_width_kind_or_pointer_is_an_error() {
        let saxpy = &ptx_signatures(PTX)["saxpy"];
        let error = check(saxpy, &[Arg::Scalar(KernelArg::F32(2.0))]).unwrap_err();
        assert_eq!(
            error,
            "it takes 4 argument(s) (a 32-bit float, a pointer, a pointer, a 64-bit integer), not 1"
        );
        let mut args = vec![
            Arg::Scalar(KernelArg::F64(2.0)),
            buffer(),
            buffer(),
            Arg::Scalar(KernelArg::U64(3)),
        ];
        assert_eq!(
            check(saxpy, &args).unwrap_err(),
            "argument 0 is a 32-bit float in the kernel, but an f64 was passed"
        );
        args[0] = Arg::Scalar(KernelArg::F32(2.0));
        args[3] = Arg::Scalar(KernelArg::U32(3));
        assert_eq!(
            check(saxpy, &args).unwrap_err(),
            "argument 3 is a 64-bit integer in the kernel, but a u32 was passed"
        );
        args[3] = buffer();
        assert!(check(saxpy, &args).unwrap_err().contains("but a buffer"));
        args[3] = Arg::Scalar(KernelArg::U64(3));
        args[1] = Arg::Scalar(KernelArg::U64(0x1000));
        assert_eq!(
            check(saxpy, &args).unwrap_err(),
            "argument 1 is a pointer in the kernel, but a u64 was passed"
        );
    }

    /// What `#[gpurun::kernel(len(x = n, y = 2 * blocks * threads))] fn k(a: f32, x: *const
    /// f32, y: *mut f64, n: usize)` records.
    fn described() -> Vec<ParamSpec> {
        use gpurun_image::KernelParam;
        let param = |name: &str, kind, size, len: Vec<Factor>| KernelParam {
            name: name.into(),
            kind,
            size,
            len,
        };
        from_descriptor(&KernelSignature {
            params: vec![
                param("a", ParamKind::Float, 4, vec![]),
                param("x", ParamKind::Pointer, 4, vec![Factor::Param(3)]),
                param(
                    "y",
                    ParamKind::Pointer,
                    8,
                    vec![Factor::Constant(2), Factor::Blocks, Factor::Threads],
                ),
                param("n", ParamKind::Integer, 8, vec![]),
            ],
        })
    }

    fn sized(bytes: usize) -> Arg {
        Arg::Buffer {
            address: 0x1000,
            bytes,
        }
    }

    #[test]
    fn descriptor_errors_name_the_parameter() {
        let params = described();
        let error = check(&params, &[Arg::Scalar(KernelArg::F32(1.0))]).unwrap_err();
        assert_eq!(
            error,
            "it takes 4 argument(s) (a: a 32-bit float, x: a pointer, y: a pointer, n: a 64-bit integer), not 1"
        );
        let args = [
            Arg::Scalar(KernelArg::F32(1.0)),
            sized(16),
            sized(16),
            Arg::Scalar(KernelArg::U32(4)),
        ];
        assert_eq!(
            check(&params, &args).unwrap_err(),
            "argument 3 (`n`) is a 64-bit integer in the kernel, but a u32 was passed"
        );
    }

    #[test]
    fn buffers_must_hold_the_declared_length() {
        let params = described();
        let shape = LaunchShape::blocks(2).threads(3);
        let args = |x_bytes, y_bytes, n| {
            [
                Arg::Scalar(KernelArg::F32(1.0)),
                sized(x_bytes),
                sized(y_bytes),
                Arg::Scalar(KernelArg::U64(n)),
            ]
        };
        // x: n f32s; y: 2 * 2 * 3 f64s.
        assert_eq!(check_lengths(&params, &args(40, 96, 10), shape), Ok(()));
        assert_eq!(check_lengths(&params, &args(400, 960, 10), shape), Ok(()));
        assert_eq!(
            check_lengths(&params, &args(39, 96, 10), shape),
            Err(TooSmall {
                param: "x".into(),
                needed: 10,
                actual: 9,
                element_size: 4,
                rule: "n = 10".into(),
            })
        );
        let error = check_lengths(&params, &args(40, 88, 10), shape).unwrap_err();
        assert_eq!((error.needed, error.actual), (12, 11));
        assert_eq!(error.rule, "2 * blocks * threads = 2 * 2 * 3");
        // A pointer passed as a raw address is not checked.
        let mut raw = args(0, 96, 10);
        raw[1] = Arg::Raw(KernelArg::U64(0x1000));
        assert_eq!(check_lengths(&params, &raw, shape), Ok(()));
        // An undeclared length (PTX) checks nothing.
        let ptx = &ptx_signatures(PTX)["saxpy"];
        let tiny = [
            Arg::Scalar(KernelArg::F32(1.0)),
            sized(0),
            sized(0),
            Arg::Scalar(KernelArg::U64(1 << 40)),
        ];
        assert_eq!(check_lengths(ptx, &tiny, shape), Ok(()));
    }
}
