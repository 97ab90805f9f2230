#!/bin/bash
# Whole-network throughput of the ds engine next to PyTorch, same machine, same run:
# training images/s (forward + backward + SGD step) and peak resident memory (VmHWM).
#   bench/engine_bench.sh [STEPS]        (default 5 timed steps after 1 warm-up)
# Environment:
#   OMP_NUM_THREADS  threads for both (default 2)
#   PRECISION=fp32|bf16|both  (default fp32) bf16: ds runs `engine_bench --precision bf16`,
#                    PyTorch torch.autocast("cpu", dtype=torch.bfloat16) around forward and
#                    loss, as its users write mixed precision (weights and SGD stay fp32 in
#                    both). both: an fp32 and a bf16 row for each configuration
#   PYTHON=PATH      PyTorch's interpreter (default /usr/bin/python3: Debian's PyTorch 1.13);
#                    PYTHON=build/peers/venv/bin/python3 is the current PyTorch 2.x that
#                    bench/peers.sh installs
#   TORCH_COMPILE=1  PyTorch's model through torch.compile (PyTorch 2 only; its first two
#                    steps compile, untimed: 45 s per process for resnet20 on 2 cores)
#   ISA=avx2|avx512|avx512bf16  pins both to one instruction set: ds with DS_CPU_KERNELS,
#                    PyTorch with DNNL_MAX_CPU_ISA (oneDNN's convolutions) and
#                    ATEN_CPU_CAPABILITY (its other kernels), so the AVX2 comparison can be
#                    made on an AVX-512 CPU; unset, each uses the best the CPU has. Under
#                    avx512, bf16 still runs: oneDNN emulates the BF16 extension's
#                    instructions with plain AVX-512 ones. avx512bf16 adds the extension
#                    (oneDNN's AVX512_CORE_BF16, ds's avx512bf16 kernels), needs a CPU with
#                    avx512_bf16, and for ATen is avx512, which has no finer level; amx
#                    adds the tiles (oneDNN's AVX512_CORE_AMX, ds's amx set: not bitwise
#                    its exact sets, docs/DESIGN.md §7) and needs a CPU with amx_bf16. Unset,
#                    PyTorch's oneDNN uses AMX where the CPU has it and ds its best exact
#                    set; ISA=amx is the like-for-like bf16 row there
#   REPEAT=N         runs every configuration N times, the three programs taking turns, and
#                    keeps each one's best (default 1): on a machine shared with other jobs
#                    the best of a few is the fairer figure
#   ONLY=PATTERN     only the rows whose "arch size batch mode precision" contains PATTERN
#   MALLOC=keep|default  keep (the default): every program runs with glibc's malloc told to
#                    keep what is freed (GLIBC_TUNABLES below). PyTorch allocates its
#                    activations afresh every step; by default glibc returns the large blocks
#                    to the kernel and the next step faults them in again, which on a virtual
#                    machine with costly page faults took a third of PyTorch's time (resnet50
#                    training 2.6 against 7.2 images/s here). ds plans its memory once and is
#                    not affected. `default` measures PyTorch as it runs out of the box.
# Prints the CPU, the instruction sets in use and one row per configuration and precision,
# the last column ds / the faster PyTorch layout. A program that fails shows "failed" in its
# cells and its last error line under the table; the other rows still run (ds's CPU bf16 and
# the avx512bf16 kernels are newer than this script: an engine_bench without them fails
# there). Not a test; numbers move with machine load.
set -u
cd "$(dirname "$0")/.." || exit 1
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
avx512bf16) export DS_CPU_KERNELS=avx512bf16 DNNL_MAX_CPU_ISA=AVX512_CORE_BF16 ATEN_CPU_CAPABILITY=avx512 ;;
amx) export DS_CPU_KERNELS=amx DNNL_MAX_CPU_ISA=AVX512_CORE_AMX ATEN_CPU_CAPABILITY=avx512 ;;
*) echo "engine_bench: ISA must be avx2, avx512, avx512bf16 or amx, not '$ISA'" >&2; exit 2 ;;
esac
case ${PRECISION:-fp32} in
fp32 | bf16) precisions=${PRECISION:-fp32} ;;
both) precisions="fp32 bf16" ;;
*) echo "engine_bench: PRECISION must be fp32, bf16 or both, not '$PRECISION'" >&2; exit 2 ;;
esac

cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
fam=$(sed -n 's/^cpu family\s*: //p' /proc/cpuinfo | head -1)
mod=$(sed -n 's/^model\s*: //p' /proc/cpuinfo | head -1)
flags=$(grep -o -w 'avx512f\|avx512_bf16\|avx2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')
ds_isa=$("${BIN:-bin}/dsplit" --version 2>&1 | sed -n 's/^cpu kernels: //p; s/^dsplit: error: //p')
# "VERSION CAPABILITY ONEDNN" from one start of the interpreter (a PyTorch 2 import takes seconds).
read -r pt_ver pt_isa pt_dnnl < <("$PY" -c 'import re, torch
cfg = torch.__config__.show()
get = lambda pattern: (re.findall(pattern, cfg) or ["unknown"])[0]
print(torch.__version__, get(r"CPU capability usage: (\S+)"), get(r"MKL-DNN (v\S+)"))' 2>/dev/null)
echo "CPU: ${cpu:-unknown} (family $fam model $mod; $flags), $OMP_NUM_THREADS threads"
case ${TORCH_COMPILE:-0} in "" | 0) compiled= ;; *) compiled=" torch.compile" ;; esac
echo "ds cpu kernels: ${ds_isa:-unknown}; PyTorch ${pt_ver:-not found with $PY}$compiled:" \
     "capability ${pt_isa:-unknown}, oneDNN ${pt_dnnl:-unknown} max ISA ${DNNL_MAX_CPU_ISA:-(best)}; malloc ${MALLOC:-keep}"
echo "precision: $precisions$([[ $precisions == *bf16* ]] && echo " (bf16: ds --precision bf16, PyTorch torch.autocast bf16)")"

# peak LABEL COMMAND...: runs COMMAND; prints "IMAGES_PER_S PEAK_MIB" (the last field of its
# last output line and GNU time's maximum resident set size), or "failed -" when it exits
# non-zero or prints no rate, with LABEL and its last error line added to the notes: one
# program that fails (ds's bf16 while its CPU kernels are being written) costs its cells, not
# the table.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/notes"
peak() {
    local label=$1 out rc
    shift
    out=$(/usr/bin/time -f "%M" -o "$tmp/time" "$@" 2>"$tmp/err")
    rc=$?
    out=${out##*$'\n'}
    out=${out##* }
    if [ "$rc" -ne 0 ] || ! [[ "$out" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
        echo "$label: $([ "$rc" -ne 0 ] && echo "exit $rc, ")$(grep -v '^[[:space:]]*$' "$tmp/err" | tail -1)" >>"$tmp/notes"
        echo "failed -"
        return
    fi
    echo "$out $(( $(tail -1 "$tmp/time") / 1024 ))"
}
# best "R M" "R M": the pair with the higher rate ("failed" counts as 0, so it stays only
# when every repetition failed).
best() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " "); r = (y[1] + 0 > x[1] + 0) ? b : a; print r }'; }

printf "%-10s %5s %5s %-6s %-4s | %9s %8s | %9s %8s | %11s %9s | %s\n" arch size batch mode prec \
    "ds img/s" "ds MiB" "pt img/s" "pt MiB" "pt-cl img/s" "pt-cl MiB" "ds / faster pt"
for cfg in "resnet50 224 16 train" "resnet18 224 16 train" "resnet20 32 128 train" "resnet50 224 32 infer"; do
    for prec in $precisions; do
        [[ "$cfg $prec" == *"${ONLY:-}"* ]] || continue
        set -- $cfg
        row="$cfg $prec"
        ds="failed -" pt="failed -" cl="failed -"
        for _ in $(seq "$REPEAT"); do
            ds=$(best "$ds" "$(peak "$row ds" "$BENCH" --precision "$prec" "$1" "$2" "$3" "$4" "$STEPS")")
            pt=$(best "$pt" "$(peak "$row pt" "$PY" bench/engine_bench_torch.py "$1" "$2" "$3" "$4" default "$STEPS" "$prec")")
            cl=$(best "$cl" "$(peak "$row pt-cl" "$PY" bench/engine_bench_torch.py "$1" "$2" "$3" "$4" channels_last "$STEPS" "$prec")")
        done
        ratio=$(awk -v d="${ds%% *}" -v p="${pt%% *}" -v c="${cl%% *}" \
            'BEGIN { m = (p + 0 > c + 0) ? p + 0 : c + 0; if (d + 0 > 0 && m > 0) printf "%.2fx", d / m; else print "-" }')
        printf "%-10s %5s %5s %-6s %-4s | %9s %8s | %9s %8s | %11s %9s | %s\n" "$1" "$2" "$3" "$4" "$prec" $ds $pt $cl "$ratio"
    done
done
if [ -s "$tmp/notes" ]; then
    echo "failed (last error line of each):"
    awk '!seen[$0]++ { print "  " $0 }' "$tmp/notes"
fi
