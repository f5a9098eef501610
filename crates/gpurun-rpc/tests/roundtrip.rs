//! End-to-end conversations between host clients and a server thread over one allocation.

mod common;

use common::{increment, pattern, serve_increment, serve_while, Shared};
use gpurun_rpc::{opcode, HostLane, Layout, Server};
use std::sync::atomic::{AtomicBool, Ordering};

/// Serves TEST_INCREMENT, TEST_STREAM (echo) and FREE-like fire-and-forget NOOPs until `done`.
fn serve(server: &Server, done: &AtomicBool) -> u64 {
    let mut handled = 0;
    serve_while(
        server,
        || !done.load(Ordering::Acquire),
        |port| {
            match port.opcode() {
                opcode::TEST_INCREMENT => serve_increment(port),
                opcode::TEST_STREAM => {
                    let received = port.recv_n_to_vecs(1 << 20).unwrap();
                    port.send_n(
                        |lane| &received.iter().find(|(l, _, _)| *l == lane).unwrap().2[..],
                    )
                    .unwrap();
                }
                opcode::NOOP => port.recv(|_, _| {}).unwrap(),
                other => panic!("unexpected opcode {other:#x}"),
            }
            handled += 1;
        },
    );
    handled
}

fn with_server(layout: Layout, clients: impl FnOnce(&gpurun_rpc::Client) + Send) {
    let mut shared = Shared::new(layout);
    let (client, server) = shared.endpoints();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let server_thread = scope.spawn(|| serve(&server, &done));
        clients(&client);
        done.store(true, Ordering::Release);
        server_thread.join().unwrap();
    });
}

#[test]
fn increment_round_trip_single_lane() {
    with_server(Layout::new(4, 1).unwrap(), |client| {
        for value in 0..200u64 {
            assert_eq!(increment(client, value), value + 1);
        }
    });
}

#[test]
fn send_n_echo_at_packet_boundaries() {
    with_server(Layout::new(2, 1).unwrap(), |client| {
        let lane = HostLane::SINGLE;
        for len in [0usize, 1, 55, 56, 57, 119, 120, 121, 184, 185, 4096, 70_001] {
            let data = pattern(1, len as u64, len);
            let mut port = client.open::<{ opcode::TEST_STREAM }, _>(&lane).unwrap();
            port.send_n(&data);
            let mut back = vec![0u8; len];
            assert_eq!(port.recv_n(&mut back), len as u64);
            assert_eq!(back, data, "length {len}");
        }
    });
}

#[test]
fn client_recv_n_truncates_into_a_short_buffer() {
    with_server(Layout::new(1, 1).unwrap(), |client| {
        let lane = HostLane::SINGLE;
        let data = pattern(2, 0, 300);
        let mut port = client.open::<{ opcode::TEST_STREAM }, _>(&lane).unwrap();
        port.send_n(&data);
        let mut short = [0u8; 100];
        assert_eq!(port.recv_n(&mut short), 300);
        assert_eq!(&short[..], &data[..100]);
        drop(port);
        // The conversation stayed in step: the port works for the next caller.
        assert_eq!(increment(client, 9), 10);
    });
}

#[test]
fn fire_and_forget_then_reuse_single_port() {
    // One port: every open after a NOOP must wait until the server has read it.
    with_server(Layout::new(1, 1).unwrap(), |client| {
        let lane = HostLane::SINGLE;
        for i in 0..100u64 {
            let mut port = client.open::<{ opcode::NOOP }, _>(&lane).unwrap();
            port.send(|b, _| b.data[0] = i);
            drop(port);
            assert_eq!(increment(client, i), i + 1);
        }
    });
}

#[test]
fn emulated_threads_of_wide_warps_use_their_own_slots() {
    for (layout, lane_size) in [
        (Layout::new(3, 32).unwrap(), 32),
        (Layout::legacy(3, 64).unwrap(), 64),
    ] {
        with_server(layout, |client| {
            std::thread::scope(|scope| {
                for lane_id in [0, 1, lane_size / 2, lane_size - 1] {
                    scope.spawn(move || {
                        let lane = HostLane::new(lane_size, lane_id).unwrap();
                        for i in 0..50u64 {
                            let data = pattern(u64::from(lane_id), i, (i * 37) as usize);
                            let mut port =
                                client.open::<{ opcode::TEST_STREAM }, _>(&lane).unwrap();
                            assert_eq!(port.lane_mask(), 1 << lane_id);
                            port.send_n(&data);
                            let mut back = vec![0; data.len()];
                            assert_eq!(port.recv_n(&mut back), data.len() as u64);
                            assert_eq!(back, data);
                        }
                    });
                }
            });
        });
    }
}

#[test]
fn uninitialised_client_has_no_ports() {
    let client = gpurun_rpc::Client::uninit();
    assert!(client
        .open::<{ opcode::NOOP }, _>(&HostLane::SINGLE)
        .is_none());
}

#[test]
fn cancel_ends_a_server_wait() {
    let mut shared = Shared::new(Layout::new(1, 1).unwrap());
    let (client, server) = shared.endpoints();
    let lane = HostLane::SINGLE;
    // The client sends the first half of an EXIT handshake and then never talks again.
    let mut port = client.open::<{ opcode::EXIT }, _>(&lane).unwrap();
    port.send(|_, _| {});
    std::mem::forget(port);
    let mut server_port = server.try_open(0).unwrap();
    assert_eq!(server_port.opcode(), opcode::EXIT);
    server_port.recv(|_, _| {}).unwrap();
    server_port.send(|_, _| {}).unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            server.cancel();
        });
        assert_eq!(
            server_port.recv(|_, _| {}),
            Err(gpurun_rpc::ServerError::Cancelled)
        );
    });
}

#[test]
fn cancel_interrupts_the_drain_of_a_forged_length() {
    // The "device" announces 2^60 bytes and keeps sending packets as fast as it can; the server
    // keeps draining while it does, so cancel must stop it whether it finds the server waiting or
    // between packets. The client thread is detached and its memory leaked: once the server gives
    // up, the client blocks forever.
    let shared: &'static mut Shared = Box::leak(Box::new(Shared::new(Layout::new(1, 1).unwrap())));
    let (client, server) = shared.endpoints();
    let client: &'static gpurun_rpc::Client = Box::leak(Box::new(client));
    std::thread::spawn(move || {
        let lane = HostLane::SINGLE;
        let mut port = client.open::<{ opcode::TEST_STREAM }, _>(&lane).unwrap();
        port.send(|b, _| b.data[0] = 1 << 60);
        loop {
            port.send(|_, _| {});
        }
    });
    let port = loop {
        if let Some(port) = server.try_open(0) {
            break port;
        }
        std::thread::yield_now();
    };
    let mut port = port;
    let mut chunks = 0u64;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            server.cancel();
        });
        let result = port.recv_n_chunks(|_, announced, _, _| {
            assert_eq!(announced, 1 << 60);
            chunks += 1;
        });
        assert_eq!(result, Err(gpurun_rpc::ServerError::Cancelled));
    });
    assert!(chunks > 1, "the drain should have made progress first");
}
