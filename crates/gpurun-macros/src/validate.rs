//! The attributes' rules: what a function, a launch shape and a kernel's `len(...)` must be,
//! each broken rule a `syn::Error` at the tokens that break it.

use crate::parse::{KernelParam, LenArg, LenTerm, LEN_SYNTAX};
use gpurun_abi::kernel::{Factor, ParamKind, MAX_FACTORS, MAX_PARAMS};
use gpurun_abi::shape::MAX_BLOCK_THREADS;
use gpurun_abi::LaunchShape;
use proc_macro2::{Span, TokenStream as TokenStream2};
use syn::spanned::Spanned;
use syn::{ItemFn, ReturnType};

/// A launch every target can run: at most [`MAX_BLOCK_THREADS`] threads a block, under 2^32 in all.
pub fn launch_shape(shape: &LaunchShape) -> syn::Result<()> {
    // Exact, unlike `threads_per_block` (saturating): the message names the product.
    let per_block: u128 = shape.threads.iter().map(|&n| u128::from(n)).product();
    if per_block > u128::from(MAX_BLOCK_THREADS) {
        return Err(syn::Error::new(
            Span::call_site(),
            format!("a block has at most {MAX_BLOCK_THREADS} threads (NVIDIA and AMD GPUs), not {per_block}: use `blocks` for more"),
        ));
    }
    if shape.total_threads() > u64::from(u32::MAX) {
        return Err(syn::Error::new(
            Span::call_site(),
            "the launch shape has more than 2^32 threads",
        ));
    }
    Ok(())
}

/// Neither async nor generic: the kernel ABI has no place for either.
fn plain_fn(function: &ItemFn, what: &str) -> syn::Result<()> {
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

/// A test is a plain `fn()`.
pub fn test_fn(function: &ItemFn) -> syn::Result<()> {
    plain_fn(function, "a #[gpurun::test] function")?;
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
    Ok(())
}

/// A benchmark is a plain `fn(&mut Bencher)` (the compiler checks the parameter's type against
/// the call the expansion makes), with no `#[should_panic]`: a benchmark that panics fails.
pub fn bench_fn(function: &ItemFn) -> syn::Result<()> {
    plain_fn(function, "a #[gpurun::bench] function")?;
    if function.sig.inputs.len() != 1 {
        let span = match function.sig.inputs.is_empty() {
            true => function.sig.ident.span(),
            false => function.sig.inputs.span(),
        };
        return Err(syn::Error::new(
            span,
            "a #[gpurun::bench] function takes one argument: `b: &mut gpurun::bench::Bencher`",
        ));
    }
    if let ReturnType::Type(_, ty) = &function.sig.output {
        return Err(syn::Error::new(
            ty.span(),
            "a #[gpurun::bench] function returns nothing; panic to fail",
        ));
    }
    if let Some(attr) = function
        .attrs
        .iter()
        .find(|attr| attr.path().is_ident("should_panic"))
    {
        return Err(syn::Error::new(
            attr.span(),
            "a benchmark cannot be #[should_panic]: a panic fails it",
        ));
    }
    Ok(())
}

/// A kernel is a plain function that returns nothing.
pub fn kernel_fn(function: &ItemFn) -> syn::Result<()> {
    plain_fn(function, "a kernel")?;
    if let ReturnType::Type(_, ty) = &function.sig.output {
        return Err(syn::Error::new(ty.span(), "a kernel returns nothing"));
    }
    Ok(())
}

/// A kernel descriptor counts its parameters in a byte.
pub fn kernel_param_count(function: &ItemFn, params: &[KernelParam]) -> syn::Result<()> {
    if params.len() > MAX_PARAMS {
        return Err(syn::Error::new(
            function.sig.ident.span(),
            format!("a kernel has at most {MAX_PARAMS} parameters"),
        ));
    }
    Ok(())
}

/// Checks the `len(...)` rules against the parameters and resolves them: the declared length of
/// each parameter, in factors (empty: none).
pub fn lengths(args: &[LenArg], params: &[KernelParam]) -> syn::Result<Vec<Vec<Factor>>> {
    let mut lengths = vec![Vec::new(); params.len()];
    for (nth, arg) in args.iter().enumerate() {
        if nth > 0 {
            return Err(syn::Error::new(arg.span, "`len(...)` is given twice"));
        }
        for rule in &arg.rules {
            let name = &rule.pointer;
            let index = params
                .iter()
                .position(|param| !name.is_empty() && param.name == *name)
                .ok_or_else(|| {
                    syn::Error::new(
                        rule.pointer_span,
                        format!("the kernel has no parameter `{name}`"),
                    )
                })?;
            if params[index].kind != ParamKind::Pointer {
                return Err(syn::Error::new(
                    rule.pointer_span,
                    format!(
                        "`{name}` is not a pointer: only pointers and references have a length"
                    ),
                ));
            }
            if !lengths[index].is_empty() {
                return Err(syn::Error::new(
                    rule.pointer_span,
                    format!("the length of `{name}` is given twice"),
                ));
            }
            lengths[index] = rule
                .terms
                .iter()
                .map(|term| factor(term, params))
                .collect::<syn::Result<_>>()?;
            if lengths[index].len() > MAX_FACTORS {
                return Err(syn::Error::new(rule.length_span, "too many factors"));
            }
        }
    }
    Ok(lengths)
}

/// A term of a length: a constant, an integer parameter, or the launch's `blocks` or `threads`.
fn factor(term: &LenTerm, params: &[KernelParam]) -> syn::Result<Factor> {
    let (name, span) = match term {
        LenTerm::Constant(value) => return Ok(Factor::Constant(*value)),
        LenTerm::Name(name, span) => (name.as_str(), *span),
    };
    match (params.iter().position(|param| param.name == name), name) {
        (Some(_), "blocks" | "threads") => Err(syn::Error::new(
            span,
            format!("`{name}` is both a parameter and the launch's `{name}`: rename the parameter"),
        )),
        (Some(index), _) if params[index].kind != ParamKind::Integer => Err(syn::Error::new(
            span,
            format!("`{name}` is not an integer parameter"),
        )),
        (Some(index), _) => Ok(Factor::Param(index as u32)),
        (None, "blocks") => Ok(Factor::Blocks),
        (None, "threads") => Ok(Factor::Threads),
        (None, _) => Err(syn::Error::new(
            span,
            format!("the kernel has no parameter `{name}`; {LEN_SYNTAX}"),
        )),
    }
}

/// `#[gpurun::main]` takes no arguments.
pub fn main_args(args: &TokenStream2) -> syn::Result<()> {
    if !args.is_empty() {
        return Err(syn::Error::new(
            args.span(),
            "#[gpurun::main] takes no arguments",
        ));
    }
    Ok(())
}

/// `main` is a plain function of no arguments or one `gpurun::Args`.
pub fn main_fn(function: &ItemFn) -> syn::Result<()> {
    plain_fn(function, "main")?;
    if function.sig.inputs.len() > 1 {
        return Err(syn::Error::new(
            function.sig.inputs.span(),
            "main takes no arguments or one `gpurun::Args`",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::parse;
    use gpurun_abi::kernel::Factor;
    use gpurun_abi::LaunchShape;
    use proc_macro2::TokenStream as TokenStream2;
    use quote::quote;
    use syn::ItemFn;

    fn error(result: syn::Result<impl Sized>) -> String {
        result.err().expect("an error").to_string()
    }

    fn function(tokens: TokenStream2) -> ItemFn {
        syn::parse2(tokens).unwrap()
    }

    fn lengths(args: TokenStream2) -> Result<Vec<Vec<Factor>>, String> {
        let function = function(quote!(
            unsafe fn k(a: f32, x: *const f32, y: &mut [u32; 4], n: usize, rows: u32, s: &[u8]) {}
        ));
        let params = parse::kernel_params(&function);
        let args = parse::len_args(args).map_err(|error| error.to_string())?;
        super::lengths(&args, &params).map_err(|error| error.to_string())
    }

    fn shape(args: TokenStream2) -> syn::Result<LaunchShape> {
        let shape = parse::test_args(args)?.shape;
        super::launch_shape(&shape).map(|()| shape)
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
        assert!(error(quote!(len(x = n, x = 1))).contains("given twice"));
        assert!(error(quote!(len(x = n), len(y = n))).contains("given twice"));
    }

    #[::core::prelude::v1::test]
    fn a_parameter_named_blocks_or_threads_is_not_a_factor() {
        for name in ["blocks", "threads"] {
            let shadow = syn::Ident::new(name, proc_macro2::Span::call_site());
            let function = function(quote!(unsafe fn k(x: *const f32, #shadow: u32) {}));
            let params = parse::kernel_params(&function);
            let args = parse::len_args(quote!(len(x = #shadow))).unwrap();
            let message = error(super::lengths(&args, &params));
            assert!(
                message.contains("both a parameter and the launch's"),
                "{message}"
            );
        }
    }

    #[::core::prelude::v1::test]
    fn a_length_has_at_most_255_factors() {
        let function = function(quote!(
            unsafe fn k(x: *const f32, n: u32) {}
        ));
        let params = parse::kernel_params(&function);
        let product = |count: usize| -> TokenStream2 {
            let product = vec!["n"; count].join(" * ");
            format!("len(x = {product})").parse().unwrap()
        };
        let args = parse::len_args(product(255)).unwrap();
        assert_eq!(super::lengths(&args, &params).unwrap()[0].len(), 255);
        let args = parse::len_args(product(256)).unwrap();
        assert!(error(super::lengths(&args, &params)).contains("too many factors"));
    }

    #[::core::prelude::v1::test]
    fn a_kernel_has_at_most_255_parameters() {
        let with_params = |count: usize| {
            let names = (0..count).map(|i| quote::format_ident!("p{i}"));
            let function = function(quote!(fn k(#(#names: u32),*) {}));
            let params = parse::kernel_params(&function);
            super::kernel_param_count(&function, &params)
        };
        assert!(with_params(255).is_ok());
        assert!(error(with_params(256)).contains("at most 255 parameters"));
    }

    #[::core::prelude::v1::test]
    fn block_sizes_above_1024_threads_are_refused() {
        assert!(shape(quote!(threads = 1024)).is_ok());
        assert!(shape(quote!(threads = (32, 32, 1), blocks = 4096)).is_ok());
        let err = shape(quote!(threads = (32, 32, 2))).err().unwrap();
        assert!(err.to_string().contains("at most 1024 threads"), "{err}");
        assert!(shape(quote!(threads = 1025)).is_err());
    }

    #[::core::prelude::v1::test]
    fn launches_above_2_pow_32_threads_are_refused_without_overflowing() {
        assert!(shape(quote!(threads = 1024, blocks = (4096, 1023))).is_ok());
        let too_many = shape(quote!(threads = 1024, blocks = (4096, 1024, 2)));
        assert!(error(too_many).contains("more than 2^32 threads"));
        // Products of such dimensions overflow a u64: a panic in the macro before.
        let huge = quote!(blocks = (4294967295, 4294967295, 4294967295));
        assert!(error(shape(huge)).contains("more than 2^32 threads"));
        let huge = quote!(threads = (4294967295, 4294967295, 4294967295));
        let message = error(shape(huge));
        assert!(
            message.contains("not 79228162458924105385300197375:"),
            "{message}"
        );
    }

    #[::core::prelude::v1::test]
    fn tests_kernels_and_main_are_neither_async_nor_generic() {
        type Check = fn(&ItemFn) -> syn::Result<()>;
        let checks: [(&str, Check); 3] = [
            ("a #[gpurun::test] function", super::test_fn),
            ("a kernel", super::kernel_fn),
            ("main", super::main_fn),
        ];
        for (what, check) in checks {
            assert!(
                check(&function(quote!(
                    fn f() {}
                )))
                .is_ok(),
                "{what}"
            );
            let message = error(check(&function(quote!(
                async fn f() {}
            ))));
            assert_eq!(message, format!("{what} cannot be async"));
            let message = error(check(&function(quote!(
                fn f<T>() {}
            ))));
            assert_eq!(message, format!("{what} cannot be generic"));
        }
    }

    #[::core::prelude::v1::test]
    fn a_test_takes_no_arguments_and_returns_nothing() {
        let check = |tokens| error(super::test_fn(&function(tokens)));
        assert!(check(quote!(
            fn t(x: u32) {}
        ))
        .contains("takes no arguments"));
        assert!(check(quote!(
            fn t() -> u32 {
                0
            }
        ))
        .contains("returns nothing; panic to fail"));
    }

    #[::core::prelude::v1::test]
    fn a_kernel_returns_nothing() {
        let kernel = function(quote!(
            fn k(x: u32) -> u32 {
                x
            }
        ));
        assert!(error(super::kernel_fn(&kernel)).contains("a kernel returns nothing"));
    }

    #[::core::prelude::v1::test]
    fn main_takes_no_attribute_arguments_and_at_most_one_parameter() {
        assert!(super::main_args(&quote!()).is_ok());
        assert!(error(super::main_args(&quote!(x))).contains("takes no arguments"));
        let main = |tokens| super::main_fn(&function(tokens));
        assert!(main(quote!(
            fn main(args: gpurun::Args) -> i32 {
                0
            }
        ))
        .is_ok());
        let two = main(quote!(
            fn main(a: u32, b: u32) -> i32 {
                0
            }
        ));
        assert!(error(two).contains("no arguments or one `gpurun::Args`"));
    }

    #[::core::prelude::v1::test]
    fn a_benchmark_takes_its_bencher_and_cannot_should_panic() {
        let bench_error = |tokens: TokenStream2| error(super::bench_fn(&function(tokens)));
        assert!(super::bench_fn(&function(quote!(
            fn copy(b: &mut gpurun::bench::Bencher) {}
        )))
        .is_ok());
        assert!(bench_error(quote!(
            fn copy() {}
        ))
        .contains("takes one argument"));
        assert!(bench_error(quote!(
            fn copy(a: u32, b: u32) {}
        ))
        .contains("takes one argument"));
        assert!(bench_error(quote!(
            fn copy(b: &mut Bencher) -> u32 {
                0
            }
        ))
        .contains("returns nothing"));
        assert!(bench_error(quote!(
            #[should_panic]
            fn copy(b: &mut Bencher) {}
        ))
        .contains("cannot be #[should_panic]"));
        assert!(bench_error(quote!(
            async fn copy(b: &mut Bencher) {}
        ))
        .contains("cannot be async"));
    }
}
