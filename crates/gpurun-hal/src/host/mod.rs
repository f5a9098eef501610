//! Host emulation backend: runs the device crate built for the host (a `.so`) on CPU threads,
//! with the same RPC protocol, opcodes and exit codes as a GPU.
//!
//! Internals: the worker `dlopen`s the image once. Each launch runs every device thread on an OS
//! thread of the module's pool (`launch`; threads are kept between launches), after telling
//! the image who the thread is through `__gpurun_host_enter_thread`; the calling thread
//! meanwhile serves RPC over a zeroed buffer whose client object was copied into the image's
//! `__llvm_rpc_client`. Each emulated thread talks over RPC alone, in its own lane slot (lane
//! size 1, 32 or 64), so the server's multi-lane paths run with partial masks. A crash in
//! device code kills the worker process, never the harness.

mod arena;
mod checks;
mod launch;
pub(crate) mod memory;
mod primitives;
mod symbols;
mod warp;

use crate::module::{LoadPrimitives, Loaded, OpenedDevice};
use crate::{Backend, BackendError, BackendKind, Device, DeviceInfo, LoadOptions};
use gpurun_image::Image;

/// The host CPU as an emulated device.
pub struct HostBackend;

/// Environment variable that makes the host backend show this many devices (1 to
/// [`MAX_HOST_DEVICES`]; default 1), all the same CPU: lets the spreading of tests across
/// devices be exercised without several GPUs.
pub const HOST_DEVICES_ENV: &str = "GPURUN_HOST_DEVICES";

/// Most emulated devices [`HOST_DEVICES_ENV`] may ask for.
pub const MAX_HOST_DEVICES: usize = 64;

/// The most dynamic shared memory a block gets on the host emulation: 64 KiB, the smallest
/// limit among the GPUs the project targets (an AMD workgroup's LDS on gfx9 and gfx11, and a
/// block on sm_75; other NVIDIA GPUs from sm_70 on give 96 KiB or more once the kernel opts in,
/// which the CUDA backend does), so a launch that runs here fits every one of them.
pub const MAX_SHARED_BYTES: u64 = 64 * 1024;

/// Environment variable with the host emulation's seed (a number) when the caller gives none
/// (`LoadOptions::emulation_seed`); `cargo gpurun --emulation-seed` sets the same.
pub const EMULATION_SEED_ENV: &str = "GPURUN_EMULATION_SEED";

/// A seed that differs from run to run: what the emulation uses when none is given.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    // Small enough to type back in.
    checks::splitmix64(nanos ^ u64::from(std::process::id()) << 32) % 1_000_000_000
}

/// The line a failing test on the host emulation shows: its seed, to run it the same way again.
pub fn seed_note(seed: u64) -> String {
    format!(
        "note: host emulation seed {seed} (`--emulation-seed {seed}` or \
         {EMULATION_SEED_ENV}={seed} runs it with the same poison, block order and yields)"
    )
}

/// A seed as `--emulation-seed` or [`EMULATION_SEED_ENV`] gives it.
pub fn parse_seed(text: &str) -> Result<u64, String> {
    text.trim().parse().map_err(|_| {
        format!(
            "an emulation seed is a number from 0 to {}, not `{text}`",
            u64::MAX
        )
    })
}

/// The seed a load uses: the one given, else [`EMULATION_SEED_ENV`]'s, else a fresh one.
fn seed_of(given: Option<u64>) -> Result<u64, BackendError> {
    if let Some(seed) = given {
        return Ok(seed);
    }
    match std::env::var(EMULATION_SEED_ENV) {
        Ok(text) => parse_seed(&text).map_err(|error| {
            BackendError::InvalidArgument(format!("{EMULATION_SEED_ENV}: {error}"))
        }),
        Err(_) => Ok(fresh_seed()),
    }
}

fn host_device_count() -> Result<usize, BackendError> {
    let Some(value) = std::env::var_os(HOST_DEVICES_ENV) else {
        return Ok(1);
    };
    let text = value.to_string_lossy();
    match text.trim().parse::<usize>() {
        Ok(count @ 1..=MAX_HOST_DEVICES) => Ok(count),
        _ => Err(BackendError::InvalidArgument(format!(
            "{HOST_DEVICES_ENV} must be a number from 1 to {MAX_HOST_DEVICES}, not `{text}`"
        ))),
    }
}

fn host_info(ordinal: usize) -> DeviceInfo {
    let name = format!("host CPU emulation ({})", std::env::consts::ARCH);
    DeviceInfo::on_host(BackendKind::Host, ordinal, name, 32)
}

impl Backend for HostBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Host
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        Ok((0..host_device_count()?).map(host_info).collect())
    }

    fn open(&self, ordinal: usize) -> Result<Box<dyn Device>, BackendError> {
        let count = host_device_count()?;
        if ordinal >= count {
            return Err(BackendError::InvalidArgument(match count {
                1 => format!("the host backend has one device (0), not {ordinal}"),
                _ => format!(
                    "the host backend has {count} devices (0 to {}), not {ordinal}",
                    count - 1
                ),
            }));
        }
        Ok(OpenedDevice::boxed(host_info(ordinal), HostLoader))
    }
}

/// Loads host images (with `dlopen`).
struct HostLoader;

impl LoadPrimitives for HostLoader {
    type Primitives = primitives::HostPrimitives;

    fn primitives(&mut self, image: &Image, opts: &LoadOptions) -> Loaded<Self> {
        primitives::HostPrimitives::load(image, opts)
    }
}
