//! The server over hostile shared memory: random layouts, random buffer contents, random
//! operations and scribbles (see `common/untrusted.rs`). A fixed number of iterations so the test
//! is deterministic and bounded: 3000 inputs here, 40 under Miri. Longer runs: the cargo-fuzz
//! target in `fuzz/`, a minute in every CI run (`scripts/fuzz.sh`).

mod common;

use common::untrusted::drive_server;
use common::Rng;

#[test]
fn server_survives_arbitrary_shared_memory() {
    let iterations = if cfg!(miri) { 40 } else { 3000 };
    let mut rng = Rng::new(0xbad_d0e5);
    for _ in 0..iterations {
        let len = rng.below(600) as usize;
        let mut input = vec![0u8; len];
        rng.fill(&mut input);
        // Bias some inputs towards protocol-looking mailboxes (0/1) so deeper paths are reached.
        if rng.below(2) == 0 {
            for byte in input.iter_mut().skip(3).step_by(3) {
                *byte &= 1;
            }
        }
        drive_server(&input);
    }
}

#[test]
fn edge_inputs() {
    drive_server(&[]);
    drive_server(&[0, 0, 0]);
    drive_server(&[7, 2, 1, 0]);
    drive_server(&[7, 2, 0, 0xff]);
    drive_server(&[0, 1, 0, 0, 0, 1, 7, 7, 7, 5, 255, 6, 255, 9]);
}
