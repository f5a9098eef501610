//! ELF images: AMDGPU code objects, NVIDIA cubins and host emulation libraries.
//!
//! The `object` crate does the ELF parsing; this module decides what the image is from its
//! machine and exports, finds kernels the way each runtime does (AMDGPU: `NAME.kd`
//! descriptors; cubin: entry functions; host: the ABI's exported entry points), and reads
//! globals with their bytes as stored in the file (before any relocation).

use object::elf::{EM_AMDGPU, EM_CUDA, SHT_NOBITS, STT_FUNC, STT_OBJECT};
use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{Endianness, Object, ObjectSection, ObjectSymbol, SectionIndex};

use crate::msgpack;
use crate::{AmdgpuInfo, Global, GlobalInit, ImageError, ImageKind, Kernel, KernelDescriptor};

/// `st_other` bit that marks a CUDA kernel entry in a cubin's symbol table.
const STO_CUDA_ENTRY: u8 = 0x10;
/// Note type of the AMDGPU code object metadata (msgpack), owner "AMDGPU".
const NT_AMDGPU_METADATA: u32 = 32;
/// Size of an AMDHSA kernel descriptor.
const KERNEL_DESCRIPTOR_LEN: usize = 64;

pub(crate) struct ElfModule {
    pub kind: ImageKind,
    pub machine: String,
    pub e_flags: u32,
    pub kernels: Vec<Kernel>,
    pub globals: Vec<Global>,
    pub amdgpu: Option<AmdgpuInfo>,
    pub cuda_arch: Option<crate::CudaArch>,
}

/// The fields of the ELF header that decide how to read the rest, read by hand so that a
/// truncated or foreign file still gets a precise message.
struct RawHeader {
    is_64: bool,
    machine: u16,
    e_type: u16,
    section_table_end: u64,
    program_table_end: u64,
}

fn raw_header(bytes: &[u8]) -> Result<RawHeader, ImageError> {
    let class = bytes.get(4).copied();
    let little = match bytes.get(5) {
        Some(1) => true,
        Some(2) => false,
        Some(other) => {
            return Err(ImageError::BadElf {
                reason: format!("unknown data encoding {other}"),
            })
        }
        None => false,
    };
    let (is_64, header_len) = match class {
        Some(1) => (false, 52),
        Some(2) => (true, 64),
        Some(other) => {
            return Err(ImageError::BadElf {
                reason: format!("unknown ELF class {other}"),
            })
        }
        None => (true, 64),
    };
    if bytes.len() < header_len {
        return Err(ImageError::Truncated {
            reason: format!(
                "{} bytes is shorter than the {header_len}-byte ELF header",
                bytes.len()
            ),
        });
    }
    let read = |at: usize, len: usize| -> u64 {
        let field = &bytes[at..at + len];
        let mut value = 0u64;
        for i in 0..len {
            let byte = if little { field[len - 1 - i] } else { field[i] };
            value = (value << 8) | u64::from(byte);
        }
        value
    };
    let (phoff, shoff, phentsize, phnum, shentsize, shnum) = if is_64 {
        (
            read(0x20, 8),
            read(0x28, 8),
            read(0x36, 2),
            read(0x38, 2),
            read(0x3a, 2),
            read(0x3c, 2),
        )
    } else {
        (
            read(0x1c, 4),
            read(0x20, 4),
            read(0x2a, 2),
            read(0x2c, 2),
            read(0x2e, 2),
            read(0x30, 2),
        )
    };
    let table_end = |off: u64, entsize: u64, num: u64| {
        if num == 0 {
            0
        } else {
            off.saturating_add(entsize.saturating_mul(num))
        }
    };
    Ok(RawHeader {
        is_64,
        machine: read(0x12, 2) as u16,
        e_type: read(0x10, 2) as u16,
        section_table_end: table_end(shoff, shentsize, shnum),
        program_table_end: table_end(phoff, phentsize, phnum),
    })
}

/// The ELF machine in words, for messages.
pub(crate) fn machine_name(machine: u16) -> String {
    match machine {
        3 => "x86".into(),
        8 => "MIPS".into(),
        20 => "PowerPC".into(),
        21 => "PowerPC64".into(),
        22 => "s390".into(),
        40 => "ARM".into(),
        62 => "x86-64".into(),
        183 => "AArch64".into(),
        EM_CUDA => "NVIDIA CUDA".into(),
        EM_AMDGPU => "AMDGPU".into(),
        243 => "RISC-V".into(),
        258 => "LoongArch".into(),
        other => format!("machine {other}"),
    }
}

/// One defined, non-local symbol, from `.symtab` or `.dynsym`.
struct Sym {
    name: String,
    st_type: u8,
    st_other: u8,
    address: u64,
    size: u64,
    section: Option<SectionIndex>,
    /// In `.dynsym`: visible to `dlsym`, which is all a host emulation image offers.
    dynamic: bool,
}

pub(crate) fn parse(bytes: &[u8]) -> Result<ElfModule, ImageError> {
    let raw = raw_header(bytes)?;
    let file_len = bytes.len() as u64;
    for (what, end) in [
        ("section header table", raw.section_table_end),
        ("program header table", raw.program_table_end),
    ] {
        if end > file_len {
            return Err(ImageError::Truncated {
                reason: format!("the {what} ends at byte {end} but the file has {file_len}"),
            });
        }
    }
    let machine = machine_name(raw.machine);
    if !raw.is_64 {
        return Err(ImageError::NotAGpuImage {
            machine: format!("32-bit {machine}"),
        });
    }
    let elf = ElfFile64::<Endianness>::parse(bytes).map_err(|e| ImageError::BadElf {
        reason: e.to_string(),
    })?;
    let endian = elf.endian();
    for section in elf.sections() {
        let header = section.elf_section_header();
        if header.sh_type(endian) == SHT_NOBITS {
            continue;
        }
        let end = header
            .sh_offset(endian)
            .saturating_add(header.sh_size(endian));
        if end > file_len {
            return Err(ImageError::Truncated {
                reason: format!(
                    "section `{}` ends at byte {end} but the file has {file_len}",
                    section.name().unwrap_or("?")
                ),
            });
        }
    }

    // Relocatable objects (`.o`, `ptxas -c` output) still need a linker; no runtime loads them.
    if raw.e_type == object::elf::ET_REL {
        return Err(ImageError::NotLinked { machine });
    }
    let symbols = collect_symbols(&elf)?;
    let e_flags = elf.elf_header().e_flags(endian);
    let (kind, mut kernels, symbols) = match raw.machine {
        EM_AMDGPU => (ImageKind::Amdgpu, amdgpu_kernels(&elf, &symbols)?, symbols),
        EM_CUDA => (ImageKind::Cubin, cubin_kernels(&elf, &symbols), symbols),
        _ => {
            // A host image is used through dlopen/dlsym, so only its exports count. This also
            // keeps ordinary executables (whose `.symtab` has a `_start`) out.
            let exported: Vec<Sym> = symbols.into_iter().filter(|s| s.dynamic).collect();
            if !is_host_image(&exported) {
                return Err(ImageError::NotAGpuImage { machine });
            }
            (ImageKind::Host, host_kernels(&exported), exported)
        }
    };
    let relocated = dynamic_relocation_offsets(&elf);
    let globals = symbols
        .iter()
        .filter(|s| {
            s.st_type == STT_OBJECT && !(kind == ImageKind::Amdgpu && s.name.ends_with(".kd"))
        })
        .map(|s| {
            let mut global = global(&elf, s);
            if is_relocated(&relocated, s.address, s.size) {
                // The loader rewrites these bytes (pointers in `.data.rel.ro`, ...), so what the
                // file holds is not what the program sees.
                global.init = GlobalInit::Unknown;
            }
            global
        })
        .collect();
    let amdgpu = (kind == ImageKind::Amdgpu).then(|| {
        let metadata = amdgpu_metadata(&elf).and_then(|note| Some((note, msgpack::decode(note)?)));
        if let Some((_, root)) = &metadata {
            set_max_flat_workgroup_sizes(&mut kernels, root);
            set_arguments(&mut kernels, root);
        }
        let ident = &elf.elf_header().e_ident;
        let mut undefined_symbols: Vec<String> = elf
            .dynamic_symbols()
            .filter(|symbol| symbol.is_undefined())
            .filter_map(|symbol| symbol.name().ok())
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect();
        undefined_symbols.sort();
        undefined_symbols.dedup();
        AmdgpuInfo {
            mach: e_flags & 0xff,
            os_abi: ident.os_abi,
            abi_version: ident.abi_version,
            undefined_symbols,
            has_metadata_note: amdgpu_metadata(&elf).is_some(),
            target: metadata.as_ref().and_then(|(_, value)| {
                value
                    .get("amdhsa.target")
                    .and_then(|t| t.as_str())
                    .map(str::to_owned)
            }),
            metadata_kernels: metadata
                .as_ref()
                .and_then(|(_, root)| metadata_kernels(root)),
        }
    });
    let ident = &elf.elf_header().e_ident;
    let cuda_arch = (kind == ImageKind::Cubin)
        .then(|| crate::CudaArch::from_elf(ident.abi_version, e_flags))
        .flatten();
    Ok(ElfModule {
        kind,
        machine,
        e_flags,
        kernels,
        globals,
        amdgpu,
        cuda_arch,
    })
}

fn collect_symbols(elf: &ElfFile64<'_, Endianness>) -> Result<Vec<Sym>, ImageError> {
    let mut out: Vec<Sym> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // `.dynsym` first, so a symbol in both tables is recorded as exported.
    let dynamic = elf.dynamic_symbols().map(|s| (s, true));
    for (symbol, is_dynamic) in dynamic.chain(elf.symbols().map(|s| (s, false))) {
        if symbol.is_local() || symbol.is_undefined() {
            continue;
        }
        let name = symbol.name().map_err(|e| ImageError::BadElf {
            reason: format!("unreadable symbol name: {e}"),
        })?;
        if name.is_empty() || !seen.insert(name.to_owned()) {
            continue;
        }
        let raw = symbol.elf_symbol();
        let endian = elf.endian();
        use object::read::elf::Sym as _;
        out.push(Sym {
            name: name.to_owned(),
            st_type: raw.st_type(),
            st_other: raw.st_other(),
            address: raw.st_value(endian),
            size: raw.st_size(endian),
            section: symbol.section_index(),
            dynamic: is_dynamic,
        });
    }
    Ok(out)
}

/// Sorted addresses that dynamic relocations write to (shared objects: host and AMDGPU).
fn dynamic_relocation_offsets(elf: &ElfFile64<'_, Endianness>) -> Vec<u64> {
    let mut offsets: Vec<u64> = elf
        .dynamic_relocations()
        .map(|relocations| relocations.map(|(offset, _)| offset).collect())
        .unwrap_or_default();
    offsets.sort_unstable();
    offsets
}

/// Longest relocated field (a 64-bit pointer).
const MAX_RELOCATION_WIDTH: u64 = 8;

/// True when a relocation writes into `[address, address + size)`.
fn is_relocated(sorted_offsets: &[u64], address: u64, size: u64) -> bool {
    let first = address.saturating_sub(MAX_RELOCATION_WIDTH - 1);
    let end = address.saturating_add(size);
    let start = sorted_offsets.partition_point(|offset| *offset < first);
    sorted_offsets
        .get(start)
        .is_some_and(|offset| *offset < end && size > 0)
}

/// The bytes a symbol covers in its section, as stored in the file.
fn symbol_bytes<'a>(elf: &ElfFile64<'a, Endianness>, sym: &Sym) -> GlobalInit {
    let Some(index) = sym.section else {
        return GlobalInit::Unknown;
    };
    let Ok(section) = elf.section_by_index(index) else {
        return GlobalInit::Unknown;
    };
    if section.elf_section_header().sh_type(elf.endian()) == SHT_NOBITS {
        return GlobalInit::Zeroed;
    }
    match section.data_range(sym.address, sym.size) {
        Ok(Some(data)) => GlobalInit::Bytes(data.to_vec()),
        _ => GlobalInit::Unknown,
    }
}

fn global(elf: &ElfFile64<'_, Endianness>, sym: &Sym) -> Global {
    let section = sym
        .section
        .and_then(|i| elf.section_by_index(i).ok())
        .and_then(|s| s.name().ok().map(str::to_owned));
    Global {
        name: sym.name.clone(),
        size: sym.size,
        address: Some(sym.address),
        section,
        init: symbol_bytes(elf, sym),
    }
}

fn amdgpu_kernels(
    elf: &ElfFile64<'_, Endianness>,
    symbols: &[Sym],
) -> Result<Vec<Kernel>, ImageError> {
    let mut kernels = Vec::new();
    for sym in symbols {
        let Some(name) = sym.name.strip_suffix(".kd") else {
            continue;
        };
        let bad = |reason: String| ImageError::BadKernelDescriptor {
            symbol: sym.name.clone(),
            reason,
        };
        if sym.size != KERNEL_DESCRIPTOR_LEN as u64 {
            return Err(bad(format!(
                "{} bytes, expected {KERNEL_DESCRIPTOR_LEN}",
                sym.size
            )));
        }
        let bytes = match symbol_bytes(elf, sym) {
            GlobalInit::Bytes(bytes) if bytes.len() == KERNEL_DESCRIPTOR_LEN => bytes,
            _ => return Err(bad("its bytes are not in the file".to_owned())),
        };
        kernels.push(Kernel {
            descriptor: Some(KernelDescriptor::from_bytes(sym.address, &bytes)),
            ..Kernel::new(name)
        });
    }
    Ok(kernels)
}

/// The metadata's `amdhsa.kernels` list as `(.name, .symbol)` pairs; `None` when it is not an
/// array of maps with a `.name`.
fn metadata_kernels(root: &msgpack::Value<'_>) -> Option<Vec<(String, Option<String>)>> {
    let Some(msgpack::Value::Array(listed)) = root.get("amdhsa.kernels") else {
        return None;
    };
    listed
        .iter()
        .map(|entry| {
            let name = entry.get(".name")?.as_str()?.to_owned();
            let symbol = entry
                .get(".symbol")
                .and_then(|symbol| symbol.as_str())
                .map(str::to_owned);
            Some((name, symbol))
        })
        .collect()
}

/// Each kernel's `.max_flat_workgroup_size` from the metadata's `amdhsa.kernels` list.
fn set_max_flat_workgroup_sizes(kernels: &mut [Kernel], root: &msgpack::Value<'_>) {
    for_each_listed_kernel(kernels, root, |kernel, entry| {
        if let Some(&msgpack::Value::Uint(size)) = entry.get(".max_flat_workgroup_size") {
            kernel.set_max_threads(u32::try_from(size).ok());
        }
    });
}

/// Calls `set` with each of `kernels` that the metadata's `amdhsa.kernels` list names, and its
/// entry there.
fn for_each_listed_kernel(
    kernels: &mut [Kernel],
    root: &msgpack::Value<'_>,
    mut set: impl FnMut(&mut Kernel, &msgpack::Value<'_>),
) {
    let Some(msgpack::Value::Array(listed)) = root.get("amdhsa.kernels") else {
        return;
    };
    for entry in listed {
        let Some(name) = entry.get(".name").and_then(|name| name.as_str()) else {
            continue;
        };
        if let Some(kernel) = kernels.iter_mut().find(|kernel| kernel.name == name) {
            set(kernel, entry);
        }
    }
}

/// Each kernel's arguments from its `.args` in the metadata's `amdhsa.kernels` list: the bytes
/// of its explicit arguments (the end of the last entry that is not a `hidden_*` one; implicit
/// arguments follow those) and its hidden arguments. A kernel whose `.args` has a malformed
/// entry (no offset or size) gets neither recorded, so the loader treats it as having no
/// metadata rather than sizing or placing arguments wrong.
fn set_arguments(kernels: &mut [Kernel], root: &msgpack::Value<'_>) {
    for_each_listed_kernel(kernels, root, |kernel, entry| {
        let arguments = match entry.get(".args") {
            Some(msgpack::Value::Array(arguments)) => arguments.as_slice(),
            // No `.args`: a kernel without arguments of any kind.
            None => &[],
            Some(_) => {
                kernel.set_param_bytes(None);
                return;
            }
        };
        let mut explicit_end = Some(0u64);
        let mut hidden = Some(Vec::new());
        for argument in arguments {
            let number = |key: &str| match argument.get(key) {
                Some(&msgpack::Value::Uint(value)) => u32::try_from(value).ok(),
                _ => None,
            };
            let placed = number(".offset").zip(number(".size"));
            let kind = argument.get(".value_kind").and_then(|kind| kind.as_str());
            match kind.and_then(crate::HiddenArgumentKind::from_value_kind) {
                Some(kind) => {
                    hidden = hidden.zip(placed).map(|(mut hidden, (offset, size))| {
                        hidden.push(crate::HiddenArgument { kind, offset, size });
                        hidden
                    });
                }
                // An explicit argument (a kind that is not `hidden_*`); none at all: unknown.
                None if kind.is_some() => {
                    explicit_end = explicit_end.zip(placed).and_then(|(end, (offset, size))| {
                        Some(end.max(u64::from(offset).checked_add(u64::from(size))?))
                    });
                }
                None => {}
            }
        }
        kernel.set_param_bytes(explicit_end);
        if let Some(hidden) = hidden {
            kernel.set_hidden_arguments(hidden);
        }
    });
}

fn cubin_kernels(elf: &ElfFile64<'_, Endianness>, symbols: &[Sym]) -> Vec<Kernel> {
    symbols
        .iter()
        .filter(|s| s.st_type == STT_FUNC && s.st_other & STO_CUDA_ENTRY != 0)
        .map(|s| {
            let mut kernel = Kernel::new(s.name.clone());
            let info = elf
                .section_by_name(&format!(".nv.info.{}", s.name))
                .and_then(|section| section.data().ok());
            kernel.set_param_bytes(info.and_then(cubin_param_bytes));
            kernel
        })
        .collect()
}

/// `EIATTR_CBANK_PARAM_SIZE`: a kernel's parameter bytes, in its `.nv.info.NAME` section.
const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
/// Record formats of `.nv.info`: no value, a byte, a half-word (all in the 4-byte record), and a
/// sized payload that follows the record.
const EIFMT_NVAL: u8 = 1;
const EIFMT_BVAL: u8 = 2;
const EIFMT_HVAL: u8 = 3;
const EIFMT_SVAL: u8 = 4;

/// The parameter bytes a cubin kernel's `.nv.info.NAME` records (ptxas writes
/// `EIATTR_CBANK_PARAM_SIZE` for every kernel with parameters, none for one without); `None` when
/// the section does not parse.
fn cubin_param_bytes(info: &[u8]) -> Option<u64> {
    let mut at = 0;
    let mut bytes = 0;
    while at < info.len() {
        let record = info.get(at..at + 4)?;
        let (format, attribute) = (record[0], record[1]);
        let value = u16::from_le_bytes([record[2], record[3]]);
        at += 4;
        match format {
            EIFMT_HVAL if attribute == EIATTR_CBANK_PARAM_SIZE => bytes = u64::from(value),
            EIFMT_NVAL | EIFMT_BVAL | EIFMT_HVAL => {}
            EIFMT_SVAL => at += usize::from(value),
            _ => return None,
        }
    }
    (at == info.len()).then_some(bytes)
}

/// Names a host emulation image exports as entry points (see docs/abi.md).
fn is_host_kernel_name(name: &str) -> bool {
    use gpurun_abi::symbols::{BEGIN_KERNEL, END_KERNEL, START_KERNEL, TEST_KERNEL_PREFIX};
    [BEGIN_KERNEL, START_KERNEL, END_KERNEL].contains(&name) || name.starts_with(TEST_KERNEL_PREFIX)
}

fn is_host_image(symbols: &[Sym]) -> bool {
    symbols.iter().any(|s| {
        s.name == gpurun_abi::symbols::HOST_ABI_VERSION
            || (s.st_type == STT_FUNC && is_host_kernel_name(&s.name))
    })
}

use gpurun_abi::symbols::HOST_KERNEL_MARKER_PREFIX as HOST_KERNEL_MARKER;

fn host_kernels(symbols: &[Sym]) -> Vec<Kernel> {
    let marked = |name: &str| {
        symbols
            .iter()
            .any(|s| s.name.strip_prefix(HOST_KERNEL_MARKER) == Some(name))
    };
    symbols
        .iter()
        .filter(|s| s.st_type == STT_FUNC && (is_host_kernel_name(&s.name) || marked(&s.name)))
        .map(|s| Kernel::new(s.name.clone()))
        .collect()
}

/// The payload of the `NT_AMDGPU_METADATA` note, if there is one.
fn amdgpu_metadata<'data>(elf: &ElfFile64<'data, Endianness>) -> Option<&'data [u8]> {
    let endian = elf.endian();
    let data = elf.data();
    for header in elf.elf_section_table().iter() {
        let Ok(Some(mut notes)) = header.notes(endian, data) else {
            continue;
        };
        while let Ok(Some(note)) = notes.next() {
            if note.name() == b"AMDGPU" && note.n_type(endian) == NT_AMDGPU_METADATA {
                return Some(note.desc());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::cubin_param_bytes;

    #[test]
    fn cubin_parameter_size_record() {
        // `.nv.info.fill` of `fill(.u64, .u64, .u32)` from ptxas 12.9, sm_70: the 0x19 record
        // says 0x14 (20) bytes; SVAL records (0x04) carry payloads to skip.
        let fill = [
            0x04, 0x36, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x0a, 0x08, 0x00, 0x08, 0x00,
            0x00, 0x00, 0x60, 0x01, 0x14, 0x00, 0x03, 0x19, 0x14, 0x00, 0x03, 0x1b, 0xff, 0x00,
        ];
        assert_eq!(cubin_param_bytes(&fill), Some(20));
        // A kernel without parameters has no such record.
        assert_eq!(cubin_param_bytes(&[0x03, 0x1b, 0xff, 0x00]), Some(0));
        // A payload running past the section, an unknown format: not understood.
        assert_eq!(cubin_param_bytes(&[0x04, 0x36, 0x08, 0x00, 0x01]), None);
        assert_eq!(cubin_param_bytes(&[0x09, 0x19, 0x14, 0x00]), None);
        assert_eq!(cubin_param_bytes(&[0x03, 0x19]), None);
    }
}
