//! Drives a server over shared memory whose every byte comes from the input: the device is
//! hostile or broken. Used by `tests/untrusted.rs` (fixed iterations, also under Miri) and by
//! the cargo-fuzz target in `fuzz/`.
//!
//! Input format: 3 bytes pick the layout (ports 1..=8, lane size 1/32/64, doorbell or not); the
//! shared allocation is then filled by repeating the input; the remaining bytes are a script of
//! server operations, including "scribbles" that overwrite shared memory between and during
//! operations (inside the server's callbacks), as a device ignoring the protocol would.
//!
//! The server is cancelled up front, so every wait for the device ends at once with
//! `ServerError::Cancelled`; any other error, a panic or UB is a bug.

use super::Shared;
use gpurun_rpc::server::ServerPort;
use gpurun_rpc::{Layout, Server, ServerError};

struct Script<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Script<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.byte()?, self.byte()?]))
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let end = (self.at + n).min(self.bytes.len());
        let out = &self.bytes[self.at..end];
        self.at = end;
        out
    }
}

/// Overwrites up to 8 bytes of the allocation at a script-chosen offset.
fn scribble(memory: *mut u8, len: usize, script: &mut Script<'_>) {
    let (Some(offset), Some(value)) = (script.u16(), script.byte()) else {
        return;
    };
    let offset = usize::from(offset) % len;
    let count = (len - offset).min(8);
    // SAFETY: `memory` addresses `len` bytes of the test's allocation and `offset + count <= len`.
    // The server holds no references into the allocation while its callbacks run (it copies
    // packets in and out), so these writes alias nothing.
    unsafe { std::ptr::write_bytes(memory.add(offset), value, count) };
}

fn check(result: Result<impl Sized, ServerError>) {
    if let Err(error) = result {
        assert_eq!(error, ServerError::Cancelled);
    }
}

/// Runs one input. Never panics unless the server misbehaves.
pub fn drive_server(input: &[u8]) {
    let [ports, lanes, doorbell, ..] = *input else {
        return;
    };
    let port_count = 1 + u32::from(ports % 8);
    let lane_size = [1, 32, 64][usize::from(lanes % 3)];
    let layout = if doorbell & 1 == 0 {
        Layout::new(port_count, lane_size)
    } else {
        Layout::legacy(port_count, lane_size)
    }
    .expect("valid geometry");
    let mut shared = Shared::new(layout);
    let size = layout.allocation_size();
    let fill = &input[3..];
    if !fill.is_empty() {
        for (i, byte) in shared.bytes_mut()[..size].iter_mut().enumerate() {
            *byte = fill[i % fill.len()];
        }
    }
    let memory = shared.base();
    // SAFETY: `memory` is a 64-aligned allocation of the layout's size that outlives `server`.
    let server = unsafe { Server::new(&layout, memory) };
    server.cancel();
    let mut script = Script { bytes: fill, at: 0 };
    let mut port: Option<ServerPort<'_>> = None;
    let mut steps = 0;
    while let Some(op) = script.byte() {
        steps += 1;
        if steps > 256 {
            break;
        }
        match op % 10 {
            0 => {
                let start = u32::from(script.byte().unwrap_or(0)) % (port_count + 1);
                drop(port.take());
                port = server.try_open(start);
                if let Some(p) = &port {
                    assert!(p.index() < port_count);
                    assert_eq!(p.lane_mask() & !lane_mask(lane_size), 0);
                }
            }
            1 => {
                if let Some(p) = &mut port {
                    check(p.recv(|b, lane| {
                        assert!(lane < lane_size);
                        std::hint::black_box(b);
                    }));
                }
            }
            2 => {
                let word = u64::from(script.byte().unwrap_or(0)) * 0x0101_0101_0101_0101;
                if let Some(p) = &mut port {
                    check(p.send(|b, _| b.data = [word; 8]));
                }
            }
            3 => {
                if let Some(p) = &mut port {
                    let (len, scribbles) = (size, &mut script);
                    check(p.recv_and_send(|b, _| {
                        b.data[0] = b.data[0].wrapping_add(1);
                        scribble(memory, len, scribbles);
                    }));
                }
            }
            4 => {
                let data = script.take(200).to_vec();
                if let Some(p) = &mut port {
                    check(p.send_n(|lane| &data[..data.len().min(lane as usize * 3)]));
                }
            }
            5 => {
                let capacity = usize::from(script.byte().unwrap_or(0));
                let mut storage = vec![vec![0u8; capacity]; 64];
                let mut slots: Vec<Option<&mut [u8]>> =
                    storage.iter_mut().map(|v| Some(&mut v[..])).collect();
                if let Some(p) = &mut port {
                    let (len, scribbles) = (size, &mut script);
                    check(p.recv_n(|lane, _announced| {
                        scribble(memory, len, scribbles);
                        slots.get_mut(lane as usize).and_then(Option::take)
                    }));
                }
            }
            6 => {
                let limit = usize::from(script.byte().unwrap_or(0)) * 16;
                if let Some(p) = &mut port {
                    match p.recv_n_to_vecs(limit) {
                        Ok(lanes) => {
                            for (lane, announced, bytes) in lanes {
                                assert!(lane < lane_size);
                                assert!(bytes.len() <= limit);
                                assert!(bytes.len() as u64 <= announced);
                            }
                        }
                        Err(error) => assert_eq!(error, ServerError::Cancelled),
                    }
                }
            }
            7 => {
                if let Some(p) = &mut port {
                    let (len, scribbles) = (size, &mut script);
                    check(p.recv_n_chunks(|lane, announced, offset, bytes| {
                        assert!(lane < lane_size);
                        assert!(bytes.len() <= 64);
                        assert!(offset.saturating_add(bytes.len() as u64) <= announced);
                        scribble(memory, len, scribbles);
                    }));
                }
            }
            8 => scribble(memory, size, &mut script),
            _ => port = None,
        }
    }
    drop(port);
}

fn lane_mask(lane_size: u32) -> u64 {
    if lane_size == 64 {
        u64::MAX
    } else {
        (1 << lane_size) - 1
    }
}
