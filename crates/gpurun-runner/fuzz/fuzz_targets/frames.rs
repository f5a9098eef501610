//! Any bytes on the worker pipe, read as the parent reads a worker's events and as a worker
//! reads its parent's commands: each frame decodes or is an error, never a panic or a hang; a
//! slot out of range is refused; and what decodes encodes again to a frame that decodes the
//! same.
#![no_main]

// The runner's own protocol module, compiled here without the rest of the runner (see
// Cargo.toml); the fuzz target uses only its framing.
#[path = "../../src/protocol.rs"]
#[allow(dead_code)]
mod protocol;

use protocol::{read_command, read_event, write_command, write_event, MAX_SLOTS};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut input = data;
    while let Ok(Some((slot, event))) = read_event(&mut input) {
        assert!((slot as usize) < MAX_SLOTS, "slot {slot} accepted");
        let mut wire = Vec::new();
        write_event(&mut wire, slot, &event).expect("a decoded event encodes");
        let again = read_event(&mut wire.as_slice()).expect("an encoded event decodes");
        assert_eq!(again, Some((slot, event)));
    }
    let mut input = data;
    while let Ok(Some((slot, command))) = read_command(&mut input) {
        assert!((slot as usize) < MAX_SLOTS, "slot {slot} accepted");
        let mut wire = Vec::new();
        write_command(&mut wire, slot, &command).expect("a decoded command encodes");
        let again = read_command(&mut wire.as_slice()).expect("an encoded command decodes");
        assert_eq!(again, Some((slot, command)));
    }
});
