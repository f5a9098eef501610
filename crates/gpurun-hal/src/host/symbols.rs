//! Where in a kernel's source a code address of a loaded host image is: the file, line and
//! column the memory checks report, from the image's DWARF line tables (built in when its
//! profile has debug info or line tables, as cargo's dev profile has).
//!
//! An access made inside the device runtime or Rust's own libraries (`SharedArray::read`,
//! `core::ptr::read`, a slice iterator) is reported at the first frame of the kernel's own code
//! above it: each recorded access keeps a few return addresses from a frame-pointer walk, and
//! inlined frames count as frames.

use object::{Object, ObjectSection};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};

type Reader = addr2line::gimli::EndianSlice<'static, addr2line::gimli::RunTimeEndian>;

/// A place in the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SourceLocation {
    /// As the kernel's own panics name it (relative to the workspace the image was built in,
    /// where rustc ran; absolute for files outside it).
    pub file: String,
    pub line: u32,
    pub column: u32,
}

impl std::fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// The line tables of one image file.
struct Lines {
    context: addr2line::Context<Reader>,
}

/// Line tables by image file, loaded on the first report about the image and kept for the
/// worker's life (a worker loads few images). The tables are not `Sync`: every look-up holds
/// the lock, which only reports take.
fn loaded() -> std::sync::MutexGuard<'static, HashMap<PathBuf, Option<Box<Lines>>>> {
    struct Tables(Mutex<HashMap<PathBuf, Option<Box<Lines>>>>);
    // SAFETY: the tables are only reached through the mutex, one thread at a time; they hold
    // no thread-bound state (lazily filled cells, read-only file bytes).
    unsafe impl Sync for Tables {}
    static LOADED: OnceLock<Tables> = OnceLock::new();
    LOADED
        .get_or_init(|| Tables(Mutex::default()))
        .0
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

fn load(path: &Path) -> Option<Lines> {
    // The tables borrow the file's bytes; both stay while the worker runs.
    let bytes: &'static [u8] = Box::leak(std::fs::read(path).ok()?.into_boxed_slice());
    let file = object::File::parse(bytes).ok()?;
    let endian = if file.is_little_endian() {
        addr2line::gimli::RunTimeEndian::Little
    } else {
        addr2line::gimli::RunTimeEndian::Big
    };
    let dwarf = addr2line::gimli::Dwarf::load(|id| -> Result<Reader, addr2line::gimli::Error> {
        let data = file
            .section_by_name(id.name())
            .and_then(|section| section.data().ok())
            .unwrap_or(&[]);
        Ok(addr2line::gimli::EndianSlice::new(data, endian))
    })
    .ok()?;
    let context = addr2line::Context::from_dwarf(dwarf).ok()?;
    Some(Lines { context })
}

/// The image file holding `pc` and `pc`'s address in it, from the dynamic loader.
fn image_of(pc: usize) -> Option<(PathBuf, u64)> {
    // SAFETY: `dladdr` only reads the loader's tables; `info` is ours to fill.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(pc as *const libc::c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: a NUL-terminated path the loader keeps while the image is loaded.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name.to_bytes()),
    );
    // A private copy's name is gone once it is loaded; the file it copies has the same bytes.
    let path = super::primitives::original_of(path);
    Some((path, (pc - info.dli_fbase as usize) as u64))
}

/// Whether frames in `file` belong to the device runtime or to Rust's libraries rather than to
/// the kernel.
fn is_library(file: &str, runtime_dir: &str) -> bool {
    (!runtime_dir.is_empty() && file.starts_with(runtime_dir))
        || file.starts_with("/rustc/")
        || file.contains("/rustlib/src/rust/library/")
}

/// Where the access whose return addresses are `pcs` (innermost first) is in the kernel's own
/// code: the first frame, inlined ones included, outside the device runtime (whose sources are
/// under `runtime_dir`) and Rust's libraries; else the innermost frame with a location.
pub(crate) fn locate(pcs: &[usize], runtime_dir: &str) -> Option<SourceLocation> {
    let mut innermost = None;
    let mut loaded = loaded();
    for &pc in pcs.iter().filter(|&&pc| pc != 0) {
        let Some((path, address)) = image_of(pc) else {
            continue;
        };
        let Some(lines) = loaded
            .entry(path)
            .or_insert_with_key(|path| load(path).map(Box::new))
        else {
            continue;
        };
        // A return address is just past its call.
        let probe = address.saturating_sub(1);
        let comp_dir = lines
            .context
            .find_dwarf_and_unit(probe)
            .skip_all_loads()
            .and_then(|unit| unit.comp_dir)
            .and_then(|dir| dir.to_string().ok())
            .map(|dir| format!("{}/", dir.trim_end_matches('/')));
        let Ok(mut frames) = lines.context.find_frames(probe).skip_all_loads() else {
            continue;
        };
        while let Ok(Some(frame)) = frames.next() {
            let Some(location) = frame.location else {
                continue;
            };
            let (Some(file), Some(line)) = (location.file, location.line) else {
                continue;
            };
            // Whose file it is goes by its whole path: the runtime's own compilation unit has
            // the runtime's package as its directory, so its files shown short look like a
            // kernel crate's.
            let whole = match (&comp_dir, file.starts_with('/')) {
                (Some(dir), false) => format!("{dir}{file}"),
                _ => file.to_string(),
            };
            let shown = comp_dir
                .as_deref()
                .and_then(|dir| whole.strip_prefix(dir))
                .unwrap_or(&whole);
            let found = SourceLocation {
                file: shown.to_string(),
                line,
                column: location.column.unwrap_or(0),
            };
            if !is_library(&whole, runtime_dir) {
                return Some(found);
            }
            innermost.get_or_insert(found);
        }
    }
    innermost
}

/// The return addresses of the frames above the hook whose frame pointer is `frame` (the
/// hook's own return address first), at most `out.len()`, stopping where the chain stops
/// looking like this thread's stack. Returns how many it found.
pub(crate) fn walk_frames(frame: usize, stack: (usize, usize), out: &mut [usize]) -> usize {
    let (low, high) = stack;
    let mut frame = frame;
    let mut found = 0;
    while found < out.len() {
        // A frame record is two words: the caller's frame pointer, then the return address.
        if frame < low || frame.saturating_add(16) > high || !frame.is_multiple_of(8) {
            break;
        }
        // SAFETY: inside this thread's own stack (checked above), which holds the frame
        // records of the frames still running; a stale word only gives a wrong address.
        let (next, pc) = unsafe {
            (
                (frame as *const usize).read(),
                (frame as *const usize).add(1).read(),
            )
        };
        if pc == 0 {
            break;
        }
        out[found] = pc;
        found += 1;
        // Callers' frames are above their callees'.
        if next <= frame {
            break;
        }
        frame = next;
    }
    found
}

/// The bounds of the calling thread's stack, for [`walk_frames`]; `(0, 0)` if unknown.
pub(crate) fn current_stack() -> (usize, usize) {
    // SAFETY: `attr` is initialised by `pthread_getattr_np` before it is read and destroyed
    // once; the calls only read the calling thread's attributes.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return (0, 0);
        }
        let mut base: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let found = libc::pthread_attr_getstack(&attr, &mut base, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        if found {
            (base as usize, base as usize + size)
        } else {
            (0, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn here() -> usize {
        // The address of this call's return: a line of this function's caller.
        let pc: usize;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: reads the instruction pointer.
        unsafe {
            std::arch::asm!("lea {}, [rip]", out(reg) pc)
        };
        #[cfg(not(target_arch = "x86_64"))]
        {
            pc = here as usize;
        }
        pc
    }

    #[test]
    fn an_address_of_this_test_is_located_in_this_file() {
        let location = locate(&[here() + 1], "").expect("line tables of the test binary");
        assert!(location.file.ends_with("host/symbols.rs"), "{location}");
        assert!(location.line > 0);
        // Frames under a runtime directory are passed over; with nothing else, the innermost
        // one is still given.
        let runtime = location.file.trim_end_matches("symbols.rs").to_string();
        assert_eq!(
            locate(&[here() + 1], &runtime).map(|l| l.file),
            Some(location.file)
        );
    }

    #[test]
    fn the_walk_stops_outside_the_stack() {
        let mut out = [0; 4];
        assert_eq!(walk_frames(8, (0x1000, 0x2000), &mut out), 0);
        let stack = current_stack();
        assert!(stack.0 < stack.1);
        let local = 0u64;
        let address = std::ptr::from_ref(&local) as usize;
        assert!(stack.0 <= address && address < stack.1);
    }
}
