//! Attributes for device crates: `#[gpurun::test]`, `#[gpurun::bench]`, `#[gpurun::kernel]` and
//! `#[gpurun::main]`.
//!
//! The macros only parse and validate; the code they emit calls hidden macros and functions of
//! `gpurun` (its `export` module), which know the right kernel ABI for each target and
//! the descriptor layout of `docs/abi.md`. They find that crate under whatever name the user's
//! `Cargo.toml` gives it (plain `gpurun` is the documented spelling).
//!
//! Each attribute runs in three phases, one module each: `parse` turns tokens into plain data,
//! `validate` checks it (every rule, with the error at the offending tokens) and `codegen`
//! emits the expansion.
//!
//! Owns: the attributes' syntax and their checks. Must not: spell the device ABI itself (the
//! flags, symbol prefixes and descriptor format come from `gpurun-abi`) or know the host.

mod codegen;
mod parse;
mod validate;

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use syn::ItemFn;

/// Marks `fn()` as a device test. Every thread of the launch runs it; the test passes when no
/// thread panics.
///
/// Launch shape: `#[gpurun::test(threads = 256)]`, `threads = (16, 16, 1)`, `blocks = 4`, and
/// `shared = 4096` for that many bytes of dynamic shared memory per block (`gpurun::shared`;
/// any constant `usize` expression).
/// `#[gpurun::test(gpu_only)]` marks a test that means nothing on the host emulation (timing,
/// say): there it is reported as ignored, "needs a GPU". Also honours `#[ignore]`, `#[ignore = "reason"]`, `#[should_panic]` and
/// `#[should_panic(expected = "text")]` written after it.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    expand_test(args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Marks `fn(b: &mut gpurun::bench::Bencher)` as a device benchmark, timed on the device by
/// `cargo gpurun bench`. Every thread of the launch runs the function; what it passes to
/// `b.iter(..)` runs once per iteration, and whatever comes before it once per launch (set-up,
/// which the measurement subtracts). Run without `--bench` (`cargo gpurun test`), it runs as a
/// test of one iteration.
///
/// Takes `#[gpurun::test]`'s launch shape (`threads`, `blocks`, `shared`) and `gpu_only`, and
/// the throughput of one iteration of the whole launch for the reported rate: `bytes = N` (read
/// and written) or `elements = N`, any constant `usize` expression. Also honours `#[ignore]`;
/// `#[should_panic]` is refused.
#[proc_macro_attribute]
pub fn bench(args: TokenStream, item: TokenStream) -> TokenStream {
    expand_bench(args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Declares a kernel with the right ABI for the target (`extern "gpu-kernel"` on GPUs,
/// `extern "C"` on the host) and an unmangled name, and records its parameters in the image
/// (`__gpurun_kdesc_NAME`, docs/abi.md) so that host-driven launches check their arguments.
///
/// `#[gpurun::kernel(len(x = n, sums = blocks, scratch = blocks * threads))]` also states how
/// many elements each named pointer parameter must hold: a product of integer parameters,
/// integer literals, `blocks` (blocks in the grid) and `threads` (threads per block). A launch
/// from the host with a smaller buffer is then an error before the kernel runs.
#[proc_macro_attribute]
pub fn kernel(args: TokenStream, item: TokenStream) -> TokenStream {
    expand_kernel(args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Turns `fn main()`, `fn main() -> i32` or `fn main(args: gpurun::Args) -> i32` into the
/// `_begin`/`_start`/`_end` entry kernels of LLVM libc's GPU start-up ABI.
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    expand_main(args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand_test(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let args = parse::test_args(args)?;
    validate::launch_shape(&args.shape)?;
    let mut function: ItemFn = syn::parse2(item)?;
    validate::test_fn(&function)?;
    // After the signature's checks: of a bad signature and a bad attribute, the first is reported.
    let attrs = parse::take_test_attrs(&mut function.attrs)?;
    Ok(codegen::test(&function, &args, &attrs))
}

fn expand_bench(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let args = parse::bench_args(args)?;
    validate::launch_shape(&args.shape)?;
    let mut function: ItemFn = syn::parse2(item)?;
    validate::bench_fn(&function)?;
    let attrs = parse::take_test_attrs(&mut function.attrs)?;
    Ok(codegen::bench(&function, &args, &attrs))
}

fn expand_kernel(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let function: ItemFn = syn::parse2(item)?;
    validate::kernel_fn(&function)?;
    let params = parse::kernel_params(&function);
    let len_args = parse::len_args(args)?;
    let lengths = validate::lengths(&len_args, &params)?;
    validate::kernel_param_count(&function, &params)?;
    Ok(codegen::kernel(function, &params, &lengths))
}

fn expand_main(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    validate::main_args(&args)?;
    let function: ItemFn = syn::parse2(item)?;
    validate::main_fn(&function)?;
    Ok(codegen::main(&function))
}
