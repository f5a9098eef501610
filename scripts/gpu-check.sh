#!/usr/bin/env bash
# Runs every fixture on the CUDA backend of a machine with an NVIDIA GPU and prints one table
# (fixture, arguments, expected exit status, actual, time) for the issue note.
#
#   scripts/gpu-check.sh                      build cargo-gpurun and the fixtures here, then run
#   scripts/gpu-check.sh --make-bundle DIR    only build: DIR gets the binary, the images and
#                                             this script (copy DIR to a GPU machine)
#   scripts/gpu-check.sh --bundle DIR         run from a bundle; needs no Rust on that machine
#   scripts/gpu-check.sh --self-test          check this script's table and verdicts against a
#                                             fake runner (no GPU, no build)
#
# Options: --arch sm_NN (default: the first GPU's, from nvidia-smi, else sm_90).
# GPURUN_CHECK_RUNNER replaces the runner command (for testing this script without a GPU): it is
# called as `RUNNER IMAGE ARGS...` and its exit status is compared with the expectation.
# Exit status: 0 when every row matches, 1 otherwise, 2 on bad usage or a failed build.
set -uo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

bundle="" make_bundle="" arch="" self_test=""
while (($#)); do
    case "$1" in
        --bundle) bundle="${2:?--bundle needs a directory}"; shift 2 ;;
        --make-bundle) make_bundle="${2:?--make-bundle needs a directory}"; shift 2 ;;
        --arch) arch="${2:?--arch needs sm_NN}"; shift 2 ;;
        --self-test) self_test=1; shift ;;
        -h|--help) usage ;;
        *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
    esac
done

# Expected outcomes, as data: fixture | arguments | expected exit status (a number, or
# "nonzero"). Test images exit 0 when every test passes and 101 when one fails, as libtest.
CASES='
hello||0
alloc||0
args-env-exit|exit 3|3
args-env-exit|return 5|5
args-env-exit|abort|nonzero
panics||nonzero
basic||101
recovery|--test-timeout 5|101
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

# A fake bundle whose runner exits as each fixture should, except one row that must be
# flagged; the table must show both verdicts and the run must fail.
self_test() {
    local dir fixture table status
    dir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-self-test.XXXXXX")
    mkdir -p "$dir/images"
    for fixture in $(fixture_names); do : >"$dir/images/$fixture.ptx"; done
    cat >"$dir/fake-runner" <<'FAKE'
#!/usr/bin/env bash
case "$(basename "$1" .ptx) ${2:-} ${3:-}" in
    "hello  ") exit 0 ;;
    "args-env-exit exit 3") exit 3 ;;
    "args-env-exit return 5") exit 5 ;;
    "args-env-exit abort ") exit 134 ;;
    "panics  ") exit 1 ;;
    "basic  ") exit 101 ;;
    "recovery --test-timeout 5") exit 0 ;;   # wrong on purpose: expected 101
    *) exit 0 ;;
esac
FAKE
    chmod +x "$dir/fake-runner"
    table=$(GPURUN_CHECK_RUNNER="$dir/fake-runner" run_cases "$dir" 2>/dev/null)
    status=$?
    rm -rf "$dir"
    echo "gpu-check self-test against a fake runner (the recovery row mismatches on purpose):"
    echo "$table"
    [[ $status != 0 ]] || { echo "self-test: a mismatching row did not fail the run" >&2; return 1; }
    grep -Eq '^hello +- +0 +0 .* ok$' <<<"$table" || { echo "self-test: hello row wrong" >&2; return 1; }
    grep -Eq '^args-env-exit +abort +nonzero +134 .* ok$' <<<"$table" ||
        { echo "self-test: nonzero expectation not honoured" >&2; return 1; }
    grep -Eq '^recovery +--test-timeout 5 +101 +0 .* MISMATCH$' <<<"$table" ||
        { echo "self-test: mismatch not flagged" >&2; return 1; }
    [[ $(grep -c ' ok$' <<<"$table") == 8 ]] || { echo "self-test: expected 8 ok rows" >&2; return 1; }
    echo "self-test: ok" >&2
}

if [[ -n "$self_test" ]]; then
    self_test
    exit $?
fi
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
