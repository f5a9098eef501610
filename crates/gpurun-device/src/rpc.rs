//! The device side of each RPC request the runtime makes. The sequences of sends and receives
//! per opcode are documented in `gpurun_rpc::opcode`; the host server mirrors them.

use crate::arch::{self, Lanes};
use gpurun_rpc::{opcode, Client};

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

/// Writes `bytes` to the host's stdout or stderr in one request.
pub(crate) fn write(stream: crate::io::Stream, bytes: &[u8]) {
    let code = match stream {
        crate::io::Stream::Stdout => opcode::WRITE_TO_STDOUT,
        crate::io::Stream::Stderr => opcode::WRITE_TO_STDERR,
    };
    let lanes = lanes();
    let Some(mut port) = __llvm_rpc_client.open(&lanes, code) else {
        return;
    };
    port.send_n(bytes);
    port.recv(|_, _| {});
}

#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    allow(dead_code)
)]
/// RPC MALLOC: device memory from the host; null when the host has none.
pub(crate) fn malloc(size: usize) -> *mut u8 {
    let lanes = lanes();
    let Some(mut port) = __llvm_rpc_client.open(&lanes, opcode::MALLOC) else {
        return core::ptr::null_mut();
    };
    let mut address = 0u64;
    port.send_and_recv(
        |buffer, _| buffer.data[0] = size as u64,
        |buffer, _| address = buffer.data[0],
    );
    address as usize as *mut u8
}

#[cfg_attr(
    not(any(target_arch = "nvptx64", target_arch = "amdgpu")),
    allow(dead_code)
)]
/// RPC FREE: fire and forget.
pub(crate) fn free(ptr: *mut u8) {
    let lanes = lanes();
    let Some(mut port) = __llvm_rpc_client.open(&lanes, opcode::FREE) else {
        return;
    };
    port.send(|buffer, _| buffer.data[0] = ptr as usize as u64);
}

/// Ends the program with `status`: the host stops the run and exits with it.
pub fn exit(status: i32) -> ! {
    let lanes = lanes();
    if let Some(mut port) = __llvm_rpc_client.open(&lanes, opcode::EXIT) {
        port.send_and_recv(|_, _| {}, |_, _| {});
        port.send(|buffer, _| buffer.data[0] = status as u32 as u64);
        drop(port);
    }
    arch::end_thread()
}

/// Ends the program abnormally: the host stops the run as an abort.
pub fn abort() -> ! {
    let lanes = lanes();
    if let Some(mut port) = __llvm_rpc_client.open(&lanes, opcode::ABORT) {
        port.send_and_recv(|_, _| {}, |_, _| {});
        port.send(|_, _| {});
        drop(port);
    }
    arch::end_thread()
}

/// Sends a panic report: message, file, then one packet with the location and thread ids.
pub(crate) fn report_panic(message: &[u8], file: &str, line: u32, column: u32) {
    let lanes = lanes();
    let Some(mut port) = __llvm_rpc_client.open(&lanes, opcode::PANIC) else {
        return;
    };
    port.send_n(message);
    port.send_n(file.as_bytes());
    let location = opcode::PanicLocation {
        line,
        column,
        thread: arch::thread_idx(),
        block: arch::block_idx(),
    };
    port.send(|buffer, _| buffer.data[..4].copy_from_slice(&location.to_words()));
}
