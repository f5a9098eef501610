//! `cargo-gpurun`: all the work is in the library (see `cargo_gpurun::main_impl`).

fn main() -> std::process::ExitCode {
    cargo_gpurun::main_impl()
}
