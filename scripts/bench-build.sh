#!/usr/bin/env bash
# No-op rebuild benchmark: a no-op `cargo gpurun build --target nvptx` of fixtures/hello against a
# no-op `cargo +nightly build` of the same crate with the same flags, measured in the same run.
# Goal: under 1 s, and under 1.5x cargo's own no-op.
#
#   scripts/bench-build.sh [RUNS]      (default 10; the binary is built with --release first)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/timing.sh
source scripts/lib/timing.sh
runs="${1:-10}"
toolchain="${GPURUN_TOOLCHAIN:-nightly}"

cargo build --quiet --release -p cargo-gpurun
exe="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/cargo-gpurun"
# The fixtures build into fixtures/target whatever target dir this script was given.
unset CARGO_TARGET_DIR
fixtures_target="$PWD/fixtures/target"
gpurun_build=("$exe" gpurun build --manifest-path fixtures/Cargo.toml -p hello --target nvptx -q)
# Exactly the flags cargo gpurun passes, so both measure the same up-to-date build.
# shellcheck disable=SC2054 # `core,alloc` is one argument
cargo_build=(cargo "+$toolchain" build -Zbuild-std=core,alloc --target nvptx64-nvidia-cuda
  --manifest-path fixtures/Cargo.toml -p hello -q --message-format=json-render-diagnostics
  --config "target.nvptx64-nvidia-cuda.rustflags=[\"-Ctarget-cpu=sm_70\",\"-Clinker=$fixtures_target/gpurun/gpurun-nvptx-link\"]")

echo "warming up (a full build the first time)..."
"${gpurun_build[@]}" >/dev/null
"${cargo_build[@]}" >/dev/null

# Runs are interleaved (cargo, gpurun, cargo, ...) so that load from other processes on the
# machine hits both alike. Reports the median and the minimum of each (the minimum is the least
# disturbed by other load).
cargo_times=()
gpurun_times=()
for _ in $(seq "$runs"); do
  cargo_times+=("$(elapsed_ms "${cargo_build[@]}")")
  gpurun_times+=("$(elapsed_ms "${gpurun_build[@]}")")
done

cargo_ms=$(median "${cargo_times[@]}")
gpurun_ms=$(median "${gpurun_times[@]}")
cargo_min=$(minimum "${cargo_times[@]}")
gpurun_min=$(minimum "${gpurun_times[@]}")
echo "no-op cargo +$toolchain build:  median ${cargo_ms} ms, min ${cargo_min} ms ($runs runs)"
echo "no-op cargo gpurun build:     median ${gpurun_ms} ms, min ${gpurun_min} ms ($runs runs)"
echo "ratio gpurun/cargo:           median $(ratio "$gpurun_ms" "$cargo_ms")x, min $(ratio "$gpurun_min" "$cargo_min")x"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if ((gpurun_ms < 1000)) && awk -v r="$(ratio "$gpurun_ms" "$cargo_ms")" 'BEGIN {exit !(r < 1.5)}'; then
  echo "goal met (medians): under 1 s and under 1.5x cargo's no-op"
else
  echo "goal missed (medians): want under 1 s and under 1.5x cargo's no-op"
fi
