#!/usr/bin/env bash
# Runs every fixture on the CUDA backend of a machine with an NVIDIA GPU (or, with --target amdgcn,
# on the HSA backend of one with an AMD GPU) and prints one table
# (fixture, launch options, arguments, expected exit status, actual, time, measurement, verdict)
# for the issue note; the measurements are the per-test overhead of the 1000-test fixture and
# device print throughput in MB/s from 1 and from 1024 threads.
#
#   scripts/gpu-check.sh                      build cargo-gpurun and the fixtures here, then run
#   scripts/gpu-check.sh --make-bundle DIR    only build: DIR gets the binary, the images and
#                                             this script (copy DIR to a GPU machine)
#   scripts/gpu-check.sh --bundle DIR         run from a bundle; needs no Rust on that machine
#   scripts/gpu-check.sh --self-test          check this script's table and verdicts against a
#                                             fake runner (no GPU, no build)
#
# Options: --target nvptx|amdgcn (default nvptx: CUDA; amdgcn: HSA, images are code objects),
# --arch sm_NN or gfxNNN (default: the first GPU's, from nvidia-smi or rocminfo; else sm_90
# for nvptx).
# Rows check more than exit statuses: basic's failing assert must be reported with its message
# (no --stack-size is passed, so this checks the default stack fits the panic path) and exactly
# its 4 failing tests fail (on AMD this covers block_dim()); big-block runs a 1024-thread block;
# fault-mid-print's fault, in the middle of a 1 MiB print, must fail its test as a fault well
# before the 60 s test timeout.
# GPURUN_CHECK_RUNNER replaces the runner command (for testing this script without a GPU): it is
# called as `RUNNER [LAUNCH OPTIONS] IMAGE ARGS...` and its exit status is compared with the
# expectation.
# Exit status: 0 when every row matches, 1 otherwise, 2 on bad usage or a failed build.
set -uo pipefail

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

bundle="" make_bundle="" arch="" self_test="" target=nvptx
while (($#)); do
    case "$1" in
        --target) target="${2:?--target needs nvptx or amdgcn}"; shift 2 ;;
        --bundle) bundle="${2:?--bundle needs a directory}"; shift 2 ;;
        --make-bundle) make_bundle="${2:?--make-bundle needs a directory}"; shift 2 ;;
        --arch) arch="${2:?--arch needs sm_NN}"; shift 2 ;;
        --self-test) self_test=1; shift ;;
        -h|--help) usage ;;
        *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
    esac
done
case "$target" in
    nvptx|nvptx64-nvidia-cuda) target=nvptx triple=nvptx64-nvidia-cuda ext=ptx backend=cuda ;;
    amdgcn|amdgcn-amd-amdhsa) target=amdgcn triple=amdgcn-amd-amdhsa ext=elf backend=hsa ;;
    *) echo "gpu-check: unknown target '$target' (nvptx or amdgcn)" >&2; usage ;;
esac

# Expected outcomes, as data: fixture | launch options (runner flags before the image) |
# arguments (after the image) | expected exit status (a number, or "nonzero"). Test images exit
# 0 when every test passes and 101 when one fails, as libtest. Two rows also measure: many-tests
# (wall time per test) and print-throughput (MB/s; its --bytes 0 rows are the start-up time
# that the printing rows' MB/s is also shown without). Their output is checked, not only the
# exit status. 1024 threads run as 4 blocks of 256: print-throughput's `_start` needs 72
# registers per thread (ptxas, sm_90), too many for 1024 threads in one block (64K registers).
CASES='
hello|||0
alloc|||0
args-env-exit||exit 3|3
args-env-exit||return 5|5
args-env-exit||abort|nonzero
panics|||nonzero
basic|||101
big-block|||0
fault-mid-print||--test-timeout 60|101
recovery||--test-timeout 5|101
many-tests|||0
concurrency||--test-threads 8|0
concurrency||--test-threads 11 --include-ignored|101
print-throughput||--bytes 0|0
print-throughput||--bytes 8388608|0
print-throughput|--threads 256 --blocks 4|--bytes 0|0
print-throughput|--threads 256 --blocks 4|--bytes 33554432|0
'
# Rows only `--target amdgcn` runs (what the HSA path promises and only an AMD GPU can show):
# launch-checks' panic deep in a call stack must come back with its message under the default
# stack (dynamic-stack kernels get 16 KiB beyond their static frames), its launches of ten
# shapes in one module must each see their own block and grid dims (read from each dispatch
# packet), and 64 rounds of barriers between the wavefronts of 256-thread blocks must order
# their memory (a workgroup-scope barrier on gfx9).
AMDGCN_CASES='
launch-checks||deep_panic|0
launch-checks||dims_ --test-threads 1|0
launch-checks||barrier_heavy|0
'
[[ "$target" != amdgcn ]] || CASES+="$AMDGCN_CASES"
# The print-throughput fixture's line size (its default).
PRINT_LINE_BYTES=64

detect_arch() {
    local cc gfx
    if [[ "$target" == amdgcn ]]; then
        gfx=$(rocminfo 2>/dev/null | grep -o 'gfx[0-9a-f]*' | head -n1)
        [[ -n "$gfx" ]] || { echo "gpu-check: no AMD GPU found by rocminfo; pass --arch gfxNNN" >&2; exit 2; }
        echo "$gfx"
        return
    fi
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
            -p "$fixture" --target "$triple" --arch "$arch" --release \
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
        cp "$path" "$dir/images/$fixture.$ext" || exit 2
        [[ -z "$cubin" ]] || cp "$cubin" "$dir/images/$fixture.cubin" || exit 2
    done
    cp "$0" "$dir/gpu-check.sh"
    echo "$target" >"$dir/target"
}

fixture_names() {
    awk -F'|' 'NF >= 4 { print $1 }' <<<"$CASES" | sort -u
}

# Checks that FILE is exactly what print-throughput prints for `--bytes BYTES` on THREADS
# threads: BYTES bytes of PRINT_LINE_BYTES-byte lines `t<6 digits> n<10 digits> <dots>`, every
# line number below BYTES / PRINT_LINE_BYTES once, line n from thread n % THREADS. Says what is
# wrong on stdout and fails otherwise.
check_print_output() {
    local file="$1" bytes="$2" threads="$3" size
    size=$(wc -c <"$file") || return 1
    if [[ "$size" != "$bytes" ]]; then
        echo "$size bytes, not $bytes"
        return 1
    fi
    awk -v threads="$threads" -v count=$((bytes / PRINT_LINE_BYTES)) \
        -v width=$((PRINT_LINE_BYTES - 1)) '
        length($0) != width || substr($0, 1, 1) != "t" || substr($0, 2, 6) !~ /^[0-9]+$/ ||
            substr($0, 8, 2) != " n" || substr($0, 10, 10) !~ /^[0-9]+$/ ||
            substr($0, 20, 1) != " " || substr($0, 21) !~ /^\.*$/ {
            print "malformed line " NR; bad = 1; exit
        }
        {
            thread = substr($0, 2, 6) + 0; number = substr($0, 10, 10) + 0
            if (number >= count) { print "line number " number " out of range"; bad = 1; exit }
            if (number in seen) { print "line " number " arrived twice"; bad = 1; exit }
            if (thread != number % threads) { print "line " number " from thread " thread; bad = 1; exit }
            seen[number] = 1
        }
        END {
            if (bad) exit 1
            if (NR != count) { print NR " lines, not " count; exit 1 }
        }' "$file"
}

# The names of the tests libtest output in FILE reports as failed, sorted, one a line
# (`test NAME ... FAILED`, or `test NAME - should panic ... FAILED`).
failed_tests() {
    sed -n 's/^test \(.*\) \.\.\. FAILED$/\1/p' "$1" | sed 's/ - should panic$//' | sort
}

# basic's 4 failures are on purpose; any other (block_dim() on AMD, a lost panic report) is
# wrong, and the failed assert's message must have come back. Says what is wrong.
check_basic_output() {
    local file="$1" failed
    failed=$(failed_tests "$file" | tr '\n' ' ')
    if [[ "$failed" != "fails_with_assert one_thread_panics should_panic_but_returns should_panic_expected_differs " ]]; then
        echo "failed: ${failed:-none}"
        return 1
    fi
    grep -q 'arithmetic is broken' "$file" || { echo "no assert message"; return 1; }
}

# fault-mid-print: the faulting test fails with a fault, not a timeout; the other passes.
check_fault_output() {
    local file="$1" failed
    failed=$(failed_tests "$file" | tr '\n' ' ')
    [[ "$failed" == "b_faults_during_a_long_print " ]] || { echo "failed: ${failed:-none}"; return 1; }
    ! grep -q 'timed out' "$file" || { echo "reported as a timeout"; return 1; }
    grep -qi 'fault' "$file" || { echo "no fault reported"; return 1; }
}

# The value after FLAG in the words of TEXT (empty when absent).
flag_value() {
    local flag="$1" previous="" word
    for word in $2; do
        if [[ "$previous" == "$flag" ]]; then
            echo "$word"
            return
        fi
        previous="$word"
    done
}

# Runs every case, then prints one table whose column widths fit its content; the exit status
# says whether every row matched.
run_cases() {
    local dir="$1" fixture launch args expected image log start end got ms verdict measured
    local failures=0 threads blocks bytes tests problem start_up
    local -a runner rows=() widths=()
    local -A start_up_ms=()
    if [[ -n "${GPURUN_CHECK_RUNNER:-}" ]]; then
        read -r -a runner <<<"$GPURUN_CHECK_RUNNER"
    else
        runner=("$dir/cargo-gpurun" gpurun run --backend "$backend")
    fi
    rows+=("fixture|launch|args|expected|got|time|measured|result")
    while IFS='|' read -r fixture launch args expected; do
        [[ -n "$fixture" ]] || continue
        image="$dir/images/$fixture.$ext"
        if [[ ! -e "$image" ]]; then
            rows+=("$fixture|${launch:--}|${args:--}|$expected|-|-|-|MISSING IMAGE")
            failures=$((failures + 1))
            continue
        fi
        log="$dir/$fixture.${launch// /_}.${args// /_}"
        echo "gpu-check: $fixture ${launch:+$launch }${args}" >&2
        start=$(date +%s%N)
        # shellcheck disable=SC2086 # the launch and arguments columns are split on spaces on purpose
        "${runner[@]}" $launch "$image" $args >"$log.out" 2>"$log.err" </dev/null
        got=$?
        end=$(date +%s%N)
        ms=$(((end - start) / 1000000))
        measured=-
        if [[ "$expected" == nonzero && "$got" != 0 ]] || [[ "$got" == "$expected" ]]; then
            verdict=ok
        else
            verdict=MISMATCH
        fi
        if [[ "$verdict" == ok && "$fixture" == basic ]]; then
            problem=$(check_basic_output "$log.out") || verdict="BAD OUTPUT ($problem)"
        elif [[ "$verdict" == ok && "$fixture" == fault-mid-print ]]; then
            if ! problem=$(check_fault_output "$log.out"); then
                verdict="BAD OUTPUT ($problem)"
            elif ((ms >= 60000)); then
                verdict="TOO SLOW (the fault was not seen before the timeout)"
            fi
        elif [[ "$verdict" == ok && "$fixture" == many-tests ]]; then
            # libtest's summary line: the tests that ran are the passed and the failed ones.
            tests=$(awk '/^test result:/ { for (i = 1; i < NF; i++) {
                    if ($(i + 1) ~ /^passed;/) p = $i; if ($(i + 1) ~ /^failed;/) f = $i }
                    n = p + f } END { if (n > 0) print n }' "$log.out")
            if [[ -n "$tests" ]]; then
                measured=$(awk -v ms="$ms" -v n="$tests" 'BEGIN { printf "%.3f ms/test (%d tests)", ms / n, n }')
            else
                verdict="BAD OUTPUT (no test result line)"
            fi
        elif [[ "$verdict" == ok && "$fixture" == print-throughput ]]; then
            threads=$(flag_value --threads "$launch")
            blocks=$(flag_value --blocks "$launch")
            threads=$((${threads:-1} * ${blocks:-1}))
            bytes=$(flag_value --bytes "$args")
            if ! problem=$(check_print_output "$log.out" "$bytes" "$threads"); then
                verdict="BAD OUTPUT ($problem)"
            elif ((bytes == 0)); then
                start_up_ms[$threads]=$ms
                measured="start-up"
            else
                start_up=${start_up_ms[$threads]:-}
                measured=$(awk -v bytes="$bytes" -v ms="$ms" -v start_up="$start_up" 'BEGIN {
                    printf "%.3f MB/s", bytes / ms / 1000
                    if (start_up != "" && ms > start_up)
                        printf " (%.3f without start-up)", bytes / (ms - start_up) / 1000 }')
            fi
        fi
        [[ "$verdict" == ok ]] || failures=$((failures + 1))
        rows+=("$fixture|${launch:--}|${args:--}|$expected|$got|${ms}ms|$measured|$verdict")
    done <<<"$CASES"
    print_table "${rows[@]}"
    echo "MB = 10^6 bytes; times are wall time, process start and module load included"
    echo "logs: $dir/*.out, $dir/*.err"
    ((failures == 0))
}

# Prints rows of `|`-separated cells as columns as wide as their widest cell (the time column
# right-aligned, the last column unpadded).
print_table() {
    local row column line
    local -a cells widths=()
    for row in "$@"; do
        IFS='|' read -r -a cells <<<"$row"
        for column in "${!cells[@]}"; do
            ((${#cells[column]} <= ${widths[column]:-0})) || widths[column]=${#cells[column]}
        done
    done
    for row in "$@"; do
        IFS='|' read -r -a cells <<<"$row"
        line=""
        for column in "${!cells[@]}"; do
            if ((column == ${#cells[@]} - 1)); then
                line+="${cells[column]}"
            elif ((column == 5)); then
                line+=$(printf '%*s  ' "${widths[column]}" "${cells[column]}")
            else
                line+=$(printf '%-*s  ' "${widths[column]}" "${cells[column]}")
            fi
        done
        echo "$line"
    done
}

# A fake bundle whose runner exits as each fixture should and prints what the measured rows
# need, except one row that must be flagged; the table must show both verdicts, line up, and
# the run must fail. Then the print-output check must reject broken output.
self_test() {
    local dir fixture table status
    dir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-self-test.XXXXXX")
    mkdir -p "$dir/images"
    for fixture in $(fixture_names); do : >"$dir/images/$fixture.$ext"; done
    cat >"$dir/fake-runner" <<'FAKE'
#!/usr/bin/env bash
threads=1 blocks=1
while (($#)) && [[ "$1" != *.ptx && "$1" != *.elf ]]; do
    [[ "$1" != --threads ]] || threads="$2"
    [[ "$1" != --blocks ]] || blocks="$2"
    shift
done
threads=$((threads * blocks))
case "$(basename "$(basename "$1" .ptx)" .elf) ${2:-} ${3:-}" in
    "hello  ") exit 0 ;;
    "big-block  ") exit 0 ;;
    "fault-mid-print --test-timeout 60")
        printf 'test a_passes_before ... ok\ntest b_faults_during_a_long_print ... FAILED\n'
        printf 'note: device fault: CUDA_ERROR_ILLEGAL_ADDRESS\n'
        exit 101 ;;
    "args-env-exit exit 3") exit 3 ;;
    "args-env-exit return 5") exit 5 ;;
    "args-env-exit abort ") exit 134 ;;
    "panics  ") exit 1 ;;
    "basic  ")
        for name in passes fails_with_assert should_panic_expected_differs should_panic_but_returns \
            one_thread_panics grid_ids_are_in_range; do
            case "$name" in
                fails_with_assert|one_thread_panics) echo "test $name ... FAILED" ;;
                should_panic_*) echo "test $name - should panic ... FAILED" ;;
                *) echo "test $name ... ok" ;;
            esac
        done
        echo "assertion \`left == right\` failed: arithmetic is broken"
        exit 101 ;;
    "recovery --test-timeout 5") exit 0 ;;   # wrong on purpose: expected 101
    "concurrency --test-threads 11") exit 101 ;;
    "many-tests  ")
        echo "test result: ok. 1000 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.50s"
        exit 0 ;;
    "print-throughput --bytes "*)
        awk -v lines=$(($3 / 64)) -v threads="$threads" 'BEGIN {
            for (n = 0; n < lines; n++) printf "t%06d n%010d %s\n", n % threads, n,
                "..........................................." }'
        exit 0 ;;
    *) exit 0 ;;
esac
FAKE
    chmod +x "$dir/fake-runner"
    table=$(GPURUN_CHECK_RUNNER="$dir/fake-runner" run_cases "$dir" 2>/dev/null)
    status=$?
    echo "gpu-check self-test against a fake runner (the recovery row mismatches on purpose):"
    echo "$table"
    self_test_checks "$dir" "$table" "$status"
    status=$?
    rm -rf "$dir"
    ((status == 0)) && echo "self-test: ok" >&2
    return "$status"
}

# The self-test's verdicts on TABLE (and the exit STATUS of the run that printed it); DIR has
# the fake runner. Says what is wrong and fails at the first problem.
self_test_checks() {
    local dir="$1" table="$2" status="$3" rows name offset file
    fail() { echo "self-test: $1" >&2; return 1; }
    [[ $status != 0 ]] || { fail "a mismatching row did not fail the run"; return; }
    grep -Eq '^hello +- +- +0 +0 .* ok$' <<<"$table" || { fail "hello row wrong"; return; }
    grep -Eq '^args-env-exit +- +abort +nonzero +134 .* ok$' <<<"$table" ||
        { fail "nonzero expectation not honoured"; return; }
    grep -Eq '^recovery +- +--test-timeout 5 +101 +0 .* MISMATCH$' <<<"$table" ||
        { fail "mismatch not flagged"; return; }
    grep -Eq '^many-tests +- +- +0 +0 +[0-9]+ms +[0-9]+\.[0-9]{3} ms/test \(1000 tests\) +ok$' <<<"$table" ||
        { fail "many-tests row has no per-test time"; return; }
    [[ $(grep -Ec '^print-throughput .* start-up +ok$' <<<"$table") == 2 ]] ||
        { fail "expected 2 print-throughput start-up rows"; return; }
    grep -Eq '^print-throughput +- +--bytes 8388608 +0 +0 .* [0-9.]+ MB/s \([0-9.]+ without start-up\) +ok$' <<<"$table" ||
        { fail "1-thread print-throughput row has no MB/s"; return; }
    grep -Eq '^print-throughput +--threads 256 --blocks 4 +--bytes 33554432 +0 +0 .* [0-9.]+ MB/s.* ok$' <<<"$table" ||
        { fail "1024-thread print-throughput row has no MB/s"; return; }
    rows=$(($(awk -F'|' 'NF >= 4' <<<"$CASES" | wc -l) - 1))
    [[ $(grep -c ' ok$' <<<"$table") == "$rows" ]] || { fail "expected $rows ok rows"; return; }
    [[ "$target" != amdgcn ]] || grep -Eq '^launch-checks +- +dims_ --test-threads 1 +0 +0 .* ok$' <<<"$table" ||
        { fail "no amdgcn launch-checks rows"; return; }
    grep -Eq '^basic +- +- +101 +101 .* ok$' <<<"$table" || { fail "basic row wrong"; return; }
    grep -Eq '^fault-mid-print +- +--test-timeout 60 +101 +101 .* ok$' <<<"$table" ||
        { fail "fault-mid-print row wrong"; return; }
    # The output checks reject a basic run with another failure or without the assert message,
    # and a fault reported as a timeout.
    file="$dir/basic.out"
    "$dir/fake-runner" "$dir/images/basic.ptx" >"$file"
    check_basic_output "$file" >/dev/null || { fail "good basic output rejected"; return; }
    sed 's/^test grid_ids_are_in_range ... ok$/test grid_ids_are_in_range ... FAILED/' "$file" >"$file.extra"
    ! check_basic_output "$file.extra" >/dev/null || { fail "a fifth failure accepted"; return; }
    grep -v 'arithmetic is broken' "$file" >"$file.silent"
    ! check_basic_output "$file.silent" >/dev/null || { fail "a lost assert message accepted"; return; }
    file="$dir/fault.out"
    "$dir/fake-runner" "$dir/images/fault-mid-print.ptx" --test-timeout 60 >"$file"
    check_fault_output "$file" >/dev/null || { fail "good fault output rejected"; return; }
    sed 's/device fault: .*/test timed out after 60s/' "$file" >"$file.timeout"
    ! check_fault_output "$file.timeout" >/dev/null || { fail "a timeout accepted as a fault"; return; }
    # Every left-aligned column starts where its header does, however long a cell is.
    rows=$(sed -n '/^fixture /,/^MB = /p' <<<"$table" | sed '$d')
    for name in launch args expected got measured result; do
        offset=$(head -n1 <<<"$rows" | awk -v name="$name" '{ print index($0, " " name " ") + 1 }')
        ((offset > 1)) || offset=$(head -n1 <<<"$rows" | awk -v name="$name" '{ print index($0, " " name) + 1 }')
        awk -v at="$offset" 'substr($0, at - 1, 1) != " " || substr($0, at, 1) == " " { exit 1 }' \
            <<<"$rows" || { fail "column $name does not line up"; return; }
    done
    # The output check accepts good print output and rejects broken output.
    file="$dir/print.out"
    "$dir/fake-runner" --threads 2 --blocks 2 "$dir/images/print-throughput.ptx" --bytes 640 >"$file"
    check_print_output "$file" 640 4 >/dev/null || { fail "good print output rejected"; return; }
    ! check_print_output "$file" 640 2 >/dev/null || { fail "wrong threads accepted"; return; }
    head -c 576 "$file" >"$file.short"
    ! check_print_output "$file.short" 640 4 >/dev/null || { fail "missing line accepted"; return; }
    { head -n 9 "$file"; head -n 1 "$file"; } >"$file.twice"
    ! check_print_output "$file.twice" 640 4 >/dev/null || { fail "duplicate line accepted"; return; }
    sed '3s/\.\.\.$/.x./' "$file" >"$file.garbled"
    ! check_print_output "$file.garbled" 640 4 >/dev/null || { fail "garbled line accepted"; return; }
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
elif [[ -e "$bundle/target" && "$(cat "$bundle/target")" != "$target" ]]; then
    echo "gpu-check: $bundle was made for $(cat "$bundle/target"); pass --target $(cat "$bundle/target")" >&2
    exit 2
fi
if [[ -z "${GPURUN_CHECK_RUNNER:-}" && ! -x "$bundle/cargo-gpurun" ]]; then
    echo "gpu-check: $bundle/cargo-gpurun is missing (make one with --make-bundle)" >&2
    exit 2
fi
if run_cases "$bundle"; then exit 0; else exit 1; fi
