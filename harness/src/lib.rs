//! The libtest-mimic harness.
