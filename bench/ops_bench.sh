#!/usr/bin/env bash
# Per-op timings of the CPU backend on the convolution shapes of resnet20 (32x32, batch 128)
# and resnet50 (224x224, batch 16), in ms and GFLOP/s next to the measured FMA peak.
#   bench/ops_bench.sh [resnet20|resnet50|all] [repeats]
# THREADS (default 2) sets the OpenMP threads. On a machine shared with other jobs the wall
# clock mostly measures the scheduler; DS_BENCH_CLOCK=cpu reports CPU seconds per thread
# instead (closest to what the ops take alone, most meaningful with THREADS=1).
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory -j2 build/bench/ops_bench >/dev/null
OMP_NUM_THREADS="${THREADS:-2}" exec build/bench/ops_bench "${1:-all}" "${2:-3}"
