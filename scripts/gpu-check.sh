#!/usr/bin/env bash
# The GPU check: every fixture on the CUDA backend of a machine with an NVIDIA GPU (or, with
# --target amdgcn, on the HSA backend of one with an AMD GPU), plus measurements beside
# baselines taken in the same run on the same GPU, as one table of rows, each with a verdict.
#
#   scripts/gpu-check.sh --make-bundle DIR   build here (Rust, nightly, ptxas and cargo-zigbuild
#                                            from scripts/setup.sh): a release, stripped
#                                            cargo-gpurun (for glibc 2.28 and newer), the host-launch,
#                                            host-recovery and real-kernels checks, gpurun-hal's
#                                            tests and every fixture's image and cubin (packed)
#                                            into DIR (inside this repository, ignored by git);
#                                            prints its size and the one command to run on the
#                                            GPU machine
#   scripts/gpu-check.sh --bundle DIR        run from a bundle (needs no Rust on that machine)
#   scripts/gpu-check.sh                     build a bundle in a temporary directory, then run it
#   scripts/gpu-check.sh --self-test         check this script against a fake runner (no GPU, no
#                                            build): rows, verdicts, time limits, output folder;
#                                            and the printf baseline, built for the CPU, against
#                                            the print rows' own output check
#   scripts/gpu-check.sh --preflight DIR     what this machine has and bundle DIR needs (the
#                                            preflight row)
#
# Options: --target nvptx|amdgcn (default nvptx: CUDA; amdgcn: HSA, images are code objects,
# no baselines), --arch sm_NN or gfxNNN (default: the first GPU's, from nvidia-smi or rocminfo;
# else sm_90, the H100), --out DIR (default $OUT when set, else DIR/out of the bundle),
# --budget SECONDS (default 450: rows that would start later are not run).
#
# Every row has its own time limit (`timeout`, the whole process group); the run stops starting
# rows when the budget is spent, so it ends within 8 minutes. The table (table.txt), the heads
# of each failing row's logs (failures.txt), of each passing row's (passing.txt), the GPU's
# nvidia-smi line (gpu.txt) and the preflight row's report (preflight.txt) go to the output
# folder, the table rewritten as each row finishes (a hang leaves the rows before it).
#
# GPURUN_CHECK_RUNNER replaces every row's program (for testing this script without a GPU): it is
# called as `RUNNER KIND ARGS...` (see run_row) and its exit status and output are judged as the
# real program's. GPURUN_CHECK_MAX_LIMIT caps every row's time limit (seconds).
# Exit status: 0 when every row matches, 1 otherwise, 2 on bad usage or a failed build.
set -uo pipefail

usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="" make_bundle="" arch="" self_test="" target=nvptx out="" budget=450 preflight_of=""
while (($#)); do
    case "$1" in
        --target) target="${2:?--target needs nvptx or amdgcn}"; shift 2 ;;
        --bundle) bundle="${2:?--bundle needs a directory}"; shift 2 ;;
        --make-bundle) make_bundle="${2:?--make-bundle needs a directory}"; shift 2 ;;
        --arch) arch="${2:?--arch needs sm_NN or gfxNNN}"; shift 2 ;;
        --out) out="${2:?--out needs a directory}"; shift 2 ;;
        --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
        --self-test) self_test=1; shift ;;
        --preflight) preflight_of="${2:?--preflight needs a bundle directory}"; shift 2 ;;
        -h|--help) usage ;;
        *) echo "gpu-check: unknown argument '$1'" >&2; usage ;;
    esac
done
case "$target" in
    nvptx|nvptx64-nvidia-cuda) target=nvptx triple=nvptx64-nvidia-cuda ext=ptx backend=cuda ;;
    amdgcn|amdgcn-amd-amdhsa) target=amdgcn triple=amdgcn-amd-amdhsa ext=elf backend=hsa ;;
    *) echo "gpu-check: unknown target '$target' (nvptx or amdgcn)" >&2; usage ;;
esac
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu-check: --budget takes whole seconds" >&2; exit 2; }

# The rows, as data: kind | fixture (or program) | launch options | arguments | expected exit
# status (a number, "nonzero", or "any" for a probe whose outcome is recorded, not judged) | time
# limit in seconds.
#   preflight the machine and the bundle: uname, glibc, what the binaries link, nvidia-smi (driver,
#             compute mode, MIG, persistence), nvcc, compute-sanitizer, the ptxas that made the
#             cubins and `cargo gpurun info`, into the output folder's preflight.txt
#   run       `cargo gpurun run --backend B LAUNCH images/FIXTURE ARGS`
#   jit       as run, on a copy of FIXTURE's PTX without its cubin: the driver compiles it (timed
#             against the run row of the same fixture and arguments, which loads the cubin)
#   blocking  as run, with CUDA_LAUNCH_BLOCKING=1 (launches move to a helper thread)
#   launch    the host-launch check (crates/gpurun-test/examples/launch_check.rs) on FIXTURE's image
#   recovery  the host-recovery check (crates/gpurun-test/examples/recovery_check.rs) on FIXTURE's
#             image: panics after a context reset, a fault, what opening another Gpu then says
#   (benches) `--bench` on fixtures/benches: every benchmark measured on the device (CUDA events,
#             HSA dispatch timestamps), with libtest's bench line; on CUDA also the copy cold
#             (`--flush-l2`, L2 written over before each timed launch)
#   kernels   the real-kernels check (tests/src/bin/real-kernels-check.rs) on FIXTURE's image: each
#             kernel of fixtures/real-kernels on several sizes against its CPU reference, the
#             checks tests/e2e/real_kernels.rs runs on the host emulation
#   haltests  gpurun-hal's own unit tests, prebuilt, filtered by ARGS (the CUDA backend's hardware
#             tests run where a GPU is present)
#   nvcc      builds scripts/gpu-baselines/FIXTURE.cu with nvcc for the GPU (baseline programs)
#   printf    the nvcc-built printf_lines ARGS (CUDA's printf printing what print-throughput prints)
#   pingpong  the nvcc-built pingpong ARGS (a bare host-pinned-memory round trip)
#   cupy      scripts/gpu-baselines/cupy_launches.py ARGS (CuPy: empty kernel + synchronize)
# Test images exit 0 when every test passes and 101 when one fails, as libtest. Outputs are
# checked, not only exit statuses (see judge). The measurement rows come in pairs whose
# difference removes process start-up and module load: many-tests with 1 and 1000 tests (one
# test at a time, as CuPy launches), print-throughput and printf_lines with 0 and N bytes,
# rpc-latency with 0 and N round trips. 1024 threads run as 4 blocks of 256: print-throughput's
# `_start` needs 72 registers per thread (ptxas, sm_90), too many for 1024 threads in one block.
# FIXTURE-debug is FIXTURE's debug build (what `cargo gpurun test` runs; its cubin assembled fast,
# see gpurun-build's PtxasOptimization), every other image a release build.
# launch-checks: a panic deep in a call stack must come back with its message under the default
# stack (the recursion's depth is unknown to the compiler, so the loader's default must hold
# it), launches of ten shapes in one module must each see their own block and grid dims, and 64
# rounds of barriers between the warps of 256-thread blocks must order their memory; its
# partial-warp probe (48 threads: full-mask ballot and shuffle in a warp of 16 lanes) is
# recorded, since what a GPU does there is what the host emulation must be strict about.
CASES='
preflight|-|||0|30
run|hello|||0|30
run|alloc|||0|30
run|args-env-exit||exit 3|3|30
run|args-env-exit||return 5|5|30
run|args-env-exit||abort|nonzero|30
run|panics|||nonzero|30
run|basic|||101|60
run|big-block|||0|30
run|device-ops|||0|60
run|shared-memory|||0|60
run|launch-checks||deep_panic|0|60
run|launch-checks||dims_ --test-threads 1|0|60
run|launch-checks||barrier_heavy|0|60
run|launch-checks||float_assert|0|60
run|launch-checks||--include-ignored --exact partial_warp_probe --nocapture|any|30
run|launch-checks-debug|||0|90
run|basic-debug|||101|60
launch|host-app-kernels|||0|60
kernels|real-kernels|||0|90
run|concurrency||--test-threads 8|0|90
run|concurrency||--test-threads 11 --include-ignored|101|90
run|fault-mid-print||--test-timeout 60|101|90
run|recovery||--test-timeout 5 --skip d_hangs|101|60
run|recovery||--test-timeout 5 --skip b_faults|101|60
run|many-tests||--test-threads 1 --exact trivial_0000|0|60
run|many-tests||--test-threads 1|0|120
cupy|cupy_launches||1000|0|90
run|print-throughput||--bytes 0|0|60
run|print-throughput||--bytes 8388608|0|120
run|print-throughput|--threads 256 --blocks 4|--bytes 0|0|60
run|print-throughput|--threads 256 --blocks 4|--bytes 33554432|0|120
nvcc|printf_lines|||0|120
printf|printf_lines||0 1 1|0|60
printf|printf_lines||8388608 1 1|0|120
printf|printf_lines||0 256 4|0|60
printf|printf_lines||33554432 256 4|0|120
run|benches||--bench --measurement-time 1|0|120
run|rpc-latency||--round-trips 0|0|60
run|rpc-latency||--round-trips 100000|0|120
nvcc|pingpong|||0|120
pingpong|pingpong||100000|0|60
'
# Kinds that only exist for CUDA (baselines); an amdgcn run leaves them out.
CUDA_ONLY_KINDS="nvcc printf pingpong cupy"
# Kinds whose program is `cargo gpurun run` on an image of the bundle.
RUN_KINDS="run jit blocking"
# Kinds that need FIXTURE's image in the bundle.
IMAGE_KINDS="$RUN_KINDS launch recovery kernels"
# Rows only `--target nvptx` runs, CUDA's own: compute-sanitizer (`--sanitize`), the driver's
# JIT, CUDA_LAUNCH_BLOCKING, the host-driven recovery check (what a fault leaves of a process is
# the CUDA driver's rule) and gpurun-hal's CUDA hardware tests. The sanitize fixture's planted
# write one u32 past a 16-byte allocation passes unnoticed without a sanitizer, and under
# memcheck must fail that test alone with memcheck's report (compute-sanitizer from PATH,
# CUDA_HOME or /usr/local/cuda on the GPU machine; each test runs in a sanitized worker of its
# own); hello under memcheck must print and pass with no finding at all (nothing we ask of the
# driver may be an API error memcheck reports), and the blocking memcheck row launches from the
# helper thread.
NVPTX_CASES='
run|sanitize|||0|60
run|sanitize|--sanitize memcheck||101|240
run|hello|--sanitize memcheck||0|120
blocking|sanitize|--sanitize memcheck||101|240
blocking|concurrency||--test-threads 8|0|90
jit|basic|||101|120
recovery|host-app-kernels|||0|60
haltests|gpurun-hal||cuda::|0|120
run|benches|--flush-l2|--bench --measurement-time 1 copy|0|120
'
[[ "$target" != nvptx ]] || CASES+="$NVPTX_CASES"
# The print-throughput fixture's line size (its default); printf_lines prints the same lines.
PRINT_LINE_BYTES=64
# Where a bundle's directory is carried from, and what the paste command gives the device tool.
DEFAULT_BUNDLE=.gpu-bundle
RUN_TIMEOUT_S=540

in_ci() { [[ "${CI:-}" == true || "${CI:-}" == 1 ]]; }

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

# The rows that apply to this target, one a line.
cases() {
    local kind rest
    while IFS='|' read -r kind rest; do
        [[ -n "$kind" ]] || continue
        if [[ "$target" == amdgcn && " $CUDA_ONLY_KINDS " == *" $kind "* ]]; then continue; fi
        echo "$kind|$rest"
    done <<<"$CASES"
}

# The fixtures whose images a bundle needs.
fixture_names() {
    local kind fixture rest
    while IFS='|' read -r kind fixture rest; do
        [[ " $IMAGE_KINDS " != *" $kind "* ]] || echo "$fixture"
    done < <(cases) | sort -u
}

# Bytes of DIR (all files, recursively).
bytes_of() { du -sb "$1" | cut -f1; }

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# The command that runs the check on the GPU machine from the bundle at BUNDLE (a path relative
# to the repository root): what the device tool's `run` gets.
paste_command() {
    echo "bash scripts/gpu-check.sh --bundle $1 --out \"\$OUT\""
}

# The newest glibc symbol version the ELF files FILES need (e.g. 2.34), from their dynamic
# symbol tables; empty when objdump is missing.
glibc_needed() {
    command -v objdump >/dev/null || return 0
    objdump -T "$@" 2>/dev/null | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1
}

# Whether version A (e.g. 2.34) is newer than version B.
version_newer() {
    [[ "$1" != "$2" && $(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n1) == "$1" ]]
}

# Fails, naming the file and the symbol version, when one of the ELF files FILES needs a glibc
# newer than MAX (e.g. 2.28), or when objdump cannot tell.
glibc_at_most() {
    local max="$1" file needed
    shift
    command -v objdump >/dev/null || { echo "gpu-check: objdump is missing: cannot tell which glibc the binaries need" >&2; return 1; }
    for file in "$@"; do
        needed=$(glibc_needed "$file")
        [[ -n "$needed" ]] || { echo "gpu-check: $file names no glibc symbol version (not a dynamically linked ELF file?)" >&2; return 1; }
        if version_newer "$needed" "$max"; then
            echo "gpu-check: $file needs glibc $needed, newer than the $max the bundle promises" >&2
            return 1
        fi
    done
}

# The host programs of a bundle: cargo-gpurun and the checks, built here (release, stripped)
# with zig as the linker against glibc BUNDLE_GLIBC, so they start on older system images than
# this machine's (RHEL 8 and Ubuntu 18.10 have 2.28), as GPU machines often run.
BUNDLE_PROGRAMS="cargo-gpurun launch-check recovery-check real-kernels-check hal-tests"
BUNDLE_TRIPLE=x86_64-unknown-linux-gnu
BUNDLE_GLIBC=2.28

build_bundle() {
    local dir="$1" json debug_json="" target_dir fixture image cubin hal_tests missing=0
    local -a packages=() debug_packages=()
    [[ -n "$arch" ]] || arch=$(detect_arch)
    rm -rf "$dir/images" "$dir/images.tar.xz"
    mkdir -p "$dir/images" || exit 2
    if ! command -v cargo-zigbuild >/dev/null || ! python3 -m ziglang version >/dev/null 2>&1; then
        echo "gpu-check: cargo-zigbuild or zig is missing (scripts/setup.sh installs both): the bundle's binaries are linked against glibc $BUNDLE_GLIBC" >&2
        exit 2
    fi
    echo "gpu-check: building cargo-gpurun, the host-launch, host-recovery and real-kernels checks and gpurun-hal's tests (release, stripped, for glibc $BUNDLE_GLIBC)" >&2
    (cd "$root" && CARGO_PROFILE_RELEASE_STRIP=symbols cargo-zigbuild zigbuild --release --locked \
        --target "$BUNDLE_TRIPLE.$BUNDLE_GLIBC" -p cargo-gpurun -p gpurun-test -p gpurun-e2e --bin cargo-gpurun \
        --example launch_check --example recovery_check --bin real-kernels-check) >&2 || exit 2
    hal_tests=$(cd "$root" && CARGO_PROFILE_RELEASE_STRIP=symbols cargo-zigbuild test --release --locked \
        --target "$BUNDLE_TRIPLE.$BUNDLE_GLIBC" -p gpurun-hal --lib --no-run --message-format json |
        python3 -c 'import json,sys
for line in sys.stdin:
    v = json.loads(line)
    if v.get("reason") == "compiler-artifact" and v.get("executable") and v["target"]["name"] == "gpurun_hal":
        print(v["executable"])') || exit 2
    [[ -x "$hal_tests" ]] || { echo "gpu-check: no gpurun-hal test binary was built" >&2; exit 2; }
    target_dir=$(cd "$root" && cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])') || exit 2
    target_dir="$target_dir/$BUNDLE_TRIPLE/release"
    cp "$target_dir/cargo-gpurun" "$dir/" || exit 2
    cp "$target_dir/examples/launch_check" "$dir/launch-check" || exit 2
    cp "$target_dir/examples/recovery_check" "$dir/recovery-check" || exit 2
    cp "$target_dir/real-kernels-check" "$dir/real-kernels-check" || exit 2
    cp "$hal_tests" "$dir/hal-tests" || exit 2
    # shellcheck disable=SC2086 # the programs' names, split on spaces on purpose
    (cd "$dir" && glibc_at_most "$BUNDLE_GLIBC" $BUNDLE_PROGRAMS) >&2 || exit 2
    for fixture in $(fixture_names); do
        [[ "$fixture" == *-debug ]] && debug_packages+=(-p "${fixture%-debug}") || packages+=(-p "$fixture")
    done
    echo "gpu-check: building ${#packages[@]} fixture packages for $arch (release)" >&2
    json=$("$dir/cargo-gpurun" gpurun build --manifest-path "$root/fixtures/Cargo.toml" \
        "${packages[@]}" --target "$triple" --arch "$arch" --release --message-format json) || exit 2
    if ((${#debug_packages[@]})); then
        echo "gpu-check: building ${#debug_packages[@]} fixture packages for $arch (debug)" >&2
        debug_json=$("$dir/cargo-gpurun" gpurun build --manifest-path "$root/fixtures/Cargo.toml" \
            "${debug_packages[@]}" --target "$triple" --arch "$arch" --message-format json) || exit 2
    fi
    for fixture in $(fixture_names); do
        read -r image cubin < <(python3 -c 'import json,sys
for line in sys.stdin:
    v = json.loads(line)
    if v.get("reason") == "gpurun-image" and v.get("kind") == "lib" and v.get("package") == sys.argv[1]:
        print(v["path"], v.get("cubin") or "-"); break' "${fixture%-debug}" \
            <<<"$([[ "$fixture" == *-debug ]] && echo "$debug_json" || echo "$json")")
        [[ -n "${image:-}" ]] || { echo "gpu-check: no image reported for $fixture" >&2; exit 2; }
        cp -p "$image" "$dir/images/$fixture.$ext" || exit 2
        if [[ "$target" == nvptx ]]; then
            if [[ "$cubin" == - ]]; then
                echo "gpu-check: no cubin for $fixture: ptxas is missing (scripts/setup.sh installs it)" >&2
                missing=1
            else
                cp -p "$cubin" "$dir/images/$fixture.cubin" || exit 2
            fi
        fi
    done
    ((missing == 0)) || exit 2
    # Cubins are mostly zeros and repeated tables: compressed, the images are a tenth of their
    # size, which keeps the bundle and the working tree within what travels to the GPU machine.
    tar -cJf "$dir/images.tar.xz" -C "$dir" images && rm -rf "$dir/images" || exit 2
    { echo "arch $arch"; echo "target $target"
      echo "commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
      echo "ptxas $("$dir/cargo-gpurun" gpurun doctor 2>/dev/null | awk '$1 == "ptxas" { $1 = ""; $2 = ""; sub(/^ +/, ""); print }')"
      # shellcheck disable=SC2086 # the programs' names, split on spaces on purpose
      echo "glibc $(cd "$dir" && glibc_needed $BUNDLE_PROGRAMS)"; } >"$dir/bundle-info"
}

# Unpacks a bundle's images (once: a bundle run again keeps them).
unpack_images() {
    local dir="$1"
    [[ -e "$dir/images.tar.xz" && ! -d "$dir/images" ]] || return 0
    tar -xJf "$dir/images.tar.xz" -C "$dir" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$dir/images.tar.xz" "$dir" || { echo "gpu-check: cannot unpack $dir/images.tar.xz" >&2; exit 2; }
}

# After --make-bundle: the bundle's size, the tree's, and the command for the GPU machine.
report_bundle() {
    local dir="$1" relative bundle_bytes tree_bytes
    relative=$(python3 -c 'import os,sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$dir" "$root")
    bundle_bytes=$(bytes_of "$dir")
    tree_bytes=$(cd "$root" && git ls-files -z -co --exclude-standard |
        du -cb --files0-from=- 2>/dev/null | tail -n1 | cut -f1)
    echo "gpu-check: bundle $relative: $(mib "$bundle_bytes"); with the working tree that travels" \
        "($(mib "$tree_bytes")): $(mib $((bundle_bytes + tree_bytes))) of 64 MiB" >&2
    if ((bundle_bytes + tree_bytes > 64 * 1048576)); then
        echo "gpu-check: too big to travel" >&2
        exit 2
    fi
    if [[ "$relative" == ..* ]] || ! (cd "$root" && git check-ignore -q "$relative"); then
        echo "gpu-check: $relative must be a git-ignored folder inside the repository (as $DEFAULT_BUNDLE is), so that it travels only when carried" >&2
        exit 2
    fi
    echo "gpu-check: on the GPU machine (device tool run):" >&2
    echo "  command:   $(paste_command "$relative")"
    echo "  carry:     [\"$relative\"]"
    echo "  timeout_s: $RUN_TIMEOUT_S"
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

# Whether FILE reports test NAME as passed.
passed_test() { grep -q "^test $2 \.\.\. ok$" "$1"; }

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

# sanitize: without a sanitizer every test passes (the planted write goes unnoticed); under
# memcheck (MODE sanitized) only b_writes_past_its_allocation fails, with memcheck's report.
check_sanitize_output() {
    local file="$1" mode="$2" failed
    failed=$(failed_tests "$file" | tr '\n' ' ')
    if [[ "$mode" == sanitized ]]; then
        [[ "$failed" == "b_writes_past_its_allocation " ]] || { echo "failed: ${failed:-none}"; return 1; }
        grep -q 'compute-sanitizer memcheck found' "$file" || { echo "no finding attributed"; return 1; }
        grep -q 'Invalid __global__ write' "$file" || { echo "no memcheck report"; return 1; }
    else
        [[ -z "$failed" ]] || { echo "failed: $failed"; return 1; }
    fi
    if ! { passed_test "$file" a_writes_in_bounds && passed_test "$file" c_passes_after; }; then
        echo "a clean test did not pass"
        return 1
    fi
}

# fault-mid-print: the faulting test fails with a fault, not a timeout; the other passes.
check_fault_output() {
    local file="$1" failed
    failed=$(failed_tests "$file" | tr '\n' ' ')
    [[ "$failed" == "b_faults_during_a_long_print " ]] || { echo "failed: ${failed:-none}"; return 1; }
    ! grep -q 'timed out' "$file" || { echo "reported as a timeout"; return 1; }
    grep -qi 'fault' "$file" || { echo "no fault reported"; return 1; }
}

# recovery without d_hangs: b_faults poisons its context and fails as a fault; c_passes_between
# still passes (in a fresh worker), and e_fails_after fails with its own message.
# recovery without b_faults: d_hangs fails as a timeout after 5 s; f_passes_after still passes.
check_recovery_output() {
    local file="$1" mode="$2" failed
    failed=$(failed_tests "$file" | tr '\n' ' ')
    grep -q 'a real failure after the hang' "$file" || { echo "no message from e_fails_after"; return 1; }
    if [[ "$mode" == fault ]]; then
        [[ "$failed" == "b_faults e_fails_after " ]] || { echo "failed: ${failed:-none}"; return 1; }
        grep -q 'device fault' "$file" || { echo "no device fault reported"; return 1; }
        ! grep -q 'timed out' "$file" || { echo "a timeout reported"; return 1; }
        passed_test "$file" c_passes_between || { echo "c_passes_between did not pass after the fault"; return 1; }
    else
        [[ "$failed" == "d_hangs e_fails_after " ]] || { echo "failed: ${failed:-none}"; return 1; }
        grep -q 'timed out after 5s' "$file" || { echo "no 5 s timeout reported"; return 1; }
        passed_test "$file" f_passes_after || { echo "f_passes_after did not pass after the hang"; return 1; }
    fi
}

# The benchmarks of fixtures/benches.
BENCHES="copy empty matmul round_trip spin steady"

# The kernels of fixtures/real-kernels, as real-kernels-check names them.
REAL_KERNELS="matmul_tiled block_sum histogram weighted_histogram inclusive_scan compact_above"

# real-kernels-check: one `NAME ok` line per kernel and the closing line. Says what is wrong.
check_kernels_output() {
    local file="$1" kernel count
    for kernel in $REAL_KERNELS; do
        grep -q "^real-kernels-check: $kernel ok (" "$file" || { echo "$kernel did not match"; return 1; }
    done
    count=$(wc -w <<<"$REAL_KERNELS")
    grep -qx "real-kernels-check: all $count kernels match the CPU" "$file" || { echo "no closing line"; return 1; }
}

# Whether libtest output FILE ran tests (COUNT of them, when given) and none failed. Says what is
# wrong.
check_all_passed() {
    local file="$1" count="${2:-}" failed ran
    failed=$(failed_tests "$file" | tr '\n' ' ')
    [[ -z "$failed" ]] || { echo "failed: $failed"; return 1; }
    ran=$(tests_run "$file")
    [[ -n "$ran" ]] || { echo "no test ran"; return 1; }
    [[ -z "$count" || "$ran" == "$count" ]] || { echo "$ran tests ran, not $count"; return 1; }
}

# FILE has libtest's bench line for each benchmark in NAMES and a summary line counting them as
# measured. Says what is wrong.
check_bench_output() {
    local file="$1" name measured
    shift
    for name in "$@"; do
        grep -Eq "^test $name +\.\.\. bench: +[0-9,]+\.[0-9]{2} ns/iter \(\+/- [0-9,]+\.[0-9]{2}\)" "$file" ||
            { echo "no bench line for $name"; return 1; }
    done
    measured=$(awk '/^test result:/ { for (i = 1; i < NF; i++) if ($(i + 1) ~ /^measured;/) print $i }' "$file")
    [[ "$measured" == "$#" ]] || { echo "${measured:-no} benchmarks measured, not $#"; return 1; }
}

# The tests libtest's summary line in FILE counts as run (passed + failed), or nothing.
tests_run() {
    awk '/^test result:/ { for (i = 1; i < NF; i++) {
            if ($(i + 1) ~ /^passed;/) p = $i; if ($(i + 1) ~ /^failed;/) f = $i }
            n = p + f } END { if (n > 0) print n }' "$1"
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

# The number after KEY on a `KEY NUMBER` line of FILE (empty when absent).
keyed_number() { awk -v key="$2" '$1 == key && $2 ~ /^[0-9.]+$/ { print $2; exit }' "$1"; }

# A division formatted with 3 decimals.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }'; }

# Judges one finished row from its logs ($log.out, $log.err): sets `verdict` and `measured`,
# and records measurements in M (by name) for the summary.
judge() {
    local kind="$1" fixture="$2" launch="$3" args="$4" log="$5" ms="$6" problem threads blocks bytes
    local tests startup key value
    case "$kind:$fixture" in
        preflight:*)
            measured=$(sed -n 's/^cuda 0: \(.*\) (\(sm_[0-9]*\),.*/\1 \2/p' "$log.out" | head -n1)
            if [[ "$target" == nvptx && -z "$measured" ]]; then
                measured=-
                verdict="BAD OUTPUT (no CUDA device in cargo gpurun info)"
            fi
            [[ -n "$measured" ]] || measured=- ;;
        run:basic)
            problem=$(check_basic_output "$log.out") || verdict="BAD OUTPUT ($problem)"
            [[ -n "$launch$args" ]] || M[basic_ms]=$ms ;;
        run:basic-debug) problem=$(check_basic_output "$log.out") || verdict="BAD OUTPUT ($problem)" ;;
        run:launch-checks-debug)
            problem=$(check_all_passed "$log.out") || verdict="BAD OUTPUT ($problem)"
            measured="debug build, cubin assembled fast" ;;
        jit:basic)
            problem=$(check_basic_output "$log.out") || verdict="BAD OUTPUT ($problem)"
            measured="PTX JIT-compiled by the driver"
            [[ -z "${M[basic_ms]:-}" ]] || measured+=", $(ratio "$ms" "${M[basic_ms]}")x the time with its cubin" ;;
        run:hello)
            grep -q '^hello from thread 0 of block 0$' "$log.out" || verdict="BAD OUTPUT (no hello line)"
            [[ "$launch" != *--sanitize* ]] || measured="no memcheck finding" ;;
        run:device-ops|run:shared-memory)
            problem=$(check_all_passed "$log.out") || verdict="BAD OUTPUT ($problem)" ;;
        run:launch-checks)
            case "$args" in
                *partial_warp_probe*)
                    # A probe: what the GPU did is the measurement; only a lost line is wrong.
                    measured=$(sed -n 's/^partial-warp: //p' "$log.out" | head -n1)
                    if [[ -z "$measured" ]]; then
                        measured="exit $got, no probe line"
                    else
                        measured="exit $got: $measured"
                    fi ;;
                dims_*) problem=$(check_all_passed "$log.out" 10) || verdict="BAD OUTPUT ($problem)" ;;
                float_assert)
                    problem=$(check_all_passed "$log.out" 1) || verdict="BAD OUTPUT ($problem)"
                    measured="f32 values in the message" ;;
                *) problem=$(check_all_passed "$log.out" 1) || verdict="BAD OUTPUT ($problem)" ;;
            esac ;;
        recovery:*)
            grep -q '^recovery_check: all [0-9]* steps as expected$' "$log.out" ||
                verdict="BAD OUTPUT ($(grep -m1 'FAILED' "$log.out" || echo 'no closing line'))"
            measured="panic after reset, fault, open after fault" ;;
        haltests:*)
            problem=$(check_all_passed "$log.out") || verdict="BAD OUTPUT ($problem)"
            if [[ "$verdict" == ok ]] && ! grep -q '^test cuda::tests::hardware_launch_globals_and_usage \.\.\. ok$' "$log.out"; then
                verdict="BAD OUTPUT (the hardware tests did not run)"
            fi
            measured="$(tests_run "$log.out") tests" ;;
        run:sanitize|blocking:sanitize)
            local sanitized=plain
            [[ "$launch" != *--sanitize* ]] || { sanitized=sanitized; measured="memcheck report"; }
            problem=$(check_sanitize_output "$log.out" "$sanitized") || verdict="BAD OUTPUT ($problem)" ;;
        run:fault-mid-print)
            if ! problem=$(check_fault_output "$log.out"); then
                verdict="BAD OUTPUT ($problem)"
            elif ((ms >= 60000)); then
                verdict="TOO SLOW (the fault was not seen before the test timeout)"
            fi ;;
        run:recovery)
            local mode=timeout
            [[ "$args" != *"--skip d_hangs"* ]] || mode=fault
            problem=$(check_recovery_output "$log.out" "$mode") || verdict="BAD OUTPUT ($problem)"
            measured="$mode" ;;
        launch:*)
            grep -q 'match the CPU' "$log.out" || verdict="BAD OUTPUT (no match line)"
            measured="fill (ptr, u64, u32), saxpy" ;;
        kernels:*)
            problem=$(check_kernels_output "$log.out") || verdict="BAD OUTPUT ($problem)"
            measured="$(wc -w <<<"$REAL_KERNELS") kernels vs CPU" ;;
        run:many-tests)
            tests=$(tests_run "$log.out")
            if [[ -z "$tests" ]]; then
                verdict="BAD OUTPUT (no test result line)"
            elif [[ "$args" == *--exact* ]]; then
                [[ "$tests" == 1 ]] || verdict="BAD OUTPUT ($tests tests, not 1)"
                M[tests_startup_ms]=$ms
                measured="start-up (1 test)"
            elif [[ "$tests" != 1000 ]]; then
                verdict="BAD OUTPUT ($tests tests, not 1000)"
            else
                startup=${M[tests_startup_ms]:-}
                if [[ -n "$startup" ]] && ((ms > startup)); then
                    value=$(awk -v ms="$ms" -v s="$startup" 'BEGIN { printf "%.4f", (ms - s) / 999 }')
                    M[per_test_ms]=$value
                    measured="$value ms/test (1000 tests, start-up taken off)"
                else
                    measured=$(awk -v ms="$ms" 'BEGIN { printf "%.4f ms/test (with start-up)", ms / 1000 }')
                fi
            fi ;;
        cupy:*)
            value=$(keyed_number "$log.out" ms_per_launch)
            if [[ -z "$value" ]]; then verdict="BAD OUTPUT (no ms_per_launch)"; else
                M[cupy_ms]=$value; measured="$value ms/launch+sync"; fi ;;
        run:print-throughput|printf:*)
            if [[ "$kind" == printf ]]; then
                read -r bytes threads blocks <<<"$args"
            else
                threads=$(flag_value --threads "$launch"); blocks=$(flag_value --blocks "$launch")
                bytes=$(flag_value --bytes "$args")
            fi
            threads=$((${threads:-1} * ${blocks:-1}))
            key="$kind-$threads"
            if ! problem=$(check_print_output "$log.out" "$bytes" "$threads"); then
                verdict="BAD OUTPUT ($problem)"
            elif ((bytes == 0)); then
                M[$key-startup]=$ms
                measured="start-up"
            else
                startup=${M[$key-startup]:-}
                value=$(awk -v bytes="$bytes" -v ms="$ms" -v s="$startup" 'BEGIN {
                    if (s != "" && ms > s) printf "%.3f", bytes / (ms - s) / 1000
                    else printf "%.3f", bytes / ms / 1000 }')
                M[$key]=$value
                if [[ -n "$startup" ]] && ((ms > startup)); then
                    measured="$value MB/s (start-up taken off)"
                else
                    measured="$value MB/s (with start-up)"
                fi
            fi ;;
        run:benches)
            local names="$BENCHES" rate
            [[ "$args" != *" copy" ]] || names=copy
            # shellcheck disable=SC2086 # the names, split on spaces on purpose
            problem=$(check_bench_output "$log.out" $names) || verdict="BAD OUTPUT ($problem)"
            rate=$(sed -n 's/^test copy  *\.\.\. bench: .* = \([0-9]*\) MB\/s$/\1/p' "$log.out" | head -n1)
            if [[ "$launch" == *--flush-l2* ]]; then
                measured="copy ${rate:-?} MB/s cold (L2 flushed)"
            else
                measured="copy ${rate:-?} MB/s, empty $(sed -n 's/^test empty  *\.\.\. bench: *\([0-9,.]*\) ns.*/\1/p' "$log.out" | head -n1) ns/iter"
            fi ;;
        run:rpc-latency)
            value=$(flag_value --round-trips "$args")
            if [[ -s "$log.out" ]]; then
                verdict="BAD OUTPUT (printed something)"
            elif ((value == 0)); then
                M[rpc_startup_ms]=$ms
                measured="start-up"
            elif startup=${M[rpc_startup_ms]:-} && [[ -n "$startup" ]] && ((ms > startup)); then
                M[rpc_us]=$(awk -v ms="$ms" -v s="$startup" -v n="$value" \
                    'BEGIN { printf "%.3f", (ms - s) * 1000 / n }')
                measured="${M[rpc_us]} us/round trip (start-up taken off)"
            else
                measured="no start-up time to take off"
            fi ;;
        pingpong:*)
            value=$(keyed_number "$log.out" ns_per_round_trip)
            if [[ -z "$value" ]]; then verdict="BAD OUTPUT (no ns_per_round_trip)"; else
                M[pingpong_us]=$(awk -v ns="$value" 'BEGIN { printf "%.3f", ns / 1000 }')
                measured="${M[pingpong_us]} us/round trip"; fi ;;
    esac
}

# The measurements beside their baselines, from what the rows recorded in M.
summary_rows() {
    echo "measurement|ours|baseline (same run, same GPU)|ours / baseline"
    summary_row "per-test overhead, many-tests" "${M[per_test_ms]:-}" "${M[cupy_ms]:-}" \
        "ms/test" "ms/launch (CuPy, empty kernel + synchronize)"
    summary_row "print, 1 thread" "${M[run-1]:-}" "${M[printf-1]:-}" "MB/s" "MB/s (CUDA printf)"
    summary_row "print, 1024 threads" "${M[run-1024]:-}" "${M[printf-1024]:-}" "MB/s" "MB/s (CUDA printf)"
    summary_row "RPC round trip" "${M[rpc_us]:-}" "${M[pingpong_us]:-}" "us" "us (pinned-memory ping-pong)"
}

summary_row() {
    local what="$1" ours="$2" base="$3" unit="$4" base_unit="$5"
    echo "$what|${ours:-not measured}${ours:+ $unit}|${base:-not measured}${base:+ $base_unit}|$(
        [[ -n "$ours" && -n "$base" ]] && ratio "$ours" "$base" || echo -)"
}

# Prints rows of `|`-separated cells as columns as wide as their widest cell (the last column
# unpadded).
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
            else
                line+=$(printf '%-*s  ' "${widths[column]}" "${cells[column]}")
            fi
        done
        echo "$line"
    done
}

# Writes the table of the rows so far, the verdict line and the measurements to FILE.
write_table() {
    local file="$1" failures="$2" done_rows="$3" total="$4"
    local -a summary=()
    mapfile -t summary < <(summary_rows)
    {
        echo "gpu-check $target ($arch), bundle $(tr '\n' ' ' <"$dir/bundle-info" 2>/dev/null)"
        print_table "${rows[@]}"
        echo
        echo "rows: $done_rows of $total done, $failures not as expected"
        echo
        print_table "${summary[@]}"
        echo "MB = 10^6 bytes; times are wall times of whole processes; start-up (process start,"
        echo "context and module load) is taken off where its row ran: the difference of the pair."
        echo "ours / baseline: for times lower is better, for MB/s higher."
    } >"$file.tmp" && mv "$file.tmp" "$file"
}

# Appends the heads of a row's logs to FILE (failures.txt or passing.txt).
record_log_heads() {
    local file="$1" title="$2" log="$3" stream
    {
        echo "=== $title ==="
        for stream in out err; do
            echo "--- std$stream ($(wc -c <"$log.$stream") bytes, first 60 lines, at most 4000 bytes) ---"
            head -n 60 "$log.$stream" | head -c 4000
            echo
        done
    } >>"$file"
}

# The GPU and its software, for gpu.txt.
gpu_info() {
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if [[ "$target" == amdgcn ]]; then
        rocminfo 2>&1 | grep -m3 -E 'Marketing Name|gfx' || echo "rocminfo: not available"
        return
    fi
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.max.sm \
        --format=csv 2>&1 || echo "nvidia-smi: not available"
    echo "nvcc: $(nvcc --version 2>/dev/null | tail -n1 || true)"
    echo "cupy: $(python3 -c 'import cupy; print(cupy.__version__)' 2>&1 | tail -n1)"
}

# Runs one row: its program under its time limit (the whole process group is killed at the
# limit), output to $log.out/.err. Sets `got`.
run_row() {
    local kind="$1" fixture="$2" launch="$3" args="$4" limit="$5" log="$6" image
    local -a program environment=()
    image="$dir/images/$fixture.$ext"
    case "$kind" in
        preflight) program=(bash "$root/scripts/gpu-check.sh" --target "$target" --preflight "$dir") ;;
        run) program=("$dir/cargo-gpurun" gpurun run --backend "$backend") ;;
        blocking)
            program=("$dir/cargo-gpurun" gpurun run --backend "$backend")
            environment=(CUDA_LAUNCH_BLOCKING=1) ;;
        jit)
            # The PTX alone, in a folder of its own: no cubin beside it to load instead.
            mkdir -p "$work/jit" && cp "$image" "$work/jit/" || return
            image="$work/jit/$fixture.$ext"
            program=("$dir/cargo-gpurun" gpurun run --backend "$backend") ;;
        launch) program=("$dir/launch-check") ;;
        recovery) program=("$dir/recovery-check") ;;
        kernels) program=("$dir/real-kernels-check") ;;
        haltests) program=("$dir/hal-tests" --test-threads 1) ;;
        nvcc) program=("$(nvcc_path)" -O2 "-arch=$gpu_arch" -o "$work/$fixture" "$root/scripts/gpu-baselines/$fixture.cu") ;;
        printf|pingpong) program=("$work/$fixture") ;;
        cupy) program=(python3 "$root/scripts/gpu-baselines/$fixture.py") ;;
    esac
    if [[ -n "${GPURUN_CHECK_RUNNER:-}" ]]; then
        read -r -a program <<<"$GPURUN_CHECK_RUNNER"
        program+=("$kind")
        [[ "$kind" != preflight ]] || program+=("$dir")
    fi
    # shellcheck disable=SC2086 # the launch and arguments columns are split on spaces on purpose
    case "$kind" in
        run|blocking|jit) timeout -k 5 "$limit" env "${environment[@]}" "${program[@]}" $launch "$image" $args ;;
        launch|recovery|kernels) timeout -k 5 "$limit" "${program[@]}" "$image" ;;
        preflight|nvcc) timeout -k 5 "$limit" "${program[@]}" ;;
        *) timeout -k 5 "$limit" "${program[@]}" $args ;;
    esac >"$log.out" 2>"$log.err" </dev/null
    got=$?
}

# nvcc: from PATH, else CUDA_HOME's or /usr/local/cuda's.
nvcc_path() {
    local candidate
    for candidate in "$(command -v nvcc)" "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" /usr/local/cuda/bin/nvcc; do
        [[ -z "$candidate" || ! -x "$candidate" ]] || { echo "$candidate"; return; }
    done
    echo nvcc
}

# What the GPU machine has and what the bundle needs of it, for preflight.txt: a run that fails
# for want of a library, a driver or a tool says why here first.
preflight() {
    local dir="$1" program needed have sanitizer status=0
    echo "== machine"; uname -srm
    have=$(ldd --version 2>/dev/null | head -n1 | grep -o '[0-9][0-9.]*$')
    needed=$(awk '$1 == "glibc" { print $2 }' "$dir/bundle-info" 2>/dev/null)
    echo "glibc ${have:-unknown}; the bundle needs ${needed:-unknown}"
    if [[ -n "$have" && -n "$needed" ]] && version_newer "$needed" "$have"; then
        echo "PROBLEM: this glibc is older than the bundle's binaries need"
        status=1
    fi
    echo "== bundle"; cat "$dir/bundle-info" 2>/dev/null
    for program in $BUNDLE_PROGRAMS; do
        echo "-- ldd $program"
        ldd "$dir/$program" 2>&1 || status=1
    done
    if [[ "$target" == nvptx ]]; then
        echo "== nvidia-smi"
        nvidia-smi --query-gpu=name,driver_version,compute_cap,compute_mode,persistence_mode,mig.mode.current,memory.total \
            --format=csv 2>&1 || status=1
        echo "== libcuda"; ldconfig -p 2>/dev/null | grep -E 'libcuda\.so' || echo "no libcuda in the loader's cache"
        echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} CUDA_HOME=${CUDA_HOME:-}"
        echo "== nvcc"; "$(nvcc_path)" --version 2>&1 | tail -n2
        sanitizer=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
        echo "== compute-sanitizer"; "$sanitizer" --version 2>&1 | tail -n1
    else
        echo "== rocminfo"; rocminfo 2>&1 | grep -m4 -E 'Marketing Name|gfx|Runtime Version' || status=1
    fi
    echo "== cargo gpurun info"
    "$dir/cargo-gpurun" gpurun info 2>&1 || status=1
    return "$status"
}

# Runs every row, writing the table to the output folder as each finishes; prints the table.
# The exit status says whether every row matched.
run_cases() {
    local kind fixture launch args expected limit log start end got ms verdict measured
    local failures=0 done_rows=0 total title started elapsed left slug
    local -a rows=()
    local -A M=()
    total=$(cases | wc -l)
    work="$dir/work"
    # The baselines are built for the GPU present (the images for the bundle's architecture).
    gpu_arch=$(detect_arch)
    mkdir -p "$work/logs" "$out" || exit 2
    rm -f "$out/failures.txt" "$out/passing.txt" "$out/preflight.txt"
    gpu_info >"$out/gpu.txt" 2>&1
    rows+=("kind|fixture|launch|args|expected|limit|got|time|measured|verdict")
    started=$(date +%s)
    while IFS='|' read -r kind fixture launch args expected limit; do
        slug="$kind.$fixture.${launch// /_}.${args// /_}"
        log="$work/logs/${slug//\//_}"
        title="$kind $fixture${launch:+ $launch}${args:+ $args}"
        elapsed=$(($(date +%s) - started))
        left=$((budget - elapsed))
        ((limit <= ${GPURUN_CHECK_MAX_LIMIT:-$limit})) || limit=$GPURUN_CHECK_MAX_LIMIT
        ((limit <= left)) || limit=$left
        measured=-
        verdict=ok
        if ((limit < 5)); then
            got=- ms=-
            verdict="NOT RUN (out of the ${budget} s budget)"
        elif [[ " $IMAGE_KINDS " == *" $kind "* ]] && [[ ! -e "$dir/images/$fixture.$ext" ]]; then
            got=- ms=-
            verdict="MISSING IMAGE"
        elif [[ "$kind" == printf || "$kind" == pingpong ]] && [[ -z "${GPURUN_CHECK_RUNNER:-}" && ! -x "$work/$fixture" ]]; then
            got=- ms=-
            verdict="NOT RUN (its nvcc row failed)"
        else
            echo "gpu-check: $title (limit ${limit}s)" >&2
            start=$(date +%s%N)
            run_row "$kind" "$fixture" "$launch" "$args" "$limit" "$log"
            end=$(date +%s%N)
            ms=$(((end - start) / 1000000))
            if ((got == 124 || got == 137)); then
                verdict="TIMED OUT (${limit} s limit)"
            elif [[ "$expected" == any || ("$expected" == nonzero && "$got" != 0) || "$got" == "$expected" ]]; then
                judge "$kind" "$fixture" "$launch" "$args" "$log" "$ms"
            else
                verdict=MISMATCH
            fi
            ms="${ms}ms"
            [[ "$kind" != preflight ]] || cp "$log.out" "$out/preflight.txt"
            if [[ "$verdict" == ok ]]; then
                record_log_heads "$out/passing.txt" "$title: ok" "$log"
            else
                record_log_heads "$out/failures.txt" "$title: $verdict" "$log"
            fi
        fi
        [[ "$verdict" == ok ]] || failures=$((failures + 1))
        done_rows=$((done_rows + 1))
        rows+=("$kind|$fixture|${launch:--}|${args:--}|$expected|${limit}s|$got|$ms|$measured|$verdict")
        write_table "$out/table.txt" "$failures" "$done_rows" "$total"
    done < <(cases)
    cat "$out/table.txt"
    echo "logs: $work/logs; table, failing logs and the GPU: $out"
    ((failures == 0))
}

# The self-test's fake runner: `fake-runner KIND ARGS...` behaves as each row's program should,
# except the rows named in FAKE_WRONG (a mismatch) and FAKE_HANG (hangs; touches FAKE_HANG_FILE).
write_fake_runner() {
    cat >"$1" <<'FAKE'
#!/usr/bin/env bash
kind="$1"; shift
threads=1 blocks=1 sanitize=""
if [[ "$kind" == preflight ]]; then
    echo "cuda 0: NVIDIA H100 80GB HBM3 (sm_90, 32 lanes, 81079 MiB, driver CUDA 13.0)"
    exit 0
fi
# The kinds that run `cargo gpurun run` behave as it does.
[[ "$kind" != blocking && "$kind" != jit ]] || kind=run
if [[ "$kind" == run ]]; then
    while (($#)) && [[ "$1" != *.ptx && "$1" != *.elf ]]; do
        [[ "$1" != --threads ]] || threads="$2"
        [[ "$1" != --blocks ]] || blocks="$2"
        [[ "$1" != --sanitize ]] || sanitize="$2"
        shift
    done
fi
image=$(basename "$(basename "${1:-}" .ptx)" .elf)
shift
row="$kind $image $*"
[[ "$row" != "${FAKE_HANG:-none}" ]] || { touch "$FAKE_HANG_FILE"; sleep 300; }
[[ "$row" != "${FAKE_WRONG:-none}" ]] || exit 7
print_lines() {
    awk -v lines=$(($1 / 64)) -v threads="$2" 'BEGIN {
        for (n = 0; n < lines; n++) printf "t%06d n%010d %s\n", n % threads, n,
            "..........................................." }'
}
tests() { for name in "$@"; do echo "test ${name%=*} ... ${name#*=}"; done; }
passed() { echo "test result: ok. $1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.10s"; }
case "$kind:$image" in
    run:args-env-exit) case "$1" in exit) exit 3 ;; return) exit 5 ;; abort) exit 134 ;; esac ;;
    run:panics) exit 1 ;;
    run:basic|run:basic-debug)
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
    run:fault-mid-print)
        tests a_passes_before=ok b_faults_during_a_long_print=FAILED
        echo "device fault: CUDA_ERROR_ILLEGAL_ADDRESS"
        exit 101 ;;
    run:recovery)
        if [[ "$*" == *"--skip d_hangs"* ]]; then
            tests a_passes_before=ok b_faults=FAILED c_passes_between=ok e_fails_after=FAILED f_passes_after=ok
            echo "device fault: CUDA_ERROR_ILLEGAL_ADDRESS"
        else
            tests a_passes_before=ok c_passes_between=ok d_hangs=FAILED e_fails_after=FAILED f_passes_after=ok
            echo "test timed out after 5s"
        fi
        echo "a real failure after the hang"
        exit 101 ;;
    run:hello) echo "hello from thread 0 of block 0"; exit 0 ;;
    run:device-ops|run:shared-memory|run:launch-checks-debug) tests a=ok b=ok; passed 2; exit 0 ;;
    run:launch-checks)
        case "$1" in
            deep_panic) echo "test deep_panic_is_reported - should panic ... ok"; passed 1 ;;
            dims_) for n in 0 1 2 3 4 5 6 7 8 9; do echo "test dims_$n ... ok"; done; passed 10 ;;
            barrier_heavy) tests barrier_heavy=ok; passed 1 ;;
            float_assert) echo "test float_assert_keeps_the_values - should panic ... ok"; passed 1 ;;
            *) echo "partial-warp: lanes 0xffffffff active 0xffff ballot 0xffff shuffle-from-missing 47"
               passed 1 ;;
        esac
        exit 0 ;;
    run:concurrency) [[ "$*" == *include-ignored* ]] && exit 101; exit 0 ;;
    run:sanitize)
        if [[ -n "$sanitize" ]]; then
            tests a_writes_in_bounds=ok b_writes_past_its_allocation=FAILED c_passes_after=ok
            echo "note: compute-sanitizer $sanitize found 1 error in this test's launch of \`__gpurun_test_b_writes_past_its_allocation_0\`:"
            echo "========= Invalid __global__ write of size 4 bytes"
            exit 101
        fi
        tests a_writes_in_bounds=ok b_writes_past_its_allocation=ok c_passes_after=ok
        exit 0 ;;
    run:many-tests)
        if [[ "$*" == *--exact* ]]; then n=1; else n=1000; sleep 0.3; fi
        echo "test result: ok. $n passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.50s"
        exit 0 ;;
    run:print-throughput) print_lines "$2" $((threads * blocks)); exit 0 ;;
    run:rpc-latency) [[ "$2" == 0 ]] || sleep 0.2; exit 0 ;;
    run:benches)
        names="copy empty matmul round_trip spin steady"
        [[ "$*" != *" copy" ]] || names=copy
        for name in $names; do
            case "$name" in
                copy) echo "test copy       ... bench:       1,234.50 ns/iter (+/- 12.00) = 106 MB/s" ;;
                *) printf 'test %-10s ... bench:          56.78 ns/iter (+/- 0.90)\n' "$name" ;;
            esac
        done
        set -- $names
        echo "test result: ok. 0 passed; 0 failed; 0 ignored; $# measured; 0 filtered out; finished in 1.00s"
        exit 0 ;;
    launch:*) echo "launch_check: fill (ptr, u64, u32) and saxpy match the CPU"; exit 0 ;;
    recovery:*) echo "recovery_check: all 5 steps as expected"; exit 0 ;;
    haltests:*) tests cuda::tests::hardware_launch_globals_and_usage=ok; passed 27; exit 0 ;;
    kernels:*)
        for name in matmul_tiled block_sum histogram weighted_histogram inclusive_scan compact_above; do
            echo "real-kernels-check: $name ok (sizes)"
        done
        echo "real-kernels-check: all 6 kernels match the CPU"
        exit 0 ;;
    cupy:*) echo "ms_per_launch 0.0125"; exit 0 ;;
    printf:*) print_lines "$image" $(($1 * $2)); exit 0 ;;
    pingpong:*) echo "ns_per_round_trip 1850.0"; exit 0 ;;
    *) exit 0 ;;
esac
FAKE
    chmod +x "$1"
}

# A fake bundle run through the real rows with a fake runner: one row mismatches on purpose and
# one hangs past its (capped) limit; the table must show each verdict, the output folder must
# hold the table (written before the hanging row finished), the failing rows' logs and the GPU
# line, at most 8 files; a spent budget must leave rows not run. Then the output checks must
# reject broken output, the paste command must be short, and the baselines must compile.
self_test() {
    local tmp status table
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-self-test.XXXXXX")
    dir="$tmp/bundle"
    mkdir -p "$dir/images"
    arch=sm_90
    for fixture in $(fixture_names); do : >"$dir/images/$fixture.$ext"; done
    echo "arch sm_90" >"$dir/bundle-info"
    write_fake_runner "$tmp/fake-runner"
    out="$tmp/out"
    export FAKE_WRONG="run alloc " FAKE_HANG="run recovery --test-timeout 5 --skip b_faults" \
        FAKE_HANG_FILE="$tmp/hanging"
    GPURUN_CHECK_RUNNER="$tmp/fake-runner" GPURUN_CHECK_MAX_LIMIT=15 run_cases >"$tmp/printed" 2>/dev/null &
    local runner=$! waited=0
    while [[ ! -e "$FAKE_HANG_FILE" ]] && ((waited < 600)); do sleep 0.1; waited=$((waited + 1)); done
    # The hanging row is running: the table holds the rows before it and no row after it.
    cp "$out/table.txt" "$tmp/table-while-hanging" 2>/dev/null
    wait "$runner"
    status=$?
    table=$(cat "$tmp/printed")
    echo "gpu-check self-test against a fake runner (alloc mismatches and one recovery row hangs on purpose):"
    echo "$table"
    self_test_checks "$tmp" "$table" "$status"
    status=$?
    if ((status == 0)); then
        self_test_budget "$tmp" && self_test_output_checks "$tmp" && self_test_paste_command &&
            self_test_baselines_compile "$tmp" && self_test_printf_baseline "$tmp" &&
            self_test_glibc_gate "$tmp"
        status=$?
    fi
    rm -rf "$tmp"
    ((status == 0)) && echo "self-test: ok" >&2
    return "$status"
}

fail() { echo "self-test: $1" >&2; return 1; }

# The verdicts on TABLE (and the exit STATUS of the run that printed it).
self_test_checks() {
    local tmp="$1" table="$2" status="$3" rows name offset files total args
    [[ $status != 0 ]] || { fail "a mismatching row did not fail the run"; return; }
    grep -Eq '^run +alloc +- +- +0 +15s +7 .* MISMATCH$' <<<"$table" || { fail "mismatch not flagged"; return; }
    grep -Eq '^run +recovery +- +--test-timeout 5 --skip b_faults +101 +15s +(124|137) .* TIMED OUT \(15 s limit\)$' <<<"$table" ||
        { fail "the hanging row was not stopped at its limit"; return; }
    grep -Eq '^run +recovery +- +--test-timeout 5 --skip d_hangs +101 .* fault +ok$' <<<"$table" ||
        { fail "the fault row is wrong"; return; }
    grep -Eq '^run +args-env-exit +- +abort +nonzero .* 134 .* ok$' <<<"$table" ||
        { fail "nonzero expectation not honoured"; return; }
    grep -Eq '^launch +host-app-kernels .* fill \(ptr, u64, u32\), saxpy +ok$' <<<"$table" ||
        { fail "no host-launch row"; return; }
    grep -Eq '^kernels +real-kernels +- +- +0 .* 6 kernels vs CPU +ok$' <<<"$table" ||
        { fail "no real-kernels row"; return; }
    grep -Eq '^run +concurrency +- +--test-threads 8 .* ok$' <<<"$table" || { fail "no concurrent-slots row"; return; }
    grep -Eq '^run +many-tests .* [0-9.]+ ms/test \(1000 tests, start-up taken off\) +ok$' <<<"$table" ||
        { fail "many-tests row has no per-test time"; return; }
    grep -Eq '^run +rpc-latency .* [0-9.]+ us/round trip \(start-up taken off\) +ok$' <<<"$table" ||
        { fail "no RPC latency"; return; }
    grep -Eq '^run +benches +- +--bench --measurement-time 1 +0 .* copy 106 MB/s, empty 56\.78 ns/iter +ok$' <<<"$table" ||
        { fail "no benchmark row"; return; }
    total=$(cases | wc -l)
    [[ $(grep -c ' ok$' <<<"$table") == $((total - 2)) ]] || { fail "expected $((total - 2)) ok rows"; return; }
    grep -q "^rows: $total of $total done, 2 not as expected$" <<<"$table" || { fail "no verdict line"; return; }
    grep -Eq '^preflight +- +- +- +0 .* NVIDIA H100 80GB HBM3 sm_90 +ok$' <<<"$table" || { fail "no preflight row"; return; }
    for args in deep_panic "dims_ --test-threads 1" barrier_heavy; do
        grep -Eq "^run +launch-checks +- +$args +0 .* ok$" <<<"$table" ||
            { fail "no launch-checks row for $args"; return; }
    done
    grep -Eq "^run +launch-checks +- +--include-ignored --exact partial_warp_probe --nocapture +any .* exit 0: lanes 0xffffffff active 0xffff .* ok$" <<<"$table" ||
        { fail "the partial-warp probe's line is not recorded"; return; }
    for name in device-ops shared-memory launch-checks-debug; do
        grep -Eq "^run +$name +- +- +0 .* ok$" <<<"$table" || { fail "no $name row"; return; }
    done
    grep -Eq "^run +basic-debug +- +- +101 .* ok$" <<<"$table" || { fail "no debug basic row"; return; }
    grep -Eq "^run +launch-checks +- +float_assert +0 .* f32 values in the message +ok$" <<<"$table" ||
        { fail "no float assert row"; return; }
    if [[ "$target" == amdgcn ]]; then
        # No CUDA baselines, no CUDA-only rows.
        [[ $(grep -Ec ' start-up +ok$' <<<"$table") == 3 ]] || { fail "expected 3 start-up rows"; return; }
        ! grep -Eq '^(cupy|pingpong|printf|nvcc|jit|blocking|recovery|haltests) ' <<<"$table" ||
            { fail "a CUDA-only row ran for amdgcn"; return; }
        ! grep -Eq '^run +sanitize |--sanitize' <<<"$table" || { fail "a compute-sanitizer row ran for amdgcn"; return; }
    else
        [[ $(grep -Ec ' start-up +ok$' <<<"$table") == 5 ]] || { fail "expected 5 start-up rows"; return; }
        [[ $(grep -Ec ' MB/s \(start-up taken off\) +ok$' <<<"$table") == 4 ]] ||
            { fail "expected 4 MB/s rows (ours and CUDA printf, 1 and 1024 threads)"; return; }
        grep -Eq '^pingpong .* 1\.850 us/round trip +ok$' <<<"$table" || { fail "no ping-pong baseline"; return; }
        grep -Eq '^cupy .* 0\.0125 ms/launch\+sync +ok$' <<<"$table" || { fail "no CuPy baseline"; return; }
        grep -Eq '^run +sanitize +--sanitize memcheck +- +101 .* memcheck report +ok$' <<<"$table" ||
            { fail "no compute-sanitizer row"; return; }
        grep -Eq '^blocking +sanitize +--sanitize memcheck +- +101 .* memcheck report +ok$' <<<"$table" ||
            { fail "no compute-sanitizer row launching from the helper thread"; return; }
        grep -Eq '^run +hello +--sanitize memcheck +- +0 .* no memcheck finding +ok$' <<<"$table" ||
            { fail "no clean memcheck row"; return; }
        grep -Eq '^run +sanitize +- +- +0 .* ok$' <<<"$table" || { fail "no unsanitized sanitize row"; return; }
        grep -Eq '^blocking +concurrency +- +--test-threads 8 +0 .* ok$' <<<"$table" || { fail "no CUDA_LAUNCH_BLOCKING row"; return; }
        grep -Eq '^jit +basic +- +- +101 .* PTX JIT-compiled by the driver, [0-9.]+x the time with its cubin +ok$' <<<"$table" ||
            { fail "no JIT row timed against the cubin"; return; }
        grep -Eq '^recovery +host-app-kernels +- +- +0 .* ok$' <<<"$table" || { fail "no host-recovery row"; return; }
        grep -Eq '^run +benches +--flush-l2 +--bench --measurement-time 1 copy +0 .* copy 106 MB/s cold \(L2 flushed\) +ok$' <<<"$table" ||
            { fail "no cold benchmark row"; return; }
        grep -Eq '^haltests +gpurun-hal +- +cuda:: +0 .* 27 tests +ok$' <<<"$table" || { fail "no gpurun-hal tests row"; return; }
        for name in "per-test overhead, many-tests" "print, 1 thread" "print, 1024 threads" "RPC round trip"; do
            grep -Eq "^$name +[0-9.]+ [^|]+ +[0-9.]+ .* [0-9]+\.[0-9]{3}$" <<<"$table" ||
                { fail "no ratio for $name"; return; }
        done
    fi
    # Every left-aligned column starts where its header does, however long a cell is.
    rows=$(sed -n '/^kind /,/^$/p' <<<"$table" | sed '$d')
    for name in fixture launch args expected limit got time measured verdict; do
        offset=$(head -n1 <<<"$rows" | awk -v name="$name" '{ print index($0, " " name " ") + 1 }')
        ((offset > 1)) || offset=$(head -n1 <<<"$rows" | awk -v name="$name" '{ print index($0, " " name) + 1 }')
        awk -v at="$offset" 'substr($0, at - 1, 1) != " " || substr($0, at, 1) == " " { exit 1 }' \
            <<<"$rows" || { fail "column $name does not line up"; return; }
    done
    # The output folder: the table as printed, the failing rows' logs, the GPU line.
    files=$(find "$tmp/out" -type f | wc -l)
    ((files >= 3 && files <= 8)) || { fail "$files files in the output folder"; return; }
    ! find "$tmp/out" -type f | grep -q '[^A-Za-z0-9._/-]' || { fail "odd file names in the output folder"; return; }
    diff -q <(sed '/^logs: /d' <<<"$table") "$tmp/out/table.txt" >/dev/null || { fail "table.txt differs"; return; }
    if ! { grep -q '^=== run alloc: MISMATCH ===$' "$tmp/out/failures.txt" &&
        grep -q '^=== run recovery --test-timeout 5 --skip b_faults: TIMED OUT' "$tmp/out/failures.txt"; }; then
        fail "failing rows' logs missing"
        return
    fi
    [[ $(grep -c '^===' "$tmp/out/failures.txt") == 2 ]] || { fail "passing rows in failures.txt"; return; }
    grep -q '^date ' "$tmp/out/gpu.txt" || { fail "no gpu.txt"; return; }
    # Written while the hanging row ran: the rows before it, none after.
    if ! { grep -q '^run  *recovery .*--skip d_hangs' "$tmp/table-while-hanging" &&
        ! grep -q '^run  *many-tests' "$tmp/table-while-hanging"; }; then
        fail "the table was not written as rows finished"
        return
    fi
}

# With a budget of 0 s no row runs, and each says so.
self_test_budget() {
    local tmp="$1" table
    out="$tmp/out-budget"
    table=$(budget=0 GPURUN_CHECK_RUNNER="$tmp/fake-runner" run_cases 2>/dev/null)
    [[ $(grep -c 'NOT RUN (out of the 0 s budget)$' <<<"$table") == $(cases | wc -l) ]] ||
        { fail "a spent budget still ran rows"; return; }
}

# The output checks accept good output and reject broken output.
self_test_output_checks() {
    local tmp="$1" file
    file="$tmp/basic.out"
    "$tmp/fake-runner" run "$dir/images/basic.ptx" >"$file"
    check_basic_output "$file" >/dev/null || { fail "good basic output rejected"; return; }
    sed 's/^test grid_ids_are_in_range ... ok$/test grid_ids_are_in_range ... FAILED/' "$file" >"$file.extra"
    ! check_basic_output "$file.extra" >/dev/null || { fail "a fifth failure accepted"; return; }
    grep -v 'arithmetic is broken' "$file" >"$file.silent"
    ! check_basic_output "$file.silent" >/dev/null || { fail "a lost assert message accepted"; return; }
    file="$tmp/fault.out"
    "$tmp/fake-runner" run "$dir/images/fault-mid-print.ptx" --test-timeout 60 >"$file"
    check_fault_output "$file" >/dev/null || { fail "good fault output rejected"; return; }
    sed 's/device fault: .*/test timed out after 60s/' "$file" >"$file.timeout"
    ! check_fault_output "$file.timeout" >/dev/null || { fail "a timeout accepted as a fault"; return; }
    file="$tmp/recovery-fault.out"
    "$tmp/fake-runner" run "$dir/images/recovery.ptx" --test-timeout 5 --skip d_hangs >"$file"
    check_recovery_output "$file" fault >/dev/null || { fail "good fault row rejected"; return; }
    sed 's/^test c_passes_between ... ok$/test c_passes_between ... FAILED/' "$file" >"$file.poisoned"
    ! check_recovery_output "$file.poisoned" fault >/dev/null || { fail "a poisoned next test accepted"; return; }
    file="$tmp/recovery-hang.out"
    FAKE_HANG=none "$tmp/fake-runner" run "$dir/images/recovery.ptx" --test-timeout 5 --skip b_faults >"$file"
    check_recovery_output "$file" timeout >/dev/null || { fail "good timeout row rejected"; return; }
    grep -v 'timed out' "$file" >"$file.silent"
    ! check_recovery_output "$file.silent" timeout >/dev/null || { fail "a lost timeout accepted"; return; }
    if [[ "$target" == nvptx ]]; then
        file="$tmp/sanitize.out"
        "$tmp/fake-runner" run --sanitize memcheck "$dir/images/sanitize.ptx" >"$file"
        check_sanitize_output "$file" sanitized >/dev/null || { fail "good memcheck output rejected"; return; }
        grep -v 'Invalid __global__ write' "$file" >"$file.no-report"
        ! check_sanitize_output "$file.no-report" sanitized >/dev/null || { fail "a missing memcheck report accepted"; return; }
        sed 's/^test a_writes_in_bounds ... ok$/test a_writes_in_bounds ... FAILED/' "$file" >"$file.bystander"
        ! check_sanitize_output "$file.bystander" sanitized >/dev/null || { fail "a clean test's failure accepted"; return; }
        "$tmp/fake-runner" run "$dir/images/sanitize.ptx" >"$file.plain"
        check_sanitize_output "$file.plain" plain >/dev/null || { fail "good unsanitized output rejected"; return; }
        ! check_sanitize_output "$file" plain >/dev/null || { fail "a failure accepted without a sanitizer"; return; }
    fi
    file="$tmp/benches.out"
    # shellcheck disable=SC2086 # the names, split on spaces on purpose
    "$tmp/fake-runner" run "$dir/images/benches.$ext" --bench --measurement-time 1 >"$file"
    # shellcheck disable=SC2086
    check_bench_output "$file" $BENCHES >/dev/null || { fail "good bench output rejected"; return; }
    grep -v '^test matmul ' "$file" >"$file.lost"
    # shellcheck disable=SC2086
    ! check_bench_output "$file.lost" $BENCHES >/dev/null || { fail "a lost bench line accepted"; return; }
    sed 's/^test empty  *\.\.\. bench: .*/test empty  ... FAILED/' "$file" >"$file.failed"
    # shellcheck disable=SC2086
    ! check_bench_output "$file.failed" $BENCHES >/dev/null || { fail "a failed benchmark accepted"; return; }
    file="$tmp/launch-checks.out"
    "$tmp/fake-runner" run "$dir/images/launch-checks.$ext" dims_ --test-threads 1 >"$file"
    check_all_passed "$file" 10 >/dev/null || { fail "good dims_ output rejected"; return; }
    ! check_all_passed "$file" 1 >/dev/null || { fail "a wrong test count accepted"; return; }
    sed 's/^test dims_3 ... ok$/test dims_3 ... FAILED/' "$file" >"$file.failed"
    ! check_all_passed "$file.failed" 10 >/dev/null || { fail "a failed dims_ test accepted"; return; }
    grep -v '^test result' "$file" >"$file.none"
    ! check_all_passed "$file.none" >/dev/null || { fail "output without a result line accepted"; return; }
    file="$tmp/kernels.out"
    "$tmp/fake-runner" kernels "$dir/images/real-kernels.$ext" >"$file"
    check_kernels_output "$file" >/dev/null || { fail "good real-kernels output rejected"; return; }
    sed 's/^real-kernels-check: inclusive_scan ok .*/real-kernels-check: inclusive_scan FAILED: element 1 is 3, not 4/' \
        "$file" >"$file.wrong"
    ! check_kernels_output "$file.wrong" >/dev/null || { fail "a failed kernel accepted"; return; }
    grep -v 'match the CPU' "$file" >"$file.cut"
    ! check_kernels_output "$file.cut" >/dev/null || { fail "a run without its closing line accepted"; return; }
    file="$tmp/print.out"
    "$tmp/fake-runner" run --threads 2 --blocks 2 "$dir/images/print-throughput.ptx" --bytes 640 >"$file"
    check_print_output "$file" 640 4 >/dev/null || { fail "good print output rejected"; return; }
    ! check_print_output "$file" 640 2 >/dev/null || { fail "wrong threads accepted"; return; }
    head -c 576 "$file" >"$file.short"
    ! check_print_output "$file.short" 640 4 >/dev/null || { fail "missing line accepted"; return; }
    { head -n 9 "$file"; head -n 1 "$file"; } >"$file.twice"
    ! check_print_output "$file.twice" 640 4 >/dev/null || { fail "duplicate line accepted"; return; }
    sed '3s/\.\.\.$/.x./' "$file" >"$file.garbled"
    ! check_print_output "$file.garbled" 640 4 >/dev/null || { fail "garbled line accepted"; return; }
}

# The command to paste runs from the default bundle and fits the device tool's 2,000 characters.
self_test_paste_command() {
    local command
    command=$(paste_command "$DEFAULT_BUNDLE")
    [[ "$command" == "bash scripts/gpu-check.sh --bundle $DEFAULT_BUNDLE --out \"\$OUT\"" ]] ||
        { fail "paste command: $command"; return; }
    ((${#command} < 2000)) || { fail "paste command too long"; return; }
    (cd "$root" && git check-ignore -q "$DEFAULT_BUNDLE") || { fail "$DEFAULT_BUNDLE is not ignored by git"; return; }
}

# The CUDA baselines compile (nvcc 13 from scripts/setup.sh, with a host C++ compiler): what the
# GPU machine's nvcc rows will do.
self_test_baselines_compile() {
    local tmp="$1" nvcc program
    nvcc=$(command -v nvcc || echo "$HOME/.local/share/gpurun/cuda-nvcc-13/nvidia/cu13/bin/nvcc")
    if [[ ! -x "$nvcc" ]]; then
        in_ci && { fail "CI=true but nvcc is missing (scripts/setup.sh installs it)"; return; }
        echo "self-test: not checked: the baselines compile (no nvcc; scripts/setup.sh installs it)" >&2
        return 0
    fi
    if ! command -v g++ >/dev/null; then
        echo "self-test: not checked: the baselines compile (nvcc needs a host C++ compiler, g++)" >&2
        return 0
    fi
    for program in printf_lines pingpong; do
        "$nvcc" -O2 -arch=sm_90 -c -o "$tmp/$program.o" "$root/scripts/gpu-baselines/$program.cu" ||
            { fail "scripts/gpu-baselines/$program.cu does not compile"; return; }
    done
    python3 -m py_compile "$root/scripts/gpu-baselines/cupy_launches.py" ||
        { fail "cupy_launches.py does not compile"; return; }
}

# The printf baseline, built for the CPU against scripts/gpu-baselines/host-stand-in (a launch
# runs each thread in turn), prints what the print rows' check accepts: its own lines, not a
# stand-in's, so a baseline whose lines differ from print-throughput's fails here, not on a GPU.
self_test_printf_baseline() {
    local tmp="$1" program threads blocks bytes
    program="$tmp/printf_lines_cpu"
    if ! command -v g++ >/dev/null; then
        in_ci && { fail "CI=true but g++ is missing (scripts/setup.sh installs it)"; return; }
        echo "self-test: not checked: the printf baseline's lines (no g++; scripts/setup.sh installs it)" >&2
        return 0
    fi
    g++ -std=c++17 -O2 -x c++ -I "$root/scripts/gpu-baselines/host-stand-in" -o "$program" \
        "$root/scripts/gpu-baselines/printf_lines.cu" || { fail "printf_lines.cu does not build for the CPU"; return; }
    for threads in "1 1" "256 4"; do
        read -r threads blocks <<<"$threads"
        for bytes in 0 $((PRINT_LINE_BYTES * 1000)); do
            "$program" "$bytes" "$threads" "$blocks" >"$tmp/printf.out" ||
                { fail "printf_lines $bytes $threads $blocks failed on the CPU"; return; }
            check_print_output "$tmp/printf.out" "$bytes" $((threads * blocks)) >"$tmp/printf.problem" ||
                { fail "printf_lines $bytes $threads $blocks: $(cat "$tmp/printf.problem")"; return; }
        done
    done
}

# The glibc gate of a bundle: a program linked as this machine links (gcc, glibc 2.34 or newer
# for `__libc_start_main`) is refused, the same program linked by zig against BUNDLE_GLIBC passes.
self_test_glibc_gate() {
    local tmp="$1" tool
    for tool in gcc objdump; do
        if ! command -v "$tool" >/dev/null; then
            in_ci && { fail "CI=true but $tool is missing"; return; }
            echo "self-test: not checked: the glibc gate (no $tool)" >&2
            return 0
        fi
    done
    if ! python3 -m ziglang version >/dev/null 2>&1; then
        in_ci && { fail "CI=true but zig is missing (scripts/setup.sh installs it)"; return; }
        echo "self-test: not checked: the glibc gate (no zig; scripts/setup.sh installs it)" >&2
        return 0
    fi
    printf '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n' >"$tmp/hello.c"
    gcc -o "$tmp/hello-here" "$tmp/hello.c" || { fail "gcc cannot build a hello program"; return; }
    python3 -m ziglang cc -target "x86_64-linux-gnu.$BUNDLE_GLIBC" -o "$tmp/hello-old" "$tmp/hello.c" ||
        { fail "zig cannot build for glibc $BUNDLE_GLIBC"; return; }
    "$tmp/hello-old" >/dev/null || { fail "the program zig linked for glibc $BUNDLE_GLIBC does not run here"; return; }
    glibc_at_most "$BUNDLE_GLIBC" "$tmp/hello-old" 2>"$tmp/gate.err" ||
        { fail "the gate refused zig's glibc $BUNDLE_GLIBC program: $(cat "$tmp/gate.err")"; return; }
    if version_newer "$(glibc_needed "$tmp/hello-here")" "$BUNDLE_GLIBC"; then
        ! glibc_at_most "$BUNDLE_GLIBC" "$tmp/hello-here" 2>"$tmp/gate.err" ||
            { fail "the gate let through a program that needs glibc $(glibc_needed "$tmp/hello-here")"; return; }
        grep -q "needs glibc" "$tmp/gate.err" || { fail "the gate's refusal does not say why: $(cat "$tmp/gate.err")"; return; }
    else
        echo "self-test: not checked: the gate's refusal (this machine's gcc links for glibc $BUNDLE_GLIBC or older)" >&2
    fi
    ! glibc_at_most "$BUNDLE_GLIBC" "$tmp/hello.c" 2>/dev/null || { fail "the gate let through a file that is not ELF"; return; }
}

if [[ -n "$self_test" ]]; then
    self_test
    exit $?
fi
if [[ -n "$preflight_of" ]]; then
    preflight "$preflight_of"
    exit $?
fi
if [[ -n "$make_bundle" ]]; then
    mkdir -p "$make_bundle" || exit 2
    make_bundle=$(cd "$make_bundle" && pwd)
    build_bundle "$make_bundle"
    report_bundle "$make_bundle"
    exit 0
fi
if [[ -z "$bundle" ]]; then
    bundle=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
    build_bundle "$bundle"
elif [[ -e "$bundle/bundle-info" ]] && ! grep -qx "target $target" "$bundle/bundle-info"; then
    echo "gpu-check: $bundle was not made for $target (see $bundle/bundle-info)" >&2
    exit 2
fi
dir=$(cd "$bundle" && pwd)
if [[ -z "${GPURUN_CHECK_RUNNER:-}" && ! -x "$dir/cargo-gpurun" ]]; then
    echo "gpu-check: $dir/cargo-gpurun is missing (make one with --make-bundle)" >&2
    exit 2
fi
[[ -n "$arch" ]] || arch=$(awk '$1 == "arch" { print $2 }' "$dir/bundle-info" 2>/dev/null)
[[ -n "$arch" ]] || arch=$(detect_arch)
[[ -n "$out" ]] || out="${OUT:-$dir/out}"
unpack_images "$dir"
# A copied bundle may give a cubin an older time than its PTX, and the loader would take that
# cubin for stale and JIT the PTX in every slot: the cubins are as new as the images here.
for cubin in "$dir"/images/*.cubin; do
    [[ ! -e "$cubin" ]] || touch "$cubin"
done
if run_cases; then exit 0; else exit 1; fi
