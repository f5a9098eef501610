//! Prints what `gpurun-image` reads from each image given on the command line:
//! `cargo run -p gpurun-image --example inspect_image -- IMAGE...`

use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use gpurun_image::{GlobalInit, Image, ShouldPanic};

/// `writeln!` into a `String`, which cannot fail.
macro_rules! emit {
    ($out:ident, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

fn main() -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    // Collected and written once, so a closed pipe (`| head`) is not a panic in `println!`.
    let mut out = String::new();
    for path in std::env::args_os().skip(1) {
        let image = match Image::read(&path) {
            Ok(image) => image,
            Err(error) => {
                eprintln!("failed to load image `{}`: {error}", path.to_string_lossy());
                status = ExitCode::FAILURE;
                continue;
            }
        };
        emit!(
            out,
            "{}: {}",
            path.to_string_lossy(),
            image.kind().describe()
        );
        if let (Some(version), Some(target)) = (image.ptx_version(), image.ptx_target()) {
            emit!(out, "  PTX {}.{} for {target}", version.0, version.1);
        }
        if let Some(sm) = image.cuda_sm() {
            emit!(out, "  cubin for sm_{sm}");
        }
        if let Some(info) = image.amdgpu() {
            emit!(
                out,
                "  AMDGPU target {:?} (mach {:#x})",
                info.target,
                info.mach
            );
        }
        for kernel in image.kernels() {
            match &kernel.descriptor {
                Some(kd) => emit!(
                    out,
                    "  kernel {} (wave{}, kernarg {} B, LDS {} B, scratch {} B{})",
                    kernel.name,
                    kd.wavefront_size(),
                    kd.kernarg_size,
                    kd.group_segment_fixed_size,
                    kd.private_segment_fixed_size,
                    if kd.uses_dynamic_stack() {
                        ", dynamic stack"
                    } else {
                        ""
                    }
                ),
                None => emit!(out, "  kernel {}", kernel.name),
            }
        }
        for global in image.globals() {
            let init = match &global.init {
                GlobalInit::Bytes(bytes) => format!("{} bytes stored", bytes.len()),
                GlobalInit::Zeroed => "zeroed".to_owned(),
                GlobalInit::Unknown => "unknown until loaded".to_owned(),
            };
            emit!(out, "  global {} ({} B, {init})", global.name, global.size);
        }
        for test in image.tests() {
            let mut notes = Vec::new();
            if test.ignored {
                notes.push(format!(
                    "ignored {:?}",
                    test.ignore_reason.as_deref().unwrap_or("")
                ));
            }
            match &test.should_panic {
                ShouldPanic::No => {}
                ShouldPanic::Yes => notes.push("should_panic".to_owned()),
                ShouldPanic::Expected(text) => notes.push(format!("should_panic({text:?})")),
            }
            emit!(
                out,
                "  test {} threads {:?} blocks {:?} {}",
                test.name,
                test.shape.threads,
                test.shape.blocks,
                notes.join(" ")
            );
        }
    }
    let _ = std::io::stdout().write_all(out.as_bytes());
    status
}
