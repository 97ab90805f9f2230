#!/bin/bash
# Whole-network throughput of the ds engine next to PyTorch, same machine, same run:
# training images/s (forward + backward + SGD step, fp32) and peak resident memory (VmHWM).
#   bench/engine_bench.sh [STEPS]        (default 5 timed steps after 1 warm-up)
# Environment:
#   OMP_NUM_THREADS  threads for both (default 2)
#   ISA=avx2|avx512  pins both to one instruction set: ds with DS_CPU_KERNELS, PyTorch with
#                    DNNL_MAX_CPU_ISA (oneDNN's convolutions) and ATEN_CPU_CAPABILITY (its
#                    other kernels), so the AVX2 comparison can be made on an AVX-512 CPU;
#                    unset, each uses the best the CPU has
#   REPEAT=N         runs every configuration N times, the three programs taking turns, and
#                    keeps each one's best (default 1): on a machine shared with other jobs
#                    the best of a few is the fairer figure
#   ONLY=PATTERN     only the rows whose "arch size batch mode" contains PATTERN
#   MALLOC=keep|default  keep (the default): every program runs with glibc's malloc told to
#                    keep what is freed (GLIBC_TUNABLES below). PyTorch allocates its
#                    activations afresh every step; by default glibc returns the large blocks
#                    to the kernel and the next step faults them in again, which on a virtual
#                    machine with costly page faults took a third of PyTorch's time (resnet50
#                    training 2.6 against 7.2 images/s here). ds plans its memory once and is
#                    not affected. `default` measures PyTorch as it runs out of the box.
# Prints the CPU, the instruction sets in use and one row per configuration, the last column
# ds / the faster PyTorch layout. Not a test; numbers move with machine load.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
STEPS=${1:-5}
REPEAT=${REPEAT:-1}
PY=${PYTHON:-/usr/bin/python3}
BENCH=${BUILD:-build}/bench/engine_bench
[ -x "$BENCH" ] || { echo "engine_bench: $BENCH missing: run make bench-build" >&2; exit 1; }
case ${MALLOC:-keep} in
keep) export GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=17179869184 ;;
default) ;;
*) echo "engine_bench: MALLOC must be keep or default, not '$MALLOC'" >&2; exit 2 ;;
esac
case ${ISA:-} in
"") ;;
avx2) export DS_CPU_KERNELS=avx2 DNNL_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 ;;
avx512) export DS_CPU_KERNELS=avx512 DNNL_MAX_CPU_ISA=AVX512_CORE ATEN_CPU_CAPABILITY=avx512 ;;
*) echo "engine_bench: ISA must be avx2 or avx512, not '$ISA'" >&2; exit 2 ;;
esac

cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
fam=$(sed -n 's/^cpu family\s*: //p' /proc/cpuinfo | head -1)
mod=$(sed -n 's/^model\s*: //p' /proc/cpuinfo | head -1)
flags=$(grep -o -w 'avx512f\|avx2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')
ds_isa=$("${BIN:-bin}/dsplit" --version 2>&1 | sed -n 's/^cpu kernels: //p; s/^dsplit: error: //p')
pt_isa=$("$PY" -c 'import torch; print([l.split(":")[1].strip() for l in torch.__config__.show().splitlines() if "CPU capability" in l][0])' 2>/dev/null)
echo "CPU: ${cpu:-unknown} (family $fam model $mod; $flags), $OMP_NUM_THREADS threads"
echo "ds cpu kernels: ${ds_isa:-unknown}; PyTorch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null):" \
     "capability ${pt_isa:-unknown}, oneDNN max ISA ${DNNL_MAX_CPU_ISA:-(best)}; malloc ${MALLOC:-keep}"

# Runs a command; prints "IMAGES_PER_S PEAK_MIB" (the last field of its last output line and
# GNU time's maximum resident set size).
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
peak() {
    local out
    out=$(/usr/bin/time -f "%M" -o "$tmp" "$@" | tail -1)
    echo "${out##* } $(( $(tail -1 "$tmp") / 1024 ))"
}
# best "R M" "R M": the pair with the higher rate.
best() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); r = (y[1] + 0 > x[1] + 0) ? b : a; print r }'; }

printf "%-10s %5s %5s %-6s | %9s %8s | %9s %8s | %11s %9s | %s\n" arch size batch mode \
    "ds img/s" "ds MiB" "pt img/s" "pt MiB" "pt-cl img/s" "pt-cl MiB" "ds / faster pt"
for cfg in "resnet50 224 16 train" "resnet18 224 16 train" "resnet20 32 128 train" "resnet50 224 32 infer"; do
    [[ "$cfg" == *"${ONLY:-}"* ]] || continue
    set -- $cfg
    ds="0 0" pt="0 0" cl="0 0"
    for _ in $(seq "$REPEAT"); do
        ds=$(best "$ds" "$(peak "$BENCH" "$1" "$2" "$3" "$4" "$STEPS" 2>/dev/null)")
        pt=$(best "$pt" "$(peak "$PY" bench/engine_bench_torch.py "$1" "$2" "$3" "$4" default "$STEPS")")
        cl=$(best "$cl" "$(peak "$PY" bench/engine_bench_torch.py "$1" "$2" "$3" "$4" channels_last "$STEPS")")
    done
    ratio=$(awk -v d="${ds%% *}" -v p="${pt%% *}" -v c="${cl%% *}" \
        'BEGIN { m = (p + 0 > c + 0) ? p : c; r = (m > 0) ? d / m : 0; printf "%.2fx", r }')
    printf "%-10s %5s %5s %-6s | %9s %8s | %9s %8s | %11s %9s | %s\n" "$1" "$2" "$3" "$4" $ds $pt $cl "$ratio"
done
