//! What only GPU builds need: the panic handler and the global allocator.

use core::alloc::{GlobalAlloc, Layout};
use core::fmt::Write;

/// Formats the panic message into a fixed buffer (no allocation: the allocator itself may be
/// what panicked), reports it with its location over RPC, then ends this thread cleanly.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let mut message = crate::io::FixedBuf::<512>::new();
    let _ = write!(message, "{}", info.message());
    let (file, line, column) = info
        .location()
        .map_or(("<unknown>", 0, 0), |l| (l.file(), l.line(), l.column()));
    crate::rpc::report_panic(message.as_bytes(), file, line, column);
    crate::arch::end_thread()
}

/// Device memory from the host over RPC MALLOC/FREE. The host's allocation is aligned to at
/// least 256 bytes (CUDA and HSA both guarantee it); larger alignments over-allocate.
struct RpcAllocator;

const HOST_ALIGN: usize = 256;

// SAFETY: allocations come from the host, which returns distinct live blocks of at least the
// requested size (or null), aligned as required here.
unsafe impl GlobalAlloc for RpcAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.align() <= HOST_ALIGN {
            return crate::rpc::malloc(layout.size());
        }
        // Room to move up to the alignment plus a word to remember the original pointer.
        let Some(size) = layout.size().checked_add(layout.align() + 8) else {
            return core::ptr::null_mut();
        };
        let base = crate::rpc::malloc(size);
        if base.is_null() {
            return base;
        }
        let aligned = (base as usize + 8).next_multiple_of(layout.align());
        // SAFETY: `aligned - 8 >= base` and `aligned + size <= base + size + align + 8`.
        unsafe { ((aligned - 8) as *mut usize).write(base as usize) };
        aligned as *mut u8
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.align() <= HOST_ALIGN {
            crate::rpc::free(ptr);
        } else {
            // SAFETY: `alloc` stored the original pointer in the word before `ptr`.
            let base = unsafe { ((ptr as usize - 8) as *const usize).read() };
            crate::rpc::free(base as *mut u8);
        }
    }
}

#[global_allocator]
static ALLOCATOR: RpcAllocator = RpcAllocator;
