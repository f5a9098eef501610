//! One module per subcommand; [`dispatch`] maps the parsed command line to them.

pub mod bench;
pub mod build;
pub mod device;
pub mod doctor;
pub mod info;
pub mod run;
pub mod test;
pub mod worker;

use std::process::ExitCode;

use crate::cli::{App, Command};

/// Runs the subcommand `app` names.
pub fn dispatch(app: App) -> anyhow::Result<ExitCode> {
    match app.command {
        Command::Build(args) => build::run(&args),
        Command::Test(args) => test::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Info(args) => info::run(&args),
        Command::Worker(args) => worker::run(&args),
        Command::Doctor(args) => doctor::run(&args),
    }
}
