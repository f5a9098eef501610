//! Which cargo targets of a device crate `cargo gpurun test` builds, like `cargo test` would:
//! the lib, the bins, every `[[test]]` with `harness = false` and every example.
//!
//! `cargo metadata` gives each target's kind, crate types, `test` flag and `required-features`,
//! but not `harness`, so that one is read from the package's Cargo.toml. A test target that keeps
//! libtest (`harness = true`, the default) needs `std` and cannot run on a GPU: it is left out
//! with a warning. The targets are then named one by one on cargo's command line (`--lib --bin A
//! --test B --example C`); `--tests` would also build the lib with libtest.
//!
//! The lib suite depends on the lib's `harness`. With the default (`true`) it is the lib as
//! built, whose top-level `#[gpurun::test]`s run; libtest is never involved. With `harness =
//! false`, `cargo test` builds the lib in test mode (`cfg(test)` on) as an executable without
//! libtest, so `#[cfg(test)] mod tests` exist only there: that build is the lib suite then, made
//! on its own with `cargo rustc --lib --profile test` (`cargo build` cannot select it without
//! `--tests`), and `test = false` on such a lib means no lib suite, as with `cargo test`.
//!
//! Per device target:
//! - nvptx links every executable with our linker, so everything builds in one cargo run (the
//!   lib's test-mode build in one more);
//! - amdgcn-amd-amdhsa cannot link executables at all (cargo refuses the `bin` crate type), so
//!   only the lib (never in test mode) and examples declared with `crate-type = ["cdylib"]` build
//!   there;
//! - on the host, cargo's executables cannot be `dlopen`ed (glibc refuses PIE executables, and
//!   a `#![no_main]` one does not even link), so each executable target, and the lib's test-mode
//!   build, is built on its own with `cargo rustc ... -- -C link-arg=-shared`: the same objects,
//!   linked as a shared object.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cargo_metadata::{CrateType, TargetKind as CargoKind};

use super::{Platform, TargetKind};

/// A cargo target of a device crate, as far as choosing what to test is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoTarget {
    /// The target name (what `--test NAME` takes).
    pub name: String,
    /// Lib, bin, test or example.
    pub kind: TargetKind,
    /// Cargo links it as an executable (crate type `bin`): every bin and test, and examples
    /// without a `crate-type`.
    pub executable: bool,
    /// The manifest's `test` flag (`test = false` keeps a target out of `cargo test`).
    pub test: bool,
    /// The manifest's `required-features`.
    pub required_features: Vec<String>,
    /// The source file, relative to the package root where possible (`tests/foo.rs`).
    pub source: PathBuf,
}

impl CargoTarget {
    /// The target as `cargo metadata` describes it; `None` for benches and build scripts.
    pub fn from_metadata(target: &cargo_metadata::Target, package_root: &Path) -> Option<Self> {
        let is = |kind: &CargoKind| target.kind.contains(kind);
        let kind = if is(&CargoKind::Bin) {
            TargetKind::Bin
        } else if is(&CargoKind::Test) {
            TargetKind::Test
        } else if is(&CargoKind::Example) {
            TargetKind::Example
        } else if target.kind.iter().any(is_lib_kind) {
            TargetKind::Lib
        } else {
            return None;
        };
        let source = target.src_path.as_std_path();
        Some(CargoTarget {
            name: target.name.clone(),
            kind,
            executable: target.crate_types.contains(&CrateType::Bin),
            test: target.test,
            required_features: target.required_features.clone(),
            source: source
                .strip_prefix(package_root)
                .unwrap_or(source)
                .to_owned(),
        })
    }
}

/// A bin, test or example target that `cargo gpurun test` builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selected {
    /// Bin, test or example.
    pub kind: TargetKind,
    /// The target name.
    pub name: String,
    /// Whether cargo links it as an executable (see [`CargoTarget::executable`]).
    pub executable: bool,
}

impl Selected {
    /// Cargo's option naming this target: `--bin`, `--test` or `--example`.
    pub fn cargo_flag(&self) -> &'static str {
        match self.kind {
            TargetKind::Bin => "--bin",
            TargetKind::Test => "--test",
            TargetKind::Example => "--example",
            // Never selected by name: the lib is `--lib`.
            TargetKind::Lib => "--lib",
        }
    }
}

/// Which build of the lib is the lib's test suite.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LibSuite {
    /// None: the package has no lib, or its lib has `harness = false` and `test = false`.
    #[default]
    None,
    /// The lib as built (`harness = true`): its top-level `#[gpurun::test]`s.
    Plain,
    /// The lib built in test mode (`harness = false`): `cfg(test)` on, linked as an executable,
    /// so its `#[cfg(test)]` tests are in it.
    UnitTests,
}

/// The targets of a package whose manifest sets `harness = false`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HarnessFalse {
    /// `[lib] harness = false`.
    pub lib: bool,
    /// The names of the `[[test]]` targets with `harness = false`.
    pub tests: BTreeSet<String>,
}

/// What `cargo gpurun test` builds of one device crate, whatever the device target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestSelection {
    /// Which build of the lib is a suite.
    pub lib: LibSuite,
    /// Bins, then tests, then examples, each in name order.
    pub targets: Vec<Selected>,
    /// One line for each target left out (`warning: ...` or `note: ...`), to print once.
    pub left_out: Vec<String>,
}

/// What one device target builds of a [`TestSelection`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetPlan {
    /// The lib suite: [`LibSuite::Plain`] builds in the one cargo run (`--lib`),
    /// [`LibSuite::UnitTests`] in a cargo run of its own.
    pub lib: LibSuite,
    /// Built in the package's (or the group's) one cargo run, next to the lib.
    pub together: Vec<Selected>,
    /// Built one at a time as shared objects (host executables).
    pub one_by_one: Vec<Selected>,
    /// One `note: ...` line for each target this device target cannot build.
    pub left_out: Vec<String>,
}

/// Chooses the targets of package `package` that `cargo gpurun test` builds: the lib (see
/// [`LibSuite`]), every bin, every test with `harness = false` and `test = true`, and every
/// example; `missing_features` says which of a target's `required-features` are off.
pub fn select_for_test(
    package: &str,
    targets: &[CargoTarget],
    harness_false: &HarnessFalse,
    missing_features: impl Fn(&[String]) -> Vec<String>,
) -> TestSelection {
    let mut selection = TestSelection::default();
    let mut sorted: Vec<&CargoTarget> = targets.iter().collect();
    sorted.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
    for target in sorted {
        let what = describe(target, package);
        match target.kind {
            TargetKind::Lib => {
                selection.lib = match (harness_false.lib, target.test) {
                    (false, _) => LibSuite::Plain,
                    (true, true) => LibSuite::UnitTests,
                    // `cargo test` builds no unit tests of such a lib either.
                    (true, false) => LibSuite::None,
                };
                continue;
            }
            // `cargo test` leaves these out too.
            TargetKind::Test if !target.test => continue,
            TargetKind::Test if !harness_false.tests.contains(&target.name) => {
                selection.left_out.push(format!(
                    "warning: skipping {what}: it uses libtest, which cannot run on a GPU; set \
                     `harness = false` in its [[test]] section of Cargo.toml"
                ));
                continue;
            }
            TargetKind::Bin | TargetKind::Test | TargetKind::Example => {}
        }
        let missing = missing_features(&target.required_features);
        if !missing.is_empty() {
            selection.left_out.push(format!(
                "note: skipping {what}: it requires the features `{}` (enable them with \
                 `--features`)",
                missing.join("`, `")
            ));
            continue;
        }
        selection.targets.push(Selected {
            kind: target.kind,
            name: target.name.clone(),
            executable: target.executable,
        });
    }
    selection
}

impl TestSelection {
    /// How `target` builds this selection of package `package`.
    pub fn plan_for(&self, target: Platform, package: &str) -> TargetPlan {
        let mut plan = TargetPlan {
            lib: self.lib,
            ..TargetPlan::default()
        };
        if target == Platform::Amdgcn && self.lib == LibSuite::UnitTests {
            plan.lib = LibSuite::Plain;
            plan.left_out.push(format!(
                "note: the cfg(test) unit tests of the lib of `{package}` are not built for \
                 amdgcn: cargo builds them as an executable, which amdgcn-amd-amdhsa cannot \
                 link; the lib's own tests run instead"
            ));
        }
        for selected in &self.targets {
            match target {
                Platform::Nvptx => plan.together.push(selected.clone()),
                Platform::Host if selected.executable => plan.one_by_one.push(selected.clone()),
                Platform::Host => plan.together.push(selected.clone()),
                Platform::Amdgcn if !selected.executable => {
                    plan.together.push(selected.clone());
                }
                Platform::Amdgcn => {
                    let hint = if selected.kind == TargetKind::Example {
                        " (give the example crate-type = [\"cdylib\"] to test it there)"
                    } else {
                        ""
                    };
                    plan.left_out.push(format!(
                        "note: skipping {} of `{package}` on amdgcn: cargo builds it as an \
                         executable, which amdgcn-amd-amdhsa cannot link{hint}",
                        kind_and_name(selected.kind, &selected.name),
                    ));
                }
            }
        }
        plan
    }
}

/// `test target `foo` of `pkg` (tests/foo.rs)`.
/// Whether a cargo target kind is one of the library kinds (`lib`, `cdylib`, ...).
pub fn is_lib_kind(kind: &CargoKind) -> bool {
    matches!(
        kind,
        CargoKind::Lib
            | CargoKind::RLib
            | CargoKind::DyLib
            | CargoKind::CDyLib
            | CargoKind::StaticLib
    )
}

fn describe(target: &CargoTarget, package: &str) -> String {
    format!(
        "{} of `{package}` ({})",
        kind_and_name(target.kind, &target.name),
        target.source.display()
    )
}

fn kind_and_name(kind: TargetKind, name: &str) -> String {
    let kind = match kind {
        TargetKind::Lib => "lib",
        TargetKind::Bin => "bin",
        TargetKind::Test => "test target",
        TargetKind::Example => "example",
    };
    format!("{kind} `{name}`")
}

/// The lib and the `[[test]]` targets that set `harness = false`, from the text of a Cargo.toml.
/// A `[[test]]` without `name` is named after its file, as cargo does.
pub fn harness_false_targets(manifest: &str) -> Result<HarnessFalse, String> {
    let document: toml_edit::DocumentMut = manifest.parse().map_err(|err| format!("{err}"))?;
    let is_false =
        |item: Option<&toml_edit::Item>| item.and_then(|item| item.as_bool()) == Some(false);
    let mut found = HarnessFalse {
        lib: is_false(document.get("lib").and_then(|lib| lib.get("harness"))),
        tests: BTreeSet::new(),
    };
    let Some(tests) = document
        .get("test")
        .and_then(|item| item.as_array_of_tables())
    else {
        return Ok(found);
    };
    for test in tests {
        if !is_false(test.get("harness")) {
            continue;
        }
        let name = test
            .get("name")
            .and_then(|item| item.as_str())
            .map(str::to_owned)
            .or_else(|| {
                let path = test.get("path").and_then(|item| item.as_str())?;
                Some(Path::new(path).file_stem()?.to_string_lossy().into_owned())
            });
        if let Some(name) = name {
            found.tests.insert(name);
        }
    }
    Ok(found)
}

/// The features of a package that the command line turns on, with everything they enable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnabledFeatures {
    /// `--all-features`.
    All,
    /// These names: features, optional dependencies and `dep/feature` entries.
    Some(BTreeSet<String>),
}

impl EnabledFeatures {
    /// Resolves `--features` values (comma or space separated; `package/feature` for one
    /// package), `--all-features` and `--no-default-features` against a package's `[features]`
    /// table (as `cargo metadata` lists it, optional dependencies included).
    pub fn resolve(
        package: &str,
        table: &BTreeMap<String, Vec<String>>,
        features: &[String],
        all_features: bool,
        no_default_features: bool,
    ) -> Self {
        if all_features {
            return Self::All;
        }
        let mut pending: Vec<String> = Vec::new();
        if !no_default_features {
            pending.push("default".to_owned());
        }
        for spec in features
            .iter()
            .flat_map(|value| value.split([',', ' ']))
            .map(str::trim)
            .filter(|spec| !spec.is_empty())
        {
            match spec.split_once('/') {
                Some((owner, feature)) if owner == package => pending.push(feature.to_owned()),
                _ => pending.push(spec.to_owned()),
            }
        }
        let mut enabled = BTreeSet::new();
        while let Some(feature) = pending.pop() {
            // `dep?/feature` turns on a dependency's feature if the dependency is on: counted as
            // on. `dep:name` (an optional dependency) is no feature and enables nothing more.
            let feature = feature.replace("?/", "/");
            if !enabled.insert(feature.clone()) || feature.starts_with("dep:") {
                continue;
            }
            if let Some(enables) = table.get(&feature) {
                pending.extend(enables.iter().cloned());
            }
        }
        Self::Some(enabled)
    }

    /// The entries of `required` (a target's `required-features`) that are off.
    pub fn missing(&self, required: &[String]) -> Vec<String> {
        match self {
            Self::All => Vec::new(),
            Self::Some(enabled) => required
                .iter()
                .filter(|feature| !enabled.contains(&feature.replace("?/", "/")))
                .cloned()
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(kind: TargetKind, name: &str, source: &str) -> CargoTarget {
        CargoTarget {
            name: name.to_owned(),
            kind,
            executable: kind != TargetKind::Lib,
            test: kind != TargetKind::Example,
            required_features: Vec::new(),
            source: PathBuf::from(source),
        }
    }

    fn selected(kind: TargetKind, name: &str, executable: bool) -> Selected {
        Selected {
            kind,
            name: name.to_owned(),
            executable,
        }
    }

    fn names(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    /// A manifest whose lib keeps `harness = true` and whose tests `names` set it to `false`.
    fn harness_false(names: &[&str]) -> HarnessFalse {
        HarnessFalse {
            lib: false,
            tests: self::names(names),
        }
    }

    #[test]
    fn reads_targets_from_cargo_metadata() {
        let json = |kind: &str, crate_type: &str, name: &str, path: &str| {
            serde_json::json!({
                "kind": [kind], "crate_types": [crate_type], "name": name,
                "src_path": path, "edition": "2021", "doc": false, "doctest": false,
                "test": kind == "test", "required-features": ["extra"],
            })
        };
        let parse = |value: serde_json::Value| {
            let target: cargo_metadata::Target = serde_json::from_value(value).unwrap();
            CargoTarget::from_metadata(&target, Path::new("/ws/pkg"))
        };
        let test = parse(json("test", "bin", "it", "/ws/pkg/tests/it.rs")).unwrap();
        assert_eq!(test.kind, TargetKind::Test);
        assert!(test.executable && test.test);
        assert_eq!(test.source, Path::new("tests/it.rs"));
        assert_eq!(test.required_features, ["extra"]);
        let example = parse(json(
            "example",
            "cdylib",
            "demo",
            "/ws/pkg/examples/demo.rs",
        ))
        .unwrap();
        assert_eq!(example.kind, TargetKind::Example);
        assert!(!example.executable && !example.test);
        let lib = parse(json("cdylib", "cdylib", "pkg", "/ws/pkg/src/lib.rs")).unwrap();
        assert_eq!(
            (lib.kind, lib.source.as_path()),
            (TargetKind::Lib, Path::new("src/lib.rs"))
        );
        assert_eq!(
            parse(json("bench", "bin", "b", "/ws/pkg/benches/b.rs")),
            None
        );
        assert_eq!(
            parse(json(
                "custom-build",
                "bin",
                "build-script-build",
                "/ws/pkg/build.rs"
            )),
            None
        );
        // A source outside the package (a `path = "../x.rs"`) keeps its full path.
        let outside = parse(json("test", "bin", "x", "/ws/x.rs")).unwrap();
        assert_eq!(outside.source, Path::new("/ws/x.rs"));
    }

    #[test]
    fn selects_lib_bins_harness_false_tests_and_examples_in_cargo_order() {
        let targets = [
            target(TargetKind::Example, "zdemo", "examples/zdemo.rs"),
            target(TargetKind::Test, "b_tests", "tests/b_tests.rs"),
            target(TargetKind::Example, "ademo", "examples/ademo.rs"),
            target(TargetKind::Test, "a_tests", "tests/a_tests.rs"),
            target(TargetKind::Bin, "tool", "src/main.rs"),
            target(TargetKind::Lib, "pkg", "src/lib.rs"),
        ];
        let selection = select_for_test(
            "pkg",
            &targets,
            &harness_false(&["a_tests", "b_tests"]),
            |_| Vec::new(),
        );
        assert_eq!(selection.lib, LibSuite::Plain);
        assert_eq!(
            selection.targets,
            [
                selected(TargetKind::Bin, "tool", true),
                selected(TargetKind::Test, "a_tests", true),
                selected(TargetKind::Test, "b_tests", true),
                selected(TargetKind::Example, "ademo", true),
                selected(TargetKind::Example, "zdemo", true),
            ]
        );
        assert!(selection.left_out.is_empty(), "{:?}", selection.left_out);
    }

    #[test]
    fn a_libtest_test_is_skipped_with_one_warning_naming_it() {
        let targets = [
            target(TargetKind::Lib, "pkg", "src/lib.rs"),
            target(TargetKind::Test, "uses_libtest", "tests/uses_libtest.rs"),
            target(TargetKind::Test, "device", "tests/device.rs"),
        ];
        let selection =
            select_for_test("pkg", &targets, &harness_false(&["device"]), |_| Vec::new());
        assert_eq!(
            selection.targets,
            [selected(TargetKind::Test, "device", true)]
        );
        assert_eq!(
            selection.left_out,
            ["warning: skipping test target `uses_libtest` of `pkg` (tests/uses_libtest.rs): it \
              uses libtest, which cannot run on a GPU; set `harness = false` in its [[test]] \
              section of Cargo.toml"]
        );
    }

    #[test]
    fn tests_with_test_false_are_left_out_like_cargo_test_does() {
        let mut off = target(TargetKind::Test, "off", "tests/off.rs");
        off.test = false;
        let selection = select_for_test("pkg", &[off], &harness_false(&["off"]), |_| Vec::new());
        assert_eq!(selection, TestSelection::default());
    }

    #[test]
    fn targets_missing_required_features_are_skipped_with_a_note() {
        let mut gated = target(TargetKind::Example, "gated", "examples/gated.rs");
        gated.required_features = vec!["big".to_owned(), "fast".to_owned()];
        let mut open = target(TargetKind::Example, "open", "examples/open.rs");
        open.required_features = vec!["fast".to_owned()];
        let enabled = EnabledFeatures::Some(names(&["fast"]));
        let selection = select_for_test("pkg", &[gated, open], &harness_false(&[]), |required| {
            enabled.missing(required)
        });
        assert_eq!(
            selection.targets,
            [selected(TargetKind::Example, "open", true)]
        );
        assert_eq!(
            selection.left_out,
            [
                "note: skipping example `gated` of `pkg` (examples/gated.rs): it requires the \
              features `big` (enable them with `--features`)"
            ]
        );
    }

    #[test]
    fn each_device_target_builds_what_it_can() {
        let selection = TestSelection {
            lib: LibSuite::Plain,
            targets: vec![
                selected(TargetKind::Test, "it", true),
                selected(TargetKind::Example, "bin_demo", true),
                selected(TargetKind::Example, "cdylib_demo", false),
            ],
            left_out: Vec::new(),
        };
        let nvptx = selection.plan_for(Platform::Nvptx, "pkg");
        assert_eq!(nvptx.lib, LibSuite::Plain);
        assert_eq!(nvptx.together, selection.targets);
        assert!(nvptx.one_by_one.is_empty() && nvptx.left_out.is_empty());

        let host = selection.plan_for(Platform::Host, "pkg");
        assert_eq!(
            host.together,
            [selected(TargetKind::Example, "cdylib_demo", false)]
        );
        assert_eq!(host.one_by_one, selection.targets[..2]);
        assert!(host.left_out.is_empty());

        let amdgcn = selection.plan_for(Platform::Amdgcn, "pkg");
        assert_eq!(amdgcn.lib, LibSuite::Plain);
        assert_eq!(amdgcn.together, host.together);
        assert!(amdgcn.one_by_one.is_empty());
        assert_eq!(
            amdgcn.left_out,
            [
                "note: skipping test target `it` of `pkg` on amdgcn: cargo builds it as an \
                 executable, which amdgcn-amd-amdhsa cannot link",
                "note: skipping example `bin_demo` of `pkg` on amdgcn: cargo builds it as an \
                 executable, which amdgcn-amd-amdhsa cannot link (give the example crate-type = \
                 [\"cdylib\"] to test it there)",
            ]
        );
    }

    #[test]
    fn harness_false_is_read_from_the_manifest() {
        let manifest = r#"
            [package]
            name = "pkg"

            [[test]]
            name = "device"
            harness = false

            [[test]]
            name = "host_side"

            [[test]]
            name = "explicit_true"
            harness = true

            [[test]]
            path = "tests/unnamed.rs"
            harness = false

            [lib]
            harness = false
        "#;
        assert_eq!(
            harness_false_targets(manifest).unwrap(),
            HarnessFalse {
                lib: true,
                tests: names(&["device", "unnamed"]),
            }
        );
        assert_eq!(
            harness_false_targets("[package]\nname = \"x\"\n").unwrap(),
            HarnessFalse::default()
        );
        assert_eq!(
            harness_false_targets("[lib]\nharness = true\n").unwrap(),
            HarnessFalse::default()
        );
        assert!(
            harness_false_targets("lib = { harness = false }\n")
                .unwrap()
                .lib
        );
        assert!(harness_false_targets("[[test]\n").is_err());
    }

    #[test]
    fn a_harness_false_lib_is_tested_in_test_mode_unless_test_is_false() {
        let lib = target(TargetKind::Lib, "pkg", "src/lib.rs");
        let lib_without_harness = HarnessFalse {
            lib: true,
            tests: BTreeSet::new(),
        };
        let select = |lib: &CargoTarget, harness: &HarnessFalse| {
            select_for_test("pkg", std::slice::from_ref(lib), harness, |_| Vec::new())
        };
        assert_eq!(select(&lib, &harness_false(&[])).lib, LibSuite::Plain);
        assert_eq!(select(&lib, &lib_without_harness).lib, LibSuite::UnitTests);
        let mut untested = lib.clone();
        untested.test = false;
        assert_eq!(select(&untested, &lib_without_harness).lib, LibSuite::None);
        // `test = false` on a lib that keeps the harness: its plain build stays a suite, as before.
        assert_eq!(select(&untested, &harness_false(&[])).lib, LibSuite::Plain);
        assert_eq!(
            select_for_test("pkg", &[], &lib_without_harness, |_| Vec::new()).lib,
            LibSuite::None
        );
    }

    #[test]
    fn the_lib_unit_tests_build_on_nvptx_and_the_host_and_amdgcn_says_it_cannot() {
        let selection = TestSelection {
            lib: LibSuite::UnitTests,
            targets: Vec::new(),
            left_out: Vec::new(),
        };
        for target in [Platform::Nvptx, Platform::Host] {
            let plan = selection.plan_for(target, "pkg");
            assert_eq!(plan.lib, LibSuite::UnitTests, "{target}");
            assert!(plan.left_out.is_empty(), "{target}: {:?}", plan.left_out);
        }
        let amdgcn = selection.plan_for(Platform::Amdgcn, "pkg");
        assert_eq!(amdgcn.lib, LibSuite::Plain);
        assert_eq!(
            amdgcn.left_out,
            ["note: the cfg(test) unit tests of the lib of `pkg` are not built for amdgcn: cargo \
              builds them as an executable, which amdgcn-amd-amdhsa cannot link; the lib's own \
              tests run instead"]
        );
    }

    #[test]
    fn features_resolve_through_the_table() {
        let table: BTreeMap<String, Vec<String>> = [
            ("default", vec!["std"]),
            ("std", vec![]),
            ("big", vec!["wide", "dep:helper", "helper?/simd"]),
            ("wide", vec![]),
            ("helper", vec!["dep:helper"]),
            ("other", vec![]),
        ]
        .into_iter()
        .map(|(name, enables)| {
            (
                name.to_owned(),
                enables.into_iter().map(str::to_owned).collect(),
            )
        })
        .collect();
        let required = |names: &[&str]| -> Vec<String> {
            names.iter().map(|name| (*name).to_owned()).collect()
        };

        let defaults = EnabledFeatures::resolve("pkg", &table, &[], false, false);
        assert!(defaults.missing(&required(&["std"])).is_empty());
        assert_eq!(defaults.missing(&required(&["big", "std"])), ["big"]);

        let none = EnabledFeatures::resolve("pkg", &table, &[], false, true);
        assert_eq!(none.missing(&required(&["std"])), ["std"]);

        // Comma and space separated, `pkg/feature` for this package, transitive through the table.
        let big = EnabledFeatures::resolve(
            "pkg",
            &table,
            &["pkg/big other".to_owned(), "unrelated/x,".to_owned()],
            false,
            true,
        );
        assert!(big
            .missing(&required(&["big", "wide", "helper/simd", "other"]))
            .is_empty());
        assert_eq!(
            big.missing(&required(&["std", "helper"])),
            ["std", "helper"]
        );
        // `helper` enables `dep:helper`, which names itself no feature: resolving ends.
        let helper = EnabledFeatures::resolve("pkg", &table, &["helper".to_owned()], false, true);
        assert!(helper.missing(&required(&["helper"])).is_empty());

        let all = EnabledFeatures::resolve("pkg", &table, &[], true, true);
        assert!(all.missing(&required(&["anything"])).is_empty());
    }
}
