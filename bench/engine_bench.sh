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
#   PYTHON=PATH      PyTorch's interpreter (default build/peers/venv/bin/python3, the
#                    current PyTorch 2.x that bench/peers.sh installs, when it exists; else
#                    /usr/bin/python3, Debian's PyTorch 1.13)
#   TORCH_COMPILE    unset: PyTorch 2 runs eager and through torch.compile (its first two
#                    steps compile, untimed: 45 s per process for resnet20 on 2 cores), each
#                    in both layouts, and the fastest of the four is the peer; 0: eager only;
#                    1: compiled only
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
#   REPEAT=N         runs every program N times (default 1), taking turns (ds, then each
#                    PyTorch configuration, then again), so a change in the machine's load is
#                    shared; each cell is the median of its runs (the lower middle for an
#                    even N) with the range of the N in brackets
#   ONLY=PATTERN     only the rows whose "arch size batch mode precision" contains PATTERN
#   MALLOC=keep|default  keep (the default): every program runs with glibc's malloc told to
#                    keep what is freed (GLIBC_TUNABLES below). PyTorch allocates its
#                    activations afresh every step; by default glibc returns the large blocks
#                    to the kernel and the next step faults them in again, which on a virtual
#                    machine with costly page faults took a third of PyTorch's time (resnet50
#                    training 2.6 against 7.2 images/s here). ds plans its memory once and is
#                    not affected. `default` measures PyTorch as it runs out of the box.
# Prints the CPU, the instruction sets in use and one row per configuration and precision:
# ds, the fastest PyTorch configuration (nchw or cl, +compile) and ds / that one. A program that fails shows "failed" in its
# cells and its last error line under the table; the other rows still run (ds's CPU bf16 and
# the avx512bf16 kernels are newer than this script: an engine_bench without them fails
# there). Not a test; numbers move with machine load.
set -u
cd "$(dirname "$0")/.." || exit 1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
STEPS=${1:-5}
REPEAT=${REPEAT:-1}
# PyTorch: the current one bench/peers.sh installs when it is there, else Debian's 1.13.
PEER_PY=${BUILD:-build}/peers/venv/bin/python3
PY=${PYTHON:-$([ -x "$PEER_PY" ] && echo "$PEER_PY" || echo /usr/bin/python3)}
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
# torch.compile where the PyTorch has it (2 or later), unless TORCH_COMPILE=0.
compiled=$(case $pt_ver in [2-9].* | [1-9][0-9].*) [ "${TORCH_COMPILE:-auto}" != 0 ] && echo " (eager and torch.compile)" ;; esac)
[ "${TORCH_COMPILE:-auto}" = 1 ] && compiled=" (torch.compile)"
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
# median FILE: "RATE MIB MIN-MAX" of the "RATE MIB" lines in FILE that did not fail (the
# lower middle one for an even count; MIB that run's), or "failed - -" when all failed.
median() {
    grep -v '^failed' "$1" | sort -g | awk '{ r[NR] = $1; m[NR] = $2 }
        END { if (!NR) { print "failed - -"; exit } k = int((NR + 1) / 2)
              printf "%s %s %s-%s\n", r[k], m[k], r[1], r[NR] }'
}

# The PyTorch configurations: both layouts, eager and (PyTorch 2) compiled unless
# TORCH_COMPILE says one; the best of them is the peer.
layouts="default channels_last"
case ${TORCH_COMPILE:-auto} in
auto) modes="eager"; [ "$compiled" ] && modes="eager compile" ;;
0) modes="eager" ;;
*) modes="compile" ;;
esac
label() { case $1 in default) printf nchw ;; *) printf cl ;; esac; [ "$2" = compile ] && printf '+compile'; }

printf "%-10s %5s %5s %-6s %-4s | %9s %13s %7s | %9s %13s %7s %-16s | %s\n" arch size batch mode prec \
    "ds img/s" "(range)" "ds MiB" "pt img/s" "(range)" "pt MiB" "pt best of" "ds / best pt"
for cfg in "resnet50 224 16 train" "resnet18 224 16 train" "resnet20 32 128 train" "resnet50 224 32 infer"; do
    for prec in $precisions; do
        [[ "$cfg $prec" == *"${ONLY:-}"* ]] || continue
        set -- $cfg
        row="$cfg $prec"
        rm -f "$tmp"/run-*
        # The programs take turns, so a change in the machine's load is shared among them.
        for _ in $(seq "$REPEAT"); do
            peak "$row ds" "$BENCH" --precision "$prec" "$1" "$2" "$3" "$4" "$STEPS" >>"$tmp/run-ds"
            for m in $modes; do
                for l in $layouts; do
                    TORCH_COMPILE=$([ "$m" = compile ] && echo 1 || echo 0) \
                        peak "$row pt $(label "$l" "$m")" "$PY" bench/engine_bench_torch.py "$1" "$2" "$3" "$4" "$l" \
                        "$STEPS" "$prec" >>"$tmp/run-pt-$(label "$l" "$m")"
                done
            done
        done
        read -r ds ds_mib ds_range < <(median "$tmp/run-ds")
        pt=failed pt_mib=- pt_range=- pt_of=-
        for m in $modes; do
            for l in $layouts; do
                read -r r mib range < <(median "$tmp/run-pt-$(label "$l" "$m")")
                if [ "$r" != failed ] && { [ "$pt" = failed ] || awk -v a="$r" -v b="$pt" 'BEGIN { exit !(a > b) }'; }; then
                    pt=$r pt_mib=$mib pt_range=$range pt_of=$(label "$l" "$m")
                fi
            done
        done
        ratio=$(awk -v d="$ds" -v p="$pt" 'BEGIN { if (d + 0 > 0 && p + 0 > 0) printf "%.2fx", d / p; else print "-" }')
        printf "%-10s %5s %5s %-6s %-4s | %9s %13s %7s | %9s %13s %7s %-16s | %s\n" "$1" "$2" "$3" "$4" "$prec" \
            "$ds" "($ds_range)" "$ds_mib" "$pt" "($pt_range)" "$pt_mib" "$pt_of" "$ratio"
    done
done
if [ -s "$tmp/notes" ]; then
    echo "failed (last error line of each):"
    awk '!seen[$0]++ { print "  " $0 }' "$tmp/notes"
fi
