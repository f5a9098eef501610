//! End-to-end tests: the real `cargo-gpurun` binary on the fixtures. Tests that run device code
//! use the host emulation backend (the one backend every machine has); `images` builds every
//! fixture for nvptx and amdgcn too, and `plain_cargo` drives cargo and nextest on nvptx with
//! cargo-gpurun as `target.runner` (without a GPU those runs must fail with the clear "no NVIDIA
//! driver" error); `sanitize` runs nvptx images on the fake CUDA driver under a stand-in for
//! compute-sanitizer, and `fake_cuda` checks the driver calls of the CLI's worker on it.
//! Expected results are spelled out per test.

mod bench;
mod concurrency;
mod coverage;
mod device_ops;
mod docs;
#[cfg(target_os = "linux")]
mod fake_cuda;
mod harness;
mod host_app;
mod host_io;
mod images;
mod lifetime;
mod load;
mod loader;
mod plain_cargo;
mod real_kernels;
mod sanitize;
mod saxpy_example;
mod setup;
mod strict;
