//! The rule that ROCr cannot load a code object with undefined dynamic symbols, on a real
//! sample with one symbol made undefined.

use gpurun_image::Image;
use object::read::elf::{ElfFile64, SectionHeader};
use object::{Object, ObjectSymbol};
use std::path::Path;

/// A copy of `bytes` with the dynamic symbol `name` made undefined (`st_shndx = SHN_UNDEF`).
fn with_undefined_symbol(bytes: &[u8], name: &str) -> Vec<u8> {
    let elf = ElfFile64::<object::Endianness>::parse(bytes).unwrap();
    let endian = elf.endian();
    let symbol = elf
        .dynamic_symbols()
        .find(|symbol| symbol.name() == Ok(name))
        .expect("the sample has the symbol");
    let dynsym = elf
        .elf_section_table()
        .iter()
        .find(|section| section.sh_type(endian) == object::elf::SHT_DYNSYM)
        .unwrap();
    // Elf64_Sym is 24 bytes; st_shndx is at byte 6.
    let entry = dynsym.sh_offset(endian) as usize + symbol.index().0 * 24;
    let mut patched = bytes.to_vec();
    patched[entry + 6..entry + 8].copy_from_slice(&0u16.to_le_bytes());
    patched
}

#[test]
fn an_undefined_dynamic_symbol_is_named_as_what_rocr_cannot_load() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sample-gfx90a.elf");
    let bytes = std::fs::read(path).unwrap();
    let sound = Image::parse(bytes.clone(), None).unwrap();
    assert_eq!(sound.amdgpu().unwrap().unresolvable_symbols(), None);
    let patched = Image::parse(with_undefined_symbol(&bytes, "COUNTER"), None).unwrap();
    let amdgpu = patched.amdgpu().unwrap();
    assert_eq!(amdgpu.undefined_symbols, ["COUNTER"]);
    let problem = amdgpu.unresolvable_symbols().expect("refused");
    assert!(
        problem.contains("COUNTER") && problem.contains("VARIABLE_UNDEFINED"),
        "{problem}"
    );
}
