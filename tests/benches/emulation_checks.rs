//! What the host emulation's memory checks cost, as ratios measured in one run: the kernels of
//! `fixtures/real-kernels` (the `real-kernels-check` program: every kernel on several sizes,
//! checked against the CPU) and the 1000 trivial tests of `fixtures/many-tests` (`cargo gpurun
//! run`), each on its image built for the checks (the default) and on its plain one
//! (`--emulation-checks off`), with one seed for both. The budgets: at most 3x on the
//! real kernels, 1.5x on the trivial tests.
//!
//! `cargo bench -p gpurun-e2e --bench emulation_checks` (`GPURUN_BENCH_RUNS`, default 5).

use gpurun_e2e::{
    bench_runs, binary, gpurun, host_images, median_time, ms, package_binary, plain_release_images,
    ratio,
};
use std::path::PathBuf;
use std::process::Command;

/// The seed every run uses, so that both images poison, order and yield alike.
const SEED: &str = "1";

fn main() {
    let runs = bench_runs(5);
    let _ = binary();
    let checked_dir = host_images();
    let plain = plain_release_images(&["real-kernels", "many-tests"], &[]);
    let plain_of = |package: &str| {
        plain
            .iter()
            .find(|(name, _)| name == package)
            .map(|(_, path)| path.clone())
            .unwrap_or_else(|| panic!("no plain image of {package}"))
    };
    let checked_of = |stem: &str| checked_dir.join(format!("lib{stem}.so"));
    let check = package_binary("gpurun-e2e", "real-kernels-check");
    let real_kernels = |image: PathBuf| {
        let check = check.clone();
        move || {
            let mut command = Command::new(&check);
            command.arg(&image).env("GPURUN_EMULATION_SEED", SEED);
            command
        }
    };
    let many_tests = |image: PathBuf| {
        move || {
            gpurun(&[
                "run",
                "--emulation-seed",
                SEED,
                &image.to_string_lossy(),
                "--test-threads",
                "2",
                "-q",
            ])
        }
    };
    let rows = [
        (
            "fixtures/real-kernels, every kernel (real-kernels-check)",
            3.0,
            median_time(runs, real_kernels(plain_of("real-kernels"))),
            median_time(runs, real_kernels(checked_of("real_kernels"))),
        ),
        (
            "fixtures/many-tests, 1000 trivial tests (`run`, 2 test threads)",
            1.5,
            median_time(runs, many_tests(plain_of("many-tests"))),
            median_time(runs, many_tests(checked_of("many_tests"))),
        ),
    ];
    println!(
        "host emulation memory checks: checked against plain images (median of {runs} runs, \
         release builds, after the build)"
    );
    println!("| what | plain | checked | checked / plain | budget |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (what, budget, plain, checked) in rows {
        let times = ratio(checked, plain);
        let verdict = if times <= budget { "within" } else { "OVER" };
        println!(
            "| {what} | {:.1} ms | {:.1} ms | {times:.2}x | {verdict} {budget:.1}x |",
            ms(plain),
            ms(checked)
        );
    }
}
