//! Worker processes (DESIGN.md, "Workers"): the harness never opens a device itself. A worker
//! opens one device, loads the image once, runs the commands it is sent one at a time and
//! streams output, panic reports and results back. A fault, an abort, an exit or a timeout ends
//! only that worker; the parent starts a fresh one for the remaining work.

pub mod child;
pub mod parent;
pub mod protocol;

pub use parent::{describe_exit, Worker, WorkerEnd, WorkerSpec};
pub use protocol::{Command, Event, RunEnd};
