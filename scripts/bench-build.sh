#!/usr/bin/env bash
# No-op rebuild benchmark: a no-op `cargo gpurun build --target nvptx` of fixtures/hello against a
# no-op `cargo +nightly build` of the same crate with the same flags, measured in the same run.
# Goal (issue #2): under 1 s, and under 1.5x cargo's own no-op. Prints medians of RUNS runs each.
#
#   scripts/bench-build.sh [RUNS]      (default 10; the binary is built with --release first)
set -euo pipefail
cd "$(dirname "$0")/.."
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
cargo_build=(cargo "+$toolchain" build -Zbuild-std=core,alloc --target nvptx64-nvidia-cuda
  --manifest-path fixtures/Cargo.toml -p hello -q --message-format=json-render-diagnostics
  --config "target.nvptx64-nvidia-cuda.rustflags=[\"-Ctarget-cpu=sm_70\",\"-Clinker=$fixtures_target/gpurun/gpurun-nvptx-link\"]")

echo "warming up (a full build the first time)..."
"${gpurun_build[@]}" >/dev/null
"${cargo_build[@]}" >/dev/null

# Median wall time in milliseconds of running "$@" $runs times (alternated with nothing else).
median_ms() {
  local times=()
  for _ in $(seq "$runs"); do
    local start end
    start=$(date +%s%N)
    "$@" >/dev/null
    end=$(date +%s%N)
    times+=($(((end - start) / 1000000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

cargo_ms=$(median_ms "${cargo_build[@]}")
gpurun_ms=$(median_ms "${gpurun_build[@]}")
ratio=$(awk -v g="$gpurun_ms" -v c="$cargo_ms" 'BEGIN {printf "%.2f", g / c}')
echo "no-op cargo +$toolchain build:  ${cargo_ms} ms (median of $runs)"
echo "no-op cargo gpurun build:     ${gpurun_ms} ms (median of $runs)"
echo "ratio gpurun/cargo:           ${ratio}x"
if ((gpurun_ms < 1000)) && awk -v r="$ratio" 'BEGIN {exit !(r < 1.5)}'; then
  echo "goal met: under 1 s and under 1.5x cargo's no-op"
else
  echo "goal missed: want under 1 s and under 1.5x cargo's no-op"
fi
