//! Attributes for device crates: `#[gpurun::test]`, `#[gpurun::kernel]` and `#[gpurun::main]`.
//!
//! The macros only parse and validate; the code they emit calls hidden macros and functions of
//! `gpurun` (its `export` module), which know the right kernel ABI for each target and
//! the descriptor layout of `docs/abi.md`. They find that crate under whatever name the user's
//! `Cargo.toml` gives it (plain `gpurun` is the documented spelling).
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

fn runtime_path() -> TokenStream2 {
    use proc_macro_crate::{crate_name, FoundCrate};
    match crate_name("gpurun") {
        Ok(FoundCrate::Itself) => quote!(crate),
        Ok(FoundCrate::Name(name)) => {
            let ident = format_ident!("{}", name);
            quote!(::#ident)
        }
        Err(_) => quote!(::gpurun),
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
            // Exported, hence kept; `#[used]` would break amdgcn builds (see the `gpurun` crate).
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

/// What a kernel parameter is, from its type as written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ParamClass {
    Integer,
    Float,
    /// A thin pointer or reference: to this type.
    Pointer,
    /// Anything else, fat pointers included: only counted.
    Other,
}

/// A kernel parameter: its name (empty for a pattern that is not a name), class and the type
/// whose size the descriptor records (for a pointer, what it points at).
struct KernelParam {
    name: String,
    class: ParamClass,
    sized: Option<syn::Type>,
}

fn classify(ty: &syn::Type) -> (ParamClass, Option<syn::Type>) {
    let pointee = |elem: &syn::Type| {
        let fat = match elem {
            syn::Type::Slice(_) | syn::Type::TraitObject(_) => true,
            syn::Type::Path(path) => path.path.is_ident("str"),
            _ => false,
        };
        if fat {
            (ParamClass::Other, None)
        } else {
            (ParamClass::Pointer, Some(elem.clone()))
        }
    };
    match ty {
        syn::Type::Ptr(ptr) => pointee(&ptr.elem),
        syn::Type::Reference(reference) => pointee(&reference.elem),
        syn::Type::Paren(inner) => classify(&inner.elem),
        syn::Type::Group(inner) => classify(&inner.elem),
        syn::Type::Path(path) if path.qself.is_none() => {
            let name = path.path.get_ident().map(ToString::to_string);
            let class = match name.as_deref() {
                Some(
                    "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize"
                    | "bool",
                ) => ParamClass::Integer,
                Some("f32" | "f64") => ParamClass::Float,
                _ => ParamClass::Other,
            };
            (class, Some(ty.clone()))
        }
        syn::Type::ImplTrait(_) | syn::Type::Infer(_) | syn::Type::Never(_) => {
            (ParamClass::Other, None)
        }
        other => (ParamClass::Other, Some(other.clone())),
    }
}

fn kernel_params(function: &ItemFn) -> Vec<KernelParam> {
    function
        .sig
        .inputs
        .iter()
        .map(|input| match input {
            syn::FnArg::Typed(typed) => {
                let name = match &*typed.pat {
                    syn::Pat::Ident(ident) => ident.ident.to_string(),
                    _ => String::new(),
                };
                let (class, sized) = classify(&typed.ty);
                KernelParam { name, class, sized }
            }
            // A kernel is a free function; `self` is refused by the compiler already.
            syn::FnArg::Receiver(_) => KernelParam {
                name: String::new(),
                class: ParamClass::Other,
                sized: None,
            },
        })
        .collect()
}

/// One factor of a declared length, as `gpurun_abi::kernel::Factor` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Factor {
    Constant(u32),
    Param(u32),
    Blocks,
    Threads,
}

const LEN_SYNTAX: &str =
    "expected a product (`*`) of integer parameters, integer literals, `blocks` and `threads`";

fn parse_factors(expr: &Expr, params: &[KernelParam], out: &mut Vec<Factor>) -> syn::Result<()> {
    match expr {
        Expr::Binary(binary) if matches!(binary.op, syn::BinOp::Mul(_)) => {
            parse_factors(&binary.left, params, out)?;
            parse_factors(&binary.right, params, out)
        }
        Expr::Paren(paren) => parse_factors(&paren.expr, params, out),
        Expr::Group(group) => parse_factors(&group.expr, params, out),
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            out.push(Factor::Constant(int.base10_parse()?));
            Ok(())
        }
        Expr::Path(path) if path.qself.is_none() && path.path.get_ident().is_some() => {
            let ident = path
                .path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            let found = params.iter().position(|param| param.name == ident);
            let factor = match (found, ident.as_str()) {
                (Some(_), "blocks" | "threads") => {
                    return Err(syn::Error::new(
                        path.span(),
                        format!("`{ident}` is both a parameter and the launch's `{ident}`: rename the parameter"),
                    ))
                }
                (Some(index), _) => {
                    if params[index].class != ParamClass::Integer {
                        return Err(syn::Error::new(
                            path.span(),
                            format!("`{ident}` is not an integer parameter"),
                        ));
                    }
                    Factor::Param(index as u32)
                }
                (None, "blocks") => Factor::Blocks,
                (None, "threads") => Factor::Threads,
                (None, _) => {
                    return Err(syn::Error::new(
                        path.span(),
                        format!("the kernel has no parameter `{ident}`; {LEN_SYNTAX}"),
                    ))
                }
            };
            out.push(factor);
            Ok(())
        }
        other => Err(syn::Error::new(other.span(), LEN_SYNTAX)),
    }
}

/// Parses `#[gpurun::kernel]`'s arguments: nothing, or `len(PTR = LENGTH, ...)`. Returns the
/// declared length of each parameter (empty: none).
fn parse_kernel_args(args: TokenStream2, params: &[KernelParam]) -> syn::Result<Vec<Vec<Factor>>> {
    let mut lengths = vec![Vec::new(); params.len()];
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
    let mut seen_len = false;
    for meta in metas {
        let Meta::List(list) = &meta else {
            return Err(syn::Error::new(
                meta.span(),
                "expected `len(pointer = length, ...)`",
            ));
        };
        if !list.path.is_ident("len") {
            return Err(syn::Error::new(
                list.path.span(),
                "unknown argument: expected `len(pointer = length, ...)`",
            ));
        }
        if std::mem::replace(&mut seen_len, true) {
            return Err(syn::Error::new(list.span(), "`len(...)` is given twice"));
        }
        let rules =
            list.parse_args_with(Punctuated::<syn::MetaNameValue, Token![,]>::parse_terminated)?;
        for rule in rules {
            let name = rule
                .path
                .get_ident()
                .map(ToString::to_string)
                .unwrap_or_default();
            let index = params
                .iter()
                .position(|param| !name.is_empty() && param.name == name)
                .ok_or_else(|| {
                    syn::Error::new(
                        rule.path.span(),
                        format!("the kernel has no parameter `{name}`"),
                    )
                })?;
            if params[index].class != ParamClass::Pointer {
                return Err(syn::Error::new(
                    rule.path.span(),
                    format!(
                        "`{name}` is not a pointer: only pointers and references have a length"
                    ),
                ));
            }
            if !lengths[index].is_empty() {
                return Err(syn::Error::new(
                    rule.path.span(),
                    format!("the length of `{name}` is given twice"),
                ));
            }
            parse_factors(&rule.value, params, &mut lengths[index])?;
            if lengths[index].len() > gpurun_abi::kernel::MAX_FACTORS {
                return Err(syn::Error::new(rule.value.span(), "too many factors"));
            }
        }
    }
    Ok(lengths)
}

/// The `const` items that export the kernel descriptor `__gpurun_kdesc_NAME`.
fn kernel_descriptor(
    rt: &TokenStream2,
    name: &syn::Ident,
    params: &[KernelParam],
    lengths: &[Vec<Factor>],
) -> syn::Result<TokenStream2> {
    if params.len() > gpurun_abi::kernel::MAX_PARAMS {
        return Err(syn::Error::new(
            name.span(),
            format!(
                "a kernel has at most {} parameters",
                gpurun_abi::kernel::MAX_PARAMS
            ),
        ));
    }
    let symbol = format_ident!("{}{}", symbols::KERNEL_DESC_PREFIX, name);
    let entries = params.iter().zip(lengths).map(|(param, length)| {
        let name = &param.name;
        let kind = match param.class {
            ParamClass::Integer => quote!(Integer),
            ParamClass::Float => quote!(Float),
            ParamClass::Pointer => quote!(Pointer),
            ParamClass::Other => quote!(Other),
        };
        let size = match &param.sized {
            Some(ty) => quote!(::core::mem::size_of::<#ty>() as u32),
            None => quote!(0),
        };
        let factors = length.iter().map(|factor| match factor {
            Factor::Constant(value) => quote!(#rt::export::KernelFactor::Constant(#value)),
            Factor::Param(index) => quote!(#rt::export::KernelFactor::Param(#index)),
            Factor::Blocks => quote!(#rt::export::KernelFactor::Blocks),
            Factor::Threads => quote!(#rt::export::KernelFactor::Threads),
        });
        quote! {
            #rt::export::KernelParam {
                name: #name,
                kind: #rt::export::KernelParamKind::#kind,
                size: #size,
                len: &[#(#factors),*],
            }
        }
    });
    Ok(quote! {
        const _: () = {
            const PARAMS: &[#rt::export::KernelParam<'static>] = &[#(#entries),*];
            const LEN: usize = #rt::export::kernel_descriptor_len(PARAMS);
            // Exported, hence kept (see the test descriptors).
            #[unsafe(no_mangle)]
            pub static #symbol: [u8; LEN] = #rt::export::kernel_descriptor::<LEN>(PARAMS);
        };
    })
}

fn expand_kernel(args: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    let function: ItemFn = syn::parse2(item)?;
    check_plain_fn(&function, "a kernel")?;
    if let ReturnType::Type(_, ty) = &function.sig.output {
        return Err(syn::Error::new(ty.span(), "a kernel returns nothing"));
    }
    let params = kernel_params(&function);
    let lengths = parse_kernel_args(args, &params)?;
    let rt = runtime_path();
    let descriptor = kernel_descriptor(&rt, &function.sig.ident, &params, &lengths)?;
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
        #descriptor
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
    use super::{kernel_params, parse_kernel_args, parse_shape, Factor, ParamClass};
    use proc_macro2::TokenStream as TokenStream2;
    use quote::quote;

    fn lengths(args: TokenStream2) -> Result<Vec<Vec<Factor>>, String> {
        let function = syn::parse2(quote!(
            unsafe fn k(a: f32, x: *const f32, y: &mut [u32; 4], n: usize, rows: u32, s: &[u8]) {}
        ))
        .unwrap();
        let params = kernel_params(&function);
        let classes: Vec<ParamClass> = params.iter().map(|p| p.class).collect();
        assert!(
            classes
                == [
                    ParamClass::Float,
                    ParamClass::Pointer,
                    ParamClass::Pointer,
                    ParamClass::Integer,
                    ParamClass::Integer,
                    ParamClass::Other,
                ]
        );
        parse_kernel_args(args, &params).map_err(|error| error.to_string())
    }

    #[::core::prelude::v1::test]
    fn lengths_are_products_of_parameters_literals_and_the_shape() {
        assert_eq!(lengths(quote!()).unwrap(), vec![Vec::new(); 6]);
        let declared = lengths(quote!(len(x = n, y = 2 * (blocks * threads) * rows))).unwrap();
        assert_eq!(declared[1], [Factor::Param(3)]);
        assert_eq!(
            declared[2],
            [
                Factor::Constant(2),
                Factor::Blocks,
                Factor::Threads,
                Factor::Param(4)
            ]
        );
        assert!(declared[0].is_empty() && declared[3].is_empty());
    }

    #[::core::prelude::v1::test]
    fn bad_lengths_are_refused_with_the_reason() {
        let error = |args| lengths(args).unwrap_err();
        assert!(error(quote!(len(z = n))).contains("no parameter `z`"));
        assert!(error(quote!(len(n = n))).contains("`n` is not a pointer"));
        assert!(error(quote!(len(s = n))).contains("`s` is not a pointer"));
        assert!(error(quote!(len(x = a))).contains("`a` is not an integer parameter"));
        assert!(error(quote!(len(x = m))).contains("no parameter `m`"));
        assert!(error(quote!(len(x = n + 1))).contains("expected a product"));
        assert!(error(quote!(len(x = n, x = 1))).contains("given twice"));
        assert!(error(quote!(len(x = n), len(y = n))).contains("given twice"));
        assert!(error(quote!(threads = 4)).contains("expected `len("));
        assert!(error(quote!(size(x = n))).contains("unknown argument"));
    }

    #[::core::prelude::v1::test]
    fn block_sizes_above_1024_threads_are_refused() {
        assert!(parse_shape(quote!(threads = 1024)).is_ok());
        assert!(parse_shape(quote!(threads = (32, 32, 1), blocks = 4096)).is_ok());
        let err = parse_shape(quote!(threads = (32, 32, 2))).err().unwrap();
        assert!(err.to_string().contains("at most 1024 threads"), "{err}");
        assert!(parse_shape(quote!(threads = 1025)).is_err());
    }
}
