//! The command line: `cargo gpurun <subcommand>`, shaped as a cargo subcommand (`bin_name =
//! "cargo"`, one `gpurun` variant). Add a subcommand by adding a [`Command`] variant and a file
//! under `cmd/`, then one arm in [`crate::cmd::dispatch`].

use std::ffi::OsString;

use clap::{Args, Parser, Subcommand};

use crate::build::BuildOptions;

/// `cargo`, as far as this binary is concerned.
#[derive(Debug, Parser)]
#[command(bin_name = "cargo", styles = clap::builder::Styles::plain())]
pub enum Cargo {
    /// Build, load and run GPU device crates.
    #[command(version, about, long_about = None)]
    Gpurun(App),
}

/// `cargo gpurun`'s options.
#[derive(Debug, Args)]
pub struct App {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build device crates for nvptx, amdgcn or the host and print where each image landed.
    Build(BuildArgs),
    /// Build device crates and run their `#[gpurun::test]` tests, with libtest's output.
    Test(crate::cmd::test::TestArgs),
    /// Load a GPU image and run its `_start` (llvm-gpu-loader compatible); also target.runner.
    Run(crate::cmd::run::RunArgs),
    /// List devices of every backend, or why there are none.
    Info(crate::cmd::info::InfoArgs),
    /// Check (and with --fix, install) the toolchain parts device builds and runs need.
    Doctor(DoctorArgs),
    /// A worker process that owns one device (internal).
    #[command(name = "__worker", hide = true)]
    Worker(crate::cmd::worker::WorkerArgs),
    /// The nvptx linker rustc calls (internal; normally reached through the linker link).
    #[command(name = "__nvptx-link", hide = true)]
    NvptxLink(NvptxLinkArgs),
}

/// `cargo gpurun build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub options: BuildOptions,
}

/// `cargo gpurun doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Install what is missing with rustup (the nightly toolchain, rust-src, llvm-tools).
    #[arg(long)]
    pub fix: bool,
}

/// `cargo gpurun __nvptx-link`: rustc's linker arguments, passed through untouched.
#[derive(Debug, Args)]
pub struct NvptxLinkArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cargo::command().debug_assert();
    }

    #[test]
    fn build_options_parse() {
        let Cargo::Gpurun(app) = Cargo::try_parse_from([
            "cargo",
            "gpurun",
            "build",
            "-p",
            "hello",
            "--target",
            "amdgcn",
            "--arch",
            "gfx90a",
            "--release",
            "--features",
            "a,b",
            "--message-format",
            "json",
        ])
        .unwrap();
        let Command::Build(args) = app.command else {
            panic!("not build");
        };
        assert_eq!(args.options.packages, vec!["hello"]);
        assert_eq!(args.options.targets, vec!["amdgcn"]);
        assert_eq!(args.options.arch, vec!["gfx90a"]);
        assert!(args.options.release);
        assert_eq!(
            args.options.message_format,
            crate::build::MessageFormat::Json
        );
    }

    #[test]
    fn linker_subcommand_takes_rustc_arguments_verbatim() {
        let Cargo::Gpurun(app) = Cargo::try_parse_from([
            "cargo",
            "gpurun",
            "__nvptx-link",
            "--export-symbol",
            "_start",
            "a.o",
            "-o",
            "x.ptx",
            "-O3",
        ])
        .unwrap();
        let Command::NvptxLink(args) = app.command else {
            panic!("not the linker");
        };
        assert_eq!(args.args.len(), 6);
        assert_eq!(args.args[0], "--export-symbol");
    }
}
