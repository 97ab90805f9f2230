#!/bin/bash
# overlap_bench.sh [RANKS] [STEPS] [ARCH] [CROP] [BATCH] [BUCKET_MB]: how early the CPU's
# gradient reduction begins under mpirun. dstrain --verbose says per step when (process-wide
# event numbers, and ms) comm's thread began the first bucket relative to backward's last
# layer; this prints the per-step figures, the median lead in ms (positive: begun while
# backward still computed) and on how many steps it began before that layer. Default: 2
# ranks, 20 steps, resnet20 on 32x32 crops, batch 32 per rank, 0.05 MiB buckets, one compute
# and one loader thread per rank, on 2,000 synthetic images. A measure, not a check: the
# scheduler decides when the thread gets a core (test_dstrain_mpi.sh checks the hand-over
# order, which does not depend on it).
set -euo pipefail
ranks=${1:-2} steps=${2:-20} arch=${3:-resnet20} crop=${4:-32} batch=${5:-32} bucket=${6:-0.05}
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$here/bin} SYNTH=${SYNTH:-$here/build/data/synth}
for p in "$BIN/dstrain" "$BIN/dsplit" "$BIN/dspack" "$SYNTH"; do
    [ -x "$p" ] || { echo "overlap_bench: build first ($p missing)" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "overlap_bench: needs mpirun (make deps)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/overlap-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$SYNTH" -q --classes 10 --per-class 200 "$work/tree"
"$BIN/dsplit" -q --val 0 -o "$work/split" "$work/tree"
"$BIN/dspack" -q --size $((crop + crop / 8)) -o "$work/train" "$work/split/train.txt"
mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$BIN/dstrain" --train "$work/train" --arch "$arch" \
    --crop "$crop" --batch "$batch" --epochs 100 --max-steps "$steps" --threads 1 --loader-threads 1 \
    --log-every 0 --bucket-mb "$bucket" --verbose -o "$work/run" 2>"$work/err"
printf 'ranks %s, %s steps, %s on %sx%s crops, batch %s per rank, %s MiB buckets  (load average %s)\n' \
    "$ranks" "$steps" "$arch" "$crop" "$crop" "$batch" "$bucket" "$(cut -d' ' -f1 /proc/loadavg)"
sed -n 's/.*step \([0-9]*\): \([0-9]*\) gradient buckets reduced; events: first queued #\([0-9]*\), backward.s last layer #\([0-9]*\), first begun #\([0-9]*\) (\(-\{0,1\}[0-9.]*\) ms.*/\1 \2 \3 \4 \5 \6/p' \
    "$work/err" >"$work/steps"
[ -s "$work/steps" ] || { echo "overlap_bench: no per-step lines in dstrain's output" >&2; tail -5 "$work/err" >&2; exit 1; }
awk '{ printf "step %3d: %2d buckets, first begun %8.3f ms before backward'"'"'s last layer%s\n", $1, $2, $6,
       ($5 > 0 && $5 < $4) ? "" : " (after it)" }' "$work/steps"
n=$(wc -l <"$work/steps")
median=$(cut -d' ' -f6 "$work/steps" | sort -g | awk -v n="$n" '{ v[NR] = $1 }
    END { printf "%.3f", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }')
before=$(awk '$5 > 0 && $5 < $4' "$work/steps" | wc -l)
echo "median lead $median ms; begun before backward's last layer on $before of $n steps"
