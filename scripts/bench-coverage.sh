#!/usr/bin/env bash
# What coverage costs: `cargo gpurun test --coverage` (instrumented host images, profiles merged,
# lcov and HTML written) against the same `cargo gpurun test` without it, on fixtures with
# kernels of every kind (warp operations, shared memory, launch shapes, concurrent slots),
# interleaved in one run, both warm (built once before timing).
#
#   scripts/bench-coverage.sh [RUNS]      (default 5; the binary is built with --release first)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/timing.sh
source scripts/lib/timing.sh
runs="${1:-5}"

cargo build --quiet --release -p cargo-gpurun
exe="$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/cargo-gpurun"
unset CARGO_TARGET_DIR
packages=(-p device-ops -p shared-memory -p launch-checks -p concurrency)
plain=("$exe" gpurun test --manifest-path fixtures/Cargo.toml --target host "${packages[@]}")
covered=("${plain[@]}" --coverage)

echo "warming up (both builds)..."
"${plain[@]}" >/dev/null 2>&1
"${covered[@]}" >/dev/null 2>&1
plain_times=() covered_times=()
for _ in $(seq "$runs"); do
    plain_times+=("$(elapsed_ms "${plain[@]}")")
    covered_times+=("$(elapsed_ms "${covered[@]}")")
done
plain_ms=$(median "${plain_times[@]}")
covered_ms=$(median "${covered_times[@]}")
echo "cargo gpurun test:            median ${plain_ms} ms ($runs runs: ${plain_times[*]})"
echo "cargo gpurun test --coverage: median ${covered_ms} ms ($runs runs: ${covered_times[*]})"
echo "ratio coverage/plain:         $(ratio "$covered_ms" "$plain_ms")x"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
