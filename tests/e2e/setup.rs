//! The repository's own set-up, as the README gives it: its main command, run as written from
//! the repository root, and `cargo gpurun` (installed on PATH) from inside the fixtures'
//! workspace, where no repository alias may get in its way.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpurun_e2e::{
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

/// Every build directory the project's commands create is ignored by git (scripts/test.sh also
/// checks that a whole run leaves `git status` as it found it), and the fuzz corpus is not.
#[test]
fn build_directories_are_ignored_and_the_fuzz_corpus_is_kept() {
    let root = repo_root();
    let probe = Command::new("git")
        .args(["rev-parse", "--is-inside-work-tree"])
        .current_dir(&root)
        .output();
    if !probe.is_ok_and(|output| output.status.success()) {
        gpurun_e2e::tool_missing("not a git work tree (or no git): cannot ask what is ignored");
        return;
    }
    let ignored = |path: &str| {
        let status = Command::new("git")
            .args(["check-ignore", "--quiet", "--no-index", path])
            .current_dir(&root)
            .status()
            .expect("git runs");
        // 0: ignored, 1: not ignored; anything else is git's error.
        assert!(
            matches!(status.code(), Some(0 | 1)),
            "git check-ignore {path}: {status}"
        );
        status.success()
    };
    let mut build_dirs: Vec<String> = [
        "target/debug",
        "target/loom/release",
        "target/fuzz/corpus/frames",
        "fixtures/target/debug",
        "fixtures/target/gpu-images",
        // `cargo test` in the host app, as its README section invites.
        "fixtures/host-app/target/debug",
        "bench-out",
    ]
    .map(str::to_owned)
    .to_vec();
    let listed = |dir: &str| -> Vec<String> {
        std::fs::read_dir(root.join(dir))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|entry| entry.path().is_dir())
                    .map(|entry| format!("{dir}/{}", entry.file_name().to_string_lossy()))
                    .collect()
            })
            .unwrap_or_default()
    };
    for example in listed("examples") {
        build_dirs.push(format!("{example}/target/debug"));
    }
    // The libraries' crates, and the CLI and the harness at the top.
    let fuzz_dirs: Vec<String> = listed("crates")
        .into_iter()
        .chain(["cargo-gpurun".to_owned(), "harness".to_owned()])
        .map(|krate| format!("{krate}/fuzz"))
        .filter(|fuzz| root.join(fuzz).is_dir())
        .collect();
    assert!(fuzz_dirs.len() >= 4, "the fuzz crates: {fuzz_dirs:?}");
    for fuzz in &fuzz_dirs {
        // cargo fuzz run without scripts/fuzz.sh: its build, crashes and coverage.
        for made in ["target/release", "artifacts/t/crash-1", "coverage/t"] {
            build_dirs.push(format!("{fuzz}/{made}"));
        }
        assert!(
            !ignored(&format!("{fuzz}/corpus/t/input")),
            "{fuzz}/corpus is ignored"
        );
    }
    let not_ignored: Vec<&String> = build_dirs
        .iter()
        .filter(|dir| !ignored(&format!("{dir}/x")))
        .collect();
    assert!(
        not_ignored.is_empty(),
        "not ignored by git: {not_ignored:?}"
    );
}
