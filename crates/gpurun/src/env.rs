//! Program arguments and environment, as the loader passed them to `_begin`/`_start`.

use core::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

static ARGC: AtomicI32 = AtomicI32::new(0);
static ARGV: AtomicPtr<*const u8> = AtomicPtr::new(core::ptr::null_mut());
static ENVP: AtomicPtr<*const u8> = AtomicPtr::new(core::ptr::null_mut());

/// Records the loader's arrays. Every thread of `_start` stores the same values.
///
/// # Safety
/// `argv` (with `argc` entries) and `envp` (null-terminated) must be null or valid arrays of
/// NUL-terminated strings that outlive every later call of this module's functions.
pub(crate) unsafe fn set(argc: i32, argv: *const *const u8, envp: *const *const u8) {
    ARGC.store(argc.max(0), Ordering::Relaxed);
    ARGV.store(argv.cast_mut(), Ordering::Relaxed);
    ENVP.store(envp.cast_mut(), Ordering::Relaxed);
}

/// Reads the NUL-terminated string at `ptr`.
///
/// # Safety
/// `ptr` must point at a NUL-terminated string that outlives `'static` use here.
unsafe fn c_str(ptr: *const u8) -> &'static [u8] {
    // SAFETY: forwarded from the caller.
    unsafe { core::ffi::CStr::from_ptr(ptr.cast()).to_bytes() }
}

/// The program's arguments (`argv[0]` is the image path the loader was given).
#[derive(Clone, Debug)]
pub struct Args {
    next: usize,
    count: usize,
}

/// The program's arguments; empty when the image was launched without `_start` (e.g. a test).
pub fn args() -> Args {
    Args {
        next: 0,
        count: ARGC.load(Ordering::Relaxed) as usize,
    }
}

impl Iterator for Args {
    type Item = &'static str;
    fn next(&mut self) -> Option<&'static str> {
        let argv = ARGV.load(Ordering::Relaxed);
        if argv.is_null() || self.next >= self.count {
            return None;
        }
        // SAFETY: `set`'s contract: `argv` has `count` valid entries.
        let entry = unsafe { *argv.add(self.next) };
        self.next += 1;
        if entry.is_null() {
            return None;
        }
        // SAFETY: non-null entries are NUL-terminated strings (`set`'s contract).
        Some(core::str::from_utf8(unsafe { c_str(entry) }).unwrap_or("<non-UTF-8 argument>"))
    }
}

impl ExactSizeIterator for Args {
    fn len(&self) -> usize {
        self.count.saturating_sub(self.next)
    }
}

impl Args {
    /// `true` when there are no arguments left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The value of environment variable `key`, if the loader passed it.
pub fn var(key: &str) -> Option<&'static str> {
    let mut entry = ENVP.load(Ordering::Relaxed).cast_const();
    if entry.is_null() {
        return None;
    }
    loop {
        // SAFETY: `envp` is a null-terminated array (`set`'s contract).
        let item = unsafe { *entry };
        if item.is_null() {
            return None;
        }
        // SAFETY: entries are NUL-terminated strings.
        let text = unsafe { c_str(item) };
        if text.len() > key.len() && text.starts_with(key.as_bytes()) && text[key.len()] == b'=' {
            return core::str::from_utf8(&text[key.len() + 1..]).ok();
        }
        // SAFETY: not past the terminating null yet.
        entry = unsafe { entry.add(1) };
    }
}
