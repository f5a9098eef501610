//! Launch shapes: the block-size limit every target shares, and where an AMD kernel finds its
//! block and grid sizes (the AQL dispatch packet, docs/abi.md "Block and grid sizes on AMDGPU").

/// The largest block every target accepts (CUDA's and HSA's limit), in threads.
pub const MAX_BLOCK_THREADS: u64 = 1024;

/// Byte offsets in the AQL kernel dispatch packet (`hsa_kernel_dispatch_packet_t`, HSA's
/// `hsa.h`) of the fields the device runtime reads through `llvm.amdgcn.dispatch.ptr`, as HIP
/// does: the loader writes them into every packet it publishes, so no extra copy is needed.
pub mod dispatch_packet {
    /// `workgroup_size_x` (u16); y and z follow at +2 and +4.
    pub const WORKGROUP_SIZE_X: usize = 4;
    /// `grid_size_x` (u32, in work-items, not workgroups); y and z follow at +4 and +8.
    pub const GRID_SIZE_X: usize = 12;
    /// `group_segment_size` (u32): the LDS a workgroup has, the kernel's static part and the
    /// launch's dynamic shared memory after it (`gpurun::shared::bytes`), then
    /// [`super::AMDGPU_RUNTIME_LDS`].
    pub const GROUP_SEGMENT_SIZE: usize = 28;
}

/// Bytes of LDS the HSA backend adds to every AMD launch after the launch's shared memory, for
/// the device runtime's own use (the counters of `gpurun::barrier_count` and its kind, which
/// need memory every wavefront of the workgroup reaches); `gpurun::shared::bytes` leaves them
/// out. Room for two 4-byte counters wherever the launch's bytes end.
pub const AMDGPU_RUNTIME_LDS: u32 = 12;
