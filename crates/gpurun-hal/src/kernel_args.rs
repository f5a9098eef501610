//! Argument blocks for the entry kernels, packed exactly as the device reads them.
//!
//! LLVM libc's loaders pass `argv` and `envp` as one host-visible block each: an array of
//! `count + 1` pointers (the last one null) followed by the NUL-terminated strings back to back.
//! The pointers are device addresses, so the block is built for a known base address.

/// Packs `strings` into the pointer-array-plus-strings block for a block that will live at
/// device address `base`. Strings containing NUL are cut at the NUL, as C would see them.
pub fn pack_strings<S: AsRef<[u8]>>(strings: &[S], base: u64) -> Vec<u8> {
    let table_len = (strings.len() + 1) * 8;
    let text_len: usize = strings.iter().map(|s| c_len(s.as_ref()) + 1).sum();
    let mut block = vec![0u8; table_len + text_len];
    let mut text_at = table_len;
    for (index, s) in strings.iter().enumerate() {
        let s = &s.as_ref()[..c_len(s.as_ref())];
        let address = base + text_at as u64;
        block[index * 8..index * 8 + 8].copy_from_slice(&address.to_le_bytes());
        block[text_at..text_at + s.len()].copy_from_slice(s);
        text_at += s.len() + 1; // the NUL is already there
    }
    block
}

fn c_len(s: &[u8]) -> usize {
    s.iter().position(|&b| b == 0).unwrap_or(s.len())
}

/// One kernel argument. Pointers are device addresses (`U64`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    I32(i32),
    U32(u32),
    U64(u64),
    F32(f32),
    F64(f64),
}

/// Where the host's C ABI (x86-64 System V, AArch64) passes an argument: integer and
/// floating-point arguments are numbered separately, each class in its own registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Register {
    /// An integer register, the value zero- or sign-extended to 64 bits.
    Integer(u64),
    /// A floating-point register holding these bits (an `f32` in the low half).
    Float(u64),
}

impl KernelArg {
    /// Size (and alignment) in the argument block.
    pub fn size(self) -> usize {
        match self {
            KernelArg::I32(_) | KernelArg::U32(_) | KernelArg::F32(_) => 4,
            KernelArg::U64(_) | KernelArg::F64(_) => 8,
        }
    }

    /// The register the host's C ABI passes the value in.
    pub fn as_register(self) -> Register {
        match self {
            KernelArg::I32(v) => Register::Integer(v as i64 as u64),
            KernelArg::U32(v) => Register::Integer(u64::from(v)),
            KernelArg::U64(v) => Register::Integer(v),
            KernelArg::F32(v) => Register::Float(u64::from(v.to_bits())),
            KernelArg::F64(v) => Register::Float(v.to_bits()),
        }
    }
}

/// Lays `args` out as a C struct with natural alignment: the argument buffer that CUDA's
/// `CU_LAUNCH_PARAM_BUFFER_POINTER` and HSA's kernarg segment expect.
pub fn pack_c_struct(args: &[KernelArg]) -> Vec<u8> {
    let mut block = Vec::new();
    for &arg in args {
        let size = arg.size();
        block.resize(block.len().next_multiple_of(size), 0);
        match arg {
            KernelArg::I32(v) => block.extend_from_slice(&v.to_le_bytes()),
            KernelArg::U32(v) => block.extend_from_slice(&v.to_le_bytes()),
            KernelArg::U64(v) => block.extend_from_slice(&v.to_le_bytes()),
            KernelArg::F32(v) => block.extend_from_slice(&v.to_le_bytes()),
            KernelArg::F64(v) => block.extend_from_slice(&v.to_le_bytes()),
        }
    }
    block
}

/// Arguments of `_begin(int argc, char **argv, char **envp)`.
pub fn begin_args(argc: i32, argv: u64, envp: u64) -> Vec<KernelArg> {
    vec![
        KernelArg::I32(argc),
        KernelArg::U64(argv),
        KernelArg::U64(envp),
    ]
}

/// Arguments of `_end`: the exit status when the image's `_end` takes one (`param_bytes`, its
/// parameter bytes as the image records them, at least an `int`), as LLVM's loaders passed it
/// to `_end(int)` until LLVM libc's start code became `_end()` (2025); none otherwise. A
/// parameter the kernel does not declare must not be passed: CUDA refuses the launch, and on
/// AMD it would move the implicit arguments.
pub fn end_args(status: i32, param_bytes: Option<u64>) -> Vec<KernelArg> {
    if param_bytes.is_some_and(|bytes| bytes >= 4) {
        vec![KernelArg::I32(status)]
    } else {
        Vec::new()
    }
}

/// Arguments of `_start(int argc, char **argv, char **envp, int *ret)`.
pub fn start_args(argc: i32, argv: u64, envp: u64, ret: u64) -> Vec<KernelArg> {
    let mut args = begin_args(argc, argv, envp);
    args.push(KernelArg::U64(ret));
    args
}

/// `KEY=VALUE` strings for the whole environment of this process, as LLVM's loader passes it.
pub fn environment_strings() -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    std::env::vars_os()
        .map(|(key, value)| {
            let mut entry = key.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            entry
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_pointer_table_then_strings() {
        let block = pack_strings(&["ab", "c"], 0x1000);
        // 3 pointers (24 bytes), then "ab\0c\0".
        assert_eq!(block.len(), 24 + 5);
        assert_eq!(&block[0..8], &(0x1000u64 + 24).to_le_bytes());
        assert_eq!(&block[8..16], &(0x1000u64 + 27).to_le_bytes());
        assert_eq!(&block[16..24], &[0; 8]);
        assert_eq!(&block[24..], b"ab\0c\0");
    }

    #[test]
    fn empty_list_is_a_single_null() {
        assert_eq!(pack_strings::<&str>(&[], 0x40), vec![0; 8]);
    }

    #[test]
    fn interior_nul_cuts_the_string() {
        assert_eq!(&pack_strings(&[b"a\0b"], 0)[16..], b"a\0");
    }

    #[test]
    fn end_gets_the_status_only_where_it_takes_one() {
        assert_eq!(end_args(7, Some(4)), [KernelArg::I32(7)]);
        assert_eq!(end_args(7, Some(0)), []);
        assert_eq!(end_args(7, None), []);
    }

    #[test]
    fn start_args_layout() {
        let block = pack_c_struct(&start_args(3, 0x11, 0x22, 0x33));
        assert_eq!(block.len(), 32);
        assert_eq!(&block[0..4], &3i32.to_le_bytes());
        assert_eq!(&block[8..16], &0x11u64.to_le_bytes());
        assert_eq!(&block[16..24], &0x22u64.to_le_bytes());
        assert_eq!(&block[24..32], &0x33u64.to_le_bytes());
    }

    #[test]
    fn floats_pack_as_their_bits_and_take_float_registers() {
        let block = pack_c_struct(&[KernelArg::F32(2.0), KernelArg::F64(-1.5)]);
        assert_eq!(block.len(), 16);
        assert_eq!(&block[0..4], &2.0f32.to_le_bytes());
        assert_eq!(&block[8..16], &(-1.5f64).to_le_bytes());
        assert_eq!(
            KernelArg::F32(2.0).as_register(),
            Register::Float(u64::from(2.0f32.to_bits()))
        );
        assert_eq!(
            KernelArg::I32(-1).as_register(),
            Register::Integer(u64::MAX)
        );
    }

    #[test]
    fn c_struct_aligns_each_field() {
        let block = pack_c_struct(&[KernelArg::U32(1), KernelArg::U64(2), KernelArg::I32(-1)]);
        assert_eq!(block.len(), 20);
        assert_eq!(&block[4..8], &[0; 4]);
        assert_eq!(&block[16..20], &(-1i32).to_le_bytes());
    }
}
