//! Worker processes (DESIGN.md, "Workers"): the harness never opens a device itself. A worker
//! opens one device and loads the image once per slot; each slot runs the commands sent to it
//! one at a time, beside the other slots (on its own stream or queue), and streams output,
//! panic reports and results back, tagged with the slot. A fault, an abort, an exit or a timeout
//! ends only that worker; the parent starts a fresh one for the remaining work and decides what
//! the end means for the tests that were running beside it.

pub mod child;
pub mod parent;
pub mod protocol;

pub use parent::{breakage_of, describe_exit, Breakage, Worker, WorkerEnd, WorkerSpec};
pub use protocol::{Command, Event, RunEnd, Slot};
