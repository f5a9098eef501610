//! `cargo +nightly run --target nvptx64-nvidia-cuda`: every thread greets with a number from
//! the library, thread 0 also prints the program's arguments (the runner passes cargo's
//! `-- ARGS` through to the device).
#![no_std]
#![no_main]

#[gpurun::main]
fn main() {
    let [thread, _, _] = gpurun::thread_idx();
    let triangle = plain_cargo_nvptx::triangle(thread);
    gpurun::println!("hello from GPU thread {thread} (triangle number {triangle})");
    if thread == 0 {
        for (index, arg) in gpurun::args().enumerate() {
            gpurun::println!("argv[{index}] = {arg}");
        }
    }
}
