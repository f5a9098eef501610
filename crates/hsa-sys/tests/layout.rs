//! Checks our hand-written bindings against real headers, two sets: Debian 12's
//! `libhsa-runtime-dev` (ROCm 5.2, in `/usr/include/hsa`) and ROCm 6.x's (Debian 13's package,
//! ROCm 6.1, unpacked by scripts/setup.sh), which also have what ROCm 5.2 predates. For each it
//! writes a C file of `_Static_assert`s generated from the Rust side (sizes, alignments, field
//! offsets, every constant, every function's type) and compiles it. A mismatch is a compile
//! error that names the item.
//!
//! Without the headers or a C compiler the test says why and passes, except under `CI=true`,
//! where CI is supposed to have both and their absence fails it.

use hsa_sys::*;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `(C type, Rust size, Rust alignment, [(C field, Rust offset)])`.
type Layout = (&'static str, usize, usize, Vec<(&'static str, usize)>);

macro_rules! layout {
    ($ty:ident { $( $field:ident $(=> $c_field:literal)? ),* $(,)? }) => {
        (
            stringify!($ty),
            size_of::<$ty>(),
            align_of::<$ty>(),
            vec![ $( (layout!(@name $field $($c_field)?), offset_of!($ty, $field)) ),* ],
        )
    };
    (@name $field:ident $c_field:literal) => { $c_field };
    (@name $field:ident) => { stringify!($field) };
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(hsa_agent_t { handle }),
        layout!(hsa_signal_t { handle }),
        layout!(hsa_isa_t { handle }),
        layout!(hsa_code_object_reader_t { handle }),
        layout!(hsa_executable_t { handle }),
        layout!(hsa_loaded_code_object_t { handle }),
        layout!(hsa_executable_symbol_t { handle }),
        layout!(hsa_amd_memory_pool_t { handle }),
        layout!(hsa_queue_t {
            type_ => "type",
            features,
            base_address,
            doorbell_signal,
            size,
            reserved1,
            id,
        }),
        layout!(hsa_kernel_dispatch_packet_t {
            header,
            setup,
            workgroup_size_x,
            workgroup_size_y,
            workgroup_size_z,
            reserved0,
            grid_size_x,
            grid_size_y,
            grid_size_z,
            private_segment_size,
            group_segment_size,
            kernel_object,
            kernarg_address,
            reserved2,
            completion_signal,
        }),
        layout!(hsa_amd_gpu_memory_fault_info_t {
            agent,
            virtual_address,
            fault_reason_mask,
        }),
        layout!(hsa_amd_event_t {
            event_type,
            memory_fault,
        }),
        layout!(hsa_amd_profiling_dispatch_time_t { start, end }),
        layout!(amd_signal_t {
            kind,
            value,
            event_mailbox_ptr,
            event_id,
            reserved1,
            start_ts,
            end_ts,
            reserved2,
            reserved3,
        }),
    ]
}

/// Layouts of structs newer than Debian 12's headers (ROCm 5.2), checked against ROCm 6.x's.
fn newer_layouts() -> Vec<Layout> {
    vec![layout!(hsa_amd_gpu_hw_exception_info_t {
        agent,
        reset_type,
        reset_cause,
    })]
}

/// Constants newer than Debian 12's headers, declared outside `CONSTANTS` for that reason, and
/// checked against ROCm 6.x's: `(C name, value)`.
fn newer_constants() -> Vec<(&'static str, u64)> {
    vec![
        (
            "HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY",
            u64::from(HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY),
        ),
        (
            "HSA_AMD_AGENT_INFO_NEAREST_CPU",
            u64::from(HSA_AMD_AGENT_INFO_NEAREST_CPU),
        ),
        (
            "HSA_AMD_GPU_HW_EXCEPTION_EVENT",
            u64::from(HSA_AMD_GPU_HW_EXCEPTION_EVENT),
        ),
    ]
}

/// A set of headers to check the bindings against.
struct Headers {
    /// What the messages call it.
    name: &'static str,
    /// The directory holding `hsa/hsa.h`.
    include: PathBuf,
    /// Constants of `CONSTANTS` these headers predate (each is justified where it is declared).
    lacks: &'static [&'static str],
    /// Whether [`newer_layouts`] and [`newer_constants`] are checked too.
    newer: bool,
}

/// Debian 12's `libhsa-runtime-dev` (ROCm 5.2), installed by scripts/setup.sh, or
/// `$HSA_INCLUDE_DIR`.
fn debian_headers() -> Headers {
    Headers {
        name: "Debian 12's HSA headers (ROCm 5.2)",
        include: std::env::var_os("HSA_INCLUDE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/include")),
        lacks: &[
            "HSA_STATUS_ERROR_OUT_OF_REGISTERS",
            "HSA_STATUS_ERROR_RESOURCE_BUSY",
        ],
        newer: false,
    }
}

/// ROCm 6.x's headers: Debian 13's `libhsa-runtime-dev` (ROCm 6.1), which scripts/setup.sh
/// unpacks without installing, or `$HSA_ROCM6_INCLUDE_DIR`.
fn rocm6_headers() -> Headers {
    let unpacked = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".local/share/gpurun/hsa-rocm6/usr/include"))
        .unwrap_or_default();
    Headers {
        name: "ROCm 6.x's HSA headers (Debian 13's, ROCm 6.1)",
        include: std::env::var_os("HSA_ROCM6_INCLUDE_DIR")
            .map(PathBuf::from)
            .unwrap_or(unpacked),
        // Added in ROCm 6.2.
        lacks: &["HSA_STATUS_ERROR_RESOURCE_BUSY"],
        newer: true,
    }
}

/// C spelling of a Rust type as `stringify!` wrote it in `FUNCTION_SIGNATURES`.
fn c_type(rust: &str) -> String {
    let rust = rust.trim();
    if let Some(rest) = rust.strip_prefix('*') {
        let rest = rest.trim_start();
        if let Some(pointee) = rest.strip_prefix("mut ") {
            return format!("{}*", c_type(pointee));
        }
        if let Some(pointee) = rest.strip_prefix("const ") {
            return format!("const {}*", c_type(pointee));
        }
        panic!("unexpected pointer type `{rust}`");
    }
    match rust.rsplit("::").next().unwrap_or(rust) {
        "()" => "void".into(),
        "c_void" => "void".into(),
        "c_char" => "char".into(),
        "c_int" => "int".into(),
        "u32" => "uint32_t".into(),
        "u64" => "uint64_t".into(),
        "i64" => "int64_t".into(),
        "usize" => "size_t".into(),
        "bool" => "bool".into(),
        // Our callback aliases (typedefs below) and the header's own type names.
        name if name.starts_with("hsa_") => name.into(),
        other => panic!("no C spelling for the Rust type `{other}`"),
    }
}

/// `ret (*)(params)` in C for a recorded Rust signature.
fn c_function_pointer(ret: &str, params: &[&str]) -> String {
    let params: Vec<String> = params.iter().map(|p| c_type(p)).collect();
    let params = if params.is_empty() {
        "void".to_owned()
    } else {
        params.join(", ")
    };
    format!("{} (*)({params})", c_type(ret))
}

/// The C source: headers, then one assertion per fact. The callback types the headers leave
/// unnamed get typedefs generated from our Rust aliases, so the function checks below compare
/// our aliases (not a second hand-written copy) with the headers' parameter types.
fn c_source(headers: &Headers) -> String {
    let mut c = String::from(
        "#include <stdbool.h>\n#include <stddef.h>\n#include <stdint.h>\n\
         #include <hsa/hsa.h>\n#include <hsa/hsa_ext_amd.h>\n#include <hsa/amd_hsa_signal.h>\n\n",
    );
    for (name, ret, params) in CALLBACK_SIGNATURES {
        let pointer = c_function_pointer(ret, params);
        if *name == "hsa_amd_system_event_callback_t" {
            // The header names this one: compare directly.
            c.push_str(&format!(
                "_Static_assert(__builtin_types_compatible_p({name}, {pointer}), \"{name}\");\n"
            ));
        } else {
            c.push_str(&format!("typedef __typeof__({pointer}) {name};\n"));
        }
    }
    let newer = if headers.newer {
        newer_layouts()
    } else {
        Vec::new()
    };
    for (ty, size, align, fields) in layouts().into_iter().chain(newer) {
        c.push_str(&format!(
            "_Static_assert(sizeof({ty}) == {size}, \"size of {ty}\");\n\
             _Static_assert(_Alignof({ty}) == {align}, \"alignment of {ty}\");\n"
        ));
        for (field, offset) in fields {
            c.push_str(&format!(
                "_Static_assert(offsetof({ty}, {field}) == {offset}, \"offset of {ty}.{field}\");\n"
            ));
        }
    }
    // The header's typedef must have the same size as the u32 alias we use for it.
    let mut seen_types = std::collections::BTreeSet::new();
    if headers.newer {
        for (name, value) in newer_constants() {
            c.push_str(&format!(
                "_Static_assert((uint32_t)({name}) == {value}u, \"value of {name}\");\n"
            ));
        }
    }
    for (name, ty, value) in CONSTANTS {
        if headers.lacks.contains(name) {
            continue;
        }
        assert!(
            *value <= u64::from(u32::MAX),
            "{name} does not fit a C enum"
        );
        c.push_str(&format!(
            "_Static_assert((uint32_t)({name}) == {value}u, \"value of {name}\");\n"
        ));
        if seen_types.insert(*ty) {
            c.push_str(&format!(
                "_Static_assert(sizeof({ty}) == 4, \"{ty} is 32 bits\");\n"
            ));
        }
    }
    c.push_str("_Static_assert(sizeof(hsa_signal_value_t) == 8, \"hsa_signal_value_t\");\n");
    for (name, ret, params) in FUNCTION_SIGNATURES {
        let pointer = c_function_pointer(ret, params);
        c.push_str(&format!(
            "_Static_assert(__builtin_types_compatible_p(__typeof__(&{name}), {pointer}), \
             \"type of {name}: expected {pointer}\");\n"
        ));
    }
    c
}

/// Reports a missing prerequisite: a failure under CI, a note otherwise.
fn missing(what: &str) {
    let ci = std::env::var("CI").is_ok_and(|value| value == "true");
    if ci {
        panic!("{what}; CI must install it (scripts/setup.sh)");
    }
    eprintln!(
        "SKIPPED hsa-sys layout check: {what} (install libhsa-runtime-dev; fails under CI=true)"
    );
}

/// The headers' include directory, if it holds every one of `files` (if not, `missing` says so).
fn include_with(headers: &Headers, files: &[&str]) -> Option<PathBuf> {
    let include = headers.include.clone();
    if files.iter().all(|file| include.join(file).is_file()) {
        Some(include)
    } else {
        missing(&format!("no {} under {}", headers.name, include.display()));
        None
    }
}

/// A C file written to a fresh directory and syntax-checked against the headers.
struct Compiled {
    output: Output,
    /// The directory the file is in, for the caller to remove.
    dir: PathBuf,
    /// The C file.
    source: PathBuf,
}

/// Writes `source` as `file` in the temporary directory `NAME-PID` and runs the C compiler (`CC`,
/// else `cc`) on it with `include` on the include path; `None` (and a note from `missing`) if the
/// compiler cannot be run.
fn compile(include: &Path, name: &str, file: &str, source: &str) -> Option<Compiled> {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, source).unwrap();
    let output = Command::new(&compiler)
        .args(["-std=gnu11", "-fsyntax-only", "-Werror", "-I"])
        .arg(include)
        .arg(&path)
        .output();
    match output {
        Ok(output) => Some(Compiled {
            output,
            dir,
            source: path,
        }),
        Err(error) => {
            missing(&format!("cannot run the C compiler `{compiler}`: {error}"));
            None
        }
    }
}

/// Compiles the checks for `headers` (a missing prerequisite is reported by `missing`).
fn check(headers: &Headers, name: &str) {
    let files = ["hsa/hsa.h", "hsa/hsa_ext_amd.h", "hsa/amd_hsa_signal.h"];
    let Some(include) = include_with(headers, &files) else {
        return;
    };
    let Some(compiled) = compile(&include, name, "layout.c", &c_source(headers)) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&compiled.output.stderr);
    assert!(
        compiled.output.status.success(),
        "bindings disagree with {} in {} (source kept at {}):\n{stderr}",
        headers.name,
        include.display(),
        compiled.source.display()
    );
    std::fs::remove_dir_all(&compiled.dir).ok();
}

#[test]
fn bindings_match_the_installed_headers() {
    check(&debian_headers(), "hsa-sys-layout");
}

/// The same against ROCm 6.x's headers, with what Debian 12's predate: status codes 41-45, the
/// hardware exception event and its struct beside the memory fault in `hsa_amd_event_t`, the
/// timestamp frequency and the nearest CPU agent.
#[test]
fn bindings_match_rocm_6_headers() {
    check(&rocm6_headers(), "hsa-sys-layout-rocm6");
}

/// The ROCm 6.x check covers what Debian 12's headers cannot: a newer constant given a wrong
/// value must fail it.
#[test]
fn a_wrong_newer_constant_is_rejected() {
    let headers = rocm6_headers();
    let Some(include) = include_with(&headers, &["hsa/hsa.h", "hsa/hsa_ext_amd.h"]) else {
        return;
    };
    let source = c_source(&headers);
    let wrong = source.replace(
        "(uint32_t)(HSA_AMD_AGENT_INFO_NEAREST_CPU) == 41235u",
        "(uint32_t)(HSA_AMD_AGENT_INFO_NEAREST_CPU) == 41236u",
    );
    assert_ne!(wrong, source, "the nearest-CPU assertion is missing");
    let Some(compiled) = compile(&include, "hsa-sys-layout-rocm6-bad", "bad.c", &wrong) else {
        return;
    };
    std::fs::remove_dir_all(&compiled.dir).ok();
    assert!(!compiled.output.status.success(), "a wrong value compiled");
    assert!(String::from_utf8_lossy(&compiled.output.stderr)
        .contains("value of HSA_AMD_AGENT_INFO_NEAREST_CPU"));
}

/// The generator itself must be able to fail: a deliberately wrong assertion has to be rejected
/// by the same compiler invocation, or the check above proves nothing.
#[test]
fn a_wrong_layout_is_rejected() {
    let headers = debian_headers();
    let Some(include) = include_with(&headers, &["hsa/hsa.h"]) else {
        return;
    };
    let wrong = c_source(&headers).replace(
        "sizeof(hsa_kernel_dispatch_packet_t) == 64",
        "sizeof(hsa_kernel_dispatch_packet_t) == 63",
    );
    assert_ne!(
        wrong,
        c_source(&headers),
        "the packet size assertion is missing"
    );
    let Some(compiled) = compile(&include, "hsa-sys-layout-bad", "bad.c", &wrong) else {
        return;
    };
    let output = compiled.output;
    assert!(!output.status.success(), "a wrong size compiled");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("size of hsa_kernel_dispatch_packet_t")
    );
    std::fs::remove_dir_all(&compiled.dir).ok();
}

/// A callback alias that disagrees with the header must be caught too (through the function
/// that takes it).
#[test]
fn a_wrong_callback_type_is_rejected() {
    let headers = debian_headers();
    let Some(include) = include_with(&headers, &["hsa/hsa.h"]) else {
        return;
    };
    let source = c_source(&headers);
    let wrong = source.replace(
        "typedef __typeof__(hsa_status_t (*)(hsa_agent_t, void*)) hsa_agent_callback_t;",
        "typedef __typeof__(hsa_status_t (*)(hsa_isa_t, void*)) hsa_agent_callback_t;",
    );
    assert_ne!(wrong, source, "the agent callback typedef is missing");
    let Some(compiled) = compile(&include, "hsa-sys-layout-cb", "bad-callback.c", &wrong) else {
        return;
    };
    std::fs::remove_dir_all(&compiled.dir).ok();
    let output = compiled.output;
    assert!(!output.status.success(), "a wrong callback type compiled");
    assert!(String::from_utf8_lossy(&output.stderr).contains("type of hsa_iterate_agents"));
}

#[test]
fn c_spelling_of_rust_types() {
    assert_eq!(c_type("*mut *const c_char"), "const char**");
    assert_eq!(c_type("* mut * mut hsa_queue_t"), "hsa_queue_t**");
    assert_eq!(c_type("std::ffi::c_int"), "int");
    assert_eq!(c_type("()"), "void");
}
