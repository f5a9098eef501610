//! LLVM libc's test opcodes, which its server (and so `llvm-gpu-loader`) answers: libc's RPC
//! integration tests use them. TEST_INCREMENT is served in `mod.rs`.

use super::{recv_lanes, Fail, Served, MAX_WRITE};
use gpurun_rpc::server::{Server, ServerPort};

/// TEST_STREAM: C→ send_n(bytes); ←S send_n(the same bytes).
pub(crate) fn stream(server: &Server, port: &mut ServerPort<'_>) -> Result<Served, Fail> {
    let mut echo: Vec<Vec<u8>> = vec![Vec::new(); 64];
    for (lane, bytes) in recv_lanes(server, port, MAX_WRITE)? {
        echo[lane as usize] = bytes;
    }
    port.send_n(|lane| &echo[lane as usize][..])?;
    Ok(Served::Handled)
}

/// TEST_INTERFACE: C→ flag (end with a recv); C→ n; ←S n+1; C→ n; ←S n+1; C→; C→ n; ←S n+1;
/// ←S n+2; then C→ n (flag set) or ←S n+3. Each lane counts on its own.
pub(crate) fn interface(port: &mut ServerPort<'_>) -> Result<Served, Fail> {
    let mut end_with_recv = [false; 64];
    let mut count = [0u64; 64];
    port.recv(|buffer, lane| end_with_recv[lane as usize] = buffer.data[0] != 0)?;
    port.recv(|buffer, lane| count[lane as usize] = buffer.data[0])?;
    port.send(|buffer, lane| bump(&mut count, buffer, lane))?;
    port.recv(|buffer, lane| count[lane as usize] = buffer.data[0])?;
    port.send(|buffer, lane| bump(&mut count, buffer, lane))?;
    port.recv(|buffer, lane| count[lane as usize] = buffer.data[0])?;
    port.recv(|buffer, lane| count[lane as usize] = buffer.data[0])?;
    port.send(|buffer, lane| bump(&mut count, buffer, lane))?;
    port.send(|buffer, lane| bump(&mut count, buffer, lane))?;
    // The client's flag is per warp in LLVM's test; the lowest lane's decides here.
    let first = port.lane_mask().trailing_zeros().min(63) as usize;
    if end_with_recv[first] {
        port.recv(|buffer, lane| count[lane as usize] = buffer.data[0])?;
    } else {
        port.send(|buffer, lane| bump(&mut count, buffer, lane))?;
    }
    Ok(Served::Handled)
}

fn bump(count: &mut [u64; 64], buffer: &mut gpurun_rpc::Buffer, lane: u32) {
    let next = count[lane as usize].wrapping_add(1);
    count[lane as usize] = next;
    buffer.data[0] = next;
}
