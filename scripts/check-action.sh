#!/usr/bin/env bash
# Checks the composite action (action.yml) and the example workflow that uses it
# (docs/github-actions-gpu.yml), without GitHub:
#   - actionlint (with shellcheck on the `run:` scripts) on the example workflow, and on the
#     action's steps turned into a workflow (scripts/action-as-workflow.py) with a job that calls
#     the action with every input, which actionlint checks against action.yml;
#   - the action's test and summary steps, run as a runner runs them (bash -eo pipefail, the
#     step's environment, GITHUB_OUTPUT/GITHUB_STEP_SUMMARY files), on the `basic` fixture with
#     the cargo-gpurun built from this checkout: exit status 101, one `::error` annotation per
#     failed test, the JUnit report and the summary table; the `sanitize` input reaching
#     `cargo gpurun test --sanitize` (refused there for a host build, as it must be); and the
#     `coverage` input writing its report in the folder the upload step takes.
#
#   scripts/check-action.sh        (scripts/setup.sh installs actionlint, shellcheck and PyYAML)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

missing=()
for tool in actionlint shellcheck; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
python3 -c 'import yaml' 2>/dev/null || missing+=(PyYAML)
if ((${#missing[@]})); then
    echo "check-action: ${missing[*]} missing (installed by scripts/setup.sh)" >&2
    if [[ "${CI:-}" == true ]]; then exit 1; fi
    echo "check-action: SKIPPED" >&2
    exit 0
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/check-action.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail() { echo "check-action: $*" >&2; exit 1; }

# 1. Lints. actionlint resolves `uses: ./` from the project root it finds (a `.git` beside
# `.github/workflows`): a scratch project whose action.yml is this one.
actionlint -config-file scripts/actionlint.yaml docs/github-actions-gpu.yml
mkdir -p "$scratch/project/.git" "$scratch/project/.github/workflows"
ln -s "$root/action.yml" "$scratch/project/action.yml"
python3 scripts/action-as-workflow.py action.yml >"$scratch/project/.github/workflows/action.yml"
(cd "$scratch/project" && actionlint .github/workflows/action.yml) ||
    fail "actionlint found problems in action.yml (shown above as .github/workflows/action.yml)"

# 2. The action's steps, run for real. Its inputs reach the steps through `env:`; here they are
# set as the runner would set them.
cargo build --quiet --locked -p cargo-gpurun
target_dir=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
mkdir -p "$scratch/bin"
ln -s "$target_dir/debug/cargo-gpurun" "$scratch/bin/cargo-gpurun"
step_script() {
    python3 - "$1" <<'PY'
import sys, yaml
with open("action.yml", encoding="utf-8") as file:
    action = yaml.safe_load(file)
steps = [step for step in action["runs"]["steps"] if step.get("id") == sys.argv[1]]
if len(steps) != 1 or "run" not in steps[0]:
    sys.exit(f"action.yml has no run step with id `{sys.argv[1]}`")
sys.stdout.write(steps[0]["run"])
PY
}
step_script test >"$scratch/test.sh"
# The summary step has no id: it is the one that writes GITHUB_STEP_SUMMARY.
python3 - >"$scratch/summary.sh" <<'PY'
import yaml
with open("action.yml", encoding="utf-8") as file:
    action = yaml.safe_load(file)
runs = [step["run"] for step in action["runs"]["steps"] if "GITHUB_STEP_SUMMARY" in step.get("run", "")]
assert len(runs) == 1, "one step writes the step summary"
print(runs[0])
PY
export GITHUB_ACTIONS=true GITHUB_ACTION_PATH="$root" GITHUB_OUTPUT="$scratch/output"
export GITHUB_STEP_SUMMARY="$scratch/summary.md" PATH="$scratch/bin:$PATH"
export ARGS="-p basic --target host" TEST_ARGS="--test-threads 2" PARTITION="" SANITIZE="" COVERAGE=false
export JUNIT="$scratch/junit.xml"
unset CARGO_TARGET_DIR
status=0
(cd fixtures && bash --noprofile --norc -eo pipefail "$scratch/test.sh") >"$scratch/stdout" \
    2>"$scratch/stderr" || status=$?
[[ $status == 101 ]] || { cat "$scratch/stderr" >&2; fail "test step exited with $status, expected 101"; }
annotations=$(grep -c '^::error .*title=' "$scratch/stdout" || true)
[[ $annotations == 4 ]] || fail "expected 4 ::error annotations, got $annotations"
grep -qx "junit=$JUNIT" "$GITHUB_OUTPUT" || fail "the test step did not set its junit output"
[[ -s "$JUNIT" ]] || fail "no JUnit report at $JUNIT"
(cd fixtures && bash --noprofile --norc -eo pipefail "$scratch/summary.sh") ||
    fail "the summary step failed"
grep -q '^| basic | 7 | 4 | 2 |$' "$GITHUB_STEP_SUMMARY" ||
    { cat "$GITHUB_STEP_SUMMARY" >&2; fail "the step summary has no row 'basic | 7 | 4 | 2'"; }
# shellcheck disable=SC2016 # the backquotes are Markdown, not command substitution
grep -q '^- `basic`: `fails_with_assert`: ' "$GITHUB_STEP_SUMMARY" ||
    fail "the step summary does not list the failed tests"
# The sanitize input becomes --sanitize: compute-sanitizer checks CUDA only, so a host build is
# refused before anything is built.
status=0
(cd fixtures && ARGS="-p basic --target host" SANITIZE=memcheck \
    bash --noprofile --norc -eo pipefail "$scratch/test.sh") >"$scratch/stdout" 2>"$scratch/stderr" ||
    status=$?
[[ $status == 1 ]] || { cat "$scratch/stderr" >&2; fail "with sanitize=memcheck on host the test step exited with $status, expected 1"; }
grep -q -- '--sanitize runs compute-sanitizer' "$scratch/stderr" ||
    { cat "$scratch/stderr" >&2; fail "the sanitize input did not reach cargo gpurun test"; }
# The coverage input becomes --coverage, and the step names the report's folder for the upload.
: >"$GITHUB_OUTPUT"
status=0
(cd fixtures && ARGS="-p coverage" COVERAGE=true \
    bash --noprofile --norc -eo pipefail "$scratch/test.sh") >"$scratch/stdout" 2>"$scratch/stderr" ||
    status=$?
[[ $status == 0 ]] || { cat "$scratch/stderr" >&2; fail "with coverage=true the test step exited with $status, expected 0"; }
coverage_dir=$(sed -n 's/^coverage=//p' "$GITHUB_OUTPUT")
[[ -s "$coverage_dir/lcov.info" && -s "$coverage_dir/html/index.html" ]] ||
    { cat "$scratch/stderr" >&2; fail "with coverage=true there is no report in '$coverage_dir'"; }
echo "check-action: ok (actionlint clean; the action's test step ran basic: 7 passed, 4 failed, 2 ignored; sanitize reaches --sanitize; coverage writes its report where the upload looks)" >&2
