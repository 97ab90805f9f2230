#!/bin/bash
# make demo: Fashion-MNIST -> class-folder tree -> dsplit (95/5 of the 60,000 training
# images: most of them to train on, 3,000 to watch) -> dspack -> dstrain (resnet20; the CPU,
# or a GPU when one is visible) -> dseval on the official 10,000 test images, decoded on the
# fly from their manifest. Prints each stage's time and ends with dseval's JSON result.
#
# The images stay 28x28 (dspack --size 28 --fit squash is then an exact copy). Training takes
# random crops of the image zero-padded by 2, plus flips, and is short because most of it
# runs on small crops: 16x16 up to epoch RAMP_START, then crops rising to the full 28x28 at
# epoch RAMP_END (progressive resizing, dstrain --min-crop; a crop keeps the image's scale,
# so the network sees parts of it at the size it is tested at).
# Recipe (the usual one for ResNet-20 on 28-32 pixel images, shortened): SGD, Nesterov
# momentum 0.9, lr 0.1 at batch 64 with a 1-epoch warmup and cosine decay, weight decay
# 5e-4, label smoothing 0.1, in bf16 (bf16 products, float32 sums: the same bits on every
# CPU, and on CPUs with AVX512-BF16 the faster); validation after the last epoch; the test
# set evaluated with its mirror images too (dseval --tta flip). bench/ENGINE.md (The demo)
# has the runs it was chosen from.
# Environment: EPOCHS (10), MIN_CROP (16), RAMP_START (3), RAMP_END (8), VAL_SHARE (0.05),
# VAL_EVERY (EPOCHS), BATCH (64), LR (0.1), SEED (42), DEVICE (auto), PRECISION (bf16;
# DEMO_PRECISION=fp32 make demo trains and evaluates in float32), OUT (demo).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin} BUILD=${BUILD:-build}
OUT=${OUT:-demo} EPOCHS=${EPOCHS:-10} BATCH=${BATCH:-64} LR=${LR:-0.1} SEED=${SEED:-42} DEVICE=${DEVICE:-auto}
MIN_CROP=${MIN_CROP:-16} RAMP_START=${RAMP_START:-3} RAMP_END=${RAMP_END:-8} VAL_SHARE=${VAL_SHARE:-0.05}
VAL_EVERY=${VAL_EVERY:-$EPOCHS} PRECISION=${PRECISION:-${DEMO_PRECISION:-bf16}}
PATH="$PWD/$BIN:$PATH"

since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
stage_t0=0 total_t0=$EPOCHREALTIME
stage() { stage_t0=$EPOCHREALTIME; echo "== $1" >&2; }
done_stage() { echo "== $1: $(since "$stage_t0") s" >&2; }

stage "Fashion-MNIST -> $OUT/fashion/{train,test}/<class>/*.png"
"$BUILD/data/fashion_mnist" -q "$OUT/fashion"
done_stage "images"

stage "dsplit: $VAL_SHARE of the 60,000 training images to validate on; a manifest of the 10,000 test images"
dsplit -q --val "$VAL_SHARE" -o "$OUT/split" "$OUT/fashion/train" >/dev/null
dsplit -q --val 0 -o "$OUT/split-test" "$OUT/fashion/test" >/dev/null
cmp -s "$OUT/split/classes.txt" "$OUT/split-test/classes.txt" ||
    { echo "demo: error: the train and test trees have different classes" >&2; exit 1; }
done_stage "dsplit"

stage "dspack: 28x28 shards"
for s in train val; do
    # A rerun of the demo makes the same set again: replacing the last run's is intended.
    dspack -q --overwrite --size 28 --fit squash -o "$OUT/packed/$s" "$OUT/split/$s.txt" >/dev/null
done
done_stage "dspack"

stage "dstrain: resnet20, $EPOCHS epochs, crops from $MIN_CROP to 28"
rm -rf "$OUT/run"
dstrain --train "$OUT/packed/train" --val "$OUT/packed/val" -o "$OUT/run" --arch resnet20 \
    --crop 28 --pad 2 --min-crop "$MIN_CROP" --ramp-start "$RAMP_START" --ramp-end "$RAMP_END" --crop-step 4 \
    --batch "$BATCH" --epochs "$EPOCHS" --val-every "$VAL_EVERY" --lr "$LR" --lr-scaling none --warmup-epochs 1 \
    --wd 5e-4 --label-smoothing 0.1 --seed "$SEED" --device "$DEVICE" --precision "$PRECISION" --log-every 100
done_stage "dstrain"

stage "dseval: the official test set, decoded from its manifest, each image and its mirror"
dseval --device "$DEVICE" --precision "$PRECISION" --tta flip --per-class "$OUT/test-per-class.csv" "$OUT/run/best.h5" "$OUT/split-test/train.txt" \
    --json >"$OUT/test.json"
done_stage "dseval"
echo "== total: $(since "$total_t0") s" >&2
cat "$OUT/test.json"
