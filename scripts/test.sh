#!/usr/bin/env bash
# The one command that runs every test: set-up, formatting, lints, then the whole test suite
# (unit, model-check, fuzz-smoke and end-to-end tests on the host emulation backend, plus the
# offline validation of PTX and AMDGPU images).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The GPU check script's table and verdicts, against a fake runner (no GPU needed).
bash scripts/gpu-check.sh --self-test
