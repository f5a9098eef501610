//! Picking a backend: `--backend auto|cuda|hsa|host|all` or a list (`host,cuda`), or from the
//! image's kind.

use crate::{Backend, BackendKind};

/// What the user asked for on the command line.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// The backend that runs this kind of image.
    #[default]
    Auto,
    Only(BackendKind),
    /// Each of these (two or more, no repeats): every test runs on each (`--backend host,cuda`).
    Each(Vec<BackendKind>),
    /// Every backend that has a device, the host emulation included (`--backend all`).
    All,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let unknown = |name: &str| {
            format!("unknown backend `{name}` (expected auto, cuda, hsa, host or all)")
        };
        // The scripted backend is for tests of the runner; users cannot pick it.
        let kind = |name: &str| {
            BackendKind::from_name(name)
                .filter(|kind| *kind != BackendKind::Scripted)
                .ok_or_else(|| unknown(name))
        };
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "all" => Ok(BackendChoice::All),
            list if list.contains(',') => {
                let mut kinds = Vec::new();
                for name in list.split(',').map(str::trim) {
                    let kind = kind(name)?;
                    if kinds.contains(&kind) {
                        return Err(format!("backend `{name}` is listed twice"));
                    }
                    kinds.push(kind);
                }
                Ok(BackendChoice::Each(kinds))
            }
            name => kind(name).map(BackendChoice::Only),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_choices_parse_alone_in_lists_and_all() {
        let parse = |text: &str| text.parse::<BackendChoice>();
        assert_eq!(parse("auto"), Ok(BackendChoice::Auto));
        assert_eq!(parse("all"), Ok(BackendChoice::All));
        assert_eq!(parse("cuda"), Ok(BackendChoice::Only(BackendKind::Cuda)));
        assert_eq!(
            parse("host, cuda"),
            Ok(BackendChoice::Each(vec![
                BackendKind::Host,
                BackendKind::Cuda
            ]))
        );
        assert!(parse("host,host").unwrap_err().contains("listed twice"));
        assert!(parse("host,nope")
            .unwrap_err()
            .contains("unknown backend `nope`"));
        assert!(parse("scripted").unwrap_err().contains("unknown backend"));
        assert!(parse("host,").unwrap_err().contains("unknown backend ``"));
    }
}
