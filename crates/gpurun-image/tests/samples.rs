//! The parser against real images built from `tests/data/gen.py`'s sample crate (see
//! `tests/data/README.md`), and the error cases the loader must report clearly.

use std::path::{Path, PathBuf};

use gpurun_image::{GlobalInit, Image, ImageError, ImageKind, LaunchShape, ShouldPanic, TestDesc};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn load(name: &str) -> Image {
    Image::read(data(name)).unwrap_or_else(|e| panic!("failed to load image `{name}`: {e}"))
}

fn parse_err(bytes: Vec<u8>) -> String {
    Image::parse(bytes, None).unwrap_err().to_string()
}

const SAMPLES: [(&str, ImageKind); 5] = [
    ("sample.ptx", ImageKind::Ptx),
    ("sample.cubin", ImageKind::Cubin),
    ("sample-gfx90a.elf", ImageKind::Amdgpu),
    ("sample-gfx1100.elf", ImageKind::Amdgpu),
    ("libsample-host.so", ImageKind::Host),
];

/// How many threads a panic ends with it in each sample: the wavefront on AMDGPU (gfx90a is
/// wave64; the gfx1100 sample was built for wave32), only the thread elsewhere.
fn panic_ends_wavefront(sample: &str) -> Option<u32> {
    match sample {
        "sample-gfx90a.elf" => Some(64),
        "sample-gfx1100.elf" => Some(32),
        _ => None,
    }
}

/// The tests gen.py put into the sample crate, written out by hand, as read from `sample`.
fn expected_tests(sample: &str) -> Vec<TestDesc> {
    let test = |id: &str, path: &str| TestDesc {
        full_path: path.to_owned(),
        kernel: format!("__gpurun_test_{id}"),
        panic_ends_wavefront: panic_ends_wavefront(sample),
        ..TestDesc::new(path.split_once("::").unwrap().1)
    };
    vec![
        test("adds_0123456789abcdef", "sample::adds"),
        TestDesc {
            shape: LaunchShape::grid([4, 1, 1], [64, 2, 1]),
            ..test("lanes_fedcba9876543210", "sample::math::lanes")
        },
        TestDesc {
            should_panic: ShouldPanic::Expected("index out of bounds".into()),
            ..test("boom_00000000000000bb", "sample::panics::boom")
        },
        TestDesc {
            ignored: true,
            ignore_reason: Some("takes too long".into()),
            ..test("slow_00000000000000aa", "sample::slow")
        },
    ]
}

#[test]
fn every_sample_yields_kernels_tests_and_globals() {
    for (name, kind) in SAMPLES {
        let image = load(name);
        assert_eq!(image.kind(), kind, "{name}");
        let kernels: Vec<&str> = image.kernels().iter().map(|k| k.name.as_str()).collect();
        for entry in ["_begin", "_start", "_end"] {
            assert!(kernels.contains(&entry), "{name}: {kernels:?}");
        }
        assert!(image.has_entry_points());
        assert_eq!(image.tests(), expected_tests(name), "{name}");
        // Built before test ABI version 2 (shared memory): still read, as no shared memory.
        assert_eq!(image.test_abi_version(), Some(1), "{name}");
        assert!(
            image
                .tests()
                .iter()
                .all(|test| test.shape.shared_bytes == 0),
            "{name}"
        );

        let rpc = image.rpc_client().expect("rpc client");
        assert_eq!(rpc.size, 2096, "{name}");
        let counter = image.global("COUNTER").unwrap();
        assert_eq!(
            (counter.size, counter.read_u32_at(0)),
            (4, Some(7)),
            "{name}"
        );
        let greeting = image.global("GREETING").unwrap();
        assert_eq!(
            greeting.read_at(0, 6).as_deref(),
            Some(&b"hello\n"[..]),
            "{name}"
        );
        let result = image.global("RESULT").unwrap();
        assert_eq!(result.size, 8);
        assert_eq!(result.read_at(0, 8), Some(vec![0; 8]), "{name}");
        assert!(
            result.read_at(4, 8).is_none(),
            "out-of-range reads give None"
        );
        // Device-private helpers are not exported.
        assert!(image.kernel("bump").is_none());
        assert_eq!(image.bytes(), std::fs::read(data(name)).unwrap());
        assert_eq!(image.path(), Some(data(name).as_path()));
    }
}

#[test]
fn ctor_and_dtor_objects_sorted_by_priority() {
    for (name, _) in SAMPLES {
        let image = load(name);
        let (ctors, dtors) = image.ctor_dtor_objects();
        let ctors: Vec<&str> = ctors.iter().map(|g| g.name.as_str()).collect();
        let dtors: Vec<&str> = dtors.iter().map(|g| g.name.as_str()).collect();
        // Name order would put `init_hook_101` first; priority 7 must win.
        assert_eq!(
            ctors,
            [
                "__init_array_object_sample_early_7",
                "__init_array_object_sample_init_hook_101"
            ],
            "{name}"
        );
        assert_eq!(
            dtors,
            ["__fini_array_object_sample_fini_hook_65535"],
            "{name}"
        );
        // Function pointers are only known once the image is loaded (PTX: `= fn_name`;
        // shared objects: dynamic relocations). Cubins store driver-resolved values.
        if !name.ends_with(".cubin") {
            let hook = image.global("__init_array_object_sample_early_7").unwrap();
            assert_eq!(hook.init, GlobalInit::Unknown, "{name}");
            assert_eq!(hook.read_at(0, 8), None, "{name}");
        }
    }
}

#[test]
fn ptx_facts() {
    let image = load("sample.ptx");
    assert_eq!(image.ptx_version(), Some((7, 0)));
    assert_eq!(image.ptx_target(), Some("sm_70"));
    let hook = image.global("__init_array_object_sample_early_7").unwrap();
    assert_eq!(hook.size, 8);
    assert_eq!(
        hook.init,
        GlobalInit::Unknown,
        "a function address is only known after loading"
    );
    assert_eq!(
        image
            .global("__llvm_rpc_client")
            .unwrap()
            .section
            .as_deref(),
        Some(".global")
    );
}

#[test]
fn cubin_facts() {
    let image = load("sample.cubin");
    assert_eq!(image.cuda_sm(), Some(70));
    assert_eq!(image.elf_machine(), Some("NVIDIA CUDA"));
    assert_eq!(
        image.global("RESULT").unwrap().section.as_deref(),
        Some(".nv.global")
    );
    assert_eq!(
        image.global("GREETING").unwrap().section.as_deref(),
        Some(".nv.global.init")
    );
    assert_eq!(
        image.kernels().len(),
        7,
        "entries only, no device functions"
    );
}

#[test]
fn amdgpu_kernel_descriptors() {
    for (name, gfx, wave) in [
        ("sample-gfx90a.elf", "gfx90a", 64),
        ("sample-gfx1100.elf", "gfx1100", 32),
    ] {
        let image = load(name);
        let info = image.amdgpu().unwrap();
        assert_eq!(info.gfx_name(), Some(gfx));
        assert!(info.has_metadata_note, "{name}");
        assert_eq!(
            info.target.as_deref(),
            Some(format!("amdgcn-amd-amdhsa--{gfx}").as_str())
        );
        assert_eq!(image.kernels().len(), 7, "{name}");
        for kernel in image.kernels() {
            let kd = kernel
                .descriptor
                .unwrap_or_else(|| panic!("{name}: {} has no .kd", kernel.name));
            assert_eq!(kd.wavefront_size(), wave, "{name} {}", kernel.name);
            // LLVM's default bound, from `.max_flat_workgroup_size` (llvm-readobj --notes).
            assert_eq!(kernel.max_threads(), Some(1024), "{name} {}", kernel.name);
            assert_eq!(kd.group_segment_fixed_size, 0);
        }
        // Values cross-checked against llvm-readobj --notes (.kernarg_segment_size).
        let kernarg = |k: &str| image.kernel(k).unwrap().descriptor.unwrap().kernarg_size;
        assert_eq!(
            (kernarg("_start"), kernarg("_begin"), kernarg("_end")),
            (32, 24, 0),
            "{name}"
        );
        assert!(
            image.global("_start.kd").is_none(),
            "descriptors are not globals"
        );
    }
}

#[test]
fn missing_entry_lists_what_exists() {
    let image = load("sample.ptx");
    assert!(image.require_entry("_start").is_ok());
    let err = image.require_entry("main").unwrap_err().to_string();
    assert!(
        err.starts_with("the image has no kernel `main`; it defines: "),
        "{err}"
    );
    assert!(
        err.contains("`_start`") && err.contains("`__gpurun_test_adds_0123456789abcdef`"),
        "{err}"
    );
}

#[test]
fn file_errors() {
    let missing = Image::read(data("does-not-exist.ptx")).unwrap_err();
    assert!(
        matches!(&missing, ImageError::Io { path, .. } if path.ends_with("does-not-exist.ptx"))
    );
    // The caller names the file ("failed to load image `x`: ..."), so the message does not.
    assert!(
        missing.to_string().starts_with("cannot read the file: "),
        "{missing}"
    );
    assert!(
        std::error::Error::source(&missing).is_none(),
        "the I/O error is in the message only"
    );
    let dir = Image::read(data("")).unwrap_err();
    assert!(
        matches!(dir, ImageError::Io { .. }),
        "a directory is an I/O error: {dir}"
    );
    assert_eq!(parse_err(Vec::new()), "the file is empty");
    assert!(parse_err(b"hello world".to_vec()).starts_with("unrecognized image format"));
}

#[test]
fn truncated_elf_is_reported_as_truncated() {
    for (name, kind) in SAMPLES {
        if kind == ImageKind::Ptx {
            continue;
        }
        let bytes = std::fs::read(data(name)).unwrap();
        for len in [4, 40, 64, 200, bytes.len() / 2, bytes.len() - 1] {
            let err = parse_err(bytes[..len].to_vec());
            assert!(
                err.starts_with("truncated ELF file"),
                "{name} at {len}: {err}"
            );
        }
    }
}

#[test]
fn foreign_elf_is_not_a_gpu_image() {
    // This test binary is an ordinary executable for the host: it has a `_start` in its
    // `.symtab`, but exports none of the host emulation ABI, so it must be refused.
    let exe = std::env::current_exe().unwrap();
    let err = Image::read(&exe).unwrap_err();
    assert!(matches!(err, ImageError::NotAGpuImage { .. }), "{err}");
    let err = err.to_string();
    if cfg!(target_arch = "x86_64") {
        assert!(
            err.starts_with("ELF for x86-64 is not a GPU image"),
            "{err}"
        );
    }
    // The stripped-down case: a host sample with its exports renamed away.
    let mut bytes = std::fs::read(data("libsample-host.so")).unwrap();
    for marker in [&b"__gpurun_"[..], b"_start\0", b"_begin\0", b"_end\0"] {
        let replacement: Vec<u8> = marker
            .iter()
            .map(|b| if *b == b'_' { b'X' } else { *b })
            .collect();
        while let Some(at) = bytes.windows(marker.len()).position(|w| w == marker) {
            bytes[at..at + marker.len()].copy_from_slice(&replacement);
        }
    }
    let err = parse_err(bytes);
    assert!(err.contains("is not a GPU image"), "{err}");
}

#[test]
fn ptx_without_kernels() {
    let err = parse_err(b".version 7.0\n.target sm_70\n.global .u32 x = 1;\n".to_vec());
    assert_eq!(err, "the PTX image defines no kernels");
}

/// Replaces `from` with `to` (same length) in the PTX sample.
fn patched_ptx(from: &str, to: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(data("sample.ptx")).unwrap();
    assert!(text.contains(from), "sample lacks `{from}`");
    text.replacen(from, to, 1).into_bytes()
}

#[test]
fn ptx_block_bounds_are_read_from_maxntid() {
    let image = load("sample.ptx");
    assert_eq!(
        image
            .kernel("__gpurun_test_adds_0123456789abcdef")
            .unwrap()
            .max_threads(),
        None
    );
    let bytes = patched_ptx(
        ".visible .entry __gpurun_test_adds_0123456789abcdef()\n{",
        ".visible .entry __gpurun_test_adds_0123456789abcdef()\n.maxntid 32, 4, 2\n{",
    );
    let image = Image::parse(bytes, None).unwrap();
    let kernel = image.kernel("__gpurun_test_adds_0123456789abcdef").unwrap();
    assert_eq!(kernel.max_threads(), Some(256));
    let other = image.kernel("__gpurun_test_boom_00000000000000bb").unwrap();
    assert_eq!(other.max_threads(), None);
}

#[test]
fn unsupported_test_abi_version() {
    let bytes = patched_ptx(
        "__gpurun_test_abi_version[4] = {1}",
        "__gpurun_test_abi_version[4] = {4}",
    );
    let err = parse_err(bytes);
    assert!(
        err.contains("version 4") && err.ends_with("update cargo-gpurun"),
        "{err}"
    );
    let bytes = patched_ptx(
        "__gpurun_test_abi_version[4] = {1}",
        "__gpurun_test_abi_version[4] = {0}",
    );
    let err = parse_err(bytes);
    assert!(
        err.contains("version 0") && err.ends_with("rebuild the image with a newer gpurun crate"),
        "{err}"
    );
    // The version byte inside a descriptor is checked too.
    let bytes = patched_ptx("{71, 80, 82, 84, 1, 0", "{71, 80, 82, 84, 9, 0");
    assert!(parse_err(bytes).contains("version 9"));
}

#[test]
fn descriptor_problems() {
    let no_version = patched_ptx(
        "__gpurun_test_abi_version[4]",
        "__gpurun_test_abi_versioX[4]",
    );
    assert!(parse_err(no_version).contains("no `__gpurun_test_abi_version`"));
    let orphan = patched_ptx(
        ".entry __gpurun_test_adds_0123456789abcdef(",
        ".entry __gpurun_test_adds_0123456789abcdeX(",
    );
    let err = parse_err(orphan);
    assert!(
        err.contains("invalid test descriptor `__gpurun_desc_adds_0123456789abcdef`"),
        "{err}"
    );
    assert!(err.contains("is not in the image"), "{err}");
    let bad_magic = patched_ptx("{71, 80, 82, 84, 1, 0", "{72, 80, 82, 84, 1, 0");
    assert!(parse_err(bad_magic).contains("bad magic"));
}

#[test]
fn bad_ctor_priority() {
    let bytes = patched_ptx(
        "__init_array_object_sample_early_7",
        "__init_array_object_sample_early_x",
    );
    let err = parse_err(bytes);
    assert!(
        err.contains("`__init_array_object_sample_early_x`"),
        "{err}"
    );
}

#[test]
fn host_abi_version_is_checked() {
    let image = load("libsample-host.so");
    assert_eq!(image.host_abi_version(), Some(1));
    assert_eq!(load("sample.ptx").host_abi_version(), None);

    let original = std::fs::read(data("libsample-host.so")).unwrap();
    // In this library `.rodata` is mapped at its file offset, so the symbol value is where
    // the bytes are; check that before relying on it.
    let at = image
        .global("__gpurun_host_abi_version")
        .unwrap()
        .address
        .unwrap() as usize;
    assert_eq!(original[at..at + 4], [1, 0, 0, 0]);
    // Versions 2 (shared memory), 3 (call sites) and 4 (memory checks) each extend the record
    // before: all run.
    for version in [2, 3, 4] {
        let mut current = original.clone();
        current[at] = version;
        let current = Image::parse(current, None).unwrap();
        assert_eq!(current.host_abi_version(), Some(u32::from(version)));
    }
    let mut newer = original.clone();
    newer[at] = 5;
    let err = parse_err(newer);
    assert!(
        err.contains("host ABI version 5") && err.ends_with("update cargo-gpurun"),
        "{err}"
    );
    let mut older = original.clone();
    older[at] = 0;
    let err = parse_err(older);
    assert!(
        err.ends_with("rebuild the image with a newer gpurun crate"),
        "{err}"
    );

    let mut unversioned = original;
    let name = b"__gpurun_host_abi_version";
    while let Some(pos) = unversioned.windows(name.len()).position(|w| w == name) {
        unversioned[pos + name.len() - 1] = b'X';
    }
    let err = parse_err(unversioned);
    assert!(
        err.starts_with("host emulation image without a readable `__gpurun_host_abi_version`"),
        "{err}"
    );
}

#[test]
fn relocatable_objects_are_not_images() {
    for (name, kind) in SAMPLES {
        if kind == ImageKind::Ptx {
            continue;
        }
        let mut bytes = std::fs::read(data(name)).unwrap();
        bytes[0x10..0x12].copy_from_slice(&1u16.to_le_bytes()); // e_type = ET_REL
        let err = parse_err(bytes);
        assert!(
            err.starts_with("this is a relocatable ") && err.ends_with("link it first"),
            "{name}: {err}"
        );
    }
}

#[test]
fn unreadable_test_abi_version() {
    let wide = patched_ptx(
        "__gpurun_test_abi_version[4] = {1}",
        "__gpurun_test_abi_version[8] = {1}",
    );
    let err = parse_err(wide);
    assert!(
        err.starts_with("cannot read `__gpurun_test_abi_version`: it is 8 bytes"),
        "{err}"
    );
}

#[test]
fn missing_entry_message_is_bounded() {
    let mut ptx = String::from(".version 7.0\n.target sm_70\n");
    for i in 0..40 {
        ptx.push_str(&format!(".visible .entry k{i:02}() {{ ret; }}\n"));
    }
    let image = Image::parse(ptx.into_bytes(), None).unwrap();
    let err = image.require_entry("_start").unwrap_err().to_string();
    assert!(
        err.contains("`k00`") && err.contains("`k11`") && !err.contains("`k12`"),
        "{err}"
    );
    assert!(err.ends_with("`k11` and 28 more"), "{err}");
}

/// The hidden arguments of `hidden-args-gfx90a-v4.elf` and `-v5.elf`'s kernel, as the metadata
/// lists them (cross-checked with `llvm-readobj --notes`): code object v4 has global offsets
/// where v5 has block counts and group sizes.
#[test]
fn hidden_arguments_follow_the_code_object_version() {
    use gpurun_image::{HiddenArgument, HiddenArgumentKind as Kind};
    let hidden = |name: &str| {
        let image = load(name);
        let kernel = image.kernel("indirect").expect("the kernel");
        kernel
            .hidden_arguments()
            .expect("the metadata lists the kernel's arguments")
            .iter()
            .map(|HiddenArgument { kind, offset, size }| (kind.clone(), *offset, *size))
            .collect::<Vec<_>>()
    };
    let other = |name: &str| Kind::Other(name.to_owned());
    assert_eq!(
        load("hidden-args-gfx90a-v4.elf")
            .amdgpu()
            .unwrap()
            .abi_version,
        2
    );
    assert_eq!(
        hidden("hidden-args-gfx90a-v4.elf"),
        [
            (Kind::GlobalOffset(0), 16, 8),
            (Kind::GlobalOffset(1), 24, 8),
            (Kind::GlobalOffset(2), 32, 8),
            (other("hidden_hostcall_buffer"), 40, 8),
            (other("hidden_default_queue"), 48, 8),
            (other("hidden_completion_action"), 56, 8),
            (other("hidden_multigrid_sync_arg"), 64, 8),
        ]
    );
    assert_eq!(
        load("hidden-args-gfx90a-v5.elf")
            .amdgpu()
            .unwrap()
            .abi_version,
        3
    );
    assert_eq!(
        hidden("hidden-args-gfx90a-v5.elf"),
        [
            (Kind::BlockCount(0), 16, 4),
            (Kind::BlockCount(1), 20, 4),
            (Kind::BlockCount(2), 24, 4),
            (Kind::GroupSize(0), 28, 2),
            (Kind::GroupSize(1), 30, 2),
            (Kind::GroupSize(2), 32, 2),
            (Kind::Remainder(0), 34, 2),
            (Kind::Remainder(1), 36, 2),
            (Kind::Remainder(2), 38, 2),
            (Kind::GlobalOffset(0), 56, 8),
            (Kind::GlobalOffset(1), 64, 8),
            (Kind::GlobalOffset(2), 72, 8),
            (Kind::GridDims, 80, 2),
            (other("hidden_hostcall_buffer"), 96, 8),
            (other("hidden_multigrid_sync_arg"), 104, 8),
            (other("hidden_heap_v1"), 112, 8),
            (other("hidden_default_queue"), 120, 8),
            (other("hidden_completion_action"), 128, 8),
            (Kind::QueuePtr, 216, 8),
        ]
    );
    // The release samples' kernels read no hidden argument: the metadata says so.
    let sample = load("sample-gfx90a.elf");
    assert_eq!(
        sample.kernel("_start").unwrap().hidden_arguments(),
        Some(&[][..])
    );
    // Other image kinds have no such metadata.
    assert_eq!(
        load("sample.ptx")
            .kernel("_start")
            .unwrap()
            .hidden_arguments(),
        None
    );
}

/// Each kernel's parameter bytes, up to the end of its last parameter, from each GPU
/// format's own record of them (PTX `.entry` lists, the cubin's `EIATTR_CBANK_PARAM_SIZE`, the
/// AMDGPU metadata's explicit `.args`): `_begin(int, char **, char **)` 24, `_start(..., int *)`
/// 32, `_end()` and the tests 0. A host image does not say.
#[test]
fn kernel_parameter_bytes_in_every_gpu_format() {
    for (name, kind) in SAMPLES {
        let image = load(name);
        let bytes = |kernel: &str| image.kernel(kernel).unwrap().param_bytes();
        if kind == ImageKind::Host {
            assert_eq!(bytes("_start"), None, "{name}");
            continue;
        }
        assert_eq!(bytes("_begin"), Some(24), "{name}");
        assert_eq!(bytes("_start"), Some(32), "{name}");
        assert_eq!(bytes("_end"), Some(0), "{name}");
        for test in image.tests() {
            assert_eq!(bytes(&test.kernel), Some(0), "{name} {}", test.kernel);
        }
    }
}
