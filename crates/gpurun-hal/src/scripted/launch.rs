//! One scripted launch: a thread that plays the kernel's steps against the RPC client.

use super::Step;
use crate::launch_loop::{Launch, LaunchState};
use crate::BackendError;
use gpurun_rpc::opcode::{self, PanicLocation};
use gpurun_rpc::{calls, Client, HostLane};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// The client pointer, sent to the launch thread. The module keeps the client alive until the
/// thread has finished, or forever once abandoned.
struct ClientPtr(*const Client);
// SAFETY: `Client` is `Sync`; the pointer is only dereferenced while the module keeps it alive.
unsafe impl Send for ClientPtr {}

/// The [`Step::ProcessFault`] recorded in this process, if any.
static PROCESS_FAULT: Mutex<Option<String>> = Mutex::new(None);

fn process_fault() -> Option<String> {
    PROCESS_FAULT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

pub(crate) struct ScriptedLaunch {
    state: Arc<Mutex<LaunchState>>,
    thread: Option<JoinHandle<()>>,
}

impl ScriptedLaunch {
    pub(crate) fn start(
        steps: Vec<Step>,
        client: Option<*const Client>,
    ) -> Result<ScriptedLaunch, BackendError> {
        let state = Arc::new(Mutex::new(LaunchState::Running));
        let shared = Arc::clone(&state);
        let client = client.map(ClientPtr);
        let thread = std::thread::Builder::new()
            .name("gpurun-scripted".into())
            .spawn(move || {
                // SAFETY: see `ClientPtr`.
                let client = client.map(|ClientPtr(pointer)| unsafe { &*pointer });
                let end = play(&steps, client);
                *shared.lock().unwrap_or_else(PoisonError::into_inner) = end;
            })
            .map_err(|source| BackendError::Io {
                context: "failed to start a scripted thread".into(),
                source,
            })?;
        Ok(ScriptedLaunch {
            state,
            thread: Some(thread),
        })
    }
}

/// Plays the steps, then waits for the threads they started; returns the state the launch ends
/// in.
fn play(steps: &[Step], client: Option<&Client>) -> LaunchState {
    std::thread::scope(|scope| {
        let mut threads = Vec::new();
        let own = play_thread(steps, client, &mut |steps| {
            threads.push(scope.spawn(move || play(steps, client)));
        });
        if let LaunchState::Faulted(text) = own {
            return LaunchState::Faulted(text);
        }
        for thread in threads {
            match thread.join() {
                Ok(LaunchState::Faulted(text)) => return LaunchState::Faulted(text),
                Ok(_) => {}
                Err(_) => return LaunchState::Faulted("a scripted thread panicked".into()),
            }
        }
        LaunchState::Done
    })
}

/// Plays one thread's steps; `spawn` starts the steps of a [`Step::Thread`].
fn play_thread<'s>(
    steps: &'s [Step],
    client: Option<&Client>,
    spawn: &mut dyn FnMut(&'s [Step]),
) -> LaunchState {
    let lane = HostLane::SINGLE;
    for step in steps {
        match step {
            Step::Print(text) => {
                if let Some(client) = client {
                    calls::write::<{ opcode::WRITE_TO_STDOUT }, _>(client, &lane, text.as_bytes());
                }
            }
            Step::Eprint(text) => {
                if let Some(client) = client {
                    calls::write::<{ opcode::WRITE_TO_STDERR }, _>(client, &lane, text.as_bytes());
                }
            }
            Step::Panic {
                message,
                file,
                line,
            } => {
                if let Some(client) = client {
                    let location = PanicLocation {
                        line: *line,
                        column: 1,
                        thread: [0; 3],
                        block: [0; 3],
                    };
                    calls::report_panic(client, &lane, message.as_bytes(), file, location);
                }
                break;
            }
            Step::Exit(status) => {
                if let Some(client) = client {
                    calls::exit(client, &lane, *status);
                }
                break;
            }
            Step::Abort => {
                if let Some(client) = client {
                    calls::abort(client, &lane);
                }
                break;
            }
            Step::Fault(text) => return LaunchState::Faulted(text.clone()),
            Step::ProcessFault(text) => {
                PROCESS_FAULT
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get_or_insert_with(|| text.clone());
                return LaunchState::Faulted(text.clone());
            }
            Step::Hang => hang(),
            Step::StallMidMessage(announced) => {
                if let Some(mut port) =
                    client.and_then(|c| c.open::<{ opcode::WRITE_TO_STDOUT }, _>(&lane))
                {
                    // The first packet of a `send_n` carries the length; the rest never comes,
                    // and the port stays held, as by a thread that died mid-message.
                    port.send(|buffer, _| buffer.data[0] = *announced);
                    std::mem::forget(port);
                }
            }
            Step::Thread(steps) => spawn(steps),
            Step::SleepMs(millis) => std::thread::sleep(Duration::from_millis(*millis)),
            Step::MallocFree(size) => {
                if let Some(client) = client {
                    let address = calls::malloc(client, &lane, *size);
                    calls::free(client, &lane, address);
                }
            }
            Step::Crash => std::process::abort(),
        }
    }
    LaunchState::Done
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

impl Launch for ScriptedLaunch {
    fn state(&self) -> LaunchState {
        if let Some(text) = process_fault() {
            return LaunchState::Faulted(text);
        }
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn finish(mut self: Box<Self>, settled: bool) {
        if let (true, Some(thread)) = (settled, self.thread.take()) {
            let _ = thread.join();
        }
    }
}
