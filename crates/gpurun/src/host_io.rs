//! Reading host input from device code: stdin lines and files, through LLVM libc's RPC opcodes
//! (READ_FGETS, READ_FROM_STREAM, OPEN_FILE, CLOSE_FILE, WRITE_TO_STREAM, SYSTEM), so the same
//! calls work against LLVM's loader. Re-exported from [`crate::io`].
//!
//! Every call is made by each calling thread for itself (on a GPU, the lanes of a warp share one
//! request, each with its own data). Errors are reported as C does (`None`, 0, -1): the host
//! refuses what it cannot do and never trusts what the device sends.

use crate::rpc::{__llvm_rpc_client, lanes};
use alloc::string::String;
use alloc::vec::Vec;
use gpurun_rpc::opcode;

/// LLVM libc's tag for stdin when a stream is passed by value.
const STDIN: u64 = 1;
/// Bytes asked for per READ_FGETS.
const LINE_CHUNK: usize = 256;

/// The host's standard input, as `cargo gpurun run` forwards it (empty under `cargo gpurun
/// test`, where the worker's own input is its command pipe).
#[derive(Clone, Copy, Debug)]
pub struct Stdin(());

/// The program's standard input.
pub fn stdin() -> Stdin {
    Stdin(())
}

/// One `fgets` of at most `buffer.len()` bytes; the line's length without its NUL, `None` at
/// end of input or on error.
fn fgets(stream: u64, buffer: &mut [u8]) -> Option<usize> {
    let lanes = lanes();
    let mut port = __llvm_rpc_client.open::<{ opcode::READ_FGETS }, _>(&lanes)?;
    let count = buffer.len() as u64;
    port.send(|packet, _| {
        packet.data[0] = count;
        packet.data[1] = stream;
    });
    let size = port.recv_n(buffer);
    if size == 0 {
        return None;
    }
    // The host sends the line with its NUL.
    Some((size as usize).min(buffer.len()).saturating_sub(1))
}

impl Stdin {
    /// Appends the next line (with its `\n`, if it has one) to `line`; returns the bytes read,
    /// 0 at end of input. Invalid UTF-8 is replaced.
    pub fn read_line(&self, line: &mut String) -> usize {
        read_line(STDIN, line)
    }

    /// The remaining lines, without their line endings.
    pub fn lines(self) -> Lines {
        Lines { stream: STDIN }
    }
}

fn read_line(stream: u64, line: &mut String) -> usize {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; LINE_CHUNK];
    while let Some(len) = fgets(stream, &mut chunk) {
        bytes.extend_from_slice(&chunk[..len]);
        // A full chunk without a newline: the line goes on.
        if len == 0 || chunk[len - 1] == b'\n' || len < LINE_CHUNK - 1 {
            break;
        }
    }
    line.push_str(&String::from_utf8_lossy(&bytes));
    bytes.len()
}

/// Lines of a stream, without their `\n` (or `\r\n`).
#[derive(Debug)]
pub struct Lines {
    stream: u64,
}

impl Iterator for Lines {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let mut line = String::new();
        if read_line(self.stream, &mut line) == 0 {
            return None;
        }
        if line.ends_with('\n') {
            line.pop();
            if line.ends_with('\r') {
                line.pop();
            }
        }
        Some(line)
    }
}

/// A host file, opened by the host's RPC server (the device holds a handle, closed on drop).
#[derive(Debug)]
pub struct File {
    handle: u64,
}

fn with_nul(text: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(0);
    bytes
}

impl File {
    /// Opens `path` (relative to the host process's directory) for reading.
    pub fn open(path: &str) -> Option<File> {
        File::open_with(path, b"r")
    }

    /// Creates or truncates `path` for writing.
    pub fn create(path: &str) -> Option<File> {
        File::open_with(path, b"w")
    }

    /// `fopen(path, mode)`; `mode` is a C mode string such as `b"a+"` (at most 63 bytes).
    pub fn open_with(path: &str, mode: &[u8]) -> Option<File> {
        if mode.len() >= 64 {
            return None;
        }
        let lanes = lanes();
        let mut port = __llvm_rpc_client.open::<{ opcode::OPEN_FILE }, _>(&lanes)?;
        port.send_n(&with_nul(path));
        let mut handle = 0;
        port.send_and_recv(
            |packet, _| {
                let bytes = packet.as_bytes_mut();
                for (to, from) in bytes.iter_mut().zip(mode.iter().chain(&[0])) {
                    *to = *from;
                }
            },
            |packet, _| handle = packet.data[0],
        );
        (handle != 0).then_some(File { handle })
    }

    /// Reads up to `buffer.len()` bytes; returns how many (0 at end of file).
    pub fn read(&mut self, buffer: &mut [u8]) -> usize {
        let lanes = lanes();
        let Some(mut port) = __llvm_rpc_client.open::<{ opcode::READ_FROM_STREAM }, _>(&lanes)
        else {
            return 0;
        };
        let size = buffer.len() as u64;
        let handle = self.handle;
        port.send(|packet, _| {
            packet.data[0] = size;
            packet.data[1] = handle;
        });
        port.recv_n(buffer);
        let mut read = 0;
        port.recv(|packet, _| read = packet.data[0]);
        (read as usize).min(buffer.len())
    }

    /// Appends the rest of the file to `out`; returns the bytes read.
    pub fn read_to_end(&mut self, out: &mut Vec<u8>) -> usize {
        let mut chunk = [0u8; 4096];
        let mut total = 0;
        loop {
            let read = self.read(&mut chunk);
            if read == 0 {
                return total;
            }
            out.extend_from_slice(&chunk[..read]);
            total += read;
        }
    }

    /// Appends the rest of the file to `out` (invalid UTF-8 replaced); returns the bytes read.
    pub fn read_to_string(&mut self, out: &mut String) -> usize {
        let mut bytes = Vec::new();
        let read = self.read_to_end(&mut bytes);
        out.push_str(&String::from_utf8_lossy(&bytes));
        read
    }

    /// The remaining lines, without their line endings.
    pub fn lines(&mut self) -> Lines {
        Lines {
            stream: self.handle,
        }
    }

    /// Writes `bytes`; returns how many the host wrote.
    pub fn write(&mut self, bytes: &[u8]) -> usize {
        let lanes = lanes();
        let Some(mut port) = __llvm_rpc_client.open::<{ opcode::WRITE_TO_STREAM }, _>(&lanes)
        else {
            return 0;
        };
        let handle = self.handle;
        port.send(|packet, _| packet.data[0] = handle);
        port.send_n(bytes);
        let mut written = 0;
        port.recv(|packet, _| written = packet.data[0]);
        written as usize
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let lanes = lanes();
        if let Some(mut port) = __llvm_rpc_client.open::<{ opcode::CLOSE_FILE }, _>(&lanes) {
            let handle = self.handle;
            port.send_and_recv(|packet, _| packet.data[0] = handle, |_, _| {});
        };
    }
}

/// Runs `command` with the host's `/bin/sh` and returns its wait status as C's `system` does;
/// -1 unless the run allows it (`cargo gpurun run --allow-system`).
pub fn system(command: &str) -> i32 {
    let lanes = lanes();
    let Some(mut port) = __llvm_rpc_client.open::<{ opcode::SYSTEM }, _>(&lanes) else {
        return -1;
    };
    port.send_n(&with_nul(command));
    let mut status = 0;
    port.recv(|packet, _| status = packet.data[0]);
    status as i32
}
