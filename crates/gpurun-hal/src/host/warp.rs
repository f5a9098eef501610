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
//! Lanes meet only lanes that make the same call from the same call site (the kernel's source
//! line, [`Site`]), and threads of a block meet at the barrier only from the same call site: on
//! AMD the two sides of a branch each run their warp operation (or `s_barrier`) on their own,
//! and NVIDIA's `bar.sync` is aligned, so anything else is wrong on some GPU. A warp operation
//! whose mask names lanes a partial warp lacks fails too.
//!
//! Lanes that have returned from the kernel do not hold an exchange or the barrier up (as on
//! GPUs: NVIDIA does not wait for exited threads, and an AMD wavefront whose lanes all ended
//! leaves the barrier); the device runtime decides what reading their value means.

use super::checks::ThreadChecks;
use gpurun_abi::host::{warp_op, CallSite, WarpExchange, MAX_LANES};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// Why lanes that diverged fail, in every message about them.
const SAME_CALL: &str = "every lane of a mask must make the same warp operation, from the same \
                         call site, with the same mask; on a GPU this hangs or reads undefined \
                         values";

/// Where a barrier or warp operation is called from: a location in the kernel's source.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Site {
    file: *const u8,
    file_len: usize,
    line: u32,
    column: u32,
}

// SAFETY: `file` points at a string of the loaded image, which no one writes and which stays
// loaded for as long as any launch of it runs (the only time a site is read).
unsafe impl Send for Site {}
// SAFETY: as above.
unsafe impl Sync for Site {}

impl Site {
    /// What a version 2 image's barrier and exchange give: no place (all such calls meet).
    pub const UNKNOWN: Site = Site {
        file: std::ptr::null(),
        file_len: 0,
        line: 0,
        column: 0,
    };

    /// The site the device runtime passed.
    ///
    /// # Safety
    /// `site.file` must point at `site.file_len` bytes that stay valid and unchanged while the
    /// launch runs.
    pub unsafe fn from_abi(site: &CallSite) -> Site {
        Site {
            file: site.file,
            file_len: site.file_len,
            line: site.line,
            column: site.column,
        }
    }

    fn file(&self) -> &str {
        if self.file.is_null() {
            return "";
        }
        // SAFETY: per `from_abi`, `file_len` bytes of the loaded image, valid while the launch
        // runs, which is when sites are read.
        let bytes = unsafe { std::slice::from_raw_parts(self.file, self.file_len) };
        std::str::from_utf8(bytes).unwrap_or("<a file name that is not UTF-8>")
    }
}

impl PartialEq for Site {
    fn eq(&self, other: &Site) -> bool {
        (self.line, self.column) == (other.line, other.column) && self.file() == other.file()
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.file.is_null() {
            f.write_str("an unknown call site")
        } else {
            write!(f, "{}:{}:{}", self.file(), self.line, self.column)
        }
    }
}

/// One lane's warp operation: what lanes must agree on to meet.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Call {
    op: u32,
    mask: u64,
    site: Site,
}

impl Call {
    fn is_active_mask(&self) -> bool {
        warp_op::kind(self.op) == warp_op::ACTIVE_MASK
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", warp_op::name(self.op))?;
        if !self.is_active_mask() {
            write!(f, " with mask {:#x}", self.mask)?;
        }
        if !self.site.file.is_null() {
            write!(f, " at {}", self.site)?;
        }
        Ok(())
    }
}

/// The threads that run one block at a time (a group of the launch's deal): its barrier and its
/// warps, reused for each block the group runs, one block after another.
pub(crate) struct BlockSync {
    threads: usize,
    lane_size: usize,
    state: Monitor<BlockState>,
    /// `state.generation`, readable without the block's lock (by a warp settling under its
    /// own): a lane marked as waiting at the barrier in an older generation has been released
    /// (it is running, and only late to say so).
    generation: AtomicU64,
    warps: Vec<Warp>,
}

struct BlockState {
    /// How many of its group's blocks the group has begun (the round running is one less), and
    /// the index of the one running.
    begun: u64,
    block_idx: [u32; 3],
    /// Threads that called the barrier in its current generation.
    arrived: usize,
    /// Of those, the ones that voted true (`gpurun::barrier_count` and its kind).
    votes: usize,
    /// The votes and the arrivals of the generation released last, which its threads read as
    /// they leave (the next one cannot be released before they all arrive there).
    last_vote: (usize, usize),
    /// Threads that returned from the kernel in this round (before the first: all of them).
    returned: usize,
    /// How often the barrier has let its threads go.
    generation: u64,
    /// Where each thread (by linear index) waits at the barrier in the current generation.
    waiting_at: Vec<Option<Site>>,
    /// Once threads of this block waited at barriers of different call sites: the generation
    /// that broke, and why. Every thread of the block that waits at the barrier from then on
    /// fails with that message.
    broken: Option<(u64, Arc<str>)>,
}

/// Where one emulated thread is in its block: the context its `HostThreadInfo` hands back.
pub(crate) struct LaneSeat<'a> {
    block: &'a BlockSync,
    /// Its linear index in the block, and its warp and lane.
    thread: usize,
    warp: usize,
    lane: usize,
    /// Its part in the launch's memory checks, when they are on.
    checks: Option<&'a ThreadChecks<'a>>,
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
            state: Monitor::new(BlockState {
                begun: 0,
                block_idx: [0; 3],
                arrived: 0,
                votes: 0,
                last_vote: (0, 0),
                returned: threads,
                generation: 0,
                waiting_at: vec![None; threads],
                broken: None,
            }),
            generation: AtomicU64::new(0),
            warps,
        }
    }

    /// The seat of the thread with linear index `thread` in the block.
    pub fn seat(&self, thread: usize) -> LaneSeat<'_> {
        LaneSeat {
            block: self,
            thread,
            warp: thread / self.lane_size,
            lane: thread % self.lane_size,
            checks: None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BlockState> {
        self.state.lock()
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, BlockState>) -> MutexGuard<'a, BlockState> {
        self.state.wait(guard)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Lets the barrier's threads go once every thread that has not returned waits there.
    fn release_if_complete(&self, state: &mut BlockState) {
        if state.arrived > 0 && state.arrived + state.returned == self.threads {
            self.release(state);
        }
    }

    /// Starts the barrier's next generation, letting every waiting thread go.
    fn release(&self, state: &mut BlockState) {
        state.last_vote = (state.votes, state.arrived);
        state.votes = 0;
        state.arrived = 0;
        state.waiting_at.fill(None);
        state.generation += 1;
        self.generation.store(state.generation, Ordering::Release);
        self.state.notify_all();
    }

    /// Why the threads waiting at the barrier can never meet: they wait at different sites.
    fn describe_divergence(state: &BlockState) -> String {
        let [x, y, z] = state.block_idx;
        let mut sites: Vec<(Site, Vec<usize>)> = Vec::new();
        for (thread, site) in state.waiting_at.iter().enumerate() {
            let Some(site) = site else { continue };
            match sites.iter_mut().find(|(known, _)| known == site) {
                Some((_, threads)) => threads.push(thread),
                None => sites.push((*site, vec![thread])),
            }
        }
        let mut text = format!("synccheck: divergent barrier in block ({x}, {y}, {z}):");
        for (index, (site, threads)) in sites.iter().enumerate() {
            let (separator, verb) = match (index, threads.len()) {
                (0, 1) => (" ", " waits"),
                (0, _) => (" ", " wait"),
                _ => (", ", ""),
            };
            let _ = write!(
                text,
                "{separator}{}{verb} at gpurun::barrier at {site}",
                index_list("thread", "threads", threads.iter().copied())
            );
        }
        text.push_str(
            " (threads by linear index in the block; every thread of a block that has not \
             returned must reach the same barrier call: NVIDIA's bar.sync is aligned, so this is \
             undefined there, and on AMD the wavefronts' barriers pair up wrongly)",
        );
        text
    }
}

impl<'a> LaneSeat<'a> {
    /// The seat with the thread's part in the memory checks.
    pub fn with_checks(self, checks: Option<&'a ThreadChecks<'a>>) -> LaneSeat<'a> {
        LaneSeat { checks, ..self }
    }

    /// The thread's part in the memory checks, when they are on.
    pub fn checks(&self) -> Option<&'a ThreadChecks<'a>> {
        self.checks
    }

    fn warp(&self) -> &Warp {
        &self.block.warps[self.warp]
    }

    /// Called before the thread runs the kernel for the group's `round`-th block
    /// (`block_idx`): waits until every thread of the group has returned from the previous
    /// one, so threads of different blocks never meet at a barrier or in a warp. The thread
    /// that starts the round runs `prepare_block` first, while no thread of the group is in a
    /// block (the block's shared memory gets its poison there).
    pub fn begin(&self, round: u64, block_idx: [u32; 3], prepare_block: impl FnOnce()) {
        let block = self.block;
        let mut prepare_block = Some(prepare_block);
        let mut state = block.lock();
        while state.begun != round + 1 {
            if state.begun == round && state.returned == block.threads {
                if let Some(prepare) = prepare_block.take() {
                    prepare();
                }
                state.begun = round + 1;
                state.returned = 0;
                state.broken = None;
                state.votes = 0;
                for warp in &block.warps {
                    warp.lock().start_round();
                }
                block.state.notify_all();
            } else {
                state = block.wait(state);
            }
        }
        // Every thread of the round says the same.
        state.block_idx = block_idx;
        drop(state);
        self.warp().lock().block_idx = block_idx;
        if let Some(checks) = self.checks {
            checks.begin_block(block_idx);
        }
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
        warp.state.notify_all();
        let mut state = self.block.lock();
        state.returned += 1;
        self.block.release_if_complete(&mut state);
        if state.returned == self.block.threads {
            // Threads waiting to start the next block.
            self.block.state.notify_all();
        }
    }

    /// The block barrier (`__syncthreads`) called from `site`, telling the warp that this lane
    /// waits there, with this thread's `vote` if it is one (`__syncthreads_count`). Fails, with
    /// the message every thread at the barrier gets, once threads of the block wait at barriers
    /// of different call sites; else how many threads voted true and how many arrived.
    pub fn wait_at_barrier(
        &self,
        site: Site,
        vote: Option<bool>,
    ) -> Result<(usize, usize), Arc<str>> {
        let warp = self.warp();
        {
            let mut state = warp.lock();
            let generation = self.block.generation();
            state.lanes[self.lane].phase = Phase::AtBarrier { generation, site };
            // A lane of this warp may wait for this one in an exchange: it never comes.
            state.settle(generation);
        }
        warp.state.notify_all();
        let block = self.block;
        let mut state = block.lock();
        let generation = state.generation;
        let outcome = if let Some((_, message)) = &state.broken {
            Err(Arc::clone(message))
        } else if state
            .waiting_at
            .iter()
            .flatten()
            .any(|waiting| *waiting != site)
        {
            state.waiting_at[self.thread] = Some(site);
            let message: Arc<str> = BlockSync::describe_divergence(&state).into();
            state.broken = Some((generation, Arc::clone(&message)));
            block.release(&mut state);
            Err(message)
        } else {
            state.waiting_at[self.thread] = Some(site);
            state.arrived += 1;
            state.votes += usize::from(vote == Some(true));
            block.release_if_complete(&mut state);
            while state.generation == generation {
                state = block.wait(state);
            }
            match &state.broken {
                Some((broke, message)) if *broke == generation => Err(Arc::clone(message)),
                _ => Ok(state.last_vote),
            }
        };
        drop(state);
        warp.lock().lanes[self.lane].phase = Phase::Running;
        if let (Ok(_), Some(checks)) = (&outcome, self.checks) {
            checks.passed_barrier();
        }
        outcome
    }

    /// One lane's part in a warp operation called from `site`: see [`WarpExchange`].
    pub fn exchange(&self, request: &mut WarpExchange, site: Site) {
        let warp = self.warp();
        let own = 1u64 << self.lane;
        let is_active_mask = warp_op::kind(request.op) == warp_op::ACTIVE_MASK;
        let mask = if is_active_mask {
            warp.lanes_mask()
        } else {
            request.mask & warp.lanes_mask()
        };
        let call = Call {
            op: request.op,
            mask,
            site,
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
        let missing = mask & !warp.present;
        if !is_active_mask && missing != 0 {
            let [x, y, z] = state.block_idx;
            drop(state);
            request.status = WarpExchange::FAILED;
            request.set_message(&format!(
                "synccheck: {call} names {}, which warp {} of block ({x}, {y}, {z}) does not \
                 have: the block's {} threads leave it {} (use warp::present() for the lanes a \
                 warp has; NVIDIA never activates the missing lanes, so a shuffle reading one \
                 gets an undefined value, and AMD leaves them out of EXEC, so it reads 0)",
                lane_list(missing),
                self.warp,
                self.block.threads,
                lane_list(warp.present),
            ));
            return;
        }
        let lane = &mut state.lanes[self.lane];
        lane.phase = Phase::Waiting(call);
        lane.value = request.value;
        lane.outcome = None;
        if let Some(checks) = self.checks {
            lane.clock = checks.clock();
        }
        state.settle(self.block.generation());
        warp.state.notify_all();
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
                clock,
            } => {
                request.status = WarpExchange::DONE;
                request.participants = participants;
                request.values = *values;
                if let (Some(clock), Some(checks)) = (clock, self.checks) {
                    checks.synced(&clock);
                }
            }
            Outcome::Failed(message) => {
                request.status = WarpExchange::FAILED;
                request.set_message(&message);
            }
        }
    }

    /// A version 3 image's request from `site`: the block barrier or a warp operation.
    fn sync_at(&self, request: &mut WarpExchange, site: Site) {
        let vote = match warp_op::kind(request.op) {
            warp_op::BARRIER => None,
            warp_op::BARRIER_VOTE => Some(request.value != 0),
            _ => return self.exchange(request, site),
        };
        match self.wait_at_barrier(site, vote) {
            Ok((voted, arrived)) => {
                request.status = WarpExchange::DONE;
                request.values[0] = voted as u64;
                request.values[1] = arrived as u64;
            }
            Err(message) => {
                request.status = WarpExchange::FAILED;
                request.set_message(&message);
            }
        }
    }
}

/// The C entry of a version 2 image's block barrier (`HostThreadInfo::barrier`), which says
/// neither where it is called from nor how to fail: its threads all meet as from one site.
///
/// # Safety
/// `context` must point at a [`LaneSeat`] that outlives the call.
pub(crate) unsafe extern "C" fn wait_at_barrier(context: *const std::ffi::c_void) {
    // SAFETY: the caller passes the seat the emulator stored in this thread's record, which
    // lives on the thread's stack while it runs the kernel.
    let seat = unsafe { &*context.cast::<LaneSeat<'_>>() };
    // Every such thread waits at the unknown site: they never diverge here.
    let _ = seat.wait_at_barrier(Site::UNKNOWN, None);
}

/// The C entry of a version 2 image's warp exchange (`HostThreadInfo::warp_exchange`).
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
    seat.exchange(request, Site::UNKNOWN);
}

/// The C entry of the barrier and warp exchange from a call site (`HostThreadInfo::sync_at`).
///
/// # Safety
/// As [`warp_exchange`]; `site` must point at a [`CallSite`] whose file stays valid while the
/// launch runs (a string of the loaded image).
pub(crate) unsafe extern "C" fn sync_at(
    context: *const std::ffi::c_void,
    request: *mut WarpExchange,
    site: *const CallSite,
) {
    // SAFETY: as in `warp_exchange`; the device runtime passes its own site record, whose
    // file is a string of the image.
    let (seat, request, site) = unsafe {
        (
            &*context.cast::<LaneSeat<'_>>(),
            &mut *request,
            Site::from_abi(&*site),
        )
    };
    seat.sync_at(request, site);
}

struct Warp {
    lane_size: usize,
    /// The lanes this warp has (all but in the last warp of a block that ends inside it).
    present: u64,
    state: Monitor<WarpState>,
}

impl Warp {
    fn new(lane_size: usize, present: usize, index: usize) -> Warp {
        let mut lanes = vec![Lane::default(); lane_size];
        for lane in &mut lanes[present..] {
            lane.phase = Phase::Absent;
        }
        Warp {
            lane_size,
            present: low_bits(present),
            state: Monitor::new(WarpState {
                index,
                block_idx: [0; 3],
                lanes,
            }),
        }
    }

    /// Bits of the lanes a warp of this size has.
    fn lanes_mask(&self) -> u64 {
        low_bits(self.lane_size)
    }

    fn lock(&self) -> MutexGuard<'_, WarpState> {
        self.state.lock()
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, WarpState>) -> MutexGuard<'a, WarpState> {
        self.state.wait(guard)
    }
}

/// State behind a lock, with a condition variable that says when it changed. Nothing panics
/// while holding the lock, and a poisoned one still holds consistent state: it is taken as is.
struct Monitor<T> {
    state: Mutex<T>,
    changed: Condvar,
}

impl<T> Monitor<T> {
    fn new(state: T) -> Monitor<T> {
        Monitor {
            state: Mutex::new(state),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, T> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn notify_all(&self) {
        self.changed.notify_all();
    }
}

/// A mask of the `count` lowest lanes.
fn low_bits(count: usize) -> u64 {
    if count >= 64 {
        u64::MAX
    } else {
        (1u64 << count) - 1
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Phase {
    Running,
    /// Returned from the kernel for this block.
    Returned,
    /// No such thread: the block ends inside this warp.
    Absent,
    AtBarrier {
        generation: u64,
        site: Site,
    },
    Waiting(Call),
}

#[derive(Clone, Debug)]
enum Outcome {
    Done {
        participants: u64,
        values: Arc<[u64; MAX_LANES]>,
        /// For `warp::sync` under the memory checks: the participants' warp clocks joined,
        /// which orders each one's earlier accesses before the others' later ones.
        clock: Option<Arc<[u32; MAX_LANES]>>,
    },
    Failed(Arc<str>),
}

#[derive(Clone, Debug)]
struct Lane {
    phase: Phase,
    value: u64,
    /// Under the memory checks, the warp clock the lane brought to its exchange.
    clock: [u32; MAX_LANES],
    outcome: Option<Outcome>,
}

impl Default for Lane {
    fn default() -> Lane {
        Lane {
            phase: Phase::Running,
            value: 0,
            clock: [0; MAX_LANES],
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
            Phase::AtBarrier { generation: at, .. } => at < generation,
            Phase::Waiting(call) => call.is_active_mask(),
            Phase::Returned | Phase::Absent => false,
        }
    }

    fn waiting(&self, lane: usize) -> Option<Call> {
        match self.lanes[lane].phase {
            Phase::Waiting(call) if self.lanes[lane].outcome.is_none() => Some(call),
            _ => None,
        }
    }

    /// Completes every exchange that can complete and fails every one that never can.
    fn settle(&mut self, generation: u64) {
        while self.complete_one(generation) {}
        self.fail_dead_exchanges(generation);
    }

    /// Completes one exchange whose lanes have all arrived (or returned), or the lanes calling
    /// `active_mask` from one site when no lane runs. Returns whether it did.
    fn complete_one(&mut self, generation: u64) -> bool {
        for first in 0..self.lanes.len() {
            let Some(call) = self.waiting(first) else {
                continue;
            };
            if call.is_active_mask() {
                continue;
            }
            let ready =
                bits(call.mask).all(|lane| self.gone(lane) || self.waiting(lane) == Some(call));
            if ready {
                let participants = bits(call.mask)
                    .filter(|&lane| !self.gone(lane))
                    .fold(0, |set, lane| set | 1u64 << lane);
                self.finish(participants);
                return true;
            }
        }
        let anyone_running = (0..self.lanes.len()).any(|lane| {
            !matches!(self.lanes[lane].phase, Phase::Waiting(_)) && self.moving(lane, generation)
        });
        if anyone_running {
            return false;
        }
        let Some(first) = (0..self.lanes.len())
            .filter_map(|lane| self.waiting(lane))
            .find(Call::is_active_mask)
        else {
            return false;
        };
        let together: u64 = (0..self.lanes.len())
            .filter(|&lane| self.waiting(lane) == Some(first))
            .fold(0, |set, lane| set | 1u64 << lane);
        self.finish(together);
        true
    }

    /// Hands the lanes of `participants` everyone's values (and, for `warp::sync`, their joined
    /// clocks) and lets them go.
    fn finish(&mut self, participants: u64) {
        let mut values = [0u64; MAX_LANES];
        let mut joined = [0u32; MAX_LANES];
        let mut syncs = false;
        for index in bits(participants) {
            let lane = &self.lanes[index];
            values[index] = lane.value;
            if let Phase::Waiting(call) = lane.phase {
                syncs = warp_op::kind(call.op) == warp_op::SYNC;
            }
            for (entry, own) in joined.iter_mut().zip(lane.clock) {
                *entry = (*entry).max(own);
            }
        }
        let values = Arc::new(values);
        let clock = syncs.then(|| Arc::new(joined));
        for lane in bits(participants) {
            self.lanes[lane].outcome = Some(Outcome::Done {
                participants,
                values: Arc::clone(&values),
                clock: clock.clone(),
            });
            self.lanes[lane].phase = Phase::Running;
        }
    }

    /// Fails each pending exchange none of whose missing lanes can still come: every one waits
    /// at the block barrier (which this exchange's lanes hold up) or in an exchange that can
    /// never complete either (another operation, mask or call site).
    fn fail_dead_exchanges(&mut self, generation: u64) {
        // The pending exchanges: the call and the lanes that made it.
        let mut pending: Vec<(Call, u64)> = Vec::new();
        for lane in 0..self.lanes.len() {
            if let Some(call) = self.waiting(lane) {
                if call.is_active_mask() {
                    continue;
                }
                match pending.iter_mut().find(|(known, _)| *known == call) {
                    Some((_, arrived)) => *arrived |= 1 << lane,
                    None => pending.push((call, 1 << lane)),
                }
            }
        }
        if pending.is_empty() {
            return;
        }
        let missing = |&(call, arrived): &(Call, u64)| {
            bits(call.mask & !arrived).filter(|&lane| !self.gone(lane))
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
                        || self.waiting(lane).is_some_and(|call| {
                            pending
                                .iter()
                                .position(|(known, _)| *known == call)
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
            .map(|(exchange, _)| (exchange.1, self.describe_dead(exchange).into()))
            .collect();
        for (arrived, message) in dead {
            for lane in bits(arrived) {
                self.lanes[lane].outcome = Some(Outcome::Failed(Arc::clone(&message)));
                self.lanes[lane].phase = Phase::Running;
            }
        }
    }

    fn describe_dead(&self, &(call, arrived): &(Call, u64)) -> String {
        let [x, y, z] = self.block_idx;
        let mut text = format!(
            "synccheck: {call} can never complete (block ({x}, {y}, {z}), warp {}): {} called \
             it, but",
            self.index,
            lane_list(arrived),
        );
        // The missing lanes, grouped by where they wait.
        let mut places: Vec<(String, u64)> = Vec::new();
        for lane in bits(call.mask & !arrived).filter(|&lane| !self.gone(lane)) {
            let place = match self.lanes[lane].phase {
                Phase::AtBarrier { site, .. } if !site.file.is_null() => {
                    format!("the block barrier (gpurun::barrier at {site})")
                }
                Phase::AtBarrier { .. } => "the block barrier".to_string(),
                Phase::Waiting(other) => other.to_string(),
                _ => "another place".to_string(),
            };
            match places.iter_mut().find(|(known, _)| *known == place) {
                Some((_, lanes)) => *lanes |= 1 << lane,
                None => places.push((place, 1 << lane)),
            }
        }
        for (index, (place, lanes)) in places.iter().enumerate() {
            let separator = if index == 0 { " " } else { "; " };
            let verb = if lanes.count_ones() == 1 {
                "waits"
            } else {
                "wait"
            };
            let _ = write!(text, "{separator}{} {verb} at {place}", lane_list(*lanes));
        }
        let _ = write!(text, " ({SAME_CALL})");
        text
    }
}

/// The lane numbers set in `mask`, lowest first.
fn bits(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |lane| mask >> lane & 1 == 1)
}

/// `lane 3`, `lanes 0-15`, `lanes 0-3, 8, 10-11`.
fn lane_list(mask: u64) -> String {
    index_list("lane", "lanes", bits(mask))
}

/// `thread 3`, `threads 0-15, 17` from increasing `indices`.
fn index_list(one: &str, many: &str, indices: impl Iterator<Item = usize>) -> String {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for index in indices {
        match ranges.last_mut() {
            Some((_, end)) if *end + 1 == index => *end = index,
            _ => ranges.push((index, index)),
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
    let single = ranges.len() == 1 && ranges[0].0 == ranges[0].1;
    format!("{} {}", if single { one } else { many }, list.join(", "))
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
        exchange_at(seat, op, mask, value, 1)
    }

    /// A call site of the kernel `k.rs`, at `line`.
    fn site(line: u32) -> Site {
        let file = "k.rs";
        let site = CallSite {
            file: file.as_ptr(),
            file_len: file.len(),
            line,
            column: 5,
        };
        // SAFETY: a static string.
        unsafe { Site::from_abi(&site) }
    }

    /// An exchange from line `line` of `k.rs`.
    fn exchange_at(seat: &LaneSeat<'_>, op: u32, mask: u64, value: u64, line: u32) -> WarpExchange {
        let mut request = WarpExchange::new(op, mask, value);
        seat.exchange(&mut request, site(line));
        request
    }

    /// The block barrier from line `line` of `k.rs`.
    fn barrier_at(seat: &LaneSeat<'_>, line: u32) -> Result<(), Arc<str>> {
        seat.wait_at_barrier(site(line), None).map(|_| ())
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
            // Warp 1 has lanes 0-7 only.
            let mask = if seat.warp == 1 || seat.lane < 8 {
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
                barrier_at(seat, 9).unwrap();
                None
            }
        });
        for result in results.iter().take(16) {
            let result = result.as_ref().unwrap();
            assert_eq!(result.status, WarpExchange::FAILED);
            assert_eq!(
                result.message(),
                "synccheck: warp::shuffle_xor with mask 0xffffffff at k.rs:1:5 can never \
                 complete (block (0, 0, 0), warp 0): lanes 0-15 called it, but lanes 16-31 \
                 wait at the block barrier (gpurun::barrier at k.rs:9:5) (every lane of a mask \
                 must make the same warp operation, from the same call site, with the same \
                 mask; on a GPU this hangs or reads undefined values)"
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
            even.starts_with(
                "synccheck: warp::ballot with mask 0xffffffff at k.rs:1:5 can never complete"
            ) && even.contains("lanes 1, 3, 5")
                && even.contains("wait at warp::shuffle with mask 0xffffffff at k.rs:1:5"),
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
                barrier_at(seat, 9).unwrap();
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
                        barrier_at(&seat, 9).unwrap();
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

    #[test]
    fn lanes_calling_from_different_sites_never_meet_and_each_side_names_the_other() {
        for lane_size in [32u32, 64] {
            let results = run_block(lane_size as usize, lane_size, |seat| {
                // The same operation and mask on both sides of a branch.
                let line = if seat.lane % 2 == 0 { 10 } else { 12 };
                exchange_at(seat, warp_op::SHUFFLE_XOR, u64::MAX, 0, line)
            });
            let mask = low_bits(lane_size as usize);
            let last = lane_size - 1;
            for (lane, result) in results.iter().enumerate() {
                assert_eq!(result.status, WarpExchange::FAILED);
                let (own, other) = if lane % 2 == 0 { (10, 12) } else { (12, 10) };
                let expected_start = format!(
                    "synccheck: warp::shuffle_xor with mask {mask:#x} at k.rs:{own}:5 can never \
                     complete (block (0, 0, 0), warp 0): lanes "
                );
                let message = result.message();
                assert!(message.starts_with(&expected_start), "{message}");
                let waiting = if lane % 2 == 0 {
                    "lanes 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31"
                } else {
                    "lanes 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30"
                };
                assert!(message.contains(waiting), "{message}");
                assert!(
                    message.contains(&format!(
                        "{last} wait at warp::shuffle_xor with mask {mask:#x} at k.rs:{other}:5"
                    )) || message.contains(&format!(
                        "{} wait at warp::shuffle_xor with mask {mask:#x} at k.rs:{other}:5",
                        last - 1
                    )),
                    "{message}"
                );
            }
        }
    }

    #[test]
    fn active_mask_gathers_only_the_lanes_of_one_call_site() {
        let results = run_block(32, 32, |seat| {
            let line = if seat.lane < 8 { 20 } else { 21 };
            exchange_at(seat, warp_op::ACTIVE_MASK, 0, 0, line).participants
        });
        for (lane, participants) in results.into_iter().enumerate() {
            let expected = if lane < 8 { 0xff } else { 0xffff_ff00 };
            assert_eq!(participants, expected, "lane {lane}");
        }
    }

    #[test]
    fn a_mask_naming_lanes_a_partial_warp_lacks_fails_naming_them() {
        // 48 threads in warps of 32: warp 1 has lanes 0-15.
        let results = run_block(48, 32, |seat| {
            exchange_at(seat, warp_op::BALLOT, u64::MAX, 1, 30)
        });
        for (thread, result) in results.iter().enumerate() {
            if thread < 32 {
                assert_eq!(result.status, WarpExchange::DONE, "{}", result.message());
                continue;
            }
            assert_eq!(result.status, WarpExchange::FAILED);
            let message = result.message();
            assert!(
                message.starts_with(
                    "synccheck: warp::ballot with mask 0xffffffff at k.rs:30:5 names lanes \
                     16-31, which warp 1 of block (0, 0, 0) does not have: the block's 48 \
                     threads leave it lanes 0-15 (use warp::present()"
                ),
                "{message}"
            );
        }
        // The lanes it has meet.
        let results = run_block(48, 32, |seat| {
            let present = if seat.warp == 1 { 0xffff } else { u64::MAX };
            exchange_at(seat, warp_op::BALLOT, present, 1, 30)
        });
        assert!(results.iter().all(|r| r.status == WarpExchange::DONE));
        assert_eq!(results[47].participants, 0xffff);
    }

    #[test]
    fn threads_at_barriers_of_different_sites_all_fail_naming_both() {
        let block = BlockSync::new(64, 32);
        let results: Vec<Result<(), Arc<str>>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..64)
                .map(|thread| {
                    let block = &block;
                    scope.spawn(move || {
                        let seat = block.seat(thread);
                        seat.begin(0, [2, 0, 0], || {});
                        let first = if thread < 40 {
                            barrier_at(&seat, 7)
                        } else {
                            barrier_at(&seat, 8)
                        };
                        // A thread let go by the failure waits at the barrier again: it fails
                        // at once, not hanging on threads that have left.
                        let again = barrier_at(&seat, 7);
                        seat.end();
                        assert_eq!(first, again);
                        first
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let message = results[0].clone().unwrap_err();
        assert!(results.iter().all(|r| r.as_ref().err() == Some(&message)));
        assert!(
            message.starts_with("synccheck: divergent barrier in block (2, 0, 0): threads "),
            "{message}"
        );
        // Which threads were waiting when the divergence showed depends on timing; the sites
        // and the thread that made it visible do not.
        assert!(
            message.contains("at gpurun::barrier at k.rs:7:5"),
            "{message}"
        );
        assert!(
            message.contains("at gpurun::barrier at k.rs:8:5"),
            "{message}"
        );
        assert!(
            message.contains("NVIDIA's bar.sync is aligned"),
            "{message}"
        );
    }

    #[test]
    fn the_barrier_meets_every_thread_that_has_not_returned_from_one_site() {
        let results = run_block(64, 32, |seat| {
            if seat.thread % 3 == 0 {
                return Ok(()); // returned early: not waited for
            }
            for _ in 0..5 {
                barrier_at(seat, 4)?;
            }
            Ok::<(), Arc<str>>(())
        });
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    }

    /// A vote at the barrier counts the threads that reached it, each vote of the next
    /// generation starting from nothing, and every thread gets the same answer.
    #[test]
    fn votes_at_the_barrier_count_the_threads_that_reach_it() {
        let results = run_block(64, 32, |seat| {
            if seat.thread % 4 == 0 {
                return Ok(Vec::new()); // returned early: neither votes nor counts
            }
            let mut answers = Vec::new();
            for round in 0..3 {
                let vote = seat.thread % 2 == round % 2;
                answers.push(seat.wait_at_barrier(site(7), Some(vote))?);
            }
            answers.push(seat.wait_at_barrier(site(8), None)?);
            Ok::<_, Arc<str>>(answers)
        });
        // The 16 multiples of 4 return; of the 48 left, 16 are even and 32 odd.
        for (thread, result) in results.into_iter().enumerate() {
            let answers = result.unwrap();
            if thread % 4 == 0 {
                continue;
            }
            assert_eq!(
                answers,
                [(16, 48), (32, 48), (16, 48), (0, 48)],
                "thread {thread}"
            );
        }
    }

    #[test]
    fn a_broken_barrier_is_whole_again_in_the_next_block() {
        let block = BlockSync::new(4, 4);
        thread::scope(|scope| {
            for thread in 0..4 {
                let block = &block;
                scope.spawn(move || {
                    let seat = block.seat(thread);
                    seat.begin(0, [0; 3], || {});
                    let line = if thread == 0 { 1 } else { 2 };
                    assert!(barrier_at(&seat, line).is_err());
                    seat.end();
                    seat.begin(1, [1, 0, 0], || {});
                    assert!(barrier_at(&seat, 3).is_ok());
                    seat.end();
                });
            }
        });
    }
}
