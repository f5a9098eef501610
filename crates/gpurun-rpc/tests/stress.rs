//! Stress: many clients against one server thread over one allocation, every message checked.
//!
//! Each sender (a host thread as a 1-lane client, or one lane of an emulated 32- or 64-lane warp,
//! including partly active warps) sends numbered messages of random length through `send_n`.
//! The server checks every byte against the deterministic pattern of (sender, number), that
//! numbers arrive in order per sender (no loss, no duplicate, order kept) and acknowledges; a
//! quarter of the messages are echoed back with `send_n` and checked by the client (`recv_n`).
//! At the end every sender's count must equal what it sent.
//!
//! Not run by a plain `cargo test` (`test = false`): `cargo test -p gpurun-rpc --test stress`
//! runs it, as scripts/test.sh does.
//!
//! Default sizes keep the whole file well under a minute in a debug build on 2 cores: lengths are
//! log-uniform between 0 and 1 MiB for 1-lane clients (plus every packet-boundary length and one
//! full 1 MiB message per sender) and up to 64 KiB for emulated-warp lanes (each packet of a
//! 64-lane warp costs several barrier rounds of 64 OS threads). `GPURUN_RPC_STRESS_SCALE=N`
//! multiplies the message counts by N for longer runs.

mod common;

use common::{pattern, serve_while, EmulatedLane, Rng, Shared, WarpShared};
use gpurun_rpc::{opcode, Client, HostLane, Lanes, Layout, Server};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Message checked by the server, acknowledged with one packet.
const CHECK: u32 = opcode::opcode(b't', 1);
/// Message checked by the server and echoed back with `send_n`.
const ECHO: u32 = opcode::opcode(b't', 2);
const ACK_OK: u64 = 0x600d;

fn scale() -> u64 {
    std::env::var("GPURUN_RPC_STRESS_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1)
}

/// Length of message `seq` of `sender`: packet-boundary lengths first, one maximal message,
/// then log-uniform lengths up to `max_len`.
fn length_of(sender: u64, seq: u64, max_len: usize) -> usize {
    const EDGES: [usize; 10] = [0, 1, 55, 56, 57, 119, 120, 121, 183, 184];
    if let Some(&len) = EDGES.get(seq as usize) {
        return len.min(max_len);
    }
    // One maximal message for the first few senders (all of them when scaled up).
    if seq == EDGES.len() as u64 && (sender < 4 || scale() > 1) {
        return max_len;
    }
    let mut rng = Rng::new(sender.wrapping_mul(7919) ^ seq << 20);
    let bits = rng.below(u64::from(max_len.ilog2()) + 1);
    rng.below((1u64 << bits) + 1) as usize
}

struct Ledger {
    /// Next expected message number per sender.
    next: Vec<u64>,
    errors: Vec<String>,
    bytes: u64,
}

/// Serves CHECK and ECHO until `done`; records every discrepancy instead of panicking (a panic
/// here would leave the clients waiting forever).
fn serve(server: &Server, ledger: &Mutex<Ledger>, done: &AtomicBool) {
    serve_while(
        server,
        || !done.load(Ordering::Acquire),
        |port| {
            let op = port.opcode();
            let mut ids = [(u64::MAX, 0u64, 0usize); 64];
            port.recv(|b, lane| ids[lane as usize] = (b.data[0], b.data[1], b.data[2] as usize))
                .unwrap();
            let received = port.recv_n_to_vecs(1 << 20).unwrap();
            let mut guard = ledger.lock().unwrap();
            let ledger = &mut *guard;
            for (lane, len, bytes) in &received {
                let (sender, seq, max_len) = ids[*lane as usize];
                let Some(expected_seq) = ledger.next.get_mut(sender as usize) else {
                    ledger
                        .errors
                        .push(format!("unknown sender {sender} on lane {lane}"));
                    continue;
                };
                if seq != *expected_seq {
                    let msg =
                        format!("sender {sender}: got message {seq}, expected {expected_seq}");
                    ledger.errors.push(msg);
                }
                *expected_seq = seq + 1;
                let want = length_of(sender, seq, max_len);
                if *len != want as u64 || bytes.len() != want {
                    let msg = format!("sender {sender} #{seq}: length {len}, expected {want}");
                    ledger.errors.push(msg);
                } else if *bytes != pattern(sender, seq, want) {
                    let msg = format!("sender {sender} #{seq}: content differs ({want} bytes)");
                    ledger.errors.push(msg);
                }
                ledger.bytes += *len;
            }
            drop(guard);
            if op == ECHO {
                port.send_n(|lane| {
                    received
                        .iter()
                        .find(|(l, _, _)| *l == lane)
                        .map_or(&[][..], |(_, _, bytes)| &bytes[..])
                })
                .unwrap();
            } else {
                port.send(|b, _| b.data[0] = ACK_OK).unwrap();
            }
        },
    );
}

/// What one sender (one lane) does: `messages` numbered messages, checked replies.
fn send_messages<L: Lanes>(client: &Client, lanes: &L, sender: u64, messages: u64, max_len: usize) {
    let mut echo_buffer = Vec::new();
    for seq in 0..messages {
        let len = length_of(sender, seq, max_len);
        let data = pattern(sender, seq, len);
        // Warp-uniform choice (depends on the message number only).
        let op = if seq % 4 == 3 { ECHO } else { CHECK };
        let port = if op == ECHO {
            client.open::<ECHO, L>(lanes)
        } else {
            client.open::<CHECK, L>(lanes)
        };
        let mut port = port.expect("client initialised");
        port.send(|b, _| {
            b.data[0] = sender;
            b.data[1] = seq;
            b.data[2] = max_len as u64;
        });
        port.send_n(&data);
        if op == ECHO {
            echo_buffer.clear();
            echo_buffer.resize(len, 0);
            let announced = port.recv_n(&mut echo_buffer);
            assert_eq!(announced, len as u64, "sender {sender} #{seq}: echo length");
            assert!(echo_buffer == data, "sender {sender} #{seq}: echo content");
        } else {
            let mut ack = 0;
            port.recv(|b, _| ack = b.data[0]);
            assert_eq!(ack, ACK_OK, "sender {sender} #{seq}: no acknowledgement");
        }
    }
}

/// How the senders are organised.
#[derive(Clone, Copy, Debug)]
enum Senders {
    /// `threads` independent 1-lane clients.
    SingleLanes { threads: u32 },
    /// `warps` emulated warps of `lane_size` lanes of which the lanes in `active` run.
    Warps {
        warps: u32,
        lane_size: u32,
        active: u64,
    },
}

fn run(senders: Senders, ports: u32, messages: u64, max_len: usize) {
    let lane_size = match senders {
        Senders::SingleLanes { .. } => 1,
        Senders::Warps { lane_size, .. } => lane_size,
    };
    let sender_count = match senders {
        Senders::SingleLanes { threads } => threads as usize,
        Senders::Warps {
            warps, lane_size, ..
        } => (warps * lane_size) as usize,
    };
    let mut shared = Shared::new(Layout::new(ports, lane_size).unwrap());
    let (client, server) = shared.endpoints();
    let ledger = Mutex::new(Ledger {
        next: vec![0; sender_count],
        errors: Vec::new(),
        bytes: 0,
    });
    let done = AtomicBool::new(false);
    let started = Instant::now();
    std::thread::scope(|scope| {
        let server_thread = scope.spawn(|| serve(&server, &ledger, &done));
        let mut clients = Vec::new();
        match senders {
            Senders::SingleLanes { threads } => {
                for sender in 0..u64::from(threads) {
                    let client = &client;
                    clients.push(scope.spawn(move || {
                        send_messages(client, &HostLane::SINGLE, sender, messages, max_len)
                    }));
                }
            }
            Senders::Warps {
                warps,
                lane_size,
                active,
            } => {
                for warp in 0..warps {
                    let shared_warp: &WarpShared =
                        Box::leak(Box::new(WarpShared::new(lane_size, active)));
                    for id in shared_warp.lane_ids() {
                        let client = &client;
                        let sender = u64::from(warp * lane_size + id);
                        clients.push(scope.spawn(move || {
                            let lane = EmulatedLane {
                                warp: shared_warp,
                                id,
                            };
                            send_messages(client, &lane, sender, messages, max_len)
                        }));
                    }
                }
            }
        }
        let outcomes: Vec<_> = clients.into_iter().map(|c| c.join()).collect();
        done.store(true, Ordering::Release);
        server_thread.join().unwrap();
        for outcome in outcomes {
            outcome.unwrap();
        }
    });
    let ledger = ledger.into_inner().unwrap();
    assert!(
        ledger.errors.is_empty(),
        "{senders:?}: {:#?}",
        ledger.errors
    );
    let active: Vec<usize> = match senders {
        Senders::SingleLanes { threads } => (0..threads as usize).collect(),
        Senders::Warps {
            warps,
            lane_size,
            active,
        } => (0..warps * lane_size)
            .filter(|s| active & (1 << (s % lane_size)) != 0)
            .map(|s| s as usize)
            .collect(),
    };
    for (sender, &count) in ledger.next.iter().enumerate() {
        let expected = if active.contains(&sender) {
            messages
        } else {
            0
        };
        assert_eq!(
            count, expected,
            "{senders:?}: sender {sender} message count"
        );
    }
    eprintln!(
        "{senders:?}, {ports} ports: {} messages, {:.1} MiB checked in {:.2?}",
        messages * active.len() as u64,
        ledger.bytes as f64 / (1 << 20) as f64,
        started.elapsed()
    );
}

#[test]
fn single_lane_clients_1_2_8_64_threads() {
    let s = scale();
    run(Senders::SingleLanes { threads: 1 }, 1, 600 * s, 1 << 20);
    run(Senders::SingleLanes { threads: 2 }, 2, 500 * s, 1 << 20);
    run(Senders::SingleLanes { threads: 8 }, 4, 120 * s, 1 << 20);
    run(Senders::SingleLanes { threads: 64 }, 16, 20 * s, 1 << 20);
}

#[test]
fn emulated_32_lane_warps() {
    let s = scale();
    run(
        Senders::Warps {
            warps: 1,
            lane_size: 32,
            active: u64::from(u32::MAX),
        },
        1,
        12 * s,
        1 << 16,
    );
    // A partly active warp: lanes 1, 4, 9 and 31 only.
    let sparse = 1 << 1 | 1 << 4 | 1 << 9 | 1 << 31;
    run(
        Senders::Warps {
            warps: 3,
            lane_size: 32,
            active: sparse,
        },
        2,
        40 * s,
        1 << 16,
    );
}

#[test]
fn emulated_64_lane_warp() {
    let s = scale();
    run(
        Senders::Warps {
            warps: 1,
            lane_size: 64,
            active: u64::MAX,
        },
        2,
        12 * s,
        1 << 16,
    );
    let upper = 0xffff_0000_0000_0000 | 1;
    run(
        Senders::Warps {
            warps: 2,
            lane_size: 64,
            active: upper,
        },
        1,
        12 * s,
        1 << 16,
    );
}
