//! Device targets and GPU architectures: parsing what the user typed, checking it, and choosing
//! the architecture for a package (`--arch`, then `[package.metadata.gpurun]`, then the default).

use std::process::Command;

use gpurun_image::Platform;

use super::BuildError;

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

/// Parses a full triple or a short name (`nvptx`, `amdgcn`, `host`) as `--target` takes it.
pub fn parse_target(name: &str) -> Result<Platform, BuildError> {
    Platform::parse(name).ok_or_else(|| BuildError::UnknownTarget(name.to_owned()))
}

/// The key of `[package.metadata.gpurun]` that holds `target`'s architecture.
fn metadata_arch_key(target: Platform) -> &'static str {
    match target {
        Platform::Nvptx => "nvptx-arch",
        Platform::Amdgcn => "amdgcn-arch",
        Platform::Host => "host-arch",
    }
}

/// Checks that `arch` names an architecture of `target`.
pub fn check_arch(target: Platform, arch: &str) -> Result<(), BuildError> {
    let (known, prefix) = match target {
        Platform::Nvptx => (KNOWN_NVPTX_ARCHES, "sm_"),
        Platform::Amdgcn => (KNOWN_AMDGCN_ARCHES, "gfx"),
        Platform::Host => {
            return Err(BuildError::UnknownArch {
                arch: arch.to_owned(),
                target,
                hint: "the host target takes no --arch".to_owned(),
            })
        }
    };
    if known.contains(&arch) {
        return Ok(());
    }
    let unknown = || BuildError::UnknownArch {
        arch: arch.to_owned(),
        target,
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
    if rustc_target_cpus(target).is_some_and(|cpus| cpus.iter().any(|cpu| cpu == arch)) {
        Ok(())
    } else {
        Err(unknown())
    }
}

/// The CPUs `rustc +<toolchain> --print target-cpus` lists for a GPU target.
fn rustc_target_cpus(target: Platform) -> Option<Vec<String>> {
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
pub fn check_cli_arches(targets: &[Platform], arches: &[String]) -> Result<(), BuildError> {
    for arch in arches {
        if targets
            .iter()
            .any(|target| arch_family_matches(*target, arch))
        {
            continue;
        }
        return match targets {
            // One target: say what is wrong with the value for that target.
            [target] => check_arch(*target, arch),
            _ => Err(BuildError::UnknownArch {
                arch: arch.clone(),
                target: targets.first().copied().unwrap_or(Platform::Nvptx),
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
pub fn cli_arch_for(target: Platform, arches: &[String]) -> Result<Option<&str>, BuildError> {
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
pub fn detect_arch(target: Platform, probe: fn(Platform) -> Option<String>) -> Option<String> {
    if std::env::var(ARCH_DETECT_ENV).is_ok_and(|value| value == "0") {
        return None;
    }
    let arch = probe(target)?;
    match check_arch(target, &arch) {
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
    target: Platform,
    cli_arch: Option<&str>,
    package: &str,
    metadata: Option<&serde_json::Value>,
    detect: &mut dyn FnMut() -> Option<String>,
) -> Result<Option<String>, BuildError> {
    if target == Platform::Host {
        return Ok(None);
    }
    if let Some(arch) = cli_arch {
        check_arch(target, arch)?;
        return Ok(Some(arch.to_owned()));
    }
    if let Some(table) = metadata {
        let specific = table.get(metadata_arch_key(target));
        let generic = table.get("arch");
        for (key, value) in [(metadata_arch_key(target), specific), ("arch", generic)] {
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
            check_arch(target, arch).map_err(|err| BuildError::BadMetadata {
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
        Platform::Nvptx => Ok(Some(DEFAULT_NVPTX_ARCH.to_owned())),
        Platform::Amdgcn => Err(BuildError::NoAmdgcnArch {
            package: package.to_owned(),
        }),
        Platform::Host => Ok(None),
    }
}

fn arch_family_matches(target: Platform, arch: &str) -> bool {
    match target {
        Platform::Nvptx => arch.starts_with("sm_"),
        Platform::Amdgcn => arch.starts_with("gfx"),
        Platform::Host => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_short_and_full_target_names() {
        for (name, platform) in [
            ("nvptx", Platform::Nvptx),
            ("nvptx64-nvidia-cuda", Platform::Nvptx),
            ("amdgcn-amd-amdhsa", Platform::Amdgcn),
            ("host", Platform::Host),
        ] {
            assert_eq!(parse_target(name).unwrap(), platform, "{name}");
        }
        assert!(matches!(
            parse_target("riscv64"),
            Err(BuildError::UnknownTarget(name)) if name == "riscv64"
        ));
    }

    #[test]
    fn arch_precedence_is_cli_then_metadata_then_device_then_default() {
        let mut none = || None;
        let metadata = json!({ "nvptx-arch": "sm_80", "arch": "gfx90a" });
        let nvptx = Platform::Nvptx;
        let amdgcn = Platform::Amdgcn;
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
            resolve_arch(Platform::Host, None, "p", None, &mut none).unwrap(),
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
        let both = [Platform::Nvptx, Platform::Amdgcn];
        let arches = vec!["gfx90a".to_owned(), "sm_80".to_owned()];
        check_cli_arches(&both, &arches).unwrap();
        assert_eq!(
            cli_arch_for(Platform::Nvptx, &arches).unwrap(),
            Some("sm_80")
        );
        assert_eq!(
            cli_arch_for(Platform::Amdgcn, &arches).unwrap(),
            Some("gfx90a")
        );
        assert_eq!(cli_arch_for(Platform::Host, &arches).unwrap(), None);
        let twice = vec!["sm_80".to_owned(), "sm_90".to_owned()];
        assert!(check_cli_arches(&[Platform::Nvptx], &twice).is_err());
        let stray = vec!["gfx90a".to_owned()];
        assert!(check_cli_arches(&[Platform::Nvptx, Platform::Host], &stray).is_err());
        assert!(matches!(
            check_cli_arches(&[Platform::Host], &["sm_70".to_owned()]),
            Err(BuildError::UnknownArch { hint, .. }) if hint.contains("host target takes no")
        ));
    }

    #[test]
    fn rejects_wrong_family_and_bad_metadata() {
        let mut none = || None;
        for (target, arch) in [(Platform::Nvptx, "gfx90a"), (Platform::Amdgcn, "sm_70")] {
            assert!(matches!(
                resolve_arch(target, Some(arch), "p", None, &mut none),
                Err(BuildError::UnknownArch { .. })
            ));
        }
        for metadata in [json!({ "nvptx-arch": 70 }), json!({ "nvptx-arch": "sm_7" })] {
            assert!(
                matches!(
                    resolve_arch(Platform::Nvptx, None, "p", Some(&metadata), &mut none),
                    Err(BuildError::BadMetadata { .. })
                ),
                "{metadata}"
            );
        }
    }
}
