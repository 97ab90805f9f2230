#!/bin/bash
# Runs the benchmarks (`make bench` calls it): builds what they run (make bench-build: the
# tools, the data generators and the bench/*.c drivers, which `make` alone never builds),
# then each benchmark picked, one after the other, printing its output and keeping a copy.
#   bench/run.sh [--quick] [--no-build] [NAME...]      make bench [BENCH="[--quick] NAME..."]
# NAME (default: ops pack dsplit loader, a few minutes on 2 cores):
#   ops      per-op CPU timings against the FMA peak       bench/ops_bench.sh     OPS.md
#   pack     dspack against a Pillow + h5py packer         bench/pack_bench.sh    PACK.md
#   dsplit   dsplit against `find | wc -l`, 200,000 files  bench/dsplit_bench.sh
#   loader   the loader's images/s alone and with the CPU  bench/loader_bench.sh  SCALE.md
#            input op, per thread count, warm and cold
#   engine   whole-network images/s against PyTorch (the   bench/engine_bench.sh  ENGINE.md
#            torch of $PYTHON, default /usr/bin/python3); ~10 minutes on 2 cores
#   gpu      the GPU tests and images/s against PyTorch    bench/gpu.sh (needs a GPU; <= 9 min)
#   checksum what checking shard checksums costs the       build/bench/checksum_bench (~20 s)
#            loader (bench/checksum_bench.c)
#   overlap  under mpirun, how long before backward's end  bench/overlap_bench.sh (~10 s)
#            the CPU reduction thread begins its first bucket
#   scaling  one configuration at 1, 2, 3 ranks, bitwise    bench/scaling.sh (~40 s)
#            checked, compared (scripts/compare.py)
# --quick runs each with its smallest setting (seconds: to see that it runs, not to measure);
# --no-build skips the make. Results: each benchmark's output also goes to
# $BENCH_RESULTS/NAME.txt (default bench/results/<UTC date-time>/), named at the start and
# the end. Exits 1 when a benchmark failed or could not run. Numbers move with the machine's
# load: read the .md file beside each script before comparing them.
set -u
cd "$(dirname "$0")/.."
quick=0 build=1 names=()
for a in "$@"; do
    case $a in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    ops | pack | dsplit | loader | engine | gpu | checksum | overlap | scaling) names+=("$a") ;;
    *) echo "bench/run.sh: unknown benchmark or option '$a' (ops pack dsplit loader engine gpu checksum overlap scaling, --quick, --no-build)" >&2
       exit 2 ;;
    esac
done
[ ${#names[@]} -gt 0 ] || names=(ops pack dsplit loader)
PY=${PYTHON:-/usr/bin/python3}
results=${BENCH_RESULTS:-bench/results/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$results" || exit 1
echo "benchmarks: ${names[*]}$([ $quick = 1 ] && echo ' (--quick: smallest settings)'); results in $results/"

if [ $build = 1 ]; then
    make --no-print-directory -j"$(nproc)" bench-build >"$results/build.log" 2>&1 ||
        { tail -n 20 "$results/build.log" >&2; echo "bench/run.sh: make bench-build failed" >&2; exit 1; }
    head -n 1 "$results/build.log"
fi

# What a benchmark needs beyond the build; prints why it cannot run, or nothing.
missing() {
    case $1 in
    pack) "$PY" -c 'import PIL, h5py' 2>/dev/null || echo "$PY cannot import PIL and h5py (make deps)" ;;
    engine) "$PY" -c 'import torch' 2>/dev/null || echo "$PY cannot import torch (make deps, or PYTHON=...)" ;;
    gpu) nvidia-smi -L >/dev/null 2>&1 || echo "no GPU (nvidia-smi -L failed)" ;;
    overlap | scaling) command -v mpirun >/dev/null || echo "no mpirun (make deps)" ;;
    esac
}
# The command line of a benchmark, full or --quick, into args.
set_args() {
    case $1:$quick in
    ops:0) args=(bench/ops_bench.sh) ;;
    ops:1) args=(bench/ops_bench.sh resnet20 1) ;;
    pack:0) args=(bench/pack_bench.sh) ;;
    pack:1) args=(env REPEAT=1 bench/pack_bench.sh 50) ;;
    dsplit:0) args=(bench/dsplit_bench.sh) ;;
    dsplit:1) args=(bench/dsplit_bench.sh 20 20) ;;
    loader:0) args=(bench/loader_bench.sh) ;;
    loader:1) args=(env THREADS=1,2 bench/loader_bench.sh 600) ;;
    engine:0) args=(bench/engine_bench.sh) ;;
    engine:1) args=(env ONLY=resnet20 bench/engine_bench.sh 1) ;;
    gpu:*) args=(env OUT="${OUT:-$PWD/$results}" bench/gpu.sh) ;;
    checksum:0) args=(build/bench/checksum_bench 1024 256 3 2) ;;
    checksum:1) args=(build/bench/checksum_bench 128 64 1 2) ;;
    overlap:0) args=(bench/overlap_bench.sh) ;;
    overlap:1) args=(bench/overlap_bench.sh 2 4) ;;
    scaling:0) args=(bench/scaling.sh 3 resnet20 32 8 "$results/scaling") ;;
    scaling:1) args=(bench/scaling.sh 1 resnet20 16 4 "$results/scaling") ;;
    esac
}

failed=()
for n in "${names[@]}"; do
    why=$(missing "$n")
    if [ -n "$why" ]; then
        echo "== $n: not run: $why" | tee "$results/$n.txt"
        failed+=("$n")
        continue
    fi
    set_args "$n"
    echo "== $n: ${args[*]}"
    t0=$SECONDS
    "${args[@]}" 2>&1 | tee "$results/$n.txt"
    rc=${PIPESTATUS[0]}
    echo "== $n: exit $rc, $((SECONDS - t0)) s"
    [ "$rc" -eq 0 ] || failed+=("$n")
done
echo "results in $results/ ($(cd "$results" && ls -- *.txt | paste -sd ' '))"
[ ${#failed[@]} -eq 0 ] || { echo "failed or not run: ${failed[*]}"; exit 1; }
