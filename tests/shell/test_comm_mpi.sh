#!/bin/bash
# comm under a real launcher: three ranks on this machine (mpirun --oversubscribe), their
# sums and agreement (build/drivers/comm_check), and that one failing or killed rank ends
# the whole job with a non-zero status instead of leaving the others waiting.
. "$(dirname "$0")/lib.sh"
drv="$BUILD_DIR/drivers/comm_check"
mpi=(mpirun --allow-run-as-root --oversubscribe -np 3)

if ! command -v mpirun >/dev/null; then
    fail "comm mpi" "mpirun not found (Debian: openmpi-bin)"; finish
fi

# The driver prints one PASS/FAIL line per check (from rank 0) and exits 1 on any failure.
timeout 120 "${mpi[@]}" "$drv" sums >"$T/sums.out" 2>"$T/sums.err"
rc=$?
cat "$T/sums.out"
if [ "$rc" -ne 0 ] || ! grep -q '^PASS stop agreement' "$T/sums.out"; then
    fail "comm mpi: 3-rank driver exits 0" "exit $rc"; sed 's/^/      /' "$T/sums.err" | head -20
else
    pass "comm mpi: 3-rank driver exits 0"
fi

# ds_die on rank 1 while ranks 0 and 2 sit in a barrier: MPI_Abort ends all of them.
t0=$SECONDS
timeout 60 "${mpi[@]}" "$drv" die 1 >"$T/die.out" 2>"$T/die.err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'rank 1 fails on purpose' "$T/die.err"; then
    pass "comm mpi: ds_die on one rank ends the job (exit $rc, $((SECONDS - t0)) s)"
else
    fail "comm mpi: ds_die on one rank ends the job" "exit $rc"; head -20 "$T/die.err"
fi

# kill -9 of one rank mid-run: the others are reducing forever; the job must end non-zero on
# its own (timeout's 90 s is a hang guard, not a measure: exit 124 means it hung).
mkdir -p "$T/pids"
timeout 90 "${mpi[@]}" "$drv" spin "$T/pids" >"$T/spin.out" 2>"$T/spin.err" &
job=$!
for _ in $(seq 300); do
    [ -s "$T/pids/0.pid" ] && [ -s "$T/pids/1.pid" ] && [ -s "$T/pids/2.pid" ] && break
    sleep 0.1
done
if [ -s "$T/pids/1.pid" ]; then
    sleep 0.5
    t0=$SECONDS
    kill -9 "$(cat "$T/pids/1.pid")"
    wait "$job"
    rc=$? took=$((SECONDS - t0))
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
        pass "comm mpi: kill -9 of one rank ends the job non-zero (exit $rc, $took s)"
    else
        fail "comm mpi: kill -9 of one rank ends the job non-zero" "exit $rc after $took s"
    fi
else
    kill "$job" 2>/dev/null; wait "$job"
    fail "comm mpi: kill -9 of one rank" "ranks never started"; head -20 "$T/spin.err"
fi
# Nothing of the job may outlive it (a zombie, state Z, is dead and only awaits its reaper).
sleep 1
for f in "$T"/pids/*.pid; do
    pid=$(cat "$f" 2>/dev/null) || continue
    state=$(ps -o stat= -p "$pid" 2>/dev/null)
    if [ -n "$state" ] && [[ "$state" != Z* ]]; then
        fail "comm mpi: no rank outlives the job" "pid $pid state $state"; kill -9 "$pid"
    fi
done
rm -rf "$T"
finish
