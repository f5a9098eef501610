//! Runs a grid on OS threads: every emulated device thread is one OS thread, taken from a pool
//! that lives as long as the loaded module, so a launch starts no thread once the pool is big
//! enough. At most [`MAX_LIVE_THREADS`] threads run a grid at once: the blocks are dealt to
//! groups of `threads per block` pool threads, each group runs its blocks one after another,
//! and all threads of a group run one block together, so block barriers and warp operations
//! work (`warp.rs`). A launch with shared memory gives each group one region, filled with the
//! launch's poison before each of its blocks while no thread of the group is in one (GPUs do
//! not clear shared memory; zeroes would hide a read of memory no thread wrote). With the memory
//! checks on, the regions are in the checked memory and each thread has its part in the
//! launch's checks (`checks.rs`).

use super::arena::{Arena, Holds};
use super::checks::{self, LaunchChecks, ThreadChecks};
use super::warp::{self, BlockSync};
use crate::{BackendError, LaunchShape};
use gpurun_rpc::host_waits::ServerWaker;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

/// Upper bound on OS threads running one launch at once (and so on a pool's size).
pub const MAX_LIVE_THREADS: u64 = 4096;

pub(crate) use gpurun_abi::host::EnterThread;
use gpurun_abi::host::{HostThreadInfo, HOST_ABI_VERSION, HOST_SHARED_ALIGN};
use std::alloc::Layout;

/// Every host kernel is called through this type; the C ABI passes the first six integer
/// arguments and, numbered separately, the first eight floating-point ones in registers, so a
/// callee that takes fewer ignores the rest.
pub(crate) type KernelFn =
    unsafe extern "C" fn(u64, u64, u64, u64, u64, u64, f64, f64, f64, f64, f64, f64, f64, f64);

/// How many integer and floating-point arguments [`KernelFn`] passes.
pub(crate) const INTEGER_REGISTERS: usize = 6;
pub(crate) const FLOAT_REGISTERS: usize = 8;

/// The argument registers of one launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Registers {
    pub integer: [u64; INTEGER_REGISTERS],
    /// Bit patterns (an `f32` in the low half, as the callee reads it).
    pub float: [u64; FLOAT_REGISTERS],
}

/// Function pointers that are plain addresses, so they can cross to other threads.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    pub enter: EnterThread,
    pub kernel: KernelFn,
}

/// Where a block's threads are and how many threads a launch needs at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Deal {
    /// Threads of one block.
    per_block: u64,
    /// Groups of `per_block` threads running at once; group `g` runs blocks `g`, `g + groups`...
    groups: u64,
    blocks: u64,
}

impl Deal {
    fn of(shape: &LaunchShape) -> Deal {
        Deal::within(shape, MAX_LIVE_THREADS)
    }

    /// The deal with at most `live` threads at once (at least one block's).
    fn within(shape: &LaunchShape, live: u64) -> Deal {
        let per_block = shape.threads_per_block();
        let [gx, gy, gz] = shape.blocks.map(u64::from);
        let blocks = gx * gy * gz;
        let groups = (live / per_block).clamp(1, blocks);
        Deal {
            per_block,
            groups,
            blocks,
        }
    }

    fn threads(&self) -> u64 {
        self.per_block * self.groups
    }
}

/// One group's block-shared memory: [`HOST_SHARED_ALIGN`]-aligned, from the checked memory when
/// the checks are on, else from the heap; freed on drop.
struct SharedRegion {
    start: *mut u8,
    bytes: usize,
    /// `None`: from the arena.
    layout: Option<Layout>,
}

// SAFETY: a plain allocation owned by the launch; the device threads of one block share it as
// GPU shared memory is shared (what they do with it is the kernel's business), and the emulator
// fills it only while no thread of the group runs a block.
unsafe impl Send for SharedRegion {}
// SAFETY: as above.
unsafe impl Sync for SharedRegion {}

impl SharedRegion {
    fn new(bytes: usize, arena: Option<&'static Arena>) -> Result<SharedRegion, BackendError> {
        let no_memory = || {
            BackendError::InvalidArgument(format!("no memory for {bytes} bytes of shared memory"))
        };
        if let Some(arena) = arena {
            // The arena aligns to 256, a multiple of HOST_SHARED_ALIGN.
            let start = arena.alloc(bytes, Holds::Shared).ok_or_else(no_memory)?;
            return Ok(SharedRegion {
                start: start as *mut u8,
                bytes,
                layout: None,
            });
        }
        let layout =
            Layout::from_size_align(bytes.max(1), HOST_SHARED_ALIGN).map_err(|_| no_memory())?;
        // SAFETY: the layout has a non-zero size.
        let start = unsafe { std::alloc::alloc(layout) };
        if start.is_null() {
            return Err(no_memory());
        }
        Ok(SharedRegion {
            start,
            bytes,
            layout: Some(layout),
        })
    }

    /// Fills the region with `poison` for the group's next block.
    ///
    /// # Safety
    /// No thread may use the region meanwhile.
    unsafe fn poison(&self, poison: [u8; 4]) {
        // SAFETY: the region holds `bytes` bytes; the caller excludes other users.
        let region = unsafe { std::slice::from_raw_parts_mut(self.start, self.bytes) };
        checks::fill_poison(region, poison);
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        match self.layout {
            // SAFETY: allocated in `new` with this layout, freed once; the launch is over (its
            // last `Arc` is gone).
            Some(layout) => unsafe { std::alloc::dealloc(self.start, layout) },
            None => {
                if let Some(arena) = Arena::get() {
                    arena.free(self.start as usize);
                }
            }
        }
    }
}

/// What a launch checks: the arena its memory is in, the device buffers it may touch
/// (`(address, bytes)`), and the kernel's name for the reports.
pub(crate) struct CheckedMemory {
    pub arena: &'static Arena,
    pub buffers: Vec<(usize, usize)>,
    pub kernel: String,
}

/// One launch, shared by the pool threads that run it.
struct GridRun {
    entry: Entry,
    shape: LaunchShape,
    registers: Registers,
    lane_size: u32,
    deal: Deal,
    /// One per group (its barrier and warps), reused for each of the group's blocks.
    blocks: Vec<BlockSync>,
    /// With shared memory: one region per group, reused for each of the group's blocks.
    shared: Vec<SharedRegion>,
    /// What every block's shared memory holds when it begins.
    poison: [u8; 4],
    /// The order the blocks run in.
    order: BlockOrder,
    /// The launch's memory checks, when they are on (then the shared memory is in the arena).
    checks: Option<LaunchChecks>,
    /// Pool threads still running this launch.
    running: AtomicUsize,
    done: AtomicBool,
    /// The most CPU time (nanoseconds) one emulated thread spent running its blocks: the
    /// emulated device's time of the launch (see [`crate::launch_loop::Launch::device_time`]).
    busiest_thread_ns: AtomicU64,
    /// Wakes the serve loop sleeping on the RPC server when the last thread returns.
    waker: Option<ServerWaker>,
}

impl GridRun {
    /// Runs thread `member` of the launch: its place in every block of its group.
    fn run_member(&self, member: u64) {
        let group = member / self.deal.per_block;
        let local = member % self.deal.per_block;
        let [tx, ty, _] = self.shape.threads.map(u64::from);
        let thread_idx = [local % tx, local / tx % ty, local / (tx * ty)].map(|i| i as u32);
        let [gx, gy, _] = self.shape.blocks.map(u64::from);
        let thread_checks = self
            .checks
            .as_ref()
            .map(|checks| ThreadChecks::new(checks, group as usize, local as usize));
        let seat = self.blocks[group as usize]
            .seat(local as usize)
            .with_checks(thread_checks.as_ref());
        let seat_context = std::ptr::from_ref(&seat).cast();
        let shared = self.shared.get(group as usize);
        let cpu_before = thread_cpu_ns();
        // The group runs the `group`-th, `group + groups`-th ... blocks of the launch's order.
        let mut index = group;
        let mut round = 0;
        while index < self.deal.blocks {
            let block = self.order.block(index);
            let block_idx = [block % gx, block / gx % gy, block / (gx * gy)].map(|i| i as u32);
            seat.begin(round, block_idx, || {
                let Some(region) = shared else { return };
                match &self.checks {
                    Some(checks) => checks.begin_block(group as usize, region.start as usize),
                    // SAFETY: `begin` calls this while every thread of the group has returned
                    // from the previous block and none has begun this one.
                    None => unsafe { region.poison(self.poison) },
                }
            });
            let info = HostThreadInfo {
                abi_version: HOST_ABI_VERSION,
                lane_size: self.lane_size,
                thread_idx,
                block_idx,
                block_dim: self.shape.threads,
                grid_dim: self.shape.blocks,
                barrier_context: seat_context,
                barrier: Some(warp::wait_at_barrier),
                shared_memory: shared.map_or(std::ptr::null_mut(), |region| region.start),
                shared_memory_bytes: shared.map_or(0, |_| self.shape.shared_bytes as usize),
                warp_context: seat_context,
                warp_exchange: Some(warp::warp_exchange),
                sync_at: Some(warp::sync_at),
                check_access: self.checks.as_ref().map(|_| checks::check_access as _),
                take_report: self.checks.as_ref().map(|_| checks::take_report as _),
            };
            // SAFETY: `enter` and `kernel` come from the loaded image, which outlives the pool
            // (`HostPrimitives` drops the pool first); `info` and the seat its callbacks get
            // live on this stack, and the seat's block in `self`, until the kernel returns.
            unsafe {
                (self.entry.enter)(&info);
                let [a, b, c, d, e, f] = self.registers.integer;
                let [g, h, i, j, k, l, m, n] = self.registers.float.map(f64::from_bits);
                (self.entry.kernel)(a, b, c, d, e, f, g, h, i, j, k, l, m, n);
            }
            seat.end();
            index += self.deal.groups;
            round += 1;
        }
        self.busiest_thread_ns.fetch_max(
            thread_cpu_ns().saturating_sub(cpu_before),
            Ordering::Relaxed,
        );
        if self.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.store(true, Ordering::Release);
            if let Some(waker) = &self.waker {
                waker.wake();
            }
        }
    }
}

/// Work handed to one pool thread.
struct Job {
    run: Arc<GridRun>,
    member: u64,
}

/// One pool thread's mailbox.
struct Seat {
    job: Mutex<Option<Job>>,
    thread: Thread,
}

/// What the pool's threads share.
struct PoolShared {
    closing: AtomicBool,
}

/// The emulated threads of one loaded module, kept between launches. Dropping it ends and joins
/// the idle threads; a pool whose threads may still run a kernel (a timed-out launch) must be
/// leaked instead, as `LoadedModule` does with a broken module.
pub(crate) struct ThreadPool {
    stack_size: usize,
    shared: Arc<PoolShared>,
    seats: Vec<Arc<Seat>>,
    handles: Vec<JoinHandle<()>>,
}

impl ThreadPool {
    pub fn new(stack_size: usize) -> ThreadPool {
        ThreadPool {
            stack_size,
            shared: Arc::new(PoolShared {
                closing: AtomicBool::new(false),
            }),
            seats: Vec::new(),
            handles: Vec::new(),
        }
    }

    /// Grows the pool to `threads` threads.
    fn reserve(&mut self, threads: usize) -> Result<(), BackendError> {
        while self.seats.len() < threads {
            let shared = Arc::clone(&self.shared);
            let (seat_sender, seat_receiver) = std::sync::mpsc::sync_channel::<Arc<Seat>>(1);
            let handle = std::thread::Builder::new()
                .name("gpurun-emulated".into())
                .stack_size(self.stack_size)
                .spawn(move || {
                    if let Ok(seat) = seat_receiver.recv() {
                        serve_seat(&seat, &shared);
                    }
                })
                .map_err(|source| BackendError::Io {
                    context: format!(
                        "failed to start emulated thread {} of {threads}",
                        self.seats.len() + 1
                    ),
                    source,
                })?;
            let seat = Arc::new(Seat {
                job: Mutex::new(None),
                thread: handle.thread().clone(),
            });
            // The thread waits for its seat: the channel cannot be closed or full here.
            let _ = seat_sender.send(Arc::clone(&seat));
            self.seats.push(seat);
            self.handles.push(handle);
        }
        Ok(())
    }
}

/// A pool thread: runs the jobs put in its seat until the pool closes.
fn serve_seat(seat: &Seat, shared: &PoolShared) {
    loop {
        let job = seat
            .job
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match job {
            Some(job) => job.run.run_member(job.member),
            None if shared.closing.load(Ordering::Acquire) => return,
            // A job put in before the park leaves a token: park returns at once.
            None => std::thread::park(),
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        for seat in &self.seats {
            seat.thread.unpark();
        }
        for handle in self.handles.drain(..) {
            let _ = handle.join();
        }
    }
}

/// How the emulator runs a launch, beyond its shape and arguments.
pub(crate) struct LaunchSetting {
    pub lane_size: u32,
    /// Wakes the serve loop sleeping on the RPC server when the last thread returns.
    pub waker: Option<ServerWaker>,
    /// The launch's seed: the poison every block's shared memory begins with, the order the
    /// blocks run in, and where checked threads yield.
    pub seed: u64,
    /// The run's seed, which the launch's derives from: what the reports name.
    pub run_seed: u64,
    /// The memory checks, when they are on.
    pub checked: Option<CheckedMemory>,
}

/// The order a launch runs its blocks in, a permutation drawn from its seed: `index` to
/// `(step * index + offset) % blocks`, with `step` coprime to `blocks`. GPUs promise no order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BlockOrder {
    blocks: u64,
    step: u64,
    offset: u64,
}

impl BlockOrder {
    fn of(blocks: u64, seed: u64) -> BlockOrder {
        let mixed = checks::splitmix64(seed);
        let blocks = blocks.max(1);
        let mut step = (mixed >> 32) % blocks;
        while gcd(step, blocks) != 1 {
            step = (step + 1) % blocks;
        }
        BlockOrder {
            blocks,
            step,
            offset: mixed % blocks,
        }
    }

    /// The block that runs `index`-th.
    fn block(&self, index: u64) -> u64 {
        ((u128::from(self.step) * u128::from(index) + u128::from(self.offset))
            % u128::from(self.blocks)) as u64
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A launch in progress: poll [`Grid::finished`] while serving RPC.
pub(crate) struct Grid {
    run: Arc<GridRun>,
}

impl Grid {
    /// Starts the grid on `pool`'s threads. Returns at once; the threads run in the background.
    pub fn start(
        pool: &mut ThreadPool,
        entry: Entry,
        shape: LaunchShape,
        registers: Registers,
        setting: LaunchSetting,
    ) -> Result<Grid, BackendError> {
        // The shape was checked by `crate::module::check_shape`: at most 1024 threads a block.
        let deal = Deal::of(&shape);
        Grid::start_dealt(pool, entry, (shape, deal), registers, setting)
    }

    /// [`Grid::start`] with the blocks dealt as `deal` says.
    fn start_dealt(
        pool: &mut ThreadPool,
        entry: Entry,
        (shape, deal): (LaunchShape, Deal),
        registers: Registers,
        setting: LaunchSetting,
    ) -> Result<Grid, BackendError> {
        let LaunchSetting {
            lane_size,
            waker,
            seed,
            run_seed,
            checked,
        } = setting;
        let poison = checks::poison_of(seed);
        let order = BlockOrder::of(deal.blocks, seed);
        let threads = deal.threads() as usize;
        let arena = checked.as_ref().map(|checked| checked.arena);
        let shared = if shape.shared_bytes > 0 {
            // The module checked the size against `MAX_SHARED_BYTES`.
            (0..deal.groups)
                .map(|_| SharedRegion::new(shape.shared_bytes as usize, arena))
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let checks = checked.map(|checked| {
            let regions: Vec<usize> = shared.iter().map(|region| region.start as usize).collect();
            LaunchChecks::new(
                (&checked.kernel, shape, lane_size),
                checked.arena,
                &checked.buffers,
                &regions,
                (poison, seed, run_seed),
            )
        });
        pool.reserve(threads)?;
        let run = Arc::new(GridRun {
            entry,
            shape,
            registers,
            lane_size,
            deal,
            blocks: (0..deal.groups)
                .map(|_| BlockSync::new(deal.per_block as usize, lane_size))
                .collect(),
            shared,
            poison,
            order,
            checks,
            running: AtomicUsize::new(threads),
            done: AtomicBool::new(false),
            busiest_thread_ns: AtomicU64::new(0),
            waker,
        });
        for (member, seat) in pool.seats[..threads].iter().enumerate() {
            let job = Job {
                run: Arc::clone(&run),
                member: member as u64,
            };
            *seat.job.lock().unwrap_or_else(PoisonError::into_inner) = Some(job);
            seat.thread.unpark();
        }
        Ok(Grid { run })
    }
}

impl crate::launch_loop::Launch for Grid {
    fn state(&self) -> crate::launch_loop::LaunchState {
        // A crash of an emulated thread ends the worker process: there is no fault state.
        if self.run.done.load(Ordering::Acquire) {
            crate::launch_loop::LaunchState::Done
        } else {
            crate::launch_loop::LaunchState::Running
        }
    }

    /// The CPU time of the emulated thread that computed longest, where a GPU would run every
    /// thread at once: what the launch costs, whatever share of a core the OS gave each thread
    /// (on a loaded machine the launch's wall time followed the load, up to ninefold for an
    /// unchanged benchmark). Time a thread spends blocked (at a barrier, on the host's RPC
    /// answer) is not in it.
    fn device_time(&self) -> Option<Duration> {
        if !self.run.done.load(Ordering::Acquire) {
            return None;
        }
        Some(Duration::from_nanos(
            self.run.busiest_thread_ns.load(Ordering::Relaxed),
        ))
    }

    fn finish(self: Box<Self>, _settled: bool) {
        // Nothing to join: the pool threads go back to their seats. An unsettled launch leaves
        // the module broken, and a broken module's pool is never dropped or used again.
    }
}

/// CPU time the calling thread has used, in nanoseconds (0 where the clock cannot be read).
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec, which lives on this stack.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return 0;
    }
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_dealt_to_as_many_groups_as_fit_the_thread_limit() {
        let shape = |threads: u32, blocks: u32| LaunchShape::grid([blocks, 1, 1], [threads, 1, 1]);
        assert_eq!(Deal::of(&shape(1, 1)).threads(), 1);
        assert_eq!(Deal::of(&shape(256, 4)).threads(), 1024);
        let many = Deal::of(&shape(1024, 100));
        assert_eq!((many.groups, many.threads()), (4, 4096));
        let single_threads = Deal::of(&shape(1, 10_000));
        assert_eq!(single_threads.threads(), MAX_LIVE_THREADS);
    }

    static SEEN: Mutex<Vec<([u32; 3], [u32; 3])>> = Mutex::new(Vec::new());

    unsafe extern "C" fn record_enter(info: *const HostThreadInfo) {
        // SAFETY: the pool passes a valid record.
        let info = unsafe { *info };
        SEEN.lock().unwrap().push((info.thread_idx, info.block_idx));
        // SAFETY: the pool's barrier callback and its context are valid during the kernel.
        unsafe { (info.barrier.unwrap())(info.barrier_context) };
    }

    /// Defines a test kernel of the [`KernelFn`] signature that ignores its register arguments
    /// (the test kernels read what they need from their thread's record instead).
    macro_rules! kernel_ignoring_arguments {
        ($(#[$attribute:meta])* $name:ident $body:block) => {
            $(#[$attribute])*
            unsafe extern "C" fn $name(
                _: u64, _: u64, _: u64, _: u64, _: u64, _: u64,
                _: f64, _: f64, _: f64, _: f64, _: f64, _: f64, _: f64, _: f64,
            ) $body
        };
    }

    kernel_ignoring_arguments!(nothing {});

    const SEED: u64 = 17;

    /// A launch without memory checks.
    fn plain(lane_size: u32) -> LaunchSetting {
        LaunchSetting {
            lane_size,
            waker: None,
            seed: SEED,
            run_seed: 1,
            checked: None,
        }
    }

    #[test]
    fn the_block_order_is_a_permutation_drawn_from_the_seed() {
        for blocks in [1u64, 2, 6, 7, 64, 1000] {
            for seed in 0..20 {
                let order = BlockOrder::of(blocks, seed);
                let mut seen: Vec<u64> = (0..blocks).map(|index| order.block(index)).collect();
                seen.sort_unstable();
                assert_eq!(seen, (0..blocks).collect::<Vec<_>>(), "{blocks} blocks");
            }
        }
        let orders: Vec<Vec<u64>> = (0..5)
            .map(|seed| {
                let order = BlockOrder::of(64, seed);
                (0..64).map(|index| order.block(index)).collect()
            })
            .collect();
        assert!(orders.windows(2).any(|pair| pair[0] != pair[1]));
    }

    #[test]
    fn every_thread_of_every_block_runs_once_and_the_pool_is_reused() {
        use crate::launch_loop::{Launch, LaunchState};
        let mut pool = ThreadPool::new(1 << 16);
        let entry = Entry {
            enter: record_enter,
            kernel: nothing,
        };
        let shape = LaunchShape::grid([2, 1, 2], [2, 3, 1]);
        for _ in 0..3 {
            SEEN.lock().unwrap().clear();
            let grid =
                Grid::start(&mut pool, entry, shape, Registers::default(), plain(1)).unwrap();
            while grid.state() == LaunchState::Running {
                // A sleep, not a yield: a yielding waiter starves on a loaded machine.
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            Box::new(grid).finish(true);
            let mut seen = SEEN.lock().unwrap().clone();
            seen.sort();
            let mut expected = Vec::new();
            for (bx, bz) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                for (tx, ty) in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)] {
                    expected.push(([tx, ty, 0], [bx, 0, bz]));
                }
            }
            expected.sort();
            assert_eq!(seen, expected);
            assert_eq!(pool.seats.len(), 24);
        }
    }

    /// What each thread of the shared-memory launch saw: (block, thread, region address,
    /// region bytes, its slot's value when the block started).
    type SharedSeen = (u32, u32, usize, usize, u64);
    static SHARED_SEEN: Mutex<Vec<SharedSeen>> = Mutex::new(Vec::new());

    thread_local! {
        static ENTERED: std::cell::Cell<HostThreadInfo> =
            const { std::cell::Cell::new(HostThreadInfo::UNSET) };
    }

    unsafe extern "C" fn remember_enter(info: *const HostThreadInfo) {
        // SAFETY: the pool passes a valid record.
        ENTERED.with(|entered| entered.set(unsafe { *info }));
    }

    kernel_ignoring_arguments!(
        /// Reads this thread's slot of the block's shared memory, waits for the whole block,
        /// then writes into the slot what the next block would see if the emulator did not
        /// poison it again.
        use_shared_memory {
            let info = ENTERED.with(std::cell::Cell::get);
            let slot = info
                .shared_memory
                .cast::<u64>()
                .wrapping_add(info.thread_idx[0] as usize);
            // SAFETY: the region holds a u64 per thread (the test's launch), aligned; each thread
            // touches only its own slot, and the barrier callback is valid during the kernel.
            unsafe {
                let before = slot.read();
                SHARED_SEEN.lock().unwrap().push((
                    info.block_idx[0],
                    info.thread_idx[0],
                    info.shared_memory as usize,
                    info.shared_memory_bytes,
                    before,
                ));
                (info.barrier.unwrap())(info.barrier_context);
                slot.write(u64::from(info.block_idx[0]) + 100);
            }
        }
    );

    #[test]
    fn each_block_begins_with_its_groups_region_poisoned() {
        use crate::launch_loop::{Launch, LaunchState};
        let mut pool = ThreadPool::new(1 << 16);
        let entry = Entry {
            enter: remember_enter,
            kernel: use_shared_memory,
        };
        let shape = LaunchShape::blocks(5).threads(4).shared_bytes(32);
        // Two groups of 4 threads: each runs two or three blocks in its one region.
        let deal = Deal::within(&shape, 8);
        assert_eq!(deal.groups, 2);
        let grid = Grid::start_dealt(
            &mut pool,
            entry,
            (shape, deal),
            Registers::default(),
            plain(1),
        )
        .unwrap();
        while grid.state() == LaunchState::Running {
            std::thread::yield_now();
        }
        Box::new(grid).finish(true);
        let seen = SHARED_SEEN.lock().unwrap().clone();
        assert_eq!(seen.len(), 20, "{seen:?}");
        let poison = checks::poison_of(SEED);
        let poison = u64::from_le_bytes([poison, poison].concat().try_into().unwrap());
        for &(block, thread, address, bytes, before) in &seen {
            assert_eq!(
                before, poison,
                "block {block} thread {thread} saw what another block left"
            );
            assert_eq!(bytes, 32);
            assert_eq!(address % HOST_SHARED_ALIGN, 0);
        }
        // The blocks of one group (three, and two: the seed says which) share its region; the
        // groups' differ.
        let mut regions: Vec<(usize, Vec<u32>)> = Vec::new();
        for &(block, _, address, _, _) in &seen {
            match regions.iter_mut().find(|(region, _)| *region == address) {
                Some((_, blocks)) if blocks.contains(&block) => {}
                Some((_, blocks)) => blocks.push(block),
                None => regions.push((address, vec![block])),
            }
        }
        let mut sizes: Vec<usize> = regions.iter().map(|(_, blocks)| blocks.len()).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [2, 3], "{regions:?}");
    }
}
