//! Host waits (`gpurun_rpc::host_waits`): with a host waits block installed, clients and the
//! server sleep in the kernel and wake each other. A lost wake-up leaves a side asleep for good
//! (the client and mid-conversation server sleeps have no timeout, and the server's idle wait
//! here is an hour), so every scenario runs on detached threads under a deadline and fails,
//! instead of hanging, when it is not done in time.
#![cfg(target_os = "linux")]

mod common;

use common::{pattern, EmulatedLane, Rng, Shared, WarpShared};
use gpurun_rpc::host_waits::ServerWaker;
use gpurun_rpc::layout::Doorbell;
use gpurun_rpc::sync::AtomicU64;
use gpurun_rpc::{opcode, Client, HostLane, Lanes, Layout, Server, ServerError};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Long enough for a loaded 2-core machine, short enough to fail a hang.
const DEADLINE: Duration = Duration::from_secs(120);

/// A shared allocation with a doorbell and a host waits block, and its endpoints. Leaked: the
/// threads of a failed (hung) scenario keep using it after the test gives up on them.
struct Bench {
    client: Client,
    server: Server,
    /// Address of the host waits block (for a `ServerWaker`).
    waits_block: usize,
}

fn install(layout: Layout) -> &'static mut Bench {
    let shared: &'static mut Shared = Box::leak(Box::new(Shared::new(layout)));
    let counter: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    let words = layout.host_waits_size() / 4;
    let block: &'static [AtomicU32] = Box::leak((0..words).map(|_| AtomicU32::new(0)).collect());
    let record = Doorbell {
        value: counter.as_ptr() as u64,
        mailbox: 0,
        event_id: 0,
        host_waits: block.as_ptr() as u64,
    };
    // SAFETY: the allocation is live, 64-aligned and unused; counter and block are leaked.
    assert!(unsafe { layout.write_doorbell(shared.base(), record) });
    let (client, mut server) = shared.endpoints();
    // SAFETY: both are leaked (live for the rest of the process), aligned, zeroed, and the
    // block has `host_waits_size()` bytes.
    unsafe {
        server.attach_doorbell(counter);
        server.attach_host_waits(block.as_ptr() as *const u8);
    }
    assert!(server.has_host_waits());
    Box::leak(Box::new(Bench {
        client,
        server,
        waits_block: block.as_ptr() as usize,
    }))
}

/// Runs `scenario` on a detached thread; panics if it panics or is not done by the deadline.
fn within_deadline(what: &str, scenario: impl FnOnce() + Send + 'static) {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        scenario();
        let _ = done.send(());
    });
    match finished.recv_timeout(DEADLINE) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: not done after {DEADLINE:?}: a side slept through its wake-up")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the scenario panicked"),
    }
}

/// The server: serves until `stop`, sleeping in `wait_for_request` (an hour: only a wake-up or
/// the final cancel ends it) whenever no port has a packet. Returns the bytes streamed to it.
fn serve(server: &Server, stop: &AtomicBool) -> u64 {
    let mut resume = 0;
    let mut streamed = 0u64;
    let mut sink = vec![0u8; 1 << 16];
    loop {
        let Some(mut port) = server.next_request(resume) else {
            if stop.load(Ordering::Acquire) {
                return streamed;
            }
            server.wait_for_request(Duration::from_secs(3600));
            continue;
        };
        resume = port.index() + 1;
        let result = match port.opcode() {
            opcode::TEST_INCREMENT => port.recv_and_send(|b, _| b.data[0] += 1),
            opcode::NOOP => port.recv(|_, _| {}),
            opcode::TEST_STREAM => {
                let mut target = Some(&mut sink[..]);
                port.recv_n(|_, _| target.take())
                    .map(|sizes| streamed += sizes.sizes.iter().sum::<u64>())
            }
            other => panic!("opcode {other:#x}"),
        };
        if let Err(ServerError::Cancelled) = result {
            return streamed;
        }
    }
}

/// One client's mix: round trips (checked), fire-and-forget sends, and `send_n`s of random
/// lengths (one to several packets), so every wait of both sides happens many times.
fn client_mix<L: Lanes>(client: &Client, lanes: &L, seed: u64, calls: u64) -> u64 {
    let mut rng = Rng::new(seed);
    let mut streamed = 0;
    for call in 0..calls {
        if rng.below(32) == 0 {
            // Leave the server idle now and then, so that it goes to sleep.
            std::thread::sleep(Duration::from_micros(200));
        }
        match rng.below(3) {
            0 => {
                let mut port = client.open::<{ opcode::TEST_INCREMENT }, _>(lanes).unwrap();
                let mut reply = 0;
                let value = seed << 32 | call;
                port.send_and_recv(|b, _| b.data[0] = value, |b, _| reply = b.data[0]);
                assert_eq!(reply, value + 1);
            }
            1 => {
                let mut port = client.open::<{ opcode::NOOP }, _>(lanes).unwrap();
                port.send(|b, _| b.data[0] = call);
            }
            _ => {
                let len = rng.below(300) as usize;
                let mut port = client.open::<{ opcode::TEST_STREAM }, _>(lanes).unwrap();
                port.send_n(&pattern(seed, call, len));
                streamed += len as u64;
            }
        }
    }
    streamed
}

/// Many more client threads than ports and than cores: clients sleep waiting for a port, for
/// the server's reply, and the server sleeps between requests and between packets.
#[test]
fn no_lost_wake_up_with_host_lanes() {
    within_deadline("host lanes", || {
        let bench: &'static Bench = install(Layout::new(3, 1).unwrap());
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let server = std::thread::spawn(|| serve(&bench.server, stop));
        let clients: Vec<_> = (0..12u64)
            .map(|seed| {
                std::thread::spawn(move || {
                    client_mix(&bench.client, &HostLane::SINGLE, seed + 1, 1500)
                })
            })
            .collect();
        let sent: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
        stop.store(true, Ordering::Release);
        bench.server.cancel();
        let received = server.join().unwrap();
        assert_eq!(sent, received);
        assert_eq!(bench.server.open_requests(), Some(0));
    });
}

/// Lanes of emulated warps (one OS thread per lane, meeting at barriers) that block like host
/// lanes: several threads sleep on one port's word and are woken together.
struct BlockingLane<'w>(EmulatedLane<'w>);

impl Lanes for BlockingLane<'_> {
    fn lane_size(&self) -> u32 {
        self.0.lane_size()
    }
    fn lane_id(&self) -> u32 {
        self.0.lane_id()
    }
    fn lane_mask(&self) -> u64 {
        self.0.lane_mask()
    }
    fn ballot(&self, mask: u64, predicate: bool) -> u64 {
        self.0.ballot(mask, predicate)
    }
    fn broadcast(&self, mask: u64, value: u32) -> u32 {
        self.0.broadcast(mask, value)
    }
    fn sync(&self, mask: u64) {
        self.0.sync(mask)
    }
    fn sleep_briefly(&self, attempt: u32) {
        self.0.sleep_briefly(attempt)
    }
    fn blocking_waits(&self) -> bool {
        HostLane::SINGLE.blocking_waits()
    }
}

#[test]
fn no_lost_wake_up_with_emulated_warps() {
    within_deadline("emulated warps", || {
        let bench: &'static Bench = install(Layout::new(2, 32).unwrap());
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let server = std::thread::spawn(|| serve(&bench.server, stop));
        let mut lanes = Vec::new();
        for (warp, active) in [(1u64, 0b1011u64), (2, 0b110 << 20), (3, 1 << 31)] {
            let shared: &'static WarpShared = Box::leak(Box::new(WarpShared::new(32, active)));
            for id in shared.lane_ids() {
                lanes.push(std::thread::spawn(move || {
                    let lane = BlockingLane(EmulatedLane { warp: shared, id });
                    // Same seed on every lane of a warp: they must take the same path.
                    client_mix(&bench.client, &lane, warp, 300)
                }));
            }
        }
        let sent: u64 = lanes.into_iter().map(|lane| lane.join().unwrap()).sum();
        stop.store(true, Ordering::Release);
        bench.server.cancel();
        assert_eq!(server.join().unwrap(), sent);
        assert_eq!(bench.server.open_requests(), Some(0));
    });
}

/// An idle server sleeps through `wait_for_request` until its timeout, and a client's packet
/// wakes it early.
#[test]
fn idle_server_sleeps_until_a_packet_or_its_timeout() {
    within_deadline("idle server", || {
        let bench: &'static Bench = install(Layout::new(4, 1).unwrap());
        let started = Instant::now();
        assert!(!bench.server.wait_for_request(Duration::from_millis(50)));
        assert!(started.elapsed() >= Duration::from_millis(50));

        let woke = std::thread::spawn(|| {
            let started = Instant::now();
            let ready = bench.server.wait_for_request(Duration::from_secs(3600));
            (ready, started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        let mut port = bench
            .client
            .open::<{ opcode::NOOP }, _>(&HostLane::SINGLE)
            .unwrap();
        port.send(|b, _| b.data[0] = 7);
        drop(port);
        let (ready, waited) = woke.join().unwrap();
        assert!(ready);
        assert!(waited < Duration::from_secs(60), "woke after {waited:?}");
        let mut port = bench.server.next_request(0).unwrap();
        port.recv(|b, _| assert_eq!(b.data[0], 7)).unwrap();
    });
}

/// `cancel` wakes a server asleep in the middle of a conversation.
#[test]
fn cancel_wakes_a_server_waiting_for_a_packet() {
    within_deadline("cancel", || {
        let bench: &'static Bench = install(Layout::new(1, 1).unwrap());
        let mut port = bench
            .client
            .open::<{ opcode::TEST_STREAM }, _>(&HostLane::SINGLE)
            .unwrap();
        // Announce two packets, send one: the server sleeps waiting for the second.
        port.send(|b, _| b.data[0] = 100);
        let server = std::thread::spawn(|| {
            let mut port = bench.server.next_request(0).unwrap();
            port.recv_n_to_vecs(1000).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(100));
        bench.server.cancel();
        assert_eq!(server.join().unwrap(), Err(ServerError::Cancelled));
        bench.server.resume();
        std::mem::forget(port);
    });
}

/// A `ServerWaker` ends a server's sleep in `wait_for_request_or` once the condition it watches
/// outside the protocol holds (the host emulation: the kernel's last thread returned), whether
/// the change comes before the server counts itself as a sleeper or after.
#[test]
fn server_waker_ends_a_wait_for_an_outside_change() {
    within_deadline("server waker", || {
        let bench: &'static Bench = install(Layout::new(4, 1).unwrap());
        // SAFETY: the block is the server's and leaked (lives for the rest of the process).
        let waker = unsafe { ServerWaker::new(bench.waits_block as *const u8) }
            .expect("host waits are supported on this platform");
        for delay_us in [0u64, 10, 100, 1000, 20_000] {
            let ended: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
            let waiter = std::thread::spawn(move || {
                let started = Instant::now();
                let ready = bench
                    .server
                    .wait_for_request_or(Duration::from_secs(3600), || {
                        ended.load(Ordering::Acquire)
                    });
                (ready, started.elapsed())
            });
            std::thread::sleep(Duration::from_micros(delay_us));
            ended.store(true, Ordering::Release);
            waker.wake();
            let (ready, waited) = waiter.join().unwrap();
            assert!(ready, "after {delay_us} us");
            assert!(
                waited < Duration::from_secs(60),
                "woke after {waited:?} (change after {delay_us} us)"
            );
        }
    });
}
