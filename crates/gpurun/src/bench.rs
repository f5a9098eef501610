//! Device benchmarks: the handle a `#[gpurun::bench]` function gets.
//!
//! `cargo gpurun bench` times a benchmark by launching its kernel with an iteration count and
//! reading the device's own time of each launch (CUDA events, HSA dispatch timestamps, or the
//! host emulation's wall clock). A launch of `n` iterations is paired with one of none, and
//! the time per iteration is their difference over `n`: what runs once per launch (the launch
//! itself, the code before [`Bencher::iter`]) is in both and cancels out.
//!
//! ```ignore
//! use gpurun::bench::{black_box, Bencher};
//!
//! const N: usize = 1 << 16;
//! static mut SOURCE: [u32; N] = [0; N];
//! static mut TARGET: [u32; N] = [0; N];
//!
//! // 256 threads; each iteration reads and writes N words.
//! #[gpurun::bench(threads = 256, bytes = 2 * 4 * N)]
//! fn copy(b: &mut Bencher) {
//!     let me = gpurun::thread_idx()[0] as usize; // set-up: once per launch, not timed
//!     let (source, target) = (&raw const SOURCE as *const u32, &raw mut TARGET as *mut u32);
//!     b.iter(|| {
//!         for i in (me..N).step_by(256) {
//!             // SAFETY: i < N, and each thread writes only its own elements.
//!             unsafe { target.add(i).write_volatile(source.add(i).read_volatile()) };
//!         }
//!     });
//! }
//!
//! #[gpurun::bench]
//! fn xorshift(b: &mut Bencher) {
//!     // Inputs through `black_box`, or the compiler may compute the result once.
//!     b.iter(|| {
//!         let mut x = black_box(0x9e37_79b9_u32);
//!         x ^= x << 13;
//!         x ^= x >> 17;
//!         x ^ (x << 5)
//!     });
//! }
//! ```

/// Keeps a value (or the work that made it) from being optimized away: wrap a benchmark's
/// inputs and results in it, as with libtest's and criterion's `black_box`.
pub use core::hint::black_box;

/// A benchmark's handle: [`Bencher::iter`] runs the measured routine as many times as the
/// launch asks for.
#[derive(Debug)]
pub struct Bencher {
    iterations: u64,
}

impl Bencher {
    pub(crate) fn new(iterations: u64) -> Bencher {
        Bencher { iterations }
    }

    /// Runs `routine` once per iteration of this launch, passing each result through
    /// [`black_box`]. Every thread of the launch runs it, as it runs the whole benchmark
    /// function; code before the call runs once per launch and is not counted. Call it once:
    /// a second call runs the iterations again and doubles the time.
    #[inline(always)]
    pub fn iter<T>(&mut self, mut routine: impl FnMut() -> T) {
        let mut left = black_box(self.iterations);
        while left > 0 {
            black_box(routine());
            left -= 1;
        }
    }

    /// The iterations this launch runs: what the timer asked for (0 for the launch that
    /// measures the set-up alone, 1 when the benchmark runs as a test).
    pub fn iterations(&self) -> u64 {
        self.iterations
    }
}
