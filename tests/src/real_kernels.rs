//! The host side of `fixtures/real-kernels`: each kernel launched on several sizes (including
//! ones that are not multiples of the block or tile size) and compared with a CPU reference.
//! One source for both places that run them: `tests/e2e/real_kernels.rs` (the host emulation,
//! lane sizes 32 and 64) and the `real-kernels-check` program of `scripts/gpu-check.sh` (a GPU,
//! where no Rust toolchain is).
//!
//! The inputs keep every float result exact in any order of adds (small integers, quarters),
//! so a result either matches the reference bit for bit or the kernel is wrong.

use gpurun_test::{Error, Gpu, LaunchShape};

/// A check of one kernel: what it ran on success, what differs otherwise.
pub type Check = fn(&Gpu) -> Result<String, String>;

/// Every kernel of the fixture with its check.
pub const CHECKS: [(&str, Check); 6] = [
    ("matmul_tiled", check_matmul_tiled),
    ("block_sum", check_block_sum),
    ("histogram", check_histogram),
    ("weighted_histogram", check_weighted_histogram),
    ("inclusive_scan", check_inclusive_scan),
    ("compact_above", check_compact_above),
];

/// The side of the fixture's matrix tiles (its `TILE`).
const TILE: u32 = 16;

/// Shared memory for one `u32` per warp of `threads`, for lane sizes 32 and 64.
fn per_warp_bytes(threads: u32) -> u32 {
    threads.div_ceil(32) * 4
}

fn text(error: Error) -> String {
    error.to_string()
}

/// `Err` naming the first index where `got` and `want` differ (or their lengths).
fn compare<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: &[T],
    want: &[T],
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} elements, not {}",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(got, want)| got != want) {
        None => Ok(()),
        Some(at) => Err(format!(
            "{what}: element {at} is {:?}, not {:?}",
            got[at], want[at]
        )),
    }
}

/// A spread of `u32`s (Knuth's multiplicative hash of the index).
fn hashed(n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect()
}

/// `a * b` for row-major `a` (`m x k`) and `b` (`k x n`).
pub fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for row in 0..m {
        for col in 0..n {
            c[row * n + col] = (0..k).map(|j| a[row * k + j] * b[j * n + col]).sum();
        }
    }
    c
}

fn check_matmul_tiled(gpu: &Gpu) -> Result<String, String> {
    let sizes = [(16, 16, 16), (1, 1, 1), (33, 17, 45), (64, 40, 31)];
    for (m, k, n) in sizes {
        // Small integers: every product and partial sum is exact in f32.
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 9) as f32 - 4.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 7) as f32 - 3.0).collect();
        let (a_buffer, b_buffer) = (gpu.buffer_from(&a), gpu.buffer_from(&b));
        let (a_buffer, b_buffer) = (a_buffer.map_err(text)?, b_buffer.map_err(text)?);
        let mut c = gpu.buffer::<f32>(m * n).map_err(text)?;
        let blocks = [(n as u32).div_ceil(TILE), (m as u32).div_ceil(TILE), 1];
        let shape = LaunchShape::grid(blocks, [TILE, TILE, 1]).shared_bytes(2 * TILE * TILE * 4);
        gpu.launch(
            "matmul_tiled",
            shape,
            (&a_buffer, &b_buffer, &mut c, m, k, n),
        )
        .map_err(text)?;
        let got = c.to_vec().map_err(text)?;
        compare(
            &format!("{m}x{k} times {k}x{n}"),
            &got,
            &matmul(&a, &b, m, k, n),
        )?;
    }
    Ok(format!("m x k x n: {sizes:?}"))
}

/// The wrapping sum of each `block`-element chunk of `x`.
pub fn block_sums(x: &[u32], block: usize) -> Vec<u32> {
    x.chunks(block)
        .map(|chunk| chunk.iter().fold(0u32, |sum, v| sum.wrapping_add(*v)))
        .collect()
}

fn check_block_sum(gpu: &Gpu) -> Result<String, String> {
    let cases = [
        (64u32, 1usize),
        (64, 64),
        (128, 1000),
        (256, 4099),
        (192, 777),
    ];
    for (threads, n) in cases {
        let x = hashed(n);
        let input = gpu.buffer_from(&x).map_err(text)?;
        let blocks = n.div_ceil(threads as usize);
        let mut sums = gpu.buffer::<u32>(blocks).map_err(text)?;
        let shape = LaunchShape::blocks(blocks as u32)
            .threads(threads)
            .shared_bytes(per_warp_bytes(threads));
        gpu.launch("block_sum", shape, (&input, n, &mut sums))
            .map_err(text)?;
        let got = sums.to_vec().map_err(text)?;
        compare(
            &format!("{n} elements in blocks of {threads}"),
            &got,
            &block_sums(&x, threads as usize),
        )?;
    }
    Ok(format!("(threads, n): {cases:?}"))
}

/// For each bin `b < bins`, the sum of `weight(i)` over the `i` with `values[i] % bins == b`.
pub fn histogram<T: Copy + std::ops::AddAssign + Default>(
    values: &[u32],
    bins: usize,
    weight: impl Fn(usize) -> T,
) -> Vec<T> {
    let mut sums = vec![T::default(); bins];
    for (i, value) in values.iter().enumerate() {
        sums[*value as usize % bins] += weight(i);
    }
    sums
}

/// The histogram cases: `(bins, n, blocks, threads)`.
const HISTOGRAM_CASES: [(usize, usize, u32, u32); 4] = [
    (1, 100, 1, 64),
    (10, 1000, 3, 128),
    (257, 5000, 4, 256),
    (64, 4099, 2, 96),
];

/// The values of a histogram case: skewed towards the low bins, so that bins see contention.
fn histogram_values(n: usize, bins: usize) -> Vec<u32> {
    hashed(n)
        .into_iter()
        .map(|h| (h >> 8) % (bins as u32 * 2) % (bins as u32 + 3))
        .collect()
}

fn check_histogram(gpu: &Gpu) -> Result<String, String> {
    for (bins, n, blocks, threads) in HISTOGRAM_CASES {
        let values = histogram_values(n, bins);
        let input = gpu.buffer_from(&values).map_err(text)?;
        let mut counts = gpu.buffer::<u32>(bins).map_err(text)?;
        let shape = LaunchShape::blocks(blocks)
            .threads(threads)
            .shared_bytes(bins as u32 * 4);
        gpu.launch("histogram", shape, (&input, n, bins, &mut counts))
            .map_err(text)?;
        let got = counts.to_vec().map_err(text)?;
        compare(
            &format!("{n} values in {bins} bins"),
            &got,
            &histogram(&values, bins, |_| 1u32),
        )?;
    }
    Ok(format!("(bins, n, blocks, threads): {HISTOGRAM_CASES:?}"))
}

fn check_weighted_histogram(gpu: &Gpu) -> Result<String, String> {
    for (bins, n, blocks, threads) in HISTOGRAM_CASES {
        let values = histogram_values(n, bins);
        // Quarters from -1 to 1: every partial sum is exact in f32, whatever the order.
        let weights: Vec<f32> = (0..n).map(|i| ((i * 13) % 9) as f32 * 0.25 - 1.0).collect();
        let (input, weight_buffer) = (gpu.buffer_from(&values), gpu.buffer_from(&weights));
        let (input, weight_buffer) = (input.map_err(text)?, weight_buffer.map_err(text)?);
        let mut sums = gpu.buffer::<f32>(bins).map_err(text)?;
        let shape = LaunchShape::blocks(blocks)
            .threads(threads)
            .shared_bytes(bins as u32 * 4);
        gpu.launch(
            "weighted_histogram",
            shape,
            (&input, &weight_buffer, n, bins, &mut sums),
        )
        .map_err(text)?;
        let got = sums.to_vec().map_err(text)?;
        compare(
            &format!("{n} weighted values in {bins} bins"),
            &got,
            &histogram(&values, bins, |i| weights[i]),
        )?;
    }
    Ok(format!("(bins, n, blocks, threads): {HISTOGRAM_CASES:?}"))
}

/// The wrapping inclusive prefix sums of each `block`-element chunk of `x`, each chunk on its own.
pub fn block_scans(x: &[u32], block: usize) -> Vec<u32> {
    x.chunks(block)
        .flat_map(|chunk| {
            chunk.iter().scan(0u32, |sum, v| {
                *sum = sum.wrapping_add(*v);
                Some(*sum)
            })
        })
        .collect()
}

fn check_inclusive_scan(gpu: &Gpu) -> Result<String, String> {
    let cases = [
        (64u32, 1usize),
        (64, 64),
        (128, 1000),
        (256, 4099),
        (512, 3000),
    ];
    for (threads, n) in cases {
        // Small values first (a wrong carry shows as an off-by-a-little), then wrapping ones.
        let x: Vec<u32> = hashed(n)
            .into_iter()
            .enumerate()
            .map(|(i, h)| if i < n / 2 { h % 100 } else { h })
            .collect();
        let input = gpu.buffer_from(&x).map_err(text)?;
        let blocks = n.div_ceil(threads as usize);
        let mut out = gpu.buffer::<u32>(n).map_err(text)?;
        let mut totals = gpu.buffer::<u32>(blocks).map_err(text)?;
        let shape = LaunchShape::blocks(blocks as u32)
            .threads(threads)
            .shared_bytes(per_warp_bytes(threads));
        gpu.launch("inclusive_scan", shape, (&input, n, &mut out, &mut totals))
            .map_err(text)?;
        let what = format!("{n} elements in blocks of {threads}");
        compare(
            &what,
            &out.to_vec().map_err(text)?,
            &block_scans(&x, threads as usize),
        )?;
        compare(
            &format!("{what}, block totals"),
            &totals.to_vec().map_err(text)?,
            &block_sums(&x, threads as usize),
        )?;
    }
    Ok(format!("(threads, n): {cases:?}"))
}

/// Checks a compaction's output (`kept[j]` from `values[origins[j]]`) against `values` above
/// `threshold` compacted in blocks of `block`: the same elements, each block's together and
/// in their order in `values` (the blocks themselves in any order).
pub fn check_compaction(
    values: &[i32],
    threshold: i32,
    block: usize,
    kept: &[i32],
    origins: &[u32],
) -> Result<(), String> {
    let expected: Vec<u32> = (0..values.len() as u32)
        .filter(|&i| values[i as usize] > threshold)
        .collect();
    if origins.len() != expected.len() {
        return Err(format!("{} kept, not {}", origins.len(), expected.len()));
    }
    let mut finished_blocks = std::collections::BTreeSet::new();
    for (j, (&value, &origin)) in kept.iter().zip(origins).enumerate() {
        if values.get(origin as usize) != Some(&value) {
            return Err(format!(
                "kept[{j}] = {value} says it came from index {origin}, which holds {:?}",
                values.get(origin as usize)
            ));
        }
        let block_of = |origin: u32| origin as usize / block;
        if j > 0 && block_of(origins[j - 1]) == block_of(origin) {
            if origins[j - 1] >= origin {
                return Err(format!(
                    "index {origin} comes after index {} of the same block",
                    origins[j - 1]
                ));
            }
        } else if !finished_blocks.insert(block_of(origin)) {
            return Err(format!(
                "block {}'s elements are not together (at kept[{j}])",
                block_of(origin)
            ));
        }
    }
    let mut sorted = origins.to_vec();
    sorted.sort_unstable();
    compare("kept indices", &sorted, &expected)
}

fn check_compact_above(gpu: &Gpu) -> Result<String, String> {
    let cases = [
        (64u32, 1usize, 0),
        (128, 1000, 0),
        (256, 4099, 500),
        (64, 300, i32::MAX),
        (128, 500, i32::MIN),
    ];
    for (threads, n, threshold) in cases {
        // -1000..=1000, each value once per 2001 indices.
        let values: Vec<i32> = (0..n).map(|i| ((i * 7919) % 2001) as i32 - 1000).collect();
        let input = gpu.buffer_from(&values).map_err(text)?;
        let mut kept = gpu.buffer::<i32>(n).map_err(text)?;
        let mut origins = gpu.buffer::<u32>(n).map_err(text)?;
        let mut count = gpu.buffer::<u32>(1).map_err(text)?;
        let blocks = n.div_ceil(threads as usize) as u32;
        let shape = LaunchShape::blocks(blocks)
            .threads(threads)
            .shared_bytes(per_warp_bytes(threads) + 4);
        gpu.launch(
            "compact_above",
            shape,
            (&input, n, threshold, &mut kept, &mut origins, &mut count),
        )
        .map_err(text)?;
        let count = count.to_vec().map_err(text)?[0] as usize;
        if count > n {
            return Err(format!("{n} values, threshold {threshold}: count {count}"));
        }
        let kept = kept.to_vec().map_err(text)?;
        let origins = origins.to_vec().map_err(text)?;
        check_compaction(
            &values,
            threshold,
            threads as usize,
            &kept[..count],
            &origins[..count],
        )
        .map_err(|problem| {
            format!("{n} values above {threshold} in blocks of {threads}: {problem}")
        })?;
    }
    Ok(format!("(threads, n, threshold): {cases:?}"))
}

/// Runs every check on `gpu`: one line per kernel (`NAME ok (what ran)` or `NAME FAILED: what
/// differs`), and whether all passed.
pub fn check_all(gpu: &Gpu) -> (Vec<String>, bool) {
    let mut all_passed = true;
    let lines = CHECKS
        .iter()
        .map(|(name, check)| match check(gpu) {
            Ok(ran) => format!("{name} ok ({ran})"),
            Err(problem) => {
                all_passed = false;
                format!("{name} FAILED: {problem}")
            }
        })
        .collect();
    (lines, all_passed)
}
