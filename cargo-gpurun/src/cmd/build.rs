//! `cargo gpurun build`: builds the device crates and prints one line (or one JSON object) per
//! image on stdout.

use std::path::Path;
use std::process::ExitCode;

use gpurun_build::{build, BuiltImage};

use crate::cli::{BuildArgs, MessageFormat};

/// Builds and reports.
pub fn run(args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let images = build(&args.cargo.build_options())?;
    let cwd = std::env::current_dir().unwrap_or_default();
    for image in &images {
        match args.message_format {
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

#[cfg(test)]
mod tests {
    use super::*;
    use gpurun_build::{Platform, TargetKind};
    use std::path::PathBuf;

    fn image(cubin: bool) -> BuiltImage {
        BuiltImage {
            package: "hello".to_owned(),
            name: "hello".to_owned(),
            target: Platform::Nvptx,
            arch: Some("sm_70".to_owned()),
            path: PathBuf::from("/repo/fixtures/target/nvptx64-nvidia-cuda/debug/hello.ptx"),
            cubin: cubin.then(|| {
                PathBuf::from("/repo/fixtures/target/nvptx64-nvidia-cuda/debug/hello.cubin")
            }),
            kind: TargetKind::Lib,
            source: PathBuf::from("src/lib.rs"),
            package_root: PathBuf::from("/repo/fixtures/hello"),
            kernels: vec!["_start".to_owned()],
            gpurun_metadata: None,
        }
    }

    #[test]
    fn human_line_is_relative_to_the_working_directory() {
        assert_eq!(
            human_line(&image(true), Path::new("/repo")),
            "       Built nvptx sm_70 fixtures/target/nvptx64-nvidia-cuda/debug/hello.ptx (+cubin)"
        );
        assert_eq!(
            human_line(&image(false), Path::new("/elsewhere")),
            "       Built nvptx sm_70 /repo/fixtures/target/nvptx64-nvidia-cuda/debug/hello.ptx"
        );
    }

    #[test]
    fn json_line_has_every_field() {
        let value: serde_json::Value =
            serde_json::from_str(&json_line(&image(false)).unwrap()).unwrap();
        assert_eq!(value["reason"], "gpurun-image");
        assert_eq!(value["target"], "nvptx");
        assert_eq!(value["kind"], "lib");
        assert_eq!(value["cubin"], serde_json::Value::Null);
        assert_eq!(value["kernels"], serde_json::json!(["_start"]));
        assert_eq!(value["package"], "hello");
        assert_eq!(value["source"], "src/lib.rs");
    }
}
