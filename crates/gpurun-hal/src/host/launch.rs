//! Runs a grid on OS threads: every emulated device thread is one OS thread; the blocks of a
//! grid run in waves so that at most [`MAX_LIVE_THREADS`] exist at once, and all threads of one
//! block run together so that block barriers work.

use crate::{BackendError, LaunchShape};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;

/// Upper bound on OS threads alive at once for one launch.
pub const MAX_LIVE_THREADS: u64 = 4096;

pub(crate) use gpurun_abi::host::EnterThread;
use gpurun_abi::host::{HostThreadInfo, HOST_ABI_VERSION};

/// Every host kernel is called through this type; the C ABI passes the first six integer
/// arguments and, numbered separately, the first eight floating-point ones in registers, so a
/// callee that takes fewer ignores the rest.
pub(crate) type KernelFn =
    unsafe extern "C" fn(u64, u64, u64, u64, u64, u64, f64, f64, f64, f64, f64, f64, f64, f64);

/// How many integer and floating-point arguments [`KernelFn`] passes.
pub(crate) const INTEGER_REGISTERS: usize = 6;
pub(crate) const FLOAT_REGISTERS: usize = 8;

/// The argument registers of one launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Registers {
    pub integer: [u64; INTEGER_REGISTERS],
    /// Bit patterns (an `f32` in the low half, as the callee reads it).
    pub float: [u64; FLOAT_REGISTERS],
}

unsafe extern "C" fn wait_at_barrier(context: *const std::ffi::c_void) {
    // SAFETY: `context` is the `Arc<Barrier>` pointer of this thread's block, kept alive by the
    // block's threads until they are joined.
    let barrier = unsafe { &*(context as *const Barrier) };
    barrier.wait();
}

/// Function pointers that are plain addresses, so they can cross to other threads.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    pub enter: EnterThread,
    pub kernel: KernelFn,
}

/// A launch in progress: poll [`Grid::finished`] while serving RPC.
pub(crate) struct Grid {
    done: Arc<AtomicUsize>,
    driver: Option<JoinHandle<()>>,
}

impl Grid {
    /// Starts the grid. Returns at once; the threads run in the background.
    pub fn start(
        entry: Entry,
        shape: LaunchShape,
        registers: Registers,
        lane_size: u32,
        stack_size: usize,
    ) -> Result<Grid, BackendError> {
        // The shape was checked by `crate::module::check_shape`.
        let done = Arc::new(AtomicUsize::new(0));
        let finished = Arc::clone(&done);
        let driver = std::thread::Builder::new()
            .name("gpurun-grid".into())
            .spawn(move || {
                run_grid(entry, shape, registers, lane_size, stack_size);
                finished.store(1, Ordering::Release);
            })
            .map_err(|source| BackendError::Io {
                context: "failed to start the grid thread".into(),
                source,
            })?;
        Ok(Grid {
            done,
            driver: Some(driver),
        })
    }
}

impl crate::serve::Launch for Grid {
    fn state(&self) -> crate::serve::LaunchState {
        // A crash of an emulated thread ends the worker process: there is no fault state.
        if self.done.load(Ordering::Acquire) != 0 {
            crate::serve::LaunchState::Done
        } else {
            crate::serve::LaunchState::Running
        }
    }

    fn finish(mut self: Box<Self>, settled: bool) {
        if let (true, Some(driver)) = (settled, self.driver.take()) {
            let _ = driver.join();
        }
    }
}

fn run_grid(entry: Entry, shape: LaunchShape, registers: Registers, lane_size: u32, stack: usize) {
    let per_block = shape.threads_per_block();
    let blocks_per_wave = (MAX_LIVE_THREADS / per_block).max(1);
    let [gx, gy, gz] = shape.blocks;
    let all_blocks: Vec<[u32; 3]> = (0..gz)
        .flat_map(|z| (0..gy).flat_map(move |y| (0..gx).map(move |x| [x, y, z])))
        .collect();
    for wave in all_blocks.chunks(blocks_per_wave as usize) {
        let mut threads = Vec::new();
        for &block in wave {
            let barrier = Arc::new(Barrier::new(per_block as usize));
            let [tx, ty, tz] = shape.threads;
            for z in 0..tz {
                for y in 0..ty {
                    for x in 0..tx {
                        let barrier = Arc::clone(&barrier);
                        let info = HostThreadInfo {
                            abi_version: HOST_ABI_VERSION,
                            lane_size,
                            thread_idx: [x, y, z],
                            block_idx: block,
                            block_dim: shape.threads,
                            grid_dim: shape.blocks,
                            barrier_context: Arc::as_ptr(&barrier).cast(),
                            barrier: Some(wait_at_barrier),
                        };
                        let info = SendInfo(info);
                        let spawned =
                            std::thread::Builder::new()
                                .stack_size(stack)
                                .spawn(move || {
                                    let info = info;
                                    // SAFETY: `enter` and `kernel` come from the loaded image, which
                                    // outlives the launch; `info.0` and its barrier live on this
                                    // thread's stack/Arc until it returns.
                                    unsafe {
                                        (entry.enter)(&info.0);
                                        let [a, b, c, d, e, f] = registers.integer;
                                        let [g, h, i, j, k, l, m, n] =
                                            registers.float.map(f64::from_bits);
                                        (entry.kernel)(a, b, c, d, e, f, g, h, i, j, k, l, m, n);
                                    }
                                    drop(barrier);
                                });
                        match spawned {
                            Ok(handle) => threads.push(handle),
                            Err(error) => {
                                // Without all its threads a block would deadlock at a barrier:
                                // say so on stderr; the launch then times out.
                                eprintln!("gpurun: failed to start an emulated thread: {error}");
                            }
                        }
                    }
                }
            }
        }
        for handle in threads {
            let _ = handle.join();
        }
    }
}

/// `HostThreadInfo` holds raw pointers; they point at data the receiving thread owns.
struct SendInfo(HostThreadInfo);
// SAFETY: the barrier pointer inside refers to an `Arc<Barrier>` moved along with it.
unsafe impl Send for SendInfo {}
