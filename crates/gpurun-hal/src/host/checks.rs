//! The memory checks of the host emulation, emulator side: what an instrumented image's hooks
//! ask about each access to the checked memory ([`super::arena`]), answered from shadow state
//! kept per launch, with reports worded like compute-sanitizer's:
//!
//! - **memcheck**: an access outside every device buffer and outside its block's shared memory
//!   (in the gap after a buffer, before it, in freed memory, past the launch's shared bytes);
//! - **initcheck**: a read of shared memory that no thread of the block wrote since the block
//!   began (GPUs do not clear it: the emulation fills it with a poison pattern instead);
//! - **racecheck**: two accesses to the same bytes of shared memory or a device buffer by
//!   different threads, at least one a write and not both atomic, that nothing orders.
//!
//! Races are found by happens-before, not by catching an unlucky interleaving, so a racy kernel
//! is reported on every run. What orders two accesses of a launch on a GPU: program order
//! within a thread; a block barrier between them (each thread counts the barriers it passed:
//! its epoch); `warp::sync` among lanes of one warp (a vector clock per lane, joined at each
//! sync). Shuffles and votes do not order memory (CUDA: "do not imply a memory barrier"), and
//! nothing orders two blocks of one launch. Atomics never race with atomics of their scope: a
//! block-scope one (`gpurun::atomic::Scope::Block`) races with any access of another block, as
//! on NVIDIA, where it is atomic only within its block. Ordering through atomics (a flag with
//! release and acquire, the last-block pattern) is not modelled, so plain accesses ordered only
//! that way are reported.
//!
//! The shadow state is one [`Granule`] per 4 bytes, made on first use: the last write and the
//! last reads of two threads, each with its thread, epoch, clock and call stack, and for shared
//! memory which bytes the block wrote. Sub-word accesses of different threads to one granule
//! can hide each other (the last write wins), which may miss a race there, never invent one.
//!
//! A thread reports its first finding only (as a panic at the kernel's line, see
//! `gpurun`'s `arch/checks.rs`) and goes on: the access lands in memory of the arena, which
//! nothing else uses.

use super::arena::{Allocation, Arena, Holds};
use super::symbols::{self, SourceLocation};
use crate::LaunchShape;
use gpurun_abi::host::{AccessCheck, AtomicOp, CheckReport, MAX_LANES};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{self, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

/// Return addresses kept per access: enough to climb out of the device runtime and a few
/// layers of `core` to the kernel's own line (a debug build inlines nothing).
pub(crate) const FRAMES: usize = 8;

/// The checks of one launch.
pub(crate) struct LaunchChecks {
    kernel: String,
    shape: LaunchShape,
    lane_size: usize,
    arena: &'static Arena,
    /// The memory this launch may touch, by address: its device buffers, and one block's shared
    /// memory per group of the deal.
    objects: Vec<Object>,
    /// The bytes every block's shared memory starts with.
    poison: [u8; 4],
    /// The launch's seed (where threads yield), and the run's (what the reports name: the
    /// launch's derives from it, and it is what replays the run).
    seed: u64,
    run_seed: u64,
    /// The call stacks of recorded accesses, by number (a race report names the other access's
    /// line from its stack).
    stacks: Mutex<Stacks>,
}

#[derive(Default)]
struct Stacks {
    list: Vec<[usize; FRAMES]>,
    numbers: HashMap<[usize; FRAMES], u32>,
}

struct Object {
    start: usize,
    len: usize,
    what: What,
    shadow: Shadow,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum What {
    Buffer,
    /// The shared memory of the blocks group `group` runs, one after another.
    Shared {
        group: usize,
    },
}

/// Granules of shadow state per chunk, made on a chunk's first access.
const CHUNK: usize = 1024;

/// One [`Granule`] per 4 bytes of an object.
struct Shadow {
    chunks: Vec<OnceLock<Box<[Mutex<Granule>]>>>,
}

impl Shadow {
    fn new(bytes: usize) -> Shadow {
        Shadow {
            chunks: (0..bytes.div_ceil(4).div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
        }
    }

    fn granule(&self, index: usize) -> MutexGuard<'_, Granule> {
        let chunk = self.chunks[index / CHUNK]
            .get_or_init(|| (0..CHUNK).map(|_| Mutex::new(Granule::default())).collect());
        // Nothing panics while holding a granule; a poisoned one is still consistent.
        chunk[index % CHUNK]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets everything (a new block begins in the shared memory).
    fn clear(&self) {
        for chunk in self.chunks.iter().filter_map(OnceLock::get) {
            for granule in chunk.iter() {
                *granule.lock().unwrap_or_else(PoisonError::into_inner) = Granule::default();
            }
        }
    }
}

/// What is known about 4 bytes of checked memory.
#[derive(Clone, Copy, Default)]
struct Granule {
    /// Shared memory: the bytes (bit per byte) a thread of the running block wrote.
    written: u8,
    last_write: Access,
    /// The last reads of two different threads (the newest first).
    reads: [Access; 2],
}

/// One recorded access: who, when in the happens-before order, and from where.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Access {
    /// `AccessCheck` kind bits; 0: no access recorded.
    kind: u8,
    /// The bytes of the granule (bit per byte).
    bytes: u8,
    thread: u16,
    /// The block, by linear index in the grid.
    block: u32,
    /// Barriers the thread had passed in its block.
    epoch: u32,
    /// The thread's own entry of its warp clock.
    clock: u32,
    /// Its call stack, by number in [`Stacks`].
    stack: u32,
}

impl Access {
    fn writes(&self) -> bool {
        u32::from(self.kind) & AccessCheck::WRITE != 0
    }

    fn atomic(&self) -> bool {
        u32::from(self.kind) & AccessCheck::ATOMIC != 0
    }

    fn block_scoped(&self) -> bool {
        u32::from(self.kind) & AccessCheck::BLOCK_SCOPE != 0
    }
}

/// What a thread found, before the locations in it are known.
enum Finding {
    Plain(String),
    /// `before`, the other access's location, `after`.
    Race {
        before: String,
        other: u32,
        after: String,
    },
}

impl LaunchChecks {
    /// The checks of a launch of `kernel` with `shape` over `buffers` (live allocations of the
    /// arena) and the groups' shared memory regions `shared` (index: group).
    pub fn new(
        launch: (&str, LaunchShape, u32),
        arena: &'static Arena,
        buffers: &[(usize, usize)],
        shared: &[usize],
        (poison, seed, run_seed): ([u8; 4], u64, u64),
    ) -> LaunchChecks {
        let (kernel, shape, lane_size) = launch;
        let bytes = shape.shared_bytes as usize;
        let mut objects: Vec<Object> = buffers
            .iter()
            .map(|&(start, len)| Object {
                start,
                len,
                what: What::Buffer,
                shadow: Shadow::new(len),
            })
            .chain(shared.iter().enumerate().map(|(group, &start)| Object {
                start,
                len: bytes,
                what: What::Shared { group },
                shadow: Shadow::new(bytes),
            }))
            .collect();
        objects.sort_by_key(|object| object.start);
        LaunchChecks {
            kernel: kernel.to_string(),
            shape,
            lane_size: lane_size.max(1) as usize,
            arena,
            objects,
            poison,
            seed,
            run_seed,
            stacks: Mutex::default(),
        }
    }

    /// Starts a block of group `group`: its shared memory (at `start`) holds the poison and
    /// nothing in it has been written or read. Called while no thread of the group runs a block.
    pub fn begin_block(&self, group: usize, start: usize) {
        let bytes = self.shape.shared_bytes as usize;
        // SAFETY: the group's region of `bytes` bytes, which no thread uses meanwhile.
        let region = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, bytes) };
        fill_poison(region, self.poison);
        if let Some(object) = self
            .objects
            .iter()
            .find(|object| object.what == What::Shared { group })
        {
            object.shadow.clear();
        }
    }

    /// The number of call stack `pcs`.
    fn stack_number(&self, pcs: &[usize; FRAMES]) -> u32 {
        let mut stacks = self.stacks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&number) = stacks.numbers.get(pcs) {
            return number;
        }
        let number = stacks.list.len() as u32;
        stacks.list.push(*pcs);
        stacks.numbers.insert(*pcs, number);
        number
    }

    fn stack(&self, number: u32) -> [usize; FRAMES] {
        let stacks = self.stacks.lock().unwrap_or_else(PoisonError::into_inner);
        stacks
            .list
            .get(number as usize)
            .copied()
            .unwrap_or_default()
    }

    /// The object holding all of `[address, address + size)`, if any.
    fn object(&self, address: usize, size: usize) -> Option<&Object> {
        let after = self
            .objects
            .partition_point(|object| object.start <= address);
        let object = &self.objects[after.checked_sub(1)?];
        (address.checked_add(size)? <= object.end()).then_some(object)
    }

    /// Checks one access of `thread` (whose call stack is number `stack`) and records it;
    /// returns what to report, if anything.
    fn check(&self, thread: &ThreadChecks, access: &AccessCheck, stack: u32) -> Option<Finding> {
        if access.size == 0 {
            return None;
        }
        let Some(object) = self.object(access.address, access.size) else {
            return Some(Finding::Plain(self.out_of_bounds(thread, access)));
        };
        let shared = match object.what {
            What::Shared { group } if group != thread.group => {
                return Some(Finding::Plain(self.out_of_bounds(thread, access)));
            }
            What::Shared { .. } => true,
            What::Buffer => false,
        };
        let offset = access.address - object.start;
        let now = thread.access(access.kind, stack);
        let mut unwritten = Vec::new();
        let mut race = None;
        let end = offset + access.size;
        for index in offset / 4..end.div_ceil(4) {
            let first = (index * 4).max(offset);
            let last = (index * 4 + 4).min(end);
            let bytes = ((1u16 << (last - first)) - 1) << (first - index * 4);
            let now = Access {
                bytes: bytes as u8,
                ..now
            };
            let mut granule = object.shadow.granule(index);
            if shared && access.kind & AccessCheck::READ != 0 {
                let missing = now.bytes & !granule.written;
                unwritten.extend(
                    (0..4)
                        .filter(|bit| missing >> bit & 1 == 1)
                        .map(|bit| index * 4 + bit as usize - offset),
                );
            }
            if race.is_none() {
                race = [granule.last_write, granule.reads[0], granule.reads[1]]
                    .into_iter()
                    .find(|earlier| self.races(thread, earlier, &now));
            }
            record(&mut granule, now);
        }
        if !unwritten.is_empty() {
            return Some(Finding::Plain(
                self.uninitialised(thread, access, offset, &unwritten),
            ));
        }
        let earlier = race?;
        Some(self.race(thread, access, object, offset, earlier))
    }

    /// Whether `earlier` and `now` (of `thread`) are a race: the same bytes, different threads,
    /// one a write, not both atomic in each other's scope, and nothing orders `earlier` before
    /// `now`.
    fn races(&self, thread: &ThreadChecks, earlier: &Access, now: &Access) -> bool {
        earlier.kind != 0
            && earlier.bytes & now.bytes != 0
            && (earlier.block, earlier.thread) != (now.block, now.thread)
            && (earlier.writes() || now.writes())
            && !(earlier.atomic() && now.atomic() && !outside_scope(earlier, now))
            && !self.ordered(thread, earlier, now)
    }

    /// Whether `earlier` happened before `now`, an access of `thread` that sees it: both in one
    /// block, and a barrier between them, or a `warp::sync` after `earlier` that `thread` took
    /// part in (directly or through other lanes).
    fn ordered(&self, thread: &ThreadChecks, earlier: &Access, now: &Access) -> bool {
        if earlier.block != now.block {
            return false;
        }
        if earlier.epoch < now.epoch {
            return true;
        }
        let (warp, lane) = (
            earlier.thread as usize / self.lane_size,
            earlier.thread as usize % self.lane_size,
        );
        warp == thread.thread / self.lane_size && thread.clock.borrow()[lane] >= earlier.clock
    }

    /// `block (x, y, z), thread (x, y, z)` of the thread with linear indices `block` (in the
    /// grid) and `thread` (in the block).
    fn name(&self, block: u32, thread: u32) -> String {
        let [tx, ty, _] = self.shape.threads;
        let [gx, gy, _] = self.shape.blocks;
        let [x, y, z] = [thread % tx, thread / tx % ty, thread / (tx * ty)];
        let [bx, by, bz] = [block % gx, block / gx % gy, block / (gx * gy)];
        format!("block ({bx}, {by}, {bz}), thread ({x}, {y}, {z})")
    }

    fn who(&self, thread: &ThreadChecks) -> String {
        self.name(thread.block.get(), thread.thread as u32)
    }

    /// `kernel `k`, emulation seed N`: what ends every report.
    fn launch(&self) -> String {
        format!("kernel `{}`, emulation seed {}", self.kernel, self.run_seed)
    }

    fn race(
        &self,
        thread: &ThreadChecks,
        access: &AccessCheck,
        object: &Object,
        offset: usize,
        earlier: Access,
    ) -> Finding {
        let place = match object.what {
            What::Shared { .. } => format!("shared memory at offset {offset}"),
            What::Buffer => format!(
                "the {}-byte device buffer at {:#x}, at offset {offset}",
                object.len, object.start
            ),
        };
        let earlier_kind = describe_kind(u32::from(earlier.kind), "access");
        let now = Access {
            kind: access.kind as u8,
            block: thread.block.get(),
            ..earlier
        };
        let why = if outside_scope(&earlier, &now) {
            "a block-scope atomic is atomic only among the threads of its block, and these are \
             in different blocks (on NVIDIA the updates can be lost; use Scope::Device)"
        } else if earlier.block == thread.block.get() {
            "no barrier, warp::sync or pair of atomics orders them"
        } else {
            "they are in different blocks, which nothing orders within a launch"
        };
        Finding::Race {
            before: format!(
                "racecheck: data race on {place}: this {} of {} bytes by {} and an earlier {} by \
                 {} at ",
                describe_kind(access.kind, "access"),
                access.size,
                self.who(thread),
                earlier_kind,
                self.name(earlier.block, u32::from(earlier.thread)),
            ),
            other: earlier.stack,
            after: format!(": {why} ({})", self.launch()),
        }
    }

    fn uninitialised(
        &self,
        thread: &ThreadChecks,
        access: &AccessCheck,
        offset: usize,
        unwritten: &[usize],
    ) -> String {
        let which = if unwritten.len() == access.size {
            String::new()
        } else {
            let list: Vec<String> = unwritten.iter().map(usize::to_string).collect();
            format!(" (its bytes {} are)", list.join(", "))
        };
        format!(
            "initcheck: uninitialised {} of {} bytes of shared memory at offset {offset}{which} \
             by {}: no thread of the block wrote them since the block began (on a GPU they hold \
             whatever an earlier block left there; the emulation fills shared memory with the \
             bytes {}) ({})",
            describe_kind(access.kind, "read"),
            access.size,
            self.who(thread),
            poison_text(self.poison),
            self.launch(),
        )
    }

    fn out_of_bounds(&self, thread: &ThreadChecks, access: &AccessCheck) -> String {
        let where_ = self.describe_address(thread, access.address, access.size);
        format!(
            "memcheck: invalid {} of {} bytes at {:#x} by {}: {where_} ({})",
            describe_kind(access.kind, "access"),
            access.size,
            access.address,
            self.who(thread),
            self.launch(),
        )
    }
    /// Where `[address, address + size)` is, for a memcheck report.
    fn describe_address(&self, thread: &ThreadChecks, address: usize, size: usize) -> String {
        let bytes = self.shape.shared_bytes;
        // This block's shared memory: any address past it or just before it is about it.
        let own_shared = self.objects.iter().find(
            |object| matches!(object.what, What::Shared { group, .. } if group == thread.group),
        );
        if let Some(shared) = own_shared {
            let near = address >= shared.start.saturating_sub(super::arena::GAP)
                && address < shared.end() + super::arena::GAP;
            if near {
                let offset = address as i128 - shared.start as i128;
                return format!(
                    "it reaches shared memory at offset {offset}, but the launch gives each \
                     block {bytes} bytes of it (`shared_bytes`)"
                );
            }
        }
        let (before, after) = self.arena.around(address);
        if let Some(allocation) = before.filter(|allocation| address < allocation.end()) {
            // Inside an allocation that is not this launch's: freed, or another block's.
            return match (allocation.freed, allocation.holds) {
                (true, Holds::Buffer) => format!(
                    "it is inside a {}-byte device buffer at {:#x} that was freed",
                    allocation.len, allocation.start
                ),
                (true, Holds::Shared) => "it is inside the shared memory of an earlier launch \
                                          (a pointer kept past its kernel)"
                    .to_string(),
                (false, Holds::Shared) => "it is inside another block's shared memory (on a GPU \
                                           a block sees only its own)"
                    .to_string(),
                (false, Holds::Buffer) => format!(
                    "its last {} bytes are after the end of the {}-byte device buffer at {:#x}",
                    address + size - allocation.end(),
                    allocation.len,
                    allocation.start
                ),
            };
        }
        let past = before.map(|allocation| (address - allocation.end(), allocation));
        let ahead = after.map(|allocation| (allocation.start - address, allocation));
        let nearest = match (past, ahead) {
            (Some(past), Some(ahead)) if ahead.0 < past.0 => Some((false, ahead)),
            (Some(past), _) => Some((true, past)),
            (None, Some(ahead)) => Some((false, ahead)),
            (None, None) => None,
        };
        match nearest {
            Some((is_past, (distance, allocation))) => {
                let what = describe_allocation(&allocation);
                if is_past {
                    format!("it is {distance} bytes after the end of {what}")
                } else {
                    format!("it is {distance} bytes before the start of {what}")
                }
            }
            None => "it is in no device buffer".to_string(),
        }
    }
}

fn describe_allocation(allocation: &Allocation) -> String {
    let freed = if allocation.freed { "freed " } else { "" };
    match allocation.holds {
        Holds::Buffer => format!(
            "the {freed}{}-byte device buffer at {:#x}",
            allocation.len, allocation.start
        ),
        Holds::Shared => format!(
            "the {freed}{}-byte shared memory of a block at {:#x}",
            allocation.len, allocation.start
        ),
    }
}

impl Object {
    fn end(&self) -> usize {
        self.start + self.len
    }
}

/// Adds `now` to what `granule` knows.
fn record(granule: &mut Granule, now: Access) {
    if now.writes() {
        granule.written |= now.bytes;
        granule.last_write = now;
        // Each read before it is ordered before it or raced with it (and was reported): an
        // access that would conflict with one of them conflicts with this write too.
        granule.reads = [Access::default(); 2];
        return;
    }
    let by_now = |read: &Access| (read.block, read.thread) == (now.block, now.thread);
    if by_now(&granule.reads[0]) {
        granule.reads[0] = Access {
            bytes: granule.reads[0].bytes | now.bytes,
            ..now
        };
    } else {
        granule.reads[1] = granule.reads[0];
        granule.reads[0] = now;
    }
}

/// `read`, `write`, `atomic read-modify-write`...: what an access of `kind` does.
fn describe_kind(kind: u32, plain: &str) -> String {
    let read = kind & AccessCheck::READ != 0;
    let write = kind & AccessCheck::WRITE != 0;
    let what = match (read, write) {
        (true, true) => "read-modify-write",
        (true, false) => "read",
        (false, true) => "write",
        (false, false) => plain,
    };
    if kind & AccessCheck::BLOCK_SCOPE != 0 {
        format!("block-scope atomic {what}")
    } else if kind & AccessCheck::ATOMIC != 0 {
        format!("atomic {what}")
    } else {
        what.to_string()
    }
}

/// Whether two accesses are in different blocks and one of them is a block-scope atomic: not
/// atomic with each other, whatever else they are.
fn outside_scope(earlier: &Access, now: &Access) -> bool {
    earlier.block != now.block && (earlier.block_scoped() || now.block_scoped())
}

fn poison_text(poison: [u8; 4]) -> String {
    let mut text = String::new();
    for byte in poison {
        let _ = write!(text, "{byte:#04x} ");
    }
    format!("{} repeated", text.trim_end())
}

/// Fills `region` with `poison` repeated.
pub(crate) fn fill_poison(region: &mut [u8], poison: [u8; 4]) {
    for (index, byte) in region.iter_mut().enumerate() {
        *byte = poison[index % 4];
    }
}

/// The poison of a launch: four bytes from `seed`, none zero (zero is what a read of memory a
/// GPU happened to clear would give, which hides the bug).
pub(crate) fn poison_of(seed: u64) -> [u8; 4] {
    let mixed = splitmix64(seed);
    let mut poison = (mixed as u32).to_le_bytes();
    for byte in &mut poison {
        *byte |= 0x80;
    }
    poison
}

/// A fast, well-mixed hash of one word (splitmix64's finaliser).
pub(crate) fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One emulated thread's part in the checks of a launch: who it is, where it is in the
/// happens-before order, and what it found.
pub(crate) struct ThreadChecks<'a> {
    launch: &'a LaunchChecks,
    /// Its group (whose shared memory is its block's) and linear index in the block.
    group: usize,
    thread: usize,
    /// The block it runs, by linear index in the grid.
    block: Cell<u32>,
    /// Barriers it passed in this block.
    epoch: Cell<u32>,
    /// Its warp's vector clock as it knows it: entry `lane` is how far the lane had got when it
    /// last synchronised (through `warp::sync`) with this one; its own entry is its own time.
    clock: RefCell<[u32; MAX_LANES]>,
    /// The bounds of its OS thread's stack, for the frame walks.
    stack: (usize, usize),
    /// The last call stack it numbered, and its number: accesses in a loop share one.
    last_stack: Cell<([usize; FRAMES], u32)>,
    /// Where it is in its seeded sequence of yields.
    yields: Cell<u64>,
    /// Set once the thread has reported in its block; it reports nothing more there.
    reported: Cell<bool>,
    pending: RefCell<Option<Pending>>,
}

/// A finding waiting for the device runtime to take it, with the stack of the access.
struct Pending {
    finding: Finding,
    pcs: [usize; FRAMES],
}

impl<'a> ThreadChecks<'a> {
    /// The checks of thread `thread` (linear index in its block) of group `group`, on the
    /// calling thread (whose stack the frame walks stay in).
    pub fn new(launch: &'a LaunchChecks, group: usize, thread: usize) -> ThreadChecks<'a> {
        ThreadChecks {
            launch,
            group,
            thread,
            block: Cell::new(0),
            epoch: Cell::new(0),
            clock: RefCell::new([0; MAX_LANES]),
            stack: symbols::current_stack(),
            last_stack: Cell::new(([usize::MAX; FRAMES], 0)),
            yields: Cell::new(0),
            reported: Cell::new(false),
            pending: RefCell::new(None),
        }
    }

    /// The thread starts block `block_idx`: a new thread as far as ordering and reports go.
    pub fn begin_block(&self, block_idx: [u32; 3]) {
        self.reported.set(false);
        let [gx, gy, _] = self.launch.shape.blocks;
        let [x, y, z] = block_idx;
        let block = x + gx * (y + gy * z);
        self.block.set(block);
        self.epoch.set(0);
        let mut clock = [0; MAX_LANES];
        // Its own time starts past every entry others hold of it (0): nothing of it is known.
        clock[self.lane()] = 1;
        *self.clock.borrow_mut() = clock;
        self.yields.set(splitmix64(
            self.launch.seed ^ u64::from(block) << 20 ^ self.thread as u64,
        ));
    }

    fn lane(&self) -> usize {
        self.thread % self.launch.lane_size
    }

    /// The thread passed a barrier of its block.
    pub fn passed_barrier(&self) {
        self.epoch.set(self.epoch.get() + 1);
    }

    /// The warp clock this thread brings to a `warp::sync`.
    pub fn clock(&self) -> [u32; MAX_LANES] {
        *self.clock.borrow()
    }

    /// The thread took part in a `warp::sync` whose lanes brought `joined` (their clocks,
    /// entry by entry the latest): it now knows all of that, and its own time moves on.
    pub fn synced(&self, joined: &[u32; MAX_LANES]) {
        let mut clock = self.clock.borrow_mut();
        *clock = *joined;
        clock[self.lane()] += 1;
    }

    /// This thread's access of `kind` now, from call stack number `stack`.
    fn access(&self, kind: u32, stack: u32) -> Access {
        Access {
            kind: kind as u8,
            bytes: 0,
            thread: self.thread as u16,
            block: self.block.get(),
            epoch: self.epoch.get(),
            clock: self.clock.borrow()[self.lane()],
            stack,
        }
    }

    /// The number of call stack `pcs`.
    fn stack_number(&self, pcs: &[usize; FRAMES]) -> u32 {
        let (last, number) = self.last_stack.get();
        if last == *pcs {
            return number;
        }
        let number = self.launch.stack_number(pcs);
        self.last_stack.set((*pcs, number));
        number
    }

    /// Now and then, at random from the launch's seed, lets another thread run first: a racy
    /// kernel's results then vary with the seed, as they would from GPU to GPU.
    fn maybe_yield(&self) {
        let state = splitmix64(self.yields.get());
        self.yields.set(state);
        if state.is_multiple_of(YIELD_ONE_IN) {
            std::thread::yield_now();
        }
    }

    /// What `check_access` answers for `access`.
    pub fn check_access(&self, access: &AccessCheck) -> u32 {
        let mut pcs = [0; FRAMES];
        if symbols::walk_frames(access.frame, self.stack, &mut pcs) == 0 {
            pcs[0] = access.pc;
        }
        let stack = self.stack_number(&pcs);
        self.maybe_yield();
        let Some(finding) = self.launch.check(self, access, stack) else {
            return AccessCheck::OK;
        };
        if self.reported.replace(true) {
            return AccessCheck::OK;
        }
        *self.pending.borrow_mut() = Some(Pending { finding, pcs });
        AccessCheck::FOUND
    }

    /// Fills `report` with the pending finding; `report.file` holds the device runtime's
    /// source directory on the way in.
    pub fn take_report(&self, report: &mut CheckReport) {
        let runtime_dir = report.file().to_string();
        let Some(pending) = self.pending.borrow_mut().take() else {
            return;
        };
        let locate = |pcs: &[usize]| {
            symbols::locate(pcs, &runtime_dir).unwrap_or(SourceLocation {
                file: "<unknown: the image has no line tables>".to_string(),
                line: 0,
                column: 0,
            })
        };
        let message = match pending.finding {
            Finding::Plain(message) => message,
            Finding::Race {
                before,
                other,
                after,
            } => format!("{before}{}{after}", locate(&self.launch.stack(other))),
        };
        let SourceLocation { file, line, column } = locate(&pending.pcs);
        report.set(&message, &file, line, column);
    }
}

/// How rarely a checked access yields to another thread (one in this many, at random).
const YIELD_ONE_IN: u64 = 64;

/// The C entry of `HostThreadInfo::check_access`.
///
/// # Safety
/// `context` must point at a [`super::warp::LaneSeat`] with checks that outlives the call, and
/// `access` at a readable [`AccessCheck`].
pub(crate) unsafe extern "C" fn check_access(
    context: *const std::ffi::c_void,
    access: *const AccessCheck,
) -> u32 {
    // SAFETY: the emulator stores the seat in the thread's record; the device runtime passes its
    // own request.
    let (seat, access) = unsafe { (&*context.cast::<super::warp::LaneSeat<'_>>(), &*access) };
    seat.checks()
        .map_or(AccessCheck::OK, |checks| checks.check_access(access))
}

/// The C entry of `HostThreadInfo::take_report`.
///
/// # Safety
/// As [`check_access`]; `report` must point at a writable [`CheckReport`].
pub(crate) unsafe extern "C" fn take_report(
    context: *const std::ffi::c_void,
    report: *mut CheckReport,
) {
    // SAFETY: as in `check_access`.
    let (seat, report) = unsafe { (&*context.cast::<super::warp::LaneSeat<'_>>(), &mut *report) };
    if let Some(checks) = seat.checks() {
        checks.take_report(report);
    }
}

/// The C entry of `HostChecks::atomic`: the instrumented image's atomic operations, done here
/// (this code is not instrumented).
///
/// # Safety
/// `op` must point at an [`AtomicOp`] whose address is a valid, aligned value of its size that
/// is only accessed atomically meanwhile.
pub(crate) unsafe extern "C" fn atomic(op: *mut AtomicOp) {
    // SAFETY: per the contract.
    let op = unsafe { &mut *op };
    macro_rules! apply {
        ($atomic:ty, $ty:ty) => {{
            // SAFETY: per the contract: valid, aligned, accessed only atomically.
            let cell = unsafe { <$atomic>::from_ptr(op.address as *mut $ty) };
            let value = op.value as $ty;
            const SC: Ordering = Ordering::SeqCst;
            let old = match op.op {
                AtomicOp::LOAD => cell.load(SC),
                AtomicOp::STORE => {
                    cell.store(value, SC);
                    0
                }
                AtomicOp::EXCHANGE => cell.swap(value, SC),
                AtomicOp::ADD => cell.fetch_add(value, SC),
                AtomicOp::SUB => cell.fetch_sub(value, SC),
                AtomicOp::AND => cell.fetch_and(value, SC),
                AtomicOp::OR => cell.fetch_or(value, SC),
                AtomicOp::XOR => cell.fetch_xor(value, SC),
                AtomicOp::NAND => cell.fetch_nand(value, SC),
                AtomicOp::COMPARE_EXCHANGE => cell
                    .compare_exchange(op.expected as $ty, value, SC, SC)
                    .unwrap_or_else(|current| current),
                _ => 0,
            };
            op.result = old as u64;
        }};
    }
    if op.op == AtomicOp::FENCE {
        atomic::fence(Ordering::SeqCst);
        return;
    }
    match op.size {
        1 => apply!(AtomicU8, u8),
        2 => apply!(AtomicU16, u16),
        4 => apply!(AtomicU32, u32),
        _ => apply!(AtomicU64, u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch of 2 blocks of 64 threads (lanes of 32) over one 256-byte buffer and 64 bytes
    /// of shared memory per block (one group: blocks run one after another).
    fn launch() -> (LaunchChecks, usize, usize) {
        let arena = Arena::get().expect("an arena");
        let buffer = arena.alloc(256, Holds::Buffer).unwrap();
        let shared = arena.alloc(64, Holds::Shared).unwrap();
        let shape = LaunchShape::blocks(2).threads(64).shared_bytes(64);
        let checks = LaunchChecks::new(
            ("k", shape, 32),
            arena,
            &[(buffer, 256)],
            &[shared],
            ([0xa1; 4], 5, 99),
        );
        (checks, buffer, shared)
    }

    /// `thread` of block `block` (linear index in the block, lanes of 32).
    fn thread(checks: &LaunchChecks, block: u32, thread: usize) -> ThreadChecks<'_> {
        let thread = ThreadChecks::new(checks, 0, thread);
        thread.begin_block([block, 0, 0]);
        thread
    }

    fn access(thread: &ThreadChecks, address: usize, kind: u32) -> Option<String> {
        let access = AccessCheck {
            address,
            size: 4,
            kind,
            reserved: 0,
            pc: 0,
            frame: 0,
        };
        match thread.launch.check(thread, &access, 0)? {
            Finding::Plain(message) => Some(message),
            Finding::Race { before, after, .. } => Some(format!("{before}<other>{after}")),
        }
    }

    const R: u32 = AccessCheck::READ;
    const W: u32 = AccessCheck::WRITE;
    const RMW: u32 = AccessCheck::READ | AccessCheck::WRITE | AccessCheck::ATOMIC;

    #[test]
    fn unordered_accesses_of_two_threads_race_and_name_both() {
        let (checks, buffer, _) = launch();
        let (a, b) = (thread(&checks, 0, 1), thread(&checks, 0, 40));
        assert_eq!(access(&a, buffer + 8, W), None);
        let message = access(&b, buffer + 8, R).expect("a race");
        assert_eq!(
            message,
            format!(
                "racecheck: data race on the 256-byte device buffer at {buffer:#x}, at offset 8: \
                 this read of 4 bytes by block (0, 0, 0), thread (40, 0, 0) and an earlier write \
                 by block (0, 0, 0), thread (1, 0, 0) at <other>: no barrier, warp::sync or pair \
                 of atomics orders them (kernel `k`, emulation seed 99)"
            )
        );
        // Reads after reads are fine; a write after another thread's read is not.
        let (checks, buffer, _) = launch();
        let (a, b) = (thread(&checks, 0, 1), thread(&checks, 0, 2));
        assert_eq!(access(&a, buffer, R), None);
        assert_eq!(access(&b, buffer, R), None);
        assert!(access(&a, buffer, W).is_some_and(|m| m.contains("an earlier read by")));
    }

    #[test]
    fn a_barrier_orders_a_block_and_nothing_orders_two_blocks() {
        let (checks, buffer, _) = launch();
        let (a, b) = (thread(&checks, 0, 1), thread(&checks, 0, 40));
        assert_eq!(access(&a, buffer, W), None);
        a.passed_barrier();
        b.passed_barrier();
        assert_eq!(access(&b, buffer, R), None);
        assert_eq!(access(&b, buffer, W), None);
        let other_block = thread(&checks, 1, 40);
        other_block.passed_barrier();
        let message = access(&other_block, buffer, R).expect("a race between blocks");
        assert!(
            message.contains("they are in different blocks, which nothing orders"),
            "{message}"
        );
    }

    #[test]
    fn warp_sync_orders_its_lanes_and_atomics_never_race() {
        let (checks, buffer, _) = launch();
        // Lanes 1 and 2 of warp 0.
        let (a, b) = (thread(&checks, 0, 1), thread(&checks, 0, 2));
        assert_eq!(access(&a, buffer, W), None);
        let mut joined = a.clock();
        for (entry, other) in joined.iter_mut().zip(b.clock()) {
            *entry = (*entry).max(other);
        }
        a.synced(&joined);
        b.synced(&joined);
        assert_eq!(access(&b, buffer, R), None);
        // After the sync, a's new write is not ordered before b's read.
        assert_eq!(access(&a, buffer + 4, W), None);
        assert!(access(&b, buffer + 4, R).is_some());
        // Atomic read-modify-writes of one word from anywhere.
        let (c, d) = (thread(&checks, 0, 50), thread(&checks, 1, 3));
        assert_eq!(access(&c, buffer + 16, RMW), None);
        assert_eq!(access(&d, buffer + 16, RMW), None);
        // A plain read of it is not.
        assert!(access(&a, buffer + 16, R).is_some());
    }

    #[test]
    fn a_block_scope_atomic_races_with_another_blocks_atomics() {
        let (checks, buffer, _) = launch();
        const BLOCK_RMW: u32 = RMW | AccessCheck::BLOCK_SCOPE;
        // Within one block, block scope is atomic. Each operation is seen as the image sees it:
        // through the atomic hook, then marked with its scope.
        let (a, b) = (thread(&checks, 0, 1), thread(&checks, 0, 40));
        for thread in [&a, &b] {
            assert_eq!(access(thread, buffer, RMW), None);
            assert_eq!(access(thread, buffer, BLOCK_RMW), None);
        }
        // Another block's atomic of any scope on the same word is not.
        let other = thread(&checks, 1, 1);
        let message = access(&other, buffer, RMW).expect("a race between scopes");
        assert!(
            message.contains(
                "this atomic read-modify-write of 4 bytes by block (1, 0, 0), thread (1, 0, 0) \
                 and an earlier block-scope atomic read-modify-write by block (0, 0, 0)"
            ),
            "{message}"
        );
        assert!(message.contains("use Scope::Device"), "{message}");
        // Device-scope atomics of two blocks on another word stay atomic.
        assert_eq!(access(&a, buffer + 8, RMW), None);
        assert_eq!(access(&other, buffer + 8, RMW), None);
    }

    #[test]
    fn shared_memory_reads_need_a_write_of_the_block_and_stay_in_bounds() {
        let (checks, _, shared) = launch();
        checks.begin_block(0, shared);
        let a = thread(&checks, 0, 3);
        let message = access(&a, shared + 12, R).expect("an unwritten read");
        assert!(
            message.starts_with(
                "initcheck: uninitialised read of 4 bytes of shared memory at offset 12 by block \
                 (0, 0, 0), thread (3, 0, 0):"
            ),
            "{message}"
        );
        assert_eq!(access(&a, shared + 16, W), None);
        assert_eq!(access(&a, shared + 16, R), None);
        let message = access(&a, shared + 64, W).expect("past the shared memory");
        assert!(
            message.contains(
                "it reaches shared memory at offset 64, but the launch gives each \
                              block 64 bytes of it"
            ),
            "{message}"
        );
        // The next block begins with nothing written.
        checks.begin_block(0, shared);
        let b = thread(&checks, 1, 3);
        assert!(access(&b, shared + 16, R).is_some());
    }

    #[test]
    fn poison_has_no_zero_byte_and_follows_the_seed() {
        for seed in 0..1000 {
            assert!(poison_of(seed).iter().all(|&byte| byte != 0));
        }
        assert_eq!(poison_of(7), poison_of(7));
        assert_ne!(poison_of(7), poison_of(8));
        let mut region = [0u8; 10];
        fill_poison(&mut region, [1, 2, 3, 4]);
        assert_eq!(region, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]);
    }

    #[test]
    fn atomics_are_done_for_the_image() {
        let mut word = 5u32;
        let mut op = AtomicOp {
            op: AtomicOp::ADD,
            size: 4,
            address: std::ptr::from_mut(&mut word) as usize,
            value: 3,
            expected: 0,
            result: 0,
        };
        // SAFETY: a valid u32 of this test, nothing else touches it.
        unsafe { atomic(&mut op) };
        assert_eq!((op.result, word), (5, 8));
        op.op = AtomicOp::COMPARE_EXCHANGE;
        op.expected = 7;
        op.value = 1;
        // SAFETY: as above.
        unsafe { atomic(&mut op) };
        assert_eq!((op.result, word), (8, 8));
        op.expected = 8;
        // SAFETY: as above.
        unsafe { atomic(&mut op) };
        assert_eq!((op.result, word), (8, 1));
    }
}
