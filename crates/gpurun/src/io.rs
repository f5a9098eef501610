//! `print!`, `println!`, `eprint!`, `eprintln!` over RPC.
//!
//! Each call is formatted completely on the device and sent as one RPC write, so lines from
//! different threads never interleave inside a call. Short output goes through a stack buffer;
//! longer output through one heap allocation.

use core::fmt::{self, Write};

pub use crate::host_io::{stdin, system, File, Lines, Stdin};

/// The host stream a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A fixed-capacity byte buffer that implements `fmt::Write`; it remembers whether it
/// overflowed.
pub struct FixedBuf<const N: usize> {
    bytes: [u8; N],
    len: usize,
    overflowed: bool,
}

impl<const N: usize> FixedBuf<N> {
    pub const fn new() -> Self {
        FixedBuf {
            bytes: [0; N],
            len: 0,
            overflowed: false,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl<const N: usize> Default for FixedBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Write for FixedBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = N - self.len;
        let take = s.len().min(room);
        self.bytes[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        if take < s.len() {
            self.overflowed = true;
            return Err(fmt::Error);
        }
        Ok(())
    }
}

/// Formats `args` and sends them to `stream` in one write.
///
/// Each stream gets its own code with its opcode a constant (`print_with`): lanes of one warp
/// that print to stdout and to stderr at the same time run different instructions, so the
/// hardware never regroups them into one port whose header names only one stream (LLVM's client
/// makes the opcode a template parameter for the same reason).
#[doc(hidden)]
pub fn _print(stream: Stream, args: fmt::Arguments<'_>) {
    match stream {
        Stream::Stdout => print_with::<{ gpurun_rpc::opcode::WRITE_TO_STDOUT }>(args),
        Stream::Stderr => print_with::<{ gpurun_rpc::opcode::WRITE_TO_STDERR }>(args),
    }
}

fn print_with<const OPCODE: u32>(args: fmt::Arguments<'_>) {
    if let Some(text) = args.as_str() {
        crate::rpc::write::<OPCODE>(text.as_bytes());
        return;
    }
    let mut small = FixedBuf::<256>::new();
    if small.write_fmt(args).is_ok() {
        crate::rpc::write::<OPCODE>(small.as_bytes());
        return;
    }
    let mut text = alloc::string::String::new();
    let _ = text.write_fmt(args);
    crate::rpc::write::<OPCODE>(text.as_bytes());
}

/// Prints to the host's standard output.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::io::_print($crate::io::Stream::Stdout, ::core::format_args!($($arg)*)) };
}

/// Prints a line to the host's standard output.
#[macro_export]
macro_rules! println {
    () => { $crate::io::_print($crate::io::Stream::Stdout, ::core::format_args!("\n")) };
    ($($arg:tt)*) => { $crate::io::_print($crate::io::Stream::Stdout, ::core::format_args!("{}\n", ::core::format_args!($($arg)*))) };
}

/// Prints to the host's standard error.
#[macro_export]
macro_rules! eprint {
    ($($arg:tt)*) => { $crate::io::_print($crate::io::Stream::Stderr, ::core::format_args!($($arg)*)) };
}

/// Prints a line to the host's standard error.
#[macro_export]
macro_rules! eprintln {
    () => { $crate::io::_print($crate::io::Stream::Stderr, ::core::format_args!("\n")) };
    ($($arg:tt)*) => { $crate::io::_print($crate::io::Stream::Stderr, ::core::format_args!("{}\n", ::core::format_args!($($arg)*))) };
}
