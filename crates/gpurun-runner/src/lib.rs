//! The runner: everything about running device code that happens outside the driver.
//!
//! Owns: the worker protocol, both ends ([`protocol`]; the worker process in [`worker`], the
//! parent's handle on it in [`handle`]); a worker's command line, both ends ([`WorkerOptions`]);
//! spawning workers so that none outlives its parent (`spawn`); running them under
//! compute-sanitizer and attributing its report to tests ([`sanitizer`]);
//! the per-device pool of workers and their slots, crash attribution and re-runs ([`pool`]);
//! the mapping of a launch's end to a run's end (worker side) and to a test's end (parent
//! side), each done once; where a run's tests run ([`placement`]: the backend of each build
//! target, the GPUs present, `--require-gpu`); which built targets are test suites and their
//! time limits ([`suite`]); and a run's plan, the one every front-end runs ([`plan`]: the
//! variants of each test, their workers and time limits).
//!
//! Must not: touch a driver itself (the worker side reaches devices only through
//! `gpurun-hal`'s traits, in the worker process), parse command lines other than the worker's,
//! or build images (it names the platforms to build for and reads what a build made, no
//! more). The parent side runs in the
//! `cargo gpurun` process, which never opens a device: a fault that poisons a context (CUDA) or
//! aborts a process (ROCr) only costs a worker.

pub mod handle;
mod options;
pub mod placement;
pub mod plan;
pub mod pool;
pub mod protocol;
pub mod sanitizer;
mod spawn;
pub mod suite;
pub mod worker;

pub use handle::{describe_exit, RunError, StartError, WorkerHandle, WorkerSpec};
pub use options::WorkerOptions;
pub use plan::{Plan, PlanError, PlanOptions, PlannedSuite};
pub use pool::{test_devices, WorkerExecutor};
pub use protocol::{Command, Event, Slot};
pub use sanitizer::{Sanitizer, SanitizerError, SanitizerTool};
