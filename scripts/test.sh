#!/usr/bin/env bash
# The one command that runs every test: set-up, formatting, lints, then the whole test suite
# (unit, model-check and end-to-end tests on the host emulation backend, plus the offline
# validation of PTX and AMDGPU images), a bounded run of every fuzz target, and a check that
# the run left the git tree as it found it.
set -euo pipefail
cd "$(dirname "$0")/.."
# What `git status` says before: every file a run writes must be ignored (.gitignore).
tree_before=$(git status --porcelain --untracked-files=all)
# How long each step took, printed at the end: CI's budget is kept by knowing where time goes.
steps=()
lap=$SECONDS
step_done() {
    steps+=("$1 $((SECONDS - lap))s")
    lap=$SECONDS
}
scripts/setup.sh
# A CI run builds everything once: incremental caches would only add gigabytes to its disk.
if [ "${CI:-}" = true ]; then
    export CARGO_INCREMENTAL=0
fi
# Every other workspace's lock file is current (the fixtures', the examples', the fuzz crates'):
# a stale one would otherwise fail only the step that builds it, late in the run.
git ls-files -z '*/Cargo.lock' | while IFS= read -r -d '' lock; do
    cargo +nightly metadata --locked --format-version 1 \
        --manifest-path "$(dirname "$lock")/Cargo.toml" >/dev/null ||
        { echo "error: $lock is not current: run \`cargo metadata\` in $(dirname "$lock")" >&2; exit 1; }
done
step_done setup
cargo fmt --all --check
# The fixtures, examples and fuzz crates are workspaces of their own, outside `cargo fmt --all`
# (many-tests is generated, one test per line, and stays that way).
git ls-files -z 'fixtures/*.rs' 'examples/*.rs' 'crates/*/fuzz/*.rs' 'harness/fuzz/*.rs' ':!fixtures/many-tests/*' |
    xargs -0 rustfmt --edition 2021 --check
cargo clippy --workspace --all-targets --locked -- -D warnings
step_done fmt+clippy
# Broken or private intra-doc links are warnings rustdoc alone reports.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
step_done rustdoc
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"
step_done tests
# The RPC stress test is `test = false` (too slow for a plain `cargo test`): run it here.
cargo test -p gpurun-rpc --test stress --locked 2>&1 | tee -a "$log"
step_done stress
# Warnings are errors here too (clippy above does not build this configuration).
# --nocapture: each model prints how many executions it explored.
RUSTFLAGS="--cfg loom -D warnings" CARGO_TARGET_DIR=target/loom cargo test -p gpurun-rpc --test loom --release --locked -- --nocapture 2>&1 | tee -a "$log"
step_done loom
# The GPU check script's table and verdicts against a fake runner (no GPU needed), and the
# GitHub action with its example workflow (actionlint, and the action's test step run for
# real): in the background, beside the fuzzing. They spend about half their time waiting (rows
# that hang on purpose, time limits), and the fuzzers run for a fixed time whatever CPU they
# get, so together they take about as long as the fuzzing alone.
checks_log=$(mktemp)
trap 'rm -f "$log" "$checks_log"' EXIT
(bash scripts/gpu-check.sh --self-test &&
    bash scripts/gpu-check.sh --self-test --target amdgcn &&
    bash scripts/check-action.sh) >"$checks_log" 2>&1 &
checks=$!
# Every cargo-fuzz target for 30 s, two at a time, from the corpus in the repository (a
# regression check on the corpus and a short search; longer runs: `scripts/fuzz.sh SECONDS`).
fuzz_status=0
bash scripts/fuzz.sh 30 || fuzz_status=$?
checks_status=0
wait "$checks" || checks_status=$?
cat "$checks_log"
if ((checks_status != 0)); then
    echo "error: the GPU check's self-tests or the action's checks failed (exit $checks_status)" >&2
    exit "$checks_status"
fi
if ((fuzz_status != 0)); then
    exit "$fuzz_status"
fi
step_done fuzz+gpu-check+action
# Every published crate from its packaged .crate alone, and its docs as docs.rs builds them
# (README, "Install").
bash scripts/package-check.sh
step_done package-check
echo "steps: ${steps[*]}; total $SECONDS s"
# One closing line over every test binary (cargo prints one summary per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i; if ($(i+1) ~ /^ignored;/) s += $i } }
     END { printf "total: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
# Nothing the run wrote may show in `git status` (a build directory .gitignore misses, a
# lock file a build rewrote, a corpus the fuzzer grew).
tree_after=$(git status --porcelain --untracked-files=all)
if [ "$tree_after" != "$tree_before" ]; then
    echo "error: the test run changed the git tree (ignore build outputs in .gitignore):" >&2
    diff <(echo "$tree_before") <(echo "$tree_after") >&2 || true
    exit 1
fi
