//! The toolchain a device build needs, found on this machine: the nightly `rustc` (with `rust-src`
//! and `llvm-tools`), the LLVM tools of that toolchain (`llvm-link`, `opt`, `llc`, `rust-lld`),
//! NVIDIA's `ptxas` (optional: cubins), and the GPU driver libraries (optional: running).
//!
//! `cargo gpurun doctor` prints what [`Toolchain::probe`] finds; `cargo gpurun build` calls
//! [`Toolchain::ensure_for_build`], which installs missing rustup components itself.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The toolchain used for device builds unless `GPURUN_TOOLCHAIN` names another one.
pub const DEFAULT_TOOLCHAIN: &str = "nightly";
/// Environment variable naming the rustup toolchain for device builds.
pub const TOOLCHAIN_ENV: &str = "GPURUN_TOOLCHAIN";
/// Environment variable that replaces the llvm-tools directory (where `llvm-link`, `opt`, `llc`
/// are looked up); when set, nothing is installed into it.
pub const LLVM_TOOLS_DIR_ENV: &str = "GPURUN_LLVM_TOOLS_DIR";
/// Environment variable naming the `ptxas` executable to use.
pub const PTXAS_ENV: &str = "GPURUN_PTXAS";

/// The LLVM tools the nvptx linker runs.
pub const NVPTX_LINK_TOOLS: [&str; 3] = ["llvm-link", "opt", "llc"];

/// Errors finding or installing toolchain parts.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    /// `rustc +nightly` could not be run or printed something unexpected.
    #[error(
        "the `{toolchain}` toolchain is not usable ({reason}); install it with `rustup toolchain install {toolchain} --component rust-src,llvm-tools`"
    )]
    NoToolchain { toolchain: String, reason: String },
    /// A component is still missing after trying to install it (or installing is not possible).
    #[error("{what} is missing ({detail}); run `cargo gpurun doctor --fix` or `rustup component add rust-src llvm-tools --toolchain {toolchain}`")]
    MissingComponent {
        what: String,
        detail: String,
        toolchain: String,
    },
    /// A tool is missing from a directory given by the user.
    #[error("`{tool}` not found in {dir} (set by {LLVM_TOOLS_DIR_ENV}); point it at a directory with llvm-link, opt and llc, or unset it")]
    MissingOverrideTool { tool: String, dir: PathBuf },
    /// `rustup component add` failed.
    #[error("failed to install rustup components ({components}): {detail}")]
    InstallFailed { components: String, detail: String },
}

/// What we know about the nightly toolchain used for device builds.
#[derive(Debug, Clone)]
pub struct Toolchain {
    /// rustup toolchain name (`nightly` unless overridden).
    pub name: String,
    /// `rustc --print sysroot` of that toolchain.
    pub sysroot: PathBuf,
    /// Host target triple of that rustc.
    pub host: String,
}

/// One row of the doctor's table.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was looked for.
    pub component: &'static str,
    /// Where it was found, or why not.
    pub outcome: Result<String, String>,
    /// Whether `cargo gpurun build` needs it.
    pub required: bool,
}

impl Toolchain {
    /// The rustup toolchain name for device builds.
    pub fn name_from_env() -> String {
        env::var(TOOLCHAIN_ENV)
            .ok()
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| DEFAULT_TOOLCHAIN.to_owned())
    }

    /// Runs `rustc +<toolchain>` once to learn its sysroot, host and version.
    pub fn probe() -> Result<Toolchain, ToolchainError> {
        let name = Self::name_from_env();
        let no_toolchain = |reason: String| ToolchainError::NoToolchain {
            toolchain: name.clone(),
            reason,
        };
        let output = Command::new("rustc")
            .arg(format!("+{name}"))
            .args(["--print", "sysroot", "--print", "host-tuple"])
            .env_remove("RUSTUP_TOOLCHAIN")
            .output()
            .map_err(|err| no_toolchain(format!("cannot run `rustc`: {err}")))?;
        if !output.status.success() {
            return Err(no_toolchain(first_line(&output.stderr)));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut lines = stdout.lines();
        let (Some(sysroot), Some(host)) = (lines.next(), lines.next()) else {
            return Err(no_toolchain(format!(
                "`rustc --print sysroot --print host-tuple` printed `{}`",
                stdout.trim()
            )));
        };
        if !Path::new(sysroot).is_absolute() {
            return Err(no_toolchain(format!("sysroot `{sysroot}` is not a path")));
        }
        Ok(Toolchain {
            sysroot: PathBuf::from(sysroot),
            host: host.to_owned(),
            name,
        })
    }

    /// `rustc --version` of the toolchain (one extra process: the doctor uses it, builds do not).
    pub fn version(&self) -> String {
        match Command::new("rustc")
            .arg(format!("+{}", self.name))
            .arg("--version")
            .env_remove("RUSTUP_TOOLCHAIN")
            .output()
        {
            Ok(output) if output.status.success() => first_line(&output.stdout),
            Ok(output) => first_line(&output.stderr),
            Err(err) => err.to_string(),
        }
    }

    /// Where `rust-src` puts the standard library sources.
    pub fn rust_src_dir(&self) -> PathBuf {
        self.sysroot.join("lib/rustlib/src/rust/library")
    }

    /// The directory of the toolchain's own LLVM tools (component `llvm-tools`) and `rust-lld`.
    pub fn rustlib_bin_dir(&self) -> PathBuf {
        self.sysroot
            .join("lib/rustlib")
            .join(&self.host)
            .join("bin")
    }

    /// Where `llvm-link`, `opt` and `llc` are looked up: `GPURUN_LLVM_TOOLS_DIR` or the
    /// toolchain's rustlib bin directory.
    pub fn llvm_tools_dir(&self) -> PathBuf {
        llvm_tools_dir_override().unwrap_or_else(|| self.rustlib_bin_dir())
    }

    fn has_rust_src(&self) -> bool {
        self.rust_src_dir().join("core/src/lib.rs").is_file()
    }

    fn has_llvm_tools(&self) -> bool {
        which::which_in("llvm-link", Some(self.rustlib_bin_dir()), ".").is_ok()
    }

    /// The rustup components a device build needs that are not installed.
    pub fn missing_components(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if !self.has_rust_src() {
            missing.push("rust-src");
        }
        // With an override directory the user chose the tools; we do not install llvm-tools.
        if llvm_tools_dir_override().is_none() && !self.has_llvm_tools() {
            missing.push("llvm-tools");
        }
        missing
    }

    /// Installs `components` with rustup, saying so on stderr.
    pub fn install_components(&self, components: &[&str]) -> Result<(), ToolchainError> {
        let list = components.join(", ");
        eprintln!(
            "  Installing missing rustup components for `{}`: {list}",
            self.name
        );
        let output = Command::new("rustup")
            .args(["component", "add"])
            .args(components)
            .args(["--toolchain", &self.name])
            .output()
            .map_err(|err| ToolchainError::InstallFailed {
                components: list.clone(),
                detail: format!("cannot run `rustup`: {err}"),
            })?;
        if output.status.success() {
            Ok(())
        } else {
            Err(ToolchainError::InstallFailed {
                components: list,
                detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            })
        }
    }

    /// Makes sure a device build can run: installs missing components (saying so), then checks
    /// that the LLVM tools the nvptx linker needs are present.
    pub fn ensure_for_build() -> Result<Toolchain, ToolchainError> {
        Self::probe()?.ready_for_build()
    }

    /// [`Self::ensure_for_build`] for a toolchain already probed.
    pub fn ready_for_build(self) -> Result<Toolchain, ToolchainError> {
        let toolchain = self;
        let missing = toolchain.missing_components();
        if !missing.is_empty() {
            toolchain.install_components(&missing)?;
            let still_missing = toolchain.missing_components();
            if let Some(component) = still_missing.first() {
                return Err(ToolchainError::MissingComponent {
                    what: format!("rustup component `{component}`"),
                    detail: "still absent after `rustup component add`".to_owned(),
                    toolchain: toolchain.name.clone(),
                });
            }
        }
        for tool in NVPTX_LINK_TOOLS {
            toolchain.find_llvm_tool(tool)?;
        }
        Ok(toolchain)
    }

    /// Finds one of `llvm-link`, `opt`, `llc` in [`Self::llvm_tools_dir`].
    pub fn find_llvm_tool(&self, tool: &str) -> Result<PathBuf, ToolchainError> {
        find_llvm_tool_in(&self.llvm_tools_dir(), tool).map_err(|_| {
            if let Some(dir) = llvm_tools_dir_override() {
                ToolchainError::MissingOverrideTool {
                    tool: tool.to_owned(),
                    dir,
                }
            } else {
                ToolchainError::MissingComponent {
                    what: format!("`{tool}` (rustup component llvm-tools)"),
                    detail: format!("not in {}", self.llvm_tools_dir().display()),
                    toolchain: self.name.clone(),
                }
            }
        })
    }

    /// The doctor's checks of the toolchain, in table order (the GPU drivers' rows are the
    /// doctor's own: the build knows no devices).
    pub fn checks() -> Vec<Check> {
        let mut checks = Vec::new();
        let toolchain = Self::probe();
        checks.push(Check {
            component: "nightly toolchain",
            outcome: toolchain
                .as_ref()
                .map(|toolchain| format!("{} ({})", toolchain.version(), toolchain.name))
                .map_err(|err| err.to_string()),
            required: true,
        });
        let tool_dir = toolchain.as_ref().ok().map(Toolchain::llvm_tools_dir);
        match &toolchain {
            Ok(toolchain) => {
                checks.push(Check {
                    component: "rust-src",
                    outcome: installed_in(toolchain.has_rust_src(), toolchain.rust_src_dir()),
                    required: true,
                });
                checks.push(Check {
                    component: "llvm-tools",
                    outcome: installed_in(toolchain.has_llvm_tools(), toolchain.rustlib_bin_dir()),
                    required: llvm_tools_dir_override().is_none(),
                });
            }
            Err(_) => {
                for component in ["rust-src", "llvm-tools"] {
                    checks.push(Check {
                        component,
                        outcome: Err("no nightly toolchain".to_owned()),
                        required: true,
                    });
                }
            }
        }
        for tool in NVPTX_LINK_TOOLS {
            checks.push(Check {
                component: tool,
                outcome: match &tool_dir {
                    Some(dir) => find_llvm_tool_in(dir, tool)
                        .map(|path| path.display().to_string())
                        .map_err(|_| format!("not in {}", dir.display())),
                    None => Err("no nightly toolchain".to_owned()),
                },
                required: true,
            });
        }
        checks.push(Check {
            component: "rust-lld",
            outcome: match &toolchain {
                Ok(toolchain) => {
                    let dir = toolchain.rustlib_bin_dir();
                    which::which_in("rust-lld", Some(&dir), ".")
                        .map(|path| path.display().to_string())
                        .map_err(|_| format!("not in {}", dir.display()))
                }
                Err(_) => Err("no nightly toolchain".to_owned()),
            },
            required: true,
        });
        checks.push(Check {
            component: "ptxas",
            outcome: match find_ptxas() {
                Some(path) => Ok(format!("{} ({})", path.display(), ptxas_version(&path))),
                None => Err(
                    "not found (optional: cubins and PTX checks; `pip install nvidia-cuda-nvcc-cu12`)"
                        .to_owned(),
                ),
            },
            required: false,
        });
        checks
    }
}

/// A rustup component's outcome in the doctor's table: the directory it is installed in.
fn installed_in(installed: bool, dir: PathBuf) -> Result<String, String> {
    if installed {
        Ok(dir.display().to_string())
    } else {
        Err("not installed".to_owned())
    }
}

/// The `GPURUN_LLVM_TOOLS_DIR` override, when set and non-empty.
pub fn llvm_tools_dir_override() -> Option<PathBuf> {
    env::var_os(LLVM_TOOLS_DIR_ENV)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
}

/// Looks `tool` up in `dir` only (never on PATH: another LLVM may not read rustc's bitcode).
pub fn find_llvm_tool_in(dir: &Path, tool: &str) -> Result<PathBuf, which::Error> {
    which::which_in(tool, Some(dir), ".")
}

/// Finds `ptxas`: `GPURUN_PTXAS`, then PATH, then the PyPI package `nvidia-cuda-nvcc-cu12` in the
/// usual site-packages directories, then by asking `python3` where that package lives.
pub fn find_ptxas() -> Option<PathBuf> {
    if let Some(path) = env::var_os(PTXAS_ENV).filter(|path| !path.is_empty()) {
        return Some(PathBuf::from(path));
    }
    if let Ok(path) = which::which("ptxas") {
        return Some(path);
    }
    let relative = Path::new("nvidia/cuda_nvcc/bin/ptxas");
    if let Some(path) = site_packages_dirs()
        .into_iter()
        .map(|dir| dir.join(relative))
        .find(|path| path.is_file())
    {
        return Some(path);
    }
    let output = Command::new("python3")
        .args([
            "-c",
            "import nvidia.cuda_nvcc as m; print(list(m.__path__)[0])",
        ])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let package_dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let path = Path::new(&package_dir).join("bin/ptxas");
    path.is_file().then_some(path)
}

/// site-packages directories worth a look without starting Python.
fn site_packages_dirs() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = vec!["/usr/lib".into(), "/usr/local/lib".into()];
    if let Some(home) = env::var_os("HOME").map(PathBuf::from) {
        roots.push(home.join(".local/lib"));
        if let Ok(versions) = std::fs::read_dir(home.join(".pyenv/versions")) {
            roots.extend(versions.flatten().map(|entry| entry.path().join("lib")));
        }
    }
    if let Some(venv) = env::var_os("VIRTUAL_ENV").map(PathBuf::from) {
        roots.push(venv.join("lib"));
    }
    let mut dirs = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("python3") {
                dirs.push(entry.path().join("site-packages"));
                dirs.push(entry.path().join("dist-packages"));
            }
        }
    }
    dirs
}

/// `ptxas --version`'s last line (the release), or why it failed.
pub fn ptxas_version(ptxas: &Path) -> String {
    match Command::new(ptxas).arg("--version").output() {
        Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout)
            .lines()
            .rfind(|line| !line.trim().is_empty())
            .unwrap_or("unknown version")
            .trim()
            .to_owned(),
        Ok(output) => format!("--version failed: {}", first_line(&output.stderr)),
        Err(err) => format!("cannot run: {err}"),
    }
}

/// The first line of a tool's stderr, for one-line errors.
pub fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_owned()
}
