//! Server details that LLVM's behaviour and our speed depend on: replies are filled in place
//! (not cleared), `next_request` goes round the whole port range, the scans find the first
//! pending port wherever it sits, and the exclusive variant serves the same conversations
//! without the host-private locks.

mod common;

use common::Shared;
use gpurun_rpc::{opcode, HostLane, Layout};

#[test]
fn replies_keep_the_words_the_server_leaves_alone() {
    let mut shared = Shared::new(Layout::new(1, 1).unwrap());
    let (client, server) = shared.endpoints();
    let lane = HostLane::SINGLE;
    let mut port = client.open::<{ opcode::TEST_INCREMENT }, _>(&lane).unwrap();
    // The client's request is complete before the server runs, so one thread can play both.
    port.send(|b, _| b.data = [1, 2, 3, 4, 5, 6, 7, 8]);
    let mut served = server.try_open(0).unwrap();
    served.recv(|_, _| {}).unwrap();
    served.send(|b, _| b.data[1] = 20).unwrap();
    drop(served);
    let mut reply = [0; 8];
    port.recv(|b, _| reply = b.data);
    assert_eq!(reply, [1, 20, 3, 4, 5, 6, 7, 8]);
    drop(port);

    let mut port = client.open::<{ opcode::TEST_INCREMENT }, _>(&lane).unwrap();
    port.send(|b, _| b.data = [9; 8]);
    let mut served = server.try_open(0).unwrap();
    served
        .recv_and_send(|b, _| b.data[0] = b.data[0].wrapping_add(1))
        .unwrap();
    drop(served);
    port.recv(|b, _| reply = b.data);
    assert_eq!(reply, [10, 9, 9, 9, 9, 9, 9, 9]);
}

#[test]
fn next_request_wraps_around_and_exclusive_serves_without_locks() {
    let mut shared = Shared::new(Layout::new(4, 1).unwrap());
    let (client, mut server) = shared.endpoints();
    let lane = HostLane::SINGLE;
    // A fire-and-forget request on port 0.
    let mut port = client.open::<{ opcode::NOOP }, _>(&lane).unwrap();
    assert_eq!(port.index(), 0);
    port.send(|b, _| b.data[0] = 1);
    drop(port);
    // Resuming after port 2 misses it with try_open but not with next_request.
    assert!(server.try_open(3).is_none());
    let found = server.next_request(3).expect("wrapped round to port 0");
    assert_eq!(found.index(), 0);
    // While that port is held, another scan of the shared server skips it.
    assert!(server.next_request(0).is_none());
    drop(found);
    // Dropping it unread gave the packet back; post another and serve it exclusively.
    let mut port = client.open::<{ opcode::NOOP }, _>(&lane).unwrap();
    port.send(|b, _| b.data[0] = 2);
    let index = port.index();
    drop(port);
    let mut seen = 0;
    let mut found = server.next_request_exclusive(index + 1).expect("pending");
    assert_eq!(found.index(), index);
    found.recv(|b, _| seen = b.data[0]).unwrap();
    drop(found);
    assert_eq!(seen, 2);
    assert!(server.next_request_exclusive(0).is_none());
    assert!(!server.has_pending());
}

/// The scans look at eight ports per test: a pending port is found wherever it sits in a block
/// of eight or in the tail after the last whole block, and the first one after `start` wins.
#[test]
fn scans_find_the_first_pending_port_at_any_position() {
    const PORTS: u32 = 37;
    let layout = Layout::new(PORTS, 1).unwrap();
    let mut shared = Shared::new(layout);
    let (_client, mut server) = shared.endpoints();
    let pending_sets: [&[u32]; 9] = [
        &[],
        &[0],
        &[7],
        &[8],
        &[15, 16],
        &[36],
        &[3, 20, 36],
        &[31, 32, 33],
        &[
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
        ],
    ];
    for pending in pending_sets {
        for start in 0..PORTS {
            let expected_from_start = (start..PORTS).find(|p| pending.contains(p));
            let expected_cyclic =
                expected_from_start.or_else(|| (0..start).find(|p| pending.contains(p)));
            for query in 0..3 {
                // Only the client's outbox words (the server's inbox) say a port is pending;
                // dropping a found port flips the server's outbox, so set both every time.
                let bytes = shared.bytes_mut();
                for port in 0..PORTS {
                    let at = layout.client_outbox_offset() + 4 * port as usize;
                    let word: u32 = pending.contains(&port).into();
                    bytes[at..at + 4].copy_from_slice(&word.to_ne_bytes());
                    let at = layout.client_inbox_offset() + 4 * port as usize;
                    bytes[at..at + 4].copy_from_slice(&0u32.to_ne_bytes());
                }
                let (found, expected) = match query {
                    0 => (
                        server.try_open(start).map(|p| p.index()),
                        expected_from_start,
                    ),
                    1 => (
                        server.next_request(start).map(|p| p.index()),
                        expected_cyclic,
                    ),
                    _ => (
                        server.next_request_exclusive(start).map(|p| p.index()),
                        expected_cyclic,
                    ),
                };
                assert_eq!(
                    found, expected,
                    "pending {pending:?}, start {start}, query {query}"
                );
            }
        }
    }
}

/// Makes `port` pending (the client's outbox differs from the server's) or idle.
fn set_pending(shared: &mut Shared, port: u32, pending: bool) {
    let layout = shared.layout;
    let bytes = shared.bytes_mut();
    let server_outbox = layout.client_inbox_offset() + 4 * port as usize;
    let word = u32::from_ne_bytes(bytes[server_outbox..server_outbox + 4].try_into().unwrap());
    let client_outbox = layout.client_outbox_offset() + 4 * port as usize;
    bytes[client_outbox..client_outbox + 4]
        .copy_from_slice(&(word ^ u32::from(pending)).to_ne_bytes());
}

/// After a long run of requests on port 0 only, the scans read only the low ports, yet a
/// request on a high port is still served within the bounds the server documents: 128 calls
/// that found nothing on an otherwise idle server, 64 requests served while port 0 stays busy
/// on every call.
#[test]
fn a_request_above_the_busy_ports_is_still_served() {
    let mut shared = Shared::new(Layout::new(1024, 1).unwrap());
    let (_client, mut server) = shared.endpoints();
    let mut serve_once = |start: u32| {
        // Dropping the found port hands the packet back: the port is idle again.
        server
            .next_request_exclusive(start)
            .map(|port| port.index())
    };
    for _ in 0..3000 {
        set_pending(&mut shared, 0, true);
        assert_eq!(serve_once(1), Some(0));
    }

    // Idle low ports: the high request is found once a few calls found nothing.
    set_pending(&mut shared, 700, true);
    (1..=129)
        .find(|_| serve_once(1).is_some())
        .expect("port 700 served within 129 calls");
    assert_eq!(serve_once(0), None, "port 700 was served once");

    // Port 0 busy on every call: the high request still gets its turn.
    for _ in 0..3000 {
        set_pending(&mut shared, 0, true);
        assert_eq!(serve_once(1), Some(0));
    }
    set_pending(&mut shared, 900, true);
    let mut served_900 = None;
    for call in 1..=65 {
        set_pending(&mut shared, 0, true);
        match serve_once(1) {
            Some(900) => {
                served_900 = Some(call);
                break;
            }
            Some(0) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        served_900.is_some(),
        "port 900 waited more than 64 requests"
    );
}
