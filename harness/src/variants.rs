//! Variants of a test: the same test run in several places in one run (each backend of
//! `--backend host,cuda`), named as wgpu names its per-adapter tests: `[host] adds`,
//! `[cuda] adds`. The label is part of the name, so filters, `--exact` and `--skip` see it; the
//! JUnit report groups the variants by label, and the summary says in one line which tests pass
//! in one place and fail in another: the differential signal.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::outcome::{Executor, TestDesc, TestEnd, TestRun};

/// The name of `name`'s variant labelled `label`: `[label] name`.
pub fn variant_name(label: &str, name: &str) -> String {
    format!("[{label}] {name}")
}

/// `Some((label, name))` for a variant's name (`[label] name`).
pub fn split_variant(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix('[')?;
    let (label, name) = rest.split_once("] ")?;
    (!label.is_empty() && !label.contains(['[', ']'])).then_some((label, name))
}

/// Runs each variant of a test with its label's executor.
#[derive(Default)]
pub struct VariantExecutor {
    executors: Vec<(String, Arc<dyn Executor>)>,
}

impl VariantExecutor {
    pub fn new() -> VariantExecutor {
        VariantExecutor::default()
    }

    /// Adds the variants labelled `label` of `tests`, run by `executor`, and returns them.
    pub fn add(
        &mut self,
        label: &str,
        tests: &[TestDesc],
        executor: Arc<dyn Executor>,
    ) -> Vec<TestDesc> {
        self.executors.push((label.to_owned(), executor));
        tests
            .iter()
            .map(|test| TestDesc {
                name: variant_name(label, &test.name),
                ..test.clone()
            })
            .collect()
    }
}

impl VariantExecutor {
    /// The executor of `test`'s variant.
    fn executor(&self, test: &TestDesc) -> Option<&Arc<dyn Executor>> {
        let (label, _) = split_variant(&test.name)?;
        self.executors
            .iter()
            .find(|(known, _)| known == label)
            .map(|(_, executor)| executor)
    }
}

impl Executor for VariantExecutor {
    fn runs_on_gpu(&self, test: &TestDesc) -> bool {
        self.executor(test)
            .is_some_and(|executor| executor.runs_on_gpu(test))
    }

    fn run(&self, test: &TestDesc) -> TestRun {
        match self.executor(test) {
            Some(executor) => executor.run(test),
            None => no_executor(test),
        }
    }

    fn bench(
        &self,
        test: &TestDesc,
        measure: &mut dyn FnMut(&mut dyn crate::bench::BenchLaunches),
    ) -> TestRun {
        match self.executor(test) {
            Some(executor) => executor.bench(test, measure),
            None => no_executor(test),
        }
    }
}

fn no_executor(test: &TestDesc) -> TestRun {
    TestRun {
        end: TestEnd::NotRun(format!("no executor for the variant `{}`", test.name)),
        stdout: Vec::new(),
        stderr: Vec::new(),
        duration: Duration::ZERO,
        device_time: None,
    }
}

/// The results of each test's variants, for the one line that names the tests whose variants
/// disagree.
#[derive(Debug, Default)]
pub(crate) struct Differences {
    /// Test name -> (label, passed) per variant that ran, in the order they were reported.
    results: BTreeMap<String, Vec<(String, bool)>>,
}

impl Differences {
    /// Records a result of test `name` (ignored for names that are no variant).
    pub(crate) fn record(&mut self, name: &str, passed: bool) {
        if let Some((label, test)) = split_variant(name) {
            self.results
                .entry(test.to_owned())
                .or_default()
                .push((label.to_owned(), passed));
        }
    }

    /// `note: 1 test passes on some backends and fails on others: adds ([host] ok, [cuda]
    /// FAILED)` (one line), or `None` when all variants of every test agree. Variants that are
    /// lane sizes of the host emulation (`[lanes=64]`, `cargo gpurun test --lane-size all`) are
    /// called that.
    pub(crate) fn summary(&self) -> Option<String> {
        let differ = |results: &&Vec<(String, bool)>| {
            results.iter().any(|(_, passed)| *passed) && results.iter().any(|(_, p)| !p)
        };
        let lanes_only = self
            .results
            .values()
            .filter(differ)
            .flatten()
            .all(|(label, _)| label.starts_with("lanes="));
        let differing: Vec<String> = self
            .results
            .iter()
            .filter(|(_, results)| differ(results))
            .map(|(name, results)| {
                let each: Vec<String> = results
                    .iter()
                    .map(|(label, passed)| {
                        format!("[{label}] {}", if *passed { "ok" } else { "FAILED" })
                    })
                    .collect();
                format!("{name} ({})", each.join(", "))
            })
            .collect();
        if differing.is_empty() {
            return None;
        }
        let (some, others) = if lanes_only {
            ("at some lane sizes", "at others")
        } else {
            ("on some backends", "on others")
        };
        let count = match differing.len() {
            1 => format!("1 test passes {some} and fails"),
            n => format!("{n} tests pass {some} and fail"),
        };
        Some(format!(
            "note: {count} {others}: {}\n",
            differing.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_split_back() {
        assert_eq!(variant_name("cuda", "a::b"), "[cuda] a::b");
        assert_eq!(split_variant("[cuda] a::b"), Some(("cuda", "a::b")));
        for plain in ["a::b", "[] a", "[x]a", "[a[b] c", "cuda] a"] {
            assert_eq!(split_variant(plain), None, "{plain}");
        }
    }

    #[test]
    fn only_disagreeing_variants_are_named() {
        let mut differences = Differences::default();
        for (name, passed) in [
            ("[host] adds", true),
            ("[cuda] adds", false),
            ("[host] same", true),
            ("[cuda] same", true),
            ("[host] broken", false),
            ("[cuda] broken", false),
            ("plain", false),
        ] {
            differences.record(name, passed);
        }
        assert_eq!(
            differences.summary().as_deref(),
            Some(
                "note: 1 test passes on some backends and fails on others: adds ([host] ok, \
                 [cuda] FAILED)\n"
            )
        );
        let mut lanes = Differences::default();
        lanes.record("[lanes=32] fits", true);
        lanes.record("[lanes=64] fits", false);
        assert_eq!(
            lanes.summary().as_deref(),
            Some(
                "note: 1 test passes at some lane sizes and fails at others: fits ([lanes=32] ok, \
                 [lanes=64] FAILED)\n"
            )
        );
        assert_eq!(Differences::default().summary(), None);
    }
}
