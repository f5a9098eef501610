//! The source of `hidden-args-gfx90a-v4.elf` and `-v5.elf` (see README.md): one kernel with
//! two explicit arguments and an indirect call, which the compiler cannot see through, so the
//! kernel keeps every hidden argument of its code object version in its metadata.
#![no_std]
#![feature(abi_gpu_kernel)]

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[inline(never)]
fn twice(x: u32) -> u32 {
    x.wrapping_mul(2)
}

/// Writes `2 * x` to `out` through a function pointer.
///
/// # Safety
/// `out` must be valid for a `u32` write.
#[no_mangle]
pub unsafe extern "gpu-kernel" fn indirect(x: u32, out: *mut u32) {
    let f: fn(u32) -> u32 = core::hint::black_box(twice);
    unsafe { *out = f(x) };
}
