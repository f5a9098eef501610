//! The call log: one line per call, appended with a single write so lines from several
//! processes (a parent and its workers) do not interleave.

use std::io::Write;

/// Appends `<pid> <line>` to the log file, if one is named. Errors are ignored: a fake driver
/// cannot report them, and a missing line fails the test that looks for it.
pub(crate) fn record(line: &str) {
    let Some(path) = std::env::var_os(crate::LOG_ENV) else {
        return;
    };
    let text = format!("{} {line}\n", std::process::id());
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(text.as_bytes());
    }
}

/// `bytes` as lowercase hex, for logged parameter buffers.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
