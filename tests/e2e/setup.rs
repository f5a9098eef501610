//! The repository's own set-up, as the README gives it: its main command, run as written from
//! the repository root, and `cargo gpurun` (installed on PATH) from inside the fixtures'
//! workspace, where no repository alias may get in its way.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpurun_tests::{
    assert_contains, binary, describe, fixtures_dir, json_lines, repo_root, text, HOST_BUILD_JSON,
};

/// The README's line that ends in `# the main job`, split into words.
fn readme_main_command() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("read README.md");
    let line = readme
        .lines()
        .find_map(|line| line.trim().strip_suffix("# the main job"))
        .expect("README.md has a line ending in `# the main job`");
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_readme_main_command_runs_the_basic_fixture() {
    let words = readme_main_command();
    assert_eq!(
        words.first().map(String::as_str),
        Some("cargo"),
        "{words:?}"
    );
    let output = Command::new("cargo")
        .args(&words[1..])
        .current_dir(repo_root())
        .env_remove("GITHUB_ACTIONS")
        .env_remove("RUSTFLAGS")
        .output()
        .expect("run cargo");
    // 7 pass, 2 are ignored and 4 fail on purpose, as the README says: exit 101.
    assert_eq!(output.status.code(), Some(101), "{}", describe(&output));
    let stdout = text(&output.stdout);
    assert_contains(
        &stdout,
        "test result: FAILED. 7 passed; 4 failed; 2 ignored;",
        &output,
    );
}

/// A directory holding only `cargo-gpurun` (a link to the binary under test), for PATH.
fn installed_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("installed-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("cargo-gpurun");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(binary(), &link).unwrap();
    dir
}

#[test]
fn installed_cargo_gpurun_works_inside_the_fixtures() {
    let dir = installed_dir();
    let path = std::env::join_paths(
        std::iter::once(dir).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let output = Command::new("cargo")
        .args(HOST_BUILD_JSON)
        .current_dir(fixtures_dir().join("bare-kernel"))
        .env("PATH", path)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("run cargo");
    assert!(output.status.success(), "{}", describe(&output));
    let stderr = text(&output.stderr);
    assert!(
        !stderr.contains("alias") && !stderr.contains("shadow"),
        "{}",
        describe(&output)
    );
    // Inside a member's directory: that member only.
    let packages: Vec<String> = json_lines(&text(&output.stdout))
        .map(|image| image["package"].as_str().expect("package").to_owned())
        .collect();
    assert_eq!(packages, ["bare-kernel"], "{}", describe(&output));
}
