//! Host memory standing in for device memory: RPC MALLOC/FREE and shared allocations, and the
//! device buffers, which live in the checked memory ([`super::arena`]) when the memory checks
//! are on.

use super::arena::{Arena, Holds};
use crate::handlers::DeviceMemory;
use std::alloc::Layout;
use std::collections::HashMap;

/// Alignment of every block, as a GPU allocator would give.
const ALIGN: usize = 256;

/// Zeroed, aligned blocks freed when dropped or on request.
#[derive(Default)]
pub(crate) struct HostMemory {
    /// Each block's layout (at least one byte) and the size asked for.
    blocks: HashMap<usize, (Layout, usize)>,
    /// Where the blocks come from when the memory checks are on; else the heap.
    arena: Option<&'static Arena>,
}

impl HostMemory {
    /// Memory whose blocks come from `arena`, where the checks see every access.
    pub fn in_arena(arena: &'static Arena) -> HostMemory {
        HostMemory {
            blocks: HashMap::new(),
            arena: Some(arena),
        }
    }

    /// A zeroed block of `size` bytes, or `None` when the system has no memory for it.
    pub fn alloc_zeroed(&mut self, size: usize) -> Option<*mut u8> {
        let layout = Layout::from_size_align(size.max(1), ALIGN).ok()?;
        let block = match self.arena {
            Some(arena) => arena.alloc(size, Holds::Buffer)? as *mut u8,
            // SAFETY: `layout` has a non-zero size.
            None => unsafe { std::alloc::alloc_zeroed(layout) },
        };
        if block.is_null() {
            return None;
        }
        self.blocks.insert(block as usize, (layout, size));
        Some(block)
    }

    /// Frees a block this allocator returned; other addresses are ignored (the device's word
    /// is not trusted).
    pub fn release(&mut self, address: usize) {
        if let Some((layout, _)) = self.blocks.remove(&address) {
            self.free_block(address, layout);
        }
    }

    fn free_block(&self, address: usize, layout: Layout) {
        match self.arena {
            Some(arena) => arena.free(address),
            // SAFETY: the block was allocated here with this layout and is no longer tracked.
            None => unsafe { std::alloc::dealloc(address as *mut u8, layout) },
        }
    }

    /// Every live block: `(address, bytes)`.
    pub fn blocks(&self) -> Vec<(usize, usize)> {
        self.blocks
            .iter()
            .map(|(&address, &(_, size))| (address, size))
            .collect()
    }
}

impl HostMemory {
    /// A zeroed block both sides use (host and device addresses are the same here).
    pub fn alloc_shared(&mut self, size: usize) -> Result<crate::SharedAlloc, crate::BackendError> {
        let block = self.alloc_zeroed(size).ok_or_else(|| {
            crate::BackendError::InvalidArgument(format!("no memory for {size} bytes"))
        })?;
        Ok(crate::SharedAlloc {
            host: block,
            device: block as u64,
            len: size,
        })
    }

    /// A zeroed device buffer (`Primitives::alloc_device` of the backends on host memory): its
    /// address, the same on both sides.
    pub fn alloc_device(&mut self, size: usize) -> Result<u64, crate::BackendError> {
        self.alloc_shared(size).map(|block| block.device)
    }
}

impl HostMemory {
    /// Copies `bytes` to `address`, which must lie in one of this allocator's blocks.
    pub fn write(&mut self, address: u64, bytes: &[u8]) -> Result<(), crate::BackendError> {
        let target = self.checked(address, bytes.len())?;
        // SAFETY: `checked` found `bytes.len()` bytes at `target` inside a live block.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), target, bytes.len()) };
        Ok(())
    }

    /// Fills `out` from `address`, which must lie in one of this allocator's blocks.
    pub fn read(&self, address: u64, out: &mut [u8]) -> Result<(), crate::BackendError> {
        let source = self.checked(address, out.len())?;
        // SAFETY: as in `write`; `out` is the caller's, apart from our blocks.
        unsafe { std::ptr::copy_nonoverlapping(source, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn checked(&self, address: u64, len: usize) -> Result<*mut u8, crate::BackendError> {
        let address = usize::try_from(address).unwrap_or(usize::MAX);
        self.blocks
            .iter()
            .any(|(&start, (layout, _))| {
                address >= start && address.saturating_add(len) <= start + layout.size()
            })
            .then_some(address as *mut u8)
            .ok_or_else(|| {
                crate::BackendError::InvalidArgument(format!(
                    "{len} bytes at {address:#x} are not in host-emulated device memory"
                ))
            })
    }
}

impl DeviceMemory for HostMemory {
    fn malloc(&mut self, size: u64) -> u64 {
        usize::try_from(size)
            .ok()
            .and_then(|size| self.alloc_zeroed(size))
            .map_or(0, |block| block as u64)
    }

    fn free(&mut self, address: u64) {
        if let Ok(address) = usize::try_from(address) {
            self.release(address);
        }
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        for (address, (layout, _)) in std::mem::take(&mut self.blocks) {
            self.free_block(address, layout);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_addresses_are_ignored() {
        let mut memory = HostMemory::default();
        let block = memory.malloc(100);
        assert_ne!(block, 0);
        assert_eq!(block % ALIGN as u64, 0);
        memory.free(12345);
        memory.free(block);
        memory.free(block);
        assert_eq!(memory.malloc(u64::MAX), 0);
    }
}
