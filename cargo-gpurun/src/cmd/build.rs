//! `cargo gpurun build`: builds the device crates and prints one line (or one JSON object) per
//! image on stdout.

use std::path::Path;
use std::process::ExitCode;

use crate::build::{build, BuiltImage, MessageFormat};
use crate::cli::BuildArgs;

/// Builds and reports.
pub fn run(args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let images = build(&args.options)?;
    let cwd = std::env::current_dir().unwrap_or_default();
    for image in &images {
        match args.options.message_format {
            MessageFormat::Human => println!("{}", human_line(image, &cwd)),
            MessageFormat::Json => println!("{}", json_line(image)?),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `       Built nvptx sm_70 fixtures/target/.../hello.ptx (+cubin)`
pub fn human_line(image: &BuiltImage, cwd: &Path) -> String {
    let path = image.path.strip_prefix(cwd).unwrap_or(&image.path);
    let mut line = format!("{:>12} {}", "Built", image.target);
    if let Some(arch) = &image.arch {
        line.push(' ');
        line.push_str(arch);
    }
    line.push(' ');
    line.push_str(&path.display().to_string());
    if image.cubin.is_some() {
        line.push_str(" (+cubin)");
    }
    line
}

/// `{"reason":"gpurun-image", ...every BuiltImage field}`
pub fn json_line(image: &BuiltImage) -> anyhow::Result<String> {
    let mut value = serde_json::to_value(image)?;
    if let Some(object) = value.as_object_mut() {
        object.insert("reason".to_owned(), "gpurun-image".into());
    }
    Ok(value.to_string())
}
