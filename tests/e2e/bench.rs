//! `#[gpurun::bench]` end to end on the host emulation (`fixtures/benches`): benchmarks run once
//! as tests without `--bench`; `cargo gpurun bench` measures each, prints libtest's bench line
//! and JSON, saves and compares baselines; and a benchmark slowed on purpose is flagged while
//! an unchanged one is not, run after run on a loaded machine. Verdicts and formats are
//! asserted, never a time.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;

use gpurun_e2e::{
    assert_test_lines, describe, fixtures_dir, gpurun, host_images, json_lines,
    plain_release_images, text, Hogs,
};

use crate::host_app::{host_crate_cargo, output_of, result_line};

const FIXTURE: &str = "benches";

/// Every benchmark of the fixture, in name order.
const BENCHES: [&str; 6] = ["copy", "empty", "matmul", "round_trip", "spin", "steady"];

/// Short measurements: the host emulation's numbers are not what these tests are about.
const QUICK: [&str; 4] = ["--warm-up-time", "0.05", "--measurement-time", "0.2"];

/// Held while a test builds the fixture in release mode or runs the image that build left in
/// `fixtures/target/release`, which the other test's builds (with other features) overwrite.
static RELEASE_BUILD: Mutex<()> = Mutex::new(());

/// `cargo gpurun test` runs each benchmark as a test of one iteration: it passes, and nothing
/// is measured.
#[test]
fn benchmarks_run_once_as_tests_without_bench() {
    host_images();
    let output = gpurun(&["test", "-p", FIXTURE, "--target", "host"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let results: Vec<(&str, &str)> = BENCHES.iter().map(|name| (*name, "ok")).collect();
    assert_test_lines(&output, &results);
    let stdout = text(&output.stdout);
    assert!(
        stdout.contains("test result: ok. 6 passed; 0 failed; 0 ignored; 0 measured;"),
        "{}",
        describe(&output)
    );
}

/// `cargo gpurun bench -p benches --target host -- ARGS` (release build), run to its end.
fn bench(args: &[&str]) -> Output {
    let mut all = vec!["bench", "-p", FIXTURE, "--target", "host", "--"];
    all.extend_from_slice(&QUICK);
    all.extend_from_slice(args);
    let _build = RELEASE_BUILD.lock().unwrap_or_else(|e| e.into_inner());
    gpurun(&all).output().unwrap()
}

/// Checks libtest's bench line of `name` on `stdout` (`test NAME ... bench: N ns/iter (+/- M)`,
/// the name padded to the longest benchmark's) and returns what follows the numbers.
#[track_caller]
fn bench_line<'s>(stdout: &'s str, name: &str) -> &'s str {
    let start = format!("test {name:<10} ... bench: ");
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix(&start))
        .unwrap_or_else(|| panic!("no bench line for {name}:\n{stdout}"));
    let number = |text: &str| {
        let digits = text.replace(',', "");
        digits.parse::<f64>().is_ok() && text.contains('.')
    };
    let (median, rest) = line
        .trim_start()
        .split_once(" ns/iter (+/- ")
        .unwrap_or_else(|| panic!("{line}"));
    let (deviation, rest) = rest.split_once(')').unwrap_or_else(|| panic!("{line}"));
    assert!(number(median) && number(deviation), "{line}");
    rest
}

/// `cargo gpurun bench` measures every benchmark of the suite in libtest's format, with the
/// rate of those that declare their throughput; a run saved as a baseline is what the next one
/// compares with, in pretty output and in libtest's JSON events.
#[test]
fn bench_measures_each_benchmark_and_compares_with_a_saved_baseline() {
    let output = bench(&["--save-baseline", "e2e-cli"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stdout = text(&output.stdout);
    assert!(bench_line(&stdout, "copy").ends_with(" MB/s"), "{stdout}");
    // A declared rate is printed as libtest prints MB/s, in whole units: none below one.
    let matmul = bench_line(&stdout, "matmul");
    assert!(
        matmul.is_empty() || (matmul.starts_with(" = ") && matmul.ends_with(" Melem/s")),
        "{stdout}"
    );
    for name in ["empty", "round_trip", "spin", "steady"] {
        assert_eq!(bench_line(&stdout, name), "", "{stdout}");
    }
    assert!(
        stdout.contains(
            "test result: ok. 0 passed; 0 failed; 0 ignored; 6 measured; 0 filtered out;"
        ),
        "{}",
        describe(&output)
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("Running unittests src/lib.rs") && stderr.contains("release"),
        "{stderr}"
    );
    let saved = fixtures_dir().join("target/gpurun-bench/e2e-cli.json");
    assert!(saved.is_file(), "{}", saved.display());
    let output = bench(&[
        "--baseline",
        "e2e-cli",
        "copy",
        "--format",
        "json",
        "-Zunstable-options",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let events: Vec<serde_json::Value> = json_lines(&text(&output.stdout)).collect();
    let copy = events
        .iter()
        .find(|event| event["type"] == "bench")
        .unwrap_or_else(|| panic!("{}", describe(&output)));
    assert_eq!(copy["name"], "copy");
    assert!(
        copy["median"].is_f64() && copy["deviation"].is_f64(),
        "{copy}"
    );
    assert!(copy["mib_per_second"].is_u64(), "{copy}");
    assert_eq!(copy["timer"], "host emulation thread CPU time");
    assert_eq!(copy["baseline"], "e2e-cli");
    let verdicts = ["regressed", "improved", "within_noise", "no_change"];
    assert!(verdicts.iter().any(|v| copy["verdict"] == *v), "{copy}");
    let last = events.last().unwrap();
    assert_eq!(
        (last["measured"].as_u64(), last["filtered_out"].as_u64()),
        (Some(1), Some(5))
    );
}

/// Builds the fixture's host image in release mode with `features` and copies it to
/// `dir/libbenches.so` (one name for both builds: a test image's name is its suite, under which
/// its benchmarks are saved).
fn release_image(features: &[&str], dir: &Path) -> PathBuf {
    let _build = RELEASE_BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let [(_, built)] = &plain_release_images(&[FIXTURE], features)[..] else {
        unreachable!("one package, one image");
    };
    std::fs::create_dir_all(dir).unwrap();
    let image = dir.join("libbenches.so");
    std::fs::copy(built, &image).unwrap();
    image
}

/// The verdict sentence under benchmark `name`'s line, if it was compared.
fn verdict<'s>(stdout: &'s str, name: &str) -> Option<&'s str> {
    let mut lines = stdout.lines();
    lines.find(|line| line.starts_with(&format!("test {name} ")))?;
    let change = lines.next()?;
    change.trim_start().starts_with("change:").then_some(())?;
    lines.next().map(str::trim)
}

/// A baseline saved with `spin` and `steady` as they are, then the same run with `spin` 32
/// times slower (the `slow` feature): `spin` is flagged as regressed and `steady` is not, in
/// each of four rounds run beside CPU hogs (each round is two runs: ten rounds held CI's two
/// cores for half a minute). The noise threshold suits a loaded 2-core machine:
/// there the host emulation's wall time follows the share of a core the benchmark gets, which
/// moved an unchanged benchmark's median up to threefold between two runs a second apart
/// (other tests start and stop beside it). So a change counts only when its whole 95% interval
/// is 300% beyond the baseline: a 32-fold slowdown clears that even when the load swings
/// eightfold against it, and an unchanged benchmark reaches it only with a fourfold swing.
#[test]
fn a_slowed_benchmark_is_flagged_and_an_unchanged_one_is_not() {
    host_images();
    let dir = std::env::temp_dir().join(format!("gpurun-e2e-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let unchanged = release_image(&[], &dir.join("unchanged"));
    let slowed = release_image(&["--features", "slow"], &dir.join("slowed"));
    let baselines = dir.join("baselines");
    let run = |image: &Path, baseline: &[&str]| {
        let mut args = vec!["run", image.to_str().unwrap(), "--bench"];
        args.extend_from_slice(&QUICK);
        args.extend_from_slice(&["--noise-threshold", "3", "spin", "steady"]);
        args.extend_from_slice(baseline);
        let output = gpurun(&args)
            .env("CARGO_TARGET_DIR", &baselines)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
        text(&output.stdout)
    };
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let _hogs = Hogs::start(2 * cores);
    for round in 0..4 {
        // Saved right before each comparison, so both runs see the same load.
        run(&unchanged, &["--save-baseline", "main"]);
        let stdout = run(&slowed, &["--baseline", "main"]);
        assert_eq!(
            verdict(&stdout, "spin      "),
            Some("Performance has regressed."),
            "round {round}:\n{stdout}"
        );
        let steady = verdict(&stdout, "steady");
        assert!(
            matches!(
                steady,
                Some("No change in performance detected." | "Change within noise threshold.")
            ),
            "round {round}:\n{stdout}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A host crate's `cargo bench` through gpurun-test (`fixtures/host-app`'s `benches/launch.rs`):
/// the benches fixture's device benchmarks as trials, measured in workers, and a host-driven
/// saxpy timed on the device launch by launch, in libtest-mimic's bench line; under `cargo
/// test` each runs once, as a test. (`-- --bench` on the test build is what `cargo bench`
/// passes, without its release build of this workspace.)
#[test]
fn a_host_crates_bench_target_measures_device_benchmarks_and_timed_launches() {
    let manifest = fixtures_dir().join("host-app/Cargo.toml");
    let skip = [
        "--skip",
        "matmul",
        "--skip",
        "round_trip",
        "--skip",
        "spin",
        "--skip",
        "steady",
    ];
    let run = |bench: bool| {
        let mut rest = vec!["--bench", "launch", "--"];
        if bench {
            rest.extend_from_slice(&["--bench"]);
        }
        rest.extend_from_slice(&skip);
        let output = output_of(host_crate_cargo(&manifest, &["test"], &rest));
        assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
        text(&output.stdout)
    };
    let once = run(false);
    for trial in ["copy", "empty", "saxpy_launch"] {
        let line = result_line(&once, trial).unwrap_or_else(|| panic!("{trial}:\n{once}"));
        assert!(line.ends_with(" ok"), "{line}");
    }
    let measured = run(true);
    for trial in ["copy", "empty", "saxpy_launch"] {
        let line = result_line(&measured, trial).unwrap_or_else(|| panic!("{trial}:\n{measured}"));
        let (_, numbers) = line
            .split_once(" ... bench: ")
            .unwrap_or_else(|| panic!("{line}"));
        assert!(
            numbers.trim_start().contains(" ns/iter (+/- ") && numbers.ends_with(')'),
            "{line}"
        );
    }
    assert!(
        measured
            .contains("test result: ok. 0 passed; 0 failed; 0 ignored; 3 measured; 4 filtered out"),
        "{measured}"
    );
}
