//! Items only the attribute macros use. Not a stable API.

use gpurun_abi::desc;

/// Version of the test descriptor layout (`docs/abi.md`).
pub const TEST_ABI_VERSION: u32 = desc::TEST_ABI_VERSION;

// `#[no_mangle]` keeps it in the image. No `#[used]`: on amdgcn this nightly emits a
// malformed `@llvm.used` for it (addrspace(1) pointers), which LTO then rejects.
#[unsafe(no_mangle)]
pub static __gpurun_test_abi_version: u32 = TEST_ABI_VERSION;

/// Size of the descriptor for these strings.
pub const fn descriptor_len(path: &str, expected: &str, ignore_reason: &str) -> usize {
    desc::encoded_len(path, expected, ignore_reason)
}

/// Builds a test descriptor at compile time, with `gpurun-abi`'s encoder.
#[allow(clippy::too_many_arguments)]
pub const fn descriptor<const N: usize>(
    path: &str,
    expected: &str,
    ignore_reason: &str,
    flags: u8,
    threads: [u32; 3],
    blocks: [u32; 3],
    shared_bytes: u32,
    throughput: Option<Throughput>,
) -> [u8; N] {
    desc::encode::<N>(desc::Fields {
        path,
        expected,
        ignore_reason,
        flags,
        threads,
        blocks,
        shared_bytes,
        throughput,
    })
}

pub use gpurun_abi::Throughput;

/// `#[gpurun::bench(bytes = N)]`'s (or `elements`') amount as the descriptor stores it; 0 fails
/// the build, since a rate of nothing per iteration says nothing.
pub const fn per_iteration(amount: usize) -> u64 {
    if amount == 0 {
        panic!("`bytes` and `elements` count what one iteration processes: give more than 0");
    }
    amount as u64
}

/// `#[gpurun::test(shared = BYTES)]`'s bytes as the descriptor stores them; a size over
/// `u32::MAX` (no GPU has that much shared memory) fails the build.
pub const fn shared_bytes(bytes: usize) -> u32 {
    if bytes > u32::MAX as usize {
        panic!("`shared` is larger than any GPU's shared memory (over 4 GiB)");
    }
    bytes as u32
}

pub use gpurun_abi::kernel::{
    Factor as KernelFactor, Param as KernelParam, ParamKind as KernelParamKind,
};

/// Size of the kernel descriptor of `params`.
pub const fn kernel_descriptor_len(params: &[KernelParam<'_>]) -> usize {
    gpurun_abi::kernel::encoded_len(params)
}

/// Builds a kernel descriptor at compile time, with `gpurun-abi`'s encoder.
pub const fn kernel_descriptor<const N: usize>(params: &[KernelParam<'_>]) -> [u8; N] {
    gpurun_abi::kernel::encode::<N>(params)
}

/// Starts a write that announces `announced` bytes and never sends them, then returns with the
/// port held: a device thread that died in the middle of an RPC message. Only for the loader's
/// own tests (`fixtures/args-env-exit`), which check that the host does not wait forever.
pub fn abandon_a_message(announced: u64) {
    crate::rpc::abandon_a_message(announced);
}

/// Body of every test kernel: run the test on this thread. A panic is reported by the panic
/// handler (GPU) or the panic hook (host); either way the thread then ends and the launch goes
/// on.
#[inline(always)]
pub fn run_test(test: fn()) {
    run_thread(test);
}

/// Body of every benchmark kernel: run the benchmark on this thread with `iterations`, the
/// count the host passed to this launch. A panic ends the thread as a test's does.
#[inline(always)]
pub fn run_bench(bench: fn(&mut crate::bench::Bencher), iterations: u64) {
    run_thread(move || bench(&mut crate::bench::Bencher::new(iterations)));
}

#[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
#[inline(always)]
fn run_thread(body: impl FnOnce()) {
    body()
}

#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
fn run_thread(body: impl FnOnce()) {
    // The hook has already sent the report; the unwind only has to stop here, before the
    // `extern "C"` boundary.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
}

/// Body of every kernel on the host emulation: a panic (already reported over RPC by the hook)
/// ends only this emulated thread, as on a GPU, instead of unwinding out of an `extern "C"`
/// function, which would abort the whole process.
#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
#[inline(always)]
pub fn host_kernel(body: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
}

/// Converts what `main` returns into the status `_start` ORs into the result.
pub trait ExitStatus {
    fn status(self) -> i32;
}

impl ExitStatus for () {
    fn status(self) -> i32 {
        0
    }
}

impl ExitStatus for i32 {
    fn status(self) -> i32 {
        self
    }
}

/// `_begin`: remembers the environment for `env::var`.
///
/// # Safety
/// `argv`/`envp` must be null or null-terminated arrays of NUL-terminated strings that stay
/// valid for the whole run (the loader keeps them alive).
pub unsafe fn begin(argc: i32, argv: *const *const u8, envp: *const *const u8) {
    // SAFETY: forwarded from the caller.
    unsafe { crate::env::set(argc, argv, envp) }
}

/// `_start`: runs `main` on this thread and ORs its status into `*ret`.
///
/// # Safety
/// As [`begin`]; `ret` must be null or point at an `i32` the loader reads after the launch.
pub unsafe fn start(
    argc: i32,
    argv: *const *const u8,
    envp: *const *const u8,
    ret: *mut i32,
    main: impl FnOnce() -> i32,
) {
    // SAFETY: forwarded from the caller.
    unsafe { crate::env::set(argc, argv, envp) };
    let status = run_main(main);
    if !ret.is_null() {
        // SAFETY: `ret` is valid per the contract; atomics make concurrent threads' ORs safe.
        let slot = unsafe { core::sync::atomic::AtomicI32::from_ptr(ret) };
        slot.fetch_or(status, core::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
fn run_main(main: impl FnOnce() -> i32) -> i32 {
    main()
}

#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
fn run_main(main: impl FnOnce() -> i32) -> i32 {
    // A panic was already reported over RPC; the thread contributes the status a GPU thread that
    // ended early would: nothing. The host sees the panic report and fails the run.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(main)).unwrap_or(0)
}

/// `_end`: nothing to tear down yet (no atexit handlers on the device).
pub fn end() {}

/// Installs (once per process) the hook that reports host-emulation panics over RPC, as the GPU
/// panic handler does. `end_thread` unwinds with `resume_unwind`, which skips the hook.
#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
pub fn install_host_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            if crate::arch::imp::reported() {
                // The thread's failure is the finding it reported.
                return;
            }
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("Box<dyn Any>");
            let (file, line, column) = info
                .location()
                .map_or(("<unknown>", 0, 0), |l| (l.file(), l.line(), l.column()));
            crate::rpc::report_panic(message.as_bytes(), file, line, column);
        }));
    });
}
