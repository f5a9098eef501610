//! NVIDIA backend: the CUDA driver API through cudarc (`dynamic-loading`, so the binary runs
//! where no driver is installed and says so).
//!
//! Internals, following LLVM's nvptx loader:
//! - `cudarc::driver::sys::is_culib_present()` comes before every other driver call (cudarc
//!   panics when asked to load a missing library); then `cuInit` once per process.
//! - A device is its primary context. Contexts are current per thread, so each entry point
//!   makes it current first.
//! - Loading takes a cubin built for the GPU when one sits next to the PTX, else the PTX through
//!   `cuModuleLoadDataEx` with the JIT error log captured (cudarc's safe `load_module` needs
//!   nvrtc and passes no JIT options, hence the `sys` layer).
//! - Host memory the device reads (RPC buffer, argv/envp, return value, ctor arrays) is
//!   `cuMemHostAlloc(PORTABLE | DEVICEMAP)`, zeroed, never write-combined (see `memory`).
//! - The per-thread stack is a limit of the context: after each module loads (before anything of
//!   it launches), the context's limit is read and raised where it is below what the module wants:
//!   `--stack-size`, else 16 KiB ([`STACK_BEYOND_FRAMES`]) beyond its kernels' largest static
//!   frame, kept within an eighth of the device's memory ([`automatic_stack_size`]). Read every
//!   time because a primary context made again starts over at the driver's 1 KiB; never lowered,
//!   and never set needlessly, since setting it waits for the context's running kernels.
//! - Kernels run on a non-blocking stream; RPC `malloc`/`free` use a second one so they cannot
//!   wait behind the running kernel. Without memory pools, frees wait until the launch has
//!   ended (`cuMemFree` synchronizes with the context). With `CUDA_LAUNCH_BLOCKING=1` the
//!   launch call itself moves to a helper thread.
//! - This backend only supplies primitives (`primitives::CudaPrimitives`: load, globals, pinned
//!   memory, start a launch, its state from `cuStreamQuery`); serving RPC, deadlines and how a
//!   launch ends are the shared loop's (`crate::launch_loop`). A sticky error (illegal address, trap,
//!   ...) is a fault; after a fault or a timeout dropping the module leaks instead of waiting on
//!   a kernel that may never end, and the worker process is replaced. A fault ends the driver's
//!   use for the whole process (no context works again, measured), so the first one is recorded
//!   and everything after it, on any device or module, is refused with
//!   [`BackendError::EarlierFault`] before the driver is called (`device`). A timeout does not:
//!   the kernel keeps running, its context is kept (never released or reset under it).
//! - `CUDA_VISIBLE_DEVICES` is applied by the driver itself: ordinals are those it leaves.
//! - A launch's device time is the time between two timing events of its module recorded on
//!   its stream right before and after `cuLaunchKernel` (`timing`).

mod device;
mod driver;
pub mod image;
mod launch;
mod memory;
mod primitives;
mod timing;

pub use device::{
    automatic_stack_size, driver_version_text, sm_arch, sm_number, CudaDevice, StackRoom,
    STACK_BEYOND_FRAMES, STACK_MEMORY_SHARE,
};
pub use driver::{NO_DRIVER, STUB_DRIVER};
pub use image::{choose_image, ImageChoice};
pub use primitives::{CudaPrimitives, ImageFacts};

use crate::module::{LoadPrimitives, Loaded, OpenedDevice};
use crate::{Backend, BackendError, BackendKind, Device, DeviceInfo, LoadOptions};
use gpurun_image::Image;
use std::rc::Rc;

pub const KIND: BackendKind = BackendKind::Cuda;

/// The CUDA driver as a [`Backend`]. Creating it touches nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct CudaBackend;

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        KIND
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        device::list()
    }

    fn open(&self, ordinal: usize) -> Result<Box<dyn Device>, BackendError> {
        let device = CudaDevice::open(ordinal)?;
        Ok(OpenedDevice::boxed(device.info.clone(), Rc::new(device)))
    }
}

impl LoadPrimitives for Rc<CudaDevice> {
    type Primitives = CudaPrimitives;

    fn primitives(&mut self, image: &Image, opts: &LoadOptions) -> Loaded<Self> {
        primitives::load(self, &image_facts(image)?, opts.stack_size)
    }
}

/// The parts of a parsed image that loading uses.
fn image_facts(image: &Image) -> Result<ImageFacts<'_>, BackendError> {
    use gpurun_image::ImageKind;
    let is_cubin = match image.kind() {
        ImageKind::Ptx => false,
        ImageKind::Cubin => true,
        other => {
            return Err(BackendError::Incompatible(format!(
                "the CUDA backend runs PTX or cubin images, not {other:?}"
            )))
        }
    };
    let (ctors, dtors) = image.ctor_dtor_objects();
    Ok(ImageFacts {
        path: image.path(),
        bytes: image.bytes(),
        is_cubin,
        globals: image.globals().iter().map(|g| g.name.as_str()).collect(),
        kernels: image.kernels().iter().map(|k| k.name.as_str()).collect(),
        ptx_target: image.ptx_target(),
        ptx_version: image.ptx_version(),
        ctors: ctors.iter().map(|g| g.name.as_str()).collect(),
        dtors: dtors.iter().map(|g| g.name.as_str()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::Collect;
    use crate::kernel_args::KernelArg;
    use crate::{LaunchEnd, LaunchShape};
    use std::time::Duration;

    /// Hand-written PTX for the hardware tests: a store through a pointer argument, a global
    /// with an initial value, an illegal address and an endless loop. `ptx_for_hardware_tests_
    /// assembles` checks it with ptxas on every machine.
    const TEST_PTX: &str = concat!(
        include_str!("../../tests/data/store.ptx"),
        "
.visible .entry gpurun_fault()
{
    .reg .b64 %rd<2>;
    mov.u64 %rd1, 16;
    st.global.u32 [%rd1], 1;
    ret;
}

.visible .entry gpurun_spin()
{
$L_spin:
    bra.uni $L_spin;
}
"
    );

    /// The first GPU, or `None` (with the reason printed) where there is none. CI machines
    /// have no NVIDIA GPU by design, so this is not a failure there.
    fn first_gpu() -> Option<Box<dyn Device>> {
        match CudaBackend.devices() {
            Ok(devices) if !devices.is_empty() => Some(CudaBackend.open(0).unwrap()),
            Ok(_) => {
                eprintln!("skipping: the NVIDIA driver reports no device");
                None
            }
            Err(error) => {
                eprintln!("skipping: {error}");
                None
            }
        }
    }

    fn test_image() -> Image {
        Image::parse(TEST_PTX.as_bytes().to_vec(), None).unwrap()
    }

    #[test]
    fn test_ptx_is_parsed_as_expected() {
        let image = test_image();
        let facts = image_facts(&image).unwrap();
        assert!(!facts.is_cubin);
        assert!(
            facts.globals.contains(&"gpurun_counter"),
            "{:?}",
            facts.globals
        );
        assert_eq!(facts.ptx_target, Some("sm_70"));
    }

    #[test]
    fn ptx_for_hardware_tests_assembles() {
        let Some(ptxas) = image::tests::find_ptxas() else {
            let why = "ptxas is not installed (scripts/setup.sh installs it)";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("skipping: {why}");
            return;
        };
        let dir = std::env::temp_dir().join(format!("gpurun-cuda-hwptx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ptx = dir.join("hw.ptx");
        std::fs::write(&ptx, TEST_PTX).unwrap();
        // The PTX's `.target` (sm_70) or, for a ptxas that dropped it, its oldest architecture.
        let arch = format!("-arch=sm_{}", image::tests::oldest_arch(&ptxas));
        let output = std::process::Command::new(ptxas)
            .args([arch.as_str(), "-o"])
            .arg(dir.join("hw.cubin"))
            .arg(&ptx)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hardware_launch_globals_and_usage() {
        let Some(mut device) = first_gpu() else {
            return;
        };
        assert!(device.info().arch.starts_with("sm_"));
        let image = test_image();
        let mut module = device.load(&image, &LoadOptions::default()).unwrap();
        let out = module.alloc_shared(4).unwrap();
        let mut sink = Collect::default();
        let args = [KernelArg::U64(out.device), KernelArg::U32(42)];
        let limit = Some(Duration::from_secs(20));
        let end = module
            .launch("gpurun_store", LaunchShape::SINGLE, &args, limit, &mut sink)
            .unwrap();
        assert_eq!(end, LaunchEnd::Completed);
        // SAFETY: `out.host` is the host side of a 4-byte pinned block; the kernel is done.
        let value = unsafe { out.host.cast::<u32>().read_volatile() };
        assert_eq!(value, 42);
        assert_eq!(
            module.read_global("gpurun_counter", 8).unwrap(),
            5u64.to_le_bytes()
        );
        module
            .write_global("gpurun_counter", &9u64.to_le_bytes())
            .unwrap();
        assert_eq!(
            module.read_global("gpurun_counter", 8).unwrap(),
            9u64.to_le_bytes()
        );
        assert!(matches!(
            module.read_global("gpurun_counter", 16),
            Err(BackendError::InvalidArgument(_))
        ));
        assert!(matches!(
            module.read_global("no_such_global", 8),
            Err(BackendError::MissingSymbol { .. })
        ));
        assert!(matches!(
            module.launch("no_such_kernel", LaunchShape::SINGLE, &[], limit, &mut sink),
            Err(BackendError::MissingSymbol { .. })
        ));
        let usage = module.resource_usage("gpurun_store").unwrap();
        assert!(usage.registers.is_some_and(|n| n > 0), "{usage:?}");
        assert!(sink.stdout.is_empty() && sink.stderr.is_empty() && sink.panics.is_empty());
    }

    /// Which failure `hardware_child` provokes (set by `hardware_faults_end_the_launch`).
    const CHILD_MODE: &str = "GPURUN_CUDA_TEST_CHILD";

    /// Runs in a child process: a fault or a hung kernel poisons the process's primary
    /// context, which must not break the other tests.
    #[test]
    #[ignore = "run by hardware_faults_end_the_launch in a child process"]
    fn hardware_child() {
        let mode = std::env::var(CHILD_MODE).expect("started by hardware_faults_end_the_launch");
        let mut device = first_gpu().expect("the parent saw a GPU");
        let image = test_image();
        let mut module = device.load(&image, &LoadOptions::default()).unwrap();
        let mut sink = Collect::default();
        let limit = Duration::from_millis(500);
        let (kernel, check): (&str, fn(&LaunchEnd) -> bool) = match mode.as_str() {
            "fault" => (
                "gpurun_fault",
                |end| matches!(end, LaunchEnd::Faulted(text) if text.contains("CUDA_ERROR_ILLEGAL_ADDRESS")),
            ),
            "timeout" => ("gpurun_spin", |end| matches!(end, LaunchEnd::TimedOut(_))),
            other => panic!("unknown mode {other}"),
        };
        let end = module
            .launch(kernel, LaunchShape::SINGLE, &[], Some(limit), &mut sink)
            .unwrap();
        assert!(check(&end), "{mode}: {end:?}");
        // The module refuses further launches instead of hanging or faulting again.
        let again = module.launch(
            "gpurun_store",
            LaunchShape::SINGLE,
            &[],
            Some(limit),
            &mut sink,
        );
        assert!(again.is_err(), "{again:?}");
        println!("child ok: {end:?}");
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // Leave without tearing down a context that may still run the kernel: `exit` would run
        // the driver's exit-time handlers, which can wait for that kernel.
        // SAFETY: `_exit` ends the process at once; nothing after it runs.
        unsafe { libc::_exit(0) }
    }

    #[test]
    fn hardware_faults_end_the_launch() {
        if first_gpu().is_none() {
            return;
        }
        for mode in ["fault", "timeout"] {
            let output = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "cuda::tests::hardware_child",
                    "--ignored",
                    "--nocapture",
                ])
                .env(CHILD_MODE, mode)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && stdout.contains("child ok"),
                "{mode}: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }

    #[test]
    fn backend_without_driver_reports_it_through_the_trait() {
        let backend = crate::select::backend(BackendKind::Cuda);
        assert_eq!(backend.kind(), BackendKind::Cuda);
        // SAFETY: only dlopen attempts.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            // A GPU machine: listing must work (possibly with zero devices), unless what was
            // found is the toolkit's stub, which says so.
            let devices = match backend.devices() {
                Err(BackendError::NotAvailable(message)) if message.starts_with(STUB_DRIVER) => {
                    eprintln!("skipping: {message}");
                    return;
                }
                listed => listed.unwrap(),
            };
            assert!(devices.iter().all(|d| d.arch.starts_with("sm_")));
            return;
        }
        match backend.devices() {
            Err(BackendError::NotAvailable(message)) => assert_eq!(message, NO_DRIVER),
            other => panic!("expected the missing-driver error, got {other:?}"),
        }
        match backend.open(0) {
            Err(BackendError::NotAvailable(message)) => assert_eq!(message, NO_DRIVER),
            Err(other) => panic!("expected the missing-driver error, got {other}"),
            Ok(_) => panic!("opened a CUDA device without a driver"),
        }
    }
}
