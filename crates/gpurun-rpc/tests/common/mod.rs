//! Helpers shared by the integration tests and the benchmark: a zeroed, page-aligned shared
//! allocation, a deterministic random generator, and an emulated warp (several OS threads
//! acting as the lanes of one warp).
#![allow(dead_code)]

pub mod untrusted;

use gpurun_rpc::server::ServerPort;
use gpurun_rpc::{opcode, Client, HostLane, Lanes, Layout, Server};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;

/// Page-aligned, so that where the heap puts the allocation does not change which cache sets
/// and pages the shared words share from run to run (benchmarks vary by tens of percent
/// otherwise).
#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct Page([u8; 4096]);

/// A zeroed shared allocation for one layout, with a client and a server over it.
pub struct Shared {
    memory: Box<[Page]>,
    pub layout: Layout,
}

impl Shared {
    pub fn new(layout: Layout) -> Shared {
        let pages = layout.allocation_size().div_ceil(4096);
        let mut shared = Shared {
            memory: vec![Page([0xa5; 4096]); pages].into_boxed_slice(),
            layout,
        };
        // SAFETY: the allocation is at least `allocation_size` bytes and not shared yet.
        unsafe { layout.zero(shared.base()) };
        shared
    }

    pub fn base(&mut self) -> *mut u8 {
        self.memory.as_mut_ptr() as *mut u8
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.memory.len() * 4096;
        // SAFETY: the blocks are plain bytes, contiguous, `len` long.
        unsafe { std::slice::from_raw_parts_mut(self.base(), len) }
    }

    /// A client and a server over this allocation; both borrow it.
    pub fn endpoints(&mut self) -> (Client, Server) {
        let base = self.base();
        // SAFETY: `base` is a zeroed, 64-aligned allocation of the layout's size that outlives
        // both endpoints in every test (they are dropped before `self`).
        unsafe {
            (
                Client::new(&self.layout, base),
                Server::new(&self.layout, base),
            )
        }
    }
}

/// Serves requests while `more()` says so: tries the ports in turn, starting after the last one
/// served, yields when none has a request, and hands each opened port to `handle`.
pub fn serve_while(
    server: &Server,
    mut more: impl FnMut() -> bool,
    mut handle: impl FnMut(&mut ServerPort<'_>),
) {
    let mut resume = 0;
    while more() {
        let Some(mut port) = server.try_open(resume) else {
            resume = 0;
            std::thread::yield_now();
            continue;
        };
        resume = port.index() + 1;
        handle(&mut port);
    }
}

/// The server's half of TEST_INCREMENT: the reply is the request's first word plus one.
pub fn serve_increment(port: &mut ServerPort<'_>) {
    port.recv_and_send(|b, _| b.data[0] = b.data[0].wrapping_add(1))
        .unwrap()
}

/// One TEST_INCREMENT call from a single host lane: the server's reply to `value`.
pub fn increment(client: &Client, value: u64) -> u64 {
    let lane = HostLane::SINGLE;
    let mut port = client.open::<{ opcode::TEST_INCREMENT }, _>(&lane).unwrap();
    let mut reply = 0;
    port.send_and_recv(|b, _| b.data[0] = value, |b, _| reply = b.data[0]);
    reply
}

/// xorshift64*: reproducible randomness without a dependency.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }
    pub fn fill(&mut self, bytes: &mut [u8]) {
        for chunk in bytes.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// The deterministic content of message `seq` of sender `sender`.
pub fn pattern(sender: u64, seq: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    Rng::new(sender << 32 ^ seq ^ 0x5eed).fill(&mut bytes);
    bytes
}

/// State shared by the OS threads of one emulated warp.
pub struct WarpShared {
    barrier: Barrier,
    slots: [AtomicU64; 64],
    lane_size: u32,
    active: u64,
}

impl WarpShared {
    /// A warp of `lane_size` lanes of which the lanes in `active` run (one OS thread each).
    pub fn new(lane_size: u32, active: u64) -> WarpShared {
        WarpShared {
            barrier: Barrier::new(active.count_ones() as usize),
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            lane_size,
            active,
        }
    }

    /// The ids of the active lanes, in order.
    pub fn lane_ids(&self) -> Vec<u32> {
        (0..64).filter(|i| self.active & (1 << i) != 0).collect()
    }
}

/// One lane of an emulated warp. Collective operations meet at a barrier: every active lane
/// must call them in the same order, as on a GPU.
pub struct EmulatedLane<'w> {
    pub warp: &'w WarpShared,
    pub id: u32,
}

impl EmulatedLane<'_> {
    fn exchange(&self, value: u64) -> [u64; 64] {
        self.warp.slots[self.id as usize].store(value, Ordering::Relaxed);
        self.warp.barrier.wait();
        let all = std::array::from_fn(|i| self.warp.slots[i].load(Ordering::Relaxed));
        // Nobody may overwrite a slot before everyone has read it.
        self.warp.barrier.wait();
        all
    }
}

impl Lanes for EmulatedLane<'_> {
    fn lane_size(&self) -> u32 {
        self.warp.lane_size
    }
    fn lane_id(&self) -> u32 {
        self.id
    }
    fn lane_mask(&self) -> u64 {
        self.warp.active
    }
    fn ballot(&self, mask: u64, predicate: bool) -> u64 {
        let all = self.exchange(predicate as u64);
        (0..64)
            .filter(|&i| mask & (1 << i) != 0 && all[i] != 0)
            .fold(0, |acc, i| acc | 1 << i)
    }
    fn broadcast(&self, mask: u64, value: u32) -> u32 {
        self.exchange(u64::from(value))[mask.trailing_zeros() as usize] as u32
    }
    fn sync(&self, _mask: u64) {
        self.warp.barrier.wait();
    }
    fn sleep_briefly(&self, attempt: u32) {
        HostLane::SINGLE.sleep_briefly(attempt);
    }
}
