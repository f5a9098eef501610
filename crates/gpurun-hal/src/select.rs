//! Picking a backend: `--backend auto|cuda|hsa|host`, or from the image's kind.

use crate::{Backend, BackendKind};
use gpurun_image::ImageKind;

/// What the user asked for on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// The backend that runs this kind of image.
    #[default]
    Auto,
    Only(BackendKind),
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            // The scripted backend is for tests of the runner; users cannot pick it.
            "scripted" => Err(format!(
                "unknown backend `{s}` (expected auto, cuda, hsa or host)"
            )),
            other => BackendKind::from_name(other)
                .map(BackendChoice::Only)
                .ok_or_else(|| {
                    format!("unknown backend `{other}` (expected auto, cuda, hsa or host)")
                }),
        }
    }
}

/// The backend that can run an image of this kind.
pub fn kind_for_image(image: ImageKind) -> BackendKind {
    match image {
        ImageKind::Ptx | ImageKind::Cubin => BackendKind::Cuda,
        ImageKind::Amdgpu => BackendKind::Hsa,
        ImageKind::Host => BackendKind::Host,
    }
}

/// Instantiates a backend. Creating one touches no driver: that happens in
/// [`Backend::devices`] / [`Backend::open`].
pub fn backend(kind: BackendKind) -> Box<dyn Backend> {
    match kind {
        BackendKind::Host => Box::new(crate::host::HostBackend),
        BackendKind::Cuda => Box::new(crate::cuda::CudaBackend),
        BackendKind::Hsa => Box::new(crate::hsa::HsaBackend::new()),
        BackendKind::Scripted => Box::new(crate::scripted::ScriptedBackend::from_env()),
    }
}
