//! What the harness knows about a test before it runs (`gpurun_abi`'s [`TestDesc`], the one
//! description from the image to the reporter), what an [`Executor`] tells it afterwards
//! ([`TestRun`] with its [`TestEnd`]), and how the two combine into libtest's [`Verdict`].

use std::time::Duration;

pub use gpurun_abi::{LaunchEnd, ShouldPanic, TestDesc};

/// The first panic a device thread reported during a test (the one type the RPC server fills in
/// too, so it lives in the ABI crate that both depend on).
pub use gpurun_abi::report::PanicReport;

/// How a test ended: its launch's end, with what the runner adds to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TestEnd {
    /// The test's launch ended: as the backend reported it, or as the runner saw it (a
    /// timeout it enforced, a crashed worker as a fault naming the signal), with the panics the
    /// test's threads reported merged in.
    Ran {
        /// How the launch ended.
        end: LaunchEnd,
        /// The first panic reported, if any.
        first_panic: Option<PanicReport>,
        /// How many device threads reported a panic.
        panicked_threads: u64,
        /// What a sanitizer (compute-sanitizer, `--sanitize`) found in the test's launch, as
        /// its report shows it: a finding fails the test whatever the launch's end.
        sanitizer: Option<String>,
    },
    /// The test could not be run at all (the worker did not start, the image did not load, no
    /// such kernel, ...): what went wrong.
    NotRun(String),
}

impl TestEnd {
    /// A launch that completed, with these panics.
    pub fn completed(first_panic: Option<PanicReport>, panicked_threads: u64) -> TestEnd {
        TestEnd::Ran {
            end: LaunchEnd::Completed,
            first_panic,
            panicked_threads,
            sanitizer: None,
        }
    }

    /// A launch that ended as `end` with no panic report.
    pub fn launch(end: LaunchEnd) -> TestEnd {
        TestEnd::Ran {
            end,
            first_panic: None,
            panicked_threads: 0,
            sanitizer: None,
        }
    }

    /// The panics a launch reported, however it ended: a launch that timed out or faulted after
    /// some threads panicked still shows them (the end decides the verdict, not what is shown).
    fn reported_panics(&self) -> Option<(Option<&PanicReport>, u64, &LaunchEnd)> {
        match self {
            TestEnd::Ran {
                end,
                first_panic,
                panicked_threads,
                ..
            } => Some((first_panic.as_ref(), *panicked_threads, end)),
            TestEnd::NotRun(_) => None,
        }
    }

    /// The first panic the launch reported (where a failure points), however it ended.
    pub fn first_panic(&self) -> Option<&PanicReport> {
        self.reported_panics().and_then(|(first, _, _)| first)
    }

    /// What a sanitizer found in the test's launch, if it found anything.
    pub fn sanitizer_findings(&self) -> Option<&str> {
        match self {
            TestEnd::Ran {
                sanitizer: Some(report),
                ..
            } => Some(report),
            _ => None,
        }
    }
}

/// Everything an executor reports about one test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRun {
    /// How the launch ended.
    pub end: TestEnd,
    /// What the device printed to stdout during the test.
    pub stdout: Vec<u8>,
    /// What the device printed to stderr during the test.
    pub stderr: Vec<u8>,
    /// Wall time of the test.
    pub duration: Duration,
    /// The device's own time of the test's launch, where the backend measures it.
    pub device_time: Option<Duration>,
}

/// Runs one test: launches its kernel and waits for it, enforcing the time limit it was given
/// (see [`HarnessArgs::test_timeout`](crate::HarnessArgs::test_timeout)).
///
/// Called concurrently from the harness's test threads when `--test-threads` is above 1. A test's
/// failure, however severe, is reported in the returned [`TestRun`]; the executor must stay usable
/// for the next test (rebuilding its context or worker as needed).
pub trait Executor: Send + Sync {
    /// Runs `test` and reports how it ended.
    fn run(&self, test: &TestDesc) -> TestRun;

    /// Whether `test` would run on a GPU here. A `gpu_only` test that would not is reported
    /// as ignored, "needs a GPU", and never run, whatever `--include-ignored` says. An executor
    /// that emulates the device must say so; the default is a GPU.
    fn runs_on_gpu(&self, test: &TestDesc) -> bool {
        let _ = test;
        true
    }

    /// Measures the benchmark `test` (`--bench`): hands `measure` the benchmark's launches
    /// ([`BenchLaunches`](crate::bench::BenchLaunches)), kept on one device for the whole
    /// call, and reports how they went: a clean completion when every launch completed
    /// without a panic, else how the one that stopped the measurement ended, with the output
    /// of all of them. The default cannot time anything: the benchmark is not run.
    fn bench(
        &self,
        test: &TestDesc,
        measure: &mut dyn FnMut(&mut dyn crate::bench::BenchLaunches),
    ) -> TestRun {
        let _ = measure;
        TestRun {
            end: TestEnd::NotRun(format!(
                "this executor cannot time benchmarks (`{}`)",
                test.name
            )),
            stdout: Vec::new(),
            stderr: Vec::new(),
            duration: Duration::ZERO,
            device_time: None,
        }
    }
}

/// libtest's verdict on one test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The test passed.
    Passed,
    /// The test failed; `message` is what libtest adds to the output as `note: <message>`
    /// (none: libtest shows the captured output only).
    Failed {
        /// The note, if any.
        message: Option<String>,
    },
    /// The test passed, but its execution time reached its critical time under
    /// `--ensure-time` (libtest's "time limit exceeded").
    TimeLimitExceeded,
    /// The test was not run (`#[ignore]`).
    Ignored,
    /// The benchmark was measured (`--bench`; libtest's `bench:` result): its numbers are in
    /// the report.
    Measured,
}

impl Verdict {
    /// Whether the test counts as passed.
    pub fn passed(&self) -> bool {
        matches!(self, Verdict::Passed)
    }

    /// Whether the test counts as failed.
    pub fn failed(&self) -> bool {
        matches!(self, Verdict::Failed { .. } | Verdict::TimeLimitExceeded)
    }

    fn failed_with(message: String) -> Verdict {
        Verdict::Failed {
            message: Some(message),
        }
    }
}

/// Applies libtest's rules (`should_panic`, `expected`) to how a test that ran ended; a
/// sanitizer's findings fail it whatever they say.
pub fn judge(test: &TestDesc, end: &TestEnd) -> Verdict {
    let verdict = judge_launch(test, end);
    let Some(findings) = end.sanitizer_findings() else {
        return verdict;
    };
    Verdict::failed_with(match verdict {
        Verdict::Failed {
            message: Some(message),
        } => format!("{findings}\n{message}"),
        _ => findings.to_owned(),
    })
}

/// [`judge`] without the sanitizer.
fn judge_launch(test: &TestDesc, end: &TestEnd) -> Verdict {
    let (end, first_panic, panicked_threads) = match end {
        TestEnd::NotRun(error) => {
            return Verdict::failed_with(format!("could not run the test: {error}"))
        }
        TestEnd::Ran {
            end,
            first_panic,
            panicked_threads,
            ..
        } => (end, first_panic, *panicked_threads),
    };
    let message = match end {
        LaunchEnd::Completed => return judge_panics(test, first_panic.as_ref(), panicked_threads),
        LaunchEnd::Faulted(error) => format!("device fault: {error}"),
        LaunchEnd::TimedOut(after) => format!("test timed out after {}", format_duration(*after)),
        LaunchEnd::Exited(code) => format!("the device called exit({code}) during the test"),
        LaunchEnd::Aborted => "the device called abort() during the test".to_owned(),
    };
    Verdict::failed_with(message)
}

/// The verdict on a launch that completed, from the panics its threads reported.
fn judge_panics(
    test: &TestDesc,
    first_panic: Option<&PanicReport>,
    panicked_threads: u64,
) -> Verdict {
    let panicked = first_panic.is_some() || panicked_threads > 0;
    match (&test.should_panic, panicked) {
        (ShouldPanic::No, false) | (ShouldPanic::Yes, true) => Verdict::Passed,
        (ShouldPanic::No, true) => Verdict::Failed { message: None },
        (ShouldPanic::Yes | ShouldPanic::Expected(_), false) => {
            let location = match &test.source_file {
                Some(file) => format!(" at {file}"),
                None => String::new(),
            };
            Verdict::failed_with(format!("test did not panic as expected{location}"))
        }
        (ShouldPanic::Expected(expected), true) => match first_panic {
            Some(report) if report.message.contains(expected.as_str()) => Verdict::Passed,
            // Same wording and `{:?}` quoting as libtest, so tools that parse it keep working.
            Some(report) => Verdict::failed_with(format!(
                "panic did not contain expected string\n      panic message: {:?}\n expected substring: {:?}",
                report.message, expected
            )),
            None => Verdict::failed_with(format!(
                "expected panic with a message,\n found no panic report from the device\n     expected substring: {expected:?}"
            )),
        },
    }
}

/// The text Rust's panic hook would have printed for this device panic, with the device thread
/// and block in place of the host thread id. Empty when nothing panicked.
pub fn panic_text(test: &TestDesc, end: &TestEnd) -> String {
    let Some((first_panic, panicked_threads, launch_end)) = end.reported_panics() else {
        return String::new();
    };
    // A launch cut short counted only the panics reported before its end.
    let counted = match launch_end {
        LaunchEnd::Completed => "panicked".to_owned(),
        LaunchEnd::TimedOut(_) => "had panicked when the test timed out".to_owned(),
        LaunchEnd::Faulted(_) => "had panicked when the device faulted".to_owned(),
        LaunchEnd::Exited(code) => format!("had panicked when the device called exit({code})"),
        LaunchEnd::Aborted => "had panicked when the device called abort()".to_owned(),
    };
    let mut text = String::new();
    match first_panic {
        Some(report) => {
            let [tx, ty, tz] = report.thread;
            let [bx, by, bz] = report.block;
            text.push_str(&format!(
                "\nthread '{}' (block ({bx},{by},{bz}), thread ({tx},{ty},{tz})) panicked at {}:{}:{}:\n{}\n",
                test.name, report.file, report.line, report.column, report.message
            ));
            if panicked_threads > 1 || *launch_end != LaunchEnd::Completed {
                text.push_str(&format!(
                    "note: {panicked_threads} of {} device threads {counted}; the first report is shown\n",
                    test.shape.total_threads()
                ));
            }
            if let Some(note) = test
                .panic_ends_wavefront
                .and_then(|lanes| wavefront_note(lanes, test.shape.threads, Some(report)))
            {
                text.push_str(&note);
            }
        }
        None if panicked_threads > 0 => {
            text.push_str(&format!(
                "\nthread '{}' panicked on the device without a report: {panicked_threads} of {} device threads {counted}\n",
                test.name,
                test.shape.total_threads()
            ));
            if let Some(note) = test
                .panic_ends_wavefront
                .and_then(|lanes| wavefront_note(lanes, test.shape.threads, None))
            {
                text.push_str(&note);
            }
        }
        None => {}
    }
    text
}

/// The `note:` line saying which threads a panic took with it where a panic ends the whole
/// wavefront of `lanes` threads (see [`TestDesc::panic_ends_wavefront`]), for blocks of
/// `threads` and the reported panic. `None` when no other thread can have gone with it.
/// Threads are numbered as the hardware packs them into wavefronts: x fastest, then y, then z.
pub fn wavefront_note(
    lanes: u32,
    threads: [u32; 3],
    report: Option<&PanicReport>,
) -> Option<String> {
    let block_threads = threads.iter().map(|&n| u64::from(n)).product::<u64>();
    if lanes <= 1 || block_threads <= 1 {
        return None;
    }
    let lanes = u64::from(lanes);
    let lost = "their output after that point and their results are lost";
    let lead = format!("note: on AMD GPUs a panic ends its whole wavefront of {lanes} threads");
    let general = format!(
        "{lead}: the other threads of each panicking thread's wavefront ended with it; {lost}\n"
    );
    let Some(report) = report else {
        return Some(general);
    };
    let [tx, ty, tz] = report.thread.map(u64::from);
    let [dx, dy, _] = threads.map(u64::from);
    let linear = tx + ty * dx + tz * dx * dy;
    if tx >= dx || ty >= dy || linear >= block_threads {
        // Not a thread of this launch's blocks: the report's id cannot be placed.
        return Some(general);
    }
    let first = linear - linear % lanes;
    let last = (first + lanes).min(block_threads) - 1;
    let [bx, by, bz] = report.block;
    let block = format!("block ({bx},{by},{bz})");
    let went = if first == 0 && last == block_threads - 1 {
        format!("all {block_threads} threads of {block} ended with it")
    } else {
        let at = |index: u64| {
            let (x, y, z) = (index % dx, index / dx % dy, index / (dx * dy));
            format!("({x},{y},{z})")
        };
        format!(
            "threads {} to {} of {block} (wavefront {}, thread indices {first}..={last}) ended with it",
            at(first),
            at(last),
            first / lanes
        )
    };
    Some(format!("{lead}: {went}; {lost}\n"))
}

/// `10s`, `1.5s`, `250ms`: short and exact enough for a timeout message.
pub(crate) fn format_duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration < Duration::from_secs(1) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{:.3}s", duration.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::{launched, panic_report, panicked_end, CLEAN};

    fn fails_with(message: &str) -> Verdict {
        Verdict::Failed {
            message: Some(message.into()),
        }
    }

    fn panicking(message: &str) -> TestEnd {
        panicked_end(panic_report(message, 12, [3, 0, 0], [0, 0, 0]), 1)
    }

    fn with_should_panic(should_panic: ShouldPanic) -> TestDesc {
        TestDesc {
            should_panic,
            ..TestDesc::new("tests::t")
        }
    }

    #[test]
    fn plain_test_passes_without_panic_and_fails_with_one() {
        let test = TestDesc::new("tests::t");
        assert_eq!(judge(&test, &CLEAN), Verdict::Passed);
        assert_eq!(
            judge(&test, &panicking("boom")),
            Verdict::Failed { message: None }
        );
    }

    #[test]
    fn should_panic_needs_a_panic() {
        let test = with_should_panic(ShouldPanic::Yes);
        assert_eq!(judge(&test, &panicking("anything")), Verdict::Passed);
        assert_eq!(
            judge(&test, &CLEAN),
            fails_with("test did not panic as expected")
        );
        let located = TestDesc {
            source_file: Some("src/lib.rs".into()),
            ..test
        };
        assert_eq!(
            judge(&located, &CLEAN),
            fails_with("test did not panic as expected at src/lib.rs")
        );
    }

    #[test]
    fn expected_substring_is_checked_with_libtest_wording() {
        let test = with_should_panic(ShouldPanic::Expected("abc".into()));
        assert_eq!(judge(&test, &panicking("xxabcxx")), Verdict::Passed);
        assert_eq!(
            judge(&test, &panicking("nope \"q\"")),
            fails_with(
                "panic did not contain expected string\n      panic message: \"nope \\\"q\\\"\"\n expected substring: \"abc\""
            )
        );
        assert_eq!(
            judge(&test, &CLEAN),
            fails_with("test did not panic as expected")
        );
    }

    /// `end` with compute-sanitizer findings added.
    fn sanitized(mut end: TestEnd, findings: &str) -> TestEnd {
        if let TestEnd::Ran { sanitizer, .. } = &mut end {
            *sanitizer = Some(findings.into());
        }
        end
    }

    #[test]
    fn sanitizer_findings_fail_whatever_the_launch_says() {
        let findings = "compute-sanitizer memcheck found 1 error in this test's launch of `k`:";
        let plain = TestDesc::new("t");
        assert_eq!(
            judge(&plain, &sanitized(CLEAN, findings)),
            fails_with(findings)
        );
        // A panic the test expected does not make up for them.
        let expects_panic = with_should_panic(ShouldPanic::Yes);
        assert_eq!(
            judge(&expects_panic, &sanitized(panicking("boom"), findings)),
            fails_with(findings)
        );
        // With a launch that failed on its own, both are said.
        let fault = TestEnd::launch(LaunchEnd::Faulted("CUDA_ERROR_LAUNCH_FAILED".into()));
        assert_eq!(
            judge(&plain, &sanitized(fault, findings)),
            fails_with(&format!(
                "{findings}\ndevice fault: CUDA_ERROR_LAUNCH_FAILED"
            ))
        );
        assert_eq!(
            sanitized(CLEAN, findings).sanitizer_findings(),
            Some(findings)
        );
        assert_eq!(CLEAN.sanitizer_findings(), None);
    }

    #[test]
    fn abnormal_ends_fail_even_when_a_panic_is_expected() {
        let test = with_should_panic(ShouldPanic::Yes);
        let cases = [
            (
                TestEnd::launch(LaunchEnd::Faulted("CUDA_ERROR_ILLEGAL_ADDRESS".into())),
                "device fault: CUDA_ERROR_ILLEGAL_ADDRESS",
            ),
            (
                TestEnd::launch(LaunchEnd::TimedOut(Duration::from_secs(10))),
                "test timed out after 10s",
            ),
            (
                TestEnd::launch(LaunchEnd::Exited(3)),
                "the device called exit(3) during the test",
            ),
            (
                TestEnd::launch(LaunchEnd::Aborted),
                "the device called abort() during the test",
            ),
            (
                TestEnd::NotRun("worker did not start".into()),
                "could not run the test: worker did not start",
            ),
        ];
        for (end, message) in cases {
            assert_eq!(judge(&test, &end), fails_with(message));
        }
    }

    #[test]
    fn panic_text_names_device_ids_and_counts() {
        let test = launched("tests::t", [64, 1, 1], [4, 1, 1]);
        let mut end = panicking("boom");
        assert_eq!(
            panic_text(&test, &end),
            "\nthread 'tests::t' (block (0,0,0), thread (3,0,0)) panicked at src/lib.rs:12:5:\nboom\n"
        );
        if let TestEnd::Ran {
            panicked_threads, ..
        } = &mut end
        {
            *panicked_threads = 4;
        }
        assert!(panic_text(&test, &end).ends_with(
            "boom\nnote: 4 of 256 device threads panicked; the first report is shown\n"
        ));
        assert_eq!(panic_text(&test, &CLEAN), "");
    }

    #[test]
    fn panics_reported_before_a_timeout_or_fault_are_shown_with_it() {
        let test = launched("tests::t", [256, 1, 1], [8, 1, 1]);
        let report = panic_report("boom", 12, [3, 0, 0], [0, 0, 0]);
        for (end, counted) in [
            (
                LaunchEnd::TimedOut(Duration::from_secs(10)),
                "had panicked when the test timed out",
            ),
            (
                LaunchEnd::Faulted("CUDA_ERROR_ILLEGAL_ADDRESS".into()),
                "had panicked when the device faulted",
            ),
        ] {
            let ended = TestEnd::Ran {
                end: end.clone(),
                first_panic: Some(report.clone()),
                panicked_threads: 700,
                sanitizer: None,
            };
            // The end decides the verdict; the panics are shown beside it.
            assert!(judge(&test, &ended).failed());
            assert_eq!(ended.first_panic(), Some(&report));
            let text = panic_text(&test, &ended);
            assert!(
                text.starts_with(
                    "\nthread 'tests::t' (block (0,0,0), thread (3,0,0)) panicked at src/lib.rs:12:5:\nboom\n"
                ),
                "{text}"
            );
            assert!(
                text.ends_with(&format!(
                    "note: 700 of 2048 device threads {counted}; the first report is shown\n"
                )),
                "{text}"
            );
        }
        // One panic and then a timeout still says the count was cut short.
        let one = TestEnd::Ran {
            end: LaunchEnd::TimedOut(Duration::from_secs(10)),
            first_panic: Some(report),
            panicked_threads: 1,
            sanitizer: None,
        };
        assert!(panic_text(&test, &one)
            .contains("note: 1 of 2048 device threads had panicked when the test timed out"));
        assert_eq!(
            panic_text(
                &test,
                &TestEnd::launch(LaunchEnd::TimedOut(Duration::from_secs(1)))
            ),
            ""
        );
    }

    #[test]
    fn panic_text_names_the_wavefront_a_panic_ended_where_the_test_says_so() {
        let report = panic_report("boom", 12, [70, 0, 0], [2, 0, 0]);
        let end = panicked_end(report.clone(), 1);
        let nvidia = launched("tests::t", [256, 1, 1], [4, 1, 1]);
        let amd = TestDesc {
            panic_ends_wavefront: Some(64),
            ..nvidia.clone()
        };
        let plain = panic_text(&nvidia, &end);
        assert!(!plain.contains("wavefront"), "{plain}");
        assert_eq!(
            panic_text(&amd, &end),
            format!(
                "{plain}note: on AMD GPUs a panic ends its whole wavefront of 64 threads: threads \
                 (64,0,0) to (127,0,0) of block (2,0,0) (wavefront 1, thread indices 64..=127) \
                 ended with it; their output after that point and their results are lost\n"
            )
        );

        // 2-D blocks are packed x fastest; a partial last wavefront ends at the block's end.
        let amd_2d = TestDesc {
            panic_ends_wavefront: Some(32),
            ..launched("tests::t", [16, 5, 1], [1, 1, 1])
        };
        let text = panic_text(
            &amd_2d,
            &panicked_end(panic_report("boom", 12, [3, 4, 0], [0, 0, 0]), 1),
        );
        assert!(
            text.contains("threads (0,4,0) to (15,4,0) of block (0,0,0) (wavefront 2, thread indices 64..=79)"),
            "{text}"
        );

        // A block within one wavefront goes whole; a one-thread block loses nobody else.
        let small = TestDesc {
            panic_ends_wavefront: Some(64),
            ..launched("tests::t", [8, 2, 1], [1, 1, 1])
        };
        assert!(panic_text(&small, &end_at([1, 1, 0]))
            .contains("all 16 threads of block (0,0,0) ended with it;"));
        let single = TestDesc {
            panic_ends_wavefront: Some(64),
            ..TestDesc::new("tests::t")
        };
        assert!(!panic_text(&single, &end_at([0, 0, 0])).contains("note:"));

        // No report, or an id outside the block: the rule without the threads.
        let without_report = TestEnd::completed(None, 3);
        for end in [without_report, end_at([300, 0, 0])] {
            assert!(
                panic_text(&amd, &end).ends_with(
                    "note: on AMD GPUs a panic ends its whole wavefront of 64 threads: the other \
                     threads of each panicking thread's wavefront ended with it; their output \
                     after that point and their results are lost\n"
                ),
                "{}",
                panic_text(&amd, &end)
            );
        }
    }

    fn end_at(thread: [u32; 3]) -> TestEnd {
        panicked_end(panic_report("boom", 12, thread, [0, 0, 0]), 1)
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.500s");
    }
}
