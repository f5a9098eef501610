//! Memory the host and the device share, and device memory the RPC server hands out.
//!
//! Host-visible memory comes from `cuMemHostAlloc` with `PORTABLE | DEVICEMAP` and *without*
//! `WRITECOMBINED`: the host polls the RPC mailboxes in it, and reads of write-combined memory
//! are uncached (cudarc's `alloc_pinned` uses write-combined memory, so it is not used here).

use super::driver::{check, DriverError};
use cudarc::driver::sys::{self, CUdeviceptr, CUresult, CUstream};
use std::collections::HashSet;

/// Flags for every host allocation the device reads: visible from every context, mapped into
/// the device's address space, cached on the host.
pub(crate) const HOST_ALLOC_FLAGS: u32 =
    sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;

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
        let size = len.max(1);
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `host` is a valid out-pointer; the flags are documented values.
        check("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut host, size, HOST_ALLOC_FLAGS)
        })?;
        let mut buffer = PinnedHost {
            host: host.cast(),
            device: 0,
            len,
        };
        // SAFETY: the driver just allocated `size` writable bytes at `host`. Fresh pinned pages
        // are usually zero, but nothing promises it and the RPC mailboxes must start at 0.
        unsafe { std::ptr::write_bytes(buffer.host, 0, size) };
        // SAFETY: `host` was allocated with DEVICEMAP; flags must be 0.
        check("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut buffer.device, host, 0)
        })?;
        Ok(buffer)
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
        let _ = unsafe { sys::cuMemFreeHost(self.host.cast()) };
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
        let mut pointer: CUdeviceptr = 0;
        if self.stream_ordered {
            // SAFETY: valid out-pointer; `stream` is a live stream of the current context.
            let status = unsafe { sys::cuMemAllocAsync(&mut pointer, size, self.stream) };
            if status != CUresult::CUDA_SUCCESS {
                return None;
            }
            // The pointer may only be used once the allocation has happened in stream order.
            loop {
                // SAFETY: `stream` is live.
                match unsafe { sys::cuStreamQuery(self.stream) } {
                    CUresult::CUDA_SUCCESS => break,
                    CUresult::CUDA_ERROR_NOT_READY => std::hint::spin_loop(),
                    _ => return None,
                }
            }
        } else {
            // SAFETY: valid out-pointer; the context is current.
            let status = unsafe { sys::cuMemAlloc_v2(&mut pointer, size) };
            if status != CUresult::CUDA_SUCCESS {
                return None;
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
        // SAFETY: `pointer` was allocated by this heap and is released once. Errors mean the
        // context is already broken; the memory goes with it.
        let _ = unsafe {
            if self.stream_ordered {
                sys::cuMemFreeAsync(pointer, self.stream)
            } else {
                sys::cuMemFree_v2(pointer)
            }
        };
    }

    /// Frees everything still allocated. Called before the stream goes away.
    pub(crate) fn release_all(&mut self) {
        self.release_deferred();
        for pointer in std::mem::take(&mut self.live) {
            self.release(pointer);
        }
    }
}

impl crate::server::DeviceMemory for DeviceHeap {
    fn malloc(&mut self, size: u64) -> u64 {
        self.alloc(size).unwrap_or(0)
    }

    fn free(&mut self, address: u64) {
        // An address we never handed out is ignored (see `DeviceHeap::free`).
        let _ = DeviceHeap::free(self, address);
    }
}
