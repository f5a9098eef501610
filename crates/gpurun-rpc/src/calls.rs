//! The client side of each request our device runtime makes, written once: the device runtime
//! (the `gpurun` crate) and the host's scripted backend (which plays a device in tests) both call
//! these, so the sequences cannot drift from each other or from the server's handlers. The
//! sequences are those of [`crate::opcode`]. Nothing here panics (the panic handler uses it).

use crate::opcode::{self, PanicLocation};
use crate::{Client, Lanes};

/// Writes `bytes` to the host's stdout (`OPCODE` = `WRITE_TO_STDOUT`) or stderr
/// (`WRITE_TO_STDERR`) in one request. Returns the count the host wrote, `None` when no port
/// could be opened. The opcode is a constant (see [`Client::open`]).
pub fn write<const OPCODE: u32, L: Lanes>(client: &Client, lanes: &L, bytes: &[u8]) -> Option<u64> {
    let mut port = client.open::<OPCODE, L>(lanes)?;
    port.send_n(bytes);
    let mut written = 0;
    port.recv(|buffer, _| written = buffer.data[0]);
    Some(written)
}

/// RPC `MALLOC`: the device address of `size` bytes, 0 when the host has none.
pub fn malloc<L: Lanes>(client: &Client, lanes: &L, size: u64) -> u64 {
    let Some(mut port) = client.open::<{ opcode::MALLOC }, L>(lanes) else {
        return 0;
    };
    let mut address = 0u64;
    port.send_and_recv(
        |buffer, _| buffer.data[0] = size,
        |buffer, _| address = buffer.data[0],
    );
    address
}

/// RPC `FREE`: fire and forget.
pub fn free<L: Lanes>(client: &Client, lanes: &L, address: u64) {
    if let Some(mut port) = client.open::<{ opcode::FREE }, L>(lanes) {
        port.send(|buffer, _| buffer.data[0] = address);
    }
}

/// RPC `EXIT`: asks the host to end the program with `status`. The caller then ends its thread.
pub fn exit<L: Lanes>(client: &Client, lanes: &L, status: i32) {
    if let Some(mut port) = client.open::<{ opcode::EXIT }, L>(lanes) {
        port.send_and_recv(|_, _| {}, |_, _| {});
        port.send(|buffer, _| buffer.data[0] = u64::from(status as u32));
    }
}

/// RPC `ABORT`: asks the host to end the program abnormally. The caller then ends its thread.
pub fn abort<L: Lanes>(client: &Client, lanes: &L) {
    if let Some(mut port) = client.open::<{ opcode::ABORT }, L>(lanes) {
        port.send_and_recv(|_, _| {}, |_, _| {});
        port.send(|_, _| {});
    }
}

/// Our `PANIC`: the location, the file and the message as one byte string, so that the port is
/// held for one exchange however many threads panic at once.
pub fn report_panic<L: Lanes>(
    client: &Client,
    lanes: &L,
    message: &[u8],
    file: &str,
    location: PanicLocation,
) {
    let Some(mut port) = client.open::<{ opcode::PANIC }, L>(lanes) else {
        return;
    };
    let header = opcode::panic_header(&location, file.len());
    port.send_n_parts(&[&header, file.as_bytes(), message]);
}
