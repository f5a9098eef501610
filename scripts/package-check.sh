#!/usr/bin/env bash
# Every published crate builds and works from its packaged `.crate` alone, as a user gets it
# from a registry, without this repository:
#   1. `cargo package` of the public crates (the workspace members without `publish = false`),
#      without cargo's own verification build: the steps below build every one of them from its
#      unpacked package, which the end of this script checks in their build logs. Every package
#      must also carry its readme and both license files. Then each crate's documentation,
#      built as docs.rs builds it (its [package.metadata.docs.rs]), without a warning.
#   2. The `.crate`s unpacked into a scratch directory whose `.cargo/config.toml` patches
#      crates.io's names to them, so every cargo started below it (the nested ones too: the
#      device builds, the nvptx linker's build) takes our crates from the packages.
#   3. `cargo install` of cargo-gpurun from its unpacked package into a scratch root, run on the
#      `basic` fixture on the host emulation: 7 passed, 4 failed on purpose, 2 ignored, exit 101.
#   4. examples/saxpy, copied, depending on `gpurun-test = "0.1"` and `gpurun = "0.1"` instead of
#      paths: `cargo test` runs its device test and its host-driven launch on the host emulation,
#      and with GPURUN_BACKEND=cuda its kernels build for nvptx with the nvptx linker built from
#      the packaged gpurun-build (the test list is read from the PTX, so no GPU is needed).
#      That linker is built in the device crate's target directory, not beside the packaged
#      sources (for a crate from crates.io, cargo's registry).
#
#   scripts/package-check.sh      (run by scripts/test.sh; needs what scripts/setup.sh installs)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
started=$SECONDS
say() { echo "package-check: $*" >&2; }
fail() {
    say "$*"
    exit 1
}
# Runs a command with its output in LOG, shown when it fails (cargo warns about each patch a
# build leaves unused, which is every build here).
quietly() { # LOG COMMAND...
    local log=$1
    shift
    "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "failed: $*"; }
}
lap=$SECONDS
timings=()
timed() {
    timings+=("$1 $((SECONDS - lap))s")
    lap=$SECONDS
}

# The public crates (the workspace members without `publish = false`), one line for each target
# docs.rs documents them for: NAME|VERSION|FEATURES|TARGET, with the features and targets of the
# crate's [package.metadata.docs.rs] (no target: the host's).
metadata=$(cargo metadata --format-version 1 --no-deps --locked)
plan=$(python3 -c '
import json, sys
for package in json.load(sys.stdin)["packages"]:
    if package["publish"] is not None:
        continue
    name = package["name"]
    docs_rs = ((package.get("metadata") or {}).get("docs") or {}).get("rs") or {}
    unknown = sorted(set(docs_rs) - {"features", "targets"})
    if unknown:
        sys.exit(f"{name}: package.metadata.docs.rs has keys this check does not apply: {unknown}")
    features = ",".join(docs_rs.get("features", []))
    for target in docs_rs.get("targets") or [""]:
        print(name, package["version"], features, target, sep="|")
' <<<"$metadata")
mapfile -t public < <(cut -d'|' -f1,2 <<<"$plan" | sort -u)
((${#public[@]})) || fail "no public crate in the workspace"
target_dir=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])' <<<"$metadata")
# A target directory of its own: cargo's verification links each package's binaries into its
# target directory, which would replace the workspace's own `cargo-gpurun` there.
check_target="$target_dir/package-check"
# The fixtures' target directory, where the end-to-end tests build the device runtime, nightly's
# `core` and `alloc` for nvptx and the nvptx linker's dependencies (as tests/e2e/saxpy_example.rs
# builds the example there).
fixtures_target="${CARGO_TARGET_DIR:-fixtures/target}"
[[ "$fixtures_target" == /* ]] || fixtures_target="$root/$fixtures_target"

# 1. Package and verify. --allow-dirty: what is checked is what the packages hold, which is the
# working tree's files (in CI a fresh clone).
packages=()
for crate in "${public[@]}"; do
    packages+=(-p "${crate%|*}")
done
CARGO_TARGET_DIR="$check_target" cargo package --locked --allow-dirty --quiet --no-verify "${packages[@]}"
for crate in "${public[@]}"; do
    name=${crate%|*} version=${crate#*|}
    file="$check_target/package/$name-$version.crate"
    [[ -f "$file" ]] || fail "cargo package made no $file"
    listing=$(tar -tzf "$file")
    for needed in Cargo.toml Cargo.lock README.md LICENSE-MIT LICENSE-APACHE; do
        grep -qx "$name-$version/$needed" <<<"$listing" || fail "$name-$version.crate has no $needed"
    done
done
timed "package"

# Documentation as docs.rs builds it: each public crate on its own, with the features and
# targets of its [package.metadata.docs.rs], warnings as errors. docs.rs takes a GPU target's
# `core` and `alloc` from rustup; here the nightly builds them (-Zbuild-std).
while IFS='|' read -r name _ features target; do
    options=(--quiet --locked --no-deps -p "$name")
    [[ -z "$features" ]] || options+=(--features "$features")
    if [[ -n "$target" ]]; then
        RUSTDOCFLAGS="-D warnings" cargo "+${GPURUN_TOOLCHAIN:-nightly}" doc "${options[@]}" \
            --target "$target" -Zbuild-std=core,alloc
    else
        RUSTDOCFLAGS="-D warnings" cargo doc "${options[@]}"
    fi
done <<<"$plan"
timed "docs"

# 2. Unpack, and patch crates.io's names to the packages for every cargo below the scratch root.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/package-check.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/crates" "$scratch/.cargo"
echo '[patch.crates-io]' >"$scratch/.cargo/config.toml"
for crate in "${public[@]}"; do
    name=${crate%|*} version=${crate#*|}
    tar -xzf "$check_target/package/$name-$version.crate" -C "$scratch/crates"
    printf '%s = { path = "%s" }\n' "$name" "$scratch/crates/$name-$version" >>"$scratch/.cargo/config.toml"
done
cd "$scratch"

# 3. Install cargo-gpurun from its package. The packaged Cargo.lock names our crates as crates.io
# packages; `cargo update --workspace` points those entries at the patches and keeps every other
# version, so the install can be --locked. A debug build: it shares the verification's artifacts.
cli_version=$(printf '%s\n' "${public[@]}" | awk -F'|' '$1 == "cargo-gpurun" { print $2 }')
[[ -n "$cli_version" ]] || fail "cargo-gpurun is not a public crate"
cli="$scratch/crates/cargo-gpurun-$cli_version"
quietly "$scratch/install.out" cargo update --manifest-path "$cli/Cargo.toml" --workspace
quietly "$scratch/install.out" cargo install --locked --debug --path "$cli" --root "$scratch/root" \
    --target-dir "$check_target"
# The device runtime and its macros on their own (the device crates below build them only in
# nested cargo runs, whose output is not ours to read).
runtime_version=$(printf '%s\n' "${public[@]}" | awk -F'|' '$1 == "gpurun" { print $2 }')
runtime="$scratch/crates/gpurun-$runtime_version"
quietly "$scratch/runtime.out" cargo update --manifest-path "$runtime/Cargo.toml" --workspace
quietly "$scratch/runtime.out" cargo build --locked --manifest-path "$runtime/Cargo.toml" \
    --target-dir "$check_target"
timed "install"
status=0
# Started as cargo starts a subcommand, by path: cargo would prefer a `cargo-gpurun` in
# $CARGO_HOME/bin to the one on PATH.
(cd "$root/fixtures" && "$scratch/root/bin/cargo-gpurun" gpurun test -p basic --target host -- \
    --test-threads 2) >"$scratch/basic.out" 2>&1 || status=$?
if [[ $status != 101 ]] || ! grep -q '^test result: FAILED\. 7 passed; 4 failed; 2 ignored;' "$scratch/basic.out"; then
    cat "$scratch/basic.out" >&2
    fail "the installed cargo-gpurun on fixtures/basic: exit $status, expected 101 with 7 passed, 4 failed, 2 ignored"
fi
timed "basic"

# 4. examples/saxpy against the packages.
tar -C "$root/examples" --exclude=target -cf - saxpy | tar -C "$scratch" -xf -
use_version() { # FILE, the dependency line in it, the line that replaces it
    grep -qxF "$2" "$1" || fail "$1 has no line \`$2\` to replace"
    python3 - "$@" <<'PY'
import sys
path, old, new = sys.argv[1:]
with open(path, encoding="utf-8") as file:
    lines = file.read().split("\n")
with open(path, "w", encoding="utf-8") as file:
    file.write("\n".join(new if line == old else line for line in lines))
PY
}
use_version saxpy/Cargo.toml 'gpurun-test = { path = "../../crates/gpurun-test" }' 'gpurun-test = "0.1"'
use_version saxpy/kernels/Cargo.toml 'gpurun = { path = "../../../crates/gpurun" }' 'gpurun = "0.1"'
# As for the install: the copied lock files point at the patches, other versions stay.
quietly "$scratch/saxpy.out" cargo update --manifest-path saxpy/Cargo.toml --workspace
quietly "$scratch/saxpy.out" cargo update --manifest-path saxpy/kernels/Cargo.toml --workspace
export CARGO_TARGET_DIR="$fixtures_target"
(cd saxpy && GPURUN_BACKEND=host cargo test --locked) >"$scratch/saxpy.out" 2>&1 ||
    { cat "$scratch/saxpy.out" >&2; fail "cargo test of examples/saxpy on the packages failed"; }
for name in saxpy_one_multiplies_and_adds saxpy_matches_the_cpu; do
    grep -q "^test $name \.\.\. ok$" "$scratch/saxpy.out" ||
        { cat "$scratch/saxpy.out" >&2; fail "examples/saxpy on the packages: $name did not pass"; }
done
timed "saxpy"
(cd saxpy && GPURUN_BACKEND=cuda cargo test --locked --test gpu -- --list) >"$scratch/nvptx.out" 2>&1 ||
    { cat "$scratch/nvptx.out" >&2; fail "examples/saxpy's kernels on the packages: the nvptx build failed"; }
grep -qx 'saxpy_one_multiplies_and_adds: test' "$scratch/nvptx.out" ||
    { cat "$scratch/nvptx.out" >&2; fail "examples/saxpy's kernels on the packages: no test listed from the PTX"; }
timed "saxpy-nvptx"

# rustc linked them with the linker gpurun-test built from the packaged gpurun-build, in the
# device crate's target directory (cargo's own choice would be a `target/` beside those sources:
# for a gpurun-build from crates.io, inside cargo's registry).
linker=$(readlink "$CARGO_TARGET_DIR/gpurun/gpurun-nvptx-link") || fail "no nvptx linker link in $CARGO_TARGET_DIR/gpurun"
[[ "$linker" == "$CARGO_TARGET_DIR/gpurun/nvptx-linker/"* ]] ||
    fail "the kernels were linked with $linker, not one built in $CARGO_TARGET_DIR/gpurun/nvptx-linker"

# Every public crate was compiled from its unpacked package by one of the builds above (what
# cargo's verification would have done once more).
for crate in "${public[@]}"; do
    name=${crate%|*} version=${crate#*|}
    grep -qF "Compiling $name v$version ($scratch/crates/$name-$version)" \
        "$scratch/install.out" "$scratch/runtime.out" "$scratch/saxpy.out" ||
        fail "no build above compiled $name from its package"
done

say "ok in $((SECONDS - started))s (${timings[*]}): ${#public[@]} crates packaged; the packaged cargo-gpurun ran fixtures/basic (7 passed, 4 failed, 2 ignored); examples/saxpy passed on the packages and built for nvptx"
