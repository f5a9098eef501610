//! Our nvptx "linker": rustc's `llvm-bitcode-linker` is not available from rustup here, so
//! `cargo gpurun build` passes `-Clinker=<target dir>/gpurun/gpurun-nvptx-link` (a link to this
//! executable) and rustc calls us with the llbc-flavor interface:
//!
//! ```text
//! --export-symbol NAME ... INPUT.o ... LIB.rlib ... -L DIR --target nvptx64-nvidia-cuda
//! --target-cpu sm_70 [--target-feature=+ptx70] -o OUT.ptx -O3 [--debug]
//! ```
//!
//! Inputs are LLVM bitcode: `.o` files, and rlibs (archives) whose members are bitcode (their
//! `lib.rmeta` member is not). We `llvm-link` all of it, internalize every symbol except the
//! exported ones and the device ABI's (`_begin`, `_start`, `_end`, `__llvm_rpc_client`,
//! `__gpurun_*`), drop what is unreachable, optimize with `opt`, and emit PTX with `llc`.
//! Debug info is stripped: ptxas rejects the DWARF this LLVM emits for nvptx.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::toolchain;

/// Symbols always kept external, whatever rustc exports: the device ABI's (patterns use `*` as a
/// wildcard, as LLVM's internalize pass reads them).
pub const ALWAYS_EXPORTED: &[&str] = gpurun_abi::symbols::KEEP_EXPORTED;

/// Environment variable that keeps the linker's intermediate files (`OUT.gpurun-link/`).
pub const KEEP_LINK_FILES_ENV: &str = "GPURUN_KEEP_LINK_FILES";

/// Why linking failed. The tool variants carry the tool's whole stderr.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("bad linker arguments: {0}")]
    Usage(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an LLVM bitcode file or archive")]
    NotBitcode { path: PathBuf },
    #[error("cannot read archive {path}: {detail}")]
    Archive { path: PathBuf, detail: String },
    #[error("cannot find the LLVM tools: {0}")]
    Tools(String),
    #[error("cannot run {tool} ({path}): {source}")]
    Spawn {
        tool: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot add the test kernels' block-size bounds to {path}: {detail}")]
    BlockBounds { path: PathBuf, detail: String },
    #[error("{tool} failed ({status}):\n{stderr}")]
    ToolFailed {
        tool: &'static str,
        status: String,
        stderr: String,
    },
}

/// The parsed command line rustc gives the linker.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkArgs {
    pub exports: Vec<String>,
    pub inputs: Vec<PathBuf>,
    pub output: Option<PathBuf>,
    pub target_cpu: Option<String>,
    pub target_features: Vec<String>,
    /// `0`..`3`, `s` or `z`.
    pub opt_level: String,
    pub debug: bool,
    /// `-L` directories; one of them is in the sysroot of the rustc that runs us.
    pub library_dirs: Vec<PathBuf>,
}

impl LinkArgs {
    /// Parses rustc's arguments (after expanding `@file` response files).
    pub fn parse(args: &[OsString]) -> Result<LinkArgs, LinkError> {
        let args = expand_response_files(args)?;
        let mut parsed = LinkArgs {
            opt_level: "3".to_owned(),
            ..LinkArgs::default()
        };
        let mut iter = args.into_iter();
        while let Some(arg) = iter.next() {
            let Some(text) = arg.to_str() else {
                parsed.inputs.push(PathBuf::from(arg));
                continue;
            };
            let mut value = |flag: &str| {
                iter.next()
                    .ok_or_else(|| LinkError::Usage(format!("`{flag}` needs a value")))
            };
            match text {
                "--export-symbol" => parsed
                    .exports
                    .push(value(text)?.to_string_lossy().into_owned()),
                "-o" => parsed.output = Some(PathBuf::from(value(text)?)),
                "-L" => parsed.library_dirs.push(PathBuf::from(value(text)?)),
                "--target" => {
                    let target = value(text)?;
                    if target != "nvptx64-nvidia-cuda" {
                        return Err(LinkError::Usage(format!(
                            "this linker only links nvptx64-nvidia-cuda, not `{}`",
                            target.to_string_lossy()
                        )));
                    }
                }
                "--target-cpu" => {
                    parsed.target_cpu = Some(value(text)?.to_string_lossy().into_owned())
                }
                "--target-feature" => parsed
                    .target_features
                    .push(value(text)?.to_string_lossy().into_owned()),
                "--debug" => parsed.debug = true,
                _ => {
                    if let Some(features) = text.strip_prefix("--target-feature=") {
                        parsed.target_features.push(features.to_owned());
                    } else if let Some(dir) = text.strip_prefix("-L") {
                        parsed.library_dirs.push(PathBuf::from(dir));
                    } else if let Some(level) = text.strip_prefix("-O") {
                        if !matches!(level, "0" | "1" | "2" | "3" | "s" | "z") {
                            return Err(LinkError::Usage(format!("unknown optimization `{text}`")));
                        }
                        parsed.opt_level = level.to_owned();
                    } else if text.starts_with('-') {
                        return Err(LinkError::Usage(format!(
                            "unknown argument `{text}` (this rustc passes something cargo-gpurun does not handle yet)"
                        )));
                    } else {
                        parsed.inputs.push(PathBuf::from(text));
                    }
                }
            }
        }
        if parsed.output.is_none() {
            return Err(LinkError::Usage("no output file (`-o`)".to_owned()));
        }
        if parsed.inputs.is_empty() {
            return Err(LinkError::Usage("no input files".to_owned()));
        }
        Ok(parsed)
    }
}

/// Replaces `@path` arguments by the arguments in that file, one per line, with the backslash
/// escapes rustc writes for GNU-style response files.
fn expand_response_files(args: &[OsString]) -> Result<Vec<OsString>, LinkError> {
    let mut expanded = Vec::new();
    for arg in args {
        match arg.to_str().and_then(|text| text.strip_prefix('@')) {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| LinkError::Read {
                    path: path.into(),
                    source,
                })?;
                for line in text.lines().filter(|line| !line.is_empty()) {
                    let mut unescaped = String::with_capacity(line.len());
                    let mut chars = line.chars();
                    while let Some(ch) = chars.next() {
                        if ch == '\\' {
                            unescaped.extend(chars.next());
                        } else {
                            unescaped.push(ch);
                        }
                    }
                    expanded.push(OsString::from(unescaped));
                }
            }
            None => expanded.push(arg.clone()),
        }
    }
    Ok(expanded)
}

/// Where `llvm-link`, `opt` and `llc` come from, the same for every way in (`cargo gpurun
/// build`'s linker link, `gpurun-nvptx-link` as the configured linker): the user's
/// `GPURUN_LLVM_TOOLS_DIR`; else, unless the user named a toolchain (`GPURUN_TOOLCHAIN`),
/// those of the rustc that runs us, found from the sysroot in its `-L` arguments (bitcode of a
/// newer LLVM does not load in an older `llvm-link`, and a crate pinned to a dated nightly would
/// otherwise get another toolchain's tools); else the probed nightly's.
fn tools_dir(args: &LinkArgs) -> Result<PathBuf, LinkError> {
    if let Some(dir) = toolchain::llvm_tools_dir_override() {
        return Ok(dir);
    }
    let toolchain_named = std::env::var_os(toolchain::TOOLCHAIN_ENV).is_some_and(|v| !v.is_empty());
    if !toolchain_named {
        if let Some(dir) = args
            .library_dirs
            .iter()
            .find_map(|dir| rustc_tools_dir(dir))
        {
            return Ok(dir);
        }
    }
    toolchain::Toolchain::probe()
        .map(|toolchain| toolchain.llvm_tools_dir())
        .map_err(|err| LinkError::Tools(err.to_string()))
}

/// `<sysroot>/lib/rustlib/<host>/bin` holding the link tools, from rustc's self-contained `-L`
/// directory (`<sysroot>/lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained`).
fn rustc_tools_dir(library_dir: &Path) -> Option<PathBuf> {
    if !library_dir.ends_with("lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained") {
        return None;
    }
    let rustlib = library_dir.ancestors().nth(3)?;
    let mut bins: Vec<PathBuf> = std::fs::read_dir(rustlib)
        .ok()?
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .collect();
    bins.sort();
    bins.into_iter().find(|bin| {
        toolchain::NVPTX_LINK_TOOLS
            .iter()
            .all(|tool| toolchain::find_llvm_tool_in(bin, tool).is_ok())
    })
}

fn find_tool(dir: &Path, tool: &'static str) -> Result<PathBuf, LinkError> {
    toolchain::find_llvm_tool_in(dir, tool).map_err(|_| {
        LinkError::Tools(format!(
            "`{tool}` not found in {} (rustup component llvm-tools, or {})",
            dir.display(),
            toolchain::LLVM_TOOLS_DIR_ENV
        ))
    })
}

/// Links per `args`: the whole pipeline, leaving `args.output` (PTX) on success.
pub fn link(args: &LinkArgs) -> Result<(), LinkError> {
    let output = args
        .output
        .as_deref()
        .ok_or_else(|| LinkError::Usage("no output file (`-o`)".to_owned()))?;
    let dir = tools_dir(args)?;
    let llvm_link = find_tool(&dir, "llvm-link")?;
    let opt = find_tool(&dir, "opt")?;
    let llc = find_tool(&dir, "llc")?;

    let work_dir = output.with_extension("gpurun-link");
    let _ = std::fs::remove_dir_all(&work_dir);
    std::fs::create_dir_all(&work_dir).map_err(|source| LinkError::Write {
        path: work_dir.clone(),
        source,
    })?;
    let result = link_in(args, output, &work_dir, [&llvm_link, &opt, &llc]);
    // Intermediate files are only useful while linking; keep them when it failed, or when asked
    // (`GPURUN_KEEP_LINK_FILES=1`), to debug.
    if result.is_ok() && std::env::var_os(KEEP_LINK_FILES_ENV).is_none() {
        let _ = std::fs::remove_dir_all(&work_dir);
    }
    result
}

fn link_in(
    args: &LinkArgs,
    output: &Path,
    work_dir: &Path,
    [llvm_link, opt, llc]: [&PathBuf; 3],
) -> Result<(), LinkError> {
    let bitcode = collect_bitcode(&args.inputs, work_dir)?;

    let linked = work_dir.join("linked.bc");
    let mut command = Command::new(llvm_link);
    command.args(&bitcode).arg("-o").arg(&linked);
    run_tool("llvm-link", llvm_link, &mut command)?;

    let exports_file = work_dir.join("exports.txt");
    let mut exports = String::new();
    for name in args
        .exports
        .iter()
        .map(String::as_str)
        .chain(ALWAYS_EXPORTED.iter().copied())
    {
        let _ = writeln!(exports, "{name}");
    }
    std::fs::write(&exports_file, exports).map_err(|source| LinkError::Write {
        path: exports_file.clone(),
        source,
    })?;

    let optimized = work_dir.join("optimized.bc");
    let level = device_opt_level(&args.opt_level);
    let mut command = Command::new(opt);
    command
        .arg("--strip-debug")
        .arg(format!(
            "-passes=internalize,globaldce,default<{level}>,globaldce"
        ))
        .arg(format!(
            "-internalize-public-api-file={}",
            exports_file.display()
        ))
        .arg(&linked)
        .arg("-o")
        .arg(&optimized);
    run_tool("opt", opt, &mut command)?;

    let codegen_level = if level == "O3" { "-O3" } else { "-O2" };
    let mut command = Command::new(llc);
    command.arg(codegen_level);
    if let Some(cpu) = &args.target_cpu {
        command.arg(format!("-mcpu={cpu}"));
    }
    let features: Vec<&str> = args
        .target_features
        .iter()
        .flat_map(|list| list.split(','))
        .filter(|feature| !feature.is_empty())
        .collect();
    if !features.is_empty() {
        command.arg(format!("-mattr={}", features.join(",")));
    }
    command.arg(&optimized).arg("-o").arg(output);
    run_tool("llc", llc, &mut command)?;
    bound_test_kernels_in(output)
}

/// Rewrites the PTX at `path` with [`bound_test_kernels`].
fn bound_test_kernels_in(path: &Path) -> Result<(), LinkError> {
    let ptx = std::fs::read_to_string(path).map_err(|source| LinkError::Read {
        path: path.to_owned(),
        source,
    })?;
    let bounded = bound_test_kernels(&ptx).map_err(|detail| LinkError::BlockBounds {
        path: path.to_owned(),
        detail,
    })?;
    if let Some(bounded) = bounded {
        std::fs::write(path, bounded).map_err(|source| LinkError::Write {
            path: path.to_owned(),
            source,
        })?;
    }
    Ok(())
}

/// Gives each `#[gpurun::test]` kernel a `.maxntid` of the threads its descriptor declares
/// (`block_bound`), so
/// that ptxas (and the driver's JIT) allocate registers for that block size: without a bound
/// they may use up to 255 registers a thread, and a 1024-thread block then cannot launch
/// (`CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`). `None` when the PTX has no tests or every test kernel
/// is already bounded. The result is parsed again to check every test kernel got its bound.
pub fn bound_test_kernels(ptx: &str) -> Result<Option<String>, String> {
    if !ptx.contains(gpurun_abi::symbols::DESC_PREFIX) {
        return Ok(None);
    }
    // Tests that gpurun-image cannot read (another test ABI version, say) cannot be run by
    // this cargo-gpurun either; its loader says why, so the PTX is left as it is.
    let Ok(image) = gpurun_image::Image::parse(ptx.as_bytes().to_vec(), None) else {
        return Ok(None);
    };
    let wanted: Vec<(&str, u32)> = image
        .tests()
        .iter()
        .filter(|test| {
            image
                .kernel(&test.kernel)
                .is_some_and(|kernel| kernel.max_threads().is_none())
        })
        .map(|test| (test.kernel.as_str(), block_bound(test.shape.threads)))
        .collect();
    if wanted.is_empty() {
        return Ok(None);
    }
    let mut out = String::with_capacity(ptx.len() + wanted.len() * 32);
    let mut pending: Option<u32> = None;
    for line in ptx.lines() {
        if let Some(name) = entry_name(line) {
            pending = wanted
                .iter()
                .find(|(kernel, _)| *kernel == name)
                .map(|(_, bound)| *bound);
        } else if let Some(bound) = pending {
            if line.trim() == "{" {
                let _ = writeln!(out, ".maxntid {bound}, 1, 1");
                pending = None;
            } else if line.contains('{') {
                // The body began another way; the check below reports it.
                pending = None;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    let bounded = gpurun_image::Image::parse(out.as_bytes().to_vec(), None)
        .map_err(|err| format!("the rewritten PTX does not parse: {err}"))?;
    for (kernel, bound) in &wanted {
        if bounded
            .kernel(kernel)
            .and_then(|kernel| kernel.max_threads())
            != Some(*bound)
        {
            return Err(format!(
                "kernel `{kernel}` did not get `.maxntid {bound}, 1, 1` (its body does not start on a line of its own)"
            ));
        }
    }
    Ok(Some(out))
}

/// The `.maxntid` for a block of `threads`: their number, x * y * z, which is what the driver
/// compares a launch's block against (so `.maxntid N, 1, 1` also admits a `(x, y, z)` block).
fn block_bound(threads: [u32; 3]) -> u32 {
    threads
        .iter()
        .try_fold(1u32, |acc, &n| acc.checked_mul(n))
        .unwrap_or(u32::MAX)
}

/// The kernel a line like `.visible .entry NAME(` declares, if it declares one.
fn entry_name(line: &str) -> Option<&str> {
    let line = line.split("//").next().unwrap_or(line);
    let mut words = line.split_whitespace().skip_while(|word| *word != ".entry");
    words.next()?;
    let name = words.next()?.split('(').next()?;
    (!name.is_empty()).then_some(name)
}

/// The `opt` level for rustc's `-O` level. Device code is optimized even in debug builds: its
/// debug info is stripped anyway, and unoptimized PTX is several times larger (every value lives
/// in local memory), which makes ptxas take minutes where it otherwise takes a second.
fn device_opt_level(rustc_level: &str) -> &'static str {
    match rustc_level {
        "s" => "Os",
        "z" => "Oz",
        _ => "O3",
    }
}

/// Writes every bitcode member of the rlibs into `work_dir` and returns all bitcode files to link.
fn collect_bitcode(inputs: &[PathBuf], work_dir: &Path) -> Result<Vec<PathBuf>, LinkError> {
    let mut files = Vec::new();
    for (index, input) in inputs.iter().enumerate() {
        let data = std::fs::read(input).map_err(|source| LinkError::Read {
            path: input.clone(),
            source,
        })?;
        if is_bitcode(&data) {
            files.push(input.clone());
            continue;
        }
        if !data.starts_with(b"!<arch>\n") {
            return Err(LinkError::NotBitcode {
                path: input.clone(),
            });
        }
        let archive_error = |detail: String| LinkError::Archive {
            path: input.clone(),
            detail,
        };
        let archive = object::read::archive::ArchiveFile::parse(&*data)
            .map_err(|err| archive_error(err.to_string()))?;
        for (member_index, member) in archive.members().enumerate() {
            let member = member.map_err(|err| archive_error(err.to_string()))?;
            let bytes = member
                .data(&*data)
                .map_err(|err| archive_error(err.to_string()))?;
            // `lib.rmeta` (rustc metadata) and anything else that is not bitcode is not code.
            if !is_bitcode(bytes) {
                continue;
            }
            let name = String::from_utf8_lossy(member.name());
            let stem: String = name
                .chars()
                .map(|ch| {
                    if ch.is_ascii_alphanumeric() || ch == '.' || ch == '-' {
                        ch
                    } else {
                        '_'
                    }
                })
                .collect();
            let path = work_dir.join(format!("{index}-{member_index}-{stem}"));
            std::fs::write(&path, bytes).map_err(|source| LinkError::Write {
                path: path.clone(),
                source,
            })?;
            files.push(path);
        }
    }
    if files.is_empty() {
        return Err(LinkError::Usage("no bitcode in the inputs".to_owned()));
    }
    Ok(files)
}

/// LLVM bitcode, raw (`BC 0xC0DE`) or in the wrapper header (`0x0B17C0DE`).
fn is_bitcode(data: &[u8]) -> bool {
    data.starts_with(b"BC\xC0\xDE") || data.starts_with(&[0xDE, 0xC0, 0x17, 0x0B])
}

fn run_tool(tool: &'static str, path: &Path, command: &mut Command) -> Result<(), LinkError> {
    let result = command.output().map_err(|source| LinkError::Spawn {
        tool,
        path: path.to_owned(),
        source,
    })?;
    if result.status.success() {
        return Ok(());
    }
    let mut stderr = String::from_utf8_lossy(&result.stderr)
        .trim_end()
        .to_owned();
    let stdout = String::from_utf8_lossy(&result.stdout);
    if !stdout.trim().is_empty() {
        stderr.push('\n');
        stderr.push_str(stdout.trim_end());
    }
    if stderr.is_empty() {
        stderr = "(no output)".to_owned();
    }
    Err(LinkError::ToolFailed {
        tool,
        status: result.status.to_string(),
        stderr,
    })
}

/// Whether `argv0` names the linker link, so `main` should act as the linker.
pub fn invoked_as_linker(argv0: &OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .is_some_and(|name| name == OsStr::new(super::cargo::NVPTX_LINKER_NAME))
}

/// The linker as a program: links with rustc's arguments (`args`, without the program name).
/// An error, with the failing tool's whole stderr, goes to stderr, where rustc shows it under
/// "linking with `gpurun-nvptx-link` failed".
pub fn main(args: &[OsString]) -> std::process::ExitCode {
    match LinkArgs::parse(args).and_then(|args| link(&args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_what_rustc_passes() {
        let args = LinkArgs::parse(&os(&[
            "--export-symbol",
            "_start",
            "a.rcgu.o",
            "libcore-1.rlib",
            "-L",
            "/x/raw-dylibs",
            "--target",
            "nvptx64-nvidia-cuda",
            "--target-cpu",
            "sm_70",
            "--target-feature=+ptx70",
            "-L",
            "/sysroot/self-contained",
            "-o",
            "out.ptx",
            "-O0",
            "--debug",
        ]))
        .unwrap();
        assert_eq!(args.exports, vec!["_start"]);
        assert_eq!(
            args.inputs,
            vec![PathBuf::from("a.rcgu.o"), PathBuf::from("libcore-1.rlib")]
        );
        assert_eq!(args.output, Some(PathBuf::from("out.ptx")));
        assert_eq!(args.target_cpu.as_deref(), Some("sm_70"));
        assert_eq!(args.target_features, vec!["+ptx70"]);
        assert_eq!(args.opt_level, "0");
        assert!(args.debug);
        assert_eq!(
            args.library_dirs,
            vec![
                PathBuf::from("/x/raw-dylibs"),
                PathBuf::from("/sysroot/self-contained")
            ]
        );
    }

    #[test]
    fn finds_the_tools_of_the_rustc_that_links() {
        assert_eq!(rustc_tools_dir(Path::new("/x/raw-dylibs")), None);
        let Ok(toolchain) = toolchain::Toolchain::probe() else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no nightly toolchain, and CI=true requires it"
            );
            eprintln!("not run: no nightly toolchain");
            return;
        };
        let self_contained = toolchain
            .sysroot
            .join("lib/rustlib/nvptx64-nvidia-cuda/lib/self-contained");
        if toolchain.missing_components().is_empty() {
            assert_eq!(
                rustc_tools_dir(&self_contained),
                Some(toolchain.rustlib_bin_dir())
            );
        }
    }

    #[test]
    fn rejects_bad_arguments() {
        for bad in [
            &["a.o"][..],
            &["-o", "x.ptx"],
            &["a.o", "-o"],
            &["a.o", "-o", "x.ptx", "--frobnicate"],
            &["a.o", "-o", "x.ptx", "--target", "x86_64-unknown-linux-gnu"],
            &["a.o", "-o", "x.ptx", "-O7"],
        ] {
            assert!(
                matches!(LinkArgs::parse(&os(bad)), Err(LinkError::Usage(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn expands_response_files() {
        let dir = std::env::temp_dir().join(format!("gpurun-rsp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("args.rsp");
        std::fs::write(
            &file,
            "--export-symbol\n_start\nmy\\ dir/a.o\n-o\nout.ptx\n",
        )
        .unwrap();
        let args = LinkArgs::parse(&[OsString::from(format!("@{}", file.display()))]).unwrap();
        assert_eq!(args.inputs, vec![PathBuf::from("my dir/a.o")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The PTX of one test kernel with `threads`, as llc lays it out, and a plain kernel.
    fn test_ptx(threads: [u32; 3]) -> String {
        let descriptor = gpurun_image::encode_descriptor(&gpurun_image::TestDesc {
            full_path: "fixture::big".to_owned(),
            kernel: "__gpurun_test_big_0123456789abcdef".to_owned(),
            shape: gpurun_image::LaunchShape::grid([1, 1, 1], threads),
            ..gpurun_image::TestDesc::new("big")
        })
        .unwrap();
        let bytes: Vec<String> = descriptor.iter().map(u8::to_string).collect();
        format!(
            ".version 7.0\n.target sm_70\n.address_size 64\n\n\
             .visible .global .align 4 .b8 __gpurun_test_abi_version[4] = {{1, 0, 0, 0}};\n\
             .visible .global .align 1 .b8 __gpurun_desc_big_0123456789abcdef[{}] = {{{}}};\n\
             \t// .globl\t__gpurun_test_big_0123456789abcdef\n\
             .visible .entry __gpurun_test_big_0123456789abcdef()  // @__gpurun_test_big\n{{\n\tret;\n}}\n\
             .visible .entry _start(\n\t.param .u32 _start_param_0\n)\n{{\n\tret;\n}}\n",
            descriptor.len(),
            bytes.join(", ")
        )
    }

    #[test]
    fn test_kernels_get_their_declared_block_size_as_maxntid() {
        let bounded = bound_test_kernels(&test_ptx([32, 16, 2])).unwrap().unwrap();
        assert!(
            bounded.contains("@__gpurun_test_big\n.maxntid 1024, 1, 1\n{\n"),
            "{bounded}"
        );
        // Only test kernels: `_start` has no declared block size.
        assert_eq!(bounded.matches(".maxntid").count(), 1, "{bounded}");
        let image = gpurun_image::Image::parse(bounded.clone().into_bytes(), None).unwrap();
        let kernel = image.kernel("__gpurun_test_big_0123456789abcdef").unwrap();
        assert_eq!(kernel.max_threads(), Some(1024));
        // A second pass changes nothing; PTX without tests, or with tests of another ABI, is
        // left alone.
        assert_eq!(bound_test_kernels(&bounded).unwrap(), None);
        let other_abi = test_ptx([64, 1, 1]).replace(
            "__gpurun_test_abi_version[4] = {1,",
            "__gpurun_test_abi_version[4] = {9,",
        );
        assert_eq!(bound_test_kernels(&other_abi).unwrap(), None);
        assert_eq!(
            bound_test_kernels(".version 7.0\n.target sm_70\n").unwrap(),
            None
        );
    }

    #[test]
    fn block_bounds_are_thread_counts() {
        assert_eq!(block_bound([1, 1, 1]), 1);
        assert_eq!(block_bound([4, 2, 2]), 16);
        assert_eq!(block_bound([1024, 1, 1]), 1024);
        let ptx = bound_test_kernels(&test_ptx([4, 2, 2])).unwrap().unwrap();
        assert!(ptx.contains(".maxntid 16, 1, 1\n"), "{ptx}");
    }

    #[test]
    fn a_test_kernel_that_cannot_be_bounded_is_an_error() {
        // The body's brace on the header line: nothing to insert before.
        let ptx = test_ptx([64, 1, 1]).replace(
            "@__gpurun_test_big\n{\n",
            "@__gpurun_test_big\n\t{ ret; }\n{\n",
        );
        let ptx = ptx.replace("\t{ ret; }\n{\n\tret;\n}\n", "{ ret; }\n");
        let err = bound_test_kernels(&ptx).unwrap_err();
        assert!(err.contains("did not get `.maxntid 64, 1, 1`"), "{err}");
    }

    #[test]
    fn recognizes_bitcode_magic() {
        assert!(is_bitcode(b"BC\xC0\xDE\x35\x14"));
        assert!(is_bitcode(&[0xDE, 0xC0, 0x17, 0x0B, 0, 0]));
        assert!(!is_bitcode(b"\x7fELF"));
        assert!(!is_bitcode(b"BC"));
    }
}
