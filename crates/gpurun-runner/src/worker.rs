//! The worker side: open the device, load the image once per slot, serve commands from stdin.
//!
//! Each slot is a thread with its own opened device and its own copy of the module: on CUDA its
//! own stream and RPC buffer in the shared primary context, on HSA its own queue, on the host
//! its own `dlopen`ed copy of the library (see the host backend). Tests in different slots run at the same time and
//! their output never mixes, because every frame names its slot.

use crate::protocol::{self, Command, Event, FrameBuffer, Slot, MAX_SLOTS};
use gpurun_hal::handlers::{PanicReport, Sink};
use gpurun_hal::{
    kernel_args, select, BackendError, BackendKind, LaunchEnd, LaunchShape, LoadOptions, Module,
};
use gpurun_image::Image;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Buffered output is written once it is this large...
const FLUSH_BYTES: usize = 64 << 10;
/// ...or this old, even while the device keeps printing.
const FLUSH_AFTER: Duration = Duration::from_millis(10);

/// The worker's stdout, shared by the slots. Device output is buffered and written in batches:
/// when a launch ends, before any report (a panic, a run's end), when the buffer is full or
/// old, and when the device goes quiet ([`Sink::idle`]). A crash of the process (a fault in
/// host-emulated device code, an abort) writes what is buffered from the signal handler
/// ([`crash_flush`]), so output the device printed before it crashed still reaches the parent.
struct Pipe {
    /// The writer; held for the whole write of a batch so batches never interleave.
    out: Mutex<Writer>,
    pending: Mutex<Pending>,
    /// The parent is gone; keep running the kernel to its end but stop writing.
    broken: AtomicBool,
}

struct Writer {
    stdout: io::Stdout,
    /// The other buffer: filled while this one is written.
    spare: FrameBuffer,
}

#[derive(Default)]
struct Pending {
    frames: FrameBuffer,
    /// When the oldest buffered output arrived.
    since: Option<Instant>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pipe {
    fn new() -> Pipe {
        Pipe {
            out: Mutex::new(Writer {
                stdout: io::stdout(),
                spare: FrameBuffer::default(),
            }),
            pending: Mutex::new(Pending::default()),
            broken: AtomicBool::new(false),
        }
    }

    /// Buffers device output; writes the batch when it is full or old.
    fn output(&self, slot: Slot, stderr: bool, bytes: &[u8]) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        let due = {
            let mut pending = lock(&self.pending);
            pending.frames.push_output(slot, stderr, bytes);
            let since = *pending.since.get_or_insert_with(Instant::now);
            pending.frames.len() >= FLUSH_BYTES || since.elapsed() >= FLUSH_AFTER
        };
        if due {
            self.flush();
        }
    }

    /// Sends a report or a run's end after the output before it, and writes the batch now.
    fn send(&self, slot: Slot, event: &Event) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        if lock(&self.pending).frames.push(slot, event).is_err() {
            self.broken.store(true, Ordering::Relaxed);
            return;
        }
        self.flush();
    }

    /// Writes whatever is buffered.
    fn flush(&self) {
        let mut out = lock(&self.out);
        let writer = &mut *out;
        {
            let mut pending = lock(&self.pending);
            if pending.frames.is_empty() {
                return;
            }
            pending.since = None;
            std::mem::swap(&mut pending.frames, &mut writer.spare);
        }
        let written = writer
            .stdout
            .write_all(writer.spare.as_bytes())
            .and_then(|()| writer.stdout.flush());
        writer.spare.clear();
        if written.is_err() {
            self.broken.store(true, Ordering::Relaxed);
        }
    }

    /// Reports a run after which this process cannot go on (a fault, an exit, an abort, a
    /// timeout), then ends the process while still holding the pipe, so no other slot can start
    /// a frame it would not finish.
    fn send_last(&self, slot: Slot, event: &Event) -> ! {
        // Under compute-sanitizer (still there), with this the only launch and none still
        // running on the device, the process ends as a program does, so the sanitizer's
        // exit-time work runs.
        let settled = !matches!(event, Event::Ended(LaunchEnd::TimedOut(_)));
        let clean = settled && owes_exit_time_work() && LAUNCHES.load(Ordering::SeqCst) <= 1;
        // The files the device opened are C streams: flushed first, because the parent may
        // answer the report by killing this process.
        // SAFETY: `fflush(NULL)` flushes every open C output stream, taking each one's lock as
        // any `fflush` does.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        let _ = lock(&self.pending).frames.push(slot, event);
        self.flush();
        let _out = lock(&self.out);
        if clean {
            std::process::exit(0);
        }
        // Other slots may be inside the driver and a timed-out kernel may still run: `exit`
        // would run the driver's exit-time teardown (libcuda registers one) under them, and
        // could hang or crash after the report. Everything owed is flushed above.
        // SAFETY: `_exit` ends the process at once; nothing after it runs.
        unsafe { libc::_exit(0) }
    }

    /// Writes what is buffered from a signal handler: only try-locks (bounded waits for the
    /// slot thread that holds a lock to let go), `write(2)` and `nanosleep(2)`, no allocation.
    fn flush_from_signal_handler(&self) {
        let Some(_out) = try_lock_briefly(&self.out) else {
            return;
        };
        let Some(mut pending) = try_lock_briefly(&self.pending) else {
            return;
        };
        let mut bytes = pending.frames.as_bytes();
        while !bytes.is_empty() {
            // SAFETY: writes from a live slice to the process's stdout descriptor.
            let written = unsafe { libc::write(1, bytes.as_ptr().cast(), bytes.len()) };
            if written <= 0 {
                break;
            }
            bytes = &bytes[written as usize..];
        }
        pending.frames.clear();
    }
}

/// Tries to take `mutex` for up to about [`CRASH_LOCK_WAIT`]: from a signal handler, where
/// blocking on a lock the interrupted thread holds would never end.
fn try_lock_briefly<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..CRASH_LOCK_WAIT.as_millis() {
        match mutex.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                // SAFETY: a valid timespec; the remainder is not wanted.
                unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
            }
        }
    }
    None
}

/// How long the crash handler waits for a lock: a slot thread holds one only to append output
/// or to write a batch.
const CRASH_LOCK_WAIT: Duration = Duration::from_millis(200);

/// The worker's pipe, for the crash handler.
static PIPE: OnceLock<&'static Pipe> = OnceLock::new();

/// Signals that end the worker with device output possibly still buffered: faults in
/// host-emulated device code and aborts.
const CRASH_SIGNALS: [libc::c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

/// The handlers that were installed before ours, restored before the signal takes its course.
static PREVIOUS_HANDLERS: OnceLock<[libc::sigaction; CRASH_SIGNALS.len()]> = OnceLock::new();

/// Installs [`crash_flush`] for every crash signal, once per process.
fn install_crash_flush() {
    PREVIOUS_HANDLERS.get_or_init(|| {
        CRASH_SIGNALS.map(|signal| {
            // SAFETY: zeroed `sigaction` is a valid "no handler" value; `sigaction` fills
            // `previous` and installs ours, a `SA_SIGINFO` handler with the matching signature,
            // on the alternate stack that Rust threads have (for stack overflows).
            unsafe {
                let mut previous: libc::sigaction = std::mem::zeroed();
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = crash_flush as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, &mut previous);
                previous
            }
        })
    });
}

/// Writes the buffered output, puts the previous handler back and lets the signal take its
/// course: a fault re-executes the faulting instruction and meets the previous handler (the
/// default: the process dies of the same signal, which the parent reports); a sent signal is
/// raised again.
extern "C" fn crash_flush(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if let Some(pipe) = PIPE.get() {
        pipe.flush_from_signal_handler();
    }
    let index = CRASH_SIGNALS.iter().position(|&s| s == signal);
    // SAFETY: `info` is the kernel's record for this signal; the previous action is a valid
    // `sigaction` returned by the kernel; `raise` is async-signal-safe.
    unsafe {
        match (PREVIOUS_HANDLERS.get(), index) {
            (Some(previous), Some(index)) => {
                libc::sigaction(signal, &previous[index], std::ptr::null_mut());
            }
            _ => {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        // `si_code` <= 0: sent by a process (kill, raise, abort), not by a fault.
        if info.is_null() || (*info).si_code <= 0 {
            libc::raise(signal);
        }
    }
}

/// Forwards one slot's device output and reports to the parent.
struct SlotSink<'p> {
    pipe: &'p Pipe,
    slot: Slot,
}

impl Sink for SlotSink<'_> {
    fn stdout(&mut self, bytes: &[u8]) {
        self.pipe.output(self.slot, false, bytes);
    }
    fn stderr(&mut self, bytes: &[u8]) {
        self.pipe.output(self.slot, true, bytes);
    }
    fn panic(&mut self, report: PanicReport) {
        self.pipe.send(self.slot, &Event::Panic(report));
    }
    fn idle(&mut self) {
        self.pipe.flush();
    }
}

/// Environment variable through which the parent tells a worker how many slots to open.
pub const SLOTS_ENV: &str = "GPURUN_WORKER_SLOTS";

/// Set (to `1`) by the parent when compute-sanitizer runs the worker: the worker then ends as
/// a program does (`exit`, which runs the sanitizer's exit-time work) whenever no launch is
/// running and the sanitizer is still there, instead of `_exit`.
pub const SANITIZED_ENV: &str = "GPURUN_WORKER_SANITIZED";

/// LLVM's variable naming where an instrumented library writes its coverage profile; set for
/// workers of a coverage run (`cargo gpurun test --coverage`), or inherited from a test process
/// that `cargo llvm-cov` runs. The profile is written by the
/// library's exit-time handler, so such a worker, too, ends as a program does whenever no launch
/// is running.
pub const PROFILE_FILE_ENV: &str = "LLVM_PROFILE_FILE";

/// Commands the slots are running (or about to run).
static LAUNCHES: AtomicUsize = AtomicUsize::new(0);
/// Set once the command pipe has closed: no slot starts another command.
static CLOSING: AtomicBool = AtomicBool::new(false);
/// The process that started the worker (compute-sanitizer, when it runs the worker).
static PARENT: OnceLock<u32> = OnceLock::new();

fn under_sanitizer() -> bool {
    std::env::var_os(SANITIZED_ENV).is_some_and(|value| value == "1")
}

/// Whether the worker should end through `exit` when no launch runs, for exit-time work it owes
/// someone: compute-sanitizer's report (while the sanitizer is there) or a coverage profile.
fn owes_exit_time_work() -> bool {
    (under_sanitizer() && parent_alive()) || std::env::var_os(PROFILE_FILE_ENV).is_some()
}

/// Whether the process that started the worker still runs (it has not been re-parented).
fn parent_alive() -> bool {
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() } as u32;
    PARENT.get() == Some(&parent)
}

/// The worker's entry point: `args` are what [`crate::WorkerOptions::spec`] put after the
/// prefix. Returns the process exit status.
pub fn main(args: &[std::ffi::OsString]) -> i32 {
    let (options, image) = match crate::WorkerOptions::parse(args) {
        Ok(parsed) => parsed,
        Err(error) => {
            eprintln!("gpurun worker: {error}");
            return 2;
        }
    };
    // SAFETY: getppid has no preconditions.
    let _ = PARENT.set(unsafe { libc::getppid() } as u32);
    let slots = std::env::var(SLOTS_ENV)
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(1);
    run(
        options.backend,
        options.device,
        &image,
        &options.load_options(),
        slots,
    )
}

/// Runs a worker with `slots` concurrent slots until its parent closes stdin, then ends the
/// process at once, with slots still running or not. Returns the process exit status if it
/// could not start.
pub fn run(
    backend: BackendKind,
    ordinal: usize,
    image_path: &Path,
    options: &LoadOptions,
    slots: usize,
) -> i32 {
    // One pipe for the life of the process: the crash handler reaches it through `PIPE`.
    let pipe: &'static Pipe = PIPE.get_or_init(|| Box::leak(Box::new(Pipe::new())));
    install_crash_flush();
    // Parse the image once, up front, so a bad one is one clear failure, not one per slot,
    // and the slots do not parse it again.
    let image = match Image::read(image_path) {
        Ok(image) => Arc::new(image),
        Err(error) => {
            pipe.send(
                0,
                &Event::StartFailed {
                    error: format!("failed to load image `{}`: {error}", image_path.display()),
                },
            );
            return 1;
        }
    };
    let slots = slots.clamp(1, MAX_SLOTS);
    let mut commands = Vec::with_capacity(slots);
    let mut threads = Vec::with_capacity(slots);
    for slot in 0..slots {
        let (sender, receiver) = mpsc::channel();
        let image = Arc::clone(&image);
        let options = options.clone();
        let slot = slot as Slot;
        let spawned = std::thread::Builder::new()
            .name(format!("gpurun-slot-{slot}"))
            .spawn(move || {
                let opened = SlotSetup {
                    backend,
                    ordinal,
                    image,
                    options,
                    slot,
                };
                opened.serve(receiver, pipe);
            });
        match spawned {
            Ok(handle) => threads.push(handle),
            Err(error) => {
                pipe.send(
                    slot,
                    &Event::StartFailed {
                        error: format!("failed to start a worker thread: {error}"),
                    },
                );
                return 1;
            }
        }
        commands.push(sender);
    }
    let stdin = io::stdin();
    let mut input = stdin.lock();
    let status = loop {
        match protocol::read_command(&mut input) {
            Ok(Some((slot, command))) => {
                let delivered = commands
                    .get(slot as usize)
                    .is_some_and(|sender| sender.send(command).is_ok());
                if !delivered {
                    eprintln!("gpurun worker: command for slot {slot}, which is not running");
                    break 2;
                }
            }
            Ok(None) => break 0,
            Err(error) => {
                eprintln!("gpurun worker: {error}");
                break 2;
            }
        }
    };
    // No slot starts a command from here on; then, whether one is still running.
    CLOSING.store(true, Ordering::SeqCst);
    let idle = LAUNCHES.load(Ordering::SeqCst) == 0;
    drop(commands);
    if idle && owes_exit_time_work() {
        // Every slot leaves its loop now that its commands ended; with none in a launch that is
        // at once. Their modules are released (a coverage profile is written as its library
        // goes) before the driver's exit-time teardown runs.
        for thread in threads {
            let _ = thread.join();
        }
        std::process::exit(status);
    }
    drop(threads);
    end_without_waiting(status)
}

/// Ends the worker once its command pipe is closed: the parent is done with it or gone (killed,
/// crashed), so nobody reads what the slots would report, and a slot may be in a kernel that
/// never ends, so no slot is waited for. `_exit` skips the atexit handlers too, which a driver
/// may have registered to wait for its queues. The system releases the devices, their memory
/// and their running kernels with the process.
fn end_without_waiting(status: i32) -> ! {
    // SAFETY: `_exit` ends the process at once; nothing runs after it in this process.
    unsafe { libc::_exit(status) }
}

/// What one slot needs to open its device and load its copy of the module.
struct SlotSetup {
    backend: BackendKind,
    ordinal: usize,
    image: Arc<Image>,
    options: LoadOptions,
    slot: Slot,
}

impl SlotSetup {
    fn image_path(&self) -> &Path {
        self.image.path().unwrap_or(Path::new("image"))
    }

    fn serve(self, commands: Receiver<Command>, pipe: &Pipe) {
        let slot = self.slot;
        let fail = |error: String| pipe.send(slot, &Event::StartFailed { error });
        let backend_impl = select::backend(self.backend);
        let mut device = match backend_impl.open(self.ordinal) {
            Ok(device) => device,
            Err(error) => return fail(error.to_string()),
        };
        let device_name = device.info().name.clone();
        let loaded = device
            .load(&self.image, &self.options)
            .map_err(|error| error.to_string());
        let mut module = match loaded {
            Ok(module) => module,
            Err(error) => {
                return fail(format!(
                    "failed to load image `{}`: {error}",
                    self.image_path().display()
                ))
            }
        };
        pipe.send(
            slot,
            &Event::Ready {
                device: device_name,
            },
        );
        let mut sink = SlotSink { pipe, slot };
        let end_params = self.image.kernel("_end").and_then(|end| end.param_bytes());
        for command in commands {
            // Counted before the pipe's end is checked, which the main thread sets before it
            // counts: one of the two sees the other.
            LAUNCHES.fetch_add(1, Ordering::SeqCst);
            if CLOSING.load(Ordering::SeqCst) {
                LAUNCHES.fetch_sub(1, Ordering::SeqCst);
                break;
            }
            let event = match run_command(module.as_mut(), command, end_params, &mut sink) {
                Ok(end) => Event::Ended(end),
                Err(error) => Event::Refused { error },
            };
            if let (Event::Ended(_), Some(time)) = (&event, module.last_device_time()) {
                pipe.send(slot, &Event::DeviceTime(time));
            }
            // After any other end the module (or its threads, or the whole context) cannot be
            // trusted.
            let usable = match &event {
                Event::Ended(end) => end.leaves_module_usable(),
                _ => true,
            };
            if !usable || pipe.broken.load(Ordering::Relaxed) {
                pipe.send_last(slot, &event);
            }
            // Counted out before the parent hears of the end: the parent may close the pipe
            // as soon as it does, and the main thread must then find this slot idle, or a worker
            // that owes a coverage profile would end without writing it. The main thread joins
            // the slots before it exits, so this report still goes out.
            LAUNCHES.fetch_sub(1, Ordering::SeqCst);
            pipe.send(slot, &event);
        }
    }
}

/// Runs one command: how its launch ended, or why it could not run. `end_params`: the
/// parameter bytes of the image's `_end` (see [`kernel_args::end_args`]).
fn run_command(
    module: &mut dyn Module,
    command: Command,
    end_params: Option<u64>,
    sink: &mut dyn Sink,
) -> Result<LaunchEnd, String> {
    let outcome = match command {
        Command::RunTest {
            kernel,
            shape,
            bench: None,
        } => module.launch(&kernel, shape, &[], None, sink),
        Command::RunTest {
            kernel,
            shape,
            bench: Some(bench),
        } => {
            // A backend that cannot flush runs the launch as it is (the parent said so).
            let flushed = match bench.flush_l2 {
                true => module.flush_l2().map(drop),
                false => Ok(()),
            };
            let iterations = [kernel_args::KernelArg::U64(bench.iterations)];
            flushed.and_then(|()| module.launch(&kernel, shape, &iterations, None, sink))
        }
        Command::RunMain {
            argv,
            envp,
            shape,
            kernels,
            print_resource_usage,
        } => run_main(
            module,
            &MainRun {
                argv,
                envp,
                shape,
                kernels,
                print_resource_usage,
                end_params,
            },
            sink,
        ),
    };
    match outcome {
        // Another slot's kernel faulted and the driver refuses all work in the process since:
        // this run is that fault's casualty, as a launch started just before it would be, so
        // it ends as a fault (the parent re-runs it alone) rather than as a refusal (not run).
        Err(error @ BackendError::EarlierFault { .. }) => Ok(LaunchEnd::Faulted(error.to_string())),
        outcome => outcome.map_err(|error| error.to_string()),
    }
}

struct MainRun {
    argv: Vec<Vec<u8>>,
    envp: Vec<Vec<u8>>,
    shape: LaunchShape,
    kernels: Vec<String>,
    print_resource_usage: bool,
    end_params: Option<u64>,
}

/// Runs the image as a program (LLVM libc's `_begin`, `_start`, `_end`, or the `kernels`
/// given). A non-zero status from `main` ends it as [`LaunchEnd::Exited`], as returning from a
/// C `main` is calling `exit`.
fn run_main(
    module: &mut dyn Module,
    run: &MainRun,
    sink: &mut dyn Sink,
) -> Result<LaunchEnd, BackendError> {
    let report_usage = |module: &dyn Module, kernel: &str, sink: &mut dyn Sink| {
        if run.print_resource_usage {
            let text = match module.resource_usage(kernel) {
                Some(usage) => format!(
                    "Executing kernel {kernel}:\n{kernel} registers: {}\n{kernel} local memory: {}\n{kernel} shared memory: {}\n",
                    show(usage.registers.map(u64::from)),
                    show(usage.local_bytes),
                    show(usage.shared_bytes),
                ),
                None => format!("Executing kernel {kernel}:\n{kernel}: resource usage is not available on this backend\n"),
            };
            sink.stdout(text.as_bytes());
        }
    };
    if !run.kernels.is_empty() {
        for kernel in &run.kernels {
            report_usage(module, kernel, sink);
            let end = module.launch(kernel, run.shape, &[], None, sink)?;
            if end != LaunchEnd::Completed {
                return Ok(end);
            }
        }
        return Ok(LaunchEnd::Completed);
    }
    let argv_size = kernel_args::pack_strings(&run.argv, 0).len();
    let envp_size = kernel_args::pack_strings(&run.envp, 0).len();
    let argv_mem = module.alloc_shared(argv_size)?;
    let envp_mem = module.alloc_shared(envp_size)?;
    // The result word lives in device memory, as in LLVM's loaders: the threads' atomic ORs stay
    // on the device instead of crossing PCIe (which needs PCIe atomics).
    let ret_address = module.alloc_device(4)?;
    let argv_block = kernel_args::pack_strings(&run.argv, argv_mem.device);
    let envp_block = kernel_args::pack_strings(&run.envp, envp_mem.device);
    // SAFETY: each allocation is at least as large as the block written into it and owned by
    // the module, which outlives this function.
    unsafe {
        std::ptr::copy_nonoverlapping(argv_block.as_ptr(), argv_mem.host, argv_block.len());
        std::ptr::copy_nonoverlapping(envp_block.as_ptr(), envp_mem.host, envp_block.len());
    }
    let argc = i32::try_from(run.argv.len()).unwrap_or(i32::MAX);
    let begin = kernel_args::begin_args(argc, argv_mem.device, envp_mem.device);
    let end = module.launch("_begin", LaunchShape::SINGLE, &begin, None, sink);
    match end {
        Ok(LaunchEnd::Completed) | Err(BackendError::MissingSymbol { .. }) => {}
        Ok(other) => return Ok(other),
        Err(error) => return Err(error),
    }
    report_usage(module, "_start", sink);
    let start = kernel_args::start_args(argc, argv_mem.device, envp_mem.device, ret_address);
    let end = module.launch("_start", run.shape, &start, None, sink)?;
    if end != LaunchEnd::Completed {
        return Ok(end);
    }
    let word = module.read_device(ret_address, 4)?;
    let status = <[u8; 4]>::try_from(word.as_slice()).map_or(0, i32::from_le_bytes);
    let end_args = kernel_args::end_args(status, run.end_params);
    match module.launch("_end", LaunchShape::SINGLE, &end_args, None, sink) {
        Ok(LaunchEnd::Completed) | Err(BackendError::MissingSymbol { .. }) => {}
        Ok(other) => return Ok(other),
        Err(error) => return Err(error),
    }
    Ok(match status {
        0 => LaunchEnd::Completed,
        status => LaunchEnd::Exited(status),
    })
}

fn show(value: Option<u64>) -> String {
    value.map_or_else(|| "unknown".into(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpurun_hal::handlers::Collect;
    use gpurun_hal::{ResourceUsage, SharedAlloc};

    /// A module whose every launch and allocation fails with `error`.
    struct Refusing(fn() -> BackendError);

    impl Module for Refusing {
        fn launch(
            &mut self,
            _: &str,
            _: LaunchShape,
            _: &[kernel_args::KernelArg],
            _: Option<Duration>,
            _: &mut dyn Sink,
        ) -> Result<LaunchEnd, BackendError> {
            Err((self.0)())
        }
        fn last_device_time(&self) -> Option<Duration> {
            None
        }
        fn alloc_shared(&mut self, _: usize) -> Result<SharedAlloc, BackendError> {
            Err((self.0)())
        }
        fn alloc_device(&mut self, _: usize) -> Result<u64, BackendError> {
            Err((self.0)())
        }
        fn write_device(&mut self, _: u64, _: &[u8]) -> Result<(), BackendError> {
            Err((self.0)())
        }
        fn read_device_into(&mut self, _: u64, _: &mut [u8]) -> Result<(), BackendError> {
            Err((self.0)())
        }
        fn free_device(&mut self, _: u64) -> Result<(), BackendError> {
            Err((self.0)())
        }
        fn write_global(&mut self, _: &str, _: &[u8]) -> Result<(), BackendError> {
            Err((self.0)())
        }
        fn read_global(&mut self, _: &str, _: usize) -> Result<Vec<u8>, BackendError> {
            Err((self.0)())
        }
        fn resource_usage(&self, _: &str) -> Option<ResourceUsage> {
            None
        }
    }

    fn earlier_fault() -> BackendError {
        BackendError::EarlierFault {
            backend: BackendKind::Cuda,
            kernel: "other_slots_test".into(),
            fault: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
        }
    }

    fn missing() -> BackendError {
        BackendError::MissingSymbol {
            what: "kernel",
            name: "k".into(),
        }
    }

    /// A run refused because another slot's kernel faulted ends as a fault (the parent re-runs
    /// such a test alone), for a test and for a program; any other refusal stays a refusal.
    #[test]
    fn a_run_refused_after_another_slots_fault_is_a_fault() {
        let commands = || {
            [
                Command::RunTest {
                    kernel: "k".into(),
                    shape: LaunchShape::SINGLE,
                    bench: None,
                },
                Command::RunMain {
                    argv: Vec::new(),
                    envp: Vec::new(),
                    shape: LaunchShape::SINGLE,
                    kernels: Vec::new(),
                    print_resource_usage: false,
                },
            ]
        };
        for command in commands() {
            let mut sink = Collect::default();
            let end = run_command(&mut Refusing(earlier_fault), command, None, &mut sink);
            assert!(
                matches!(&end, Ok(LaunchEnd::Faulted(text))
                    if text.contains("kernel `other_slots_test` faulted earlier")),
                "{end:?}"
            );
        }
        for command in commands() {
            let mut sink = Collect::default();
            let end = run_command(&mut Refusing(missing), command, None, &mut sink);
            assert!(
                matches!(&end, Err(text) if text.contains("no kernel named `k`")),
                "{end:?}"
            );
        }
    }
}
