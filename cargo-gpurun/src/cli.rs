//! The command line: `cargo gpurun <subcommand>`, shaped as a cargo subcommand (`bin_name =
//! "cargo"`, one `gpurun` variant). Add a subcommand by adding a [`Command`] variant and a file
//! under `cmd/`, then one arm in [`crate::cmd::dispatch`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use gpurun_build::BuildOptions;

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
    /// Build device crates in release mode and time their `#[gpurun::bench]` benchmarks on the
    /// device, with libtest's bench output and baselines to compare with.
    Bench(crate::cmd::bench::BenchArgs),
    /// Load a GPU image and run its `_start` (llvm-gpu-loader compatible); also target.runner.
    Run(crate::cmd::run::RunArgs),
    /// List devices of every backend, or why there are none.
    Info(crate::cmd::info::InfoArgs),
    /// Check (and with --fix, install) the toolchain parts device builds and runs need.
    Doctor(DoctorArgs),
    /// A worker process that owns one device (internal).
    #[command(name = "__worker", hide = true)]
    Worker(crate::cmd::worker::WorkerArgs),
}

/// `cargo gpurun build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    #[command(flatten)]
    pub cargo: CargoArgs,
    /// Output format for the built images.
    #[arg(long, value_enum, default_value_t = MessageFormat::Human, value_name = "FMT")]
    pub message_format: MessageFormat,
}

/// How `cargo gpurun build` reports what it built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MessageFormat {
    /// One line per image.
    #[default]
    Human,
    /// One JSON object per image on stdout (`"reason": "gpurun-image"`).
    Json,
}

/// cargo's package, feature, profile and target options, which `build`, `test` and `run`
/// share: what [`gpurun_build::BuildOptions`] holds, as a command line.
#[derive(Debug, Clone, Args)]
pub struct CargoArgs {
    /// Path to Cargo.toml of the device crate or workspace.
    #[arg(long, value_name = "PATH")]
    pub manifest_path: Option<PathBuf>,
    /// Device crate(s) to build (default, as cargo: the package of the manifest in use, or at
    /// a virtual root the device crates of `default-members`, else of every member).
    #[arg(short = 'p', long = "package", value_name = "SPEC")]
    pub packages: Vec<String>,
    /// Build every device crate of the workspace.
    #[arg(long)]
    pub workspace: bool,
    /// Build with the release profile.
    #[arg(short = 'r', long)]
    pub release: bool,
    /// Features to activate (comma or space separated, repeatable).
    #[arg(short = 'F', long, value_name = "FEATURES")]
    pub features: Vec<String>,
    /// Activate all features.
    #[arg(long)]
    pub all_features: bool,
    /// Do not activate the `default` feature.
    #[arg(long)]
    pub no_default_features: bool,
    /// Target: nvptx64-nvidia-cuda (nvptx), amdgcn-amd-amdhsa (amdgcn) or host; repeatable
    /// [default: nvptx].
    #[arg(long = "target", value_name = "TARGET")]
    pub targets: Vec<String>,
    /// GPU architecture: sm_NN for nvptx, gfxNNN for amdgcn (repeatable, one per target family);
    /// default: `[package.metadata.gpurun]` `nvptx-arch`/`amdgcn-arch`/`arch`, else sm_70 for nvptx.
    #[arg(long, value_name = "ARCH")]
    pub arch: Vec<String>,
    /// Do not print cargo's progress.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// The host emulation's memory checks (out-of-bounds accesses, reads of unwritten shared
    /// memory): `on` builds the host images for them (nightly) and runs them; `off` builds plain
    /// images. Barriers, warp operations and poisoned shared memory are checked either way.
    #[arg(long, value_name = "on|off", default_value = "on", action = clap::ArgAction::Set, env = gpurun_build::emulation::EMULATION_CHECKS_ENV, value_parser = gpurun_build::emulation::parse_emulation_checks)]
    pub emulation_checks: bool,
}

impl CargoArgs {
    /// The build these options ask for; the linker is this executable (see
    /// [`crate::main_impl`]).
    pub fn build_options(&self) -> BuildOptions {
        let CargoArgs {
            manifest_path,
            packages,
            workspace,
            release,
            features,
            all_features,
            no_default_features,
            targets,
            arch,
            quiet,
            emulation_checks,
        } = self.clone();
        BuildOptions {
            manifest_path,
            packages,
            workspace,
            release,
            features,
            all_features,
            no_default_features,
            targets,
            arch,
            quiet,
            nvptx_linker: None,
            coverage: false,
            emulation_checks,
            gpu_arch: Some(gpurun_runner::placement::gpu_arch),
        }
    }
}

/// `cargo gpurun doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Install what is missing with rustup (the nightly toolchain, rust-src, llvm-tools).
    #[arg(long)]
    pub fix: bool,
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
        let options = args.cargo.build_options();
        assert_eq!(options.packages, vec!["hello"]);
        assert_eq!(options.targets, vec!["amdgcn"]);
        assert_eq!(options.arch, vec!["gfx90a"]);
        assert!(options.release);
        assert_eq!(options.features, vec!["a,b"]);
        assert_eq!(args.message_format, MessageFormat::Json);
        assert!(options.emulation_checks);
    }

    #[test]
    fn emulation_checks_take_on_or_off() {
        let checks = |value: &str| {
            let parsed =
                Cargo::try_parse_from(["cargo", "gpurun", "build", "--emulation-checks", value]);
            parsed.map(|Cargo::Gpurun(app)| match app.command {
                Command::Build(args) => args.cargo.build_options().emulation_checks,
                _ => panic!("not build"),
            })
        };
        assert!(!checks("off").unwrap());
        assert!(checks("on").unwrap());
        assert!(checks("sometimes").is_err());
    }
}
