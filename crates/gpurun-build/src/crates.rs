//! Finding device crates with `cargo metadata`: a workspace member is a device crate when it has
//! a `[package.metadata.gpurun]` table or depends on the `gpurun` crate.

use std::collections::BTreeMap;
use std::path::PathBuf;

use cargo_metadata::{MetadataCommand, Package};

use super::targets::CargoTarget;
use super::{BuildError, BuildOptions};

/// The name of the device runtime crate; depending on it makes a crate a device crate.
pub const DEVICE_RUNTIME_CRATE: &str = "gpurun";

/// The workspace a build works in.
#[derive(Debug)]
pub struct Workspace {
    /// Where cargo puts build output (respects `CARGO_TARGET_DIR` and `build.target-dir`).
    pub target_dir: PathBuf,
    /// The workspace root directory.
    pub root: PathBuf,
    /// The Cargo.toml the build runs on (as given, or the workspace's).
    pub manifest_path: PathBuf,
    members: Vec<Package>,
    /// What cargo builds with no `-p`/`--workspace`: the package of the manifest in use (given,
    /// or the nearest to the working directory), or at a virtual root its `default-members`, else
    /// every member. `cargo metadata` reports it as `workspace_default_members`.
    default_members: Vec<String>,
}

/// A workspace member that is a device crate.
#[derive(Debug, Clone)]
pub struct DeviceCrate {
    /// Package name (what `-p` takes).
    pub name: String,
    /// Its Cargo.toml (matches cargo's artifact messages to packages).
    pub manifest_path: PathBuf,
    /// Its `[package.metadata.gpurun]` table, if any.
    pub gpurun_metadata: Option<serde_json::Value>,
    /// Its lib, bin, test and example targets.
    pub targets: Vec<CargoTarget>,
    /// Its `[features]` table, optional dependencies included (for `required-features`).
    pub features: BTreeMap<String, Vec<String>>,
}

impl Workspace {
    /// Runs `cargo metadata --no-deps` on the manifest of `opts`.
    pub fn load(opts: &BuildOptions) -> Result<Workspace, BuildError> {
        let mut command = MetadataCommand::new();
        command.no_deps();
        if let Some(path) = &opts.manifest_path {
            if !path.is_file() {
                return Err(BuildError::Metadata(format!(
                    "manifest {} does not exist",
                    path.display()
                )));
            }
            command.manifest_path(path);
        }
        let metadata = command.exec().map_err(|err| match err {
            // Keep the line of cargo's stderr that says what is wrong.
            cargo_metadata::Error::CargoMetadata { stderr } => {
                BuildError::Metadata(one_line(&stderr))
            }
            other => BuildError::Metadata(one_line(&other.to_string())),
        })?;
        let members: Vec<Package> = metadata.workspace_packages().into_iter().cloned().collect();
        // Cargo older than 1.71 does not report the default members; then the package at the
        // workspace root, else (a virtual root) every member, as those cargos did.
        let default_members = if metadata.workspace_default_members.is_available() {
            metadata
                .workspace_default_packages()
                .into_iter()
                .map(|package| package.name.to_string())
                .collect()
        } else {
            match metadata.root_package() {
                Some(package) => vec![package.name.to_string()],
                None => members
                    .iter()
                    .map(|package| package.name.to_string())
                    .collect(),
            }
        };
        let manifest_path = match &opts.manifest_path {
            Some(path) => path.clone(),
            None => metadata
                .workspace_root
                .join("Cargo.toml")
                .into_std_path_buf(),
        };
        Ok(Workspace {
            target_dir: metadata.target_directory.clone().into_std_path_buf(),
            root: metadata.workspace_root.clone().into_std_path_buf(),
            manifest_path,
            members,
            default_members,
        })
    }

    /// The device crates `opts` selects, as cargo selects packages: the `-p` names, else every
    /// member with `--workspace`, else the default members (the `default_members` field).
    /// A package named or selected alone must be a device crate; of several, the members that
    /// are not device crates are left out.
    pub fn select(&self, opts: &BuildOptions) -> Result<Vec<DeviceCrate>, BuildError> {
        if !opts.packages.is_empty() {
            let mut selected = Vec::new();
            for spec in &opts.packages {
                // `-p name@1.2.3` names a version; members are unique by name, so drop it.
                let name = spec.split('@').next().unwrap_or(spec);
                let device_crate = self.device_crate(name)?;
                if !selected
                    .iter()
                    .any(|other: &DeviceCrate| other.name == device_crate.name)
                {
                    selected.push(device_crate);
                }
            }
            return Ok(selected);
        }
        let candidates: Vec<&Package> = if opts.workspace {
            self.members.iter().collect()
        } else {
            if let [only] = self.default_members.as_slice() {
                return Ok(vec![self.device_crate(only)?]);
            }
            self.members
                .iter()
                .filter(|package| {
                    self.default_members
                        .iter()
                        .any(|name| name == package.name.as_str())
                })
                .collect()
        };
        let all: Vec<DeviceCrate> = candidates.into_iter().filter_map(as_device_crate).collect();
        if all.is_empty() {
            Err(BuildError::NoDeviceCrates(self.root.clone()))
        } else {
            Ok(all)
        }
    }

    /// The `panic` strategy the workspace sets for `profile` (`dev`, `release`), if any:
    /// `CARGO_PROFILE_<NAME>_PANIC`, else `[profile.<name>] panic` of the root manifest (where
    /// cargo reads profiles). A root manifest that cannot be read says nothing here: cargo reports
    /// that itself.
    pub fn profile_panic(&self, profile: &str) -> Option<String> {
        if let Ok(value) = std::env::var(format!("CARGO_PROFILE_{}_PANIC", profile.to_uppercase()))
        {
            return Some(value);
        }
        let text = std::fs::read_to_string(self.root.join("Cargo.toml")).ok()?;
        let document: toml_edit::DocumentMut = text.parse().ok()?;
        document
            .get("profile")?
            .get(profile)?
            .get("panic")?
            .as_str()
            .map(str::to_owned)
    }

    /// The member called `name`, which must be a device crate.
    fn device_crate(&self, name: &str) -> Result<DeviceCrate, BuildError> {
        let package = self
            .members
            .iter()
            .find(|package| package.name.as_str() == name)
            .ok_or_else(|| BuildError::NoSuchPackage(name.to_owned()))?;
        as_device_crate(package).ok_or_else(|| BuildError::NotDeviceCrate(name.to_owned()))
    }
}

/// The package as a device crate, or `None` when it is not one.
fn as_device_crate(package: &Package) -> Option<DeviceCrate> {
    let gpurun_metadata = package.metadata.get("gpurun").cloned();
    let uses_runtime = package
        .dependencies
        .iter()
        .any(|dependency| dependency.name == DEVICE_RUNTIME_CRATE);
    let manifest_path = package.manifest_path.clone().into_std_path_buf();
    let root = manifest_path.parent().unwrap_or(&manifest_path).to_owned();
    (gpurun_metadata.is_some() || uses_runtime).then(|| DeviceCrate {
        name: package.name.to_string(),
        gpurun_metadata,
        targets: package
            .targets
            .iter()
            .filter_map(|target| CargoTarget::from_metadata(target, &root))
            .collect(),
        features: package.features.clone(),
        manifest_path,
    })
}

/// The first line of an error from cargo that says what is wrong.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|line| line.starts_with("error:"))
        .or_else(|| text.lines().map(str::trim).find(|line| !line.is_empty()))
        .unwrap_or("cargo metadata failed")
        .trim_start_matches("error: ")
        .to_owned()
}
