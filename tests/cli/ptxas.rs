//! Every fixture's PTX assembles with both ptxas generations: 12.x (PyPI `nvidia-cuda-nvcc-cu12`)
//! and 13.x (PyPI `nvidia-cuda-nvcc`, which drops sm_70). Every fixture is assembled for the
//! build's architecture with 12.x (by the build) and for sm_90 with 13.x. The fixtures whose
//! device code uses what differs between architectures (warp operations, atomics, shared memory,
//! barriers: [`EVERY_ARCH`]) are assembled for every architecture we claim: 12.x for sm_70, sm_80
//! and sm_90, 13.x for sm_90 and sm_100.
//!
//! Which architecture has an instruction is checked at any optimization; ptxas's optimizer is
//! where it crashed (12.9 and 13.x once segfaulted for sm_90 on every image with the panic path;
//! a crash fails like an error). So the matrix is assembled with `--Ofast-compile=max` (about a
//! second per debug image, where ptxas's default `-O3` takes 10-40 s and the whole matrix at
//! `-O3` took most of CI's time), and the optimizer runs, at `-O3`, on the
//! [`OPTIMIZED_FIXTURES`] for sm_90 with 13.x. `GPURUN_PTXAS_FULL=1` assembles every one of them at `-O3`
//! (README, "Status": run it before a release and after a ptxas update). Also: the 1024-thread
//! test kernel fits 1024 threads (`ptxas -v` register count), block-shared memory is PTX
//! shared memory, and an sm_80 build of device-ops reduces 32-bit integers with `redux.sync`.
//!
//! `scripts/setup.sh` installs ptxas 13.x into `~/.local/share/gpurun/cuda-nvcc-13`
//! (`GPURUN_PTXAS_13` overrides). A missing ptxas is reported as not run, and fails under CI=true.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpurun_build::toolchain;
use gpurun_build::validate;
use gpurun_e2e::{available, built_image_paths, fixtures_manifest, gpurun_in_root, nightly};

/// The architecture `cargo gpurun build` assembles each image for by default, with the ptxas
/// it finds (12.x here): the build's own `<stem>.cubin` is that check, so the test does not
/// assemble it a second time (a ptxas failure or crash fails the build).
const BUILD_ARCH: &str = gpurun_build::arch::DEFAULT_NVPTX_ARCH;
/// Architectures the [`EVERY_ARCH`] fixtures are assembled for with ptxas 12.x (besides
/// [`BUILD_ARCH`]) and with 13.x; every other fixture gets the first 13.x one.
const PTXAS_12_ARCHES: &[&str] = &["sm_80", "sm_90"];
const PTXAS_13_ARCHES: &[&str] = &["sm_90", "sm_100"];

/// The fixture images (file stems) assembled for every claimed architecture: those whose device
/// code uses warp operations, atomics, shared memory or barriers, where code generation differs
/// between architectures.
const EVERY_ARCH: &[&str] = &[
    "basic",
    "concurrency",
    "device_ops",
    "host_app_kernels",
    "real_kernels",
    "shared_memory",
];

/// Overrides where ptxas 13.x is.
const PTXAS_13_ENV: &str = "GPURUN_PTXAS_13";

/// `1`: every assembly at ptxas's default `-O3` (see the module documentation).
const PTXAS_FULL_ENV: &str = "GPURUN_PTXAS_FULL";

/// The architecture ptxas's optimizer runs for by default, with 13.x, and on which fixtures:
/// the panic path (where it crashed) with warp operations, shared memory, atomics and barriers,
/// in the smallest debug images that have them.
const OPTIMIZED_ARCH: &str = "sm_90";
const OPTIMIZED_FIXTURES: &[&str] = &["basic", "real_kernels"];

/// Registers an SM has for one block (every architecture from sm_70 to sm_100).
const REGISTERS_PER_BLOCK: u32 = 65536;

fn ptxas_13() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(PTXAS_13_ENV).filter(|path| !path.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let home = std::env::var_os("HOME")?;
    let path = Path::new(&home).join(".local/share/gpurun/cuda-nvcc-13/nvidia/cu13/bin/ptxas");
    path.is_file().then_some(path)
}

/// The PTX of every fixture, built (debug, the default [`BUILD_ARCH`]) as `cargo gpurun build
/// --workspace` builds it, which also assembles each for that arch with the ptxas it finds.
/// Built once for both tests, in the GPU images' target directory, where the end-to-end tests
/// find these images built.
fn fixture_ptx() -> Vec<PathBuf> {
    static BUILT: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_fixture_ptx).clone()
}

fn build_fixture_ptx() -> Vec<PathBuf> {
    let manifest = fixtures_manifest();
    let output = gpurun_in_root(
        &[
            "build",
            "--workspace",
            "--message-format",
            "json",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ],
        &[("CARGO_TARGET_DIR", &gpurun_e2e::gpu_images_dir())],
    );
    let mut paths = built_image_paths(&output);
    paths.sort();
    assert!(paths.len() >= 10, "too few fixture images: {paths:?}");
    paths
}

/// Whether the build left a cubin of `ptx` (for [`BUILD_ARCH`]) at least as new as the PTX.
fn built_cubin_is_current(ptx: &Path) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|meta| meta.modified());
    match (modified(&ptx.with_extension("cubin")), modified(ptx)) {
        (Ok(cubin), Ok(ptx)) => cubin >= ptx,
        _ => false,
    }
}

/// One assembly to check: which ptxas (its generation for messages), which PTX, which arch, at
/// which optimization.
struct Assembly<'a> {
    ptxas: &'a Path,
    generation: &'static str,
    ptx: &'a Path,
    arch: &'static str,
    optimization: validate::PtxasOptimization,
}

impl Assembly<'_> {
    /// Assembles; the failure as one line.
    fn check(&self) -> Result<(), String> {
        let (generation, arch) = (self.generation, self.arch);
        let cubin = self
            .ptx
            .with_extension(format!("{arch}.ptxas{generation}.cubin"));
        let result =
            validate::assemble_ptx_as(self.ptxas, self.ptx, arch, &cubin, self.optimization);
        let _ = std::fs::remove_file(&cubin);
        result.map_err(|err| {
            format!(
                "{} ptxas {generation} ({:?}): {err}",
                self.ptx.display(),
                self.optimization
            )
        })
    }
}

/// What to assemble `ptx` for with each generation present (see the module documentation).
fn assemblies_of<'a>(
    ptx: &'a Path,
    ptxas_12: Option<&'a Path>,
    ptxas_13: Option<&'a Path>,
    full: bool,
) -> Vec<Assembly<'a>> {
    let stem = ptx
        .file_stem()
        .and_then(|stem| stem.to_str())
        .unwrap_or_default();
    let every_arch = EVERY_ARCH.contains(&stem);
    let arches_12 = if every_arch { PTXAS_12_ARCHES } else { &[] };
    let arches_13 = if every_arch {
        PTXAS_13_ARCHES
    } else {
        &PTXAS_13_ARCHES[..1]
    };
    let mut assemblies = Vec::new();
    for (ptxas, generation, arches) in [(ptxas_12, "12", arches_12), (ptxas_13, "13", arches_13)] {
        if let Some(ptxas) = ptxas {
            assemblies.extend(arches.iter().map(|&arch| Assembly {
                ptxas,
                generation,
                ptx,
                arch,
                optimization: if full
                    || (OPTIMIZED_FIXTURES.contains(&stem)
                        && generation == "13"
                        && arch == OPTIMIZED_ARCH)
                {
                    validate::PtxasOptimization::Full
                } else {
                    validate::PtxasOptimization::FastCompile
                },
            }));
        }
    }
    assemblies
}

#[test]
fn every_fixture_assembles_with_both_ptxas_generations() {
    if nightly().is_none() {
        return;
    }
    let ptxas_12 = toolchain::find_ptxas();
    let ptxas_13 = ptxas_13();
    let have_12 = available("ptxas 12.x", ptxas_12.is_some());
    let have_13 = available("ptxas 13.x", ptxas_13.is_some());
    if !have_12 && !have_13 {
        return;
    }
    let images = fixture_ptx();
    let mut failures = Vec::new();
    for stem in EVERY_ARCH {
        if !images
            .iter()
            .any(|ptx| ptx.file_stem() == Some(std::ffi::OsStr::new(stem)))
        {
            failures.push(format!(
                "no fixture image {stem}.ptx to assemble for every arch"
            ));
        }
    }
    if ptxas_12.is_some() {
        failures.extend(
            images
                .iter()
                .filter(|ptx| !built_cubin_is_current(ptx))
                .map(|ptx| {
                    format!(
                        "{}: no {BUILD_ARCH} cubin from the build newer than the PTX",
                        ptx.display()
                    )
                }),
        );
    }
    let full = std::env::var(PTXAS_FULL_ENV).is_ok_and(|value| value == "1");
    let assemblies: Vec<Assembly> = images
        .iter()
        .flat_map(|ptx| assemblies_of(ptx, ptxas_12.as_deref(), ptxas_13.as_deref(), full))
        .collect();
    // Two workers taking the next assembly in turn: ptxas is single-threaded, CI has two cores.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut failures = Vec::new();
        loop {
            let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(assembly) = assemblies.get(at) else {
                return failures;
            };
            failures.extend(assembly.check().err());
        }
    };
    std::thread::scope(|scope| {
        let other = scope.spawn(work);
        failures.extend(work());
        failures.extend(other.join().expect("ptxas worker"));
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The instructions of `ptx` (trimmed, comments and directives left out) that start with
/// `opcode`.
fn instructions<'a>(ptx: &'a str, opcode: &'a str) -> impl Iterator<Item = &'a str> {
    ptx.lines()
        .map(str::trim)
        // `vote.sync` sits in a `{ .reg .pred p; ...; }` scope with its predicate setup.
        .flat_map(|line| line.trim_start_matches('{').split(';'))
        .map(str::trim)
        .filter(move |instruction| instruction.starts_with(opcode))
}

/// The built fixture PTX file `file_name` (see [`fixture_ptx`]): its path and text.
fn built_fixture_ptx(file_name: &str) -> (PathBuf, String) {
    let ptx = fixture_ptx()
        .into_iter()
        .find(|path| path.file_name().is_some_and(|name| name == file_name))
        .unwrap_or_else(|| panic!("the fixtures build wrote no {file_name}"));
    let text = std::fs::read_to_string(&ptx).unwrap();
    (ptx, text)
}

/// Asserts that `text` (of `ptx`) has at least one instruction of each of `opcodes`.
fn assert_has_instructions(ptx: &Path, text: &str, opcodes: &[&str]) {
    for opcode in opcodes {
        assert!(
            instructions(text, opcode).next().is_some(),
            "no {opcode} in {}",
            ptx.display()
        );
    }
}

/// Asserts that `text` (of `ptx`) has, for each of `opcodes`, an instruction with the full warp
/// as the immediate member mask `-1`.
fn assert_full_mask_use(ptx: &Path, text: &str, opcodes: &[&str]) {
    for opcode in opcodes {
        let found: Vec<&str> = instructions(text, opcode).collect();
        assert!(
            found.iter().any(|instruction| {
                // The mask is the last operand, after a comma or (alone) whitespace.
                instruction
                    .rsplit(|c: char| c == ',' || c.is_whitespace())
                    .next()
                    == Some("-1")
            }),
            "no {opcode} with the full mask -1 in {}: {found:?}",
            ptx.display()
        );
    }
}

/// `gpurun::warp` on NVIDIA (fixtures/device-ops, which the test above assembles for every
/// architecture): `shfl.sync`, `vote.sync` and `bar.warp.sync` with the member mask, the full
/// warp as the immediate `-1` (independent thread scheduling, sm_70+, needs the mask right);
/// its reductions shuffles in the default sm_70 build, which has no `redux.sync`; `match_any`
/// one `match.any.sync` (32- and 64-bit); the block barrier and its votes `barrier.sync` and
/// `barrier.red` without `.aligned` (no `bar.sync`, which is undefined when threads reach it
/// from different call sites);
/// `gpurun::atomic`'s float add and wrapping increment and decrement as `atom` instructions;
/// the scoped fences, the clock and sleep as `fence.acq_rel.cta`/`.gpu`, `%clock64` and
/// `nanosleep.u32`; `gpurun::atomic::scoped` as `atom`, `ld` and `st` with `.relaxed` and the
/// scope in them, and its sequentially consistent fences as `fence.sc`; and `gpurun::math`
/// calls no external function (PTX with one would not link).
#[test]
fn warp_operations_use_full_masks_and_atomics_are_native_in_ptx() {
    if nightly().is_none() {
        return;
    }
    let (ptx, text) = built_fixture_ptx("device_ops.ptx");
    assert_full_mask_use(
        &ptx,
        &text,
        &[
            "shfl.sync.idx.b32",
            "vote.sync.ballot.b32",
            "vote.sync.any.pred",
            "vote.sync.all.pred",
            "bar.warp.sync",
        ],
    );
    assert_has_instructions(
        &ptx,
        &text,
        &[
            "atom.relaxed.gpu.add.f32",
            "atom.relaxed.gpu.add.f64",
            "atom.inc.u32",
            "atom.dec.u32",
            "activemask.b32",
            "fence.acq_rel.cta",
            "fence.acq_rel.gpu",
            "nanosleep.u32",
            // `warp::match_any` of 32- and 64-bit values (sm_70+).
            "match.any.sync.b32",
            "match.any.sync.b64",
            // `barrier`, `barrier_count`, `barrier_and`, `barrier_or`.
            "barrier.sync",
            "barrier.red.popc.u32",
            "barrier.red.and.pred",
            "barrier.red.or.pred",
            // `atomic::scoped` at each scope, integer and float, 32 and 64 bits.
            "atom.relaxed.cta.add.u32",
            "atom.relaxed.gpu.add.u64",
            "atom.relaxed.sys.add.u32",
            "atom.relaxed.cta.min.s32",
            "atom.relaxed.cta.max.s64",
            "atom.relaxed.cta.or.b32",
            "atom.relaxed.cta.exch.b64",
            "atom.relaxed.cta.cas.b32",
            "atom.relaxed.cta.add.f32",
            "atom.relaxed.gpu.add.f64",
            "ld.relaxed.cta.b32",
            "st.relaxed.gpu.b32",
            "fence.sc.cta",
            "fence.acq_rel.sys",
        ],
    );
    assert!(
        text.contains("%clock64"),
        "no %clock64 in {}",
        ptx.display()
    );
    assert!(
        instructions(&text, "redux.sync").next().is_none(),
        "{}: redux.sync in an sm_70 build",
        ptx.display()
    );
    for aligned in [
        "bar.sync",
        "bar.red",
        "barrier.sync.aligned",
        "barrier.red.aligned",
    ] {
        assert!(
            instructions(&text, aligned).next().is_none(),
            "{}: an aligned block barrier ({aligned})",
            ptx.display()
        );
    }
    assert!(
        !text.contains(".extern .func"),
        "{} calls an external function",
        ptx.display()
    );
}

/// An architecture with `redux.sync` (sm_80 and later).
const REDUX_ARCH: &str = "sm_80";

/// In a build for sm_80 (`--arch sm_80`, as on an A100 or H100 machine), `gpurun::warp`'s
/// reductions of 32-bit integers are one `redux.sync` each (add, min and max signed and
/// unsigned, and, or, xor), and the PTX assembles for sm_80 (the build's own ptxas run, when
/// ptxas 12.x is there). fixtures/device-ops, in a target directory of its own.
#[test]
fn integer_reductions_are_redux_sync_in_sm_80_builds() {
    if nightly().is_none() {
        return;
    }
    let manifest = fixtures_manifest();
    let target_dir = gpurun_e2e::gpu_images_dir().join(REDUX_ARCH);
    let output = gpurun_in_root(
        &[
            "build",
            "-p",
            "device-ops",
            "--arch",
            REDUX_ARCH,
            "--message-format",
            "json",
            "--manifest-path",
            manifest.to_str().unwrap(),
        ],
        &[("CARGO_TARGET_DIR", &target_dir)],
    );
    let paths = built_image_paths(&output);
    let ptx = paths
        .iter()
        .find(|path| path.extension().is_some_and(|ext| ext == "ptx"))
        .unwrap_or_else(|| panic!("no PTX among {paths:?}"));
    let text = std::fs::read_to_string(ptx).unwrap();
    assert_has_instructions(
        ptx,
        &text,
        &[
            "redux.sync.add.s32",
            "redux.sync.min.s32",
            "redux.sync.min.u32",
            "redux.sync.max.s32",
            "redux.sync.max.u32",
            "redux.sync.and.b32",
            "redux.sync.or.b32",
            "redux.sync.xor.b32",
        ],
    );
    if toolchain::find_ptxas().is_some() {
        assert!(
            built_cubin_is_current(ptx),
            "{}: no {REDUX_ARCH} cubin from the build newer than the PTX",
            ptx.display()
        );
    }
}

/// The real kernels (fixtures/real-kernels, assembled for every architecture by
/// the test above): their shared memory is PTX shared memory (the `.extern .shared` array sized
/// at launch, reached with `.shared` loads and stores), and their shuffles and ballots are
/// `shfl.sync` and `vote.sync` with the full mask `-1`. (The device runtime's own ballots, in
/// its RPC client, take computed masks: so a full-mask one must be there, not all of them.)
#[test]
fn real_kernels_use_shared_memory_and_full_mask_warp_operations_in_ptx() {
    if nightly().is_none() {
        return;
    }
    let (ptx, text) = built_fixture_ptx("real_kernels.ptx");
    assert!(
        text.lines()
            .any(|line| line.trim_start().starts_with(".extern .shared")),
        "no .extern .shared array in {}",
        ptx.display()
    );
    assert_has_instructions(&ptx, &text, &["ld.shared", "st.shared"]);
    assert_full_mask_use(&ptx, &text, &["shfl.sync", "vote.sync.ballot.b32"]);
}

/// `ptxas -v` for `arch`: the registers each entry uses.
fn registers_per_entry(ptxas: &Path, ptx: &Path, arch: &str) -> Vec<(String, u32)> {
    let cubin = ptx.with_extension(format!("{arch}.v.cubin"));
    let output = Command::new(ptxas)
        .arg("-v")
        .arg(format!("-arch={arch}"))
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .output()
        .expect("run ptxas");
    let _ = std::fs::remove_file(&cubin);
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "ptxas -v failed:\n{log}");
    let mut entries = Vec::new();
    let mut current: Option<String> = None;
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next().map(str::to_owned);
        } else if let Some(rest) = line.split("Used ").nth(1) {
            let registers = rest.split_whitespace().next().and_then(|n| n.parse().ok());
            if let (Some(name), Some(registers)) = (current.take(), registers) {
                entries.push((name, registers));
            }
        }
    }
    entries
}

#[test]
fn a_1024_thread_test_kernel_fits_1024_threads() {
    if nightly().is_none() {
        return;
    }
    let Some(ptxas) = toolchain::find_ptxas() else {
        available("ptxas 12.x", false);
        return;
    };
    let ptx = fixture_ptx()
        .into_iter()
        .find(|path| path.file_name().is_some_and(|name| name == "big_block.ptx"))
        .expect("fixtures/big-block was built");
    let text = std::fs::read_to_string(&ptx).unwrap();
    assert!(
        text.contains(".maxntid 1024, 1, 1"),
        "no .maxntid in {}",
        ptx.display()
    );
    let mut checked = 0;
    for (arch, ptxas) in [
        ("sm_70", Some(ptxas.clone())),
        ("sm_90", Some(ptxas)),
        ("sm_100", ptxas_13()),
    ] {
        let Some(ptxas) = ptxas else {
            available("ptxas 13.x", false);
            continue;
        };
        let entries = registers_per_entry(&ptxas, &ptx, arch);
        let (name, registers) = entries
            .iter()
            .find(|(name, _)| name.starts_with("__gpurun_test_block_of_1024_threads_"))
            .unwrap_or_else(|| panic!("no register count for the test kernel: {entries:?}"));
        assert!(
            registers * 1024 <= REGISTERS_PER_BLOCK,
            "{name} uses {registers} registers a thread for {arch}: 1024 threads need at most {}",
            REGISTERS_PER_BLOCK / 1024
        );
        checked += 1;
    }
    assert!(checked >= 2);
}

/// The RPC opcode number in an instruction operand, if it is one: LLVM libc's opcodes are
/// `'c' << 24 | n`, ours `'g' << 24 | n` (`gpurun_rpc::opcode`), n below 256.
fn rpc_opcode(operand: &str) -> Option<u32> {
    let value: u32 = operand.trim_end_matches([';', ',']).parse().ok()?;
    let class = value >> 24;
    ((class == u32::from(b'c') || class == u32::from(b'g')) && value & 0x00ff_ff00 == 0)
        .then_some(value)
}

/// The instructions of `ptx` that hold an RPC opcode number anywhere but as the constant of
/// the store that writes a port header's opcode (`st.b32 [%rdN+8], OPCODE;`).
fn opcodes_outside_header_stores(ptx: &str) -> (Vec<String>, usize) {
    let (mut loose, mut stored) = (Vec::new(), 0);
    for line in ptx.lines().map(str::trim) {
        if line.starts_with("//") || line.starts_with('.') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|word| rpc_opcode(word).is_some()) else {
            continue;
        };
        let header_store = words.len() == 3
            && at == 2
            && ["st.b32", "st.u32", "st.global.b32", "st.global.u32"].contains(&words[0])
            && words[1].ends_with("+8],");
        if header_store {
            stored += 1;
        } else {
            loose.push(line.to_owned());
        }
    }
    (loose, stored)
}

/// The device runtime opens every port with a constant opcode, as LLVM's client
/// (`open<opcode>()`). Lanes of one warp that diverged into a `println` and an `eprintln` then
/// run different code and can never be regrouped into one port whose header names only one
/// stream. In the PTX: every opcode number is the immediate of a header store, never a value
/// in a register (a `selp` between stdout and stderr, a parameter) that one store writes.
#[test]
fn every_fixture_opens_ports_with_constant_opcodes() {
    if nightly().is_none() {
        return;
    }
    let mut stored_total = 0;
    for ptx in fixture_ptx() {
        let text = std::fs::read_to_string(&ptx).unwrap();
        let (loose, stored) = opcodes_outside_header_stores(&text);
        assert!(
            loose.is_empty(),
            "{}: opcodes used as values:\n{}",
            ptx.display(),
            loose.join("\n")
        );
        stored_total += stored;
    }
    assert!(
        stored_total > 0,
        "no header stores found: the check saw nothing"
    );
}

#[test]
fn opcode_values_are_recognised() {
    // print-throughput as the runtime compiled it before the fix: one store of a register
    // that picked stdout or stderr.
    let before = "\tselp.b32 \t%r1, 1660944387, 1660944386, %p1;\n\tst.b32 \t[%rd3+8], %r1;\n";
    let (loose, stored) = opcodes_outside_header_stores(before);
    assert_eq!((loose.len(), stored), (1, 0));
    let after = "\tst.b32 \t[%rd35+8], 1660944387;\n\tst.b32 \t[%rd221+8], 1660944386;\n\
                 \tmov.b32 \t%r2, 7;\n\tst.b32 \t[%rd1+8], 1728053249;\n";
    assert_eq!(opcodes_outside_header_stores(after), (vec![], 3));
    assert_eq!(rpc_opcode("1660944386;"), Some(0x6300_0002));
    assert_eq!(rpc_opcode("1660944640"), None, "n is below 256");
    assert_eq!(rpc_opcode("%r1"), None);
}
