//! The runtime a `#![no_std]` GPU crate links against: entry kernels, `print!`/`println!`,
//! panics reported over RPC, a global allocator over RPC malloc/free, program arguments,
//! environment, `exit`/`abort`, portable thread ids, block-shared memory ([`shared`]), warp
//! operations and reductions ([`warp`]), scoped fences ([`fence_block`], [`fence_device`],
//! [`fence_system`]), a cycle counter ([`clock64`]) and [`nanosleep`], the atomics `core` lacks
//! ([`atomic`]), math functions ([`math`]), calls of the host program's functions ([`host`]),
//! the `#[gpurun::test]` registry and the `#[gpurun::bench]` handle ([`mod@bench`]).
//!
//! The same crate builds for `nvptx64-nvidia-cuda`, `amdgcn-amd-amdhsa` and the host. On the
//! host (the emulation backend) it links `std`: the emulator runs each device thread on an OS
//! thread and tells the runtime who it is through `__gpurun_host_enter_thread`; panics unwind to
//! the kernel wrapper instead of ending a hardware thread.
//!
//! Users depend on it as `gpurun = "..."` (or a `path`) and write
//! `#[gpurun::test]`, `#[gpurun::main]`, `gpurun::println!`.
//!
//! Owns: what runs on the device (entry kernels, output, panics, allocation, arguments and
//! environment, exit/abort, ids, barrier, shared memory, warp operations, atomics, math, host
//! stdio, host calls), and in a host image built for the emulation's memory checks, the
//! instrumentation's hooks that hand accesses to the emulator. Must not: know the host's side (it talks to it only over RPC, through `gpurun-rpc`'s
//! client sequences) or spell the ABI's names and formats itself (they come from `gpurun-abi`).
#![cfg_attr(any(target_arch = "nvptx64", target_arch = "amdgpu"), no_std)]
#![cfg_attr(
    any(target_arch = "nvptx64", target_arch = "amdgpu"),
    feature(
        allow_internal_unstable,
        core_intrinsics,
        gpu_intrinsics,
        gpu_launch_sized_workgroup_mem,
        link_llvm_intrinsics,
        abi_unadjusted,
        core_float_math
    )
)]
#![cfg_attr(target_arch = "nvptx64", feature(asm_experimental_arch, stdarch_nvptx))]
#![cfg_attr(target_arch = "amdgpu", feature(stdarch_amdgpu))]
// A host image built for the emulation's memory checks (`-Zsanitizer=thread`, nightly)
// implements the instrumentation's hooks with intrinsics, uninstrumented (`arch/checks.rs`).
#![cfg_attr(gpurun_emulation_checks, feature(sanitize, core_intrinsics))]
#![cfg_attr(gpurun_emulation_checks, allow(internal_features))]
// `allow_internal_unstable` lets `__gpurun_kernel!` use the kernel ABI in user crates without
// their own feature gate.
#![cfg_attr(
    any(target_arch = "nvptx64", target_arch = "amdgpu"),
    allow(internal_features)
)]

extern crate alloc;

pub mod arch;
pub mod atomic;
pub mod bench;
pub mod env;
#[doc(hidden)]
pub mod export;
#[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
mod gpu;
pub mod host;
mod host_io;
pub mod io;
pub mod math;
mod rpc;
pub mod shared;
pub mod warp;

pub use arch::{
    barrier, barrier_and, barrier_count, barrier_or, block_dim, block_idx, clock64, fence_block,
    fence_device, fence_system, grid_dim, lane_id, lane_size, nanosleep, thread_idx,
};
pub use env::{args, Args};
pub use gpurun_macros::{bench, kernel, main, test};
pub use rpc::{abort, exit};

// The symbols this runtime exports are identifiers, not strings: check that each exists under
// the name gpurun-abi gives it (a rename on either side fails the build).
macro_rules! exported_as {
    ($($module:ident)::*, $symbol:ident, $name:expr) => {
        let _ = &$($module::)*$symbol;
        assert!(gpurun_abi::symbols::same_name(stringify!($symbol), $name));
    };
}
const _: () = {
    use gpurun_abi::symbols;
    exported_as!(rpc, __llvm_rpc_client, symbols::RPC_CLIENT);
    exported_as!(export, __gpurun_test_abi_version, symbols::TEST_ABI_VERSION);
    #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
    {
        exported_as!(
            arch::imp,
            __gpurun_host_abi_version,
            symbols::HOST_ABI_VERSION
        );
    }
};

/// Declares a kernel with the ABI of the target: `extern "gpu-kernel"` on GPUs (a nightly
/// feature this crate enables for the expansion, so user crates need no feature gate) and
/// `extern "C"` on the host, always unmangled. Used by the attribute macros.
#[doc(hidden)]
#[macro_export]
#[cfg_attr(
    any(target_arch = "nvptx64", target_arch = "amdgpu"),
    allow_internal_unstable(abi_gpu_kernel)
)]
macro_rules! __gpurun_kernel {
    ($(#[$meta:meta])* unsafe fn $name:ident($($args:tt)*) $body:block) => {
        #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
        $(#[$meta])*
        #[unsafe(no_mangle)]
        pub unsafe extern "gpu-kernel" fn $name($($args)*) $body

        #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
        $(#[$meta])*
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($args)*) {
            $crate::export::host_kernel(move || $body)
        }
    };
    ($(#[$meta:meta])* fn $name:ident($($args:tt)*) $body:block) => {
        #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
        $(#[$meta])*
        #[unsafe(no_mangle)]
        pub extern "gpu-kernel" fn $name($($args)*) $body

        #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
        $(#[$meta])*
        #[unsafe(no_mangle)]
        pub extern "C" fn $name($($args)*) {
            $crate::export::host_kernel(move || $body)
        }
    };
}
