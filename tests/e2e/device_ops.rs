//! `fixtures/device-ops` on the host emulation with warps of 1, 32 and 64 lanes: its device
//! tests (warp operations, reductions, scans, `elect` and lane masks against per-lane
//! references, fences and the clock, atomics, math) pass; the two that break the warp rules on
//! purpose fail with a message naming the lanes instead of hanging; and its kernels, launched
//! from here through `gpurun-test`, agree with a CPU reference (atomics from a whole grid, warp
//! sums, ballot-based compaction, reductions and scans over partial warps and scattered masks
//! bit for bit, floats in their documented order, math bit for bit against the `libm` crate).

use gpurun_e2e::{
    assert_contains, assert_passes_at_lane_sizes_1_32_and_64, describe, fixtures_dir, host_images,
    load_on_host, run_failing_test_alone,
};
use gpurun_test::{DeviceCrate, LaunchShape};

const FIXTURE: &str = "device-ops";

/// The device tests that must fail on the host emulation (`#[ignore]`d in the fixture).
const DIVERGED: &str = "diverged_shuffle_fails_naming_the_lanes";
const READS_RETURNED: &str = "shuffle_from_a_returned_lane_fails";

#[test]
fn device_tests_pass_with_lane_sizes_1_32_and_64() {
    assert_passes_at_lane_sizes_1_32_and_64(
        FIXTURE,
        "test result: ok. 24 passed; 0 failed; 2 ignored;",
    );
}

/// Runs the ignored device test `name` alone with `lane_size`; it must fail (see
/// `run_failing_test_alone`).
fn run_failing(lane_size: &str, name: &str) -> (String, std::process::Output) {
    let (stdout, output) = run_failing_test_alone(FIXTURE, lane_size, name);
    // The failure points at the kernel's line, not into gpurun's emulation of the warp.
    assert_contains(&stdout, "panicked at device-ops/src/lib.rs:", &output);
    (stdout, output)
}

#[test]
fn lanes_that_diverge_around_a_shuffle_fail_the_test_naming_them() {
    host_images();
    for lane_size in ["32", "64"] {
        let (stdout, output) = run_failing(lane_size, DIVERGED);
        // The warp's lanes: the block's 32 with either lane size.
        let expected = "can never complete (block (0, 0, 0), warp 0): lanes 0-15 called it, but \
                        lanes 16-31 wait at the block barrier (gpurun::barrier at \
                        device-ops/src/lib.rs:";
        assert_contains(&stdout, expected, &output);
        assert_contains(
            &stdout,
            "synccheck: warp::shuffle_xor with mask 0xffffffff at device-ops/src/lib.rs:",
            &output,
        );
        assert_contains(&stdout, "16 of 32 device threads panicked", &output);
    }
}

#[test]
fn a_shuffle_reading_a_returned_lane_fails_the_test() {
    host_images();
    for lane_size in ["32", "64"] {
        let (stdout, output) = run_failing(lane_size, READS_RETURNED);
        // Which even lane reports first varies; each reads the odd lane above it.
        let line = stdout
            .lines()
            .find(|line| line.starts_with("warp::shuffle on lane "))
            .unwrap_or_else(|| panic!("no shuffle failure:\n{}", describe(&output)));
        let lanes: Vec<u32> = line
            .split(' ')
            .filter_map(|word| word.trim_end_matches(',').parse().ok())
            .collect();
        assert!(
            lanes.len() == 2 && lanes[0].is_multiple_of(2) && lanes[1] == lanes[0] + 1,
            "{line}"
        );
        assert!(
            line.ends_with(
                "which has returned from the kernel (on a GPU the value read is undefined)"
            ),
            "{line}"
        );
    }
}

#[test]
fn a_lane_size_other_than_1_32_or_64_is_refused() {
    let error = DeviceCrate::new(fixtures_dir().join(FIXTURE))
        .target("host")
        .lane_size(16)
        .load()
        .expect_err("lane size 16 loaded");
    assert!(
        error
            .to_string()
            .contains("lane size must be 1, 32 or 64, not 16"),
        "{error}"
    );
}

#[test]
fn grid_wide_atomics_count_every_thread() {
    let gpu = load_on_host(FIXTURE, 32);
    let (blocks, threads, ring) = (7u32, 96u32, 9u32);
    let mut total = gpu.buffer::<u32>(1).unwrap();
    let mut per_block = gpu.buffer::<u32>(blocks as usize).unwrap();
    let mut rings = gpu.buffer::<u32>(2).unwrap();
    gpu.launch(
        "count_threads",
        LaunchShape::blocks(blocks).threads(threads),
        (&mut total, &mut per_block, &mut rings, ring),
    )
    .unwrap();
    let launched = blocks * threads;
    assert_eq!(total.to_vec().unwrap(), [launched]);
    assert_eq!(per_block.to_vec().unwrap(), vec![threads; blocks as usize]);
    // `fetch_inc` goes round a ring of `ring + 1` slots from 0, `fetch_dec` the other way.
    let slots = ring + 1;
    let up = launched % slots;
    assert_eq!(rings.to_vec().unwrap(), [up, (slots - up) % slots]);
}

#[test]
fn scoped_atomics_count_per_block_and_across_blocks() {
    for lane_size in [32, 64] {
        let gpu = load_on_host(FIXTURE, lane_size);
        let (blocks, threads) = (5u32, 96u32);
        let mut per_block = gpu.buffer::<u32>(blocks as usize * 5).unwrap();
        let mut totals = gpu.buffer::<u64>(3).unwrap();
        gpu.launch(
            "scoped_counts",
            LaunchShape::blocks(blocks)
                .threads(threads)
                .shared_bytes(20),
            (&mut per_block, &mut totals),
        )
        .unwrap();
        // Per block: the count, min and max of `thread - 50`, an or of bit `thread % 32`, the
        // sum of a half per thread.
        let block = [
            threads,
            (-50i32) as u32,
            (threads as i32 - 1 - 50) as u32,
            u32::MAX,
            (threads as f32 * 0.5).to_bits(),
        ];
        assert_eq!(
            per_block.to_vec().unwrap(),
            block.repeat(blocks as usize),
            "lane size {lane_size}"
        );
        let launched = u64::from(blocks * threads);
        assert_eq!(
            totals.to_vec().unwrap(),
            [launched, launched, u64::from(blocks)]
        );
    }
}

#[test]
fn float_atomics_sum_and_bound_a_grid_of_values() {
    let gpu = load_on_host(FIXTURE, 32);
    // Quarters: every partial sum is exact in f32, so the order of the adds does not matter.
    let values: Vec<f32> = (0..1000)
        .map(|i| ((i * 37) % 101) as f32 * 0.25 - 12.5)
        .collect();
    let n = values.len();
    let input = gpu.buffer_from(&values).unwrap();
    let mut stats = gpu
        .buffer_from(&[0.0f32, f32::INFINITY, f32::NEG_INFINITY])
        .unwrap();
    let mut wide = gpu
        .buffer_from(&[0.0f64, f64::INFINITY, f64::NEG_INFINITY])
        .unwrap();
    gpu.launch(
        "float_stats",
        LaunchShape::blocks(4).threads(256),
        (&input, n, &mut stats, &mut wide),
    )
    .unwrap();
    let sum: f32 = values.iter().sum();
    let min = values.iter().copied().fold(f32::INFINITY, f32::min);
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    assert_eq!(stats.to_vec().unwrap(), [sum, min, max]);
    assert_eq!(
        wide.to_vec().unwrap(),
        [f64::from(sum), f64::from(min), f64::from(max)]
    );
}

#[test]
fn warp_sums_and_compaction_follow_the_lane_size() {
    for lane_size in [32u32, 64] {
        let gpu = load_on_host(FIXTURE, lane_size);
        let (blocks, threads) = (3u32, 128u32);
        let grid = (blocks * threads) as usize;

        let n: usize = 300;
        let values: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let input = gpu.buffer_from(&values).unwrap();
        let mut sums = gpu.buffer::<u32>(grid).unwrap();
        let mut shape = gpu.buffer::<u32>(1).unwrap();
        gpu.launch(
            "warp_sums",
            LaunchShape::blocks(blocks).threads(threads),
            (&input, n, &mut sums, &mut shape),
        )
        .unwrap();
        assert_eq!(shape.to_vec().unwrap(), [lane_size]);
        let lanes = lane_size as usize;
        let expected: Vec<u32> = (0..grid)
            .map(|i| {
                let warp = i / lanes * lanes;
                (warp..warp + lanes)
                    .map(|j| values.get(j).copied().unwrap_or(0))
                    .fold(0u32, u32::wrapping_add)
            })
            .collect();
        assert_eq!(sums.to_vec().unwrap(), expected, "lane size {lane_size}");

        // Positive values are their index + 1, so each kept value says where it came from.
        let n: usize = 350;
        let values: Vec<i32> = (0..n as i32)
            .map(|i| if (i * 7) % 5 < 2 { i + 1 } else { -i - 1 })
            .collect();
        let input = gpu.buffer_from(&values).unwrap();
        let mut kept = gpu.buffer::<i32>(n).unwrap();
        let mut count = gpu.buffer::<u32>(1).unwrap();
        gpu.launch(
            "keep_positive",
            LaunchShape::blocks(blocks).threads(threads),
            (&input, n, &mut kept, &mut count),
        )
        .unwrap();
        let positive: Vec<i32> = values.iter().copied().filter(|&v| v > 0).collect();
        let count = count.to_vec().unwrap()[0] as usize;
        assert_eq!(count, positive.len(), "lane size {lane_size}");
        let kept = &kept.to_vec().unwrap()[..count];
        let mut sorted = kept.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, positive, "lane size {lane_size}");
        // Each warp's values sit together, in its lanes' order.
        let warp_of = |value: i32| (value - 1) as usize / lanes;
        for pair in kept.windows(2) {
            if warp_of(pair[0]) == warp_of(pair[1]) {
                assert!(pair[0] < pair[1], "lane size {lane_size}: {kept:?}");
            }
        }
        let mut warps: Vec<usize> = kept.iter().map(|&v| warp_of(v)).collect();
        warps.dedup();
        let mut distinct = warps.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            warps.len(),
            distinct.len(),
            "a warp's values are split: {kept:?}"
        );
    }
}

// The fixture's masks of `warp_reductions` (`SCATTERED`, `EVEN`, `MASK_KINDS`, `mask_of`).
include!("../../fixtures/device-ops/src/masks.rs");

/// The documented order of `warp::reduce_sum` (and min, max) over `values` (the mask's lanes in
/// lane order): a pairwise tree, `((v0 + v1) + (v2 + v3)) + ...`, a value without a partner
/// passing up unchanged.
fn pairwise<T: Copy>(values: &[T], combine: fn(T, T) -> T) -> T {
    if values.len() == 1 {
        return values[0];
    }
    let half = values.len().next_power_of_two() / 2;
    combine(
        pairwise(&values[..half], combine),
        pairwise(&values[half..], combine),
    )
}

/// The documented order of `warp::inclusive_scan_sum` over `values` (the mask's lanes in lane
/// order): step `d` = 1, 2, 4, ... adds to each the partial sum `d` places below it.
fn hillis_steele(values: &[f32]) -> Vec<f32> {
    let mut sums = values.to_vec();
    let mut step = 1;
    while step < sums.len() {
        let before = sums.clone();
        for rank in step..sums.len() {
            sums[rank] = before[rank - step] + before[rank];
        }
        step *= 2;
    }
    sums
}

/// `minimumNumber` / `maximumNumber`, as the fixture's floats reduce.
fn minimum_number(a: f32, b: f32) -> f32 {
    if b < a || a.is_nan() || (a == b && b.is_sign_negative()) {
        b
    } else {
        a
    }
}

fn maximum_number(a: f32, b: f32) -> f32 {
    if b > a || a.is_nan() || (a == b && a.is_sign_negative()) {
        b
    } else {
        a
    }
}

/// What `warp_reductions` writes for each thread: 9 integers and 4 floats (see the fixture).
fn warp_reductions_reference(
    lane_size: usize,
    blocks: usize,
    threads: usize,
    values: &[u32],
    weights: &[f32],
    extremes: &[f32],
) -> (Vec<u32>, Vec<f32>) {
    let (mut ints, mut floats) = (Vec::new(), Vec::new());
    let warps_per_block = threads.div_ceil(lane_size);
    for block in 0..blocks {
        for warp in 0..warps_per_block {
            let first = block * threads + warp * lane_size;
            let present_lanes = (threads - warp * lane_size).min(lane_size);
            let present = if present_lanes == 64 {
                u64::MAX
            } else {
                (1u64 << present_lanes) - 1
            };
            let kind = (block * warps_per_block + warp) % MASK_KINDS as usize;
            for lane in 0..present_lanes {
                let mask = mask_of(kind as u32, lane as u32, present);
                if mask >> lane & 1 == 0 {
                    ints.extend([u32::MAX; 9]);
                    floats.extend([f32::NEG_INFINITY; 4]);
                    continue;
                }
                let members: Vec<usize> = (0..64).filter(|l| mask >> l & 1 == 1).collect();
                let rank = members.iter().position(|&l| l == lane).unwrap();
                let of = |data: &[u32]| -> Vec<u32> {
                    members.iter().map(|&l| data[first + l]).collect()
                };
                let mine = of(values);
                let inclusive = mine[..=rank].iter().fold(0u32, |s, &v| s.wrapping_add(v));
                ints.extend([
                    mine.iter().fold(0u32, |s, &v| s.wrapping_add(v)),
                    *mine.iter().min().unwrap(),
                    *mine.iter().max().unwrap(),
                    mine.iter().fold(u32::MAX, |s, &v| s & v),
                    mine.iter().fold(0, |s, &v| s | v),
                    mine.iter().fold(0, |s, &v| s ^ v),
                    inclusive,
                    inclusive.wrapping_sub(mine[rank]),
                    u32::from(rank == 0),
                ]);
                let weights: Vec<f32> = members.iter().map(|&l| weights[first + l]).collect();
                let extremes: Vec<f32> = members.iter().map(|&l| extremes[first + l]).collect();
                floats.extend([
                    pairwise(&weights, |a, b| a + b),
                    hillis_steele(&weights)[rank],
                    pairwise(&extremes, minimum_number),
                    pairwise(&extremes, maximum_number),
                ]);
            }
        }
    }
    (ints, floats)
}

/// The reductions, scans and `elect` over partial warps (blocks of 100 threads) and every mask
/// kind of the fixture (the lanes a warp has, a scattered pattern, the even and odd halves from
/// one call, all but the lowest lane), bit for bit against the CPU: floats summed in the
/// documented orders (a pairwise tree; Hillis-Steele for the scan), where a left-to-right sum
/// differs; float minimum and maximum over NaN and signed zeros.
#[test]
fn warp_reductions_and_scans_match_the_cpu_over_partial_warps_and_scattered_masks() {
    for lane_size in [32u32, 64] {
        let gpu = load_on_host(FIXTURE, lane_size);
        let (blocks, threads) = (3usize, 100usize);
        let grid = blocks * threads;
        let values: Vec<u32> = (0..grid as u32)
            .map(|i| i.wrapping_mul(2_654_435_761) ^ (i << 7))
            .collect();
        // Sums of these round differently in different orders.
        let weights: Vec<f32> = (0..grid)
            .map(|i| ((i * 37) % 101) as f32 * 0.1 + 1.0e4 / (1 + i % 7) as f32)
            .collect();
        let extremes: Vec<f32> = (0..grid)
            .map(|i| match i % 9 {
                0 | 4 => f32::NAN,
                1 => -0.0,
                2 => 0.0,
                _ => (i as f32 - 150.0) * 0.75,
            })
            .collect();
        let left_to_right: f32 = weights[..64].iter().sum();
        assert_ne!(
            left_to_right.to_bits(),
            pairwise(&weights[..64], |a, b| a + b).to_bits(),
            "the weights must tell the orders apart"
        );
        let (values_in, weights_in) = (
            gpu.buffer_from(&values).unwrap(),
            gpu.buffer_from(&weights).unwrap(),
        );
        let extremes_in = gpu.buffer_from(&extremes).unwrap();
        let mut ints = gpu.buffer::<u32>(grid * 9).unwrap();
        let mut floats = gpu.buffer::<f32>(grid * 4).unwrap();
        gpu.launch(
            "warp_reductions",
            LaunchShape::blocks(blocks as u32).threads(threads as u32),
            (
                &values_in,
                &weights_in,
                &extremes_in,
                &mut ints,
                &mut floats,
            ),
        )
        .unwrap();
        let (expected_ints, expected_floats) = warp_reductions_reference(
            lane_size as usize,
            blocks,
            threads,
            &values,
            &weights,
            &extremes,
        );
        let ints = ints.to_vec().unwrap();
        let floats = floats.to_vec().unwrap();
        const INT_NAMES: [&str; 9] = [
            "sum",
            "min",
            "max",
            "and",
            "or",
            "xor",
            "inclusive",
            "exclusive",
            "elect",
        ];
        const FLOAT_NAMES: [&str; 4] = ["float sum", "float inclusive", "float min", "float max"];
        for thread in 0..grid {
            for (at, name) in INT_NAMES.iter().enumerate() {
                assert_eq!(
                    ints[thread * 9 + at],
                    expected_ints[thread * 9 + at],
                    "lane size {lane_size}, thread {thread}: {name}"
                );
            }
            for (at, name) in FLOAT_NAMES.iter().enumerate() {
                let (got, want) = (floats[thread * 4 + at], expected_floats[thread * 4 + at]);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "lane size {lane_size}, thread {thread}: {name} {got} != {want}"
                );
            }
        }
    }
}

include!("../../fixtures/device-ops/src/math_list.rs");

/// What `math_of` in the fixture computes, with the `libm` crate on the CPU.
fn math_reference(x: f32) -> [f32; 16] {
    math_list!(libm, x)
}

#[test]
fn math_functions_match_the_libm_crate_bit_for_bit() {
    let gpu = load_on_host(FIXTURE, 32);
    let x: Vec<f32> = (0..200).map(|i| (i as f32 - 60.0) * 0.173).collect();
    let n = x.len();
    let input = gpu.buffer_from(&x).unwrap();
    let mut out = gpu.buffer::<f32>(n * 16).unwrap();
    gpu.launch(
        "math_table",
        LaunchShape::blocks(1).threads(256),
        (&input, n, &mut out),
    )
    .unwrap();
    let out = out.to_vec().unwrap();
    for (i, &x) in x.iter().enumerate() {
        let got = &out[i * 16..(i + 1) * 16];
        let want = math_reference(x);
        for (function, (got, want)) in got.iter().zip(want).enumerate() {
            // NaN (log of a negative) compares by bits too: same code, same NaN.
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "function {function} at x = {x}: {got} != {want}"
            );
        }
    }
}
