//! What the AMDGPU code objects we build would do on a real GPU, checked offline with
//! `llvm-objdump` and the build's image check (docs/abi.md, "AMDGPU code objects" and "Ending a
//! thread"):
//!
//! - no undefined dynamic symbols (ROCr would not load the image), code object v5;
//! - the image check rejects an image with an undefined dynamic symbol or code object v6;
//! - `barrier()` is a release fence, `s_barrier`, an acquire fence;
//! - the panic handler ends the wavefront with `s_endpgm`: no trap (which would kill the queue)
//!   and no endless loop (which would hang the wavefront and its block's barriers).
//! - so test cases read from an AMDGPU image say a panic ends a wavefront of their kernel's size
//!   (the failure output names the threads that went with it); nvptx and host ones do not.
//!
//! Release builds (`-p big-block -p panics -p basic --release`), so the fences are inlined around
//! the barrier as users' code gets them. basic has several tests that compile to nothing, whose
//! kernels LLVM merged into aliases without kernel descriptors until each kernel's body named its
//! own descriptor.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{built_image_paths, fixtures_manifest, gpurun, nightly};
use gpurun_build::toolchain::{self, Toolchain};
use gpurun_build::validate::{self, ValidateError};
use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{Object, ObjectSymbol};

/// Builds big-block, panics and basic for gfx90a (release) once and returns their code objects.
fn images() -> &'static [PathBuf] {
    static BUILT: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let manifest = fixtures_manifest();
        let output = gpurun(
            &[
                "build",
                "--release",
                "--message-format",
                "json",
                "-p",
                "big-block",
                "-p",
                "panics",
                "-p",
                "basic",
                "--target",
                "amdgcn",
                "--arch",
                "gfx90a",
                "--manifest-path",
                manifest.to_str().unwrap(),
            ],
            &[],
        );
        built_image_paths(&output)
    })
}

fn image(name: &str) -> &'static Path {
    images()
        .iter()
        .find(|path| path.file_stem().is_some_and(|stem| stem == name))
        .unwrap_or_else(|| panic!("no {name} image in {:?}", images()))
}

/// The function of image `image_name` that `is_it` picks (`what`), as (function, instructions);
/// `None`, after saying why the test does not run, without the nightly toolchain.
fn find_function(
    image_name: &str,
    what: &str,
    is_it: impl Fn(&str, &[String]) -> bool,
) -> Option<(String, Vec<String>)> {
    let toolchain = nightly()?;
    let function = disassemble(&toolchain, image(image_name))
        .into_iter()
        .find(|(name, body)| is_it(name, body))
        .unwrap_or_else(|| panic!("no {what} in {image_name}"));
    Some(function)
}

/// `llvm-objdump -d` of `path`, as (function, instructions) in address order.
fn disassemble(toolchain: &Toolchain, path: &Path) -> Vec<(String, Vec<String>)> {
    let objdump = toolchain::find_llvm_tool_in(&toolchain.rustlib_bin_dir(), "llvm-objdump")
        .expect("llvm-objdump is part of llvm-tools");
    let output = Command::new(objdump)
        .args(["-d", "--no-show-raw-insn", "--mcpu=gfx90a"])
        .arg(path)
        .output()
        .expect("run llvm-objdump");
    assert!(output.status.success());
    let mut functions: Vec<(String, Vec<String>)> = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        // `0000000000002100 <_begin>:` starts a function.
        if let Some(name) = line
            .split_once(" <")
            .and_then(|(_, rest)| rest.strip_suffix(">:"))
        {
            functions.push((name.to_owned(), Vec::new()));
        } else if let Some((_, body)) = functions.last_mut() {
            let instruction = line.split("//").next().unwrap_or("").trim();
            if !instruction.is_empty() {
                body.push(instruction.to_owned());
            }
        }
    }
    functions
}

#[test]
fn built_code_objects_pass_the_image_check() {
    if nightly().is_none() {
        return;
    }
    assert_eq!(images().len(), 3, "{:?}", images());
    for path in images() {
        let bytes = std::fs::read(path).unwrap();
        validate::check_amdgpu_code_object(&bytes)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        // Cross-checked with `object`: no undefined dynamic symbol, ELF ABI version 3 (v5).
        let elf = ElfFile64::<object::Endianness>::parse(&*bytes).unwrap();
        let undefined: Vec<&str> = elf
            .dynamic_symbols()
            .filter(|symbol| symbol.is_undefined())
            .filter_map(|symbol| symbol.name().ok())
            .collect();
        assert!(undefined.is_empty(), "{}: {undefined:?}", path.display());
        assert_eq!(elf.elf_header().e_ident().abi_version, 3);
    }
}

/// A copy of `bytes` with the dynamic symbol `name` made undefined (`st_shndx = SHN_UNDEF`).
fn with_undefined_symbol(bytes: &[u8], name: &str) -> Vec<u8> {
    let elf = ElfFile64::<object::Endianness>::parse(bytes).unwrap();
    let endian = elf.endian();
    let (index, _) = elf
        .dynamic_symbols()
        .enumerate()
        .find(|(_, symbol)| symbol.name() == Ok(name))
        .unwrap_or_else(|| panic!("no dynamic symbol {name}"));
    let dynsym = elf
        .elf_section_table()
        .iter()
        .find(|section| section.sh_type(endian) == object::elf::SHT_DYNSYM)
        .expect(".dynsym");
    // `dynamic_symbols()` skips the null symbol at index 0; st_shndx is at byte 6 of an entry.
    let entry = dynsym.sh_offset(endian) as usize + (index + 1) * 24;
    let mut patched = bytes.to_vec();
    patched[entry + 6..entry + 8].copy_from_slice(&0u16.to_le_bytes());
    patched
}

#[test]
fn the_image_check_rejects_undefined_symbols_and_code_object_v6() {
    if nightly().is_none() {
        return;
    }
    let bytes = std::fs::read(image("panics")).unwrap();
    let broken = with_undefined_symbol(&bytes, "__llvm_rpc_client");
    let elf = ElfFile64::<object::Endianness>::parse(&*broken).unwrap();
    assert!(elf
        .dynamic_symbols()
        .any(|symbol| symbol.is_undefined() && symbol.name() == Ok("__llvm_rpc_client")));
    match validate::check_amdgpu_code_object(&broken) {
        Err(err @ ValidateError::UndefinedSymbols(_)) => {
            assert!(err.to_string().contains("__llvm_rpc_client"), "{err}");
        }
        other => panic!("expected undefined symbols, got {other:?}"),
    }

    let mut v6 = bytes.clone();
    v6[8] = 4; // EI_ABIVERSION of code object v6
    match validate::check_amdgpu_code_object(&v6) {
        Err(err @ ValidateError::UnsupportedCodeObjectVersion { version: 6, .. }) => {
            assert!(err.to_string().contains("v6"), "{err}");
        }
        other => panic!("expected a code object version error, got {other:?}"),
    }
    let mut v4 = bytes;
    v4[8] = 2;
    assert!(validate::check_amdgpu_code_object(&v4).is_ok());
}

#[test]
fn barrier_is_fenced_on_both_sides() {
    let Some((name, body)) = find_function("big_block", "an s_barrier", |_, body| {
        body.iter().any(|line| line == "s_barrier")
    }) else {
        return;
    };
    let at = body.iter().position(|line| line == "s_barrier").unwrap();
    let before = &body[at.saturating_sub(4)..at];
    let after = &body[at + 1..(at + 4).min(body.len())];
    // Release: write back L2 and wait for every outstanding store; acquire: invalidate the caches.
    assert!(
        before.iter().any(|line| line == "buffer_wbl2")
            && before
                .iter()
                .any(|line| line.starts_with("s_waitcnt vmcnt(0)")),
        "no release fence before s_barrier in {name}: {before:?}"
    );
    assert!(
        after.iter().any(|line| line == "buffer_invl2")
            && after.iter().any(|line| line == "buffer_wbinvl1_vol"),
        "no acquire fence after s_barrier in {name}: {after:?}"
    );
}

#[test]
fn a_panic_ends_the_wavefront_without_trapping_or_looping() {
    let Some((_, handler)) = find_function("panics", "the panic handler", |name, _| {
        name.contains("rust_begin_unwind")
    }) else {
        return;
    };
    assert_eq!(
        handler.last().map(String::as_str),
        Some("s_endpgm"),
        "{handler:?}"
    );
    assert!(
        !handler.iter().any(|line| line.starts_with("s_trap")),
        "the panic handler traps: {handler:?}"
    );
    // Only the RPC waits may branch backwards; the end itself is straight-line code after the
    // last call (the report).
    let last_call = handler
        .iter()
        .rposition(|line| line.starts_with("s_swappc"))
        .expect("the handler calls the report");
    assert!(
        !handler[last_call..]
            .iter()
            .any(|line| line.starts_with("s_branch") || line.starts_with("s_cbranch")),
        "the handler branches after reporting: {:?}",
        &handler[last_call..]
    );
}

/// Since a panic ends its whole wavefront on AMD, the tests read from an AMDGPU
/// image carry the wavefront size of each test's kernel (gfx90a: wave64, from the kernel
/// descriptor), so a failure says which threads went with the panic; PTX and host images,
/// where a panic ends only its thread, carry none.
#[test]
fn tests_carry_the_wavefront_a_panic_ends_only_on_amdgpu() {
    if nightly().is_none() {
        return;
    }
    let amdgpu = gpurun_image::Image::read(image("basic")).unwrap();
    let tests = amdgpu.tests().to_vec();
    assert!(!tests.is_empty());
    for test in &tests {
        assert_eq!(test.panic_ends_wavefront, Some(64), "{}", test.name);
    }

    let manifest = fixtures_manifest();
    let output = gpurun(
        &[
            "build",
            "--message-format",
            "json",
            "-p",
            "basic",
            "--target",
            "nvptx",
            "--target",
            "host",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ],
        &[],
    );
    let others = built_image_paths(&output);
    assert_eq!(others.len(), 2, "{others:?}");
    for path in others {
        let image = gpurun_image::Image::read(&path).unwrap();
        let tests = image.tests().to_vec();
        assert_eq!(tests.len(), amdgpu.tests().len(), "{}", path.display());
        for test in &tests {
            assert_eq!(
                test.panic_ends_wavefront,
                None,
                "{} in {}",
                test.name,
                path.display()
            );
        }
    }
}
