#!/bin/bash
# Crash consistency: kill -9 at seeded random moments while dstrain writes a checkpoint every
# step and while dspack writes shards. After every kill each ckpt-*.h5 / shard-*.h5 under its
# final name must equal, value for value (checkpoints) or byte for byte (shards), the file an
# uninterrupted run writes; last.h5 must load in dseval; then --resume continues from what is
# there, and the finished run must equal the uninterrupted one. Planted garbage .tmp files
# (and the ones the kills leave) must never be taken for real files.
#   CRASH_KILLS=N  kills per tool (default 20 in the long tier's normal pass; 5 in the quick
#                  tier and in the sanitizer pass, where every run is several times slower
#                  and the kills test the same code)
. "$(dirname "$0")/lib.sh"
SYNTH=$BUILD_DIR/data/synth
[ -x "$SYNTH" ] || { fail synth_built "$SYNTH missing (make)"; finish; }
KILLS=${CRASH_KILLS:-$([ "${DS_TEST_LONG:-0}" = 1 ] && [ "${DS_TEST_PASS:-}" != san ] && echo 20 || echo 5)}

"$SYNTH" -q --classes 4 --per-class 16 "$T/tree" && dsplit -q --val 0.25 -o "$T/split" "$T/tree" &&
    dspack -q --size 16 -o "$T/train" "$T/split/train.txt" &&
    "$SYNTH" -q --classes 4 --per-class 30 --seed 7 "$T/tree2" && dsplit -q --val 0.25 -o "$T/split2" "$T/tree2" ||
    { fail setup "synth/dsplit/dspack failed"; finish; }

# 48 training images, batch 8: 6 steps per epoch, 18 in all, a checkpoint after each.
TRAIN=(--train "$T/train" --arch resnet20 --crop 16 --batch 8 --epochs 3 --lr 0.05 --lr-scaling none
       --warmup-epochs 0 --threads 1 --log-every 1 --ckpt-steps 1 -q)
dstrain "${TRAIN[@]}" --keep 100 -o "$T/ref" || { fail reference_run "dstrain failed"; finish; }
check reference_has_every_step test -f "$T/ref/ckpt-00000018.h5" -a -f "$T/ref/ckpt-00000001.h5"

# 90 images at 64x64 in shards of 6: 15 shards.
PACK=(-q --size 64 --shard-size 6 --threads 1 "$T/split2/train.txt")
dspack "${PACK[@]}" -o "$T/pref" || { fail reference_pack "dspack failed"; finish; }

# Starts CMD in the background, waits until PROBE (the run's progress: steps logged, shards
# written) has gone K past what it printed at the start, then D milliseconds more, and kills it
# with SIGKILL. Moments are set by progress, not wall time, so they land inside the run on a
# fast or a slow (sanitizer) build alike; and CMD runs with DS_TESTHOOK_PAUSE_BEFORE_EXIT
# (libcommon/testhook.h): done, it waits for a signal instead of exiting, so every kill finds
# it alive, however fast the machine. Sets $alive (0: CMD had ended on its own, exit $rc) and
# $finished (1: the kill found it done, every file written; 0: mid-run).
run_and_kill() {  # K D PROBE CMD...
    local k=$1 d=$2 probe=$3; shift 3
    local base
    base=$($probe)
    DS_TESTHOOK_PAUSE_BEFORE_EXIT=1 "$@" 2>"$T/one.err" &
    local pid=$!
    while kill -0 $pid 2>/dev/null && [ "$($probe)" -lt $((base + k)) ] &&
        ! grep -q 'waiting for a signal' "$T/one.err"; do sleep 0.01; done
    sleep "$(printf '0.%03d' "$d")"
    if kill -9 $pid 2>/dev/null; then wait $pid 2>/dev/null; alive=1; rc=137
    else wait $pid; rc=$?; alive=0; fi
    finished=0
    grep -q 'is done; waiting for a signal' "$T/one.err" && finished=1
    grep -v 'test hook' "$T/one.err" >>"$T/kill.err"
}
steps_logged() { cat "$T/run/metrics.jsonl" 2>/dev/null | grep -c '"step"'; }
shards_written() { ls "$T/pack" 2>/dev/null | grep -c '^shard-.*\.h5$'; }

RANDOM=20240607  # a fixed seed: the same kill moments on every run
bad=() interrupted=0 live=0 tmp_seen=0
for i in $(seq 1 "$KILLS"); do
    k=$((RANDOM % 6)) d=$((RANDOM % 25))
    if ls "$T/run"/ckpt-*.h5 >/dev/null 2>&1 || [ -L "$T/run/last.h5" ]; then
        run_and_kill $k $d steps_logged dstrain "${TRAIN[@]}" --resume "$T/run"
    else
        run_and_kill $k $d steps_logged dstrain "${TRAIN[@]}" -o "$T/run"
    fi
    [ -n "${CRASH_VERBOSE:-}" ] && echo "kill $i at $k + ${d}ms alive=$alive finished=$finished $(ls "$T/run" 2>/dev/null | tr "\n" " ")"
    [ "$alive" = 0 ] && bad+=("kill $i: dstrain ended on its own (exit $rc) before the kill")
    live=$((live + alive))
    [ "$finished" = 0 ] && interrupted=$((interrupted + 1))
    ls "$T/run" 2>/dev/null | grep '\.tmp$' | grep -vq 99999999 && tmp_seen=$((tmp_seen + 1))
    for f in "$T/run"/ckpt-*.h5; do
        [ -e "$f" ] || continue
        same_state "$f" "$T/ref/$(basename "$f")" || bad+=("kill $i (step $k + ${d}ms): $(basename "$f") differs from the uninterrupted run's")
    done
    if [ -L "$T/run/last.h5" ]; then
        dseval -q "$T/run/last.h5" "$T/train" >/dev/null 2>>"$T/kill.err" || bad+=("kill $i (step $k + ${d}ms): last.h5 does not load")
    fi
    # A garbage temporary file with a larger step than any real checkpoint: resume must ignore it.
    [ -d "$T/run" ] && echo garbage >"$T/run/ckpt-99999999.h5.tmp"
    # A finished run is started again from nothing, so every kill lands in a live run.
    [ "$finished" = 1 ] && rm -rf "$T/run"
done
if ls "$T/run"/ckpt-*.h5 >/dev/null 2>&1; then dstrain "${TRAIN[@]}" --resume "$T/run" 2>>"$T/kill.err"
else dstrain "${TRAIN[@]}" -o "$T/run" 2>>"$T/kill.err"; fi
check dstrain_resume_finishes same_state "$T/run/ckpt-00000018.h5" "$T/ref/ckpt-00000018.h5"
check dstrain_last_is_final test "$(readlink "$T/run/last.h5")" = ckpt-00000018.h5
steps_of() { grep -o '"step":[0-9]*,' "$1" | sort; }
check dstrain_metrics_lines_as_uninterrupted test "$(steps_of "$T/run/metrics.jsonl")" = "$(steps_of "$T/ref/metrics.jsonl")"
check "dstrain_every_kill_found_the_run_alive ($interrupted of $KILLS mid-run; $tmp_seen left a .tmp)" test $live = "$KILLS"
if [ ${#bad[@]} -eq 0 ]; then pass dstrain_every_kill_consistent
else fail dstrain_every_kill_consistent "$(printf '%s; ' "${bad[@]}")"; tail -5 "$T/kill.err"; fi

bad=() interrupted=0 live=0 tmp_seen=0
for i in $(seq 1 "$KILLS"); do
    k=$((RANDOM % 6)) d=$((RANDOM % 60))
    run_and_kill $k $d shards_written dspack --resume -o "$T/pack" "${PACK[@]}"
    [ "$alive" = 0 ] && bad+=("kill $i: dspack ended on its own (exit $rc) before the kill")
    live=$((live + alive))
    [ "$finished" = 0 ] && interrupted=$((interrupted + 1))
    [ -n "$(find "$T/pack" -name '*.tmp' ! -name shard-00003.h5.tmp 2>/dev/null)" ] && tmp_seen=$((tmp_seen + 1))
    for f in "$T/pack"/shard-*.h5; do
        [ -e "$f" ] || continue
        cmp -s "$f" "$T/pref/$(basename "$f")" || bad+=("kill $i (step $k + ${d}ms): $(basename "$f") differs from the uninterrupted pack's")
    done
    # A garbage temporary shard: --resume must neither keep nor rename it.
    [ -d "$T/pack" ] && echo garbage >"$T/pack/shard-00003.h5.tmp"
    [ "$finished" = 1 ] && rm -rf "$T/pack"
done
dspack --resume -o "$T/pack" "${PACK[@]}" 2>>"$T/kill.err"
check dspack_resume_finishes diff -r "$T/pack" "$T/pref"
if [ ${#bad[@]} -eq 0 ]; then pass dspack_every_kill_consistent
else fail dspack_every_kill_consistent "$(printf '%s; ' "${bad[@]}")"; tail -5 "$T/kill.err"; fi
check "dspack_every_kill_found_the_run_alive ($interrupted of $KILLS mid-run; $tmp_seen left a .tmp)" test $live = "$KILLS"
finish
