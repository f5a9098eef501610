//! Kernels that exercise every client path (open, send, recv, send_n, recv_n, close) with the
//! target's real lanes; built only to inspect the generated code.
#![no_std]
#![feature(abi_gpu_kernel)]

use gpurun_rpc::lanes::Warp;
use gpurun_rpc::{opcode, Client};

/// The client object a loader fills in.
#[no_mangle]
pub static __llvm_rpc_client: Client = Client::uninit();

/// `TEST_INCREMENT` round trip.
///
/// # Safety
/// `out` must be valid for a u64 write.
#[no_mangle]
pub unsafe extern "gpu-kernel" fn gpurun_probe_increment(out: *mut u64) {
    let warp = Warp;
    if let Some(mut port) = __llvm_rpc_client.open::<{ opcode::TEST_INCREMENT }, _>(&warp) {
        let mut reply = 0;
        port.send_and_recv(
            |b, lane| b.data[0] = u64::from(lane),
            |b, _| reply = b.data[0],
        );
        // SAFETY: the caller passes a valid pointer.
        unsafe { out.write_volatile(reply) };
    };
}

/// `TEST_STREAM` echo of `len` bytes at `data` into `back`.
///
/// # Safety
/// `data` must be readable and `back` writable for `len` bytes.
#[no_mangle]
pub unsafe extern "gpu-kernel" fn gpurun_probe_stream(data: *const u8, back: *mut u8, len: usize) {
    let warp = Warp;
    // SAFETY: the caller vouches for both ranges.
    let (data, back) = unsafe {
        (
            core::slice::from_raw_parts(data, len),
            core::slice::from_raw_parts_mut(back, len),
        )
    };
    if let Some(mut port) = __llvm_rpc_client.open::<{ opcode::TEST_STREAM }, _>(&warp) {
        port.send_n(data);
        port.recv_n(back);
    };
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    loop {}
}
