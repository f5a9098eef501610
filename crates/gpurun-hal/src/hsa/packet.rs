//! Pure packing of what a launch writes: the AQL kernel dispatch packet and the kernel-argument
//! block (explicit arguments, then the hidden arguments where the kernel's metadata puts them).
//! No runtime calls here, so every byte is unit-tested.

use crate::{BackendError, LaunchShape};
use gpurun_abi::shape::AMDGPU_RUNTIME_LDS;
use gpurun_image::{HiddenArgument, HiddenArgumentKind};
use hsa_sys::*;

/// Size of the code object v5 implicit-argument block that follows the explicit arguments.
pub const IMPLICIT_ARGS_SIZE: usize = 256;
/// Offsets inside the code object v5 implicit block, for kernels the image has no metadata for.
pub const IMPLICIT_BLOCK_COUNT_X: usize = 0;
pub const IMPLICIT_GROUP_SIZE_X: usize = 12;
pub const IMPLICIT_GRID_DIMS: usize = 64;
/// Stack per work-item a kernel whose call stack size is not known statically (recursion,
/// indirect calls, `dyn` calls such as `core::fmt`'s) gets beyond its static private size,
/// unless `--stack-size` asks for more: LLVM's loader uses 16 KiB.
pub const DYNAMIC_STACK_PRIVATE_SIZE: u32 = crate::DYNAMIC_STACK_SIZE;
/// The most scratch ROCr gives one wavefront (`MAX_WAVE_SCRATCH` in ROCr's `amd_gpu_agent.cpp`,
/// the largest `COMPUTE_TMPRING_SIZE.WAVESIZE`: 8191 units of 1 KiB); a dispatch asking for more
/// per wavefront gets no scratch and fails.
pub const MAX_WAVE_SCRATCH: u32 = 8_387_584;

/// The 16-bit AQL header of a kernel dispatch: the packet type, and system-scope acquire and
/// release fences so host-visible memory (RPC buffer, arguments) is coherent at the start and
/// the end. No barrier bit: a module waits for its launch to end before it publishes the next
/// on its own queue, so no packet has to wait for an earlier one.
pub fn dispatch_header() -> u16 {
    let header = (HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE)
        | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
        | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
    header as u16
}

/// A barrier-AND packet without dependencies or completion signal, and its header word: the
/// packet processor completes it at once. It fills a reserved slot that will get no dispatch,
/// which would otherwise stall the queue (the packet processor waits at a slot whose header
/// stays invalid).
pub fn no_op_barrier() -> ([u8; 64], u32) {
    let header = HSA_PACKET_TYPE_BARRIER_AND << HSA_PACKET_HEADER_TYPE;
    let mut bytes = [0u8; 64];
    bytes[..4].copy_from_slice(&header.to_le_bytes());
    (bytes, header)
}

/// The first 32 bits of the packet (header, then setup), which are stored last and with release
/// ordering: the packet processor may start reading the packet as soon as they change.
pub fn header_word(header: u16, setup: u16) -> u32 {
    u32::from(header) | (u32::from(setup) << 16)
}

/// The most private (scratch) memory one work-item can have on an agent with wavefronts of
/// `wavefront_size` lanes: [`MAX_WAVE_SCRATCH`] shared by the lanes of a wavefront (ROCr sizes
/// scratch with the agent's wavefront size).
pub fn lane_private_limit(wavefront_size: u32) -> u32 {
    MAX_WAVE_SCRATCH / wavefront_size.max(1)
}

/// Private segment bytes per work-item for a launch of `kernel`: its static size, plus, when its
/// stack is dynamic, max([`DYNAMIC_STACK_PRIVATE_SIZE`], `stack_size`) for what it calls into
/// at run time (a debug build's `_start` has about 8 KiB of static frames and recurses through
/// `core::fmt` from there; on gfx9 an overflow silently corrupts a neighbour's scratch). In code
/// object v4 (`v4_static_size`) LLVM already counts 16 KiB of stack for the calls it cannot see
/// in the static size, so only what `stack_size` asks beyond that is added. Clamped to
/// `lane_limit` ([`lane_private_limit`]), since ROCr refuses a dispatch over it; a kernel whose
/// static size alone is over it cannot run.
pub fn launch_private_size(
    kernel: &KernelFacts,
    stack_size: Option<usize>,
    lane_limit: u32,
    v4_static_size: bool,
) -> Result<u32, BackendError> {
    if kernel.private_segment_size > lane_limit {
        return Err(BackendError::Incompatible(format!(
            "the kernel needs {} bytes of private memory per thread, more than the {lane_limit} \
             the GPU gives one",
            kernel.private_segment_size
        )));
    }
    if !kernel.dynamic_stack {
        return Ok(kernel.private_segment_size);
    }
    let requested = stack_size.map_or(0, |bytes| u32::try_from(bytes).unwrap_or(u32::MAX));
    let stack = if v4_static_size {
        requested.saturating_sub(DYNAMIC_STACK_PRIVATE_SIZE)
    } else {
        requested.max(DYNAMIC_STACK_PRIVATE_SIZE)
    };
    Ok(kernel
        .private_segment_size
        .saturating_add(stack)
        .min(lane_limit))
}

/// What the runtime tells us about a kernel symbol (`NAME.kd`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelFacts {
    /// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT`: the descriptor's device address.
    pub kernel_object: u64,
    pub kernarg_segment_size: u32,
    pub kernarg_segment_alignment: u32,
    pub group_segment_size: u32,
    pub private_segment_size: u32,
    pub dynamic_stack: bool,
}

impl KernelFacts {
    /// The same facts read from the code object's kernel descriptor (`NAME.kd`, 64 bytes):
    /// what a launch would use if the runtime did not report them. `kernel_object` is the
    /// descriptor's address once loaded. Used to cross-check the runtime's answers.
    pub fn from_descriptor(
        descriptor: &gpurun_image::KernelDescriptor,
        kernel_object: u64,
    ) -> KernelFacts {
        KernelFacts {
            kernel_object,
            kernarg_segment_size: descriptor.kernarg_size,
            // Code object v5 requires 8-byte kernarg alignment at least; the descriptor does not
            // record more.
            kernarg_segment_alignment: 8,
            group_segment_size: descriptor.group_segment_fixed_size,
            private_segment_size: descriptor.private_segment_fixed_size,
            dynamic_stack: descriptor.uses_dynamic_stack(),
        }
    }
}

/// Checks a launch shape against AQL's field widths (workgroup sizes are 16-bit, grid sizes
/// 32-bit in work-items) and rejects empty dimensions.
pub fn check_shape(shape: &LaunchShape) -> Result<(), BackendError> {
    for axis in 0..3 {
        let threads = shape.threads[axis];
        let blocks = shape.blocks[axis];
        if threads == 0 || blocks == 0 {
            return Err(BackendError::InvalidArgument(format!(
                "launch shape {shape} has an empty dimension"
            )));
        }
        if threads > u32::from(u16::MAX) {
            return Err(BackendError::InvalidArgument(format!(
                "launch shape {shape}: {threads} threads per block in one dimension do not fit \
                 an AQL packet (at most 65535)"
            )));
        }
        if u64::from(threads) * u64::from(blocks) > u64::from(u32::MAX) {
            return Err(BackendError::InvalidArgument(format!(
                "launch shape {shape}: more than 2^32-1 threads in one dimension"
            )));
        }
    }
    Ok(())
}

/// The dispatch packet for `shape`, with its header word left 0 (the caller publishes it last
/// with [`header_word`]). `setup` carries the number of dimensions; `private_size` is the
/// private segment per work-item ([`launch_private_size`]).
pub fn dispatch_packet(
    shape: &LaunchShape,
    kernel: &KernelFacts,
    private_size: u32,
    kernarg_address: u64,
    completion_signal: hsa_signal_t,
) -> Result<hsa_kernel_dispatch_packet_t, BackendError> {
    check_shape(shape)?;
    let [tx, ty, tz] = shape.threads;
    let [bx, by, bz] = shape.blocks;
    // The group segment a workgroup gets: the kernel's static LDS, then the launch's dynamic
    // shared memory, which LLVM places right after it (at the static size, which the kernel
    // descriptor reports already aligned for it), then the device runtime's own bytes.
    let group_segment_size = kernel
        .group_segment_size
        .checked_add(dynamic_lds_size(shape))
        .ok_or_else(|| {
            BackendError::InvalidArgument(format!(
                "{} bytes of shared memory do not fit an AQL packet",
                shape.shared_bytes
            ))
        })?;
    // check_shape bounded every product and width.
    Ok(hsa_kernel_dispatch_packet_t {
        header: 0,
        setup: (shape.dimensions() as u16) << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
        workgroup_size_x: tx as u16,
        workgroup_size_y: ty as u16,
        workgroup_size_z: tz as u16,
        reserved0: 0,
        grid_size_x: bx * tx,
        grid_size_y: by * ty,
        grid_size_z: bz * tz,
        private_segment_size: private_size,
        group_segment_size,
        kernel_object: kernel.kernel_object,
        kernarg_address,
        reserved2: 0,
        completion_signal,
    })
}

/// The packet's 64 bytes as the packet processor reads them (little-endian, hsa.h field order).
pub fn packet_bytes(packet: &hsa_kernel_dispatch_packet_t) -> [u8; 64] {
    let mut bytes = [0u8; 64];
    let mut at = 0;
    let mut put = |field: &[u8]| {
        bytes[at..at + field.len()].copy_from_slice(field);
        at += field.len();
    };
    put(&packet.header.to_le_bytes());
    put(&packet.setup.to_le_bytes());
    put(&packet.workgroup_size_x.to_le_bytes());
    put(&packet.workgroup_size_y.to_le_bytes());
    put(&packet.workgroup_size_z.to_le_bytes());
    put(&packet.reserved0.to_le_bytes());
    put(&packet.grid_size_x.to_le_bytes());
    put(&packet.grid_size_y.to_le_bytes());
    put(&packet.grid_size_z.to_le_bytes());
    put(&packet.private_segment_size.to_le_bytes());
    put(&packet.group_segment_size.to_le_bytes());
    put(&packet.kernel_object.to_le_bytes());
    put(&packet.kernarg_address.to_le_bytes());
    put(&packet.reserved2.to_le_bytes());
    put(&packet.completion_signal.handle.to_le_bytes());
    bytes
}

/// Where the implicit arguments start: right after the explicit ones, 8-byte aligned (every
/// hidden argument block in code object v5 is 8-aligned).
pub fn implicit_args_offset(explicit_len: usize) -> usize {
    explicit_len.div_ceil(8) * 8
}

/// Where a kernel reads its hidden arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HiddenLayout {
    /// Where the kernel's metadata (`.args`) lists them: code object v4 or v5 alike.
    Listed(Vec<HiddenArgument>),
    /// Code object v5's implicit block right after the explicit arguments: for a v5 kernel the
    /// image has no metadata for (the v5 layout is fixed relative to the block's start).
    V5Block,
    /// Not known: a code object v4 kernel without metadata, whose hidden arguments (global
    /// offsets, ...) have no fixed place. Launching it is an error with this reason.
    Unknown(String),
}

impl HiddenLayout {
    /// The layout of `kernel` in a code object of EI_ABIVERSION `abi_version` (v4: 2, v5: 3).
    pub fn of(kernel: &gpurun_image::Kernel, abi_version: u8) -> HiddenLayout {
        match kernel.hidden_arguments() {
            Some(listed) => HiddenLayout::Listed(listed.to_vec()),
            None if abi_version >= 3 => HiddenLayout::V5Block,
            None => HiddenLayout::Unknown(format!(
                "`{}` is a code object v{} kernel without argument metadata: where its hidden \
                 arguments go is not known",
                kernel.name,
                u32::from(abi_version) + 2
            )),
        }
    }

    /// The hidden arguments at their offsets for explicit arguments of `explicit_len` bytes.
    fn arguments(&self, explicit_len: usize) -> Result<Vec<HiddenArgument>, BackendError> {
        match self {
            HiddenLayout::Listed(listed) => Ok(listed.clone()),
            HiddenLayout::V5Block => {
                let start = u32::try_from(implicit_args_offset(explicit_len)).map_err(|_| {
                    BackendError::InvalidArgument("kernel arguments too large".into())
                })?;
                let at = |offset: usize| start + offset as u32;
                // The whole block is read; first so the values below land on its zeros.
                let mut arguments = vec![HiddenArgument {
                    kind: HiddenArgumentKind::Other("hidden_none".into()),
                    offset: start,
                    size: IMPLICIT_ARGS_SIZE as u32,
                }];
                for axis in 0..3u8 {
                    let step = usize::from(axis);
                    arguments.push(HiddenArgument {
                        kind: HiddenArgumentKind::BlockCount(axis),
                        offset: at(IMPLICIT_BLOCK_COUNT_X + 4 * step),
                        size: 4,
                    });
                    arguments.push(HiddenArgument {
                        kind: HiddenArgumentKind::GroupSize(axis),
                        offset: at(IMPLICIT_GROUP_SIZE_X + 2 * step),
                        size: 2,
                    });
                }
                arguments.push(HiddenArgument {
                    kind: HiddenArgumentKind::GridDims,
                    offset: at(IMPLICIT_GRID_DIMS),
                    size: 2,
                });
                Ok(arguments)
            }
            HiddenLayout::Unknown(reason) => Err(BackendError::Incompatible(reason.clone())),
        }
    }
}

/// The LDS a launch adds to the kernel's static LDS: its shared memory, then the device
/// runtime's [`AMDGPU_RUNTIME_LDS`] (saturating: a size that large fails the packet's check).
fn dynamic_lds_size(shape: &LaunchShape) -> u32 {
    shape.shared_bytes.saturating_add(AMDGPU_RUNTIME_LDS)
}

/// The value a hidden argument of `kind` holds in a launch of `shape` on the queue at
/// `queue_address`: block counts, workgroup sizes, the grid's dimensions and the dynamic shared
/// memory (HIP's `hidden_dynamic_lds_size`); 0 for remainders
/// (every workgroup is whole) and global offsets (grids start at 0), and for what this loader
/// does not provide (hostcall and printf buffers, heap, default queue, ...).
fn hidden_value(kind: &HiddenArgumentKind, shape: &LaunchShape, queue_address: u64) -> u64 {
    match kind {
        HiddenArgumentKind::BlockCount(axis) => u64::from(shape.blocks[usize::from(*axis % 3)]),
        HiddenArgumentKind::GroupSize(axis) => u64::from(shape.threads[usize::from(*axis % 3)]),
        HiddenArgumentKind::GridDims => u64::from(shape.dimensions()),
        HiddenArgumentKind::QueuePtr => queue_address,
        HiddenArgumentKind::DynamicLdsSize => u64::from(dynamic_lds_size(shape)),
        HiddenArgumentKind::Remainder(_)
        | HiddenArgumentKind::GlobalOffset(_)
        | HiddenArgumentKind::Other(_) => 0,
    }
}

/// The whole kernel-argument block: the explicit arguments (laid out as the kernel's C
/// signature) at offset 0, then each hidden argument `layout` names at its offset, the rest
/// zero. At least `kernarg_segment_size` bytes long, so the kernel never reads past it.
pub fn kernarg_block(
    explicit: &[u8],
    shape: &LaunchShape,
    kernarg_segment_size: u32,
    layout: &HiddenLayout,
    queue_address: u64,
) -> Result<Vec<u8>, BackendError> {
    check_shape(shape)?;
    let segment = kernarg_segment_size as usize;
    if explicit.len() > segment {
        return Err(BackendError::InvalidArgument(format!(
            "{} bytes of kernel arguments for a kernel whose argument segment holds {segment}",
            explicit.len()
        )));
    }
    let hidden = layout.arguments(explicit.len())?;
    if let Some(first) = hidden.iter().map(|argument| argument.offset as usize).min() {
        if first < explicit.len() {
            return Err(BackendError::InvalidArgument(format!(
                "{} bytes of kernel arguments overlap the kernel's hidden arguments, which start \
                 at byte {first}: the arguments do not match the kernel",
                explicit.len()
            )));
        }
    }
    let end = hidden
        .iter()
        .map(|argument| argument.offset as usize + argument.size as usize)
        .max()
        .unwrap_or(0);
    let mut block = vec![0u8; segment.max(end).max(explicit.len())];
    block[..explicit.len()].copy_from_slice(explicit);
    for argument in &hidden {
        let value = hidden_value(&argument.kind, shape, queue_address).to_le_bytes();
        let at = argument.offset as usize;
        let len = (argument.size as usize).min(value.len());
        block[at..at + len].copy_from_slice(&value[..len]);
    }
    Ok(block)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V5: HiddenLayout = HiddenLayout::V5Block;

    fn shape(threads: [u32; 3], blocks: [u32; 3]) -> LaunchShape {
        LaunchShape::grid(blocks, threads)
    }

    fn u16_at(bytes: &[u8], at: usize) -> u16 {
        u16::from_le_bytes([bytes[at], bytes[at + 1]])
    }

    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    }

    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn header_has_dispatch_type_system_fences_and_no_barrier() {
        // hsa.h: type in bits 0-7 (KERNEL_DISPATCH = 2), barrier bit 8, acquire scope bits 9-10,
        // release scope bits 11-12 (SYSTEM = 2).
        let header = dispatch_header();
        assert_eq!(header & 0xff, 2);
        assert_eq!((header >> 8) & 1, 0, "no barrier bit");
        assert_eq!((header >> 9) & 3, 2);
        assert_eq!((header >> 11) & 3, 2);
        assert_eq!(header, 0x1402);
        assert_eq!(header_word(header, 3), 0x0003_1402);
    }

    #[test]
    fn the_no_op_barrier_is_a_barrier_and_with_nothing_to_wait_for() {
        let (bytes, header) = no_op_barrier();
        // hsa.h: type in bits 0-7 (BARRIER_AND = 3); no barrier bit, no fences; dependency
        // signals at 8..48 and the completion signal at 56, all 0 (none).
        assert_eq!(header, 3);
        assert_eq!(u32_at(&bytes, 0), header);
        assert!(bytes[4..].iter().all(|&byte| byte == 0));
    }

    #[test]
    fn packet_fields_land_at_the_header_offsets() {
        let kernel = KernelFacts {
            kernel_object: 0x7f00_0000_1000,
            kernarg_segment_size: 288,
            kernarg_segment_alignment: 8,
            group_segment_size: 512,
            private_segment_size: 64,
            dynamic_stack: false,
        };
        let mut packet = dispatch_packet(
            &shape([64, 2, 1], [10, 3, 1]),
            &kernel,
            64,
            0x7f00_0000_2000,
            hsa_signal_t { handle: 0xabcd },
        )
        .unwrap();
        packet.header = dispatch_header();
        let bytes = packet_bytes(&packet);
        // Offsets of hsa_kernel_dispatch_packet_t in hsa.h (checked against the header by
        // hsa-sys's layout test).
        assert_eq!(u16_at(&bytes, 0), 0x1402);
        assert_eq!(u16_at(&bytes, 2), 2, "setup: two dimensions");
        assert_eq!(u16_at(&bytes, 4), 64);
        assert_eq!(u16_at(&bytes, 6), 2);
        assert_eq!(u16_at(&bytes, 8), 1);
        assert_eq!(u16_at(&bytes, 10), 0);
        assert_eq!(u32_at(&bytes, 12), 640, "grid x is in work-items");
        assert_eq!(u32_at(&bytes, 16), 6);
        assert_eq!(u32_at(&bytes, 20), 1);
        assert_eq!(u32_at(&bytes, 24), 64);
        assert_eq!(
            u32_at(&bytes, 28),
            512 + 12,
            "the static LDS and the runtime's"
        );
        assert_eq!(u64_at(&bytes, 32), 0x7f00_0000_1000);
        assert_eq!(u64_at(&bytes, 40), 0x7f00_0000_2000);
        assert_eq!(u64_at(&bytes, 48), 0);
        assert_eq!(u64_at(&bytes, 56), 0xabcd);
        // Our struct and the byte image agree (same layout, little-endian host).
        assert_eq!(std::mem::size_of_val(&packet), 64);
        assert_eq!(
            std::mem::offset_of!(hsa_kernel_dispatch_packet_t, completion_signal),
            56
        );
    }

    #[test]
    fn the_group_segment_adds_the_launch_shared_memory_to_the_static_size() {
        let kernel = KernelFacts {
            group_segment_size: 512,
            ..KernelFacts::default()
        };
        let signal = hsa_signal_t { handle: 1 };
        let with_shared = shape([64, 1, 1], [2, 1, 1]).shared_bytes(4096);
        let packet = dispatch_packet(&with_shared, &kernel, 0, 0, signal).unwrap();
        // The device runtime's bytes last (`gpurun_abi::shape::AMDGPU_RUNTIME_LDS`).
        assert_eq!(packet.group_segment_size, 512 + 4096 + 12);
        assert_eq!(u32_at(&packet_bytes(&packet), 28), 4620);
        let without = dispatch_packet(&shape([64, 1, 1], [2, 1, 1]), &kernel, 0, 0, signal);
        assert_eq!(without.unwrap().group_segment_size, 512 + 12);
        let overflow = shape([64, 1, 1], [2, 1, 1]).shared_bytes(u32::MAX);
        let error = dispatch_packet(&overflow, &kernel, 0, 0, signal).unwrap_err();
        assert!(error.to_string().contains("do not fit"), "{error}");
    }

    #[test]
    fn the_dynamic_lds_size_argument_holds_the_launch_shared_memory() {
        let listed = HiddenLayout::Listed(vec![HiddenArgument {
            kind: HiddenArgumentKind::DynamicLdsSize,
            offset: 128,
            size: 4,
        }]);
        let launch = shape([64, 1, 1], [1, 1, 1]).shared_bytes(3000);
        let block = kernarg_block(&[0; 8], &launch, 264, &listed, 0).unwrap();
        assert_eq!(u32_at(&block, 128), 3000 + 12);
    }

    #[test]
    fn a_dynamic_stack_gets_sixteen_kib_beyond_its_static_frames() {
        let limit = lane_private_limit(64);
        let fixed = KernelFacts {
            private_segment_size: 48,
            dynamic_stack: false,
            ..KernelFacts::default()
        };
        assert_eq!(launch_private_size(&fixed, None, limit, false).unwrap(), 48);
        assert_eq!(
            launch_private_size(&fixed, Some(64 * 1024), limit, false).unwrap(),
            48,
            "a static stack is exact"
        );
        // A debug build's `_start`: 7,856 bytes of static frames, then `core::fmt` at run time.
        let start = KernelFacts {
            private_segment_size: 7_856,
            dynamic_stack: true,
            ..KernelFacts::default()
        };
        assert_eq!(
            launch_private_size(&start, None, limit, false).unwrap(),
            7_856 + 16 * 1024
        );
        let packet = dispatch_packet(
            &LaunchShape::SINGLE,
            &start,
            launch_private_size(&start, None, limit, false).unwrap(),
            0,
            hsa_signal_t::default(),
        )
        .unwrap();
        assert_eq!(packet.private_segment_size, 7_856 + 16 * 1024);
        assert_eq!(packet.setup, 1);
    }

    #[test]
    fn a_v4_static_size_already_counts_sixteen_kib_of_stack() {
        let indirect = KernelFacts {
            private_segment_size: 16_400,
            dynamic_stack: true,
            ..KernelFacts::default()
        };
        let limit = lane_private_limit(64);
        assert_eq!(
            launch_private_size(&indirect, None, limit, true).unwrap(),
            16_400
        );
        assert_eq!(
            launch_private_size(&indirect, Some(64 * 1024), limit, true).unwrap(),
            16_400 + 48 * 1024
        );
    }

    #[test]
    fn a_requested_stack_size_adds_to_the_static_frames_up_to_the_lane_limit() {
        let start = KernelFacts {
            private_segment_size: 96,
            dynamic_stack: true,
            ..KernelFacts::default()
        };
        let limit = lane_private_limit(64);
        assert_eq!(limit, 131_056, "ROCr: 8,387,584 bytes per wave64 wavefront");
        assert_eq!(lane_private_limit(32), 262_112);
        assert_eq!(
            launch_private_size(&start, Some(64 * 1024), limit, false).unwrap(),
            96 + 64 * 1024
        );
        assert_eq!(
            launch_private_size(&start, Some(32), limit, false).unwrap(),
            96 + 16 * 1024,
            "never less than 16 KiB of stack"
        );
        assert_eq!(
            launch_private_size(&start, Some(1 << 30), limit, false).unwrap(),
            limit,
            "clamped to what a lane can have"
        );
        let too_big = KernelFacts {
            private_segment_size: limit + 1,
            ..start
        };
        let error = launch_private_size(&too_big, None, limit, false).unwrap_err();
        assert!(
            error.to_string().contains("131057 bytes of private memory"),
            "{error}"
        );
    }

    #[test]
    fn three_dimensional_setup() {
        let packet = dispatch_packet(
            &shape([4, 4, 4], [2, 2, 2]),
            &KernelFacts::default(),
            0,
            0,
            hsa_signal_t::default(),
        )
        .unwrap();
        assert_eq!(packet.setup, 3);
        assert_eq!(
            [packet.grid_size_x, packet.grid_size_y, packet.grid_size_z],
            [8, 8, 8]
        );
    }

    #[test]
    fn shapes_that_do_not_fit_are_rejected() {
        let facts = KernelFacts::default();
        let signal = hsa_signal_t::default();
        for bad in [
            shape([0, 1, 1], [1, 1, 1]),
            shape([1, 1, 1], [1, 0, 1]),
            shape([65536, 1, 1], [1, 1, 1]),
            shape([1024, 1, 1], [1 << 23, 1, 1]),
        ] {
            let error = dispatch_packet(&bad, &facts, 0, 0, signal).unwrap_err();
            assert!(
                matches!(error, BackendError::InvalidArgument(_)),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn start_arguments_then_implicit_block() {
        // _start(argc, argv, envp, ret): 32 explicit bytes, implicit args at 32.
        let explicit = crate::kernel_args::pack_c_struct(&crate::kernel_args::start_args(
            2, 0x1000, 0x2000, 0x3000,
        ));
        assert_eq!(explicit.len(), 32);
        let block = kernarg_block(&explicit, &shape([32, 1, 1], [4, 2, 1]), 288, &V5, 0).unwrap();
        assert_eq!(block.len(), 32 + 256);
        assert_eq!(&block[..32], &explicit[..]);
        assert_eq!(u32_at(&block, 32), 4, "block count x");
        assert_eq!(u32_at(&block, 36), 2, "block count y");
        assert_eq!(u32_at(&block, 40), 1, "block count z");
        assert_eq!(u16_at(&block, 44), 32, "group size x");
        assert_eq!(u16_at(&block, 46), 1);
        assert_eq!(u16_at(&block, 48), 1);
        assert_eq!(u16_at(&block, 32 + 64), 2, "grid dims");
        let untouched: usize = block[50..96]
            .iter()
            .chain(&block[98..])
            .map(|&b| b as usize)
            .sum();
        assert_eq!(
            untouched, 0,
            "everything else in the implicit block is zero"
        );
    }

    #[test]
    fn kernels_without_arguments_start_implicit_args_at_zero() {
        let block = kernarg_block(&[], &LaunchShape::SINGLE, 256, &V5, 0).unwrap();
        assert_eq!(block.len(), 256);
        assert_eq!(u32_at(&block, 0), 1);
        assert_eq!(u16_at(&block, 12), 1);
        assert_eq!(u16_at(&block, 64), 1);
    }

    #[test]
    fn odd_explicit_sizes_are_padded_to_eight() {
        assert_eq!(implicit_args_offset(0), 0);
        assert_eq!(implicit_args_offset(4), 8);
        assert_eq!(implicit_args_offset(24), 24);
        let block =
            kernarg_block(&[1, 2, 3, 4], &shape([2, 1, 1], [3, 1, 1]), 264, &V5, 0).unwrap();
        assert_eq!(&block[4..8], &[0; 4]);
        assert_eq!(u32_at(&block, 8), 3);
        assert_eq!(block.len(), 264);
    }

    #[test]
    fn a_larger_segment_is_kept_whole() {
        let block = kernarg_block(&[7; 8], &LaunchShape::SINGLE, 1024, &V5, 0).unwrap();
        assert_eq!(block.len(), 1024);
    }

    #[test]
    fn more_arguments_than_the_segment_holds_is_an_error() {
        let error = kernarg_block(&[0; 40], &LaunchShape::SINGLE, 32, &V5, 0).unwrap_err();
        assert!(
            error.to_string().contains("40 bytes of kernel arguments"),
            "{error}"
        );
    }

    #[test]
    fn listed_hidden_arguments_land_at_their_offsets() {
        let listed = HiddenLayout::Listed(vec![
            HiddenArgument {
                kind: HiddenArgumentKind::GlobalOffset(0),
                offset: 8,
                size: 8,
            },
            HiddenArgument {
                kind: HiddenArgumentKind::GroupSize(1),
                offset: 16,
                size: 2,
            },
            HiddenArgument {
                kind: HiddenArgumentKind::QueuePtr,
                offset: 24,
                size: 8,
            },
        ]);
        let block =
            kernarg_block(&[9; 4], &shape([8, 4, 1], [2, 1, 1]), 16, &listed, 0xabc).unwrap();
        assert_eq!(block.len(), 32, "up to the last hidden argument");
        assert_eq!(&block[..8], &[9, 9, 9, 9, 0, 0, 0, 0]);
        assert_eq!(u64_at(&block, 8), 0, "global offset");
        assert_eq!(u16_at(&block, 16), 4, "group size y");
        assert_eq!(u64_at(&block, 24), 0xabc, "queue");
    }

    #[test]
    fn explicit_arguments_over_the_hidden_ones_are_an_error() {
        let listed = HiddenLayout::Listed(vec![HiddenArgument {
            kind: HiddenArgumentKind::BlockCount(0),
            offset: 8,
            size: 4,
        }]);
        let error = kernarg_block(&[0; 12], &LaunchShape::SINGLE, 64, &listed, 0).unwrap_err();
        assert!(error.to_string().contains("start at byte 8"), "{error}");
        let unknown = HiddenLayout::Unknown("no metadata".into());
        let error = kernarg_block(&[], &LaunchShape::SINGLE, 64, &unknown, 0).unwrap_err();
        assert!(matches!(error, BackendError::Incompatible(_)), "{error}");
    }
}
