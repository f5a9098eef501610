//! RPC throughput on host threads, against two baselines measured in the same run:
//!
//! - raw ping-pong: two threads hand a 64-byte packet back and forth through one atomic flag
//!   (the floor for any shared-memory handoff);
//! - channel ping-pong: the same over two `crossbeam-channel` rendezvous channels.
//!
//! RPC rows: N client threads (1, 2, 4) against one server thread. "round trip" = open +
//! `send_and_recv` of one packet (TEST_INCREMENT) + close; "send_n" = open + `send_n` of 64 KiB +
//! close (fire and forget), the server `recv_n`-ing into a fixed buffer; "server send_n" (the
//! other direction) = open (TEST_INTERFACE, a bench-only sequence) + an empty `send` + `recv_n` of
//! the 64 KiB the server `send_n`s + close. The ratio columns divide the baseline's rate by the
//! RPC rate (how many times slower the RPC is); for the bulk rows they compare packet handoffs
//! (one per 64-byte packet) with the baselines' round trips.
//!
//! `cargo bench -p gpurun-rpc` prints a Markdown table. `GPURUN_RPC_BENCH_MS` sets the time per
//! measurement (default 400 ms); `GPURUN_RPC_BENCH_ONLY=text` runs only the RPC rows whose name
//! contains `text` (e.g. `send_n`), with one client (the baselines always run);
//! `GPURUN_RPC_BENCH_PORTS=n` sets the port count (default twice the clients; the packet array
//! starts 64-byte aligned only when it is a multiple of 8).
//!
//! On a small shared VM the rows swing several-fold with the load of other processes; to compare
//! two builds, run their bench binaries alternately several times (e.g. under `chrt -r 1`, so the
//! two threads of a ping-pong stay on their CPUs) and compare medians. Each `send_n` packet is a
//! full handoff, so its packet rate cannot exceed the raw ping-pong's by much.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{serve_increment, Shared};
use gpurun_rpc::{opcode, HostLane, Layout, Server};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PAYLOAD: usize = 64 * 1024;

fn measure_time() -> Duration {
    let ms = std::env::var("GPURUN_RPC_BENCH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    Duration::from_millis(ms)
}

/// Spin, then yield: both baselines and the RPC use the same kind of wait on a 2-core box.
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
    let packet = [
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ];
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

/// (operations per second) for `clients` threads doing `call` against one server.
fn rpc(clients: u32, call: Call, duration: Duration) -> f64 {
    let ports = std::env::var("GPURUN_RPC_BENCH_PORTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(clients.max(1) * 2);
    let mut shared = Shared::new(Layout::new(ports, 1).unwrap());
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
                                    let mut port = client.open(&lane, opcode::TEST_STREAM).unwrap();
                                    port.send_n(data);
                                }
                                Call::RecvN => {
                                    let mut port =
                                        client.open(&lane, opcode::TEST_INTERFACE).unwrap();
                                    port.send(|_, _| {});
                                    let len = port.recv_n(&mut back);
                                    assert_eq!(len, PAYLOAD as u64);
                                }
                                Call::RoundTrip => {
                                    let mut port =
                                        client.open(&lane, opcode::TEST_INCREMENT).unwrap();
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

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too: keep that short.
    let quick = !std::env::args().any(|a| a == "--bench");
    let duration = if quick {
        Duration::from_millis(20)
    } else {
        measure_time()
    };
    let only = std::env::var("GPURUN_RPC_BENCH_ONLY").ok();
    let selected = |name: &str| only.as_deref().is_none_or(|text| name.contains(text));
    let client_counts: &[u32] = if only.is_some() { &[1] } else { &[1, 2, 4] };
    let raw = raw_ping_pong(duration);
    let channel = channel_ping_pong(duration);
    // A ping-pong moves one 64-byte packet per round trip, i.e. 64 bytes each way.
    let mb = |per_second: f64, bytes: f64| per_second * bytes / 1e6;
    println!(
        "RPC throughput, host threads ({} ms per row, {} CPUs)\n",
        duration.as_millis(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| benchmark | clients | ops/s | MB/s | raw ping-pong ÷ this | channel ÷ this |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| raw atomic ping-pong (64 B) | 1 | {raw:.0} | {:.1} | 1.00 | {:.2} |",
        mb(raw, 64.0),
        channel / raw
    );
    println!(
        "| crossbeam rendezvous ping-pong (64 B) | 1 | {channel:.0} | {:.1} | {:.2} | 1.00 |",
        mb(channel, 64.0),
        raw / channel
    );
    for &clients in client_counts {
        if !selected("RPC round trip") {
            break;
        }
        let trips = rpc(clients, Call::RoundTrip, duration);
        println!(
            "| RPC round trip (send_and_recv) | {clients} | {trips:.0} | {:.1} | {:.2} | {:.2} |",
            mb(trips, 64.0),
            raw / trips,
            channel / trips
        );
    }
    // One 64 KiB send_n is 1025 packet handoffs (1026 with the request of "server send_n");
    // the ratios compare per-packet rates with the baselines' round trips.
    let mut bulk_single = Vec::new();
    for (call, name, extra) in [
        (Call::SendN, "RPC send_n 64 KiB (fire and forget)", 0),
        (Call::RecvN, "RPC server send_n 64 KiB (client recv_n)", 1),
    ] {
        if !selected(name) {
            continue;
        }
        for &clients in client_counts {
            let messages = rpc(clients, call, duration);
            let packets = messages * (PAYLOAD.div_ceil(64) + extra) as f64;
            println!(
                "| {name} | {clients} | {messages:.0} | {:.1} | {:.2} | {:.2} |",
                mb(messages, PAYLOAD as f64),
                raw / packets,
                channel / packets
            );
            if clients == 1 {
                bulk_single.push((name, packets));
            }
        }
    }
    println!();
    for (name, packets) in bulk_single {
        println!(
            "{name}, 1 client: {packets:.0} packets/s = {:.3} of the raw ping-pong's round trips/s",
            packets / raw
        );
    }
}
