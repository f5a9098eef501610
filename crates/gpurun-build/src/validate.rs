//! Offline checks of the images a build makes, so a broken image fails at build time rather than
//! at load time on a GPU we may not have: PTX has a header and kernels (and assembles with ptxas);
//! an AMDGPU code object is an AMDHSA code object of a version ROCr loads, with no undefined
//! dynamic symbol, and an AMDHSA metadata note that lists its kernels, each with its `NAME.kd`
//! kernel descriptor symbol. The images are read by `gpurun-image`, the one parser of images;
//! this module holds the build's rules about what it found.

use std::path::Path;
use std::process::Command;

use gpurun_image::{Image, ImageKind};
/// `EI_OSABI` of AMDHSA code objects (`ELFOSABI_AMDGPU_HSA`).
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// The code object version we emit (LLVM 22 defaults to 6, which ROCr 5.x rejects).
pub const AMDHSA_CODE_OBJECT_VERSION: u8 = 5;
/// `-Zbuild-std-features` of amdgcn builds: compiler_builtins' `mem` defines `memcpy`,
/// `memcmp`, `strlen`, ... in the image, where ROCr's loader could not resolve them.
pub const AMDGCN_BUILD_STD_FEATURES: &str = "compiler-builtins-mem";
/// Rustflags of amdgcn builds: code object v5 (see [`AMDHSA_CODE_OBJECT_VERSION`]).
pub const AMDGCN_RUSTFLAGS: &[&str] = &["-Cllvm-args=--amdhsa-code-object-version=5"];

/// `EI_ABIVERSION` of an AMDHSA code object of `version` (v3 is 1, v4 2, v5 3, v6 4).
pub const fn amdhsa_abi_version(code_object_version: u8) -> u8 {
    code_object_version.saturating_sub(2)
}

/// Why an image is not valid. One line each.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("PTX has no `{0}` directive")]
    PtxMissingDirective(&'static str),
    #[error("PTX declares no kernels (`.entry`)")]
    PtxNoKernels,
    #[error("{0}")]
    Image(String),
    #[error("not {expected}: {found}")]
    WrongKind {
        expected: &'static str,
        found: &'static str,
    },
    #[error("ptxas failed for {arch}: {stderr}")]
    Ptxas { arch: String, stderr: String },
    /// This ptxas does not know the architecture at all (ptxas 13 dropped sm_70, for one): not
    /// a verdict on the PTX.
    #[error("this ptxas cannot assemble for {arch}: {stderr}")]
    PtxasLacksArch { arch: String, stderr: String },
    #[error("ptxas crashed ({status}) assembling for {arch}")]
    PtxasCrashed { arch: String, status: String },
    #[error("cannot run ptxas at {path}: {detail}")]
    PtxasNotRunnable { path: String, detail: String },
    #[error("no AMDHSA metadata note (owner AMDGPU, type 32)")]
    NoMetadataNote,
    #[error("bad AMDHSA metadata: {0}")]
    BadMetadata(String),
    #[error("AMDHSA metadata lists no kernels")]
    NoKernels,
    #[error("kernel `{kernel}` has no kernel descriptor symbol `{symbol}`")]
    MissingKernelDescriptor { kernel: String, symbol: String },
    #[error("{}", gpurun_image::describe_undefined_symbols(.0))]
    UndefinedSymbols(Vec<String>),
    #[error("not an AMDHSA code object (ELF OS/ABI {0}, expected 64)")]
    NotAmdhsa(u8),
    #[error("AMDHSA code object v{version} (ELF ABI version {abi_version}); expected v4 or v5: ROCr 5.x loaders (Debian's 5.2 among them) know up to v5 and reject newer ones")]
    UnsupportedCodeObjectVersion { version: u16, abi_version: u8 },
}

/// What the PTX check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxSummary {
    /// `.version` (PTX ISA version), e.g. `7.0`.
    pub version: String,
    /// `.target`, e.g. `sm_70`.
    pub target: String,
    /// Names of the `.entry` kernels, in file order.
    pub entries: Vec<String>,
}

/// Checks the PTX text for its header and lists its kernels (in name order).
pub fn check_ptx(text: &str) -> Result<PtxSummary, ValidateError> {
    let image = parse(text.as_bytes(), ImageKind::Ptx, "PTX")?;
    let version = image
        .ptx_version()
        .map(|(major, minor)| format!("{major}.{minor}"))
        .ok_or(ValidateError::PtxMissingDirective(".version"))?;
    let target = image
        .ptx_target()
        .map(str::to_owned)
        .ok_or(ValidateError::PtxMissingDirective(".target"))?;
    let entries: Vec<String> = image.kernels().iter().map(|k| k.name.clone()).collect();
    if entries.is_empty() {
        return Err(ValidateError::PtxNoKernels);
    }
    Ok(PtxSummary {
        version,
        target,
        entries,
    })
}

/// The image in `bytes`, which must be of `kind`.
fn parse(bytes: &[u8], kind: ImageKind, expected: &'static str) -> Result<Image, ValidateError> {
    let image = Image::parse(bytes.to_vec(), None).map_err(|error| match error {
        gpurun_image::ImageError::NoKernels { .. } if kind == ImageKind::Ptx => {
            ValidateError::PtxNoKernels
        }
        other => ValidateError::Image(other.to_string()),
    })?;
    if image.kind() != kind {
        return Err(ValidateError::WrongKind {
            expected,
            found: image.kind().describe(),
        });
    }
    Ok(image)
}

/// How hard ptxas optimizes a cubin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PtxasOptimization {
    /// ptxas's default (`-O3`): release builds, and the offline checks that run ptxas's
    /// optimizer (where it has crashed).
    Full,
    /// `--Ofast-compile=max`: debug builds. Debug PTX is large (core's float formatting alone is
    /// thousands of lines once a test asserts on an `f32`), and on it ptxas 12.9 took 39 s at
    /// `-O3`, 16 s at `-O0` and under 1 s at `--Ofast-compile=max` for sm_90 (fixtures/basic,
    /// debug, 1 MB of PTX, measured 2026-11-27): the same code, less optimized. It checks which
    /// instructions an architecture has as `-O3` does.
    FastCompile,
}

/// Whether `ptxas` takes `--Ofast-compile` (ptxas 12.8 and later), from its `--help`.
pub fn ptxas_has_fast_compile(ptxas: &Path) -> bool {
    Command::new(ptxas)
        .arg("--help")
        .output()
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).contains("--Ofast-compile"))
}

/// Assembles `ptx` for `arch` with `ptxas` at its default optimization, writing `output`.
/// ptxas's whole stderr is the error.
pub fn assemble_ptx(
    ptxas: &Path,
    ptx: &Path,
    arch: &str,
    output: &Path,
) -> Result<(), ValidateError> {
    assemble_ptx_as(ptxas, ptx, arch, output, PtxasOptimization::Full)
}

/// [`assemble_ptx`] at `optimization`.
pub fn assemble_ptx_as(
    ptxas: &Path,
    ptx: &Path,
    arch: &str,
    output: &Path,
    optimization: PtxasOptimization,
) -> Result<(), ValidateError> {
    let mut command = Command::new(ptxas);
    command.arg(format!("-arch={arch}"));
    if optimization == PtxasOptimization::FastCompile {
        command.arg("--Ofast-compile=max");
    }
    let result = command
        .arg(ptx)
        .arg("-o")
        .arg(output)
        .output()
        .map_err(|err| ValidateError::PtxasNotRunnable {
            path: ptxas.display().to_string(),
            detail: err.to_string(),
        })?;
    if result.status.success() {
        return Ok(());
    }
    let _ = std::fs::remove_file(output);
    // Killed by a signal: a crash of ptxas itself, not a verdict on the PTX.
    if result.status.code().is_none() {
        return Err(ValidateError::PtxasCrashed {
            arch: arch.to_owned(),
            status: result.status.to_string(),
        });
    }
    let mut stderr = String::from_utf8_lossy(&result.stderr).trim().to_owned();
    if stderr.is_empty() {
        stderr = format!("exited with {}", result.status);
    }
    // ptxas's words for an architecture it does not have: "Value 'sm_70' is not defined for
    // option 'gpu-name'".
    if stderr.contains(&format!("'{arch}' is not defined for option 'gpu-name'")) {
        return Err(ValidateError::PtxasLacksArch {
            arch: arch.to_owned(),
            stderr,
        });
    }
    Err(ValidateError::Ptxas {
        arch: arch.to_owned(),
        stderr,
    })
}

/// What the AMDGPU check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdgpuSummary {
    /// Kernel names from the metadata (`.name`), in metadata order.
    pub kernels: Vec<String>,
    /// `amdhsa.target` from the metadata, e.g. `amdgcn-amd-amdhsa--gfx90a`.
    pub target: Option<String>,
}

/// Checks an AMDGPU code object: AMDHSA, code object v4 or v5, no undefined dynamic symbol, an
/// AMDHSA metadata note, and a `NAME.kd` symbol for every kernel the metadata lists.
pub fn check_amdgpu_code_object(bytes: &[u8]) -> Result<AmdgpuSummary, ValidateError> {
    let image = parse(bytes, ImageKind::Amdgpu, "an AMDGPU code object")?;
    let Some(amdgpu) = image.amdgpu() else {
        return Err(ValidateError::WrongKind {
            expected: "an AMDGPU code object",
            found: image.kind().describe(),
        });
    };
    if amdgpu.os_abi != ELFOSABI_AMDGPU_HSA {
        return Err(ValidateError::NotAmdhsa(amdgpu.os_abi));
    }
    let abi_version = amdgpu.abi_version;
    if !(amdhsa_abi_version(4)..=amdhsa_abi_version(5)).contains(&abi_version) {
        return Err(ValidateError::UnsupportedCodeObjectVersion {
            version: u16::from(abi_version) + 2,
            abi_version,
        });
    }
    if !amdgpu.undefined_symbols.is_empty() {
        return Err(ValidateError::UndefinedSymbols(
            amdgpu.undefined_symbols.clone(),
        ));
    }
    if !amdgpu.has_metadata_note {
        return Err(ValidateError::NoMetadataNote);
    }
    let listed = amdgpu.metadata_kernels.as_ref().ok_or_else(|| {
        ValidateError::BadMetadata("no readable `amdhsa.kernels` list of named kernels".into())
    })?;
    let mut kernels = Vec::new();
    for (name, symbol) in listed {
        let descriptor = format!("{name}.kd");
        if symbol.as_deref() != Some(descriptor.as_str()) || image.kernel(name).is_none() {
            return Err(ValidateError::MissingKernelDescriptor {
                kernel: name.clone(),
                symbol: descriptor,
            });
        }
        kernels.push(name.clone());
    }
    if kernels.is_empty() {
        return Err(ValidateError::NoKernels);
    }
    Ok(AmdgpuSummary {
        kernels,
        target: amdgpu.target.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 7.0\n.target sm_70\n.address_size 64\n\n\t// .globl\t_start\n.visible .entry _start(\n\t.param .u32 _start_param_0\n)\n{\n\tret;\n}\n.entry __gpurun_test_a_0123456789abcdef()\n{\n\tret;\n}\n";

    #[test]
    fn ptx_summary_lists_entries() {
        let summary = check_ptx(PTX).unwrap();
        assert_eq!(summary.version, "7.0");
        assert_eq!(summary.target, "sm_70");
        assert_eq!(
            summary.entries,
            vec!["__gpurun_test_a_0123456789abcdef", "_start"]
        );
    }

    #[test]
    fn ptx_without_header_or_kernels_is_rejected() {
        let error = check_ptx(".target sm_70\n.visible .entry k()\n{}").unwrap_err();
        assert!(error.to_string().contains("`.version`"), "{error}");
        let error = check_ptx(".version 7.0\n.visible .entry k()\n{}").unwrap_err();
        assert!(error.to_string().contains(".target"), "{error}");
        assert!(matches!(
            check_ptx(".version 7.0\n.target sm_70\n.func f()\n{}"),
            Err(ValidateError::PtxNoKernels)
        ));
    }

    #[test]
    fn code_object_versions_map_to_elf_abi_versions() {
        assert_eq!(amdhsa_abi_version(4), 2);
        assert_eq!(amdhsa_abi_version(AMDHSA_CODE_OBJECT_VERSION), 3);
        assert_eq!(amdhsa_abi_version(6), 4);
        assert!(AMDGCN_RUSTFLAGS
            .iter()
            .any(|flag| flag.ends_with(&format!("version={AMDHSA_CODE_OBJECT_VERSION}"))));
    }

    #[test]
    fn non_elf_and_wrong_machine_are_rejected() {
        assert!(matches!(
            check_amdgpu_code_object(b"not an elf"),
            Err(ValidateError::Image(_))
        ));
        // A minimal x86-64 ELF header with no sections.
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 2; // 64-bit
        header[5] = 1; // little-endian
        header[6] = 1; // version
        header[16] = 3; // ET_DYN
        header[18] = 62; // EM_X86_64
        header[20] = 1;
        header[52] = 64; // e_ehsize
                         // gpurun-image refuses it (an x86-64 file that is no host emulation image either).
        let error = check_amdgpu_code_object(&header).unwrap_err().to_string();
        assert!(error.contains("62") || error.contains("x86"), "{error}");
    }
}
