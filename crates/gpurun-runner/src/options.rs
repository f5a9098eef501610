//! A worker's command line, both ends: the parent builds it ([`WorkerOptions::spec`]) and the
//! worker reads it ([`WorkerOptions::parse`]): `--options JSON -- IMAGE`, the JSON serde's of
//! one struct, so the two cannot disagree.

use crate::handle::WorkerSpec;
use gpurun_hal::{BackendKind, LoadOptions};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The worker argument whose value holds the options.
const OPTIONS_ARG: &str = "--options";

/// Which device a worker opens and how it loads the image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerOptions {
    pub backend: BackendKind,
    pub device: usize,
    /// Warp size of the host emulation.
    pub lane_size: u32,
    /// Whether the host emulation checks the memory accesses of an image built for it.
    pub emulation_checks: bool,
    /// The host emulation's seed (`None`: the worker's environment or a fresh one).
    pub emulation_seed: Option<u64>,
    pub stack_size: Option<usize>,
    /// Let device code run host commands through `system()` (`cargo gpurun run --allow-system`).
    pub allow_system: bool,
    /// The file device code reads as stdin; none: empty. The worker's own stdin carries its
    /// commands, so `cargo gpurun run` passes its stdin as `/proc/PID/fd/0`.
    pub stdin: Option<PathBuf>,
}

impl WorkerOptions {
    /// The arguments that say these options, before the image.
    pub fn to_args(&self) -> Vec<String> {
        // Serializing plain fields (numbers, strings, a path as text) cannot fail.
        let json = serde_json::to_string(self).unwrap_or_default();
        vec![OPTIONS_ARG.to_owned(), json]
    }

    /// How to start a worker for `image`: `exe`, then `prefix` (e.g. the hidden subcommand that
    /// makes the program a worker), then these options and the image.
    pub fn spec(&self, exe: PathBuf, prefix: &[&str], image: &Path) -> WorkerSpec {
        let mut args: Vec<String> = prefix.iter().map(|arg| arg.to_string()).collect();
        args.extend(self.to_args());
        args.push("--".into());
        WorkerSpec {
            exe,
            args,
            image: image.to_path_buf(),
            slots: 1,
            env: Vec::new(),
            backend: self.backend,
            sanitizer: None,
        }
    }

    /// Reads what [`WorkerOptions::to_args`] wrote, then `--` and the image.
    pub fn parse(args: &[OsString]) -> Result<(WorkerOptions, PathBuf), String> {
        let [flag, json, dashes, image] = args else {
            return Err(format!(
                "a worker takes `{OPTIONS_ARG} JSON -- IMAGE`, not {} arguments",
                args.len()
            ));
        };
        if flag != OPTIONS_ARG || dashes != "--" {
            return Err(format!(
                "a worker takes `{OPTIONS_ARG} JSON -- IMAGE`, not `{}`",
                args.iter()
                    .map(|arg| arg.to_string_lossy())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        let options = serde_json::from_str(&json.to_string_lossy())
            .map_err(|error| format!("the worker's options are not valid: {error}"))?;
        Ok((options, PathBuf::from(image)))
    }

    /// What the worker's RPC servers may do for the device.
    pub fn host_access(&self) -> gpurun_hal::handlers::HostAccess {
        gpurun_hal::handlers::HostAccess {
            allow_system: self.allow_system,
            stdin: self.stdin.clone(),
        }
    }

    /// What loading the image in a slot needs.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            stack_size: self.stack_size,
            emulated_lane_size: self.lane_size,
            host: self.host_access(),
            emulation_checks: self.emulation_checks,
            emulation_seed: self.emulation_seed,
            ..LoadOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_reads_what_the_parent_wrote() {
        let options = WorkerOptions {
            backend: BackendKind::Cuda,
            device: 3,
            lane_size: 64,
            emulation_checks: false,
            emulation_seed: Some(12345),
            stack_size: Some(8192),
            allow_system: true,
            stdin: Some("/proc/1/fd/0".into()),
        };
        let spec = options.spec("exe".into(), &["gpurun", "__worker"], Path::new("a b.ptx"));
        assert_eq!(&spec.args[..2], ["gpurun", "__worker"]);
        let mut args: Vec<OsString> = spec.args[2..].iter().map(OsString::from).collect();
        args.push(spec.image.clone().into_os_string());
        let (parsed, image) = WorkerOptions::parse(&args).unwrap();
        assert_eq!(parsed, options);
        assert_eq!(image, PathBuf::from("a b.ptx"));
    }

    #[test]
    fn bad_command_lines_are_errors() {
        let parse = |args: &[&str]| {
            let args: Vec<OsString> = args.iter().map(OsString::from).collect();
            WorkerOptions::parse(&args).unwrap_err()
        };
        let mut options = serde_json::to_value(WorkerOptions {
            backend: BackendKind::Host,
            device: 0,
            lane_size: 32,
            emulation_checks: true,
            emulation_seed: None,
            stack_size: None,
            allow_system: false,
            stdin: None,
        })
        .unwrap();
        options["backend"] = "nope".into();
        let unknown = options.to_string();
        assert!(parse(&["--options", &unknown, "--", "x"]).contains("not valid"));
        assert!(parse(&["--options", "{}", "--", "x"]).contains("not valid"));
        assert!(parse(&["--device", "1", "--", "x"]).contains("--options JSON -- IMAGE"));
        assert!(parse(&["--options", "{}"]).contains("not 2 arguments"));
    }
}
