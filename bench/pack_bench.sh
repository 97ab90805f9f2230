#!/bin/bash
# dspack against the Python packer a user would write (bench/pack_peer.py: Pillow + h5py,
# multiprocessing.Pool) on the same ImageNet-like JPEGs, and against libjpeg-turbo's
# decode-only speed on those files (tjbench), which no packer can beat.
#   bench/pack_bench.sh [N_IMAGES (1000)]     THREADS=2 SIZE=224 FIT=squash
# Needs `make` (bin/dspack, build/data/synth) and libjpeg-turbo-progs (tjbench).
set -eu
cd "$(dirname "$0")/.."
N=${1:-1000} THREADS=${THREADS:-2} SIZE=${SIZE:-224} FIT=${FIT:-squash}
PY=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/pack-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ~400x350 JPEGs at quality 90, every tenth larger than 1000 px (data/synth.c).
build/data/synth -q --classes 10 --per-class $(( (N + 9) / 10 )) "$work/tree" >/dev/null
{
    echo "# ds-manifest 1 root=$work/tree"
    label=0
    for d in $(cd "$work/tree" && ls -d n* | sort); do
        (cd "$work/tree" && ls "$d" | LC_ALL=C sort | sed "s|^|$label\t$d/|")
        label=$((label + 1))
    done
} | head -n $((N + 1)) >"$work/all.txt"
(cd "$work/tree" && ls -d n* | sort) >"$work/classes.txt"
n=$(($(wc -l <"$work/all.txt") - 1))
cat "$work"/tree/*/* >/dev/null   # page cache warm for every contender

# Alternate the contenders and keep each one's best of REPEAT runs, so a burst of other load
# on the machine does not decide the ratio.
REPEAT=${REPEAT:-3}
ds_rate=0 py_rate=0
best() { "$PY" -c 'import json,sys; print(max(float(sys.argv[1]), json.loads(sys.argv[2])["images_per_second"]))' "$@"; }
for _ in $(seq "$REPEAT"); do
    rm -rf "$work/ds" "$work/peer.h5"
    ds=$(bin/dspack -q --json -o "$work/ds" --size "$SIZE" --fit "$FIT" --threads "$THREADS" --max-reject "$n" "$work/all.txt")
    ds_rate=$(best "$ds_rate" "$ds")
    py=$("$PY" bench/pack_peer.py "$work/all.txt" "$work/peer.h5" --size "$SIZE" --workers "$THREADS")
    py_rate=$(best "$py_rate" "$py")
done

# Decode-only bound: tjbench (full-size decode, as dspack does at this size) on a sample of
# the files; images/s = THREADS / mean seconds per image.
tj_rate=n/a
if command -v tjbench >/dev/null; then
    sample=$(grep -v '^#' "$work/all.txt" | cut -f2 | awk -v n="$n" 'NR % int((n + 39) / 40) == 0')
    tj_rate=$(cd "$work/tree" && echo "$sample" | while IFS= read -r f; do
        tjbench "$f" -benchtime 0.05 -warmup 0 2>/dev/null | sed -n 's/.*Frame rate: *\([0-9.]*\) fps.*/\1/p' | head -1
    done | awk -v t="$THREADS" '{ s += 1 / $1; k++ } END { if (k) printf "%.1f", t * k / s; else print "n/a" }')
fi

echo "pack benchmark: $n JPEGs (~400x350 q90), --size $SIZE --fit $FIT, $THREADS threads, $(nproc) cores, best of $REPEAT"
echo "  load average before: $(cut -d" " -f1-3 /proc/loadavg)"
printf '  %-44s %8s img/s\n' "dspack" "$ds_rate"
printf '  %-44s %8s img/s\n' "Python (Pillow + h5py, Pool($THREADS))" "$py_rate"
printf '  %-44s %8s img/s\n' "libjpeg-turbo decode only (tjbench, bound)" "$tj_rate"
"$PY" - "$ds_rate" "$py_rate" "$tj_rate" <<'PYEOF'
import sys
ds, py, tj = sys.argv[1:4]
print(f"  dspack / Python = {float(ds) / float(py):.2f}x")
if tj != "n/a":
    print(f"  dspack / decode-only bound = {100 * float(ds) / float(tj):.0f}%")
PYEOF
