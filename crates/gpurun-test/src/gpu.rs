//! Host-driven launches: an image loaded on a device in this process, typed buffers in device
//! memory (or, by choice, mapped host memory), and launches whose panics come back as errors.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gpurun_hal::handlers::{HostFunctions, PanicReport, Sink};
use gpurun_hal::kernel_args::KernelArg;
use gpurun_hal::{select, BackendKind, LaunchEnd, LaunchShape, LoadOptions, Module};
use gpurun_image::{Image, KernelParam};

use crate::launch_args::{Arg, DeviceCopy, KernelArgs};
use crate::signature;
use crate::{BufferTooSmall, DevicePanic, Error};

/// What a kernel printed during one launch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    /// The standard output as text (invalid UTF-8 replaced).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The standard error as text (invalid UTF-8 replaced).
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// A launch [`Gpu::launch_timed`] timed: what it printed and the device's time of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timed {
    pub output: Output,
    pub device_time: Duration,
}

/// Collects a launch's output and panics; echoes the output through `print!`/`eprint!`, so the
/// test harness captures it like the test's own.
struct Collect<'k> {
    kernel: &'k str,
    /// Write panic lines past the test harness's capture (see `panic`).
    uncaptured: bool,
    output: Output,
    first_panic: Option<PanicReport>,
    panicked_threads: u64,
}

impl Sink for Collect<'_> {
    fn stdout(&mut self, bytes: &[u8]) {
        print!("{}", String::from_utf8_lossy(bytes));
        self.output.stdout.extend_from_slice(bytes);
    }
    fn stderr(&mut self, bytes: &[u8]) {
        eprint!("{}", String::from_utf8_lossy(bytes));
        self.output.stderr.extend_from_slice(bytes);
    }
    fn panic(&mut self, report: PanicReport) {
        // Said at once, not only in the `Err`: on the host emulation a kernel panic aborts the
        // process before the launch ends, and a captured line would die with it, so there it
        // goes straight to stderr.
        if self.first_panic.is_none() {
            let line = format!(
                "device panic in kernel `{}` at {}:{}:{} (block {:?}, thread {:?}): {}\n",
                self.kernel,
                report.file,
                report.line,
                report.column,
                report.block,
                report.thread,
                report.message
            );
            if self.uncaptured {
                let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            } else {
                eprint!("{line}");
            }
        }
        self.panicked_threads += 1;
        self.first_panic.get_or_insert(report);
    }
}

/// Tells buffers of different loaded images apart.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// An image loaded on a device in this process, ready for launches.
///
/// Launches run in this process, unlike device tests run as trials (each in a worker process).
/// A device panic is an `Err` ([`Error::Panicked`]) and the image stays usable. A fault or a
/// timeout on a GPU is an `Err` ([`Error::Ended`]) after which this `Gpu` refuses further
/// launches. On CUDA a fault also ends the driver's use for the whole process: every later
/// [`Gpu::open`], and every launch or copy of any other `Gpu`, fails with
/// [`Error::EarlierFault`], because the driver refuses all work in a process after a fault. A
/// timed-out kernel keeps running (nothing stops a GPU kernel) until the process ends. On the
/// host emulation a kernel runs on threads of this process: a fault there (a bad pointer) takes
/// the whole test process down, and a kernel still running after a timeout keeps its threads.
/// Tests that may fault or hang belong in a process of their own: `cargo nextest run` runs each
/// test in one, and the trial style runs each device test in a worker.
///
/// Buffers live in device memory, copied to and from explicitly ([`Gpu::buffer`]), or, by
/// choice, in host memory mapped for the device ([`Gpu::mapped_buffer`]); see [`Memory`].
pub struct Gpu {
    /// The loaded image; it keeps what it needs of the device that loaded it.
    module: RefCell<Box<dyn Module>>,
    id: u64,
    image: PathBuf,
    kernels: Vec<String>,
    /// Parameters of each kernel, where the image records them (kernel descriptors, PTX).
    signatures: HashMap<String, Vec<KernelParam>>,
    /// Kernels whose panics end a whole wavefront (AMDGPU), with its size.
    panic_wavefronts: HashMap<String, u32>,
    timeout: Duration,
    backend: BackendKind,
    /// The host functions its kernels may call ([`Gpu::host_function`]), shared with the
    /// module's RPC server.
    host_functions: HostFunctions,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("backend", &self.backend)
            .field("image", &self.image)
            .field("kernels", &self.kernels)
            .finish_non_exhaustive()
    }
}

impl Gpu {
    /// Loads the image at `path` on device 0 of `backend` (by default the backend for the
    /// image's kind). [`crate::DeviceCrate::load`] builds the image first.
    pub fn open(
        path: &Path,
        backend: Option<BackendKind>,
        timeout: Duration,
    ) -> Result<Gpu, Error> {
        Gpu::open_with_lane_size(path, backend, timeout, crate::DEFAULT_LANE_SIZE)
    }

    /// [`Gpu::open`] with the host emulation's warp size `lane_size` (see
    /// [`crate::DeviceCrate::lane_size`]).
    pub(crate) fn open_with_lane_size(
        path: &Path,
        backend: Option<BackendKind>,
        timeout: Duration,
        lane_size: u32,
    ) -> Result<Gpu, Error> {
        let image = Image::read(path).map_err(|error| Error::Image {
            path: path.to_path_buf(),
            message: error.to_string(),
        })?;
        let kind = backend.unwrap_or_else(|| BackendKind::for_platform(image.kind().platform()));
        let kernels = image
            .kernels()
            .iter()
            .map(|kernel| kernel.name.clone())
            .collect();
        let signatures = image
            .kernels()
            .iter()
            .filter_map(|kernel| Some((kernel.name.clone(), kernel.signature()?.params.clone())))
            .collect();
        let panic_wavefronts = image
            .kernels()
            .iter()
            .filter_map(|kernel| {
                kernel
                    .panic_ends_wavefront()
                    .map(|lanes| (kernel.name.clone(), lanes))
            })
            .collect();
        let mut device = select::backend(kind).open(0)?;
        let host_functions = HostFunctions::default();
        let options = LoadOptions {
            emulated_lane_size: lane_size,
            host_functions: host_functions.clone(),
            ..LoadOptions::default()
        };
        let module = device.load(&image, &options)?;
        Ok(Gpu {
            module: RefCell::new(module),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            image: path.to_path_buf(),
            kernels,
            signatures,
            panic_wavefronts,
            timeout,
            backend: kind,
            host_functions,
        })
    }

    /// Registers `function` for this image's kernels to call with `gpurun::host::call(key,
    /// bytes)`, and returns the key to pass them (it is a kernel argument like a `u64`). The
    /// function gets the bytes the device sent and returns a `u64` for it; it runs on the thread
    /// that serves the launch, once per calling device thread, while the kernel waits. A panic
    /// in it, or a key that was never registered, ends the launch with an error.
    pub fn host_function(
        &self,
        function: impl Fn(&[u8]) -> u64 + Send + Sync + 'static,
    ) -> HostFunction {
        HostFunction(self.host_functions.register(function))
    }

    /// The backend running the kernels.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// The kernels of the image (on the host emulation: the `#[gpurun::kernel]`s and tests).
    pub fn kernels(&self) -> &[String] {
        &self.kernels
    }

    /// A buffer in device memory ([`Memory::Device`]) holding a copy of `data`.
    pub fn buffer_from<T: DeviceCopy>(&self, data: &[T]) -> Result<Buffer<'_, T>, Error> {
        let mut buffer = self.buffer::<T>(data.len())?;
        buffer.write(data)?;
        Ok(buffer)
    }

    /// A buffer of `len` zeroed elements in device memory ([`Memory::Device`]): CUDA
    /// `cuMemAlloc`, the GPU's coarse-grained HSA pool, plain memory on the host emulation.
    pub fn buffer<T: DeviceCopy>(&self, len: usize) -> Result<Buffer<'_, T>, Error> {
        let bytes = buffer_bytes::<T>(len)?;
        // Zero-sized requests still get a distinct address.
        let device = self.module.borrow_mut().alloc_device(bytes.max(1))?;
        Ok(Buffer {
            gpu: self,
            mapped: None,
            device,
            len,
            _marker: PhantomData,
        })
    }

    /// A buffer in mapped host memory ([`Memory::Mapped`]) holding a copy of `data`.
    pub fn mapped_buffer_from<T: DeviceCopy>(&self, data: &[T]) -> Result<Buffer<'_, T>, Error> {
        let mut buffer = self.mapped_buffer::<T>(data.len())?;
        buffer.write(data)?;
        Ok(buffer)
    }

    /// A buffer of `len` zeroed elements in host memory mapped for the device
    /// ([`Memory::Mapped`]): for what the host must see while a kernel runs. Kept until the
    /// `Gpu` is dropped.
    pub fn mapped_buffer<T: DeviceCopy>(&self, len: usize) -> Result<Buffer<'_, T>, Error> {
        let bytes = buffer_bytes::<T>(len)?;
        let alloc = self.module.borrow_mut().alloc_shared(bytes.max(1))?;
        Ok(Buffer {
            gpu: self,
            mapped: Some(alloc.host),
            device: alloc.device,
            len,
            _marker: PhantomData,
        })
    }

    /// Launches `kernel` with `shape` and `args` (a tuple of scalars and `&Buffer`/`&mut
    /// Buffer`, in the order of the kernel's parameters) and waits for it. Its output is
    /// returned and also printed (captured by the test harness like the test's own).
    ///
    /// Where the image records the kernel's signature (a `#[gpurun::kernel]`'s descriptor, on
    /// every target; PTX), the number, width and kind of the arguments are checked first
    /// ([`Error::Arguments`]), and every buffer passed for a pointer whose length the kernel
    /// declares (`#[gpurun::kernel(len(x = n))]`) must hold that many elements for this launch
    /// ([`Error::BufferTooSmall`]); elsewhere they are the caller's to get right.
    pub fn launch(
        &self,
        kernel: &str,
        shape: LaunchShape,
        args: impl KernelArgs,
    ) -> Result<Output, Error> {
        self.launch_once(kernel, shape, args)
    }

    /// [`Gpu::launch`], and the device's own time of the launch: on CUDA between two events
    /// recorded around it on its stream, on HSA the dispatch's start and end timestamps, on
    /// the host emulation the wall time from handing the grid to its threads until the last
    /// returns (see `gpurun_hal::BackendKind::launch_timer`). What `cargo bench` measures with
    /// [`bench::Bencher::iter`](crate::bench::Bencher::iter). A backend that measures nothing
    /// is [`Error::Untimed`].
    pub fn launch_timed(
        &self,
        kernel: &str,
        shape: LaunchShape,
        args: impl KernelArgs,
    ) -> Result<Timed, Error> {
        let output = self.launch_once(kernel, shape, args)?;
        match self.module.borrow().last_device_time() {
            Some(device_time) => Ok(Timed {
                output,
                device_time,
            }),
            None => Err(Error::Untimed {
                kernel: kernel.to_owned(),
                backend: self.backend,
            }),
        }
    }

    fn launch_once(
        &self,
        kernel: &str,
        shape: LaunchShape,
        args: impl KernelArgs,
    ) -> Result<Output, Error> {
        if !self.kernels.iter().any(|name| name == kernel) {
            return Err(Error::NoKernel {
                name: kernel.to_string(),
                image: self.image.clone(),
                available: if self.kernels.is_empty() {
                    "none".into()
                } else {
                    self.kernels.join(", ")
                },
            });
        }
        let args = args
            .kernel_args(self.id)
            .map_err(|index| Error::ForeignBuffer {
                kernel: kernel.to_string(),
                index,
            })?;
        if let Some(params) = self.signatures.get(kernel) {
            signature::check(params, &args).map_err(|message| Error::Arguments {
                kernel: kernel.to_string(),
                message,
            })?;
            signature::check_lengths(params, &args, shape).map_err(|too_small| {
                Error::BufferTooSmall(Box::new(BufferTooSmall {
                    kernel: kernel.to_string(),
                    param: too_small.param,
                    needed: too_small.needed,
                    actual: too_small.actual,
                    element_size: too_small.element_size,
                    rule: too_small.rule,
                }))
            })?;
        }
        let args: Vec<KernelArg> = args.into_iter().map(Arg::value).collect();
        let mut collect = Collect {
            kernel,
            uncaptured: self.backend == BackendKind::Host,
            output: Output::default(),
            first_panic: None,
            panicked_threads: 0,
        };
        let end = self.module.borrow_mut().launch(
            kernel,
            shape,
            &args,
            Some(self.timeout),
            &mut collect,
        )?;
        let kernel = kernel.to_string();
        match end {
            LaunchEnd::Completed => match collect.first_panic {
                Some(report) => Err(Error::Panicked(Box::new(DevicePanic {
                    wavefront_note: self.panic_wavefronts.get(&kernel).and_then(|&lanes| {
                        gpurun_harness::outcome::wavefront_note(lanes, shape.threads, Some(&report))
                    }),
                    kernel,
                    report,
                    panicked_threads: collect.panicked_threads,
                    output: collect.output,
                }))),
                None => Ok(collect.output),
            },
            end => Err(Error::Ended { kernel, end }),
        }
    }
}

/// Bytes of a buffer of `len` `T`s, or [`Error::TooLarge`].
fn buffer_bytes<T>(len: usize) -> Result<usize, Error> {
    let element_size = std::mem::size_of::<T>();
    len.checked_mul(element_size)
        .filter(|&bytes| bytes <= isize::MAX as usize)
        .ok_or(Error::TooLarge { len, element_size })
}

/// Where a [`Buffer`] lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// The device's own memory, where kernels reach it fastest (CUDA `cuMemAlloc`, the GPU's
    /// coarse-grained HSA pool; plain memory on the host emulation). The host reaches it only
    /// through copies between launches ([`Buffer::write`], [`Buffer::to_vec`]). What
    /// [`Gpu::buffer`] and [`Gpu::buffer_from`] make.
    Device,
    /// Host memory mapped into the device's address space (CUDA pinned memory, HSA
    /// fine-grained host memory), which the host can also read and write while a kernel runs
    /// ([`Buffer::host_ptr`]): for a kernel that talks to the host through it. Every device
    /// access crosses the bus, so kernels are slower on it, and on AMD gfx90a float atomics on
    /// fine-grained memory do nothing. What [`Gpu::mapped_buffer`] and
    /// [`Gpu::mapped_buffer_from`] make; kept until the [`Gpu`] is dropped.
    Mapped,
}

/// `len` elements of `T` for kernels, in device memory ([`Gpu::buffer`], [`Gpu::buffer_from`])
/// or in mapped host memory ([`Gpu::mapped_buffer`]); passed to kernels as a pointer (`&buffer`
/// for a `*const T` parameter, `&mut buffer` for a `*mut T`). Device memory is freed when the
/// buffer is dropped.
pub struct Buffer<'gpu, T> {
    gpu: &'gpu Gpu,
    /// Mapped memory: where the host reaches it. `None`: device memory.
    mapped: Option<*mut u8>,
    device: u64,
    len: usize,
    _marker: PhantomData<T>,
}

impl<T> Drop for Buffer<'_, T> {
    fn drop(&mut self) {
        if self.mapped.is_some() {
            // Mapped blocks live as long as the module.
            return;
        }
        // Launches borrow their buffers, so none runs now and the module is free; a module
        // that cannot be borrowed keeps the memory until it goes.
        if let Ok(mut module) = self.gpu.module.try_borrow_mut() {
            let _ = module.free_device(self.device);
        }
    }
}

impl<T> std::fmt::Debug for Buffer<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("len", &self.len)
            .field("memory", &self.memory())
            .field("device", &format_args!("{:#x}", self.device))
            .finish()
    }
}

impl<T> Buffer<'_, T> {
    /// Where it lives.
    pub fn memory(&self) -> Memory {
        match self.mapped {
            Some(_) => Memory::Mapped,
            None => Memory::Device,
        }
    }
}

impl<T: DeviceCopy> Buffer<'_, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address kernels see.
    pub fn device_address(&self) -> u64 {
        self.device
    }

    /// Where the host reads and writes a [`Memory::Mapped`] buffer, also while a kernel runs
    /// (through atomics or volatile accesses, as any memory two sides share); `None` for device
    /// memory, which only copies reach.
    pub fn host_ptr(&self) -> Option<*mut T> {
        self.mapped.map(|host| host.cast())
    }

    pub(crate) fn owner(&self) -> u64 {
        self.gpu.id
    }

    fn bytes(count: usize) -> usize {
        // The allocation holds `len` elements, whose size in bytes was checked not to overflow.
        count * std::mem::size_of::<T>()
    }

    /// The bytes of a copy of the first `count` elements, which may be at most [`Buffer::len`]
    /// ([`Error::CopyTooLong`] otherwise): the one length rule of reads and writes.
    fn copy_bytes(&self, count: usize) -> Result<usize, Error> {
        if count > self.len {
            return Err(Error::CopyTooLong {
                given: count,
                len: self.len,
            });
        }
        Ok(Self::bytes(count))
    }

    /// Copies the elements out (on CUDA on the kernels' stream, after the launches before).
    pub fn to_vec(&self) -> Result<Vec<T>, Error> {
        let mut out = zeroed_vec::<T>(self.len);
        self.read_into(&mut out)?;
        Ok(out)
    }

    /// Copies the first `out.len()` elements into `out`, which may hold at most
    /// [`Buffer::len`] ([`Error::CopyTooLong`] otherwise): [`Buffer::to_vec`] without a new
    /// allocation.
    pub fn read_into(&self, out: &mut [T]) -> Result<(), Error> {
        let bytes = self.copy_bytes(out.len())?;
        let target = out.as_mut_ptr().cast::<u8>();
        match self.mapped {
            // SAFETY: the mapped block holds `len` elements and lives as long as the borrowed
            // `Gpu`; launches are synchronous and need `&mut` for written buffers, so no kernel
            // writes it now. Copied as bytes: any bit pattern is a valid `T` (`DeviceCopy`).
            Some(host) => unsafe { std::ptr::copy_nonoverlapping(host, target, bytes) },
            None => {
                // SAFETY: `out` is `bytes` initialized bytes (`DeviceCopy`: no padding), and
                // every bit pattern written is a valid `T`.
                let out = unsafe { std::slice::from_raw_parts_mut(target, bytes) };
                self.gpu
                    .module
                    .borrow_mut()
                    .read_device_into(self.device, out)?;
            }
        }
        Ok(())
    }

    /// Overwrites the first `data.len()` elements (on CUDA on the kernels' stream, before the
    /// next launch); `data` may hold at most [`Buffer::len`] ([`Error::CopyTooLong`]
    /// otherwise).
    pub fn write(&mut self, data: &[T]) -> Result<(), Error> {
        let bytes = self.copy_bytes(data.len())?;
        let source = data.as_ptr().cast::<u8>();
        match self.mapped {
            // SAFETY: as in `read_into`; `&mut self` excludes other users of the buffer.
            Some(host) => unsafe { std::ptr::copy_nonoverlapping(source, host, bytes) },
            None => {
                // SAFETY: `data` is `bytes` initialized bytes (`DeviceCopy`: no padding).
                let data = unsafe { std::slice::from_raw_parts(source, bytes) };
                self.gpu
                    .module
                    .borrow_mut()
                    .write_device(self.device, data)?;
            }
        }
        Ok(())
    }
}

/// `len` zeroed `T`s: a valid value each (`DeviceCopy`: every bit pattern is one), from the
/// allocator's zeroed memory, which for large sizes is fresh pages that cost no writes.
fn zeroed_vec<T: DeviceCopy>(len: usize) -> Vec<T> {
    let Ok(layout) = std::alloc::Layout::array::<T>(len) else {
        // Larger than any buffer could be (its size was checked); let `Vec` report it.
        return Vec::with_capacity(len);
    };
    if layout.size() == 0 {
        let mut empty = Vec::new();
        empty.resize(len, zeroed_value::<T>());
        return empty;
    }
    // SAFETY: a non-zero size.
    let start = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if start.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    // SAFETY: allocated by the global allocator with `T`'s array layout for `len` elements,
    // each zeroed, which is a valid `T`.
    unsafe { Vec::from_raw_parts(start, len, len) }
}

/// A `T` of zero bytes (valid for every `DeviceCopy`).
fn zeroed_value<T: DeviceCopy>() -> T {
    // SAFETY: every bit pattern is a valid `T` (`DeviceCopy`).
    unsafe { std::mem::zeroed() }
}

/// A host function's key ([`Gpu::host_function`]): passed to a kernel as a `u64`, which hands it
/// to `gpurun::host::call`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostFunction(pub u64);
