//! Prints what `gpurun-image` reads from each image given on the command line:
//! `cargo run -p gpurun-image --example inspect_image -- IMAGE...`

use std::process::ExitCode;

use gpurun_image::{GlobalInit, Image, ShouldPanic};

fn main() -> ExitCode {
    let mut status = ExitCode::SUCCESS;
    for path in std::env::args_os().skip(1) {
        let image = match Image::read(&path) {
            Ok(image) => image,
            Err(error) => {
                eprintln!("failed to load image `{}`: {error}", path.to_string_lossy());
                status = ExitCode::FAILURE;
                continue;
            }
        };
        println!("{}: {}", path.to_string_lossy(), image.kind().describe());
        if let (Some(version), Some(target)) = (image.ptx_version(), image.ptx_target()) {
            println!("  PTX {}.{} for {target}", version.0, version.1);
        }
        if let Some(sm) = image.cuda_sm() {
            println!("  cubin for sm_{sm}");
        }
        if let Some(info) = image.amdgpu() {
            println!("  AMDGPU target {:?} (mach {:#x})", info.target, info.mach);
        }
        for kernel in image.kernels() {
            match &kernel.descriptor {
                Some(kd) => println!(
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
                None => println!("  kernel {}", kernel.name),
            }
        }
        for global in image.globals() {
            let init = match &global.init {
                GlobalInit::Bytes(bytes) => format!("{} bytes stored", bytes.len()),
                GlobalInit::Zeroed => "zeroed".to_owned(),
                GlobalInit::Unknown => "unknown until loaded".to_owned(),
            };
            println!("  global {} ({} B, {init})", global.name, global.size);
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
            println!(
                "  test {} threads {:?} blocks {:?} {}",
                test.name,
                test.threads,
                test.blocks,
                notes.join(" ")
            );
        }
    }
    status
}
