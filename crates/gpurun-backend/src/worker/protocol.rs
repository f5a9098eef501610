//! Messages between the harness (parent) and a worker process, framed on the worker's stdin and
//! stdout: a tag byte, a little-endian `u32` length, then the payload (raw bytes for output,
//! JSON for the rest).

use crate::server::PanicReport;
use crate::LaunchShape;
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

/// Largest frame either side accepts; bigger lengths mean a corrupt stream.
pub const MAX_FRAME: usize = 256 << 20;

/// Parent -> worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Command {
    /// Launch test kernel `kernel` with `shape`.
    RunTest {
        kernel: String,
        threads: [u32; 3],
        blocks: [u32; 3],
    },
    /// Run the image as a program: `_begin`, `_start` (or the `kernels` given, in order, with no
    /// arguments), `_end`.
    RunMain {
        argv: Vec<Vec<u8>>,
        envp: Vec<Vec<u8>>,
        threads: [u32; 3],
        blocks: [u32; 3],
        kernels: Vec<String>,
        print_resource_usage: bool,
    },
}

impl Command {
    pub fn shape(threads: [u32; 3], blocks: [u32; 3]) -> LaunchShape {
        LaunchShape { threads, blocks }
    }
}

/// How a run ended, as the worker saw it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum RunEnd {
    /// Every launch completed; for `RunMain`, the combined `main` status.
    Completed {
        status: i32,
    },
    Exited {
        code: i32,
    },
    Aborted,
    Faulted {
        error: String,
    },
    TimedOut {
        millis: u64,
    },
    /// The worker could not do what was asked (missing kernel, backend error).
    Failed {
        error: String,
    },
}

/// Worker -> parent.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The device is open and the image loaded.
    Ready {
        device: String,
    },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Panic(PanicReport),
    /// The current command finished.
    Done(RunEnd),
    /// Opening the device or loading the image failed; the worker exits next.
    StartFailed {
        error: String,
    },
}

const TAG_READY: u8 = 1;
const TAG_STDOUT: u8 = 2;
const TAG_STDERR: u8 = 3;
const TAG_PANIC: u8 = 4;
const TAG_DONE: u8 = 5;
const TAG_START_FAILED: u8 = 6;
const TAG_COMMAND: u8 = 16;

fn write_frame(out: &mut impl Write, tag: u8, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut header = [0u8; 5];
    header[0] = tag;
    header[1..].copy_from_slice(&len.to_le_bytes());
    out.write_all(&header)?;
    out.write_all(payload)?;
    out.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
fn read_frame(input: &mut impl Read) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut header = [0u8; 5];
    match input.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > MAX_FRAME {
        return Err(invalid(format!("frame of {len} bytes is over the limit")));
    }
    let mut payload = vec![0u8; len];
    input.read_exact(&mut payload)?;
    Ok(Some((header[0], payload)))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn json<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| invalid(e.to_string()))
}

fn from_json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> io::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("bad worker message: {e}")))
}

pub fn write_command(out: &mut impl Write, command: &Command) -> io::Result<()> {
    write_frame(out, TAG_COMMAND, &json(command)?)
}

pub fn read_command(input: &mut impl Read) -> io::Result<Option<Command>> {
    match read_frame(input)? {
        None => Ok(None),
        Some((TAG_COMMAND, payload)) => from_json(&payload).map(Some),
        Some((tag, _)) => Err(invalid(format!(
            "unexpected frame tag {tag} from the parent"
        ))),
    }
}

pub fn write_event(out: &mut impl Write, event: &Event) -> io::Result<()> {
    match event {
        Event::Ready { device } => write_frame(out, TAG_READY, device.as_bytes()),
        Event::Stdout(bytes) => write_frame(out, TAG_STDOUT, bytes),
        Event::Stderr(bytes) => write_frame(out, TAG_STDERR, bytes),
        Event::Panic(report) => write_frame(out, TAG_PANIC, &json(report)?),
        Event::Done(end) => write_frame(out, TAG_DONE, &json(end)?),
        Event::StartFailed { error } => write_frame(out, TAG_START_FAILED, error.as_bytes()),
    }
}

pub fn read_event(input: &mut impl Read) -> io::Result<Option<Event>> {
    let Some((tag, payload)) = read_frame(input)? else {
        return Ok(None);
    };
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    Ok(Some(match tag {
        TAG_READY => Event::Ready {
            device: text(payload),
        },
        TAG_STDOUT => Event::Stdout(payload),
        TAG_STDERR => Event::Stderr(payload),
        TAG_PANIC => Event::Panic(from_json(&payload)?),
        TAG_DONE => Event::Done(from_json(&payload)?),
        TAG_START_FAILED => Event::StartFailed {
            error: text(payload),
        },
        other => return Err(invalid(format!("unknown frame tag {other} from a worker"))),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip() {
        let events = vec![
            Event::Ready {
                device: "host".into(),
            },
            Event::Stdout(b"hi\n".to_vec()),
            Event::Stderr(vec![0, 255]),
            Event::Panic(PanicReport {
                message: "boom".into(),
                file: "src/lib.rs".into(),
                line: 3,
                column: 9,
                thread: [1, 2, 3],
                block: [4, 5, 6],
            }),
            Event::Done(RunEnd::Exited { code: 7 }),
            Event::StartFailed {
                error: "nope".into(),
            },
        ];
        let mut wire = Vec::new();
        for event in &events {
            write_event(&mut wire, event).unwrap();
        }
        let mut input = wire.as_slice();
        for event in &events {
            assert_eq!(read_event(&mut input).unwrap().as_ref(), Some(event));
        }
        assert_eq!(read_event(&mut input).unwrap(), None);
    }

    #[test]
    fn oversized_and_unknown_frames_are_errors() {
        let mut wire = vec![TAG_STDOUT];
        wire.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(read_event(&mut wire.as_slice()).is_err());
        let wire = [99u8, 0, 0, 0, 0];
        assert!(read_event(&mut wire.as_slice()).is_err());
        // A truncated payload is an error, not a clean end.
        let wire = [TAG_STDOUT, 4, 0, 0, 0, b'a'];
        assert!(read_event(&mut wire.as_slice()).is_err());
    }

    #[test]
    fn commands_round_trip() {
        let command = Command::RunTest {
            kernel: "__gpurun_test_x".into(),
            threads: [32, 1, 1],
            blocks: [2, 1, 1],
        };
        let mut wire = Vec::new();
        write_command(&mut wire, &command).unwrap();
        assert_eq!(read_command(&mut wire.as_slice()).unwrap(), Some(command));
    }
}
