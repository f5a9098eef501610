//! `cargo gpurun __nvptx-link`: the nvptx linker rustc runs (see [`crate::build::nvptx_link`]).

use std::ffi::OsString;
use std::process::ExitCode;

use crate::build::nvptx_link::{link, LinkArgs};

/// Links with rustc's arguments. Errors (with the failing tool's whole stderr) go to stderr, where
/// rustc shows them.
pub fn run(args: &[OsString]) -> anyhow::Result<ExitCode> {
    let args = LinkArgs::parse(args)?;
    link(&args)?;
    Ok(ExitCode::SUCCESS)
}
