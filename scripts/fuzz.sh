#!/usr/bin/env bash
# Runs every cargo-fuzz target of the project for a bounded time (default 60 s each, two at a
# time), starting from the corpus kept in the repository (crates/*/fuzz/corpus/TARGET, harness/fuzz/corpus/TARGET). That
# corpus is only read: inputs a run finds go to target/fuzz/corpus/TARGET, so a run leaves the
# tree as it was. A crash fails the script; libFuzzer saves the input under
# <crate>/fuzz/artifacts/TARGET/ (ignored by git): fix the bug, then copy the input into the
# target's corpus so every later run replays it.
#
#   scripts/fuzz.sh [SECONDS]    run every target (scripts/test.sh runs it)
#   scripts/fuzz.sh --merge      fold what earlier runs found into the repository's corpus,
#                                keeping only inputs that add coverage (libFuzzer's -merge=1)
#
# Needs the nightly toolchain and cargo-fuzz (scripts/setup.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

# fuzz directory, target, longest input, and seed directories read besides the corpus.
targets=(
    "crates/gpurun-image/fuzz parse_image 65536 crates/gpurun-image/tests/data"
    "crates/gpurun-rpc/fuzz server 4096"
    "crates/gpurun-runner/fuzz frames 4096"
    "harness/fuzz command_line 1024"
)

mode=run
seconds=60
case "${1:-}" in
--merge) mode=merge ;;
'') ;;
*[!0-9]* | 0)
    echo "usage: scripts/fuzz.sh [SECONDS] | --merge" >&2
    exit 2
    ;;
*) seconds=$1 ;;
esac

# One build directory for every target: they share their dependencies (libFuzzer itself, which
# takes a while to compile, and the project's crates) and are all built with the same flags.
build_dir="$root/target/fuzz"
found_dir="$build_dir/corpus"
logs="$build_dir/logs"
mkdir -p "$found_dir" "$logs"

# Release builds with debug assertions (overflow checks included); `run` must get the same
# flags as `build` (-a) or it builds again.
for line in "${targets[@]}"; do
    read -r dir target _ <<<"$line"
    echo "fuzz: building $target ($dir)" >&2
    # cargo-fuzz has no --locked: scripts/test.sh checks every lock file before it runs this.
    cargo +nightly fuzz build -a --fuzz-dir "$dir" --target-dir "$build_dir" "$target"
done

run_one() {
    local dir=$1 target=$2 max_len=$3 seeds=${4:-}
    local corpus="$dir/corpus/$target" found="$found_dir/$target"
    mkdir -p "$corpus" "$found" "$dir/artifacts/$target"
    local inputs=("$found" "$corpus")
    [ -n "$seeds" ] && inputs+=("$seeds")
    if [ "$mode" = merge ]; then
        # Into the repository's corpus: what the found inputs add to it.
        cargo +nightly fuzz run -a --fuzz-dir "$dir" --target-dir "$build_dir" "$target" \
            "$corpus" "$found" -- -merge=1 -max_len="$max_len"
        return
    fi
    # New inputs go to the first directory (ours, under target/), never to the repository.
    cargo +nightly fuzz run -a --fuzz-dir "$dir" --target-dir "$build_dir" "$target" \
        "${inputs[@]}" -- -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1
}

if [ "$mode" = merge ]; then
    for line in "${targets[@]}"; do
        # shellcheck disable=SC2086  # the fields are words
        run_one $line
    done
    exit 0
fi

# Two at a time (CI has two cores); each keeps its log, shown in full when it fails.
failed=()
pids=()
names=()
wait_for_one() {
    local index
    wait -n "${pids[@]}" || true
    for index in "${!pids[@]}"; do
        if ! kill -0 "${pids[$index]}" 2>/dev/null; then
            local name=${names[$index]}
            if wait "${pids[$index]}"; then
                echo "fuzz: $name: no crash in ${seconds}s ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$logs/$name.log" | grep -o '[0-9]*$' || echo '?') inputs)"
            else
                echo "fuzz: $name FAILED; its log:" >&2
                cat "$logs/$name.log" >&2
                failed+=("$name")
            fi
            unset "pids[$index]" "names[$index]"
            pids=("${pids[@]}")
            names=("${names[@]}")
            return
        fi
    done
}
for line in "${targets[@]}"; do
    read -r _ target _ <<<"$line"
    # shellcheck disable=SC2086  # the fields are words
    run_one $line >"$logs/$target.log" 2>&1 &
    pids+=($!)
    names+=("$target")
    if [ "${#pids[@]}" -ge 2 ]; then
        wait_for_one
    fi
done
while [ "${#pids[@]}" -gt 0 ]; do
    wait_for_one
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: crashes in: ${failed[*]} (inputs under crates/*/fuzz/artifacts/ and harness/fuzz/artifacts/)" >&2
    exit 1
fi
