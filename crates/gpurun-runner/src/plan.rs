//! A test run's plan, made here for every front-end (`cargo gpurun test` and `bench`, `cargo
//! gpurun run`'s test mode, `gpurun-test`'s trials): which backend runs each suite, the
//! variants of each test (one per backend when several are asked for, one per lane size of the
//! host emulation), and the workers and time limit of each. A front-end fills [`PlanOptions`]
//! from its own options, hands over the suites, and runs what comes back with its reporter.

#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpurun_build::{BuiltImage, TargetKind};
use gpurun_hal::select::BackendChoice;
use gpurun_hal::{BackendError, BackendKind};
use gpurun_harness::time::TestKind;
use gpurun_harness::variants::VariantExecutor;
use gpurun_harness::{Executor, TestDesc};
use gpurun_image::Image;

use crate::placement::{self, WrongBackend};
use crate::pool::SuiteWorkers;
use crate::suite::{self, BadTimeLimit, LoadError, Suite};
use crate::{Sanitizer, SanitizerError, WorkerExecutor, WorkerOptions};

/// What a run asks of its workers and variants, whichever front-end asked.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// The worker executable, started with `prefix` before the worker's own arguments.
    pub exe: PathBuf,
    pub prefix: Vec<String>,
    /// Every worker's options; the plan sets the backend, device and lane size of each.
    pub options: WorkerOptions,
    /// The one device to run on, else every device its backend sees.
    pub device: Option<usize>,
    /// The backends asked for; several (a list or `all`) give each test a variant per backend,
    /// `[host] adds`, also where only one of them has a device, so that names stay put.
    pub choice: BackendChoice,
    /// The warp sizes the host emulation runs each test at; several give a variant per size,
    /// `[lanes=64] adds`. A GPU runs each test once, at its own.
    pub lane_sizes: Vec<u32>,
    /// compute-sanitizer, for CUDA workers only (`--sanitize`).
    pub sanitizer: Option<Sanitizer>,
    /// Environment added to host emulation workers (coverage's profile file).
    pub host_env: Vec<(String, String)>,
    /// How many tests run at once.
    pub concurrency: usize,
    /// Each test's time limit, when given; else its package's `test-timeout`, else
    /// [`suite::DEFAULT_TEST_TIMEOUT`].
    pub time_limit: Option<Duration>,
    /// Flush the GPU's L2 cache before every timed launch (`--flush-l2`).
    pub flush_l2: bool,
}

/// A run's suites, in the order they run, and what to tell the user before they do.
pub struct Plan {
    pub suites: Vec<PlannedSuite>,
    /// Notes, each a line: `--flush-l2` on a backend with no cache to flush.
    pub notes: Vec<String>,
}

/// One suite of the plan: what a reporter runs as a test binary of `cargo test`.
pub struct PlannedSuite {
    /// libtest's name for it: the package for a lib, else the target.
    pub name: String,
    pub test_kind: TestKind,
    /// The built images it runs, one per backend; none for an image run as given.
    pub images: Vec<BuiltImage>,
    /// Its tests, variants named by their label.
    pub tests: Vec<TestDesc>,
    pub executor: Arc<dyn Executor>,
    /// Images of the suite that could not be read: their tests are missing from it.
    pub broken: Vec<LoadError>,
}

/// Why a run cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    WrongBackend(#[from] WrongBackend),
    #[error(transparent)]
    Sanitizer(#[from] SanitizerError),
    #[error(transparent)]
    Devices(#[from] BackendError),
    #[error(transparent)]
    TimeLimit(#[from] BadTimeLimit),
}

/// One image of a suite, with its backend and each test's time limit.
struct Member {
    path: PathBuf,
    tests: Vec<TestDesc>,
    kind: BackendKind,
    time_limit: Duration,
}

impl PlanOptions {
    /// Whether each test gets a variant per backend.
    fn several_backends(&self) -> bool {
        matches!(self.choice, BackendChoice::Each(_) | BackendChoice::All)
    }

    /// The plan of `suites` (from [`suite::test_suites`], in its order): a suite per image, or
    /// with several backends one per source of every backend's images, each test once per
    /// backend.
    pub fn plan(&self, suites: Vec<Suite>) -> Result<Plan, PlanError> {
        let groups: Vec<Vec<Suite>> = match self.several_backends() {
            true => group_across_targets(suites),
            false => suites.into_iter().map(|suite| vec![suite]).collect(),
        };
        let mut plan = Plan {
            suites: Vec::new(),
            notes: Vec::new(),
        };
        for group in groups {
            let Some(first) = group.first() else {
                continue;
            };
            let name = first.name.clone();
            // libtest times a tests/ target's tests as integration tests.
            let test_kind = match first.built.kind {
                TargetKind::Test => TestKind::Integration,
                TargetKind::Lib | TargetKind::Bin | TargetKind::Example => TestKind::Unit,
            };
            let mut members = Vec::new();
            let mut broken = Vec::new();
            let mut images = Vec::new();
            for suite in group {
                // A broken image fails its own suite; the others still run and report.
                let (tests, kind) = match suite.image {
                    Ok(Some(image)) => (image.tests().to_vec(), self.backend_for(&image)?),
                    Ok(None) => (Vec::new(), BackendKind::for_platform(suite.built.target)),
                    Err(error) => {
                        broken.push(error);
                        images.push(suite.built);
                        continue;
                    }
                };
                members.push(Member {
                    path: suite.built.path.clone(),
                    tests,
                    kind,
                    time_limit: suite::time_limit(&suite.built, self.time_limit)?,
                });
                images.push(suite.built);
            }
            let (tests, executor) = self.variants(members, &mut plan.notes)?;
            plan.suites.push(PlannedSuite {
                name,
                test_kind,
                images,
                tests,
                executor,
                broken,
            });
        }
        Ok(plan)
    }

    /// The plan of one image given as is (`cargo gpurun run IMAGE` of a test image), named
    /// `name`, each test with `time_limit` unless the options give one.
    pub fn plan_image(
        &self,
        name: String,
        path: PathBuf,
        image: &Image,
        time_limit: Duration,
    ) -> Result<Plan, PlanError> {
        let member = Member {
            path,
            tests: image.tests().to_vec(),
            kind: self.backend_for(image)?,
            time_limit: self.time_limit.unwrap_or(time_limit),
        };
        let mut notes = Vec::new();
        let (tests, executor) = self.variants(vec![member], &mut notes)?;
        let suite = PlannedSuite {
            name,
            test_kind: TestKind::Unit,
            images: Vec::new(),
            tests,
            executor,
            broken: Vec::new(),
        };
        Ok(Plan {
            suites: vec![suite],
            notes,
        })
    }

    fn backend_for(&self, image: &Image) -> Result<BackendKind, WrongBackend> {
        placement::backend_for(&self.choice, image.kind())
    }

    /// The tests of `members` with one executor for all: each member's at each of its lane
    /// sizes, labelled when there is more than one variant of a test.
    fn variants(
        &self,
        members: Vec<Member>,
        notes: &mut Vec<String>,
    ) -> Result<(Vec<TestDesc>, Arc<dyn Executor>), PlanError> {
        let several_backends = self.several_backends();
        let several_lanes = self.lane_sizes.len() > 1;
        let mut variants = VariantExecutor::new();
        let mut tests = Vec::new();
        for member in members {
            if self.flush_l2 && !member.kind.flushes_l2() {
                let note = format!(
                    "--flush-l2 has no effect on the {} backend: it has no device cache to \
                     flush, so every launch runs as the last one left the caches",
                    member.kind
                );
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
            let lane_sizes = match member.kind {
                BackendKind::Host => self.lane_sizes.clone(),
                _ => self.lane_sizes.iter().take(1).copied().collect(),
            };
            for lane_size in lane_sizes {
                let executor = Arc::new(self.executor(&member, lane_size)?);
                let lanes = several_lanes && member.kind == BackendKind::Host;
                let label = match (lanes, several_backends) {
                    (true, true) => format!("{} lanes={lane_size}", member.kind.name()),
                    (true, false) => format!("lanes={lane_size}"),
                    (false, true) => member.kind.name().to_string(),
                    (false, false) => return Ok((member.tests, executor)),
                };
                tests.extend(variants.add(&label, &member.tests, executor));
            }
        }
        Ok((tests, Arc::new(variants)))
    }

    /// The executor of `member`'s tests at `lane_size`: a worker per device in use, sized so
    /// that every test that runs at once has a slot.
    fn executor(&self, member: &Member, lane_size: u32) -> Result<WorkerExecutor, PlanError> {
        let prefix: Vec<&str> = self.prefix.iter().map(String::as_str).collect();
        Ok(self
            .workers(member, lane_size, &prefix)?
            .executor(&member.path, self.concurrency, member.time_limit)?
            .flush_l2(self.flush_l2))
    }

    /// The workers of `member`'s tests at `lane_size`, compute-sanitizer only on CUDA.
    fn workers<'a>(
        &self,
        member: &Member,
        lane_size: u32,
        prefix: &'a [&'a str],
    ) -> Result<SuiteWorkers<'a>, SanitizerError> {
        let sanitizer = match &self.sanitizer {
            Some(sanitizer) => {
                Sanitizer::check_backend(member.kind)?;
                Some(sanitizer.clone())
            }
            None => None,
        };
        Ok(SuiteWorkers {
            exe: self.exe.clone(),
            prefix,
            options: WorkerOptions {
                backend: member.kind,
                lane_size,
                ..self.options.clone()
            },
            device: self.device,
            sanitizer,
            env: match member.kind {
                BackendKind::Host => self.host_env.clone(),
                _ => Vec::new(),
            },
        })
    }
}

/// The suites of several targets grouped by what they test (package, kind of target, name),
/// each group in target order, the groups in the order of their first suite.
fn group_across_targets(suites: Vec<Suite>) -> Vec<Vec<Suite>> {
    let mut groups: Vec<Vec<Suite>> = Vec::new();
    for suite in suites {
        let same = |other: &Suite| {
            (&other.built.package, other.built.kind, &other.built.name)
                == (&suite.built.package, suite.built.kind, &suite.built.name)
        };
        match groups
            .iter_mut()
            .find(|group| group.first().is_some_and(same))
        {
            Some(group) => group.push(suite),
            None => groups.push(vec![suite]),
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(choice: BackendChoice, lane_sizes: &[u32]) -> PlanOptions {
        PlanOptions {
            exe: PathBuf::from("/test/exe"),
            prefix: vec!["--as-worker".to_owned()],
            options: WorkerOptions {
                backend: BackendKind::Host,
                device: 0,
                lane_size: 32,
                emulation_checks: true,
                emulation_seed: Some(7),
                stack_size: None,
                allow_system: false,
                stdin: None,
            },
            device: None,
            choice,
            lane_sizes: lane_sizes.to_vec(),
            sanitizer: None,
            host_env: vec![("PROFILE".to_owned(), "p".to_owned())],
            concurrency: 4,
            time_limit: None,
            flush_l2: false,
        }
    }

    fn member(kind: BackendKind) -> Member {
        Member {
            path: PathBuf::from("/kernels.so"),
            tests: vec![TestDesc::new("tests::adds"), TestDesc::new("tests::subs")],
            kind,
            time_limit: Duration::from_secs(1),
        }
    }

    fn names(tests: &[TestDesc]) -> Vec<&str> {
        tests.iter().map(|test| test.name.as_str()).collect()
    }

    #[test]
    fn variants_are_labelled_only_where_a_test_has_several() {
        let one = options(BackendChoice::Auto, &[32]);
        let (tests, _) = one
            .variants(vec![member(BackendKind::Host)], &mut Vec::new())
            .unwrap();
        assert_eq!(names(&tests), ["tests::adds", "tests::subs"]);

        let lanes = options(BackendChoice::Auto, &[32, 64]);
        let (tests, _) = lanes
            .variants(vec![member(BackendKind::Host)], &mut Vec::new())
            .unwrap();
        assert_eq!(
            names(&tests),
            [
                "[lanes=32] tests::adds",
                "[lanes=32] tests::subs",
                "[lanes=64] tests::adds",
                "[lanes=64] tests::subs"
            ]
        );
        // A GPU runs each test once, at its own warp size: no lane label.
        let (tests, _) = lanes
            .variants(vec![member(BackendKind::Cuda)], &mut Vec::new())
            .unwrap();
        assert_eq!(names(&tests), ["tests::adds", "tests::subs"]);

        let backends = options(
            BackendChoice::Each(vec![BackendKind::Host, BackendKind::Cuda]),
            &[32, 64],
        );
        let members = vec![member(BackendKind::Host), member(BackendKind::Cuda)];
        let (tests, _) = backends.variants(members, &mut Vec::new()).unwrap();
        assert_eq!(
            names(&tests),
            [
                "[host lanes=32] tests::adds",
                "[host lanes=32] tests::subs",
                "[host lanes=64] tests::adds",
                "[host lanes=64] tests::subs",
                "[cuda] tests::adds",
                "[cuda] tests::subs"
            ]
        );
        // `all` labels even a lone backend, so that names do not change with the machine.
        let all = options(BackendChoice::All, &[32]);
        let (tests, _) = all
            .variants(vec![member(BackendKind::Host)], &mut Vec::new())
            .unwrap();
        assert_eq!(names(&tests), ["[host] tests::adds", "[host] tests::subs"]);
    }

    #[test]
    fn every_device_present_gets_a_worker_with_the_lane_size_and_host_environment() {
        // The only test of this crate's unit tests that lists host devices, so setting the
        // variable races with nothing.
        let env = gpurun_hal::host::HOST_DEVICES_ENV;
        let plan = options(BackendChoice::Auto, &[64]);
        let prefix = ["--as-worker"];
        let specs = |kind| {
            plan.workers(&member(kind), 64, &prefix)
                .unwrap()
                .specs(Path::new("/kernels.so"))
        };
        std::env::set_var(env, "3");
        let three = specs(BackendKind::Host);
        std::env::set_var(env, "0");
        let invalid = specs(BackendKind::Host);
        std::env::remove_var(env);
        // What each worker reads: its options after the prefix, then the image.
        let options_of = |spec: &crate::WorkerSpec| {
            assert_eq!(spec.args[0], "--as-worker");
            let mut args: Vec<std::ffi::OsString> = spec.args[1..].iter().map(Into::into).collect();
            args.push(spec.image.clone().into_os_string());
            WorkerOptions::parse(&args).unwrap().0
        };
        let three = three.unwrap();
        let devices: Vec<usize> = three.iter().map(|spec| options_of(spec).device).collect();
        assert_eq!(devices, [0, 1, 2]);
        for spec in &three {
            assert_eq!(options_of(spec).lane_size, 64);
            assert!(spec.env.contains(&("PROFILE".to_owned(), "p".to_owned())));
        }
        let error = invalid.unwrap_err().to_string();
        assert!(error.contains("GPURUN_HOST_DEVICES must be"), "{error}");
        // Only host workers get the host environment.
        let cuda = specs(BackendKind::Cuda).unwrap();
        assert!(cuda
            .iter()
            .all(|spec| spec.env.iter().all(|(name, _)| name != "PROFILE")));
    }

    #[test]
    fn flush_l2_is_noted_once_for_a_backend_without_a_cache_to_flush() {
        let plan = PlanOptions {
            flush_l2: true,
            ..options(BackendChoice::Auto, &[32, 64])
        };
        let mut notes = Vec::new();
        plan.variants(vec![member(BackendKind::Host)], &mut notes)
            .unwrap();
        plan.variants(vec![member(BackendKind::Host)], &mut notes)
            .unwrap();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("no effect on the host backend"),
            "{notes:?}"
        );
    }
}
