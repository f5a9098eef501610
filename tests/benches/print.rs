//! Device print throughput on the host backend: the print-throughput fixture prints a set number
//! of bytes as numbered fixed-size lines from 1 thread and from 1024 threads (4 blocks of 256, the
//! shape scripts/gpu-check.sh uses). Every run's output is checked line by line, so a print path
//! that drops output cannot look fast, and MB/s is shown against a native process writing the
//! same lines, one `println!` each, from as many OS threads to the same kind of pipe, measured in
//! the same run (this bench binary re-run as that writer).
//!
//! `cargo bench -p gpurun-e2e --bench print`. `GPURUN_BENCH_PRINT_BYTES` (default 1 MiB) and
//! `GPURUN_BENCH_PRINT_BYTES_1024` (default 64 KiB: one line per thread) set the sizes,
//! `GPURUN_BENCH_RUNS` (default 3) the runs. The 1024-thread default is small because, on a
//! machine with few cores, 1024 emulated threads make each multi-packet RPC slow; the extra
//! 56-byte-line row (one RPC packet per line) shows that cost.

use gpurun_e2e::{bench_runs, binary, describe, gpurun, host_image, ms, ratio};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The fixture's default line size.
const LINE_BYTES: u64 = 64;
/// The longest line that fits the first RPC packet (56 payload bytes).
const ONE_PACKET_LINE_BYTES: u64 = 56;
/// Set in the environment of the re-run bench binary: `THREADS BYTES LINE_BYTES` to write
/// natively.
const NATIVE_WRITER_VAR: &str = "GPURUN_BENCH_PRINT_NATIVE_WRITER";

/// One launch shape and what it prints.
#[derive(Clone, Copy)]
struct Shape {
    threads_per_block: u64,
    blocks: u64,
    bytes: u64,
    line_bytes: u64,
}

impl Shape {
    fn threads(&self) -> u64 {
        self.threads_per_block * self.blocks
    }

    fn describe(&self) -> String {
        match (self.threads(), self.blocks) {
            (1, _) => "1 thread".to_string(),
            (threads, 1) => format!("{threads} threads"),
            (threads, blocks) => format!(
                "{threads} threads in {blocks} blocks of {}",
                self.threads_per_block
            ),
        }
    }
}

fn main() {
    if let Ok(spec) = std::env::var(NATIVE_WRITER_VAR) {
        native_writer(&spec);
        return;
    }
    let runs = bench_runs(3);
    let one = Shape {
        threads_per_block: 1,
        blocks: 1,
        bytes: env_number("GPURUN_BENCH_PRINT_BYTES").unwrap_or(1 << 20),
        line_bytes: LINE_BYTES,
    };
    let many = Shape {
        threads_per_block: 256,
        blocks: 4,
        bytes: env_number("GPURUN_BENCH_PRINT_BYTES_1024").unwrap_or(1024 * LINE_BYTES),
        line_bytes: LINE_BYTES,
    };
    let many_one_packet = Shape {
        bytes: many.bytes / LINE_BYTES * ONE_PACKET_LINE_BYTES,
        line_bytes: ONE_PACKET_LINE_BYTES,
        ..many
    };
    for shape in [one, many] {
        assert!(
            shape.bytes > 0 && shape.bytes.is_multiple_of(LINE_BYTES),
            "the print sizes must be positive multiples of {LINE_BYTES}"
        );
    }
    let image = host_image("print-throughput");
    let _ = binary();
    let image_arg = image.to_string_lossy().into_owned();
    let me = std::env::current_exe().expect("the bench binary's own path");

    println!(
        "print benchmark: lines to a pipe (median of {runs} runs, wall time; MB = 10^6 bytes; \
         output of every run checked)"
    );
    println!("| what | bytes | line | time | MB/s | vs native |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for shape in [one, many, many_one_packet] {
        let native = median_run(runs, shape, || {
            let mut command = Command::new(&me);
            let spec = format!("{} {} {}", shape.threads(), shape.bytes, shape.line_bytes);
            command.env(NATIVE_WRITER_VAR, spec);
            command
        });
        let start_up_shape = Shape { bytes: 0, ..shape };
        let start_up = median_run(runs, start_up_shape, || {
            device_run(&image_arg, start_up_shape)
        });
        let printed = median_run(runs, shape, || device_run(&image_arg, shape));
        let what = shape.describe();
        row(&format!("native writer, {what}"), shape, native, native);
        row(
            &format!("cargo gpurun run print-throughput, {what} (host backend)"),
            shape,
            printed,
            native,
        );
        println!(
            "| same, --bytes 0 (start-up, launch, exit) | 0 | - | {:.1} ms | - | - |",
            ms(start_up)
        );
        match printed.checked_sub(start_up).filter(|d| !d.is_zero()) {
            Some(printing) => println!(
                "| same, printing only (time minus start-up) | {} | {} | {:.1} ms | {:.3} | - |",
                shape.bytes,
                shape.line_bytes,
                ms(printing),
                mb_per_s(shape.bytes, printing)
            ),
            None => println!(
                "| same, printing only | {} | - | below start-up noise | - | - |",
                shape.bytes
            ),
        }
    }
}

/// `cargo gpurun run` of the fixture on the host backend in `shape`.
fn device_run(image: &str, shape: Shape) -> Command {
    let numbers = [
        shape.threads_per_block,
        shape.blocks,
        shape.bytes,
        shape.line_bytes,
    ]
    .map(|n| n.to_string());
    let [threads, blocks, bytes, line_bytes] = numbers.each_ref().map(String::as_str);
    gpurun(&[
        "run",
        "--backend",
        "host",
        "--threads",
        threads,
        "--blocks",
        blocks,
        image,
        "--",
        "--bytes",
        bytes,
        "--line-bytes",
        line_bytes,
    ])
}

fn row(what: &str, shape: Shape, took: Duration, native: Duration) {
    println!(
        "| {what} | {} | {} | {:.1} ms | {:.3} | {:.1}x |",
        shape.bytes,
        shape.line_bytes,
        ms(took),
        mb_per_s(shape.bytes, took),
        ratio(took, native)
    );
}

fn mb_per_s(bytes: u64, took: Duration) -> f64 {
    bytes as f64 / took.as_secs_f64() / 1e6
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
}

/// Median wall time of `runs` runs of `command()`, each of which must succeed and print
/// exactly the fixture's lines for `shape`.
fn median_run(runs: usize, shape: Shape, mut command: impl FnMut() -> Command) -> Duration {
    let mut times: Vec<Duration> = (0..runs.max(1))
        .map(|_| {
            let mut command = command();
            command.stdin(Stdio::null());
            let started = Instant::now();
            let output = command
                .output()
                .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
            let took = started.elapsed();
            check(&output, shape);
            took
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn check(output: &Output, shape: Shape) {
    assert!(
        output.status.success(),
        "print run failed:\n{}",
        describe(output)
    );
    if let Err(problem) = check_lines(&output.stdout, shape) {
        panic!(
            "print output wrong ({problem}); stderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Checks that `stdout` holds exactly the fixture's lines (see fixtures/print-throughput): every
/// line number below `bytes / line_bytes` once, each line whole, from thread `number % threads`.
fn check_lines(stdout: &[u8], shape: Shape) -> Result<(), String> {
    if stdout.len() as u64 != shape.bytes {
        return Err(format!(
            "{} bytes arrived, not {}",
            stdout.len(),
            shape.bytes
        ));
    }
    let count = shape.bytes / shape.line_bytes;
    let mut seen = vec![false; count as usize];
    for (at, line) in stdout.split_inclusive(|&b| b == b'\n').enumerate() {
        let (thread, number) = parse_line(line, shape.line_bytes)
            .ok_or_else(|| format!("output line {at} is malformed: {line:?}"))?;
        let slot = seen
            .get_mut(number as usize)
            .ok_or_else(|| format!("line number {number} is out of range"))?;
        if std::mem::replace(slot, true) {
            return Err(format!("line {number} arrived twice"));
        }
        if thread != number % shape.threads() {
            return Err(format!("line {number} came from thread {thread}"));
        }
    }
    match seen.iter().position(|&arrived| !arrived) {
        Some(missing) => Err(format!("line {missing} is missing")),
        None => Ok(()),
    }
}

/// `(thread, number)` of `t<6 digits> n<10 digits> <dots>\n`, `line_bytes` long.
fn parse_line(line: &[u8], line_bytes: u64) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(line).ok()?;
    if text.len() as u64 != line_bytes {
        return None;
    }
    let body = text.strip_suffix('\n')?;
    let (thread, rest) = body.strip_prefix('t')?.split_at_checked(6)?;
    let (number, dots) = rest.strip_prefix(" n")?.split_at_checked(10)?;
    let dots = dots.strip_prefix(' ')?;
    let digits = |field: &str| {
        field
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| field.parse().ok())
            .flatten()
    };
    dots.bytes()
        .all(|b| b == b'.')
        .then_some(())
        .and(Some((digits(thread)?, digits(number)?)))
}

/// The native baseline: the fixture's lines, one `println!` (one write) each, from `THREADS` OS
/// threads that share the lines as the fixture's threads do.
fn native_writer(spec: &str) {
    let numbers: Vec<u64> = spec
        .split(' ')
        .map(|part| part.parse().expect("THREADS BYTES LINE_BYTES"))
        .collect();
    let [threads, bytes, line_bytes] = numbers[..] else {
        panic!("{NATIVE_WRITER_VAR} must be `THREADS BYTES LINE_BYTES`, not `{spec}`");
    };
    let lines = bytes / line_bytes;
    // `t000000 n0000000000 ` and the newline are 21 bytes; dots fill the rest.
    let fill = ".".repeat(line_bytes.saturating_sub(21) as usize);
    let print = |thread: u64| {
        for line in (thread..lines).step_by(threads as usize) {
            println!("t{thread:06} n{line:010} {fill}");
        }
    };
    if threads == 1 {
        print(0);
    } else {
        std::thread::scope(|scope| {
            for thread in 0..threads {
                scope.spawn(move || print(thread));
            }
        });
    }
}
