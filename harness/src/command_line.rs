//! The libtest command line ([`HarnessArgs`]), including the flags cargo, nextest and IDEs pass
//! that libtest-mimic rejects, plus our extras (`--test-timeout`, `--junit`, `--partition`).

use std::ffi::OsString;
use std::fmt;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Output format of the test run (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// One line per test.
    Pretty,
    /// One character per test.
    Terse,
    /// libtest's (unstable) JSON events, one object per line.
    Json,
}

/// When to colour the output (`--color`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// How `--partition` assigns tests to shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionKind {
    /// Round robin over the sorted, filtered list (nextest's `count:`).
    Count,
    /// By a stable hash of the test name (`hash:`): a test stays in its shard when others are added.
    Hash,
}

/// `--partition count:K/N` or `hash:K/N`: run only shard `K` (1-based) of `N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// How tests are assigned to shards.
    pub kind: PartitionKind,
    /// The shard to run, `1..=total`.
    pub shard: u64,
    /// How many shards there are.
    pub total: u64,
}

/// Why a `--partition` value was rejected.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PartitionParseError {
    /// Not of the form `KIND:K/N`.
    #[error("expected `count:K/N` or `hash:K/N`, found `{0}`")]
    Syntax(String),
    /// `K` or `N` out of range.
    #[error("shard {shard} of {total} is out of range: need 1 <= K <= N")]
    Range {
        /// The shard asked for.
        shard: u64,
        /// The number of shards.
        total: u64,
    },
}

impl FromStr for Partition {
    type Err = PartitionParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || PartitionParseError::Syntax(text.to_owned());
        let (kind, rest) = text.split_once(':').ok_or_else(syntax)?;
        let kind = match kind {
            "count" => PartitionKind::Count,
            "hash" => PartitionKind::Hash,
            _ => return Err(syntax()),
        };
        let (shard, total) = rest.split_once('/').ok_or_else(syntax)?;
        let shard: u64 = shard.parse().map_err(|_| syntax())?;
        let total: u64 = total.parse().map_err(|_| syntax())?;
        if shard == 0 || total == 0 || shard > total {
            return Err(PartitionParseError::Range { shard, total });
        }
        Ok(Self { kind, shard, total })
    }
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            PartitionKind::Count => "count",
            PartitionKind::Hash => "hash",
        };
        write!(f, "{kind}:{}/{}", self.shard, self.total)
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("expected a number of seconds, found `{text}`"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(format!("the timeout must be positive, found `{text}`"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("timeout `{text}` is too large"))
}

/// A non-negative number of seconds (a warm-up may be 0).
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("expected a number of seconds, found `{text}`"))?;
    if seconds.is_nan() || seconds < 0.0 {
        return Err(format!("expected 0 or more seconds, found `{text}`"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` seconds is too long"))
}

/// A baseline's name: it names a file, so letters, digits, `-`, `_` and `.` (not leading).
fn parse_baseline_name(text: &str) -> Result<String, String> {
    let fine = !text.is_empty()
        && !text.starts_with('.')
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    match fine {
        true => Ok(text.to_owned()),
        false => Err(format!(
            "`{text}` is not a baseline name: use letters, digits, `-`, `_` and `.`"
        )),
    }
}

/// A finite number of 0 or more.
fn parse_non_negative(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
        _ => Err(format!("expected a number of 0 or more, found `{text}`")),
    }
}

/// A number from 0 to 1.
fn parse_fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if (0.0..=1.0).contains(&value) => Ok(value),
        _ => Err(format!("expected a number from 0 to 1, found `{text}`")),
    }
}

/// The libtest command line, as cargo, nextest and IDEs pass it, plus cargo-gpurun's extras.
///
/// Parse it with [`HarnessArgs::parse_args`], or build it with [`Default`] and set fields.
#[derive(Debug, Clone, Default, PartialEq, Parser)]
#[command(
    name = "gpurun-test",
    about = "Runs the #[gpurun::test] tests of a GPU image, with libtest's command line and output",
    disable_version_flag = true
)]
pub struct HarnessArgs {
    /// Run only tests whose names contain one of these (equal one of them, with --exact).
    #[arg(value_name = "FILTER")]
    pub filters: Vec<String>,

    /// Filters and --skip match whole test names, not substrings.
    #[arg(long)]
    pub exact: bool,

    /// Skip tests whose names contain FILTER (repeatable).
    #[arg(long, value_name = "FILTER")]
    pub skip: Vec<String>,

    /// List the tests instead of running them.
    #[arg(long)]
    pub list: bool,

    /// Output format.
    #[arg(long, value_enum, value_name = "pretty|terse|json")]
    pub format: Option<Format>,

    /// Terse output (same as --format terse).
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// Run only the ignored tests.
    #[arg(long, conflicts_with = "include_ignored")]
    pub ignored: bool,

    /// Run the ignored tests too.
    #[arg(long)]
    pub include_ignored: bool,

    /// Skip the tests that should panic.
    #[arg(long)]
    pub exclude_should_panic: bool,

    /// Number of tests run at once (default: RUST_TEST_THREADS, else the number of CPUs).
    #[arg(long, value_name = "N")]
    pub test_threads: Option<NonZeroUsize>,

    /// Print each test's device output as soon as the test ends instead of capturing it
    /// (also: RUST_TEST_NOCAPTURE set to anything but 0).
    #[arg(long, alias = "no-capture")]
    pub nocapture: bool,

    /// Also show the captured output of successful tests.
    #[arg(long)]
    pub show_output: bool,

    /// Colour the output.
    #[arg(long, value_enum, value_name = "auto|always|never")]
    pub color: Option<ColorChoice>,

    /// Also write one line per test result (libtest's log format) to this file.
    #[arg(long, value_name = "PATH")]
    pub logfile: Option<PathBuf>,

    /// Show each test's execution time (and the device's time of its launch where the backend
    /// measures it), coloured against RUST_TEST_TIME_UNIT / RUST_TEST_TIME_INTEGRATION
    /// (`WARN_MS,CRITICAL_MS`).
    #[arg(long)]
    pub report_time: bool,

    /// Fail a test whose execution time reaches its critical time (RUST_TEST_TIME_UNIT or
    /// RUST_TEST_TIME_INTEGRATION; default 100 ms and 1 s), as libtest does; implies
    /// --report-time.
    #[arg(long)]
    pub ensure_time: bool,

    /// Accepted for compatibility; has no effect (tests run in name order).
    #[arg(long, hide = true)]
    pub shuffle: bool,

    /// Accepted for compatibility; has no effect.
    #[arg(long, value_name = "SEED", hide = true)]
    pub shuffle_seed: Option<u64>,

    /// Measure the benchmarks (`#[gpurun::bench]`), after the tests, one at a time; the tests
    /// are then reported as ignored unless --test is given too. Without it each benchmark runs
    /// once, as a test.
    #[arg(long)]
    pub bench: bool,

    /// With --bench, run the tests too.
    #[arg(long)]
    pub test: bool,

    /// With --bench: how long each benchmark runs before its samples are taken, counting the
    /// calibration of its iterations per launch (default 0.3).
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub warm_up_time: Option<Duration>,

    /// With --bench: the time budget for each benchmark's samples; sampling stops earlier
    /// once the median is settled (default 2).
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub measurement_time: Option<Duration>,

    /// With --bench: save the measurements as the baseline NAME, to compare later runs with.
    #[arg(long, value_name = "NAME", value_parser = parse_baseline_name, conflicts_with = "baseline")]
    pub save_baseline: Option<String>,

    /// With --bench: compare each benchmark with the baseline NAME and say whether it changed
    /// beyond the noise (criterion's verdicts).
    #[arg(long, value_name = "NAME", value_parser = parse_baseline_name)]
    pub baseline: Option<String>,

    /// With --baseline: relative changes within +/- this are noise (default 0.01, 1%).
    #[arg(long, value_name = "FRACTION", value_parser = parse_non_negative)]
    pub noise_threshold: Option<f64>,

    /// With --baseline: a change is significant when its p-value is below this (default 0.05).
    #[arg(long, value_name = "P", value_parser = parse_fraction)]
    pub significance_level: Option<f64>,

    /// Where baselines are kept, set by the caller (`cargo gpurun bench`: the target directory's
    /// `gpurun-bench/`); default `$CARGO_TARGET_DIR/gpurun-bench`, else `target/gpurun-bench`.
    #[arg(skip)]
    pub baseline_dir: Option<PathBuf>,

    /// Accepted for compatibility; has no effect.
    #[arg(long, hide = true)]
    pub force_run_in_process: bool,

    /// Unstable libtest options (`-Z unstable-options`): accepted, have no effect.
    #[arg(short = 'Z', value_name = "OPTION", hide = true)]
    pub unstable_options: Vec<String>,

    /// Fail a test that runs longer than SECS seconds (enforced by the executor).
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub test_timeout: Option<Duration>,

    /// Write a JUnit XML report to PATH.
    #[arg(long, value_name = "PATH")]
    pub junit: Option<PathBuf>,

    /// Run only one shard of the tests: count:K/N or hash:K/N.
    #[arg(long, value_name = "count:K/N")]
    pub partition: Option<Partition>,

    /// Whether these are unit or integration tests, for the time thresholds; set by the caller.
    #[arg(skip)]
    pub test_kind: crate::time::TestKind,

    /// The time thresholds of `--report-time` and `--ensure-time`, per kind of test (read from
    /// `RUST_TEST_TIME_UNIT` and `RUST_TEST_TIME_INTEGRATION` by [`HarnessArgs::parse_args`]).
    #[arg(skip)]
    pub time_thresholds: crate::time::Thresholds,

    /// Name of the JUnit `<testsuite>` (the test image), set by the caller; default `gpurun`.
    #[arg(skip)]
    pub suite_name: Option<String>,

    /// Print GitHub Actions `::error` annotations for failures (set from `GITHUB_ACTIONS=true`).
    #[arg(skip)]
    pub github_actions: bool,

    /// Append a Markdown summary of the run to this file (set from `GITHUB_STEP_SUMMARY` when
    /// `GITHUB_ACTIONS=true`).
    #[arg(skip)]
    pub github_step_summary: Option<PathBuf>,
}

impl HarnessArgs {
    /// Parses a libtest command line. `argv[0]` is the program name, as in `std::env::args_os`.
    /// Sets [`github_actions`](Self::github_actions) from `GITHUB_ACTIONS=true` (and then
    /// [`github_step_summary`](Self::github_step_summary) from `GITHUB_STEP_SUMMARY`), and
    /// [`nocapture`](Self::nocapture) from `RUST_TEST_NOCAPTURE` as libtest does, and with
    /// `--report-time` or `--ensure-time` the [`time_thresholds`](Self::time_thresholds).
    ///
    /// `--help` also comes back as an `Err`: `err.exit()` prints it and exits 0; a usage error
    /// exits 2 ([`ExitCode::USAGE`](crate::exit_code::ExitCode::USAGE)).
    pub fn parse_args<I, T>(argv: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut args = Self::try_parse_from(argv)?;
        args.github_actions = std::env::var_os("GITHUB_ACTIONS").is_some_and(|v| v == "true");
        if args.github_actions {
            args.github_step_summary = std::env::var_os("GITHUB_STEP_SUMMARY")
                .filter(|path| !path.is_empty())
                .map(PathBuf::from);
        }
        // libtest's environment fallback for --nocapture.
        args.nocapture |= std::env::var_os("RUST_TEST_NOCAPTURE").is_some_and(|v| v != "0");
        if args.report_time || args.ensure_time {
            args.time_thresholds = crate::time::Thresholds::from_env().map_err(|error| {
                clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{error}\n"))
            })?;
        }
        Ok(args)
    }

    /// The output format after `-q`.
    pub fn effective_format(&self) -> Format {
        match self.format {
            Some(format) => format,
            None if self.quiet => Format::Terse,
            None => Format::Pretty,
        }
    }

    /// How long each benchmark is measured (`--warm-up-time`, `--measurement-time`).
    pub fn bench_options(&self) -> crate::bench::BenchOptions {
        let defaults = crate::bench::BenchOptions::default();
        crate::bench::BenchOptions {
            warm_up: self.warm_up_time.unwrap_or(defaults.warm_up),
            measurement: self.measurement_time.unwrap_or(defaults.measurement),
            ..defaults
        }
    }

    /// How a change from a baseline is judged (`--noise-threshold`, `--significance-level`).
    pub fn change_thresholds(&self) -> crate::bench::baseline::Thresholds {
        let defaults = crate::bench::baseline::Thresholds::default();
        crate::bench::baseline::Thresholds {
            noise: self.noise_threshold.unwrap_or(defaults.noise),
            significance: self.significance_level.unwrap_or(defaults.significance),
        }
    }

    /// Where baselines are kept ([`HarnessArgs::baseline_dir`]).
    pub fn baselines(&self) -> PathBuf {
        if let Some(dir) = &self.baseline_dir {
            return dir.clone();
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .filter(|dir| !dir.is_empty())
            .map_or_else(|| PathBuf::from("target"), PathBuf::from);
        target.join("gpurun-bench")
    }

    /// Whether ignored tests run, and whether only they do.
    pub fn run_ignored(&self) -> RunIgnored {
        if self.ignored {
            RunIgnored::Only
        } else if self.include_ignored {
            RunIgnored::Yes
        } else {
            RunIgnored::No
        }
    }
}

/// What happens to `#[ignore]`d tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunIgnored {
    /// They are reported as ignored.
    No,
    /// They run with the others (`--include-ignored`).
    Yes,
    /// Only they run (`--ignored`).
    Only,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HarnessArgs, clap::Error> {
        HarnessArgs::parse_args(std::iter::once("bin").chain(args.iter().copied()))
    }

    #[test]
    fn takes_several_filters_and_repeated_skips() {
        let args = parse(&["add", "--skip", "slow", "mul", "--skip=io", "--exact"]).unwrap();
        assert_eq!(args.filters, ["add", "mul"]);
        assert_eq!(args.skip, ["slow", "io"]);
        assert!(args.exact);
    }

    #[test]
    fn accepts_what_nextest_and_cargo_pass() {
        let list = parse(&["--list", "--format", "terse", "--ignored"]).unwrap();
        assert!(list.list && list.ignored);
        assert_eq!(list.effective_format(), Format::Terse);
        let one = parse(&["--exact", "tests::adds", "--nocapture"]).unwrap();
        assert_eq!(one.filters, ["tests::adds"]);
        assert!(one.nocapture && one.exact);
        let noise = parse(&[
            "-Z",
            "unstable-options",
            "--report-time",
            "--shuffle",
            "--shuffle-seed",
            "7",
            "--ensure-time",
            "--bench",
            "--test",
            "-Zunstable-options",
            "--format=json",
            "--show-output",
            "--color",
            "never",
            "-q",
        ])
        .unwrap();
        assert_eq!(noise.effective_format(), Format::Json);
        assert_eq!(
            noise.unstable_options,
            ["unstable-options", "unstable-options"]
        );
        assert_eq!(noise.color, Some(ColorChoice::Never));
    }

    #[test]
    fn bench_times_parse_with_defaults() {
        let defaults = crate::bench::BenchOptions::default();
        assert_eq!(parse(&["--bench"]).unwrap().bench_options(), defaults);
        let args = parse(&[
            "--bench",
            "--warm-up-time",
            "0",
            "--measurement-time",
            "0.5",
        ])
        .unwrap();
        let options = args.bench_options();
        assert_eq!(options.warm_up, Duration::ZERO);
        assert_eq!(options.measurement, Duration::from_millis(500));
        assert!(args.bench && !args.test);
        let args = parse(&["--baseline", "main-1.2", "--noise-threshold", "0.3"]).unwrap();
        assert_eq!(args.baseline.as_deref(), Some("main-1.2"));
        let thresholds = args.change_thresholds();
        assert_eq!((thresholds.noise, thresholds.significance), (0.3, 0.05));
    }

    #[test]
    fn quiet_means_terse_unless_a_format_is_given() {
        assert_eq!(parse(&["-q"]).unwrap().effective_format(), Format::Terse);
        assert_eq!(parse(&[]).unwrap().effective_format(), Format::Pretty);
    }

    #[test]
    fn extras_parse_and_bad_values_are_usage_errors() {
        let args = parse(&[
            "--test-timeout",
            "2.5",
            "--junit",
            "out.xml",
            "--partition",
            "count:2/3",
            "--test-threads",
            "4",
        ])
        .unwrap();
        assert_eq!(args.test_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(args.junit, Some(PathBuf::from("out.xml")));
        assert_eq!(
            args.partition,
            Some(Partition {
                kind: PartitionKind::Count,
                shard: 2,
                total: 3
            })
        );
        assert_eq!(args.test_threads, NonZeroUsize::new(4));
        for bad in [
            &["--test-timeout", "0"][..],
            &["--test-timeout", "soon"],
            &["--test-timeout", "NaN"],
            &["--test-timeout", "inf"],
            &["--test-timeout", "1e400"],
            &["--test-timeout", "-0"],
            &["--partition", "count:1/99999999999999999999"],
            &["--partition", "count:/"],
            &["--partition", ""],
            &["--shuffle-seed", "x"],
            &["--partition", "count:0/3"],
            &["--partition", "count:4/3"],
            &["--partition", "slice:1/3"],
            &["--test-threads", "0"],
            &["--measurement-time", "-1"],
            &["--warm-up-time", "soon"],
            &["--save-baseline", "a", "--baseline", "b"],
            &["--baseline", "../up"],
            &["--baseline", ".hidden"],
            &["--noise-threshold", "-2"],
            &["--noise-threshold", "inf"],
            &["--significance-level", "1.5"],
            &["--significance-level", "-0.1"],
            &["--format", "junit"],
            &["--ignored", "--include-ignored"],
            &["--no-such-flag"],
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?} should be a usage error");
        }
    }

    #[test]
    fn partition_round_trips_through_text() {
        for text in ["count:1/1", "hash:3/8"] {
            assert_eq!(text.parse::<Partition>().unwrap().to_string(), text);
        }
        assert_eq!(
            "count:1-2".parse::<Partition>(),
            Err(PartitionParseError::Syntax("count:1-2".into()))
        );
    }

    #[test]
    fn run_ignored_follows_the_flags() {
        assert_eq!(parse(&[]).unwrap().run_ignored(), RunIgnored::No);
        assert_eq!(
            parse(&["--ignored"]).unwrap().run_ignored(),
            RunIgnored::Only
        );
        assert_eq!(
            parse(&["--include-ignored"]).unwrap().run_ignored(),
            RunIgnored::Yes
        );
    }
}
