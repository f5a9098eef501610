//! Model check of the mailbox and port-locking logic with loom: every interleaving (up to the
//! preemption bound) of one client and the server (bound 3), of one client making two round
//! trips one after the other on one port, so that the second reuses what the first handed back
//! (bound 3), and of two fire-and-forget clients sharing one port (bound 1); and of two
//! round-trip clients sharing one port, the first 50,000 executions at bound 1 (the whole space
//! is too large for CI). Each model prints how many executions it explored and how long it took
//! (`-- --nocapture`).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p gpurun-rpc --test loom --release`
//! (`scripts/test.sh` does). Without `--cfg loom` this file is empty.
//!
//! Besides the protocol's own results (each client gets `value + 1`; fire-and-forget packets are
//! consumed before the port is reused), each port has a loom-tracked payload cell that a client
//! writes inside `send` and the server reads inside `recv`. loom reports any access to it that is
//! not ordered by happens-before: two clients inside one port at once (a lock bug) or a missing
//! acquire/release between client and server (a fence bug).
#![cfg(loom)]

use gpurun_rpc::layout::{Buffer, Header};
use gpurun_rpc::{opcode, Client, HostLane, Server};
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;

struct Memory {
    /// Mailbox A (client inbox) and B (client outbox).
    a: Box<[AtomicU32]>,
    b: Box<[AtomicU32]>,
    headers: Box<[std::cell::UnsafeCell<Header>]>,
    packets: Box<[std::cell::UnsafeCell<Buffer>]>,
    /// Per-port data whose accesses loom checks for races.
    payload: Box<[UnsafeCell<u64>]>,
    client: Client,
    server: Server,
}

// SAFETY: the raw regions are only accessed through the protocol (which these models check).
unsafe impl Sync for Memory {}
// SAFETY: as above.
unsafe impl Send for Memory {}

fn memory(ports: u32) -> Arc<Memory> {
    let n = ports as usize;
    let a: Box<[AtomicU32]> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let b: Box<[AtomicU32]> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let headers: Box<[_]> = (0..n)
        .map(|_| std::cell::UnsafeCell::new(Header::default()))
        .collect();
    let packets: Box<[_]> = (0..n)
        .map(|_| std::cell::UnsafeCell::new(Buffer::default()))
        .collect();
    let payload = (0..n).map(|_| UnsafeCell::new(0)).collect();
    let header_ptr = headers.as_ptr() as *mut Header;
    let packet_ptr = packets.as_ptr() as *mut Buffer;
    // SAFETY: every region has `ports` elements (lane size 1) and lives in the returned `Memory`
    // (boxed slices do not move when the Box moves) as long as the endpoints.
    let (client, server) = unsafe {
        (
            Client::from_parts(ports, a.as_ptr(), b.as_ptr(), header_ptr, packet_ptr),
            Server::from_parts(ports, 1, b.as_ptr(), a.as_ptr(), header_ptr, packet_ptr),
        )
    };
    Arc::new(Memory {
        a,
        b,
        headers,
        packets,
        payload,
        client,
        server,
    })
}

/// A client's conversations: `calls` TEST_INCREMENT round trips one after another, or one
/// fire-and-forget NOOP.
fn client_calls(memory: &Memory, value: u64, fire_and_forget: bool, calls: u64) {
    for call in 0..calls {
        client_call(memory, value + call, fire_and_forget);
    }
}

/// A client conversation: TEST_INCREMENT round trip, or a fire-and-forget NOOP.
fn client_call(memory: &Memory, value: u64, fire_and_forget: bool) {
    let lane = HostLane::SINGLE;
    let port = if fire_and_forget {
        memory.client.open::<{ opcode::NOOP }, _>(&lane)
    } else {
        memory.client.open::<{ opcode::TEST_INCREMENT }, _>(&lane)
    };
    let mut port = port.unwrap();
    let index = port.index() as usize;
    port.send(|b, _| {
        b.data[0] = value;
        memory.payload[index].with_mut(|p| unsafe { *p = value });
    });
    if !fire_and_forget {
        let mut reply = 0;
        port.recv(|b, _| {
            reply = b.data[0];
            let seen = memory.payload[index].with(|p| unsafe { *p });
            assert_eq!(seen, value + 1000);
        });
        assert_eq!(reply, value + 1);
    }
}

/// Serves `requests` conversations.
fn serve(memory: &Memory, requests: usize) {
    let mut served = 0;
    while served < requests {
        let Some(mut port) = memory.server.try_open(0) else {
            loom::thread::yield_now();
            continue;
        };
        let index = port.index() as usize;
        match port.opcode() {
            opcode::TEST_INCREMENT => port
                .recv_and_send(|b, _| {
                    let seen = memory.payload[index].with(|p| unsafe { *p });
                    assert_eq!(seen, b.data[0]);
                    memory.payload[index].with_mut(|p| unsafe { *p = seen + 1000 });
                    b.data[0] += 1;
                })
                .unwrap(),
            opcode::NOOP => port
                .recv(|b, _| {
                    let seen = memory.payload[index].with(|p| unsafe { *p });
                    assert_eq!(seen, b.data[0]);
                })
                .unwrap(),
            other => panic!("opcode {other:#x}"),
        }
        served += 1;
    }
}

/// How a model is explored: loom's preemption bound (the number of forced context switches per
/// execution; every interleaving with at most that many is checked) and, for models too large
/// to explore whole in CI, a cap on the executions explored (loom's `max_permutations`).
#[derive(Clone, Copy)]
struct Bounds {
    preemptions: usize,
    max_executions: Option<usize>,
}

impl Bounds {
    const fn preemptions(preemptions: usize) -> Bounds {
        Bounds {
            preemptions,
            max_executions: None,
        }
    }
}

/// One model: `clients[i]` says whether client `i` only sends (fire and forget) or makes
/// `calls` round trips. Returns how many executions loom explored.
fn model(name: &str, ports: u32, clients: &'static [bool], calls: u64, bounds: Bounds) -> usize {
    // One counter per model (the tests run at the same time): a plain atomic, outside loom.
    let executions = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&executions);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bounds.preemptions);
    builder.max_branches = 100_000;
    builder.max_permutations = bounds.max_executions;
    // loom checks the cap only every `checkpoint_interval` executions.
    builder.checkpoint_interval = 1;
    let started = std::time::Instant::now();
    builder.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let memory = memory(ports);
        let threads: Vec<_> = clients
            .iter()
            .enumerate()
            .map(|(i, &fire_and_forget)| {
                let memory = memory.clone();
                let value = 10 * (i as u64 + 1);
                loom::thread::spawn(move || client_calls(&memory, value, fire_and_forget, calls))
            })
            .collect();
        let requests = clients
            .iter()
            .map(|&fire_and_forget| if fire_and_forget { 1 } else { calls as usize })
            .sum();
        serve(&memory, requests);
        for thread in threads {
            thread.join().unwrap();
        }
        // Every conversation ended with the port back with the client.
        for port in 0..ports as usize {
            let a = memory.a[port].load(std::sync::atomic::Ordering::Relaxed);
            let b = memory.b[port].load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(a, b, "port {port} left with the server");
        }
        let _ = (&memory.headers, &memory.packets);
    });
    let executions = executions.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "loom {name}: {executions} executions at preemption bound {}{} in {:.1?}",
        bounds.preemptions,
        bounds
            .max_executions
            .map_or_else(String::new, |cap| format!(" (capped at {cap})")),
        started.elapsed()
    );
    executions
}

#[test]
fn one_client_round_trip() {
    model(
        "one client, one round trip",
        1,
        &[false],
        1,
        Bounds::preemptions(3),
    );
}

#[test]
fn one_client_two_round_trips_reuse_the_port() {
    model(
        "one client, two round trips",
        1,
        &[false],
        2,
        Bounds::preemptions(3),
    );
}

#[test]
fn two_fire_and_forget_clients_share_one_port() {
    model(
        "two fire-and-forget clients",
        1,
        &[true, true],
        1,
        Bounds::preemptions(1),
    );
}

/// Two clients whose round trips contend for one port. Every interleaving with one preemption
/// is more than CI can afford (over 500,000 executions did not finish in 5 minutes on a 2-core
/// machine): this explores the first 50,000 in loom's order, which is the same on every run.
#[test]
fn two_round_trip_clients_share_one_port() {
    model(
        "two round-trip clients",
        1,
        &[false, false],
        1,
        Bounds {
            preemptions: 1,
            max_executions: Some(50_000),
        },
    );
}
