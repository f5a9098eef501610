//! What an amdgcn build adds for one architecture, beyond the flags every amdgcn build gets
//! ([`crate::validate::AMDGCN_RUSTFLAGS`]): the device runtime's barrier form, and the
//! workaround that lets gfx1100-gfx1103 (RDNA3, wave32) build in debug.
//!
//! **Barrier scope.** Rust has no workgroup-scope fences, so the device runtime's `barrier()`
//! takes its form from `--cfg` [`WORKGROUP_IN_ONE_CU_CFG`], given for the gfx9 family, where a
//! workgroup runs on one compute unit and shares its vector L1 (docs/abi.md, "AMDGPU code
//! objects").
//!
//! **gfx1100-gfx1103 in debug.** On these processors LLVM 22 lowers a trap with the "simulated
//! trap" sequence (`s_trap 2` is a no-op there with PRIV=1), and its lowering skips the blocks
//! between a trap that ends a block and the end of the function: their pseudo instructions
//! (calls among them) reach the encoder unexpanded, and rustc stops with `LLVM ERROR:
//! Unsupported instruction : <MCInst ...>` (llvm/llvm-project#208912, fixed upstream by #174774,
//! not in LLVM 22.1). Unoptimized code has many such traps: rustc turns every `unreachable`
//! terminator into one (`-Z trap-unreachable`, on by default), and `compiler_builtins` turns
//! its overflow-check panics into traps. So builds for these processors pass
//! `-Ztrap-unreachable=no` (an `unreachable` the program never reaches needs no trap; one it
//! does reach was undefined behaviour already) and build `compiler_builtins` without overflow
//! checks and debug assertions, as the Rust project ships it. An explicit trap
//! (`core::intrinsics::abort`) in the middle of a function can still hit the LLVM bug on these
//! processors; the device runtime has none (a panic ends the wavefront with `s_endpgm`).
//! Other processors (gfx90a, gfx942, gfx1030, gfx1150-gfx1153, gfx12) do not use the
//! simulated trap and build unchanged.

/// The `--cfg` that makes the device runtime's `barrier()` a workgroup-scope barrier
/// (`s_waitcnt 0; s_barrier` between compiler fences) instead of one with system-scope fences.
pub const WORKGROUP_IN_ONE_CU_CFG: &str = "gpurun_amdgpu_workgroup_in_one_cu";

/// Processors whose LLVM 22 trap lowering breaks unoptimized builds (see the module docs).
pub const SIMULATED_TRAP_ARCHES: &[&str] = &["gfx1100", "gfx1101", "gfx1102", "gfx1103"];

/// The processor name of an `--arch` value: `gfx90a` of `gfx90a:xnack-`.
fn processor(arch: &str) -> &str {
    arch.split(':').next().unwrap_or(arch)
}

/// A gfx9 processor (gfx900 ... gfx950): one workgroup runs on one compute unit.
pub fn runs_workgroup_in_one_cu(arch: &str) -> bool {
    let processor = processor(arch);
    processor.len() == "gfx9xx".len() && processor.starts_with("gfx9")
}

/// Whether `arch` needs the debug-build workaround for LLVM's simulated trap.
pub fn needs_simulated_trap_workaround(arch: &str) -> bool {
    SIMULATED_TRAP_ARCHES.contains(&processor(arch))
}

/// Rustflags for every crate of an amdgcn build for `arch`.
pub fn arch_rustflags(arch: &str) -> Vec<String> {
    let mut flags = Vec::new();
    if runs_workgroup_in_one_cu(arch) {
        flags.push("--cfg".to_owned());
        flags.push(WORKGROUP_IN_ONE_CU_CFG.to_owned());
    }
    if needs_simulated_trap_workaround(arch) {
        flags.push("-Ztrap-unreachable=no".to_owned());
    }
    flags
}

/// `cargo --config` values for profile `profile` of an amdgcn build for `arch`.
pub fn arch_profile_config(arch: &str, profile: &str) -> Vec<String> {
    if !needs_simulated_trap_workaround(arch) {
        return Vec::new();
    }
    ["overflow-checks", "debug-assertions"]
        .iter()
        .map(|setting| format!("profile.{profile}.package.compiler_builtins.{setting}=false"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gfx9_gets_the_workgroup_barrier_and_nothing_else() {
        for arch in ["gfx90a", "gfx942", "gfx908", "gfx90a:xnack-", "gfx950"] {
            assert_eq!(
                arch_rustflags(arch),
                ["--cfg", WORKGROUP_IN_ONE_CU_CFG],
                "{arch}"
            );
            assert!(arch_profile_config(arch, "dev").is_empty(), "{arch}");
        }
    }

    #[test]
    fn rdna3_desktop_parts_get_the_trap_workaround() {
        for arch in ["gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1100:xnack-"] {
            assert_eq!(arch_rustflags(arch), ["-Ztrap-unreachable=no"], "{arch}");
            assert_eq!(
                arch_profile_config(arch, "dev"),
                [
                    "profile.dev.package.compiler_builtins.overflow-checks=false",
                    "profile.dev.package.compiler_builtins.debug-assertions=false",
                ],
                "{arch}"
            );
        }
    }

    #[test]
    fn other_processors_build_unchanged() {
        for arch in ["gfx1030", "gfx1150", "gfx1200", "gfx1201", "gfx9"] {
            assert!(arch_rustflags(arch).is_empty(), "{arch}");
            assert!(arch_profile_config(arch, "release").is_empty(), "{arch}");
        }
    }
}
