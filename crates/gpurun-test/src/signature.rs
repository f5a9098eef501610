//! Kernel signatures where the image records them, to refuse wrong arguments before launch.
//!
//! PTX declares each `.entry`'s parameters with their types (`.param .f32 saxpy_param_0`,
//! `.param .u64 .ptr .align 1 saxpy_param_1`), so for PTX images the number, width and kind of
//! every argument are checked. Host `.so`s, cubins and AMDGPU code objects carry no such
//! record that we read: there nothing is checked (`#[gpurun::kernel]` would have to record the
//! signature, as test descriptors are recorded).

use std::collections::HashMap;

use gpurun_hal::args::KernelArg;

use crate::args::Arg;

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

/// The parameters of every `.entry` in PTX text.
pub(crate) fn ptx_signatures(ptx: &str) -> HashMap<String, Vec<Param>> {
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
            .map(parse_param)
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
pub(crate) fn check(params: &[Param], args: &[Arg]) -> Result<(), String> {
    if params.len() != args.len() {
        let list: Vec<String> = params.iter().map(Param::to_string).collect();
        return Err(format!(
            "it takes {} argument(s) ({}), not {}",
            params.len(),
            list.join(", "),
            args.len()
        ));
    }
    for (index, (param, arg)) in params.iter().zip(args).enumerate() {
        let fits = match (param, arg) {
            (Param::Other, _) => true,
            (Param::Pointer, Arg::Buffer(_) | Arg::Raw(KernelArg::U64(_))) => true,
            (Param::Pointer, _) => false,
            (_, Arg::Buffer(_)) => false,
            (Param::Integer(size), Arg::Scalar(value) | Arg::Raw(value)) => {
                !matches!(value, KernelArg::F32(_) | KernelArg::F64(_)) && value.size() == *size
            }
            (Param::Float(size), Arg::Scalar(value) | Arg::Raw(value)) => {
                matches!(value, KernelArg::F32(_) | KernelArg::F64(_)) && value.size() == *size
            }
        };
        if !fits {
            return Err(format!(
                "argument {index} is {param} in the kernel, but {} was passed",
                arg.describe()
            ));
        }
    }
    Ok(())
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
        Arg::Buffer(KernelArg::U64(0x1000))
    }

    #[test]
    fn ptx_parameters_are_read_with_their_kinds() {
        let signatures = ptx_signatures(PTX);
        assert_eq!(
            signatures["saxpy"],
            [
                Param::Float(4),
                Param::Pointer,
                Param::Pointer,
                Param::Integer(8)
            ]
        );
        assert_eq!(signatures["__gpurun_test_x"], []);
        assert_eq!(signatures["odd"], [Param::Other, Param::Integer(4)]);
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
}
