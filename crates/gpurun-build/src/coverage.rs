//! Source-based coverage of device code, as the host emulation runs it: the device crate's host
//! image is built with `-Cinstrument-coverage` ([`RUSTFLAG`], see
//! [`BuildOptions::coverage`](crate::BuildOptions::coverage)), every process that loads it
//! writes raw profiles into one folder ([`Profiles`]), and [`Profiles::report`] merges them
//! with the nightly's `llvm-profdata` and writes an lcov file and an HTML report with its
//! `llvm-cov`, of the files under the device crates' own package roots (not the device
//! runtime, `core` or other dependencies).
//!
//! What it measures is the kernel's Rust source as the emulation ran it, not the machine code a
//! GPU runs: the same lines, compiled for the host. The layout follows cargo-llvm-cov's
//! (instrumented builds in a target directory of their own, an lcov file and an `html/` folder).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::toolchain::{Toolchain, ToolchainError};
use crate::BuiltImage;

/// The rustc flag that instruments a build.
pub const RUSTFLAG: &str = "-Cinstrument-coverage";

/// Everything of coverage runs under a workspace's target directory: `<target>/gpurun-coverage`.
pub fn root(target_dir: &Path) -> PathBuf {
    target_dir.join("gpurun-coverage")
}

/// Where instrumented images are built: a target directory of their own, so that switching
/// between coverage runs and plain ones rebuilds neither.
pub fn target_dir(target_dir: &Path) -> PathBuf {
    root(target_dir).join("target")
}

/// Why coverage could not be reported.
#[derive(Debug, thiserror::Error)]
pub enum CoverageError {
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("{tool} failed: {detail}")]
    Tool { tool: String, detail: String },
    #[error("no coverage data was written: no test ran in an instrumented process that ended normally (a worker that crashed, timed out or called exit() or abort() writes none)")]
    NoProfiles,
}

/// The raw profiles of one coverage run, in a folder of their own.
#[derive(Debug, Clone)]
pub struct Profiles {
    dir: PathBuf,
}

/// What [`Profiles::report`] wrote and found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The lcov file (`lcov.info`).
    pub lcov: PathBuf,
    /// The HTML report's entry page (`html/index.html`).
    pub html: PathBuf,
    /// Source files reported.
    pub files: usize,
    /// Lines with code in those files, and how many of them ran.
    pub lines: usize,
    pub lines_hit: usize,
}

impl Profiles {
    /// An empty folder for a run's raw profiles under `target_dir`'s coverage root (the last
    /// run's profiles are removed: a report covers one run).
    pub fn fresh(target_dir: &Path) -> Result<Profiles, CoverageError> {
        let dir = root(target_dir).join("profraw");
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(CoverageError::Io {
                    context: format!("cannot remove {}", dir.display()),
                    source,
                })
            }
        }
        std::fs::create_dir_all(&dir).map_err(|source| CoverageError::Io {
            context: format!("cannot create {}", dir.display()),
            source,
        })?;
        Ok(Profiles { dir })
    }

    /// `LLVM_PROFILE_FILE` for the processes that load instrumented images: a file per process
    /// (`%p`) and image (`%m`; the library copies a worker's slots load are one image, merged
    /// into one file as they write).
    pub fn pattern(&self) -> PathBuf {
        self.dir.join("%p-%m.profraw")
    }

    /// Merges the run's profiles and reports the coverage of `images` (instrumented host images)
    /// over the files under their package roots: `lcov.info` and `html/` in `out`.
    pub fn report(&self, images: &[&BuiltImage], out: &Path) -> Result<Report, CoverageError> {
        let raw: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map_err(|source| CoverageError::Io {
                context: format!("cannot read {}", self.dir.display()),
                source,
            })?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "profraw"))
            .collect();
        if raw.is_empty() {
            return Err(CoverageError::NoProfiles);
        }
        let toolchain = Toolchain::ensure_for_build()?;
        let profdata = toolchain.find_llvm_tool("llvm-profdata")?;
        let llvm_cov = toolchain.find_llvm_tool("llvm-cov")?;
        std::fs::create_dir_all(out).map_err(|source| CoverageError::Io {
            context: format!("cannot create {}", out.display()),
            source,
        })?;
        let merged = out.join("merged.profdata");
        run(Command::new(&profdata)
            .args(["merge", "-sparse", "-o"])
            .arg(&merged)
            .args(&raw))?;
        let mut objects = Vec::new();
        for image in images {
            // llvm-cov takes the first binary plain and the others after `-object`.
            if !objects.is_empty() {
                objects.push("-object".into());
            }
            objects.push(image.path.clone().into_os_string());
        }
        let exported = run(Command::new(&llvm_cov)
            .args(["export", "-format=lcov", "-instr-profile"])
            .arg(&merged)
            .args(&objects))?;
        let roots: Vec<&Path> = images
            .iter()
            .map(|image| image.package_root.as_path())
            .collect();
        let kept = lcov_under(&String::from_utf8_lossy(&exported), &roots);
        let lcov = out.join("lcov.info");
        std::fs::write(&lcov, &kept.text).map_err(|source| CoverageError::Io {
            context: format!("cannot write {}", lcov.display()),
            source,
        })?;
        let html_dir = out.join("html");
        let _ = std::fs::remove_dir_all(&html_dir);
        run(Command::new(&llvm_cov)
            .args(["show", "-format=html", "-show-line-counts-or-regions"])
            .arg(format!("-output-dir={}", html_dir.display()))
            .arg("-instr-profile")
            .arg(&merged)
            .args(&objects)
            .args(&kept.files))?;
        Ok(Report {
            lcov,
            html: html_dir.join("index.html"),
            files: kept.files.len(),
            lines: kept.lines,
            lines_hit: kept.lines_hit,
        })
    }
}

/// What `cargo llvm-cov` set up around this process, as the environment it gives the cargo it
/// runs (and so the test binaries that cargo starts) tells: a host crate's tests whose device
/// crate `gpurun-test` builds. cargo-llvm-cov instruments the workspace's crates through a
/// rustc wrapper (`--no-rustc-wrapper`: through `RUSTFLAGS`), which our nested cargo inherits;
/// its report takes as objects the executables under its target directory's profile folder.
/// So a device crate's host image is left instrumented and built under that folder, and a GPU
/// build, which cannot be instrumented, is built without the wrapper and the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CargoLlvmCov {
    /// The target directory for host images: inside the folder the report searches.
    host_target_dir: PathBuf,
    /// The wrapper to run instead of cargo-llvm-cov's for GPU builds (`None`: none), when
    /// cargo-llvm-cov runs its wrapper.
    wrapper: Option<Option<OsString>>,
}

/// Set (to `1`) by cargo-llvm-cov for everything it runs.
const CARGO_LLVM_COV_ENV: &str = "CARGO_LLVM_COV";
/// Set by cargo-llvm-cov when rustc runs through its wrapper (itself).
const LLVM_COV_WRAPPER_ENV: &str = "__CARGO_LLVM_COV_RUSTC_WRAPPER";
/// The `RUSTC_WRAPPER` cargo-llvm-cov's wrapper runs in turn (the user's), when there is one.
const LLVM_COV_PRE_EXISTING_ENV: &str = "__CARGO_LLVM_COV_RUSTC_WRAPPER_PRE_EXISTING";
/// Our own folder inside the report's, for the host images' cargo target directory.
const HOST_IMAGES_DIR: &str = "gpurun-host-images";

impl CargoLlvmCov {
    /// This process's, if cargo-llvm-cov runs it.
    pub(crate) fn detect() -> Option<CargoLlvmCov> {
        let exe = std::env::current_exe().ok()?;
        CargoLlvmCov::from_env(|key| std::env::var_os(key), &exe)
    }

    /// From the environment `var` reads, for the test executable `exe`. cargo-llvm-cov puts
    /// `LLVM_PROFILE_FILE` in its target directory, and a test executable lives in
    /// `<target dir>/[<triple>/]<profile>/deps/`: the report searches `<target
    /// dir>/[<triple>/]<profile>` for objects, recursively.
    fn from_env(var: impl Fn(&str) -> Option<OsString>, exe: &Path) -> Option<CargoLlvmCov> {
        if var(CARGO_LLVM_COV_ENV).is_none_or(|value| value != "1") {
            return None;
        }
        let profile_file = PathBuf::from(var("LLVM_PROFILE_FILE")?);
        let report_root = profile_file.parent()?;
        let mut searched = exe.parent()?;
        if searched
            .file_name()
            .is_some_and(|name| name == "deps" || name == "examples")
        {
            searched = searched.parent()?;
        }
        let searched = if searched.starts_with(report_root) && searched != report_root {
            searched.to_path_buf()
        } else {
            report_root.join("debug")
        };
        let wrapper = var(LLVM_COV_WRAPPER_ENV).map(|_| var(LLVM_COV_PRE_EXISTING_ENV));
        Some(CargoLlvmCov {
            host_target_dir: searched.join(HOST_IMAGES_DIR),
            wrapper,
        })
    }

    /// Sets up the cargo `command` that builds for `target`.
    pub(crate) fn apply(&self, command: &mut Command, target: crate::Platform) {
        if !target.is_gpu() {
            command.env("CARGO_TARGET_DIR", &self.host_target_dir);
            return;
        }
        if let Some(pre_existing) = &self.wrapper {
            command.env_remove(LLVM_COV_WRAPPER_ENV);
            match pre_existing {
                Some(wrapper) => command.env("RUSTC_WRAPPER", wrapper),
                None => command.env_remove("RUSTC_WRAPPER"),
            };
        }
    }
}

/// `flags` without cargo-llvm-cov's instrumentation (`-C instrument-coverage`, in one
/// argument or two, `-Z` on old nightlies): for a GPU build, which has no profiler runtime.
pub(crate) fn without_instrumentation(flags: Vec<String>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::with_capacity(flags.len());
    for flag in flags {
        let joined = matches!(
            flag.as_str(),
            "-Cinstrument-coverage" | "-Zinstrument-coverage"
        );
        let split = flag == "instrument-coverage"
            && kept.last().is_some_and(|last| last == "-C" || last == "-Z");
        if split {
            kept.pop();
        } else if !joined {
            kept.push(flag);
        }
    }
    kept
}

/// Runs a tool to completion: its stdout, or its stderr as the error.
fn run(command: &mut Command) -> Result<Vec<u8>, CoverageError> {
    let tool = command.get_program().to_string_lossy().into_owned();
    let output = command.output().map_err(|source| CoverageError::Io {
        context: format!("cannot run {tool}"),
        source,
    })?;
    if output.status.success() {
        Ok(output.stdout)
    } else {
        Err(CoverageError::Tool {
            tool,
            detail: crate::toolchain::first_line(&output.stderr),
        })
    }
}

/// The records of an lcov text whose source file lies under one of `roots`.
#[derive(Debug, Default, PartialEq, Eq)]
struct KeptLcov {
    text: String,
    files: Vec<PathBuf>,
    lines: usize,
    lines_hit: usize,
}

/// Keeps the lcov records (`SF:` ... `end_of_record`) of files under `roots`, counting their
/// instrumented lines (`DA:` entries) and those that ran.
fn lcov_under(lcov: &str, roots: &[&Path]) -> KeptLcov {
    let mut kept = KeptLcov::default();
    let mut record = String::new();
    let mut file: Option<PathBuf> = None;
    let (mut lines, mut hit) = (0, 0);
    for line in lcov.lines() {
        if let Some(path) = line.strip_prefix("SF:") {
            file = Some(PathBuf::from(path));
        }
        if let Some(entry) = line.strip_prefix("DA:") {
            lines += 1;
            let count = entry.split(',').nth(1).and_then(|n| n.parse::<u64>().ok());
            if count.is_some_and(|n| n > 0) {
                hit += 1;
            }
        }
        record.push_str(line);
        record.push('\n');
        if line == "end_of_record" {
            if let Some(path) = file.take() {
                if roots.iter().any(|root| path.starts_with(root)) {
                    kept.text.push_str(&record);
                    kept.files.push(path);
                    kept.lines += lines;
                    kept.lines_hit += hit;
                }
            }
            record.clear();
            (lines, hit) = (0, 0);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const LCOV: &str =
        "SF:/ws/kernels/src/lib.rs\nFN:3,f\nDA:3,2\nDA:4,0\nDA:6,1\nLF:3\nLH:2\nend_of_record\n\
SF:/repo/crates/gpurun/src/io.rs\nDA:10,5\nend_of_record\n\
SF:/ws/kernels/src/more.rs\nDA:1,0\nend_of_record\n";

    #[test]
    fn keeps_only_records_under_the_package_roots_and_counts_their_lines() {
        let kept = lcov_under(LCOV, &[Path::new("/ws/kernels")]);
        assert_eq!(
            kept.files,
            [
                PathBuf::from("/ws/kernels/src/lib.rs"),
                PathBuf::from("/ws/kernels/src/more.rs")
            ]
        );
        assert_eq!((kept.lines, kept.lines_hit), (4, 2));
        assert!(!kept.text.contains("gpurun/src/io.rs"), "{}", kept.text);
        assert!(kept.text.starts_with("SF:/ws/kernels/src/lib.rs\n"));
        assert_eq!(kept.text.matches("end_of_record").count(), 2);
    }

    #[test]
    fn a_root_is_a_path_prefix_not_a_string_prefix() {
        let kept = lcov_under(LCOV, &[Path::new("/ws/kern")]);
        assert!(kept.files.is_empty(), "{:?}", kept.files);
    }

    #[test]
    fn fresh_profiles_start_empty_and_name_a_file_per_process_and_image() {
        let dir = std::env::temp_dir().join(format!("gpurun-cov-{}", std::process::id()));
        let profiles = Profiles::fresh(&dir).unwrap();
        std::fs::write(profiles.dir.join("old.profraw"), b"x").unwrap();
        let again = Profiles::fresh(&dir).unwrap();
        assert_eq!(std::fs::read_dir(&again.dir).unwrap().count(), 0);
        assert_eq!(
            again.pattern(),
            dir.join("gpurun-coverage/profraw/%p-%m.profraw")
        );
        assert!(matches!(
            again.report(&[], &dir.join("out")),
            Err(CoverageError::NoProfiles)
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The environment cargo-llvm-cov 0.9 gives a test it runs, through its rustc wrapper
    /// (`wrapper`) or not.
    fn llvm_cov_env(wrapper: bool, pre_existing: Option<&str>) -> HashMap<&'static str, OsString> {
        let mut env = HashMap::from([
            ("CARGO_LLVM_COV", OsString::from("1")),
            (
                "LLVM_PROFILE_FILE",
                OsString::from("/ws/target/llvm-cov-target/ws-%p-%m.profraw"),
            ),
        ]);
        if wrapper {
            env.insert(LLVM_COV_WRAPPER_ENV, "1".into());
            env.insert("RUSTC_WRAPPER", "/bin/cargo-llvm-cov".into());
        }
        if let Some(wrapper) = pre_existing {
            env.insert(LLVM_COV_PRE_EXISTING_ENV, wrapper.into());
        }
        env
    }

    fn detect(env: &HashMap<&'static str, OsString>, exe: &str) -> Option<CargoLlvmCov> {
        CargoLlvmCov::from_env(|key| env.get(key).cloned(), Path::new(exe))
    }

    /// Host images go where cargo-llvm-cov's report looks for objects: under the profile folder
    /// of the test executable (with `--target`, `<triple>/<profile>`), inside its target dir.
    #[test]
    fn host_images_build_under_the_folder_cargo_llvm_covs_report_searches() {
        let env = llvm_cov_env(true, None);
        for (exe, images) in [
            (
                "/ws/target/llvm-cov-target/debug/deps/gpu-0123abcd",
                "/ws/target/llvm-cov-target/debug/gpurun-host-images",
            ),
            (
                "/ws/target/llvm-cov-target/release/deps/gpu-0123abcd",
                "/ws/target/llvm-cov-target/release/gpurun-host-images",
            ),
            (
                "/ws/target/llvm-cov-target/x86_64-unknown-linux-gnu/debug/deps/gpu-1",
                "/ws/target/llvm-cov-target/x86_64-unknown-linux-gnu/debug/gpurun-host-images",
            ),
            // An executable elsewhere (a program cargo-llvm-cov runs from PATH): the default.
            (
                "/usr/local/bin/cargo-gpurun",
                "/ws/target/llvm-cov-target/debug/gpurun-host-images",
            ),
        ] {
            let found = detect(&env, exe).expect("under cargo-llvm-cov");
            assert_eq!(found.host_target_dir, Path::new(images), "{exe}");
        }
        assert_eq!(detect(&HashMap::new(), "/ws/target/debug/deps/gpu-1"), None);
        let mut no_profile = env.clone();
        no_profile.remove("LLVM_PROFILE_FILE");
        assert_eq!(detect(&no_profile, "/ws/target/debug/deps/gpu-1"), None);
    }

    fn env_of(command: &Command, key: &str) -> Option<Option<OsString>> {
        command
            .get_envs()
            .find(|(name, _)| *name == key)
            .map(|(_, value)| value.map(OsString::from))
    }

    /// A GPU build runs without cargo-llvm-cov's wrapper (the user's wrapper, if any, instead);
    /// a host build keeps it, in the report's folder.
    #[test]
    fn gpu_builds_drop_cargo_llvm_covs_wrapper_and_host_builds_keep_it() {
        let exe = "/ws/target/llvm-cov-target/debug/deps/gpu-1";
        for (pre_existing, wrapper) in [(None, None), (Some("sccache"), Some("sccache".into()))] {
            let found = detect(&llvm_cov_env(true, pre_existing), exe).unwrap();
            let mut gpu = Command::new("cargo");
            found.apply(&mut gpu, crate::Platform::Nvptx);
            assert_eq!(env_of(&gpu, "RUSTC_WRAPPER"), Some(wrapper));
            assert_eq!(env_of(&gpu, LLVM_COV_WRAPPER_ENV), Some(None));
            assert_eq!(env_of(&gpu, "CARGO_TARGET_DIR"), None);
            let mut host = Command::new("cargo");
            found.apply(&mut host, crate::Platform::Host);
            assert_eq!(env_of(&host, "RUSTC_WRAPPER"), None);
            assert_eq!(
                env_of(&host, "CARGO_TARGET_DIR"),
                Some(Some(found.host_target_dir.clone().into_os_string()))
            );
        }
        // Without the wrapper (`--no-rustc-wrapper`) the environment's wrapper is left alone.
        let found = detect(&llvm_cov_env(false, None), exe).unwrap();
        let mut gpu = Command::new("cargo");
        found.apply(&mut gpu, crate::Platform::Amdgcn);
        assert_eq!(env_of(&gpu, "RUSTC_WRAPPER"), None);
    }

    #[test]
    fn gpu_rustflags_lose_only_the_instrumentation() {
        let flags = |list: &[&str]| list.iter().map(|flag| flag.to_string()).collect::<Vec<_>>();
        assert_eq!(
            without_instrumentation(flags(&[
                "-C",
                "instrument-coverage",
                "--cfg=coverage",
                "-Cinstrument-coverage",
                "-C",
                "opt-level=2",
                "-Z",
                "instrument-coverage",
                "-Zinstrument-coverage",
                "instrument-coverage",
            ])),
            flags(&["--cfg=coverage", "-C", "opt-level=2", "instrument-coverage"])
        );
    }
}
