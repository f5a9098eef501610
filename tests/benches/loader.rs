//! `cargo gpurun run` of the hello fixture on the host backend against the same program built
//! as a native binary, measured in the same run. `cargo bench -p gpurun-e2e --bench loader`.

use gpurun_e2e::{bench_runs, binary, gpurun, host_image, median_time, ms, own_binary, ratio};
use std::process::Command;

fn main() {
    let runs = bench_runs(21);
    let image = host_image("hello");
    let _ = binary();
    let native = own_binary("native-hello");
    let native_time = median_time(runs, || Command::new(&native));
    let image_arg = image.to_string_lossy().into_owned();
    let one = median_time(runs, || gpurun(&["run", &image_arg]));
    let many = median_time(runs, || gpurun(&["run", "--threads", "256", &image_arg]));
    println!("loader benchmark (median of {runs} runs, wall time)");
    println!("| what | time | vs native |");
    println!("| --- | ---: | ---: |");
    println!(
        "| native binary, 1 line | {:.2} ms | 1.0x |",
        ms(native_time)
    );
    println!(
        "| cargo gpurun run hello, 1 thread (host backend) | {:.2} ms | {:.1}x |",
        ms(one),
        ratio(one, native_time)
    );
    println!(
        "| cargo gpurun run hello, 256 threads (host backend) | {:.2} ms | {:.1}x |",
        ms(many),
        ratio(many, native_time)
    );
}
