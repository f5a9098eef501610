//! `cargo gpurun doctor`: a table of the toolchain parts device builds need and the GPU drivers
//! runs use; with `--fix`, installs the missing rustup parts. Exits non-zero when something a
//! build needs is still missing.

use std::process::{Command, ExitCode};

use anyhow::Context as _;

use crate::cli::DoctorArgs;
use gpurun_build::toolchain::{Check, Toolchain};

/// Prints the table (fixing first when asked).
pub fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    if args.fix {
        fix()?;
    }
    let mut checks = Toolchain::checks();
    checks.extend(driver_checks());
    print!("{}", render(&checks));
    let missing: Vec<&str> = checks
        .iter()
        .filter(|check| check.required && check.outcome.is_err())
        .map(|check| check.component)
        .collect();
    if missing.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: missing for device builds: {}; run `cargo gpurun doctor --fix`",
            missing.join(", ")
        );
        Ok(ExitCode::FAILURE)
    }
}

/// The GPU drivers' rows: whether each loads (optional: the host emulation needs neither).
fn driver_checks() -> [Check; 2] {
    [
        Check {
            component: "libcuda.so",
            outcome: probe_library(&["libcuda.so.1", "libcuda.so"])
                .map_err(|err| format!("{err} (optional: running on NVIDIA GPUs)")),
            required: false,
        },
        Check {
            component: "libhsa-runtime64.so.1",
            outcome: probe_library(&["libhsa-runtime64.so.1", "libhsa-runtime64.so"])
                .map(|loads| {
                    if gpurun_hal::hsa::amd_kernel_driver_present() {
                        loads
                    } else {
                        // The runtime alone runs nothing: say so beside "loads".
                        format!(
                            "{loads}; no AMD GPU: {} does not exist",
                            gpurun_hal::hsa::AMD_KERNEL_DRIVER_DEVICE
                        )
                    }
                })
                .map_err(|err| format!("{err} (optional: running on AMD GPUs)")),
            required: false,
        },
    ]
}

/// Tries to `dlopen` each name; returns the first that loads.
fn probe_library(names: &[&str]) -> Result<String, String> {
    let mut last_error = String::from("not found");
    for name in names {
        // SAFETY: loading a GPU driver library runs its initialisers; both libraries probed here
        // (the CUDA driver and the HSA runtime) are designed to be loaded at run time by
        // applications, and we call nothing from them: the handle is dropped right away.
        match unsafe { libloading::Library::new(name) } {
            Ok(_library) => return Ok(format!("{name} loads")),
            Err(err) => last_error = format!("cannot load {name}: {err}"),
        }
    }
    Err(last_error)
}

/// Installs the nightly toolchain with its components, or just the missing components.
fn fix() -> anyhow::Result<()> {
    match Toolchain::probe() {
        Ok(toolchain) => {
            let missing = toolchain.missing_components();
            if missing.is_empty() {
                eprintln!("  Nothing to install: rust-src and llvm-tools are present");
                Ok(())
            } else {
                Ok(toolchain.install_components(&missing)?)
            }
        }
        Err(_) => {
            let name = Toolchain::name_from_env();
            eprintln!("  Installing the `{name}` toolchain with rust-src and llvm-tools");
            let status = Command::new("rustup")
                .args(["toolchain", "install", &name, "--profile", "minimal"])
                .args(["--component", "rust-src,llvm-tools"])
                .status()
                .context("cannot run `rustup`")?;
            anyhow::ensure!(
                status.success(),
                "`rustup toolchain install {name}` failed ({status})"
            );
            Ok(())
        }
    }
}

/// The table: component, status, details.
pub fn render(checks: &[Check]) -> String {
    let width = checks
        .iter()
        .map(|check| check.component.len())
        .max()
        .unwrap_or(0)
        .max("component".len());
    let mut table = format!("{:<width$}  {:<8}  details\n", "component", "status");
    for check in checks {
        let (status, details) = match &check.outcome {
            Ok(details) => ("ok", details.as_str()),
            Err(details) if check.required => ("MISSING", details.as_str()),
            Err(details) => ("absent", details.as_str()),
        };
        table.push_str(&format!(
            "{:<width$}  {status:<8}  {details}\n",
            check.component
        ));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_marks_required_and_optional_absences() {
        let table = render(&[
            Check {
                component: "llc",
                outcome: Ok("/x/llc".to_owned()),
                required: true,
            },
            Check {
                component: "rust-src",
                outcome: Err("not installed".to_owned()),
                required: true,
            },
            Check {
                component: "ptxas",
                outcome: Err("not found".to_owned()),
                required: false,
            },
        ]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(
            lines[1].starts_with("llc ") && lines[1].contains("ok") && lines[1].ends_with("/x/llc")
        );
        assert!(lines[2].contains("MISSING") && lines[2].ends_with("not installed"));
        assert!(lines[3].contains("absent"));
    }
}
