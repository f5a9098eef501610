//! The runner against scripted workers: real worker processes (this test binary, started with
//! `--worker`) over the scripted backend, so the worker protocol, the pool, crash attribution
//! and re-runs are tested without a GPU, a fixture or a nightly.

use gpurun_hal::scripted::{test, ImageSpec, Script, Step, SCRIPT_ENV};
use gpurun_hal::{BackendKind, LaunchShape};
use gpurun_harness::{Executor, LaunchEnd, TestDesc, TestEnd, TestRun};
use gpurun_runner::{Command, Event, RunError, WorkerExecutor, WorkerHandle, WorkerOptions};
use libtest_mimic::{Arguments, Failed, Trial};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|arg| arg == "--worker") {
        if let Some(marker) = std::env::var_os(EXIT_MARKER_ENV) {
            register_exit_marker(PathBuf::from(marker));
        }
        let status = gpurun_runner::worker::main(&args[2..]);
        return ExitCode::from(u8::try_from(status).unwrap_or(1));
    }
    let trials = vec![
        Trial::test(
            "results_output_and_panics_reach_the_harness",
            results_and_output,
        ),
        Trial::test(
            "exit_abort_and_timeout_fail_only_their_test",
            ends_of_one_test,
        ),
        Trial::test("a_crash_reruns_every_test_in_flight_alone", crash_reruns),
        Trial::test("a_fault_fails_only_the_test_that_faults", fault_reruns),
        Trial::test(
            "a_process_wide_fault_reruns_every_test_in_flight_alone",
            process_fault_reruns,
        ),
        Trial::test("a_worker_that_cannot_start_fails_each_test", start_failure),
        Trial::test("a_program_runs_through_the_worker_protocol", program),
        Trial::test(
            "a_benchmark_runs_its_launches_in_one_slot_until_one_fails",
            bench_launches,
        ),
        Trial::test(
            "a_worker_leaves_without_exit_handlers_after_its_last_run",
            last_run_skips_exit_handlers,
        ),
        Trial::test(
            "a_worker_owing_a_profile_runs_its_exit_handlers_when_closed_at_once",
            owed_profile_is_written,
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}

/// A scripted image whose tests are the script's kernels, written to a temporary directory,
/// and the script beside it.
struct Setup {
    dir: PathBuf,
    image: PathBuf,
    script: PathBuf,
    tests: Vec<TestDesc>,
}

impl Setup {
    fn new(name: &str, kernels: Vec<(&str, Vec<Step>)>) -> Setup {
        let dir = std::env::temp_dir().join(format!("gpurun-runner-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let descs: Vec<_> = kernels.iter().map(|(name, _)| test(name)).collect();
        let image = dir.join("scripted.ptx");
        std::fs::write(&image, ImageSpec::with_tests(descs.clone()).ptx().unwrap()).unwrap();
        let script = Script {
            kernels: descs
                .iter()
                .zip(kernels)
                .map(|(desc, (_, steps))| (desc.kernel.clone(), steps))
                .collect::<HashMap<_, _>>(),
            devices: 1,
            ..Script::default()
        };
        let script_path = dir.join("script.json");
        std::fs::write(&script_path, serde_json::to_vec(&script).unwrap()).unwrap();
        Setup {
            dir,
            image,
            script: script_path,
            tests: descs,
        }
    }

    fn spec(&self) -> gpurun_runner::WorkerSpec {
        let options = WorkerOptions {
            backend: BackendKind::Scripted,
            device: 0,
            lane_size: 1,
            emulation_checks: true,
            emulation_seed: None,
            stack_size: None,
            allow_system: false,
            stdin: None,
        };
        let mut spec = options.spec(std::env::current_exe().unwrap(), &["--worker"], &self.image);
        spec.env
            .push((SCRIPT_ENV.into(), self.script.display().to_string()));
        spec
    }

    /// Runs every test with `threads` at once; returns each run by test name.
    fn run_all(&self, threads: usize, timeout: Duration) -> HashMap<String, TestRun> {
        let executor = WorkerExecutor::new(vec![self.spec()], threads, Some(timeout));
        std::thread::scope(|scope| {
            let runs: Vec<_> = self
                .tests
                .iter()
                .map(|test| {
                    let executor = &executor;
                    scope.spawn(move || (test.name.clone(), executor.run(test)))
                })
                .collect();
            runs.into_iter().map(|run| run.join().unwrap()).collect()
        })
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn check(condition: bool, what: impl FnOnce() -> String) -> Result<(), Failed> {
    if condition {
        Ok(())
    } else {
        Err(what().into())
    }
}

fn passed(run: &TestRun) -> bool {
    matches!(
        run.end,
        TestEnd::Ran {
            end: LaunchEnd::Completed,
            first_panic: None,
            ..
        }
    )
}

fn results_and_output() -> Result<(), Failed> {
    let setup = Setup::new(
        "results",
        vec![
            (
                "talks",
                vec![Step::Print("hello\n".into()), Step::Eprint("err\n".into())],
            ),
            (
                "panics",
                vec![Step::Panic {
                    message: "boom".into(),
                    file: "src/lib.rs".into(),
                    line: 3,
                }],
            ),
            ("quiet", vec![]),
        ],
    );
    let runs = setup.run_all(2, Duration::from_secs(30));
    let talks = &runs["talks"];
    check(passed(talks), || format!("{:?}", talks.end))?;
    check(
        talks.stdout == b"hello\n" && talks.stderr == b"err\n",
        || format!("{:?} {:?}", talks.stdout, talks.stderr),
    )?;
    match &runs["panics"].end {
        TestEnd::Ran {
            end: LaunchEnd::Completed,
            first_panic: Some(report),
            panicked_threads: 1,
            ..
        } => check(report.message == "boom" && report.line == 3, || {
            format!("{report:?}")
        })?,
        other => return Err(format!("{other:?}").into()),
    }
    check(passed(&runs["quiet"]), || {
        format!("{:?}", runs["quiet"].end)
    })
}

/// A benchmark's launches through the real worker: each with its iteration count, in one
/// slot, until one fails.
fn bench_launches() -> Result<(), Failed> {
    let setup = Setup::new(
        "bench",
        vec![
            ("talks", vec![Step::Print("hello\n".into())]),
            (
                "panics",
                vec![Step::Panic {
                    message: "boom".into(),
                    file: "src/lib.rs".into(),
                    line: 3,
                }],
            ),
        ],
    );
    let executor = WorkerExecutor::new(vec![setup.spec()], 1, Some(Duration::from_secs(30)));
    // Three clean launches in one slot, each with what it printed; the scripted backend times
    // nothing.
    let mut times = Vec::new();
    let run = executor.bench(&setup.tests[0], &mut |launches| {
        for iterations in [0, 5, 1 << 40] {
            times.push(launches.launch(iterations));
        }
        check(launches.timer() == "none (scripted)", || launches.timer())
            .expect("the scripted backend's timer");
    });
    check(times == [Ok(None), Ok(None), Ok(None)], || {
        format!("{times:?}")
    })?;
    check(passed(&run), || format!("{:?}", run.end))?;
    check(run.stdout == b"hello\nhello\nhello\n", || {
        String::from_utf8_lossy(&run.stdout).into_owned()
    })?;
    // A panic stops the launches: the run says how it ended, and no launch starts after it.
    let mut results = Vec::new();
    let run = executor.bench(&setup.tests[1], &mut |launches| {
        results.push(launches.launch(1));
        results.push(launches.launch(1));
    });
    check(
        results.iter().all(Result::is_err) && results.len() == 2,
        || format!("{results:?}"),
    )?;
    match &run.end {
        TestEnd::Ran {
            end: LaunchEnd::Completed,
            first_panic: Some(report),
            ..
        } => check(report.message == "boom", || format!("{report:?}")),
        other => Err(format!("{other:?}").into()),
    }
}

fn ends_of_one_test() -> Result<(), Failed> {
    let setup = Setup::new(
        "ends",
        vec![
            ("exits", vec![Step::SleepMs(50), Step::Exit(3)]),
            ("aborts", vec![Step::SleepMs(50), Step::Abort]),
            ("hangs", vec![Step::Hang]),
            (
                "fine_a",
                vec![Step::SleepMs(100), Step::Print("a\n".into())],
            ),
            (
                "fine_b",
                vec![Step::SleepMs(100), Step::Print("b\n".into())],
            ),
        ],
    );
    let runs = setup.run_all(5, Duration::from_millis(1500));
    check(
        matches!(
            runs["exits"].end,
            TestEnd::Ran {
                end: LaunchEnd::Exited(3),
                ..
            }
        ),
        || format!("{:?}", runs["exits"].end),
    )?;
    check(
        matches!(
            runs["aborts"].end,
            TestEnd::Ran {
                end: LaunchEnd::Aborted,
                ..
            }
        ),
        || format!("{:?}", runs["aborts"].end),
    )?;
    check(
        matches!(
            runs["hangs"].end,
            TestEnd::Ran {
                end: LaunchEnd::TimedOut(_),
                ..
            }
        ),
        || format!("{:?}", runs["hangs"].end),
    )?;
    // A timeout keeps the panics reported before it: the reporter shows them with the timeout.
    // In a worker of its own: one more test that ends its worker here would make the others
    // run again more often than the runner allows.
    let panics = Setup::new(
        "panics",
        vec![(
            "panics_then_hangs",
            vec![
                Step::Thread(vec![Step::Panic {
                    message: "before the hang".into(),
                    file: "src/lib.rs".into(),
                    line: 7,
                }]),
                Step::Hang,
            ],
        )],
    );
    let panic_runs = panics.run_all(1, Duration::from_millis(1500));
    check(
        matches!(
            &panic_runs["panics_then_hangs"].end,
            TestEnd::Ran {
                end: LaunchEnd::TimedOut(_),
                first_panic: Some(report),
                panicked_threads: 1,
                ..
            } if report.message == "before the hang" && report.line == 7
        ),
        || format!("{:?}", panic_runs["panics_then_hangs"].end),
    )?;
    for name in ["fine_a", "fine_b"] {
        let run = &runs[name];
        check(passed(run), || format!("{name}: {:?}", run.end))?;
        let expected = format!("{}\n", &name[5..]);
        check(run.stdout == expected.as_bytes(), || {
            format!("{name}: {:?}", String::from_utf8_lossy(&run.stdout))
        })?;
    }
    Ok(())
}

fn crash_reruns() -> Result<(), Failed> {
    let setup = Setup::new(
        "crash",
        vec![
            ("crashes", vec![Step::SleepMs(100), Step::Crash]),
            (
                "bystander",
                vec![Step::SleepMs(300), Step::Print("ok\n".into())],
            ),
        ],
    );
    let runs = setup.run_all(2, Duration::from_secs(30));
    let crashes = &runs["crashes"];
    check(
        matches!(&crashes.end, TestEnd::Ran { end: LaunchEnd::Faulted(error), .. } if error.contains("SIGABRT") || error.contains("signal")),
        || format!("{:?}", crashes.end),
    )?;
    let bystander = &runs["bystander"];
    check(passed(bystander) && bystander.stdout == b"ok\n", || {
        format!("{:?} {:?}", bystander.end, bystander.stdout)
    })?;
    let note = String::from_utf8_lossy(&bystander.stderr);
    check(note.contains("ran again alone"), || note.to_string())
}

fn fault_reruns() -> Result<(), Failed> {
    let setup = Setup::new(
        "fault",
        vec![
            (
                "faults",
                vec![
                    Step::SleepMs(100),
                    Step::Fault("CUDA_ERROR_ILLEGAL_ADDRESS".into()),
                ],
            ),
            ("bystander", vec![Step::SleepMs(300)]),
        ],
    );
    let runs = setup.run_all(2, Duration::from_secs(30));
    check(
        matches!(&runs["faults"].end, TestEnd::Ran { end: LaunchEnd::Faulted(error), .. } if error.contains("ILLEGAL_ADDRESS")),
        || format!("{:?}", runs["faults"].end),
    )?;
    check(passed(&runs["bystander"]), || {
        format!("{:?}", runs["bystander"].end)
    })
}

/// The HSA backend records GPU memory faults for the whole process (ROCr reports them to one
/// system event handler, without saying which queue), so every slot's launch ends faulted with
/// the same text. No test is blamed for it: each one in flight runs again alone in a fresh
/// worker, where the innocent one passes and the faulting one shows the fault as its own.
fn process_fault_reruns() -> Result<(), Failed> {
    let fault = "GPU memory access fault at address 0xdead000 (page not present)";
    let setup = Setup::new(
        "process-fault",
        vec![
            (
                "faults",
                vec![Step::SleepMs(100), Step::ProcessFault(fault.into())],
            ),
            (
                "bystander",
                vec![Step::SleepMs(600), Step::Print("ok\n".into())],
            ),
        ],
    );
    let runs = setup.run_all(2, Duration::from_secs(30));
    let faults = &runs["faults"];
    check(
        matches!(&faults.end, TestEnd::Ran { end: LaunchEnd::Faulted(error), .. } if error.contains("0xdead000")),
        || format!("{:?}", faults.end),
    )?;
    let bystander = &runs["bystander"];
    check(passed(bystander) && bystander.stdout == b"ok\n", || {
        format!("{:?} {:?}", bystander.end, bystander.stdout)
    })?;
    for run in [faults, bystander] {
        let notes = String::from_utf8_lossy(&run.stderr);
        check(notes.contains("ran again alone"), || notes.to_string())?;
    }
    Ok(())
}

fn start_failure() -> Result<(), Failed> {
    let setup = Setup::new("start", vec![("any", vec![])]);
    std::fs::remove_file(&setup.script).unwrap();
    let runs = setup.run_all(1, Duration::from_secs(30));
    check(
        matches!(&runs["any"].end, TestEnd::NotRun(error) if error.contains("script")),
        || format!("{:?}", runs["any"].end),
    )
}

/// Names a file the worker process writes from an `atexit` handler, standing in for the exit-time
/// teardown libcuda registers.
const EXIT_MARKER_ENV: &str = "GPURUN_TEST_EXIT_MARKER";

fn register_exit_marker(path: PathBuf) {
    static MARKER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    extern "C" fn write_marker() {
        if let Some(path) = MARKER.get() {
            let _ = std::fs::write(path, b"exit handlers ran\n");
        }
    }
    if MARKER.set(path).is_ok() {
        // SAFETY: registers a function without arguments that only writes a file.
        unsafe { libc::atexit(write_marker) };
    }
}

/// After a run that ends the worker (here an exit; also a fault or a timeout)
/// the worker leaves with `_exit`, so exit-time handlers (libcuda's teardown, while other slots
/// may be inside the driver) never run. A worker that ends by returning from `main` runs them,
/// which shows the marker works.
fn last_run_skips_exit_handlers() -> Result<(), Failed> {
    let setup = Setup::new("last-run", vec![("main", vec![Step::Exit(7)])]);
    let marker = setup.dir.join("exit-marker");
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(["--worker", "--no-such-option"])
        .env(EXIT_MARKER_ENV, &marker)
        .stderr(std::process::Stdio::null())
        .status()?;
    check(!status.success() && marker.exists(), || {
        format!("a worker refusing its arguments ({status}) left no exit marker")
    })?;
    std::fs::remove_file(&marker)?;

    let mut spec = setup.spec();
    spec.env
        .push((EXIT_MARKER_ENV.into(), marker.display().to_string()));
    let worker = WorkerHandle::spawn(&spec, Duration::from_secs(30))?;
    let command = Command::RunTest {
        kernel: setup.tests[0].kernel.clone(),
        shape: LaunchShape::SINGLE,
        bench: None,
    };
    let timeout = Some(Duration::from_secs(30));
    let end = worker.run(0, &command, timeout, &mut |_| {});
    check(matches!(end, Ok(LaunchEnd::Exited(7))), || {
        format!("{end:?}")
    })?;
    // The next command finds the worker gone; the handle waits for it to finish exiting.
    let end = worker.run(0, &command, timeout, &mut |_| {});
    check(
        matches!(&end, Err(RunError::Died(how)) if how.contains("exited with status 0")),
        || format!("{end:?}"),
    )?;
    check(!marker.exists(), || {
        "the worker ran its exit handlers after its last run".into()
    })
}

/// A worker of a coverage run (`LLVM_PROFILE_FILE` set) ends through `exit`, whose handlers
/// write the profile, even when the parent closes it the moment the last test's end arrives:
/// the slot that reported that end must already count as idle. Several rounds, since the slot
/// and the main thread race.
fn owed_profile_is_written() -> Result<(), Failed> {
    let setup = Setup::new(
        "owed-profile",
        vec![("passes", vec![Step::Print("ran\n".into())])],
    );
    let marker = setup.dir.join("exit-marker");
    let mut spec = setup.spec();
    spec.env.push((
        gpurun_runner::worker::PROFILE_FILE_ENV.into(),
        setup.dir.join("%p.profraw").display().to_string(),
    ));
    spec.env
        .push((EXIT_MARKER_ENV.into(), marker.display().to_string()));
    let command = Command::RunTest {
        kernel: setup.tests[0].kernel.clone(),
        shape: LaunchShape::SINGLE,
        bench: None,
    };
    for round in 0..10 {
        let _ = std::fs::remove_file(&marker);
        let worker = WorkerHandle::spawn(&spec, Duration::from_secs(30))?;
        let end = worker.run(0, &command, Some(Duration::from_secs(30)), &mut |_| {});
        check(matches!(end, Ok(LaunchEnd::Completed)), || {
            format!("round {round}: {end:?}")
        })?;
        let ended = worker.close(Duration::from_secs(30));
        check(ended.status.is_some() && marker.exists(), || {
            format!(
                "round {round}: the worker ({:?}) ended without its exit handlers",
                ended.status
            )
        })?;
    }
    Ok(())
}

fn program() -> Result<(), Failed> {
    let setup = Setup::new(
        "program",
        vec![(
            "main",
            vec![Step::Print("from main\n".into()), Step::Exit(7)],
        )],
    );
    let worker = WorkerHandle::spawn(&setup.spec(), Duration::from_secs(30))?;
    let mut stdout = Vec::new();
    let command = Command::RunTest {
        kernel: setup.tests[0].kernel.clone(),
        shape: LaunchShape::SINGLE,
        bench: None,
    };
    let end = worker.run(0, &command, Some(Duration::from_secs(30)), &mut |event| {
        if let Event::Stdout(bytes) = event {
            stdout.extend_from_slice(&bytes);
        }
    });
    check(matches!(end, Ok(LaunchEnd::Exited(7))), || {
        format!("{end:?}")
    })?;
    check(stdout == b"from main\n", || format!("{stdout:?}"))
}
