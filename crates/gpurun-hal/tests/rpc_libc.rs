//! LLVM libc's GPU opcodes against our server: each test drives the message sequence LLVM
//! libc's device code uses (written from `libc/src/stdio/gpu/*.cpp`, `vfprintf_utils.h`,
//! `file.h` and `OSUtil/gpu/exit.cpp`) through our client on a host thread, while the test
//! thread runs [`RpcHandlers::poll`], and checks the host-side effect and the reply.

use gpurun_hal::handlers::{
    DeviceMemory, HostAccess, HostFunctions, PanicReport, RpcHandlers, Served, Sink,
};
use gpurun_hal::{BackendError, LaunchEnd};
use gpurun_rpc::client::Port;
use gpurun_rpc::{opcode, Client, HostLane, Layout};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Block([u8; 64]);

/// A zeroed shared allocation.
struct Shared {
    memory: Box<[Block]>,
    layout: Layout,
}

impl Shared {
    fn new(layout: Layout) -> Shared {
        let blocks = layout.allocation_size().div_ceil(64);
        Shared {
            memory: vec![Block([0; 64]); blocks].into_boxed_slice(),
            layout,
        }
    }
    fn base(&mut self) -> *mut u8 {
        self.memory.as_mut_ptr() as *mut u8
    }
}

#[derive(Default)]
struct Collect {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// When set, writes report at most this many bytes written (and keep only those).
    short_writes: Option<usize>,
}

impl Sink for Collect {
    fn stdout(&mut self, bytes: &[u8]) {
        self.stdout.extend_from_slice(bytes);
    }
    fn stderr(&mut self, bytes: &[u8]) {
        self.stderr.extend_from_slice(bytes);
    }
    fn panic(&mut self, _report: PanicReport) {}
    fn write(&mut self, stderr: bool, bytes: &[u8]) -> usize {
        let keep = self
            .short_writes
            .map_or(bytes.len(), |n| n.min(bytes.len()));
        if stderr {
            self.stderr(&bytes[..keep]);
        } else {
            self.stdout(&bytes[..keep]);
        }
        keep
    }
}

#[derive(Default)]
struct Memory {
    next: u64,
    freed: Vec<u64>,
}

impl DeviceMemory for Memory {
    fn malloc(&mut self, size: u64) -> u64 {
        self.next += 0x1000 + size;
        self.next
    }
    fn free(&mut self, address: u64) {
        self.freed.push(address);
    }
}

struct Outcome<R> {
    result: R,
    sink: Collect,
    memory: Memory,
    end: Option<LaunchEnd>,
    /// The server's error, which ends the run (see [`serve`]).
    error: Option<BackendError>,
}

/// Runs `device` on a client thread against an `RpcHandlers` polled here, until the thread ends
/// and a drain finds nothing left; the server must not fail.
fn run_with<R: Send>(
    config: HostAccess,
    sink: Collect,
    device: impl FnOnce(&Client) -> R + Send,
) -> Outcome<R> {
    let outcome = serve(config, HostFunctions::default(), sink, device);
    if let Some(error) = &outcome.error {
        panic!("server error: {error}");
    }
    outcome
}

/// [`run_with`] with host functions, stopping at the server's first error (the device thread
/// must then not wait for a reply).
fn serve<R: Send>(
    config: HostAccess,
    functions: HostFunctions,
    sink: Collect,
    device: impl FnOnce(&Client) -> R + Send,
) -> Outcome<R> {
    let mut shared = Shared::new(Layout::new(4, 1).unwrap());
    let layout = shared.layout;
    let base = shared.base();
    // SAFETY: `base` is a zeroed, 64-aligned allocation of the layout's size that outlives both
    // endpoints (dropped at the end of this function).
    let (client, mut server) =
        unsafe { (Client::new(&layout, base), RpcHandlers::new(&layout, base)) };
    server.configure(config, functions);
    let mut sink = sink;
    let mut memory = Memory::default();
    let mut end = None;
    let mut error = None;
    let result = std::thread::scope(|scope| {
        let device = scope.spawn(|| device(&client));
        loop {
            let finished = device.is_finished();
            match server.poll(&mut sink, &mut memory) {
                Ok(Served::End(e)) => {
                    end.get_or_insert(e);
                }
                Ok(Served::Handled) => {}
                Ok(Served::Idle) if finished => break,
                Ok(Served::Idle) => std::thread::yield_now(),
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        if error.is_none() {
            match server.drain(&mut sink, &mut memory) {
                Ok(Some(e)) => {
                    end.get_or_insert(e);
                }
                Ok(None) => {}
                Err(e) => error = Some(e),
            }
        }
        device.join().expect("device thread")
    });
    Outcome {
        result,
        sink,
        memory,
        end,
        error,
    }
}

fn run<R: Send>(device: impl FnOnce(&Client) -> R + Send) -> Outcome<R> {
    run_with(HostAccess::default(), Collect::default(), device)
}

const LANE: HostLane = HostLane::SINGLE;
/// LLVM libc's tags for its standard streams passed by value (`file::from_stream`).
const STDIN: u64 = 0x1000 | 1;
const STDOUT: u64 = 0x2000 | 2;
const STDERR: u64 = 0x3000 | 3;

fn open(client: &Client, code: u32) -> Port<'_, HostLane> {
    client.open_on_host(&LANE, code).expect("client has ports")
}

fn reply(port: &mut Port<'_, HostLane>) -> u64 {
    let mut value = 0;
    port.recv(|buffer, _| value = buffer.data[0]);
    value
}

fn with_nul(text: &str) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    bytes
}

// ---- LLVM libc's device-side sequences -------------------------------------------------------

/// `file::write_impl`.
fn write(client: &Client, code: u32, stream: u64, data: &[u8]) -> u64 {
    let mut port = open(client, code);
    if code == opcode::WRITE_TO_STREAM {
        port.send(|buffer, _| buffer.data[0] = stream);
    }
    port.send_n(data);
    reply(&mut port)
}

/// `fopen`: send_n(path with NUL), then the mode bytes in the packet, reply = FILE*.
fn fopen(client: &Client, path: &[u8], mode: &[u8]) -> u64 {
    let mut port = open(client, opcode::OPEN_FILE);
    port.send_n(path);
    let mut file = 0;
    port.send_and_recv(
        |buffer, _| {
            let bytes = buffer.as_bytes_mut();
            bytes[..mode.len()].copy_from_slice(mode);
        },
        |buffer, _| file = buffer.data[0],
    );
    file
}

/// One packet each way: `fclose`, `feof`, `ferror`, `clearerr`, `ftell`, `fflush`, `fseek`,
/// `ungetc` (the words are the opcode's arguments).
fn call(client: &Client, code: u32, words: &[u64]) -> u64 {
    let mut port = open(client, code);
    let mut result = 0;
    port.send_and_recv(
        |buffer, _| buffer.data[..words.len()].copy_from_slice(words),
        |buffer, _| result = buffer.data[0],
    );
    result
}

/// `file::read_from_stream`.
fn fread(client: &Client, stream: u64, size: u64, buffer_len: usize) -> (u64, Vec<u8>) {
    let mut port = open(client, opcode::READ_FROM_STREAM);
    port.send(|buffer, _| {
        buffer.data[0] = size;
        buffer.data[1] = stream;
    });
    let mut data = vec![0u8; buffer_len];
    let sent = port.recv_n(&mut data);
    data.truncate(sent as usize);
    (reply(&mut port), data)
}

/// `fgets`: the line with its NUL, or nothing.
fn fgets(client: &Client, stream: u64, count: u64) -> Option<Vec<u8>> {
    let mut port = open(client, opcode::READ_FGETS);
    port.send(|buffer, _| {
        buffer.data[0] = count;
        buffer.data[1] = stream;
    });
    let mut line = vec![0u8; count.min(4096) as usize];
    let size = port.recv_n(&mut line);
    if size == 0 {
        return None;
    }
    line.truncate(size as usize);
    Some(line)
}

/// REMOVE / SYSTEM: send_n(string), reply.
fn one_string(client: &Client, code: u32, text: &[u8]) -> u64 {
    let mut port = open(client, code);
    port.send_n(text);
    reply(&mut port)
}

fn rename(client: &Client, old: &[u8], new: &[u8]) -> u64 {
    let mut port = open(client, opcode::RENAME);
    port.send_n(old);
    port.send_n(new);
    reply(&mut port)
}

/// `vfprintf_impl`: `args` stands for the bytes the device's va_list points to; `strings` maps
/// device string pointers to their bytes (with NUL). Returns the result and the pointers the
/// server asked for, in order.
fn printf(
    client: &Client,
    code: u32,
    stream: u64,
    format: &[u8],
    args: &[u8],
    strings: &[(u64, &[u8])],
) -> (u32, Vec<u64>) {
    let mut port = open(client, code);
    if matches!(
        code,
        opcode::PRINTF_TO_STREAM | opcode::PRINTF_TO_STREAM_PACKED
    ) {
        port.send(|buffer, _| buffer.data[0] = stream);
    }
    port.send_n(format);
    let mut args_size = 0;
    port.recv(|buffer, _| args_size = buffer.data[0] as usize);
    let mut va = args.to_vec();
    va.resize(args_size.max(args.len()), 0);
    port.send_n(&va[..args_size]);
    let mut asked = Vec::new();
    loop {
        let (mut ret, mut string) = (0u32, 0u64);
        port.recv(|buffer, _| {
            ret = buffer.data[0] as u32;
            string = buffer.data[1];
        });
        if string == 0 {
            return (ret, asked);
        }
        asked.push(string);
        let bytes = strings
            .iter()
            .find(|(pointer, _)| *pointer == string)
            .map_or(&[][..], |(_, bytes)| bytes);
        port.send_n(bytes);
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpurun-rpc-libc-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn c_path(path: &Path) -> Vec<u8> {
    with_nul(path.to_str().unwrap())
}

fn signed(value: u64) -> i64 {
    value as i64
}

// ---- writes -----------------------------------------------------------------------------------

#[test]
fn writes_reply_with_the_bytes_written() {
    let out = run(|client| {
        (
            write(client, opcode::WRITE_TO_STDOUT, 0, b"to stdout "),
            write(client, opcode::WRITE_TO_STDERR, 0, b"to stderr"),
            write(client, opcode::WRITE_TO_STDOUT, 0, &[b'x'; 300]),
        )
    });
    assert_eq!(out.result, (10, 9, 300));
    assert_eq!(&out.sink.stdout[..10], b"to stdout ");
    assert_eq!(out.sink.stdout.len(), 310);
    assert_eq!(out.sink.stderr, b"to stderr");
    assert_eq!(out.end, None);
}

/// One `write` with opcode `code` to a sink that takes at most `limit` bytes a write.
fn write_short(limit: usize, code: u32, data: &[u8]) -> Outcome<u64> {
    let sink = Collect {
        short_writes: Some(limit),
        ..Collect::default()
    };
    run_with(HostAccess::default(), sink, |client| {
        write(client, code, 0, data)
    })
}

#[test]
fn short_writes_are_reported() {
    let out = write_short(4, opcode::WRITE_TO_STDOUT, b"truncated");
    assert_eq!(out.result, 4);
    assert_eq!(out.sink.stdout, b"trun");
}

#[test]
fn puts_counts_the_newline_only_after_a_full_write() {
    let out = run(|client| write(client, opcode::WRITE_TO_STDOUT_NEWLINE, 0, b"line"));
    assert_eq!(out.result, 5);
    assert_eq!(out.sink.stdout, b"line\n");
    let out = write_short(2, opcode::WRITE_TO_STDOUT_NEWLINE, b"line");
    assert_eq!(out.result, 2);
    assert_eq!(out.sink.stdout, b"li");
}

#[test]
fn write_to_stream_reaches_files_and_refuses_forged_handles() {
    let dir = scratch("write-stream");
    let path = dir.join("out.txt");
    let out = run(|client| {
        let file = fopen(client, &c_path(&path), b"w\0");
        assert_ne!(file, 0);
        assert_eq!(
            file & 3,
            0,
            "a handle must not look like a tagged std stream"
        );
        let wrote = write(client, opcode::WRITE_TO_STREAM, file, b"file text");
        let to_stdout = write(client, opcode::WRITE_TO_STREAM, STDOUT, b"tagged");
        let forged = write(client, opcode::WRITE_TO_STREAM, 0xdead_beef_0000, b"lost");
        let forged_near = write(client, opcode::WRITE_TO_STREAM, file + 16, b"lost");
        let closed = call(client, opcode::CLOSE_FILE, &[file]);
        let stale = write(client, opcode::WRITE_TO_STREAM, file, b"lost");
        (wrote, to_stdout, forged, forged_near, closed, stale)
    });
    assert_eq!(out.result, (9, 6, 0, 0, 0, 0));
    assert_eq!(std::fs::read(&path).unwrap(), b"file text");
    assert_eq!(out.sink.stdout, b"tagged");
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- files ------------------------------------------------------------------------------------

#[test]
fn open_read_seek_and_close_a_file() {
    let dir = scratch("read");
    let path = dir.join("in.txt");
    std::fs::write(&path, b"first line\nsecond\n").unwrap();
    let out = run(|client| {
        let file = fopen(client, &c_path(&path), b"r\0");
        assert_ne!(file, 0);
        let line = fgets(client, file, 64);
        let tell = call(client, opcode::FTELL, &[file]);
        let (got, data) = fread(client, file, 4, 64);
        let eof_before = call(client, opcode::FEOF, &[file]);
        // An absurd size is a short read of what is there, not an allocation of 2^62 bytes.
        let (rest, rest_data) = fread(client, file, 1 << 62, 64);
        let eof_after = call(client, opcode::FEOF, &[file]);
        let past_end = fgets(client, file, 64);
        let seek = call(client, opcode::FSEEK, &[file, 6, libc::SEEK_SET as u64]);
        let bad_whence = call(client, opcode::FSEEK, &[file, 0, 77]);
        let unget = call(client, opcode::UNGETC, &[u64::from(b'L'), file]);
        let after_unget = fgets(client, file, 64);
        let error = call(client, opcode::FERROR, &[file]);
        let clear = call(client, opcode::CLEARERR, &[file]);
        let flush = call(client, opcode::FFLUSH, &[file]);
        let close = call(client, opcode::CLOSE_FILE, &[file]);
        let close_again = call(client, opcode::CLOSE_FILE, &[file]);
        (
            (
                line, tell, got, data, eof_before, rest, rest_data, eof_after,
            ),
            (past_end, seek, bad_whence, unget, after_unget),
            (error, clear, flush, close, close_again, file),
        )
    });
    let (first, second, third) = out.result;
    assert_eq!(first.0.as_deref(), Some(&b"first line\n\0"[..]));
    assert_eq!(first.1, 11);
    assert_eq!((first.2, &first.3[..]), (4, &b"seco"[..]));
    assert_eq!(first.4, 0);
    assert_eq!((first.5, &first.6[..]), (3, &b"nd\n"[..]));
    assert_ne!(first.7, 0);
    assert_eq!(second.0, None);
    assert_eq!(second.1, 0);
    assert_eq!(signed(second.2), -1);
    assert_eq!(second.3, u64::from(b'L'));
    assert_eq!(second.4.as_deref(), Some(&b"Lline\n\0"[..]));
    // CLEARERR answers with the request as sent (LLVM fills nothing in).
    assert_eq!((third.0, third.1, third.2, third.3), (0, third.5, 0, 0));
    assert_eq!(
        signed(third.4),
        -1,
        "a second fclose of one handle is refused"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_open_requests_get_a_null_file() {
    let dir = scratch("bad-open");
    let path = dir.join("x.txt");
    let out = run(|client| {
        (
            fopen(client, &c_path(&dir.join("missing.txt")), b"r\0"),
            // No NUL at the end of the path: cut short, refused.
            fopen(client, path.to_str().unwrap().as_bytes(), b"w\0"),
            // Modes fopen would misread.
            fopen(client, &c_path(&path), b"q\0"),
            fopen(client, &c_path(&path), b"w,ccs=UTF-8\0"),
            // A mode without its NUL inside the packet.
            fopen(client, &c_path(&path), &[b'w'; 64]),
        )
    });
    assert_eq!(out.result, (0, 0, 0, 0, 0));
    assert!(!path.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn forged_handles_get_error_replies() {
    let out = run(|client| {
        let forged = [0x10u64, 0x7fff_0000_1230, !3u64, 0];
        forged
            .iter()
            .map(|&file| {
                (
                    signed(call(client, opcode::CLOSE_FILE, &[file])),
                    call(client, opcode::FEOF, &[file]),
                    call(client, opcode::FERROR, &[file]),
                    signed(call(client, opcode::FSEEK, &[file, 0, 0])),
                    signed(call(client, opcode::FTELL, &[file])),
                    signed(call(client, opcode::FFLUSH, &[file])),
                    signed(call(client, opcode::UNGETC, &[65, file])),
                    fread(client, file, 100, 100).0,
                    fgets(client, file, 100),
                )
            })
            .collect::<Vec<_>>()
    });
    for (result, file) in out
        .result
        .into_iter()
        .zip([0x10u64, 0x7fff_0000_1230, !3u64, 0])
    {
        // `fflush(NULL)` flushes every stream (there are none here) and answers 0.
        let flush = if file == 0 { 0 } else { -1 };
        assert_eq!(result, (-1, 1, 1, -1, -1, flush, -1, 0, None), "{file:#x}");
    }
}

/// `fflush(NULL)` (the device sends stream 0) flushes every stream the device opened
/// and answers 0, as LLVM's server does (it hands the null stream to the host's `fflush`).
#[test]
fn fflush_of_null_flushes_every_stream() {
    let dir = scratch("flush-all");
    let (first, second) = (dir.join("a.txt"), dir.join("b.txt"));
    let out = run(|client| {
        let a = fopen(client, &c_path(&first), b"w\0");
        let b = fopen(client, &c_path(&second), b"w\0");
        write(client, opcode::WRITE_TO_STREAM, a, b"to a");
        write(client, opcode::WRITE_TO_STREAM, b, b"to b");
        // Buffered by the host's stdio until flushed.
        let before = (
            std::fs::read(&first).unwrap().len(),
            std::fs::read(&second).unwrap().len(),
        );
        let flush = signed(call(client, opcode::FFLUSH, &[0]));
        let after = (
            std::fs::read(&first).unwrap(),
            std::fs::read(&second).unwrap(),
        );
        call(client, opcode::CLOSE_FILE, &[a]);
        call(client, opcode::CLOSE_FILE, &[b]);
        (before, flush, after)
    });
    let (before, flush, after) = out.result;
    assert_eq!(before, (0, 0), "the writes were not buffered");
    assert_eq!(flush, 0);
    assert_eq!(after, (b"to a".to_vec(), b"to b".to_vec()));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn standard_streams_by_tag() {
    let dir = scratch("stdin");
    let input = dir.join("stdin.txt");
    std::fs::write(&input, b"alpha\nbeta\n").unwrap();
    let config = HostAccess {
        stdin: Some(input.clone()),
        ..HostAccess::default()
    };
    let out = run_with(config, Collect::default(), |client| {
        (
            fgets(client, STDIN, 100),
            fgets(client, STDIN, 3),
            fread(client, STDIN, 100, 100).1,
            call(client, opcode::FEOF, &[STDIN]),
            call(client, opcode::FFLUSH, &[STDOUT]),
            call(client, opcode::FEOF, &[STDERR]),
            signed(call(client, opcode::FSEEK, &[STDOUT, 0, 0])),
            fread(client, STDOUT, 10, 10).0,
        )
    });
    let r = out.result;
    assert_eq!(r.0.as_deref(), Some(&b"alpha\n\0"[..]));
    assert_eq!(r.1.as_deref(), Some(&b"be\0"[..]));
    assert_eq!(r.2, b"ta\n");
    assert_ne!(r.3, 0);
    assert_eq!((r.4, r.5, r.6, r.7), (0, 0, -1, 0));
    // Without a configured stdin the device reads an empty one (never the worker's pipe).
    let out = run(|client| {
        (
            fgets(client, STDIN, 10),
            call(client, opcode::FEOF, &[STDIN]),
        )
    });
    assert_eq!(out.result.0, None);
    assert_ne!(out.result.1, 0);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn remove_and_rename() {
    let dir = scratch("rename");
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::write(&a, b"data").unwrap();
    let out = run(|client| {
        (
            rename(client, &c_path(&a), &c_path(&b)),
            signed(rename(client, &c_path(&a), &c_path(&b))),
            // Unterminated new path: refused, nothing renamed.
            signed(rename(client, &c_path(&b), b"unterminated")),
            one_string(client, opcode::REMOVE, &c_path(&b)),
            signed(one_string(client, opcode::REMOVE, &c_path(&b))),
            signed(one_string(client, opcode::REMOVE, b"")),
        )
    });
    assert_eq!(out.result, (0, -1, -1, 0, -1, -1));
    assert!(!a.exists() && !b.exists());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn system_is_refused_unless_allowed() {
    let dir = scratch("system");
    let marker = dir.join("ran");
    let command = format!("touch {}", marker.display());
    let out = run(|client| signed(one_string(client, opcode::SYSTEM, &with_nul(&command))));
    assert_eq!(out.result, -1);
    assert!(!marker.exists());
    assert!(String::from_utf8_lossy(&out.sink.stderr).contains("--allow-system"));

    let config = HostAccess {
        allow_system: true,
        ..HostAccess::default()
    };
    let out = run_with(config, Collect::default(), |client| {
        (
            one_string(client, opcode::SYSTEM, &with_nul(&command)),
            one_string(client, opcode::SYSTEM, b"echo out; echo err >&2; exit 3\0"),
            signed(one_string(client, opcode::SYSTEM, b"no terminator")),
        )
    });
    assert!(marker.exists());
    assert_eq!(out.result, (0, 3 << 8, -1));
    assert_eq!(out.sink.stdout, b"out\n");
    assert_eq!(out.sink.stderr, b"err\n");
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- printf -----------------------------------------------------------------------------------

/// Argument bytes as a va_list lays them out: naturally aligned, or packed.
#[derive(Default)]
struct Args {
    bytes: Vec<u8>,
    packed: bool,
}

impl Args {
    fn packed() -> Args {
        Args {
            bytes: Vec::new(),
            packed: true,
        }
    }
    fn put(mut self, value: &[u8]) -> Args {
        if !self.packed {
            let aligned = self.bytes.len().next_multiple_of(value.len());
            self.bytes.resize(aligned, 0xee);
        }
        self.bytes.extend_from_slice(value);
        self
    }
    fn int(self, v: i32) -> Args {
        self.put(&v.to_le_bytes())
    }
    fn long(self, v: i64) -> Args {
        self.put(&v.to_le_bytes())
    }
    fn double(self, v: f64) -> Args {
        self.put(&v.to_le_bytes())
    }
    fn ptr(self, v: u64) -> Args {
        self.put(&v.to_le_bytes())
    }
}

const FORMAT: &str = "%d|%5.2f|%-4s|%lld|%c|%*d|%.*s|%x|%hhd|%zu|%e|%%|%s\n";

fn format_args(args: Args) -> Vec<u8> {
    args.int(-7)
        .double(3.25)
        .ptr(0x1000)
        .long(-1234567890123)
        .int(i32::from(b'Z'))
        .int(6)
        .int(42)
        .int(3)
        .ptr(0x2000)
        .int(0xbeef)
        .int(300)
        .long(99)
        .double(12345.678)
        .ptr(0)
        .bytes
}

const EXPECTED: &str =
    "-7| 3.25|ab  |-1234567890123|Z|    42|xyz|beef|44|99|1.234568e+04|%|(null)\n";

#[test]
fn printf_natural_and_packed_layouts() {
    let strings: &[(u64, &[u8])] = &[(0x1000, b"ab\0"), (0x2000, b"xyzzy\0")];
    let out = run(|client| {
        (
            printf(
                client,
                opcode::PRINTF_TO_STDOUT,
                0,
                &with_nul(FORMAT),
                &format_args(Args::default()),
                strings,
            ),
            printf(
                client,
                opcode::PRINTF_TO_STDERR_PACKED,
                0,
                &with_nul(FORMAT),
                &format_args(Args::packed()),
                strings,
            ),
        )
    });
    let ((stdout_ret, asked), (stderr_ret, asked_packed)) = out.result;
    assert_eq!(String::from_utf8_lossy(&out.sink.stdout), EXPECTED);
    assert_eq!(String::from_utf8_lossy(&out.sink.stderr), EXPECTED);
    assert_eq!(stdout_ret as usize, EXPECTED.len());
    assert_eq!(stderr_ret as usize, EXPECTED.len());
    // Strings are fetched last first; a null `%s` is not fetched.
    assert_eq!(asked, [0x2000, 0x1000]);
    assert_eq!(asked_packed, [0x2000, 0x1000]);
}

#[test]
fn printf_argument_size_reply_follows_the_layout() {
    // `%d %f`: 4 + pad 4 + 8 naturally, 12 packed.
    let sizes = run(|client| {
        let size = |code| {
            let mut port = open(client, code);
            port.send_n(b"%d %f\0");
            let size = reply(&mut port);
            port.send_n(&[0u8; 16][..size as usize]);
            port.recv(|_, _| {});
            size
        };
        (
            size(opcode::PRINTF_TO_STDOUT),
            size(opcode::PRINTF_TO_STDOUT_PACKED),
        )
    });
    assert_eq!(sizes.result, (16, 12));
}

#[test]
fn printf_to_streams_and_bad_input() {
    let dir = scratch("printf-stream");
    let path = dir.join("log.txt");
    let out = run(|client| {
        let file = fopen(client, &c_path(&path), b"w\0");
        let to_file = printf(
            client,
            opcode::PRINTF_TO_STREAM,
            file,
            b"n=%d\n\0",
            &Args::default().int(5).bytes,
            &[],
        )
        .0;
        let to_file_packed = printf(
            client,
            opcode::PRINTF_TO_STREAM_PACKED,
            file,
            b"%s!\n\0",
            &Args::packed().ptr(0x40).bytes,
            &[(0x40, b"str\0")],
        )
        .0;
        call(client, opcode::CLOSE_FILE, &[file]);
        let forged = printf(
            client,
            opcode::PRINTF_TO_STREAM,
            0x7770,
            b"lost\0",
            &[],
            &[],
        )
        .0;
        // PRINTF_TO_STDOUT with no strings to fetch: the count it returns.
        let to_stdout = |format: &[u8], args: &[u8]| {
            printf(client, opcode::PRINTF_TO_STDOUT, 0, format, args, &[]).0
        };
        // `%n` writes nothing anywhere; its pointer is never dereferenced.
        let n = to_stdout(b"a%nb|\0", &Args::default().ptr(0xdead).bytes);
        // Unknown conversions print as written and take no argument.
        let unknown = to_stdout(b"%y%S|\0", &[]);
        // No NUL: the received bytes are the format.
        let unterminated = to_stdout(b"raw|", &[]);
        // A width no output should have: a failed printf, not a gigabyte.
        let wide = to_stdout(b"w%999999999dx\0", &Args::default().int(1).bytes);
        let wide_star = to_stdout(b"%*d\0", &Args::default().int(i32::MIN).int(1).bytes);
        // Fewer argument bytes than the format needs: missing values read as all ones and a
        // missing string as null, as in LLVM's server.
        let mut port = open(client, opcode::PRINTF_TO_STDOUT);
        port.send_n(b"|%u %s\0");
        let _size = reply(&mut port);
        port.send_n(&[]);
        let (mut short_ret, mut asked) = (0, 1);
        port.recv(|buffer, _| {
            short_ret = buffer.data[0] as u32;
            asked = buffer.data[1];
        });
        drop(port);
        (
            (to_file, to_file_packed, forged as i32, n),
            (unknown, unterminated, wide as i32, wide_star as i32),
            (short_ret, asked),
        )
    });
    let (files, bad, short) = out.result;
    assert_eq!(files, (4, 5, -1, 3));
    assert_eq!(std::fs::read(&path).unwrap(), b"n=5\nstr!\n");
    assert_eq!(bad, (5, 4, -1, -1));
    assert_eq!(short, (18, 0));
    assert_eq!(
        String::from_utf8_lossy(&out.sink.stdout),
        "ab|%y%S|raw|w|4294967295 (null)"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- exit, malloc/free, drain ---------------------------------------------------------------

#[test]
fn malloc_then_free_on_port_0_is_served_by_one_drain() {
    let mut shared = Shared::new(Layout::new(4, 1).unwrap());
    let layout = shared.layout;
    let base = shared.base();
    // SAFETY: as in `run_with`.
    let (client, server) = unsafe { (Client::new(&layout, base), RpcHandlers::new(&layout, base)) };
    let (mut sink, mut memory) = (Collect::default(), Memory::default());
    let stage = AtomicU32::new(0);
    std::thread::scope(|scope| {
        let device = scope.spawn(|| {
            let mut port = open(&client, opcode::MALLOC);
            assert_eq!(port.index(), 0);
            port.send(|buffer, _| buffer.data[0] = 64);
            let address = reply(&mut port);
            drop(port);
            let mut port = open(&client, opcode::FREE);
            assert_eq!(port.index(), 0, "port 0 is free again after the MALLOC");
            port.send(|buffer, _| buffer.data[0] = address);
            drop(port);
            stage.store(1, Ordering::Release);
            address
        });
        // Serve the MALLOC only; the scan then resumes after port 0.
        while server.poll(&mut sink, &mut memory).unwrap() != Served::Handled {
            std::thread::yield_now();
        }
        while stage.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        // The FREE is posted on port 0 now: one drain must serve it.
        assert_eq!(server.drain(&mut sink, &mut memory).unwrap(), None);
        let address = device.join().unwrap();
        assert_eq!(memory.freed, [address]);
    });
}

#[test]
fn exit_reports_the_status_and_ends_the_run() {
    let out = run(|client| {
        let mut port = open(client, opcode::EXIT);
        port.send_and_recv(|_, _| {}, |_, _| {});
        port.send(|buffer, _| buffer.data[0] = 0xffff_ffff_0000_0007);
    });
    assert_eq!(out.end, Some(LaunchEnd::Exited(7)));
    assert!(out.memory.freed.is_empty());
}

/// A warp of several lanes written by hand into the shared memory (our host client is always a
/// one-lane warp): header mask, per-lane slots, and the client's mailbox flips.
struct RawWarp {
    base: *mut u8,
    layout: Layout,
    out: u32,
}

impl RawWarp {
    /// A server over `shared` and port 0's client side as a raw warp (nothing sent yet).
    fn with_server(shared: &mut Shared) -> (RpcHandlers, RawWarp) {
        let layout = shared.layout;
        let base = shared.base();
        // SAFETY: as in `run_with` (callers drop the server before `shared`).
        let server = unsafe { RpcHandlers::new(&layout, base) };
        let warp = RawWarp {
            base,
            layout,
            out: 0,
        };
        (server, warp)
    }
    fn mailbox(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: port 0's mailbox words lie inside the live allocation, 4-aligned, and are
        // only accessed atomically.
        unsafe { &*(self.base.add(offset) as *const AtomicU32) }
    }
    fn open(&mut self, code: u32, mask: u64) {
        // SAFETY: port 0's header, written before the first send publishes it.
        unsafe {
            let header = self.base.add(self.layout.header_offset());
            std::ptr::write(header as *mut u64, mask);
            std::ptr::write(header.add(8) as *mut u32, code);
        }
    }
    fn wait(&self) {
        while self
            .mailbox(self.layout.client_inbox_offset())
            .load(Ordering::Acquire)
            != self.out
        {
            std::thread::yield_now();
        }
    }
    fn send(&mut self, words: &[(u32, u64)]) {
        self.wait();
        for &(lane, word) in words {
            // SAFETY: port 0, lane `lane` < lane size: inside the packet array; the client owns
            // the packet after `wait`.
            unsafe {
                let slot = self
                    .base
                    .add(self.layout.packet_offset() + 64 * lane as usize);
                std::ptr::write(slot as *mut u64, word);
            }
        }
        self.out ^= 1;
        self.mailbox(self.layout.client_outbox_offset())
            .store(self.out, Ordering::Release);
    }
}

#[test]
fn exit_takes_the_lowest_lane_status_like_llvm() {
    let mut shared = Shared::new(Layout::new(1, 32).unwrap());
    let (server, mut warp) = RawWarp::with_server(&mut shared);
    let (base, layout) = (warp.base, warp.layout);
    let (mut sink, mut memory) = (Collect::default(), Memory::default());
    let mask = 1 << 3 | 1 << 9 | 1 << 30;
    warp.open(opcode::EXIT, mask);
    warp.send(&[]);
    let base_addr = base as usize;
    let end = std::thread::scope(|scope| {
        let device = scope.spawn(move || {
            let mut warp = RawWarp {
                base: base_addr as *mut u8,
                layout,
                out: 1,
            };
            // Wait for the server's empty reply, then send each lane's status.
            warp.send(&[(3, 30), (9, 90), (30, 300)]);
        });
        loop {
            match server.poll(&mut sink, &mut memory).unwrap() {
                Served::End(end) => break (end, device.join()),
                _ => std::thread::yield_now(),
            }
        }
    });
    assert_eq!(end.0, LaunchEnd::Exited(30));
    assert!(end.1.is_ok());
}

#[test]
fn writes_from_several_lanes_each_get_their_own_count() {
    let mut shared = Shared::new(Layout::new(1, 32).unwrap());
    let (server, mut warp) = RawWarp::with_server(&mut shared);
    let (base, layout) = (warp.base, warp.layout);
    let (mut sink, mut memory) = (Collect::default(), Memory::default());
    warp.open(opcode::WRITE_TO_STDOUT_NEWLINE, 1 << 1 | 1 << 4);
    // send_n of "ab" from lane 1 and "xyz" from lane 4: one packet each, the length in word 0
    // and the bytes after it.
    // SAFETY: the packet belongs to the client (nothing was sent yet); slots 1 and 4 of port 0.
    unsafe {
        let packet = base.add(layout.packet_offset());
        std::ptr::copy_nonoverlapping(b"ab".as_ptr(), packet.add(64 + 8), 2);
        std::ptr::copy_nonoverlapping(b"xyz".as_ptr(), packet.add(4 * 64 + 8), 3);
    }
    warp.send(&[(1, 2), (4, 3)]);
    assert_eq!(
        server.poll(&mut sink, &mut memory).unwrap(),
        Served::Handled
    );
    let word = |lane: usize| {
        // SAFETY: the reply is back with the client; read lane `lane`'s first word.
        unsafe { std::ptr::read(base.add(layout.packet_offset() + 64 * lane) as *const u64) }
    };
    assert_eq!((word(1), word(4)), (3, 4));
    assert_eq!(sink.stdout, b"ab\nxyz\n");
}

// ---- LLVM libc's test opcodes -----------------------------------------------------------------

/// libc's `rpc_interface_test.cpp` client: every hop passes the count on, the server adds one.
fn interface(client: &Client, end_with_recv: bool) -> u64 {
    let mut port = open(client, opcode::TEST_INTERFACE);
    let mut count = 0u64;
    port.send(|b, _| b.data[0] = u64::from(end_with_recv));
    port.send(|b, _| b.data[0] = count);
    port.recv(|b, _| count = b.data[0]);
    port.send(|b, _| b.data[0] = count);
    port.recv(|b, _| count = b.data[0]);
    port.send(|b, _| b.data[0] = count);
    port.send(|b, _| b.data[0] = count);
    port.recv(|b, _| count = b.data[0]);
    port.recv(|b, _| count = b.data[0]);
    if end_with_recv {
        port.send(|b, _| b.data[0] = count);
    } else {
        port.recv(|b, _| count = b.data[0]);
    }
    count
}

#[test]
fn test_interface_and_stream_opcodes() {
    let out = run(|client| {
        let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let mut port = open(client, opcode::TEST_STREAM);
        port.send_n(&data);
        let mut echo = vec![0u8; 2000];
        let len = port.recv_n(&mut echo);
        drop(port);
        echo.truncate(len as usize);
        (
            interface(client, true),
            interface(client, false),
            echo == data,
            call(client, opcode::TEST_INCREMENT, &[41]),
        )
    });
    assert_eq!(out.result, (4, 5, true, 42));
}

/// HOST_CALL as LLVM libc's device code makes it (`rpc_host_call`): send_n(the argument blob),
/// then the function's address in `data[0]`, then the reply.
fn host_call(client: &Client, code: u32, function: u64, blob: &[u8]) -> u64 {
    let mut port = open(client, code);
    port.send_n(blob);
    port.send(|buffer, _| buffer.data[0] = function);
    reply(&mut port)
}

#[test]
fn host_calls_run_the_registered_function_with_the_device_bytes() {
    let functions = HostFunctions::default();
    let sum = functions.register(|bytes| bytes.iter().map(|&b| u64::from(b)).sum());
    let length = functions.register(|bytes| bytes.len() as u64 * 1000);
    let long: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let long_sum: u64 = long.iter().map(|&b| u64::from(b)).sum();
    let outcome = serve(
        HostAccess::default(),
        functions,
        Collect::default(),
        |client| {
            [
                host_call(client, opcode::HOST_CALL, sum, &[1, 2, 3]),
                host_call(client, opcode::HOST_CALL, sum, &long),
                // liboffload's opcode, the same protocol.
                host_call(client, opcode::OFFLOAD_HOST_CALL, length, &long),
                host_call(client, opcode::HOST_CALL, length, &[]),
            ]
        },
    );
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    assert_eq!(outcome.result, [6, long_sum, 1_000_000, 0]);
}

#[test]
fn host_calls_to_anything_unregistered_or_a_panic_end_the_launch_with_a_clear_error() {
    let functions = HostFunctions::default();
    let panics = functions.register(|_| panic!("the host function's own bug"));
    // A stray pointer from the device is never called: the launch ends naming it.
    for (function, expected) in [
        (
            0x7fff_dead_beef,
            "host function 0x7fffdeadbeef, which the host did not register",
        ),
        (panics, "panicked"),
    ] {
        let outcome = serve(
            HostAccess::default(),
            functions.clone(),
            Collect::default(),
            |client| {
                // No reply will come: the device sends its request and stops there.
                let mut port = open(client, opcode::HOST_CALL);
                port.send_n(b"args");
                port.send(|buffer, _| buffer.data[0] = function);
            },
        );
        match outcome.error {
            Some(BackendError::Rpc(message)) => assert!(message.contains(expected), "{message}"),
            other => panic!("expected an RPC error naming {function:#x}, got {other:?}"),
        }
    }
    // With no functions at all (as under `cargo gpurun run`), every host call is refused.
    let outcome = serve(
        HostAccess::default(),
        HostFunctions::default(),
        Collect::default(),
        |client| {
            let mut port = open(client, opcode::HOST_CALL);
            port.send_n(&[]);
            port.send(|buffer, _| buffer.data[0] = 0x6770_0000_0000_0001);
        },
    );
    assert!(matches!(outcome.error, Some(BackendError::Rpc(_))));
}
