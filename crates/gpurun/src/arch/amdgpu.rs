//! AMD: ids, barrier and wave end through `core::arch::amdgpu` (inline asm is rejected on this
//! target); block and grid sizes from a global the loader writes.

use core::arch::amdgpu;
use core::sync::atomic::{AtomicU32, Ordering};

pub(crate) type Lanes = gpurun_rpc::lanes::Warp;

/// Block and grid sizes of the current launch: `[threads x, y, z, blocks x, y, z]`, written by
/// the loader before every launch (`docs/abi.md`). The dispatch packet holds them too, but this
/// nightly cannot declare `llvm.amdgcn.dispatch.ptr` (its address-space-4 return type), and asm
/// is rejected on this target.
#[unsafe(no_mangle)]
pub static __gpurun_launch_shape: LaunchShape = LaunchShape([const { AtomicU32::new(1) }; 6]);

/// See [`__gpurun_launch_shape`].
#[repr(C)]
pub struct LaunchShape([AtomicU32; 6]);

fn shape(index: usize) -> u32 {
    __gpurun_launch_shape.0[index].load(Ordering::Relaxed)
}

pub fn thread_idx() -> [u32; 3] {
    [
        amdgpu::workitem_id_x(),
        amdgpu::workitem_id_y(),
        amdgpu::workitem_id_z(),
    ]
}

pub fn block_idx() -> [u32; 3] {
    [
        amdgpu::workgroup_id_x(),
        amdgpu::workgroup_id_y(),
        amdgpu::workgroup_id_z(),
    ]
}

pub fn block_dim() -> [u32; 3] {
    [shape(0), shape(1), shape(2)]
}

pub fn grid_dim() -> [u32; 3] {
    [shape(3), shape(4), shape(5)]
}

pub fn lane_size() -> u32 {
    amdgpu::wavefrontsize()
}

pub fn lane_id() -> u32 {
    let low = amdgpu::mbcnt_lo(!0, 0);
    if lane_size() == 64 {
        amdgpu::mbcnt_hi(!0, low)
    } else {
        low
    }
}

/// A block barrier with HIP `__syncthreads` semantics: writes before it are visible to every
/// thread of the block after it. `s_barrier` alone only synchronizes execution (and LLVM may move
/// memory accesses across it), so it sits between a release and an acquire fence. Rust has no
/// workgroup-scope fence; these are system-scope, which orders at least as much (at some cost:
/// on gfx90a an L2 write-back before and an invalidate after).
pub fn barrier() {
    core::sync::atomic::fence(Ordering::Release);
    amdgpu::s_barrier();
    core::sync::atomic::fence(Ordering::Acquire);
}

/// Ends this wavefront's thread with `s_endpgm`, so the queue stays usable.
pub fn end_thread() -> ! {
    amdgpu::endpgm()
}
