//! `fixtures/wrong-kernels` on the host emulation, with lanes of 32 and 64: each wrong kernel,
//! run alone, fails with the report of its defect class, pointing at the kernel's lines (found
//! by the `// site:` comments of the fixture's source); each fixed kernel passes.

use gpurun_e2e::{
    assert_contains, assert_passes_at_lane_sizes_1_32_and_64, describe, fixtures_dir, host_images,
    load_on_host, run_failing_test_alone, run_fixture, text,
};
use gpurun_test::{Error, LaunchShape};

const FIXTURE: &str = "wrong-kernels";

/// `wrong-kernels/src/lib.rs:LINE:` of the line that carries `// site: MARK`.
fn site(mark: &str) -> String {
    let source = std::fs::read_to_string(fixtures_dir().join(FIXTURE).join("src/lib.rs"))
        .expect("the fixture's source");
    let comment = format!("// site: {mark}");
    let line = source
        .lines()
        .position(|line| line.trim_end().ends_with(&comment))
        .unwrap_or_else(|| panic!("no `{comment}` in the fixture"));
    format!("{FIXTURE}/src/lib.rs:{}:", line + 1)
}

/// The location of the first panic report: `FILE:LINE:COL` after `panicked at`.
fn panicked_at(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|line| line.split(" panicked at ").nth(1))
        .unwrap_or("<no panic>")
}

/// Runs the ignored test `name` alone with `lane_size` (see `run_failing_test_alone`): its first
/// panic must be at `line` (a `site`), and its stdout must contain each of `parts`.
fn assert_fails_at(lane_size: &str, name: &str, line: &str, parts: &[&str]) {
    let (stdout, output) = run_failing_test_alone(FIXTURE, lane_size, name);
    assert!(
        panicked_at(&stdout).starts_with(line),
        "{}",
        describe(&output)
    );
    for part in parts {
        assert_contains(&stdout, part, &output);
    }
}

/// `assert_fails_at` with lanes of 32 and of 64, at the line marked `// site: MARK`.
fn assert_fails_at_site(name: &str, mark: &str, parts: &[&str]) {
    let line = site(mark);
    for lane_size in ["32", "64"] {
        assert_fails_at(lane_size, name, &line, parts);
    }
}

#[test]
fn fixed_kernels_pass_with_lane_sizes_1_32_and_64() {
    assert_passes_at_lane_sizes_1_32_and_64(
        FIXTURE,
        "test result: ok. 7 passed; 0 failed; 7 ignored;",
    );
}

#[test]
fn a_shuffle_from_two_call_sites_fails_naming_both_lines() {
    host_images();
    let (even, odd) = (
        site("divergent_shuffle even"),
        site("divergent_shuffle odd"),
    );
    for (lane_size, mask) in [("32", "0xffffffff"), ("64", "0xffffffffffffffff")] {
        let (stdout, output) = run_failing_test_alone(FIXTURE, lane_size, "divergent_shuffle");
        // Each lane fails at its own line, naming where the others wait.
        let at = panicked_at(&stdout);
        assert!(at.starts_with(&even) || at.starts_with(&odd), "{at}");
        let first = format!(
            "synccheck: warp::shuffle_xor with mask {mask} at {}",
            &at[..at.len() - 1]
        );
        assert_contains(&stdout, &first, &output);
        let other = if at.starts_with(&even) { &odd } else { &even };
        assert_contains(
            &stdout,
            &format!("wait at warp::shuffle_xor with mask {mask} at {other}"),
            &output,
        );
        assert_contains(&stdout, "from the same call site", &output);
    }
}

/// Threads of a block at barriers of two lines: the report names both lines.
fn assert_divergent_barrier(name: &str, first: &str, second: &str) {
    let (first, second) = (site(first), site(second));
    for lane_size in ["32", "64"] {
        let (stdout, output) = run_failing_test_alone(FIXTURE, lane_size, name);
        let at = panicked_at(&stdout);
        assert!(at.starts_with(&first) || at.starts_with(&second), "{at}");
        assert_contains(
            &stdout,
            "synccheck: divergent barrier in block (0, 0, 0): thread",
            &output,
        );
        for line in [&first, &second] {
            assert_contains(&stdout, &format!("at gpurun::barrier at {line}"), &output);
        }
    }
}

#[test]
fn barriers_on_both_sides_of_a_branch_fail_naming_both_lines() {
    host_images();
    assert_divergent_barrier(
        "divergent_barrier",
        "divergent_barrier low",
        "divergent_barrier high",
    );
}

#[test]
fn a_barrier_in_a_loop_of_per_thread_trips_fails_naming_both_lines() {
    host_images();
    assert_divergent_barrier(
        "barrier_in_a_variable_trip_loop",
        "variable_trip loop",
        "variable_trip after",
    );
}

#[test]
fn a_full_mask_over_a_partial_warp_fails_naming_the_missing_lanes() {
    host_images();
    let line = site("partial_warp shuffle");
    // 48 threads: warps of 32 leave warp 1 lanes 0-15; a warp of 64 has lanes 0-47.
    for (lane_size, mask, warp, missing, present) in [
        ("32", "0xffffffff", 1, "lanes 16-31", "lanes 0-15"),
        ("64", "0xffffffffffffffff", 0, "lanes 48-63", "lanes 0-47"),
    ] {
        assert_fails_at(
            lane_size,
            "shuffle_over_a_partial_warp",
            &line,
            &[
                &format!("synccheck: warp::shuffle_down with mask {mask} at {line}"),
                &format!(
                    "names {missing}, which warp {warp} of block (0, 0, 0) does not have: the \
                     block's 48 threads leave it {present} (use warp::present()"
                ),
            ],
        );
    }
}

#[test]
fn a_histogram_in_unwritten_shared_memory_fails_at_the_first_count() {
    host_images();
    assert_fails_at_site(
        "uninitialised_shared_histogram",
        "histogram add",
        &[
            "initcheck: uninitialised atomic read-modify-write of 4 bytes of shared memory at \
             offset ",
            "by block (0, 0, 0), thread (",
            "(kernel `__gpurun_test_uninitialised_shared_histogram_",
            "no thread of the block wrote them since the block began",
        ],
    );
}

#[test]
fn a_write_past_the_launchs_shared_memory_fails_naming_the_offset() {
    host_images();
    assert_fails_at_site(
        "out_of_bounds_shared_write",
        "shared oob write",
        &[
            "memcheck: invalid write of 4 bytes at 0x",
            "by block (0, 0, 0), thread (63, 0, 0)",
            "it reaches shared memory at offset 256, but the launch gives each block 256 bytes \
             of it",
            // Only the last thread wrote out of bounds.
            "thread (63,0,0)) panicked",
        ],
    );
}

/// A second live load of an image in one process is of a private copy (the dynamic loader would
/// share the first one's globals), as in a worker's other slots; its reports still name the
/// kernel's lines, read from the file it copies.
#[test]
fn a_second_load_of_an_image_names_the_lines_too() {
    host_images();
    let first = load_on_host(FIXTURE, 32);
    let second = load_on_host(FIXTURE, 32);
    let n = 64usize;
    let mut out = second.buffer::<u32>(n).unwrap();
    let error = second
        .launch(
            "shift_right",
            LaunchShape::blocks(2).threads(32),
            (&mut out, n),
        )
        .expect_err("a write past the buffer passed");
    let Error::Panicked(panic) = &error else {
        panic!("not a device panic: {error}");
    };
    let at = format!("{}:{}:", panic.report.file, panic.report.line);
    assert_eq!(at, site("buffer oob write"), "{error}");
    drop(first);
}

/// The panic report of a launch that failed with a device panic.
fn device_panic(error: &Error) -> &gpurun_harness::PanicReport {
    match error {
        Error::Panicked(panic) => &panic.report,
        _ => panic!("not a device panic: {error}"),
    }
}

#[test]
fn a_kernel_writing_past_its_buffer_fails_the_launch_naming_the_line() {
    host_images();
    let line = site("buffer oob write");
    for lane_size in [32, 64] {
        let gpu = load_on_host(FIXTURE, lane_size);
        let n = 64usize;
        let mut out = gpu.buffer::<u32>(n).unwrap();
        let shape = LaunchShape::blocks(2).threads(32);
        let error = gpu
            .launch("shift_right", shape, (&mut out, n))
            .expect_err("a write past the buffer passed");
        let report = device_panic(&error);
        let at = format!("{}:{}:", report.file, report.line);
        assert_eq!(at, line, "{error}");
        assert_eq!(
            (report.block, report.thread),
            ([1, 0, 0], [31, 0, 0]),
            "{error}"
        );
        assert!(
            report
                .message
                .starts_with("memcheck: invalid write of 4 bytes at 0x")
                && report
                    .message
                    .contains("it is 0 bytes after the end of the 256-byte device buffer at 0x"),
            "{error}"
        );
        let mut fixed = gpu.buffer::<u32>(n).unwrap();
        gpu.launch("shift_right_fixed", shape, (&mut fixed, n))
            .unwrap();
        let expected: Vec<u32> = (0..n as u32)
            .map(|i| (i + n as u32 - 1) % n as u32)
            .collect();
        assert_eq!(fixed.to_vec().unwrap(), expected);
    }
}

#[test]
fn a_block_scope_counter_shared_by_blocks_races() {
    host_images();
    let line = site("block scope");
    for lane_size in [32, 64] {
        let gpu = load_on_host(FIXTURE, lane_size);
        let shape = LaunchShape::blocks(3).threads(64);
        let mut total = gpu.buffer::<u32>(1).unwrap();
        let error = gpu
            .launch("count_at_block_scope", shape, (&mut total,))
            .expect_err("blocks sharing a block-scope counter passed");
        let report = device_panic(&error);
        assert_eq!(format!("{}:{}:", report.file, report.line), line, "{error}");
        for part in [
            "racecheck: data race on the 4-byte device buffer at 0x",
            "block-scope atomic read-modify-write",
            "atomic only among the threads of its block",
            "use Scope::Device",
        ] {
            assert!(report.message.contains(part), "{part}: {error}");
        }
        let mut fixed = gpu.buffer::<u32>(1).unwrap();
        gpu.launch("count_at_block_scope_fixed", shape, (&mut fixed,))
            .unwrap();
        assert_eq!(fixed.to_vec().unwrap(), [3 * 64]);
    }
}

/// The seeds the race cases run under: the checks find races by happens-before, so every seed
/// must report them (the seed changes the poison, the block order and where threads yield).
const RACE_SEEDS: std::ops::Range<u64> = 0..20;

/// Asserts a racecheck report in `text` between the lines `first` and `second`: it is at one of
/// them, and the earlier access it names is at one of them too (two blocks' writes of one line
/// race with each other as much as a write with the other's read: which pair is seen first
/// depends on how the threads interleave).
fn assert_race_between(text: &str, at: &str, (first, second): (&str, &str), context: &str) {
    assert!(
        at.starts_with(first) || at.starts_with(second),
        "the report is at {at}, not at {first} or {second}\n{context}"
    );
    let earlier = text
        .split_once("an earlier ")
        .and_then(|(_, rest)| rest.split_once(" at "))
        .map(|(_, location)| location)
        .unwrap_or_else(|| panic!("no earlier access named\n{context}"));
    assert!(
        earlier.starts_with(first) || earlier.starts_with(second),
        "the earlier access is at {earlier}, not at {first} or {second}\n{context}"
    );
}

#[test]
fn a_reduction_missing_a_barrier_races_under_every_seed() {
    host_images();
    let (read, write) = (site("reduction read"), site("reduction write"));
    let runs = RACE_SEEDS
        .map(|seed| ("32", seed))
        .chain([("64", 0), ("64", 7), ("64", 19)]);
    for (lane_size, seed) in runs {
        let seed_text = seed.to_string();
        let output = run_fixture(
            &[
                "--lane-size",
                lane_size,
                "--timeout",
                "120",
                "--emulation-seed",
                &seed_text,
            ],
            FIXTURE,
            &["--ignored", "--exact", "reduction_missing_a_barrier"],
        )
        .output()
        .unwrap();
        let stdout = text(&output.stdout);
        let context = format!("lane size {lane_size}, seed {seed}\n{}", describe(&output));
        assert_eq!(output.status.code(), Some(101), "{context}");
        assert!(
            stdout.contains("racecheck: data race on shared memory at offset "),
            "{context}"
        );
        assert_race_between(&stdout, panicked_at(&stdout), (&read, &write), &context);
        assert!(
            stdout.contains(&format!("emulation seed {seed})"))
                && stdout.contains(&format!("note: host emulation seed {seed} (")),
            "{context}"
        );
    }
}

#[test]
fn blocks_adding_to_one_buffer_word_race_under_every_seed() {
    host_images();
    let (read, write) = (site("global read"), site("global write"));
    let program = gpurun_e2e::package_binary("gpurun-e2e", "sum-into-check");
    let runs = RACE_SEEDS
        .map(|seed| ("32", seed))
        .chain([("64", 3), ("64", 11)]);
    for (lane_size, seed) in runs {
        let output = std::process::Command::new(&program)
            .arg(lane_size)
            .env("GPURUN_EMULATION_SEED", seed.to_string())
            .output()
            .unwrap();
        let stdout = text(&output.stdout);
        let context = format!("lane size {lane_size}, seed {seed}\n{}", describe(&output));
        assert!(output.status.success(), "{context}");
        let line = stdout
            .lines()
            .find(|line| line.starts_with("sum_into: "))
            .unwrap_or_else(|| panic!("no sum_into line\n{context}"));
        let at = line
            .split(" at ")
            .nth(1)
            .unwrap_or_else(|| panic!("no location\n{context}"));
        assert_race_between(line, at, (&read, &write), &context);
        assert!(
            line.contains("racecheck: data race on the 4-byte device buffer at 0x")
                && line.contains("they are in different blocks, which nothing orders")
                && line.contains(&format!("emulation seed {seed})")),
            "{context}"
        );
        assert_contains(&stdout, "sum_into_fixed: total [500500]", &output);
    }
}

#[test]
fn lane_size_all_runs_each_test_at_32_and_at_64() {
    let test = |harness: &[&str]| {
        let mut args = vec![
            "test",
            "-p",
            FIXTURE,
            "--target",
            "host",
            "--lane-size",
            "all",
            "--",
        ];
        args.extend_from_slice(harness);
        gpurun_e2e::gpurun(&args).output().unwrap()
    };
    let output = test(&[]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stdout = text(&output.stdout);
    for lanes in ["32", "64"] {
        assert_contains(
            &stdout,
            &format!("test [lanes={lanes}] divergent_shuffle_fixed ... ok"),
            &output,
        );
    }
    assert_contains(
        &stdout,
        "test result: ok. 14 passed; 0 failed; 14 ignored;",
        &output,
    );
    // The label is part of the name: one lane size of one test.
    let output = test(&[
        "--ignored",
        "--exact",
        "[lanes=64] shuffle_over_a_partial_warp",
    ]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    assert_contains(
        &stdout,
        "test result: FAILED. 0 passed; 1 failed; 0 ignored;",
        &output,
    );
    assert_contains(&stdout, "names lanes 48-63, which warp 0", &output);
}

/// With the memory checks off the image is plain, and the histogram that never clears its bins
/// still fails, by the poison in its shared memory rather than by a report.
#[test]
fn without_the_memory_checks_the_poison_still_fails_an_unwritten_read() {
    let output = gpurun_e2e::gpurun(&[
        "test",
        "-p",
        FIXTURE,
        "--target",
        "host",
        "--emulation-checks",
        "off",
        "--",
        "--ignored",
        "--exact",
        "uninitialised_shared_histogram",
    ])
    .output()
    .unwrap();
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    assert!(!stdout.contains("initcheck"), "{}", describe(&output));
    assert_contains(&stdout, "assertion `left == right` failed", &output);
    assert_contains(&stdout, "right: 128", &output);
    // Built plain, apart from the checked images.
    assert_contains(
        &text(&output.stderr),
        "Running unittests src/lib.rs (target/debug/libwrong_kernels.so)",
        &output,
    );
}
