//! Any command line (arguments split at NUL bytes, each any bytes, not only UTF-8) given to
//! `HarnessArgs::parse_args` parses or is a usage error, never a panic; what parses selects
//! from a few tests (filters, `--skip`, `--exact`, `--ignored`, `--partition`) without one, and
//! a usage error renders its message.
#![no_main]

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use gpurun_harness::filter::select;
use gpurun_harness::{HarnessArgs, TestDesc};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let argv = std::iter::once(OsString::from("test-binary")).chain(
        data.split(|&byte| byte == 0)
            .map(|arg| OsString::from_vec(arg.to_vec())),
    );
    match HarnessArgs::parse_args(argv) {
        Ok(args) => {
            let _ = args.effective_format();
            let tests = ["a", "tests::b", "[suite] c", "ü::d"]
                .map(TestDesc::new)
                .to_vec();
            let selection = select(&args, tests);
            assert!(selection.tests.len() + selection.filtered_out <= 4);
        }
        Err(error) => {
            let _ = error.render().to_string();
        }
    }
});
