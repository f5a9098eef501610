//! A worker's command line, both ends: the parent builds it ([`WorkerOptions::spec`]) and the
//! worker reads it ([`WorkerOptions::parse`]), so the two cannot disagree.

use crate::handle::WorkerSpec;
use gpurun_hal::{BackendKind, LoadOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Which device a worker opens and how it loads the image.
#[derive(Clone, Debug, PartialEq, Eq)]
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
        let mut args = vec![
            "--backend".to_string(),
            self.backend.name().into(),
            "--device".into(),
            self.device.to_string(),
            "--lane-size".into(),
            self.lane_size.to_string(),
        ];
        if !self.emulation_checks {
            args.push("--no-emulation-checks".into());
        }
        if let Some(seed) = self.emulation_seed {
            args.push("--emulation-seed".into());
            args.push(seed.to_string());
        }
        if let Some(stack) = self.stack_size {
            args.push("--stack-size".into());
            args.push(stack.to_string());
        }
        if self.allow_system {
            args.push("--allow-system".into());
        }
        if let Some(stdin) = &self.stdin {
            args.push("--stdin".into());
            args.push(stdin.display().to_string());
        }
        args
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
        let mut options = WorkerOptions {
            backend: BackendKind::Host,
            device: 0,
            lane_size: LoadOptions::default().emulated_lane_size,
            emulation_checks: true,
            emulation_seed: None,
            stack_size: None,
            allow_system: false,
            stdin: None,
        };
        let mut image = None;
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            let arg = arg.to_string_lossy();
            if arg == "--" {
                image = rest.next().map(PathBuf::from);
                break;
            }
            if arg == "--allow-system" {
                options.allow_system = true;
                continue;
            }
            if arg == "--no-emulation-checks" {
                options.emulation_checks = false;
                continue;
            }
            let value = rest
                .next()
                .map(|value| value.to_string_lossy().into_owned())
                .ok_or_else(|| format!("worker option `{arg}` needs a value"))?;
            let number = |what: &str| {
                value
                    .parse::<usize>()
                    .map_err(|_| format!("worker option `{what}` needs a number, not `{value}`"))
            };
            match &*arg {
                "--backend" => {
                    options.backend = BackendKind::from_name(&value)
                        .ok_or_else(|| format!("unknown backend `{value}`"))?;
                }
                "--device" => options.device = number("--device")?,
                "--lane-size" => {
                    options.lane_size = u32::try_from(number("--lane-size")?)
                        .map_err(|_| format!("lane size `{value}` is too large"))?;
                }
                "--stack-size" => options.stack_size = Some(number("--stack-size")?),
                "--emulation-seed" => {
                    options.emulation_seed = Some(value.parse().map_err(|_| {
                        format!("worker option `--emulation-seed` needs a number, not `{value}`")
                    })?);
                }
                "--stdin" => options.stdin = Some(PathBuf::from(value)),
                other => return Err(format!("unknown worker option `{other}`")),
            }
        }
        let image = image.ok_or("the worker needs `-- IMAGE` last")?;
        Ok((options, image))
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
        assert!(parse(&["--backend", "nope", "--", "x"]).contains("unknown backend"));
        assert!(parse(&["--device"]).contains("needs a value"));
        assert!(parse(&["--device", "x", "--", "i"]).contains("needs a number"));
        assert!(parse(&["--backend", "host"]).contains("IMAGE"));
        assert!(parse(&["--bogus", "1", "--", "i"]).contains("unknown worker option"));
    }
}
