//! `cargo gpurun __worker`: the process that owns one device (see `gpurun_runner::worker`). Its
//! command line belongs to the runner, which writes and reads it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use gpurun_runner::{Sanitizer, WorkerOptions, WorkerSpec};

/// Arguments of the hidden worker subcommand, passed through to the runner.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}

/// The arguments before a worker's own: the hidden subcommand.
pub const WORKER_PREFIX: &[&str] = &["gpurun", "__worker"];

/// The executable workers run: this very one.
pub fn worker_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find the cargo-gpurun executable: {e}"))
}

/// The spec that starts a worker for `image`: this very executable, hidden subcommand, under
/// `sanitizer` when given.
pub fn worker_spec(
    options: &WorkerOptions,
    image: &Path,
    sanitizer: Option<Sanitizer>,
) -> anyhow::Result<WorkerSpec> {
    Ok(WorkerSpec {
        sanitizer,
        ..options.spec(worker_exe()?, WORKER_PREFIX, image)
    })
}

pub fn run(args: &WorkerArgs) -> anyhow::Result<ExitCode> {
    let status = gpurun_runner::worker::main(&args.args);
    Ok(ExitCode::from(u8::try_from(status).unwrap_or(1)))
}
