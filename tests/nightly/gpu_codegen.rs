//! Builds `gpu-probe` (beside this file: kernels using gpurun-rpc's generic client with the real
//! GPU lanes) for nvptx64-nvidia-cuda and amdgcn-amd-amdhsa (gfx90a) with the nightly toolchain,
//! and checks the generated code:
//!
//! - PTX: every `atom` names its scope (`.sys` or `.gpu`; the lock bits are device-scope), the
//!   fences that order the lock are device-scope and every other fence system-scope (as LLVM's
//!   client), every lane fences and then stores the outbox flip itself (no branch between, as
//!   LLVM's client), mailbox accesses are `ld/st.relaxed.sys`, no scoped access is narrower than
//!   `.sys` except the lock atoms and fences, there is no panic path, and `ptxas` accepts it for
//!   sm_70.
//! - AMDGPU: the fences are system-scope (`buffer_wbl2` release, `buffer_invl2` acquire on
//!   gfx90a), mailbox loads bypass the cache (`glc`), the wave operations are there, no panic path.
//!
//! Needs nightly with rust-src (and ptxas for the assembly check). When they are missing the test
//! says why and passes, except under `CI=true`, where CI is supposed to have them: then it fails.

use std::path::Path;
use std::process::Command;

use gpurun_build::toolchain::{self, Toolchain};
use gpurun_e2e::{available, nightly};

/// Builds the probe for `target` with `toolchain` and returns its assembly text.
fn build_probe(toolchain: &Toolchain, target: &str, rustflags: &[&str]) -> String {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("nightly/gpu-probe/Cargo.toml");
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gpu-probe");
    let output = Command::new("rustup")
        .args([
            "run",
            &toolchain.name,
            "cargo",
            "rustc",
            "--release",
            "-Zbuild-std=core",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["--target", target, "--", "--emit=asm"])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\x1f"))
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .expect("run cargo");
    assert!(
        output.status.success(),
        "building the probe for {target} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let deps = target_dir.join(target).join("release/deps");
    let newest = std::fs::read_dir(&deps)
        .expect("probe deps dir")
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("gpurun_rpc_gpu_probe") && name.ends_with(".s")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .expect("the probe's .s file");
    std::fs::read_to_string(newest.path()).expect("read assembly")
}

/// Instruction lines (no directives, comments or embedded data).
fn instructions(asm: &str) -> impl Iterator<Item = &str> {
    asm.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('.') && !l.starts_with("//"))
}

/// The fence that orders each lock operation, as LLVM's client does it: the first fence after a
/// lock `atom.or` (taking the port: acquire) and the last fence before a lock `atom.and`
/// (dropping it: release) are device-scope; nothing else is.
fn lock_fences_are_device_scope(ptx: &str) {
    let code: Vec<&str> = instructions(ptx).collect();
    let is_fence = |line: &&str| line.starts_with("fence");
    let mut lock_fences = Vec::new();
    for (at, line) in code.iter().enumerate() {
        if line.starts_with("atom.relaxed.gpu.or.b32") {
            let fence = code[at..].iter().position(is_fence).map(|i| at + i);
            lock_fences.push(fence.expect("a fence after taking the lock"));
        }
        if line.starts_with("atom.relaxed.gpu.and.b32") {
            let fence = code[..at].iter().rposition(is_fence);
            lock_fences.push(fence.expect("a fence before dropping the lock"));
        }
    }
    assert!(!lock_fences.is_empty(), "no lock operations");
    for (at, line) in code.iter().enumerate().filter(|(_, line)| is_fence(line)) {
        let expected = if lock_fences.contains(&at) {
            "fence.acq_rel.gpu"
        } else {
            "fence.acq_rel.sys"
        };
        assert!(
            line.starts_with(expected),
            "instruction {at} `{line}` should be `{expected}`:\n{}",
            code[at.saturating_sub(8)..(at + 8).min(code.len())].join("\n")
        );
    }
}

/// Each outbox flip (`st.relaxed.sys.b32`, the only 32-bit mailbox store) comes right after a
/// system-scope fence on the same path: no branch, label or predicated instruction between, so
/// every active lane releases its own packet slot and stores the flip itself, as LLVM's client.
fn every_lane_fences_then_flips_the_outbox(ptx: &str) {
    let code: Vec<&str> = instructions(ptx).collect();
    let flips: Vec<usize> = (0..code.len())
        .filter(|&at| code[at].starts_with("st.relaxed.sys.b32"))
        .collect();
    assert!(!flips.is_empty(), "no outbox stores");
    for at in flips {
        let fence = code[..at]
            .iter()
            .rposition(|line| line.starts_with("fence"))
            .expect("a fence before the outbox store");
        assert!(
            code[fence].starts_with("fence.acq_rel.sys"),
            "{}",
            code[fence]
        );
        let between = &code[fence + 1..at];
        assert!(
            between.iter().all(|line| !line.starts_with('@')
                && !line.starts_with('$')
                && !line.contains("bra")),
            "the outbox store is not on every lane's path after its fence:\n{}",
            code[fence..=at].join("\n")
        );
    }
}

#[test]
fn nvptx_client_path_uses_system_scope() {
    let Some(toolchain) = nightly() else {
        return;
    };
    let ptx = build_probe(&toolchain, "nvptx64-nvidia-cuda", &[]);
    assert!(ptx.contains(".entry gpurun_probe_increment"), "{ptx}");
    assert!(ptx.contains(".entry gpurun_probe_stream"));

    let atoms: Vec<&str> = instructions(&ptx)
        .filter(|l| l.starts_with("atom"))
        .collect();
    assert!(!atoms.is_empty(), "no atomics in the client path?");
    // The doorbell counter is the host's: a system-scope add.
    assert!(
        atoms
            .iter()
            .any(|a| a.starts_with("atom.relaxed.sys.add.u64")),
        "no doorbell ring: {atoms:?}"
    );
    for atom in &atoms {
        assert!(
            atom.contains(".sys.") || atom.contains(".gpu."),
            "atomic without an explicit scope: {atom}"
        );
        // Only the lock bits (device memory, device-wide contention) may be GPU-scoped.
        if atom.contains(".gpu.") {
            assert!(
                atom.starts_with("atom.relaxed.gpu.or.b32")
                    || atom.starts_with("atom.relaxed.gpu.and.b32"),
                "unexpected GPU-scoped atomic: {atom}"
            );
        }
    }
    assert!(atoms
        .iter()
        .any(|a| a.starts_with("atom.relaxed.gpu.or.b32")));
    assert!(atoms
        .iter()
        .any(|a| a.starts_with("atom.relaxed.gpu.and.b32")));

    let fences: Vec<&str> = instructions(&ptx)
        .filter(|l| l.starts_with("fence") || l.starts_with("membar"))
        .collect();
    assert!(!fences.is_empty());
    for fence in &fences {
        assert!(
            fence.starts_with("fence.acq_rel.sys") || fence.starts_with("fence.acq_rel.gpu"),
            "unexpected fence: {fence}"
        );
    }
    lock_fences_are_device_scope(&ptx);
    every_lane_fences_then_flips_the_outbox(&ptx);

    // Mailbox traffic: relaxed system-scope loads and stores, nothing narrower.
    let ordered: Vec<&str> = instructions(&ptx)
        .filter(|l| {
            (l.starts_with("ld.") || l.starts_with("st."))
                && [".relaxed", ".acquire", ".release"]
                    .iter()
                    .any(|s| l.contains(s))
        })
        .collect();
    assert!(ordered.iter().any(|l| l.starts_with("ld.relaxed.sys")));
    assert!(ordered.iter().any(|l| l.starts_with("st.relaxed.sys")));
    for access in &ordered {
        assert!(
            access.contains(".sys"),
            "mailbox access not system-scoped: {access}"
        );
    }

    // The client runs inside the device panic handler: it must not panic itself.
    assert!(!ptx.contains("panic"), "the client path can panic");

    if let Some(ptxas) = toolchain::find_ptxas() {
        let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gpu-probe.ptx");
        std::fs::write(&file, &ptx).unwrap();
        let cubin = file.with_extension("cubin");
        let status = Command::new(&ptxas)
            .args(["-arch=sm_70", "-o"])
            .arg(&cubin)
            .arg(&file)
            .status()
            .expect("run ptxas");
        assert!(status.success(), "ptxas rejected the probe's PTX");
    } else {
        available("ptxas", false);
    }
}

#[test]
fn amdgpu_client_path_builds_with_system_scope_fences() {
    let Some(toolchain) = nightly() else {
        return;
    };
    let asm = build_probe(&toolchain, "amdgcn-amd-amdhsa", &["-Ctarget-cpu=gfx90a"]);
    let code: Vec<&str> = instructions(&asm).collect();
    assert!(asm.contains("gpurun_probe_increment:"));
    assert!(asm.contains("gpurun_probe_stream:"));
    // gfx90a: a system-scope release writes back L2, a system-scope acquire invalidates it.
    assert!(
        code.iter().any(|l| l.starts_with("buffer_wbl2")),
        "no system-scope release"
    );
    assert!(
        code.iter().any(|l| l.starts_with("buffer_invl2")),
        "no system-scope acquire"
    );
    // Mailbox loads bypass the caches.
    assert!(code
        .iter()
        .any(|l| l.starts_with("flat_load_dword ") && l.ends_with("glc")));
    // The lock bits (at CLIENT_LOCK_OFFSET in the client global): `fetch_or`/`fetch_and` at
    // system scope (Rust cannot name device scope on amdgcn, crates/gpurun-rpc/src/sync.rs),
    // which LLVM lowers to a compare-and-swap loop on gfx90a, as it would at device scope.
    let lock_offset = format!("offset:{}", gpurun_rpc::layout::CLIENT_LOCK_OFFSET);
    let lock_updates: Vec<&&str> = code
        .iter()
        .filter(|l| l.starts_with("global_atomic") && l.contains(&lock_offset))
        .collect();
    assert!(!lock_updates.is_empty(), "no lock atomics");
    for update in &lock_updates {
        assert!(
            update.starts_with("global_atomic_cmpswap ") && update.ends_with(" glc"),
            "unexpected lock update: {update}"
        );
    }
    assert!(code.iter().any(|l| l.starts_with("v_readfirstlane_b32")));
    assert!(code.iter().any(|l| l.starts_with("v_mbcnt_hi_u32_b32")));
    assert!(code.iter().any(|l| l.starts_with("s_sleep 2")));
    // The doorbell: a counter increment and the interrupt on its 0 -> 1 edge.
    assert!(
        code.iter()
            .any(|l| l.starts_with("s_sendmsg sendmsg(MSG_INTERRUPT)")),
        "no doorbell interrupt"
    );
    assert!(
        !code.iter().any(|l| l.contains("panic")),
        "the client path can panic"
    );
}
