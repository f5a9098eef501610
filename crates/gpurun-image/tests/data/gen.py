# Generates the sample device crate's source with descriptor byte arrays per docs/abi.md.
import struct
def desc(path, flags=0, threads=(1,1,1), blocks=(1,1,1), expected="", reason=""):
    p, e, r = path.encode(), expected.encode(), reason.encode()
    if e: flags |= 4
    head = b"GPRT" + bytes([1, flags]) + b"\0\0" + struct.pack("<6I", *threads, *blocks) + struct.pack("<4H", len(p), len(e), len(r), 0)
    return head + p + e + r
tests = [
  ("adds_0123456789abcdef", desc("sample::adds")),
  ("lanes_fedcba9876543210", desc("sample::math::lanes", threads=(64,2,1), blocks=(4,1,1))),
  ("slow_00000000000000aa", desc("sample::slow", flags=1, reason="takes too long")),
  ("boom_00000000000000bb", desc("sample::panics::boom", flags=2, expected="index out of bounds")),
]
out = []
out.append('''#![no_std]
#![cfg_attr(not(target_os = "linux"), feature(abi_gpu_kernel))]
#![allow(clippy::missing_safety_doc, non_upper_case_globals)]

macro_rules! kernel {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        #[cfg(not(target_os = "linux"))]
        $(#[$m])* #[no_mangle]
        pub extern "gpu-kernel" fn $name($($arg: $ty),*) $body
        #[cfg(target_os = "linux")]
        $(#[$m])* #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) $body
    };
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! { loop {} }

#[no_mangle]
pub static __gpurun_test_abi_version: u32 = 1;

#[cfg(target_os = "linux")]
#[no_mangle]
pub static __gpurun_host_abi_version: u32 = 1;

#[no_mangle]
pub static mut __llvm_rpc_client: [u64; 262] = [0; 262];

#[no_mangle]
pub static mut COUNTER: u32 = 7;

#[no_mangle]
pub static GREETING: [u8; 6] = *b"hello\\n";

#[no_mangle]
pub static mut RESULT: u64 = 0;

#[inline(never)]
fn bump(n: u32) { unsafe { core::ptr::write_volatile(core::ptr::addr_of_mut!(COUNTER), n) } }

kernel! { fn _begin(_argc: i32, _argv: *const *const u8, _envp: *const *const u8) { bump(1) } }
kernel! { fn _start(argc: i32, _argv: *const *const u8, _envp: *const *const u8, ret: *mut i32) {
    unsafe { *ret |= argc; core::ptr::write_volatile(core::ptr::addr_of_mut!(RESULT), GREETING[0] as u64); }
} }
kernel! { fn _end() { bump(3) } }
''')
for tid, d in tests:
    out.append(f'kernel! {{ fn __gpurun_test_{tid}() {{ bump({len(d)}) }} }}')
    out.append(f'#[no_mangle]\npub static __gpurun_desc_{tid}: [u8; {len(d)}] = {list(d)};')
out.append('''
extern "C" fn init_hook() { bump(11) }
extern "C" fn fini_hook() { bump(12) }
#[no_mangle]
#[used]
pub static __init_array_object_sample_init_hook_101: extern "C" fn() = init_hook;
#[no_mangle]
#[used]
pub static __init_array_object_sample_early_7: extern "C" fn() = init_hook;
#[no_mangle]
#[used]
pub static __fini_array_object_sample_fini_hook_65535: extern "C" fn() = fini_hook;
''')
open("dev/src/lib.rs", "w").write("\n".join(out))
