//! Attributes for device crates: `#[gpurun::test]`, `#[gpurun::kernel]` and `#[gpurun::main]`.
//!
//! The macros only parse and validate; the code they emit calls hidden macros and functions of
//! `gpurun-device` (its `export` module), which know the right kernel ABI for each target and
//! the descriptor layout of `docs/abi.md`. They find that crate under whatever name the user's
//! `Cargo.toml` gives it (`gpurun = { package = "gpurun-device" }` is the documented spelling).
//!
//! Owns: the attributes' syntax and their checks. Must not: spell the device ABI itself (the
//! flags, symbol prefixes and descriptor format come from `gpurun-abi`) or know the host.

use gpurun_abi::shape::MAX_BLOCK_THREADS;
use gpurun_abi::{desc, symbols};
use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, ItemFn, Lit, Meta, ReturnType, Token};

/// Marks `fn()` as a device test. Every thread of the launch runs it; the test passes when no
/// thread panics.
///
/// Launch shape: `#[gpurun::test(threads = 256)]`, `threads = (16, 16, 1)`, `blocks = 4`.
/// Also honours `#[ignore]`, `#[ignore = "reason"]`, `#[should_panic]` and
/// `#[should_panic(expected = "text")]` written after it.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    expand_test(args.into(), item.into())
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Declares a kernel with the right ABI for the target (`extern "gpu-kernel"` on GPUs,
/// `extern "C"` on the host) and an unmangled name.
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

fn runtime_path() -> TokenStream2 {
    use proc_macro_crate::{crate_name, FoundCrate};
    match crate_name("gpurun-device") {
        Ok(FoundCrate::Itself) => quote!(crate),
        Ok(FoundCrate::Name(name)) => {
            let ident = format_ident!("{}", name);
            quote!(::#ident)
        }
        Err(_) => quote!(::gpurun_device),
    }
}

#[derive(Default)]
struct Shape {
    threads: Option<[u32; 3]>,
    blocks: Option<[u32; 3]>,
}

fn parse_dims(expr: &Expr) -> syn::Result<[u32; 3]> {
    fn one(expr: &Expr) -> syn::Result<u32> {
        match expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => {
                let value: u32 = int.base10_parse()?;
                if value == 0 {
                    return Err(syn::Error::new(int.span(), "a grid dimension cannot be 0"));
                }
                Ok(value)
            }
            other => Err(syn::Error::new(other.span(), "expected an integer literal")),
        }
    }
    match expr {
        Expr::Tuple(tuple) => {
            let parts: Vec<u32> = tuple.elems.iter().map(one).collect::<syn::Result<_>>()?;
            match parts.as_slice() {
                [x] => Ok([*x, 1, 1]),
                [x, y] => Ok([*x, *y, 1]),
                [x, y, z] => Ok([*x, *y, *z]),
                _ => Err(syn::Error::new(tuple.span(), "expected 1 to 3 dimensions")),
            }
        }
        Expr::Paren(paren) => parse_dims(&paren.expr),
        other => Ok([one(other)?, 1, 1]),
    }
}

fn parse_shape(args: TokenStream2) -> syn::Result<Shape> {
    let mut shape = Shape::default();
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
    for meta in metas {
        let Meta::NameValue(pair) = &meta else {
            return Err(syn::Error::new(
                meta.span(),
                "expected `threads = N` or `blocks = N` (or a tuple of up to 3 dimensions)",
            ));
        };
        let dims = parse_dims(&pair.value)?;
        if pair.path.is_ident("threads") {
            shape.threads = Some(dims);
        } else if pair.path.is_ident("blocks") {
            shape.blocks = Some(dims);
        } else {
            return Err(syn::Error::new(
                pair.path.span(),
                "unknown argument: expected `threads` or `blocks`",
            ));
        }
    }
    if let Some(threads) = shape.threads {
        let per_block: u64 = threads.iter().map(|&n| u64::from(n)).product();
        if per_block > MAX_BLOCK_THREADS {
            return Err(syn::Error::new(
                Span::call_site(),
                format!("a block has at most {MAX_BLOCK_THREADS} threads (NVIDIA and AMD GPUs), not {per_block}: use `blocks` for more"),
            ));
        }
    }
    let total: u64 = [shape.threads, shape.blocks]
        .iter()
        .map(|d| {
            d.unwrap_or([1, 1, 1])
                .iter()
                .map(|&n| u64::from(n))
                .product::<u64>()
        })
        .product();
    if total > u64::from(u32::MAX) {
        return Err(syn::Error::new(
            Span::call_site(),
            "the launch shape has more than 2^32 threads",
        ));
    }
    Ok(shape)
}

enum ShouldPanic {
    No,
    Yes,
    Expected(String),
}

struct TestAttrs {
    ignore: bool,
    ignore_reason: String,
    should_panic: ShouldPanic,
}

/// Takes `#[ignore]` and `#[should_panic]` off the function and records them.
fn take_test_attrs(attrs: &mut Vec<Attribute>) -> syn::Result<TestAttrs> {
    let mut found = TestAttrs {
        ignore: false,
        ignore_reason: String::new(),
        should_panic: ShouldPanic::No,
    };
    let mut kept = Vec::with_capacity(attrs.len());
    for attr in attrs.drain(..) {
        if attr.path().is_ident("ignore") {
            found.ignore = true;
            if let Meta::NameValue(pair) = &attr.meta {
                found.ignore_reason = string_literal(&pair.value)?;
            }
        } else if attr.path().is_ident("should_panic") {
            found.should_panic = match &attr.meta {
                Meta::Path(_) => ShouldPanic::Yes,
                Meta::NameValue(pair) => ShouldPanic::Expected(string_literal(&pair.value)?),
                Meta::List(_) => {
                    let mut expected = None;
                    attr.parse_nested_meta(|nested| {
                        if nested.path.is_ident("expected") {
                            let value: syn::LitStr = nested.value()?.parse()?;
                            expected = Some(value.value());
                            Ok(())
                        } else {
                            Err(nested.error("expected `expected = \"...\"`"))
                        }
                    })?;
                    match expected {
                        Some(text) => ShouldPanic::Expected(text),
                        None => ShouldPanic::Yes,
                    }
                }
            };
        } else {
            kept.push(attr);
        }
    }
    *attrs = kept;
    Ok(found)
}

fn string_literal(expr: &Expr) -> syn::Result<String> {
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => Ok(text.value()),
        other => Err(syn::Error::new(other.span(), "expected a string literal")),
    }
}

/// A short, stable id for a test: FNV-1a over where it is written, so equal names in different
/// modules get different kernel symbols without knowing the module path here.
fn test_id(name: &syn::Ident) -> String {
    // Only meaningful inside a real macro expansion; unit tests of this crate never get here.
    let span = name.span().unwrap();
    let place = format!("{}:{}:{}:{}", span.file(), span.line(), span.column(), name);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in place.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let short_name: String = name.to_string().chars().take(40).collect();
    format!("{short_name}_{hash:016x}")
}

fn check_plain_fn(function: &ItemFn, what: &str) -> syn::Result<()> {
    let sig = &function.sig;
    if let Some(asyncness) = &sig.asyncness {
        return Err(syn::Error::new(
            asyncness.span(),
            format!("{what} cannot be async"),
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.generics.span(),
            format!("{what} cannot be generic"),
        ));
    }
    Ok(())
}

fn expand_test(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let shape = parse_shape(args)?;
    let mut function: ItemFn = syn::parse2(item)?;
    check_plain_fn(&function, "a #[gpurun::test] function")?;
    if !function.sig.inputs.is_empty() {
        return Err(syn::Error::new(
            function.sig.inputs.span(),
            "a #[gpurun::test] function takes no arguments",
        ));
    }
    if let ReturnType::Type(_, ty) = &function.sig.output {
        return Err(syn::Error::new(
            ty.span(),
            "a #[gpurun::test] function returns nothing; panic to fail",
        ));
    }
    let attrs = take_test_attrs(&mut function.attrs)?;
    let rt = runtime_path();
    let name = &function.sig.ident;
    let id = test_id(name);
    let kernel = format_ident!("{}{}", symbols::TEST_KERNEL_PREFIX, id);
    let descriptor = format_ident!("{}{}", symbols::DESC_PREFIX, id);
    let [tx, ty, tz] = shape.threads.unwrap_or([1, 1, 1]);
    let [bx, by, bz] = shape.blocks.unwrap_or([1, 1, 1]);
    let mut flags = 0u8;
    if attrs.ignore {
        flags |= desc::FLAG_IGNORE;
    }
    let expected = match &attrs.should_panic {
        ShouldPanic::No => String::new(),
        ShouldPanic::Yes => {
            flags |= desc::FLAG_SHOULD_PANIC;
            String::new()
        }
        ShouldPanic::Expected(text) => {
            flags |= desc::FLAG_SHOULD_PANIC | desc::FLAG_HAS_EXPECTED;
            text.clone()
        }
    };
    let reason = &attrs.ignore_reason;
    let name_text = name.to_string();
    Ok(quote! {
        #[allow(dead_code)]
        #function

        const _: () = {
            const PATH: &str = ::core::concat!(::core::module_path!(), "::", #name_text);
            const LEN: usize = #rt::export::descriptor_len(PATH, #expected, #reason);
            // Exported, hence kept; `#[used]` would break amdgcn builds (see gpurun-device).
            #[unsafe(no_mangle)]
            pub static #descriptor: [u8; LEN] = #rt::export::descriptor::<LEN>(
                PATH, #expected, #reason, #flags, [#tx, #ty, #tz], [#bx, #by, #bz],
            );
            #rt::__gpurun_kernel! {
                fn #kernel() {
                    // On GPUs, naming its own descriptor keeps each kernel's body distinct:
                    // LLVM merged the kernels of tests that compile to nothing into aliases,
                    // which on amdgcn get no `NAME.kd` (release builds failed to link). Not on
                    // the host, where a test target is linked as a shared object from non-PIC
                    // code that cannot address an exported static.
                    #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
                    ::core::hint::black_box(&#descriptor);
                    #rt::export::run_test(#name)
                }
            }
        };
    })
}

fn expand_kernel(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    if !args.is_empty() {
        return Err(syn::Error::new(
            args.span(),
            "#[gpurun::kernel] takes no arguments",
        ));
    }
    let function: ItemFn = syn::parse2(item)?;
    check_plain_fn(&function, "a kernel")?;
    if let ReturnType::Type(_, ty) = &function.sig.output {
        return Err(syn::Error::new(ty.span(), "a kernel returns nothing"));
    }
    let rt = runtime_path();
    let ItemFn {
        attrs, sig, block, ..
    } = function;
    let name = &sig.ident;
    let inputs = &sig.inputs;
    let unsafety = &sig.unsafety;
    // A host `.so` exports many functions; this marker tells the loader which are kernels.
    let marker = format_ident!("{}{}", symbols::HOST_KERNEL_MARKER_PREFIX, name);
    Ok(quote! {
        #rt::__gpurun_kernel! {
            #(#attrs)*
            #unsafety fn #name(#inputs) #block
        }
        #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
        #[unsafe(no_mangle)]
        pub static #marker: u8 = 0;
    })
}

fn expand_main(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    if !args.is_empty() {
        return Err(syn::Error::new(
            args.span(),
            "#[gpurun::main] takes no arguments",
        ));
    }
    let function: ItemFn = syn::parse2(item)?;
    check_plain_fn(&function, "main")?;
    let rt = runtime_path();
    let name = &function.sig.ident;
    let call = match function.sig.inputs.len() {
        0 => quote!(#name()),
        1 => quote!(#name(#rt::env::args())),
        _ => {
            return Err(syn::Error::new(
                function.sig.inputs.span(),
                "main takes no arguments or one `gpurun::Args`",
            ))
        }
    };
    // `()` and `i32` both become an exit status through `Termination`-like conversion.
    let status = quote!(#rt::export::ExitStatus::status(#call));
    Ok(quote! {
        #[allow(dead_code)]
        #function

        const _: () = {
            #rt::__gpurun_kernel! {
                unsafe fn _begin(argc: i32, argv: *const *const u8, envp: *const *const u8) {
                    // SAFETY: the loader passes argc/argv/envp per the start-up ABI.
                    unsafe { #rt::export::begin(argc, argv, envp) }
                }
            }
            #rt::__gpurun_kernel! {
                unsafe fn _start(argc: i32, argv: *const *const u8, envp: *const *const u8, ret: *mut i32) {
                    // SAFETY: as for `_begin`; `ret` points at the loader's result slot.
                    unsafe { #rt::export::start(argc, argv, envp, ret, || #status) }
                }
            }
            #rt::__gpurun_kernel! {
                fn _end() {
                    #rt::export::end()
                }
            }
        };
    })
}

#[cfg(test)]
mod tests {
    use super::parse_shape;
    use quote::quote;

    #[::core::prelude::v1::test]
    fn block_sizes_above_1024_threads_are_refused() {
        assert!(parse_shape(quote!(threads = 1024)).is_ok());
        assert!(parse_shape(quote!(threads = (32, 32, 1), blocks = 4096)).is_ok());
        let err = parse_shape(quote!(threads = (32, 32, 2))).err().unwrap();
        assert!(err.to_string().contains("at most 1024 threads"), "{err}");
        assert!(parse_shape(quote!(threads = 1025)).is_err());
    }
}
