//! Memory pools and allocations: the kernarg pool and the fine-grained pool of the CPU agent
//! (host memory the GPU reads coherently: kernel arguments, argv/envp, the RPC buffer) and the
//! coarse-grained pool of the GPU (device memory: `malloc` over RPC, the return slot).

use super::driver::{calls, HsaError};
use super::driver::{runtime, runtime_message};
use crate::BackendError;
use hsa_sys::*;
use std::ffi::c_void;
use std::sync::Arc;

/// What we read about one pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolInfo {
    pub pool: hsa_amd_memory_pool_t,
    pub segment: hsa_amd_segment_t,
    pub global_flags: u32,
    pub size: u64,
    pub alloc_allowed: bool,
}

/// The first global-segment pool that allows allocation and has `flag`.
pub(crate) fn pick_pool(pools: &[PoolInfo], flag: u32) -> Option<PoolInfo> {
    pools
        .iter()
        .find(|pool| {
            pool.segment == HSA_AMD_SEGMENT_GLOBAL
                && pool.alloc_allowed
                && pool.global_flags & flag != 0
        })
        .copied()
}

/// The three pools a launch needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pools {
    pub kernarg: hsa_amd_memory_pool_t,
    pub fine_grained: hsa_amd_memory_pool_t,
    pub coarse_grained: hsa_amd_memory_pool_t,
    /// Size of the GPU's coarse-grained pool, reported as the device's memory.
    pub device_memory_bytes: Option<u64>,
    /// Size of the GPU's group-segment pool: the LDS a workgroup may have (64 KiB on gfx90a
    /// and gfx11), static and dynamic together; `None` when the runtime lists no such pool.
    pub group_segment_bytes: Option<u64>,
}

/// The size of the group-segment (LDS) pool among `pools`, if there is one.
pub(crate) fn group_pool_size(pools: &[PoolInfo]) -> Option<u64> {
    pools
        .iter()
        .find(|pool| pool.segment == HSA_AMD_SEGMENT_GROUP)
        .map(|pool| pool.size)
}

/// Finds the kernarg and fine-grained pools on `cpu` and the coarse-grained pool on `gpu`.
pub(crate) fn find_pools(
    lib: &HsaLib,
    cpu: hsa_agent_t,
    gpu: hsa_agent_t,
) -> Result<Pools, BackendError> {
    let cpu_pools = list_pools(lib, cpu).map_err(runtime)?;
    let gpu_pools = list_pools(lib, gpu).map_err(runtime)?;
    let missing = |what: &str| runtime_message(format!("the runtime offers no {what} memory pool"));
    let kernarg = pick_pool(&cpu_pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT)
        .ok_or_else(|| missing("kernel-argument"))?;
    let fine = pick_pool(&cpu_pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED)
        .ok_or_else(|| missing("fine-grained host"))?;
    let coarse = pick_pool(&gpu_pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED)
        .ok_or_else(|| missing("coarse-grained device"))?;
    Ok(Pools {
        kernarg: kernarg.pool,
        fine_grained: fine.pool,
        coarse_grained: coarse.pool,
        device_memory_bytes: Some(coarse.size),
        group_segment_bytes: group_pool_size(&gpu_pools),
    })
}

/// Size of a GPU's coarse-grained (device) memory pool, for `info`.
pub(crate) fn device_memory_bytes(lib: &HsaLib, gpu: hsa_agent_t) -> Option<u64> {
    let pools = list_pools(lib, gpu).ok()?;
    pick_pool(&pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED).map(|pool| pool.size)
}

fn list_pools(lib: &HsaLib, agent: hsa_agent_t) -> Result<Vec<PoolInfo>, HsaError> {
    calls::agent_memory_pools(lib, agent)?
        .into_iter()
        .map(|pool| {
            // SAFETY: SEGMENT is a 32-bit enum, GLOBAL_FLAGS a uint32_t, SIZE a size_t and
            // RUNTIME_ALLOC_ALLOWED a bool; each is read as that type.
            unsafe {
                let segment: u32 = calls::pool_info(lib, pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT)?;
                let global_flags: u32 = if segment == HSA_AMD_SEGMENT_GLOBAL {
                    calls::pool_info(lib, pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS)?
                } else {
                    0
                };
                let size: usize = calls::pool_info(lib, pool, HSA_AMD_MEMORY_POOL_INFO_SIZE)?;
                let alloc_allowed: bool =
                    calls::pool_info(lib, pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED)?;
                Ok(PoolInfo {
                    pool,
                    segment,
                    global_flags,
                    size: size as u64,
                    alloc_allowed,
                })
            }
        })
        .collect()
}

/// One allocation from a pool, freed on drop. Host pools (kernarg, fine-grained) give memory
/// the host can touch through [`PoolBuffer::as_mut_ptr`]; coarse-grained memory only the GPU
/// (and async copies) may touch.
pub(crate) struct PoolBuffer {
    lib: Arc<HsaLib>,
    ptr: *mut c_void,
    len: usize,
}

// SAFETY: the buffer is a plain allocation owned by this value; HSA allows freeing it from any
// thread.
unsafe impl Send for PoolBuffer {}
// SAFETY: shared references only read the pointer and length.
unsafe impl Sync for PoolBuffer {}

impl PoolBuffer {
    /// Allocates `len` bytes (at least 1) from `pool` and lets `gpu` access them.
    pub(crate) fn allocate(
        lib: &Arc<HsaLib>,
        pool: hsa_amd_memory_pool_t,
        len: usize,
        gpu: hsa_agent_t,
    ) -> Result<PoolBuffer, HsaError> {
        let ptr = calls::pool_allocate(lib, pool, len.max(1))?;
        let buffer = PoolBuffer {
            lib: Arc::clone(lib),
            ptr,
            len,
        };
        // SAFETY: `ptr` was just allocated by the runtime and is owned by `buffer`.
        unsafe { calls::allow_access(lib, gpu, ptr) }?;
        Ok(buffer)
    }

    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.cast()
    }

    /// The address as the GPU sees it (HSA shares one virtual address space).
    pub(crate) fn address(&self) -> u64 {
        self.ptr as u64
    }

    /// Sets the whole buffer (rounded up to 4 bytes: [`PoolBuffer::allocate_words`]) to zero
    /// with the runtime's fill, which works on device memory the host cannot touch.
    pub(crate) fn zero(&self) -> Result<(), HsaError> {
        // SAFETY: the allocation holds `len` rounded up to whole 32-bit words (see
        // `allocate_words`) and is 4-aligned (pool allocations are page-aligned).
        unsafe { calls::memory_fill(&self.lib, self.ptr, 0, self.len.div_ceil(4)) }
    }

    /// Allocates `len` bytes rounded up to whole 32-bit words (at least one), for
    /// [`PoolBuffer::zero`], and lets `gpu` access them.
    pub(crate) fn allocate_words(
        lib: &Arc<HsaLib>,
        pool: hsa_amd_memory_pool_t,
        len: usize,
        gpu: hsa_agent_t,
    ) -> Result<PoolBuffer, HsaError> {
        PoolBuffer::allocate(lib, pool, len.max(1).next_multiple_of(4), gpu)
    }

    /// Copies `bytes` to the start of a host-visible buffer.
    ///
    /// # Safety
    /// The buffer must come from a host-accessible pool (kernarg or fine-grained) and no kernel
    /// may be using it.
    pub(crate) unsafe fn write_host(&self, bytes: &[u8]) {
        let count = bytes.len().min(self.len);
        // SAFETY: host-accessible per the caller; `count` fits in the allocation.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.as_mut_ptr(), count) };
    }
}

impl Drop for PoolBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from hsa_amd_memory_pool_allocate and is freed once, here. A
        // failure leaks the memory and cannot be acted on in a destructor.
        let _ = unsafe { calls::pool_free(&self.lib, self.ptr) };
    }
}

/// A signal, destroyed on drop.
pub(crate) struct Signal {
    lib: Arc<HsaLib>,
    pub handle: hsa_signal_t,
}

impl Signal {
    pub(crate) fn new(lib: &Arc<HsaLib>, initial: i64) -> Result<Signal, HsaError> {
        let handle = calls::signal_create(lib, initial)?;
        Ok(Signal {
            lib: Arc::clone(lib),
            handle,
        })
    }

    /// The current value.
    pub(crate) fn load(&self) -> i64 {
        // SAFETY: the signal is alive for `self`'s lifetime.
        unsafe { calls::signal_load_acquire(&self.lib, self.handle) }
    }

    /// Waits until the value is 0 or `timeout_ns` passes (the runtime may return earlier);
    /// returns the last value seen.
    pub(crate) fn wait_zero(&self, timeout_ns: u64) -> i64 {
        // SAFETY: the signal is alive for `self`'s lifetime.
        unsafe { calls::signal_wait_zero(&self.lib, self.handle, timeout_ns) }
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        // SAFETY: created by hsa_signal_create and destroyed once; nothing waits on it after
        // its owner is gone.
        let _ = unsafe { calls::signal_destroy(&self.lib, self.handle) };
    }
}

/// A module's RPC doorbell on AMD: an interrupt signal whose value counts the RPC requests the
/// device opened and the server has not closed. Opening the first one, the device writes the
/// signal's event id to its event mailbox and raises an interrupt (`s_sendmsg`), which wakes a
/// host thread asleep in a wait on the signal. LLVM libc's client takes the same three fields
/// (value, mailbox, event id) from HIP's runtime.
pub(crate) struct RpcDoorbell {
    pub signal: Signal,
    /// The address of the signal's value: the counter.
    pub counter: u64,
    pub mailbox: u64,
    pub event_id: u32,
}

impl RpcDoorbell {
    /// A doorbell on a new signal at 0, or `None` when the runtime's signals cannot wake a
    /// sleeping thread (no event mailbox: ROCr without interrupts, `HSA_ENABLE_INTERRUPT=0`),
    /// where a wait on it would spin.
    pub(crate) fn new(lib: &Arc<HsaLib>) -> Result<Option<RpcDoorbell>, HsaError> {
        let signal = Signal::new(lib, 0)?;
        // SAFETY: a live signal of the runtime, whose handle is the address of its
        // `amd_signal_t`, alive as long as the signal; read once, volatile since the runtime
        // wrote it outside our view.
        let fields = unsafe { std::ptr::read_volatile(calls::amd_signal(signal.handle)) };
        const USER_SIGNAL: i64 = 1;
        if fields.kind != USER_SIGNAL || fields.value != 0 || fields.event_mailbox_ptr == 0 {
            return Ok(None);
        }
        let counter = signal.handle.handle + std::mem::offset_of!(amd_signal_t, value) as u64;
        Ok(Some(RpcDoorbell {
            signal,
            counter,
            mailbox: fields.event_mailbox_ptr,
            event_id: fields.event_id,
        }))
    }
}

/// Copies `len` bytes with the runtime's DMA engine and waits for the copy.
///
/// # Safety
/// `dst`/`src` must be valid for `len` bytes on their agents: device memory or
/// runtime-allocated / locked host memory.
pub(crate) unsafe fn copy_and_wait(
    lib: &Arc<HsaLib>,
    dst: *mut c_void,
    dst_agent: hsa_agent_t,
    src: *const c_void,
    src_agent: hsa_agent_t,
    len: usize,
) -> Result<(), BackendError> {
    let done = Signal::new(lib, 1).map_err(runtime)?;
    // SAFETY: per the caller; `done` lives until the wait below ends.
    unsafe { calls::memory_async_copy(lib, (dst, dst_agent), (src, src_agent), len, done.handle) }
        .map_err(runtime)?;
    // A copy of a few KiB takes microseconds; a minute means the device is gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while done.wait_zero(100_000_000) != 0 {
        if std::time::Instant::now() > deadline {
            return Err(runtime_message(
                "a host/device memory copy did not finish within 60 s",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(handle: u64, segment: u32, flags: u32, alloc_allowed: bool) -> PoolInfo {
        PoolInfo {
            pool: hsa_amd_memory_pool_t { handle },
            segment,
            global_flags: flags,
            size: 1 << 30,
            alloc_allowed,
        }
    }

    #[test]
    fn the_group_pool_gives_the_lds_size() {
        let pools = [
            pool(
                1,
                HSA_AMD_SEGMENT_GLOBAL,
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
                true,
            ),
            PoolInfo {
                size: 65536,
                ..pool(2, HSA_AMD_SEGMENT_GROUP, 0, false)
            },
        ];
        assert_eq!(group_pool_size(&pools), Some(65536));
        assert_eq!(group_pool_size(&pools[..1]), None);
    }

    #[test]
    fn picks_the_first_allocatable_global_pool_with_the_flag() {
        let pools = [
            pool(
                1,
                HSA_AMD_SEGMENT_GROUP,
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                true,
            ),
            pool(
                2,
                HSA_AMD_SEGMENT_GLOBAL,
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                false,
            ),
            pool(
                3,
                HSA_AMD_SEGMENT_GLOBAL,
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
                    | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT,
                true,
            ),
            pool(
                4,
                HSA_AMD_SEGMENT_GLOBAL,
                HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                true,
            ),
        ];
        let fine = pick_pool(&pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED).unwrap();
        assert_eq!(fine.pool.handle, 3);
        let kernarg = pick_pool(&pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT).unwrap();
        assert_eq!(kernarg.pool.handle, 3);
        assert!(pick_pool(&pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED).is_none());
    }
}
