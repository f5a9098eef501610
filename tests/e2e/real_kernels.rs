//! `fixtures/real-kernels` on the host emulation with warps of 32 and 64 lanes: each kernel
//! (tiled matrix product in shared memory, block reduction over warp reductions, shared and global
//! atomic histograms, block-wide scan, ballot-based compaction) launched through `gpurun-test`
//! on several sizes and compared with its CPU reference (`gpurun_e2e::real_kernels`, which the
//! GPU check's `real-kernels-check` program runs on a GPU).

use gpurun_e2e::real_kernels::{self, Check};
use gpurun_e2e::{describe, fixtures_dir, load_on_host, package_binary, repo_root, text};

const FIXTURE: &str = "real-kernels";

/// Runs the check of `kernel` with lane sizes 32 and 64.
fn check_with_both_lane_sizes(kernel: &str) {
    let (_, check): &(&str, Check) = real_kernels::CHECKS
        .iter()
        .find(|(name, _)| *name == kernel)
        .unwrap_or_else(|| panic!("no check for {kernel}"));
    for lane_size in [32, 64] {
        if let Err(problem) = check(&load_on_host(FIXTURE, lane_size)) {
            panic!("{kernel}, lane size {lane_size}: {problem}");
        }
    }
}

#[test]
fn tiled_matrix_product_matches_the_cpu() {
    check_with_both_lane_sizes("matmul_tiled");
}

#[test]
fn block_reduction_matches_the_cpu() {
    check_with_both_lane_sizes("block_sum");
}

#[test]
fn histogram_with_shared_and_global_atomics_matches_the_cpu() {
    check_with_both_lane_sizes("histogram");
}

#[test]
fn float_weighted_histogram_matches_the_cpu() {
    check_with_both_lane_sizes("weighted_histogram");
}

#[test]
fn block_wide_inclusive_scan_matches_the_cpu() {
    check_with_both_lane_sizes("inclusive_scan");
}

#[test]
fn ballot_compaction_keeps_each_blocks_order() {
    check_with_both_lane_sizes("compact_above");
}

/// The compaction check itself refuses what a wrong kernel would produce.
#[test]
fn the_compaction_check_catches_misplaced_elements() {
    let values = [5, -1, 7, 9, -3, 2];
    // Blocks of 2: indices 0 | 2, 3 | 5 kept.
    let good = real_kernels::check_compaction(&values, 0, 2, &[7, 9, 5, 2], &[2, 3, 0, 5]);
    assert_eq!(good, Ok(()));
    let swapped = real_kernels::check_compaction(&values, 0, 2, &[9, 7, 5, 2], &[3, 2, 0, 5]);
    assert!(swapped.unwrap_err().contains("index 2 comes after index 3"));
    let split = real_kernels::check_compaction(&values, 0, 2, &[7, 5, 9, 2], &[2, 0, 3, 5]);
    assert!(split
        .unwrap_err()
        .contains("block 1's elements are not together"));
    let lost = real_kernels::check_compaction(&values, 0, 2, &[7, 9, 5], &[2, 3, 0]);
    assert_eq!(lost.unwrap_err(), "3 kept, not 4");
    let wrong_value = real_kernels::check_compaction(&values, 0, 2, &[7, 9, 6, 2], &[2, 3, 0, 5]);
    assert!(wrong_value.unwrap_err().contains("kept[2] = 6"));
}

/// The GPU check's real-kernels row (`tests/src/bin/real-kernels-check.rs`), here on the host
/// emulation: every kernel matches, one line each.
#[test]
fn real_kernels_check_program_passes_on_the_host_emulation() {
    let program = package_binary("gpurun-e2e", "real-kernels-check");
    let output = std::process::Command::new(program)
        .arg(gpurun_e2e::host_image(FIXTURE))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let stdout = text(&output.stdout);
    for (kernel, _) in real_kernels::CHECKS {
        assert!(
            stdout.contains(&format!("real-kernels-check: {kernel} ok (")),
            "{}",
            describe(&output)
        );
    }
    assert!(
        stdout.contains("real-kernels-check: all 6 kernels match the CPU"),
        "{}",
        describe(&output)
    );
}

/// The item of `source` that starts at the line starting with `first`, through its closing `}`
/// at the start of a line.
fn item<'a>(source: &'a str, first: &str) -> &'a str {
    let start = source
        .find(&format!("\n{first}"))
        .unwrap_or_else(|| panic!("no `{first}` in the fixture"))
        + 1;
    let end = source[start..]
        .find("\n}\n")
        .unwrap_or_else(|| panic!("`{first}` does not end"))
        + start
        + 2;
    &source[start..end]
}

/// The README's "Writing kernels" example is the fixture's block reduction, as it is (so the
/// example compiles and is tested): `block_sum`, indented as a code block.
#[test]
fn the_readme_quotes_the_block_reduction_as_it_is() {
    let source = std::fs::read_to_string(fixtures_dir().join(FIXTURE).join("src/lib.rs")).unwrap();
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let first = "#[gpurun::kernel(len(x = n, sums = blocks))]";
    let quoted: String = item(&source, first)
        .lines()
        .map(|line| {
            if line.is_empty() {
                "\n".to_owned()
            } else {
                format!("    {line}\n")
            }
        })
        .collect();
    assert!(
        readme.contains(&quoted),
        "README.md does not quote the fixture's `{first}` as it is:\n{quoted}"
    );
}
