//! `fixtures/wrong-kernels` on the host emulation, with lanes of 32 and 64: each wrong kernel,
//! run alone, fails with the report of its defect class, pointing at the kernel's lines (found
//! by the `// site:` comments of the fixture's source); each fixed kernel passes.

use gpurun_tests::{assert_contains, describe, fixtures_dir, host_images, run_fixture, text};

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

fn summary(stdout: &str) -> &str {
    stdout
        .lines()
        .find(|line| line.starts_with("test result:"))
        .unwrap_or("<no summary>")
}

/// Runs the ignored test `name` alone with `lane_size`; it must fail. Returns its output (stdout).
fn run_wrong(lane_size: &str, name: &str) -> (String, std::process::Output) {
    // A hang would end as a timeout, whose message the callers' checks reject.
    let output = run_fixture(
        &["--lane-size", lane_size, "--timeout", "120"],
        FIXTURE,
        &["--ignored", "--exact", name],
    )
    .output()
    .unwrap();
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    assert!(
        summary(&stdout).starts_with("test result: FAILED. 0 passed; 1 failed;"),
        "{}",
        describe(&output)
    );
    (stdout, output)
}

/// The location of the first panic report: `FILE:LINE:COL` after `panicked at`.
fn panicked_at(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|line| line.split(" panicked at ").nth(1))
        .unwrap_or("<no panic>")
}

#[test]
fn fixed_kernels_pass_with_lane_sizes_1_32_and_64() {
    host_images();
    for lane_size in ["1", "32", "64"] {
        let output = run_fixture(&["--lane-size", lane_size], FIXTURE, &[])
            .output()
            .unwrap();
        assert!(
            output.status.success()
                && summary(&text(&output.stdout))
                    .starts_with("test result: ok. 4 passed; 0 failed; 4 ignored;"),
            "lane size {lane_size}: {}",
            describe(&output)
        );
    }
}

#[test]
fn a_shuffle_from_two_call_sites_fails_naming_both_lines() {
    host_images();
    let (even, odd) = (
        site("divergent_shuffle even"),
        site("divergent_shuffle odd"),
    );
    for (lane_size, mask) in [("32", "0xffffffff"), ("64", "0xffffffffffffffff")] {
        let (stdout, output) = run_wrong(lane_size, "divergent_shuffle");
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
        let (stdout, output) = run_wrong(lane_size, name);
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
        let (stdout, output) = run_wrong(lane_size, "shuffle_over_a_partial_warp");
        assert!(
            panicked_at(&stdout).starts_with(&line),
            "{}",
            describe(&output)
        );
        assert_contains(
            &stdout,
            &format!("synccheck: warp::shuffle_down with mask {mask} at {line}"),
            &output,
        );
        assert_contains(
            &stdout,
            &format!(
                "names {missing}, which warp {warp} of block (0, 0, 0) does not have: the \
                 block's 48 threads leave it {present} (use warp::present()"
            ),
            &output,
        );
    }
}
