//! Tokens to plain data: a test's launch shape and attributes, a kernel's parameters and its
//! `len(...)` rules. Only the syntax is checked here; what the data must satisfy is in
//! `validate`.

use gpurun_abi::kernel::ParamKind;
use gpurun_abi::{LaunchShape, ShouldPanic};
use proc_macro2::{Span, TokenStream as TokenStream2};
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Attribute, Expr, ExprLit, ItemFn, Lit, Meta, Token};

/// `#[gpurun::test]`'s arguments.
pub struct TestArgs {
    /// `threads = N` and `blocks = N`, each a number or a tuple of up to 3 dimensions; unset
    /// ones are 1 (the last of a repeated argument counts).
    pub shape: LaunchShape,
    /// `gpu_only`: the test means nothing on the host emulation.
    pub gpu_only: bool,
    /// `shared = BYTES`: dynamic shared memory per block, a constant expression of type
    /// `usize` (`4096`, `TILE * TILE * 4`), evaluated where the descriptor is built.
    pub shared: Option<Expr>,
    /// `#[gpurun::bench]` only: `bytes = N` or `elements = N` per iteration, a constant
    /// expression of type `usize`, as `shared` is.
    pub throughput: Option<(Unit, Expr)>,
}

/// What a benchmark's throughput counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Elements,
}

/// Which attribute the arguments belong to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Test,
    Bench,
}

/// Reads `#[gpurun::test]`'s arguments (see [`TestArgs`]).
pub fn test_args(args: TokenStream2) -> syn::Result<TestArgs> {
    launch_args(args, Which::Test)
}

/// Reads `#[gpurun::bench]`'s arguments: a test's, and its throughput.
pub fn bench_args(args: TokenStream2) -> syn::Result<TestArgs> {
    launch_args(args, Which::Bench)
}

fn launch_args(args: TokenStream2, attribute: Which) -> syn::Result<TestArgs> {
    let mut shape = LaunchShape::SINGLE;
    let mut gpu_only = false;
    let mut shared = None;
    let mut throughput: Option<(Unit, Expr)> = None;
    let expected = match attribute {
        Which::Test => "`threads`, `blocks`, `shared` or `gpu_only`",
        Which::Bench => "`threads`, `blocks`, `shared`, `gpu_only`, `bytes` or `elements`",
    };
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
    for meta in metas {
        if meta.path().is_ident("gpu_only") {
            if !matches!(meta, Meta::Path(_)) {
                return Err(syn::Error::new(meta.span(), "`gpu_only` takes no value"));
            }
            gpu_only = true;
            continue;
        }
        let Meta::NameValue(pair) = &meta else {
            return Err(syn::Error::new(
                meta.span(),
                "expected `threads = N` or `blocks = N` (or a tuple of up to 3 dimensions), \
                 `shared = BYTES`, or `gpu_only`",
            ));
        };
        if pair.path.is_ident("shared") {
            shared = Some(pair.value.clone());
            continue;
        }
        let unit = if pair.path.is_ident("bytes") {
            Some(Unit::Bytes)
        } else if pair.path.is_ident("elements") {
            Some(Unit::Elements)
        } else {
            None
        };
        if let (Some(unit), Which::Bench) = (unit, attribute) {
            if throughput.as_ref().is_some_and(|(first, _)| *first != unit) {
                return Err(syn::Error::new(
                    pair.path.span(),
                    "give `bytes` or `elements`, not both: one throughput per benchmark",
                ));
            }
            throughput = Some((unit, pair.value.clone()));
            continue;
        }
        let dims = dimensions(&pair.value)?;
        if pair.path.is_ident("threads") {
            shape.threads = dims;
        } else if pair.path.is_ident("blocks") {
            shape.blocks = dims;
        } else {
            return Err(syn::Error::new(
                pair.path.span(),
                format!("unknown argument: expected {expected}"),
            ));
        }
    }
    Ok(TestArgs {
        shape,
        gpu_only,
        shared,
        throughput,
    })
}

fn dimensions(expr: &Expr) -> syn::Result<[u32; 3]> {
    // A dimension is a positive integer literal: 0 is refused here, at the literal and in
    // source order, as a literal too large for a `u32` is.
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
        Expr::Paren(paren) => dimensions(&paren.expr),
        other => Ok([one(other)?, 1, 1]),
    }
}

/// The libtest attributes written after `#[gpurun::test]`.
pub struct TestAttrs {
    pub ignore: bool,
    pub ignore_reason: String,
    pub should_panic: ShouldPanic,
}

/// Takes `#[ignore]` and `#[should_panic]` off the function and records them.
pub fn take_test_attrs(attrs: &mut Vec<Attribute>) -> syn::Result<TestAttrs> {
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

/// A kernel parameter: its name (empty for a pattern that is not a name), kind and the type
/// whose size the descriptor records (for a pointer, what it points at).
pub struct KernelParam {
    pub name: String,
    pub kind: ParamKind,
    pub sized: Option<syn::Type>,
}

/// What a parameter is, from its type as written. `ParamKind::Pointer` is a thin pointer or
/// reference (sized: what it points at); a fat pointer is `Other`, only counted.
fn classify(ty: &syn::Type) -> (ParamKind, Option<syn::Type>) {
    let pointee = |elem: &syn::Type| {
        let fat = match elem {
            syn::Type::Slice(_) | syn::Type::TraitObject(_) => true,
            syn::Type::Path(path) => path.path.is_ident("str"),
            _ => false,
        };
        if fat {
            (ParamKind::Other, None)
        } else {
            (ParamKind::Pointer, Some(elem.clone()))
        }
    };
    match ty {
        syn::Type::Ptr(ptr) => pointee(&ptr.elem),
        syn::Type::Reference(reference) => pointee(&reference.elem),
        syn::Type::Paren(inner) => classify(&inner.elem),
        syn::Type::Group(inner) => classify(&inner.elem),
        syn::Type::Path(path) if path.qself.is_none() => {
            let name = path.path.get_ident().map(ToString::to_string);
            let kind = match name.as_deref() {
                Some(
                    "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize"
                    | "bool",
                ) => ParamKind::Integer,
                Some("f32" | "f64") => ParamKind::Float,
                _ => ParamKind::Other,
            };
            (kind, Some(ty.clone()))
        }
        syn::Type::ImplTrait(_) | syn::Type::Infer(_) | syn::Type::Never(_) => {
            (ParamKind::Other, None)
        }
        other => (ParamKind::Other, Some(other.clone())),
    }
}

pub fn kernel_params(function: &ItemFn) -> Vec<KernelParam> {
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
                let (kind, sized) = classify(&typed.ty);
                KernelParam { name, kind, sized }
            }
            // A kernel is a free function; `self` is refused by the compiler already.
            syn::FnArg::Receiver(_) => KernelParam {
                name: String::new(),
                kind: ParamKind::Other,
                sized: None,
            },
        })
        .collect()
}

/// One `len(...)` argument of `#[gpurun::kernel]`.
pub struct LenArg {
    pub span: Span,
    pub rules: Vec<LenRule>,
}

/// `POINTER = LENGTH` in `len(...)`, the length a product of terms.
pub struct LenRule {
    /// Empty when the left side is not a plain name.
    pub pointer: String,
    pub pointer_span: Span,
    pub terms: Vec<LenTerm>,
    pub length_span: Span,
}

/// A factor of a length as written; `validate` resolves the names.
pub enum LenTerm {
    Constant(u32),
    Name(String, Span),
}

pub const LEN_SYNTAX: &str =
    "expected a product (`*`) of integer parameters, integer literals, `blocks` and `threads`";

/// `#[gpurun::kernel]`'s arguments: nothing, or `len(PTR = LENGTH, ...)`.
pub fn len_args(args: TokenStream2) -> syn::Result<Vec<LenArg>> {
    let metas = Punctuated::<Meta, Token![,]>::parse_terminated.parse2(args)?;
    let mut found = Vec::new();
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
        let pairs =
            list.parse_args_with(Punctuated::<syn::MetaNameValue, Token![,]>::parse_terminated)?;
        let mut rules = Vec::with_capacity(pairs.len());
        for pair in pairs {
            let mut terms = Vec::new();
            len_terms(&pair.value, &mut terms)?;
            rules.push(LenRule {
                pointer: pair
                    .path
                    .get_ident()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                pointer_span: pair.path.span(),
                terms,
                length_span: pair.value.span(),
            });
        }
        found.push(LenArg {
            span: list.span(),
            rules,
        });
    }
    Ok(found)
}

fn len_terms(expr: &Expr, out: &mut Vec<LenTerm>) -> syn::Result<()> {
    match expr {
        Expr::Binary(binary) if matches!(binary.op, syn::BinOp::Mul(_)) => {
            len_terms(&binary.left, out)?;
            len_terms(&binary.right, out)
        }
        Expr::Paren(paren) => len_terms(&paren.expr, out),
        Expr::Group(group) => len_terms(&group.expr, out),
        Expr::Lit(ExprLit {
            lit: Lit::Int(int), ..
        }) => {
            out.push(LenTerm::Constant(int.base10_parse()?));
            Ok(())
        }
        Expr::Path(path) if path.qself.is_none() => match path.path.get_ident() {
            Some(name) => {
                out.push(LenTerm::Name(name.to_string(), path.span()));
                Ok(())
            }
            None => Err(syn::Error::new(path.span(), LEN_SYNTAX)),
        },
        other => Err(syn::Error::new(other.span(), LEN_SYNTAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::{bench_args, kernel_params, len_args, take_test_attrs, test_args, Unit};
    use gpurun_abi::kernel::ParamKind;
    use gpurun_abi::{LaunchShape, ShouldPanic};
    use proc_macro2::TokenStream as TokenStream2;
    use quote::quote;
    use syn::ItemFn;

    fn error(result: syn::Result<impl Sized>) -> String {
        result.err().expect("an error").to_string()
    }

    #[::core::prelude::v1::test]
    fn parameters_are_classified_by_their_type() {
        let function = syn::parse2(quote!(
            unsafe fn k(a: f32, x: *const f32, y: &mut [u32; 4], n: usize, rows: u32, s: &[u8]) {}
        ))
        .unwrap();
        let params = kernel_params(&function);
        let kinds: Vec<ParamKind> = params.iter().map(|p| p.kind).collect();
        assert!(
            kinds
                == [
                    ParamKind::Float,
                    ParamKind::Pointer,
                    ParamKind::Pointer,
                    ParamKind::Integer,
                    ParamKind::Integer,
                    ParamKind::Other,
                ]
        );
    }

    #[::core::prelude::v1::test]
    fn kernel_arguments_other_than_a_product_in_len_are_refused() {
        let error = |args: TokenStream2| error(len_args(args));
        assert!(error(quote!(len(x = n + 1))).contains("expected a product"));
        assert!(error(quote!(threads = 4)).contains("expected `len("));
        assert!(error(quote!(size(x = n))).contains("unknown argument"));
    }

    #[::core::prelude::v1::test]
    fn launch_shapes_are_numbers_or_tuples_of_up_to_three() {
        let launch_shape = |args: TokenStream2| test_args(args).map(|args| args.shape);
        assert_eq!(launch_shape(quote!()).unwrap(), LaunchShape::SINGLE);
        assert_eq!(
            launch_shape(quote!(threads = (16, 16), blocks = 4)).unwrap(),
            LaunchShape::grid([4, 1, 1], [16, 16, 1])
        );
        let error = |args: TokenStream2| error(launch_shape(args));
        assert!(error(quote!(threads = (4, 0))).contains("cannot be 0"));
        assert!(error(quote!(threads = (1, 2, 3, 4))).contains("1 to 3 dimensions"));
        assert!(error(quote!(threads = n)).contains("expected an integer literal"));
        assert!(error(quote!(warps = 2)).contains("unknown argument"));
    }

    #[::core::prelude::v1::test]
    fn gpu_only_is_a_bare_flag_beside_the_shape() {
        assert!(!test_args(quote!(threads = 4)).unwrap().gpu_only);
        let args = test_args(quote!(gpu_only, threads = 4)).unwrap();
        assert!(args.gpu_only);
        assert_eq!(args.shape, LaunchShape::blocks(1).threads(4));
        assert!(error(test_args(quote!(gpu_only = true))).contains("takes no value"));
        assert!(error(test_args(quote!(gpu_only(x)))).contains("takes no value"));
        assert!(error(test_args(quote!(fast))).contains("or `gpu_only`"));
    }

    #[::core::prelude::v1::test]
    fn shared_memory_is_a_constant_expression() {
        assert!(test_args(quote!(threads = 4)).unwrap().shared.is_none());
        let args = test_args(quote!(threads = 256, shared = 4 * TILE)).unwrap();
        let shared = args.shared.expect("kept");
        assert_eq!(quote!(#shared).to_string(), quote!(4 * TILE).to_string());
        assert_eq!(args.shape, LaunchShape::blocks(1).threads(256));
        assert!(error(test_args(quote!(shared))).contains("`shared = BYTES`"));
    }

    #[::core::prelude::v1::test]
    fn benchmarks_take_a_tests_arguments_and_one_throughput() {
        let args = bench_args(quote!(threads = 256, gpu_only, bytes = 2 * 4 * N)).unwrap();
        assert_eq!(args.shape, LaunchShape::blocks(1).threads(256));
        assert!(args.gpu_only);
        let (unit, amount) = args.throughput.expect("kept");
        assert_eq!(unit, Unit::Bytes);
        assert_eq!(quote!(#amount).to_string(), quote!(2 * 4 * N).to_string());
        let (unit, _) = bench_args(quote!(elements = 64))
            .unwrap()
            .throughput
            .unwrap();
        assert_eq!(unit, Unit::Elements);
        assert!(bench_args(quote!()).unwrap().throughput.is_none());
        assert!(error(bench_args(quote!(bytes = 4, elements = 1))).contains("not both"));
        assert!(error(bench_args(quote!(warps = 2))).contains("`bytes` or `elements`"));
        // A test has no throughput.
        assert!(error(test_args(quote!(bytes = 4))).contains("unknown argument"));
    }

    #[::core::prelude::v1::test]
    fn libtest_attributes_are_taken_off_the_function() {
        let attrs = |function: TokenStream2| {
            let mut function: ItemFn = syn::parse2(function).unwrap();
            let found = take_test_attrs(&mut function.attrs);
            (found, function.attrs.len())
        };
        let (found, left) = attrs(quote!(
            #[inline]
            #[ignore = "slow"]
            #[should_panic]
            fn t() {}
        ));
        let found = found.unwrap();
        assert_eq!(left, 1);
        assert!(found.ignore && found.ignore_reason == "slow");
        assert_eq!(found.should_panic, ShouldPanic::Yes);
        let expected = attrs(quote!(
            #[should_panic(expected = "boom")]
            fn t() {}
        ))
        .0;
        let expected = expected.unwrap();
        assert!(!expected.ignore);
        assert_eq!(expected.should_panic, ShouldPanic::Expected("boom".into()));
        assert!(error(
            attrs(quote!(
                #[ignore = 1]
                fn t() {}
            ))
            .0
        )
        .contains("string literal"));
    }
}
