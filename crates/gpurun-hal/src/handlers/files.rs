//! LLVM libc's file opcodes: OPEN_FILE, CLOSE_FILE, REMOVE, RENAME and SYSTEM, with LLVM's
//! message sequences and results. Paths and commands must arrive NUL-terminated (a string
//! without its NUL was cut short: the reply is the C function's error value). `fopen` hands the
//! device a table handle, never a host pointer (see `stdio.rs`).

use super::stdio::{c_string, lanes_of, widen, HostState};
use super::{recv_lanes, Fail, Served, Sink, MAX_WRITE};
use gpurun_rpc::server::{Server, ServerPort};
use std::ffi::CString;

/// Per-lane received strings, indexed by lane.
fn strings(server: &Server, port: &mut ServerPort<'_>) -> Result<Vec<Option<CString>>, Fail> {
    let mut out: Vec<Option<CString>> = vec![None; 64];
    for (lane, bytes) in recv_lanes(server, port, MAX_WRITE)? {
        out[lane as usize] = c_string(&bytes);
    }
    Ok(out)
}

/// The modes `fopen` accepts from the device: r/w/a, then any of `+`, `b`, `x`, `e`.
fn valid_mode(mode: &[u8]) -> bool {
    matches!(mode.first(), Some(b'r' | b'w' | b'a'))
        && mode.len() <= 8
        && mode[1..]
            .iter()
            .all(|c| matches!(c, b'+' | b'b' | b'x' | b'e'))
}

/// OPEN_FILE: C→ send_n(path with NUL); C→ the mode string in the packet bytes; ←S (in place)
/// `data[0]` = the handle, 0 when `fopen` fails or the input is bad.
pub(crate) fn open(
    server: &Server,
    host: &mut HostState,
    port: &mut ServerPort<'_>,
) -> Result<Served, Fail> {
    let paths = strings(server, port)?;
    port.recv_and_send(|buffer, lane| {
        let bytes = buffer.as_bytes();
        let mode = bytes
            .iter()
            .position(|&b| b == 0)
            .map(|end| &bytes[..end])
            .filter(|mode| valid_mode(mode))
            .and_then(|mode| CString::new(mode).ok());
        let handle = match (&paths[lane as usize], mode) {
            (Some(path), Some(mode)) => {
                // SAFETY: both are NUL-terminated strings.
                let file = unsafe { libc::fopen(path.as_ptr(), mode.as_ptr()) };
                if file.is_null() {
                    0
                } else {
                    host.insert(file)
                }
            }
            _ => 0,
        };
        buffer.data[0] = handle;
    })?;
    Ok(Served::Handled)
}

/// CLOSE_FILE: C→ `data[0]` = handle; ←S (in place) `data[0]` = `fclose`'s result (EOF for a
/// handle this server did not give out, or the device's standard streams).
pub(crate) fn close(host: &mut HostState, port: &mut ServerPort<'_>) -> Result<Served, Fail> {
    port.recv_and_send(|buffer, _| buffer.data[0] = widen(host.close(buffer.data[0])))?;
    Ok(Served::Handled)
}

/// REMOVE: C→ send_n(path); ←S `data[0]` = `remove`'s result.
pub(crate) fn remove(server: &Server, port: &mut ServerPort<'_>) -> Result<Served, Fail> {
    let paths = strings(server, port)?;
    port.send(|buffer, lane| {
        buffer.data[0] = widen(match &paths[lane as usize] {
            // SAFETY: a NUL-terminated string.
            Some(path) => unsafe { libc::remove(path.as_ptr()) },
            None => -1,
        });
    })?;
    Ok(Served::Handled)
}

/// RENAME: C→ send_n(old); C→ send_n(new); ←S `data[0]` = `rename`'s result.
pub(crate) fn rename(server: &Server, port: &mut ServerPort<'_>) -> Result<Served, Fail> {
    let old = strings(server, port)?;
    let new = strings(server, port)?;
    port.send(|buffer, lane| {
        buffer.data[0] = widen(match (&old[lane as usize], &new[lane as usize]) {
            // SAFETY: both are NUL-terminated strings.
            (Some(old), Some(new)) => unsafe { libc::rename(old.as_ptr(), new.as_ptr()) },
            _ => -1,
        });
    })?;
    Ok(Served::Handled)
}

/// SYSTEM: C→ send_n(command); ←S `data[0]` = the wait status, as `system` returns it. Only
/// with [`super::HostAccess::allow_system`]; otherwise -1 and a note on the device's stderr.
/// The command runs under `/bin/sh -c` with an empty stdin and its output captured and passed
/// to the sink (the worker's own stdout carries its protocol, so the command must not inherit
/// it).
pub(crate) fn system(
    server: &Server,
    host: &mut HostState,
    port: &mut ServerPort<'_>,
    sink: &mut dyn Sink,
) -> Result<Served, Fail> {
    let commands = strings(server, port)?;
    let mut results = [0u64; 64];
    for lane in lanes_of(port.lane_mask()) {
        let Some(command) = &commands[lane as usize] else {
            results[lane as usize] = widen(-1);
            continue;
        };
        if !host.config.allow_system {
            sink.stderr(
                format!(
                    "gpurun: the device called system({:?}); refused (pass --allow-system to \
                     allow device code to run host commands)\n",
                    command.to_string_lossy()
                )
                .as_bytes(),
            );
            results[lane as usize] = widen(-1);
            continue;
        }
        results[lane as usize] = run_shell(command, sink);
    }
    port.send(|buffer, lane| buffer.data[0] = results[lane as usize])?;
    Ok(Served::Handled)
}

fn run_shell(command: &CString, sink: &mut dyn Sink) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::ExitStatusExt;
    let output = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(std::ffi::OsStr::from_bytes(command.as_bytes()))
        .stdin(std::process::Stdio::null())
        .output();
    match output {
        Ok(output) => {
            if !output.stdout.is_empty() {
                sink.stdout(&output.stdout);
            }
            if !output.stderr.is_empty() {
                sink.stderr(&output.stderr);
            }
            widen(output.status.into_raw())
        }
        // What `system` returns when no shell could be started: status 127.
        Err(_) => widen(127 << 8),
    }
}
