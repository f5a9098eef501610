//! One kernel launch: `cuLaunchKernel` with the packed argument block on the module's
//! non-blocking stream, then a loop that serves RPC until the stream is done, a deadline passes
//! or the kernel faults.

use super::error::{check, DriverError};
use super::module::{CudaModule, Serving};
use crate::args::KernelArg;
use crate::server::{Deadlines, Finish, Served, WaitLimits, EXIT_GRACE};
use crate::{BackendError, LaunchEnd, LaunchShape};
use cudarc::driver::sys::{self, CUfunction, CUresult, CUstream};
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// The kernel's parameter buffer: `args` laid out as a C struct (padded at the end to its
/// alignment, as `sizeof` would be) in 8-byte-aligned storage. Returns the storage and the
/// struct's size.
pub fn param_buffer(args: &[KernelArg]) -> (Vec<u64>, usize) {
    let packed = crate::args::pack_c_struct(args);
    let align = if args.iter().any(|arg| matches!(arg, KernelArg::U64(_))) {
        8
    } else {
        4
    };
    let size = packed.len().next_multiple_of(align);
    let mut words = vec![0u64; size.div_ceil(8)];
    for (word, chunk) in words.iter_mut().zip(packed.chunks(8)) {
        let mut bytes = [0u8; 8];
        bytes[..chunk.len()].copy_from_slice(chunk);
        *word = u64::from_ne_bytes(bytes);
    }
    (words, size)
}

/// Rejects shapes the driver would refuse with a bare `CUDA_ERROR_INVALID_VALUE`.
pub fn check_shape(shape: &LaunchShape) -> Result<(), BackendError> {
    if shape.threads.contains(&0) || shape.blocks.contains(&0) {
        return Err(BackendError::InvalidArgument(format!(
            "launch shape {shape} has a zero dimension"
        )));
    }
    Ok(())
}

/// How the serving loop waits when the device asks for nothing: spin first (a kernel that
/// prints or returns soon is answered within microseconds), then sleep briefly so an idle
/// long-running kernel does not burn a host core.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    idle_polls: u32,
}

impl Backoff {
    const SPIN_POLLS: u32 = 2_000;
    const SLEEP: Duration = Duration::from_micros(50);

    pub fn new() -> Backoff {
        Backoff { idle_polls: 0 }
    }

    pub fn reset(&mut self) {
        self.idle_polls = 0;
    }

    /// The pause before the next poll, if any.
    pub fn next_pause(&mut self) -> Option<Duration> {
        self.idle_polls = self.idle_polls.saturating_add(1);
        (self.idle_polls > Self::SPIN_POLLS).then_some(Self::SLEEP)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

/// Requests served between two stream queries.
const SERVE_BATCH: u32 = 64;

/// Remembers an `exit()` or `abort()` seen while serving: it decides how the launch ends.
fn note_end(served: Served, end: &mut Option<LaunchEnd>) {
    if let Served::End(how) = served {
        *end = Some(how);
    }
}

/// A raw launch, movable to a helper thread (see `CudaModule::launch_blocking`).
struct RawLaunch {
    context: sys::CUcontext,
    function: CUfunction,
    shape: LaunchShape,
    stream: CUstream,
    args: *mut c_void,
    args_size: usize,
}

// SAFETY: the handles are driver objects usable from any thread once the context is made
// current there (which `issue` does); the argument buffer outlives the scoped thread.
unsafe impl Send for RawLaunch {}

impl RawLaunch {
    fn issue(&self) -> Result<(), DriverError> {
        // SAFETY: the context was retained by the device and outlives this call.
        check("cuCtxSetCurrent", unsafe {
            sys::cuCtxSetCurrent(self.context)
        })?;
        let mut args_size = self.args_size;
        // The driver's CU_LAUNCH_PARAM_* markers are the small integers 1, 2 and 0.
        let mut extra: [*mut c_void; 5] = [
            sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void,
            self.args,
            sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void,
            (&mut args_size as *mut usize).cast(),
            sys::CU_LAUNCH_PARAM_END_AS_INT as usize as *mut c_void,
        ];
        let extra_ptr = if self.args_size == 0 {
            std::ptr::null_mut()
        } else {
            extra.as_mut_ptr()
        };
        let [tx, ty, tz] = self.shape.threads;
        let [bx, by, bz] = self.shape.blocks;
        // SAFETY: `function` belongs to the current context's loaded module, `stream` is live,
        // and `extra` describes an argument buffer of `args_size` bytes that stays alive until
        // the call returns (the driver copies it).
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                self.function,
                bx,
                by,
                bz,
                tx,
                ty,
                tz,
                0,
                self.stream,
                std::ptr::null_mut(),
                extra_ptr,
            )
        })
    }
}

#[derive(Debug)]
pub(crate) enum WaitError {
    /// The stream query failed: a fault if the code is sticky.
    Driver(DriverError),
    /// The RPC server failed.
    Serve(BackendError),
}

/// The serving loop, apart from the driver: `query` reports the stream's state
/// (`cuStreamQuery`), `serve` answers one request. Returns once the stream is done (after
/// draining what the kernel sent last), a deadline passes, or either side fails.
pub(crate) fn serve_until_done(
    query: &mut dyn FnMut() -> CUresult,
    serve: &mut dyn FnMut() -> Result<Served, BackendError>,
    limits: &WaitLimits,
    mut ended: Option<LaunchEnd>,
) -> Result<Finish, WaitError> {
    let mut backoff = Backoff::new();
    // After an exit() or abort() the other threads get a short while to finish (their output is
    // still served), then the launch ends regardless; likewise at the timeout.
    let mut deadlines = Deadlines::new(*limits);
    loop {
        match query() {
            CUresult::CUDA_SUCCESS => {
                // Requests sent right before the kernel returned (fire-and-forget ones such as
                // frees and output) are still pending: drain them.
                loop {
                    let served = serve().map_err(WaitError::Serve)?;
                    if served == Served::Idle {
                        break;
                    }
                    note_end(served, &mut ended);
                }
                return Ok(Finish {
                    end: ended.unwrap_or(LaunchEnd::Completed),
                    broken: None,
                });
            }
            CUresult::CUDA_ERROR_NOT_READY => {}
            code => {
                return Err(WaitError::Driver(DriverError {
                    call: "cuStreamQuery",
                    code,
                }))
            }
        }
        // Serve a batch before asking the driver again: under heavy output the stream query
        // would otherwise cost as much as the requests.
        let mut handled = 0;
        while handled < SERVE_BATCH {
            let served = serve().map_err(WaitError::Serve)?;
            if served == Served::Idle {
                break;
            }
            note_end(served, &mut ended);
            handled += 1;
        }
        if handled == 0 {
            match backoff.next_pause() {
                Some(pause) => std::thread::sleep(pause),
                None => std::hint::spin_loop(),
            }
        } else {
            backoff.reset();
        }
        if let Some(finish) = deadlines.check(ended.as_ref()) {
            return Ok(finish);
        }
    }
}

impl CudaModule<'_> {
    /// [`crate::Module::launch`]: runs the kernel, serving the image's RPC requests (if it
    /// talks RPC at all) with device memory from the module's heap.
    pub(crate) fn launch_serving(
        &mut self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
        timeout: Option<Duration>,
        sink: &mut dyn crate::server::Sink,
    ) -> Result<LaunchEnd, BackendError> {
        // Out of `self` for the launch so the serving closure and the launch can both borrow.
        let mut serving = self.serving.take();
        let end = match serving.as_mut() {
            Some(Serving {
                rpc: Some(rpc),
                heap,
            }) => {
                let mut serve = || rpc.server.poll(sink, heap);
                self.run_kernel(kernel, shape, args, timeout, &mut serve)
            }
            _ => self.run_kernel(kernel, shape, args, timeout, &mut || Ok(Served::Idle)),
        };
        self.serving = serving;
        end
    }

    /// Launches `kernel` and serves RPC through `serve` until the kernel ends.
    pub(crate) fn run_kernel(
        &mut self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
        timeout: Option<Duration>,
        serve: &mut dyn FnMut() -> Result<Served, BackendError>,
    ) -> Result<LaunchEnd, BackendError> {
        if let Some(reason) = &self.broken {
            return Err(super::error::runtime(format!(
                "the CUDA context is unusable after an earlier failure ({reason}); the worker \
                 must be restarted"
            )));
        }
        check_shape(&shape)?;
        self.device.make_current()?;
        let function = self.function(kernel)?;
        let (mut words, args_size) = param_buffer(args);
        let launch = RawLaunch {
            context: self.device.context,
            function,
            shape,
            stream: self.stream,
            args: words.as_mut_ptr().cast(),
            args_size,
        };
        let started = Instant::now();
        let mut ended = None;
        let issued = if self.launch_blocking {
            // With CUDA_LAUNCH_BLOCKING=1 the launch call returns only when the kernel has
            // finished, and the kernel may be waiting for us: issue it from another thread
            // and serve here meanwhile.
            let mut broken = None;
            let issued = std::thread::scope(|scope| {
                let handle = scope.spawn(move || launch.issue());
                while !handle.is_finished() {
                    match serve() {
                        Ok(served) => note_end(served, &mut ended),
                        Err(error) => {
                            // Nothing more can be served; the join below returns once the
                            // kernel ends by itself.
                            broken = Some(error);
                            break;
                        }
                    }
                }
                handle.join().unwrap_or(Err(DriverError {
                    call: "cuLaunchKernel",
                    code: CUresult::CUDA_ERROR_UNKNOWN,
                }))
            });
            if let Some(error) = broken {
                self.broken = Some(error.to_string());
                return Err(error);
            }
            issued
        } else {
            launch.issue()
        };
        if let Err(error) = issued {
            return self.fail(error);
        }
        let end = self.wait(started, timeout, ended, serve);
        // The driver copied the parameters at launch; keep them alive until here regardless.
        drop(words);
        end
    }

    /// Serves RPC while polling the kernel's stream.
    fn wait(
        &mut self,
        started: Instant,
        timeout: Option<Duration>,
        ended: Option<LaunchEnd>,
        serve: &mut dyn FnMut() -> Result<Served, BackendError>,
    ) -> Result<LaunchEnd, BackendError> {
        let stream = self.stream;
        // SAFETY: the stream is live for the module's lifetime.
        let mut query = || unsafe { sys::cuStreamQuery(stream) };
        let limits = WaitLimits {
            started,
            timeout,
            exit_grace: EXIT_GRACE,
        };
        match serve_until_done(&mut query, serve, &limits, ended) {
            Ok(Finish { end, broken }) => {
                if broken.is_some() {
                    self.broken = broken;
                }
                Ok(end)
            }
            Err(WaitError::Driver(error)) => self.fail(error),
            Err(WaitError::Serve(error)) => {
                // A broken RPC conversation leaves the kernel waiting for an answer that
                // never comes.
                self.broken = Some(error.to_string());
                Err(error)
            }
        }
    }

    /// A sticky error ends the launch as a fault and marks the module unusable; anything
    /// else is an ordinary error.
    fn fail(&mut self, error: DriverError) -> Result<LaunchEnd, BackendError> {
        if error.is_sticky() {
            let text = error.describe();
            self.broken = Some(text.clone());
            Ok(LaunchEnd::Faulted(text))
        } else {
            Err(error.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(words: &[u64], len: usize) -> Vec<u8> {
        words
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .take(len)
            .collect()
    }

    #[test]
    fn parameter_buffer_is_the_c_struct_in_aligned_words() {
        let args = crate::args::start_args(2, 0x1122_3344_5566_7788, 0x99, 0xabc);
        let (words, size) = param_buffer(&args);
        assert_eq!(size, 32);
        assert_eq!(words.as_ptr() as usize % 8, 0);
        let mut expected = vec![2, 0, 0, 0, 0, 0, 0, 0];
        expected.extend_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        expected.extend_from_slice(&0x99u64.to_le_bytes());
        expected.extend_from_slice(&0xabcu64.to_le_bytes());
        assert_eq!(bytes(&words, size), expected);
    }

    #[test]
    fn parameter_buffer_is_padded_like_sizeof() {
        // struct { void *p; int n; } is 16 bytes, not 12.
        let (words, size) = param_buffer(&[KernelArg::U64(7), KernelArg::I32(-1)]);
        assert_eq!(size, 16);
        let mut expected = 7u64.to_le_bytes().to_vec();
        expected.extend_from_slice(&(-1i32).to_le_bytes());
        expected.extend_from_slice(&[0; 4]);
        assert_eq!(bytes(&words, size), expected);
        // Only 4-byte members: 4-byte alignment.
        assert_eq!(param_buffer(&[KernelArg::I32(1)]).1, 4);
        assert_eq!(param_buffer(&[]), (vec![], 0));
    }

    #[test]
    fn exit_and_abort_decide_the_end() {
        let mut end = None;
        note_end(Served::Handled, &mut end);
        assert_eq!(end, None);
        note_end(Served::End(LaunchEnd::Exited(3)), &mut end);
        assert_eq!(end, Some(LaunchEnd::Exited(3)));
        note_end(Served::Idle, &mut end);
        assert_eq!(end, Some(LaunchEnd::Exited(3)));
        note_end(Served::End(LaunchEnd::Aborted), &mut end);
        assert_eq!(end, Some(LaunchEnd::Aborted));
    }

    fn limits(timeout: Option<Duration>) -> WaitLimits {
        WaitLimits {
            started: Instant::now(),
            timeout,
            exit_grace: Duration::from_millis(20),
        }
    }

    /// A stream that is busy for `busy` queries, then reports `last`.
    fn stream(busy: u32, last: CUresult) -> impl FnMut() -> CUresult {
        let mut queries = 0;
        move || {
            queries += 1;
            if queries > busy {
                last
            } else {
                CUresult::CUDA_ERROR_NOT_READY
            }
        }
    }

    /// A server that answers the scripted results in order, then stays idle.
    fn script(steps: Vec<Served>) -> impl FnMut() -> Result<Served, BackendError> {
        let mut steps = steps.into_iter();
        move || Ok(steps.next().unwrap_or(Served::Idle))
    }

    #[test]
    fn completed_kernel_drains_pending_requests() {
        let mut served = 0;
        let mut requests = script(vec![Served::Handled, Served::Handled, Served::Handled]);
        let mut serve = || {
            let result = requests();
            if result.as_ref().is_ok_and(|s| *s == Served::Handled) {
                served += 1;
            }
            result
        };
        // Done at the first query: the three requests are still answered.
        let finish = serve_until_done(
            &mut stream(0, CUresult::CUDA_SUCCESS),
            &mut serve,
            &limits(None),
            None,
        )
        .unwrap();
        assert_eq!(
            finish,
            Finish {
                end: LaunchEnd::Completed,
                broken: None
            }
        );
        assert_eq!(served, 3);
    }

    #[test]
    fn exit_seen_while_running_decides_the_end() {
        let steps = vec![Served::Handled, Served::End(LaunchEnd::Exited(3))];
        let finish = serve_until_done(
            &mut stream(5, CUresult::CUDA_SUCCESS),
            &mut script(steps),
            &limits(None),
            None,
        )
        .unwrap();
        assert_eq!(
            finish,
            Finish {
                end: LaunchEnd::Exited(3),
                broken: None
            }
        );
    }

    #[test]
    fn kernel_still_running_after_exit_ends_the_launch_and_breaks_the_context() {
        let finish = serve_until_done(
            &mut stream(u32::MAX, CUresult::CUDA_SUCCESS),
            &mut script(vec![Served::End(LaunchEnd::Aborted)]),
            &limits(None),
            None,
        )
        .unwrap();
        assert_eq!(finish.end, LaunchEnd::Aborted);
        assert!(finish.broken.unwrap().contains("exit/abort"));
    }

    #[test]
    fn hung_kernel_times_out() {
        let started = Instant::now();
        let finish = serve_until_done(
            &mut stream(u32::MAX, CUresult::CUDA_SUCCESS),
            &mut script(vec![]),
            &limits(Some(Duration::from_millis(30))),
            None,
        )
        .unwrap();
        assert_eq!(finish.end, LaunchEnd::TimedOut(Duration::from_millis(30)));
        assert!(finish.broken.is_some());
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn stream_error_is_reported_with_its_code() {
        let error = serve_until_done(
            &mut stream(2, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
            &mut script(vec![]),
            &limits(None),
            None,
        )
        .unwrap_err();
        match error {
            WaitError::Driver(error) => {
                assert_eq!(error.code, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS);
                assert!(error.is_sticky());
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn server_error_stops_the_wait() {
        let mut serve = || Err(BackendError::Rpc("unknown opcode 0x1234".into()));
        let error = serve_until_done(
            &mut stream(u32::MAX, CUresult::CUDA_SUCCESS),
            &mut serve,
            &limits(None),
            None,
        )
        .unwrap_err();
        assert!(matches!(error, WaitError::Serve(BackendError::Rpc(_))));
    }

    #[test]
    fn zero_dimensions_are_refused() {
        let mut shape = LaunchShape::SINGLE;
        assert!(check_shape(&shape).is_ok());
        shape.blocks[1] = 0;
        assert!(matches!(
            check_shape(&shape),
            Err(BackendError::InvalidArgument(_))
        ));
    }

    #[test]
    fn backoff_spins_then_sleeps_and_resets() {
        let mut backoff = Backoff::new();
        for _ in 0..Backoff::SPIN_POLLS {
            assert_eq!(backoff.next_pause(), None);
        }
        assert_eq!(backoff.next_pause(), Some(Backoff::SLEEP));
        backoff.reset();
        assert_eq!(backoff.next_pause(), None);
    }
}
