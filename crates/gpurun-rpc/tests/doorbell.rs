//! The doorbell of the current layout: our client rings it at open as LLVM libc's client does,
//! our server takes one off per closed port, and the legacy layout (no doorbell) is untouched.

mod common;

use common::{increment, serve_increment, serve_while, Shared};
use gpurun_rpc::layout::Doorbell;
use gpurun_rpc::sync::AtomicU64;
use gpurun_rpc::{opcode, Client, HostLane, Layout, Server};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const EVENT_ID: u32 = 0x5eed;

/// The host's side of a doorbell: the counter clients ring and the mailbox of the event id.
#[derive(Default)]
struct Bell {
    counter: AtomicU64,
    mailbox: AtomicU64,
}

/// Installs a doorbell whose counter and mailbox are `bell`'s.
fn ring_to(shared: &mut Shared, bell: &Bell) -> bool {
    let record = Doorbell {
        value: bell.counter.as_ptr() as u64,
        mailbox: bell.mailbox.as_ptr() as u64,
        event_id: EVENT_ID,
        host_waits: 0,
    };
    let layout = shared.layout;
    // SAFETY: the allocation is live, 64-aligned and unused; counter and mailbox outlive it.
    unsafe { layout.write_doorbell(shared.base(), record) }
}

/// `ring_to`, then the endpoints over `shared` with the server attached to `bell`'s counter.
fn ringing_endpoints(shared: &mut Shared, bell: &Bell) -> (Client, Server) {
    assert!(ring_to(shared, bell));
    let (client, mut server) = shared.endpoints();
    // SAFETY: the callers' `bell` outlives the server.
    unsafe { server.attach_doorbell(&bell.counter) };
    (client, server)
}

fn serve_until(server: &Server, done: &AtomicBool) {
    let more = || !done.load(Ordering::Acquire) || server.has_pending();
    serve_while(server, more, |port| match port.opcode() {
        opcode::TEST_INCREMENT => serve_increment(port),
        opcode::NOOP => port.recv(|_, _| {}).unwrap(),
        other => panic!("opcode {other:#x}"),
    });
}

/// `count` increments from the calling thread, each checked, while a second thread serves.
fn increments_served(client: &Client, server: &Server, count: u64) {
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| serve_until(server, &done));
        for value in 0..count {
            assert_eq!(increment(client, value), value + 1);
        }
        done.store(true, Ordering::Release);
    });
}

#[test]
fn counter_returns_to_zero_after_n_calls() {
    let bell = Bell::default();
    let mut shared = Shared::new(Layout::new(4, 1).unwrap());
    let (client, server) = ringing_endpoints(&mut shared, &bell);
    increments_served(&client, &server, 1000);
    assert_eq!(bell.counter.load(Ordering::Relaxed), 0);
    assert_eq!(server.open_requests(), Some(0));
    // The first open of an idle period posted the event id.
    assert_eq!(bell.mailbox.load(Ordering::Relaxed), u64::from(EVENT_ID));
}

#[test]
fn counter_counts_requests_the_server_has_not_finished() {
    let bell = Bell::default();
    let mut shared = Shared::new(Layout::new(8, 1).unwrap());
    let (client, server) = ringing_endpoints(&mut shared, &bell);
    let lane = HostLane::SINGLE;
    assert!(!server.wait_for_request(Duration::from_millis(5)));
    for n in 1..=5u64 {
        // Fire and forget: each stays with the server, so the next takes another port.
        let mut port = client.open::<{ opcode::NOOP }, _>(&lane).unwrap();
        port.send(|b, _| b.data[0] = n);
        drop(port);
        assert_eq!(bell.counter.load(Ordering::Relaxed), n);
    }
    assert!(server.wait_for_request(Duration::from_millis(5)));
    let mut served = 0;
    while let Some(mut port) = server.try_open(0) {
        port.recv(|_, _| {}).unwrap();
        drop(port);
        served += 1;
        assert_eq!(server.open_requests(), Some(5 - served));
    }
    assert_eq!(served, 5);
    // A server port closed without a matching ring (a client that never rings) cannot wrap it.
    let mut raw = Shared::new(Layout::new(1, 1).unwrap());
    let (plain_client, mut plain_server) = raw.endpoints();
    let zero = AtomicU64::new(0);
    // SAFETY: `zero` outlives the server.
    unsafe { plain_server.attach_doorbell(&zero) };
    let mut port = plain_client.open::<{ opcode::NOOP }, _>(&lane).unwrap();
    port.send(|_, _| {});
    drop(port);
    plain_server.try_open(0).unwrap().recv(|_, _| {}).unwrap();
    assert_eq!(zero.load(Ordering::Relaxed), 0);
}

#[test]
fn legacy_layout_has_no_doorbell_to_ring() {
    let bell = Bell::default();
    let mut shared = Shared::new(Layout::legacy(2, 1).unwrap());
    assert!(!ring_to(&mut shared, &bell));
    let (client, server) = shared.endpoints();
    // The legacy allocation starts with the mailboxes: a client reading a doorbell there would
    // take port 0's mailbox words (1 after a round trip) for a counter address.
    increments_served(&client, &server, 100);
    assert_eq!(bell.counter.load(Ordering::Relaxed), 0);
    assert_eq!(server.open_requests(), None);
    let words = &shared.bytes_mut()[..16];
    assert!(
        words.iter().all(|&b| b <= 1),
        "mailboxes hold 0 or 1: {words:?}"
    );
}
