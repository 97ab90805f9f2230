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
# The official ILSVRC2012 validation set instead of a held-out share (IMAGENET then is the
# training tree, all of it trained on):
#   VAL_TAR   ILSVRC2012_img_val.tar (extracted once into OUT/val-images), or VAL_DIR, the
#             folder it was extracted into
#   VAL_DEVKIT  ILSVRC2012_devkit_t12.tar.gz or its unpacked folder, or VAL_LABELS (the
#             devkit's ground truth or Kaggle's LOC_val_solution.csv) with VAL_SYNSETS
#             (meta.mat or LOC_synset_mapping.txt; needed by the devkit's ID list)
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
VAL_TAR=${VAL_TAR:-} VAL_DIR=${VAL_DIR:-} VAL_DEVKIT=${VAL_DEVKIT:-} VAL_LABELS=${VAL_LABELS:-}
VAL_SYNSETS=${VAL_SYNSETS:-}

launch=()
[ "$GPUS" -gt 1 ] && launch=(mpirun -np "$GPUS")
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
t0=$EPOCHREALTIME

# extract ARCHIVE DIR: unpacks once (into DIR.tmp, renamed when complete).
extract() {
    [ -d "$2" ] && return 0
    rm -rf "$2.tmp" && mkdir -p "$2.tmp"
    echo "pipeline: extracting $1 into $2" >&2
    tar -xf "$1" -C "$2.tmp" --no-same-owner && mv -T "$2.tmp" "$2"
}

if [ -n "$VAL_TAR$VAL_DIR$VAL_DEVKIT$VAL_LABELS" ]; then
    [ -n "$VAL_TAR" ] && [ -n "$VAL_DIR" ] && { echo "pipeline: error: VAL_TAR or VAL_DIR, not both" >&2; exit 2; }
    [ -n "$VAL_TAR" ] && { extract "$VAL_TAR" "$OUT/val-images"; VAL_DIR=$OUT/val-images; }
    [ -n "$VAL_DIR" ] || { echo "pipeline: error: the ILSVRC2012 validation set needs VAL_TAR or VAL_DIR" >&2; exit 2; }
    truth=()
    if [ -n "$VAL_DEVKIT" ]; then
        if [ -f "$VAL_DEVKIT" ]; then
            extract "$VAL_DEVKIT" "$OUT/devkit"
            meta=$(find "$OUT/devkit" -path '*/data/meta.mat' -print -quit)
            [ -n "$meta" ] || { echo "pipeline: error: $VAL_DEVKIT holds no data/meta.mat" >&2; exit 1; }
            VAL_DEVKIT=$(dirname "$(dirname "$meta")")
        fi
        truth=(--devkit "$VAL_DEVKIT")
    else
        [ -n "$VAL_LABELS" ] || { echo "pipeline: error: the ILSVRC2012 validation set needs VAL_DEVKIT or VAL_LABELS" >&2; exit 2; }
        truth=(--val-labels "$VAL_LABELS")
        [ -n "$VAL_SYNSETS" ] && truth+=(--synsets "$VAL_SYNSETS")
    fi
    dsplit --val 0 -o "$OUT/split" "$ROOT"
    dsplit --val-images "$VAL_DIR" "${truth[@]}" --classes "$OUT/split/classes.txt" -o "$OUT/split-ilsvrc-val"
    train_manifest=$OUT/split/train.txt val_manifest=$OUT/split-ilsvrc-val/val.txt
elif [ -d "$ROOT/train" ] && [ -d "$ROOT/val" ]; then
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
