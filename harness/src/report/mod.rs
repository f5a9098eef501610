//! Reporters: each consumes the same per-test results. `console` prints libtest's output,
//! `junit` writes JUnit XML, `github` prints GitHub Actions annotations.

pub(crate) mod console;
pub(crate) mod github;
pub(crate) mod junit;

use std::time::Duration;

use crate::outcome::{TestCase, TestRun};

/// A test's result as the reporters see it.
#[derive(Debug, Clone)]
pub(crate) struct Reported {
    pub kind: ResultKind,
    /// What libtest would have captured: device stdout, then stderr, then the panic text. Empty
    /// with `--nocapture` (the output was printed when the test ended).
    pub captured: Vec<u8>,
    pub duration: Duration,
}

/// libtest's three outcomes; `message` is what libtest prints as `note: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResultKind {
    Passed,
    Failed { message: Option<String> },
    Ignored,
}

/// Everything known about one reported test, for the reporters that need more than the console.
pub(crate) struct Finished<'a> {
    pub test: &'a TestCase,
    /// `None` for an ignored test (it never ran).
    pub run: Option<&'a TestRun>,
    pub reported: &'a Reported,
    /// Rust-style panic text (empty when nothing panicked).
    pub panic_text: &'a str,
}
