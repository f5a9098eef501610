//! A fake `libhsa-runtime64.so.1`: every function hsa-sys resolves (its `FUNCTION_SIGNATURES`;
//! `signatures_match` makes the compiler check each one against hsa-sys's table), recording
//! each call. The backend loads it through `$GPURUN_HSA_LIB`.
//!
//! The system: one CPU agent (a kernarg and a fine-grained pool) and one `gfx90a` GPU agent
//! (wave64, kernel dispatch, a coarse-grained pool and a 64 KiB group-segment pool, the LDS a
//! workgroup may have), HSA 1.1, timestamps at 1 GHz. Pool memory
//! is host memory (zeroed, 4 KiB aligned), so async copies really copy (and decrement their
//! signal at once). A code object is "loaded" by copying its `PT_LOAD` segments into one
//! block; its symbols are its dynamic symbols (kernels are their `NAME.kd` descriptors, whose
//! segment sizes are read from the descriptor bytes).
//!
//! Queues are real AQL rings in host memory, and the packet processor is modelled as AMD's
//! works: storing to a queue's doorbell processes packets in index order, from the first not yet
//! processed up to the one the value names, stopping at a slot whose header is not published (a
//! reserved slot never filled stalls the queue for good). The log line shows the packet the
//! doorbell names as the packet processor sees it at that moment. A kernel dispatch starts
//! its kernel (nothing is executed): its completion signal stays at its value for
//! [`RUNNING_POLLS_ENV`] loads or waits and is decremented after, unless [`LONG_KERNEL_ENV`]
//! holds it longer. A barrier-AND packet without dependencies completes at once. The read
//! index advances only past retired packets, in order, as the hardware's does: a running kernel
//! keeps every slot after it from being reused, however early the later packets complete.
//! On a queue with profiling enabled the dispatch gets a start timestamp when processed and an
//! end timestamp [`DISPATCH_TICKS_ENV`] later when it completes, kept in its completion signal
//! for `hsa_amd_profiling_get_dispatch_time`; elsewhere both stay 0, as ROCr's do.
//!
//! Signal waits behave as ROCr's interrupt signals do (`InterruptSignal::WaitRelaxed`,
//! `Signal::WaitAny`): they spin for [`WAIT_SPIN`], then sleep in the kernel driver in whole
//! milliseconds of what is left of the timeout, rounded down, and spin whenever that rounds to 0
//! (a wait of 1 ms or less never sleeps). Here the "kernel driver" is a condition variable that
//! any signal change wakes. Each wait is recorded with `blocked=N`: how many times it slept
//! (0: the whole wait was a spin).
//!
//! `hsa_shut_down` that drops the last reference records what is still alive
//! (`leaked blocks=.. signals=.. queues=.. executables=.. readers=..`); freeing or destroying
//! something unknown answers an error status, so a double free shows in the log.
//!
//! Set by the test (all optional):
//! - [`FAIL_ENV`]: `FUNCTION=STATUS,...` (say
//!   `hsa_executable_load_agent_code_object=HSA_STATUS_ERROR_INVALID_CODE_OBJECT`): those
//!   functions answer that status and do nothing else.
//! - [`RUNNING_POLLS_ENV`]: how many loads or waits of a completion signal a dispatched kernel
//!   runs for (0).
//! - [`LONG_KERNEL_ENV`]: `NAME,SECONDS[,OTHERS]`: a dispatched kernel whose descriptor's name
//!   contains `NAME` runs for `SECONDS` of wall time (fractions allowed), or until `OTHERS`
//!   other kernels of the process have completed, whichever comes first; the log says which
//!   (`fake runtime: long kernel ended after N other kernels` or `... after SECONDS s`).
//! - [`FAULT_ENV`]: an address (hex): the first load or wait of a running kernel's completion
//!   signal first calls the registered system event handler with a GPU memory fault at that
//!   address (page not present), once per process, as ROCr reports a kernel's bad access.
//! - [`QUEUE_ERROR_ENV`]: a status name (say `HSA_STATUS_ERROR_EXCEPTION`), optionally
//!   `STATUS@NAME`: the first load or wait of a running kernel's completion signal (of a kernel
//!   whose descriptor's name contains `NAME`) first calls the error callback of the queue that
//!   dispatched it with that status, once per process, as ROCr reports a queue error.
//! - [`COMPUTE_UNITS_ENV`], [`WAVES_PER_CU_ENV`]: the GPU's compute units (2) and waves per
//!   compute unit (4), e.g. 304 and 32 for an MI300X.
//! - [`TIMESTAMP_HZ_ENV`]: `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY` (1 GHz).
//! - [`CPUS_ENV`]: `2` lists a second CPU agent (`0xa101`, a second socket, with its own
//!   kernarg and fine-grained pools) before the GPU, and makes it the GPU's nearest
//!   (`HSA_AMD_AGENT_INFO_NEAREST_CPU`); by default the one CPU agent is.
//! - [`DISPATCH_TICKS_ENV`]: a profiled dispatch's length in system timestamp ticks (1000).
//! - [`MEMORY_ERROR_ENV`]: a pool kind (`kernarg`, `fine` or `coarse`): the first free of a block
//!   of that pool fails as ROCr's does when the GPU still holds the memory: the block leaves the
//!   table without being freed, the registered system event handler gets a
//!   `HSA_AMD_GPU_MEMORY_ERROR_EVENT`, and unless it answers `HSA_STATUS_SUCCESS` the process
//!   aborts, as ROCr's does; the free answers `HSA_STATUS_ERROR`.

// The exported functions are the HSA runtime API: its documentation is their contract.
#![allow(clippy::missing_safety_doc)]

use crate::record::{hex, record, setting_u64};
use hsa_sys::*;
use object::{Object, ObjectSegment, ObjectSymbol};
use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub const FAIL_ENV: &str = "GPURUN_FAKE_HSA_FAIL";
pub const RUNNING_POLLS_ENV: &str = "GPURUN_FAKE_HSA_RUNNING_POLLS";
pub const FAULT_ENV: &str = "GPURUN_FAKE_HSA_FAULT";
pub const QUEUE_ERROR_ENV: &str = "GPURUN_FAKE_HSA_QUEUE_ERROR";
pub const MEMORY_ERROR_ENV: &str = "GPURUN_FAKE_HSA_MEMORY_ERROR";
pub const COMPUTE_UNITS_ENV: &str = "GPURUN_FAKE_HSA_COMPUTE_UNITS";
pub const WAVES_PER_CU_ENV: &str = "GPURUN_FAKE_HSA_WAVES_PER_CU";
pub const TIMESTAMP_HZ_ENV: &str = "GPURUN_FAKE_HSA_TIMESTAMP_HZ";
pub const DISPATCH_TICKS_ENV: &str = "GPURUN_FAKE_HSA_DISPATCH_TICKS";
pub const LONG_KERNEL_ENV: &str = "GPURUN_FAKE_HSA_LONG_KERNEL";
pub const CPUS_ENV: &str = "GPURUN_FAKE_HSA_CPUS";

/// The global LLVM libc's GPU code keeps its RPC client in.
const RPC_CLIENT_SYMBOL: &str = "__llvm_rpc_client";

/// How long ROCr's signal waits spin before they sleep (`kMaxElapsed` in ROCr's `signal.cpp`).
pub const WAIT_SPIN: Duration = Duration::from_micros(200);

/// The CPU agents listed ([`CPUS_ENV`]).
fn cpu_agents() -> Vec<u64> {
    match setting(CPUS_ENV, 1) {
        2 => vec![CPU_AGENT, SECOND_CPU_AGENT],
        _ => vec![CPU_AGENT],
    }
}

/// The `u32` in environment variable `name`, else `default`.
fn setting(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default)
}

const CPU_AGENT: u64 = 0xa100;
/// The second socket's CPU agent, listed with [`CPUS_ENV`] = 2, and its pools.
const SECOND_CPU_AGENT: u64 = 0xa101;
const SECOND_KERNARG_POOL: u64 = 0xb101;
const SECOND_FINE_POOL: u64 = 0xb201;
const GPU_AGENT: u64 = 0xa200;
const ISA: u64 = 0xa300;
const KERNARG_POOL: u64 = 0xb100;
const FINE_POOL: u64 = 0xb200;
const COARSE_POOL: u64 = 0xb300;
/// The GPU's group segment (LDS) pool: no allocations, its size is a workgroup's LDS.
const GROUP_POOL: u64 = 0xb400;
const GROUP_POOL_SIZE: usize = 64 * 1024;
const ISA_NAME: &str = "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-";
const POOL_SIZE: usize = 1 << 30;
const QUEUE_MAX_SIZE: u32 = 1 << 17;
/// Kernel-descriptor offsets (AMDGPU code object v3+; gpurun-image decodes the same).
const KD_GROUP_SEGMENT: usize = 0;
const KD_PRIVATE_SEGMENT: usize = 4;
const KD_KERNARG_SIZE: usize = 8;
const KD_CODE_PROPERTIES: usize = 56;
const USES_DYNAMIC_STACK: u16 = 1 << 11;

/// The status called `name` (the header's spelling); an unknown name is recorded and reads as
/// `HSA_STATUS_ERROR`, so a mistyped test setting shows in the log.
fn status_named(name: &str) -> hsa_status_t {
    CONSTANTS
        .iter()
        .find(|(constant, ty, _)| *ty == "hsa_status_t" && *constant == name)
        .map(|(_, _, value)| *value as hsa_status_t)
        .unwrap_or_else(|| {
            record(&format!("fake runtime: unknown status `{name}`"));
            HSA_STATUS_ERROR
        })
}

fn status_text(status: hsa_status_t) -> String {
    status_name(status).map_or_else(|| format!("{status:#x}"), str::to_owned)
}

/// The failure [`FAIL_ENV`] chooses for `function`, if any.
fn chosen_failure(function: &str) -> Option<hsa_status_t> {
    crate::record::chosen_failure(FAIL_ENV, function, status_named)
}

/// The address [`FAULT_ENV`] asks a memory fault for, if any.
fn fault_address() -> Option<u64> {
    let value = std::env::var(FAULT_ENV).ok()?;
    u64::from_str_radix(value.trim().trim_start_matches("0x"), 16).ok()
}

fn running_polls() -> u64 {
    setting_u64(RUNNING_POLLS_ENV, 0)
}

/// What [`LONG_KERNEL_ENV`] asks for.
struct LongKernel {
    /// Part of the kernel descriptor's name.
    name: String,
    seconds: f64,
    /// Other kernels of the process whose completion ends it.
    others: Option<u64>,
}

fn long_kernel() -> Option<LongKernel> {
    let value = std::env::var(LONG_KERNEL_ENV).ok()?;
    let mut parts = value.split(',').map(str::trim);
    let name = parts.next()?.to_owned();
    let seconds = parts.next()?.parse::<f64>().ok()?.max(0.0);
    let others = parts.next().and_then(|count| count.parse().ok());
    Some(LongKernel {
        name,
        seconds,
        others,
    })
}

/// What [`QUEUE_ERROR_ENV`] asks for: the status, and the part of the kernel's name it needs.
fn queue_error_setting() -> Option<(hsa_status_t, Option<String>)> {
    let value = std::env::var(QUEUE_ERROR_ENV).ok()?;
    let (status, kernel) = match value.split_once('@') {
        Some((status, kernel)) => (status, Some(kernel.trim().to_owned())),
        None => (value.as_str(), None),
    };
    Some((status_named(status.trim()), kernel))
}

/// Memory handed out by a pool, or holding a loaded code object.
struct Block {
    len: usize,
    layout: Layout,
    /// `kernarg`, `fine`, `coarse` or `executable`.
    kind: &'static str,
}

struct Symbol {
    address: u64,
    size: u64,
    kernel: bool,
}

#[derive(Default)]
struct Executable {
    /// The loaded image's block, once a code object is loaded.
    base: Option<u64>,
    symbols: HashMap<String, Symbol>,
    frozen: bool,
}

/// How long a started kernel runs.
enum Running {
    /// Until its completion signal has been loaded or waited on this many more times.
    Polls(u64),
    /// A [`LONG_KERNEL_ENV`] kernel: until `until`, or until `others` other kernels of the
    /// process have completed.
    Long {
        until: Instant,
        seconds: f64,
        others: Option<u64>,
    },
}

/// A signal's bookkeeping; its value lives in the memory its handle points to.
struct Signal {
    running: Option<Running>,
    /// The profiled dispatch it completes: its start and end timestamps (0 until written).
    dispatch_time: hsa_amd_profiling_dispatch_time_t,
}

/// Where a signal's memory is: ROCr's handles point to an `amd_signal_t` (64 bytes, 64-aligned:
/// `kind` at 0, `value` at 8, `event_mailbox_ptr` at 16, `event_id` at 24), and so do ours.
fn signal_layout() -> Layout {
    Layout::from_size_align(64, 64).unwrap_or_else(|_| Layout::new::<[u64; 8]>())
}

/// `AMD_SIGNAL_KIND_USER`: a signal the application created.
const SIGNAL_KIND_USER: i64 = 1;
const SIGNAL_VALUE: u64 = 8;
const SIGNAL_EVENT_MAILBOX: u64 = 16;
const SIGNAL_EVENT_ID: u64 = 24;

/// The interrupt event mailbox every signal names: a device that wants the host to wake writes
/// a signal's event id here and raises an interrupt (no device runs here; it stays 0).
static EVENT_MAILBOX: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The value word of the live signal `handle`.
///
/// # Safety
/// `handle` must be a signal of the state's table (its memory is freed only when it leaves it).
unsafe fn signal_value<'a>(handle: u64) -> &'a AtomicI64 {
    // SAFETY: per the caller, 64 live bytes at `handle`; the value is an aligned i64 at 8.
    unsafe { AtomicI64::from_ptr((handle + SIGNAL_VALUE) as *mut i64) }
}

/// A started kernel: its queue, its packet index and its descriptor's name.
struct Dispatch {
    queue: u64,
    index: u64,
    kernel: String,
}

struct Queue {
    ring: u64,
    size: u32,
    doorbell: u64,
    write_index: u64,
    /// The first packet not yet retired (the hardware's read index).
    read_index: u64,
    /// The next packet the packet processor looks at.
    processed: u64,
    /// Packets processed but not retired: index → completion signal.
    in_flight: BTreeMap<u64, u64>,
    /// The error callback and its data pointer given at creation.
    callback: (hsa_queue_callback_t, usize),
    /// `hsa_amd_profiling_set_profiler_enabled` turned timestamps on.
    profiling: bool,
}

/// The AQL header of an empty slot, as ROCr fills a new ring (`HSA_PACKET_TYPE_INVALID`).
const INVALID_HEADER: u32 = HSA_PACKET_TYPE_INVALID;

#[derive(Default)]
struct State {
    references: u32,
    next_handle: u64,
    blocks: BTreeMap<u64, Block>,
    readers: HashMap<u64, Vec<u8>>,
    executables: HashMap<u64, Executable>,
    /// Symbol handle → (executable, name).
    symbols: HashMap<u64, (u64, String)>,
    signals: HashMap<u64, Signal>,
    /// Queue descriptor address → queue.
    queues: HashMap<u64, Queue>,
    /// The system event handler and its data pointer, once registered.
    event_handler: Option<(hsa_amd_system_event_callback_t, usize)>,
    /// The [`FAULT_ENV`] fault was reported.
    fault_sent: bool,
    /// Completion signal of a started kernel → where it was dispatched.
    dispatched: HashMap<u64, Dispatch>,
    /// Kernels that have completed, in the whole process.
    completed_kernels: u64,
    /// The [`QUEUE_ERROR_ENV`] error was reported.
    queue_error_sent: bool,
    /// The [`MEMORY_ERROR_ENV`] error was reported.
    memory_error_sent: bool,
    /// The system timestamp the next profiled dispatch starts at.
    clock: u64,
    /// The event id the next signal gets.
    next_event_id: u32,
}

/// Woken whenever a signal's value changes: what ROCr's waits sleep on (the interrupt).
static WAKE: Condvar = Condvar::new();

impl State {
    fn handle(&mut self) -> u64 {
        self.next_handle += 1;
        0x20_0000 + self.next_handle * 0x100
    }

    fn allocate(&mut self, len: usize, kind: &'static str) -> Option<u64> {
        let layout = Layout::from_size_align(len.max(1), 4096).ok()?;
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        if pointer.is_null() {
            return None;
        }
        let address = pointer as u64;
        self.blocks.insert(address, Block { len, layout, kind });
        Some(address)
    }

    /// Frees the block starting at `address`; false if there is none.
    fn release(&mut self, address: u64) -> bool {
        match self.blocks.remove(&address) {
            Some(block) => {
                // SAFETY: allocated by `allocate` with this layout, removed from the table so
                // freed once.
                unsafe { std::alloc::dealloc(address as *mut u8, block.layout) };
                true
            }
            None => false,
        }
    }

    /// How the log names `len` bytes at `address`: a loaded symbol, else `kind+offset`; `None`
    /// when they are not inside one block.
    fn locate(&self, address: u64, len: usize) -> Option<String> {
        let (&start, block) = self.blocks.range(..=address).next_back()?;
        let offset = address - start;
        if offset.checked_add(len as u64)? > block.len as u64 {
            return None;
        }
        let symbol = self
            .executables
            .values()
            .flat_map(|executable| &executable.symbols)
            .find(|(_, symbol)| symbol.address == address);
        Some(match symbol {
            Some((name, _)) => name.clone(),
            None => format!("{}+{offset}", block.kind),
        })
    }

    /// A new signal at `value`, laid out as ROCr's; its handle is its address (0 if memory
    /// ran out).
    fn new_signal(&mut self, value: i64) -> u64 {
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(signal_layout()) };
        if pointer.is_null() {
            return 0;
        }
        self.next_event_id += 1;
        let handle = pointer as u64;
        // SAFETY: 64 fresh bytes, 64-aligned: the fields are aligned inside them.
        unsafe {
            (handle as *mut i64).write(SIGNAL_KIND_USER);
            ((handle + SIGNAL_VALUE) as *mut i64).write(value);
            ((handle + SIGNAL_EVENT_MAILBOX) as *mut u64).write(EVENT_MAILBOX.as_ptr() as u64);
            ((handle + SIGNAL_EVENT_ID) as *mut u32).write(self.next_event_id);
        }
        self.signals.insert(
            handle,
            Signal {
                running: None,
                dispatch_time: hsa_amd_profiling_dispatch_time_t::default(),
            },
        );
        handle
    }

    /// Destroys the signal `handle`; false if there is none.
    fn drop_signal(&mut self, handle: u64) -> bool {
        if self.signals.remove(&handle).is_none() {
            return false;
        }
        self.dispatched.remove(&handle);
        // SAFETY: allocated by `new_signal` with this layout and removed from the table, so
        // freed once.
        unsafe { std::alloc::dealloc(handle as *mut u8, signal_layout()) };
        true
    }

    /// The value of `handle`, `i64::MIN` when there is no such signal.
    fn value(&self, handle: u64) -> i64 {
        if !self.signals.contains_key(&handle) {
            return i64::MIN;
        }
        // SAFETY: a signal of the table.
        unsafe { signal_value(handle) }.load(Ordering::Acquire)
    }

    /// Sets the value of `handle` (if it is a signal) and wakes the waiters.
    fn set_value(&mut self, handle: u64, value: i64) {
        if self.signals.contains_key(&handle) {
            // SAFETY: a signal of the table.
            unsafe { signal_value(handle) }.store(value, Ordering::Release);
            WAKE.notify_all();
        }
    }

    /// Subtracts one from `handle`'s value (if it is a signal) and wakes the waiters.
    fn decrement(&mut self, handle: u64) {
        if self.signals.contains_key(&handle) {
            // SAFETY: a signal of the table.
            unsafe { signal_value(handle) }.fetch_sub(1, Ordering::AcqRel);
            WAKE.notify_all();
        }
    }

    /// The memory fault [`FAULT_ENV`] asks for, the first time a running kernel's completion
    /// signal is polled: the handler to call (outside the state lock) and the address.
    fn fault_to_report(
        &mut self,
        signal: u64,
    ) -> Option<(hsa_amd_system_event_callback_t, usize, u64)> {
        let running = self.signals.get(&signal)?.running.is_some();
        if !running || self.fault_sent {
            return None;
        }
        let address = fault_address()?;
        let (handler, data) = self.event_handler?;
        self.fault_sent = true;
        Some((handler, data, address))
    }

    /// The queue error [`QUEUE_ERROR_ENV`] asks for, the first time a running kernel's (of the
    /// kernel it names) completion signal is polled: the callback to call (outside the state
    /// lock), its data, the status and the queue.
    fn queue_error_to_report(
        &mut self,
        signal: u64,
    ) -> Option<(hsa_queue_callback_t, usize, hsa_status_t, u64)> {
        let running = self.signals.get(&signal)?.running.is_some();
        if !running || self.queue_error_sent {
            return None;
        }
        let (status, kernel) = queue_error_setting()?;
        let dispatch = self.dispatched.get(&signal)?;
        if kernel.is_some_and(|name| !dispatch.kernel.contains(&name)) {
            return None;
        }
        let queue = dispatch.queue;
        let (callback, data) = self.queues.get(&queue)?.callback;
        self.queue_error_sent = true;
        Some((callback, data, status, queue))
    }

    /// A load or wait of `signal` (`poll`: it counts as one of [`RUNNING_POLLS_ENV`]): ends its
    /// kernel when its time has come; the value after.
    fn advance(&mut self, handle: u64, poll: bool) -> i64 {
        let completed = self.completed_kernels;
        let Some(signal) = self.signals.get_mut(&handle) else {
            return i64::MIN;
        };
        let end = match signal.running.as_mut() {
            Some(Running::Polls(0)) if poll => Some(None),
            Some(Running::Polls(left)) if poll => {
                *left -= 1;
                None
            }
            Some(Running::Long {
                until,
                seconds,
                others,
            }) => match others {
                Some(count) if completed >= *count => {
                    Some(Some(format!("after {count} other kernels")))
                }
                _ if Instant::now() >= *until => Some(Some(format!("after {seconds} s"))),
                _ => None,
            },
            _ => None,
        };
        if let Some(note) = end {
            if let Some(note) = note {
                record(&format!("fake runtime: long kernel ended {note} -> void"));
            }
            self.complete(handle);
        }
        self.value(handle)
    }

    /// The kernel `handle` completes: its signal is decremented (the end timestamp written for
    /// a profiled dispatch) and its packet may retire.
    fn complete(&mut self, handle: u64) {
        let Some(signal) = self.signals.get_mut(&handle) else {
            return;
        };
        signal.running = None;
        let start = signal.dispatch_time.start;
        if start != 0 {
            signal.dispatch_time.end = start + setting_u64(DISPATCH_TICKS_ENV, 1000);
        }
        self.completed_kernels += 1;
        if let Some(dispatch) = self.dispatched.get(&handle) {
            let (queue, index) = (dispatch.queue, dispatch.index);
            if let Some(queue) = self.queues.get_mut(&queue) {
                queue.in_flight.remove(&index);
            }
            self.retire(queue);
        }
        self.decrement(handle);
    }

    /// When the kernel of `handle` ends by itself (a [`LONG_KERNEL_ENV`] kernel's time).
    fn ends_at(&self, handle: u64) -> Option<Instant> {
        match self.signals.get(&handle)?.running.as_ref()? {
            Running::Long { until, .. } => Some(*until),
            Running::Polls(_) => None,
        }
    }

    /// Moves `queue`'s read index past the packets that retired, in order, and marks their
    /// slots empty again.
    fn retire(&mut self, queue: u64) {
        let Some(queue) = self.queues.get_mut(&queue) else {
            return;
        };
        let read = queue
            .in_flight
            .keys()
            .next()
            .copied()
            .unwrap_or(queue.processed);
        for index in queue.read_index..read {
            let slot = index & u64::from(queue.size - 1);
            // SAFETY: `slot` < size: the header word lies inside the ring this runtime
            // allocated; stored atomically, as the packet processor does.
            unsafe {
                AtomicU32::from_ptr((queue.ring + slot * 64) as *mut u32)
                    .store(INVALID_HEADER, Ordering::Release)
            };
        }
        queue.read_index = read;
    }

    /// What the packet processor does when the doorbell of `queue` says `index`: processes the
    /// packets from the first it has not processed up to `index`, in order, stopping at a slot
    /// whose header is not published; describes the packet `index` names.
    fn ring(&mut self, queue_address: u64, index: i64) -> String {
        let index = index as u64;
        let mut named = None;
        loop {
            let Some(queue) = self.queues.get(&queue_address) else {
                return "doorbell of no queue".into();
            };
            let next = queue.processed;
            if next > index || next.wrapping_sub(queue.read_index) >= u64::from(queue.size) {
                break;
            }
            let packet = queue.ring + (next & u64::from(queue.size - 1)) * 64;
            match self.process(queue_address, next, packet) {
                Some(details) => {
                    if next == index {
                        named = Some(details);
                    }
                }
                None => {
                    named = Some(if next == index {
                        format!("index={index} header=0x0 (no packet published)")
                    } else {
                        format!("index={index} waits behind index {next}, not published")
                    });
                    break;
                }
            }
        }
        self.retire(queue_address);
        named.unwrap_or_else(|| format!("index={index} (already processed)"))
    }

    /// Processes the packet at `packet`, number `index` of `queue_address`; `None` when its
    /// header is not published yet.
    fn process(&mut self, queue_address: u64, index: u64, packet: u64) -> Option<String> {
        // SAFETY: the 64 bytes lie inside the ring this runtime allocated; the header word is
        // read atomically, as the packet processor does.
        let (header, bytes) = unsafe {
            let header = AtomicU32::from_ptr(packet as *mut u32).load(Ordering::Acquire);
            let mut bytes = [0u8; 64];
            std::ptr::copy_nonoverlapping(packet as *const u8, bytes.as_mut_ptr(), 64);
            (header, bytes)
        };
        let packet_type = header & 0xff;
        if header & 0xffff == 0 || packet_type == INVALID_HEADER {
            return None;
        }
        let queue = self.queues.get_mut(&queue_address)?;
        queue.processed = index + 1;
        let profiled = queue.profiling;
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let completion = u64_at(56);
        if packet_type == HSA_PACKET_TYPE_BARRIER_AND {
            // Dependencies are not modelled: the barrier completes as it is processed.
            let dependencies = (8..48).step_by(8).filter(|&at| u64_at(at) != 0).count();
            if completion != 0 {
                self.decrement(completion);
            }
            return Some(format!(
                "index={index} header={:#06x} barrier-and dependencies={dependencies} \
                 completion={completion:#x} completed",
                header & 0xffff
            ));
        }
        if packet_type != HSA_PACKET_TYPE_KERNEL_DISPATCH {
            return Some(format!(
                "index={index} header={:#06x} not a packet this fake runs",
                header & 0xffff
            ));
        }
        let kernel_object = u64_at(32);
        let kernarg = u64_at(40);
        let kernel = self
            .locate(kernel_object, 64)
            .unwrap_or_else(|| format!("{kernel_object:#x}"));
        // The kernel arguments as the kernel would read them: the segment its descriptor sizes.
        let kernarg_len = self
            .blocks
            .range(..=kernarg)
            .next_back()
            .map_or(0, |(&start, block)| {
                block.len.saturating_sub((kernarg - start) as usize)
            });
        // SAFETY: `kernarg_len` bytes from `kernarg` lie inside a live block.
        let kernarg_bytes =
            unsafe { std::slice::from_raw_parts(kernarg as *const u8, kernarg_len) };
        self.clock += 1_000_000;
        let start = if profiled { self.clock } else { 0 };
        let running = match long_kernel().filter(|long| kernel.contains(&long.name)) {
            Some(long) => Running::Long {
                until: Instant::now() + Duration::from_secs_f64(long.seconds),
                seconds: long.seconds,
                others: long.others,
            },
            None => Running::Polls(running_polls()),
        };
        let started = match self.signals.get_mut(&completion) {
            Some(signal) => {
                signal.running = Some(running);
                signal.dispatch_time = hsa_amd_profiling_dispatch_time_t { start, end: 0 };
                self.dispatched.insert(
                    completion,
                    Dispatch {
                        queue: queue_address,
                        index,
                        kernel: kernel.clone(),
                    },
                );
                if let Some(queue) = self.queues.get_mut(&queue_address) {
                    queue.in_flight.insert(index, completion);
                }
                "started"
            }
            None => "unknown completion signal",
        };
        Some(format!(
            "index={index} header={:#06x} setup={} workgroup={}x{}x{} grid={}x{}x{} private={} \
             group={} kernel={kernel} completion={completion:#x} kernarg={} {started}",
            header & 0xffff,
            header >> 16,
            u16_at(4),
            u16_at(6),
            u16_at(8),
            u32_at(12),
            u32_at(16),
            u32_at(20),
            u32_at(24),
            u32_at(28),
            hex(kernarg_bytes),
        ))
    }

    /// What the RPC doorbell record says, for a copy of an RPC client object (`client`, its
    /// first bytes): ` doorbell=none`, or which signal's value it counts in and whether its
    /// event mailbox and id are that signal's (` doorbell=0x.. interrupt=true`).
    fn rpc_doorbell(&self, client: &[u8]) -> String {
        let word = |bytes: &[u8], at: usize| {
            u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]))
        };
        // LLVM libc's client: the port count at 0, the pointer to the buffer's doorbell record
        // at 8 (0 in the layout without one).
        let record = word(client, 8);
        if record == 0 || self.locate(record, 24).is_none() {
            return " doorbell=none".into();
        }
        // SAFETY: 24 bytes of a live block (checked above).
        let fields = unsafe { std::slice::from_raw_parts(record as *const u8, 24) };
        let (value, mailbox) = (word(fields, 0), word(fields, 8));
        let event_id = u32::from_le_bytes(fields[16..20].try_into().unwrap_or([0; 4]));
        let Some(signal) = value
            .checked_sub(SIGNAL_VALUE)
            .filter(|signal| self.signals.contains_key(signal))
        else {
            return format!(" doorbell=not-a-signal:{value:#x}");
        };
        // SAFETY: a live signal's memory (64 bytes; see `new_signal`).
        let (own_mailbox, own_id) = unsafe {
            (
                ((signal + SIGNAL_EVENT_MAILBOX) as *const u64).read(),
                ((signal + SIGNAL_EVENT_ID) as *const u32).read(),
            )
        };
        let interrupt = mailbox == own_mailbox && event_id == own_id && mailbox != 0;
        format!(" doorbell={signal:#x} interrupt={interrupt}")
    }

    fn leaks(&self) -> String {
        format!(
            "leaked blocks={} signals={} queues={} executables={} readers={}",
            self.blocks.len(),
            self.signals.len(),
            self.queues.len(),
            self.executables.len(),
            self.readers.len()
        )
    }
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs one runtime function: the chosen failure, else `body`; records `function details ->
/// status`. `body` may add to the details.
fn call(
    function: &str,
    details: String,
    body: impl FnOnce(&mut String) -> hsa_status_t,
) -> hsa_status_t {
    let mut details = details;
    let status = chosen_failure(function).unwrap_or_else(|| body(&mut details));
    record(&format!("{function} {details} -> {}", status_text(status)));
    status
}

/// Records a function that returns no status.
fn record_plain(function: &str, details: String) {
    record(&format!("{function} {details} -> void"));
}

/// Writes `value` through the caller's untyped out-pointer.
///
/// # Safety
/// `out` must be valid for a `T` (the attribute's documented type).
unsafe fn put<T>(out: *mut c_void, value: T) -> hsa_status_t {
    if out.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: per the caller.
    unsafe { out.cast::<T>().write_unaligned(value) };
    HSA_STATUS_SUCCESS
}

/// Writes `text` as a `char[64]` attribute.
///
/// # Safety
/// `out` must be valid for 64 bytes.
unsafe fn put_name(out: *mut c_void, text: &str) -> hsa_status_t {
    let mut bytes = [0u8; 64];
    bytes[..text.len().min(63)].copy_from_slice(&text.as_bytes()[..text.len().min(63)]);
    // SAFETY: per the caller.
    unsafe { put(out, bytes) }
}

#[no_mangle]
pub extern "C" fn hsa_init() -> hsa_status_t {
    call("hsa_init", String::new(), |details| {
        let mut state = state();
        state.references += 1;
        *details = format!("references={}", state.references);
        HSA_STATUS_SUCCESS
    })
}

#[no_mangle]
pub extern "C" fn hsa_shut_down() -> hsa_status_t {
    call("hsa_shut_down", String::new(), |details| {
        let mut state = state();
        if state.references == 0 {
            return HSA_STATUS_ERROR_NOT_INITIALIZED;
        }
        state.references -= 1;
        *details = format!("references={}", state.references);
        if state.references == 0 {
            *details = format!("{details} {}", state.leaks());
        }
        HSA_STATUS_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn hsa_status_string(
    status: hsa_status_t,
    status_string: *mut *const c_char,
) -> hsa_status_t {
    // Not recorded: the backend asks it only to describe a failure already in the log.
    let text: &'static CStr = match status {
        HSA_STATUS_ERROR_INVALID_CODE_OBJECT => {
            c"HSA_STATUS_ERROR_INVALID_CODE_OBJECT: The code object is invalid."
        }
        HSA_STATUS_SUCCESS => c"HSA_STATUS_SUCCESS: The function has been executed successfully.",
        _ => c"Failure chosen by the fake HSA runtime.",
    };
    if status_string.is_null() {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: a valid out-pointer per the API; the string is static.
    unsafe { status_string.write(text.as_ptr()) };
    HSA_STATUS_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn hsa_system_get_info(
    attribute: hsa_system_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    call(
        "hsa_system_get_info",
        format!("attribute={attribute}"),
        |_| {
            // SAFETY: each attribute's documented type.
            unsafe {
                match attribute {
                    HSA_SYSTEM_INFO_VERSION_MAJOR | HSA_SYSTEM_INFO_VERSION_MINOR => {
                        put(value, 1u16)
                    }
                    HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY => {
                        put(value, setting_u64(TIMESTAMP_HZ_ENV, 1_000_000_000))
                    }
                    _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
                }
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_register_system_event_handler(
    callback: hsa_amd_system_event_callback_t,
    data: *mut c_void,
) -> hsa_status_t {
    call(
        "hsa_amd_register_system_event_handler",
        format!("handler={}", callback.is_some()),
        |_| {
            state().event_handler = Some((callback, data as usize));
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_iterate_agents(
    callback: hsa_agent_callback_t,
    data: *mut c_void,
) -> hsa_status_t {
    call("hsa_iterate_agents", String::new(), |_| {
        let Some(callback) = callback else {
            return HSA_STATUS_ERROR_INVALID_ARGUMENT;
        };
        for agent in cpu_agents().into_iter().chain([GPU_AGENT]) {
            // SAFETY: the caller's callback with its own data, as the API calls it.
            let status = unsafe { callback(hsa_agent_t { handle: agent }, data) };
            if status != HSA_STATUS_SUCCESS {
                return status;
            }
        }
        HSA_STATUS_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn hsa_agent_get_info(
    agent: hsa_agent_t,
    attribute: hsa_agent_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    let gpu = agent.handle == GPU_AGENT;
    call(
        "hsa_agent_get_info",
        format!("agent={:#x} attribute={attribute:#x}", agent.handle),
        |_| {
            if !gpu && !cpu_agents().contains(&agent.handle) {
                return HSA_STATUS_ERROR_INVALID_AGENT;
            }
            // SAFETY: each attribute's documented type.
            unsafe {
                match (attribute, gpu) {
                    (HSA_AGENT_INFO_DEVICE, true) => put(value, HSA_DEVICE_TYPE_GPU),
                    (HSA_AGENT_INFO_DEVICE, false) => put(value, HSA_DEVICE_TYPE_CPU),
                    (HSA_AGENT_INFO_FEATURE, true) => put(value, HSA_AGENT_FEATURE_KERNEL_DISPATCH),
                    (HSA_AGENT_INFO_FEATURE, false) => put(value, 0u32),
                    (HSA_AGENT_INFO_WAVEFRONT_SIZE, true) => put(value, 64u32),
                    (HSA_AGENT_INFO_NAME, true) => put_name(value, "gfx90a"),
                    (HSA_AGENT_INFO_NAME, false) => put_name(value, "Fake CPU"),
                    (HSA_AMD_AGENT_INFO_PRODUCT_NAME, true) => put_name(value, "Fake Instinct"),
                    (HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, true) => {
                        put(value, setting(COMPUTE_UNITS_ENV, 2))
                    }
                    (HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU, true) => {
                        put(value, setting(WAVES_PER_CU_ENV, 4))
                    }
                    (HSA_AGENT_INFO_QUEUE_MIN_SIZE, true) => put(value, 64u32),
                    (HSA_AGENT_INFO_QUEUE_MAX_SIZE, true) => put(value, QUEUE_MAX_SIZE),
                    (HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY, true) => put(value, 100_000_000u64),
                    (HSA_AMD_AGENT_INFO_NEAREST_CPU, true) => put(
                        value,
                        hsa_agent_t {
                            handle: *cpu_agents().last().unwrap_or(&CPU_AGENT),
                        },
                    ),
                    _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
                }
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_agent_iterate_isas(
    agent: hsa_agent_t,
    callback: hsa_isa_callback_t,
    data: *mut c_void,
) -> hsa_status_t {
    call(
        "hsa_agent_iterate_isas",
        format!("agent={:#x}", agent.handle),
        |_| match callback {
            // SAFETY: the caller's callback with its own data.
            Some(callback) if agent.handle == GPU_AGENT => unsafe {
                callback(hsa_isa_t { handle: ISA }, data)
            },
            _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_isa_get_info_alt(
    isa: hsa_isa_t,
    attribute: hsa_isa_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    call(
        "hsa_isa_get_info_alt",
        format!("attribute={attribute}"),
        |_| {
            if isa.handle != ISA || value.is_null() {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            match attribute {
                // SAFETY: NAME_LENGTH is a uint32_t.
                HSA_ISA_INFO_NAME_LENGTH => unsafe { put(value, ISA_NAME.len() as u32) },
                HSA_ISA_INFO_NAME => {
                    // SAFETY: NAME writes NAME_LENGTH bytes, which the caller sized.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            ISA_NAME.as_ptr(),
                            value.cast::<u8>(),
                            ISA_NAME.len(),
                        )
                    };
                    HSA_STATUS_SUCCESS
                }
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_agent_iterate_memory_pools(
    agent: hsa_agent_t,
    callback: hsa_amd_memory_pool_callback_t,
    data: *mut c_void,
) -> hsa_status_t {
    call(
        "hsa_amd_agent_iterate_memory_pools",
        format!("agent={:#x}", agent.handle),
        |_| {
            let pools: &[u64] = match agent.handle {
                // ROCr's order: the system fine-grained pool before the kernarg pool (which is
                // fine-grained too).
                CPU_AGENT => &[FINE_POOL, KERNARG_POOL],
                SECOND_CPU_AGENT if cpu_agents().contains(&SECOND_CPU_AGENT) => {
                    &[SECOND_FINE_POOL, SECOND_KERNARG_POOL]
                }
                // ROCr lists the GPU's group segment pool after its global ones.
                GPU_AGENT => &[COARSE_POOL, GROUP_POOL],
                _ => return HSA_STATUS_ERROR_INVALID_AGENT,
            };
            let Some(callback) = callback else {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            for &pool in pools {
                // SAFETY: the caller's callback with its own data.
                let status = unsafe { callback(hsa_amd_memory_pool_t { handle: pool }, data) };
                if status != HSA_STATUS_SUCCESS {
                    return status;
                }
            }
            HSA_STATUS_SUCCESS
        },
    )
}

fn pool_kind(pool: u64) -> Option<&'static str> {
    match pool {
        KERNARG_POOL | SECOND_KERNARG_POOL => Some("kernarg"),
        FINE_POOL | SECOND_FINE_POOL => Some("fine"),
        COARSE_POOL => Some("coarse"),
        GROUP_POOL => Some("group"),
        _ => None,
    }
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_pool_get_info(
    memory_pool: hsa_amd_memory_pool_t,
    attribute: hsa_amd_memory_pool_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    let kind = pool_kind(memory_pool.handle);
    call(
        "hsa_amd_memory_pool_get_info",
        format!("pool={} attribute={attribute}", kind.unwrap_or("?")),
        |_| {
            let Some(kind) = kind else {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            let flags = match kind {
                "kernarg" => {
                    HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT
                        | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
                }
                "fine" => HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED,
                _ => HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
            };
            if kind == "group" {
                // SAFETY: each attribute's documented type.
                return unsafe {
                    match attribute {
                        HSA_AMD_MEMORY_POOL_INFO_SEGMENT => put(value, HSA_AMD_SEGMENT_GROUP),
                        HSA_AMD_MEMORY_POOL_INFO_SIZE => put(value, GROUP_POOL_SIZE),
                        HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED => put(value, false),
                        // Global flags belong to global pools only.
                        _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
                    }
                };
            }
            // SAFETY: each attribute's documented type.
            unsafe {
                match attribute {
                    HSA_AMD_MEMORY_POOL_INFO_SEGMENT => put(value, HSA_AMD_SEGMENT_GLOBAL),
                    HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS => put(value, flags),
                    HSA_AMD_MEMORY_POOL_INFO_SIZE => put(value, POOL_SIZE),
                    HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED => put(value, true),
                    HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE
                    | HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT => put(value, 4096usize),
                    _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
                }
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_pool_allocate(
    memory_pool: hsa_amd_memory_pool_t,
    size: usize,
    flags: u32,
    ptr: *mut *mut c_void,
) -> hsa_status_t {
    let kind = pool_kind(memory_pool.handle);
    call(
        "hsa_amd_memory_pool_allocate",
        format!("pool={} bytes={size} flags={flags}", kind.unwrap_or("?")),
        |details| {
            let Some(kind) = kind.filter(|&kind| kind != "group") else {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            if ptr.is_null() || size == 0 || size > POOL_SIZE {
                return HSA_STATUS_ERROR_INVALID_ALLOCATION;
            }
            let Some(address) = state().allocate(size, kind) else {
                return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
            };
            details.push_str(&format!(" ptr={address:#x}"));
            // SAFETY: a valid out-pointer per the API.
            unsafe { ptr.write(address as *mut c_void) };
            HSA_STATUS_SUCCESS
        },
    )
}

/// The [`MEMORY_ERROR_ENV`] error, when `address` is the first freed block of the chosen pool:
/// takes the block out of the table (leaked, as ROCr leaves it) and returns the handler to call.
fn memory_error_to_report(address: u64) -> Option<(hsa_amd_system_event_callback_t, usize)> {
    let kind = std::env::var(MEMORY_ERROR_ENV).ok()?;
    let mut state = state();
    let block = state.blocks.get(&address)?;
    if state.memory_error_sent || block.kind != kind.trim() {
        return None;
    }
    state.memory_error_sent = true;
    state.blocks.remove(&address);
    Some(state.event_handler.unwrap_or((None, 0)))
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_pool_free(ptr: *mut c_void) -> hsa_status_t {
    if let Some((handler, data)) = memory_error_to_report(ptr as u64) {
        let event = hsa_amd_event_t {
            event_type: HSA_AMD_GPU_MEMORY_ERROR_EVENT,
            memory_fault: hsa_amd_gpu_memory_fault_info_t {
                agent: hsa_agent_t { handle: GPU_AGENT },
                virtual_address: ptr as u64,
                fault_reason_mask: HSA_AMD_MEMORY_ERROR_MEMORY_IN_USE,
            },
        };
        let status = match handler {
            // SAFETY: the handler was registered for system events; the event lives for the
            // call, and `data` is the pointer it was registered with.
            Some(handler) => unsafe { handler(&event, data as *mut c_void) },
            None => HSA_STATUS_ERROR,
        };
        record(&format!(
            "fake runtime: memory error event address={:#x} -> {}",
            ptr as u64,
            status_text(status)
        ));
        if status != HSA_STATUS_SUCCESS {
            record("fake runtime: memory error not handled: abort, as ROCr does");
            std::process::abort();
        }
        record(&format!(
            "hsa_amd_memory_pool_free ptr={:#x} -> HSA_STATUS_ERROR",
            ptr as u64
        ));
        return HSA_STATUS_ERROR;
    }
    call(
        "hsa_amd_memory_pool_free",
        format!("ptr={:#x}", ptr as u64),
        |_| {
            let mut state = state();
            let is_pool_memory = state
                .blocks
                .get(&(ptr as u64))
                .is_some_and(|block| block.kind != "executable");
            if is_pool_memory && state.release(ptr as u64) {
                HSA_STATUS_SUCCESS
            } else {
                HSA_STATUS_ERROR_INVALID_ALLOCATION
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_agents_allow_access(
    num_agents: u32,
    agents: *const hsa_agent_t,
    _flags: *const u32,
    ptr: *const c_void,
) -> hsa_status_t {
    let first = if agents.is_null() || num_agents == 0 {
        0
    } else {
        // SAFETY: `num_agents` > 0 agents per the API.
        unsafe { (*agents).handle }
    };
    call(
        "hsa_amd_agents_allow_access",
        format!("agents={num_agents} first={first:#x} ptr={:#x}", ptr as u64),
        |_| match state().blocks.contains_key(&(ptr as u64)) {
            true => HSA_STATUS_SUCCESS,
            false => HSA_STATUS_ERROR_INVALID_ARGUMENT,
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_async_copy(
    dst: *mut c_void,
    _dst_agent: hsa_agent_t,
    src: *const c_void,
    _src_agent: hsa_agent_t,
    size: usize,
    num_dep_signals: u32,
    _dep_signals: *const hsa_signal_t,
    completion_signal: hsa_signal_t,
) -> hsa_status_t {
    call(
        "hsa_amd_memory_async_copy",
        format!("bytes={size} deps={num_dep_signals}"),
        |details| {
            let mut state = state();
            let (Some(to), Some(from)) = (
                state.locate(dst as u64, size),
                state.locate(src as u64, size),
            ) else {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            if !state.signals.contains_key(&completion_signal.handle) {
                return HSA_STATUS_ERROR_INVALID_SIGNAL;
            }
            // SAFETY: both ranges lie inside live blocks (checked above); distinct blocks
            // or the same bytes, copied as memmove would.
            let bytes = unsafe {
                std::ptr::copy(src.cast::<u8>(), dst.cast::<u8>(), size);
                std::slice::from_raw_parts(dst.cast::<u8>(), size.min(64))
            };
            details.push_str(&format!(" dst={to} src={from} data={}", hex(bytes)));
            if to == RPC_CLIENT_SYMBOL {
                details.push_str(&state.rpc_doorbell(bytes));
            }
            state.decrement(completion_signal.handle);
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_fill(
    ptr: *mut c_void,
    value: u32,
    count: usize,
) -> hsa_status_t {
    call(
        "hsa_amd_memory_fill",
        format!("value={value:#x} count={count}"),
        |details| {
            let Some(place) = state().locate(ptr as u64, count.saturating_mul(4)) else {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            };
            // ROCr's fill works on 32-bit words.
            if !(ptr as usize).is_multiple_of(4) {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            details.push_str(&format!(" ptr={place}"));
            // SAFETY: `count` words inside a live block (checked above).
            let words = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u32>(), count) };
            words.fill(value);
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_lock(
    host_ptr: *mut c_void,
    size: usize,
    _agents: *mut hsa_agent_t,
    num_agent: c_int,
    agent_ptr: *mut *mut c_void,
) -> hsa_status_t {
    call(
        "hsa_amd_memory_lock",
        format!("bytes={size} agents={num_agent}"),
        |_| {
            if agent_ptr.is_null() {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: a valid out-pointer; host memory is its own device address here.
            unsafe { agent_ptr.write(host_ptr) };
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_memory_unlock(host_ptr: *mut c_void) -> hsa_status_t {
    call(
        "hsa_amd_memory_unlock",
        format!("ptr={:#x}", host_ptr as u64),
        |_| HSA_STATUS_SUCCESS,
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_signal_create(
    initial_value: hsa_signal_value_t,
    num_consumers: u32,
    _consumers: *const hsa_agent_t,
    signal: *mut hsa_signal_t,
) -> hsa_status_t {
    call(
        "hsa_signal_create",
        format!("initial={initial_value} consumers={num_consumers}"),
        |details| {
            if signal.is_null() {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let handle = state().new_signal(initial_value);
            if handle == 0 {
                return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
            }
            details.push_str(&format!(" signal={handle:#x}"));
            // SAFETY: a valid out-pointer per the API.
            unsafe { signal.write(hsa_signal_t { handle }) };
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub extern "C" fn hsa_signal_destroy(signal: hsa_signal_t) -> hsa_status_t {
    call(
        "hsa_signal_destroy",
        format!("signal={:#x}", signal.handle),
        |_| match state().drop_signal(signal.handle) {
            true => HSA_STATUS_SUCCESS,
            false => HSA_STATUS_ERROR_INVALID_SIGNAL,
        },
    )
}

#[no_mangle]
pub extern "C" fn hsa_signal_load_relaxed(signal: hsa_signal_t) -> hsa_signal_value_t {
    let value = poll_signal(signal.handle);
    record_plain(
        "hsa_signal_load_relaxed",
        format!("signal={:#x} value={value}", signal.handle),
    );
    value
}

#[no_mangle]
pub extern "C" fn hsa_signal_load_scacquire(signal: hsa_signal_t) -> hsa_signal_value_t {
    let value = poll_signal(signal.handle);
    record_plain(
        "hsa_signal_load_scacquire",
        format!("signal={:#x} value={value}", signal.handle),
    );
    value
}

/// A load or wait of `signal` by the backend: first what [`FAULT_ENV`] and [`QUEUE_ERROR_ENV`]
/// ask for (on the first poll of a running kernel's completion signal), then the poll.
fn poll_signal(signal: u64) -> i64 {
    report_fault_if_asked(signal);
    report_queue_error_if_asked(signal);
    state().advance(signal, true)
}

/// Calls the system event handler with the [`FAULT_ENV`] fault when `signal` is a running
/// kernel's completion signal polled for the first time since; the state lock is not held
/// during the call (the handler may call the runtime).
fn report_fault_if_asked(signal: u64) {
    let Some((handler, data, address)) = state().fault_to_report(signal) else {
        return;
    };
    let event = hsa_amd_event_t {
        event_type: HSA_AMD_GPU_MEMORY_FAULT_EVENT,
        memory_fault: hsa_amd_gpu_memory_fault_info_t {
            agent: hsa_agent_t { handle: GPU_AGENT },
            virtual_address: address,
            fault_reason_mask: HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT,
        },
    };
    let status = match handler {
        // SAFETY: the handler was registered for system events; the event lives for the call,
        // and `data` is the pointer it was registered with.
        Some(handler) => unsafe { handler(&event, data as *mut c_void) },
        None => HSA_STATUS_ERROR,
    };
    record(&format!(
        "fake runtime: memory fault event address={address:#x} -> {}",
        status_text(status)
    ));
}

/// Calls the error callback of the queue that started the kernel `signal` completes, with the
/// [`QUEUE_ERROR_ENV`] status, the first time it is polled; outside the state lock.
fn report_queue_error_if_asked(signal: u64) {
    let Some((callback, data, status, queue)) = state().queue_error_to_report(signal) else {
        return;
    };
    record(&format!(
        "fake runtime: queue error queue={queue:#x} status={} -> void",
        status_text(status)
    ));
    if let Some(callback) = callback {
        // SAFETY: the callback was given for this queue, whose descriptor is still alive (it
        // is destroyed only through `hsa_queue_destroy`); `data` is the pointer given with it.
        unsafe { callback(status, queue as *mut hsa_queue_t, data as *mut c_void) };
    }
}

/// A store: to a queue's doorbell, it processes the packet the value names.
fn store(function: &str, signal: hsa_signal_t, value: hsa_signal_value_t) {
    let mut state = state();
    let doorbell_of = state
        .queues
        .iter()
        .find(|(_, queue)| queue.doorbell == signal.handle)
        .map(|(&queue, _)| queue);
    let mut details = format!("signal={:#x} value={value}", signal.handle);
    if let Some(queue) = doorbell_of {
        details = format!("doorbell queue={queue:#x} {}", state.ring(queue, value));
    }
    state.set_value(signal.handle, value);
    drop(state);
    record_plain(function, details);
}

#[no_mangle]
pub extern "C" fn hsa_signal_store_relaxed(signal: hsa_signal_t, value: hsa_signal_value_t) {
    store("hsa_signal_store_relaxed", signal, value);
}

#[no_mangle]
pub extern "C" fn hsa_signal_store_screlease(signal: hsa_signal_t, value: hsa_signal_value_t) {
    store("hsa_signal_store_screlease", signal, value);
}

/// Whether `value` meets the wait's condition.
fn satisfied(condition: hsa_signal_condition_t, value: i64, compare: i64) -> bool {
    match condition {
        HSA_SIGNAL_CONDITION_EQ => value == compare,
        HSA_SIGNAL_CONDITION_NE => value != compare,
        HSA_SIGNAL_CONDITION_LT => value < compare,
        HSA_SIGNAL_CONDITION_GTE => value >= compare,
        // ROCr returns at once on a condition it does not know.
        _ => true,
    }
}

/// A timeout in system timestamp ticks as a duration.
fn ticks_to_duration(ticks: u64) -> Duration {
    let hz = setting_u64(TIMESTAMP_HZ_ENV, 1_000_000_000).max(1);
    let nanos = u128::from(ticks) * 1_000_000_000 / u128::from(hz);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// ROCr's wait for any of `conditions` (signal, condition, compare value) to hold, as the module
/// docs describe: the index of the one that held (`None` at the timeout), its value, and how
/// many times the wait slept. Each signal is polled once at the start, as a load would.
fn wait_any(
    conditions: &[(u64, hsa_signal_condition_t, i64)],
    timeout_ticks: u64,
    hint: hsa_wait_state_t,
) -> (Option<usize>, i64, u32) {
    let timeout = ticks_to_duration(timeout_ticks);
    let started = Instant::now();
    let mut values: Vec<i64> = conditions
        .iter()
        .map(|&(signal, _, _)| poll_signal(signal))
        .collect();
    let mut blocked = 0;
    loop {
        let held = conditions
            .iter()
            .zip(&values)
            .position(|(&(_, condition, compare), &value)| {
                value == i64::MIN || satisfied(condition, value, compare)
            });
        if let Some(index) = held {
            return (Some(index), values[index], blocked);
        }
        let elapsed = started.elapsed();
        if elapsed >= timeout {
            return (None, values.first().copied().unwrap_or(i64::MIN), blocked);
        }
        let left = timeout - elapsed;
        let sleep_ms = left.as_millis();
        if hint == HSA_WAIT_STATE_ACTIVE || elapsed < WAIT_SPIN || sleep_ms == 0 {
            std::hint::spin_loop();
        } else {
            let state = state();
            // A kernel that ends on its own wakes the wait, as its completion interrupt would.
            let sleep = conditions
                .iter()
                .filter_map(|&(signal, _, _)| state.ends_at(signal))
                .map(|end| end.saturating_duration_since(Instant::now()))
                .fold(
                    Duration::from_millis(u64::try_from(sleep_ms).unwrap_or(u64::MAX)),
                    Duration::min,
                );
            drop(
                WAKE.wait_timeout(state, sleep)
                    .unwrap_or_else(PoisonError::into_inner),
            );
            blocked += 1;
        }
        let mut state = state();
        values = conditions
            .iter()
            .map(|&(signal, _, _)| state.advance(signal, false))
            .collect();
    }
}

#[no_mangle]
pub extern "C" fn hsa_signal_wait_scacquire(
    signal: hsa_signal_t,
    condition: hsa_signal_condition_t,
    compare_value: hsa_signal_value_t,
    timeout_hint: u64,
    wait_state_hint: hsa_wait_state_t,
) -> hsa_signal_value_t {
    let (held, value, blocked) = wait_any(
        &[(signal.handle, condition, compare_value)],
        timeout_hint,
        wait_state_hint,
    );
    record_plain(
        "hsa_signal_wait_scacquire",
        format!(
            "signal={:#x} condition={condition} compare={compare_value} timeout={timeout_hint} \
             state={wait_state_hint} value={value} met={} blocked={blocked}",
            signal.handle,
            held.is_some()
        ),
    );
    value
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_signal_wait_any(
    signal_count: u32,
    signals: *mut hsa_signal_t,
    conds: *mut hsa_signal_condition_t,
    values: *mut hsa_signal_value_t,
    timeout_hint: u64,
    wait_hint: hsa_wait_state_t,
    satisfying_value: *mut hsa_signal_value_t,
) -> u32 {
    let conditions: Vec<(u64, hsa_signal_condition_t, i64)> = (0..signal_count as usize)
        .map(|at| {
            // SAFETY: `signal_count` entries in each array, per the API.
            unsafe {
                (
                    signals.add(at).read().handle,
                    conds.add(at).read(),
                    values.add(at).read(),
                )
            }
        })
        .collect();
    let (held, value, blocked) = wait_any(&conditions, timeout_hint, wait_hint);
    if let (Some(_), false) = (held, satisfying_value.is_null()) {
        // SAFETY: a valid out-pointer per the API.
        unsafe { satisfying_value.write(value) };
    }
    let listed: Vec<String> = conditions
        .iter()
        .map(|(signal, condition, compare)| format!("{signal:#x}/{condition}/{compare}"))
        .collect();
    record_plain(
        "hsa_amd_signal_wait_any",
        format!(
            "signals={} timeout={timeout_hint} state={wait_hint} index={} value={value} met={} \
             blocked={blocked}",
            listed.join(","),
            held.map_or_else(|| "none".to_owned(), |index| index.to_string()),
            held.is_some()
        ),
    );
    held.map_or(u32::MAX, |index| index as u32)
}

#[no_mangle]
pub unsafe extern "C" fn hsa_queue_create(
    agent: hsa_agent_t,
    size: u32,
    type_: hsa_queue_type32_t,
    callback: hsa_queue_callback_t,
    data: *mut c_void,
    private_segment_size: u32,
    group_segment_size: u32,
    queue: *mut *mut hsa_queue_t,
) -> hsa_status_t {
    call(
        "hsa_queue_create",
        format!(
            "agent={:#x} size={size} type={type_} private={private_segment_size:#x} \
             group={group_segment_size:#x}",
            agent.handle
        ),
        |details| {
            if agent.handle != GPU_AGENT {
                return HSA_STATUS_ERROR_INVALID_AGENT;
            }
            if queue.is_null() || !size.is_power_of_two() || size > QUEUE_MAX_SIZE {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let mut state = state();
            let Some(ring) = state.allocate(size as usize * 64, "queue-ring") else {
                return HSA_STATUS_ERROR_OUT_OF_RESOURCES;
            };
            for slot in 0..u64::from(size) {
                // SAFETY: the ring holds `size` 64-byte slots.
                unsafe { ((ring + slot * 64) as *mut u32).write(INVALID_HEADER) };
            }
            let doorbell = state.new_signal(0);
            let descriptor = Box::into_raw(Box::new(hsa_queue_t {
                type_,
                features: 1,
                base_address: ring as *mut c_void,
                doorbell_signal: hsa_signal_t { handle: doorbell },
                size,
                reserved1: 0,
                id: state.handle(),
            }));
            state.queues.insert(
                descriptor as u64,
                Queue {
                    ring,
                    size,
                    doorbell,
                    write_index: 0,
                    read_index: 0,
                    processed: 0,
                    in_flight: BTreeMap::new(),
                    callback: (callback, data as usize),
                    profiling: false,
                },
            );
            details.push_str(&format!(" queue={:#x}", descriptor as u64));
            // SAFETY: a valid out-pointer per the API.
            unsafe { queue.write(descriptor) };
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_queue_destroy(queue: *mut hsa_queue_t) -> hsa_status_t {
    call(
        "hsa_queue_destroy",
        format!("queue={:#x}", queue as u64),
        |_| {
            let mut state = state();
            let Some(removed) = state.queues.remove(&(queue as u64)) else {
                return HSA_STATUS_ERROR_INVALID_QUEUE;
            };
            state.release(removed.ring);
            state.drop_signal(removed.doorbell);
            state
                .dispatched
                .retain(|_, dispatch| dispatch.queue != queue as u64);
            // SAFETY: made by Box::into_raw in hsa_queue_create, removed from the table so freed
            // once.
            drop(unsafe { Box::from_raw(queue) });
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_amd_profiling_set_profiler_enabled(
    queue: *mut hsa_queue_t,
    enable: c_int,
) -> hsa_status_t {
    call(
        "hsa_amd_profiling_set_profiler_enabled",
        format!("queue={:#x} enable={enable}", queue as u64),
        |_| match state().queues.get_mut(&(queue as u64)) {
            Some(queue) => {
                queue.profiling = enable != 0;
                HSA_STATUS_SUCCESS
            }
            None => HSA_STATUS_ERROR_INVALID_QUEUE,
        },
    )
}

/// The timestamps the signal holds: a dispatch not yet completed has no end (0), one on a queue
/// without profiling neither, as ROCr answers (it does not check).
#[no_mangle]
pub unsafe extern "C" fn hsa_amd_profiling_get_dispatch_time(
    agent: hsa_agent_t,
    signal: hsa_signal_t,
    time: *mut hsa_amd_profiling_dispatch_time_t,
) -> hsa_status_t {
    call(
        "hsa_amd_profiling_get_dispatch_time",
        format!("agent={:#x} signal={:#x}", agent.handle, signal.handle),
        |details| {
            if agent.handle != GPU_AGENT {
                return HSA_STATUS_ERROR_INVALID_AGENT;
            }
            let Some(stored) = state().signals.get(&signal.handle).map(|s| s.dispatch_time) else {
                return HSA_STATUS_ERROR_INVALID_SIGNAL;
            };
            if time.is_null() {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            details.push_str(&format!(" start={} end={}", stored.start, stored.end));
            // SAFETY: a valid out-pointer per the API.
            unsafe { time.write(stored) };
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_queue_load_read_index_scacquire(queue: *const hsa_queue_t) -> u64 {
    let index = state()
        .queues
        .get(&(queue as u64))
        .map_or(u64::MAX, |queue| queue.read_index);
    record_plain(
        "hsa_queue_load_read_index_scacquire",
        format!("queue={:#x} index={index}", queue as u64),
    );
    index
}

#[no_mangle]
pub unsafe extern "C" fn hsa_queue_add_write_index_relaxed(
    queue: *const hsa_queue_t,
    value: u64,
) -> u64 {
    let old = match state().queues.get_mut(&(queue as u64)) {
        Some(queue) => {
            let old = queue.write_index;
            queue.write_index += value;
            old
        }
        None => u64::MAX,
    };
    record_plain(
        "hsa_queue_add_write_index_relaxed",
        format!("queue={:#x} add={value} index={old}", queue as u64),
    );
    old
}

#[no_mangle]
pub unsafe extern "C" fn hsa_code_object_reader_create_from_memory(
    code_object: *const c_void,
    size: usize,
    code_object_reader: *mut hsa_code_object_reader_t,
) -> hsa_status_t {
    call(
        "hsa_code_object_reader_create_from_memory",
        format!("bytes={size}"),
        |details| {
            if code_object.is_null() || code_object_reader.is_null() || size == 0 {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            // SAFETY: `size` readable bytes per the API.
            let bytes = unsafe { std::slice::from_raw_parts(code_object.cast::<u8>(), size) };
            let mut state = state();
            let handle = state.handle();
            state.readers.insert(handle, bytes.to_vec());
            details.push_str(&format!(" reader={handle:#x}"));
            // SAFETY: a valid out-pointer per the API.
            unsafe { code_object_reader.write(hsa_code_object_reader_t { handle }) };
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub extern "C" fn hsa_code_object_reader_destroy(
    code_object_reader: hsa_code_object_reader_t,
) -> hsa_status_t {
    call(
        "hsa_code_object_reader_destroy",
        format!("reader={:#x}", code_object_reader.handle),
        |_| match state().readers.remove(&code_object_reader.handle) {
            Some(_) => HSA_STATUS_SUCCESS,
            None => HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER,
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_create_alt(
    profile: hsa_profile_t,
    default_float_rounding_mode: hsa_default_float_rounding_mode_t,
    _options: *const c_char,
    executable: *mut hsa_executable_t,
) -> hsa_status_t {
    call(
        "hsa_executable_create_alt",
        format!("profile={profile} rounding={default_float_rounding_mode}"),
        |details| {
            if executable.is_null() {
                return HSA_STATUS_ERROR_INVALID_ARGUMENT;
            }
            let mut state = state();
            let handle = state.handle();
            state.executables.insert(handle, Executable::default());
            details.push_str(&format!(" executable={handle:#x}"));
            // SAFETY: a valid out-pointer per the API.
            unsafe { executable.write(hsa_executable_t { handle }) };
            HSA_STATUS_SUCCESS
        },
    )
}

/// The loaded image (its `PT_LOAD` segments copied at `base`) and its dynamic symbols.
fn load_code_object(
    state: &mut State,
    bytes: &[u8],
) -> Result<(u64, HashMap<String, Symbol>), hsa_status_t> {
    let file = object::File::parse(bytes).map_err(|_| HSA_STATUS_ERROR_INVALID_CODE_OBJECT)?;
    let end = file
        .segments()
        .map(|segment| segment.address() + segment.size())
        .max()
        .ok_or(HSA_STATUS_ERROR_INVALID_CODE_OBJECT)?;
    let len = usize::try_from(end).map_err(|_| HSA_STATUS_ERROR_INVALID_CODE_OBJECT)?;
    let base = state
        .allocate(len, "executable")
        .ok_or(HSA_STATUS_ERROR_OUT_OF_RESOURCES)?;
    for segment in file.segments() {
        let data = segment
            .data()
            .map_err(|_| HSA_STATUS_ERROR_INVALID_CODE_OBJECT)?;
        // SAFETY: the segment lies inside the block (sized to the highest segment end).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                (base + segment.address()) as *mut u8,
                data.len().min(segment.size() as usize),
            )
        };
    }
    let symbols = file
        .dynamic_symbols()
        .filter(|symbol| symbol.is_definition())
        .filter_map(|symbol| {
            let name = symbol.name().ok()?.to_owned();
            Some((
                name.clone(),
                Symbol {
                    address: base + symbol.address(),
                    size: symbol.size(),
                    kernel: name.ends_with(".kd"),
                },
            ))
        })
        .collect();
    Ok((base, symbols))
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_load_agent_code_object(
    executable: hsa_executable_t,
    agent: hsa_agent_t,
    code_object_reader: hsa_code_object_reader_t,
    _options: *const c_char,
    _loaded_code_object: *mut hsa_loaded_code_object_t,
) -> hsa_status_t {
    call(
        "hsa_executable_load_agent_code_object",
        format!(
            "executable={:#x} agent={:#x} reader={:#x}",
            executable.handle, agent.handle, code_object_reader.handle
        ),
        |details| {
            if agent.handle != GPU_AGENT {
                return HSA_STATUS_ERROR_INVALID_AGENT;
            }
            let mut state = state();
            let Some(bytes) = state.readers.get(&code_object_reader.handle).cloned() else {
                return HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER;
            };
            match state.executables.get(&executable.handle) {
                None => return HSA_STATUS_ERROR_INVALID_EXECUTABLE,
                Some(loaded) if loaded.frozen => return HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
                Some(loaded) if loaded.base.is_some() => return HSA_STATUS_ERROR,
                Some(_) => {}
            }
            let (base, symbols) = match load_code_object(&mut state, &bytes) {
                Ok(loaded) => loaded,
                Err(status) => return status,
            };
            details.push_str(&format!(" symbols={}", symbols.len()));
            if let Some(loaded) = state.executables.get_mut(&executable.handle) {
                loaded.base = Some(base);
                loaded.symbols = symbols;
            }
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_freeze(
    executable: hsa_executable_t,
    _options: *const c_char,
) -> hsa_status_t {
    call(
        "hsa_executable_freeze",
        format!("executable={:#x}", executable.handle),
        |_| match state().executables.get_mut(&executable.handle) {
            Some(loaded) if loaded.frozen => HSA_STATUS_ERROR_FROZEN_EXECUTABLE,
            Some(loaded) => {
                loaded.frozen = true;
                HSA_STATUS_SUCCESS
            }
            None => HSA_STATUS_ERROR_INVALID_EXECUTABLE,
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_validate(
    executable: hsa_executable_t,
    result: *mut u32,
) -> hsa_status_t {
    call(
        "hsa_executable_validate",
        format!("executable={:#x}", executable.handle),
        |_| {
            if !state().executables.contains_key(&executable.handle) {
                return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            }
            // SAFETY: a valid out-pointer per the API (u32 at worst unaligned-safe write).
            unsafe { put(result.cast(), 0u32) }
        },
    )
}

#[no_mangle]
pub extern "C" fn hsa_executable_destroy(executable: hsa_executable_t) -> hsa_status_t {
    call(
        "hsa_executable_destroy",
        format!("executable={:#x}", executable.handle),
        |_| {
            let mut state = state();
            let Some(removed) = state.executables.remove(&executable.handle) else {
                return HSA_STATUS_ERROR_INVALID_EXECUTABLE;
            };
            if let Some(base) = removed.base {
                state.release(base);
            }
            state
                .symbols
                .retain(|_, (owner, _)| *owner != executable.handle);
            HSA_STATUS_SUCCESS
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_get_symbol_by_name(
    executable: hsa_executable_t,
    symbol_name: *const c_char,
    _agent: *const hsa_agent_t,
    symbol: *mut hsa_executable_symbol_t,
) -> hsa_status_t {
    let name = if symbol_name.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated name per the API.
        unsafe { CStr::from_ptr(symbol_name) }
            .to_string_lossy()
            .into_owned()
    };
    call(
        "hsa_executable_get_symbol_by_name",
        format!("executable={:#x} name={name}", executable.handle),
        |_| {
            let mut state = state();
            let found = state
                .executables
                .get(&executable.handle)
                .map(|loaded| loaded.symbols.contains_key(&name));
            match found {
                None => HSA_STATUS_ERROR_INVALID_EXECUTABLE,
                Some(false) => HSA_STATUS_ERROR_INVALID_SYMBOL_NAME,
                Some(true) if symbol.is_null() => HSA_STATUS_ERROR_INVALID_ARGUMENT,
                Some(true) => {
                    let handle = state.handle();
                    state
                        .symbols
                        .insert(handle, (executable.handle, name.clone()));
                    // SAFETY: a valid out-pointer per the API.
                    unsafe { symbol.write(hsa_executable_symbol_t { handle }) };
                    HSA_STATUS_SUCCESS
                }
            }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn hsa_executable_symbol_get_info(
    executable_symbol: hsa_executable_symbol_t,
    attribute: hsa_executable_symbol_info_t,
    value: *mut c_void,
) -> hsa_status_t {
    let state = state();
    let found = state
        .symbols
        .get(&executable_symbol.handle)
        .and_then(|(executable, name)| {
            let symbol = state.executables.get(executable)?.symbols.get(name)?;
            Some((name.clone(), symbol))
        });
    let details = format!(
        "symbol={} attribute={attribute}",
        found.as_ref().map_or("?", |(name, _)| name.as_str())
    );
    let status = call("hsa_executable_symbol_get_info", details, |_| {
        let Some((_, symbol)) = found else {
            return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
        };
        let descriptor_u32 = |at: usize| -> u32 {
            // SAFETY: a kernel symbol is its 64-byte descriptor inside the loaded block.
            unsafe { ((symbol.address as usize + at) as *const u32).read_unaligned() }
        };
        // SAFETY: each attribute's documented type.
        unsafe {
            match (attribute, symbol.kernel) {
                (HSA_EXECUTABLE_SYMBOL_INFO_TYPE, true) => put(value, HSA_SYMBOL_KIND_KERNEL),
                (HSA_EXECUTABLE_SYMBOL_INFO_TYPE, false) => put(value, HSA_SYMBOL_KIND_VARIABLE),
                (HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_ADDRESS, false) => put(value, symbol.address),
                (HSA_EXECUTABLE_SYMBOL_INFO_VARIABLE_SIZE, false) => {
                    put(value, u32::try_from(symbol.size).unwrap_or(u32::MAX))
                }
                (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, true) => put(value, symbol.address),
                (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, true) => {
                    put(value, descriptor_u32(KD_KERNARG_SIZE))
                }
                (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT, true) => {
                    put(value, 16u32)
                }
                (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, true) => {
                    put(value, descriptor_u32(KD_GROUP_SEGMENT))
                }
                (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE, true) => {
                    put(value, descriptor_u32(KD_PRIVATE_SEGMENT))
                }
                (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK, true) => {
                    let properties = descriptor_u32(KD_CODE_PROPERTIES) as u16;
                    put(value, properties & USES_DYNAMIC_STACK != 0)
                }
                _ => HSA_STATUS_ERROR_INVALID_ARGUMENT,
            }
        }
    });
    drop(state);
    status
}

/// Never called: assigning each export to hsa-sys's table makes the compiler check that the
/// fake has exactly the C types the backend calls through, for every function it resolves.
#[allow(dead_code)]
fn signatures_match(lib: &mut HsaLib) {
    lib.hsa_init = hsa_init;
    lib.hsa_shut_down = hsa_shut_down;
    lib.hsa_status_string = hsa_status_string;
    lib.hsa_system_get_info = hsa_system_get_info;
    lib.hsa_iterate_agents = hsa_iterate_agents;
    lib.hsa_agent_get_info = hsa_agent_get_info;
    lib.hsa_agent_iterate_isas = hsa_agent_iterate_isas;
    lib.hsa_isa_get_info_alt = hsa_isa_get_info_alt;
    lib.hsa_signal_create = hsa_signal_create;
    lib.hsa_signal_destroy = hsa_signal_destroy;
    lib.hsa_signal_load_relaxed = hsa_signal_load_relaxed;
    lib.hsa_signal_load_scacquire = hsa_signal_load_scacquire;
    lib.hsa_signal_store_relaxed = hsa_signal_store_relaxed;
    lib.hsa_signal_store_screlease = hsa_signal_store_screlease;
    lib.hsa_signal_wait_scacquire = hsa_signal_wait_scacquire;
    lib.hsa_amd_signal_wait_any = hsa_amd_signal_wait_any;
    lib.hsa_queue_create = hsa_queue_create;
    lib.hsa_queue_destroy = hsa_queue_destroy;
    lib.hsa_queue_load_read_index_scacquire = hsa_queue_load_read_index_scacquire;
    lib.hsa_queue_add_write_index_relaxed = hsa_queue_add_write_index_relaxed;
    lib.hsa_code_object_reader_create_from_memory = hsa_code_object_reader_create_from_memory;
    lib.hsa_code_object_reader_destroy = hsa_code_object_reader_destroy;
    lib.hsa_executable_create_alt = hsa_executable_create_alt;
    lib.hsa_executable_load_agent_code_object = hsa_executable_load_agent_code_object;
    lib.hsa_executable_freeze = hsa_executable_freeze;
    lib.hsa_executable_validate = hsa_executable_validate;
    lib.hsa_executable_destroy = hsa_executable_destroy;
    lib.hsa_executable_get_symbol_by_name = hsa_executable_get_symbol_by_name;
    lib.hsa_executable_symbol_get_info = hsa_executable_symbol_get_info;
    lib.hsa_amd_agent_iterate_memory_pools = hsa_amd_agent_iterate_memory_pools;
    lib.hsa_amd_memory_pool_get_info = hsa_amd_memory_pool_get_info;
    lib.hsa_amd_memory_pool_allocate = hsa_amd_memory_pool_allocate;
    lib.hsa_amd_memory_pool_free = hsa_amd_memory_pool_free;
    lib.hsa_amd_agents_allow_access = hsa_amd_agents_allow_access;
    lib.hsa_amd_memory_async_copy = hsa_amd_memory_async_copy;
    lib.hsa_amd_memory_fill = hsa_amd_memory_fill;
    lib.hsa_amd_memory_lock = hsa_amd_memory_lock;
    lib.hsa_amd_memory_unlock = hsa_amd_memory_unlock;
    lib.hsa_amd_register_system_event_handler = hsa_amd_register_system_event_handler;
    lib.hsa_amd_profiling_set_profiler_enabled = hsa_amd_profiling_set_profiler_enabled;
    lib.hsa_amd_profiling_get_dispatch_time = hsa_amd_profiling_get_dispatch_time;
}
