#!/bin/bash
# Whole-network throughput of the ds engine next to PyTorch, same machine, same run:
# training images/s (forward + backward + SGD step, fp32) and peak resident memory (VmHWM).
#   bench/engine_bench.sh [STEPS]        (default 5 timed steps after 1 warm-up)
# Threads: OMP_NUM_THREADS (default 2) for both. Not a test; numbers move with machine load.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
STEPS=${1:-5}
PY=${PYTHON:-/usr/bin/python3}
BENCH=${BUILD:-build}/drivers/engine_bench
[ -x "$BENCH" ] || { echo "engine_bench: $BENCH missing: run make" >&2; exit 1; }

# Runs a command; prints "IMAGES_PER_S PEAK_MIB" (the last field of its last output line and
# GNU time's maximum resident set size).
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
peak() {
    local out
    out=$(/usr/bin/time -f "%M" -o "$tmp" "$@" | tail -1)
    echo "${out##* } $(( $(tail -1 "$tmp") / 1024 ))"
}


printf "%-10s %5s %5s %-6s | %9s %8s | %9s %8s | %9s %8s\n" arch size batch mode \
    "ds img/s" "ds MiB" "pt img/s" "pt MiB" "pt-cl img/s" "pt-cl MiB"
for cfg in "resnet50 224 16 train" "resnet18 224 16 train" "resnet20 32 128 train" "resnet50 224 32 infer"; do
    set -- $cfg
    ds=$(peak "$BENCH" "$1" "$2" "$3" "$4" "$STEPS")
    pt=$(peak "$PY" bench/engine_bench_torch.py "$1" "$2" "$3" "$4" default "$STEPS")
    cl=$(peak "$PY" bench/engine_bench_torch.py "$1" "$2" "$3" "$4" channels_last "$STEPS")
    printf "%-10s %5s %5s %-6s | %9s %8s | %9s %8s | %9s %8s\n" "$1" "$2" "$3" "$4" $ds $pt $cl
done
