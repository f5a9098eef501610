//! The call log (one line per call, appended with a single write so lines from several
//! processes, a parent and its workers, do not interleave), and the settings tests choose.

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

/// The status a test's failure setting (`FUNCTION=STATUS,...` in environment variable `env`)
/// chooses for `function`, read by `status_named`; `None` where it names none.
pub(crate) fn chosen_failure<T>(
    env: &str,
    function: &str,
    status_named: impl Fn(&str) -> T,
) -> Option<T> {
    let setting = std::env::var(env).ok()?;
    setting.split(',').find_map(|entry| {
        let (name, status) = entry.trim().split_once('=')?;
        (name == function).then(|| status_named(status))
    })
}

/// The `u64` in environment variable `name`, else `default`.
pub(crate) fn setting_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(default)
}

/// `bytes` as lowercase hex, for logged parameter buffers.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
