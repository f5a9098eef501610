//! What the fake-driver tests share: building this workspace's packages with the cargo that
//! runs the tests, and the fake driver library (crates/gpurun-fake-driver) they load.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The JSON messages of `cargo build -p PACKAGE TARGET...` in this workspace, with the cargo
/// running the tests; panics with cargo's output if the build fails.
pub fn cargo_build(package: &str, target: &[&str]) -> Vec<serde_json::Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["build", "--locked", "--message-format=json", "-p", package])
        .args(target)
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "building {package} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .collect()
}

/// The fake driver's shared library (both the CUDA driver and the HSA runtime), built once per
/// test process.
pub fn fake_driver_library() -> &'static Path {
    static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        cargo_build("gpurun-fake-driver", &["--lib"])
            .into_iter()
            .filter(|message| message["target"]["name"] == "gpurun_fake_driver")
            .flat_map(|message| message["filenames"].as_array().cloned().unwrap_or_default())
            .filter_map(|name| name.as_str().map(PathBuf::from))
            .find(|path| path.extension().is_some_and(|ext| ext == "so"))
            .expect("cargo names the fake driver's shared library")
    })
}

/// One call the fake driver recorded.
#[derive(Debug, Clone)]
pub struct Call {
    pub function: String,
    pub details: String,
    pub status: String,
}

impl Call {
    /// Whether this is a call to `function` whose details contain `details`.
    pub fn is(&self, function: &str, details: &str) -> bool {
        self.function == function && self.details.contains(details)
    }

    /// The value of `key=` in the details: the text after it up to the next space.
    pub fn value(&self, key: &str) -> Option<&str> {
        let rest = self.details.split(&format!("{key}=")).nth(1)?;
        rest.split(' ').next()
    }
}

/// The calls recorded in `log` (lines `<pid> <function> <details> -> <status>`), in order; the
/// file is removed.
pub fn read_calls(log: &Path) -> Vec<Call> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    text.lines()
        .map(|line| {
            let (_pid, rest) = line.split_once(' ').unwrap_or(("", line));
            let (call, status) = rest.rsplit_once(" -> ").unwrap_or((rest, ""));
            let (function, details) = call.split_once(' ').unwrap_or((call, ""));
            Call {
                function: function.into(),
                details: details.into(),
                status: status.into(),
            }
        })
        .collect()
}

/// Positions of the calls to `function` whose details contain `details`.
pub fn positions(calls: &[Call], function: &str, details: &str) -> Vec<usize> {
    calls
        .iter()
        .enumerate()
        .filter(|(_, call)| call.is(function, details))
        .map(|(at, _)| at)
        .collect()
}

/// The position of the first such call; panics with every call if there is none.
pub fn first(calls: &[Call], function: &str, details: &str) -> usize {
    *positions(calls, function, details)
        .first()
        .unwrap_or_else(|| panic!("no {function} {details} in {calls:#?}"))
}
