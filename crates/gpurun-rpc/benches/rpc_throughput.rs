//! RPC throughput on host threads, against baselines measured in the same rounds:
//!
//! - raw ping-pong: two threads hand a 64-byte packet back and forth through one atomic flag
//!   (the floor for any shared-memory round trip);
//! - bare handoffs: one 64-byte packet per handoff through two mailbox words at the layout's
//!   own offsets, strict alternation, nothing else. That is the packet sequence of LLVM's
//!   `send_n` without the RPC around it, so no implementation of the protocol can stream much
//!   faster (each packet waits for the receiver to hand the last one back);
//! - channel ping-pong: the same round trip over two `crossbeam-channel` rendezvous channels.
//!
//! Two rows without a second thread: an idle scan (`next_request_exclusive` over ports none of
//! which has a request) and a round trip with client and server taking turns on one thread (the
//! instructions of a round trip, no waiting).
//!
//! RPC rows: N client threads (1, 2, 4) against one server thread. "round trip" = open +
//! `send_and_recv` of one packet (TEST_INCREMENT) + close; "send_n" = open + `send_n` of 64 KiB +
//! close (fire and forget), the server `recv_n`-ing into a fixed buffer; "server send_n" (the
//! other direction) = open (TEST_INTERFACE, a bench-only sequence) + an empty `send` + `recv_n` of
//! the 64 KiB the server `send_n`s + close.
//!
//! A small shared VM switches between speeds several-fold within seconds, so one long
//! measurement per row compares rows taken in different conditions. Instead every row is
//! measured for a short slice in each of several rounds (the order rotating), and each round
//! measures the baselines too: the table gives each row's median rate and the median over
//! rounds of its ratio to the same round's raw ping-pong ("per raw round trip": round trips,
//! or 64-byte packets for the bulk rows) and, for bulk rows, to the same round's bare handoffs.
//!
//! `cargo bench -p gpurun-rpc` prints a Markdown table. `GPURUN_RPC_BENCH_MS` sets the slice
//! (default 40 ms), `GPURUN_RPC_BENCH_ROUNDS` the rounds (default 9); `GPURUN_RPC_BENCH_ONLY=text`
//! runs only the rows whose name contains `text` (e.g. `send_n`), with one client (the
//! baselines always run); `GPURUN_RPC_BENCH_PORTS=n` sets the port count (default 1024, what
//! gpurun-hal installs; with fewer than 8 ports the packets are not 64-byte aligned and port 0's
//! packet shares a cache line with the mailboxes). Even so, whole runs differ by tens of
//! percent (thread placement, the two threads locking into fast or slow phases): compare builds
//! over several runs, alternated.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{serve_increment, Shared};
use gpurun_rpc::sync::host_backoff;
use gpurun_rpc::{opcode, HostLane, Layout, Server};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PAYLOAD: usize = 64 * 1024;
/// Packets of one 64 KiB `send_n`: the length and 56 bytes, then 64 bytes each.
const PACKETS_PER_SEND_N: usize = 1 + (PAYLOAD - 56).div_ceil(64);

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Spin, then yield: both ping-pong baselines use the same kind of wait on a 2-core box.
fn wait_step(spins: &mut u32) {
    *spins += 1;
    if *spins > 64 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// Round trips per second of a 64-byte packet handed back and forth through one atomic.
fn raw_ping_pong(duration: Duration) -> f64 {
    let turn = AtomicU32::new(0);
    let stop = AtomicBool::new(false);
    let packet: [AtomicU64; 8] = Default::default();
    let mut trips = 0u64;
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| loop {
            let mut spins = 0;
            while turn.load(Ordering::Acquire) != 1 {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                wait_step(&mut spins);
            }
            for word in &packet {
                word.store(word.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
            turn.store(0, Ordering::Release);
        });
        while started.elapsed() < duration {
            for _ in 0..256 {
                for word in &packet {
                    word.store(trips, Ordering::Relaxed);
                }
                turn.store(1, Ordering::Release);
                let mut spins = 0;
                while turn.load(Ordering::Acquire) != 0 {
                    wait_step(&mut spins);
                }
                black_box(packet[0].load(Ordering::Relaxed));
                trips += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    trips as f64 / started.elapsed().as_secs_f64()
}

/// Round trips per second of a 64-byte packet over two rendezvous channels.
fn channel_ping_pong(duration: Duration) -> f64 {
    let (to_server, server_rx) = crossbeam_channel::bounded::<[u64; 8]>(0);
    let (to_client, client_rx) = crossbeam_channel::bounded::<[u64; 8]>(0);
    let mut trips = 0u64;
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            while let Ok(mut packet) = server_rx.recv() {
                packet[0] += 1;
                if to_client.send(packet).is_err() {
                    return;
                }
            }
        });
        while started.elapsed() < duration {
            for _ in 0..256 {
                to_server.send([trips; 8]).unwrap();
                black_box(client_rx.recv().unwrap());
                trips += 1;
            }
        }
        drop(to_server);
    });
    trips as f64 / started.elapsed().as_secs_f64()
}

/// The words of port 0 that a `send_n` moves through: both mailboxes and the packet, at the
/// layout's offsets, viewed as atomics (both threads touch them).
struct PortWords<'a> {
    to_receiver: &'a AtomicU32,
    to_sender: &'a AtomicU32,
    packet: [&'a AtomicU64; 8],
}

impl PortWords<'_> {
    fn new(shared: &mut Shared) -> PortWords<'_> {
        let layout = shared.layout;
        let base = shared.base();
        // SAFETY: the offsets are inside the zeroed, page-aligned allocation of this layout,
        // aligned for their types (mailboxes 4, packets 8), and from here on only accessed
        // atomically, by the two threads of `bare_handoffs`.
        unsafe {
            PortWords {
                to_receiver: AtomicU32::from_ptr(base.add(layout.client_outbox_offset()).cast()),
                to_sender: AtomicU32::from_ptr(base.add(layout.client_inbox_offset()).cast()),
                packet: std::array::from_fn(|i| {
                    AtomicU64::from_ptr(base.add(layout.packet_offset() + 8 * i).cast())
                }),
            }
        }
    }
}

/// 64 KiB messages per second moved as bare handoffs (see the module docs): the sender waits
/// until the packet is its own, fills it, flips its mailbox; the receiver waits for the flip,
/// copies the packet out, flips back. Same waits as the RPC (`host_backoff`).
fn bare_handoffs(ports: u32, duration: Duration) -> f64 {
    let mut shared = Shared::new(Layout::new(ports, 1).unwrap());
    let words = PortWords::new(&mut shared);
    let stop = AtomicBool::new(false);
    let data = vec![0x5au8; PAYLOAD];
    let mut messages = 0u64;
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut sink = vec![0u8; PAYLOAD];
            let mut mine = 0u32;
            let mut at = 0;
            loop {
                let mut spins = 0;
                while words.to_receiver.load(Ordering::Acquire) == mine {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    host_backoff(&mut spins);
                }
                let copy: [u64; 8] =
                    std::array::from_fn(|i| words.packet[i].load(Ordering::Relaxed));
                mine ^= 1;
                words.to_sender.store(mine, Ordering::Release);
                for (to, word) in sink[at..at + 64].chunks_exact_mut(8).zip(copy) {
                    to.copy_from_slice(&word.to_ne_bytes());
                }
                at = (at + 64) % PAYLOAD;
            }
        });
        let mut mine = 0u32;
        while started.elapsed() < duration {
            for _ in 0..16 {
                for chunk in data.chunks(64).take(PACKETS_PER_SEND_N) {
                    let mut spins = 0;
                    while words.to_sender.load(Ordering::Acquire) != mine {
                        host_backoff(&mut spins);
                    }
                    for (word, bytes) in words.packet.iter().zip(chunk.chunks_exact(8)) {
                        word.store(
                            u64::from_ne_bytes(bytes.try_into().unwrap()),
                            Ordering::Relaxed,
                        );
                    }
                    mine ^= 1;
                    words.to_receiver.store(mine, Ordering::Release);
                }
                // `chunks(64)` gives 1024 packets; the 1025th of a real send_n carries the
                // last 8 bytes.
                let mut spins = 0;
                while words.to_sender.load(Ordering::Acquire) != mine {
                    host_backoff(&mut spins);
                }
                words.packet[0].store(0, Ordering::Relaxed);
                mine ^= 1;
                words.to_receiver.store(mine, Ordering::Release);
                messages += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    messages as f64 / started.elapsed().as_secs_f64()
}

/// Empty scans per second: `next_request_exclusive` over `ports` ports of which none has a
/// request (what a server with one busy port pays between two of its requests).
fn idle_scans(ports: u32, duration: Duration) -> f64 {
    let mut shared = Shared::new(Layout::new(ports, 1).unwrap());
    let (_client, mut server) = shared.endpoints();
    let mut scans = 0u64;
    let started = Instant::now();
    while started.elapsed() < duration {
        for start in 0..256 {
            black_box(
                server
                    .next_request_exclusive(black_box(start % ports))
                    .is_some(),
            );
        }
        scans += 256;
    }
    scans as f64 / started.elapsed().as_secs_f64()
}

/// Round trips per second with client and server on one thread, taking turns (a request is
/// complete before the server looks): the instructions of a round trip without any waiting.
fn one_thread_round_trips(ports: u32, duration: Duration) -> f64 {
    let mut shared = Shared::new(Layout::new(ports, 1).unwrap());
    let (client, mut server) = shared.endpoints();
    let lane = HostLane::SINGLE;
    let mut resume = 0;
    let mut trips = 0u64;
    let started = Instant::now();
    while started.elapsed() < duration {
        for i in 0..1024u64 {
            let mut port = client.open::<{ opcode::TEST_INCREMENT }, _>(&lane).unwrap();
            port.send(|b, _| b.data[0] = i);
            let mut served = server.next_request_exclusive(resume).unwrap();
            resume = served.index() + 1;
            serve_increment(&mut served);
            drop(served);
            let mut reply = 0;
            port.recv(|b, _| reply = b.data[0]);
            assert_eq!(reply, i + 1);
        }
        trips += 1024;
    }
    trips as f64 / started.elapsed().as_secs_f64()
}

fn serve(mut server: Server, stop: &AtomicBool) {
    let mut sink = vec![0u8; PAYLOAD];
    let source = vec![0xa5u8; PAYLOAD];
    let mut resume = 0;
    let mut idle = 0;
    while !stop.load(Ordering::Relaxed) {
        let Some(mut port) = server.next_request_exclusive(resume) else {
            wait_step(&mut idle);
            continue;
        };
        idle = 0;
        resume = port.index() + 1;
        match port.opcode() {
            opcode::TEST_INCREMENT => serve_increment(&mut port),
            opcode::TEST_STREAM => {
                let mut target = Some(&mut sink[..]);
                port.recv_n(|_, _| target.take()).unwrap();
            }
            opcode::TEST_INTERFACE => {
                port.recv(|_, _| {}).unwrap();
                port.send_n(|_| &source[..]).unwrap();
            }
            other => panic!("opcode {other:#x}"),
        }
    }
}

/// What each client call of a bench row does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    /// One packet there and back (TEST_INCREMENT).
    RoundTrip,
    /// Client `send_n` of [`PAYLOAD`] bytes, fire and forget.
    SendN,
    /// An empty request, then client `recv_n` of the [`PAYLOAD`] bytes the server `send_n`s.
    RecvN,
}

impl Call {
    /// Packet handoffs per call: what the bulk rows' ratios count.
    fn packets(self) -> f64 {
        match self {
            Call::RoundTrip => 1.0,
            Call::SendN => PACKETS_PER_SEND_N as f64,
            Call::RecvN => (PACKETS_PER_SEND_N + 1) as f64,
        }
    }
}

/// (operations per second) for `clients` threads doing `call` against one server.
fn rpc(ports: u32, clients: u32, call: Call, duration: Duration) -> f64 {
    let mut shared = Shared::new(Layout::new(ports.max(clients), 1).unwrap());
    let (client, server) = shared.endpoints();
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let data = vec![0x5au8; PAYLOAD];
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| serve(server, &stop));
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                let (client, done, data) = (&client, &done, &data);
                scope.spawn(move || {
                    let lane = HostLane::SINGLE;
                    let mut back = vec![0u8; PAYLOAD];
                    let mut count = 0u64;
                    while started.elapsed() < duration {
                        for i in 0..64u64 {
                            match call {
                                Call::SendN => {
                                    let mut port =
                                        client.open::<{ opcode::TEST_STREAM }, _>(&lane).unwrap();
                                    port.send_n(data);
                                }
                                Call::RecvN => {
                                    let mut port = client
                                        .open::<{ opcode::TEST_INTERFACE }, _>(&lane)
                                        .unwrap();
                                    port.send(|_, _| {});
                                    let len = port.recv_n(&mut back);
                                    assert_eq!(len, PAYLOAD as u64);
                                }
                                Call::RoundTrip => {
                                    let mut port = client
                                        .open::<{ opcode::TEST_INCREMENT }, _>(&lane)
                                        .unwrap();
                                    let mut reply = 0;
                                    port.send_and_recv(
                                        |b, _| b.data[0] = i,
                                        |b, _| reply = b.data[0],
                                    );
                                    assert_eq!(reply, i + 1);
                                }
                            }
                            count += 1;
                        }
                    }
                    done.fetch_add(count, Ordering::Relaxed);
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// One table row: what it runs and what each round measured.
struct Row {
    name: &'static str,
    clients: u32,
    call: Call,
    /// Rates per round (calls per second).
    rates: Vec<f64>,
    /// Per round: packet handoffs per raw ping-pong round trip.
    per_raw: Vec<f64>,
    /// Per round (bulk rows): packet handoffs per bare handoff.
    per_bare: Vec<f64>,
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too: keep that short.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (slice, rounds) = if quick {
        (Duration::from_millis(5), 1)
    } else {
        (
            Duration::from_millis(env_number("GPURUN_RPC_BENCH_MS", 40)),
            env_number("GPURUN_RPC_BENCH_ROUNDS", 9).max(1) as usize,
        )
    };
    let ports = env_number("GPURUN_RPC_BENCH_PORTS", 1024).clamp(1, 16384) as u32;
    let only = std::env::var("GPURUN_RPC_BENCH_ONLY").ok();
    let selected = |name: &str| only.as_deref().is_none_or(|text| name.contains(text));
    let client_counts: &[u32] = if only.is_some() { &[1] } else { &[1, 2, 4] };

    let mut rows = Vec::new();
    for (call, name) in [
        (Call::RoundTrip, "RPC round trip (send_and_recv)"),
        (Call::SendN, "RPC send_n 64 KiB (fire and forget)"),
        (Call::RecvN, "RPC server send_n 64 KiB (client recv_n)"),
    ] {
        if selected(name) {
            for &clients in client_counts {
                rows.push(Row {
                    name,
                    clients,
                    call,
                    rates: Vec::new(),
                    per_raw: Vec::new(),
                    per_bare: Vec::new(),
                });
            }
        }
    }
    let (mut raw_rates, mut bare_rates, mut channel_rates) = (Vec::new(), Vec::new(), Vec::new());
    let (mut scan_rates, mut one_thread_rates) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let raw = raw_ping_pong(slice);
        let bare = bare_handoffs(ports, slice);
        raw_rates.push(raw);
        bare_rates.push(bare);
        channel_rates.push(channel_ping_pong(slice));
        scan_rates.push(idle_scans(ports, slice));
        one_thread_rates.push(one_thread_round_trips(ports, slice));
        let count = rows.len();
        for step in 0..count {
            let row = &mut rows[(step + round) % count];
            let rate = rpc(ports, row.clients, row.call, slice);
            row.rates.push(rate);
            row.per_raw.push(rate * row.call.packets() / raw);
            row.per_bare.push(rate / bare);
        }
    }

    let raw = median(&raw_rates);
    let bare = median(&bare_rates);
    let channel = median(&channel_rates);
    let mb = |per_second: f64, bytes: f64| per_second * bytes / 1e6;
    println!(
        "RPC throughput, host threads: {rounds} rounds of {} ms slices, {ports} ports, {} CPUs; \
         medians over rounds\n",
        slice.as_millis(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "| benchmark | clients | ops/s | MB/s | per raw round trip (same round) | \
         ÷ bare handoffs (same round) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| raw atomic ping-pong (64 B) | 1 | {raw:.0} | {:.1} | 1.000 | |",
        mb(raw, 64.0)
    );
    println!(
        "| bare handoffs, 64 KiB as {PACKETS_PER_SEND_N} packets | 1 | {bare:.0} | {:.1} | {:.3} | 1.000 |",
        mb(bare, PAYLOAD as f64),
        median(
            &bare_rates
                .iter()
                .zip(&raw_rates)
                .map(|(b, r)| b * PACKETS_PER_SEND_N as f64 / r)
                .collect::<Vec<_>>()
        )
    );
    println!(
        "| crossbeam rendezvous ping-pong (64 B) | 1 | {channel:.0} | {:.1} | {:.3} | |",
        mb(channel, 64.0),
        median(
            &channel_rates
                .iter()
                .zip(&raw_rates)
                .map(|(c, r)| c / r)
                .collect::<Vec<_>>()
        )
    );
    let scans = median(&scan_rates);
    println!(
        "| server scan of {ports} idle ports ({:.0} ns each) | - | {scans:.0} | | | |",
        1e9 / scans
    );
    let one_thread = median(&one_thread_rates);
    println!(
        "| RPC round trip on one thread ({:.1} ns each: instructions, no waiting) | - | {one_thread:.0} | | | |",
        1e9 / one_thread
    );
    for row in &rows {
        let rate = median(&row.rates);
        let bytes = if row.call == Call::RoundTrip {
            64.0
        } else {
            PAYLOAD as f64
        };
        let versus_bare = if row.call == Call::RoundTrip {
            String::new()
        } else {
            format!("{:.3}", median(&row.per_bare))
        };
        println!(
            "| {} | {} | {rate:.0} | {:.1} | {:.3} | {versus_bare} |",
            row.name,
            row.clients,
            mb(rate, bytes),
            median(&row.per_raw),
        );
    }
}
