//! LLVM libc's stdio opcodes: writes, reads, `fgets` and the small stream calls (`feof`,
//! `ferror`, `clearerr`, `fseek`, `ftell`, `fflush`, `ungetc`), with LLVM's message sequences
//! and results (`libc/shared/rpc_server.h`).
//!
//! The device names a stream by a 64-bit value. LLVM libc tags its standard streams in the low two
//! bits (1 = stdin, 2 = stdout, 3 = stderr); anything else must be a handle this server gave out
//! at `fopen` ([`HostState::open`]): an index into a table of host `FILE*`s plus a generation, so
//! a forged, stale or closed handle finds nothing and gets an error reply, never a dereference.
//! stdout and stderr go to the [`Sink`] (the worker forwards them); stdin is the file the
//! [`HostAccess`] names, or empty: the worker's own stdin carries its commands.

use super::{recv_lanes, Fail, Served, Sink, MAX_WRITE};
use gpurun_rpc::opcode;
use gpurun_rpc::server::{Server, ServerPort};
use std::ffi::CString;
use std::path::PathBuf;

/// Most bytes one `fread`/`fgets` request reads; a larger request reads this much (as a short
/// read), so a device cannot make the host allocate without bound.
pub const MAX_READ: u64 = 64 << 20;

/// What a device may do on the host beyond printing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostAccess {
    /// Let the device's `system()` run host commands (`cargo gpurun run --allow-system`). Off by
    /// default: a device image should not run host commands unasked; refused calls return -1.
    pub allow_system: bool,
    /// The file the device reads as its stdin; `None`: an empty stdin.
    pub stdin: Option<PathBuf>,
}

/// A stream the device named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Stdin,
    Stdout,
    Stderr,
    /// A table entry (its index).
    File(usize),
}

struct OpenFile {
    file: *mut libc::FILE,
    generation: u32,
}

/// The host side of the device's files.
pub(crate) struct HostState {
    pub(crate) config: HostAccess,
    files: Vec<Option<OpenFile>>,
    next_generation: u32,
    /// Opened on first use; `None` inside when it could not be opened.
    stdin: Option<Option<*mut libc::FILE>>,
}

// SAFETY: the `FILE*`s are owned by this value (opened and closed by it) and glibc streams may be
// used from any thread; the value is used by one thread at a time (`&mut`).
unsafe impl Send for HostState {}

const TAG_MASK: u64 = 3;
const TAG_STDIN: u64 = 1;
const TAG_STDOUT: u64 = 2;
const TAG_STDERR: u64 = 3;

impl HostState {
    pub(crate) fn new(config: HostAccess) -> HostState {
        HostState {
            config,
            files: Vec::new(),
            next_generation: 1,
            stdin: None,
        }
    }

    /// The stream an encoded value names, if any.
    pub(crate) fn resolve(&self, encoded: u64) -> Option<Target> {
        match encoded & TAG_MASK {
            TAG_STDIN => Some(Target::Stdin),
            TAG_STDOUT => Some(Target::Stdout),
            TAG_STDERR => Some(Target::Stderr),
            _ => {
                // Handles are `generation << 32 | (index + 1) << 4`.
                let slot = (encoded & 0xffff_ffff) >> 4;
                let generation = (encoded >> 32) as u32;
                if encoded & 0xf != 0 || slot == 0 {
                    return None;
                }
                let index = usize::try_from(slot - 1).ok()?;
                match self.files.get(index) {
                    Some(Some(open)) if open.generation == generation => Some(Target::File(index)),
                    _ => None,
                }
            }
        }
    }

    /// Registers a freshly opened stream and returns the handle the device gets.
    pub(crate) fn insert(&mut self, file: *mut libc::FILE) -> u64 {
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        let entry = OpenFile { file, generation };
        let index = match self.files.iter().position(Option::is_none) {
            Some(free) => {
                self.files[free] = Some(entry);
                free
            }
            None => {
                self.files.push(Some(entry));
                self.files.len() - 1
            }
        };
        u64::from(generation) << 32 | (index as u64 + 1) << 4
    }

    /// Closes a table entry; the `fclose` result, or -1 (EOF) for anything else.
    pub(crate) fn close(&mut self, encoded: u64) -> i32 {
        let Some(Target::File(index)) = self.resolve(encoded) else {
            return libc::EOF;
        };
        match self.files.get_mut(index).and_then(Option::take) {
            // SAFETY: the entry owned this stream, opened by `fopen`; it is removed from the
            // table first, so it is closed exactly once.
            Some(open) => unsafe { libc::fclose(open.file) },
            None => libc::EOF,
        }
    }

    /// The host `FILE*` behind a readable or seekable target (stdin or a table entry).
    pub(crate) fn file(&mut self, target: Target) -> Option<*mut libc::FILE> {
        match target {
            Target::File(index) => self.files.get(index)?.as_ref().map(|open| open.file),
            Target::Stdin => *self.stdin.get_or_insert_with(|| {
                let path = self
                    .config
                    .stdin
                    .as_ref()
                    .map_or_else(|| PathBuf::from("/dev/null"), PathBuf::clone);
                let path = CString::new(path.into_os_string().into_encoded_bytes()).ok()?;
                // SAFETY: both arguments are NUL-terminated strings.
                let file = unsafe { libc::fopen(path.as_ptr(), c"r".as_ptr()) };
                (!file.is_null()).then_some(file)
            }),
            Target::Stdout | Target::Stderr => None,
        }
    }

    /// `fflush(NULL)`: flushes every stream the device opened (stdout and stderr are the
    /// sink's, which holds nothing back). 0, or EOF when one flush failed, as C's `fflush(NULL)`.
    pub(crate) fn flush_all(&mut self) -> i32 {
        let mut result = 0;
        for open in self.files.iter().flatten() {
            // SAFETY: a live stream of the table.
            if unsafe { libc::fflush(open.file) } != 0 {
                result = libc::EOF;
            }
        }
        result
    }

    /// Writes to a target; returns the bytes written (0 for a stream that cannot be written).
    pub(crate) fn write_to(
        &mut self,
        target: Option<Target>,
        sink: &mut dyn Sink,
        bytes: &[u8],
    ) -> usize {
        match target {
            Some(Target::Stdout) => sink.write(false, bytes),
            Some(Target::Stderr) => sink.write(true, bytes),
            Some(target @ Target::File(_)) => match self.file(target) {
                // SAFETY: a live stream of the table; `bytes` is a valid slice.
                Some(file) => unsafe { libc::fwrite(bytes.as_ptr().cast(), 1, bytes.len(), file) },
                None => 0,
            },
            Some(Target::Stdin) | None => 0,
        }
    }
}

impl Drop for HostState {
    fn drop(&mut self) {
        for open in self.files.drain(..).flatten() {
            // SAFETY: each entry owns its stream, closed once here.
            unsafe { libc::fclose(open.file) };
        }
        if let Some(Some(stdin)) = self.stdin.take() {
            // SAFETY: opened by `file(Target::Stdin)`, closed once here.
            unsafe { libc::fclose(stdin) };
        }
    }
}

/// C's `int` result widened as LLVM's server does (`static_cast<uint64_t>(int)`).
pub(crate) fn widen(value: i32) -> u64 {
    i64::from(value) as u64
}

/// Where each lane of a `_TO_STREAM` request writes: the stream it names in the request's first
/// packet (C→ `data[0]`), `None` for one the table does not hold.
pub(crate) fn recv_stream_targets(
    host: &HostState,
    port: &mut ServerPort<'_>,
) -> Result<[Option<Target>; 64], Fail> {
    let mut targets = [None; 64];
    port.recv(|buffer, lane| targets[lane as usize] = host.resolve(buffer.data[0]))?;
    Ok(targets)
}

/// WRITE_TO_STDOUT / _STDERR / _STDOUT_NEWLINE / _STREAM: (C→ stream for _STREAM) C→ send_n;
/// ←S `data[0]` = bytes written. `puts` (NEWLINE) adds and counts the newline only when the
/// whole text was written.
pub(crate) fn write(
    server: &Server,
    host: &mut HostState,
    port: &mut ServerPort<'_>,
    sink: &mut dyn Sink,
) -> Result<Served, Fail> {
    let code = port.opcode();
    let targets = match code {
        opcode::WRITE_TO_STREAM => recv_stream_targets(host, port)?,
        opcode::WRITE_TO_STDERR => [Some(Target::Stderr); 64],
        _ => [Some(Target::Stdout); 64],
    };
    let lanes = recv_lanes(server, port, MAX_WRITE)?;
    let mut written = [0u64; 64];
    for (lane, mut bytes) in lanes {
        let target = targets[lane as usize];
        let len = bytes.len();
        if code == opcode::WRITE_TO_STDOUT_NEWLINE {
            // One write of text and newline, so a line is never split; a short write means
            // the newline was not written, as when LLVM's server skips it.
            bytes.push(b'\n');
        }
        let count = host.write_to(target, sink, &bytes);
        written[lane as usize] = count.min(len + 1) as u64;
    }
    port.send(|buffer, lane| buffer.data[0] = written[lane as usize])?;
    Ok(Served::Handled)
}

/// The first packet of READ_FROM_STREAM and READ_FGETS, C→ `data[0]` = size, `data[1]` =
/// stream: calls `serve(lane, size, file)` for each lane in turn, `file` being the stream's
/// open file (`None` for a stream the table does not hold).
fn each_read_request(
    host: &mut HostState,
    port: &mut ServerPort<'_>,
    mut serve: impl FnMut(u32, u64, Option<*mut libc::FILE>),
) -> Result<(), Fail> {
    let mut requests = [(0u64, 0u64); 64];
    port.recv(|buffer, lane| requests[lane as usize] = (buffer.data[0], buffer.data[1]))?;
    for lane in lanes_of(port.lane_mask()) {
        let (size, stream) = requests[lane as usize];
        let file = host.resolve(stream).and_then(|target| host.file(target));
        serve(lane, size, file);
    }
    Ok(())
}

/// READ_FROM_STREAM: C→ `data[0]` = size, `data[1]` = stream; ←S send_n(bytes read);
/// ←S `data[0]` = bytes read.
pub(crate) fn read(host: &mut HostState, port: &mut ServerPort<'_>) -> Result<Served, Fail> {
    let mut data: Vec<Vec<u8>> = vec![Vec::new(); 64];
    each_read_request(host, port, |lane, size, file| {
        if let Some(file) = file {
            let mut bytes = vec![0u8; size.min(MAX_READ) as usize];
            // SAFETY: a live stream of the table (or stdin) and a buffer of `bytes.len()` bytes.
            let got = unsafe { libc::fread(bytes.as_mut_ptr().cast(), 1, bytes.len(), file) };
            bytes.truncate(got);
            data[lane as usize] = bytes;
        }
    })?;
    port.send_n(|lane| &data[lane as usize][..])?;
    port.send(|buffer, lane| buffer.data[0] = data[lane as usize].len() as u64)?;
    Ok(Served::Handled)
}

/// READ_FGETS: C→ `data[0]` = buffer size, `data[1]` = stream; ←S send_n(the line with its
/// NUL, or nothing at end of file or on error).
pub(crate) fn fgets(host: &mut HostState, port: &mut ServerPort<'_>) -> Result<Served, Fail> {
    let mut lines: Vec<Vec<u8>> = vec![Vec::new(); 64];
    each_read_request(host, port, |lane, size, file| {
        let size = size.min(MAX_READ).min(i32::MAX as u64) as usize;
        if let (Some(file), true) = (file, size > 0) {
            let mut line = vec![0u8; size];
            // SAFETY: `line` holds `size` bytes (which fits an int) and `file` is a live stream;
            // fgets writes at most `size` bytes, NUL included.
            let got = unsafe { libc::fgets(line.as_mut_ptr().cast(), size as i32, file) };
            if !got.is_null() {
                let end = line.iter().position(|&b| b == 0).unwrap_or(size - 1);
                line.truncate(end + 1);
                line[end] = 0;
                lines[lane as usize] = line;
            }
        }
    })?;
    port.send_n(|lane| &lines[lane as usize][..])?;
    Ok(Served::Handled)
}

/// FEOF, FERROR, CLEARERR, FSEEK, FTELL, FFLUSH, UNGETC: one packet each way, answered in
/// place (`recv_and_send`). Forged handles get EOF/-1 (and `feof`/`ferror` report true so a
/// read loop stops); the device's stdout/stderr are unbuffered sinks that cannot seek or read.
/// `fflush` of stream 0 (`fflush(NULL)`) flushes every open stream and answers 0.
pub(crate) fn stream_call(host: &mut HostState, port: &mut ServerPort<'_>) -> Result<Served, Fail> {
    let code = port.opcode();
    port.recv_and_send(|buffer, _| {
        let stream = if code == opcode::UNGETC {
            buffer.data[1]
        } else {
            buffer.data[0]
        };
        let target = host.resolve(stream);
        let file = target.and_then(|target| host.file(target));
        let sink_stream = matches!(target, Some(Target::Stdout | Target::Stderr));
        let result: Option<i64> = match (code, file) {
            // SAFETY: `file` is a live stream of the table or stdin.
            (opcode::FEOF, Some(file)) => Some(unsafe { libc::feof(file) }.into()),
            (opcode::FEOF, None) => Some(if sink_stream { 0 } else { 1 }),
            // SAFETY: as above.
            (opcode::FERROR, Some(file)) => Some(unsafe { libc::ferror(file) }.into()),
            (opcode::FERROR, None) => Some(if sink_stream { 0 } else { 1 }),
            (opcode::CLEARERR, Some(file)) => {
                // SAFETY: as above.
                unsafe { libc::clearerr(file) };
                // The reply is the request as it came (LLVM leaves the packet alone).
                None
            }
            (opcode::CLEARERR, None) => None,
            (opcode::FSEEK, Some(file)) => {
                let whence = buffer.data[2] as i32;
                if matches!(whence, libc::SEEK_SET | libc::SEEK_CUR | libc::SEEK_END) {
                    let offset = buffer.data[1] as i64 as libc::c_long;
                    // SAFETY: as above; the whence is one fseek knows.
                    Some(unsafe { libc::fseek(file, offset, whence) }.into())
                } else {
                    Some(-1)
                }
            }
            // SAFETY: as above.
            (opcode::FTELL, Some(file)) => Some(unsafe { libc::ftell(file) }),
            // SAFETY: as above.
            (opcode::FFLUSH, Some(file)) => Some(unsafe { libc::fflush(file) }.into()),
            (opcode::FFLUSH, None) if sink_stream => Some(0),
            // `fflush(NULL)`: LLVM's server passes the null stream to the host's `fflush`.
            (opcode::FFLUSH, None) if stream == 0 => Some(host.flush_all().into()),
            (opcode::UNGETC, Some(file)) => {
                // SAFETY: as above; ungetc takes any int (EOF is refused by libc itself).
                Some(unsafe { libc::ungetc(buffer.data[0] as i32, file) }.into())
            }
            _ => Some(-1),
        };
        if let Some(result) = result {
            buffer.data[0] = result as u64;
        }
    })?;
    Ok(Served::Handled)
}

/// The lanes of a mask, lowest first.
pub(crate) fn lanes_of(mask: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |lane| mask & (1u64 << lane) != 0)
}

/// A device string: its bytes up to the first NUL, which must be there (a string without one
/// was cut short or is not a string).
pub(crate) fn c_string(bytes: &[u8]) -> Option<CString> {
    let end = bytes.iter().position(|&b| b == 0)?;
    CString::new(&bytes[..end]).ok()
}
