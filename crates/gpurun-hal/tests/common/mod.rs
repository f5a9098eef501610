//! What the fake-driver tests share: the fake driver library (crates/gpurun-fake-driver) built
//! with the cargo that runs the tests, the fake CUDA driver put where a process loads it, and
//! the calls it logs. Also the end-to-end tests' (package gpurun-e2e, module `fake_driver`),
//! which run the CLI's worker on the fake.

// Each test crate that includes it uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The fake driver's log file, where it records every call (see gpurun-fake-driver).
pub const LOG_ENV: &str = "GPURUN_FAKE_DRIVER_LOG";

/// The JSON messages of `cargo build -p PACKAGE TARGET...` in this workspace, with the cargo
/// running the tests; panics with cargo's output if the build fails.
pub fn cargo_build(package: &str, target: &[&str]) -> Vec<serde_json::Value> {
    // The workspace root: the nearest directory above this package with the lock file.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").is_file())
        .expect("the package is in the workspace");
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

/// `dir`, made if missing, with the fake driver in it as `libcuda.so`, where a process whose
/// `LD_LIBRARY_PATH` starts with `dir` (see [`with_fake_cuda`]) loads it as the CUDA driver. A
/// link, not a copy: the library is large with debug info. Replaced atomically, so test
/// processes running side by side never see it missing.
pub fn fake_cuda_in(dir: PathBuf) -> PathBuf {
    std::fs::create_dir_all(&dir).unwrap();
    let staging = dir.join(format!("libcuda.so.{}", std::process::id()));
    let _ = std::fs::remove_file(&staging);
    std::os::unix::fs::symlink(fake_driver_library(), &staging).unwrap();
    std::fs::rename(&staging, dir.join("libcuda.so")).unwrap();
    dir
}

/// Runs test `child` of this test binary again in `command` (a child process of the test
/// binary, its environment set: the fake driver, the scenario), alone and with its output;
/// panics, naming `what`, unless it ends well after printing `scenario done`. Its stdout.
pub fn run_child(command: &mut Command, child: &str, what: &str) -> String {
    let output = command
        .args(["--exact", child, "--ignored", "--nocapture"])
        .output()
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && stdout.contains("scenario done"),
        "{what}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `command` set up to load the fake CUDA driver from `dir` (made by [`fake_cuda_in`]) and log
/// its calls to `log`, with none of the CUDA variables the tests are about inherited.
pub fn with_fake_cuda<'c>(command: &'c mut Command, dir: &Path, log: &Path) -> &'c mut Command {
    let mut search = dir.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        search.push(":");
        search.push(old);
    }
    command
        .env("LD_LIBRARY_PATH", search)
        .env(LOG_ENV, log)
        .env_remove("CUDA_LAUNCH_BLOCKING")
        .env_remove("CUDA_MODULE_LOADING")
}

/// The calls a process made on the fake CUDA driver, recorded in `log`, in order (the file is
/// removed); panics unless the driver was used and `cuInit` came first.
pub fn read_cuda_log(log: &Path) -> Vec<Call> {
    let calls = read_calls(log);
    assert!(
        calls.first().is_some_and(|call| call.function == "cuInit"),
        "{}: the driver was not used or cuInit was not first: {calls:#?}",
        log.display()
    );
    calls
}

/// A log file in `dir` for one run of `scenario`, never the same twice in this process: tests
/// that run one scenario with other settings run at once.
pub fn run_log(dir: &Path, scenario: &str) -> PathBuf {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    dir.join(format!("{scenario}-{}-{run}.log", std::process::id()))
}

/// Bytes as the fake drivers log them (a parameter buffer, a kernarg segment): lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
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

/// The timing events of a module's launches, checked against the calls: two events created
/// (with timing) before the first launch; each launch's stream records the start event right
/// before `cuLaunchKernel` and the stop event right after; the elapsed time is read once the
/// stream has said the kernel is done, and before the next launch; the same two events serve
/// every launch and are destroyed once each, after the last reading, before the module
/// unloads (if it does). Returns the launches.
#[track_caller]
pub fn launches_are_timed(calls: &[Call], kernel: &str) -> Vec<usize> {
    let launches = positions(calls, "cuLaunchKernel", &format!("function={kernel}"));
    assert!(!launches.is_empty(), "{calls:#?}");
    let created = positions(calls, "cuEventCreate", "");
    assert_eq!(created.len(), 2, "one pair per module: {calls:#?}");
    assert!(created.iter().all(|&at| calls[at].details == "flags=0"));
    assert!(created[1] < launches[0]);
    let event_at = |at: usize| calls[at].value("event").unwrap_or_default().to_owned();
    let (start, stop) = (event_at(launches[0] - 1), event_at(launches[0] + 1));
    assert_ne!(start, stop);
    for (n, &launch) in launches.iter().enumerate() {
        let stream = calls[launch].value("stream").unwrap_or_default();
        let around = format!("{:#?}", &calls[launch - 1..=launch + 1]);
        for (at, event) in [(launch - 1, &start), (launch + 1, &stop)] {
            assert!(
                calls[at].is("cuEventRecord", &format!("event={event} stream={stream}"))
                    && calls[at].status == "CUDA_SUCCESS",
                "launch {n} is not between its start and stop events: {around}"
            );
        }
        let next = launches.get(n + 1).copied().unwrap_or(calls.len());
        let done = positions(calls, "cuStreamQuery", &format!("stream={stream}"))
            .into_iter()
            .find(|&at| at > launch && calls[at].status == "CUDA_SUCCESS")
            .unwrap_or_else(|| panic!("launch {n} never done: {calls:#?}"));
        let read: Vec<usize> = positions(calls, "cuEventElapsedTime", "")
            .into_iter()
            .filter(|&at| at > launch && at < next)
            .collect();
        assert_eq!(read.len(), 1, "launch {n}: {calls:#?}");
        let elapsed = &calls[read[0]];
        assert!(
            read[0] > done
                && elapsed.status == "CUDA_SUCCESS"
                && elapsed.details
                    == format!(
                        "start={start} stop={stop} start_stream={stream} stop_stream={stream}"
                    ),
            "launch {n}: {elapsed:?} after the stream was done at {done}: {calls:#?}"
        );
    }
    // A worker process ends with `_exit`, tearing nothing down.
    let destroyed = positions(calls, "cuEventDestroy", "");
    let destroyed_events: Vec<String> = destroyed.iter().map(|&at| event_at(at)).collect();
    let Some(unload) = positions(calls, "cuModuleUnload", "").first().copied() else {
        assert!(destroyed.is_empty(), "{calls:#?}");
        return launches;
    };
    assert_eq!(destroyed_events, [start, stop], "{calls:#?}");
    let last_read = *positions(calls, "cuEventElapsedTime", "").last().unwrap();
    assert!(destroyed.iter().all(|&at| last_read < at && at < unload));
    launches
}
