//! LLVM libc's six printf opcodes (`PRINTF_TO_{STDOUT,STDERR,STREAM}` with naturally aligned
//! arguments, as nvptx passes varargs, and their `_PACKED` forms, as amdgpu does).
//!
//! Message sequence (LLVM's `handle_printf` / `vfprintf_impl`):
//! 1. (STREAM forms) C→ `data[0]` = the stream;
//! 2. C→ send_n(format with its NUL);
//! 3. ←S `data[0]` = bytes of arguments the format consumes (from the parse below);
//! 4. C→ send_n(the argument bytes the device's `va_list` points to);
//! 5. while some lane has a `%s` argument with a non-null pointer left, last one first:
//!    ←S `data[1]` = that device pointer (0 for lanes with none); C→ send_n(the string);
//! 6. ←S `data[0]` = the printf result, `data[1]` = 0 (ends the client's loop).
//!
//! Each conversion is formatted by the host C library's `snprintf` on the isolated specifier,
//! as LLVM's server does with `fprintf`, so output matches C exactly (flags, widths, precisions,
//! `*`, length modifiers, every float form). Only conversions whose argument type is known are
//! passed to it: `%n` writes nothing (refused), `%ls`-style wide strings are printed as narrow
//! strings, an unknown conversion is printed as written, and a conversion whose output would
//! pass [`MAX_CONVERSION`] bytes (or that the C library rejects) ends the output with a
//! negative result, as a failed C printf does.

use super::stdio::{recv_stream_targets, HostState, Target};
use super::{recv_lanes, Fail, Served, Sink, MAX_WRITE};
use gpurun_rpc::opcode;
use gpurun_rpc::server::{Server, ServerPort};
use libc::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::ffi::CString;

/// Most bytes one conversion may produce (`%2000000000d` is refused, not allocated).
pub const MAX_CONVERSION: usize = 1 << 20;

/// The type of one argument the format consumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arg {
    /// `%c`, narrow integers and `*` widths/precisions (4 bytes).
    U32,
    /// Integers with `l`, `ll`, `j`, `z`, `t`, `q`, `L` (8 bytes).
    U64,
    /// Floating conversions (8 bytes).
    F64,
    /// `%p`, `%s`, `%n` (8 bytes).
    Ptr,
}

impl Arg {
    fn size(self) -> usize {
        match self {
            Arg::U32 => 4,
            _ => 8,
        }
    }
}

/// One piece of a parsed format.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// Bytes printed as they are.
    Literal(std::ops::Range<usize>),
    /// A conversion: its text (`%` to conversion character), the conversion character, its
    /// length class, and how many `*` it consumes.
    Spec {
        text: std::ops::Range<usize>,
        conv: u8,
        long: bool,
        /// Byte ranges of the length modifier inside `text` (removed where unsafe).
        modifier: std::ops::Range<usize>,
        stars: u8,
    },
}

/// Splits a format (up to its first NUL, or its end if it has none) the way LLVM's server does.
fn parse(format: &[u8]) -> (Vec<Piece>, Vec<Arg>) {
    let end = format.iter().position(|&b| b == 0).unwrap_or(format.len());
    let format = &format[..end];
    let at = |i: usize| format.get(i).copied().unwrap_or(0);
    let mut pieces = Vec::new();
    let mut args = Vec::new();
    let mut literal_start = 0;
    let mut pos = 0;
    while pos < format.len() {
        if format[pos] != b'%' {
            pos += 1;
            continue;
        }
        let start = pos;
        pos += 1;
        let mut stars = 0u8;
        let mut spec_args = Vec::new();
        while matches!(at(pos), b' ' | b'-' | b'+' | b'#' | b'0') {
            pos += 1;
        }
        // The width, then after a `.` the precision: `*` (a `u32` argument) or digits.
        let mut star_or_digits = |pos: &mut usize| {
            if at(*pos) == b'*' {
                stars += 1;
                spec_args.push(Arg::U32);
                *pos += 1;
            } else {
                while at(*pos).is_ascii_digit() {
                    *pos += 1;
                }
            }
        };
        star_or_digits(&mut pos);
        if at(pos) == b'.' {
            pos += 1;
            star_or_digits(&mut pos);
        }
        let modifier_start = pos;
        let long = match at(pos) {
            b'l' => {
                pos += if at(pos + 1) == b'l' { 2 } else { 1 };
                true
            }
            b't' | b'j' | b'z' | b'q' | b'L' => {
                pos += 1;
                true
            }
            b'h' => {
                pos += if at(pos + 1) == b'h' { 2 } else { 1 };
                false
            }
            _ => false,
        };
        let modifier = modifier_start..pos;
        let conv = at(pos);
        if conv == 0 {
            // An unfinished conversion at the end: its stars still count (as in LLVM), its
            // text is printed as literal text.
            args.extend(spec_args);
            break;
        }
        match conv {
            b'c' => spec_args.push(Arg::U32),
            b'd' | b'b' | b'B' | b'i' | b'o' | b'x' | b'X' | b'u' => {
                spec_args.push(if long { Arg::U64 } else { Arg::U32 })
            }
            b'f' | b'F' | b'e' | b'E' | b'a' | b'A' | b'g' | b'G' => spec_args.push(Arg::F64),
            b'p' | b's' | b'n' => spec_args.push(Arg::Ptr),
            _ => {}
        }
        pos += 1;
        if start > literal_start {
            pieces.push(Piece::Literal(literal_start..start));
        }
        pieces.push(Piece::Spec {
            text: start..pos,
            conv,
            long,
            modifier,
            stars,
        });
        args.extend(spec_args);
        literal_start = pos;
    }
    if format.len() > literal_start {
        pieces.push(Piece::Literal(literal_start..format.len()));
    }
    (pieces, args)
}

/// Bytes of arguments `args` take, naturally aligned or packed.
fn args_size(args: &[Arg], packed: bool) -> u64 {
    let mut offset = 0usize;
    for arg in args {
        if !packed {
            offset = offset.next_multiple_of(arg.size());
        }
        offset += arg.size();
    }
    offset as u64
}

/// Reads arguments from the bytes the device sent; past their end every value is all ones,
/// as in LLVM's server (a `%s` there counts as a null string).
struct ArgReader<'a> {
    bytes: &'a [u8],
    offset: usize,
    packed: bool,
}

impl ArgReader<'_> {
    fn next(&mut self, arg: Arg) -> Option<u64> {
        let size = arg.size();
        if !self.packed {
            self.offset = self.offset.next_multiple_of(size);
        }
        let value = self.bytes.get(self.offset..self.offset + size).map(|b| {
            let mut word = [0u8; 8];
            word[..size].copy_from_slice(b);
            u64::from_le_bytes(word)
        });
        self.offset += size;
        value
    }

    fn value(&mut self, arg: Arg) -> u64 {
        self.next(arg).unwrap_or(match arg {
            Arg::U32 => u64::from(u32::MAX),
            Arg::F64 => (-1.0f64).to_bits(),
            _ => u64::MAX,
        })
    }
}

/// The device pointers of a lane's `%s` arguments with a non-null value, in format order.
fn string_pointers(pieces: &[Piece], args: &[u8], packed: bool) -> Vec<u64> {
    let mut reader = ArgReader {
        bytes: args,
        offset: 0,
        packed,
    };
    let mut pointers = Vec::new();
    for piece in pieces {
        if let Piece::Spec { conv, stars, .. } = piece {
            for _ in 0..*stars {
                reader.value(Arg::U32);
            }
            if let Some(arg) = arg_of(*conv, piece) {
                let value = reader.next(arg);
                if *conv == b's' {
                    // 0 is a null string; all ones is what a missing argument reads as.
                    if let Some(pointer) = value.filter(|&p| p != 0 && p != u64::MAX) {
                        pointers.push(pointer);
                    }
                }
            }
        }
    }
    pointers
}

fn arg_of(conv: u8, piece: &Piece) -> Option<Arg> {
    let Piece::Spec { long, .. } = piece else {
        return None;
    };
    match conv {
        b'c' => Some(Arg::U32),
        b'd' | b'b' | b'B' | b'i' | b'o' | b'x' | b'X' | b'u' => {
            Some(if *long { Arg::U64 } else { Arg::U32 })
        }
        b'f' | b'F' | b'e' | b'E' | b'a' | b'A' | b'g' | b'G' => Some(Arg::F64),
        b'p' | b's' | b'n' => Some(Arg::Ptr),
        _ => None,
    }
}

/// The value handed to `snprintf` for one conversion.
enum Value<'a> {
    Uint(c_uint),
    Ulong(c_ulonglong),
    Double(f64),
    Pointer(*const c_void),
    Str(&'a CString),
}

/// Formats one isolated conversion with the C library. `None` on an error or an output over
/// [`MAX_CONVERSION`].
fn c_format(spec: &CString, stars: &[c_int], value: Value<'_>) -> Option<Vec<u8>> {
    let mut buffer = vec![0u8; 128];
    loop {
        let out = buffer.as_mut_ptr() as *mut c_char;
        let len = buffer.len();
        let fmt = spec.as_ptr();
        macro_rules! call {
            ($value:expr) => {
                match *stars {
                    // SAFETY: `out` has `len` bytes; `fmt` is a NUL-terminated conversion whose
                    // argument types were checked by `format_lane` to be exactly these (int per
                    // `*`, then the value's C type), and strings are NUL-terminated.
                    [] => unsafe { libc::snprintf(out, len, fmt, $value) },
                    // SAFETY: as above.
                    [a] => unsafe { libc::snprintf(out, len, fmt, a, $value) },
                    // SAFETY: as above.
                    [a, b, ..] => unsafe { libc::snprintf(out, len, fmt, a, b, $value) },
                }
            };
        }
        let written = match &value {
            Value::Uint(v) => call!(*v),
            Value::Ulong(v) => call!(*v),
            Value::Double(v) => call!(*v),
            Value::Pointer(v) => call!(*v),
            Value::Str(v) => call!(v.as_ptr()),
        };
        let written = usize::try_from(written).ok()?;
        if written < buffer.len() {
            buffer.truncate(written);
            return Some(buffer);
        }
        if written >= MAX_CONVERSION {
            return None;
        }
        buffer = vec![0u8; written + 1];
    }
}

/// Whether a conversion's width or precision (written or `*`) exceeds [`MAX_CONVERSION`].
fn too_wide(text: &[u8], stars: &[c_int]) -> bool {
    let limit = MAX_CONVERSION as u64;
    let written = text
        .split(|b| !b.is_ascii_digit())
        .filter(|digits| !digits.is_empty())
        .any(|digits| {
            digits
                .iter()
                .try_fold(0u64, |n, d| {
                    n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
                })
                .is_none_or(|n| n > limit)
        });
    written
        || stars
            .iter()
            .any(|&star| u64::from(star.unsigned_abs()) > limit)
}

/// Prints one lane's format; returns the output and whether every conversion succeeded.
fn format_lane(
    format: &[u8],
    args: &[u8],
    packed: bool,
    strings: &mut Vec<Vec<u8>>,
) -> (Vec<u8>, bool) {
    let (pieces, _) = parse(format);
    let mut reader = ArgReader {
        bytes: args,
        offset: 0,
        packed,
    };
    let mut out = Vec::new();
    for piece in &pieces {
        let (text, conv, modifier, stars) = match piece {
            Piece::Literal(range) => {
                out.extend_from_slice(&format[range.clone()]);
                continue;
            }
            Piece::Spec {
                text,
                conv,
                modifier,
                stars,
                ..
            } => (text, *conv, modifier, *stars),
        };
        let star_values: Vec<c_int> = (0..stars)
            .map(|_| reader.value(Arg::U32) as u32 as c_int)
            .collect();
        // The C library would produce (or at least count) every byte of a huge width or
        // precision: refuse those before calling it.
        if too_wide(&format[text.clone()], &star_values) {
            return (out, false);
        }
        let Some(arg) = arg_of(conv, piece) else {
            // `%%` and unknown conversions: no argument; `%%` prints one `%`, the rest as
            // written (a bad conversion is text, never a guess at an argument type).
            if conv == b'%' {
                out.push(b'%');
            } else {
                out.extend_from_slice(&format[text.clone()]);
            }
            continue;
        };
        let raw = reader.value(arg);
        // The conversion text as C sees it. Length modifiers are dropped where they would
        // change the argument's C type away from what we pass (`%ls` wide strings, `%Lf` long
        // doubles, which arrive as doubles anyway, and any on `%p`/`%s`).
        let mut spec_text = format[text.clone()].to_vec();
        let drop_modifier = matches!(
            conv,
            b's' | b'p' | b'f' | b'F' | b'e' | b'E' | b'a' | b'A' | b'g' | b'G'
        );
        if drop_modifier && !modifier.is_empty() {
            let from = modifier.start - text.start;
            let to = modifier.end - text.start;
            spec_text.drain(from..to);
        }
        let Ok(spec) = CString::new(spec_text) else {
            return (out, false);
        };
        let long = matches!(piece, Piece::Spec { long: true, .. });
        let formatted = match conv {
            // Refused: a host-side write through a device pointer is never done.
            b'n' => Some(Vec::new()),
            b's' => {
                let text = if raw == 0 || raw == u64::MAX {
                    b"(null)".to_vec()
                } else {
                    strings.pop().unwrap_or_default()
                };
                let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
                match CString::new(&text[..end]) {
                    Ok(string) => c_format(&spec, &star_values, Value::Str(&string)),
                    Err(_) => None,
                }
            }
            b'p' => c_format(
                &spec,
                &star_values,
                Value::Pointer(raw as usize as *const c_void),
            ),
            b'f' | b'F' | b'e' | b'E' | b'a' | b'A' | b'g' | b'G' => {
                c_format(&spec, &star_values, Value::Double(f64::from_bits(raw)))
            }
            _ if long => c_format(&spec, &star_values, Value::Ulong(raw)),
            _ => c_format(&spec, &star_values, Value::Uint(raw as u32)),
        };
        match formatted {
            Some(bytes) => out.extend_from_slice(&bytes),
            None => return (out, false),
        }
    }
    (out, true)
}

/// Serves one printf request (see the module documentation for the sequence).
pub(crate) fn printf(
    server: &Server,
    host: &mut HostState,
    port: &mut ServerPort<'_>,
    sink: &mut dyn Sink,
) -> Result<Served, Fail> {
    let code = port.opcode();
    let packed = matches!(
        code,
        opcode::PRINTF_TO_STDOUT_PACKED
            | opcode::PRINTF_TO_STDERR_PACKED
            | opcode::PRINTF_TO_STREAM_PACKED
    );
    let targets = match code {
        opcode::PRINTF_TO_STREAM | opcode::PRINTF_TO_STREAM_PACKED => {
            recv_stream_targets(host, port)?
        }
        opcode::PRINTF_TO_STDERR | opcode::PRINTF_TO_STDERR_PACKED => [Some(Target::Stderr); 64],
        _ => [Some(Target::Stdout); 64],
    };
    let mut formats: Vec<Option<Vec<u8>>> = vec![None; 64];
    for (lane, bytes) in recv_lanes(server, port, MAX_WRITE)? {
        formats[lane as usize] = Some(bytes);
    }
    let mut sizes = [0u64; 64];
    for (lane, format) in formats.iter().enumerate() {
        if let Some(format) = format {
            sizes[lane] = args_size(&parse(format).1, packed);
        }
    }
    port.send(|buffer, lane| buffer.data[0] = sizes[lane as usize])?;
    let mut args: Vec<Vec<u8>> = vec![Vec::new(); 64];
    for (lane, bytes) in recv_lanes(server, port, MAX_WRITE)? {
        args[lane as usize] = bytes;
    }
    // Fetch the `%s` strings from the device, last first, one per lane per round.
    let mut pending: Vec<Vec<u64>> = vec![Vec::new(); 64];
    for (lane, format) in formats.iter().enumerate() {
        if let Some(format) = format {
            pending[lane] = string_pointers(&parse(format).0, &args[lane], packed);
        }
    }
    // Popped from the back while printing: the first `%s` is on top.
    let mut strings: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 64];
    while pending.iter().any(|lane| !lane.is_empty()) {
        let mut asked = [false; 64];
        port.send(|buffer, lane| {
            let next = pending[lane as usize].pop();
            asked[lane as usize] = next.is_some();
            buffer.data[1] = next.unwrap_or(0);
        })?;
        for (lane, bytes) in recv_lanes(server, port, MAX_WRITE)? {
            if asked[lane as usize] {
                strings[lane as usize].push(bytes);
            }
        }
    }
    let mut results = [0u64; 64];
    for (lane, format) in formats.iter().enumerate() {
        let Some(format) = format else { continue };
        let (output, complete) = format_lane(format, &args[lane], packed, &mut strings[lane]);
        let target = targets[lane];
        let written = if target.is_some() {
            host.write_to(target, sink, &output)
        } else {
            0
        };
        let result: i32 = if complete && target.is_some() && written == output.len() {
            i32::try_from(written).unwrap_or(i32::MAX)
        } else {
            -1
        };
        results[lane] = super::stdio::widen(result);
    }
    port.send(|buffer, lane| {
        buffer.data[0] = results[lane as usize];
        buffer.data[1] = 0;
    })?;
    Ok(Served::Handled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn natural(format: &str) -> u64 {
        args_size(&parse(format.as_bytes()).1, false)
    }

    #[test]
    fn argument_sizes_follow_llvm_rules() {
        assert_eq!(natural("plain %% text"), 0);
        assert_eq!(natural("%d"), 4);
        assert_eq!(natural("%d %f"), 16);
        assert_eq!(args_size(&parse(b"%d %f").1, true), 12);
        assert_eq!(natural("%ld %hhd %c"), 16);
        assert_eq!(natural("%*.*s"), 16);
        assert_eq!(natural("%s %p %n"), 24);
        assert_eq!(natural("%zu%jd%td%lld%qd%Lf"), 48);
        // An unfinished conversion consumes its star only.
        assert_eq!(natural("%*"), 4);
    }

    fn run(format: &str, args: &[u8], strings: &[&str]) -> (String, bool) {
        let mut strings: Vec<Vec<u8>> = strings
            .iter()
            .rev()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let (out, ok) = format_lane(format.as_bytes(), args, false, &mut strings);
        (String::from_utf8_lossy(&out).into_owned(), ok)
    }

    #[test]
    fn conversions_match_c() {
        let mut args = Vec::new();
        args.extend_from_slice(&(-42i32).to_le_bytes());
        args.extend_from_slice(&[0; 4]);
        args.extend_from_slice(&3.25f64.to_le_bytes());
        args.extend_from_slice(&u64::MAX.to_le_bytes());
        let (out, ok) = run("[%5d|%-8.3f|%lx|%%]", &args, &[]);
        assert!(ok);
        assert_eq!(out, "[  -42|3.250   |ffffffffffffffff|%]");
        let mut args = Vec::new();
        args.extend_from_slice(&7u32.to_le_bytes());
        args.extend_from_slice(&2u32.to_le_bytes());
        args.extend_from_slice(&1u64.to_le_bytes());
        let (out, ok) = run("<%*.*s>", &args, &["hello"]);
        assert!(ok);
        assert_eq!(out, "<     he>");
    }

    #[test]
    fn n_is_refused_and_bad_conversions_are_text() {
        let args = 0x1234u64.to_le_bytes();
        assert_eq!(run("a%nb", &args, &[]), ("ab".into(), true));
        assert_eq!(run("%y %", &[], &[]), ("%y %".into(), true));
        // `%S` (a wide string in glibc) is not a known conversion: printed as written.
        assert_eq!(run("%S", &[], &[]), ("%S".into(), true));
    }

    #[test]
    fn absurd_widths_fail_instead_of_allocating() {
        let args = 1u32.to_le_bytes();
        let (out, ok) = run("x%2000000000dy", &args, &[]);
        assert!(!ok);
        assert_eq!(out, "x");
    }
}
