//! Device targets and GPU architectures: parsing what the user typed, checking it, and choosing
//! the architecture for a package (`--arch`, then `[package.metadata.gpurun]`, then the default).

use std::fmt;
use std::process::Command;

use super::BuildError;

/// What a device crate is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceTarget {
    /// NVIDIA GPUs (`nvptx64-nvidia-cuda`): a PTX image, plus a cubin when ptxas is present.
    Nvptx,
    /// AMD GPUs (`amdgcn-amd-amdhsa`): an ELF code object.
    Amdgcn,
    /// The host CPU, for the emulation backend: a `cdylib` (`.so`).
    Host,
}

/// The default nvptx architecture: the nightly's nvptx baseline.
pub const DEFAULT_NVPTX_ARCH: &str = "sm_70";

/// Architectures this nightly's rustc lists for nvptx (`--print target-cpus`). Others are checked
/// against the installed rustc before they are rejected.
const KNOWN_NVPTX_ARCHES: &[&str] = &[
    "sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a",
    "sm_100", "sm_100a", "sm_100f", "sm_101", "sm_101a", "sm_101f", "sm_103", "sm_103a", "sm_103f",
    "sm_110", "sm_110a", "sm_110f", "sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f",
];

/// GFX architectures this nightly's rustc lists for amdgcn (the marketing names it also accepts,
/// like `fiji`, are not offered: code objects are named by gfx number).
const KNOWN_AMDGCN_ARCHES: &[&str] = &[
    "gfx600",
    "gfx601",
    "gfx602",
    "gfx700",
    "gfx701",
    "gfx702",
    "gfx703",
    "gfx704",
    "gfx705",
    "gfx801",
    "gfx802",
    "gfx803",
    "gfx805",
    "gfx810",
    "gfx900",
    "gfx902",
    "gfx904",
    "gfx906",
    "gfx908",
    "gfx909",
    "gfx90a",
    "gfx90c",
    "gfx942",
    "gfx950",
    "gfx1010",
    "gfx1011",
    "gfx1012",
    "gfx1013",
    "gfx1030",
    "gfx1031",
    "gfx1032",
    "gfx1033",
    "gfx1034",
    "gfx1035",
    "gfx1036",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1103",
    "gfx1150",
    "gfx1151",
    "gfx1152",
    "gfx1153",
    "gfx1200",
    "gfx1201",
    "gfx1250",
    "gfx1251",
    "gfx9-generic",
    "gfx9-4-generic",
    "gfx10-1-generic",
    "gfx10-3-generic",
    "gfx11-generic",
    "gfx12-generic",
];

impl DeviceTarget {
    /// Every target, in the order `--target` help lists them.
    pub const ALL: [DeviceTarget; 3] = [Self::Nvptx, Self::Amdgcn, Self::Host];

    /// Parses a full triple or a short name (`nvptx`, `amdgcn`, `host`).
    pub fn parse(name: &str) -> Result<DeviceTarget, BuildError> {
        match name {
            "nvptx" | "nvptx64" | "nvptx64-nvidia-cuda" | "cuda" => Ok(Self::Nvptx),
            "amdgcn" | "amdgpu" | "amdgcn-amd-amdhsa" | "hsa" => Ok(Self::Amdgcn),
            "host" => Ok(Self::Host),
            _ => Err(BuildError::UnknownTarget(name.to_owned())),
        }
    }

    /// The short name used in messages and JSON.
    pub fn short_name(self) -> &'static str {
        match self {
            Self::Nvptx => "nvptx",
            Self::Amdgcn => "amdgcn",
            Self::Host => "host",
        }
    }

    /// The rustc target triple, `None` for the host (cargo's default target).
    pub fn triple(self) -> Option<&'static str> {
        match self {
            Self::Nvptx => Some("nvptx64-nvidia-cuda"),
            Self::Amdgcn => Some("amdgcn-amd-amdhsa"),
            Self::Host => None,
        }
    }

    /// Whether this is a GPU target (nightly, `-Zbuild-std`, an architecture).
    pub fn is_gpu(self) -> bool {
        self != Self::Host
    }

    /// The key of `[package.metadata.gpurun]` that holds this target's architecture.
    pub fn metadata_arch_key(self) -> &'static str {
        match self {
            Self::Nvptx => "nvptx-arch",
            Self::Amdgcn => "amdgcn-arch",
            Self::Host => "host-arch",
        }
    }

    /// Checks that `arch` names an architecture of this target.
    pub fn check_arch(self, arch: &str) -> Result<(), BuildError> {
        let (known, prefix) = match self {
            Self::Nvptx => (KNOWN_NVPTX_ARCHES, "sm_"),
            Self::Amdgcn => (KNOWN_AMDGCN_ARCHES, "gfx"),
            Self::Host => {
                return Err(BuildError::UnknownArch {
                    arch: arch.to_owned(),
                    target: self,
                    hint: "the host target takes no --arch".to_owned(),
                })
            }
        };
        if known.contains(&arch) {
            return Ok(());
        }
        let unknown = || BuildError::UnknownArch {
            arch: arch.to_owned(),
            target: self,
            hint: format!(
                "expected one of {}",
                known
                    .iter()
                    .filter(|name| name.starts_with(prefix))
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        if !arch.starts_with(prefix) {
            return Err(unknown());
        }
        // A newer nightly may know architectures this list does not: ask it before refusing.
        if rustc_target_cpus(self).is_some_and(|cpus| cpus.iter().any(|cpu| cpu == arch)) {
            Ok(())
        } else {
            Err(unknown())
        }
    }
}

impl fmt::Display for DeviceTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// The CPUs `rustc +<toolchain> --print target-cpus` lists for a GPU target.
fn rustc_target_cpus(target: DeviceTarget) -> Option<Vec<String>> {
    let triple = target.triple()?;
    let output = Command::new("rustc")
        .arg(format!("+{}", crate::toolchain::Toolchain::name_from_env()))
        .args(["--print", "target-cpus", "--target", triple])
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .skip(1)
            .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
            .collect(),
    )
}

/// Checks that every `--arch` belongs to one of the requested targets (one `--arch` per family).
pub fn check_cli_arches(targets: &[DeviceTarget], arches: &[String]) -> Result<(), BuildError> {
    for arch in arches {
        if targets
            .iter()
            .any(|target| arch_family_matches(*target, arch))
        {
            continue;
        }
        return match targets {
            // One target: say what is wrong with the value for that target.
            [target] => target.check_arch(arch),
            _ => Err(BuildError::UnknownArch {
                arch: arch.clone(),
                target: targets.first().copied().unwrap_or(DeviceTarget::Nvptx),
                hint: "it belongs to none of the requested targets".to_owned(),
            }),
        };
    }
    for target in targets {
        cli_arch_for(*target, arches)?;
    }
    Ok(())
}

/// The `--arch` value for `target`'s family, if one was given.
pub fn cli_arch_for(target: DeviceTarget, arches: &[String]) -> Result<Option<&str>, BuildError> {
    let mut matching = arches
        .iter()
        .filter(|arch| arch_family_matches(target, arch));
    let first = matching.next();
    if let Some(second) = matching.next() {
        return Err(BuildError::UnknownArch {
            arch: second.clone(),
            target,
            hint: format!(
                "--arch {} was already given for {target}",
                first.map(String::as_str).unwrap_or_default()
            ),
        });
    }
    Ok(first.map(String::as_str))
}

/// Environment variable that turns off asking the installed GPU for its architecture (`0`).
pub const ARCH_DETECT_ENV: &str = "GPURUN_ARCH_DETECT";

/// The architecture `probe` finds for the first GPU of `target`'s kind on this machine (see
/// [`crate::BuildOptions::gpu_arch`]), when there is one, this toolchain can build for it, and
/// `GPURUN_ARCH_DETECT` is not `0`.
pub fn detect_arch(
    target: DeviceTarget,
    probe: fn(DeviceTarget) -> Option<String>,
) -> Option<String> {
    if std::env::var(ARCH_DETECT_ENV).is_ok_and(|value| value == "0") {
        return None;
    }
    let arch = probe(target)?;
    match target.check_arch(&arch) {
        Ok(()) => Some(arch),
        Err(_) => {
            eprintln!(
                "warning: the {target} GPU here is {arch}, which this toolchain cannot build for; using the default"
            );
            None
        }
    }
}

/// Picks the architecture of `package` for `target`: `--arch`, else `[package.metadata.gpurun]`
/// (`nvptx-arch`/`amdgcn-arch`, or `arch` when it belongs to this target), else the GPU found on
/// this machine (`detect`, called only when needed), else the default (`sm_70` for nvptx; amdgcn
/// has none and gets an error that says how to give one).
pub fn resolve_arch(
    target: DeviceTarget,
    cli_arch: Option<&str>,
    package: &str,
    metadata: Option<&serde_json::Value>,
    detect: &mut dyn FnMut() -> Option<String>,
) -> Result<Option<String>, BuildError> {
    if target == DeviceTarget::Host {
        return Ok(None);
    }
    if let Some(arch) = cli_arch {
        target.check_arch(arch)?;
        return Ok(Some(arch.to_owned()));
    }
    if let Some(table) = metadata {
        let specific = table.get(target.metadata_arch_key());
        let generic = table.get("arch");
        for (key, value) in [(target.metadata_arch_key(), specific), ("arch", generic)] {
            let Some(value) = value else { continue };
            let Some(arch) = value.as_str() else {
                return Err(BuildError::BadMetadata {
                    package: package.to_owned(),
                    detail: format!("`{key}` must be a string, found `{value}`"),
                });
            };
            // A generic `arch` for the other GPU family is not an error: it is simply not ours.
            if key == "arch" && !arch_family_matches(target, arch) {
                continue;
            }
            target
                .check_arch(arch)
                .map_err(|err| BuildError::BadMetadata {
                    package: package.to_owned(),
                    detail: err.to_string(),
                })?;
            return Ok(Some(arch.to_owned()));
        }
    }
    if let Some(arch) = detect() {
        return Ok(Some(arch));
    }
    match target {
        DeviceTarget::Nvptx => Ok(Some(DEFAULT_NVPTX_ARCH.to_owned())),
        DeviceTarget::Amdgcn => Err(BuildError::NoAmdgcnArch {
            package: package.to_owned(),
        }),
        DeviceTarget::Host => Ok(None),
    }
}

fn arch_family_matches(target: DeviceTarget, arch: &str) -> bool {
    match target {
        DeviceTarget::Nvptx => arch.starts_with("sm_"),
        DeviceTarget::Amdgcn => arch.starts_with("gfx"),
        DeviceTarget::Host => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_short_and_full_target_names() {
        assert_eq!(DeviceTarget::parse("nvptx").unwrap(), DeviceTarget::Nvptx);
        assert_eq!(
            DeviceTarget::parse("nvptx64-nvidia-cuda").unwrap(),
            DeviceTarget::Nvptx
        );
        assert_eq!(
            DeviceTarget::parse("amdgcn-amd-amdhsa").unwrap(),
            DeviceTarget::Amdgcn
        );
        assert_eq!(DeviceTarget::parse("host").unwrap(), DeviceTarget::Host);
        assert!(matches!(
            DeviceTarget::parse("riscv64"),
            Err(BuildError::UnknownTarget(name)) if name == "riscv64"
        ));
    }

    #[test]
    fn arch_precedence_is_cli_then_metadata_then_device_then_default() {
        let mut none = || None;
        let metadata = json!({ "nvptx-arch": "sm_80", "arch": "gfx90a" });
        let nvptx = DeviceTarget::Nvptx;
        let amdgcn = DeviceTarget::Amdgcn;
        assert_eq!(
            resolve_arch(nvptx, Some("sm_90"), "p", Some(&metadata), &mut none).unwrap(),
            Some("sm_90".to_owned())
        );
        assert_eq!(
            resolve_arch(nvptx, None, "p", Some(&metadata), &mut none).unwrap(),
            Some("sm_80".to_owned())
        );
        assert_eq!(
            resolve_arch(amdgcn, None, "p", Some(&metadata), &mut none).unwrap(),
            Some("gfx90a".to_owned())
        );
        assert_eq!(
            resolve_arch(nvptx, None, "p", None, &mut none).unwrap(),
            Some("sm_70".to_owned())
        );
        assert!(matches!(
            resolve_arch(amdgcn, None, "p", Some(&json!({})), &mut none),
            Err(BuildError::NoAmdgcnArch { .. })
        ));
        assert_eq!(
            resolve_arch(DeviceTarget::Host, None, "p", None, &mut none).unwrap(),
            None
        );
        // A GPU found on the machine comes after the metadata and before the default; it is not
        // asked when something earlier decided.
        let mut asked = 0;
        let mut found = || {
            asked += 1;
            Some("sm_90".to_owned())
        };
        assert_eq!(
            resolve_arch(nvptx, None, "p", None, &mut found).unwrap(),
            Some("sm_90".to_owned())
        );
        assert_eq!(
            resolve_arch(nvptx, None, "p", Some(&metadata), &mut found).unwrap(),
            Some("sm_80".to_owned())
        );
        assert_eq!(
            resolve_arch(amdgcn, None, "p", Some(&json!({})), &mut || Some(
                "gfx942".to_owned()
            ))
            .unwrap(),
            Some("gfx942".to_owned())
        );
        assert_eq!(asked, 1);
    }

    #[test]
    fn each_arch_goes_to_its_family() {
        let both = [DeviceTarget::Nvptx, DeviceTarget::Amdgcn];
        let arches = vec!["gfx90a".to_owned(), "sm_80".to_owned()];
        check_cli_arches(&both, &arches).unwrap();
        assert_eq!(
            cli_arch_for(DeviceTarget::Nvptx, &arches).unwrap(),
            Some("sm_80")
        );
        assert_eq!(
            cli_arch_for(DeviceTarget::Amdgcn, &arches).unwrap(),
            Some("gfx90a")
        );
        assert_eq!(cli_arch_for(DeviceTarget::Host, &arches).unwrap(), None);
        let twice = vec!["sm_80".to_owned(), "sm_90".to_owned()];
        assert!(check_cli_arches(&[DeviceTarget::Nvptx], &twice).is_err());
        let stray = vec!["gfx90a".to_owned()];
        assert!(check_cli_arches(&[DeviceTarget::Nvptx, DeviceTarget::Host], &stray).is_err());
        assert!(matches!(
            check_cli_arches(&[DeviceTarget::Host], &["sm_70".to_owned()]),
            Err(BuildError::UnknownArch { hint, .. }) if hint.contains("host target takes no")
        ));
    }

    #[test]
    fn rejects_wrong_family_and_bad_metadata() {
        let mut none = || None;
        for (target, arch) in [
            (DeviceTarget::Nvptx, "gfx90a"),
            (DeviceTarget::Amdgcn, "sm_70"),
        ] {
            assert!(matches!(
                resolve_arch(target, Some(arch), "p", None, &mut none),
                Err(BuildError::UnknownArch { .. })
            ));
        }
        for metadata in [json!({ "nvptx-arch": 70 }), json!({ "nvptx-arch": "sm_7" })] {
            assert!(
                matches!(
                    resolve_arch(DeviceTarget::Nvptx, None, "p", Some(&metadata), &mut none),
                    Err(BuildError::BadMetadata { .. })
                ),
                "{metadata}"
            );
        }
    }
}
