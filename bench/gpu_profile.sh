#!/bin/bash
# bench/gpu_profile.sh: where a GPU training step's time goes, ds's against PyTorch's, kernel by
# kernel, from the GPU bundle (`make gpu-bundle`), in one short call of a GPU machine.
#   bench/gpu_profile.sh [--bundle DIR | --tools DIR] [--python PY] [--out DIR] [--steps N]
#                        [ARCH SIZE BATCH PRECISION]
#   defaults: build/gpu-bundle, $OUT (else bench/), 2 steps, resnet50 224 256 bf16
#   --tools DIR: engine_bench from DIR, in the environment as it is (bench/gpu.sh's stage 11,
#   which has set up its programs' environment already), instead of a bundle's
#   --python PY: the Python whose torch sees the GPU (default python3 on PATH)
# ds's side: engine_bench --deterministic (cuDNN's heuristics: no search's kernels in the
# profile) under Nsight Compute (ncu, one metric, gpu__time_duration, clocks as they are), every
# kernel of 1 + N steps (the first pays cuDNN's lazy set-up; its kernels are the same). PyTorch's
# side: bench/gpu_torch.py --profile (torch.profiler over 2 steps after its timed ones, AMP
# autocast for bf16, channels_last, cudnn.benchmark). Writes to the out folder:
#   profile.md         both sides' time per step by kernel, longest first, and by group
#                      (convolutions, batch norm, elementwise, copies, the rest)
#   ds-kernels.tsv     ms per step, launches per step, kernel (ds; from ncu's csv)
#   torch-kernels.tsv  the same for PyTorch
#   profile-logs.tar.gz  every command's output
# ncu serialises kernels, so its per-kernel times add up to more than the step's wall time
# (no overlap, no launch gaps hidden); the shares are what to read. Needs ncu (on PATH or under
# /opt/nvidia/nsight-compute) and a python3 with torch; a side that cannot run says why in
# profile.md and the other still runs.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${DS_BUNDLE:-$ROOT/build/gpu-bundle} OUTDIR=${OUT:-$ROOT/bench} STEPS=2 TOOLS= PY=python3
while [ $# -gt 0 ]; do
    case $1 in
    --bundle) BUNDLE=$2; shift 2 ;;
    --tools) TOOLS=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --out) OUTDIR=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --*) echo "usage: gpu_profile.sh [--bundle DIR | --tools DIR] [--python PY] [--out DIR] [--steps N] [ARCH SIZE BATCH PRECISION]" >&2; exit 2 ;;
    *) break ;;
    esac
done
ARCH=${1:-resnet50} SIZE=${2:-224} BATCH=${3:-256} PREC=${4:-bf16}
case $STEPS in ''|*[!0-9]*|0) echo "gpu_profile.sh: --steps takes a positive number" >&2; exit 2 ;; esac
if [ -n "$TOOLS" ]; then
    ENGINE=$TOOLS/engine_bench
    [ -x "$ENGINE" ] || { echo "gpu_profile.sh: no engine_bench in $TOOLS" >&2; exit 1; }
else
    ENGINE=$BUNDLE/bin/engine_bench
    [ -f "$BUNDLE/env.sh" ] || { echo "gpu_profile.sh: no bundle at $BUNDLE (make gpu-bundle)" >&2; exit 1; }
fi
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
W=$(mktemp -d) || exit 1
trap 'rm -rf "$W"' EXIT
LOG=$W/logs
mkdir -p "$LOG"
# shellcheck source=/dev/null
[ -n "$TOOLS" ] || . "$BUNDLE/env.sh" || { echo "gpu_profile.sh: the bundle's env.sh failed" >&2; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)

ds_status="not run" torch_status="not run"
if [ -z "$NCU" ]; then
    ds_status="no ncu on this machine"
else
    timeout -k 10 "${GPU_PROFILE_DS_SECONDS:-240}" "$NCU" --clock-control none --metrics gpu__time_duration.sum \
        --csv --print-units base --log-file "$LOG/ds-ncu.csv" \
        "$ENGINE" --device cuda --precision "$PREC" --deterministic --warmup 0 \
        "$ARCH" "$SIZE" "$BATCH" train "$((STEPS + 1))" >"$LOG/ds.out" 2>"$LOG/ds.err"
    rc=$?
    ds_status="exit $rc"
fi
timeout -k 10 "${GPU_PROFILE_TORCH_SECONDS:-150}" "$PY" "$ROOT/bench/gpu_torch.py" --size "$SIZE" --steps 10 \
    --warmup 10 --profile "$OUTDIR/torch-kernels.tsv" train "$BATCH" "$PREC" >"$LOG/torch.out" 2>"$LOG/torch.err"
torch_status="exit $?"

# ncu's csv: one row per kernel launch and metric; the kernel's name and its time in ns
python3 - "$LOG/ds-ncu.csv" "$OUTDIR/ds-kernels.tsv" "$((STEPS + 1))" <<'EOF' 2>>"$LOG/aggregate.err"
import csv, sys
src, dst, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = {}
try:
    lines = [l for l in open(src, errors="replace") if l.startswith('"')]
except OSError:
    lines = []
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    k = rows.setdefault(r["Kernel Name"], [0.0, 0])
    k[0] += float(r["Metric Value"].replace(",", "")) / 1e6
    k[1] += 1
with open(dst, "w") as f:
    for name, (ms, n) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
        f.write("%.3f\t%g\t%s\n" % (ms / steps, n / steps, name))
EOF

python3 - "$OUTDIR/ds-kernels.tsv" "$OUTDIR/torch-kernels.tsv" "$OUTDIR/profile.md" \
    "$ARCH $SIZE² b$BATCH $PREC training" "ds: $ds_status; $(grep -h 'images_per_sec\|train ' "$LOG/ds.out" 2>/dev/null | head -1)" \
    "PyTorch: $torch_status; $(grep -h images_per_sec "$LOG/torch.out" 2>/dev/null | head -1)" <<'EOF' 2>>"$LOG/aggregate.err"
import re, sys
ds_f, torch_f, out, what, ds_line, torch_line = sys.argv[1:7]

def load(p):
    try:
        return [(float(a), float(b), c) for a, b, c in (l.rstrip("\n").split("\t", 2) for l in open(p) if l.strip())]
    except OSError:
        return []

def group(name):
    n = name.lower()
    if re.search(r"conv|dgrad|wgrad|fprop|implicit|xmma|cudnn|sm90_|cutlass|winograd|gemm|nchw|nhwc", n) and "bn" not in n \
            and "batch_norm" not in n and "batchnorm" not in n:
        return "convolutions and GEMMs"
    if re.search(r"bn_|batch_norm|batchnorm|welford|norm", n):
        return "batch norm"
    if re.search(r"copy|cast|to_bf16|from_bf16|convert|memcpy|memset|transpose", n):
        return "casts and copies"
    if re.search(r"relu|add|elementwise|vectorized|unrolled|mul|sgd|momentum|foreach", n):
        return "elementwise and SGD"
    return "the rest"

ds, th = load(ds_f), load(torch_f)
with open(out, "w") as f:
    f.write("# Where the step goes: %s\n\n%s\n\n%s\n\n" % (what, ds_line, torch_line))
    f.write("ds's times are ncu's per kernel, serialised; PyTorch's are torch.profiler's. "
            "Read the shares.\n\n| group | ds ms/step | PyTorch ms/step |\n|---|---|---|\n")
    groups = {}
    for side, rows in ((0, ds), (1, th)):
        for ms, n, name in rows:
            groups.setdefault(group(name), [0.0, 0.0])[side] += ms
    for g, (a, b) in sorted(groups.items(), key=lambda kv: -kv[1][0]):
        f.write("| %s | %.2f | %.2f |\n" % (g, a, b))
    f.write("| all | %.2f | %.2f |\n" % (sum(r[0] for r in ds), sum(r[0] for r in th)))
    for title, rows in (("ds", ds), ("PyTorch", th)):
        f.write("\n## %s: the 40 longest kernels\n\n| ms/step | launches/step | kernel |\n|---|---|---|\n" % title)
        for ms, n, name in rows[:40]:
            f.write("| %.3f | %g | %s |\n" % (ms, n, name[:160].replace("|", "/")))
EOF
tar -czf "$OUTDIR/profile-logs.tar.gz" -C "$W" logs
cat "$OUTDIR/profile.md" 2>/dev/null || { echo "gpu_profile.sh: no profile.md (see $LOG/aggregate.err)"; cat "$LOG/aggregate.err"; }
