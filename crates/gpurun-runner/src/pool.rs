//! Runs tests in worker processes: the harness's [`Executor`] on top of [`crate::handle`].
//!
//! One worker per device in use (all visible devices unless `--device` names one), each with
//! enough slots that the harness's `--test-threads N` tests run at once: on a GPU every slot is
//! its own stream or queue with its own copy of the module, so concurrent tests share the device
//! but not their output. A worker that faulted, aborted, exited, crashed or timed out is
//! replaced by a fresh one for the next test. What happened to the tests that were running
//! beside it depends on whether one slot explains the end:
//!
//! - an exit, an abort or a timeout belongs to the test that did it; the others are re-run;
//! - a fault or a crash does not say which test caused it (every stream of a poisoned CUDA
//!   context reports it), so each test that was in flight runs again alone in a fresh worker,
//!   where it either passes or shows the fault as its own.
//!
//! Under compute-sanitizer (`--sanitize`) every test runs alone in a worker of its own, which
//! leaves once the test has ended: the sanitizer's report is complete when it exits, whether it
//! wrote each record as the launch ended or only then, and every record in it comes from that
//! one test's launch (see [`crate::sanitizer`]). Time limits are
//! [`TIME_LIMIT_FACTOR`](crate::sanitizer::TIME_LIMIT_FACTOR) times as long.

use crate::handle::{breakage_of, Breakage, RunError, WorkerEnd, WorkerHandle, WorkerSpec};
use crate::protocol::{BenchLaunch, Command, Event};
use crate::sanitizer::{self, Sanitizer, ERROR_EXIT_CODE, REPORT_WITHIN};
use crate::WorkerOptions;
use gpurun_abi::LaunchEnd;
use gpurun_hal::{select, BackendError, BackendKind};
use gpurun_harness::bench::{BenchLaunches, LaunchFailed};
use gpurun_harness::{Executor, PanicReport, TestDesc, TestEnd, TestRun};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The devices tests run on: `device` when given, else every device the backend sees; device
/// 0 when it sees none or has no driver (every test then fails with the reason, libtest-style,
/// in the worker). A setting that makes no sense (`GPURUN_HOST_DEVICES=0`) is an error.
pub fn test_devices(device: Option<usize>, kind: BackendKind) -> Result<Vec<usize>, BackendError> {
    Ok(match device {
        Some(ordinal) => vec![ordinal],
        None => match select::backend(kind).devices() {
            Ok(devices) if !devices.is_empty() => devices.iter().map(|d| d.ordinal).collect(),
            // A setting that makes no sense is the user's to fix before anything runs.
            Err(error @ BackendError::InvalidArgument(_)) => return Err(error),
            _ => vec![0],
        },
    })
}

/// The workers a suite's tests run in, as the [plan](crate::plan) makes them for every
/// front-end: started as `exe` with `prefix` before the worker's own arguments, on `device` or else every device the backend sees ([`test_devices`]),
/// each with `options` (its device set), `env` added and under `sanitizer`, if any.
#[derive(Clone, Debug)]
pub(crate) struct SuiteWorkers<'a> {
    pub exe: PathBuf,
    pub prefix: &'a [&'a str],
    pub options: WorkerOptions,
    pub device: Option<usize>,
    pub sanitizer: Option<Sanitizer>,
    pub env: Vec<(String, String)>,
}

impl SuiteWorkers<'_> {
    /// One worker spec per device the tests of `image` run on.
    pub fn specs(&self, image: &Path) -> Result<Vec<WorkerSpec>, BackendError> {
        Ok(test_devices(self.device, self.options.backend)?
            .into_iter()
            .map(|device| {
                let options = WorkerOptions {
                    device,
                    ..self.options.clone()
                };
                let mut spec = options.spec(self.exe.clone(), self.prefix, image);
                spec.sanitizer = self.sanitizer.clone();
                spec.env.extend(self.env.iter().cloned());
                spec
            })
            .collect())
    }

    /// The executor of `image`'s tests: [`SuiteWorkers::specs`] with `concurrency` slots in all
    /// and `time_limit` per test. On the host emulation a failure's output names the seed, so
    /// that the run can be repeated.
    pub fn executor(
        &self,
        image: &Path,
        concurrency: usize,
        time_limit: Duration,
    ) -> Result<WorkerExecutor, BackendError> {
        let executor = WorkerExecutor::new(self.specs(image)?, concurrency, Some(time_limit));
        Ok(match (self.options.backend, self.options.emulation_seed) {
            (BackendKind::Host, Some(seed)) => {
                executor.with_note(gpurun_hal::host::seed_note(seed))
            }
            _ => executor,
        })
    }
}

/// How long a worker may take to open the device and load the image (in every slot).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// How often a test is started again after workers died beside it for reasons of their own.
const MAX_ATTEMPTS: usize = 3;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A worker shared by the tests running in its slots.
struct Pooled {
    worker: WorkerHandle,
    state: Mutex<PooledState>,
}

struct PooledState {
    free_slots: Vec<usize>,
    in_flight: usize,
    /// Tests that were in flight when the worker was first seen to break; fixed from then on.
    suspects: Option<usize>,
}

impl Pooled {
    /// Records that the worker broke (once) and returns how many tests were running in it then.
    fn suspects(&self) -> usize {
        let mut state = lock(&self.state);
        let in_flight = state.in_flight;
        *state.suspects.get_or_insert(in_flight)
    }
}

/// One device: its worker spec and the worker currently serving it.
struct DeviceWorkers {
    spec: WorkerSpec,
    current: Mutex<Option<Arc<Pooled>>>,
    /// Tests assigned to this device right now, for spreading work across devices.
    assigned: AtomicUsize,
}

/// A slot held by one test; gives the slot back (or not, if the worker broke) when dropped.
struct Lease<'a> {
    workers: &'a DeviceWorkers,
    pooled: Arc<Pooled>,
    slot: usize,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.pooled.state);
        state.in_flight -= 1;
        if self.pooled.worker.breakage().is_none() {
            state.free_slots.push(self.slot);
        }
        drop(state);
        self.workers.assigned.fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct WorkerExecutor {
    devices: Vec<DeviceWorkers>,
    slots_per_worker: usize,
    timeout: Option<Duration>,
    /// A line every test that did not simply complete gets first on its stderr (the host
    /// emulation's seed, to replay it).
    note: Option<String>,
    /// Benchmarks' launches flush the device's L2 cache first (`--flush-l2`).
    flush_l2: bool,
}

/// How one attempt at a test ended, before it becomes the harness's [`TestEnd`].
enum Attempt {
    /// The result stands.
    Final(TestEnd),
    /// The worker died for a reason another test explains: start the test again.
    Again(String),
    /// The worker died and nothing says which test caused it: run this one again alone.
    Alone(String),
}

/// What one run of a test produced.
#[derive(Default)]
struct Collected {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    first_panic: Option<PanicReport>,
    panicked_threads: u64,
    device_time: Option<Duration>,
}

/// How long a worker that owes a coverage profile gets to write it when the run ends.
const PROFILE_WITHIN: Duration = Duration::from_secs(30);

impl Drop for WorkerExecutor {
    fn drop(&mut self) {
        // A worker of a coverage run writes its profile as it ends as a program does: it is
        // asked to leave, not killed (see `worker::PROFILE_FILE_ENV`). Any other is killed
        // when its handle drops: it owes nothing, and may be stuck in a kernel.
        for workers in &self.devices {
            if !workers.spec.writes_profile() {
                continue;
            }
            if let Some(pooled) = lock(&workers.current).take() {
                pooled.worker.close(PROFILE_WITHIN);
            }
        }
    }
}

impl WorkerExecutor {
    /// `specs`: one per device to use (their `slots` are set here); `concurrency`: how many
    /// tests the harness runs at once; `timeout`: each test's time limit (longer under a
    /// sanitizer, see [`Sanitizer::time_limit`]).
    pub fn new(
        specs: Vec<WorkerSpec>,
        concurrency: usize,
        timeout: Option<Duration>,
    ) -> WorkerExecutor {
        let timeout = match specs.first().and_then(|spec| spec.sanitizer.as_ref()) {
            Some(sanitizer) => timeout.map(|limit| sanitizer.time_limit(limit)),
            None => timeout,
        };
        let concurrency = concurrency.max(1);
        let devices: Vec<DeviceWorkers> = specs
            .into_iter()
            .take(concurrency)
            .map(|spec| DeviceWorkers {
                spec,
                current: Mutex::new(None),
                assigned: AtomicUsize::new(0),
            })
            .collect();
        let slots_per_worker = concurrency.div_ceil(devices.len().max(1));
        WorkerExecutor {
            devices,
            slots_per_worker,
            timeout,
            note: None,
            flush_l2: false,
        }
    }

    /// Puts `note` (a line) first on the stderr of every test whose launch did not complete
    /// without a panic: a failure's output then says how to run it again the same way.
    pub fn with_note(mut self, note: String) -> WorkerExecutor {
        self.note = Some(note);
        self
    }

    /// With `flush`, every launch of a benchmark first flushes the device's L2 cache where the
    /// backend can (a cold run, `--flush-l2`); elsewhere it has no effect.
    pub fn flush_l2(mut self, flush: bool) -> WorkerExecutor {
        self.flush_l2 = flush;
        self
    }

    /// Devices in use and tests each runs at once, for the "Running" line.
    pub fn shape(&self) -> (usize, usize) {
        (self.devices.len(), self.slots_per_worker)
    }

    /// Each test's time limit.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// The sanitizer every worker runs under, if any.
    fn sanitizer(&self) -> Option<&Sanitizer> {
        self.devices
            .first()
            .and_then(|device| device.spec.sanitizer.as_ref())
    }

    /// Runs `test` alone under `sanitizer` in a fresh worker on the least busy device, which
    /// leaves when the test has ended; then fails the test with the sanitizer's findings in
    /// its launch.
    fn run_sanitized(&self, test: &TestDesc, sanitizer: &Sanitizer) -> TestRun {
        let started = Instant::now();
        let mut collected = Collected::default();
        let Some(workers) = self
            .devices
            .iter()
            .min_by_key(|device| device.assigned.load(Ordering::Relaxed))
        else {
            return collected.run(TestEnd::NotRun("no device to run tests on".into()), started);
        };
        workers.assigned.fetch_add(1, Ordering::Relaxed);
        let end = match self.start(&workers.spec, 1) {
            Err(error) => TestEnd::NotRun(error),
            Ok(pooled) => {
                let end = match self.attempt(&pooled, 0, &test_command(test), &mut collected) {
                    Attempt::Final(end) => end,
                    // One slot: no other test can have ended this worker.
                    Attempt::Again(how) | Attempt::Alone(how) => {
                        TestEnd::launch(LaunchEnd::Faulted(how))
                    }
                };
                let ended = pooled.worker.close(REPORT_WITHIN);
                with_findings(end, &ended, sanitizer, test, &mut collected)
            }
        };
        workers.assigned.fetch_sub(1, Ordering::Relaxed);
        collected.run(end, started)
    }

    /// A free slot on the least busy device, starting a worker there if it has none that works.
    fn lease(&self) -> Result<Lease<'_>, String> {
        let workers = self
            .devices
            .iter()
            .min_by_key(|device| device.assigned.load(Ordering::Relaxed))
            .ok_or("no device to run tests on")?;
        workers.assigned.fetch_add(1, Ordering::Relaxed);
        let mut current = lock(&workers.current);
        let usable = current.as_ref().filter(|pooled| {
            pooled.worker.breakage().is_none() && !lock(&pooled.state).free_slots.is_empty()
        });
        let pooled = match usable {
            Some(pooled) => Arc::clone(pooled),
            None => {
                let started = self.start(&workers.spec, self.slots_per_worker);
                let pooled = match started {
                    Ok(pooled) => pooled,
                    Err(error) => {
                        workers.assigned.fetch_sub(1, Ordering::Relaxed);
                        return Err(error);
                    }
                };
                // Tests still running in a worker being replaced keep it alive until they end.
                *current = Some(Arc::clone(&pooled));
                pooled
            }
        };
        let mut state = lock(&pooled.state);
        let Some(slot) = state.free_slots.pop() else {
            drop(state);
            workers.assigned.fetch_sub(1, Ordering::Relaxed);
            return Err("no free slot in the device's worker".into());
        };
        state.in_flight += 1;
        drop(state);
        drop(current);
        Ok(Lease {
            workers,
            pooled,
            slot,
        })
    }

    fn start(&self, spec: &WorkerSpec, slots: usize) -> Result<Arc<Pooled>, String> {
        let spec = WorkerSpec {
            slots,
            ..spec.clone()
        };
        let worker =
            WorkerHandle::spawn(&spec, START_TIMEOUT).map_err(|error| error.to_string())?;
        let slots = worker.slots();
        Ok(Arc::new(Pooled {
            worker,
            state: Mutex::new(PooledState {
                free_slots: (0..slots).rev().collect(),
                in_flight: 0,
                suspects: None,
            }),
        }))
    }

    /// Runs `test` once in a fresh worker of its own.
    fn run_alone(&self, test: &TestDesc, collected: &mut Collected) -> TestEnd {
        let Some(workers) = self.devices.first() else {
            return TestEnd::NotRun("no device to run tests on".into());
        };
        let pooled = match self.start(&workers.spec, 1) {
            Ok(pooled) => pooled,
            Err(error) => return TestEnd::NotRun(error),
        };
        match self.attempt(&pooled, 0, &test_command(test), collected) {
            Attempt::Final(end) => end,
            Attempt::Again(how) | Attempt::Alone(how) => TestEnd::launch(LaunchEnd::Faulted(how)),
        }
    }

    /// Runs `command` (a test's or a benchmark's launch) in `slot` of `pooled` and decides what
    /// its end means.
    fn attempt(
        &self,
        pooled: &Pooled,
        slot: usize,
        command: &Command,
        collected: &mut Collected,
    ) -> Attempt {
        let outcome = pooled
            .worker
            .run(slot, command, self.timeout, &mut |event| match event {
                Event::Stdout(bytes) => collected.stdout.extend_from_slice(&bytes),
                Event::Stderr(bytes) => collected.stderr.extend_from_slice(&bytes),
                Event::Panic(report) => {
                    collected.panicked_threads += 1;
                    if collected.first_panic.is_none() {
                        collected.first_panic = Some(report);
                    }
                }
                Event::DeviceTime(time) => collected.device_time = Some(time),
                Event::Ready { .. }
                | Event::StartFailed { .. }
                | Event::Ended(_)
                | Event::Refused { .. } => {}
            });
        let end = match outcome {
            Ok(end) if end.leaves_module_usable() => return Attempt::Final(collected.end(end)),
            // A timeout the parent enforced killed the worker: it belongs to this test.
            Ok(end @ LaunchEnd::TimedOut(_)) => return Attempt::Final(collected.end(end)),
            Ok(end) => end,
            Err(RunError::Refused(error)) => return Attempt::Final(TestEnd::NotRun(error)),
            // A crash of the worker is a fault of the launch that was running in it.
            Err(RunError::Died(how)) => LaunchEnd::Faulted(match &collected.first_panic {
                Some(report) => format!("{how} (after a panic: {})", report.message),
                None => how,
            }),
        };
        // The worker is gone. Did this slot end it, or was it caught in another's end?
        if breakage_of(&end) == Some(Breakage::Explained) {
            return Attempt::Final(collected.end(end));
        }
        let how = match &end {
            LaunchEnd::Faulted(error) => error.clone(),
            other => format!("{other:?}"),
        };
        if pooled.worker.breakage() == Some(Breakage::Explained) {
            // Another slot's exit, abort or timeout ended the worker under this test.
            return Attempt::Again(how);
        }
        let suspects = pooled.suspects();
        if suspects <= 1 {
            return Attempt::Final(collected.end(end));
        }
        Attempt::Alone(format!(
            "{how}, with {} other test(s) running beside it",
            suspects - 1
        ))
    }
}

/// The command that runs `test`: its kernel with its shape; a benchmark run as a test with one
/// iteration, as libtest runs one without `--bench`.
fn test_command(test: &TestDesc) -> Command {
    Command::RunTest {
        kernel: test.kernel.clone(),
        shape: test.shape,
        bench: test.bench.map(|_| BenchLaunch::ONCE),
    }
}

/// One benchmark's launches, all in one slot of one worker.
struct SlotLaunches<'e> {
    executor: &'e WorkerExecutor,
    pooled: &'e Pooled,
    slot: usize,
    test: &'e TestDesc,
    backend: BackendKind,
    collected: Collected,
    /// How the launch that stopped the measurement ended; no launch starts after it.
    stopped: Option<TestEnd>,
}

impl BenchLaunches for SlotLaunches<'_> {
    fn launch(&mut self, iterations: u64) -> Result<Option<Duration>, LaunchFailed> {
        if self.stopped.is_some() {
            return Err(LaunchFailed);
        }
        let command = Command::RunTest {
            kernel: self.test.kernel.clone(),
            shape: self.test.shape,
            bench: Some(BenchLaunch {
                iterations,
                flush_l2: self.executor.flush_l2,
            }),
        };
        self.collected.device_time = None;
        let attempt = self
            .executor
            .attempt(self.pooled, self.slot, &command, &mut self.collected);
        match attempt {
            Attempt::Final(TestEnd::Ran {
                end: LaunchEnd::Completed,
                first_panic: None,
                panicked_threads: 0,
                sanitizer: None,
            }) => Ok(self.collected.device_time),
            Attempt::Final(end) => {
                self.stopped = Some(end);
                Err(LaunchFailed)
            }
            // Benchmarks run one at a time: nothing else shared the worker that ended.
            Attempt::Again(how) | Attempt::Alone(how) => {
                self.stopped = Some(TestEnd::launch(LaunchEnd::Faulted(how)));
                Err(LaunchFailed)
            }
        }
    }

    fn timer(&self) -> String {
        self.backend.launch_timer().to_owned()
    }
}

impl Collected {
    /// The test's end: the launch's, with the panics collected during it.
    fn end(&mut self, end: LaunchEnd) -> TestEnd {
        TestEnd::Ran {
            end,
            first_panic: self.first_panic.take(),
            panicked_threads: self.panicked_threads,
            sanitizer: None,
        }
    }

    /// The test's run, ended as `end`, started at `started`.
    fn run(self, end: TestEnd, started: Instant) -> TestRun {
        TestRun {
            end,
            stdout: self.stdout,
            stderr: self.stderr,
            duration: started.elapsed(),
            device_time: self.device_time,
        }
    }
}

/// `end` with what compute-sanitizer's report (in `ended`) says about `test`, the only test its
/// worker ran: its findings fail the test; its other records go to the test's stderr. A report
/// the sanitizer's exit status says has errors, but whose records could not be read, fails
/// the test with the report as it is.
fn with_findings(
    end: TestEnd,
    ended: &WorkerEnd,
    sanitizer: &Sanitizer,
    test: &TestDesc,
    collected: &mut Collected,
) -> TestEnd {
    let report = ended.sanitizer_report.as_deref().unwrap_or_default();
    let attribution = sanitizer::attribute(sanitizer::parse_report(report));
    if let Some(notes) = attribution.notes_text() {
        collected.stderr.extend_from_slice(notes.as_bytes());
    }
    let mut findings = attribution.failure(sanitizer.tool, &test.kernel);
    let errors_said = ended.status.and_then(|status| status.code()) == Some(ERROR_EXIT_CODE);
    if findings.is_none() && errors_said && attribution.notes.is_empty() {
        findings = Some(format!(
            "compute-sanitizer {} exited with status {ERROR_EXIT_CODE} (it found errors), but \
             its report names none that could be read:\n{}",
            sanitizer.tool,
            report.trim_end()
        ));
    }
    match (end, findings) {
        (
            TestEnd::Ran {
                end,
                first_panic,
                panicked_threads,
                ..
            },
            Some(findings),
        ) => TestEnd::Ran {
            end,
            first_panic,
            panicked_threads,
            sanitizer: Some(findings),
        },
        (not_run @ TestEnd::NotRun(_), Some(findings)) => {
            collected.stderr.extend_from_slice(findings.as_bytes());
            collected.stderr.push(b'\n');
            not_run
        }
        (end, None) => end,
    }
}

impl Executor for WorkerExecutor {
    fn runs_on_gpu(&self, _test: &TestDesc) -> bool {
        self.devices
            .first()
            .is_some_and(|device| device.spec.backend.is_gpu())
    }

    /// Measures a benchmark in one slot of a worker: every launch there, one after another,
    /// none started again elsewhere (a worker that ends stops the measurement, and the
    /// benchmark fails with how it ended).
    fn bench(&self, test: &TestDesc, measure: &mut dyn FnMut(&mut dyn BenchLaunches)) -> TestRun {
        let started = Instant::now();
        let not_run = |why: String| TestRun {
            end: TestEnd::NotRun(why),
            stdout: Vec::new(),
            stderr: Vec::new(),
            duration: started.elapsed(),
            device_time: None,
        };
        if self.sanitizer().is_some() {
            // Each launch would be a worker of its own, timed under the sanitizer's overhead.
            return not_run("benchmarks are not measured under compute-sanitizer".into());
        }
        let lease = match self.lease() {
            Ok(lease) => lease,
            Err(error) => return not_run(error),
        };
        let mut launches = SlotLaunches {
            executor: self,
            pooled: &lease.pooled,
            slot: lease.slot,
            test,
            backend: lease.workers.spec.backend,
            collected: Collected::default(),
            stopped: None,
        };
        measure(&mut launches);
        let SlotLaunches {
            mut collected,
            stopped,
            ..
        } = launches;
        drop(lease);
        let end = stopped.unwrap_or_else(|| collected.end(LaunchEnd::Completed));
        TestRun {
            end,
            stdout: collected.stdout,
            stderr: collected.stderr,
            duration: started.elapsed(),
            device_time: None,
        }
    }

    fn run(&self, test: &TestDesc) -> TestRun {
        if let Some(sanitizer) = self.sanitizer() {
            return self.run_sanitized(test, sanitizer);
        }
        let started = Instant::now();
        let mut notes = Vec::new();
        let mut collected = Collected::default();
        let mut end = None;
        for _ in 0..MAX_ATTEMPTS {
            let lease = match self.lease() {
                Ok(lease) => lease,
                Err(error) => {
                    end = Some(TestEnd::NotRun(error));
                    break;
                }
            };
            let attempt = self.attempt(
                &lease.pooled,
                lease.slot,
                &test_command(test),
                &mut collected,
            );
            drop(lease);
            match attempt {
                Attempt::Final(final_end) => {
                    end = Some(final_end);
                    break;
                }
                Attempt::Again(how) => {
                    notes.push(format!(
                        "note: started again: the worker ended under another test ({how})\n"
                    ));
                    // The next attempt starts from scratch: what the broken run printed goes.
                    collected = Collected::default();
                }
                Attempt::Alone(how) => {
                    notes.push(format!(
                        "note: ran again alone in a fresh worker: the shared one died ({how})\n"
                    ));
                    collected = Collected::default();
                    end = Some(self.run_alone(test, &mut collected));
                    break;
                }
            }
        }
        let end = end.unwrap_or_else(|| {
            TestEnd::NotRun(format!(
                "the worker died under other tests {MAX_ATTEMPTS} times; giving up on this one"
            ))
        });
        let clean = matches!(
            &end,
            TestEnd::Ran {
                end: gpurun_harness::LaunchEnd::Completed,
                panicked_threads: 0,
                sanitizer: None,
                ..
            }
        );
        if let Some(note) = self.note.as_ref().filter(|_| !clean) {
            notes.insert(0, format!("{note}\n"));
        }
        let mut stderr = notes.concat().into_bytes();
        stderr.extend_from_slice(&collected.stderr);
        TestRun {
            end,
            stdout: collected.stdout,
            stderr,
            duration: started.elapsed(),
            device_time: collected.device_time,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(devices: usize) -> Vec<WorkerSpec> {
        (0..devices)
            .map(|ordinal| WorkerSpec {
                exe: "cargo-gpurun".into(),
                args: vec!["--device".into(), ordinal.to_string()],
                image: "image.so".into(),
                slots: 1,
                env: Vec::new(),
                backend: gpurun_hal::BackendKind::Host,
                sanitizer: None,
            })
            .collect()
    }

    #[test]
    fn every_test_thread_gets_a_slot_spread_over_the_devices() {
        // (devices, test threads) -> (devices used, slots per worker)
        for (devices, threads, expected) in [
            (1, 1, (1, 1)),
            (1, 16, (1, 16)),
            (2, 4, (2, 2)),
            (3, 8, (3, 3)),
            (4, 2, (2, 1)),
            (8, 1, (1, 1)),
            (2, 0, (1, 1)),
        ] {
            let executor = WorkerExecutor::new(specs(devices), threads, None);
            assert_eq!(
                executor.shape(),
                expected,
                "{devices} devices, {threads} threads"
            );
        }
    }

    fn memcheck() -> Sanitizer {
        Sanitizer {
            tool: crate::SanitizerTool::Memcheck,
            program: "compute-sanitizer".into(),
        }
    }

    #[test]
    fn sanitized_tests_get_ten_times_their_time_limit() {
        let mut sanitized = specs(1);
        sanitized[0].sanitizer = Some(memcheck());
        let limit = Some(Duration::from_secs(3));
        assert_eq!(WorkerExecutor::new(specs(1), 1, limit).timeout(), limit);
        assert_eq!(
            WorkerExecutor::new(sanitized, 1, limit).timeout(),
            Some(Duration::from_secs(30))
        );
    }

    #[test]
    fn a_sanitizer_report_fails_the_test_its_worker_ran() {
        use std::os::unix::process::ExitStatusExt;
        let test = TestDesc::new("writes");
        let report = |kernel: &str| {
            format!(
                "========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at {kernel}+0x10
=========     by thread (1,0,0) in block (0,0,0)
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) on CUDA API call to cuStreamQuery.
=========
========= ERROR SUMMARY: 2 errors"
            )
        };
        let ended = |report: String, status: i32| WorkerEnd {
            status: Some(std::process::ExitStatus::from_raw(status << 8)),
            sanitizer_report: Some(report),
        };
        let clean = TestEnd::completed(None, 0);
        let mut collected = Collected::default();
        let end = with_findings(
            clean.clone(),
            &ended(report(&test.kernel), 0),
            &memcheck(),
            &test,
            &mut collected,
        );
        let findings = end.sanitizer_findings().expect("findings");
        assert!(
            findings.contains("memcheck found 1 error") && findings.contains("by thread (1,0,0)")
        );
        let stderr = String::from_utf8_lossy(&collected.stderr).into_owned();
        assert!(
            stderr.contains("Program hit CUDA_ERROR_LAUNCH_FAILED"),
            "{stderr}"
        );
        assert!(!stderr.contains("Invalid __global__ write"), "{stderr}");
        // Whichever function the record names: the worker ran this test alone.
        let mut collected = Collected::default();
        let end = with_findings(
            clean.clone(),
            &ended(report("helper_it_called"), 0),
            &memcheck(),
            &test,
            &mut collected,
        );
        assert!(end.sanitizer_findings().is_some());
        // Errors said by the exit status, none in the report: the test fails with what is there.
        let mut collected = Collected::default();
        let end = with_findings(
            clean.clone(),
            &ended("========= ERROR SUMMARY: 1 error".into(), ERROR_EXIT_CODE),
            &memcheck(),
            &test,
            &mut collected,
        );
        assert!(end
            .sanitizer_findings()
            .is_some_and(|findings| findings.contains("exited with status 86")));
        // A clean report with a clean exit changes nothing.
        let mut collected = Collected::default();
        let end = with_findings(
            clean.clone(),
            &ended("========= ERROR SUMMARY: 0 errors".into(), 0),
            &memcheck(),
            &test,
            &mut collected,
        );
        assert_eq!(end, clean);
        assert!(collected.stderr.is_empty());
        // A test that could not run keeps saying so; the findings go with its output.
        let mut collected = Collected::default();
        let not_run = TestEnd::NotRun("no such kernel".into());
        let end = with_findings(
            not_run.clone(),
            &ended(report(&test.kernel), ERROR_EXIT_CODE),
            &memcheck(),
            &test,
            &mut collected,
        );
        assert_eq!(end, not_run);
        assert!(String::from_utf8_lossy(&collected.stderr).contains("memcheck found 1 error"));
    }

    #[test]
    fn no_device_is_an_error_per_test_not_a_panic() {
        let executor = WorkerExecutor::new(Vec::new(), 4, None);
        let test = TestDesc::new("t");
        assert_eq!(test.kernel, "__gpurun_test_t");
        let run = executor.run(&test);
        assert!(
            matches!(&run.end, TestEnd::NotRun(error) if error.contains("no device")),
            "{:?}",
            run.end
        );
    }
}
