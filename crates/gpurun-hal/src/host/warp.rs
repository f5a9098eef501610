//! The emulated block's synchronisation: its barrier and its warps' exchanges.
//!
//! A warp is `lane_size` consecutive threads of a block (linear index, x fastest). The device
//! runtime's warp operations (shuffles, votes, `warp::sync`, `active_mask`) all go through one
//! exchange ([`WarpExchange`]): every lane of the mask deposits a value and, once all have, each
//! gets everyone's. Lanes are OS threads here, so a lane that never comes (it diverged and waits
//! at the block barrier, or in another warp operation that can never complete) would hang the
//! others; a GPU hangs or reads undefined values there. The emulator instead knows where every
//! lane of the warp is (running, returned from the kernel, at the block barrier, in which warp
//! operation) and fails an exchange that can never complete at once, naming the lanes, with no
//! timeout: on a loaded machine a slow lane is only slow.
//!
//! Lanes that have returned from the kernel do not hold an exchange up (as on NVIDIA GPUs, where
//! exited threads of a mask are not waited for); the device runtime decides what reading their
//! value means.

use gpurun_abi::host::{warp_op, WarpExchange, MAX_LANES};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The threads that run one block at a time (a group of the launch's deal): its barrier and its
/// warps, reused for each block the group runs, one block after another.
pub(crate) struct BlockSync {
    threads: usize,
    lane_size: usize,
    state: Mutex<BlockState>,
    changed: Condvar,
    /// `state.generation`, readable without the block's lock (by a warp settling under its
    /// own): a lane marked as waiting at the barrier in an older generation has been released
    /// (it is running, and only late to say so).
    generation: AtomicU64,
    warps: Vec<Warp>,
}

struct BlockState {
    /// Which of its group's blocks the group runs (0, 1, ...).
    round: u64,
    /// Threads that called the barrier in its current generation.
    arrived: usize,
    /// Threads that returned from the kernel in this round.
    returned: usize,
    /// How often the barrier has let its threads go.
    generation: u64,
}

/// Where one emulated thread is in its block: the context its `HostThreadInfo` hands back.
pub(crate) struct LaneSeat<'a> {
    block: &'a BlockSync,
    warp: usize,
    lane: usize,
}

impl BlockSync {
    pub fn new(threads: usize, lane_size: u32) -> BlockSync {
        let lane_size = lane_size.clamp(1, MAX_LANES as u32) as usize;
        let warps = (0..threads.div_ceil(lane_size))
            .map(|warp| Warp::new(lane_size, (threads - warp * lane_size).min(lane_size), warp))
            .collect();
        BlockSync {
            threads,
            lane_size,
            state: Mutex::new(BlockState {
                round: 0,
                arrived: 0,
                returned: 0,
                generation: 0,
            }),
            changed: Condvar::new(),
            generation: AtomicU64::new(0),
            warps,
        }
    }

    /// The seat of the thread with linear index `thread` in the block.
    pub fn seat(&self, thread: usize) -> LaneSeat<'_> {
        LaneSeat {
            block: self,
            warp: thread / self.lane_size,
            lane: thread % self.lane_size,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BlockState> {
        // Nothing panics while holding the lock; a poisoned one still holds consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, BlockState>) -> MutexGuard<'a, BlockState> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Lets the barrier's threads go once every thread that has not returned waits there.
    fn release_if_complete(&self, state: &mut BlockState) {
        if state.arrived > 0 && state.arrived + state.returned == self.threads {
            state.arrived = 0;
            state.generation += 1;
            self.generation.store(state.generation, Ordering::Release);
            self.changed.notify_all();
        }
    }
}

impl LaneSeat<'_> {
    fn warp(&self) -> &Warp {
        &self.block.warps[self.warp]
    }

    /// Called before the thread runs the kernel for the group's `round`-th block
    /// (`block_idx`): waits until every thread of the group has returned from the previous
    /// one, so threads of different blocks never meet at a barrier or in a warp. The thread
    /// that starts the round runs `prepare_block` first, while no thread of the group is in a
    /// block (the block's shared memory is zeroed there).
    pub fn begin(&self, round: u64, block_idx: [u32; 3], prepare_block: impl FnOnce()) {
        let block = self.block;
        let mut prepare_block = Some(prepare_block);
        let mut state = block.lock();
        while state.round != round {
            if state.round < round && state.returned == block.threads {
                if let Some(prepare) = prepare_block.take() {
                    prepare();
                }
                state.round = round;
                state.returned = 0;
                for warp in &block.warps {
                    warp.lock().start_round();
                }
                block.changed.notify_all();
            } else {
                state = block.wait(state);
            }
        }
        drop(state);
        self.warp().lock().block_idx = block_idx;
    }

    /// Called when the thread has returned from the kernel (normally or after a panic). It no
    /// longer holds up the barrier or its warp's operations, as on GPUs (NVIDIA: an exited
    /// thread; AMD: a wavefront whose lanes all ended).
    pub fn end(&self) {
        let warp = self.warp();
        {
            let mut state = warp.lock();
            state.lanes[self.lane].phase = Phase::Returned;
            state.settle(self.block.generation());
        }
        warp.changed.notify_all();
        let mut state = self.block.lock();
        state.returned += 1;
        self.block.release_if_complete(&mut state);
        if state.returned == self.block.threads {
            // Threads waiting to start the next block.
            self.block.changed.notify_all();
        }
    }

    /// The block barrier (`__syncthreads`), telling the warp that this lane waits there.
    pub fn wait_at_barrier(&self) {
        let warp = self.warp();
        {
            let mut state = warp.lock();
            let generation = self.block.generation();
            state.lanes[self.lane].phase = Phase::AtBarrier { generation };
            // A lane of this warp may wait for this one in an exchange: it never comes.
            state.settle(generation);
        }
        warp.changed.notify_all();
        let block = self.block;
        let mut state = block.lock();
        let generation = state.generation;
        state.arrived += 1;
        block.release_if_complete(&mut state);
        while state.generation == generation {
            state = block.wait(state);
        }
        drop(state);
        warp.lock().lanes[self.lane].phase = Phase::Running;
    }

    /// One lane's part in a warp operation: see [`WarpExchange`].
    pub fn exchange(&self, request: &mut WarpExchange) {
        let warp = self.warp();
        let own = 1u64 << self.lane;
        let mask = if warp_op::kind(request.op) == warp_op::ACTIVE_MASK {
            warp.lanes_mask()
        } else {
            request.mask & warp.lanes_mask()
        };
        if mask & own == 0 {
            request.status = WarpExchange::FAILED;
            request.set_message(&format!(
                "{} called by lane {} with mask {:#x}, which does not include it",
                warp_op::name(request.op),
                self.lane,
                request.mask
            ));
            return;
        }
        let mut state = warp.lock();
        let lane = &mut state.lanes[self.lane];
        lane.phase = Phase::Waiting {
            op: request.op,
            mask,
        };
        lane.value = request.value;
        lane.outcome = None;
        state.settle(self.block.generation());
        warp.changed.notify_all();
        let outcome = loop {
            if let Some(outcome) = state.lanes[self.lane].outcome.take() {
                break outcome;
            }
            state = warp.wait(state);
        };
        drop(state);
        match outcome {
            Outcome::Done {
                participants,
                values,
            } => {
                request.status = WarpExchange::DONE;
                request.participants = participants;
                request.values = *values;
            }
            Outcome::Failed(message) => {
                request.status = WarpExchange::FAILED;
                request.set_message(&message);
            }
        }
    }
}

/// The C entry of the block barrier (`HostThreadInfo::barrier`).
///
/// # Safety
/// `context` must point at a [`LaneSeat`] that outlives the call.
pub(crate) unsafe extern "C" fn wait_at_barrier(context: *const std::ffi::c_void) {
    // SAFETY: the caller passes the seat the emulator stored in this thread's record, which
    // lives on the thread's stack while it runs the kernel.
    let seat = unsafe { &*context.cast::<LaneSeat<'_>>() };
    seat.wait_at_barrier();
}

/// The C entry of the warp exchange (`HostThreadInfo::warp_exchange`).
///
/// # Safety
/// `context` must point at a [`LaneSeat`] that outlives the call and `request` at a writable
/// [`WarpExchange`].
pub(crate) unsafe extern "C" fn warp_exchange(
    context: *const std::ffi::c_void,
    request: *mut WarpExchange,
) {
    // SAFETY: as in `wait_at_barrier`; the device runtime passes its own request record.
    let (seat, request) = unsafe { (&*context.cast::<LaneSeat<'_>>(), &mut *request) };
    seat.exchange(request);
}

struct Warp {
    lane_size: usize,
    state: Mutex<WarpState>,
    changed: Condvar,
}

impl Warp {
    fn new(lane_size: usize, present: usize, index: usize) -> Warp {
        let mut lanes = vec![Lane::default(); lane_size];
        for lane in &mut lanes[present..] {
            lane.phase = Phase::Absent;
        }
        Warp {
            lane_size,
            state: Mutex::new(WarpState {
                index,
                block_idx: [0; 3],
                lanes,
            }),
            changed: Condvar::new(),
        }
    }

    /// Bits of the lanes a warp of this size has.
    fn lanes_mask(&self) -> u64 {
        if self.lane_size >= 64 {
            u64::MAX
        } else {
            (1u64 << self.lane_size) - 1
        }
    }

    fn lock(&self) -> MutexGuard<'_, WarpState> {
        // A panic while holding the lock (none is expected) leaves consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, WarpState>) -> MutexGuard<'a, WarpState> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    /// Returned from the kernel for this block.
    Returned,
    /// No such thread: the block ends inside this warp.
    Absent,
    AtBarrier {
        generation: u64,
    },
    Waiting {
        op: u32,
        mask: u64,
    },
}

#[derive(Clone, Debug)]
enum Outcome {
    Done {
        participants: u64,
        values: Arc<[u64; MAX_LANES]>,
    },
    Failed(Arc<str>),
}

#[derive(Clone, Debug)]
struct Lane {
    phase: Phase,
    value: u64,
    outcome: Option<Outcome>,
}

impl Default for Lane {
    fn default() -> Lane {
        Lane {
            phase: Phase::Running,
            value: 0,
            outcome: None,
        }
    }
}

struct WarpState {
    /// The warp's index in its block, and the block, for messages.
    index: usize,
    block_idx: [u32; 3],
    lanes: Vec<Lane>,
}

impl WarpState {
    fn start_round(&mut self) {
        for lane in &mut self.lanes {
            if lane.phase != Phase::Absent {
                *lane = Lane::default();
            }
        }
    }

    fn gone(&self, lane: usize) -> bool {
        matches!(self.lanes[lane].phase, Phase::Returned | Phase::Absent)
    }

    /// Whether `lane` will do something by itself: it runs, or the barrier it was waiting at
    /// has let it go, or it is in `active_mask`, which completes once no lane runs.
    fn moving(&self, lane: usize, generation: u64) -> bool {
        match self.lanes[lane].phase {
            Phase::Running => true,
            Phase::AtBarrier { generation: at } => at < generation,
            Phase::Waiting { op, .. } => warp_op::kind(op) == warp_op::ACTIVE_MASK,
            Phase::Returned | Phase::Absent => false,
        }
    }

    fn waiting(&self, lane: usize) -> Option<(u32, u64)> {
        match self.lanes[lane].phase {
            Phase::Waiting { op, mask } if self.lanes[lane].outcome.is_none() => Some((op, mask)),
            _ => None,
        }
    }

    /// Completes every exchange that can complete and fails every one that never can.
    fn settle(&mut self, generation: u64) {
        while self.complete_one(generation) {}
        self.fail_dead_exchanges(generation);
    }

    /// Completes one exchange whose lanes have all arrived (or returned), or the lanes in
    /// `active_mask` when no lane runs. Returns whether it did.
    fn complete_one(&mut self, generation: u64) -> bool {
        for first in 0..self.lanes.len() {
            let Some((op, mask)) = self.waiting(first) else {
                continue;
            };
            if warp_op::kind(op) == warp_op::ACTIVE_MASK {
                continue;
            }
            let ready =
                bits(mask).all(|lane| self.gone(lane) || self.waiting(lane) == Some((op, mask)));
            if ready {
                let participants = bits(mask)
                    .filter(|&lane| !self.gone(lane))
                    .fold(0, |set, lane| set | 1u64 << lane);
                self.finish(participants);
                return true;
            }
        }
        let active: u64 = (0..self.lanes.len())
            .filter(|&lane| {
                self.waiting(lane)
                    .is_some_and(|(op, _)| warp_op::kind(op) == warp_op::ACTIVE_MASK)
            })
            .fold(0, |set, lane| set | 1u64 << lane);
        let anyone_running = (0..self.lanes.len()).any(|lane| {
            !matches!(self.lanes[lane].phase, Phase::Waiting { .. })
                && self.moving(lane, generation)
        });
        if active != 0 && !anyone_running {
            self.finish(active);
            return true;
        }
        false
    }

    /// Hands the lanes of `participants` everyone's values and lets them go.
    fn finish(&mut self, participants: u64) {
        let mut values = [0u64; MAX_LANES];
        for lane in bits(participants) {
            values[lane] = self.lanes[lane].value;
        }
        let values = Arc::new(values);
        for lane in bits(participants) {
            self.lanes[lane].outcome = Some(Outcome::Done {
                participants,
                values: Arc::clone(&values),
            });
            self.lanes[lane].phase = Phase::Running;
        }
    }

    /// Fails each pending exchange none of whose missing lanes can still come: every one waits
    /// at the block barrier (which this exchange's lanes hold up) or in an exchange that can
    /// never complete either.
    fn fail_dead_exchanges(&mut self, generation: u64) {
        // The pending exchanges: (op, mask, lanes that called it).
        let mut pending: Vec<(u32, u64, u64)> = Vec::new();
        for lane in 0..self.lanes.len() {
            if let Some((op, mask)) = self.waiting(lane) {
                if warp_op::kind(op) == warp_op::ACTIVE_MASK {
                    continue;
                }
                match pending.iter_mut().find(|(o, m, _)| (*o, *m) == (op, mask)) {
                    Some((_, _, arrived)) => *arrived |= 1 << lane,
                    None => pending.push((op, mask, 1 << lane)),
                }
            }
        }
        if pending.is_empty() {
            return;
        }
        let missing = |&(_, mask, arrived): &(u32, u64, u64)| {
            bits(mask & !arrived).filter(|&lane| !self.gone(lane))
        };
        let mut live = vec![false; pending.len()];
        loop {
            let mut changed = false;
            for (index, exchange) in pending.iter().enumerate() {
                if live[index] {
                    continue;
                }
                let can_come = missing(exchange).any(|lane| {
                    self.moving(lane, generation)
                        || self.waiting(lane).is_some_and(|(op, mask)| {
                            pending
                                .iter()
                                .position(|(o, m, _)| (*o, *m) == (op, mask))
                                .is_some_and(|other| live[other])
                        })
                });
                if can_come {
                    live[index] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        // Every message is written before any lane is let go, so each names where the others
        // wait.
        let dead: Vec<(u64, Arc<str>)> = pending
            .iter()
            .zip(&live)
            .filter(|(_, live)| !**live)
            .map(|(exchange, _)| (exchange.2, self.describe_dead(exchange).into()))
            .collect();
        for (arrived, message) in dead {
            for lane in bits(arrived) {
                self.lanes[lane].outcome = Some(Outcome::Failed(Arc::clone(&message)));
                self.lanes[lane].phase = Phase::Running;
            }
        }
    }

    fn describe_dead(&self, &(op, mask, arrived): &(u32, u64, u64)) -> String {
        let [x, y, z] = self.block_idx;
        let mut text = format!(
            "{} with mask {mask:#x} can never complete (block ({x}, {y}, {z}), warp {}): {} \
             called it, but",
            warp_op::name(op),
            self.index,
            lane_list(arrived),
        );
        // The missing lanes, grouped by where they wait.
        let mut places: Vec<(String, u64)> = Vec::new();
        for lane in bits(mask & !arrived).filter(|&lane| !self.gone(lane)) {
            let place = match self.lanes[lane].phase {
                Phase::AtBarrier { .. } => "the block barrier".to_string(),
                Phase::Waiting { op, mask } => {
                    format!("{} with mask {mask:#x}", warp_op::name(op))
                }
                _ => "another place".to_string(),
            };
            match places.iter_mut().find(|(known, _)| *known == place) {
                Some((_, lanes)) => *lanes |= 1 << lane,
                None => places.push((place, 1 << lane)),
            }
        }
        for (index, (place, lanes)) in places.iter().enumerate() {
            let separator = if index == 0 { " " } else { "; " };
            let _ = write!(
                text,
                "{separator}{} wait{} at {place}",
                lane_list(*lanes),
                {
                    if lanes.count_ones() == 1 {
                        "s"
                    } else {
                        ""
                    }
                }
            );
        }
        text.push_str(
            " (every lane of a mask must call the same warp operation with the same mask; \
             on a GPU this hangs or reads undefined values)",
        );
        text
    }
}

/// The lane numbers set in `mask`, lowest first.
fn bits(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |lane| mask >> lane & 1 == 1)
}

/// `lane 3`, `lanes 0-15`, `lanes 0-3, 8, 10-11`.
fn lane_list(mask: u64) -> String {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for lane in bits(mask) {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == lane => *end = lane,
            _ => ranges.push((lane, lane)),
        }
    }
    let list: Vec<String> = ranges
        .iter()
        .map(|&(start, end)| {
            if start == end {
                start.to_string()
            } else {
                format!("{start}-{end}")
            }
        })
        .collect();
    let noun = if mask.count_ones() == 1 {
        "lane"
    } else {
        "lanes"
    };
    format!("{noun} {}", list.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    /// Runs `body(seat)` on one thread per lane of a block of `threads` threads.
    fn run_block<T: Send>(
        threads: usize,
        lane_size: u32,
        body: impl Fn(&LaneSeat<'_>) -> T + Sync,
    ) -> Vec<T> {
        let block = BlockSync::new(threads, lane_size);
        thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|thread| {
                    let block = &block;
                    let body = &body;
                    scope.spawn(move || {
                        let seat = block.seat(thread);
                        seat.begin(0, [0; 3], || {});
                        let result = body(&seat);
                        seat.end();
                        result
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    fn exchange(seat: &LaneSeat<'_>, op: u32, mask: u64, value: u64) -> WarpExchange {
        let mut request = WarpExchange::new(op, mask, value);
        seat.exchange(&mut request);
        request
    }

    #[test]
    fn lanes_list_compactly() {
        assert_eq!(lane_list(1 << 3), "lane 3");
        assert_eq!(lane_list(0xffff), "lanes 0-15");
        assert_eq!(lane_list(0b1101_0000_1111), "lanes 0-3, 8, 10-11");
    }

    #[test]
    fn every_lane_gets_every_value_of_its_warp() {
        let results = run_block(64, 32, |seat| {
            let value = (seat.warp * 100 + seat.lane) as u64;
            exchange(seat, warp_op::SHUFFLE, u64::MAX, value)
        });
        for (thread, result) in results.iter().enumerate() {
            assert_eq!(result.status, WarpExchange::DONE, "{}", result.message());
            assert_eq!(result.participants, 0xffff_ffff);
            let warp = thread / 32;
            for lane in 0..32 {
                assert_eq!(result.values[lane], (warp * 100 + lane) as u64);
            }
        }
    }

    #[test]
    fn disjoint_masks_meet_separately_and_returned_lanes_do_not_hold_up() {
        let results = run_block(40, 32, |seat| {
            if seat.warp == 0 && seat.lane >= 24 {
                return None; // returns early
            }
            let mask = if seat.warp == 1 {
                u64::MAX // lanes 8-31 of warp 1 do not exist
            } else if seat.lane < 8 {
                0xff
            } else {
                0xffff_ff00
            };
            Some(exchange(seat, warp_op::BALLOT, mask, seat.lane as u64))
        });
        for (thread, result) in results.iter().enumerate() {
            let Some(result) = result else { continue };
            assert_eq!(result.status, WarpExchange::DONE, "{}", result.message());
            let expected = match (thread / 32, thread % 32) {
                (1, _) => 0xff,
                (_, lane) if lane < 8 => 0xff,
                _ => 0x00ff_ff00,
            };
            assert_eq!(result.participants, expected, "thread {thread}");
        }
    }

    #[test]
    fn a_lane_at_the_barrier_fails_the_exchange_naming_the_lanes() {
        let results = run_block(32, 32, |seat| {
            if seat.lane < 16 {
                // Fails, returns, and so lets the barrier go for the other lanes.
                Some(exchange(seat, warp_op::SHUFFLE_XOR, u64::MAX, 1))
            } else {
                seat.wait_at_barrier();
                None
            }
        });
        for result in results.iter().take(16) {
            let result = result.as_ref().unwrap();
            assert_eq!(result.status, WarpExchange::FAILED);
            assert_eq!(
                result.message(),
                "warp::shuffle_xor with mask 0xffffffff can never complete (block (0, 0, 0), \
                 warp 0): lanes 0-15 called it, but lanes 16-31 wait at the block barrier \
                 (every lane of a mask must call the same warp operation with the same mask; \
                 on a GPU this hangs or reads undefined values)"
            );
        }
    }

    #[test]
    fn different_operations_never_meet_and_both_fail() {
        let results = run_block(32, 32, |seat| {
            let op = if seat.lane % 2 == 0 {
                warp_op::BALLOT
            } else {
                warp_op::SHUFFLE
            };
            exchange(seat, op, u64::MAX, 0)
        });
        let even = results[0].message().to_string();
        let odd = results[1].message().to_string();
        assert!(
            even.starts_with("warp::ballot with mask 0xffffffff can never complete")
                && even.contains("lanes 1, 3, 5")
                && even.contains("wait at warp::shuffle with mask 0xffffffff"),
            "{even}"
        );
        assert!(odd.contains("wait at warp::ballot"), "{odd}");
        assert!(results.iter().all(|r| r.status == WarpExchange::FAILED));
    }

    #[test]
    fn active_mask_gathers_the_lanes_that_call_it_together() {
        let results = run_block(64, 64, |seat| {
            if seat.lane % 3 == 0 {
                Some(exchange(seat, warp_op::ACTIVE_MASK, 0, 0).participants)
            } else if seat.lane % 3 == 1 {
                seat.wait_at_barrier();
                None
            } else {
                None // returned
            }
        });
        let expected = (0..64).filter(|l| l % 3 == 0).fold(0u64, |m, l| m | 1 << l);
        for (lane, result) in results.iter().enumerate() {
            if lane % 3 == 0 {
                assert_eq!(*result, Some(expected), "lane {lane}");
            }
        }
    }

    #[test]
    fn lanes_of_the_next_block_wait_for_the_previous_one_to_end() {
        let block = BlockSync::new(8, 4);
        let rounds = 5;
        let seen = Mutex::new(Vec::new());
        thread::scope(|scope| {
            for thread in 0..8 {
                let (block, seen) = (&block, &seen);
                scope.spawn(move || {
                    let seat = block.seat(thread);
                    for round in 0..rounds {
                        seat.begin(round, [round as u32, 0, 0], || {});
                        let value = round * 10 + seat.lane as u64;
                        let result = exchange(&seat, warp_op::SHUFFLE, u64::MAX, value);
                        seat.wait_at_barrier();
                        seen.lock()
                            .unwrap()
                            .push((round, result.values[..4].to_vec()));
                        seat.end();
                    }
                });
            }
        });
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 8 * rounds as usize);
        for (round, values) in seen {
            let expected: Vec<u64> = (0..4).map(|lane| round * 10 + lane).collect();
            assert_eq!(values, expected);
        }
    }

    #[test]
    fn a_lane_alone_meets_itself_and_a_mask_without_the_caller_is_refused() {
        let results = run_block(3, 1, |seat| {
            let alone = exchange(seat, warp_op::SYNC, u64::MAX, 7);
            let refused = exchange(seat, warp_op::SYNC, 0b10, 7);
            (alone, refused)
        });
        for (alone, refused) in results {
            assert_eq!((alone.status, alone.participants), (WarpExchange::DONE, 1));
            assert_eq!(refused.status, WarpExchange::FAILED);
            assert!(refused.message().contains("does not include it"));
        }
    }
}
