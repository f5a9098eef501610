//! The backend against the real runtime library, as far as a machine without an AMD GPU allows:
//! the library missing, and (with Debian's `libhsa-runtime64-1`) `hsa_init` refusing to start.

use super::*;
use crate::LaunchShape;
use std::path::Path;

/// The runtime library Debian installs, or `None` with the reason printed. Under `CI=true` a
/// missing runtime fails the test: CI installs it (scripts/setup.sh).
fn installed_runtime() -> Option<()> {
    let present = [
        "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1",
        "/opt/rocm/lib/libhsa-runtime64.so.1",
    ]
    .iter()
    .any(|path| Path::new(path).exists());
    if present {
        return Some(());
    }
    if std::env::var("CI").is_ok_and(|value| value == "true") {
        panic!("libhsa-runtime64.so.1 is not installed; CI must install libhsa-runtime64-1");
    }
    eprintln!(
        "SKIPPED: libhsa-runtime64.so.1 is not installed (apt-get install libhsa-runtime64-1)"
    );
    None
}

/// Whether this machine has the AMD kernel driver (and so possibly a GPU).
fn has_amd_driver() -> bool {
    super::amd_kernel_driver_present()
}

/// Asserts that `error`'s message starts with `start`.
#[track_caller]
fn assert_message_starts(error: &BackendError, start: &str) {
    assert!(error.to_string().starts_with(start), "{error}");
}

#[test]
fn missing_library_says_no_hsa_runtime_found() {
    let backend =
        HsaBackend::with_library_candidates(vec!["/nonexistent/libhsa-runtime64.so.1".into()]);
    let error = backend.devices().unwrap_err();
    assert!(matches!(error, BackendError::NotAvailable(_)), "{error:?}");
    assert_message_starts(&error, "no HSA runtime found (libhsa-runtime64.so.1)");
    let error = backend
        .open(0)
        .err()
        .expect("open must fail without a runtime");
    assert_message_starts(&error, "no HSA runtime found");
}

#[test]
fn a_library_that_is_not_hsa_names_the_missing_function() {
    let backend = HsaBackend::with_library_candidates(vec!["libc.so.6".into()]);
    let error = backend.devices().unwrap_err();
    assert!(
        error.to_string().contains("lacks the function `hsa_init`"),
        "{error}"
    );
}

#[test]
fn real_runtime_without_a_gpu_reports_its_own_status() {
    if installed_runtime().is_none() {
        return;
    }
    let backend = HsaBackend::with_library_candidates(vec!["libhsa-runtime64.so.1".into()]);
    match backend.devices() {
        Ok(devices) => {
            // Only possible where the AMD driver exists; every listed device is then usable.
            assert!(
                has_amd_driver(),
                "hsa_init succeeded without /dev/kfd: {devices:?}"
            );
            for device in devices {
                assert!(device.arch.starts_with("gfx"), "{device:?}");
                assert!(matches!(device.lane_size, 32 | 64), "{device:?}");
            }
        }
        Err(error) => {
            let message = error.to_string();
            eprintln!("the installed runtime says: {message}");
            if has_amd_driver() {
                assert!(
                    matches!(
                        error,
                        BackendError::Runtime {
                            backend: BackendKind::Hsa,
                            ..
                        }
                    ),
                    "{error:?}"
                );
                assert!(
                    message.starts_with("hsa backend: hsa_init failed with HSA_STATUS_"),
                    "{message}"
                );
            } else {
                // No AMD GPU can be here: said as such, with what the runtime answered
                // (Debian's ROCr: HSA_STATUS_ERROR_OUT_OF_RESOURCES).
                assert!(matches!(error, BackendError::NotAvailable(_)), "{error:?}");
                assert!(
                    message.starts_with(
                        "no AMD GPU found: /dev/kfd, the AMD kernel driver's device, does not exist (the HSA runtime loaded, and hsa_init failed with HSA_STATUS_ERROR_OUT_OF_RESOURCES"
                    ),
                    "{message}"
                );
            }
            // Opening reports the same failure, and asking twice is just as clear.
            let again = backend.open(0).err().expect("open must fail like devices");
            assert_eq!(again.to_string(), message);
        }
    }
}

#[test]
fn kind_is_hsa() {
    assert_eq!(HsaBackend::new().kind(), BackendKind::Hsa);
    assert_eq!(KIND, BackendKind::Hsa);
}

/// Real AMDGPU code objects built from the Rust sample crate (see gpurun-image's tests/data).
fn sample(name: &str) -> gpurun_image::Image {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../gpurun-image/tests/data")
        .join(name);
    gpurun_image::Image::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

#[test]
fn rpc_lane_size_follows_the_kernels_wave_mode() {
    // gfx90a kernels are wave64; gfx1100 ones were built wave32. The agent's own default only
    // counts when the image says nothing.
    assert_eq!(rpc_lane_size(&sample("sample-gfx90a.elf"), 32), 64);
    assert_eq!(rpc_lane_size(&sample("sample-gfx1100.elf"), 64), 32);
}

#[test]
fn rpc_layout_fits_the_samples_client_symbol() {
    for name in ["sample-gfx90a.elf", "sample-gfx1100.elf"] {
        let image = sample(name);
        let client = image
            .global(gpurun_abi::symbols::RPC_CLIENT)
            .expect("the sample talks RPC");
        let lanes = rpc_lane_size(&image, 64);
        let layout = gpurun_rpc::Layout::for_client_symbol_size(
            client.size,
            LoadOptions::default().rpc_ports,
            lanes,
        )
        .unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(
            layout.client_image(0x1000).as_bytes().len() as u64,
            client.size,
            "{name}"
        );
        assert_eq!(layout.lane_size(), lanes);
    }
}

#[test]
fn entry_kernel_arguments_fit_the_code_objects_descriptors() {
    use crate::kernel_args::{begin_args, pack_c_struct, start_args};
    let image = sample("sample-gfx90a.elf");
    let descriptor = |name: &str| {
        image
            .kernel(name)
            .and_then(|kernel| kernel.descriptor)
            .unwrap()
    };
    let shape = LaunchShape::grid([3, 1, 1], [64, 1, 1]);
    for (kernel, explicit) in [
        ("_begin", pack_c_struct(&begin_args(1, 0x10, 0x20))),
        ("_start", pack_c_struct(&start_args(1, 0x10, 0x20, 0x30))),
        ("_end", Vec::new()),
    ] {
        let facts = packet::KernelFacts::from_descriptor(&descriptor(kernel), 0x4000);
        assert_eq!(
            facts.kernarg_segment_size as usize,
            explicit.len(),
            "{kernel}: the descriptor's kernarg size"
        );
        // The release sample's entry kernels read no hidden argument (their metadata says so),
        // so the block is exactly the explicit arguments.
        let layout = hidden_layouts(&image).of(kernel);
        assert_eq!(layout, packet::HiddenLayout::Listed(Vec::new()), "{kernel}");
        let block =
            packet::kernarg_block(&explicit, &shape, facts.kernarg_segment_size, &layout, 0)
                .unwrap();
        assert_eq!(block, explicit, "{kernel}");
        let private =
            packet::launch_private_size(&facts, None, packet::lane_private_limit(64), false)
                .unwrap();
        let packet = packet::dispatch_packet(
            &shape,
            &facts,
            private,
            0x5000,
            hsa_sys::hsa_signal_t { handle: 9 },
        )
        .unwrap();
        assert_eq!(packet.grid_size_x, 192, "{kernel}");
        assert_eq!(packet.private_segment_size, private, "{kernel}");
    }
}

#[test]
fn only_amdgpu_code_objects_are_accepted() {
    assert!(check_image_kind(&sample("sample-gfx1100.elf")).is_ok());
    let error = check_image_kind(&sample("sample.ptx")).unwrap_err();
    assert!(matches!(error, BackendError::Incompatible(_)), "{error:?}");
    assert_message_starts(&error, "the HSA backend runs AMDGPU code objects, not ");
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Code object v4 puts global offsets where v5 puts block counts and workgroup sizes: both
/// real code objects of `indirect(x: u32, out: *mut u32)` get their hidden arguments where their
/// metadata says, so a v4 kernel's global offsets stay 0.
#[test]
fn hidden_arguments_are_placed_per_code_object_version() {
    use crate::kernel_args::{pack_c_struct, KernelArg};
    let explicit = pack_c_struct(&[KernelArg::U32(21), KernelArg::U64(0x7000)]);
    assert_eq!(explicit.len(), 16);
    let shape = LaunchShape::grid([5, 3, 1], [64, 2, 1]);
    let block = |name: &str| {
        let image = sample(name);
        let kernel = image.kernel("indirect").unwrap();
        let segment = kernel.descriptor.unwrap().kernarg_size;
        packet::kernarg_block(
            &explicit,
            &shape,
            segment,
            &hidden_layouts(&image).of("indirect.kd"),
            0x5100,
        )
        .unwrap()
    };
    let v4 = block("hidden-args-gfx90a-v4.elf");
    assert_eq!(v4.len(), 72);
    assert_eq!(&v4[..16], &explicit[..]);
    assert!(
        v4[16..].iter().all(|&byte| byte == 0),
        "global offsets (16..40) and the buffers after them stay 0: {:?}",
        &v4[16..]
    );
    let v5 = block("hidden-args-gfx90a-v5.elf");
    assert_eq!(v5.len(), 272);
    assert_eq!(&v5[..16], &explicit[..]);
    let u32_at = |at: usize| u32::from_le_bytes(v5[at..at + 4].try_into().unwrap());
    let u16_at = |at: usize| u16::from_le_bytes([v5[at], v5[at + 1]]);
    assert_eq!(
        [u32_at(16), u32_at(20), u32_at(24)],
        [5, 3, 1],
        "block counts"
    );
    assert_eq!(
        [u16_at(28), u16_at(30), u16_at(32)],
        [64, 2, 1],
        "group sizes"
    );
    assert_eq!(
        [u16_at(34), u16_at(36), u16_at(38)],
        [0, 0, 0],
        "remainders"
    );
    assert_eq!(
        [u64_at(&v5, 56), u64_at(&v5, 64), u64_at(&v5, 72)],
        [0, 0, 0]
    );
    assert_eq!(u16_at(80), 2, "grid dims");
    assert_eq!(u64_at(&v5, 216), 0x5100, "queue");
}

/// A code object v4 kernel the metadata does not describe is refused at launch, not guessed.
#[test]
fn a_v4_kernel_without_metadata_is_an_error() {
    let layout = packet::HiddenLayout::of(&gpurun_image::Kernel::new("k"), 2);
    let error = packet::kernarg_block(&[], &LaunchShape::SINGLE, 64, &layout, 0).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("code object v4 kernel without argument metadata"),
        "{error}"
    );
    assert_eq!(
        packet::HiddenLayout::of(&gpurun_image::Kernel::new("k"), 3),
        packet::HiddenLayout::V5Block
    );
}
