//! Decisions about the image file that need no driver: which file to hand the driver (a cubin
//! built for this GPU, else the PTX), whether the PTX can run here at all, and the constructor /
//! destructor arrays the NVPTX start code walks. The facts they start from (the cubin's
//! architecture, the PTX's `.target` and `.version`, the constructor objects) are read by
//! `gpurun-image`, the one parser of images.

use crate::BackendError;
use gpurun_image::{CudaArch, Image};
use std::path::{Path, PathBuf};

/// The architecture of the cubin at `path`, if it exists and is a cubin.
pub fn cubin_arch(path: &Path) -> Option<CudaArch> {
    Image::read(path).ok()?.cuda_arch()
}

/// What gets loaded for an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageChoice {
    /// A cubin for this GPU: loaded as is, no JIT.
    Cubin(PathBuf),
    /// The PTX itself, compiled by the driver's JIT.
    Ptx,
}

/// Candidate cubin files for the PTX image at `ptx`: `NAME.sm_NN.cubin`, then `NAME.cubin`
/// (the build writes the latter next to `NAME.ptx`).
pub fn cubin_candidates(ptx: &Path, device_sm: u32) -> [PathBuf; 2] {
    [
        ptx.with_extension(format!("sm_{device_sm}.cubin")),
        ptx.with_extension("cubin"),
    ]
}

/// Picks what to load for the PTX image at `ptx` on a device of compute capability `device_sm`.
/// `read_arch` returns the architecture of a cubin file, or `None` when the file is absent or
/// unreadable. A cubin for another architecture is skipped, not an error: the PTX still runs.
pub fn choose_image(
    ptx: &Path,
    device_sm: u32,
    mut read_arch: impl FnMut(&Path) -> Option<CudaArch>,
) -> ImageChoice {
    for candidate in cubin_candidates(ptx, device_sm) {
        if let Some(arch) = read_arch(&candidate) {
            if arch.runs_on(device_sm) {
                return ImageChoice::Cubin(candidate);
            }
        }
    }
    ImageChoice::Ptx
}

/// Refuses PTX written for a newer GPU than the device (the JIT would fail with a less clear
/// message).
pub fn check_ptx_target(
    target: Option<&str>,
    device_sm: u32,
    device_name: &str,
) -> Result<(), BackendError> {
    match target.and_then(|target| super::device::sm_number(target.split(',').next()?.trim())) {
        Some(target) if target > device_sm => Err(BackendError::Incompatible(format!(
            "the image targets sm_{target} but {device_name} is sm_{device_sm}: rebuild it for \
             sm_{device_sm} (cargo gpurun build --arch sm_{device_sm})"
        ))),
        _ => Ok(()),
    }
}

/// The pinned array the start code walks and the four values for `__init_array_start`,
/// `__init_array_end`, `__fini_array_start`, `__fini_array_end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitArrays {
    /// Constructor function addresses then destructor addresses, 8 bytes each, little-endian.
    pub bytes: Vec<u8>,
    /// `[init_start, init_end, fini_start, fini_end]` as device addresses.
    pub bounds: [u64; 4],
}

/// Lays out the arrays for a block that lives at device address `base`.
pub fn pack_init_arrays(ctors: &[u64], dtors: &[u64], base: u64) -> InitArrays {
    let mut bytes = Vec::with_capacity((ctors.len() + dtors.len()) * 8);
    for address in ctors.iter().chain(dtors) {
        bytes.extend_from_slice(&address.to_le_bytes());
    }
    let init_end = base + 8 * ctors.len() as u64;
    let fini_end = init_end + 8 * dtors.len() as u64;
    InitArrays {
        bytes,
        bounds: [base, init_end, init_end, fini_end],
    }
}

/// The globals the start code reads the array bounds from, in [`InitArrays::bounds`] order.
pub const INIT_ARRAY_BOUNDS: [&str; 4] = [
    "__init_array_start",
    "__init_array_end",
    "__fini_array_start",
    "__fini_array_end",
];

/// What LLVM libc's clock-frequency global gets (`clock()` divides by it): NVIDIA's
/// `%globaltimer` counts nanoseconds.
pub const GLOBALTIMER_HZ: u64 = 1_000_000_000;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn prefers_a_matching_cubin_and_falls_back_to_ptx() {
        let ptx = Path::new("/b/hello.ptx");
        let plain = |sm| {
            Some(CudaArch {
                sm,
                arch_specific: false,
            })
        };
        // Only NAME.cubin, built for the device.
        let choice = choose_image(ptx, 90, |p| {
            (p == Path::new("/b/hello.cubin"))
                .then_some(())
                .and(plain(90))
        });
        assert_eq!(choice, ImageChoice::Cubin("/b/hello.cubin".into()));
        // Per-arch file wins over the generic one.
        let choice = choose_image(ptx, 90, |_| plain(90));
        assert_eq!(choice, ImageChoice::Cubin("/b/hello.sm_90.cubin".into()));
        // A cubin for another GPU is skipped.
        let choice = choose_image(ptx, 90, |p| {
            (p == Path::new("/b/hello.cubin"))
                .then_some(())
                .and(plain(80))
        });
        assert_eq!(choice, ImageChoice::Ptx);
        // No cubin at all.
        assert_eq!(choose_image(ptx, 90, |_| None), ImageChoice::Ptx);
    }

    #[test]
    fn newer_ptx_target_is_refused_with_both_names() {
        let error = check_ptx_target(Some("sm_90"), 80, "NVIDIA A100")
            .unwrap_err()
            .to_string();
        assert!(error.contains("sm_90"), "{error}");
        assert!(error.contains("NVIDIA A100 is sm_80"), "{error}");
        assert!(check_ptx_target(Some("sm_90"), 90, "H100").is_ok());
        assert!(check_ptx_target(Some("sm_70, debug"), 90, "H100").is_ok());
        assert!(check_ptx_target(None, 90, "H100").is_ok());
    }

    #[test]
    fn init_arrays_layout() {
        let arrays = pack_init_arrays(&[0x1111, 0x2222], &[0x3333], 0x7000);
        let mut expected = Vec::new();
        expected.extend_from_slice(&0x1111u64.to_le_bytes());
        expected.extend_from_slice(&0x2222u64.to_le_bytes());
        expected.extend_from_slice(&0x3333u64.to_le_bytes());
        assert_eq!(arrays.bytes, expected);
        assert_eq!(arrays.bounds, [0x7000, 0x7010, 0x7010, 0x7018]);
        let empty = pack_init_arrays(&[], &[], 0x40);
        assert!(empty.bytes.is_empty());
        assert_eq!(empty.bounds, [0x40; 4]);
    }

    /// ptxas from PATH, else from the `nvidia-cuda-nvcc-cu12` wheel that scripts/setup.sh
    /// installs.
    pub(crate) fn find_ptxas() -> Option<PathBuf> {
        let in_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("ptxas"))
                .find(|candidate| candidate.is_file())
        });
        if in_path.is_some() {
            return in_path;
        }
        let output = std::process::Command::new("python3")
            .args([
                "-c",
                "import nvidia.cuda_nvcc as m; print(list(m.__path__)[0])",
            ])
            .output()
            .ok()?;
        let ptxas = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()).join("bin/ptxas");
        (output.status.success() && ptxas.is_file()).then_some(ptxas)
    }

    /// The CUDA release in `ptxas --version`'s output (`Cuda compilation tools, release 13.0,
    /// V13.0.48`).
    fn release_in(version_output: &str) -> Option<(u32, u32)> {
        let rest = version_output.split("release ").nth(1)?;
        let number = rest.split([',', ' ', '\n']).next()?;
        let (major, minor) = number.split_once('.')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    }

    /// The CUDA release of `ptxas`, if its `--version` says.
    fn ptxas_release(ptxas: &Path) -> Option<(u32, u32)> {
        let output = std::process::Command::new(ptxas)
            .arg("--version")
            .output()
            .ok()?;
        release_in(&String::from_utf8_lossy(&output.stdout))
    }

    /// Whether a ptxas of `release` is of the 13.x generation or later, which dropped sm_70 and
    /// sm_72. One whose release cannot be read is taken for an older one.
    fn is_13_or_later(release: Option<(u32, u32)>) -> bool {
        release.is_some_and(|(major, _)| major >= 13)
    }

    /// The oldest architecture `ptxas` assembles for among those this project claims (sm_70 and
    /// newer): sm_75 from CUDA 13 on.
    pub(crate) fn oldest_arch(ptxas: &Path) -> u32 {
        if is_13_or_later(ptxas_release(ptxas)) {
            75
        } else {
            70
        }
    }

    #[test]
    fn ptxas_releases_are_read_from_its_version_text() {
        let text = |release: &str| {
            format!(
                "ptxas: NVIDIA (R) Ptx optimizing assembler\nCopyright (c) 2005-2025 NVIDIA \
                 Corporation\nBuilt on Tue_May_27_02:18:05_PDT_2025\nCuda compilation tools, \
                 release {release}, V{release}.86\nBuild cuda_{release}.r{release}/compiler.0\n"
            )
        };
        assert_eq!(release_in(&text("12.9")), Some((12, 9)));
        assert_eq!(release_in(&text("13.0")), Some((13, 0)));
        assert_eq!(release_in("ptxas: no release here"), None);
        assert_eq!(release_in("release x.y"), None);
    }

    #[test]
    fn decodes_cubins_from_the_real_ptxas() {
        let Some(ptxas) = find_ptxas() else {
            let why = "ptxas is not installed (scripts/setup.sh installs it)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("skipping: {why}");
            return;
        };
        let oldest = oldest_arch(&ptxas);
        let generation_13 = is_13_or_later(ptxas_release(&ptxas));
        let dir = std::env::temp_dir().join(format!("gpurun-cuda-ptxas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ptx = dir.join("k.ptx");
        std::fs::write(
            &ptx,
            ".version 7.0\n.target sm_70\n.address_size 64\n.visible .entry _start() { ret; }\n",
        )
        .unwrap();
        for (arch, expected) in [
            (
                "sm_70",
                CudaArch {
                    sm: 70,
                    arch_specific: false,
                },
            ),
            (
                "sm_80",
                CudaArch {
                    sm: 80,
                    arch_specific: false,
                },
            ),
            (
                "sm_86",
                CudaArch {
                    sm: 86,
                    arch_specific: false,
                },
            ),
            (
                "sm_90",
                CudaArch {
                    sm: 90,
                    arch_specific: false,
                },
            ),
            (
                "sm_90a",
                CudaArch {
                    sm: 90,
                    arch_specific: true,
                },
            ),
            (
                "sm_100",
                CudaArch {
                    sm: 100,
                    arch_specific: false,
                },
            ),
            (
                "sm_120",
                CudaArch {
                    sm: 120,
                    arch_specific: false,
                },
            ),
        ] {
            if expected.sm < oldest {
                eprintln!("note: this ptxas no longer targets {arch}");
                continue;
            }
            let cubin = dir.join(format!("k.{arch}.cubin"));
            let output = std::process::Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg("-o")
                .arg(&cubin)
                .arg(&ptx)
                .output()
                .unwrap();
            if !output.status.success() {
                let stderr = String::from_utf8_lossy(&output.stderr);
                // An older ptxas may not know the newest GPUs; everything up to sm_90 it must.
                assert!(expected.sm > 90, "ptxas failed for {arch}: {stderr}");
                eprintln!("note: this ptxas cannot target {arch}: {stderr}");
                continue;
            }
            let found = cubin_arch(&cubin);
            if expected.arch_specific && generation_13 {
                // ptxas 13.x (13.5 checked) writes the same ELF header for sm_NNa as for sm_NN
                // and marks `a` in the `.nv.compat` section, which is not read yet.
                assert_eq!(found.map(|arch| arch.sm), Some(expected.sm), "{arch}");
                eprintln!("note: this ptxas marks {arch} outside the ELF header");
                continue;
            }
            assert_eq!(found, Some(expected), "{arch}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
