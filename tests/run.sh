#!/bin/bash
# Runs the whole suite: C unit tests (build/tests/*), pipeline tests (tests/shell/*.sh) and
# reference tests against PyTorch (tests/ref/*.py, Debian's /usr/bin/python3).
# Every test prints "PASS name" / "FAIL name" lines; a test that exits non-zero without a
# FAIL line counts as one failure. Ends with "N passed, N failed"; exits 1 on any failure.
#   tests/run.sh [PATTERN]     only tests whose file name contains PATTERN
set -u
cd "$(dirname "$0")/.."
export DS_ROOT=$PWD
export BIN=${BIN:-bin} BUILD=${BUILD:-build}
export PATH="$DS_ROOT/$BIN:$PATH"
export PYTHON=${PYTHON:-/usr/bin/python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pattern=${1:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/ds-test.XXXXXX")
export DS_TEST_TMP=$work
trap 'rm -rf "$work"' EXIT

passed=0 failed=0 failed_names=()
run_one() {  # kind file command...
    local name=$1; shift
    [ -n "$pattern" ] && [[ "$name" != *"$pattern"* ]] && return
    local log="$work/$(basename "$name").log" t0=$SECONDS
    timeout 900 "$@" >"$log" 2>&1
    local rc=$? p f
    p=$(grep -c '^PASS ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name (exit $rc)" >>"$log"
        f=1
    fi
    passed=$((passed + p)); failed=$((failed + f))
    printf '%-40s %3d passed, %d failed  (%ds)\n' "$name" "$p" "$f" $((SECONDS - t0))
    if [ "$f" -ne 0 ]; then
        failed_names+=("$name")
        sed 's/^/    /' "$log" | tail -40
    fi
}

for t in "$BUILD"/tests/*; do
    [ -x "$t" ] && [ -f "$t" ] && run_one "unit/$(basename "$t")" "$t"
done
for t in tests/shell/test_*.sh; do
    [ -f "$t" ] && run_one "shell/$(basename "$t")" bash "$t"
done
for t in tests/ref/test_*.py; do
    [ -f "$t" ] && run_one "ref/$(basename "$t")" "$PYTHON" "$t"
done

[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
