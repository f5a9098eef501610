//! LLVM libc's host call (`HOST_CALL`, and liboffload's `OFFLOAD_HOST_CALL`, the same protocol):
//! the device sends an argument blob and a host function's address, the host calls the function
//! with its own copy of the blob and sends back the `u64` it returned.
//!
//! The address is only ever a key into the module's [`HostFunctions`]: a function the host
//! program registered runs; any other value ends the launch with an error naming it. A number
//! from the device is never called as a pointer (LLVM's server does, trusting the device).

use super::{recv_lanes, Fail, Served, MAX_WRITE};
use gpurun_rpc::server::{Server, ServerPort};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// A host function the device may call: takes the device's argument bytes, returns a `u64`.
pub type HostFn = dyn Fn(&[u8]) -> u64 + Send + Sync;

/// The host functions a module's device code may call, by the key each was registered under.
/// Clones share one table, so functions registered after a module loaded are callable from
/// its next launch.
#[derive(Clone, Default)]
pub struct HostFunctions {
    table: Arc<RwLock<HashMap<u64, Arc<HostFn>>>>,
}

impl std::fmt::Debug for HostFunctions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        write!(f, "HostFunctions({count} registered)")
    }
}

/// Keys are unique in the process and look like no host address (`0x6770...`, "gp"), so a
/// device that sends a stray pointer gets a clear error rather than a random function.
static NEXT_KEY: AtomicU64 = AtomicU64::new(0x6770_0000_0000_0001);

impl HostFunctions {
    /// Registers `function` and returns the key device code calls it by
    /// (`gpurun::host::call(key, bytes)`).
    pub fn register(&self, function: impl Fn(&[u8]) -> u64 + Send + Sync + 'static) -> u64 {
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        self.table
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, Arc::new(function));
        key
    }

    fn get(&self, key: u64) -> Option<Arc<HostFn>> {
        self.table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned()
    }
}

/// HOST_CALL: C→ send_n(argument blob); C→ `data[0]` = the function's key; ←S `data[0]` = what
/// it returned. Every lane of the request calls with its own blob and key.
pub(crate) fn call(
    server: &Server,
    functions: &HostFunctions,
    port: &mut ServerPort<'_>,
) -> Result<Served, Fail> {
    let blobs = recv_lanes(server, port, MAX_WRITE)?;
    let mut keys = [0u64; 64];
    port.recv(|buffer, lane| keys[lane as usize] = buffer.data[0])?;
    let mut results = [0u64; 64];
    for (lane, blob) in &blobs {
        let key = keys[*lane as usize];
        let Some(function) = functions.get(key) else {
            return Err(Fail::Protocol(format!(
                "the device called host function {key:#x}, which the host did not register: \
                 device code calls only what the host program registered (gpurun-test's \
                 `Gpu::host_function`), by the key it got back"
            )));
        };
        // A panic in the user's function must not unwind through the server.
        results[*lane as usize] =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| function(blob)))
                .map_err(|_| Fail::Protocol(format!("host function {key:#x} panicked")))?;
    }
    port.send(|buffer, lane| buffer.data[0] = results[lane as usize])?;
    Ok(Served::Handled)
}
