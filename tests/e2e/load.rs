//! The host emulation on an oversubscribed machine: fixtures run while CPU hogs keep every core
//! busy (twice over) must slow down roughly by their share of the CPU, not stall. Waiters that
//! yielded to the scheduler made them stall: on Linux's EEVDF scheduler each `sched_yield`
//! pushes the yielder's deadline back a whole time slice, so beside CPU-bound threads the RPC
//! server and the device threads waited by yielding and were picked last, long after what they
//! waited for had come (a 200 KB print went from 0.2 s to 60-100 s; two trivial trials of the
//! host app took 72 s under nextest instead of 3 s).
//!
//! The bound is generous (a loaded 2-core CI machine runs other tests beside this one): the
//! workload under the hogs may take 20 times its time without them, plus 20 s. A share of the
//! CPU explains a few times; the stalls took hundreds of times.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpurun_e2e::{describe, gpurun, host_image, text, Hogs};

/// How many times its unloaded time the workload may take under the hogs...
const SLOWDOWN: u32 = 20;
/// ...plus this (process start-up and the scheduler's latency on a busy machine).
const SLACK: Duration = Duration::from_secs(20);

/// Bytes the print-heavy run prints: thousands of RPC conversations.
const PRINT_BYTES: usize = 200_000;

/// The workload: a print-heavy program, tests that print from several workers at once, and the
/// host app's device tests (the trials that stalled), as `cargo gpurun run` runs them.
fn workload() -> Vec<Command> {
    let image = |name: &str| host_image(name).to_string_lossy().into_owned();
    let bytes = PRINT_BYTES.to_string();
    vec![
        gpurun(&["run", &image("print-throughput"), "--bytes", &bytes]),
        gpurun(&["run", &image("concurrency"), "--test-threads", "4"]),
        gpurun(&["run", &image("host-app-kernels")]),
    ]
}

/// What a run's result is made of, without its timings: the exit status and, for the test
/// images, libtest's summary line up to its `finished in`; for the print, how much came out.
fn result_of(output: &Output) -> (Option<i32>, String) {
    let stdout = text(&output.stdout);
    let summary = stdout
        .lines()
        .find_map(|line| {
            line.split("; finished in")
                .next()
                .filter(|_| line.starts_with("test result:"))
        })
        .map_or_else(|| format!("{} bytes", output.stdout.len()), str::to_owned);
    (output.status.code(), summary)
}

/// Runs `command`, killing it once `limit` has passed. Returns its output and how long it took.
fn run_within(mut command: Command, limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cargo-gpurun starts");
    // Read both pipes while it runs: a full pipe would stall it.
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let (stdout, stderr) = (read(Box::new(stdout)), read(Box::new(stderr)));
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            break child.wait().expect("wait");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = started.elapsed();
    let output = Output {
        status,
        stdout: stdout.join().expect("reader"),
        stderr: stderr.join().expect("reader"),
    };
    (output, took)
}

#[test]
fn host_emulation_slows_down_by_its_share_under_cpu_hogs() {
    // Built before any timing starts.
    let _ = workload();
    let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
    let mut quiet = Duration::ZERO;
    let mut expected = Vec::new();
    for command in workload() {
        // No bound here: this is the baseline (the hang guard is the harness's own).
        let (output, took) = run_within(command, Duration::from_secs(600));
        quiet += took;
        expected.push(result_of(&output));
        assert!(
            output.status.code().is_some(),
            "the unloaded run did not end on its own:\n{}",
            describe(&output)
        );
    }
    let hogs = Hogs::start(2 * cores);
    let limit = quiet * SLOWDOWN + SLACK;
    let started = Instant::now();
    for (command, expected) in workload().into_iter().zip(&expected) {
        let left = limit.saturating_sub(started.elapsed());
        let (output, _) = run_within(command, left);
        assert!(
            started.elapsed() <= limit,
            "with {} hogs on {cores} cores the workload took over {limit:?} ({SLOWDOWN} x its {quiet:?} unloaded, plus {SLACK:?}):\n{}",
            2 * cores,
            describe(&output)
        );
        assert_eq!(&result_of(&output), expected, "{}", describe(&output));
    }
    let loaded = started.elapsed();
    drop(hogs);
    eprintln!(
        "workload: {quiet:?} unloaded, {loaded:?} under {} hogs on {cores} cores ({:.1}x)",
        2 * cores,
        loaded.as_secs_f64() / quiet.as_secs_f64()
    );
}
