//! `cargo +nightly test --target nvptx64-nvidia-cuda`: cargo builds this file to PTX and runs
//! `cargo-gpurun gpurun run device-HASH.ptx ARGS`, which treats an image with tests and no
//! `_start` as a test binary and takes libtest's command line.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::vec::Vec;

#[gpurun::test]
fn adds() {
    let two = core::hint::black_box(2);
    assert_eq!(two + two, 4);
}

#[gpurun::test(threads = 32)]
fn every_lane_knows_its_index() {
    let [x, _, _] = gpurun::thread_idx();
    assert!(x < 32);
    assert_eq!(gpurun::block_dim(), [32, 1, 1]);
}

#[gpurun::test]
fn allocates() {
    let squares: Vec<u32> = (0..16).map(|n| n * n).collect();
    assert_eq!(squares.iter().sum::<u32>(), 1240);
}

#[gpurun::test]
#[should_panic(expected = "out of range")]
fn reports_panics() {
    let index = 9;
    if index > 3 {
        panic!("index {index} out of range");
    }
}

mod nested {
    #[gpurun::test]
    #[ignore = "shows how an ignored test is listed"]
    fn ignored() {}
}
