//! Where a run's tests run: the backend that runs each build target, the targets to build when
//! none is given (the GPU that is present, else the host emulation), whether a GPU is required
//! (`--require-gpu`, `GPURUN_REQUIRE_GPU`, read once here for the CLI and `gpurun-test` alike),
//! and the architecture of the GPU present, which the build asks through
//! `BuildOptions::gpu_arch`. The build itself knows targets, not devices.

use gpurun_hal::select::{self, BackendChoice};
use gpurun_hal::BackendKind;
use gpurun_image::{ImageKind, Platform};

/// The environment variable that makes a missing GPU an error (`--require-gpu`); its values
/// are read by [`parse_require_gpu`], by the CLI and by `gpurun-test` alike.
pub const REQUIRE_GPU_ENV: &str = "GPURUN_REQUIRE_GPU";

/// Whether a [`REQUIRE_GPU_ENV`] value asks for a GPU: the words clap takes for a yes or a no
/// (`1`, `y`, `yes`, `t`, `true`, `on`; `0`, `n`, `no`, `f`, `false`, `off` or empty), any case;
/// anything else is an error rather than a silent no.
pub fn parse_require_gpu(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "y" | "yes" | "t" | "true" | "on" => Ok(true),
        "" | "0" | "n" | "no" | "f" | "false" | "off" => Ok(false),
        _ => Err(format!(
            "`{value}` is neither a yes nor a no for {REQUIRE_GPU_ENV} (use 1 or 0)"
        )),
    }
}

/// Whether [`REQUIRE_GPU_ENV`] asks for a GPU (unset: no).
pub fn gpu_required_by_env() -> Result<bool, String> {
    match std::env::var(REQUIRE_GPU_ENV) {
        Ok(value) => parse_require_gpu(&value),
        Err(_) => Ok(false),
    }
}

/// No GPU where one was required (`--require-gpu`): why each GPU backend has none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a GPU is required (--require-gpu or {REQUIRE_GPU_ENV}=1), but {0}")]
pub struct NoGpu(String);

/// The GPU backends in the order `auto` tries them.
const GPU_BACKENDS: [BackendKind; 2] = [BackendKind::Cuda, BackendKind::Hsa];

/// Why `kind` has no device, or `None` when it has one.
fn missing_devices(kind: BackendKind) -> Option<String> {
    match select::backend(kind).devices() {
        Ok(devices) if !devices.is_empty() => None,
        Ok(_) => Some(format!("{kind}: no devices")),
        Err(error) => Some(format!("{kind}: {error}")),
    }
}

/// The targets to build for when none is given, one per backend the tests run on: the GPU
/// that is present, else (unless a GPU is `required`) the host emulation, said in one line on
/// stderr; an explicit backend choice names its targets (`all`: the host emulation and every
/// GPU backend with a device, or with `required` the GPU backends only). With `required`, only
/// GPU backends with a device will do.
pub fn targets_for(choice: &BackendChoice, required: bool) -> Result<Vec<Platform>, NoGpu> {
    let gpus_present = || {
        let mut present = Vec::new();
        let mut reasons = Vec::new();
        for kind in GPU_BACKENDS {
            match missing_devices(kind) {
                None => present.push(kind.platform()),
                Some(reason) => reasons.push(reason),
            }
        }
        (present, reasons.join("; "))
    };
    let targets = match choice {
        BackendChoice::Only(kind) => vec![kind.platform()],
        BackendChoice::Each(kinds) => kinds.iter().map(|kind| kind.platform()).collect(),
        BackendChoice::Auto => {
            let (present, reasons) = gpus_present();
            if let Some(&first) = present.first() {
                return Ok(vec![first]);
            }
            if required {
                return Err(NoGpu(format!("no GPU was found ({reasons})")));
            }
            eprintln!(
                "note: no GPU found ({reasons}); running tests on the host emulation backend"
            );
            return Ok(vec![Platform::Host]);
        }
        BackendChoice::All => {
            let (present, reasons) = gpus_present();
            if required {
                if present.is_empty() {
                    return Err(NoGpu(format!("no GPU was found ({reasons})")));
                }
                return Ok(present);
            }
            std::iter::once(Platform::Host).chain(present).collect()
        }
    };
    if required {
        require_gpu(&targets)?;
    }
    Ok(targets)
}

/// Checks that every one of `targets` runs on a GPU that is present (`--require-gpu`).
pub fn require_gpu(targets: &[Platform]) -> Result<(), NoGpu> {
    for &target in targets {
        let kind = BackendKind::for_platform(target);
        if !kind.is_gpu() {
            return Err(NoGpu(format!(
                "the {target} target runs on the host emulation backend, not a GPU"
            )));
        }
        if let Some(reason) = missing_devices(kind) {
            return Err(NoGpu(format!("{target} needs a {kind} device ({reason})")));
        }
    }
    Ok(())
}

/// An image that none of the backends asked for can run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WrongBackend {
    #[error("none of the backends named can run {}; it needs the {needs} backend", image_in_words(*.image))]
    NoneOf {
        image: ImageKind,
        needs: BackendKind,
    },
    #[error("the {asked} backend cannot run {}; it needs the {needs} backend", image_in_words(*.image))]
    Only {
        asked: BackendKind,
        image: ImageKind,
        needs: BackendKind,
    },
}

/// The backend of `choice` that runs an image of `kind`.
pub fn backend_for(choice: &BackendChoice, kind: ImageKind) -> Result<BackendKind, WrongBackend> {
    let needs = BackendKind::for_platform(kind.platform());
    match choice {
        BackendChoice::Auto | BackendChoice::All => Ok(needs),
        BackendChoice::Only(asked) if *asked == needs => Ok(needs),
        BackendChoice::Each(kinds) if kinds.contains(&needs) => Ok(needs),
        BackendChoice::Each(_) => Err(WrongBackend::NoneOf { image: kind, needs }),
        BackendChoice::Only(asked) => Err(WrongBackend::Only {
            asked: *asked,
            image: kind,
            needs,
        }),
    }
}

/// An image's kind in words, for messages: "an NVIDIA PTX image".
pub fn image_in_words(kind: ImageKind) -> &'static str {
    match kind {
        ImageKind::Ptx => "an NVIDIA PTX image",
        ImageKind::Cubin => "an NVIDIA cubin",
        ImageKind::Amdgpu => "an AMDGPU code object",
        ImageKind::Host => "a host emulation image",
    }
}

/// The architecture of the first GPU of `target`'s kind on this machine (CUDA device 0 for
/// nvptx, HSA agent 0 for amdgcn), when there is one: what `BuildOptions::gpu_arch` asks.
pub fn gpu_arch(target: Platform) -> Option<String> {
    let kind = BackendKind::for_platform(target);
    if !kind.is_gpu() {
        return None;
    }
    let devices = select::backend(kind).devices().ok()?;
    Some(devices.into_iter().next()?.arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_gpu_values_read_as_clap_reads_a_flag() {
        for yes in ["1", "y", "YES", "t", "true", " On "] {
            assert_eq!(parse_require_gpu(yes), Ok(true), "{yes}");
        }
        for no in ["", "0", "n", "No", "f", "false", "off"] {
            assert_eq!(parse_require_gpu(no), Ok(false), "{no}");
        }
        for neither in ["2", "maybe", "yes please"] {
            assert!(parse_require_gpu(neither).is_err(), "{neither}");
        }
    }
}
