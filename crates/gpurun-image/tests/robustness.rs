//! Any bytes give `Ok` or `Err`, never a panic: the real samples, truncated, bit-flipped,
//! spliced and shuffled, go through `Image::parse` for a fixed number of iterations
//! (deterministic seeds, a few seconds in a debug build). The cargo-fuzz target in `fuzz/`
//! explores the same property for a minute in every CI run (`scripts/fuzz.sh`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use gpurun_image::Image;

/// Mutations per sample. Bounded so the suite stays fast on a 2-core CI machine.
const ITERATIONS_PER_SAMPLE: u64 = 1500;
const SAMPLES: [&str; 5] = [
    "sample.ptx",
    "sample.cubin",
    "sample-gfx90a.elf",
    "sample-gfx1100.elf",
    "libsample-host.so",
];

/// xorshift64*: tiny, deterministic, good enough to pick offsets.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(rng: &mut Rng, original: &[u8]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    for _ in 0..=rng.below(4) {
        let len = bytes.len();
        match rng.below(7) {
            0 => bytes.truncate(rng.below(len + 1)),
            1 => {
                for _ in 0..=rng.below(8) {
                    if len > 0 {
                        let at = rng.below(len);
                        bytes[at] ^= 1 << rng.below(8);
                    }
                }
            }
            2 => {
                // Interesting values into header-sized fields: sizes, offsets, counts.
                let value: u64 =
                    [0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fff_ffff, u64::MAX][rng.below(8)];
                let width = [1, 2, 4, 8][rng.below(4)];
                let at = rng.below(len.min(256) + 1);
                for (i, b) in value.to_le_bytes()[..width].iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            3 => {
                // Copy a chunk of the file over another place (PTX: moves braces and `;`).
                let from = rng.below(len);
                let to = rng.below(len);
                let n = rng.below(64).min(len - from.max(to));
                bytes.copy_within(from..from + n, to);
            }
            4 => {
                let at = rng.below(len + 1);
                let text: &[u8] = [
                    &b"{"[..],
                    b"}",
                    b";",
                    b"\n",
                    b"[",
                    b"]",
                    b"=",
                    b"/*",
                    b"\"",
                    b".global .b8 x[",
                    b"99999999999999999999",
                    b"-",
                ][rng.below(12)];
                bytes.splice(at..at, text.iter().copied());
            }
            5 => {
                if len > 0 {
                    let at = rng.below(len);
                    let n = rng.below(32).min(len - at);
                    bytes.drain(at..at + n);
                }
            }
            _ => {
                let at = rng.below(len + 1);
                let junk: Vec<u8> = (0..rng.below(32)).map(|_| rng.next() as u8).collect();
                bytes.splice(at..at, junk);
            }
        }
    }
    bytes
}

fn must_not_panic(what: &str, bytes: Vec<u8>) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        Image::parse(bytes.clone(), None).map(|_| ())
    }));
    if result.is_err() {
        let dump = std::env::temp_dir().join("gpurun-image-panic.bin");
        let _ = std::fs::write(&dump, &bytes);
        panic!(
            "Image::parse panicked on {what}; input written to {}",
            dump.display()
        );
    }
}

#[test]
fn mutated_samples_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for (index, name) in SAMPLES.iter().enumerate() {
        let original = std::fs::read(dir.join(name)).unwrap();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (index as u64 + 1));
        let mut accepted = 0;
        for iteration in 0..ITERATIONS_PER_SAMPLE {
            let bytes = mutate(&mut rng, &original);
            if Image::parse(bytes.clone(), None).is_ok() {
                accepted += 1;
            }
            must_not_panic(&format!("{name} mutation {iteration}"), bytes);
        }
        // Some mutations land in code or padding and leave a valid image: if none are ever
        // accepted, the mutator is only testing the first error path.
        assert!(accepted > 0, "{name}: no mutation was accepted");
        eprintln!("{name}: {accepted}/{ITERATIONS_PER_SAMPLE} mutations still parse");
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for iteration in 0..2000 {
        let len = rng.below(512);
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let prefix: &[u8] = match iteration % 3 {
            0 => b"\x7fELF\x02\x01\x01\0",
            1 => b".version 7.0\n.target sm_70\n",
            _ => b"",
        };
        bytes.splice(0..0, prefix.iter().copied());
        must_not_panic(&format!("random input {iteration}"), bytes);
    }
}
