//! End-to-end tests: the real `cargo-gpurun` binary on the fixtures, on the host emulation
//! backend (the one backend every machine has). Expected results are spelled out per test.

mod harness;
mod images;
mod loader;
mod runner;
