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
}
