//! The backend against the real runtime library, as far as a machine without an AMD GPU allows:
//! the library missing, and (with Debian's `libhsa-runtime64-1`) `hsa_init` refusing to start.

use super::*;
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

#[test]
fn missing_library_says_no_hsa_runtime_found() {
    let backend =
        HsaBackend::with_library_candidates(vec!["/nonexistent/libhsa-runtime64.so.1".into()]);
    let error = backend.devices().unwrap_err();
    assert!(matches!(error, BackendError::NotAvailable(_)), "{error:?}");
    assert!(
        error
            .to_string()
            .starts_with("no HSA runtime found (libhsa-runtime64.so.1)"),
        "{error}"
    );
    let error = backend
        .open(0)
        .err()
        .expect("open must fail without a runtime");
    assert!(
        error.to_string().starts_with("no HSA runtime found"),
        "{error}"
    );
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
