//! A scripted [`Executor`] for tests of the harness and of its callers: each test name maps to
//! a fixed [`TestRun`]; unknown names pass. Records what ran and how many ran at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::bench::{BenchLaunches, LaunchFailed};
use crate::outcome::{Executor, LaunchEnd, PanicReport, TestDesc, TestEnd, TestRun};
use gpurun_abi::LaunchShape;

/// One scripted result, plus how long the mock pretends the test takes.
#[derive(Debug, Clone)]
pub struct Scripted {
    /// What the executor reports.
    pub run: TestRun,
    /// Sleep this long before reporting (to exercise concurrency and ordering).
    pub delay: Duration,
}

/// An [`Executor`] that returns scripted results keyed by test name.
#[derive(Debug, Default)]
pub struct MockExecutor {
    script: HashMap<String, Scripted>,
    ran: Mutex<Vec<String>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
    /// Plays the host emulation: no test runs on a GPU.
    emulated: bool,
    /// Benchmarks' time per iteration (see [`MockExecutor::with_bench`]).
    benches: HashMap<String, Duration>,
}

/// A benchmark named `name` (no throughput).
pub fn bench(name: &str) -> TestDesc {
    TestDesc {
        bench: Some(gpurun_abi::Bench::default()),
        ..TestDesc::new(name)
    }
}

/// A test launched as `blocks` blocks of `threads` threads, with no attributes.
pub fn launched(name: &str, threads: [u32; 3], blocks: [u32; 3]) -> TestDesc {
    TestDesc {
        shape: LaunchShape::grid(blocks, threads),
        ..TestDesc::new(name)
    }
}

/// A launch that completed without a panic.
pub const CLEAN: TestEnd = TestEnd::Ran {
    end: LaunchEnd::Completed,
    first_panic: None,
    panicked_threads: 0,
    sanitizer: None,
};

/// A clean completion with the given output.
pub fn passed(stdout: &str) -> TestRun {
    TestRun {
        end: CLEAN,
        stdout: stdout.as_bytes().to_vec(),
        stderr: Vec::new(),
        duration: Duration::from_millis(1),
        device_time: None,
    }
}

/// A panic with `message` at `src/lib.rs:line:5`, reported by `thread` of `block`.
pub fn panic_report(message: &str, line: u32, thread: [u32; 3], block: [u32; 3]) -> PanicReport {
    PanicReport {
        message: message.to_owned(),
        file: "src/lib.rs".to_owned(),
        line,
        column: 5,
        thread,
        block,
    }
}

/// A completion in which `panicked_threads` threads panicked, the first as `report` says.
pub fn panicked_end(report: PanicReport, panicked_threads: u64) -> TestEnd {
    TestEnd::completed(Some(report), panicked_threads)
}

/// A completion in which `panicked_threads` threads panicked, the first with `message` at
/// `src/lib.rs:line:5` in block (0,0,0) thread (0,0,0).
pub fn panicked(message: &str, line: u32, panicked_threads: u64) -> TestRun {
    TestRun {
        end: panicked_end(
            panic_report(message, line, [0, 0, 0], [0, 0, 0]),
            panicked_threads,
        ),
        ..passed("")
    }
}

/// A run that ended with `end` and no output.
pub fn ended(end: TestEnd) -> TestRun {
    TestRun { end, ..passed("") }
}

impl MockExecutor {
    /// An executor under which every test passes silently.
    pub fn new() -> Self {
        Self::default()
    }

    /// Plays the host emulation (see [`Executor::runs_on_gpu`]).
    pub fn emulating(mut self) -> Self {
        self.emulated = true;
        self
    }

    /// Scripts `name` to report `run`.
    pub fn with(mut self, name: &str, run: TestRun) -> Self {
        self.script.insert(
            name.to_owned(),
            Scripted {
                run,
                delay: Duration::ZERO,
            },
        );
        self
    }

    /// Scripts `name` to report `run` after sleeping `delay`.
    pub fn with_delay(mut self, name: &str, run: TestRun, delay: Duration) -> Self {
        self.script.insert(name.to_owned(), Scripted { run, delay });
        self
    }

    /// Scripts benchmark `name` to take `per_iteration` per iteration, on top of 10 µs per
    /// launch, exactly: its measurement is that line's slope. A benchmark scripted with
    /// [`MockExecutor::with`] to end otherwise than cleanly fails its first launch with that
    /// run instead; any other takes 1 µs per iteration.
    pub fn with_bench(mut self, name: &str, per_iteration: Duration) -> Self {
        self.benches.insert(name.to_owned(), per_iteration);
        self
    }

    /// Names of the tests run so far, in the order they started.
    pub fn ran(&self) -> Vec<String> {
        self.ran.lock().map(|ran| ran.clone()).unwrap_or_default()
    }

    /// The most tests that were running at the same time.
    pub fn max_concurrency(&self) -> usize {
        self.max_running.load(Ordering::SeqCst)
    }
}

impl Executor for MockExecutor {
    fn runs_on_gpu(&self, _test: &TestDesc) -> bool {
        !self.emulated
    }

    fn run(&self, test: &TestDesc) -> TestRun {
        if let Ok(mut ran) = self.ran.lock() {
            ran.push(test.name.clone());
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        let scripted = self.script.get(&test.name).cloned().unwrap_or(Scripted {
            run: passed(""),
            delay: Duration::ZERO,
        });
        if !scripted.delay.is_zero() {
            std::thread::sleep(scripted.delay);
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        scripted.run
    }

    fn bench(&self, test: &TestDesc, measure: &mut dyn FnMut(&mut dyn BenchLaunches)) -> TestRun {
        if let Ok(mut ran) = self.ran.lock() {
            ran.push(test.name.clone());
        }
        let failing = self
            .script
            .get(&test.name)
            .filter(|scripted| scripted.run.end != CLEAN)
            .map(|scripted| scripted.run.clone());
        let mut launches = Line {
            per_iteration: self
                .benches
                .get(&test.name)
                .copied()
                .unwrap_or(Duration::from_micros(1)),
            fails: failing.is_some(),
        };
        measure(&mut launches);
        failing.unwrap_or_else(|| passed(""))
    }
}

/// A mock benchmark's launches: 10 µs plus `per_iteration` times the count, or a failure.
struct Line {
    per_iteration: Duration,
    fails: bool,
}

impl BenchLaunches for Line {
    fn launch(&mut self, iterations: u64) -> Result<Option<Duration>, LaunchFailed> {
        if self.fails {
            return Err(LaunchFailed);
        }
        let per_iteration = self.per_iteration.as_nanos() as u64;
        Ok(Some(Duration::from_nanos(
            10_000 + per_iteration.saturating_mul(iterations),
        )))
    }

    fn timer(&self) -> String {
        "mock clock".to_owned()
    }
}
