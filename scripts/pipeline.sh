#!/bin/bash
# make pipeline IMAGENET=/path [GPUS=3] [...]: the whole chain on any class-folder tree, as a
# user runs it for ImageNet.
#
#   IMAGENET  the tree: ROOT/<class>/<image>, or ROOT/train/<class>/... with ROOT/val/<class>/...
#             (then val is the given one; otherwise dsplit holds out VAL_FRACTION per class)
#   GPUS      processes (one per GPU; > 1 runs dstrain and dseval under mpirun -np GPUS)
#   OUT       output directory (pipeline)         ARCH     network (resnet50)
#   SIZE      stored size (256)  FIT  crop|squash  CROP     training crop (224)
#   EPOCHS    (90)   BATCH  per GPU (64)           DEVICE   auto|cpu|cuda
#   VAL_FRACTION (0.2)  TRAIN_ARGS  extra dstrain options, e.g. "--lr 0.04 --wd 0 ..."
# Every stage can be rerun; dspack --resume keeps complete shards, dstrain --resume continues
# a stopped run (RESUME=1).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin}
PATH="$PWD/$BIN:$PATH"
ROOT=${IMAGENET:?usage: make pipeline IMAGENET=/path/to/class-folder-tree [GPUS=N] [EPOCHS=N] ...}
GPUS=${GPUS:-1} OUT=${OUT:-pipeline} ARCH=${ARCH:-resnet50} SIZE=${SIZE:-256} FIT=${FIT:-crop}
CROP=${CROP:-224} EPOCHS=${EPOCHS:-90} BATCH=${BATCH:-64} DEVICE=${DEVICE:-auto}
VAL_FRACTION=${VAL_FRACTION:-0.2} TRAIN_ARGS=${TRAIN_ARGS:-} RESUME=${RESUME:-0}

launch=()
[ "$GPUS" -gt 1 ] && launch=(mpirun -np "$GPUS")
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
t0=$EPOCHREALTIME

if [ -d "$ROOT/train" ] && [ -d "$ROOT/val" ]; then
    dsplit --val 0 -o "$OUT/split-train" "$ROOT/train"
    dsplit --val 0 -o "$OUT/split-val" "$ROOT/val"
    cmp -s "$OUT/split-train/classes.txt" "$OUT/split-val/classes.txt" ||
        { echo "pipeline: error: $ROOT/train and $ROOT/val hold different classes" >&2; exit 1; }
    train_manifest=$OUT/split-train/train.txt val_manifest=$OUT/split-val/train.txt
else
    dsplit --val "$VAL_FRACTION" -o "$OUT/split" "$ROOT"
    train_manifest=$OUT/split/train.txt val_manifest=$OUT/split/val.txt
fi
echo "== dsplit: $(since "$t0") s" >&2

t=$EPOCHREALTIME
dspack --resume --size "$SIZE" --fit "$FIT" -o "$OUT/packed/train" "$train_manifest"
dspack --resume --size "$SIZE" --fit "$FIT" -o "$OUT/packed/val" "$val_manifest"
echo "== dspack: $(since "$t") s" >&2

t=$EPOCHREALTIME
resume=()
[ "$RESUME" = 1 ] && [ -e "$OUT/run/last.h5" ] && resume=(--resume "$OUT/run")
# shellcheck disable=SC2086
"${launch[@]}" dstrain --train "$OUT/packed/train" --val "$OUT/packed/val" -o "$OUT/run" --arch "$ARCH" \
    --crop "$CROP" --epochs "$EPOCHS" --batch "$BATCH" --device "$DEVICE" "${resume[@]}" $TRAIN_ARGS
echo "== dstrain: $(since "$t") s" >&2

t=$EPOCHREALTIME
"${launch[@]}" dseval --json --device "$DEVICE" "$OUT/run/best.h5" "$OUT/packed/val" | tee "$OUT/val.json"
echo "== dseval: $(since "$t") s" >&2
if scripts/plot.sh "$OUT/run" >/dev/null 2>&1; then echo "curves: $OUT/run/curves.png" >&2; fi
