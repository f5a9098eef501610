//! The code the attributes emit, from parsed and validated data: calls of `gpurun`'s hidden
//! `export` module and `__gpurun_kernel!` macro, and the descriptors the loader reads.

use crate::parse::{KernelParam, TestArgs, TestAttrs, Unit};
use gpurun_abi::kernel::{Factor, ParamKind};
use gpurun_abi::{desc, symbols};
use proc_macro2::TokenStream as TokenStream2;
use quote::{format_ident, quote, ToTokens};
use syn::ItemFn;

/// The path of the `gpurun` crate, under whatever name the user's `Cargo.toml` gives it.
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

/// The test function (its libtest attributes taken off), its descriptor `__gpurun_desc_ID` and
/// the kernel `__gpurun_test_ID` that runs it.
pub fn test(function: &ItemFn, args: &TestArgs, attrs: &TestAttrs) -> TokenStream2 {
    described(function, args, attrs, false)
}

/// A benchmark: as a test, with the bench flag and its throughput in the descriptor, and a
/// kernel `__gpurun_test_ID(iterations: u64)` that runs the body that many times.
pub fn bench(function: &ItemFn, args: &TestArgs, attrs: &TestAttrs) -> TokenStream2 {
    described(function, args, attrs, true)
}

fn described(function: &ItemFn, args: &TestArgs, attrs: &TestAttrs, bench: bool) -> TokenStream2 {
    let shape = &args.shape;
    let rt = runtime_path();
    let name = &function.sig.ident;
    let id = test_id(name);
    let kernel = format_ident!("{}{}", symbols::TEST_KERNEL_PREFIX, id);
    let descriptor = format_ident!("{}{}", symbols::DESC_PREFIX, id);
    let [tx, ty, tz] = shape.threads;
    let [bx, by, bz] = shape.blocks;
    let (expected, mut flags) = attrs.should_panic.expected_and_flags();
    if attrs.ignore {
        flags |= desc::FLAG_IGNORE;
    }
    if args.gpu_only {
        flags |= desc::FLAG_GPU_ONLY;
    }
    if bench {
        flags |= desc::FLAG_BENCH;
    }
    let reason = &attrs.ignore_reason;
    let name_text = name.to_string();
    let shared = match &args.shared {
        Some(bytes) => quote!(#rt::export::shared_bytes(#bytes)),
        None => quote!(0),
    };
    let throughput = match &args.throughput {
        Some((Unit::Bytes, amount)) => quote!(::core::option::Option::Some(
            #rt::export::Throughput::Bytes(#rt::export::per_iteration(#amount))
        )),
        Some((Unit::Elements, amount)) => quote!(::core::option::Option::Some(
            #rt::export::Throughput::Elements(#rt::export::per_iteration(#amount))
        )),
        None => quote!(::core::option::Option::None),
    };
    let (params, run) = match bench {
        false => (quote!(), quote!(#rt::export::run_test(#name))),
        true => (
            quote!(iterations: u64),
            quote!(#rt::export::run_bench(#name, iterations)),
        ),
    };
    quote! {
        #[allow(dead_code)]
        #function

        const _: () = {
            const PATH: &str = ::core::concat!(::core::module_path!(), "::", #name_text);
            const LEN: usize = #rt::export::descriptor_len(PATH, #expected, #reason);
            // Exported, hence kept; `#[used]` would break amdgcn builds (see the `gpurun` crate).
            #[unsafe(no_mangle)]
            pub static #descriptor: [u8; LEN] = #rt::export::descriptor::<LEN>(
                PATH, #expected, #reason, #flags, [#tx, #ty, #tz], [#bx, #by, #bz], #shared,
                #throughput,
            );
            #rt::__gpurun_kernel! {
                fn #kernel(#params) {
                    // On GPUs, naming its own descriptor keeps each kernel's body distinct:
                    // LLVM merged the kernels of tests that compile to nothing into aliases,
                    // which on amdgcn get no `NAME.kd` (release builds failed to link). Not on
                    // the host, where a test target is linked as a shared object from non-PIC
                    // code that cannot address an exported static.
                    #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
                    ::core::hint::black_box(&#descriptor);
                    #run
                }
            }
        };
    }
}

/// The kernel with the target's ABI, the host's kernel marker and the kernel descriptor
/// `__gpurun_kdesc_NAME`.
pub fn kernel(function: ItemFn, params: &[KernelParam], lengths: &[Vec<Factor>]) -> TokenStream2 {
    let rt = runtime_path();
    let ItemFn {
        attrs, sig, block, ..
    } = function;
    let name = &sig.ident;
    let inputs = &sig.inputs;
    let unsafety = &sig.unsafety;
    // A host `.so` exports many functions; this marker tells the loader which are kernels.
    let marker = format_ident!("{}{}", symbols::HOST_KERNEL_MARKER_PREFIX, name);
    let descriptor = format_ident!("{}{}", symbols::KERNEL_DESC_PREFIX, name);
    let entries = params.iter().zip(lengths).map(|(param, length)| {
        let name = &param.name;
        let kind = match param.kind {
            ParamKind::Integer => quote!(Integer),
            ParamKind::Float => quote!(Float),
            ParamKind::Pointer => quote!(Pointer),
            ParamKind::Other => quote!(Other),
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
    // On the host the kernel's body stays a function of its own, with the user's spans: the
    // host kernel wraps what it calls in a closure inside `__gpurun_kernel!`'s expansion, where
    // coverage (`-Cinstrument-coverage`) would attribute the body to the macro, not its lines.
    let body_name = format_ident!("__gpurun_kernel_body_{}", name, span = name.span());
    let forwarded: Vec<_> = (0..inputs.len())
        .map(|index| format_ident!("__gpurun_arg{}", index))
        .collect();
    let forwarded_types = inputs.iter().map(|input| match input {
        syn::FnArg::Typed(typed) => typed.ty.to_token_stream(),
        // Refused by the compiler in a free function.
        syn::FnArg::Receiver(receiver) => receiver.ty.to_token_stream(),
    });
    quote! {
        #[cfg(any(target_arch = "nvptx64", target_arch = "amdgpu"))]
        #rt::__gpurun_kernel! {
            #(#attrs)*
            #unsafety fn #name(#inputs) #block
        }
        #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
        #(#attrs)*
        #unsafety fn #body_name(#inputs) #block
        #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
        #rt::__gpurun_kernel! {
            #(#attrs)*
            #[allow(unused_unsafe)]
            #unsafety fn #name(#(#forwarded: #forwarded_types),*) {
                // SAFETY: the kernel's own contract, which its caller took on.
                unsafe { #body_name(#(#forwarded),*) }
            }
        }
        #[cfg(not(any(target_arch = "nvptx64", target_arch = "amdgpu")))]
        #[unsafe(no_mangle)]
        pub static #marker: u8 = 0;
        const _: () = {
            const PARAMS: &[#rt::export::KernelParam<'static>] = &[#(#entries),*];
            const LEN: usize = #rt::export::kernel_descriptor_len(PARAMS);
            // Exported, hence kept (see the test descriptors).
            #[unsafe(no_mangle)]
            pub static #descriptor: [u8; LEN] = #rt::export::kernel_descriptor::<LEN>(PARAMS);
        };
    }
}

/// `main` and the `_begin`/`_start`/`_end` entry kernels that call it.
pub fn main(function: &ItemFn) -> TokenStream2 {
    let rt = runtime_path();
    let name = &function.sig.ident;
    let call = if function.sig.inputs.is_empty() {
        quote!(#name())
    } else {
        quote!(#name(#rt::env::args()))
    };
    // `()` and `i32` both become an exit status through `Termination`-like conversion.
    let status = quote!(#rt::export::ExitStatus::status(#call));
    quote! {
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
    }
}
