//! The host emulation's thread record: what the emulator tells each emulated thread before it
//! calls the kernel (through [`crate::symbols::HOST_ENTER_THREAD`]), and the warp exchange the
//! device runtime's warp operations go through there.

use core::ffi::c_void;

/// Version of [`HostThreadInfo`] and of the host entry points (value of
/// [`crate::symbols::HOST_ABI_VERSION`] in a host image). Version 2 added, at the end of the
/// record, the block's shared memory and the warp exchange ([`HostThreadInfo::warp_exchange`],
/// [`WarpExchange`]); version 3 the exchange that says where it is called from
/// ([`HostThreadInfo::sync_at`], [`CallSite`]), which the barrier goes through too; version 4
/// the memory checks ([`HostThreadInfo::check_access`], [`AccessCheck`]).
pub const HOST_ABI_VERSION: u32 = 4;
/// The oldest version the emulator still runs: every version's record starts with the one
/// before it, so an older image reads the part it knows (and has no shared memory or warp API).
pub const OLDEST_HOST_ABI_VERSION: u32 = 1;

/// Alignment of each block's shared memory region on the host emulation: the region is where
/// `gpurun::shared` puts values of any type a kernel would put in GPU shared memory.
pub const HOST_SHARED_ALIGN: usize = 256;

/// Who an emulated thread is. `#[repr(C)]`: the emulator and the image are built separately.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HostThreadInfo {
    pub abi_version: u32,
    /// Threads per emulated warp (1, 32 or 64): the RPC lane count.
    pub lane_size: u32,
    pub thread_idx: [u32; 3],
    pub block_idx: [u32; 3],
    pub block_dim: [u32; 3],
    pub grid_dim: [u32; 3],
    /// Context handed back to `barrier`.
    pub barrier_context: *const c_void,
    /// Blocks until every thread of this block has called it.
    pub barrier: Option<unsafe extern "C" fn(*const c_void)>,
    // Version 2.
    /// This block's shared memory ([`HOST_SHARED_ALIGN`]-aligned; null when the launch asked
    /// for none): the same region for every thread of the block, filled with a poison pattern
    /// before the block runs (GPUs do not clear shared memory).
    pub shared_memory: *mut u8,
    /// Its size in bytes (the launch's `shared_bytes`).
    pub shared_memory_bytes: usize,
    /// Context handed back to `warp_exchange`.
    pub warp_context: *const c_void,
    /// Meets the other lanes of this thread's warp named in the request's mask and gathers
    /// their values (see [`WarpExchange`]). `None`: the thread is alone in its warp.
    pub warp_exchange: Option<unsafe extern "C" fn(*const c_void, *mut WarpExchange)>,
    // Version 3.
    /// `warp_exchange` from a call site, or with [`warp_op::BARRIER`] the block barrier from
    /// one: lanes (threads) meet only lanes (threads) calling from the same site, and the
    /// request says why when they never can. Takes `warp_context`. A version 3 image uses it
    /// instead of `barrier` and `warp_exchange` when it is set.
    pub sync_at: Option<unsafe extern "C" fn(*const c_void, *mut WarpExchange, *const CallSite)>,
    // Version 4.
    /// Checks one access of this thread inside the checked memory ([`HostChecks`]; takes
    /// `warp_context`); returns [`AccessCheck::FOUND`] when the emulator has a report for it,
    /// which [`HostThreadInfo::take_report`] then hands over. `None`: no memory checks.
    pub check_access: Option<unsafe extern "C" fn(*const c_void, *const AccessCheck) -> u32>,
    /// Writes this thread's pending report (takes `warp_context`).
    pub take_report: Option<unsafe extern "C" fn(*const c_void, *mut CheckReport)>,
}

/// Where in the kernel's source a barrier or warp operation is called (a
/// `core::panic::Location` of the image, which stays loaded while its threads run).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CallSite {
    /// UTF-8 path, `file_len` bytes (not NUL-terminated).
    pub file: *const u8,
    pub file_len: usize,
    pub line: u32,
    pub column: u32,
}

/// `__gpurun_host_enter_thread` in a host image.
pub type EnterThread = unsafe extern "C" fn(*const HostThreadInfo);

impl HostThreadInfo {
    /// The record of a thread that no emulator entered (one thread, one block).
    pub const UNSET: HostThreadInfo = HostThreadInfo {
        abi_version: HOST_ABI_VERSION,
        lane_size: 1,
        thread_idx: [0; 3],
        block_idx: [0; 3],
        block_dim: [1; 3],
        grid_dim: [1; 3],
        barrier_context: core::ptr::null(),
        barrier: None,
        shared_memory: core::ptr::null_mut(),
        shared_memory_bytes: 0,
        warp_context: core::ptr::null(),
        warp_exchange: None,
        sync_at: None,
        check_access: None,
        take_report: None,
    };
}

// The layout, pinned: changing it needs a new HOST_ABI_VERSION. Each version's record starts
// with the one before it (version 1: 72 bytes, version 2: 104, version 3: 112), so older
// images still read their record from a newer emulator.
const _: () = {
    assert!(core::mem::offset_of!(HostThreadInfo, thread_idx) == 8);
    assert!(core::mem::offset_of!(HostThreadInfo, grid_dim) == 44);
    assert!(core::mem::offset_of!(HostThreadInfo, barrier_context) == 56);
    assert!(core::mem::offset_of!(HostThreadInfo, barrier) == 64);
    assert!(core::mem::offset_of!(HostThreadInfo, shared_memory) == 72);
    assert!(core::mem::offset_of!(HostThreadInfo, shared_memory_bytes) == 80);
    assert!(core::mem::offset_of!(HostThreadInfo, warp_context) == 88);
    assert!(core::mem::offset_of!(HostThreadInfo, warp_exchange) == 96);
    assert!(core::mem::offset_of!(HostThreadInfo, sync_at) == 104);
    assert!(core::mem::offset_of!(HostThreadInfo, check_access) == 112);
    assert!(core::mem::offset_of!(HostThreadInfo, take_report) == 120);
    assert!(core::mem::size_of::<HostThreadInfo>() == 128);
    assert!(core::mem::offset_of!(CallSite, line) == 16);
    assert!(core::mem::size_of::<CallSite>() == 24);
};

/// What the emulator tells an image built for the memory checks (the global
/// [`crate::symbols::HOST_MEMORY_CHECKS`], which it writes right after loading the image, before
/// any thread runs): which memory it checks, and how to do an atomic operation.
///
/// The instrumentation turns every atomic operation of the image into a call to a hook, even in
/// code built without it, so the hooks cannot do atomics themselves: they ask the emulator.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HostChecks {
    /// The memory whose accesses go to [`HostThreadInfo::check_access`] (device buffers and
    /// shared memory, with the gaps around them); empty when the checks are off.
    pub checked_start: usize,
    pub checked_len: usize,
    /// Does one atomic operation. `None` only before the emulator has written this record,
    /// while the image is being loaded and no emulated thread runs.
    pub atomic: Option<unsafe extern "C" fn(*mut AtomicOp)>,
}

impl HostChecks {
    /// The record before the emulator writes it.
    pub const UNSET: HostChecks = HostChecks {
        checked_start: 0,
        checked_len: 0,
        atomic: None,
    };
}

/// One atomic operation an instrumented image asks the emulator to do (see [`HostChecks`]).
/// Every ordering is done as sequentially consistent: at least as strong as asked.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AtomicOp {
    /// What to do: one of `AtomicOp::LOAD` ... `AtomicOp::FENCE`.
    pub op: u32,
    /// Bytes of the value: 1, 2, 4 or 8 (aligned).
    pub size: u32,
    pub address: usize,
    /// The operand (stored, added, the new value of a compare-exchange).
    pub value: u64,
    /// A compare-exchange's expected value.
    pub expected: u64,
    /// Set by the emulator: the value before the operation (a load's value).
    pub result: u64,
}

impl AtomicOp {
    pub const LOAD: u32 = 1;
    pub const STORE: u32 = 2;
    pub const EXCHANGE: u32 = 3;
    pub const ADD: u32 = 4;
    pub const SUB: u32 = 5;
    pub const AND: u32 = 6;
    pub const OR: u32 = 7;
    pub const XOR: u32 = 8;
    pub const NAND: u32 = 9;
    pub const COMPARE_EXCHANGE: u32 = 10;
    pub const FENCE: u32 = 11;
}

const _: () = {
    assert!(core::mem::size_of::<HostChecks>() == 24);
    assert!(core::mem::size_of::<AtomicOp>() == 40);
};

/// One memory access of an emulated thread inside the checked memory, as an instrumented
/// image's hook saw it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AccessCheck {
    pub address: usize,
    /// Bytes accessed (1 to 16 for a load or store; any for a copy or fill).
    pub size: usize,
    /// [`AccessCheck::READ`], [`AccessCheck::WRITE`] or both, with [`AccessCheck::ATOMIC`] for
    /// an atomic operation.
    pub kind: u32,
    pub reserved: u32,
    /// The return address of the hook (the instruction after the access's call) and the hook's
    /// frame pointer (0 where the image has none): where the access is in the kernel, walked up
    /// to the first frame of the kernel's own code when reported.
    pub pc: usize,
    pub frame: usize,
}

impl AccessCheck {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const ATOMIC: u32 = 4;
    /// With [`AccessCheck::ATOMIC`]: the operation is atomic only among the threads of its
    /// block (`gpurun::atomic::Scope::Block`), so another block's access to the bytes races.
    pub const BLOCK_SCOPE: u32 = 8;
    /// What `check_access` returns when the access is fine (or its thread already reported).
    pub const OK: u32 = 0;
    /// What it returns when the emulator has a report for this thread.
    pub const FOUND: u32 = 1;
}

/// Longest message and file name of a [`CheckReport`] (longer ones are cut at a character).
pub const CHECK_MESSAGE_CAPACITY: usize = 4096;
pub const CHECK_FILE_CAPACITY: usize = 1024;

/// What the emulator found about an access, for the device runtime to report as the thread's
/// panic (`file:line:column` is where in the kernel's source the access is). On the way in,
/// `file` holds the device runtime's source directory (as its `file!()` paths start), whose
/// frames the emulator passes over when it looks for the kernel's line.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CheckReport {
    pub line: u32,
    pub column: u32,
    pub file_len: u32,
    pub message_len: u32,
    pub file: [u8; CHECK_FILE_CAPACITY],
    pub message: [u8; CHECK_MESSAGE_CAPACITY],
}

impl CheckReport {
    pub const EMPTY: CheckReport = CheckReport {
        line: 0,
        column: 0,
        file_len: 0,
        message_len: 0,
        file: [0; CHECK_FILE_CAPACITY],
        message: [0; CHECK_MESSAGE_CAPACITY],
    };

    /// The message (empty if none or not UTF-8).
    pub fn message(&self) -> &str {
        utf8_prefix(&self.message, self.message_len)
    }

    /// The file (empty if unknown or not UTF-8).
    pub fn file(&self) -> &str {
        utf8_prefix(&self.file, self.file_len)
    }

    /// Stores the report, each text cut at a character boundary if it is too long.
    pub fn set(&mut self, message: &str, file: &str, line: u32, column: u32) {
        self.message_len = copy_cut(&mut self.message, message);
        self.file_len = copy_cut(&mut self.file, file);
        self.line = line;
        self.column = column;
    }
}

/// The first `len` bytes of `bytes` as text (empty if not UTF-8).
fn utf8_prefix(bytes: &[u8], len: u32) -> &str {
    let len = (len as usize).min(bytes.len());
    core::str::from_utf8(&bytes[..len]).unwrap_or("")
}

/// Copies as much of `text` into `out` as fits, cut at a character boundary; returns its length.
fn copy_cut(out: &mut [u8], text: &str) -> u32 {
    let mut len = text.len().min(out.len());
    while !text.is_char_boundary(len) {
        len -= 1;
    }
    out[..len].copy_from_slice(&text.as_bytes()[..len]);
    len as u32
}

const _: () = {
    assert!(core::mem::size_of::<AccessCheck>() == 40);
    assert!(core::mem::offset_of!(CheckReport, file) == 16);
};

/// Most lanes an emulated warp has.
pub const MAX_LANES: usize = 64;

/// Longest failure message a [`WarpExchange`] carries (longer ones are cut at a character).
pub const WARP_MESSAGE_CAPACITY: usize = 1024;

/// One lane's part in a warp operation on the host emulation, filled in by the device runtime
/// (`op`, `mask`, `value`) and answered by the emulator.
///
/// The emulator waits until every lane of `mask` that has not returned from the kernel called
/// the exchange with the same `op` and `mask` (through [`HostThreadInfo::sync_at`]: from the
/// same call site), then gives each of them every caller's value. When that can never happen
/// (a lane of the mask waits at the block barrier, or in another warp operation that can never
/// complete either, or the mask names lanes the warp does not have) it answers
/// [`WarpExchange::FAILED`] with a message naming the lanes instead of waiting forever.
///
/// With [`warp_op::BARRIER`] through `sync_at` it is a thread's arrival at the block barrier:
/// `mask` and `value` are unused, and it fails when threads of the block wait at barriers of
/// different call sites.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WarpExchange {
    /// What the lanes do ([`warp_op`]): lanes meet only lanes calling the same `op`.
    pub op: u32,
    /// [`WarpExchange::DONE`] or [`WarpExchange::FAILED`], set by the emulator.
    pub status: u32,
    /// The lanes taking part (bit `i`: lane `i`); must include the caller.
    pub mask: u64,
    /// This lane's value.
    pub value: u64,
    /// Set by the emulator: the lanes that called (the lanes of `mask` that had not returned).
    pub participants: u64,
    /// Set by the emulator: `values[i]` is lane `i`'s value, for each participant `i`.
    pub values: [u64; MAX_LANES],
    /// Set by the emulator on failure: `message[..message_len]` says why, UTF-8.
    pub message_len: u32,
    pub message: [u8; WARP_MESSAGE_CAPACITY],
}

impl WarpExchange {
    /// The exchange completed: `participants` and `values` are set.
    pub const DONE: u32 = 0;
    /// The exchange can never complete: `message` says why.
    pub const FAILED: u32 = 1;

    /// A request of this lane.
    pub const fn new(op: u32, mask: u64, value: u64) -> WarpExchange {
        WarpExchange {
            op,
            status: WarpExchange::DONE,
            mask,
            value,
            participants: 0,
            values: [0; MAX_LANES],
            message_len: 0,
            message: [0; WARP_MESSAGE_CAPACITY],
        }
    }

    /// The failure message the emulator wrote (empty if none or not UTF-8).
    pub fn message(&self) -> &str {
        utf8_prefix(&self.message, self.message_len)
    }

    /// Stores `text` as the failure message, cut at a character boundary if it is too long.
    pub fn set_message(&mut self, text: &str) {
        self.message_len = copy_cut(&mut self.message, text);
    }
}

const _: () = {
    assert!(core::mem::offset_of!(WarpExchange, mask) == 8);
    assert!(core::mem::offset_of!(WarpExchange, values) == 32);
    assert!(core::mem::offset_of!(WarpExchange, message_len) == 32 + 8 * MAX_LANES);
    assert!(core::mem::size_of::<WarpExchange>() == 32 + 8 * MAX_LANES + 8 + WARP_MESSAGE_CAPACITY);
};

/// The operations of [`WarpExchange::op`]: a kind in the low byte, and for
/// [`warp_op::BROADCAST`] the source lane above it (lanes that broadcast from different lanes
/// do not meet).
pub mod warp_op {
    pub const SYNC: u32 = 1;
    pub const BALLOT: u32 = 2;
    pub const ANY: u32 = 3;
    pub const ALL: u32 = 4;
    pub const SHUFFLE: u32 = 5;
    pub const SHUFFLE_UP: u32 = 6;
    pub const SHUFFLE_DOWN: u32 = 7;
    pub const SHUFFLE_XOR: u32 = 8;
    pub const BROADCAST: u32 = 9;
    /// `active_mask()`: meets the lanes of the whole warp that call it while every other lane
    /// waits elsewhere (the block barrier, another warp operation) or has returned; `mask` is
    /// ignored.
    pub const ACTIVE_MASK: u32 = 10;
    /// The block barrier (only through `sync_at`): not a warp operation, but the same request.
    pub const BARRIER: u32 = 11;
    /// The block barrier with a vote (only through `sync_at`): `value` is this thread's
    /// predicate (0 or 1); the emulator answers, in `values[0]`, how many threads of the block
    /// voted 1 and, in `values[1]`, how many reached the barrier (those that had not returned).
    pub const BARRIER_VOTE: u32 = 12;

    /// The operation `op` of a broadcast from `lane`.
    pub const fn broadcast(lane: u32) -> u32 {
        BROADCAST | (lane << 8)
    }

    /// The kind of `op` (its low byte).
    pub const fn kind(op: u32) -> u32 {
        op & 0xff
    }

    /// The device runtime's name of `op`'s kind, for messages.
    pub const fn name(op: u32) -> &'static str {
        match kind(op) {
            SYNC => "warp::sync",
            BALLOT => "warp::ballot",
            ANY => "warp::any",
            ALL => "warp::all",
            SHUFFLE => "warp::shuffle",
            SHUFFLE_UP => "warp::shuffle_up",
            SHUFFLE_DOWN => "warp::shuffle_down",
            SHUFFLE_XOR => "warp::shuffle_xor",
            BROADCAST => "warp::broadcast",
            ACTIVE_MASK => "warp::active_mask",
            BARRIER => "gpurun::barrier",
            BARRIER_VOTE => "gpurun::barrier_count",
            _ => "an unknown warp operation",
        }
    }
}
