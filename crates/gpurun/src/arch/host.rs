//! Host emulation: the emulator runs each device thread on an OS thread and calls
//! `__gpurun_host_enter_thread` first, so ids live in thread-locals.

use std::cell::Cell;
use std::time::{Duration, Instant};

use gpurun_abi::host::{warp_op, CallSite, WarpExchange};
pub use gpurun_abi::host::{HostThreadInfo, HOST_ABI_VERSION};
use std::panic::Location;

#[unsafe(no_mangle)]
#[used]
pub static __gpurun_host_abi_version: u32 = HOST_ABI_VERSION;

const UNSET: HostThreadInfo = HostThreadInfo::UNSET;

thread_local! {
    static CURRENT: Cell<HostThreadInfo> = const { Cell::new(UNSET) };
    /// Whether this thread reported a finding of the memory checks in its block: its failure is
    /// that, and a later panic (often what the bad access led to) is not reported again.
    static REPORTED: Cell<bool> = const { Cell::new(false) };
    /// When this OS thread first read `clock64`: its readings count from there.
    static CLOCK_START: Instant = Instant::now();
}

/// Called by the emulator on each emulated thread before any kernel.
///
/// # Safety
/// `info` must point at a valid [`HostThreadInfo`] whose barrier and warp exchange functions (if
/// any) stay callable, with their contexts, for as long as this thread runs device code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __gpurun_host_enter_thread(info: *const HostThreadInfo) {
    // SAFETY: the caller guarantees `info` is valid for reads.
    let info = unsafe { *info };
    CURRENT.with(|current| current.set(info));
    REPORTED.with(|reported| reported.set(false));
    crate::export::install_host_panic_hook();
}

fn current() -> HostThreadInfo {
    CURRENT.with(Cell::get)
}

/// Marks this thread as having reported a finding of the memory checks.
#[cfg_attr(not(gpurun_emulation_checks), allow(dead_code))]
pub(crate) fn set_reported() {
    REPORTED.with(|reported| reported.set(true));
}

/// Whether this thread reported a finding of the memory checks in its block.
pub(crate) fn reported() -> bool {
    REPORTED.with(Cell::get)
}

/// This thread's record, as the emulator gave it.
#[cfg_attr(not(gpurun_emulation_checks), allow(dead_code))]
pub(crate) fn info() -> HostThreadInfo {
    current()
}

pub fn thread_idx() -> [u32; 3] {
    current().thread_idx
}

pub fn block_idx() -> [u32; 3] {
    current().block_idx
}

pub fn block_dim() -> [u32; 3] {
    current().block_dim
}

pub fn grid_dim() -> [u32; 3] {
    current().grid_dim
}

pub fn lane_size() -> u32 {
    current().lane_size.max(1)
}

pub fn lane_id() -> u32 {
    super::thread_index_in_block() % lane_size()
}

/// The block barrier. The emulator pairs threads only at one call site: threads of a block that
/// wait at barriers of different lines fail here, at the kernel's line (`#[track_caller]`).
#[track_caller]
pub fn barrier() {
    let info = current();
    if info.sync_at.is_some() {
        let request = sync(&info, WarpExchange::new(warp_op::BARRIER, 0, 0));
        if request.status != WarpExchange::DONE {
            panic!("{}", request.message());
        }
    } else if let Some(wait) = info.barrier {
        // SAFETY: the emulator guarantees the callback and its context outlive the thread.
        unsafe { wait(info.barrier_context) }
    }
}

/// The block barrier with a vote: how many threads of the block arrived with a true
/// `predicate`, and how many arrived (those that had not returned), from the emulator's
/// barrier.
#[track_caller]
pub fn barrier_vote(predicate: bool) -> (u32, u32) {
    let info = current();
    if info.sync_at.is_none() {
        panic!("barrier votes need a newer host emulation than the one running this image");
    }
    let request = sync(
        &info,
        WarpExchange::new(warp_op::BARRIER_VOTE, 0, u64::from(predicate)),
    );
    if request.status != WarpExchange::DONE {
        panic!("{}", request.message());
    }
    // At most the block's threads (1024): the narrowing keeps every count.
    (request.values[0] as u32, request.values[1] as u32)
}

/// `request` handed to the emulator's `sync_at` (which must be set) from the caller's call
/// site, and its answer.
#[track_caller]
fn sync(info: &HostThreadInfo, mut request: WarpExchange) -> WarpExchange {
    let location = Location::caller();
    let site = CallSite {
        file: location.file().as_ptr(),
        file_len: location.file().len(),
        line: location.line(),
        column: location.column(),
    };
    if let Some(sync_at) = info.sync_at {
        // SAFETY: the emulator guarantees the function and its context outlive the thread; the
        // request and the site (whose file is a string of this image) are ours to lend.
        unsafe { sync_at(info.warp_context, &mut request, &site) };
    }
    request
}

/// This block's shared memory region, which the emulator gives every thread of the block
/// ([`HostThreadInfo::shared_memory`], `gpurun_abi::host::HOST_SHARED_ALIGN`-aligned); null when
/// the launch asked for none.
pub fn shared_base<T>() -> *mut T {
    current().shared_memory.cast()
}

/// Bytes of the region (the launch's `shared_bytes`).
pub fn shared_bytes() -> usize {
    current().shared_memory_bytes
}

/// On the host a thread ends by unwinding to its kernel wrapper, which catches it.
pub fn end_thread() -> ! {
    std::panic::resume_unwind(Box::new(ThreadEnded))
}

/// Payload of the unwind that [`end_thread`] starts; not a panic.
pub(crate) struct ThreadEnded;

/// The emulated warp as the RPC client sees it: each emulated thread talks alone, in its own
/// lane slot of a port.
pub(crate) type Lanes = gpurun_rpc::lanes::HostLane;

// Warp operations (`crate::warp`): every one is an exchange among the lanes of the mask through
// the emulator (`HostThreadInfo::sync_at`), which fails one that can never complete. They and
// `crate::warp`'s functions are `#[track_caller]` on the host (only there: GPU code pays
// nothing): the emulator matches lanes by the kernel's call site, and a failure points at the
// kernel's line, not at this file.

/// What the lanes of an exchange gave: the lanes that called (`participants`) and each one's
/// value.
struct Gathered {
    participants: u64,
    values: [u64; gpurun_abi::host::MAX_LANES],
}

/// This lane's part in warp operation `op` among the lanes of `mask`. Panics (failing the test
/// like any device panic) when the emulator says it can never complete.
#[track_caller]
fn exchange(op: u32, mask: u64, value: u64) -> Gathered {
    let info = current();
    let lane = lane_id();
    let own = 1u64 << lane;
    let alone = lane_size() == 1 || (warp_op::kind(op) != warp_op::ACTIVE_MASK && mask == own);
    let Some(exchange) = info.warp_exchange.filter(|_| !alone) else {
        if mask & own == 0 && warp_op::kind(op) != warp_op::ACTIVE_MASK {
            panic!(
                "{} called by lane {lane} with mask {mask:#x}, which does not include it",
                warp_op::name(op)
            );
        }
        let mut values = [0; gpurun_abi::host::MAX_LANES];
        values[lane as usize] = value;
        return Gathered {
            participants: own,
            values,
        };
    };
    let mut request = WarpExchange::new(op, mask, value);
    if info.sync_at.is_some() {
        request = sync(&info, request);
    } else {
        // SAFETY: the emulator guarantees the function and its context outlive the thread; the
        // request is ours to lend for the call.
        unsafe { exchange(info.warp_context, &mut request) };
    }
    if request.status != WarpExchange::DONE {
        panic!("{}", request.message());
    }
    Gathered {
        participants: request.participants,
        values: request.values,
    }
}

#[track_caller]
pub fn active_mask() -> u64 {
    exchange(warp_op::ACTIVE_MASK, 0, 0).participants
}

#[track_caller]
pub fn sync_lanes(mask: u64) {
    exchange(warp_op::SYNC, mask, 0);
}

/// The lanes of `gathered` whose value is non-zero.
fn votes(gathered: &Gathered) -> u64 {
    (0..64)
        .filter(|&lane| gathered.participants >> lane & 1 == 1 && gathered.values[lane] != 0)
        .fold(0, |set, lane| set | 1u64 << lane)
}

#[track_caller]
pub fn ballot(mask: u64, predicate: bool) -> u64 {
    votes(&exchange(warp_op::BALLOT, mask, u64::from(predicate)))
}

#[track_caller]
pub fn vote_any(mask: u64, predicate: bool) -> bool {
    votes(&exchange(warp_op::ANY, mask, u64::from(predicate))) != 0
}

#[track_caller]
pub fn vote_all(mask: u64, predicate: bool) -> bool {
    let gathered = exchange(warp_op::ALL, mask, u64::from(predicate));
    votes(&gathered) == gathered.participants
}

/// Lane `source`'s value out of `gathered` (this lane's `own` value if `source` is not in the
/// mask: `crate::warp` returns the caller's own value then anyway). A lane of the mask that
/// returned from the kernel has none (on a GPU the value read is undefined): that fails the
/// test.
#[track_caller]
fn value_of(op: u32, mask: u64, gathered: &Gathered, source: u32, own: u64) -> u64 {
    if mask >> source & 1 == 0 {
        return own;
    }
    if gathered.participants >> source & 1 == 0 {
        panic!(
            "{} on lane {} reads lane {source}, which has returned from the kernel (on a GPU \
             the value read is undefined)",
            warp_op::name(op),
            lane_id()
        );
    }
    gathered.values[source as usize]
}

/// `value` of lane `source` (a lane of `mask`).
#[track_caller]
pub fn shuffle(op: u32, mask: u64, value: u64, _wide: bool, source: u32) -> u64 {
    value_of(op, mask, &exchange(op, mask, value), source, value)
}

/// `value` of lane `source`, the same lane in every caller (lanes that name different ones do
/// not meet, which fails the test).
#[track_caller]
pub fn broadcast(mask: u64, value: u64, _wide: bool, source: u32) -> u64 {
    let op = warp_op::broadcast(source);
    value_of(op, mask, &exchange(op, mask, value), source, value)
}

// Fences, the clock and sleep (`crate::arch`): the host's own. Every fence is sequentially
// consistent (the emulation's memory checks see it as one, whatever its scope).

pub fn fence_block() {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

pub fn fence_device() {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

pub fn fence_system() {
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Nanoseconds since this OS thread's first reading (monotonic; a device thread runs on one OS
/// thread from its start to its end).
pub fn clock64() -> u64 {
    CLOCK_START.with(|start| u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
}

pub fn nanosleep(ns: u32) {
    if ns == 0 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_nanos(u64::from(ns)));
    }
}
