//! What a device thread's panic report says once the host has read it: the one type the RPC
//! server fills in (gpurun-hal), the worker sends to its parent (gpurun-runner) and the harness
//! judges and prints (gpurun-harness). Host-side only: it owns `String`s, so it exists with the
//! `alloc` feature.

use alloc::string::String;

/// A panic reported by one device thread: its message, location, and which thread it was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PanicReport {
    /// The formatted panic message.
    pub message: String,
    /// Source file of the panic location.
    pub file: String,
    /// Line of the panic location.
    pub line: u32,
    /// Column of the panic location.
    pub column: u32,
    /// Thread id within the block (x, y, z).
    pub thread: [u32; 3],
    /// Block id within the grid (x, y, z).
    pub block: [u32; 3],
}
