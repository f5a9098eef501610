#!/usr/bin/env bash
# Builds the `parse_image` fuzz target and runs it for a bounded time (default 60 s), seeded
# with the real sample images from ../tests/data. Uses `cargo fuzz` when installed; otherwise
# passes the same sanitizer-coverage flags to cargo directly, so no global install is needed.
# Needs the nightly toolchain. Exit status: 0 = no crash found, non-zero = crash or build error.
#
#   crates/gpurun-image/fuzz/smoke.sh [SECONDS]
set -euo pipefail
seconds="${1:-60}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
host="$(rustc +nightly -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/target}"

corpus="$here/corpus/parse_image"
mkdir -p "$corpus" "$here/artifacts/parse_image"
for sample in ../tests/data/sample.ptx ../tests/data/sample.cubin ../tests/data/sample-gfx90a.elf \
    ../tests/data/sample-gfx1100.elf ../tests/data/libsample-host.so; do
    cp -f "$sample" "$corpus/"
done

if cargo +nightly fuzz --version >/dev/null 2>&1; then
    exec cargo +nightly fuzz run parse_image "$corpus" -- -max_total_time="$seconds" -max_len=65536
fi

echo "cargo-fuzz not installed: building with explicit sanitizer-coverage flags" >&2
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
    cargo +nightly build --release --target "$host" --bin parse_image
"$CARGO_TARGET_DIR/$host/release/parse_image" -max_total_time="$seconds" -max_len=65536 \
    -artifact_prefix="$here/artifacts/parse_image/" "$corpus"
