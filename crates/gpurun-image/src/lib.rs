//! Parse a GPU image once, up front, before any backend sees it.
//!
//! [`Image::read`] / [`Image::parse`] take PTX text, an NVIDIA cubin, an AMDGPU code object
//! or a host emulation `.so` (the kind comes from the content, never the file name) and
//! return an [`Image`]: its kernels, its globals with their sizes and statically known
//! bytes, its test table decoded from the `__gpurun_desc_*` descriptors and each
//! `#[gpurun::kernel]`'s parameters from its `__gpurun_kdesc_*` descriptor (`docs/abi.md`). Every problem is an [`ImageError`] whose message reads well after
//! "failed to load image `x`: "; no input makes this crate panic (the crate is fuzzed, and
//! a unit test runs mutated samples through it).
//!
//! Owns: reading every image format (PTX text, cubin ELF, AMDGPU code objects with their
//! MessagePack note, host `.so`) into facts: kinds, kernels and their bounds, globals, tests,
//! cubin architecture, what ROCr cannot load; the [`Platform`] words every crate uses for where
//! device code runs. Must not: open a device, decide build policy (the
//! build's checks apply their rules to these facts), or spell the device ABI itself (that is
//! `gpurun-abi`'s).
//!
//! ```
//! # fn main() -> Result<(), gpurun_image::ImageError> {
//! use gpurun_image::{Image, ImageKind};
//!
//! let image = Image::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sample.ptx"))?;
//! assert_eq!(image.kind(), ImageKind::Ptx);
//! image.require_entry("_start")?; // loader mode needs LLVM libc's entry kernel
//! for test in image.tests() {
//!     // `test.kernel` is launched with `test.shape`.
//!     println!("{}: {} {}", test.name, test.kernel, test.shape);
//! }
//! let (ctors, _dtors) = image.ctor_dtor_objects();
//! assert_eq!(ctors.len(), 2);
//! # Ok(())
//! # }
//! ```

mod desc;
mod elf;
mod error;
mod kdesc;
mod msgpack;
mod platform;
mod ptx;

use std::path::{Path, PathBuf};

pub use desc::{decode_descriptor, encode_descriptor, EncodeError};
pub use error::ImageError;
pub use gpurun_abi::{LaunchShape, ShouldPanic, TestDesc};
pub use kdesc::{
    decode_kernel_descriptor, encode_kernel_descriptor, Factor, KernelParam, KernelSignature,
    ParamKind,
};
pub use platform::Platform;

use gpurun_abi::desc::{
    is_supported_version, HEADER_LEN as DESCRIPTOR_HEADER_LEN, OLDEST_TEST_ABI_VERSION,
    TEST_ABI_VERSION,
};
use gpurun_abi::host::{HOST_ABI_VERSION, OLDEST_HOST_ABI_VERSION};
use gpurun_abi::symbols::{
    DESC_PREFIX, HOST_ABI_VERSION as HOST_ABI_VERSION_SYMBOL, KERNEL_DESC_PREFIX,
    RPC_CLIENT as RPC_CLIENT_SYMBOL, START_KERNEL, TEST_ABI_VERSION as TEST_ABI_VERSION_SYMBOL,
    TEST_KERNEL_PREFIX,
};
/// Prefix of constructor objects (LLVM libc's NVPTX start-up convention).
pub const CTOR_PREFIX: &str = "__init_array_object_";
/// Prefix of destructor objects.
pub const DTOR_PREFIX: &str = "__fini_array_object_";

/// The architecture a cubin was built for, from its ELF header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaArch {
    /// 90 for sm_90.
    pub sm: u32,
    /// Built for `sm_NNa` (runs only on exactly that architecture).
    pub arch_specific: bool,
}

impl CudaArch {
    /// Reads it from a cubin's ELF ABI version and `e_flags`. The encoding was checked against
    /// ptxas 12.9: ABI version 7 keeps the SM number in bits 0..8 (`0x800` marks `sm_NNa`);
    /// version 8 (sm_100 and later) keeps it in bits 8..16 (`0x8` marks `sm_NNa`).
    pub fn from_elf(abi_version: u8, e_flags: u32) -> Option<CudaArch> {
        match abi_version {
            7 => Some(CudaArch {
                sm: e_flags & 0xff,
                arch_specific: e_flags & 0x800 != 0,
            }),
            8 => Some(CudaArch {
                sm: (e_flags >> 8) & 0xff,
                arch_specific: e_flags & 0x8 != 0,
            }),
            _ => None,
        }
    }

    /// Whether code built for this runs on a device of compute capability `device_sm`: same
    /// major version and a minor version no higher than the device's (exact match for
    /// `sm_NNa`).
    pub fn runs_on(self, device_sm: u32) -> bool {
        if self.arch_specific {
            return self.sm == device_sm;
        }
        self.sm / 10 == device_sm / 10 && self.sm <= device_sm
    }
}

/// The message for undefined dynamic symbols in an AMDGPU code object (see
/// [`AmdgpuInfo::unresolvable_symbols`]).
pub fn describe_undefined_symbols(names: &[String]) -> String {
    format!(
        "undefined dynamic symbol(s) {}: ROCr resolves these only among agent symbols, so the \
         code object would not load (HSA_STATUS_ERROR_VARIABLE_UNDEFINED); define them in the \
         image",
        names.join(", ")
    )
}

/// What kind of image a file holds, decided from its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageKind {
    /// PTX text, for the CUDA driver's JIT.
    Ptx,
    /// An NVIDIA cubin (ELF, `EM_CUDA`).
    Cubin,
    /// An AMDGPU code object (ELF, `EM_AMDGPU`).
    Amdgpu,
    /// A host emulation shared library (ELF for the host's machine).
    Host,
}

impl ImageKind {
    /// The kind in words, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            ImageKind::Ptx => "PTX",
            ImageKind::Cubin => "cubin",
            ImageKind::Amdgpu => "AMDGPU",
            ImageKind::Host => "host emulation",
        }
    }
}

/// What is known statically about a global's initial contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GlobalInit {
    /// These bytes, followed by zeros up to the global's size. ELF globals hold their full
    /// contents as stored in the file (before relocation); PTX initializers may be shorter
    /// than the variable, and PTX zero-fills the rest.
    Bytes(Vec<u8>),
    /// All zeros (PTX variables without initializer, ELF `NOBITS` sections).
    Zeroed,
    /// Not known without loading (addresses of symbols, expressions, data outside the file).
    Unknown,
}

/// A global variable of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// The symbol name.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// ELF: the symbol value (an address in shared objects, a section offset in cubins).
    /// PTX: `None`.
    pub address: Option<u64>,
    /// ELF: the section name. PTX: the state space (`.global` or `.const`).
    pub section: Option<String>,
    /// The initial contents, where statically known.
    pub init: GlobalInit,
}

impl Global {
    /// The whole initial contents of a descriptor global no longer than `max_len` bytes, or
    /// why not (for the caller's `BadDescriptor`).
    fn descriptor_bytes(&self, max_len: usize) -> Result<Vec<u8>, String> {
        let len = usize::try_from(self.size)
            .ok()
            .filter(|len| *len <= max_len)
            .ok_or_else(|| format!("{} bytes is longer than any descriptor", self.size))?;
        self.read_at(0, len)
            .ok_or_else(|| "its contents are not stored in the image".to_owned())
    }

    /// `len` bytes at `offset` of the initial contents, if statically known and in range.
    pub fn read_at(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let end = offset.checked_add(len as u64)?;
        if end > self.size {
            return None;
        }
        match &self.init {
            GlobalInit::Unknown => None,
            GlobalInit::Zeroed => Some(vec![0; len]),
            GlobalInit::Bytes(prefix) => {
                let mut out = vec![0; len];
                let start = usize::try_from(offset).ok();
                if let Some(start) = start.filter(|s| *s < prefix.len()) {
                    let avail = (prefix.len() - start).min(len);
                    out[..avail].copy_from_slice(&prefix[start..start + avail]);
                }
                Some(out)
            }
        }
    }

    /// The little-endian `u32` at `offset`, if statically known.
    pub fn read_u32_at(&self, offset: u64) -> Option<u32> {
        let bytes = self.read_at(offset, 4)?;
        Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }
}

/// An AMDHSA kernel descriptor (`NAME.kd`), fields per LLVM's AMDGPUUsage "Kernel Descriptor".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelDescriptor {
    /// Address of the `.kd` symbol in the code object.
    pub address: u64,
    /// LDS bytes the kernel needs (offset 0).
    pub group_segment_fixed_size: u32,
    /// Scratch bytes per work-item (offset 4).
    pub private_segment_fixed_size: u32,
    /// Kernel argument segment size (offset 8).
    pub kernarg_size: u32,
    /// `kernel_code_properties` bits (offset 56).
    pub kernel_code_properties: u16,
}

impl KernelDescriptor {
    const WAVEFRONT_SIZE32: u16 = 1 << 10;
    const USES_DYNAMIC_STACK: u16 = 1 << 11;

    fn from_bytes(address: u64, bytes: &[u8]) -> Self {
        let u32_at = |at: usize| {
            bytes
                .get(at..at + 4)
                .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        KernelDescriptor {
            address,
            group_segment_fixed_size: u32_at(0),
            private_segment_fixed_size: u32_at(4),
            kernarg_size: u32_at(8),
            kernel_code_properties: bytes
                .get(56..58)
                .map_or(0, |b| u16::from_le_bytes([b[0], b[1]])),
        }
    }

    /// The kernel runs in wave32 mode (`ENABLE_WAVEFRONT_SIZE32`); otherwise wave64.
    pub fn wave32(&self) -> bool {
        self.kernel_code_properties & Self::WAVEFRONT_SIZE32 != 0
    }

    /// The wavefront size the kernel was compiled for.
    pub fn wavefront_size(&self) -> u32 {
        if self.wave32() {
            32
        } else {
            64
        }
    }

    /// The kernel's stack size is not known statically (`USES_DYNAMIC_STACK`).
    pub fn uses_dynamic_stack(&self) -> bool {
        self.kernel_code_properties & Self::USES_DYNAMIC_STACK != 0
    }
}

/// A kernel (entry point) of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The symbol name, as the runtime looks it up.
    pub name: String,
    /// AMDGPU only: the kernel descriptor.
    pub descriptor: Option<KernelDescriptor>,
    /// See [`Kernel::max_threads`].
    max_threads: Option<u32>,
    /// See [`Kernel::signature`].
    signature: Option<KernelSignature>,
    /// See [`Kernel::param_bytes`].
    param_bytes: Option<u64>,
    /// See [`Kernel::hidden_arguments`].
    hidden_arguments: Option<Vec<HiddenArgument>>,
}

/// What a hidden (implicit) kernel argument holds, from its AMDGPU metadata `.value_kind`. The
/// axis of the per-axis kinds is 0 (x), 1 (y) or 2 (z).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HiddenArgumentKind {
    /// `hidden_block_count_{x,y,z}` (code object v5): workgroups in the grid.
    BlockCount(u8),
    /// `hidden_group_size_{x,y,z}` (v5): work-items per workgroup.
    GroupSize(u8),
    /// `hidden_remainder_{x,y,z}` (v5): work-items in a partial last workgroup.
    Remainder(u8),
    /// `hidden_global_offset_{x,y,z}` (v4 and v5): added to global ids; 0 for CUDA-style grids.
    GlobalOffset(u8),
    /// `hidden_grid_dims` (v5): dimensions in use.
    GridDims,
    /// `hidden_queue_ptr` (v5): the `amd_queue_t` (which starts with `hsa_queue_t`) of the queue.
    QueuePtr,
    /// `hidden_dynamic_lds_size` (v5): bytes of group segment the dispatch adds to the kernel's
    /// static size (the launch's dynamic shared memory).
    DynamicLdsSize,
    /// Any other hidden kind (`hidden_hostcall_buffer`, `hidden_heap_v1`, ...), by its name.
    Other(String),
}

impl HiddenArgumentKind {
    /// The kind a metadata `.value_kind` names, `None` for an explicit argument's kind.
    pub fn from_value_kind(value_kind: &str) -> Option<HiddenArgumentKind> {
        let rest = value_kind.strip_prefix("hidden_")?;
        let per_axis = |prefix: &str| {
            let axis = rest.strip_prefix(prefix)?;
            ["x", "y", "z"]
                .iter()
                .position(|name| *name == axis)
                .map(|axis| axis as u8)
        };
        Some(if let Some(axis) = per_axis("block_count_") {
            HiddenArgumentKind::BlockCount(axis)
        } else if let Some(axis) = per_axis("group_size_") {
            HiddenArgumentKind::GroupSize(axis)
        } else if let Some(axis) = per_axis("remainder_") {
            HiddenArgumentKind::Remainder(axis)
        } else if let Some(axis) = per_axis("global_offset_") {
            HiddenArgumentKind::GlobalOffset(axis)
        } else if rest == "grid_dims" {
            HiddenArgumentKind::GridDims
        } else if rest == "queue_ptr" {
            HiddenArgumentKind::QueuePtr
        } else if rest == "dynamic_lds_size" {
            HiddenArgumentKind::DynamicLdsSize
        } else {
            HiddenArgumentKind::Other(value_kind.to_owned())
        })
    }
}

/// A hidden kernel argument the AMDGPU metadata lists for a kernel: what it is and where in the
/// kernel-argument segment the kernel reads it. Code object v4 and v5 put different kinds at
/// different offsets; the metadata says which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HiddenArgument {
    pub kind: HiddenArgumentKind,
    /// Byte offset in the kernel-argument segment.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

impl Kernel {
    /// A kernel named `name` with no descriptor and no block-size bound.
    pub fn new(name: impl Into<String>) -> Kernel {
        Kernel {
            name: name.into(),
            descriptor: None,
            max_threads: None,
            signature: None,
            param_bytes: None,
            hidden_arguments: None,
        }
    }

    /// How many threads a device panic in this kernel ends with it: its wavefront size on
    /// AMDGPU (from the kernel descriptor; docs/abi.md), `None` where a panic ends only its
    /// thread.
    pub fn panic_ends_wavefront(&self) -> Option<u32> {
        self.descriptor
            .as_ref()
            .map(KernelDescriptor::wavefront_size)
    }

    /// AMDGPU: the hidden arguments the metadata note lists in the kernel's `.args`, in order
    /// (empty when the kernel reads none). `None` when the image has no metadata for the kernel
    /// (other image kinds, a code object without a readable note).
    pub fn hidden_arguments(&self) -> Option<&[HiddenArgument]> {
        self.hidden_arguments.as_deref()
    }

    pub(crate) fn set_hidden_arguments(&mut self, arguments: Vec<HiddenArgument>) {
        self.hidden_arguments = Some(arguments);
    }

    /// The most threads one block of this kernel may have, as compiled: PTX `.maxntid` (or
    /// `.reqntid`), the product of its dimensions, which the build emits from each test's
    /// declared threads; AMDGPU metadata `.max_flat_workgroup_size`. `None` when the image does
    /// not say (a PTX kernel without the directive, a cubin, a host image): then only the
    /// driver knows (CUDA: `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`, which also counts
    /// registers). A launch with more threads per block fails.
    pub fn max_threads(&self) -> Option<u32> {
        self.max_threads
    }

    pub(crate) fn set_max_threads(&mut self, bound: Option<u32>) {
        self.max_threads = bound;
    }

    /// How many bytes of explicit parameters the kernel takes: the end of its last parameter,
    /// without padding after it (what `cuLaunchKernel` wants as the parameter buffer's size).
    /// PTX: its `.entry` parameter list; cubin: `EIATTR_CBANK_PARAM_SIZE` in its `.nv.info`
    /// section; AMDGPU: the metadata's `.args` that are not `hidden_*`. `None` when the image
    /// does not say (a host image, a kernel without that record). The loader uses it to pass
    /// `_end` the exit status only where it takes one (older LLVM libc: `_end(int)`; newer:
    /// `_end()`).
    pub fn param_bytes(&self) -> Option<u64> {
        self.param_bytes
    }

    pub(crate) fn set_param_bytes(&mut self, bytes: Option<u64>) {
        self.param_bytes = bytes;
    }

    /// The kernel's parameters as far as the image says: what a `#[gpurun::kernel]` recorded in
    /// its descriptor (`__gpurun_kdesc_NAME`: names, kinds, sizes and declared buffer lengths),
    /// else in a PTX image the kinds and sizes its `.entry` declares (no names, no lengths, 0 as
    /// a pointer's element size). `None` for other kernels of other images (tests, entry
    /// kernels, kernels built without the `gpurun` crate).
    pub fn signature(&self) -> Option<&KernelSignature> {
        self.signature.as_ref()
    }
}

/// Facts about an AMDGPU code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdgpuInfo {
    /// `EF_AMDGPU_MACH` (the low byte of `e_flags`).
    pub mach: u32,
    /// `EI_OSABI` (64 for AMDHSA code objects).
    pub os_abi: u8,
    /// `EI_ABIVERSION`: the code object version minus 2 (v5 is 3).
    pub abi_version: u8,
    /// Undefined dynamic symbols (sorted, unique): ROCr resolves them only among agent symbols.
    pub undefined_symbols: Vec<String>,
    /// The metadata's kernel list as `(.name, .symbol)`; `None` without a readable list.
    pub metadata_kernels: Option<Vec<(String, Option<String>)>>,
    /// The `NT_AMDGPU_METADATA` note (owner "AMDGPU", type 32) is present.
    pub has_metadata_note: bool,
    /// `amdhsa.target` from the metadata note, e.g. `amdgcn-amd-amdhsa--gfx90a:xnack-`: the
    /// ISA name to match against the agent's ISAs.
    pub target: Option<String>,
}

impl AmdgpuInfo {
    /// Why ROCr's loader refuses this code object on any GPU: it resolves undefined dynamic
    /// symbols only among agent symbols, so loading fails with
    /// `HSA_STATUS_ERROR_VARIABLE_UNDEFINED`. `None` when there is no such symbol.
    pub fn unresolvable_symbols(&self) -> Option<String> {
        (!self.undefined_symbols.is_empty())
            .then(|| describe_undefined_symbols(&self.undefined_symbols))
    }

    /// The processor name (`gfx90a`, ...) for the common `EF_AMDGPU_MACH` values.
    pub fn gfx_name(&self) -> Option<&'static str> {
        Some(match self.mach {
            0x2c => "gfx900",
            0x2f => "gfx906",
            0x30 => "gfx908",
            0x3f => "gfx90a",
            0x4c => "gfx942",
            0x4f => "gfx950",
            0x36 => "gfx1030",
            0x41 => "gfx1100",
            0x46 => "gfx1101",
            0x47 => "gfx1102",
            0x48 => "gfx1200",
            0x4e => "gfx1201",
            _ => return None,
        })
    }
}

/// A parsed image. Built once by [`Image::read`] or [`Image::parse`]; read-only afterwards.
#[derive(Debug, Clone)]
pub struct Image {
    kind: ImageKind,
    path: Option<PathBuf>,
    bytes: Vec<u8>,
    kernels: Vec<Kernel>,
    globals: Vec<Global>,
    tests: Vec<TestDesc>,
    test_abi_version: Option<u32>,
    host_abi_version: Option<u32>,
    ptx_version: Option<(u32, u32)>,
    ptx_target: Option<String>,
    elf_machine: Option<String>,
    elf_flags: Option<u32>,
    cuda_arch: Option<CudaArch>,
    amdgpu: Option<AmdgpuInfo>,
    ctors: Vec<usize>,
    dtors: Vec<usize>,
}

/// Longest kernel list quoted in a [`ImageError::MissingKernel`] message.
const MAX_LISTED_KERNELS: usize = 12;

impl Image {
    /// Reads and parses the image at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Image, ImageError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|error| ImageError::Io {
            path: path.to_owned(),
            error,
        })?;
        Image::parse(bytes, Some(path))
    }

    /// Parses an image from its bytes; `path_hint` is kept for messages only.
    pub fn parse(bytes: Vec<u8>, path_hint: Option<&Path>) -> Result<Image, ImageError> {
        if bytes.is_empty() {
            return Err(ImageError::Empty);
        }
        let mut image = Image {
            kind: ImageKind::Ptx,
            path: path_hint.map(Path::to_owned),
            bytes: Vec::new(),
            kernels: Vec::new(),
            globals: Vec::new(),
            tests: Vec::new(),
            test_abi_version: None,
            host_abi_version: None,
            ptx_version: None,
            ptx_target: None,
            elf_machine: None,
            elf_flags: None,
            cuda_arch: None,
            amdgpu: None,
            ctors: Vec::new(),
            dtors: Vec::new(),
        };
        if bytes.starts_with(b"\x7fELF") {
            let module = elf::parse(&bytes)?;
            image.kind = module.kind;
            image.kernels = module.kernels;
            image.globals = module.globals;
            image.elf_machine = Some(module.machine);
            image.elf_flags = Some(module.e_flags);
            image.cuda_arch = module.cuda_arch;
            image.amdgpu = module.amdgpu;
        } else if ptx::looks_like_ptx(&bytes) {
            // looks_like_ptx checked UTF-8 already; a failure here is still an error, not a panic.
            let text = std::str::from_utf8(&bytes).map_err(|_| ImageError::UnknownFormat)?;
            let mut module = ptx::parse(text)?;
            image.kernels = module
                .kernels
                .into_iter()
                .map(|name| {
                    let bound = module
                        .max_threads
                        .iter()
                        .find(|(kernel, _)| *kernel == name)
                        .map(|(_, bound)| *bound);
                    let declared = module
                        .params
                        .iter()
                        .position(|(kernel, _)| *kernel == name)
                        .map(|at| module.params.swap_remove(at).1);
                    Kernel {
                        max_threads: bound,
                        param_bytes: declared.as_ref().map(|declared| declared.bytes),
                        signature: declared.map(|declared| KernelSignature {
                            params: declared.params,
                        }),
                        ..Kernel::new(name)
                    }
                })
                .collect();
            image.globals = module.globals;
            image.ptx_version = module.version;
            image.ptx_target = module.target;
        } else {
            return Err(ImageError::UnknownFormat);
        }
        if image.kernels.is_empty() {
            return Err(ImageError::NoKernels {
                kind: image.kind.describe(),
            });
        }
        image.kernels.sort_by(|a, b| a.name.cmp(&b.name));
        image.globals.sort_by(|a, b| a.name.cmp(&b.name));
        if image.kind == ImageKind::Host {
            image.check_host_abi()?;
        }
        // Tests take the wavefront width from their kernel's descriptor.
        image.read_kernel_descriptors()?;
        image.read_test_table()?;
        image.find_ctors_dtors()?;
        image.bytes = bytes;
        Ok(image)
    }

    /// The host backend calls into a host image through `__gpurun_host_enter_thread`, whose
    /// signature is fixed by the host ABI version: refuse any image that does not state it.
    fn check_host_abi(&mut self) -> Result<(), ImageError> {
        let missing = |reason: &str| ImageError::MissingHostAbiVersion {
            reason: reason.to_owned(),
        };
        let global = self
            .global(HOST_ABI_VERSION_SYMBOL)
            .ok_or_else(|| missing("the symbol is not exported"))?;
        if global.size != 4 {
            return Err(missing("it is not 4 bytes"));
        }
        let found = global
            .read_u32_at(0)
            .ok_or_else(|| missing("its value is not stored in the image"))?;
        if !(OLDEST_HOST_ABI_VERSION..=HOST_ABI_VERSION).contains(&found) {
            return Err(ImageError::UnsupportedHostAbi {
                found,
                oldest: OLDEST_HOST_ABI_VERSION,
                supported: HOST_ABI_VERSION,
            });
        }
        self.host_abi_version = Some(found);
        Ok(())
    }

    fn read_test_table(&mut self) -> Result<(), ImageError> {
        if let Some(version) = self.global(TEST_ABI_VERSION_SYMBOL) {
            if version.size != 4 {
                return Err(ImageError::BadTestAbiVersion {
                    reason: format!("it is {} bytes, expected 4", version.size),
                });
            }
            let value = version
                .read_u32_at(0)
                .ok_or_else(|| ImageError::BadTestAbiVersion {
                    reason: "its value is not stored in the image".to_owned(),
                })?;
            if !is_supported_version(value) {
                return Err(ImageError::UnsupportedTestAbi {
                    found: value,
                    oldest: OLDEST_TEST_ABI_VERSION,
                    supported: TEST_ABI_VERSION,
                });
            }
            self.test_abi_version = Some(value);
        }
        let mut tests = Vec::new();
        for global in self
            .globals
            .iter()
            .filter(|g| g.name.starts_with(DESC_PREFIX))
        {
            if self.test_abi_version.is_none() {
                return Err(ImageError::MissingTestAbiVersion);
            }
            let id = &global.name[DESC_PREFIX.len()..];
            let kernel = format!("{TEST_KERNEL_PREFIX}{id}");
            let bad = |reason: String| ImageError::BadDescriptor {
                symbol: global.name.clone(),
                reason,
            };
            let Some(test_kernel) = self.kernel(&kernel) else {
                return Err(bad(format!("its kernel `{kernel}` is not in the image")));
            };
            let panic_ends_wavefront = test_kernel.panic_ends_wavefront();
            let max_len = DESCRIPTOR_HEADER_LEN + 3 * usize::from(u16::MAX);
            let bytes = global.descriptor_bytes(max_len).map_err(bad)?;
            tests.push(TestDesc {
                panic_ends_wavefront,
                ..decode_descriptor(&global.name, &kernel, &bytes)?
            });
        }
        tests.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(pair) = tests.windows(2).find(|pair| pair[0].name == pair[1].name) {
            return Err(ImageError::BadDescriptor {
                symbol: format!("{DESC_PREFIX}*"),
                reason: format!("two tests are named `{}`", pair[1].full_path),
            });
        }
        self.tests = tests;
        Ok(())
    }

    fn read_kernel_descriptors(&mut self) -> Result<(), ImageError> {
        let mut found = Vec::new();
        for global in self
            .globals
            .iter()
            .filter(|g| g.name.starts_with(KERNEL_DESC_PREFIX))
        {
            let kernel = &global.name[KERNEL_DESC_PREFIX.len()..];
            let bad = |reason: String| ImageError::BadDescriptor {
                symbol: global.name.clone(),
                reason,
            };
            // A build may drop a kernel nothing names while keeping its descriptor (the nvptx
            // test-mode executable keeps `__gpurun_*` symbols but only the entry points the
            // runtime exports): such a descriptor describes nothing that can be launched.
            let Ok(index) = self
                .kernels
                .binary_search_by(|k| k.name.as_str().cmp(kernel))
            else {
                continue;
            };
            // Every parameter with the longest name and length: far more than any real kernel.
            let max_len = gpurun_abi::kernel::HEADER_LEN
                + gpurun_abi::kernel::MAX_PARAMS
                    * (gpurun_abi::kernel::PARAM_HEADER_LEN
                        + usize::from(u16::MAX)
                        + gpurun_abi::kernel::FACTOR_LEN * gpurun_abi::kernel::MAX_FACTORS);
            let bytes = global.descriptor_bytes(max_len).map_err(bad)?;
            found.push((index, decode_kernel_descriptor(&global.name, &bytes)?));
        }
        for (index, signature) in found {
            self.kernels[index].signature = Some(signature);
        }
        Ok(())
    }

    fn find_ctors_dtors(&mut self) -> Result<(), ImageError> {
        let mut ctors = Vec::new();
        let mut dtors = Vec::new();
        for (index, global) in self.globals.iter().enumerate() {
            let list = if global.name.starts_with(CTOR_PREFIX) {
                &mut ctors
            } else if global.name.starts_with(DTOR_PREFIX) {
                &mut dtors
            } else {
                continue;
            };
            let priority = global
                .name
                .rsplit_once('_')
                .and_then(|(_, digits)| {
                    // `u16::from_str` accepts a leading `+`; the convention is digits only.
                    digits
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                        .then(|| digits.parse::<u16>().ok())?
                })
                .ok_or_else(|| ImageError::BadCtorDtorPriority {
                    symbol: global.name.clone(),
                })?;
            list.push((priority, index));
        }
        // Stable sort: equal priorities keep name order, so the result is deterministic.
        ctors.sort_by_key(|(priority, _)| *priority);
        dtors.sort_by_key(|(priority, _)| *priority);
        self.ctors = ctors.into_iter().map(|(_, i)| i).collect();
        self.dtors = dtors.into_iter().map(|(_, i)| i).collect();
        Ok(())
    }

    /// What kind of image this is.
    pub fn kind(&self) -> ImageKind {
        self.kind
    }

    /// The path it was read from, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The image's bytes, to hand to the runtime's module loader.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// All kernels, sorted by name.
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }

    /// All globals (defined, exported data symbols), sorted by name.
    pub fn globals(&self) -> &[Global] {
        &self.globals
    }

    /// The tests of the image, sorted by libtest name; empty for a plain image.
    pub fn tests(&self) -> &[TestDesc] {
        &self.tests
    }

    /// The kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels
            .binary_search_by(|k| k.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.kernels[i])
    }

    /// The global named `name`.
    pub fn global(&self, name: &str) -> Option<&Global> {
        self.globals
            .binary_search_by(|g| g.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.globals[i])
    }

    /// The kernel `name`, or an error listing the kernels that exist (the loader calls this
    /// with `_start` before running an image in loader mode).
    pub fn require_entry(&self, name: &str) -> Result<&Kernel, ImageError> {
        self.kernel(name).ok_or_else(|| ImageError::MissingKernel {
            name: name.to_owned(),
            available: self
                .kernels
                .iter()
                .take(MAX_LISTED_KERNELS)
                .map(|k| k.name.clone())
                .collect(),
            more: self.kernels.len().saturating_sub(MAX_LISTED_KERNELS),
        })
    }

    /// True when the image has LLVM libc's `_start` entry kernel.
    pub fn has_entry_points(&self) -> bool {
        self.kernel(START_KERNEL).is_some()
    }

    /// The global the loader fills with the RPC client (`__llvm_rpc_client`), if the image
    /// talks RPC.
    pub fn rpc_client(&self) -> Option<&Global> {
        self.global(RPC_CLIENT_SYMBOL)
    }

    /// The value of `__gpurun_test_abi_version` (already checked to be supported).
    pub fn test_abi_version(&self) -> Option<u32> {
        self.test_abi_version
    }

    /// Host images: the value of `__gpurun_host_abi_version` (already checked to be one the
    /// emulator runs: `gpurun_abi::host::OLDEST_HOST_ABI_VERSION` to `HOST_ABI_VERSION`).
    pub fn host_abi_version(&self) -> Option<u32> {
        self.host_abi_version
    }

    /// PTX: `.version` as (major, minor).
    pub fn ptx_version(&self) -> Option<(u32, u32)> {
        self.ptx_version
    }

    /// PTX: the architecture named by `.target` (e.g. `sm_70`).
    pub fn ptx_target(&self) -> Option<&str> {
        self.ptx_target.as_deref()
    }

    /// Cubin: the SM number (e.g. 70) from `e_flags`, for cubins of ELF ABI version 7.
    pub fn cuda_sm(&self) -> Option<u32> {
        self.cuda_arch.map(|arch| arch.sm)
    }

    /// Cubin: the architecture it was built for (ELF ABI versions 7 and 8).
    pub fn cuda_arch(&self) -> Option<CudaArch> {
        self.cuda_arch
    }

    /// ELF: the machine in words.
    pub fn elf_machine(&self) -> Option<&str> {
        self.elf_machine.as_deref()
    }

    /// ELF: the raw `e_flags`.
    pub fn elf_flags(&self) -> Option<u32> {
        self.elf_flags
    }

    /// AMDGPU: code-object facts.
    pub fn amdgpu(&self) -> Option<&AmdgpuInfo> {
        self.amdgpu.as_ref()
    }

    /// Constructor and destructor objects (`__init_array_object_*_PRIO`,
    /// `__fini_array_object_*_PRIO`), each list sorted by ascending priority. The loader runs
    /// constructors in this order and destructors in reverse, as LLVM libc's NVPTX start-up
    /// code expects.
    pub fn ctor_dtor_objects(&self) -> (Vec<&Global>, Vec<&Global>) {
        let pick = |indices: &[usize]| indices.iter().map(|i| &self.globals[*i]).collect();
        (pick(&self.ctors), pick(&self.dtors))
    }
}

#[cfg(test)]
mod tests {
    use super::{CudaArch, HiddenArgumentKind};

    #[test]
    fn hidden_argument_kinds_from_their_metadata_names() {
        let kind = HiddenArgumentKind::from_value_kind;
        assert_eq!(
            kind("hidden_dynamic_lds_size"),
            Some(HiddenArgumentKind::DynamicLdsSize)
        );
        assert_eq!(
            kind("hidden_block_count_y"),
            Some(HiddenArgumentKind::BlockCount(1))
        );
        assert_eq!(kind("hidden_queue_ptr"), Some(HiddenArgumentKind::QueuePtr));
        assert_eq!(
            kind("hidden_heap_v1"),
            Some(HiddenArgumentKind::Other("hidden_heap_v1".into()))
        );
        assert_eq!(kind("global_buffer"), None);
    }

    #[test]
    fn cubin_arch_from_both_header_versions() {
        // e_flags of real ptxas 12.9 / 13.x output.
        let arch = |abi, flags| CudaArch::from_elf(abi, flags).unwrap();
        let plain = |sm| CudaArch {
            sm,
            arch_specific: false,
        };
        let specific = |sm| CudaArch {
            sm,
            arch_specific: true,
        };
        assert_eq!(arch(7, 0x46_0546), plain(70));
        assert_eq!(arch(7, 0x46_055a), plain(90));
        assert_eq!(arch(7, 0x46_0d5a), specific(90));
        assert_eq!(arch(8, 0x600_6402), plain(100));
        assert_eq!(arch(8, 0x600_7802), plain(120));
        assert_eq!(arch(8, 0x600_640a), specific(100));
        assert_eq!(CudaArch::from_elf(51, 0x46), None);
    }

    #[test]
    fn cubin_compatibility_follows_the_major_version() {
        let plain = |sm| CudaArch {
            sm,
            arch_specific: false,
        };
        assert!(plain(80).runs_on(80));
        assert!(plain(80).runs_on(86));
        assert!(plain(80).runs_on(89));
        assert!(!plain(86).runs_on(80));
        assert!(!plain(80).runs_on(90));
        assert!(!plain(70).runs_on(90));
        assert!(plain(100).runs_on(103));
        assert!(!plain(100).runs_on(120));
        let accel = CudaArch {
            sm: 90,
            arch_specific: true,
        };
        assert!(accel.runs_on(90));
        assert!(!accel.runs_on(91));
    }
}
