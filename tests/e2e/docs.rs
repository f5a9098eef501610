//! The docs that describe the code are checked against it: `docs/architecture.md`'s table of
//! crates names every published crate of the workspace and, for each, exactly the workspace
//! crates it depends on (normal dependencies), as `cargo metadata` reports them.

use cargo_metadata::{DependencyKind, MetadataCommand};
use gpurun_e2e::repo_root;
use std::collections::{BTreeMap, BTreeSet};

/// The table's rows: crate name -> the crates it says that crate depends on.
fn documented_dependencies(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let names = |cell: &str| -> BTreeSet<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    };
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with("| crate | owns | depends on |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("| ---") {
            continue;
        }
        let Some(row) = line.strip_prefix('|') else {
            break;
        };
        let cells: Vec<&str> = row.split(" | ").map(str::trim).collect();
        let [krate, _owns, depends_on] = cells[..] else {
            panic!("a row of the crates table without three cells: {line}");
        };
        let krate = krate.trim_matches('`').to_owned();
        let depends_on = names(depends_on.trim_end_matches('|'));
        assert!(
            rows.insert(krate.clone(), depends_on).is_none(),
            "{krate} has two rows"
        );
    }
    rows
}

#[test]
fn the_architecture_doc_lists_each_crates_dependencies_as_cargo_does() {
    let doc = std::fs::read_to_string(repo_root().join("docs/architecture.md")).unwrap();
    let documented = documented_dependencies(&doc);
    let metadata = MetadataCommand::new()
        .manifest_path(repo_root().join("Cargo.toml"))
        .no_deps()
        .exec()
        .unwrap();
    let workspace: BTreeSet<&str> = metadata
        .workspace_packages()
        .iter()
        .map(|package| package.name.as_str())
        .collect();
    let mut actual = BTreeMap::new();
    for package in metadata.workspace_packages() {
        // Test-only crates (the fake driver, the end-to-end tests) are not in the table.
        if package.publish.as_ref().is_some_and(Vec::is_empty) {
            continue;
        }
        let depends_on: BTreeSet<String> = package
            .dependencies
            .iter()
            .filter(|dependency| dependency.kind == DependencyKind::Normal)
            .filter(|dependency| workspace.contains(dependency.name.as_str()))
            .map(|dependency| dependency.name.clone())
            .collect();
        actual.insert(package.name.to_string(), depends_on);
    }
    assert_eq!(
        documented, actual,
        "docs/architecture.md's crates table (left) against cargo metadata (right)"
    );
}
