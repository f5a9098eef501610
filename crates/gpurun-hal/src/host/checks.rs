//! The memory checks of the host emulation, emulator side: what an instrumented image's hooks
//! ask about each access to the checked memory ([`super::arena`]), answered from shadow state
//! kept per launch, with reports worded like compute-sanitizer's:
//!
//! - **memcheck**: an access outside every device buffer and outside its block's shared memory
//!   (in the gap after a buffer, before it, in freed memory, past the launch's shared bytes);
//! - **initcheck**: a read of shared memory that no thread of the block wrote since the block
//!   began (GPUs do not clear it: the emulation fills it with a poison pattern instead).
//!
//! A thread reports its first finding only (as a panic at the kernel's line, see
//! `gpurun`'s `arch/checks.rs`) and goes on: the access lands in memory of the arena, which
//! nothing else uses.

use super::arena::{Allocation, Arena, Holds};
use super::symbols::{self, SourceLocation};
use crate::LaunchShape;
use gpurun_abi::host::{AccessCheck, AtomicOp, CheckReport};
use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{self, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Return addresses kept per access: enough to climb out of the device runtime and a few
/// layers of `core` to the kernel's own line.
pub(crate) const FRAMES: usize = 6;

/// The checks of one launch.
pub(crate) struct LaunchChecks {
    kernel: String,
    shape: LaunchShape,
    arena: &'static Arena,
    /// The memory this launch may touch, by address: its device buffers, and one block's shared
    /// memory per group of the deal.
    objects: Vec<Object>,
    /// The bytes every block's shared memory starts with.
    poison: [u8; 4],
}

struct Object {
    start: usize,
    len: usize,
    what: What,
}

enum What {
    Buffer,
    /// The shared memory of the blocks group `group` runs, one after another, with a flag per
    /// byte: written by a thread of the block running now.
    Shared {
        group: usize,
        written: Vec<AtomicU8>,
    },
}

impl LaunchChecks {
    /// The checks of a launch of `kernel` with `shape` over `buffers` (live allocations of the
    /// arena) and the groups' shared memory regions `shared` (index: group).
    pub fn new(
        kernel: &str,
        shape: LaunchShape,
        arena: &'static Arena,
        buffers: &[(usize, usize)],
        shared: &[usize],
        poison: [u8; 4],
    ) -> LaunchChecks {
        let bytes = shape.shared_bytes as usize;
        let mut objects: Vec<Object> = buffers
            .iter()
            .map(|&(start, len)| Object {
                start,
                len,
                what: What::Buffer,
            })
            .chain(shared.iter().enumerate().map(|(group, &start)| Object {
                start,
                len: bytes,
                what: What::Shared {
                    group,
                    written: (0..bytes).map(|_| AtomicU8::new(0)).collect(),
                },
            }))
            .collect();
        objects.sort_by_key(|object| object.start);
        LaunchChecks {
            kernel: kernel.to_string(),
            shape,
            arena,
            objects,
            poison,
        }
    }

    /// Starts a block of group `group`: its shared memory (at `start`) holds the poison and
    /// nothing of it counts as written. Called while no thread of the group runs a block.
    pub fn begin_block(&self, group: usize, start: usize) {
        let bytes = self.shape.shared_bytes as usize;
        // SAFETY: the group's region of `bytes` bytes, which no thread uses meanwhile.
        let region = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, bytes) };
        fill_poison(region, self.poison);
        for object in &self.objects {
            if let What::Shared { group: of, written } = &object.what {
                if *of == group {
                    for flag in written {
                        flag.store(0, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// The object holding all of `[address, address + size)`, if any.
    fn object(&self, address: usize, size: usize) -> Option<&Object> {
        let after = self
            .objects
            .partition_point(|object| object.start <= address);
        let object = &self.objects[after.checked_sub(1)?];
        (address.checked_add(size)? <= object.end()).then_some(object)
    }

    /// Checks one access of `thread`; returns what to report, if anything.
    fn check(&self, thread: &ThreadChecks, access: &AccessCheck) -> Option<String> {
        if access.size == 0 {
            return None;
        }
        let Some(object) = self.object(access.address, access.size) else {
            return Some(self.out_of_bounds(thread, access));
        };
        let What::Shared { group, written } = &object.what else {
            return None;
        };
        if *group != thread.group {
            return Some(self.out_of_bounds(thread, access));
        }
        let offset = access.address - object.start;
        let bytes = &written[offset..offset + access.size];
        if access.kind & AccessCheck::READ != 0 {
            let unwritten: Vec<usize> = (0..access.size)
                .filter(|&index| bytes[index].load(Ordering::Relaxed) == 0)
                .collect();
            if !unwritten.is_empty() {
                if access.kind & AccessCheck::WRITE != 0 {
                    mark(bytes);
                }
                return Some(self.uninitialised(thread, access, offset, &unwritten));
            }
        }
        if access.kind & AccessCheck::WRITE != 0 {
            mark(bytes);
        }
        None
    }

    fn who(&self, thread: &ThreadChecks) -> String {
        let [tx, ty, _] = self.shape.threads;
        let index = thread.thread as u32;
        let [x, y, z] = [index % tx, index / tx % ty, index / (tx * ty)];
        let [bx, by, bz] = thread.block_idx.get();
        format!(
            "block ({bx}, {by}, {bz}), thread ({x}, {y}, {z}) of kernel `{}`",
            self.kernel
        )
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
             bytes {})",
            describe_kind(access.kind, "read"),
            access.size,
            self.who(thread),
            poison_text(self.poison),
        )
    }

    fn out_of_bounds(&self, thread: &ThreadChecks, access: &AccessCheck) -> String {
        let where_ = self.describe_address(thread, access.address, access.size);
        format!(
            "memcheck: invalid {} of {} bytes at {:#x} by {}: {where_}",
            describe_kind(access.kind, "access"),
            access.size,
            access.address,
            self.who(thread)
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

fn mark(bytes: &[AtomicU8]) {
    for flag in bytes {
        flag.store(1, Ordering::Relaxed);
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
    if kind & AccessCheck::ATOMIC != 0 {
        format!("atomic {what}")
    } else {
        what.to_string()
    }
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

/// One emulated thread's part in the checks of a launch: who it is and what it found.
pub(crate) struct ThreadChecks<'a> {
    launch: &'a LaunchChecks,
    /// Its group (whose shared memory is its block's) and linear index in the block.
    group: usize,
    thread: usize,
    block_idx: std::cell::Cell<[u32; 3]>,
    stack: (usize, usize),
    /// Set once the thread has reported; it reports nothing more.
    reported: std::cell::Cell<bool>,
    pending: RefCell<Option<Pending>>,
}

/// A finding waiting for the device runtime to take it.
struct Pending {
    message: String,
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
            block_idx: std::cell::Cell::new([0; 3]),
            stack: symbols::current_stack(),
            reported: std::cell::Cell::new(false),
            pending: RefCell::new(None),
        }
    }

    /// The thread starts block `block_idx`.
    pub fn begin_block(&self, block_idx: [u32; 3]) {
        self.block_idx.set(block_idx);
    }

    /// What `check_access` answers for `access`.
    pub fn check_access(&self, access: &AccessCheck) -> u32 {
        let Some(message) = self.launch.check(self, access) else {
            return AccessCheck::OK;
        };
        if self.reported.replace(true) {
            return AccessCheck::OK;
        }
        let mut pcs = [0; FRAMES];
        let found = symbols::walk_frames(access.frame, self.stack, &mut pcs);
        if found == 0 {
            pcs[0] = access.pc;
        }
        *self.pending.borrow_mut() = Some(Pending { message, pcs });
        AccessCheck::FOUND
    }

    /// Fills `report` with the pending finding; `report.file` holds the device runtime's
    /// source directory on the way in.
    pub fn take_report(&self, report: &mut CheckReport) {
        let runtime_dir = report.file().to_string();
        let Some(pending) = self.pending.borrow_mut().take() else {
            return;
        };
        let location = symbols::locate(&pending.pcs, &runtime_dir);
        let SourceLocation { file, line, column } = location.unwrap_or(SourceLocation {
            file: "<unknown: the image has no line tables>".to_string(),
            line: 0,
            column: 0,
        });
        report.set(&pending.message, &file, line, column);
    }
}

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
