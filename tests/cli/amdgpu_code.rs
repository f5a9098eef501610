//! What the AMDGPU code objects we build would do on a real GPU, checked offline with
//! `llvm-objdump` and the build's image check (docs/abi.md, "AMDGPU code objects" and "Ending a
//! thread"), for a wave64 and a wave32 architecture:
//!
//! - no undefined dynamic symbols (ROCr would not load the image), code object v5;
//! - the image check rejects an image with an undefined dynamic symbol or code object v6;
//! - `barrier()` is a workgroup barrier on gfx90a (`s_waitcnt` then `s_barrier`, no cache
//!   write-back or invalidate) and keeps its system-scope fences on gfx1100;
//! - the panic handler ends the wavefront with `s_endpgm`: no trap (which would kill the queue)
//!   and no endless loop (which would hang the wavefront and its block's barriers);
//! - block and grid sizes are read from the dispatch packet, with no atomics;
//! - so test cases read from an AMDGPU image say a panic ends a wavefront of their kernel's size
//!   (the failure output names the threads that went with it): 64 on gfx90a, 32 on gfx1100;
//!   nvptx and host ones do not;
//! - gfx1100 (wave32) builds in debug (LLVM 22's trap lowering broke that, see
//!   `gpurun_build::amdgcn`), its kernels are wave32 and its lane primitives use 32-bit masks;
//! - block-shared memory (`gpurun::shared`) is LDS: release builds of the shared-memory fixture
//!   read, write and add to it with `ds_` instructions on gfx90a and gfx1100.
//! - the device runtime's warp shuffles are `ds_bpermute` on both, and the `_device` forms of its
//!   float and wrapping atomics the GPU's own instructions where it has them (fixtures/device-ops);
//! - `clock64` is the shader clock (`s_memtime` on gfx90a, `SHADER_CYCLES` on gfx1100) and
//!   `nanosleep` sleeps with `s_sleep` against the real-time counter;
//! - on gfx942 (release builds of device-ops and real-kernels) every one of those atomics is
//!   relaxed, with no cache write-back or invalidate around it; a float add to shared memory is
//!   `ds_add_f32`, and the default forms on device memory are compare-and-swap loops, which stay
//!   atomic on host memory mapped for the GPU;
//! - the barrier votes (`gpurun::barrier_count` and its kind) are three barriers around LDS
//!   atomics on the runtime's two counters (gfx90a, release);
//! - the real kernels (fixtures/real-kernels) declare dynamic LDS in their metadata (a
//!   `hidden_dynamic_lds_size` argument, so the dispatch's group segment size comes from the
//!   launch) and shuffle with `ds_bpermute`, on both.
//!
//! gfx90a: release builds (`-p big-block -p panics -p basic -p device-ops -p real-kernels
//! --release`), so the fences are
//! inlined around the barrier as users' code gets them. basic has several tests that compile to
//! nothing, whose kernels LLVM merged into aliases without kernel descriptors until each
//! kernel's body named its own descriptor. gfx1100: debug builds of the same crates, and a
//! release build of big-block for its barrier.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpurun_build::toolchain::{self, Toolchain};
use gpurun_build::validate::{self, ValidateError};
use gpurun_e2e::{built_image_paths, fixtures_manifest, gpu_images_dir, gpurun_in_root, nightly};
use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{Object, ObjectSymbol};

/// The fixtures every build here makes.
const FIXTURES: [&str; 5] = ["big-block", "panics", "basic", "device-ops", "real-kernels"];

/// Builds `fixtures` for `arch` (`--release` or not) and returns copies of their code objects
/// in a folder of that architecture's: the gfx90a and gfx942 release builds write the same
/// paths, and a test reading one while the other is built would read the wrong architecture's.
/// Builds and copies run one at a time.
fn build(fixtures: &[&str], arch: &str, release: bool) -> Vec<PathBuf> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let manifest = fixtures_manifest();
    let mut args = vec!["build", "--message-format", "json"];
    if release {
        args.push("--release");
    }
    for fixture in fixtures {
        args.extend(["-p", fixture]);
    }
    args.extend(["--target", "amdgcn", "--arch", arch]);
    args.extend(["--manifest-path", manifest.to_str().unwrap()]);
    // The GPU images' target directory, where the other tests' amdgcn debug builds (for
    // gfx1100 too) reuse these.
    let built = built_image_paths(&gpurun_in_root(
        &args,
        &[("CARGO_TARGET_DIR", &gpu_images_dir())],
    ));
    let profile = if release { "release" } else { "debug" };
    let folder = gpu_images_dir()
        .join("amdgpu-code")
        .join(format!("{arch}-{profile}"));
    std::fs::create_dir_all(&folder).unwrap();
    built
        .iter()
        .map(|path| {
            let copy = folder.join(path.file_name().expect("an image file"));
            std::fs::copy(path, &copy).unwrap();
            copy
        })
        .collect()
}

/// The gfx90a (wave64) release builds, made once.
fn images() -> &'static [PathBuf] {
    static BUILT: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build(&FIXTURES, "gfx90a", true))
}

/// The gfx1100 (wave32) debug builds, made once.
fn wave32_images() -> &'static [PathBuf] {
    static BUILT: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build(&FIXTURES, "gfx1100", false))
}

fn find_in<'a>(images: &'a [PathBuf], name: &str) -> &'a Path {
    images
        .iter()
        .find(|path| path.file_stem().is_some_and(|stem| stem == name))
        .unwrap_or_else(|| panic!("no {name} image in {images:?}"))
}

fn find(images: &'static [PathBuf], name: &str) -> &'static Path {
    find_in(images, name)
}

fn image(name: &str) -> &'static Path {
    find(images(), name)
}

/// The function of gfx90a image `image_name` that `is_it` picks (`what`), as (function,
/// instructions); `None`, after saying why the test does not run, without the nightly toolchain.
fn find_function(
    image_name: &str,
    what: &str,
    is_it: impl Fn(&str, &[String]) -> bool,
) -> Option<(String, Vec<String>)> {
    let toolchain = nightly()?;
    let function = disassemble(&toolchain, image(image_name), "gfx90a")
        .into_iter()
        .find(|(name, body)| is_it(name, body))
        .unwrap_or_else(|| panic!("no {what} in {image_name}"));
    Some(function)
}

/// `llvm-objdump -d` of `path` for `arch`, as (function, instructions) in address order.
fn disassemble(toolchain: &Toolchain, path: &Path, arch: &str) -> Vec<(String, Vec<String>)> {
    let objdump = toolchain::find_llvm_tool_in(&toolchain.rustlib_bin_dir(), "llvm-objdump")
        .expect("llvm-objdump is part of llvm-tools");
    let output = Command::new(objdump)
        .args(["-d", "--no-show-raw-insn", &format!("--mcpu={arch}")])
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
    assert_eq!(images().len(), FIXTURES.len(), "{:?}", images());
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

/// The instructions around each `s_barrier` of `body`: up to 4 before and 3 after.
fn around_barriers(body: &[String]) -> Vec<(&[String], &[String])> {
    body.iter()
        .enumerate()
        .filter(|(_, line)| *line == "s_barrier")
        .map(|(at, _)| {
            (
                &body[at.saturating_sub(4)..at],
                &body[at + 1..(at + 4).min(body.len())],
            )
        })
        .collect()
}

/// gfx9 runs a workgroup on one compute unit: the barrier waits for this wavefront's memory
/// operations and synchronizes, without writing back or invalidating any cache (a system-scope
/// fence would: `buffer_wbl2` before, `buffer_invl2` and `buffer_wbinvl1_vol` after).
#[test]
fn barrier_is_a_workgroup_barrier_on_gfx90a() {
    let Some((name, body)) = find_function("big_block", "an s_barrier", |_, body| {
        body.iter().any(|line| line == "s_barrier")
    }) else {
        return;
    };
    for (before, after) in around_barriers(&body) {
        assert!(
            before
                .iter()
                .any(|line| line == "s_waitcnt vmcnt(0) expcnt(0) lgkmcnt(0)"),
            "no wait for the wavefront's memory operations before s_barrier in {name}: \
             {before:?}"
        );
        let cache_operations: Vec<&String> = before
            .iter()
            .chain(after)
            .filter(|line| line.starts_with("buffer_wb") || line.starts_with("buffer_inv"))
            .collect();
        assert!(
            cache_operations.is_empty(),
            "system-scope cache maintenance around s_barrier in {name}: {cache_operations:?}"
        );
    }
}

/// gfx11 runs a workgroup on the two compute units of a WGP, with separate L0 caches: the
/// barrier keeps its fences, waiting for stores before and invalidating L0 after.
#[test]
fn barrier_is_fenced_on_both_sides_on_gfx1100() {
    let Some(toolchain) = nightly() else {
        return;
    };
    // A release build, so the fences are inlined around the barrier as users' code gets them.
    let release = build(&["big-block"], "gfx1100", true);
    let functions = disassemble(&toolchain, find_in(&release, "big_block"), "gfx1100");
    let barriers: Vec<(String, Vec<String>)> = functions
        .into_iter()
        .filter(|(_, body)| body.iter().any(|line| line == "s_barrier"))
        .collect();
    assert!(
        !barriers.is_empty(),
        "no s_barrier in the gfx1100 big_block"
    );
    for (name, body) in &barriers {
        for (before, after) in around_barriers(body) {
            assert!(
                before
                    .iter()
                    .any(|line| line.starts_with("s_waitcnt_vscnt null, 0x0")),
                "no release before s_barrier in {name}: {before:?}"
            );
            assert!(
                after.iter().any(|line| line == "buffer_gl0_inv"),
                "no acquire after s_barrier in {name}: {after:?}"
            );
        }
    }
}

/// `block_dim()` and `grid_dim()` are scalar loads from the dispatch packet (at the offsets
/// gpurun-abi names), not atomics on a global the loader writes before each launch.
#[test]
fn launch_shape_is_read_from_the_dispatch_packet() {
    if nightly().is_none() {
        return;
    }
    let elf = std::fs::read(image("basic")).unwrap();
    let elf = ElfFile64::<object::Endianness>::parse(&*elf).unwrap();
    assert!(
        !elf.dynamic_symbols()
            .any(|symbol| symbol.name() == Ok(gpurun_abi::symbols::RETIRED_LAUNCH_SHAPE)),
        "the image still has the retired launch-shape global"
    );
    let Some((name, body)) = find_function("basic", "grid_ids_are_in_range", |name, _| {
        name.starts_with("__gpurun_test_grid_ids_are_in_range")
    }) else {
        return;
    };
    // The kernel's dispatch pointer arrives in s[4:5]; the sizes are loaded from it.
    use gpurun_abi::shape::dispatch_packet::{GRID_SIZE_X, WORKGROUP_SIZE_X};
    for offset in [WORKGROUP_SIZE_X, GRID_SIZE_X] {
        assert!(
            body.iter().any(|line| line.starts_with("s_load_dword")
                && line.ends_with(&format!(", {offset:#x}"))),
            "no scalar load at packet offset {offset} in {name}"
        );
    }
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
    let wave32 = gpurun_image::Image::read(find(wave32_images(), "basic")).unwrap();
    let wave32_tests = wave32.tests().to_vec();
    assert_eq!(wave32_tests.len(), tests.len());
    for test in &wave32_tests {
        assert_eq!(
            test.panic_ends_wavefront,
            Some(32),
            "gfx1100: {}",
            test.name
        );
    }

    let manifest = fixtures_manifest();
    let output = gpurun_in_root(
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
        // Where the other tests build the fixtures for nvptx, so its `core` is built once.
        &[("CARGO_TARGET_DIR", &gpu_images_dir())],
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

/// gfx1100 builds in debug (see `gpurun_build::amdgcn`) and passes the image check; its kernels
/// are wave32, so the RPC packets have 32 lanes; its code manipulates the 32-bit `exec_lo` only,
/// where the gfx90a build's uses 64-bit masks; both compute the lane id with `v_mbcnt`.
#[test]
fn wave32_debug_builds_use_32_lane_primitives() {
    let Some(toolchain) = nightly() else {
        return;
    };
    assert_eq!(
        wave32_images().len(),
        FIXTURES.len(),
        "{:?}",
        wave32_images()
    );
    for path in wave32_images() {
        let bytes = std::fs::read(path).unwrap();
        validate::check_amdgpu_code_object(&bytes)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let parsed = gpurun_image::Image::read(path).unwrap();
        assert_eq!(
            gpurun_hal::hsa::rpc_lane_size(&parsed, 64),
            32,
            "{}",
            path.display()
        );
    }
    let count = |lines: &[(String, Vec<String>)], pattern: &str| {
        lines
            .iter()
            .flat_map(|(_, body)| body)
            .filter(|line| line.starts_with(pattern))
            .count()
    };
    let wave32 = disassemble(&toolchain, find(wave32_images(), "basic"), "gfx1100");
    let wave64 = disassemble(&toolchain, image("basic"), "gfx90a");
    for (name, code, width, other) in [("gfx1100", &wave32, 32, 64), ("gfx90a", &wave64, 64, 32)] {
        assert!(
            count(code, &format!("s_and_saveexec_b{width}")) > 0,
            "{name}: no {width}-lane exec masks"
        );
        for pattern in [
            format!("s_and_saveexec_b{other}"),
            format!("s_or_saveexec_b{other}"),
        ] {
            assert_eq!(count(code, &pattern), 0, "{name}: {pattern}");
        }
        assert!(count(code, "v_mbcnt_lo_u32_b32") > 0, "{name}: no lane id");
    }
    assert_eq!(
        count(&wave32, "s_mov_b64 exec"),
        0,
        "gfx1100 sets a 64-bit exec"
    );
}

/// `gpurun::shared` arrays live in the workgroup's LDS (the nightly's
/// `gpu_launch_sized_workgroup_mem`, after the kernel's static LDS), so release builds of the
/// shared-memory fixture access them with LDS instructions: loads, stores and the atomic add
/// (`ds_read`/`ds_write` on gfx9, `ds_load`/`ds_store` on gfx11). Debug builds reach the same
/// memory through flat instructions, which is correct but says nothing here. Each arch is built
/// and read before the next, as both write the same image path.
#[test]
fn shared_memory_is_lds_on_gfx90a_and_gfx1100() {
    let Some(toolchain) = nightly() else {
        return;
    };
    for (arch, load, store) in [
        ("gfx90a", "ds_read", "ds_write"),
        ("gfx1100", "ds_load", "ds_store"),
    ] {
        let built = build(&["shared-memory"], arch, true);
        let functions = disassemble(&toolchain, find_in(&built, "shared_memory"), arch);
        let lds: Vec<&String> = functions
            .iter()
            .flat_map(|(_, body)| body)
            .filter(|line| line.starts_with("ds_"))
            .collect();
        for (what, start) in [
            ("load", load),
            ("store", store),
            ("atomic add", "ds_add_u32"),
        ] {
            assert!(
                lds.iter().any(|line| line.starts_with(start)),
                "{arch}: no LDS {what} (`{start}`) in the shared-memory fixture; its ds_ \
                 instructions: {lds:?}"
            );
        }
    }
}

/// How many instructions of `functions` have a mnemonic (the first word) containing `needle`.
fn count_instructions(functions: &[(String, Vec<String>)], needle: &str) -> usize {
    functions
        .iter()
        .flat_map(|(_, body)| body)
        .filter(|line| {
            line.split_whitespace()
                .next()
                .is_some_and(|op| op.contains(needle))
        })
        .count()
}

/// `gpurun::warp`'s shuffles are `ds_bpermute` on wave64 (gfx90a) and wave32 (gfx1100), and
/// `gpurun::atomic`'s float add, min and max and wrapping increment and decrement are the GPU's
/// own atomics where it has them (`flat_` or `global_`, as LLVM infers the address space): float
/// add of both widths and f64 min/max on gfx90a, f32 add/min/max on gfx1100.
#[test]
fn warp_shuffles_are_ds_bpermute_and_atomics_are_native() {
    let Some(toolchain) = nightly() else {
        return;
    };
    let wave64 = disassemble(&toolchain, image("device_ops"), "gfx90a");
    let wave32 = disassemble(&toolchain, find(wave32_images(), "device_ops"), "gfx1100");
    let gfx90a: &[&str] = &[
        "ds_bpermute_b32",
        "atomic_add_f32",
        "atomic_add_f64",
        "atomic_min_f64",
        "atomic_max_f64",
        "atomic_inc",
        "atomic_dec",
    ];
    let gfx1100: &[&str] = &[
        "ds_bpermute_b32",
        "atomic_add_f32",
        "atomic_min_f32",
        "atomic_max_f32",
        "atomic_inc",
        "atomic_dec",
    ];
    for (arch, code, expected) in [("gfx90a", &wave64, gfx90a), ("gfx1100", &wave32, gfx1100)] {
        for needle in expected {
            assert!(
                count_instructions(code, needle) > 0,
                "{arch} device_ops has no {needle}"
            );
        }
    }
}

/// `gpurun::clock64` and `gpurun::nanosleep` (fixtures/device-ops): the shader clock,
/// `s_memtime` on gfx90a and, where there is none (gfx1100), the 20-bit `SHADER_CYCLES`
/// register; sleep as `s_sleep` steps until the 100 MHz real-time counter (`s_memrealtime` on
/// gfx90a, a `s_sendmsg_rtn_b64` message on gfx1100) has moved on.
#[test]
fn clock_and_sleep_are_the_shader_clock_and_s_sleep() {
    let Some(toolchain) = nightly() else {
        return;
    };
    let wave64 = disassemble(&toolchain, image("device_ops"), "gfx90a");
    let wave32 = disassemble(&toolchain, find(wave32_images(), "device_ops"), "gfx1100");
    let has = |code: &[(String, Vec<String>)], mnemonic: &str, operand: &str| {
        code.iter()
            .flat_map(|(_, body)| body)
            .any(|line| line.split_whitespace().next() == Some(mnemonic) && line.contains(operand))
    };
    for (mnemonic, operand) in [
        ("s_memtime", ""),
        ("s_memrealtime", ""),
        ("s_sleep", "s_sleep 1"),
    ] {
        assert!(
            has(&wave64, mnemonic, operand),
            "gfx90a device_ops has no {mnemonic} {operand}"
        );
    }
    for (mnemonic, operand) in [
        ("s_getreg_b32", "HW_REG_SHADER_CYCLES"),
        ("s_sendmsg_rtn_b64", "MSG_RTN_GET_REALTIME"),
        ("s_sleep", "s_sleep 1"),
    ] {
        assert!(
            has(&wave32, mnemonic, operand),
            "gfx1100 device_ops has no {mnemonic} {operand}"
        );
    }
}

/// The code object v5 metadata of each kernel of the code object at `path` (`llvm-readobj
/// --notes`), as (name, its lines of `amdhsa.kernels`).
fn kernel_metadata(toolchain: &Toolchain, path: &Path) -> Vec<(String, Vec<String>)> {
    let readobj = toolchain::find_llvm_tool_in(&toolchain.rustlib_bin_dir(), "llvm-readobj")
        .expect("llvm-readobj is part of llvm-tools");
    let output = Command::new(readobj)
        .arg("--notes")
        .arg(path)
        .output()
        .expect("run llvm-readobj");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    let mut kernels: Vec<Vec<String>> = Vec::new();
    let mut in_kernels = false;
    for line in text.lines() {
        if line.starts_with("amdhsa.kernels:") {
            in_kernels = true;
        } else if in_kernels && line.starts_with("  - ") {
            kernels.push(vec![line.to_owned()]);
        } else if in_kernels && line.starts_with("    ") {
            if let Some(kernel) = kernels.last_mut() {
                kernel.push(line.to_owned());
            }
        } else {
            in_kernels = false;
        }
    }
    kernels
        .into_iter()
        .map(|lines| {
            let name = lines
                .iter()
                .find_map(|line| line.trim().strip_prefix(".name:"))
                .map(|name| name.trim().to_owned())
                .unwrap_or_else(|| panic!("a kernel without .name: {lines:?}"));
            (name, lines)
        })
        .collect()
}

/// The real kernels (fixtures/real-kernels: tiled matrix product, block reduction,
/// histograms, scan, compaction), as built above (gfx90a release, gfx1100 debug). Their shared
/// memory is dynamic LDS (`gpu_launch_sized_workgroup_mem`): the kernel descriptor's and the
/// metadata's `.group_segment_fixed_size` count static LDS only (0 here), and code object v5
/// says a kernel takes LDS sized at launch with a `hidden_dynamic_lds_size` argument; the HSA
/// backend puts the static size plus the launch's `shared_bytes` (and the runtime's 12 bytes) in
/// the dispatch packet. A kernel without shared memory (device-ops' `count_threads`) has no such
/// argument in a release build. Their warp operations are `ds_bpermute` on both architectures.
#[test]
fn real_kernels_take_dynamic_lds_and_shuffle_with_ds_bpermute() {
    let Some(toolchain) = nightly() else {
        return;
    };
    const KERNELS: [&str; 6] = [
        "matmul_tiled",
        "block_sum",
        "histogram",
        "weighted_histogram",
        "inclusive_scan",
        "compact_above",
    ];
    let dynamic_lds = |lines: &[String]| {
        lines.iter().any(|line| {
            line.trim()
                .strip_prefix(".value_kind:")
                .is_some_and(|kind| kind.trim() == "hidden_dynamic_lds_size")
        })
    };
    for (arch, images) in [("gfx90a", images()), ("gfx1100", wave32_images())] {
        let real = find_in(images, "real_kernels");
        let metadata = kernel_metadata(&toolchain, real);
        for kernel in KERNELS {
            let (_, lines) = metadata
                .iter()
                .find(|(name, _)| name == kernel)
                .unwrap_or_else(|| panic!("{arch}: no metadata for {kernel}: {metadata:?}"));
            assert!(
                dynamic_lds(lines),
                "{arch}: {kernel} takes no dynamic LDS: {lines:#?}"
            );
        }
        // On release builds only: gfx1100's images here are debug builds, where LLVM gives
        // count_threads dynamic LDS too since the runtime's barrier votes (a function of their
        // own there, using LDS) came in. Harmless: the loader passes every launch's size.
        if arch == "gfx90a" {
            let device_ops = kernel_metadata(&toolchain, find_in(images, "device_ops"));
            let (_, plain) = device_ops
                .iter()
                .find(|(name, _)| name == "count_threads")
                .unwrap_or_else(|| panic!("{arch}: no metadata for count_threads"));
            assert!(
                !dynamic_lds(plain),
                "{arch}: count_threads uses no shared memory, yet takes dynamic LDS"
            );
        }
        let code = disassemble(&toolchain, real, arch);
        assert!(
            count_instructions(&code, "ds_bpermute_b32") > 0,
            "{arch} real_kernels has no ds_bpermute_b32"
        );
    }
}

/// The gfx942 (MI300) release builds of the fixtures with atomics, made once.
fn gfx942_images() -> &'static [PathBuf] {
    static BUILT: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build(&["device-ops", "real-kernels"], "gfx942", true))
}

/// The kernel of `code` named `name` (the exported name, or a test kernel's prefix).
fn kernel<'a>(code: &'a [(String, Vec<String>)], name: &str) -> &'a [String] {
    code.iter()
        .find(|(function, _)| function == name || function.starts_with(name))
        .map(|(_, body)| body.as_slice())
        .unwrap_or_else(|| panic!("no {name}"))
}

/// Each instruction of `body` whose opcode contains `needle`, with the three instructions on
/// each side: where a sequentially consistent atomic has its cache write-back and invalidate.
fn around<'a>(body: &'a [String], needle: &str) -> Vec<&'a [String]> {
    body.iter()
        .enumerate()
        .filter(|(_, line)| {
            line.split_whitespace()
                .next()
                .is_some_and(|op| op.contains(needle))
        })
        .map(|(at, _)| &body[at.saturating_sub(3)..(at + 4).min(body.len())])
        .collect()
}

/// `gpurun::atomic` on gfx942 (MI300), release builds: every form is relaxed, with no cache
/// write-back (`buffer_wbl2`) or invalidate (`buffer_inv`) around it, which LLVM's sequentially
/// consistent float atomics put on both sides of each one. A float add to shared memory is
/// `ds_add_f32` (fixtures/real-kernels' `weighted_histogram`); the `_device` forms on device
/// buffers are the native global atomics (fixtures/device-ops' `float_stats`, `count_threads`);
/// the default forms on device memory are compare-and-swap loops, atomic on host memory mapped
/// for the GPU too (device-ops' test on statics, and `weighted_histogram`'s global sums).
#[test]
fn gfx942_atomics_are_relaxed_and_native_only_where_safe() {
    let Some(toolchain) = nightly() else {
        return;
    };
    let images = gfx942_images();
    let real = disassemble(&toolchain, find_in(images, "real_kernels"), "gfx942");
    let ops = disassemble(&toolchain, find_in(images, "device_ops"), "gfx942");
    let no_cache_maintenance = |what: &str, body: &[String], needle: &str| {
        let sites = around(body, needle);
        assert!(!sites.is_empty(), "{what}: no {needle}");
        for site in sites {
            assert!(
                !site
                    .iter()
                    .any(|line| line.starts_with("buffer_wbl2") || line.starts_with("buffer_inv")),
                "{what}: cache maintenance around {needle}: {site:#?}"
            );
        }
    };
    let histogram = kernel(&real, "weighted_histogram");
    no_cache_maintenance("weighted_histogram", histogram, "ds_add_f32");
    no_cache_maintenance("weighted_histogram", histogram, "global_atomic_cmpswap");
    let stats = kernel(&ops, "float_stats");
    for needle in [
        "global_atomic_add_f32",
        "global_atomic_add_f64",
        "global_atomic_min_f64",
        "global_atomic_max_f64",
    ] {
        no_cache_maintenance("float_stats", stats, needle);
    }
    let counts = kernel(&ops, "count_threads");
    for needle in ["global_atomic_inc", "global_atomic_dec"] {
        no_cache_maintenance("count_threads", counts, needle);
    }
    let on_statics = kernel(&ops, "__gpurun_test_atomics_of_one_block_add_up");
    assert!(
        count_instructions(&[(String::new(), on_statics.to_vec())], "atomic_cmpswap") > 0,
        "the default forms on device memory loop: {on_statics:#?}"
    );
    for native in ["atomic_add_f32", "atomic_add_f64", "atomic_inc"] {
        assert_eq!(
            count_instructions(&[(String::new(), on_statics.to_vec())], native),
            0,
            "a default form used {native}, which is not atomic on host memory"
        );
    }
}

/// `gpurun::atomic::scoped` on gfx90a (release build of device-ops' `scoped_counts`): Rust names
/// no scope narrower than the system's on AMD, so the last-block count's device-scope
/// acquire-release is a system-scope one: the L2 written back (`buffer_wbl2`) before the
/// global atomic and invalidated (`buffer_invl2`) after it, which a device-scope one on gfx90a
/// would leave out. Wider is correct, and what the module documentation promises.
#[test]
fn scoped_atomics_are_system_scope_on_amd() {
    let Some(toolchain) = nightly() else {
        return;
    };
    let code = disassemble(&toolchain, image("device_ops"), "gfx90a");
    let counts = [(String::new(), kernel(&code, "scoped_counts").to_vec())];
    assert!(
        count_instructions(&counts, "global_atomic_add_x2") > 0,
        "no 64-bit global atomic add in scoped_counts: {counts:#?}"
    );
    for system in ["buffer_wbl2", "buffer_invl2"] {
        assert!(
            count_instructions(&counts, system) > 0,
            "no {system} (system scope) in scoped_counts: {counts:#?}"
        );
    }
}

/// The barrier votes on gfx90a (release build of device-ops): each is three workgroup barriers
/// around LDS atomics on the runtime's two counters (`ds_add_u32`, at offsets 0 and 4 of the
/// LDS tail the HSA backend adds; docs/abi.md), never a flat or global atomic. The fixture's
/// test kernel votes eight times.
#[test]
fn barrier_votes_are_three_barriers_around_lds_counters() {
    let Some(toolchain) = nightly() else {
        return;
    };
    let code = disassemble(&toolchain, image("device_ops"), "gfx90a");
    let votes = kernel(
        &code,
        "__gpurun_test_barrier_votes_answer_for_the_whole_block",
    );
    let only = [(String::new(), votes.to_vec())];
    assert_eq!(count_instructions(&only, "s_barrier"), 8 * 3, "{votes:#?}");
    assert!(count_instructions(&only, "ds_add_u32") >= 2, "{votes:#?}");
    assert!(
        votes
            .iter()
            .any(|line| line.starts_with("ds_add_u32") && line.contains("offset:4")),
        "{votes:#?}"
    );
    assert_eq!(count_instructions(&only, "flat_atomic"), 0, "{votes:#?}");
    assert_eq!(count_instructions(&only, "global_atomic"), 0, "{votes:#?}");
}
