// The real-libtest twin of `harness/src/bin/gpurun-mock-suite.rs`: the same tests with the same
// output, compiled with `rustc --test` by `../against_libtest.rs` to diff the two harnesses' output.
// Panic locations are mirrored in the mock suite: keep lines and columns in sync.
#[cfg(test)]
mod tests {
    #[test] fn adds() { println!("out of adds"); }
    #[test] fn fails() { println!("some device output"); eprintln!("err output"); panic!("boom {}", 42); }
    #[test] #[ignore] fn ign() {}
    #[test] #[ignore = "needs gpu"] fn ign_reason() {}
    #[test] #[should_panic] fn sp_ok() { panic!("x") }
    #[test] #[should_panic] fn sp_nopanic() { }
    #[test] #[should_panic(expected = "abc")] fn sp_exp_ok() { panic!("xxabcxx") }
    #[test] #[should_panic(expected = "abc")] fn sp_exp_wrong() { panic!("nope \"q\"") }
    #[test] #[should_panic(expected = "abc")] fn sp_exp_nopanic() { }
}
