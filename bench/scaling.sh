#!/bin/bash
# bench/scaling.sh [EPOCHS] [ARCH] [CROP] [MICRO_BATCH] [OUT_DIR]: one training configuration
# at 1, 2 and 3 ranks (mpirun), at one global batch of 6 micro-batches (1 rank x accum 6,
# 2 x 3, 3 x 2), then the three runs side by side (scripts/compare.py: the table, and
# compare.png in OUT_DIR). On the CPU the three must end with bitwise the same checkpoints
# (docs/DESIGN.md §7: -np W --accum A is --accum W x A), which the script checks; what the
# ranks change is only the time. With a GPU per rank (--device auto takes them) NCCL sums in
# its own order, so the runs are compared, not checked.
# Default: 3 epochs of resnet20 on 32x32 crops of 1,200 synthetic images (10 classes),
# micro-batch 8 (global batch 48), the cores shared evenly between the ranks.
set -euo pipefail
epochs=${1:-3} arch=${2:-resnet20} crop=${3:-32} micro=${4:-8}
here=$(cd "$(dirname "$0")/.." && pwd)
out=${5:-$here/bench/results/scaling-$(date -u +%Y%m%d-%H%M%S)}
BIN=${BIN:-$here/bin} SYNTH=${SYNTH:-$here/build/data/synth} PYTHON=${PYTHON:-/usr/bin/python3}
for p in "$BIN/dstrain" "$BIN/dsplit" "$BIN/dspack" "$SYNTH"; do
    [ -x "$p" ] || { echo "scaling.sh: build first ($p missing)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "scaling.sh: needs mpirun (make deps)" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/scaling.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$SYNTH" -q --classes 10 --per-class 120 "$work/tree"
"$BIN/dsplit" -q --val 0.2 -o "$work/split" "$work/tree"
"$BIN/dspack" -q --size $((crop + crop / 8)) -o "$work/train" "$work/split/train.txt"
"$BIN/dspack" -q --size $((crop + crop / 8)) -o "$work/val" "$work/split/val.txt"
cores=$(nproc)
runs=()
for w in 1 2 3; do
    threads=$((cores / w > 0 ? cores / w : 1))
    echo "== $w rank(s): --batch $micro --accum $((6 / w)), $threads thread(s) each" >&2
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$w" "$BIN/dstrain" --train "$work/train" \
        --val "$work/val" --arch "$arch" --crop "$crop" --batch "$micro" --accum $((6 / w)) --epochs "$epochs" \
        --warmup-epochs 1 --threads "$threads" --loader-threads 1 --log-every 5 -q -o "$out/np$w"
    runs+=("$out/np$w")
done
device=$("$PYTHON" -c 'import h5py, sys; print(h5py.File(sys.argv[1], "r").attrs["device"].decode())' "$out/np1/last.h5")
if [ "$device" = cpu ]; then
    same=1
    for w in 2 3; do
        h5diff -q "$out/np1/last.h5" "$out/np$w/last.h5" /model /model &&
            h5diff -q "$out/np1/last.h5" "$out/np$w/last.h5" /optimizer /optimizer || same=0
    done
    if [ $same = 1 ]; then echo "checkpoints: 1, 2 and 3 ranks bitwise identical (/model, /optimizer)"
    else echo "checkpoints: NOT identical across rank counts" >&2; exit 1; fi
else
    echo "checkpoints: on $device the ranks sum in NCCL's order: compared, not checked for bits"
fi
"$PYTHON" "$here/scripts/compare.py" --png "$out/compare.png" "${runs[@]}" | tee "$out/compare.md"
echo "runs, table and picture in $out (load average $(cut -d' ' -f1 /proc/loadavg))"
