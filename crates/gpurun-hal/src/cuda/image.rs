//! Decisions about the image file that need no driver: which file to hand the driver (a cubin
//! built for this GPU, else the PTX), whether the PTX can run here at all, and the constructor /
//! destructor arrays the NVPTX start code walks.

use crate::BackendError;
use std::path::{Path, PathBuf};

/// What gets loaded for an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageChoice {
    /// A cubin for this GPU: loaded as is, no JIT.
    Cubin(PathBuf),
    /// The PTX itself, compiled by the driver's JIT.
    Ptx,
}

/// The architecture a cubin was built for, from its ELF header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CubinArch {
    /// 90 for sm_90.
    pub sm: u32,
    /// Built for `sm_NNa` (runs only on exactly that architecture).
    pub arch_specific: bool,
}

/// Reads the target architecture from a cubin's ELF header, or `None` if `bytes` is not a
/// 64-bit little-endian CUDA ELF. The encoding was checked against ptxas 12.9: ELF ABI version
/// 7 keeps the SM number in `e_flags` bits 0..8 (`0x800` marks `sm_NNa`); version 8 (sm_100 and
/// later) keeps it in bits 8..16.
pub fn cubin_arch(bytes: &[u8]) -> Option<CubinArch> {
    const EM_CUDA: u16 = 190;
    if bytes.len() < 64 || &bytes[0..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return None;
    }
    let machine = u16::from_le_bytes([bytes[18], bytes[19]]);
    if machine != EM_CUDA {
        return None;
    }
    let flags = u32::from_le_bytes([bytes[48], bytes[49], bytes[50], bytes[51]]);
    match bytes[8] {
        8 => Some(CubinArch {
            sm: (flags >> 8) & 0xff,
            arch_specific: flags & 0x8 != 0,
        }),
        _ => Some(CubinArch {
            sm: flags & 0xff,
            arch_specific: flags & 0x800 != 0,
        }),
    }
}

/// Whether code built for `cubin` runs on a device of compute capability `device_sm`: same
/// major version and a minor version no higher than the device's (exact match for `sm_NNa`).
pub fn cubin_runs_on(cubin: CubinArch, device_sm: u32) -> bool {
    if cubin.arch_specific {
        return cubin.sm == device_sm;
    }
    cubin.sm / 10 == device_sm / 10 && cubin.sm <= device_sm
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
    mut read_arch: impl FnMut(&Path) -> Option<CubinArch>,
) -> ImageChoice {
    for candidate in cubin_candidates(ptx, device_sm) {
        if let Some(arch) = read_arch(&candidate) {
            if cubin_runs_on(arch, device_sm) {
                return ImageChoice::Cubin(candidate);
            }
        }
    }
    ImageChoice::Ptx
}

/// The architecture in a PTX module's `.target` directive (`.target sm_90, debug` -> 90).
pub fn ptx_target(ptx: &str) -> Option<u32> {
    ptx.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(".target")?;
        let first = rest.split(',').next()?.trim();
        super::device::sm_number(first)
    })
}

/// The PTX ISA version in a module's `.version` directive (`.version 7.0` -> "7.0").
pub fn ptx_version(ptx: &str) -> Option<&str> {
    ptx.lines()
        .find_map(|line| line.trim_start().strip_prefix(".version"))
        .map(str::trim)
}

/// Refuses PTX written for a newer GPU than the device (the JIT would fail with a less clear
/// message).
pub fn check_ptx_target(ptx: &str, device_sm: u32, device_name: &str) -> Result<(), BackendError> {
    match ptx_target(ptx) {
        Some(target) if target > device_sm => Err(BackendError::Incompatible(format!(
            "the image targets sm_{target} but {device_name} is sm_{device_sm}: rebuild it for \
             sm_{device_sm} (cargo gpurun build --arch sm_{device_sm})"
        ))),
        _ => Ok(()),
    }
}

/// Prefixes of the globals through which the NVPTX start code finds constructors and
/// destructors (nvlink makes no init/fini arrays, so the loader builds them).
pub const INIT_OBJECT_PREFIX: &str = "__init_array_object_";
pub const FINI_OBJECT_PREFIX: &str = "__fini_array_object_";

/// Constructor and destructor globals of an image, each list sorted by priority (the decimal
/// number after the last `_`, lowest first; the start code runs destructors in reverse).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitFini {
    pub ctors: Vec<String>,
    pub dtors: Vec<String>,
}

impl InitFini {
    pub fn is_empty(&self) -> bool {
        self.ctors.is_empty() && self.dtors.is_empty()
    }
}

/// Collects the `__init_array_object_*` / `__fini_array_object_*` globals among `names`.
pub fn init_fini_objects<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<InitFini, BackendError> {
    let mut ctors = Vec::new();
    let mut dtors = Vec::new();
    for name in names {
        let list = if name.starts_with(INIT_OBJECT_PREFIX) {
            &mut ctors
        } else if name.starts_with(FINI_OBJECT_PREFIX) {
            &mut dtors
        } else {
            continue;
        };
        let priority = name
            .rsplit('_')
            .next()
            .and_then(|digits| digits.parse::<u16>().ok())
            .ok_or_else(|| {
                BackendError::Incompatible(format!(
                    "invalid constructor/destructor priority in global `{name}`"
                ))
            })?;
        list.push((priority, name.to_owned()));
    }
    // Stable: equal priorities keep the image's order.
    ctors.sort_by_key(|(priority, _)| *priority);
    dtors.sort_by_key(|(priority, _)| *priority);
    Ok(InitFini {
        ctors: ctors.into_iter().map(|(_, name)| name).collect(),
        dtors: dtors.into_iter().map(|(_, name)| name).collect(),
    })
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

    /// A minimal 64-byte ELF header as ptxas writes it (values from real ptxas 12.9 output).
    fn cubin_header(abi_version: u8, flags: u32) -> Vec<u8> {
        let mut header = vec![0u8; 64];
        header[0..4].copy_from_slice(b"\x7fELF");
        header[4] = 2; // 64-bit
        header[5] = 1; // little-endian
        header[7] = if abi_version == 8 { 65 } else { 51 };
        header[8] = abi_version;
        header[18..20].copy_from_slice(&190u16.to_le_bytes());
        header[48..52].copy_from_slice(&flags.to_le_bytes());
        header
    }

    #[test]
    fn reads_cubin_arch_from_both_header_versions() {
        let sm70 = cubin_header(7, 0x46_0546);
        let sm90 = cubin_header(7, 0x46_055a);
        let sm90a = cubin_header(7, 0x46_0d5a);
        let sm100 = cubin_header(8, 0x600_6402);
        let sm120 = cubin_header(8, 0x600_7802);
        let sm100a = cubin_header(8, 0x600_640a);
        let arch = |bytes: &[u8]| cubin_arch(bytes).unwrap();
        assert_eq!(
            arch(&sm70),
            CubinArch {
                sm: 70,
                arch_specific: false
            }
        );
        assert_eq!(
            arch(&sm90),
            CubinArch {
                sm: 90,
                arch_specific: false
            }
        );
        assert_eq!(
            arch(&sm90a),
            CubinArch {
                sm: 90,
                arch_specific: true
            }
        );
        assert_eq!(
            arch(&sm100),
            CubinArch {
                sm: 100,
                arch_specific: false
            }
        );
        assert_eq!(
            arch(&sm120),
            CubinArch {
                sm: 120,
                arch_specific: false
            }
        );
        assert_eq!(
            arch(&sm100a),
            CubinArch {
                sm: 100,
                arch_specific: true
            }
        );
    }

    #[test]
    fn rejects_non_cuda_elf() {
        assert_eq!(cubin_arch(b".version 7.0\n.target sm_70\n"), None);
        let mut amd = cubin_header(7, 0x46);
        amd[18..20].copy_from_slice(&224u16.to_le_bytes()); // EM_AMDGPU
        assert_eq!(cubin_arch(&amd), None);
        assert_eq!(cubin_arch(&cubin_header(7, 0x46)[..40]), None);
    }

    #[test]
    fn cubin_compatibility_follows_major_version() {
        let plain = |sm| CubinArch {
            sm,
            arch_specific: false,
        };
        assert!(cubin_runs_on(plain(80), 80));
        assert!(cubin_runs_on(plain(80), 86));
        assert!(cubin_runs_on(plain(80), 89));
        assert!(!cubin_runs_on(plain(86), 80));
        assert!(!cubin_runs_on(plain(80), 90));
        assert!(!cubin_runs_on(plain(70), 90));
        assert!(cubin_runs_on(plain(100), 103));
        assert!(!cubin_runs_on(plain(100), 120));
        let accel = CubinArch {
            sm: 90,
            arch_specific: true,
        };
        assert!(cubin_runs_on(accel, 90));
        assert!(!cubin_runs_on(accel, 91));
    }

    #[test]
    fn prefers_a_matching_cubin_and_falls_back_to_ptx() {
        let ptx = Path::new("/b/hello.ptx");
        let plain = |sm| {
            Some(CubinArch {
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
    fn ptx_directives() {
        let ptx = "//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 7.8\n.target sm_90, debug\n.address_size 64\n";
        assert_eq!(ptx_target(ptx), Some(90));
        assert_eq!(ptx_version(ptx), Some("7.8"));
        assert_eq!(ptx_target(".version 7.0\n"), None);
    }

    #[test]
    fn newer_ptx_target_is_refused_with_both_names() {
        let ptx = ".version 8.0\n.target sm_90\n";
        let error = check_ptx_target(ptx, 80, "NVIDIA A100")
            .unwrap_err()
            .to_string();
        assert!(error.contains("sm_90"), "{error}");
        assert!(error.contains("NVIDIA A100 is sm_80"), "{error}");
        assert!(check_ptx_target(ptx, 90, "H100").is_ok());
        assert!(check_ptx_target(".target sm_70\n", 90, "H100").is_ok());
    }

    #[test]
    fn init_fini_objects_sorted_by_priority() {
        let names = [
            "__init_array_object_b_200",
            "_start",
            "__fini_array_object_x_5",
            "__init_array_object_a_101",
            "__init_array_object_c_101",
            "__fini_array_object_y_1",
        ];
        let found = init_fini_objects(names).unwrap();
        assert_eq!(
            found.ctors,
            [
                "__init_array_object_a_101",
                "__init_array_object_c_101",
                "__init_array_object_b_200"
            ]
        );
        assert_eq!(
            found.dtors,
            ["__fini_array_object_y_1", "__fini_array_object_x_5"]
        );
        assert!(init_fini_objects(["_start", "__llvm_rpc_client"])
            .unwrap()
            .is_empty());
    }

    #[test]
    fn bad_priority_is_an_error() {
        assert!(init_fini_objects(["__init_array_object_f_x"]).is_err());
        assert!(init_fini_objects(["__fini_array_object_f_70000"]).is_err());
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

    #[test]
    fn decodes_cubins_from_the_real_ptxas() {
        let Some(ptxas) = find_ptxas() else {
            let why = "ptxas is not installed (scripts/setup.sh installs it)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("skipping: {why}");
            return;
        };
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
                CubinArch {
                    sm: 70,
                    arch_specific: false,
                },
            ),
            (
                "sm_80",
                CubinArch {
                    sm: 80,
                    arch_specific: false,
                },
            ),
            (
                "sm_86",
                CubinArch {
                    sm: 86,
                    arch_specific: false,
                },
            ),
            (
                "sm_90",
                CubinArch {
                    sm: 90,
                    arch_specific: false,
                },
            ),
            (
                "sm_90a",
                CubinArch {
                    sm: 90,
                    arch_specific: true,
                },
            ),
            (
                "sm_100",
                CubinArch {
                    sm: 100,
                    arch_specific: false,
                },
            ),
            (
                "sm_120",
                CubinArch {
                    sm: 120,
                    arch_specific: false,
                },
            ),
        ] {
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
            let bytes = std::fs::read(&cubin).unwrap();
            assert_eq!(cubin_arch(&bytes), Some(expected), "{arch}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
