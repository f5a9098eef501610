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
    Path::new("/dev/kfd").exists()
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
            if !has_amd_driver() {
                // What Debian's ROCr answers on a machine without /dev/kfd.
                assert!(
                    message.contains("HSA_STATUS_ERROR_OUT_OF_RESOURCES"),
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
    let shape = LaunchShape {
        threads: [64, 1, 1],
        blocks: [3, 1, 1],
    };
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
        let block = packet::kernarg_block(&explicit, &shape, facts.kernarg_segment_size).unwrap();
        assert_eq!(&block[..explicit.len()], &explicit[..], "{kernel}");
        let implicit = packet::implicit_args_offset(explicit.len());
        assert_eq!(
            block.len(),
            implicit + packet::IMPLICIT_ARGS_SIZE,
            "{kernel}"
        );
        assert_eq!(
            block[implicit..implicit + 4],
            3u32.to_le_bytes(),
            "{kernel}: block count x"
        );
        let packet =
            packet::dispatch_packet(&shape, &facts, 0x5000, hsa_sys::hsa_signal_t { handle: 9 })
                .unwrap();
        assert_eq!(packet.grid_size_x, 192, "{kernel}");
        assert_eq!(
            packet.private_segment_size,
            packet::private_segment_size(facts.private_segment_size, facts.dynamic_stack)
        );
    }
}

#[test]
fn only_amdgpu_code_objects_are_accepted() {
    assert!(check_image_kind(&sample("sample-gfx1100.elf")).is_ok());
    let error = check_image_kind(&sample("sample.ptx")).unwrap_err();
    assert!(matches!(error, BackendError::Incompatible(_)), "{error:?}");
    assert_message_starts(&error, "the HSA backend runs AMDGPU code objects, not ");
}
