//! NVIDIA's compute-sanitizer around CUDA workers (`cargo gpurun test --sanitize TOOL`): which
//! tool, where the program is, how it wraps a worker, how its report reads, and which test each
//! of its records belongs to.
//!
//! The worker's stdout is the protocol pipe, so the sanitizer writes its report to a file of
//! its own (`--log-file`, one per worker, in a temporary folder the worker's handle owns). Each
//! sanitized test runs in a worker of its own that ends after the test: the report is complete
//! once the sanitizer has exited, whether it wrote each record as the launch ended or only at
//! exit (see [`crate::pool`]). So every record about device code belongs to the one test the
//! worker ran, whichever function it names. Records about the host side (a failed CUDA API
//! call, a leak) name no launch: they are shown beside the test's output, and fail nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpurun_hal::select::BackendChoice;
use gpurun_hal::BackendKind;

/// The environment variable that asks for a sanitizer (`--sanitize`'s value).
pub const SANITIZE_ENV: &str = "GPURUN_SANITIZE";
/// The environment variable naming the compute-sanitizer program to use.
pub const PROGRAM_ENV: &str = "GPURUN_COMPUTE_SANITIZER";
/// The program's name on `PATH` and in a CUDA toolkit.
pub const PROGRAM: &str = "compute-sanitizer";
/// The exit status compute-sanitizer is told to give (`--error-exitcode`) when the worker ended
/// well but the tool found errors: a cross-check that its log was read.
pub const ERROR_EXIT_CODE: i32 = 86;
/// How many times longer a sanitized test may run: the tools instrument every memory access or
/// barrier, which slows kernels down by an order of magnitude or more.
pub const TIME_LIMIT_FACTOR: u32 = 10;
/// How long compute-sanitizer may take to finish its report once its worker has left.
pub const REPORT_WITHIN: Duration = Duration::from_secs(120);
/// The report file in a worker's log folder.
const LOG_FILE: &str = "compute-sanitizer.log";

/// One of compute-sanitizer's tools (`--tool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SanitizerTool {
    /// Out-of-bounds and misaligned accesses, hardware exceptions, device malloc/free errors.
    Memcheck,
    /// Shared-memory data races.
    Racecheck,
    /// Reads of uninitialized device global memory.
    Initcheck,
    /// Invalid uses of barriers (`__syncthreads`, `__syncwarp`).
    Synccheck,
}

impl SanitizerTool {
    /// Every tool, in the order the documentation lists them.
    pub const ALL: [SanitizerTool; 4] = [
        SanitizerTool::Memcheck,
        SanitizerTool::Racecheck,
        SanitizerTool::Initcheck,
        SanitizerTool::Synccheck,
    ];
    /// Their names, as `--tool` takes them.
    pub const NAMES: [&'static str; 4] = ["memcheck", "racecheck", "initcheck", "synccheck"];

    /// The name `--tool` takes.
    pub fn name(self) -> &'static str {
        match self {
            SanitizerTool::Memcheck => Self::NAMES[0],
            SanitizerTool::Racecheck => Self::NAMES[1],
            SanitizerTool::Initcheck => Self::NAMES[2],
            SanitizerTool::Synccheck => Self::NAMES[3],
        }
    }
}

impl std::fmt::Display for SanitizerTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SanitizerTool {
    type Err = SanitizerError;

    fn from_str(name: &str) -> Result<SanitizerTool, SanitizerError> {
        SanitizerTool::ALL
            .into_iter()
            .find(|tool| tool.name() == name)
            .ok_or_else(|| SanitizerError::UnknownTool(name.to_owned()))
    }
}

/// Why a sanitized run cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SanitizerError {
    #[error(
        "unknown sanitizer `{0}`: compute-sanitizer's tools are memcheck, racecheck, initcheck \
         and synccheck"
    )]
    UnknownTool(String),
    #[error(
        "compute-sanitizer not found (looked {looked}); install the CUDA toolkit's \
         compute-sanitizer, put it on PATH, set CUDA_HOME to the toolkit, or set {PROGRAM_ENV} \
         to the program"
    )]
    NotFound { looked: String },
    #[error("{PROGRAM_ENV}=`{path}` is not an executable program: {reason}")]
    NotExecutable { path: String, reason: String },
    #[error(
        "--sanitize ({SANITIZE_ENV}) runs compute-sanitizer, which checks CUDA kernels only, but \
         this run uses the {0} backend; run the nvptx images on the cuda backend (`--backend \
         cuda`, GPURUN_BACKEND=cuda)"
    )]
    NotCuda(BackendKind),
    #[error(
        "--sanitize ({SANITIZE_ENV}) runs compute-sanitizer, which checks CUDA kernels only: it \
         takes one backend, cuda, not a list or `all`"
    )]
    SeveralBackends,
}

/// The tool `GPURUN_SANITIZE` asks for (unset or empty: none). `cargo gpurun test --sanitize`
/// reads the same variable through its command line; a host crate's trials
/// (`gpurun-test`) read it here.
pub fn requested_by_env() -> Result<Option<SanitizerTool>, SanitizerError> {
    match std::env::var(SANITIZE_ENV) {
        Ok(name) if !name.is_empty() => name.parse().map(Some),
        _ => Ok(None),
    }
}

/// The backend choice in effect under a sanitizer: `auto` means CUDA (compute-sanitizer checks
/// nothing else); another single backend, a list or `all` is an error.
pub fn backend_choice(choice: &BackendChoice) -> Result<BackendChoice, SanitizerError> {
    match choice {
        BackendChoice::Auto | BackendChoice::Only(BackendKind::Cuda) => {
            Ok(BackendChoice::Only(BackendKind::Cuda))
        }
        BackendChoice::Only(kind) => Err(SanitizerError::NotCuda(*kind)),
        BackendChoice::Each(_) | BackendChoice::All => Err(SanitizerError::SeveralBackends),
    }
}

/// A tool and the compute-sanitizer program that runs it: what `--sanitize` asks for, from the
/// command line through the runner's options to each worker's command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sanitizer {
    pub tool: SanitizerTool,
    pub program: PathBuf,
}

impl Sanitizer {
    /// Finds compute-sanitizer for `tool`: `$GPURUN_COMPUTE_SANITIZER` (a path or a name on
    /// `PATH`), else `compute-sanitizer` on `PATH`, else in `$CUDA_HOME` (`bin/`, or the
    /// toolkit's `compute-sanitizer/` folder), else in `/usr/local/cuda`.
    pub fn find(tool: SanitizerTool) -> Result<Sanitizer, SanitizerError> {
        find_program(
            std::env::var_os(PROGRAM_ENV),
            std::env::var_os("PATH"),
            std::env::var_os("CUDA_HOME"),
        )
        .map(|program| Sanitizer { tool, program })
    }

    /// compute-sanitizer checks CUDA only: any other backend is an error.
    pub fn check_backend(backend: BackendKind) -> Result<(), SanitizerError> {
        match backend {
            BackendKind::Cuda => Ok(()),
            other => Err(SanitizerError::NotCuda(other)),
        }
    }

    /// The time limit of a test that the sanitizer runs, from its limit without one.
    pub fn time_limit(&self, limit: Duration) -> Duration {
        limit.saturating_mul(TIME_LIMIT_FACTOR)
    }

    /// The report file of a worker whose log folder is `folder`.
    pub fn log_file(folder: &Path) -> PathBuf {
        folder.join(LOG_FILE)
    }

    /// compute-sanitizer's options before the worker's command line (after a `--`): the tool,
    /// the report to `log` (never stdout, the protocol pipe), device backtraces (they name the
    /// kernel when the fault is in a function it called; host frames would only show the
    /// worker), the worker's process only, and [`ERROR_EXIT_CODE`].
    pub fn arguments(&self, log: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = [
            "--tool",
            self.tool.name(),
            "--show-backtrace",
            "device",
            "--target-processes",
            "application-only",
            "--error-exitcode",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        args.push(ERROR_EXIT_CODE.to_string().into());
        args.push("--log-file".into());
        args.push(log.as_os_str().to_owned());
        args.push("--".into());
        args
    }
}

/// Where [`Sanitizer::find`] looks, with the environment given.
fn find_program(
    explicit: Option<OsString>,
    path: Option<OsString>,
    cuda_home: Option<OsString>,
) -> Result<PathBuf, SanitizerError> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    if let Some(explicit) = explicit.filter(|value| !value.is_empty()) {
        return which::which_in(&explicit, path.as_ref(), &cwd).map_err(|error| {
            SanitizerError::NotExecutable {
                path: explicit.to_string_lossy().into_owned(),
                reason: error.to_string(),
            }
        });
    }
    if let Ok(found) = which::which_in(PROGRAM, path.as_ref(), &cwd) {
        return Ok(found);
    }
    let mut toolkits: Vec<PathBuf> = cuda_home.iter().map(PathBuf::from).collect();
    toolkits.push(PathBuf::from("/usr/local/cuda"));
    let folders: Vec<PathBuf> = toolkits
        .iter()
        .flat_map(|toolkit| [toolkit.join("bin"), toolkit.join(PROGRAM)])
        .collect();
    if let Ok(joined) = std::env::join_paths(&folders) {
        if let Ok(found) = which::which_in(PROGRAM, Some(joined), &cwd) {
            return Ok(found);
        }
    }
    let mut looked = vec!["on PATH".to_owned()];
    looked.extend(
        folders
            .iter()
            .map(|folder| format!("in {}", folder.display())),
    );
    Err(SanitizerError::NotFound {
        looked: looked.join(", "),
    })
}

/// One record of compute-sanitizer's report: an error with its detail lines (where, which
/// thread, which address, backtraces), or a line of its own (an API error, a summary).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record's lines as the tool wrote them, prefix included.
    pub lines: Vec<String>,
    /// Whether the record is about device code: it names a device thread or block, a device
    /// frame, or the accesses of a race.
    pub on_device: bool,
}

impl Record {
    /// The tool's banner and its summary lines: no news beside the records they count.
    fn is_summary(&self) -> bool {
        let first = self
            .lines
            .first()
            .map(|line| text_of(line).trim())
            .unwrap_or("");
        first == "COMPUTE-SANITIZER" || first.contains("SUMMARY:")
    }

    /// The record as the tool wrote it.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// Whether `report` has a record beside the tool's banner and summaries.
pub fn has_records(report: &str) -> bool {
    parse_report(report)
        .iter()
        .any(|record| !record.is_summary())
}

/// A line's text without the tool's prefix (a run of `=`).
fn text_of(line: &str) -> &str {
    line.trim_start_matches('=')
}

/// Splits compute-sanitizer's report into records. Every line starts with the tool's prefix; a
/// record starts with an unindented line and ends at an empty one (or the next record).
pub fn parse_report(log: &str) -> Vec<Record> {
    let mut records = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    let mut finish = |lines: &mut Vec<String>| {
        if !lines.is_empty() {
            records.push(Record {
                on_device: about_device(lines),
                lines: std::mem::take(lines),
            });
        }
    };
    for line in log.lines() {
        let line = line.trim_end();
        let text = text_of(line);
        if text.trim().is_empty() {
            finish(&mut lines);
            continue;
        }
        let indented = text.starts_with("  ") || !line.starts_with('=');
        // The racecheck documentation also shows a race's other accesses, a hazard's threads
        // and values unindented.
        let continues = indented
            || ["and ", "Read Thread", "Write Thread", "Current Value"]
                .iter()
                .any(|start| text.trim_start().starts_with(start));
        if !continues {
            finish(&mut lines);
        }
        lines.push(line.to_owned());
    }
    finish(&mut lines);
    records
}

/// Whether a record's lines are about device code: a device thread or block (every memcheck,
/// initcheck and synccheck error, a racecheck hazard), a device frame, or a race's accesses
/// (racecheck's analysis). Host frames do not count.
fn about_device(lines: &[String]) -> bool {
    lines
        .iter()
        .map(|line| text_of(line).to_ascii_lowercase())
        .filter(|text| !text.contains("host frame:"))
        .any(|text| {
            ["thread (", "block (", "device frame:", " access at"]
                .iter()
                .any(|mark| text.contains(mark))
        })
}

/// What a sanitized worker's report says about the one test it ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    /// The device records that belong to the test: each fails it.
    pub findings: Vec<Record>,
    /// Everything else worth showing (host-side records): they fail nothing.
    pub notes: Vec<Record>,
}

/// Sorts `records` for the only test their worker ran: each record about device code is its.
pub fn attribute(records: Vec<Record>) -> Attribution {
    let mut attribution = Attribution::default();
    for record in records {
        if record.is_summary() {
            continue;
        }
        if record.on_device {
            attribution.findings.push(record);
        } else {
            attribution.notes.push(record);
        }
    }
    attribution
}

impl Attribution {
    /// The failure note for the test, if it has findings: which tool found how many errors,
    /// then the records as the tool wrote them.
    pub fn failure(&self, tool: SanitizerTool, kernel: &str) -> Option<String> {
        if self.findings.is_empty() {
            return None;
        }
        let count = self.findings.len();
        let mut text = format!(
            "compute-sanitizer {tool} found {count} error{} in this test's launch of `{kernel}`:",
            if count == 1 { "" } else { "s" }
        );
        for record in &self.findings {
            text.push('\n');
            text.push_str(&record.text());
        }
        Some(text)
    }

    /// What to add to the test's output about the other records, if there are any.
    pub fn notes_text(&self) -> Option<String> {
        if self.notes.is_empty() {
            return None;
        }
        let mut text =
            String::from("note: compute-sanitizer also reported (about the host, not counted):\n");
        for record in &self.notes {
            text.push_str(&record.text());
            text.push('\n');
        }
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The sample reports follow the record layout in NVIDIA's compute-sanitizer documentation
    // ("Understanding Memcheck Errors", the racecheck, initcheck and synccheck reports), written
    // here for kernels of our own.

    const KERNEL: &str = "__gpurun_test_writes_past_the_end_0123456789abcdef";

    fn memcheck_report() -> String {
        format!(
            "========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at {KERNEL}+0x1d0 in lib.rs:21
=========     by thread (3,0,0) in block (0,0,0)
=========     Access at 0x7f3a20000010 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a20000000 of size 16 bytes
=========     Device Frame: {KERNEL}+0x1d0 in lib.rs:21
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to \"unspecified launch failure\" on CUDA API call to cuStreamQuery.
=========
========= ERROR SUMMARY: 2 errors
"
        )
    }

    #[test]
    fn a_sanitized_run_is_on_cuda_or_refused() {
        let cuda = BackendChoice::Only(BackendKind::Cuda);
        assert_eq!(backend_choice(&BackendChoice::Auto), Ok(cuda.clone()));
        assert_eq!(backend_choice(&cuda), Ok(cuda));
        assert_eq!(
            backend_choice(&BackendChoice::Only(BackendKind::Host)),
            Err(SanitizerError::NotCuda(BackendKind::Host))
        );
        for several in [
            BackendChoice::All,
            BackendChoice::Each(vec![BackendKind::Host, BackendKind::Cuda]),
        ] {
            assert_eq!(
                backend_choice(&several),
                Err(SanitizerError::SeveralBackends)
            );
        }
    }

    #[test]
    fn a_memcheck_write_is_one_device_record_and_an_api_error_a_host_one() {
        let records = parse_report(&memcheck_report());
        assert_eq!(records.len(), 4, "{records:#?}");
        assert!(records[0].is_summary());
        let write = &records[1];
        assert!(write.lines[0].ends_with("Invalid __global__ write of size 4 bytes"));
        assert_eq!(write.lines.len(), 6);
        assert!(write.on_device);
        let api = &records[2];
        assert!(!api.on_device, "{api:?}");
        assert!(records[3].is_summary());
    }

    #[test]
    fn findings_fail_the_test_and_host_records_are_notes() {
        let attribution = attribute(parse_report(&memcheck_report()));
        assert_eq!(attribution.findings.len(), 1);
        assert_eq!(attribution.notes.len(), 1);
        let failure = attribution
            .failure(SanitizerTool::Memcheck, KERNEL)
            .unwrap();
        assert!(failure.starts_with("compute-sanitizer memcheck found 1 error in this test's"));
        for detail in [
            "Invalid __global__ write of size 4 bytes",
            "by thread (3,0,0) in block (0,0,0)",
            "Access at 0x7f3a20000010 is out of bounds",
            "in lib.rs:21",
        ] {
            assert!(failure.contains(detail), "{detail}: {failure}");
        }
        assert!(attribution
            .notes_text()
            .unwrap()
            .contains("Program hit CUDA_ERROR_LAUNCH_FAILED"));
    }

    #[test]
    fn device_records_are_found_by_thread_block_frame_or_access_in_any_layout() {
        for device in [
            // A fault in a called function, without a backtrace.
            "Invalid __local__ read of size 8 bytes\n=========     at helper+0x30\n=========     by thread (0,0,0) in block (0,0,0)",
            // An older layout, and one this parser has never seen.
            "Invalid __global__ read of size 4\n=========     at 0x00000230 in kernels.cu:57:saxpy(int, float*)\n=========     by thread (1,0,0) in block (0,0,0)",
            "Some future error in a kernel\n=========     somewhere new\n=========     Device Frame: k+0x10",
            // racecheck's analysis names only the accesses.
            "Error: Race reported between Write access at k+0xf0 in lib.rs:40\n=========     and Read access at k+0x280 in lib.rs:46 [4 hazards]",
        ] {
            let records = parse_report(&format!("========= {device}\n========="));
            assert_eq!(records.len(), 1, "{records:#?}");
            assert!(records[0].on_device, "{device}");
            assert_eq!(attribute(records).findings.len(), 1);
        }
        for host in [
            "Program hit cudaErrorInvalidValue (error 1) due to \"invalid argument\" on CUDA API call to cudaMemcpy.\n=========     Saved host backtrace up to driver entry point at error\n=========         Host Frame: main in demo.cu:25 [0x8a81] in demo",
            "Leaked 16 bytes at 0x7f3a20000000\n=========     Saved host backtrace up to driver entry point at cudaMalloc time\n=========         Host Frame: cudaMalloc [0x3c6e] in libcudart",
        ] {
            let records = parse_report(&format!("========= {host}\n========="));
            assert!(!records[0].on_device, "{host}");
            assert_eq!(attribute(records).notes.len(), 1);
        }
    }

    #[test]
    fn racecheck_records_keep_their_lines_together() {
        let analysis = format!(
            "========= Error: Race reported between Write access at {KERNEL}+0xf0 in lib.rs:40
=========     and Read access at {KERNEL}+0x280 in lib.rs:46 [4 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"
        );
        let records = parse_report(&analysis);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].lines.len(), 2);
        let attribution = attribute(records);
        assert_eq!(
            (attribution.findings.len(), attribution.notes.len()),
            (1, 0)
        );
        // The wrapped layout: each access's location on a line of its own.
        let wrapped = format!(
            "========= Error: Race reported between Write access at
=========     {KERNEL}+0xb0 in lib.rs:28
=========     and Read access at
=========     {KERNEL}+0xc0 in lib.rs:30
=========     [1024 hazards]
========="
        );
        let records = parse_report(&wrapped);
        assert_eq!(records.len(), 1);
        assert!(records[0].on_device);
        // A hazard record, the second access unindented as in the documentation.
        let hazard = format!(
            "========= ERROR: Potential WAW hazard detected at __shared__ 0x0 in block (0,0,0) :
========= Write Thread (0,0,0) at {KERNEL}+0x2f0 in lib.rs:20
========= Write Thread (1,0,0) at {KERNEL}+0x2f0 in lib.rs:20
========= Current Value : 1, Incoming Value : 2"
        );
        let records = parse_report(&hazard);
        assert_eq!(records.len(), 1, "{records:#?}");
        assert_eq!(records[0].lines.len(), 4);
        assert!(records[0].on_device);
    }

    #[test]
    fn initcheck_and_synccheck_records() {
        let report = format!(
            "========= Uninitialized __global__ memory read of size 4 bytes
=========     at {KERNEL}+0x70 in lib.rs:8
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f6510c00000
=========
========= Barrier error detected. Divergent thread(s) in warp
=========     at {KERNEL}+0xf0 in lib.rs:79
=========     by thread (37,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 2 errors"
        );
        let attribution = attribute(parse_report(&report));
        assert_eq!(attribution.findings.len(), 2);
        let failure = attribution
            .failure(SanitizerTool::Synccheck, KERNEL)
            .unwrap();
        assert!(failure.contains("found 2 errors"));
        assert!(failure.contains("Uninitialized __global__ memory read"));
        assert!(failure.contains("Barrier error detected. Divergent thread(s) in warp"));
    }

    #[test]
    fn a_clean_report_has_no_findings() {
        let clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n";
        assert!(!has_records(clean));
        assert!(has_records(&memcheck_report()));
        let attribution = attribute(parse_report(clean));
        assert_eq!(attribution, Attribution::default());
        assert_eq!(attribution.notes_text(), None);
        assert!(parse_report("").is_empty());
    }

    #[test]
    fn tools_parse_by_name() {
        for tool in SanitizerTool::ALL {
            assert_eq!(tool.name().parse::<SanitizerTool>(), Ok(tool));
        }
        let error = "asan".parse::<SanitizerTool>().unwrap_err();
        assert!(error.to_string().contains("memcheck, racecheck"), "{error}");
    }

    #[test]
    fn only_cuda_is_sanitized() {
        assert!(Sanitizer::check_backend(BackendKind::Cuda).is_ok());
        let error = Sanitizer::check_backend(BackendKind::Host).unwrap_err();
        assert!(error.to_string().contains("host backend"), "{error}");
    }

    #[test]
    fn the_report_goes_to_a_file_and_errors_give_the_agreed_status() {
        let sanitizer = Sanitizer {
            tool: SanitizerTool::Racecheck,
            program: "compute-sanitizer".into(),
        };
        let args = sanitizer.arguments(Path::new("/tmp/w/compute-sanitizer.log"));
        let args: Vec<&str> = args.iter().filter_map(|arg| arg.to_str()).collect();
        let value = |flag: &str| {
            let at = args.iter().position(|arg| *arg == flag).unwrap();
            args[at + 1]
        };
        assert_eq!(value("--tool"), "racecheck");
        assert_eq!(value("--log-file"), "/tmp/w/compute-sanitizer.log");
        assert_eq!(value("--error-exitcode"), "86");
        assert_eq!(args.last(), Some(&"--"));
        assert_eq!(
            sanitizer.time_limit(Duration::from_secs(30)),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn the_program_is_found_where_the_user_said_else_on_path_else_in_the_toolkit() {
        let root =
            std::env::temp_dir().join(format!("gpurun-sanitizer-find-{}", std::process::id()));
        let on_path = root.join("path");
        let toolkit = root.join("toolkit");
        let chosen = root.join("chosen-sanitizer");
        for folder in [&on_path, &toolkit.join("bin")] {
            std::fs::create_dir_all(folder).unwrap();
        }
        let executable = |path: &Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        executable(&chosen);
        executable(&toolkit.join("bin").join(PROGRAM));
        let empty = Some(OsString::from(&on_path));
        let toolkit_home = Some(toolkit.clone().into_os_string());
        assert_eq!(
            find_program(Some(chosen.clone().into()), empty.clone(), None),
            Ok(chosen.clone())
        );
        assert_eq!(
            find_program(None, empty.clone(), toolkit_home.clone()),
            Ok(toolkit.join("bin").join(PROGRAM))
        );
        executable(&on_path.join(PROGRAM));
        assert_eq!(
            find_program(None, empty.clone(), toolkit_home),
            Ok(on_path.join(PROGRAM))
        );
        std::fs::remove_file(on_path.join(PROGRAM)).unwrap();
        let missing = find_program(None, empty.clone(), Some(root.join("none").into()));
        if !Path::new("/usr/local/cuda/bin").join(PROGRAM).exists() {
            let error = missing.unwrap_err().to_string();
            assert!(
                error.contains("not found") && error.contains("none/bin"),
                "{error}"
            );
        }
        let error = find_program(Some(root.join("absent").into()), empty, None).unwrap_err();
        assert!(error.to_string().contains(PROGRAM_ENV), "{error}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
