//! gpurun-test's host-driven launches on the host emulation, each against a baseline measured
//! in the same run: the per-launch overhead against spawning and joining as many OS threads
//! (what the emulation does per launch), and the first `load()` of a process, with the build
//! up to date, against a no-op `cargo build` of the same device crate (the least a build check
//! can cost). `cargo bench -p gpurun-e2e --bench host_launch`.

use std::process::Command;
use std::time::{Duration, Instant};

use gpurun_e2e::{fixtures_dir, median_time, ms, ratio};
use gpurun_test::{DeviceCrate, LaunchShape};

/// Started as `host_launch --first-load`: one `load()` in a fresh process, as a test's first.
const FIRST_LOAD: &str = "--first-load";

fn kernels() -> DeviceCrate {
    DeviceCrate::new(fixtures_dir().join("host-app/kernels")).target("host")
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some(FIRST_LOAD) {
        if let Err(error) = kernels().load() {
            eprintln!("error: {error}");
            std::process::exit(1);
        }
        return;
    }
    let runs: usize = std::env::var("GPURUN_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(21);
    let launches = runs * 20;
    // Builds once (if needed) so every measurement below finds the build up to date.
    let started = Instant::now();
    let gpu = kernels()
        .load()
        .unwrap_or_else(|error| panic!("loading the host-app kernels failed: {error}"));
    let first_in_bench = started.elapsed();

    println!("host-driven launch benchmark (host emulation; medians)");
    println!("| what | time | vs baseline |");
    println!("| --- | ---: | ---: |");
    for threads in [1u32, 256] {
        let x = gpu.buffer::<f32>(0).expect("buffer");
        let mut y = gpu.buffer::<f32>(0).expect("buffer");
        // n = 0: every thread returns at once, so the time is the launch's own.
        let launch = median(launches, || {
            let started = Instant::now();
            gpu.launch(
                "saxpy",
                LaunchShape::blocks(1).threads(threads),
                (1.0f32, &x, &mut y, 0usize),
            )
            .expect("launch");
            started.elapsed()
        });
        let spawn = median(launches, || {
            let started = Instant::now();
            let handles: Vec<_> = (0..threads)
                .map(|_| std::thread::spawn(|| std::hint::black_box(0)))
                .collect();
            for handle in handles {
                let _ = handle.join();
            }
            started.elapsed()
        });
        println!(
            "| baseline: spawn and join {threads} OS thread(s) | {:.1} µs | 1.0x |",
            us(spawn)
        );
        println!(
            "| launch of an empty kernel, {threads} thread(s) | {:.1} µs | {:.1}x |",
            us(launch),
            ratio(launch, spawn)
        );
    }
    drop(gpu);

    let exe = std::env::current_exe().expect("own path");
    let first_load = median_time(runs, || {
        let mut command = Command::new(&exe);
        command.arg(FIRST_LOAD);
        command
    });
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = fixtures_dir().join("host-app/kernels/Cargo.toml");
    let noop_build = median_time(runs, || {
        let mut command = Command::new(&cargo);
        command
            .args(["build", "-q", "--lib", "--manifest-path"])
            .arg(&manifest)
            .env_remove("CARGO_TARGET_DIR");
        command
    });
    let reload = median(runs, || {
        let started = Instant::now();
        drop(kernels().load().expect("load"));
        started.elapsed()
    });
    println!(
        "| baseline: no-op `cargo build` of the device crate (process) | {:.1} ms | 1.0x |",
        ms(noop_build)
    );
    println!(
        "| first `load()` of a process, build up to date (process) | {:.1} ms | {:.2}x |",
        ms(first_load),
        ratio(first_load, noop_build)
    );
    println!(
        "| later `load()`, build cached in the process | {:.2} ms | {:.3}x |",
        ms(reload),
        ratio(reload, noop_build)
    );
    println!(
        "(first load() in this benchmark, a build included if one was needed: {:.0} ms)",
        ms(first_in_bench)
    );
}

fn median(runs: usize, mut once: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..runs.max(1)).map(|_| once()).collect();
    times.sort();
    times[times.len() / 2]
}

fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
