//! `cargo gpurun __worker`: the process that owns one device (see `gpurun_backend::worker`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use gpurun_backend::{BackendKind, LoadOptions};

/// Arguments of the hidden worker subcommand; the parent builds them with [`worker_args`].
#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[arg(long, value_parser = parse_kind)]
    pub backend: BackendKind,
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    #[arg(long, default_value_t = 32)]
    pub lane_size: u32,
    #[arg(long, default_value_t = 1024)]
    pub rpc_ports: u32,
    #[arg(long)]
    pub stack_size: Option<usize>,
    /// Tests to run at once, each in its own slot (set by the parent through the environment).
    #[arg(long, env = gpurun_backend::worker::child::SLOTS_ENV, default_value_t = 1)]
    pub slots: usize,
    /// Let device code run host commands through `system()` (`cargo gpurun run --allow-system`).
    #[arg(long)]
    pub allow_system: bool,
    /// The file device code reads as stdin (`cargo gpurun run` passes its own stdin); none:
    /// empty. The worker's own stdin carries its commands.
    #[arg(long, value_name = "PATH")]
    pub stdin: Option<PathBuf>,
    pub image: PathBuf,
}

fn parse_kind(text: &str) -> Result<BackendKind, String> {
    match text {
        "cuda" => Ok(BackendKind::Cuda),
        "hsa" => Ok(BackendKind::Hsa),
        "host" => Ok(BackendKind::Host),
        other => Err(format!("unknown backend `{other}`")),
    }
}

/// Options every command that starts workers shares.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    pub backend: BackendKind,
    pub device: usize,
    pub lane_size: u32,
    pub stack_size: Option<usize>,
}

/// The spec that starts a worker for `image`: this very executable, hidden subcommand.
pub fn worker_spec(
    options: &WorkerOptions,
    image: &std::path::Path,
) -> anyhow::Result<gpurun_backend::worker::WorkerSpec> {
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find the cargo-gpurun executable: {e}"))?;
    let mut args = vec![
        "gpurun".to_string(),
        "__worker".into(),
        "--backend".into(),
        options.backend.name().into(),
        "--device".into(),
        options.device.to_string(),
        "--lane-size".into(),
        options.lane_size.to_string(),
    ];
    if let Some(stack) = options.stack_size {
        args.push("--stack-size".into());
        args.push(stack.to_string());
    }
    args.push("--".into());
    Ok(gpurun_backend::worker::WorkerSpec {
        exe,
        args,
        image: image.to_path_buf(),
        slots: 1,
    })
}

pub fn run(args: &WorkerArgs) -> anyhow::Result<ExitCode> {
    let config = gpurun_backend::server::ServerConfig {
        allow_system: args.allow_system,
        stdin: args.stdin.clone(),
    };
    // The first and only setting in this process: the worker starts no server before.
    let _ = gpurun_backend::server::set_process_config(config);
    let options = LoadOptions {
        rpc_ports: args.rpc_ports,
        stack_size: args.stack_size,
        emulated_lane_size: args.lane_size,
    };
    let status = gpurun_backend::worker::child::serve(
        args.backend,
        args.device,
        &args.image,
        &options,
        args.slots,
    );
    Ok(ExitCode::from(u8::try_from(status).unwrap_or(1)))
}
