#!/usr/bin/env bash
# The one command that runs every test: set-up, formatting, lints, then the whole test suite
# (unit, model-check, fuzz-smoke and end-to-end tests on the host emulation backend, plus the
# offline validation of PTX and AMDGPU images).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all --check
# The fixtures and examples are workspaces of their own, outside `cargo fmt --all` (many-tests
# is generated, one test per line, and stays that way).
git ls-files -z 'fixtures/*.rs' 'examples/*.rs' ':!fixtures/many-tests/*' |
    xargs -0 rustfmt --edition 2021 --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Broken or private intra-doc links are warnings rustdoc alone reports.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked 2>&1 | tee "$log"
# Warnings are errors here too (clippy above does not build this configuration).
# --nocapture: each model prints how many executions it explored.
RUSTFLAGS="--cfg loom -D warnings" CARGO_TARGET_DIR=target/loom cargo test -p gpurun-rpc --test loom --release --locked -- --nocapture 2>&1 | tee -a "$log"
# The GPU check script's table and verdicts, against a fake runner (no GPU needed).
bash scripts/gpu-check.sh --self-test
# The GitHub action and its example workflow: actionlint, and the action's test step run for real.
bash scripts/check-action.sh
# One closing line over every test binary (cargo prints one summary per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i; if ($(i+1) ~ /^ignored;/) s += $i } }
     END { printf "total: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
