# Sourced by the pipeline tests: PASS/FAIL reporting in the suite's format, and a scratch
# directory. Each test file runs cases; `check NAME CMD...` passes when CMD succeeds.
set -u
T=$(mktemp -d "${DS_TEST_TMP:-/tmp}/$(basename "$0" .sh).XXXXXX")
DS_ROOT=${DS_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${BIN:-bin}
PATH="$DS_ROOT/$BIN:$PATH"
BUILD_DIR="$DS_ROOT/${BUILD:-build}"
PYTHON=${PYTHON:-/usr/bin/python3}
_failures=0

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; _failures=$((_failures + 1)); }
# check NAME CMD...: runs CMD, PASS when it exits 0.
check() {
    local name=$1; shift
    if "$@"; then pass "$name"; else fail "$name" "command failed: $*"; fi
}
# expect_status NAME CODE CMD...: PASS when CMD exits with CODE.
expect_status() {
    local name=$1 want=$2; shift 2
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then pass "$name"; else
        fail "$name" "exit $rc, want $want: $*"; sed 's/^/      /' "$T/err" | head -5; fi
}
finish() { exit $((_failures > 0)); }
