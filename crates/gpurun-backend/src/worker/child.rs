//! The worker side: open the device, load the image, serve commands from stdin.

use super::protocol::{self, Command, Event, RunEnd};
use crate::server::{PanicReport, Sink};
use crate::{args, select, BackendKind, LaunchEnd, LaunchShape, LoadOptions, Module};
use gpurun_image::Image;
use std::io::{self, Write};
use std::path::Path;

/// Forwards device output and reports to the parent as they arrive.
struct PipeSink<W: Write> {
    out: W,
    /// The parent is gone; keep running the kernel to its end but stop writing.
    broken: bool,
}

impl<W: Write> PipeSink<W> {
    fn send(&mut self, event: &Event) {
        if !self.broken && protocol::write_event(&mut self.out, event).is_err() {
            self.broken = true;
        }
    }
}

impl<W: Write> Sink for PipeSink<W> {
    fn stdout(&mut self, bytes: &[u8]) {
        self.send(&Event::Stdout(bytes.to_vec()));
    }
    fn stderr(&mut self, bytes: &[u8]) {
        self.send(&Event::Stderr(bytes.to_vec()));
    }
    fn panic(&mut self, report: PanicReport) {
        self.send(&Event::Panic(report));
    }
}

/// Runs a worker until its parent closes stdin. Returns the process exit status.
pub fn serve(
    backend: BackendKind,
    ordinal: usize,
    image_path: &Path,
    options: &LoadOptions,
) -> i32 {
    let stdout = io::stdout();
    let mut sink = PipeSink {
        out: io::BufWriter::new(stdout.lock()),
        broken: false,
    };
    let image = match Image::read(image_path) {
        Ok(image) => image,
        Err(error) => {
            sink.send(&Event::StartFailed {
                error: format!("failed to load image `{}`: {error}", image_path.display()),
            });
            return 1;
        }
    };
    let backend_impl = select::backend(backend);
    let mut device = match backend_impl.open(ordinal) {
        Ok(device) => device,
        Err(error) => {
            sink.send(&Event::StartFailed {
                error: error.to_string(),
            });
            return 1;
        }
    };
    let device_name = device.info().name.clone();
    let mut module = match device.load(&image, options) {
        Ok(module) => module,
        Err(error) => {
            sink.send(&Event::StartFailed {
                error: format!("failed to load image `{}`: {error}", image_path.display()),
            });
            return 1;
        }
    };
    sink.send(&Event::Ready {
        device: device_name,
    });
    let stdin = io::stdin();
    let mut input = stdin.lock();
    loop {
        let command = match protocol::read_command(&mut input) {
            Ok(Some(command)) => command,
            Ok(None) => return 0,
            Err(error) => {
                eprintln!("gpurun worker: {error}");
                return 2;
            }
        };
        let end = match command {
            Command::RunTest {
                kernel,
                threads,
                blocks,
            } => run_test(
                module.as_mut(),
                &kernel,
                LaunchShape { threads, blocks },
                &mut sink,
            ),
            Command::RunMain {
                argv,
                envp,
                threads,
                blocks,
                kernels,
                print_resource_usage,
            } => run_main(
                module.as_mut(),
                &MainRun {
                    argv,
                    envp,
                    shape: LaunchShape { threads, blocks },
                    kernels,
                    print_resource_usage,
                },
                &mut sink,
            ),
        };
        // After these the module (or its threads) cannot be trusted: end the worker.
        let fatal = !matches!(end, RunEnd::Completed { .. });
        sink.send(&Event::Done(end));
        let _ = sink.out.flush();
        if fatal || sink.broken {
            // Threads of a host-emulated kernel may still be running: leave without unwinding
            // into them.
            std::process::exit(0);
        }
    }
}

fn from_launch(end: LaunchEnd, status: i32) -> RunEnd {
    match end {
        LaunchEnd::Completed => RunEnd::Completed { status },
        LaunchEnd::Exited(code) => RunEnd::Exited { code },
        LaunchEnd::Aborted => RunEnd::Aborted,
        LaunchEnd::Faulted(error) => RunEnd::Faulted { error },
        LaunchEnd::TimedOut(after) => RunEnd::TimedOut {
            millis: after.as_millis() as u64,
        },
    }
}

fn run_test(
    module: &mut dyn Module,
    kernel: &str,
    shape: LaunchShape,
    sink: &mut dyn Sink,
) -> RunEnd {
    match module.launch(kernel, shape, &[], None, sink) {
        Ok(end) => from_launch(end, 0),
        Err(error) => RunEnd::Failed {
            error: error.to_string(),
        },
    }
}

struct MainRun {
    argv: Vec<Vec<u8>>,
    envp: Vec<Vec<u8>>,
    shape: LaunchShape,
    kernels: Vec<String>,
    print_resource_usage: bool,
}

fn run_main(module: &mut dyn Module, run: &MainRun, sink: &mut dyn Sink) -> RunEnd {
    match try_run_main(module, run, sink) {
        Ok(end) => end,
        Err(error) => RunEnd::Failed {
            error: error.to_string(),
        },
    }
}

fn try_run_main(
    module: &mut dyn Module,
    run: &MainRun,
    sink: &mut dyn Sink,
) -> Result<RunEnd, crate::BackendError> {
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
                return Ok(from_launch(end, 0));
            }
        }
        return Ok(RunEnd::Completed { status: 0 });
    }
    let argv_size = args::pack_strings(&run.argv, 0).len();
    let envp_size = args::pack_strings(&run.envp, 0).len();
    let argv_mem = module.alloc_shared(argv_size)?;
    let envp_mem = module.alloc_shared(envp_size)?;
    let ret_mem = module.alloc_shared(8)?;
    let argv_block = args::pack_strings(&run.argv, argv_mem.device);
    let envp_block = args::pack_strings(&run.envp, envp_mem.device);
    // SAFETY: each allocation is at least as large as the block written into it and owned by
    // the module, which outlives this function.
    unsafe {
        std::ptr::copy_nonoverlapping(argv_block.as_ptr(), argv_mem.host, argv_block.len());
        std::ptr::copy_nonoverlapping(envp_block.as_ptr(), envp_mem.host, envp_block.len());
    }
    let argc = i32::try_from(run.argv.len()).unwrap_or(i32::MAX);
    let begin = args::begin_args(argc, argv_mem.device, envp_mem.device);
    let end = module.launch("_begin", LaunchShape::SINGLE, &begin, None, sink);
    match end {
        Ok(LaunchEnd::Completed) | Err(crate::BackendError::MissingSymbol { .. }) => {}
        Ok(other) => return Ok(from_launch(other, 0)),
        Err(error) => return Err(error),
    }
    report_usage(module, "_start", sink);
    let start = args::start_args(argc, argv_mem.device, envp_mem.device, ret_mem.device);
    let end = module.launch("_start", run.shape, &start, None, sink)?;
    if end != LaunchEnd::Completed {
        return Ok(from_launch(end, 0));
    }
    // SAFETY: `ret_mem` holds at least 4 bytes, written by the finished kernel.
    let status = unsafe { std::ptr::read_volatile(ret_mem.host as *const i32) };
    match module.launch("_end", LaunchShape::SINGLE, &[], None, sink) {
        Ok(LaunchEnd::Completed) | Err(crate::BackendError::MissingSymbol { .. }) => {}
        Ok(other) => return Ok(from_launch(other, status)),
        Err(error) => return Err(error),
    }
    Ok(RunEnd::Completed { status })
}

fn show(value: Option<u64>) -> String {
    value.map_or_else(|| "unknown".into(), |v| v.to_string())
}
