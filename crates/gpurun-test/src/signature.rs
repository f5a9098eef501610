//! A launch's arguments checked against the kernel's parameters as the image records them
//! (`gpurun_image::Kernel::signature`), to refuse wrong arguments before launch: a
//! `#[gpurun::kernel]`'s descriptor on every target (names, kinds, sizes, and for pointers
//! declared with `len(..)` how many elements the launch needs), else the types a PTX `.entry`
//! declares. Elsewhere (host `.so`s, cubins and AMDGPU code objects without descriptors) nothing
//! is checked.

use gpurun_hal::kernel_args::KernelArg;
use gpurun_image::{Factor, KernelParam, ParamKind};

use crate::launch_args::Arg;
use gpurun_hal::LaunchShape;

/// What a parameter is, in words: `a 32-bit float`, `a pointer`.
fn describe_kind(param: &KernelParam) -> String {
    let bits = param.size * 8;
    match param.kind {
        ParamKind::Pointer => "a pointer".to_string(),
        ParamKind::Integer => format!("a {bits}-bit integer"),
        ParamKind::Float => format!("a {bits}-bit float"),
        ParamKind::Other => "an aggregate".to_string(),
    }
}

/// The parameter's name, when the image records one.
fn name_of(param: &KernelParam) -> Option<&str> {
    Some(param.name.as_str()).filter(|name| !name.is_empty())
}

/// `argument 1 (`x`)`, or `argument 1` without a name.
fn describe(param: &KernelParam, index: usize) -> String {
    match name_of(param) {
        Some(name) => format!("argument {index} (`{name}`)"),
        None => format!("argument {index}"),
    }
}

/// Checks `args` against `params`; the error says what is wrong, for [`crate::Error::Arguments`].
pub(crate) fn check(params: &[KernelParam], args: &[Arg]) -> Result<(), String> {
    if params.len() != args.len() {
        let list: Vec<String> = params
            .iter()
            .map(|param| match name_of(param) {
                Some(name) => format!("{name}: {}", describe_kind(param)),
                None => describe_kind(param),
            })
            .collect();
        return Err(format!(
            "it takes {} argument(s) ({}), not {}",
            params.len(),
            list.join(", "),
            args.len()
        ));
    }
    for (index, (param, arg)) in params.iter().zip(args).enumerate() {
        let size = param.size as usize;
        let fits = match (param.kind, arg) {
            (ParamKind::Other, _) => true,
            (ParamKind::Pointer, Arg::Buffer { .. } | Arg::Raw(KernelArg::U64(_))) => true,
            (ParamKind::Pointer, _) => false,
            (_, Arg::Buffer { .. }) => false,
            (ParamKind::Integer, Arg::Scalar(value) | Arg::Raw(value)) => {
                !matches!(value, KernelArg::F32(_) | KernelArg::F64(_)) && value.size() == size
            }
            (ParamKind::Float, Arg::Scalar(value) | Arg::Raw(value)) => {
                matches!(value, KernelArg::F32(_) | KernelArg::F64(_)) && value.size() == size
            }
        };
        if !fits {
            return Err(format!(
                "{} is {} in the kernel, but {} was passed",
                describe(param, index),
                describe_kind(param),
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
    params: &[KernelParam],
    args: &[Arg],
    shape: LaunchShape,
) -> Result<(), TooSmall> {
    for (index, (param, arg)) in params.iter().zip(args).enumerate() {
        let Arg::Buffer { bytes, .. } = *arg else {
            continue;
        };
        if param.len.is_empty() || param.size == 0 {
            continue;
        }
        let mut needed: u128 = 1;
        let mut names = Vec::new();
        let mut values = Vec::new();
        for factor in &param.len {
            let (name, value) = match *factor {
                Factor::Constant(value) => (value.to_string(), u128::from(value)),
                Factor::Blocks => ("blocks".to_string(), product(shape.blocks)),
                Factor::Threads => ("threads".to_string(), product(shape.threads)),
                Factor::Param(at) => {
                    let at = at as usize;
                    let name = params
                        .get(at)
                        .and_then(name_of)
                        .map_or_else(|| format!("argument {at}"), str::to_owned);
                    let value = args.get(at).map_or(0, |arg| integer_value(arg.value()));
                    (name, value)
                }
            };
            needed = needed.saturating_mul(value);
            values.push(value.to_string());
            names.push(name);
        }
        let actual = bytes as u64 / u64::from(param.size);
        if needed > u128::from(actual) {
            let names = names.join(" * ");
            let values = values.join(" * ");
            let rule = if names == values {
                names
            } else {
                format!("{names} = {values}")
            };
            return Err(TooSmall {
                param: name_of(param).map_or_else(|| format!("argument {index}"), str::to_owned),
                needed,
                actual,
                element_size: param.size,
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

    fn param(name: &str, kind: ParamKind, size: u32, len: Vec<Factor>) -> KernelParam {
        KernelParam {
            name: name.into(),
            kind,
            size,
            len,
        }
    }

    /// What a PTX image declares for `saxpy(a: f32, x: *const f32, y: *mut f32, n: usize)`: kinds
    /// and sizes, no names or lengths (gpurun-image reads them from the `.entry`).
    fn declared_saxpy() -> Vec<KernelParam> {
        vec![
            param("", ParamKind::Float, 4, vec![]),
            param("", ParamKind::Pointer, 0, vec![]),
            param("", ParamKind::Pointer, 0, vec![]),
            param("", ParamKind::Integer, 8, vec![]),
        ]
    }

    fn buffer() -> Arg {
        Arg::Buffer {
            address: 0x1000,
            bytes: 16,
        }
    }

    #[test]
    fn matching_arguments_pass() {
        let saxpy = &declared_saxpy();
        let args = [
            Arg::Scalar(KernelArg::F32(2.0)),
            buffer(),
            buffer(),
            Arg::Scalar(KernelArg::U64(3)),
        ];
        assert_eq!(check(saxpy, &args), Ok(()));
        // `.param .align 4 .b8 odd_param_0[12], .param .s32 odd_param_1`
        let odd = &[
            param("", ParamKind::Other, 12, vec![]),
            param("", ParamKind::Integer, 4, vec![]),
        ];
        let args = [
            Arg::Scalar(KernelArg::U64(1)),
            Arg::Scalar(KernelArg::I32(-1)),
        ];
        assert_eq!(check(odd, &args), Ok(()));
    }

    #[test]
    fn wrong_count_width_kind_or_pointer_is_an_error() {
        let saxpy = &declared_saxpy();
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
    fn described() -> Vec<KernelParam> {
        vec![
            param("a", ParamKind::Float, 4, vec![]),
            param("x", ParamKind::Pointer, 4, vec![Factor::Param(3)]),
            param(
                "y",
                ParamKind::Pointer,
                8,
                vec![Factor::Constant(2), Factor::Blocks, Factor::Threads],
            ),
            param("n", ParamKind::Integer, 8, vec![]),
        ]
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
        let ptx = &declared_saxpy();
        let tiny = [
            Arg::Scalar(KernelArg::F32(1.0)),
            sized(0),
            sized(0),
            Arg::Scalar(KernelArg::U64(1 << 40)),
        ];
        assert_eq!(check_lengths(ptx, &tiny, shape), Ok(()));
    }
}
