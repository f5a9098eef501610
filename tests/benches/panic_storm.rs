//! What a panic costs against a print on the host emulation, in one run: every thread of a
//! launch of 2048 (8 blocks of 256) panics (`fixtures/panics` with `--no-print`), against every
//! thread printing one line (`fixtures/print-throughput`, one 64-byte line per thread), each
//! also with its start-up (the same launch printing nothing) taken off. Every run's output is
//! checked: all 2048 panics reported, all 2048 lines there.
//!
//! `cargo bench -p gpurun-e2e --bench panic_storm` (`GPURUN_BENCH_RUNS`, default 3).

use gpurun_e2e::{
    bench_runs, binary, describe, gpurun, host_image, median_time_checked, ms, ratio, text,
};
use std::process::{Command, Output};
use std::time::Duration;

const THREADS_PER_BLOCK: u32 = 256;
const BLOCKS: u32 = 8;
const THREADS: u32 = THREADS_PER_BLOCK * BLOCKS;
const LINE_BYTES: u32 = 64;

/// `cargo gpurun run` of `fixture`'s host image in the storm's launch shape, with `args`.
fn storm(fixture: &str, args: &[&str]) -> Command {
    let image = host_image(fixture);
    let threads = THREADS_PER_BLOCK.to_string();
    let blocks = BLOCKS.to_string();
    let mut all = vec![
        "run",
        "--backend",
        "host",
        "--threads",
        &threads,
        "--blocks",
        &blocks,
    ];
    let image = image.to_string_lossy();
    all.push(&image);
    all.push("--");
    all.extend_from_slice(args);
    let mut command = gpurun(&all);
    command.stdin(std::process::Stdio::null());
    command
}

fn printed_lines(lines: usize) -> impl Fn(&Output) {
    move |output: &Output| {
        assert!(output.status.success(), "{}", describe(output));
        assert_eq!(
            text(&output.stdout).lines().count(),
            lines,
            "{}",
            describe(output)
        );
    }
}

/// `cargo gpurun run` reports every device panic: one per thread.
fn every_thread_panicked(output: &Output) {
    let stderr = text(&output.stderr);
    let reports = stderr.matches("panicked at panics/src/lib.rs").count();
    assert!(
        !output.status.success() && reports == THREADS as usize,
        "expected {THREADS} panics, got {reports}:\n{}",
        describe(output)
    );
}

fn main() {
    let runs = bench_runs(3);
    let _ = binary();
    let bytes = (THREADS * LINE_BYTES).to_string();
    let start_up = median_time_checked(
        runs,
        || storm("print-throughput", &["--bytes", "0"]),
        printed_lines(0),
    );
    let prints = median_time_checked(
        runs,
        || storm("print-throughput", &["--bytes", &bytes]),
        printed_lines(THREADS as usize),
    );
    let panics = median_time_checked(
        runs,
        || storm("panics", &["--no-print"]),
        every_thread_panicked,
    );
    let beyond = |took: Duration| took.saturating_sub(start_up);
    println!(
        "panic storm benchmark: {THREADS} threads ({BLOCKS} blocks of {THREADS_PER_BLOCK}) on the \
         host emulation (median of {runs} runs, wall time, output checked)"
    );
    println!("| what | time | minus start-up | vs printing |");
    println!("| --- | ---: | ---: | ---: |");
    println!(
        "| start-up (the launch, printing nothing) | {:.1} ms | - | - |",
        ms(start_up)
    );
    println!(
        "| every thread prints a {LINE_BYTES}-byte line | {:.1} ms | {:.1} ms | 1.00x |",
        ms(prints),
        ms(beyond(prints))
    );
    println!(
        "| every thread panics | {:.1} ms | {:.1} ms | {:.2}x |",
        ms(panics),
        ms(beyond(panics)),
        ratio(beyond(panics), beyond(prints).max(Duration::from_millis(1)))
    );
}
