#!/usr/bin/env bash
# Runs every fixture on the CUDA backend of a machine with an NVIDIA GPU and prints one table
# (fixture, arguments, expected exit status, actual, time) for the issue note.
#
#   scripts/gpu-check.sh                      build cargo-gpurun and the fixtures here, then run
#   scripts/gpu-check.sh --make-bundle DIR    only build: DIR gets the binary, the images and
#                                             this script (copy DIR to a GPU machine)
#   scripts/gpu-check.sh --bundle DIR         run from a bundle; needs no Rust on that machine
#
# Options: --arch sm_NN (default: the first GPU's, from nvidia-smi, else sm_90).
# GPURUN_CHECK_RUNNER replaces the runner command (for testing this script without a GPU): it is
# called as `RUNNER IMAGE ARGS...` and its exit status is compared with the expectation.
# Exit status: 0 when every row matches, 1 otherwise, 2 on bad usage or a failed build.
set -uo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

bundle="" make_bundle="" arch=""
while (($#)); do
    case "$1" in
        --bundle) bundle="${2:?--bundle needs a directory}"; shift 2 ;;
        --make-bundle) make_bundle="${2:?--make-bundle needs a directory}"; shift 2 ;;
        --arch) arch="${2:?--arch needs sm_NN}"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
    esac
done

# Expected outcomes, as data: fixture | arguments | expected exit status (a number, or
# "nonzero"). Test images exit 0 when every test passes and 101 when one fails, as libtest.
CASES='
hello||42
alloc||0
args-env-exit|exit 3|3
args-env-exit|return 5|5
args-env-exit|abort|nonzero
panics||nonzero
basic||101
recovery||101
many-tests||0
'

detect_arch() {
    local cc
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
    if [[ "$cc" =~ ^[0-9]+$ ]]; then echo "sm_$cc"; else echo "sm_90"; fi
}

build_bundle() {
    local dir="$1" root fixture json path cubin
    root="$(cd "$(dirname "$0")/.." && pwd)"
    [[ -n "$arch" ]] || arch=$(detect_arch)
    mkdir -p "$dir/images" || exit 2
    echo "gpu-check: building cargo-gpurun (release)" >&2
    (cd "$root" && cargo build --release --locked -p cargo-gpurun) >&2 || exit 2
    local target_dir
    target_dir=$(cd "$root" && cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])') || exit 2
    cp "$target_dir/release/cargo-gpurun" "$dir/" || exit 2
    for fixture in $(fixture_names); do
        echo "gpu-check: building fixture $fixture for $arch" >&2
        json=$("$dir/cargo-gpurun" gpurun build --manifest-path "$root/fixtures/Cargo.toml" \
            -p "$fixture" --target nvptx64-nvidia-cuda --arch "$arch" --release \
            --message-format json) || exit 2
        path=$(python3 -c 'import json,sys
for line in sys.stdin:
    v = json.loads(line)
    if v.get("reason") == "gpurun-image": print(v["path"]); break' <<<"$json")
        cubin=$(python3 -c 'import json,sys
for line in sys.stdin:
    v = json.loads(line)
    if v.get("reason") == "gpurun-image" and v.get("cubin"): print(v["cubin"]); break' <<<"$json")
        [[ -n "$path" ]] || { echo "gpu-check: no image reported for $fixture" >&2; exit 2; }
        cp "$path" "$dir/images/$fixture.ptx" || exit 2
        [[ -z "$cubin" ]] || cp "$cubin" "$dir/images/$fixture.cubin" || exit 2
    done
    cp "$0" "$dir/gpu-check.sh"
}

fixture_names() {
    awk -F'|' 'NF >= 3 { print $1 }' <<<"$CASES" | sort -u
}

# One table row per case; the exit status says whether all matched.
run_cases() {
    local dir="$1" fixture args expected image start end got ms verdict failures=0
    local -a runner
    if [[ -n "${GPURUN_CHECK_RUNNER:-}" ]]; then
        read -r -a runner <<<"$GPURUN_CHECK_RUNNER"
    else
        runner=("$dir/cargo-gpurun" gpurun run --backend cuda)
    fi
    printf '%-14s %-10s %-9s %-5s %10s  %s\n' fixture args expected got time result
    while IFS='|' read -r fixture args expected; do
        [[ -n "$fixture" ]] || continue
        image="$dir/images/$fixture.ptx"
        if [[ ! -e "$image" ]]; then
            printf '%-14s %-10s %-9s %-5s %10s  %s\n' "$fixture" "${args:--}" "$expected" - - \
                "MISSING IMAGE"
            failures=$((failures + 1))
            continue
        fi
        start=$(date +%s%N)
        # shellcheck disable=SC2086 # the arguments column is split on spaces on purpose
        "${runner[@]}" "$image" $args >"$dir/$fixture.${args// /_}.log" 2>&1 </dev/null
        got=$?
        end=$(date +%s%N)
        ms=$(((end - start) / 1000000))
        if [[ "$expected" == nonzero && "$got" != 0 ]] || [[ "$got" == "$expected" ]]; then
            verdict=ok
        else
            verdict=MISMATCH
            failures=$((failures + 1))
        fi
        printf '%-14s %-10s %-9s %-5s %8sms  %s\n' "$fixture" "${args:--}" "$expected" "$got" \
            "$ms" "$verdict"
        if [[ "$fixture" == many-tests && "$verdict" == ok ]]; then
            # 1000 tests: the whole run in ms is the cost per test in us.
            echo "  many-tests: ${ms}us per test, process start and load included" >&2
        fi
    done <<<"$CASES"
    echo "logs: $dir/*.log"
    ((failures == 0))
}

if [[ -n "$make_bundle" ]]; then
    build_bundle "$make_bundle"
    echo "gpu-check: bundle ready in $make_bundle (run: $make_bundle/gpu-check.sh --bundle $make_bundle)" >&2
    exit 0
fi
if [[ -z "$bundle" ]]; then
    bundle=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
    build_bundle "$bundle"
fi
if [[ -z "${GPURUN_CHECK_RUNNER:-}" && ! -x "$bundle/cargo-gpurun" ]]; then
    echo "gpu-check: $bundle/cargo-gpurun is missing (make one with --make-bundle)" >&2
    exit 2
fi
if run_cases "$bundle"; then exit 0; else exit 1; fi
