//! Types and constants of the subset of `hsa.h` and `hsa_ext_amd.h` we use, for the 64-bit
//! little-endian ("large model") layout that every ROCm platform has.
//!
//! C enums are plain `u32` aliases with constants rather than Rust enums, so a value the runtime
//! returns that we do not know (a newer status code, say) is still a valid value, never UB.
//! `tests/layout.rs` compiles every size, offset and constant here against the real headers.

#![allow(non_camel_case_types)]

use std::ffi::c_void;

/// Declares constants and records each one in [`CONSTANTS`] so the layout test can check them
/// all against the headers and [`status_name`] can name statuses.
macro_rules! constants {
    ($( $ty:ident : $( $name:ident = $value:expr ),+ $(,)? ; )+) => {
        $( $( #[doc = concat!("`", stringify!($name), "`")] pub const $name: $ty = $value; )+ )+

        /// Every constant this crate declares: `(C name, C type name, value)`.
        pub const CONSTANTS: &[(&str, &str, u64)] = &[
            $( $( (stringify!($name), stringify!($ty), $name as u64), )+ )+
        ];
    };
}

/// `hsa_status_t` (C enum).
pub type hsa_status_t = u32;
/// `hsa_agent_info_t`; AMD's `hsa_amd_agent_info_t` values are passed through the same parameter.
pub type hsa_agent_info_t = u32;
pub type hsa_amd_agent_info_t = u32;
pub type hsa_system_info_t = u32;
pub type hsa_device_type_t = u32;
pub type hsa_agent_feature_t = u32;
pub type hsa_isa_info_t = u32;
pub type hsa_profile_t = u32;
pub type hsa_default_float_rounding_mode_t = u32;
pub type hsa_signal_condition_t = u32;
pub type hsa_wait_state_t = u32;
pub type hsa_queue_type32_t = u32;
pub type hsa_queue_type_t = u32;
pub type hsa_packet_type_t = u32;
pub type hsa_fence_scope_t = u32;
pub type hsa_packet_header_t = u32;
pub type hsa_packet_header_width_t = u32;
pub type hsa_kernel_dispatch_packet_setup_t = u32;
pub type hsa_executable_symbol_info_t = u32;
pub type hsa_symbol_kind_t = u32;
pub type hsa_amd_segment_t = u32;
pub type hsa_amd_memory_pool_global_flag_t = u32;
pub type hsa_amd_memory_pool_info_t = u32;
pub type hsa_amd_agent_memory_pool_info_t = u32;
pub type hsa_amd_memory_pool_access_t = u32;
pub type hsa_amd_event_type_t = u32;
pub type hsa_amd_memory_fault_reason_t = u32;

/// `hsa_signal_value_t` in the large model.
pub type hsa_signal_value_t = i64;

constants! {
    hsa_status_t:
        HSA_STATUS_SUCCESS = 0x0,
        HSA_STATUS_INFO_BREAK = 0x1,
        HSA_STATUS_ERROR = 0x1000,
        HSA_STATUS_ERROR_INVALID_ARGUMENT = 0x1001,
        HSA_STATUS_ERROR_INVALID_QUEUE_CREATION = 0x1002,
        HSA_STATUS_ERROR_INVALID_ALLOCATION = 0x1003,
        HSA_STATUS_ERROR_INVALID_AGENT = 0x1004,
        HSA_STATUS_ERROR_INVALID_REGION = 0x1005,
        HSA_STATUS_ERROR_INVALID_SIGNAL = 0x1006,
        HSA_STATUS_ERROR_INVALID_QUEUE = 0x1007,
        HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008,
        HSA_STATUS_ERROR_INVALID_PACKET_FORMAT = 0x1009,
        HSA_STATUS_ERROR_RESOURCE_FREE = 0x100A,
        HSA_STATUS_ERROR_NOT_INITIALIZED = 0x100B,
        HSA_STATUS_ERROR_REFCOUNT_OVERFLOW = 0x100C,
        HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS = 0x100D,
        HSA_STATUS_ERROR_INVALID_INDEX = 0x100E,
        HSA_STATUS_ERROR_INVALID_ISA = 0x100F,
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT = 0x1010,
        HSA_STATUS_ERROR_INVALID_EXECUTABLE = 0x1011,
        HSA_STATUS_ERROR_FROZEN_EXECUTABLE = 0x1012,
        HSA_STATUS_ERROR_INVALID_SYMBOL_NAME = 0x1013,
        HSA_STATUS_ERROR_VARIABLE_ALREADY_DEFINED = 0x1014,
        HSA_STATUS_ERROR_VARIABLE_UNDEFINED = 0x1015,
        HSA_STATUS_ERROR_EXCEPTION = 0x1016,
        HSA_STATUS_ERROR_INVALID_ISA_NAME = 0x1017,
        HSA_STATUS_ERROR_INVALID_CODE_SYMBOL = 0x1018,
        HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL = 0x1019,
        HSA_STATUS_ERROR_INVALID_FILE = 0x1020,
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER = 0x1021,
        HSA_STATUS_ERROR_INVALID_CACHE = 0x1022,
        HSA_STATUS_ERROR_INVALID_WAVEFRONT = 0x1023,
        HSA_STATUS_ERROR_INVALID_SIGNAL_GROUP = 0x1024,
        HSA_STATUS_ERROR_INVALID_RUNTIME_STATE = 0x1025,
        HSA_STATUS_ERROR_FATAL = 0x1026,
        // AMD's additions (hsa_ext_amd.h): what a queue's error callback reports for a wave
        // that faulted, among others.
        HSA_STATUS_ERROR_INVALID_MEMORY_POOL = 40,
        HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION = 41,
        HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION = 42,
        HSA_STATUS_ERROR_MEMORY_FAULT = 43,
        HSA_STATUS_CU_MASK_REDUCED = 44,
        HSA_STATUS_ERROR_OUT_OF_REGISTERS = 45,
        HSA_STATUS_ERROR_RESOURCE_BUSY = 46;
    hsa_system_info_t:
        HSA_SYSTEM_INFO_VERSION_MAJOR = 0,
        HSA_SYSTEM_INFO_VERSION_MINOR = 1,
        HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY = 3;
    hsa_device_type_t:
        HSA_DEVICE_TYPE_CPU = 0,
        HSA_DEVICE_TYPE_GPU = 1,
        HSA_DEVICE_TYPE_DSP = 2;
    hsa_agent_feature_t:
        HSA_AGENT_FEATURE_KERNEL_DISPATCH = 1,
        HSA_AGENT_FEATURE_AGENT_DISPATCH = 2;
    hsa_agent_info_t:
        HSA_AGENT_INFO_NAME = 0,
        HSA_AGENT_INFO_VENDOR_NAME = 1,
        HSA_AGENT_INFO_FEATURE = 2,
        HSA_AGENT_INFO_WAVEFRONT_SIZE = 6,
        HSA_AGENT_INFO_WORKGROUP_MAX_SIZE = 8,
        HSA_AGENT_INFO_QUEUE_MIN_SIZE = 13,
        HSA_AGENT_INFO_QUEUE_MAX_SIZE = 14,
        HSA_AGENT_INFO_NODE = 16,
        HSA_AGENT_INFO_DEVICE = 17,
        HSA_AGENT_INFO_ISA = 19,
        HSA_AGENT_INFO_VERSION_MAJOR = 21,
        HSA_AGENT_INFO_VERSION_MINOR = 22;
    hsa_amd_agent_info_t:
        HSA_AMD_AGENT_INFO_CHIP_ID = 0xA000,
        HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT = 0xA002,
        HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY = 0xA003,
        HSA_AMD_AGENT_INFO_PRODUCT_NAME = 0xA009,
        HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU = 0xA00A;
    hsa_isa_info_t:
        HSA_ISA_INFO_NAME_LENGTH = 0,
        HSA_ISA_INFO_NAME = 1;
    hsa_profile_t:
        HSA_PROFILE_BASE = 0,
        HSA_PROFILE_FULL = 1;
    hsa_default_float_rounding_mode_t:
        HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT = 0,
        HSA_DEFAULT_FLOAT_ROUNDING_MODE_ZERO = 1,
        HSA_DEFAULT_FLOAT_ROUNDING_MODE_NEAR = 2;
    hsa_signal_condition_t:
        HSA_SIGNAL_CONDITION_EQ = 0,
        HSA_SIGNAL_CONDITION_NE = 1,
        HSA_SIGNAL_CONDITION_LT = 2,
        HSA_SIGNAL_CONDITION_GTE = 3;
    hsa_wait_state_t:
        HSA_WAIT_STATE_BLOCKED = 0,
        HSA_WAIT_STATE_ACTIVE = 1;
    hsa_queue_type_t:
        HSA_QUEUE_TYPE_MULTI = 0,
        HSA_QUEUE_TYPE_SINGLE = 1;
    hsa_packet_type_t:
        HSA_PACKET_TYPE_VENDOR_SPECIFIC = 0,
        HSA_PACKET_TYPE_INVALID = 1,
        HSA_PACKET_TYPE_KERNEL_DISPATCH = 2,
        HSA_PACKET_TYPE_BARRIER_AND = 3,
        HSA_PACKET_TYPE_AGENT_DISPATCH = 4,
        HSA_PACKET_TYPE_BARRIER_OR = 5;
    hsa_fence_scope_t:
        HSA_FENCE_SCOPE_NONE = 0,
        HSA_FENCE_SCOPE_AGENT = 1,
        HSA_FENCE_SCOPE_SYSTEM = 2;
    hsa_packet_header_t:
        HSA_PACKET_HEADER_TYPE = 0,
        HSA_PACKET_HEADER_BARRIER = 8,
        HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE = 9,
        HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE = 11;
    hsa_packet_header_width_t:
        HSA_PACKET_HEADER_WIDTH_TYPE = 8,
        HSA_PACKET_HEADER_WIDTH_BARRIER = 1,
        HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE = 2,
        HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE = 2;
    hsa_kernel_dispatch_packet_setup_t:
        HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS = 0;
    hsa_executable_symbol_info_t:
        HSA_EXECUTABLE_SYMBOL_INFO_TYPE = 0,
        HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH = 1,
        HSA_EXECUTABLE_SYMBOL_INFO_NAME = 2,
        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE = 9,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE = 11,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT = 12,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE = 13,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE = 14,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK = 15,
        HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS = 21,
        HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT = 22;
    hsa_symbol_kind_t:
        HSA_SYMBOL_KIND_VARIABLE = 0,
        HSA_SYMBOL_KIND_KERNEL = 1;
    hsa_amd_segment_t:
        HSA_AMD_SEGMENT_GLOBAL = 0,
        HSA_AMD_SEGMENT_READONLY = 1,
        HSA_AMD_SEGMENT_PRIVATE = 2,
        HSA_AMD_SEGMENT_GROUP = 3;
    hsa_amd_memory_pool_global_flag_t:
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT = 1,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED = 2,
        HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED = 4;
    hsa_amd_memory_pool_info_t:
        HSA_AMD_MEMORY_POOL_INFO_SEGMENT = 0,
        HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS = 1,
        HSA_AMD_MEMORY_POOL_INFO_SIZE = 2,
        HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5,
        HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE = 6,
        HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT = 7;
    hsa_amd_event_type_t:
        HSA_AMD_GPU_MEMORY_FAULT_EVENT = 0;
    hsa_amd_memory_fault_reason_t:
        HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT = 1 << 0,
        HSA_AMD_MEMORY_FAULT_READ_ONLY = 1 << 1,
        HSA_AMD_MEMORY_FAULT_NX = 1 << 2,
        HSA_AMD_MEMORY_FAULT_HOST_ONLY = 1 << 3,
        HSA_AMD_MEMORY_FAULT_DRAMECC = 1 << 4,
        HSA_AMD_MEMORY_FAULT_IMPRECISE = 1 << 5,
        HSA_AMD_MEMORY_FAULT_SRAMECC = 1 << 6,
        HSA_AMD_MEMORY_FAULT_HANG = 1 << 31;
}

/// `HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY`: the frequency of the counter `s_memrealtime`
/// reads, which LLVM libc's `clock()` divides by. Added to `hsa_ext_amd.h` after ROCm 5.2:
/// checked against ROCm 6.x's headers only.
pub const HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY: hsa_amd_agent_info_t = 0xA016;

/// `HSA_AMD_AGENT_INFO_NEAREST_CPU`: the CPU agent nearest a GPU agent (an `hsa_agent_t`), the
/// socket whose memory host buffers for that GPU should come from. Added in ROCm 6: checked
/// against ROCm 6.x's headers only.
pub const HSA_AMD_AGENT_INFO_NEAREST_CPU: hsa_amd_agent_info_t = 0xA113;

/// The C `UINT64_MAX` that `hsa_signal_wait_*` takes as "no timeout".
pub const HSA_TIMEOUT_INFINITE: u64 = u64::MAX;

/// Name of a status code as the header spells it (`HSA_STATUS_ERROR_OUT_OF_RESOURCES`).
pub fn status_name(status: hsa_status_t) -> Option<&'static str> {
    CONSTANTS
        .iter()
        .find(|(name, ty, value)| {
            *ty == "hsa_status_t" && *value == u64::from(status) && name.starts_with("HSA_")
        })
        .map(|(name, _, _)| *name)
}

/// Declares the one-`u64` handle structs HSA uses for its objects.
macro_rules! handles {
    ($( $(#[$doc:meta])* $name:ident ),+ $(,)?) => {
        $(
            $(#[$doc])*
            #[repr(C)]
            #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
            pub struct $name {
                pub handle: u64,
            }
        )+
    };
}

handles! {
    /// An agent (a CPU or a GPU).
    hsa_agent_t,
    /// A signal: a 64-bit value both sides can wait on.
    hsa_signal_t,
    /// An instruction set architecture of an agent.
    hsa_isa_t,
    /// A code object handed to the runtime, before loading.
    hsa_code_object_reader_t,
    /// An executable: code objects loaded for agents.
    hsa_executable_t,
    /// One code object loaded into an executable.
    hsa_loaded_code_object_t,
    /// A kernel or variable of a loaded executable.
    hsa_executable_symbol_t,
    /// A memory pool of an agent (`hsa_ext_amd.h`).
    hsa_amd_memory_pool_t,
}

/// `hsa_queue_t`: the user-mode queue the runtime hands out; AQL packets go at `base_address`.
#[repr(C)]
#[derive(Debug)]
pub struct hsa_queue_t {
    /// `type` in C.
    pub type_: hsa_queue_type32_t,
    pub features: u32,
    pub base_address: *mut c_void,
    pub doorbell_signal: hsa_signal_t,
    /// Number of packets; a power of two.
    pub size: u32,
    pub reserved1: u32,
    pub id: u64,
}

/// `hsa_kernel_dispatch_packet_t`: one 64-byte AQL packet that launches a kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_kernel_dispatch_packet_t {
    pub header: u16,
    pub setup: u16,
    pub workgroup_size_x: u16,
    pub workgroup_size_y: u16,
    pub workgroup_size_z: u16,
    pub reserved0: u16,
    pub grid_size_x: u32,
    pub grid_size_y: u32,
    pub grid_size_z: u32,
    pub private_segment_size: u32,
    pub group_segment_size: u32,
    pub kernel_object: u64,
    /// A pointer in C; kept as an address so the packet stays plain data.
    pub kernarg_address: u64,
    pub reserved2: u64,
    pub completion_signal: hsa_signal_t,
}

/// `amd_signal_t` (`amd_hsa_signal.h`): what ROCr's `hsa_signal_t` handles point to. A signal
/// that can wake a sleeping host thread (an interrupt signal, what `hsa_signal_create` makes by
/// default) names the event mailbox and event id the device writes before it raises an
/// interrupt (`s_sendmsg`); the RPC doorbell hands the value, mailbox and id to the device, as
/// HIP's runtime does. 64 bytes, 64-aligned.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct amd_signal_t {
    /// `amd_signal_kind64_t`: `AMD_SIGNAL_KIND_USER` (1) for signals the application made.
    pub kind: i64,
    /// The signal's value (a union with the doorbell pointers of queue doorbells in C).
    pub value: i64,
    /// Where the device writes `event_id` before raising the interrupt (0: none).
    pub event_mailbox_ptr: u64,
    pub event_id: u32,
    pub reserved1: u32,
    pub start_ts: u64,
    pub end_ts: u64,
    /// A union of the queue pointer and this in C.
    pub reserved2: u64,
    pub reserved3: [u32; 2],
}

/// `hsa_amd_gpu_memory_fault_info_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_gpu_memory_fault_info_t {
    pub agent: hsa_agent_t,
    pub virtual_address: u64,
    pub fault_reason_mask: u32,
}

/// `hsa_amd_profiling_dispatch_time_t`: when the packet processor started a profiled dispatch
/// and when it completed, in ticks of the system timestamp
/// (`HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_profiling_dispatch_time_t {
    pub start: u64,
    pub end: u64,
}

/// `HSA_AMD_GPU_HW_EXCEPTION_EVENT` (newer than ROCm 5.2: checked against ROCm 6.x's headers
/// only, so it stays out of the constants above).
pub const HSA_AMD_GPU_HW_EXCEPTION_EVENT: hsa_amd_event_type_t = 1;

/// `hsa_amd_gpu_hw_exception_info_t` (newer than ROCm 5.2; checked against ROCm 6.x's headers):
/// the other member of `hsa_amd_event_t`'s union, for `HSA_AMD_GPU_HW_EXCEPTION_EVENT`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_gpu_hw_exception_info_t {
    pub agent: hsa_agent_t,
    /// `hsa_amd_hw_exception_reset_type_t` (1: other).
    pub reset_type: u32,
    /// `hsa_amd_hw_exception_reset_cause_t` (1: GPU hang, 2: ECC).
    pub reset_cause: u32,
}

// It fits the union beside the memory fault.
const _: () = {
    assert!(core::mem::size_of::<hsa_amd_gpu_hw_exception_info_t>() == 16);
    assert!(core::mem::offset_of!(hsa_amd_gpu_hw_exception_info_t, reset_cause) == 12);
    assert!(
        core::mem::size_of::<hsa_amd_gpu_hw_exception_info_t>()
            <= core::mem::size_of::<hsa_amd_gpu_memory_fault_info_t>()
    );
};

/// `HSA_AMD_GPU_MEMORY_ERROR_EVENT` (ROCm 6.2 and later; in neither header set the layout test
/// has, ROCm 5.2's and 6.1's, so unchecked; the value is ROCr's): ROCr could not
/// free memory the GPU still uses (`hsa_amd_memory_pool_free` fails). Unless a handler claims it,
/// ROCr aborts the process.
pub const HSA_AMD_GPU_MEMORY_ERROR_EVENT: hsa_amd_event_type_t = 2;

/// `HSA_AMD_MEMORY_ERROR_MEMORY_IN_USE`: the one reason bit of a memory error (ROCm 6).
pub const HSA_AMD_MEMORY_ERROR_MEMORY_IN_USE: u32 = 1;

/// `hsa_amd_gpu_memory_error_info_t` (ROCm 6.2 and later, unchecked as the event): the union
/// member of `hsa_amd_event_t` for `HSA_AMD_GPU_MEMORY_ERROR_EVENT`, laid out like the memory
/// fault (ROCR-Runtime's `hsa_ext_amd.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_gpu_memory_error_info_t {
    pub agent: hsa_agent_t,
    pub virtual_address: u64,
    /// `hsa_amd_memory_error_reason_t` bits.
    pub error_reason_mask: u32,
}

const _: () = {
    assert!(
        core::mem::size_of::<hsa_amd_gpu_memory_error_info_t>()
            == core::mem::size_of::<hsa_amd_gpu_memory_fault_info_t>()
    );
    assert!(core::mem::offset_of!(hsa_amd_gpu_memory_error_info_t, error_reason_mask) == 16);
};

/// `hsa_amd_event_t`. In C the payload is an anonymous union of the memory fault and (newer
/// runtimes) the hardware exception and the memory error; the memory fault is the largest
/// member (the memory error is as large), so a struct with it has the union's layout. The
/// others are read from the same bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hsa_amd_event_t {
    pub event_type: hsa_amd_event_type_t,
    pub memory_fault: hsa_amd_gpu_memory_fault_info_t,
}

/// Declares the callback types (nullable function pointers, as C's are) and records each in
/// [`CALLBACK_SIGNATURES`] so the layout test can check them against the headers' parameters.
macro_rules! callbacks {
    ($( $(#[$doc:meta])* $name:ident = fn( $( $arg:ident : $ty:ty ),* ) $( -> $ret:ty )? ; )+) => {
        $(
            $(#[$doc])*
            pub type $name = Option<unsafe extern "C" fn( $( $arg: $ty ),* ) $( -> $ret )?>;
        )+

        /// Every callback type: `(name, return type, parameter types)`, as written in Rust.
        pub const CALLBACK_SIGNATURES: &[(&str, &str, &[&str])] = &[
            $( (stringify!($name), callbacks!(@ret $( $ret )?), &[ $( stringify!($ty) ),* ]), )+
        ];
    };
    (@ret $ret:ty) => { stringify!($ret) };
    (@ret) => { "()" };
}

callbacks! {
    /// Callback of `hsa_iterate_agents`.
    hsa_agent_callback_t = fn(agent: hsa_agent_t, data: *mut c_void) -> hsa_status_t;
    /// Callback of `hsa_agent_iterate_isas`.
    hsa_isa_callback_t = fn(isa: hsa_isa_t, data: *mut c_void) -> hsa_status_t;
    /// Callback of `hsa_amd_agent_iterate_memory_pools`.
    hsa_amd_memory_pool_callback_t = fn(pool: hsa_amd_memory_pool_t, data: *mut c_void) -> hsa_status_t;
    /// Queue error callback of `hsa_queue_create`; runs on a runtime thread.
    hsa_queue_callback_t = fn(status: hsa_status_t, source: *mut hsa_queue_t, data: *mut c_void);
    /// `hsa_amd_system_event_callback_t`; runs on a runtime thread.
    hsa_amd_system_event_callback_t = fn(event: *const hsa_amd_event_t, data: *mut c_void) -> hsa_status_t;
}
