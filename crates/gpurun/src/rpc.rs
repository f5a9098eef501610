//! The device side of each RPC request the runtime makes. The sequences of sends and receives
//! per opcode are documented in `gpurun_rpc::opcode`; the host server mirrors them.

use crate::arch::{self, Lanes};
use gpurun_rpc::{calls, opcode, Client};

/// The client object the loader fills in before launch (LLVM libc's ABI symbol).
#[unsafe(no_mangle)]
pub static __llvm_rpc_client: Client = Client::uninit();

#[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
pub(crate) fn lanes() -> Lanes {
    gpurun_rpc::lanes::Warp
}

#[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
pub(crate) fn lanes() -> Lanes {
    Lanes::new(arch::lane_size(), arch::lane_id()).unwrap_or(Lanes::SINGLE)
}

/// Writes `bytes` in one request with the write opcode `OPCODE` (`WRITE_TO_STDOUT`,
/// `WRITE_TO_STDERR`), a constant so that each stream's writes are their own code.
pub(crate) fn write<const OPCODE: u32>(bytes: &[u8]) {
    calls::write::<OPCODE, _>(&__llvm_rpc_client, &lanes(), bytes);
}

#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    allow(dead_code)
)]
/// RPC MALLOC: device memory from the host; null when the host has none.
pub(crate) fn malloc(size: usize) -> *mut u8 {
    calls::malloc(&__llvm_rpc_client, &lanes(), size as u64) as usize as *mut u8
}

#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    allow(dead_code)
)]
/// RPC FREE: fire and forget.
pub(crate) fn free(ptr: *mut u8) {
    calls::free(&__llvm_rpc_client, &lanes(), ptr as usize as u64);
}

/// Ends the program with `status`: the host stops the run and exits with it.
pub fn exit(status: i32) -> ! {
    calls::exit(&__llvm_rpc_client, &lanes(), status);
    arch::end_thread()
}

/// Ends the program abnormally: the host stops the run as an abort.
pub fn abort() -> ! {
    calls::abort(&__llvm_rpc_client, &lanes());
    arch::end_thread()
}

/// Sends a panic report: message, file, then one packet with the location and thread ids.
pub(crate) fn report_panic(message: &[u8], file: &str, line: u32, column: u32) {
    let location = opcode::PanicLocation {
        line,
        column,
        thread: arch::thread_idx(),
        block: arch::block_idx(),
    };
    calls::report_panic(&__llvm_rpc_client, &lanes(), message, file, location);
}

/// See [`crate::export::abandon_a_message`].
pub(crate) fn abandon_a_message(announced: u64) {
    let lanes = lanes();
    if let Some(mut port) = __llvm_rpc_client.open::<{ opcode::WRITE_TO_STDOUT }, _>(&lanes) {
        // The first packet of a `send_n` carries the length; the rest never comes.
        port.send(|buffer, _| buffer.data[0] = announced);
        core::mem::forget(port);
    };
}
