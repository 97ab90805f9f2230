#!/bin/bash
# The loader's images/s (bench/loader_bench.c) over shards of N synthetic ImageNet-like
# JPEGs (500x375, quality 90, ~110 KB) packed at 256x256 --fit crop: warm (page cache) and
# cold (the shards' pages dropped before each timed pass).
#   bench/loader_bench.sh [N_IMAGES (6000)] [SHARD_DIR]
# With SHARD_DIR it times that directory instead and packs nothing. THREADS (default
# "1,2,4") lists the loader thread counts; AUGMENT (crop-flip, rrc or center), VERIFY
# (later-epochs or first-epoch) and BATCH (256) pass through.
# Needs `make bench-build` (bin/dsplit, bin/dspack, build/data/synth, build/bench/loader_bench).
set -eu
cd "$(dirname "$0")/.."
N=${1:-6000}
args=(--threads "${THREADS:-1,2,4}" --augment "${AUGMENT:-crop-flip}" --verify "${VERIFY:-later-epochs}"
      --batch "${BATCH:-256}")
for b in bin/dsplit bin/dspack build/data/synth build/bench/loader_bench; do
    [ -x "$b" ] || { echo "loader_bench.sh: $b missing (make bench-build)" >&2; exit 1; }
done
if [ -n "${2:-}" ]; then
    shards=$2
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/loader-bench.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    build/data/synth -q --classes 10 --per-class $(( (N + 9) / 10 )) --width 500 --height 375 --noise 0.35 \
        "$work/tree" >/dev/null
    bin/dsplit -q "$work/tree" -o "$work/m" --val 0
    bin/dspack -q -o "$work/shards" --size 256 --fit crop "$work/m/train.txt"
    rm -rf "$work/tree"
    shards=$work/shards
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
build/bench/loader_bench "${args[@]}" --cache warm "$shards"
build/bench/loader_bench "${args[@]}" --cache cold "$shards"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
