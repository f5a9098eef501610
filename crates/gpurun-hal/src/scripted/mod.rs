//! The scripted backend: a device that plays back what a [`Script`] says each kernel does
//! (print, panic, exit, abort, fault, hang, stall in the middle of a message, crash), talking
//! RPC through the real client over the real buffer, like wgpu-hal's no-op backend but with
//! behaviour. It needs no driver, no fixture and no nightly, so the serve loop, the worker
//! protocol, the pool and the retry policy have fast tests of every way a launch can end.
//!
//! A worker picks it with `--backend scripted` and reads the script (JSON) from the file named
//! by [`SCRIPT_ENV`]; the image must still parse (its tests are what the runner schedules).

mod image;
mod launch;
mod primitives;

pub use image::{test, ImageSpec};

use crate::module::{LoadPrimitives, Loaded, OpenedDevice};
use crate::{Backend, BackendError, BackendKind, Device, DeviceInfo, LoadOptions};
use gpurun_image::Image;
use std::collections::HashMap;
use std::sync::Arc;

/// Environment variable naming the JSON script a scripted worker plays.
pub const SCRIPT_ENV: &str = "GPURUN_SCRIPT";

/// What one kernel does, step by step, on one emulated thread.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Writes the text to stdout over RPC.
    Print(String),
    /// Writes the text to stderr over RPC.
    Eprint(String),
    /// Reports a panic over RPC (as the device runtime does), then ends the thread.
    Panic {
        message: String,
        file: String,
        line: u32,
    },
    /// Asks the host to exit with this status, then ends the thread.
    Exit(i32),
    /// Asks the host to abort, then ends the thread.
    Abort,
    /// The device faults with this text (as a driver would report it).
    Fault(String),
    /// The device faults with this text, and the fault is recorded for the whole process, as
    /// the HSA backend's event handler records GPU memory faults: every launch of the process
    /// that is running or starts afterwards ends faulted with it, in every slot.
    ProcessFault(String),
    /// Never ends.
    Hang,
    /// Starts a message announcing this many bytes and never sends the rest (the thread goes on
    /// with its next step).
    StallMidMessage(u64),
    /// Plays these steps on another device thread, beside this one; the launch ends when every
    /// thread has.
    Thread(Vec<Step>),
    /// Sleeps this many milliseconds.
    SleepMs(u64),
    /// Allocates this many bytes over RPC MALLOC and frees them again.
    MallocFree(u64),
    /// Ends the worker process at once (a crash the worker cannot report).
    Crash,
}

/// What every kernel of the image does. A kernel the script does not name completes at once.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Script {
    pub kernels: HashMap<String, Vec<Step>>,
    /// Devices the backend shows.
    #[serde(default = "one")]
    pub devices: usize,
    /// The most threads per block a kernel takes, where it is limited (as registers limit it
    /// on CUDA).
    #[serde(default)]
    pub max_block_threads: HashMap<String, u64>,
    /// The most dynamic shared memory per block a kernel takes, where it is limited.
    #[serde(default)]
    pub max_shared_bytes: HashMap<String, u64>,
}

fn one() -> usize {
    1
}

impl Default for Script {
    /// One device; every kernel completes at once.
    fn default() -> Script {
        Script {
            kernels: HashMap::new(),
            devices: one(),
            max_block_threads: HashMap::new(),
            max_shared_bytes: HashMap::new(),
        }
    }
}

impl Script {
    /// Reads the script named by [`SCRIPT_ENV`].
    pub fn from_env() -> Result<Script, BackendError> {
        let path = std::env::var_os(SCRIPT_ENV).ok_or_else(|| {
            BackendError::NotAvailable(format!(
                "the scripted backend needs a script: set {SCRIPT_ENV} to a JSON file"
            ))
        })?;
        let text = std::fs::read_to_string(&path).map_err(|source| BackendError::Io {
            context: format!("failed to read the script `{}`", path.to_string_lossy()),
            source,
        })?;
        serde_json::from_str(&text).map_err(|error| {
            BackendError::InvalidArgument(format!(
                "bad script `{}`: {error}",
                path.to_string_lossy()
            ))
        })
    }
}

/// The scripted backend over one script.
#[derive(Clone, Debug)]
pub struct ScriptedBackend {
    /// The script, or why there is none (reported when a device is asked for).
    script: Result<Arc<Script>, String>,
}

impl ScriptedBackend {
    pub fn new(script: Script) -> ScriptedBackend {
        ScriptedBackend {
            script: Ok(Arc::new(script)),
        }
    }

    /// The backend of a scripted worker: the script named by [`SCRIPT_ENV`].
    pub fn from_env() -> ScriptedBackend {
        ScriptedBackend {
            script: Script::from_env()
                .map(Arc::new)
                .map_err(|error| error.to_string()),
        }
    }

    fn script(&self) -> Result<&Arc<Script>, BackendError> {
        self.script
            .as_ref()
            .map_err(|error| BackendError::NotAvailable(error.clone()))
    }

    fn info(ordinal: usize) -> DeviceInfo {
        let name = format!("scripted device {ordinal}");
        DeviceInfo::on_host(BackendKind::Scripted, ordinal, name, 1)
    }
}

impl Backend for ScriptedBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Scripted
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        Ok((0..self.script()?.devices).map(Self::info).collect())
    }

    fn open(&self, ordinal: usize) -> Result<Box<dyn Device>, BackendError> {
        let script = self.script()?;
        if ordinal >= script.devices {
            return Err(BackendError::InvalidArgument(format!(
                "the script has {} devices; there is no device {ordinal}",
                script.devices
            )));
        }
        let loader = ScriptedLoader {
            script: Arc::clone(script),
        };
        Ok(OpenedDevice::boxed(Self::info(ordinal), loader))
    }
}

/// "Loads" images whose kernels play the script.
struct ScriptedLoader {
    script: Arc<Script>,
}

impl LoadPrimitives for ScriptedLoader {
    type Primitives = primitives::ScriptedPrimitives;

    fn primitives(&mut self, image: &Image, _: &LoadOptions) -> Loaded<Self> {
        Ok(primitives::ScriptedPrimitives::new(
            Arc::clone(&self.script),
            image,
        ))
    }
}

#[cfg(test)]
mod tests;
