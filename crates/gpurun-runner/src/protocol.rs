//! Messages between the harness (parent) and a worker process, framed on the worker's stdin and
//! stdout: a tag byte, the little-endian `u32` slot the frame belongs to, a little-endian `u32`
//! length, then the payload (raw bytes for output, JSON for the rest). A worker runs one test
//! per slot at a time, each slot on its own stream/queue with its own copy of the module, so
//! the slot number keeps the output of concurrent tests apart.

use gpurun_abi::{LaunchEnd, LaunchShape, PanicReport};
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::time::Duration;

/// Largest frame either side accepts; bigger lengths mean a corrupt stream.
pub const MAX_FRAME: usize = 256 << 20;

/// Parent -> worker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Command {
    /// Launch test kernel `kernel` with `shape`; a benchmark's kernel with its iteration count.
    RunTest {
        kernel: String,
        #[serde(with = "LaunchShapeJson")]
        shape: LaunchShape,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bench: Option<BenchLaunch>,
    },
    /// Run the image as a program: `_begin`, `_start` (or the `kernels` given, in order, with no
    /// arguments), `_end`.
    RunMain {
        argv: Vec<Vec<u8>>,
        envp: Vec<Vec<u8>>,
        #[serde(with = "LaunchShapeJson")]
        shape: LaunchShape,
        kernels: Vec<String>,
        print_resource_usage: bool,
    },
}

/// How a benchmark's kernel is launched (`#[gpurun::bench]`, whose kernel takes the count).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct BenchLaunch {
    /// How many times the benchmark's routine runs in this launch.
    pub iterations: u64,
    /// Flush the device's L2 cache before the launch (`--flush-l2`, a cold run) where the
    /// backend can; elsewhere nothing is done.
    #[serde(default)]
    pub flush_l2: bool,
}

impl BenchLaunch {
    /// One iteration, caches as they are: a benchmark run as a test.
    pub const ONCE: BenchLaunch = BenchLaunch {
        iterations: 1,
        flush_l2: false,
    };
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
    /// The device's own time of the current command's launch (sent before
    /// [`Event::Ended`] where the backend measured it).
    DeviceTime(Duration),
    /// The current command's launch ended, as the backend reported it (for `RunMain`, a
    /// non-zero status from `main` is [`LaunchEnd::Exited`]).
    Ended(LaunchEnd),
    /// The worker could not run the current command (a missing kernel, a backend error); it
    /// is still usable.
    Refused {
        error: String,
    },
    /// Opening the device or loading the image failed; the worker exits next.
    StartFailed {
        error: String,
    },
}

const TAG_READY: u8 = 1;
const TAG_STDOUT: u8 = 2;
const TAG_STDERR: u8 = 3;
const TAG_PANIC: u8 = 4;
const TAG_ENDED: u8 = 5;
const TAG_START_FAILED: u8 = 6;
const TAG_REFUSED: u8 = 7;
const TAG_DEVICE_TIME: u8 = 8;
const TAG_COMMAND: u8 = 16;

/// Which of a worker's concurrent runs a frame belongs to.
pub type Slot = u32;

/// Largest slot count a worker accepts (and so the largest slot number plus one).
pub const MAX_SLOTS: usize = 256;

const HEADER_LEN: usize = 9;

fn write_frame(out: &mut impl Write, tag: u8, slot: Slot, payload: &[u8]) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|len| *len as usize <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut header = [0u8; HEADER_LEN];
    header[0] = tag;
    header[1..5].copy_from_slice(&slot.to_le_bytes());
    header[5..].copy_from_slice(&len.to_le_bytes());
    out.write_all(&header)?;
    out.write_all(payload)?;
    out.flush()
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
fn read_frame(input: &mut impl Read) -> io::Result<Option<(u8, Slot, Vec<u8>)>> {
    let mut header = [0u8; HEADER_LEN];
    // Only an end of stream between frames is clean; one inside a header is a torn frame.
    loop {
        match input.read(&mut header[..1]) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    input.read_exact(&mut header[1..])?;
    let slot = u32::from_le_bytes([header[1], header[2], header[3], header[4]]);
    if slot as usize >= MAX_SLOTS {
        return Err(invalid(format!("frame for slot {slot} is out of range")));
    }
    let len = u32::from_le_bytes([header[5], header[6], header[7], header[8]]) as usize;
    if len > MAX_FRAME {
        return Err(invalid(format!("frame of {len} bytes is over the limit")));
    }
    let mut payload = vec![0u8; len];
    input.read_exact(&mut payload)?;
    Ok(Some((header[0], slot, payload)))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// The JSON form of a [`PanicReport`]: serde's `remote` derive reads and writes the fields of
/// the type itself, so gpurun-abi, its home, stays free of dependencies; the compiler checks
/// this list against the type, so the two cannot drift apart.
#[derive(Serialize, Deserialize)]
#[serde(remote = "PanicReport")]
struct PanicReportJson {
    message: String,
    file: String,
    line: u32,
    column: u32,
    thread: [u32; 3],
    block: [u32; 3],
}

/// A panic frame's payload.
#[derive(Serialize, Deserialize)]
struct PanicFrame(#[serde(with = "PanicReportJson")] PanicReport);

/// The JSON form of a [`LaunchShape`] (see [`PanicReportJson`]).
#[derive(Serialize, Deserialize)]
#[serde(remote = "LaunchShape")]
struct LaunchShapeJson {
    threads: [u32; 3],
    blocks: [u32; 3],
    shared_bytes: u32,
}

/// The JSON form of a [`LaunchEnd`] (see [`PanicReportJson`]).
#[derive(Serialize, Deserialize)]
#[serde(remote = "LaunchEnd")]
enum LaunchEndJson {
    Completed,
    Exited(i32),
    Aborted,
    Faulted(String),
    TimedOut(Duration),
}

/// An end frame's payload.
#[derive(Serialize, Deserialize)]
struct EndFrame(#[serde(with = "LaunchEndJson")] LaunchEnd);

fn json<T: Serialize>(value: &T) -> io::Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| invalid(e.to_string()))
}

fn from_json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> io::Result<T> {
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("bad worker message: {e}")))
}

pub fn write_command(out: &mut impl Write, slot: Slot, command: &Command) -> io::Result<()> {
    write_frame(out, TAG_COMMAND, slot, &json(command)?)
}

pub fn read_command(input: &mut impl Read) -> io::Result<Option<(Slot, Command)>> {
    match read_frame(input)? {
        None => Ok(None),
        Some((TAG_COMMAND, slot, payload)) => {
            from_json(&payload).map(|command| Some((slot, command)))
        }
        Some((tag, _, _)) => Err(invalid(format!(
            "unexpected frame tag {tag} from the parent"
        ))),
    }
}

pub fn write_event(out: &mut impl Write, slot: Slot, event: &Event) -> io::Result<()> {
    match event {
        Event::Ready { device } => write_frame(out, TAG_READY, slot, device.as_bytes()),
        Event::Stdout(bytes) => write_frame(out, TAG_STDOUT, slot, bytes),
        Event::Stderr(bytes) => write_frame(out, TAG_STDERR, slot, bytes),
        Event::Panic(report) => {
            write_frame(out, TAG_PANIC, slot, &json(&PanicFrame(report.clone()))?)
        }
        Event::Ended(end) => write_frame(out, TAG_ENDED, slot, &json(&EndFrame(end.clone()))?),
        Event::Refused { error } => write_frame(out, TAG_REFUSED, slot, error.as_bytes()),
        Event::DeviceTime(time) => write_frame(out, TAG_DEVICE_TIME, slot, &json(time)?),
        Event::StartFailed { error } => write_frame(out, TAG_START_FAILED, slot, error.as_bytes()),
    }
}

/// Worker events encoded back to back for one write. Output that continues the last frame
/// (same slot, same stream) grows that frame instead of adding one, so a burst of lines costs
/// the reader one frame. Order is kept: frames stay in the order they were pushed.
#[derive(Debug, Default)]
pub struct FrameBuffer {
    bytes: Vec<u8>,
    /// Where the last frame starts, if it is output that more output may extend: its tag and
    /// slot.
    open_output: Option<(usize, u8, Slot)>,
}

impl FrameBuffer {
    /// Appends device output for `slot` (stdout, or stderr when `stderr`).
    pub fn push_output(&mut self, slot: Slot, stderr: bool, mut bytes: &[u8]) {
        let tag = if stderr { TAG_STDERR } else { TAG_STDOUT };
        while !bytes.is_empty() {
            if let Some((start, open_tag, open_slot)) = self.open_output {
                let len_at = start + 5;
                let len = u32::from_le_bytes([
                    self.bytes[len_at],
                    self.bytes[len_at + 1],
                    self.bytes[len_at + 2],
                    self.bytes[len_at + 3],
                ]) as usize;
                if (open_tag, open_slot) == (tag, slot) && len < MAX_FRAME {
                    let take = bytes.len().min(MAX_FRAME - len);
                    self.bytes.extend_from_slice(&bytes[..take]);
                    self.bytes[len_at..len_at + 4]
                        .copy_from_slice(&((len + take) as u32).to_le_bytes());
                    bytes = &bytes[take..];
                    continue;
                }
            }
            self.open_output = Some((self.bytes.len(), tag, slot));
            let mut header = [0u8; HEADER_LEN];
            header[0] = tag;
            header[1..5].copy_from_slice(&slot.to_le_bytes());
            self.bytes.extend_from_slice(&header);
        }
    }

    /// Appends any event (output through [`FrameBuffer::push_output`]).
    pub fn push(&mut self, slot: Slot, event: &Event) -> io::Result<()> {
        match event {
            Event::Stdout(bytes) => self.push_output(slot, false, bytes),
            Event::Stderr(bytes) => self.push_output(slot, true, bytes),
            other => {
                write_event(&mut self.bytes, slot, other)?;
                self.open_output = None;
            }
        }
        Ok(())
    }

    /// The encoded frames.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Bytes buffered.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Forgets the frames (after they were written), keeping the memory.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.open_output = None;
    }
}

pub fn read_event(input: &mut impl Read) -> io::Result<Option<(Slot, Event)>> {
    let Some((tag, slot, payload)) = read_frame(input)? else {
        return Ok(None);
    };
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    Ok(Some((
        slot,
        match tag {
            TAG_READY => Event::Ready {
                device: text(payload),
            },
            TAG_STDOUT => Event::Stdout(payload),
            TAG_STDERR => Event::Stderr(payload),
            TAG_PANIC => Event::Panic(from_json::<PanicFrame>(&payload)?.0),
            TAG_ENDED => Event::Ended(from_json::<EndFrame>(&payload)?.0),
            TAG_DEVICE_TIME => Event::DeviceTime(from_json(&payload)?),
            TAG_REFUSED => Event::Refused {
                error: text(payload),
            },
            TAG_START_FAILED => Event::StartFailed {
                error: text(payload),
            },
            other => return Err(invalid(format!("unknown frame tag {other} from a worker"))),
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip() {
        let events = [
            Event::Ready {
                device: "host".into(),
            },
            Event::Stdout(b"hi\n".to_vec()),
            Event::Stderr(vec![0, 255]),
            Event::Panic(gpurun_harness::testing::panic_report(
                "boom",
                3,
                [1, 2, 3],
                [4, 5, 6],
            )),
            Event::DeviceTime(Duration::from_nanos(1_234_567)),
            Event::Ended(LaunchEnd::Exited(7)),
            Event::Ended(LaunchEnd::Faulted("illegal address".into())),
            Event::Ended(LaunchEnd::TimedOut(Duration::from_millis(1500))),
            Event::Refused {
                error: "no kernel".into(),
            },
            Event::StartFailed {
                error: "nope".into(),
            },
        ];
        let mut wire = Vec::new();
        for (slot, event) in events.iter().enumerate() {
            write_event(&mut wire, slot as Slot, event).unwrap();
        }
        let mut input = wire.as_slice();
        for (slot, event) in events.iter().enumerate() {
            assert_eq!(
                read_event(&mut input).unwrap(),
                Some((slot as Slot, event.clone()))
            );
        }
        assert_eq!(read_event(&mut input).unwrap(), None);
    }

    #[test]
    fn oversized_and_unknown_frames_are_errors() {
        let mut wire = vec![TAG_STDOUT, 0, 0, 0, 0];
        wire.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(read_event(&mut wire.as_slice()).is_err());
        let wire = [99u8, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(read_event(&mut wire.as_slice()).is_err());
        // A slot no worker can have.
        let mut wire = vec![TAG_STDOUT];
        wire.extend_from_slice(&(MAX_SLOTS as u32).to_le_bytes());
        wire.extend_from_slice(&0u32.to_le_bytes());
        assert!(read_event(&mut wire.as_slice()).is_err());
        // A truncated payload is an error, not a clean end.
        let wire = [TAG_STDOUT, 0, 0, 0, 0, 4, 0, 0, 0, b'a'];
        assert!(read_event(&mut wire.as_slice()).is_err());
        // So is a truncated header.
        let wire = [TAG_STDOUT, 0, 0];
        assert!(read_event(&mut wire.as_slice()).is_err());
    }

    #[test]
    fn buffered_output_merges_per_slot_and_stream_in_order() {
        let mut buffer = FrameBuffer::default();
        buffer.push_output(0, false, b"a\n");
        buffer.push_output(0, false, b"b\n");
        buffer.push_output(0, true, b"e\n");
        buffer.push_output(1, true, b"f\n");
        buffer.push(1, &Event::Stderr(b"g\n".to_vec())).unwrap();
        buffer.push(0, &Event::Ended(LaunchEnd::Aborted)).unwrap();
        buffer.push_output(0, false, b"c\n");
        let mut input = buffer.as_bytes();
        let mut events = Vec::new();
        while let Some(event) = read_event(&mut input).unwrap() {
            events.push(event);
        }
        assert_eq!(
            events,
            [
                (0, Event::Stdout(b"a\nb\n".to_vec())),
                (0, Event::Stderr(b"e\n".to_vec())),
                (1, Event::Stderr(b"f\ng\n".to_vec())),
                (0, Event::Ended(LaunchEnd::Aborted)),
                (0, Event::Stdout(b"c\n".to_vec())),
            ]
        );
        buffer.clear();
        assert!(buffer.is_empty());
    }

    #[test]
    fn commands_round_trip() {
        let command = Command::RunTest {
            kernel: "__gpurun_test_x".into(),
            shape: LaunchShape::blocks(2).threads(32).shared_bytes(4096),
            bench: None,
        };
        let bench = Command::RunTest {
            kernel: "__gpurun_test_x".into(),
            shape: LaunchShape::SINGLE,
            bench: Some(BenchLaunch {
                iterations: 1 << 40,
                flush_l2: true,
            }),
        };
        for command in [command, bench] {
            let mut wire = Vec::new();
            write_command(&mut wire, 3, &command).unwrap();
            assert_eq!(
                read_command(&mut wire.as_slice()).unwrap(),
                Some((3, command))
            );
        }
    }
}
