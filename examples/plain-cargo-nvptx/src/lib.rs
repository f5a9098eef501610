//! Device code shared by the program (`src/main.rs`) and tested on the GPU.
//!
//! Unit tests here run through the runner like integration tests do: `[lib] harness = false`
//! makes cargo build this file as an executable under `cfg(test)` without libtest (which needs
//! `std`), so the test build takes `no_main`; the `#[gpurun::test]`s exist only in that build.
#![no_std]
#![cfg_attr(test, no_main)]

/// The `n`th triangular number, `0 + 1 + ... + n` (wrapping on overflow).
pub fn triangle(n: u32) -> u32 {
    (0..=n).fold(0u32, |sum, k| sum.wrapping_add(k))
}

#[cfg(test)]
mod tests {
    use super::triangle;

    #[gpurun::test]
    fn triangle_numbers() {
        assert_eq!(triangle(0), 0);
        assert_eq!(triangle(4), 10);
    }

    #[gpurun::test(threads = 64)]
    fn triangle_matches_the_closed_form_on_every_thread() {
        let n = gpurun::thread_idx()[0];
        assert_eq!(triangle(n), n * (n + 1) / 2);
    }
}
