//! The hello fixture's program as a plain native binary: the baseline of the loader benchmark.

fn main() {
    println!("hello from thread {} of block {}", 0, 0);
}
