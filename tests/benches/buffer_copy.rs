//! Copies into and out of gpurun-test's device buffers on the host emulation, in MB/s, each
//! against `memcpy` between two host buffers of the same size measured in the same run: on the
//! host the device memory is plain memory, so a copy should cost a `memcpy` and little more
//! (the module's range check, a `RefCell` borrow). `Buffer::to_vec` zeroes its new `Vec` before
//! the copy (the module fills initialised bytes only), a second pass that shows at sizes the
//! allocator does not hand out as fresh pages. `cargo bench -p gpurun-e2e --bench
//! buffer_copy` (`GPURUN_BENCH_RUNS` sets the runs per size).

use std::hint::black_box;
use std::time::{Duration, Instant};

use gpurun_e2e::{bench_runs, fixtures_dir};
use gpurun_test::DeviceCrate;

fn main() {
    let runs = bench_runs(15);
    let gpu = DeviceCrate::new(fixtures_dir().join("host-app/kernels"))
        .target("host")
        .load()
        .unwrap_or_else(|error| panic!("loading the host-app kernels failed: {error}"));
    println!("device buffer copies (host emulation; medians of {runs} runs)");
    println!("| size | what | MB/s | vs memcpy |");
    println!("| ---: | --- | ---: | ---: |");
    for size in [64 << 10, 4 << 20, 64 << 20] {
        let source: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut target = vec![0u8; size];
        let mut buffer = gpu.buffer::<u8>(size).expect("buffer");
        // Both sides touched once, so no measurement pays for first-touch page faults.
        buffer.write(&source).expect("write");
        buffer.read_into(&mut target).expect("read");

        let memcpy = median(runs, || {
            let started = Instant::now();
            target.copy_from_slice(black_box(&source));
            black_box(&mut target);
            started.elapsed()
        });
        let write = median(runs, || {
            let started = Instant::now();
            buffer.write(black_box(&source)).expect("write");
            started.elapsed()
        });
        let read = median(runs, || {
            let started = Instant::now();
            buffer.read_into(black_box(&mut target)).expect("read");
            started.elapsed()
        });
        // A new Vec each time, as `source.to_vec()` makes one: fresh pages on both sides.
        let clone = median(runs, || {
            let started = Instant::now();
            black_box(black_box(&source).to_vec());
            started.elapsed()
        });
        let to_vec = median(runs, || {
            let started = Instant::now();
            black_box(buffer.to_vec().expect("to_vec"));
            started.elapsed()
        });
        let rows = [
            (
                "baseline: memcpy into an existing host buffer",
                memcpy,
                memcpy,
            ),
            ("`Buffer::write` (host to device)", write, memcpy),
            ("`Buffer::read_into` (device to host)", read, memcpy),
            ("baseline: `Vec::to_vec` of a host buffer", clone, clone),
            ("`Buffer::to_vec` (device to a new Vec)", to_vec, clone),
        ];
        for (what, took, baseline) in rows {
            println!(
                "| {} | {what} | {:.0} | {:.2}x |",
                human(size),
                mb_per_s(size, took),
                mb_per_s(size, took) / mb_per_s(size, baseline)
            );
        }
    }
}

fn median(runs: usize, mut once: impl FnMut() -> Duration) -> Duration {
    let mut times: Vec<Duration> = (0..runs.max(1)).map(|_| once()).collect();
    times.sort();
    times[times.len() / 2]
}

fn mb_per_s(bytes: usize, took: Duration) -> f64 {
    bytes as f64 / 1e6 / took.as_secs_f64().max(1e-12)
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    }
}
