//! Memory the host and the device share, and device memory the RPC server hands out.
//!
//! Host-visible memory comes from `cuMemHostAlloc` with `PORTABLE | DEVICEMAP` and *without*
//! `WRITECOMBINED`: the host polls the RPC mailboxes in it, and reads of write-combined memory
//! are uncached (cudarc's `alloc_pinned` uses write-combined memory, so it is not used here).

use super::driver::{calls, DriverError};
use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};
use std::collections::HashSet;

/// Zeroed, page-locked host memory mapped into the device's address space. Freed on drop.
pub(crate) struct PinnedHost {
    host: *mut u8,
    device: CUdeviceptr,
    len: usize,
}

impl PinnedHost {
    /// Allocates `len` zeroed bytes (at least one, so a zero-length request still has an
    /// address). The context must be current.
    pub(crate) fn new(len: usize) -> Result<PinnedHost, DriverError> {
        let (host, device) = calls::host_alloc_mapped(len)?;
        // SAFETY: the driver just allocated `len.max(1)` writable bytes at `host`. Fresh pinned
        // pages are usually zero, but nothing promises it and the RPC mailboxes must start at 0.
        unsafe { std::ptr::write_bytes(host, 0, len.max(1)) };
        Ok(PinnedHost { host, device, len })
    }

    pub(crate) fn host(&self) -> *mut u8 {
        self.host
    }

    pub(crate) fn device(&self) -> u64 {
        self.device
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies `bytes` to the start of the buffer.
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        let count = bytes.len().min(self.len);
        // SAFETY: `count` is within the allocation; `bytes` cannot overlap memory we own.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.host, count) };
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        // SAFETY: `host` came from `cuMemHostAlloc` and is freed once; an error here (a context
        // already torn down by a fault) leaves nothing we could do.
        let _ = unsafe { calls::host_free(self.host) };
    }
}

/// Device memory that the RPC server allocates for the running kernel (`malloc`/`free` over RPC).
///
/// Allocation and release go to a separate non-blocking stream: on the kernel's stream they
/// would wait for the kernel, which is waiting for them. Pointers the device passes to `free`
/// are untrusted: only addresses this allocator handed out (and has not freed) are released.
pub(crate) struct DeviceHeap {
    stream: CUstream,
    stream_ordered: bool,
    live: HashSet<u64>,
    /// Without memory pools, frees wait here until the launch has ended: `cuMemFree`
    /// synchronizes with the context, and the running kernel may be waiting for our server.
    deferred: Vec<u64>,
}

impl DeviceHeap {
    /// `stream` must be a non-blocking stream of the current context that outlives the heap.
    /// `stream_ordered` says whether the device supports `cuMemAllocAsync`.
    pub(crate) fn new(stream: CUstream, stream_ordered: bool) -> DeviceHeap {
        DeviceHeap {
            stream,
            stream_ordered,
            live: HashSet::new(),
            deferred: Vec::new(),
        }
    }

    /// Allocates `size` bytes of device memory; `None` when the device is out of memory (the
    /// device's `malloc` then returns null).
    pub(crate) fn alloc(&mut self, size: u64) -> Option<u64> {
        let size = usize::try_from(size).ok()?.max(1);
        // SAFETY: `stream` is a live non-blocking stream of the current context.
        let pointer = unsafe { calls::device_alloc(size, self.ordered_stream()) }.ok()?;
        if self.stream_ordered {
            // The pointer may only be used once the allocation has happened in stream order.
            loop {
                // SAFETY: `stream` is live.
                match unsafe { calls::stream_query(self.stream) } {
                    CUresult::CUDA_SUCCESS => break,
                    CUresult::CUDA_ERROR_NOT_READY => std::hint::spin_loop(),
                    _ => return None,
                }
            }
        }
        self.live.insert(pointer);
        Some(pointer)
    }

    /// Frees an address from [`DeviceHeap::alloc`]. Returns false (and does nothing) for any
    /// other address, so a corrupt request from the device cannot free driver memory.
    pub(crate) fn free(&mut self, pointer: u64) -> bool {
        if !self.live.remove(&pointer) {
            return false;
        }
        if self.stream_ordered {
            self.release(pointer);
        } else {
            self.deferred.push(pointer);
        }
        true
    }

    /// Releases the frees deferred while a kernel ran. Called between launches.
    pub(crate) fn release_deferred(&mut self) {
        for pointer in std::mem::take(&mut self.deferred) {
            self.release(pointer);
        }
    }

    fn release(&self, pointer: u64) {
        // SAFETY: `pointer` was allocated by this heap, on the same stream, and is released
        // once. Errors mean the context is already broken; the memory goes with it.
        let _ = unsafe { calls::device_free(pointer, self.ordered_stream()) };
    }

    /// The stream allocations are ordered on, when the device has memory pools.
    fn ordered_stream(&self) -> Option<CUstream> {
        self.stream_ordered.then_some(self.stream)
    }

    /// Frees everything still allocated. Called before the stream goes away.
    pub(crate) fn release_all(&mut self) {
        self.release_deferred();
        for pointer in std::mem::take(&mut self.live) {
            self.release(pointer);
        }
    }
}

impl crate::handlers::DeviceMemory for DeviceHeap {
    fn malloc(&mut self, size: u64) -> u64 {
        self.alloc(size).unwrap_or(0)
    }

    fn free(&mut self, address: u64) {
        // An address we never handed out is ignored (see `DeviceHeap::free`).
        let _ = DeviceHeap::free(self, address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_memory_pools_frees_wait_for_the_launch_to_end() {
        // No driver call happens here: a deferred free only records the pointer, and the
        // unknown pointer is refused before any release.
        let mut heap = DeviceHeap::new(std::ptr::null_mut(), false);
        heap.live.insert(0x7000);
        assert!(heap.free(0x7000));
        assert_eq!(heap.deferred, [0x7000]);
        assert!(!heap.free(0x7000), "freed twice");
        assert!(!heap.free(0x1234), "never allocated here");
        // Nothing to release between launches now, so the test's null stream is never used.
        heap.deferred.clear();
    }
}
