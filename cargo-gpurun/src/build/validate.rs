//! Offline checks of the images a build makes, so a broken image fails at build time rather than
//! at load time on a GPU we may not have: PTX has a header and kernels (and assembles with ptxas);
//! an AMDGPU code object is an `EM_AMDGPU` ELF with an AMDHSA metadata note that lists its kernels,
//! each with its `NAME.kd` kernel descriptor symbol.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use object::read::elf::{ElfFile64, FileHeader, SectionHeader};
use object::{Object, ObjectSymbol};

/// ELF machine number of AMDGPU code objects.
pub const EM_AMDGPU: u16 = 224;
/// Note type of the AMDHSA code object metadata (MessagePack), owner `AMDGPU`.
pub const NT_AMDGPU_METADATA: u32 = 32;
/// Owner name of AMDGPU notes.
pub const AMDGPU_NOTE_OWNER: &[u8] = b"AMDGPU";
/// `EI_OSABI` of AMDHSA code objects (`ELFOSABI_AMDGPU_HSA`).
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// The code object version we emit (LLVM 22 defaults to 6, which ROCr 5.x rejects).
pub const AMDHSA_CODE_OBJECT_VERSION: u8 = 5;
/// `-Zbuild-std-features` of amdgcn builds: compiler_builtins' `mem` defines `memcpy`,
/// `memcmp`, `strlen`, ... in the image, where ROCr's loader could not resolve them.
pub const AMDGCN_BUILD_STD_FEATURES: &str = "compiler-builtins-mem";
/// Rustflags of amdgcn builds: code object v5 (see [`AMDHSA_CODE_OBJECT_VERSION`]).
pub const AMDGCN_RUSTFLAGS: &[&str] = &["-Cllvm-args=--amdhsa-code-object-version=5"];

/// `EI_ABIVERSION` of an AMDHSA code object of `version` (v3 is 1, v4 2, v5 3, v6 4).
pub const fn amdhsa_abi_version(code_object_version: u8) -> u8 {
    code_object_version.saturating_sub(2)
}

/// Why an image is not valid. One line each.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("PTX has no `{0}` directive")]
    PtxMissingDirective(&'static str),
    #[error("PTX declares no kernels (`.entry`)")]
    PtxNoKernels,
    #[error("ptxas failed for {arch}: {stderr}")]
    Ptxas { arch: String, stderr: String },
    #[error("ptxas crashed ({status}) assembling for {arch}")]
    PtxasCrashed { arch: String, status: String },
    #[error("cannot run ptxas at {path}: {detail}")]
    PtxasNotRunnable { path: String, detail: String },
    #[error("not a 64-bit little-endian ELF file: {0}")]
    NotElf(String),
    #[error("ELF machine is {0}, not EM_AMDGPU (224)")]
    WrongMachine(u16),
    #[error("no AMDHSA metadata note (owner AMDGPU, type 32)")]
    NoMetadataNote,
    #[error("bad AMDHSA metadata: {0}")]
    BadMetadata(String),
    #[error("AMDHSA metadata lists no kernels")]
    NoKernels,
    #[error("kernel `{kernel}` has no kernel descriptor symbol `{symbol}`")]
    MissingKernelDescriptor { kernel: String, symbol: String },
    #[error("undefined dynamic symbol(s) {}: ROCr resolves these only among agent symbols, so the code object would not load (HSA_STATUS_ERROR_VARIABLE_UNDEFINED); define them in the image", .0.join(", "))]
    UndefinedSymbols(Vec<String>),
    #[error("not an AMDHSA code object (ELF OS/ABI {0}, expected 64)")]
    NotAmdhsa(u8),
    #[error("AMDHSA code object v{version} (ELF ABI version {abi_version}); expected v4 or v5: ROCr 5.x loaders (Debian's 5.2 among them) know up to v5 and reject newer ones")]
    UnsupportedCodeObjectVersion { version: u16, abi_version: u8 },
}

/// What the PTX check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtxSummary {
    /// `.version` (PTX ISA version), e.g. `7.0`.
    pub version: String,
    /// `.target`, e.g. `sm_70`.
    pub target: String,
    /// Names of the `.entry` kernels, in file order.
    pub entries: Vec<String>,
}

/// Checks the PTX text for its header and lists its kernels.
pub fn check_ptx(text: &str) -> Result<PtxSummary, ValidateError> {
    let mut version = None;
    let mut target = None;
    let mut entries = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut words = line.split_whitespace();
        match words.next() {
            Some(".version") => version = words.next().map(str::to_owned),
            Some(".target") => {
                target = words
                    .next()
                    .map(|arch| arch.trim_end_matches(',').to_owned())
            }
            Some(_) => {
                // `.visible .entry NAME(` or `.entry NAME (`
                let mut words = line.split_whitespace().skip_while(|word| *word != ".entry");
                if words.next().is_some() {
                    if let Some(name) = words.next() {
                        let name = name.split('(').next().unwrap_or(name);
                        if !name.is_empty() {
                            entries.push(name.to_owned());
                        }
                    }
                }
            }
            None => {}
        }
    }
    let version = version.ok_or(ValidateError::PtxMissingDirective(".version"))?;
    let target = target.ok_or(ValidateError::PtxMissingDirective(".target"))?;
    if entries.is_empty() {
        return Err(ValidateError::PtxNoKernels);
    }
    Ok(PtxSummary {
        version,
        target,
        entries,
    })
}

/// Assembles `ptx` for `arch` with `ptxas`, writing `output`. ptxas's whole stderr is the error.
pub fn assemble_ptx(
    ptxas: &Path,
    ptx: &Path,
    arch: &str,
    output: &Path,
) -> Result<(), ValidateError> {
    let result = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg(ptx)
        .arg("-o")
        .arg(output)
        .output()
        .map_err(|err| ValidateError::PtxasNotRunnable {
            path: ptxas.display().to_string(),
            detail: err.to_string(),
        })?;
    if result.status.success() {
        return Ok(());
    }
    let _ = std::fs::remove_file(output);
    // Killed by a signal: a crash of ptxas itself, not a verdict on the PTX.
    if result.status.code().is_none() {
        return Err(ValidateError::PtxasCrashed {
            arch: arch.to_owned(),
            status: result.status.to_string(),
        });
    }
    let mut stderr = String::from_utf8_lossy(&result.stderr).trim().to_owned();
    if stderr.is_empty() {
        stderr = format!("exited with {}", result.status);
    }
    Err(ValidateError::Ptxas {
        arch: arch.to_owned(),
        stderr,
    })
}

/// What the AMDGPU check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdgpuSummary {
    /// Kernel names from the metadata (`.name`), in metadata order.
    pub kernels: Vec<String>,
    /// `amdhsa.target` from the metadata, e.g. `amdgcn-amd-amdhsa--gfx90a`.
    pub target: Option<String>,
}

/// Checks an AMDGPU code object: `EM_AMDGPU`, an AMDHSA metadata note, and a `.kd` symbol for
/// every kernel the metadata lists.
pub fn check_amdgpu_code_object(bytes: &[u8]) -> Result<AmdgpuSummary, ValidateError> {
    let elf = ElfFile64::<object::Endianness>::parse(bytes)
        .map_err(|err| ValidateError::NotElf(err.to_string()))?;
    let endian = elf.endian();
    let header = elf.elf_header();
    let machine = header.e_machine(endian);
    if machine != EM_AMDGPU {
        return Err(ValidateError::WrongMachine(machine));
    }
    let os_abi = header.e_ident().os_abi;
    if os_abi != ELFOSABI_AMDGPU_HSA {
        return Err(ValidateError::NotAmdhsa(os_abi));
    }
    let abi_version = header.e_ident().abi_version;
    if !(amdhsa_abi_version(4)..=amdhsa_abi_version(5)).contains(&abi_version) {
        return Err(ValidateError::UnsupportedCodeObjectVersion {
            version: u16::from(abi_version) + 2,
            abi_version,
        });
    }
    let mut undefined: Vec<String> = elf
        .dynamic_symbols()
        .filter(|symbol| symbol.is_undefined())
        .filter_map(|symbol| symbol.name().ok())
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect();
    if !undefined.is_empty() {
        undefined.sort();
        undefined.dedup();
        return Err(ValidateError::UndefinedSymbols(undefined));
    }
    let mut metadata = None;
    for section in elf.elf_section_table().iter() {
        let notes = section
            .notes(endian, bytes)
            .map_err(|err| ValidateError::NotElf(err.to_string()))?;
        let Some(mut notes) = notes else { continue };
        while let Some(note) = notes
            .next()
            .map_err(|err| ValidateError::NotElf(err.to_string()))?
        {
            if note.name() == AMDGPU_NOTE_OWNER && note.n_type(endian) == NT_AMDGPU_METADATA {
                metadata = Some(note.desc());
            }
        }
    }
    let metadata = metadata.ok_or(ValidateError::NoMetadataNote)?;
    let root = msgpack::parse(metadata).map_err(ValidateError::BadMetadata)?;
    let target = root
        .get("amdhsa.target")
        .and_then(msgpack::Value::as_str)
        .map(str::to_owned);
    let kernel_list = root
        .get("amdhsa.kernels")
        .and_then(msgpack::Value::as_array)
        .ok_or_else(|| ValidateError::BadMetadata("no `amdhsa.kernels` array".to_owned()))?;
    let symbols: BTreeSet<&str> = elf
        .symbols()
        .chain(elf.dynamic_symbols())
        .filter_map(|symbol| symbol.name().ok())
        .collect();
    let mut kernels = Vec::new();
    for kernel in kernel_list {
        let name = kernel
            .get(".name")
            .and_then(msgpack::Value::as_str)
            .ok_or_else(|| ValidateError::BadMetadata("a kernel has no `.name`".to_owned()))?;
        let symbol = kernel
            .get(".symbol")
            .and_then(msgpack::Value::as_str)
            .ok_or_else(|| {
                ValidateError::BadMetadata(format!("kernel `{name}` has no `.symbol`"))
            })?;
        if symbol != format!("{name}.kd") || !symbols.contains(symbol) {
            return Err(ValidateError::MissingKernelDescriptor {
                kernel: name.to_owned(),
                symbol: format!("{name}.kd"),
            });
        }
        kernels.push(name.to_owned());
    }
    if kernels.is_empty() {
        return Err(ValidateError::NoKernels);
    }
    Ok(AmdgpuSummary { kernels, target })
}

/// The subset of MessagePack the AMDHSA metadata uses, decoded into a tree. Bounded: nesting depth
/// is limited and every length is checked against the bytes left, so any input gives `Ok` or `Err`.
pub mod msgpack {
    /// A decoded value. Extension types and binary data are kept as raw bytes.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Value {
        Nil,
        Bool(bool),
        Int(i128),
        Float(f64),
        Str(String),
        Bytes(Vec<u8>),
        Array(Vec<Value>),
        Map(Vec<(Value, Value)>),
    }

    impl Value {
        /// The value under a string key of a map.
        pub fn get(&self, key: &str) -> Option<&Value> {
            match self {
                Value::Map(entries) => entries
                    .iter()
                    .find(|(entry_key, _)| entry_key.as_str() == Some(key))
                    .map(|(_, value)| value),
                _ => None,
            }
        }

        pub fn as_str(&self) -> Option<&str> {
            match self {
                Value::Str(text) => Some(text),
                _ => None,
            }
        }

        pub fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Array(items) => Some(items),
                _ => None,
            }
        }
    }

    const MAX_DEPTH: usize = 64;

    /// Decodes one value that must span all of `bytes` (trailing padding NULs are allowed: notes
    /// are padded to 4 bytes).
    pub fn parse(bytes: &[u8]) -> Result<Value, String> {
        let mut reader = Reader { bytes, at: 0 };
        let value = reader.value(0)?;
        if bytes[reader.at..].iter().any(|&byte| byte != 0) {
            return Err(format!("trailing bytes after offset {}", reader.at));
        }
        Ok(value)
    }

    struct Reader<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl<'a> Reader<'a> {
        fn take(&mut self, count: usize) -> Result<&'a [u8], String> {
            let end = self
                .at
                .checked_add(count)
                .filter(|end| *end <= self.bytes.len())
                .ok_or_else(|| format!("truncated at offset {}", self.at))?;
            let slice = &self.bytes[self.at..end];
            self.at = end;
            Ok(slice)
        }

        fn uint(&mut self, size: usize) -> Result<u64, String> {
            Ok(self
                .take(size)?
                .iter()
                .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte)))
        }

        fn int(&mut self, size: usize) -> Result<i64, String> {
            let raw = self.uint(size)?;
            let shift = 64 - 8 * size as u32;
            // Sign-extend from `size` bytes.
            Ok(((raw << shift) as i64) >> shift)
        }

        fn len(&mut self, size: usize) -> Result<usize, String> {
            let len = self.uint(size)?;
            usize::try_from(len).map_err(|_| format!("length {len} too large"))
        }

        fn string(&mut self, len: usize) -> Result<Value, String> {
            let bytes = self.take(len)?;
            String::from_utf8(bytes.to_vec())
                .map(Value::Str)
                .map_err(|_| "string is not UTF-8".to_owned())
        }

        fn array(&mut self, len: usize, depth: usize) -> Result<Value, String> {
            // Each element takes at least one byte: a bound on the allocation.
            let mut items = Vec::with_capacity(len.min(self.bytes.len() - self.at));
            for _ in 0..len {
                items.push(self.value(depth + 1)?);
            }
            Ok(Value::Array(items))
        }

        fn map(&mut self, len: usize, depth: usize) -> Result<Value, String> {
            let mut entries = Vec::with_capacity(len.min(self.bytes.len() - self.at));
            for _ in 0..len {
                let key = self.value(depth + 1)?;
                let value = self.value(depth + 1)?;
                entries.push((key, value));
            }
            Ok(Value::Map(entries))
        }

        fn ext(&mut self, len: usize) -> Result<Value, String> {
            self.take(1)?; // the extension type
            Ok(Value::Bytes(self.take(len)?.to_vec()))
        }

        fn value(&mut self, depth: usize) -> Result<Value, String> {
            if depth > MAX_DEPTH {
                return Err("nested too deeply".to_owned());
            }
            let marker = self.take(1)?[0];
            match marker {
                0x00..=0x7f => Ok(Value::Int(i128::from(marker))),
                0x80..=0x8f => self.map(usize::from(marker & 0x0f), depth),
                0x90..=0x9f => self.array(usize::from(marker & 0x0f), depth),
                0xa0..=0xbf => self.string(usize::from(marker & 0x1f)),
                0xc0 => Ok(Value::Nil),
                0xc2 => Ok(Value::Bool(false)),
                0xc3 => Ok(Value::Bool(true)),
                0xc4..=0xc6 => {
                    let len = self.len(1 << (marker - 0xc4))?;
                    Ok(Value::Bytes(self.take(len)?.to_vec()))
                }
                0xc7..=0xc9 => {
                    let len = self.len(1 << (marker - 0xc7))?;
                    self.ext(len)
                }
                0xca => Ok(Value::Float(f64::from(
                    f32::from_bits(self.uint(4)? as u32),
                ))),
                0xcb => Ok(Value::Float(f64::from_bits(self.uint(8)?))),
                0xcc..=0xcf => Ok(Value::Int(i128::from(self.uint(1 << (marker - 0xcc))?))),
                0xd0..=0xd3 => Ok(Value::Int(i128::from(self.int(1 << (marker - 0xd0))?))),
                0xd4..=0xd8 => self.ext(1 << (marker - 0xd4)),
                0xd9..=0xdb => {
                    let len = self.len(1 << (marker - 0xd9))?;
                    self.string(len)
                }
                0xdc | 0xdd => {
                    let len = self.len(2 << (marker - 0xdc))?;
                    self.array(len, depth)
                }
                0xde | 0xdf => {
                    let len = self.len(2 << (marker - 0xde))?;
                    self.map(len, depth)
                }
                0xe0..=0xff => Ok(Value::Int(i128::from(marker as i8))),
                0xc1 => Err("reserved marker 0xc1".to_owned()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::msgpack::{parse, Value};
    use super::*;

    const PTX: &str = "//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 7.0\n.target sm_70\n.address_size 64\n\n\t// .globl\t_start\n.visible .entry _start(\n\t.param .u32 _start_param_0\n)\n{\n\tret;\n}\n.entry __gpurun_test_a_0123456789abcdef()\n{\n\tret;\n}\n";

    #[test]
    fn ptx_summary_lists_entries() {
        let summary = check_ptx(PTX).unwrap();
        assert_eq!(summary.version, "7.0");
        assert_eq!(summary.target, "sm_70");
        assert_eq!(
            summary.entries,
            vec!["_start", "__gpurun_test_a_0123456789abcdef"]
        );
    }

    #[test]
    fn ptx_without_header_or_kernels_is_rejected() {
        assert!(matches!(
            check_ptx(".target sm_70\n.visible .entry k()\n{}"),
            Err(ValidateError::PtxMissingDirective(".version"))
        ));
        assert!(matches!(
            check_ptx(".version 7.0\n.target sm_70\n.func f()\n{}"),
            Err(ValidateError::PtxNoKernels)
        ));
    }

    #[test]
    fn msgpack_decodes_nested_maps_and_scalars() {
        // {"a": [1, -1, "x"], "b": true, "c": 300u16, "d": nil}
        let bytes = [
            0x84, 0xa1, b'a', 0x93, 0x01, 0xff, 0xa1, b'x', 0xa1, b'b', 0xc3, 0xa1, b'c', 0xcd,
            0x01, 0x2c, 0xa1, b'd', 0xc0, 0, 0,
        ];
        let value = parse(&bytes).unwrap();
        assert_eq!(
            value.get("a").unwrap().as_array().unwrap(),
            &[Value::Int(1), Value::Int(-1), Value::Str("x".into())]
        );
        assert_eq!(value.get("b"), Some(&Value::Bool(true)));
        assert_eq!(value.get("c"), Some(&Value::Int(300)));
        assert_eq!(value.get("d"), Some(&Value::Nil));
    }

    #[test]
    fn msgpack_rejects_truncated_and_hostile_input() {
        assert!(parse(&[0xdd, 0xff, 0xff, 0xff, 0xff]).is_err()); // huge array, no elements
        assert!(parse(&[0xda, 0x00, 0x10, b'a']).is_err()); // string longer than input
        assert!(parse(&[0xc1]).is_err());
        assert!(parse(&[0x91; 200]).is_err()); // nested too deeply
        assert!(parse(&[0x01, 0x02]).is_err()); // trailing data
                                                // Every prefix of a valid document fails cleanly, never panics.
        let document = [0x81, 0xa1, b'k', 0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xc2];
        assert!(parse(&document).is_ok());
        for end in 0..document.len() {
            assert!(parse(&document[..end]).is_err(), "prefix {end} parsed");
        }
    }

    #[test]
    fn code_object_versions_map_to_elf_abi_versions() {
        assert_eq!(amdhsa_abi_version(4), 2);
        assert_eq!(amdhsa_abi_version(AMDHSA_CODE_OBJECT_VERSION), 3);
        assert_eq!(amdhsa_abi_version(6), 4);
        assert!(AMDGCN_RUSTFLAGS
            .iter()
            .any(|flag| flag.ends_with(&format!("version={AMDHSA_CODE_OBJECT_VERSION}"))));
    }

    #[test]
    fn non_elf_and_wrong_machine_are_rejected() {
        assert!(matches!(
            check_amdgpu_code_object(b"not an elf"),
            Err(ValidateError::NotElf(_))
        ));
        // A minimal x86-64 ELF header with no sections.
        let mut header = vec![0u8; 64];
        header[..4].copy_from_slice(b"\x7fELF");
        header[4] = 2; // 64-bit
        header[5] = 1; // little-endian
        header[6] = 1; // version
        header[16] = 3; // ET_DYN
        header[18] = 62; // EM_X86_64
        header[20] = 1;
        header[52] = 64; // e_ehsize
        assert!(matches!(
            check_amdgpu_code_object(&header),
            Err(ValidateError::WrongMachine(62))
        ));
    }
}
