//! `#[gpurun::test]` and `#[gpurun::kernel]`.
