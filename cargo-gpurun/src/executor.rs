//! Runs tests in worker processes: the harness's [`Executor`] on top of
//! `gpurun_backend::worker`. Each worker loads the image once and runs one test at a time; with
//! `--test-threads N` up to N workers run side by side. A worker that faulted, aborted, exited,
//! crashed or timed out is dropped and the next test gets a fresh one.

use gpurun_backend::worker::{Command, Event, RunEnd, Worker, WorkerEnd, WorkerSpec};
use gpurun_harness::{Executor, PanicReport, TestCase, TestEnd, TestRun};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a worker may take to open the device and load the image.
const START_TIMEOUT: Duration = Duration::from_secs(120);

pub struct WorkerExecutor {
    spec: WorkerSpec,
    timeout: Option<Duration>,
    idle: Mutex<Vec<Worker>>,
}

impl WorkerExecutor {
    pub fn new(spec: WorkerSpec, timeout: Option<Duration>) -> WorkerExecutor {
        WorkerExecutor {
            spec,
            timeout,
            idle: Mutex::new(Vec::new()),
        }
    }

    fn take_worker(&self) -> Result<Worker, String> {
        if let Some(worker) = self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            return Ok(worker);
        }
        Worker::spawn(&self.spec, START_TIMEOUT).map_err(|error| error.to_string())
    }

    fn give_back(&self, worker: Worker) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(worker);
        }
    }
}

fn to_report(report: gpurun_backend::server::PanicReport) -> PanicReport {
    PanicReport {
        message: report.message,
        file: report.file,
        line: report.line,
        column: report.column,
        thread: report.thread,
        block: report.block,
    }
}

impl Executor for WorkerExecutor {
    fn run(&self, test: &TestCase) -> TestRun {
        let started = Instant::now();
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut worker = match self.take_worker() {
            Ok(worker) => worker,
            Err(error) => {
                return TestRun {
                    end: TestEnd::Infrastructure { error },
                    stdout,
                    stderr,
                    duration: started.elapsed(),
                }
            }
        };
        let mut first_panic = None;
        let mut panicked_threads = 0u64;
        let command = Command::RunTest {
            kernel: test.kernel.clone(),
            threads: test.threads,
            blocks: test.blocks,
        };
        let outcome = worker.run(&command, self.timeout, &mut |event| match event {
            Event::Stdout(bytes) => stdout.extend_from_slice(&bytes),
            Event::Stderr(bytes) => stderr.extend_from_slice(&bytes),
            Event::Panic(report) => {
                panicked_threads += 1;
                if first_panic.is_none() {
                    first_panic = Some(to_report(report));
                }
            }
            Event::Ready { .. } | Event::StartFailed { .. } | Event::Done(_) => {}
        });
        let end = match outcome {
            WorkerEnd::Done(RunEnd::Completed { .. }) => {
                self.give_back(worker);
                TestEnd::Completed {
                    first_panic,
                    panicked_threads,
                }
            }
            WorkerEnd::Done(RunEnd::Failed { error }) => {
                self.give_back(worker);
                TestEnd::Infrastructure { error }
            }
            WorkerEnd::Done(RunEnd::Exited { code }) => TestEnd::Exited { code },
            WorkerEnd::Done(RunEnd::Aborted) => TestEnd::Aborted,
            WorkerEnd::Done(RunEnd::Faulted { error }) => TestEnd::Faulted { error },
            WorkerEnd::Done(RunEnd::TimedOut { millis }) => TestEnd::TimedOut {
                after: Duration::from_millis(millis),
            },
            WorkerEnd::TimedOut(after) => TestEnd::TimedOut { after },
            WorkerEnd::Died(how) => TestEnd::Faulted {
                error: match first_panic {
                    Some(report) => format!("{how} (after a panic: {})", report.message),
                    None => how,
                },
            },
        };
        TestRun {
            end,
            stdout,
            stderr,
            duration: started.elapsed(),
        }
    }
}
