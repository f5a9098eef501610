//! Agents: listing them with what `cargo gpurun info` and the build need (name, `gfxNNN`,
//! wavefront size), and opening a GPU agent together with a CPU agent and their memory pools.

use super::driver::{calls, HsaError};
use super::driver::{runtime, runtime_message};
use super::memory::{find_pools, Pools};
use super::runtime::Runtime;
use crate::{BackendError, BackendKind, DeviceInfo};
use hsa_sys::*;
use std::sync::Arc;

/// What we know about one agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AgentInfo {
    pub agent: hsa_agent_t,
    pub device_type: hsa_device_type_t,
    /// `HSA_AGENT_INFO_NAME`: `gfx90a` for GPUs, the CPU's model for CPUs.
    pub name: String,
    /// `HSA_AMD_AGENT_INFO_PRODUCT_NAME` (`AMD Instinct MI210`), when the runtime has it.
    pub product_name: Option<String>,
    /// Full ISA name of the first ISA (`amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`).
    pub isa: Option<String>,
    pub wavefront_size: u32,
    pub kernel_dispatch: bool,
    /// Waves the GPU can hold at once (compute units x waves per CU); 0 when unknown.
    pub max_resident_waves: u32,
}

impl AgentInfo {
    pub(crate) fn is_dispatch_gpu(&self) -> bool {
        self.device_type == HSA_DEVICE_TYPE_GPU && self.kernel_dispatch
    }

    /// `gfxNNN`: from the ISA name, else the agent name when it looks like one.
    pub(crate) fn arch(&self) -> Option<String> {
        self.isa
            .as_deref()
            .and_then(arch_from_isa_name)
            .or_else(|| arch_from_isa_name(&self.name))
    }
}

/// `gfx90a` from an ISA name such as `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-` (or from a bare
/// `gfx1100`). Target features after `:` are dropped: the build passes them separately.
pub fn arch_from_isa_name(isa: &str) -> Option<String> {
    let processor = isa.rsplit("--").next().unwrap_or(isa);
    let processor = processor.split(':').next().unwrap_or(processor).trim();
    let digits = processor.strip_prefix("gfx")?;
    let valid = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_hexdigit());
    valid.then(|| processor.to_owned())
}

/// Every agent the runtime reports, in its order.
pub(crate) fn list_agents(runtime: &Runtime) -> Result<Vec<AgentInfo>, HsaError> {
    let lib = runtime.lib();
    calls::agents(lib)?
        .into_iter()
        .map(|agent| agent_info(lib, agent))
        .collect()
}

/// A fixed-size C string attribute (`char[64]`) as text.
fn agent_string(lib: &HsaLib, agent: hsa_agent_t, attribute: u32) -> Option<String> {
    let mut bytes = [0u8; 64];
    // SAFETY: NAME, VENDOR_NAME and AMD's PRODUCT_NAME are `char[64]`, the buffer's size.
    unsafe { calls::agent_info_into(lib, agent, attribute, bytes.as_mut_slice()) }.ok()?;
    let text = c_text(&bytes);
    (!text.is_empty()).then_some(text)
}

/// The text before the first NUL (all of it when there is none), lossily decoded.
pub(crate) fn c_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).trim().to_owned()
}

fn agent_info(lib: &HsaLib, agent: hsa_agent_t) -> Result<AgentInfo, HsaError> {
    // SAFETY: DEVICE is an hsa_device_type_t (32-bit enum).
    let device_type: u32 = unsafe { calls::agent_info(lib, agent, HSA_AGENT_INFO_DEVICE) }?;
    // SAFETY: FEATURE is an hsa_agent_feature_t bit mask (32-bit enum).
    let features: u32 = unsafe { calls::agent_info(lib, agent, HSA_AGENT_INFO_FEATURE) }?;
    let wavefront_size: u32 = if device_type == HSA_DEVICE_TYPE_GPU {
        // SAFETY: WAVEFRONT_SIZE is a uint32_t.
        unsafe { calls::agent_info(lib, agent, HSA_AGENT_INFO_WAVEFRONT_SIZE) }?
    } else {
        1
    };
    let name = agent_string(lib, agent, HSA_AGENT_INFO_NAME).unwrap_or_default();
    let product_name = if device_type == HSA_DEVICE_TYPE_GPU {
        agent_string(lib, agent, HSA_AMD_AGENT_INFO_PRODUCT_NAME)
    } else {
        None
    };
    let max_resident_waves = if device_type == HSA_DEVICE_TYPE_GPU {
        // SAFETY: COMPUTE_UNIT_COUNT and MAX_WAVES_PER_CU are uint32_t.
        let units: u32 =
            unsafe { calls::agent_info(lib, agent, HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT) }
                .unwrap_or(0);
        // SAFETY: as above.
        let waves: u32 =
            unsafe { calls::agent_info(lib, agent, HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU) }
                .unwrap_or(0);
        units.saturating_mul(waves)
    } else {
        0
    };
    let isa = if device_type == HSA_DEVICE_TYPE_GPU {
        first_isa_name(lib, agent)
    } else {
        None
    };
    Ok(AgentInfo {
        agent,
        device_type,
        name,
        product_name,
        isa,
        wavefront_size,
        kernel_dispatch: features & HSA_AGENT_FEATURE_KERNEL_DISPATCH != 0,
        max_resident_waves,
    })
}

fn first_isa_name(lib: &HsaLib, agent: hsa_agent_t) -> Option<String> {
    let isa = *calls::agent_isas(lib, agent).ok()?.first()?;
    let mut length = 0u32;
    // SAFETY: NAME_LENGTH is a uint32_t.
    unsafe { calls::isa_info(lib, isa, HSA_ISA_INFO_NAME_LENGTH, &mut length) }.ok()?;
    // Bound what we trust from the runtime: ISA names are a few dozen bytes.
    let length = usize::try_from(length).ok()?.min(4096);
    let mut name = vec![0u8; length + 1];
    // SAFETY: NAME writes NAME_LENGTH bytes (including any NUL); the buffer has one spare.
    unsafe { calls::isa_info(lib, isa, HSA_ISA_INFO_NAME, name.as_mut_slice()) }.ok()?;
    Some(c_text(&name))
}

/// The GPU agents that can run kernels, numbered as `--device N` counts them.
pub(crate) fn dispatch_gpus(agents: &[AgentInfo]) -> Vec<&AgentInfo> {
    agents
        .iter()
        .filter(|agent| agent.is_dispatch_gpu())
        .collect()
}

/// What `info` prints for GPU number `ordinal`.
pub(crate) fn device_info(
    ordinal: usize,
    agent: &AgentInfo,
    memory_bytes: Option<u64>,
    driver: Option<String>,
) -> DeviceInfo {
    let arch = agent.arch().unwrap_or_else(|| agent.name.clone());
    let name = match &agent.product_name {
        Some(product) if !product.is_empty() => product.clone(),
        _ => agent.name.clone(),
    };
    DeviceInfo {
        backend: BackendKind::Hsa,
        ordinal,
        name,
        arch,
        lane_size: agent.wavefront_size,
        memory_bytes,
        driver,
    }
}

/// An opened GPU: the runtime, the GPU agent, a CPU agent for host memory, and the pools.
pub(crate) struct Opened {
    pub runtime: Arc<Runtime>,
    pub gpu: AgentInfo,
    pub cpu: AgentInfo,
    pub pools: Pools,
    pub info: DeviceInfo,
}

/// The CPU agent whose memory pools hold a GPU's host memory (kernel arguments, the RPC buffer):
/// the GPU's nearest (`nearest`, where the runtime says), so that on a server with several
/// sockets the GPU reads its RPC buffer from the socket it hangs off, else the first CPU agent,
/// as LLVM's loader takes.
pub(crate) fn host_agent(agents: &[AgentInfo], nearest: Option<hsa_agent_t>) -> Option<&AgentInfo> {
    let cpus = || {
        agents
            .iter()
            .filter(|agent| agent.device_type == HSA_DEVICE_TYPE_CPU)
    };
    nearest
        .and_then(|nearest| cpus().find(|agent| agent.agent == nearest))
        .or_else(|| cpus().next())
}

/// Opens GPU number `ordinal`, as LLVM's loader does: the GPU agent with kernel dispatch, its
/// nearest CPU agent ([`host_agent`]), a kernarg and a fine-grained pool on the CPU, a
/// coarse-grained pool on the GPU.
pub(crate) fn open(runtime: Arc<Runtime>, ordinal: usize) -> Result<Opened, BackendError> {
    let agents = list_agents(&runtime).map_err(runtime_err)?;
    let gpus = dispatch_gpus(&agents);
    let gpu = gpus
        .get(ordinal)
        .map(|agent| (*agent).clone())
        .ok_or_else(|| {
            runtime_message(format!(
            "no AMD GPU number {ordinal}: the runtime lists {} GPU agent(s) with kernel dispatch",
            gpus.len()
        ))
        })?;
    if gpu.wavefront_size != 32 && gpu.wavefront_size != 64 {
        return Err(runtime_message(format!(
            "GPU agent {} reports a wavefront size of {}; the RPC layout supports 32 and 64",
            gpu.name, gpu.wavefront_size
        )));
    }
    // SAFETY: NEAREST_CPU is an hsa_agent_t. Runtimes before ROCm 6 do not know it.
    let nearest: Option<hsa_agent_t> =
        unsafe { calls::agent_info(runtime.lib(), gpu.agent, HSA_AMD_AGENT_INFO_NEAREST_CPU) }.ok();
    let cpu = host_agent(&agents, nearest)
        .cloned()
        .ok_or_else(|| runtime_message("the runtime lists no CPU agent for host memory"))?;
    let pools = find_pools(runtime.lib(), cpu.agent, gpu.agent)?;
    let info = device_info(ordinal, &gpu, pools.device_memory_bytes, runtime.version());
    Ok(Opened {
        runtime,
        gpu,
        cpu,
        pools,
        info,
    })
}

fn runtime_err(error: HsaError) -> BackendError {
    runtime(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(name: &str, isa: Option<&str>, dispatch: bool) -> AgentInfo {
        AgentInfo {
            agent: hsa_agent_t { handle: 7 },
            device_type: HSA_DEVICE_TYPE_GPU,
            name: name.into(),
            product_name: Some("AMD Instinct MI210".into()),
            isa: isa.map(Into::into),
            wavefront_size: 64,
            kernel_dispatch: dispatch,
            max_resident_waves: 104 * 32,
        }
    }

    #[test]
    fn arch_comes_from_the_isa_name() {
        assert_eq!(
            arch_from_isa_name("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-").as_deref(),
            Some("gfx90a")
        );
        assert_eq!(
            arch_from_isa_name("amdgcn-amd-amdhsa--gfx1100").as_deref(),
            Some("gfx1100")
        );
        assert_eq!(arch_from_isa_name("gfx942").as_deref(), Some("gfx942"));
        assert_eq!(arch_from_isa_name("AMD EPYC 7763"), None);
        assert_eq!(arch_from_isa_name("gfx"), None);
        assert_eq!(arch_from_isa_name(""), None);
    }

    #[test]
    fn arch_falls_back_to_the_agent_name() {
        assert_eq!(
            gpu("gfx1030", None, true).arch().as_deref(),
            Some("gfx1030")
        );
        assert_eq!(
            gpu("gfx1030", Some("amdgcn-amd-amdhsa--gfx90a"), true)
                .arch()
                .as_deref(),
            Some("gfx90a")
        );
    }

    #[test]
    fn only_dispatch_gpus_are_devices() {
        let mut cpu = gpu("AMD EPYC", None, false);
        cpu.device_type = HSA_DEVICE_TYPE_CPU;
        let agents = vec![cpu, gpu("gfx90a", None, false), gpu("gfx942", None, true)];
        let gpus = dispatch_gpus(&agents);
        assert_eq!(gpus.len(), 1);
        assert_eq!(gpus[0].name, "gfx942");
    }

    #[test]
    fn device_info_uses_product_name_and_wavefront() {
        let info = device_info(
            0,
            &gpu("gfx90a", Some("amdgcn-amd-amdhsa--gfx90a:xnack-"), true),
            Some(64 << 30),
            Some("HSA 1.1".into()),
        );
        assert_eq!(info.name, "AMD Instinct MI210");
        assert_eq!(info.arch, "gfx90a");
        assert_eq!(info.lane_size, 64);
        assert_eq!(info.backend, BackendKind::Hsa);
    }

    #[test]
    fn host_memory_comes_from_the_gpus_nearest_cpu() {
        let cpu = |handle: u64| AgentInfo {
            agent: hsa_agent_t { handle },
            device_type: HSA_DEVICE_TYPE_CPU,
            ..gpu("AMD EPYC", None, false)
        };
        let agents = vec![cpu(1), cpu(2), gpu("gfx942", None, true)];
        let nearest = |handle| host_agent(&agents, handle).map(|agent| agent.agent.handle);
        assert_eq!(nearest(Some(hsa_agent_t { handle: 2 })), Some(2));
        assert_eq!(nearest(None), Some(1), "older runtimes: the first CPU");
        assert_eq!(
            nearest(Some(hsa_agent_t { handle: 7 })),
            Some(1),
            "an answer that is no CPU agent is not taken"
        );
        assert_eq!(host_agent(&agents[2..], None), None);
    }

    #[test]
    fn c_text_stops_at_nul() {
        assert_eq!(c_text(b"gfx90a\0\0junk"), "gfx90a");
        assert_eq!(c_text(b"no-nul"), "no-nul");
    }
}
