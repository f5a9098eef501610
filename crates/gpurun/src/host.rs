//! Calls from device code to functions of the host program (LLVM libc's HOST_CALL opcode, so
//! the same request works against LLVM's server where the function pointer is real).
//!
//! The host registers a function and passes the key it got back to the kernel as an argument
//! (`gpurun_test::Gpu::host_function` in a host crate's test); the kernel calls
//! [`call`]`(key, bytes)`, the host runs the function on its own copy of the bytes, and the `u64`
//! it returns comes back. Each calling thread makes its own call. The host never calls a key it
//! did not hand out: a wrong one ends the launch with an error naming it. Device tests run by
//! `cargo gpurun test` have no host program of their own, so there every call is such an error.

use crate::rpc::{__llvm_rpc_client, lanes};
use gpurun_rpc::opcode;

/// Calls the host function registered under `function` with `args`; returns what it returned
/// (0 when the image has no RPC channel, which no image of the device runtime lacks).
pub fn call(function: u64, args: &[u8]) -> u64 {
    let lanes = lanes();
    let Some(mut port) = __llvm_rpc_client.open::<{ opcode::HOST_CALL }, _>(&lanes) else {
        return 0;
    };
    port.send_n(args);
    port.send(|packet, _| packet.data[0] = function);
    let mut result = 0;
    port.recv(|packet, _| result = packet.data[0]);
    result
}
