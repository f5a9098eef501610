//! A host image loaded with `dlopen`: the primitives of the host emulation.

use super::arena::Arena;
use super::launch::{
    CheckedMemory, Entry, Grid, KernelFn, LaunchSetting, Registers, ThreadPool, FLOAT_REGISTERS,
    INTEGER_REGISTERS,
};
use super::memory::HostMemory;
use crate::handlers::DeviceMemory;
use crate::kernel_args::{KernelArg, Register};
use crate::module::{Primitives, Started};
use crate::{BackendError, LaunchShape, LoadOptions, SharedAlloc};
use gpurun_abi::host::{EnterThread, HostChecks};
use gpurun_abi::symbols;
use gpurun_image::{Image, ImageKind};
use gpurun_rpc::host_waits::ServerWaker;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Stack of each emulated thread unless the user asks for another size.
const DEFAULT_STACK: usize = 1 << 20;

pub(crate) struct HostPrimitives {
    // Field order matters: the pool's threads end (joined on drop) before the memory they may
    // still touch is freed (the last thread of a launch wakes the server through the host
    // waits block after the serve loop may already have seen it finish), and the library they
    // ran is unloaded last.
    /// The emulated threads, reused by every launch of this module.
    pool: ThreadPool,
    memory: HostMemory,
    /// The host's buffers (`alloc_device`), apart from the RPC heap in `memory`, so that a
    /// device `free` cannot release them.
    buffers: HostMemory,
    lane_size: u32,
    /// The checked memory, when the image is built for the memory checks and they are on.
    arena: Option<&'static Arena>,
    /// The seed of the run (`LoadOptions::emulation_seed`), and how often each kernel has been
    /// launched: a launch's seed comes from both, so it does not depend on what else ran.
    seed: u64,
    launches: HashMap<String, u64>,
    /// Wakes the serve loop when a launch's last thread returns (set with the host waits block).
    server_waker: Option<ServerWaker>,
    enter: EnterThread,
    globals: HashMap<String, u64>,
    library: libloading::Library,
    /// Released after the library is unloaded.
    _file_claim: FileClaim,
}

/// Host image files that a live module of this process loaded straight from the file. The
/// dynamic loader shares one instance of a library among all loads of one file, and with it the
/// image's globals (the RPC client among them), so a second live load of a file loads a private
/// copy instead: each module has its own, as on a GPU.
static LOADED_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Each private copy loaded in this process, with the file it copies (the copy's name is removed
/// once the library is mapped; what reads the image's line tables reads the original).
static COPIES: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());

/// The file `path` is a private copy of, else `path` itself.
pub(crate) fn original_of(path: PathBuf) -> PathBuf {
    let copies = COPIES.lock().unwrap_or_else(PoisonError::into_inner);
    match copies.iter().find(|(copy, _)| *copy == path) {
        Some((_, original)) => original.clone(),
        None => path,
    }
}

/// A module's hold on its file in [`LOADED_FILES`], if it loaded the file itself.
struct FileClaim(Option<PathBuf>);

impl Drop for FileClaim {
    fn drop(&mut self) {
        if let Some(file) = self.0.take() {
            let mut loaded = LOADED_FILES.lock().unwrap_or_else(PoisonError::into_inner);
            loaded.retain(|held| *held != file);
        }
    }
}

/// Loads the library at `path` (absolute), or a private copy of it when a live module of this
/// process holds the file.
fn open_library(path: &Path) -> Result<(libloading::Library, FileClaim), BackendError> {
    let open = |file: &Path| {
        // SAFETY: loading runs the image's initialisers; the image is a device crate built for
        // the host by cargo-gpurun (checked by `gpurun-image`).
        unsafe { libloading::Library::new(file) }.map_err(|error| {
            BackendError::Incompatible(format!("failed to load `{}`: {error}", path.display()))
        })
    };
    let claimed = {
        let mut loaded = LOADED_FILES.lock().unwrap_or_else(PoisonError::into_inner);
        let free = !loaded.iter().any(|held| held == path);
        if free {
            loaded.push(path.to_path_buf());
        }
        free
    };
    if claimed {
        // The claim is released on the way out if loading fails.
        let claim = FileClaim(Some(path.to_path_buf()));
        return Ok((open(path)?, claim));
    }
    static NEXT_COPY: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let copy = std::env::temp_dir().join(format!(
        "gpurun-{}-{}-{name}",
        std::process::id(),
        NEXT_COPY.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::copy(path, &copy).map_err(|source| BackendError::Io {
        context: format!(
            "failed to copy `{}` to `{}` for a second load",
            path.display(),
            copy.display()
        ),
        source,
    })?;
    let library = open(&copy);
    // Mapped, or not loadable: the name is no longer needed either way.
    let _ = std::fs::remove_file(&copy);
    if library.is_ok() {
        let mut copies = COPIES.lock().unwrap_or_else(PoisonError::into_inner);
        copies.push((copy, path.to_path_buf()));
    }
    Ok((library?, FileClaim(None)))
}

impl HostPrimitives {
    pub fn load(image: &Image, options: &LoadOptions) -> Result<HostPrimitives, BackendError> {
        if image.kind() != ImageKind::Host {
            return Err(BackendError::Incompatible(format!(
                "the host backend runs images built for the host, not {}",
                image.kind().describe()
            )));
        }
        let Some(path) = image.path() else {
            return Err(BackendError::InvalidArgument(
                "a host image must be loaded from a file".into(),
            ));
        };
        let lane_size = options.emulated_lane_size;
        if !matches!(lane_size, 1 | 32 | 64) {
            return Err(BackendError::InvalidArgument(format!(
                "emulated lane size must be 1, 32 or 64, not {lane_size}"
            )));
        }
        // dlopen needs a path with a slash, or it searches the library path instead.
        let path = std::path::absolute(path).map_err(|source| BackendError::Io {
            context: format!("failed to resolve `{}`", path.display()),
            source,
        })?;
        let (library, file_claim) = open_library(&path)?;
        let mut name = symbols::HOST_ENTER_THREAD.as_bytes().to_vec();
        name.push(0);
        // SAFETY: the symbol has this signature in every image made with the gpurun crate
        // (host ABI version checked by gpurun-image).
        let enter = unsafe { library.get::<EnterThread>(&name) }
            .map(|symbol| *symbol)
            .map_err(|_| BackendError::MissingSymbol {
                what: "host entry function",
                name: symbols::HOST_ENTER_THREAD.into(),
            })?;
        let arena = set_up_checks(&library, options.emulation_checks)?;
        Ok(HostPrimitives {
            pool: ThreadPool::new(options.stack_size.unwrap_or(DEFAULT_STACK)),
            memory: HostMemory::default(),
            buffers: arena.map_or_else(HostMemory::default, HostMemory::in_arena),
            lane_size,
            arena,
            seed: super::seed_of(options.emulation_seed)?,
            launches: HashMap::new(),
            server_waker: None,
            enter,
            globals: image
                .globals()
                .iter()
                .map(|global| (global.name.clone(), global.size))
                .collect(),
            library,
            _file_claim: file_claim,
        })
    }

    fn symbol_address(&self, name: &str, what: &'static str) -> Result<*mut u8, BackendError> {
        let missing = || BackendError::MissingSymbol {
            what,
            name: name.to_string(),
        };
        let mut c_name = name.as_bytes().to_vec();
        c_name.push(0);
        // SAFETY: with a pointer type, libloading hands back the symbol's address itself; we
        // only copy it.
        unsafe { self.library.get::<*mut u8>(&c_name) }
            .map(|symbol| *symbol)
            .map_err(|_| missing())
    }
}

impl Primitives for HostPrimitives {
    fn rpc_lane_size(&self) -> u32 {
        self.lane_size
    }

    fn global_size(&self, name: &str) -> Option<u64> {
        self.globals.get(name).copied()
    }

    fn write_global(&mut self, name: &str, bytes: &[u8]) -> Result<(), BackendError> {
        let address = self.symbol_address(name, "global")?;
        // SAFETY: the caller checked that the global holds `bytes.len()` bytes at `address`
        // in the loaded image, and no device thread runs between launches.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), address, bytes.len()) };
        Ok(())
    }

    fn read_global(&mut self, name: &str, len: usize) -> Result<Vec<u8>, BackendError> {
        let address = self.symbol_address(name, "global")?;
        let mut bytes = vec![0u8; len];
        // SAFETY: as in `write_global`.
        unsafe { std::ptr::copy_nonoverlapping(address, bytes.as_mut_ptr(), len) };
        Ok(bytes)
    }

    fn alloc_host_visible(&mut self, size: usize) -> Result<SharedAlloc, BackendError> {
        self.memory.alloc_shared(size)
    }

    fn doorbell_counter(&mut self) -> Result<Option<SharedAlloc>, BackendError> {
        self.memory.alloc_shared(8).map(Some)
    }

    fn host_waits(&mut self, size: usize) -> Result<Option<SharedAlloc>, BackendError> {
        // Every client is a host thread: both sides may sleep and wake each other.
        let block = self.memory.alloc_shared(size)?;
        // SAFETY: the block is the server's (install_rpc attaches it) and lives in `memory`,
        // which is freed only after the pool's threads, the waker's users, are joined (field
        // order).
        self.server_waker = unsafe { ServerWaker::new(block.host) };
        Ok(Some(block))
    }

    fn heap(&mut self) -> &mut dyn DeviceMemory {
        &mut self.memory
    }

    fn alloc_device(&mut self, size: usize) -> Result<u64, BackendError> {
        self.buffers.alloc_device(size)
    }

    fn free_device(&mut self, address: u64) -> Result<(), BackendError> {
        self.buffers.release(address as usize);
        Ok(())
    }

    fn write_device(&mut self, address: u64, bytes: &[u8]) -> Result<(), BackendError> {
        self.buffers.write(address, bytes)
    }

    fn read_device(&mut self, address: u64, out: &mut [u8]) -> Result<(), BackendError> {
        self.buffers.read(address, out)
    }

    fn max_shared_bytes(&mut self, _kernel: &str) -> Option<u64> {
        Some(super::MAX_SHARED_BYTES)
    }

    fn start(&mut self, kernel: &str, shape: LaunchShape, args: &[KernelArg]) -> Started {
        let registers = registers(kernel, args)?;
        let address = self.symbol_address(kernel, "kernel")?;
        // SAFETY: `address` is an exported function of the image; every host kernel is an
        // `extern "C"` function whose arguments all fit in registers (see `KernelFn`).
        let kernel_fn: KernelFn = unsafe { std::mem::transmute::<*mut u8, KernelFn>(address) };
        let entry = Entry {
            enter: self.enter,
            kernel: kernel_fn,
        };
        let checked = self.arena.map(|arena| CheckedMemory {
            arena,
            buffers: self.buffers.blocks(),
            kernel: kernel.to_string(),
        });
        let launches = self.launches.entry(kernel.to_string()).or_insert(0);
        let seed = launch_seed(self.seed, kernel, *launches);
        *launches += 1;
        let setting = LaunchSetting {
            lane_size: self.lane_size,
            waker: self.server_waker,
            seed,
            run_seed: self.seed,
            checked,
        };
        let grid = Grid::start(&mut self.pool, entry, shape, registers, setting)?;
        Ok(Box::new(grid))
    }
}

/// The seed of the `occurrence`-th launch of `kernel` in a run with seed `seed`.
fn launch_seed(seed: u64, kernel: &str, occurrence: u64) -> u64 {
    // FNV-1a: stable across builds and platforms, unlike std's hasher.
    let name = kernel.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    });
    super::checks::splitmix64(seed ^ super::checks::splitmix64(name ^ occurrence))
}

/// Tells an image built for the memory checks which memory to check (none when `on` is false)
/// and how to do atomics (`gpurun_abi::host::HostChecks`), before any of its threads runs.
/// Returns the checked memory when the checks are on.
fn set_up_checks(
    library: &libloading::Library,
    on: bool,
) -> Result<Option<&'static Arena>, BackendError> {
    let mut name = symbols::HOST_MEMORY_CHECKS.as_bytes().to_vec();
    name.push(0);
    // SAFETY: with a pointer type, libloading hands back the symbol's address itself.
    let Ok(record) = (unsafe { library.get::<*mut HostChecks>(&name) }).map(|symbol| *symbol)
    else {
        // Built without the checks.
        return Ok(None);
    };
    let arena = if on { Arena::get() } else { None };
    let (checked_start, checked_len) = arena.map_or((0, 0), Arena::range);
    let value = HostChecks {
        checked_start,
        checked_len,
        atomic: Some(super::checks::atomic),
    };
    // SAFETY: the image's `HostChecks` record (the symbol has that type in every image built
    // for the checks); no thread of the image runs yet, so nothing reads it meanwhile.
    unsafe { record.write_volatile(value) };
    Ok(arena)
}

/// Assigns `args` to registers as the C ABI does: integers and floats each in order, in their
/// own class. More than fit is an error (the host backend passes nothing on the stack).
fn registers(kernel: &str, args: &[KernelArg]) -> Result<Registers, BackendError> {
    let mut registers = Registers::default();
    let (mut integers, mut floats) = (0, 0);
    for arg in args {
        match arg.as_register() {
            Register::Integer(value) if integers < INTEGER_REGISTERS => {
                registers.integer[integers] = value;
                integers += 1;
            }
            Register::Float(bits) if floats < FLOAT_REGISTERS => {
                registers.float[floats] = bits;
                floats += 1;
            }
            _ => {
                return Err(BackendError::InvalidArgument(format!(
                    "the host backend passes at most {INTEGER_REGISTERS} integer or pointer and \
                     {FLOAT_REGISTERS} floating-point kernel arguments; `{kernel}` got {}",
                    args.len()
                )))
            }
        }
    }
    Ok(registers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_and_floats_fill_their_own_registers_in_order() {
        let args = [
            KernelArg::F32(2.0),
            KernelArg::U64(0x1000),
            KernelArg::F64(0.5),
            KernelArg::I32(-2),
        ];
        let registers = registers("k", &args).unwrap();
        assert_eq!(registers.integer[..2], [0x1000, (-2i64) as u64]);
        assert_eq!(
            registers.float[..2],
            [u64::from(2.0f32.to_bits()), 0.5f64.to_bits()]
        );
    }

    #[test]
    fn too_many_arguments_of_one_class_is_an_error() {
        let seven = [KernelArg::U32(0); 7];
        let error = registers("k", &seven).unwrap_err().to_string();
        assert!(error.contains("at most 6 integer"), "{error}");
        let nine = [KernelArg::F32(0.0); 9];
        assert!(registers("k", &nine).is_err());
        let mixed: Vec<KernelArg> = [KernelArg::U64(1); 6]
            .into_iter()
            .chain([KernelArg::F64(1.0); 8])
            .collect();
        assert!(registers("k", &mixed).is_ok());
    }
}
