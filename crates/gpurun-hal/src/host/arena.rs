//! The checked memory of the host emulation: one reserved address range per worker process in
//! which every device buffer and every block's shared memory lives while the memory checks are
//! on, each with a gap of unused memory after it. An instrumented image hands the emulator
//! every access inside the range and no other ([`gpurun_abi::host::HostChecks`]), so one
//! compare tells a checked access from the kernel's stack and statics; an access in a gap, or in
//! memory freed before, is out of bounds.
//!
//! The range is reserved without backing (`MAP_NORESERVE`) and readable and writable all
//! through, gaps included: an out-of-bounds access is reported, then lands in memory nothing
//! else uses instead of faulting. Addresses are not reused (a freed allocation's pages go back
//! to the system), so an access to a freed buffer never reaches a newer one.

use std::sync::{Mutex, OnceLock, PoisonError};

/// Address space reserved for the checked memory; less is tried when the system refuses.
const RESERVE: usize = 256 << 30;
const SMALLEST_RESERVE: usize = 1 << 30;
/// Unused bytes after every allocation (and before the first): far more than any element, so a
/// small overrun lands in it.
pub(crate) const GAP: usize = 64 << 10;
const PAGE: usize = 4096;
/// Alignment of every allocation, as a GPU allocator gives.
const ALIGN: usize = 256;

/// What an allocation of the arena holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holds {
    /// A device buffer (`Primitives::alloc_device`).
    Buffer,
    /// One block's shared memory of a launch.
    Shared,
}

/// One allocation, live or freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Allocation {
    pub start: usize,
    pub len: usize,
    pub holds: Holds,
    pub freed: bool,
}

impl Allocation {
    pub fn end(&self) -> usize {
        self.start + self.len
    }
}

pub(crate) struct Arena {
    start: usize,
    len: usize,
    state: Mutex<ArenaState>,
}

struct ArenaState {
    /// Where the next allocation may start.
    next: usize,
    /// Every allocation, by address (the order they were made in).
    allocations: Vec<Allocation>,
}

// SAFETY: the arena only hands out addresses; its state is behind a mutex.
unsafe impl Sync for Arena {}

impl Arena {
    /// The process's arena, reserved on first use; `None` when the system gives no address
    /// range for it (then the memory checks are off).
    pub fn get() -> Option<&'static Arena> {
        static ARENA: OnceLock<Option<Arena>> = OnceLock::new();
        ARENA.get_or_init(Arena::reserve).as_ref()
    }

    fn reserve() -> Option<Arena> {
        let mut len = RESERVE;
        while len >= SMALLEST_RESERVE {
            // SAFETY: a fresh anonymous mapping at an address of the kernel's choice; nothing
            // else refers to it.
            let start = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if start != libc::MAP_FAILED {
                let start = start as usize;
                return Some(Arena {
                    start,
                    len,
                    state: Mutex::new(ArenaState {
                        next: start + GAP,
                        allocations: Vec::new(),
                    }),
                });
            }
            len /= 2;
        }
        None
    }

    /// The reserved range: what an instrumented image hands the emulator.
    pub fn range(&self) -> (usize, usize) {
        (self.start, self.len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ArenaState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `len` zeroed bytes, or `None` when the range is used up.
    pub fn alloc(&self, len: usize, holds: Holds) -> Option<usize> {
        let mut state = self.lock();
        let start = state.next.next_multiple_of(ALIGN);
        let end = start.checked_add(len.max(1))?;
        let next = end.checked_add(GAP)?.next_multiple_of(PAGE);
        if next > self.start + self.len {
            return None;
        }
        state.next = next;
        state.allocations.push(Allocation {
            start,
            len,
            holds,
            freed: false,
        });
        Some(start)
    }

    /// Frees the allocation at `start` (returns its pages to the system); other addresses are
    /// ignored.
    pub fn free(&self, start: usize) {
        let mut state = self.lock();
        let Ok(index) = state
            .allocations
            .binary_search_by_key(&start, |allocation| allocation.start)
        else {
            return;
        };
        let allocation = &mut state.allocations[index];
        if allocation.freed {
            return;
        }
        allocation.freed = true;
        // Its pages hold nothing else: allocations are a gap of more than a page apart.
        let first = allocation.start / PAGE * PAGE;
        let end = allocation.end().next_multiple_of(PAGE);
        // SAFETY: pages of our own mapping; after this they read as zero again.
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED) };
    }

    /// The allocations that hold or held `address`'s neighbours: the last one starting at or
    /// below it and the first one after it.
    pub fn around(&self, address: usize) -> (Option<Allocation>, Option<Allocation>) {
        let state = self.lock();
        let after = state
            .allocations
            .partition_point(|allocation| allocation.start <= address);
        let before = after.checked_sub(1).map(|index| state.allocations[index]);
        (before, state.allocations.get(after).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_apart_zeroed_and_never_reused() {
        let Some(arena) = Arena::get() else {
            panic!("no address range for the arena");
        };
        let (start, len) = arena.range();
        let a = arena.alloc(100, Holds::Buffer).unwrap();
        let b = arena.alloc(4096, Holds::Shared).unwrap();
        assert!(a >= start && b < start + len);
        assert_eq!(a % ALIGN, 0);
        assert!(b >= a + 100 + GAP);
        // SAFETY: 100 bytes of the allocation.
        let bytes = unsafe { std::slice::from_raw_parts_mut(a as *mut u8, 100) };
        assert!(bytes.iter().all(|&byte| byte == 0));
        bytes.fill(7);
        assert_eq!(arena.around(a + 150).0.map(|x| x.start), Some(a));
        assert_eq!(arena.around(a + 150).1.map(|x| x.start), Some(b));
        arena.free(a);
        assert!(arena.around(a + 1).0.is_some_and(|x| x.freed));
        assert!(arena.around(b + 1).0.is_some_and(|x| !x.freed));
        let c = arena.alloc(100, Holds::Buffer).unwrap();
        assert!(c > b);
        // SAFETY: the freed pages are still mapped, and read as zero.
        assert_eq!(unsafe { (a as *const u8).read() }, 0);
    }
}
