#!/bin/bash
# Runs the suite: C unit tests (build/tests/*), pipeline tests (tests/shell/*.sh) and reference
# tests against PyTorch (tests/ref/*.py, Debian's /usr/bin/python3).
# Every test prints "PASS name" / "FAIL name" lines; a test that exits non-zero without a
# FAIL line counts as one failure. "SKIP name: reason" marks a check this machine cannot
# make (the GPU tests without a GPU): counted apart, listed, never a pass. Ends with
# "N passed, N failed"; exits 1 on any failure.
#   tests/run.sh [PATTERN]          the quick tier (make test): the normal build, every test
#                                   but the long ones, only tests whose file name contains
#                                   PATTERN; the last line also counts what it left out
#   tests/run.sh --long [...]       every test and case, the long ones too (make check)
#   tests/run.sh --san [...]        then the unit and pipeline tests again on the sanitizer
#                                   build (make SAN=1: bin-san/, build-san/); the last line
#                                   counts both passes
#   tests/run.sh --san-only [...]   the sanitizer pass alone
#   tests/run.sh --emu [...]        then the CUDA tests on the emulated device (make emu:
#                                   bin-emu/, build-emu/), and again on its AddressSanitizer
#                                   and ThreadSanitizer builds where those are built
#   tests/run.sh --emu-only [...]   the emulated device's passes alone
# Two tiers, no list to edit: a test that takes long marks itself with a line near its top,
# "# LONG: why" (shell, Python) or "/* LONG: why */" (C), and the quick tier leaves it out;
# a long part of a test asks `long NAME` (lib.sh, reflib.py) or check_long (check.h), which
# prints "LONG NAME" and is false in the quick tier. DS_TEST_LONG=1 tells the tests the long
# tier is running (fault-injection loops then run at their full counts).
# In the sanitizer pass every AddressSanitizer, LeakSanitizer or UBSan report fails the test
# whose process made it, whatever that process's exit status (reports go to files, so a tool
# that is expected to exit 1 cannot hide one). Leaks inside third-party libraries are
# suppressed by tests/lsan.supp. The PyTorch reference tests are left out of that pass:
# Python and torch are not instrumented, and they would only test the normal build again.
# Timing: no test compares a time or a rate with a threshold (tests/README.md); `timeout`
# below and in the tests is a hang guard, far above any test's run time.
set -u
cd "$(dirname "$0")/.."
export DS_ROOT=$PWD
export PYTHON=${PYTHON:-/usr/bin/python3}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
passes="normal" long=0
while [ $# -gt 0 ]; do
    case $1 in
    --long) long=1; shift ;;
    --san) passes="normal san"; shift ;;
    --san-only) passes="san"; shift ;;
    --emu) passes="$passes emu emu-asan emu-tsan"; shift ;;
    --emu-only) passes="emu emu-asan emu-tsan"; shift ;;
    *) break ;;
    esac
done
export DS_TEST_LONG=$long
pattern=${1:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/ds-test.XXXXXX")
export DS_TEST_TMP=$work
trap 'rm -rf "$work"' EXIT
passed=0 failed=0 skipped=0 left=0 failed_names=() skip_lines=() left_names=()
# The reason a test file gives for being long ("# LONG: why" or "/* LONG: why */" in its first
# 40 lines), or nothing.
long_mark() { head -n 40 "$1" 2>/dev/null | sed -n 's@^\(# \|/\* \)LONG: \(.*\)$@\2@p' | sed 's@ \*/$@@' | head -n 1; }
run_one() {  # name source command...
    local name=$1 src=$2; shift 2
    [ -n "$pattern" ] && [[ "$name" != *"$pattern"* ]] && return
    local why
    why=$(long_mark "$src")
    if [ "$long" = 0 ] && [ -n "$why" ]; then
        printf '%-40s long: left to make check (%s)\n' "$name" "$why"
        left=$((left + 1)); left_names+=("$name")
        return
    fi
    local log="$work/$(basename "$name").log" t0=$SECONDS
    timeout 900 "$@" >"$log" 2>&1
    local rc=$? p f k l
    p=$(grep -c '^PASS ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    k=$(grep -c '^SKIP ' "$log")
    l=$(grep -c '^LONG ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name (exit $rc)" >>"$log"
        f=1
    fi
    if [ -n "$san_logs" ] && [ -n "$(ls "$san_logs")" ]; then
        # A report file is opened as a report starts; one left empty belongs to a process that
        # was killed (test_crash.sh kills with SIGKILL) before it wrote a line: nothing to
        # read, so it is named in the log but fails nothing.
        local r reports=0
        for r in "$san_logs"/*; do
            if [ -s "$r" ]; then
                reports=$((reports + 1))
                { echo "== $(basename "$r")"; head -40 "$r"; } >>"$log.san"
            else
                echo "note: empty sanitizer report $(basename "$r") (its process was killed)" >>"$log"
            fi
        done
        if [ "$reports" -gt 0 ]; then
            echo "FAIL $name: $reports sanitizer report(s):" >>"$log"
            cat "$log.san" >>"$log"
            f=$((f + 1))
        fi
        rm -f "$san_logs"/* "$log.san"
    fi
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + k)); left=$((left + l))
    [ "$k" -gt 0 ] && mapfile -t -O "${#skip_lines[@]}" skip_lines < <(grep '^SKIP ' "$log" | sed "s|^SKIP |$name: |")
    printf '%-40s %3d passed, %d failed%s%s  (%ds)\n' "$name" "$p" "$f" "$([ "$k" -gt 0 ] && echo ", $k skipped")" \
        "$([ "$l" -gt 0 ] && echo ", $l long left")" $((SECONDS - t0))
    if [ "$f" -ne 0 ]; then
        failed_names+=("$name")
        sed 's/^/    /' "$log" | tail -60
    fi
}

# Every unit and pipeline test also runs in the sanitizer pass (the slowest, test_dstrain_mpi.sh,
# takes about a minute there); only the reference tests, in Python, are left out.

# The emulated device's passes (tests/emu, docs/DESIGN.md §4): the CUDA unit tests, the
# emulator's own tests and the pipeline tests of the CUDA backend (test_emu*.sh; in the plain
# pass test_cuda*.sh too, whose thousand-image evaluations are too slow for the sanitizer
# builds), with bin-emu*/ first on PATH.
run_emu_pass() {  # LABEL
    local label=$1 t shells=(tests/shell/test_emu*.sh)
    [ "$label" = emu ] && shells+=(tests/shell/test_cuda*.sh)
    echo "== $label pass: $BIN/, $BUILD/"
    # (test_cuda_bodies and test_cuda_plan, plain C, run in the normal passes)
    for t in "$BUILD"/tests/test_cuda_ops "$BUILD"/emu-tests/*; do
        [ -x "$t" ] && [ -f "$t" ] && run_one "$label:unit/$(basename "$t")" "$(emu_source "$t")" "$t"
    done
    for t in "${shells[@]}"; do
        # a test that repeats under ThreadSanitizer what another already races there says so
        # in its first lines ("# EMU-TSAN: skip: why")
        if [ "$label" = emu-tsan ] && head -n 40 "$t" | grep -q '^# EMU-TSAN: skip'; then
            printf '%-40s skipped under ThreadSanitizer (%s)\n' "$label:shell/$(basename "$t")" \
                "$(head -n 40 "$t" | sed -n 's/^# EMU-TSAN: skip: //p' | head -n 1)"
            continue
        fi
        [ -f "$t" ] && run_one "$label:shell/$(basename "$t")" "$t" bash "$t"
    done
}
emu_source() {  # a test binary's source, for its LONG mark
    local b
    b=$(basename "$1")
    if [ -f "tests/unit/$b.c" ]; then echo "tests/unit/$b.c"; else echo "tests/emu/$b.cc"; fi
}

run_pass() {  # LABEL: every test of $BUILD and $BIN (no reference tests in the san pass)
    local label=$1 prefix=""
    case $label in emu*) run_emu_pass "$label"; return ;; esac
    [ "$label" = san ] && prefix="san:"
    echo "== $label pass: $BIN/, $BUILD/"
    for t in "$BUILD"/tests/*; do
        [ -x "$t" ] && [ -f "$t" ] && run_one "${prefix}unit/$(basename "$t")" "tests/unit/$(basename "$t").c" "$t"
    done
    for t in tests/shell/test_*.sh; do
        [[ $t = */test_emu* ]] && continue   # the emulated passes' own
        [ -f "$t" ] && run_one "${prefix}shell/$(basename "$t")" "$t" bash "$t"
    done
    [ "$label" = san ] && return
    for t in tests/ref/test_*.py; do
        [ -f "$t" ] && run_one "ref/$(basename "$t")" "$t" "$PYTHON" "$t"
    done
}

normal_bin=${BIN:-bin} normal_build=${BUILD:-build} base_path=$PATH
san_logs=""
for pass in $passes; do
    if [ "$pass" = normal ]; then
        export BIN=$normal_bin BUILD=$normal_build
    elif [[ $pass = emu* ]]; then
        suffix=${pass#emu}
        export BIN=bin-emu$suffix BUILD=build-emu$suffix
        if [ ! -d "$BUILD" ]; then
            echo "== $pass pass: $BUILD/ is not built (make emu${suffix:+ EMU_SAN=$([ "$suffix" = -tsan ] && echo thread || echo address)})"
            continue
        fi
        san_logs=""
        unset ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS
        if [ -n "$suffix" ]; then
            san_logs=$work/san-reports
            mkdir -p "$san_logs"
            # the emulated device's workers are never joined: what they hold at exit is not a leak
            export ASAN_OPTIONS="detect_leaks=0:log_path=$san_logs/asan:log_exe_name=1"
            # a tool that stops on an error (ds_die) exits with its loader's threads running, by
            # design: not a thread leak to report
            export TSAN_OPTIONS="log_path=$san_logs/tsan:log_exe_name=1:second_deadlock_stack=1:report_thread_leaks=0:suppressions=$DS_ROOT/tests/tsan.supp"
            # libgomp's own synchronisation is invisible to ThreadSanitizer: one OpenMP thread
            [ "$suffix" = -tsan ] && export OMP_NUM_THREADS=1
        fi
    else
        export BIN=bin-san BUILD=build-san
        san_logs=$work/san-reports
        mkdir -p "$san_logs"
        export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0:log_path=$san_logs/asan:log_exe_name=1"
        export LSAN_OPTIONS="suppressions=$DS_ROOT/tests/lsan.supp:print_suppressions=0"
        export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$san_logs/ubsan:log_exe_name=1"
        # Open MPI unloads its components at MPI_Finalize, leaving their leaks without names
        # the suppressions could match: keep them loaded.
        export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
    fi
    export PATH="$DS_ROOT/$BIN:$base_path" DS_TEST_PASS=$pass
    run_pass "$pass"
done

if [ "$skipped" -gt 0 ]; then
    echo "$skipped skipped (checks this machine cannot make; not counted as passed):"
    printf '    %s\n' "${skip_lines[@]}" | sort -u | head -20
fi
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
if [ "$long" = 0 ]; then
    [ ${#left_names[@]} -gt 0 ] && echo "long tests left to make check: ${left_names[*]}"
    echo "$passed passed, $failed failed; $left long tests and cases left to make check"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
