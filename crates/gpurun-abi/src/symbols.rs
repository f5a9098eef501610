//! Symbol names of the device ABI. The device runtime defines most of them with
//! `#[no_mangle]` (an identifier, which cannot be taken from a constant): its tests check that
//! the names it exports match these.

/// LLVM libc's RPC client object; the loader copies the client image into it before launch.
pub const RPC_CLIENT: &str = "__llvm_rpc_client";
/// LLVM libc's clock frequency global (Hz of the device's timer), filled in when present.
pub const CLOCK_FREQ: &str = "__llvm_libc_clock_freq";

/// Entry kernels of a program, as LLVM libc's GPU start-up code defines them.
pub const BEGIN_KERNEL: &str = "_begin";
pub const START_KERNEL: &str = "_start";
pub const END_KERNEL: &str = "_end";

/// The test descriptor format version of an image (a `u32`).
pub const TEST_ABI_VERSION: &str = "__gpurun_test_abi_version";
/// Prefix of test descriptor globals: `__gpurun_desc_ID` describes kernel `__gpurun_test_ID`.
pub const DESC_PREFIX: &str = "__gpurun_desc_";
/// Prefix of test kernels.
pub const TEST_KERNEL_PREFIX: &str = "__gpurun_test_";
/// Prefix of kernel descriptors: `__gpurun_kdesc_NAME` describes the parameters of the
/// `#[gpurun::kernel] fn NAME` ([`crate::kernel`]).
pub const KERNEL_DESC_PREFIX: &str = "__gpurun_kdesc_";
/// Prefix of the markers `#[gpurun::kernel]` exports next to a plain kernel on the host (where
/// nothing else tells a kernel from any exported C function).
pub const HOST_KERNEL_MARKER_PREFIX: &str = "__gpurun_host_kernel_";

/// Host emulation: the ABI version of [`crate::host::HostThreadInfo`] (a `u32`).
pub const HOST_ABI_VERSION: &str = "__gpurun_host_abi_version";
/// Host emulation: `unsafe extern "C" fn(*const HostThreadInfo)`, called on each emulated
/// thread before the kernel.
pub const HOST_ENTER_THREAD: &str = "__gpurun_host_enter_thread";
/// Host emulation: the [`crate::host::HostChecks`] record that only images built for the
/// emulation's memory checks have (the device crate compiled with `-Zsanitizer=thread`, whose
/// hooks the device runtime implements by asking the emulator); the emulator writes it.
pub const HOST_MEMORY_CHECKS: &str = "__gpurun_host_checks";

/// AMD: the launch-shape global of images built by older versions of the device runtime, whose
/// block and grid sizes the loader had to write before every launch. Kernels now read them from
/// the dispatch packet and the loader writes nothing; an image that still has this global is
/// refused (rebuild it), since its `block_dim()` would read the global's initial 1s.
pub const RETIRED_LAUNCH_SHAPE: &str = "__gpurun_launch_shape";

/// The prefix of every symbol of ours in an image (the device runtime's and the attributes').
pub const RUNTIME_PREFIX: &str = "__gpurun_";

/// Names every image keeps exported through linking: the entry kernels, the RPC client and
/// anything of ours (`*` ends a prefix). The nvptx linker internalizes everything else.
pub const KEEP_EXPORTED: &[&str] = &[
    BEGIN_KERNEL,
    START_KERNEL,
    END_KERNEL,
    RPC_CLIENT,
    CLOCK_FREQ,
    "__gpurun_*",
];

/// Whether `name` is one of [`KEEP_EXPORTED`].
pub fn keep_exported(name: &str) -> bool {
    KEEP_EXPORTED
        .iter()
        .any(|pattern| match pattern.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *pattern,
        })
}

/// Whether two names are equal, at compile time: lets the device runtime check that the
/// identifiers it exports spell these constants (`stringify!(ident)`).
pub const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefix_of_ours_is_kept_exported() {
        for name in [
            TEST_ABI_VERSION,
            HOST_ABI_VERSION,
            HOST_ENTER_THREAD,
            HOST_MEMORY_CHECKS,
            RETIRED_LAUNCH_SHAPE,
            "__gpurun_test_adds_0",
            "__gpurun_desc_adds_0",
            "__gpurun_kdesc_saxpy",
            RPC_CLIENT,
            START_KERNEL,
        ] {
            assert!(keep_exported(name), "{name}");
        }
        assert!(!keep_exported("memcpy"));
        assert!(!keep_exported("_starting"));
    }
}
