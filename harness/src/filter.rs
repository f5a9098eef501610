//! Which tests run: libtest's filters (several, any may match), `--skip`, `--exact`,
//! `--ignored`/`--include-ignored`, `--exclude-should-panic`, then `--partition`.

use crate::command_line::{HarnessArgs, Partition, PartitionKind, RunIgnored};
use crate::outcome::{ShouldPanic, TestDesc};

/// The tests left after filtering, in libtest's order (sorted by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// The tests to report, with `ignored` already resolved against `--ignored` /
    /// `--include-ignored` (a test still marked ignored is reported as ignored, not run).
    pub tests: Vec<TestDesc>,
    /// How many tests the filters, `--skip`, `--ignored` and `--partition` removed.
    pub filtered_out: usize,
}

/// Applies the command line's filters to `tests`, as libtest does, then the partition.
pub fn select(args: &HarnessArgs, mut tests: Vec<TestDesc>) -> Selection {
    let total = tests.len();
    // libtest runs and lists tests sorted by name; partitions are defined over that order too.
    tests.sort_by(|a, b| a.name.cmp(&b.name));

    let matches = |name: &str, pattern: &str| {
        if args.exact {
            name == pattern
        } else {
            name.contains(pattern)
        }
    };
    if !args.filters.is_empty() {
        tests.retain(|t| args.filters.iter().any(|f| matches(&t.name, f)));
    }
    if !args.skip.is_empty() {
        tests.retain(|t| !args.skip.iter().any(|s| matches(&t.name, s)));
    }
    if args.exclude_should_panic {
        tests.retain(|t| t.should_panic == ShouldPanic::No);
    }
    match args.run_ignored() {
        RunIgnored::No => {}
        RunIgnored::Yes => tests.iter_mut().for_each(|t| t.ignored = false),
        RunIgnored::Only => {
            tests.retain(|t| t.ignored);
            tests.iter_mut().for_each(|t| t.ignored = false);
        }
    }
    if let Some(partition) = &args.partition {
        tests = partition_tests(partition, tests);
    }
    Selection {
        filtered_out: total - tests.len(),
        tests,
    }
}

/// Ignored tests that will not run take no turn in the round robin (as in nextest, whose
/// partitioner only sees tests that run) and are reported as ignored by every shard.
fn partition_tests(partition: &Partition, tests: Vec<TestDesc>) -> Vec<TestDesc> {
    let shard_index = partition.shard - 1;
    let mut position = 0u64;
    tests
        .into_iter()
        .filter(|test| {
            if test.ignored {
                return true;
            }
            let key = match partition.kind {
                PartitionKind::Count => position,
                PartitionKind::Hash => fnv1a(test.name.as_bytes()),
            };
            position += 1;
            key % partition.total == shard_index
        })
        .collect()
}

/// FNV-1a: stable across runs, platforms and Rust versions (unlike `DefaultHasher`), which a
/// shard assignment split over CI jobs needs.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> HarnessArgs {
        HarnessArgs::parse_args(std::iter::once("bin").chain(argv.iter().copied())).unwrap()
    }

    fn suite() -> Vec<TestDesc> {
        let mut tests: Vec<TestDesc> = ["b::mul", "a::add", "a::add_big", "c::io", "c::slow"]
            .into_iter()
            .map(TestDesc::new)
            .collect();
        tests[4].ignored = true;
        tests[3].should_panic = ShouldPanic::Yes;
        tests
    }

    fn names(selection: &Selection) -> Vec<&str> {
        selection.tests.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn no_filter_keeps_everything_sorted() {
        let s = select(&args(&[]), suite());
        assert_eq!(
            names(&s),
            ["a::add", "a::add_big", "b::mul", "c::io", "c::slow"]
        );
        assert_eq!(s.filtered_out, 0);
    }

    #[test]
    fn any_of_several_filters_matches() {
        let s = select(&args(&["mul", "big"]), suite());
        assert_eq!(names(&s), ["a::add_big", "b::mul"]);
        assert_eq!(s.filtered_out, 3);
    }

    #[test]
    fn exact_matches_whole_names_for_filters_and_skips() {
        let s = select(&args(&["--exact", "a::add", "b::mu"]), suite());
        assert_eq!(names(&s), ["a::add"]);
        let s = select(&args(&["--exact", "--skip", "a::add"]), suite());
        assert_eq!(names(&s), ["a::add_big", "b::mul", "c::io", "c::slow"]);
    }

    #[test]
    fn skip_removes_substring_matches() {
        let s = select(&args(&["a::", "--skip", "big"]), suite());
        assert_eq!(names(&s), ["a::add"]);
        assert_eq!(s.filtered_out, 4);
    }

    #[test]
    fn ignored_flags_select_and_unignore() {
        let s = select(&args(&[]), suite());
        assert!(
            s.tests
                .iter()
                .find(|t| t.name == "c::slow")
                .unwrap()
                .ignored
        );
        let only = select(&args(&["--ignored"]), suite());
        assert_eq!(names(&only), ["c::slow"]);
        assert!(!only.tests[0].ignored);
        assert_eq!(only.filtered_out, 4);
        let all = select(&args(&["--include-ignored"]), suite());
        assert_eq!(all.tests.len(), 5);
        assert!(all.tests.iter().all(|t| !t.ignored));
    }

    #[test]
    fn exclude_should_panic_drops_them() {
        let s = select(&args(&["--exclude-should-panic"]), suite());
        assert!(!names(&s).contains(&"c::io"));
        assert_eq!(s.filtered_out, 1);
    }

    #[test]
    fn count_partitions_are_round_robin_over_the_tests_that_run() {
        let first = select(&args(&["--partition", "count:1/2"]), suite());
        let second = select(&args(&["--partition", "count:2/2"]), suite());
        assert_eq!(names(&first), ["a::add", "b::mul", "c::slow"]);
        assert_eq!(names(&second), ["a::add_big", "c::io", "c::slow"]);
        assert_eq!(first.filtered_out, 2);
        assert_eq!(second.filtered_out, 2);
        // With --include-ignored the ignored test runs, so it takes its turn.
        let third = select(
            &args(&["--include-ignored", "--partition", "count:1/2"]),
            suite(),
        );
        assert_eq!(names(&third), ["a::add", "b::mul", "c::slow"]);
        let fourth = select(
            &args(&["--include-ignored", "--partition", "count:2/2"]),
            suite(),
        );
        assert_eq!(names(&fourth), ["a::add_big", "c::io"]);
    }

    #[test]
    fn hash_partitions_cover_every_test_exactly_once() {
        let many: Vec<TestDesc> = (0..200).map(|i| TestDesc::new(format!("t{i}"))).collect();
        let mut seen = Vec::new();
        for shard in 1..=3 {
            let s = select(
                &args(&["--partition", &format!("hash:{shard}/3")]),
                many.clone(),
            );
            assert!(!s.tests.is_empty(), "shard {shard} is empty");
            seen.extend(s.tests.into_iter().map(|t| t.name));
        }
        seen.sort();
        let mut all: Vec<String> = many.into_iter().map(|t| t.name).collect();
        all.sort();
        assert_eq!(seen, all);
    }
}
