//! Memory pools and allocations: the kernarg pool and the fine-grained pool of the CPU agent
//! (host memory the GPU reads coherently: kernel arguments, argv/envp, the RPC buffer) and the
//! coarse-grained pool of the GPU (device memory: `malloc` over RPC, the return slot).

use super::driver::{runtime, runtime_message};
use super::driver::{HsaError, StatusExt};
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
    })
}

/// Size of a GPU's coarse-grained (device) memory pool, for `info`.
pub(crate) fn device_memory_bytes(lib: &HsaLib, gpu: hsa_agent_t) -> Option<u64> {
    let pools = list_pools(lib, gpu).ok()?;
    pick_pool(&pools, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED).map(|pool| pool.size)
}

fn list_pools(lib: &HsaLib, agent: hsa_agent_t) -> Result<Vec<PoolInfo>, HsaError> {
    let mut handles: Vec<hsa_amd_memory_pool_t> = Vec::new();
    // SAFETY: `collect_pool` pushes into the Vec that `data` points to, which outlives the call.
    unsafe {
        (lib.hsa_amd_agent_iterate_memory_pools)(
            agent,
            Some(collect_pool),
            (&mut handles as *mut Vec<_>).cast(),
        )
    }
    .result(lib, "hsa_amd_agent_iterate_memory_pools")?;
    handles
        .into_iter()
        .map(|pool| {
            let mut segment = 0u32;
            let mut flags = 0u32;
            let mut size = 0usize;
            let mut alloc_allowed = false;
            // SAFETY: SEGMENT is a 32-bit enum, GLOBAL_FLAGS a uint32_t, SIZE a size_t and
            // RUNTIME_ALLOC_ALLOWED a bool; each out-pointer has that type.
            unsafe {
                let get = lib.hsa_amd_memory_pool_get_info;
                get(
                    pool,
                    HSA_AMD_MEMORY_POOL_INFO_SEGMENT,
                    (&mut segment as *mut u32).cast(),
                )
                .result(lib, "hsa_amd_memory_pool_get_info")?;
                if segment == HSA_AMD_SEGMENT_GLOBAL {
                    get(
                        pool,
                        HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                        (&mut flags as *mut u32).cast(),
                    )
                    .result(lib, "hsa_amd_memory_pool_get_info")?;
                }
                get(
                    pool,
                    HSA_AMD_MEMORY_POOL_INFO_SIZE,
                    (&mut size as *mut usize).cast(),
                )
                .result(lib, "hsa_amd_memory_pool_get_info")?;
                get(
                    pool,
                    HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                    (&mut alloc_allowed as *mut bool).cast(),
                )
                .result(lib, "hsa_amd_memory_pool_get_info")?;
            }
            Ok(PoolInfo {
                pool,
                segment,
                global_flags: flags,
                size: size as u64,
                alloc_allowed,
            })
        })
        .collect()
}

unsafe extern "C" fn collect_pool(pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t {
    // SAFETY: `data` is the Vec passed by `list_pools`, borrowed for this call.
    let pools = unsafe { &mut *data.cast::<Vec<hsa_amd_memory_pool_t>>() };
    pools.push(pool);
    HSA_STATUS_SUCCESS
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
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; flags must be 0.
        unsafe { (lib.hsa_amd_memory_pool_allocate)(pool, len.max(1), 0, &mut ptr) }
            .result(lib, "hsa_amd_memory_pool_allocate")?;
        let buffer = PoolBuffer {
            lib: Arc::clone(lib),
            ptr,
            len,
        };
        // SAFETY: `ptr` was just allocated by the runtime; one agent, no flags.
        unsafe { (lib.hsa_amd_agents_allow_access)(1, &gpu, std::ptr::null(), ptr) }
            .result(lib, "hsa_amd_agents_allow_access")?;
        Ok(buffer)
    }

    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.cast()
    }

    /// The address as the GPU sees it (HSA shares one virtual address space).
    pub(crate) fn address(&self) -> u64 {
        self.ptr as u64
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
        let _ = unsafe { (self.lib.hsa_amd_memory_pool_free)(self.ptr) };
    }
}

/// A signal, destroyed on drop.
pub(crate) struct Signal {
    lib: Arc<HsaLib>,
    pub handle: hsa_signal_t,
}

impl Signal {
    pub(crate) fn new(lib: &Arc<HsaLib>, initial: i64) -> Result<Signal, HsaError> {
        let mut handle = hsa_signal_t::default();
        // SAFETY: no consumer list (any agent may wait); `handle` is a valid out-pointer.
        unsafe { (lib.hsa_signal_create)(initial, 0, std::ptr::null(), &mut handle) }
            .result(lib, "hsa_signal_create")?;
        Ok(Signal {
            lib: Arc::clone(lib),
            handle,
        })
    }

    /// The current value.
    pub(crate) fn load(&self) -> i64 {
        // SAFETY: the signal is alive for `self`'s lifetime.
        unsafe { (self.lib.hsa_signal_load_scacquire)(self.handle) }
    }

    /// Waits until the value is 0 or `timeout_ns` passes (the runtime may return earlier);
    /// returns the last value seen.
    pub(crate) fn wait_zero(&self, timeout_ns: u64) -> i64 {
        // SAFETY: the signal is alive for `self`'s lifetime.
        unsafe {
            (self.lib.hsa_signal_wait_scacquire)(
                self.handle,
                HSA_SIGNAL_CONDITION_EQ,
                0,
                timeout_ns,
                HSA_WAIT_STATE_BLOCKED,
            )
        }
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        // SAFETY: created by hsa_signal_create and destroyed once; nothing waits on it after
        // its owner is gone.
        let _ = unsafe { (self.lib.hsa_signal_destroy)(self.handle) };
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
    // SAFETY: per the caller; no dependencies; `done` lives until the wait below ends.
    unsafe {
        (lib.hsa_amd_memory_async_copy)(
            dst,
            dst_agent,
            src,
            src_agent,
            len,
            0,
            std::ptr::null(),
            done.handle,
        )
    }
    .result(lib, "hsa_amd_memory_async_copy")
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
