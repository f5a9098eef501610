//! The RPC server every backend runs while a kernel executes: it services the device's requests
//! (output, allocation, exit/abort, panic reports) over the shared buffer. Every size, pointer and
//! opcode read from that buffer is untrusted: lengths are capped before anything is allocated,
//! an unknown opcode ends the launch with an error naming it, and nothing here panics.

mod files;
mod host_call;
mod printf;
mod stdio;
mod testing;

pub use host_call::{HostFn, HostFunctions};
pub use stdio::HostAccess;

use crate::{BackendError, LaunchEnd};
use gpurun_rpc::layout::Layout;
use gpurun_rpc::opcode;
use gpurun_rpc::server::{Server, ServerError, ServerPort};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

/// Longest single write a device thread may send (bytes); longer ones end the launch.
pub const MAX_WRITE: u64 = 64 << 20;
/// Longest panic message kept; the rest is dropped.
pub const MAX_PANIC_MESSAGE: usize = 16 << 10;
/// The longest source file name a panic report keeps.
const MAX_PANIC_FILE: usize = 4096;
/// Largest single device allocation honoured over RPC MALLOC.
pub const MAX_MALLOC: u64 = 1 << 40;

/// A panic reported by one device thread; defined once in the ABI crate, shared with the harness.
pub use gpurun_abi::report::PanicReport;

/// Where the device's output and reports go (the worker forwards them to the harness).
pub trait Sink {
    fn stdout(&mut self, bytes: &[u8]);
    fn stderr(&mut self, bytes: &[u8]);
    fn panic(&mut self, report: PanicReport);
    /// The device has sent nothing for a while: a sink that holds output back to write it in
    /// batches should hand it on now, so quiet kernels (a hang, a long computation after a
    /// print) do not keep it.
    fn idle(&mut self) {}
    /// Writes to the host's stdout (`stderr == false`) or stderr and returns how many bytes
    /// were written: what the device's `fwrite`/`puts`/`printf` report. Sinks that cannot fail
    /// keep this default.
    fn write(&mut self, stderr: bool, bytes: &[u8]) -> usize {
        if stderr {
            self.stderr(bytes);
        } else {
            self.stdout(bytes);
        }
        bytes.len()
    }
}

/// Device memory for RPC MALLOC/FREE, provided by each backend.
pub trait DeviceMemory {
    /// A device address of at least `size` bytes, or 0 when there is none.
    fn malloc(&mut self, size: u64) -> u64;
    /// Frees an address `malloc` returned; anything else is ignored.
    fn free(&mut self, address: u64);
}

/// What one [`RpcHandlers::poll`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// No port had work.
    Idle,
    /// One request was handled.
    Handled,
    /// The device ended the program (exit or abort).
    End(LaunchEnd),
}

/// Our server over one shared allocation.
pub struct RpcHandlers {
    server: Server,
    /// Where the next scan starts: just after the last port served, for fairness.
    resume_at: AtomicU32,
    /// Host files the device opened, its stdin, and what it may do (see [`HostAccess`]).
    host: Mutex<stdio::HostState>,
    /// What HOST_CALL may call.
    functions: HostFunctions,
}

impl RpcHandlers {
    /// # Safety
    /// `base` must point to `layout.allocation_size()` zeroed bytes, aligned to 64, shared with
    /// the device's client for as long as this server exists.
    pub unsafe fn new(layout: &Layout, base: *mut u8) -> RpcHandlers {
        RpcHandlers {
            // SAFETY: forwarded from the caller.
            server: unsafe { Server::new(layout, base) },
            resume_at: AtomicU32::new(0),
            host: Mutex::new(stdio::HostState::new(HostAccess::default())),
            functions: HostFunctions::default(),
        }
    }

    /// Ports of the buffer this server serves.
    pub fn port_count(&self) -> u32 {
        self.server.port_count()
    }

    /// Takes over `previous`'s host state (the files the device opened, its stdin, what it may
    /// do, the host functions it may call), when this server replaces it for a larger buffer of
    /// the same module.
    pub fn keep_host_state_of(&mut self, previous: &mut RpcHandlers) {
        std::mem::swap(
            self.host.get_mut().unwrap_or_else(PoisonError::into_inner),
            previous
                .host
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.functions = previous.functions.clone();
    }

    /// What the device may do on the host (a new server allows nothing and reads an empty
    /// stdin), and which host functions it may call (none).
    pub fn configure(&mut self, config: HostAccess, functions: HostFunctions) {
        *self.host.get_mut().unwrap_or_else(PoisonError::into_inner) =
            stdio::HostState::new(config);
        self.functions = functions;
    }

    /// Uses the doorbell counter the host wrote into the allocation's record
    /// ([`Layout::write_doorbell`]): [`RpcHandlers::poll`] then skips its scan while no request is
    /// open, and [`RpcHandlers::wait_for_request_or`] sleeps on the counter.
    ///
    /// # Safety
    /// As [`Server::attach_doorbell`]: a live, aligned u64 only accessed atomically, outliving
    /// the server.
    pub unsafe fn attach_doorbell(&mut self, counter: *const std::sync::atomic::AtomicU64) {
        // SAFETY: forwarded from the caller.
        unsafe { self.server.attach_doorbell(counter) }
    }

    /// Sleeps on the host waits block the host wrote into the doorbell record instead of
    /// polling ([`gpurun_rpc::Server::attach_host_waits`]); only when every client is a host
    /// thread.
    ///
    /// # Safety
    /// As [`gpurun_rpc::Server::attach_host_waits`].
    pub unsafe fn attach_host_waits(&mut self, block: *const u8) {
        // SAFETY: forwarded from the caller.
        unsafe { self.server.attach_host_waits(block) }
    }

    /// Blocks (spin, yield, then sleeps) until a request may be pending, `changed()` holds (the
    /// launch ended), [`RpcHandlers::cancel`] is called or `timeout` passes; returns whether to
    /// poll now. See [`gpurun_rpc::Server::wait_for_request_or`].
    pub fn wait_for_request_or(
        &self,
        timeout: std::time::Duration,
        changed: impl Fn() -> bool,
    ) -> bool {
        self.server.wait_for_request_or(timeout, changed)
    }

    /// Whether the device rings a doorbell this server reads ([`RpcHandlers::attach_doorbell`]).
    pub fn has_doorbell(&self) -> bool {
        self.server.open_requests().is_some()
    }

    /// Handles at most one pending request. One thread serves; others may only
    /// [`RpcHandlers::cancel`], hence `&self`.
    pub fn poll(
        &self,
        sink: &mut dyn Sink,
        memory: &mut dyn DeviceMemory,
    ) -> Result<Served, BackendError> {
        if self.server.open_requests() == Some(0) {
            // The doorbell says no request is open: nothing to scan.
            self.resume_at.store(0, Ordering::Relaxed);
            return Ok(Served::Idle);
        }
        let start = self.resume_at.load(Ordering::Relaxed);
        // The locking scan, not `next_request_exclusive`: the watchdog shares the server (it
        // may cancel a wait), so this thread does not hold it exclusively.
        let Some(mut port) = self.server.next_request(start) else {
            self.resume_at.store(0, Ordering::Relaxed);
            return Ok(Served::Idle);
        };
        let server = port.server();
        let next = (port.index() + 1) % server.port_count().max(1);
        self.resume_at.store(next, Ordering::Relaxed);
        let mut host = self.host.lock().unwrap_or_else(PoisonError::into_inner);
        handle(server, &mut host, &self.functions, &mut port, sink, memory)
            .map_err(Fail::into_error)
    }

    /// Handles requests until none is pending: it returns only after a scan that started at
    /// port 0 found nothing (a scan resuming after the last port served can miss a request
    /// posted meanwhile on a lower port, e.g. a FREE on port 0 right after a MALLOC there). It
    /// scans even with a doorbell, whose relaxed counter is only a hint.
    pub fn drain(
        &self,
        sink: &mut dyn Sink,
        memory: &mut dyn DeviceMemory,
    ) -> Result<Option<LaunchEnd>, BackendError> {
        loop {
            let start = self.resume_at.load(Ordering::Relaxed);
            let Some(mut port) = self.server.try_open(start) else {
                self.resume_at.store(0, Ordering::Relaxed);
                if start == 0 {
                    return Ok(None);
                }
                continue;
            };
            let next = (port.index() + 1) % self.server.port_count().max(1);
            self.resume_at.store(next, Ordering::Relaxed);
            let mut host = self.host.lock().unwrap_or_else(PoisonError::into_inner);
            let served = handle(
                &self.server,
                &mut host,
                &self.functions,
                &mut port,
                sink,
                memory,
            )
            .map_err(Fail::into_error)?;
            if let Served::End(end) = served {
                return Ok(Some(end));
            }
        }
    }

    /// Makes a server wait for the device give up (from another thread).
    pub fn cancel(&self) {
        self.server.cancel();
    }

    /// Lets waits block again after [`RpcHandlers::cancel`].
    pub fn resume(&self) {
        self.server.resume();
    }
}

pub(crate) enum Fail {
    Cancelled(String),
    Protocol(String),
}

impl Fail {
    fn into_error(self) -> BackendError {
        match self {
            Fail::Cancelled(reason) | Fail::Protocol(reason) => BackendError::Rpc(reason),
        }
    }
}

impl From<ServerError> for Fail {
    fn from(error: ServerError) -> Fail {
        Fail::Cancelled(error.to_string())
    }
}

fn handle(
    server: &Server,
    host: &mut stdio::HostState,
    functions: &HostFunctions,
    port: &mut ServerPort<'_>,
    sink: &mut dyn Sink,
    memory: &mut dyn DeviceMemory,
) -> Result<Served, Fail> {
    match port.opcode() {
        opcode::WRITE_TO_STDOUT
        | opcode::WRITE_TO_STDERR
        | opcode::WRITE_TO_STDOUT_NEWLINE
        | opcode::WRITE_TO_STREAM => stdio::write(server, host, port, sink),
        opcode::READ_FROM_STREAM => stdio::read(host, port),
        opcode::READ_FGETS => stdio::fgets(host, port),
        opcode::FEOF
        | opcode::FERROR
        | opcode::CLEARERR
        | opcode::FSEEK
        | opcode::FTELL
        | opcode::FFLUSH
        | opcode::UNGETC => stdio::stream_call(host, port),
        opcode::OPEN_FILE => files::open(server, host, port),
        opcode::CLOSE_FILE => files::close(host, port),
        opcode::REMOVE => files::remove(server, port),
        opcode::RENAME => files::rename(server, port),
        opcode::SYSTEM => files::system(server, host, port, sink),
        opcode::HOST_CALL | opcode::OFFLOAD_HOST_CALL => host_call::call(server, functions, port),
        opcode::PRINTF_TO_STDOUT
        | opcode::PRINTF_TO_STDERR
        | opcode::PRINTF_TO_STREAM
        | opcode::PRINTF_TO_STDOUT_PACKED
        | opcode::PRINTF_TO_STDERR_PACKED
        | opcode::PRINTF_TO_STREAM_PACKED => printf::printf(server, host, port, sink),
        opcode::MALLOC => {
            let mut sizes = [0u64; 64];
            port.recv(|buffer, lane| sizes[lane as usize] = buffer.data[0])?;
            let mask = port.lane_mask();
            let mut addresses = [0u64; 64];
            for (lane, (address, &size)) in addresses.iter_mut().zip(&sizes).enumerate() {
                if mask & (1 << lane) != 0 && size <= MAX_MALLOC {
                    *address = memory.malloc(size.max(1));
                }
            }
            port.send(|buffer, lane| buffer.data[0] = addresses[lane as usize])?;
            Ok(Served::Handled)
        }
        opcode::FREE => {
            let mut addresses = [0u64; 64];
            port.recv(|buffer, lane| addresses[lane as usize] = buffer.data[0])?;
            let mask = port.lane_mask();
            for (lane, &address) in addresses.iter().enumerate() {
                if mask & (1 << lane) != 0 && address != 0 {
                    memory.free(address);
                }
            }
            Ok(Served::Handled)
        }
        opcode::EXIT => {
            port.recv_and_send(|_, _| {})?;
            // LLVM's server calls `quick_exit` from the first lane its loop visits, the lowest
            // of the mask, so that lane's status is the program's.
            let mut status = 0i32;
            let first = port.lane_mask().trailing_zeros();
            port.recv(|buffer, lane| {
                if lane == first {
                    status = buffer.data[0] as u32 as i32;
                }
            })?;
            Ok(Served::End(LaunchEnd::Exited(status)))
        }
        opcode::ABORT => {
            port.recv_and_send(|_, _| {})?;
            port.recv(|_, _| {})?;
            Ok(Served::End(LaunchEnd::Aborted))
        }
        opcode::PANIC => {
            for (lane, report) in recv_lanes(server, port, MAX_WRITE)? {
                let (location, file, message) = opcode::parse_panic(&report).ok_or_else(|| {
                    Fail::Protocol(format!(
                        "lane {lane} sent a {}-byte panic report that its header does not \
                         describe",
                        report.len()
                    ))
                })?;
                sink.panic(PanicReport {
                    message: lossy_prefix(message, MAX_PANIC_MESSAGE),
                    file: lossy_prefix(file, MAX_PANIC_FILE),
                    line: location.line,
                    column: location.column,
                    thread: location.thread,
                    block: location.block,
                });
            }
            Ok(Served::Handled)
        }
        opcode::RETIRED_PANIC => Err(Fail::Protocol(
            "the device reported a panic the way gpurun runtimes before this cargo-gpurun did \
             (opcode 0x67000001); rebuild the image with the `gpurun` crate of this release"
                .to_owned(),
        )),
        opcode::NOOP => {
            port.recv(|_, _| {})?;
            Ok(Served::Handled)
        }
        opcode::TEST_STREAM => testing::stream(server, port),
        opcode::TEST_INTERFACE => testing::interface(port),
        opcode::TEST_INCREMENT => {
            port.recv_and_send(|buffer, _| buffer.data[0] = buffer.data[0].wrapping_add(1))?;
            Ok(Served::Handled)
        }
        other => Err(Fail::Protocol(format!(
            "the device sent unknown opcode {other:#010x} on port {}",
            port.index()
        ))),
    }
}

/// Receives one `send_n` per lane, refusing lengths over `limit` before buffering anything.
pub(crate) fn recv_lanes(
    server: &Server,
    port: &mut ServerPort<'_>,
    limit: u64,
) -> Result<Vec<(u32, Vec<u8>)>, Fail> {
    let mut lanes: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut too_long = None;
    port.recv_n_chunks(|lane, size, offset, bytes| {
        if offset == 0 {
            if size > limit {
                too_long = Some(size);
                // The conversation cannot continue safely: stop waiting for the rest.
                server.cancel();
            }
            lanes.push((lane, Vec::with_capacity(size.min(limit) as usize)));
        }
        if let Some((_, data)) = lanes.iter_mut().rev().find(|(l, _)| *l == lane) {
            let room = (limit as usize).saturating_sub(data.len());
            data.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
    })
    .map_err(|error| match too_long {
        Some(size) => Fail::Protocol(format!(
            "the device announced a {size}-byte message (the limit is {limit})"
        )),
        None => Fail::from(error),
    })?;
    if let Some(size) = too_long {
        return Err(Fail::Protocol(format!(
            "the device announced a {size}-byte message (the limit is {limit})"
        )));
    }
    Ok(lanes)
}

/// Text from the device, cut to `keep` bytes (a long panic message is still a panic).
fn lossy_prefix(bytes: &[u8], keep: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(keep)]).into_owned()
}

/// A [`Sink`] that keeps everything, for tests of the loop and the backends.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct Collect {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub panics: Vec<PanicReport>,
}

impl Sink for Collect {
    fn stdout(&mut self, bytes: &[u8]) {
        self.stdout.extend_from_slice(bytes);
    }
    fn stderr(&mut self, bytes: &[u8]) {
        self.stderr.extend_from_slice(bytes);
    }
    fn panic(&mut self, report: PanicReport) {
        self.panics.push(report);
    }
}
