//! `examples/saxpy`, the README's smallest host crate + kernel crate pair: plain `cargo test` on
//! stable runs its device test as a trial and its host-driven launch, on the host emulation; and
//! the README quotes its files as they are.

use std::path::{Path, PathBuf};

use gpurun_e2e::{describe, fixtures_dir, repo_root, text};

use crate::host_app::{host_crate_cargo, output_of, result_line};

fn example() -> PathBuf {
    repo_root().join("examples/saxpy")
}

/// The files the README shows, in full.
const QUOTED: [&str; 6] = [
    "Cargo.toml",
    "src/lib.rs",
    "tests/gpu.rs",
    "tests/saxpy.rs",
    "kernels/Cargo.toml",
    "kernels/src/lib.rs",
];

#[test]
fn cargo_test_runs_the_device_test_and_the_host_driven_launch() {
    let mut command = host_crate_cargo(
        &example().join("Cargo.toml"),
        &["test"],
        &["--no-fail-fast"],
    );
    // The kernel crate builds in the fixtures' target directory, where the `gpurun` crate and its
    // dependencies are already built for the host emulation.
    command.env("CARGO_TARGET_DIR", fixtures_dir().join("target"));
    let output = output_of(command);
    assert!(output.status.success(), "{}", describe(&output));
    let stdout = text(&output.stdout);
    for name in ["saxpy_one_multiplies_and_adds", "saxpy_matches_the_cpu"] {
        let line = result_line(&stdout, name)
            .unwrap_or_else(|| panic!("no result line for {name}:\n{}", describe(&output)));
        assert!(line.ends_with(" ok"), "{line}\n{}", describe(&output));
    }
    // The trials target and the launch target each ran one test.
    assert_eq!(
        stdout
            .matches("test result: ok. 1 passed; 0 failed; 0 ignored;")
            .count(),
        2,
        "{}",
        describe(&output)
    );
}

/// `text` as the README shows code: indented by four spaces, blank lines left empty.
fn indented(text: &str) -> String {
    text.lines()
        .map(|line| {
            if line.is_empty() {
                String::new()
            } else {
                format!("    {line}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_readme_quotes_the_example_as_it_is() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    for file in QUOTED {
        let path: &Path = &example().join(file);
        let contents = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        // Each block opens with the file's name, as a comment of its language.
        let comment = if file.ends_with(".toml") { "#" } else { "//" };
        let quoted = format!(
            "    {comment} examples/saxpy/{file}\n{}\n",
            indented(&contents)
        );
        assert!(
            readme.contains(&quoted),
            "README.md does not quote examples/saxpy/{file} as it is; expected:\n{quoted}"
        );
    }
}
