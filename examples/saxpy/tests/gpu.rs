// Every #[gpurun::test] of the kernel crate, as a trial of `cargo test`.
fn main() -> std::process::ExitCode {
    gpurun_test::DeviceCrate::new("kernels").libtest_mimic_main()
}
