//! The user's `build.rustflags` on GPU targets. Our flags (`-Ctarget-cpu`, `-Clinker`) go in
//! `target.<triple>.rustflags`, and cargo ignores `build.rustflags` whenever a target table
//! has rustflags. So when the user's configuration has `build.rustflags` and no target-level
//! rustflags of its own for this target, their flags are carried into ours: the build gets
//! what cargo would give it had the user written both. With target-level rustflags of the
//! user's, cargo joins theirs and ours and drops `build.rustflags`, as it would for them alone.

use std::path::Path;

use cargo_platform::{Cfg, CfgExpr};

use super::BuildError;
use crate::toolchain::Toolchain;

/// The flags of the user's `build.rustflags` that our `target.<triple>.rustflags` would hide
/// (empty when there are none, or when cargo would not use them for `triple` anyway). Reads
/// the configuration the way cargo does: from the working directory up, `$CARGO_HOME`, and the
/// environment.
pub fn hidden_build_flags(toolchain: &Toolchain, triple: &str) -> Result<Vec<String>, BuildError> {
    let env_build = std::env::var("CARGO_BUILD_RUSTFLAGS").ok();
    let env_target_name = format!(
        "CARGO_TARGET_{}_RUSTFLAGS",
        triple.to_uppercase().replace(['-', '.'], "_")
    );
    if std::env::var_os(&env_target_name).is_some() {
        return Ok(Vec::new());
    }
    if env_build.is_none() && !config_files_may_set(&["build", "rustflags"]) {
        // Nothing to read: spare the build a cargo process (no-op builds are timed).
        return Ok(Vec::new());
    }
    let config = read_config(toolchain)?;
    let targets = &config["target"];
    if !targets[triple]["rustflags"].is_null() {
        return Ok(Vec::new());
    }
    let cfg_keys: Vec<&str> = targets
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, table)| key.starts_with("cfg(") && !table["rustflags"].is_null())
        .map(|(key, _)| key.as_str())
        .collect();
    if !cfg_keys.is_empty() {
        let cfgs = target_cfgs(toolchain, triple)?;
        if cfg_keys.iter().any(|key| CfgExpr::matches_key(key, &cfgs)) {
            return Ok(Vec::new());
        }
    }
    let mut flags = flag_list(&config["build"]["rustflags"]);
    // Cargo merges the environment's value after the files'.
    if let Some(value) = env_build {
        flags.extend(value.split_whitespace().map(str::to_owned));
    }
    Ok(flags)
}

/// A rustflags value: an array of flags, or one string split at whitespace.
fn flag_list(value: &serde_json::Value) -> Vec<String> {
    match value {
        serde_json::Value::String(text) => text.split_whitespace().map(str::to_owned).collect(),
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(|item| item.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether a configuration file cargo reads (`.cargo/config(.toml)` in the working directory or
/// above, or in `$CARGO_HOME`) may set the value at `key` (`["build", "rustflags"]`): one sets
/// it, includes other files, or cannot be parsed here (cargo will say what is wrong with it).
pub(crate) fn config_files_may_set(key: &[&str]) -> bool {
    let cwd = std::env::current_dir().unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cargo")));
    let dirs = cwd
        .ancestors()
        .map(|dir| dir.join(".cargo"))
        .chain(cargo_home);
    dirs.flat_map(|dir| [dir.join("config.toml"), dir.join("config")])
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .any(|text| may_set(&text, key))
}

/// Whether one configuration file may set `key` (see above).
fn may_set(text: &str, key: &[&str]) -> bool {
    match text.parse::<toml_edit::DocumentMut>() {
        Ok(document) => {
            if document.contains_key("include") {
                return true;
            }
            let mut item = document.as_item();
            for part in key {
                match item.get(part) {
                    Some(inner) => item = inner,
                    None => return false,
                }
            }
            true
        }
        Err(_) => true,
    }
}

/// The configuration cargo resolves here, files and `--config` values (not the environment):
/// `cargo -Zunstable-options config get --format json` of the build's own toolchain.
fn read_config(toolchain: &Toolchain) -> Result<serde_json::Value, BuildError> {
    let mut command = super::cargo::toolchain_cargo(toolchain);
    command.args(["-Zunstable-options", "config", "get", "--format", "json"]);
    let text = output_of(command)?;
    serde_json::from_str(&text)
        .map_err(|err| BuildError::Config(format!("`cargo config get` printed no JSON: {err}")))
}

/// `rustc --print cfg --target TRIPLE`, for `target.'cfg(..)'` tables.
fn target_cfgs(toolchain: &Toolchain, triple: &str) -> Result<Vec<Cfg>, BuildError> {
    let mut command = std::process::Command::new(toolchain.sysroot.join("bin").join("rustc"));
    command.args(["--print", "cfg", "--target", triple]);
    let text = output_of(command)?;
    // A line cargo's parser does not take cannot match a user's expression either.
    Ok(text.lines().filter_map(|line| line.parse().ok()).collect())
}

/// The stdout of `command`, or an error with its stderr's first line.
fn output_of(mut command: std::process::Command) -> Result<String, BuildError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let failed = |detail: String| BuildError::Config(format!("{program}: {detail}"));
    let output = command
        .output()
        .map_err(|err| failed(format!("cannot run it: {err}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let line = stderr.lines().find(|line| !line.trim().is_empty());
        return Err(failed(line.unwrap_or("no message").trim().to_owned()));
    }
    String::from_utf8(output.stdout).map_err(|_| failed("output is not UTF-8".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustflags_values_are_arrays_or_strings() {
        assert_eq!(
            flag_list(&serde_json::json!("--cfg a  -Cb")),
            ["--cfg", "a", "-Cb"]
        );
        assert_eq!(
            flag_list(&serde_json::json!(["--cfg", "a b"])),
            ["--cfg", "a b"]
        );
        assert!(flag_list(&serde_json::Value::Null).is_empty());
    }

    #[test]
    fn only_files_that_may_set_build_rustflags_need_cargo() {
        let key = ["build", "rustflags"];
        assert!(may_set("[build]\nrustflags = [\"--cfg\", \"a\"]\n", &key));
        assert!(may_set("build.rustflags = \"--cfg a\"\n", &key));
        assert!(may_set("include = [\"other.toml\"]\n", &key));
        assert!(may_set("[build\n", &key));
        // Target-level rustflags alone: cargo never uses build.rustflags there anyway.
        assert!(!may_set(
            "# rustflags = [\"-Cx\"]\n[alias]\nb = \"build\"\n[target.x86_64-unknown-linux-gnu]\nrustflags = [\"-Cx\"]\n",
            &key
        ));
        let build_std = ["unstable", "build-std"];
        assert!(may_set("[unstable]\nbuild-std = [\"core\"]\n", &build_std));
        assert!(!may_set(
            "[unstable]\nbuild-std-features = []\n",
            &build_std
        ));
    }
}
