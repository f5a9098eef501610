#!/usr/bin/env bash
# Rebuild benchmark for float asserts: how long `cargo gpurun build --target nvptx --arch sm_90`
# (a debug build, as `cargo gpurun test` makes) takes after a one-line change to a device crate
# whose tests `assert_eq!` on `f32`s, against the same crate asserting on `u32`s, measured in the
# same run; and ptxas alone on the float crate's PTX at both optimizations, the fast one being
# what debug builds use. Goal: the float crate rebuilds in under 30 s.
#
#   scripts/bench-float-build.sh [RUNS]      (default 3; the binary is built with --release first)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/timing.sh
source scripts/lib/timing.sh
root=$PWD
runs="${1:-3}"
arch=sm_90

cargo build --quiet --release -p cargo-gpurun
exe="$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/cargo-gpurun"
ptxas=$("$exe" gpurun doctor 2>/dev/null | awk '$1 == "ptxas" && $2 == "ok" { print $3 }')
[[ -x "${ptxas:-}" ]] || { echo "bench-float-build: ptxas not found (scripts/setup.sh installs it)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/gpurun-float-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/Cargo.toml" <<'EOF'
[workspace]
resolver = "2"
members = ["floats", "integers"]

[profile.dev]
panic = "abort"
EOF
# Three tests of the shape numeric kernels' tests have: compute, then assert on the result.
make_crate() {
    local name="$1" ty="$2" one="$3" two="$4"
    mkdir -p "$work/$name/src"
    cat >"$work/$name/Cargo.toml" <<EOF
[package]
name = "$name"
edition = "2021"
version = "0.0.0"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
gpurun = { path = "$root/crates/gpurun" }

[package.metadata.gpurun]
EOF
    cat >"$work/$name/src/lib.rs" <<EOF
#![no_std]
use core::hint::black_box;

#[gpurun::test]
fn sums() {
    assert_eq!(black_box($one) + black_box($one), $two);
}

#[gpurun::test]
fn products() {
    assert_eq!(black_box($one) * black_box($two), $two * $one, "thread {:?}", gpurun::thread_idx());
}

#[gpurun::test]
fn ordered() {
    let values: [$ty; 2] = [black_box($one), black_box($two)];
    assert!(values[0] < values[1], "{values:?}");
}
EOF
}
make_crate floats f32 1.5f32 3.0f32
make_crate integers u32 1u32 2u32

build() { "$exe" gpurun build --manifest-path "$work/Cargo.toml" -p "$1" --target nvptx --arch "$arch" -q; }
echo "warming up (core and alloc for nvptx, both crates once)..."
build floats >/dev/null
build integers >/dev/null

# Interleaved, so that other load on the machine hits both alike.
float_times=() integer_times=()
for run in $(seq "$runs"); do
    for name in floats integers; do
        echo "// one-line change $run" >>"$work/$name/src/lib.rs"
        if [[ "$name" == floats ]]; then
            float_times+=("$(elapsed_ms build floats)")
        else
            integer_times+=("$(elapsed_ms build integers)")
        fi
    done
done

ptx="$work/target/nvptx64-nvidia-cuda/debug/floats.ptx"
full_ms=$(elapsed_ms "$ptxas" "-arch=$arch" -o "$work/full.cubin" "$ptx" 2>/dev/null)
fast_ms=$(elapsed_ms "$ptxas" "-arch=$arch" --Ofast-compile=max -o "$work/fast.cubin" "$ptx" 2>/dev/null)

float_ms=$(median "${float_times[@]}")
integer_ms=$(median "${integer_times[@]}")
echo "PTX of the float crate: $(wc -c <"$ptx") bytes; of the integer crate: $(wc -c <"${ptx/floats/integers}") bytes"
echo "rebuild after a one-line change, f32 asserts: median ${float_ms} ms ($runs runs)"
echo "rebuild after a one-line change, u32 asserts: median ${integer_ms} ms ($runs runs)"
echo "ratio f32/u32:                                ${float_ms} / ${integer_ms} = $(ratio "$float_ms" "$integer_ms")x"
echo "ptxas on the float crate's PTX ($arch): -O3 ${full_ms} ms, --Ofast-compile=max ${fast_ms} ms ($(ratio "$full_ms" "$fast_ms")x faster)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if ((float_ms < 30000)); then
    echo "goal met: the f32 crate rebuilds in under 30 s"
else
    echo "goal missed: the f32 crate took over 30 s to rebuild"
fi
