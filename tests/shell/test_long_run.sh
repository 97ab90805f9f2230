#!/bin/bash
# Long runs hold their memory flat: a tiny run of 20 epochs (validation, a checkpoint and
# pruning every epoch) prints its resident memory (VmRSS) in each epoch line and in
# metrics.jsonl ("rss_kb"), and it must not grow from epoch 2 to epoch 20 by more than 1 MB.
# Epoch 1 warms up (thread pools, HDF5 buffers, loader slots); after that a run
# allocates nothing that lives on, and the 1 MB slack covers page-granular malloc arenas
# and HDF5's free lists settling (measured growth: under 200 kB), while a leak of 60 kB or
# more per epoch fails. The sanitizer pass runs 4 epochs and skips the RSS bound (ASan's
# quarantine holds freed memory on purpose; LeakSanitizer checks leaks there instead).
. "$(dirname "$0")/lib.sh"
SYNTH=$BUILD_DIR/data/synth
[ -x "$SYNTH" ] || { fail synth_built "$SYNTH missing (make)"; finish; }

"$SYNTH" -q --classes 4 --per-class 16 "$T/tree" && dsplit -q --val 0.25 -o "$T/split" "$T/tree" &&
    dspack -q --size 16 -o "$T/train" "$T/split/train.txt" && dspack -q --size 16 -o "$T/val" "$T/split/val.txt" ||
    { fail setup "synth/dsplit/dspack failed"; finish; }
E=20
[ "${DS_TEST_PASS:-}" = san ] && E=4
dstrain --train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --batch 8 --epochs $E --lr 0.05 \
    --lr-scaling none --warmup-epochs 0 --threads 1 --log-every 0 --keep 2 -o "$T/run" 2>"$T/log"
check long_run_finishes test -f "$T/run/ckpt-$(printf %08d $((E * 6))).h5"
check epoch_line_prints_rss grep -q "epoch $E/$E .*RSS [0-9.]* MB" "$T/log"
rss() { grep "\"epoch\":$1,.*\"rss_kb\"" "$T/run/metrics.jsonl" | sed 's/.*"rss_kb":\([0-9]*\).*/\1/'; }
r2=$(rss 2) r20=$(rss $E)
if [ -z "$r2" ] || [ -z "$r20" ]; then fail rss_in_metrics "no rss_kb in the epoch lines of metrics.jsonl"
elif [ "${DS_TEST_PASS:-}" = san ]; then pass rss_in_metrics
elif [ $((r20 - r2)) -le 1024 ]; then pass "rss_flat_epoch_2_to_20 ($r2 -> $r20 kB)"
else fail rss_flat_epoch_2_to_20 "VmRSS grew from $r2 kB to $r20 kB (more than 1 MB)"; fi
finish
