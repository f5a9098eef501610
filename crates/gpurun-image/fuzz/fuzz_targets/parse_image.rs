//! Any bytes given to `Image::parse` give `Ok` or `Err`, never a panic, a hang or an abort.
//!
//! `scripts/fuzz.sh [SECONDS]` runs it (with every other target) from the corpus in
//! `corpus/parse_image` and the real samples in `../tests/data`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(image) = gpurun_image::Image::parse(data.to_vec(), None) {
        // Exercise the accessors the loader uses, so their invariants are fuzzed too.
        let _ = image.require_entry("_start");
        let _ = image.ctor_dtor_objects();
        for global in image.globals() {
            let _ = global.read_at(0, global.size.min(4096) as usize);
        }
        for test in image.tests() {
            assert!(
                image.kernel(&test.kernel).is_some(),
                "a test without its kernel was accepted"
            );
            let encoded =
                gpurun_image::encode_descriptor(test).expect("decoded descriptors re-encode");
            let mut decoded =
                gpurun_image::decode_descriptor("x", &test.kernel, &encoded).expect("round trip");
            // Not in the test descriptor: the image fills it in from the kernel's descriptor.
            decoded.panic_ends_wavefront = test.panic_ends_wavefront;
            assert_eq!(&decoded, test);
        }
    }
});
