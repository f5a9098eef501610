//! The 1000-test fixture through the harness on the host backend, against `cargo test`'s own
//! harness running the same 1000 trivial tests as native Rust, measured in the same run; and
//! the harness alone (scheduling, capture, reporting) over 1000 tests whose executor answers at
//! once, against the same 1000 executor calls in a plain loop.
//! `cargo bench -p gpurun-e2e --bench harness`.

use gpurun_e2e::{bench_runs, binary, describe, gpurun, host_image, median_time, ms, ratio};
use gpurun_harness::testing::MockExecutor;
use gpurun_harness::{Executor, HarnessArgs, TestDesc};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    let runs = bench_runs(5);
    harness_alone(runs);
    let image = host_image("many-tests");
    let _ = binary();
    let native = native_test_binary();
    let image_arg = image.to_string_lossy().into_owned();
    let native_time = median_time(runs, || {
        let mut command = Command::new(&native);
        command.args(["--test-threads", "2", "-q"]);
        command
    });
    let mut rows = Vec::new();
    for threads in ["1", "2"] {
        let took = median_time(runs, || {
            gpurun(&["run", &image_arg, "--test-threads", threads, "-q"])
        });
        rows.push((threads, took));
    }
    println!("harness benchmark: 1000 trivial tests (median of {runs} runs, after the build)");
    println!("| what | time | tests/s | vs native |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| native cargo test, 2 threads | {:.1} ms | {:.0} | 1.0x |",
        ms(native_time),
        1000.0 / native_time.as_secs_f64()
    );
    for (threads, took) in rows {
        println!(
            "| cargo gpurun (host backend), {threads} worker(s) | {:.1} ms | {:.0} | {:.1}x |",
            ms(took),
            1000.0 / took.as_secs_f64(),
            ratio(took, native_time)
        );
    }
}

/// Writes a crate with the same 1000 trivial tests as native Rust and builds its test binary.
fn native_test_binary() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("gpurun-bench-native-many-tests");
    std::fs::create_dir_all(dir.join("src")).expect("temp dir");
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"native-many-tests\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .expect("manifest");
    let tests: String = (0..1000)
        .map(|i| format!("#[test] fn trivial_{i:04}() {{ core::hint::black_box({i}); }}\n"))
        .collect();
    std::fs::write(dir.join("src/lib.rs"), tests).expect("source");
    let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["test", "--no-run", "--message-format=json"])
        .current_dir(&dir)
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "{}", describe(&output));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|message| message["executable"].as_str().map(std::path::PathBuf::from))
        .next_back()
        .expect("cargo reported the test executable")
}

/// Median of `runs` timings of `run`.
fn median_of(runs: usize, mut run: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..runs).map(|_| run()).collect();
    times.sort();
    times[times.len() / 2]
}

/// The harness's own cost per test: 1000 tests through `Session::run_with_output` (libtest's pretty
/// output into a buffer) against calling the executor for each test in a loop.
fn harness_alone(runs: usize) {
    let suite: Vec<TestDesc> = (0..1000)
        .map(|i| TestDesc::new(format!("many::t{i:04}")))
        .collect();
    let executor = Arc::new(MockExecutor::new());
    let loop_time = median_of(runs, || {
        let started = Instant::now();
        for test in &suite {
            std::hint::black_box(executor.run(test));
        }
        started.elapsed()
    });
    println!("harness alone: 1000 tests answered at once (median of {runs} runs)");
    println!("| what | time | per test | vs the loop |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| executor calls in a loop | {:.2} ms | {:.2} us | 1.0x |",
        ms(loop_time),
        loop_time.as_secs_f64() * 1e3
    );
    for threads in ["1", "4"] {
        let mut args =
            HarnessArgs::parse_args(["bench", "--test-threads", threads]).expect("valid arguments");
        args.github_actions = false;
        args.github_step_summary = None;
        let took = median_of(runs, || {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let started = Instant::now();
            let conclusion = gpurun_harness::Session::new(&args)
                .run_with_output(
                    &args,
                    suite.clone(),
                    Arc::new(MockExecutor::new()),
                    false,
                    &mut out,
                    &mut err,
                )
                .expect("the run completes");
            let took = started.elapsed();
            assert_eq!(conclusion.num_passed, 1000);
            took
        });
        println!(
            "| harness, {threads} thread(s) | {:.2} ms | {:.2} us | {:.1}x |",
            ms(took),
            took.as_secs_f64() * 1e3,
            ratio(took, loop_time)
        );
    }
    println!();
}
