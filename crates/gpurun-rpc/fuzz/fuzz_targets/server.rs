//! Any bytes as the device's side of the shared memory: the server must not panic or hit UB.
#![no_main]

#[path = "../../tests/common/mod.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|input: &[u8]| common::untrusted::drive_server(input));
