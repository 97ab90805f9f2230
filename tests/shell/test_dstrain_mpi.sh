#!/bin/bash
# dstrain and dseval under mpirun (ranks on this machine, CPU, --oversubscribe), docs/DESIGN.md §3:
# world 3 x accum 1 trains as world 1 x accum 3; the ranks hold identical state; validation
# and dseval count every image once whatever the rank count; only rank 0 writes; the ranks
# stop together (signal, NaN); resume across world sizes at the same global batch, refused
# at another; kill -9 of one rank ends the job, and so does a stopped rank (--comm-timeout).
. "$(dirname "$0")/lib.sh"

if ! command -v mpirun >/dev/null; then
    fail "dstrain mpi" "mpirun not found (Debian: openmpi-bin)"; finish
fi
mpi() {  # N CMD...: N ranks, bounded so that a hang fails instead of blocking the suite
    local n=$1; shift
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$n" "$@"
}

# 88 training images (7 steps of G = 12), 40 val images (no rank count of 3 divides them);
# an evaluation set of 37 images (prime: 2 and 3 ranks both split it unevenly).
make_bar_images "$T/tree" 32 4 1 && make_bar_images "$T/evtree" 10 4 3 && rm "$T"/evtree/class3/00[789].png ||
    { fail data "cannot make the synthetic sets"; finish; }
split_pack "$T/tree" 0.3 "$T/split" "$T/train" "$T/val" &&
    split_pack "$T/evtree" 0 "$T/evsplit" "$T/ev" ||
    { fail pack "dsplit/dspack failed"; finish; }

# One compute thread per rank: three ranks share the machine's cores.
COMMON=(--train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --pad 2 --batch 4 --epochs 4 --lr 0.05
        --lr-scaling none --warmup-epochs 0.5 --threads 1 --loader-threads 1 --log-every 5)

# ---- world 3 x accum 1 against world 1 x accum 3: 20 steps, across two epoch ends ----
# The ranks sum their gradients in buckets of 0.05 MiB (11 for resnet20's 1.1 MB, whose
# largest tensors are 0.14 MB), each sent while backward computes the next: the sums are the
# same whatever the buckets.
mpi 3 dstrain "${COMMON[@]}" --max-steps 20 --bucket-mb 0.05 --verbose -o "$T/w3" 2>"$T/w3.err"
check np3_runs test -f "$T/w3/ckpt-00000020.h5"
dstrain "${COMMON[@]}" --max-steps 20 --accum 3 -q -o "$T/a3" 2>"$T/a3.err"
check accum3_runs test -f "$T/a3/ckpt-00000020.h5"

# fp32 ~1e-4 relative per tensor (the worst element against the tensor's largest value):
# the two compute the same step up to summation order; comm sums in rank order, so on the
# CPU they are in fact bitwise equal and the number printed is 0.
"$PYTHON" - "$T/w3/ckpt-00000020.h5" "$T/a3/ckpt-00000020.h5" <<'PY' && pass np3_equals_accum3_within_1e-4 ||
import sys
import h5py, numpy as np
a, b = (h5py.File(f, "r") for f in sys.argv[1:])
worst, where = 0.0, "-"
for k in b["model"]:
    x, y = a["model"][k][()].astype(np.float64), b["model"][k][()].astype(np.float64)
    d = float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30))
    if d > worst: worst, where = d, k
print("max relative difference np 3 vs accum 3 after 20 steps: %.3g (%s)" % (worst, where))
sys.exit(worst > 1e-4)
PY
    fail np3_equals_accum3_within_1e-4
# On the CPU the two are bitwise equal: each rank's part is its micro-batch's sum added to 0,
# and comm adds the ranks' parts in rank order, as --accum adds its micro-batches
# (docs/DESIGN.md §7 names the limit: micro-batches over 512 images).
check np3_bitwise_equals_accum3 h5diff -q "$T/w3/ckpt-00000020.h5" "$T/a3/ckpt-00000020.h5" /model /model
check np3_momentum_bitwise_equals_accum3 h5diff -q "$T/w3/ckpt-00000020.h5" "$T/a3/ckpt-00000020.h5" /optimizer /optimizer
# Several micro-batches per rank: 2 ranks x accum 3 of batch 2 is 1 process x accum 6 of
# batch 2, bitwise (each micro-batch is reduced to rank 0 as it ends, in the global order).
# Without that (each rank adding its own micro-batches first) they differ after one step
# and drift apart over 20 (measured: a relative difference near 1 in some momentum).
mpi 2 dstrain "${COMMON[@]}" --batch 2 --accum 3 --max-steps 20 --bucket-mb 0.05 -q -o "$T/w2a3" 2>/dev/null
dstrain "${COMMON[@]}" --batch 2 --accum 6 --max-steps 20 -q -o "$T/a6" 2>/dev/null
check np2_accum3_bitwise_equals_accum6 sh -c "h5diff -q '$T/w2a3/ckpt-00000020.h5' '$T/a6/ckpt-00000020.h5' /model /model &&
    h5diff -q '$T/w2a3/ckpt-00000020.h5' '$T/a6/ckpt-00000020.h5' /optimizer /optimizer"
# Every rank fingerprints its weights, BN running statistics and momentum against rank 0's
# before each checkpoint (a difference fails the run); --verbose says they agreed.
check np3_ranks_identical_state grep -q "step 20: the 3 ranks hold identical weights, BN running statistics" \
    "$T/w3.err"
check np3_checked_at_every_checkpoint test "$(grep -c 'ranks hold identical' "$T/w3.err")" = 3
# Validation under 3 ranks (40 images: 13 + 13 + 14) scores what one process scores.
"$PYTHON" - "$T/w3/metrics.jsonl" "$T/a3/metrics.jsonl" <<'PY' && pass np3_validation_equals_one_rank ||
import json, sys
rows = [[json.loads(l) for l in open(f) if "val_top1" in l] for f in sys.argv[1:]]
pick = lambda rs: [(r["step"], r["val_top1"], r["val_top5"], round(r["val_loss"], 5)) for r in rs]
print(pick(rows[0]), pick(rows[1]))
assert len(rows[0]) == 2 and pick(rows[0]) == pick(rows[1])
PY
    fail np3_validation_equals_one_rank
check np3_validation_counts_each_image_once test "$(grep -c 'val top-1 .*(40 images' "$T/w3.err")" = 2
# Only rank 0 logs and writes: each line once, one metrics row per step logged.
check np3_logs_once test "$(grep -c 'training: 4 epochs' "$T/w3.err")" = 1
check np3_metrics_once test "$(grep -c '"step":20,' "$T/w3/metrics.jsonl")" = 1

# ---- the buckets are handed over during backward ----
# 2 ranks, micro-batch 16, 11 buckets: with --verbose rank 0 numbers, per step, the moment
# comm queued the first bucket and the moment backward began its last layer (conv1, whose
# bucket is started last) from one process-wide sequence. Queued first, every step: the
# model hands each bucket over as soon as it is complete, not at backward's end. Whether
# comm's thread also gets a core before that layer is the scheduler's business, so it is
# printed, not checked; bench/overlap_bench.sh measures it.
mpi 2 dstrain --train "$T/train" --arch resnet20 --crop 16 --batch 16 --epochs 4 --max-steps 8 --threads 1 \
    --loader-threads 1 --log-every 0 --bucket-mb 0.05 --verbose -o "$T/ov" 2>"$T/ov.err"
"$PYTHON" - "$T/ov.err" <<'PY' && pass np2_buckets_handed_over_during_backward ||
import re, sys
pattern = (r"step (\d+): (\d+) gradient buckets reduced; events: first queued #(\d+), backward's last layer "
           r"#(\d+), first begun #(\d+)")
steps = [tuple(map(int, m)) for m in re.findall(pattern, open(sys.argv[1]).read())]
print("(step, buckets, first queued, last layer, first begun):", steps)
assert [s[0] for s in steps] == list(range(1, 9)), "one line per step"
assert all(b == 11 for _, b, _, _, _ in steps), "11 buckets per step"
assert all(0 < q < last for _, _, q, last, _ in steps), "a step queued its first bucket only after backward's last layer began"
print("comm's thread began the first bucket before backward's last layer on %d of 8 steps"
      % sum(0 < begun < last for _, _, _, last, begun in steps))
PY
    fail np2_buckets_handed_over_during_backward

# ---- dseval: the same counts and accuracies under 1, 2 and 3 ranks ----
ck="$T/w3/ckpt-00000007.h5"  # one epoch in: top-1 well below 100%, so a miscount shows
strip() { sed 's/, "images_per_sec": [0-9.]*//' "$1"; }
for n in 1 2 3; do
    mpi "$n" dseval --json --threads 1 --batch 5 --per-class "$T/pc$n.csv" "$ck" "$T/ev" >"$T/ev$n" 2>"$T/ev$n.err" ||
        fail "dseval_np$n" "exit $?"
done
mpi 3 dseval --json --threads 1 --batch 5 "$ck" "$T/evsplit/train.txt" >"$T/evm3" 2>/dev/null
"$PYTHON" - "$T/ev1" "$T/ev2" "$T/ev3" "$T/evm3" <<'PY' && pass dseval_same_under_1_2_3_ranks ||
import json, sys
r = [json.load(open(f)) for f in sys.argv[1:]]
for x in r: print(x)
assert all(x["count"] == 37 and x["skipped"] == 0 for x in r)
assert all(x["top1"] == r[0]["top1"] and x["top5"] == r[0]["top5"] for x in r)
assert all(abs(x["loss"] - r[0]["loss"]) < 1e-6 for x in r)
assert 0 < r[0]["top1"] < 1, "top-1 of 0 or 1 would hide a miscount"
PY
    fail dseval_same_under_1_2_3_ranks
check dseval_per_class_same_under_1_2_3_ranks sh -c "cmp -s '$T/pc1.csv' '$T/pc2.csv' && cmp -s '$T/pc1.csv' '$T/pc3.csv'"

# A warning about one rank's own slice says which rank; usage errors, the same on every
# rank, are said once. The last image of the manifest falls to the last rank.
cp -r "$T/evtree" "$T/evbad" && cp -r "$T/evsplit" "$T/evbadsplit" &&
    sed -i "1s|root=.*|root=$T/evbad|" "$T/evbadsplit/train.txt"
last=$(tail -n 1 "$T/evbadsplit/train.txt" | cut -f 2) && echo "not an image" >"$T/evbad/$last"
mpi 3 dseval --json --threads 1 --batch 5 "$ck" "$T/evbadsplit/train.txt" >"$T/evbad.json" 2>"$T/evbad.err"
check np3_warning_names_its_rank test "$(grep -c "^dseval (rank 2): warning: .*skipping .*$last" "$T/evbad.err")" = 1
check np3_warning_only_from_that_rank test "$(grep -c 'skipping' "$T/evbad.err")" = 1
check np3_skip_summed_by_rank_0 grep -q '^dseval: warning: 1 undecodable image skipped' "$T/evbad.err"
check np3_skipped_counted_once grep -q '"skipped": *1' "$T/evbad.json"
mpi 3 dstrain --no-such-option 2>"$T/usage.err"
check np3_usage_error_said_once test "$(grep -c "unknown option '--no-such-option'" "$T/usage.err")" = 1

# ---- resume across world sizes at the same global batch (12) ----
# w3 (saved by 3 ranks) continues as 1 rank x accum 3; a3 (saved by 1 rank) continues as 3
# ranks. Both were equal at step 20, so both must end equal at step 28.
dstrain "${COMMON[@]}" --accum 3 -q --resume "$T/w3" 2>"$T/r1.err"
mpi 3 dstrain "${COMMON[@]}" -q --resume "$T/a3" 2>"$T/r3.err"
check resume_other_world_runs test -f "$T/w3/ckpt-00000028.h5" -a -f "$T/a3/ckpt-00000028.h5"
check resume_other_world_same_result sh -c "h5diff -r '$T/w3/ckpt-00000028.h5' '$T/a3/ckpt-00000028.h5' /model /model \
    >/dev/null && h5diff -r '$T/w3/ckpt-00000028.h5' '$T/a3/ckpt-00000028.h5' /optimizer /optimizer >/dev/null"
check resume_records_new_world sh -c "h5dump -a world_size '$T/a3/ckpt-00000028.h5' | grep -q '(0): 3' &&
    h5dump -a world_size '$T/w3/ckpt-00000028.h5' | grep -q '(0): 1' &&
    h5dump -a global_batch '$T/w3/ckpt-00000028.h5' | grep -q '(0): 12'"
# 2 ranks x batch 4 = 8: another global batch, refused with a message naming both.
mpi 2 dstrain "${COMMON[@]}" -q --resume "$T/w3/ckpt-00000020.h5" -o "$T/x" >/dev/null 2>"$T/g8.err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "global batch 12, but these options make 8" "$T/g8.err" &&
    [ ! -e "$T/x/ckpt-00000021.h5" ]; then pass resume_other_global_batch_refused
else fail resume_other_global_batch_refused "exit $rc"; head -5 "$T/g8.err"; fi

# ---- stopping together ----
# A NaN loss: every rank sees the same reduced loss and the job ends non-zero, no hang.
mpi 3 dstrain --train "$T/train" -o "$T/nan" --arch resnet20 --crop 12 --batch 4 --threads 1 --lr 1000 \
    --lr-scaling none --warmup-epochs 0 --label-smoothing 0 -q >/dev/null 2>"$T/nan.err"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "the loss is" "$T/nan.err"; then pass np3_nan_stops_job
else fail np3_nan_stops_job "exit $rc"; head -5 "$T/nan.err"; fi

# Signals, kill -9 and a stalled rank (~15 s, most of it the 8 s --comm-timeout): long tier.
if long np3_signal_kill_and_stall; then
    ranks_of() {  # JOB_PID: the rank processes mpirun started
        ps -o pid=,comm= --ppid "$1" | awk '$2 == "dstrain" {print $1}'
    }
    wait_rows() {  # FILE N: until FILE has N lines (30 s at most)
        for _ in $(seq 300); do [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0; sleep 0.1; done
        return 1
    }
    # The jobs below end within seconds; SECONDS is a hang guard, not a measure (124: it hung).
    wait_job() {  # JOB_PID SECONDS: sets rc; 124 and a kill when the job outlives SECONDS
        local i
        for ((i = 0; i < $2 * 10; i++)); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$1" 2>/dev/null; then
            for p in $(ranks_of "$1"); do kill -9 "$p"; done
            kill -9 "$1"; wait "$1"; rc=124
        else wait "$1"; rc=$?; fi
    }
    LONG=(--train "$T/train" --arch resnet20 --crop 16 --batch 4 --epochs 1000 --threads 1 --loader-threads 1 --log-every 1)

    # SIGTERM to one rank only: all three stop at the same step, rank 0 writes the checkpoint.
    mpirun --allow-run-as-root --oversubscribe -np 3 dstrain "${LONG[@]}" -o "$T/sig" >/dev/null 2>"$T/sig.err" &
    job=$!
    wait_rows "$T/sig/metrics.jsonl" 3
    victim=$(ranks_of "$job" | tail -1)
    [ -n "$victim" ] && kill -TERM "$victim"
    wait_job "$job" 120
    ck=$(readlink "$T/sig/last.h5")
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ -n "$ck" ] && grep -q "stopped at step .* checkpoint" "$T/sig.err"; then
        pass "np3_sigterm_one_rank_stops_all (exit $rc, $ck)"
    else fail np3_sigterm_one_rank_stops_all "exit $rc, last.h5 -> '$ck'"; tail -5 "$T/sig.err"; fi

    # kill -9 of one rank mid-run: the job ends non-zero on its own and no rank outlives it.
    mpirun --allow-run-as-root --oversubscribe -np 3 dstrain "${LONG[@]}" -o "$T/kill" >/dev/null 2>"$T/kill.err" &
    job=$!
    wait_rows "$T/kill/metrics.jsonl" 3
    pids=$(ranks_of "$job")
    victim=$(echo "$pids" | sed -n 2p)
    t0=$SECONDS
    [ -n "$victim" ] && kill -9 "$victim"
    wait_job "$job" 120
    took=$((SECONDS - t0))
    if [ -n "$victim" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then pass "np3_kill9_ends_job (exit $rc, $took s)"
    else fail np3_kill9_ends_job "exit $rc after $took s"; tail -5 "$T/kill.err"; fi
    sleep 1
    for pid in $pids; do
        state=$(ps -o stat= -p "$pid" 2>/dev/null)
        if [ -n "$state" ] && [[ "$state" != Z* ]]; then fail np3_kill9_no_rank_outlives "pid $pid $state"; kill -9 "$pid"; fi
    done

    # A rank that stops without dying (SIGSTOP: as a hung read or a wedged device would) is not
    # noticed by mpirun; the others' next wait gives up after --comm-timeout and the job ends
    # non-zero with an error naming the step and the rank that did not arrive. The checkpoints
    # written before stay whole.
    mpirun --allow-run-as-root --oversubscribe -np 3 dstrain "${LONG[@]}" --ckpt-steps 2 --comm-timeout 8 \
        -o "$T/stall" >/dev/null 2>"$T/stall.err" &
    job=$!
    wait_rows "$T/stall/metrics.jsonl" 5
    victim=""
    for p in $(ranks_of "$job"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=2' && victim=$p
    done
    t0=$SECONDS
    [ -n "$victim" ] && kill -STOP "$victim"
    wait_job "$job" 120
    took=$((SECONDS - t0))
    if [ -n "$victim" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
        grep -Eq "error: (step|checkpoint of step) [0-9]+: .*rank 2 did not arrive within 8 s" "$T/stall.err"; then
        pass "np3_stalled_rank_ends_job_naming_it (exit $rc, $took s)"
    else fail np3_stalled_rank_ends_job_naming_it "exit $rc after $took s"; grep error "$T/stall.err" | head -3; fi
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
    check np3_stalled_rank_last_checkpoint_whole dseval -q --json --threads 1 "$T/stall/last.h5" "$T/val"
fi

rm -rf "$T"
finish
