#!/bin/bash
# bench/gpu.sh: the GPU check and benchmark, one run of at most 8 minutes on one GPU.
#   1. builds (make -j16 all bench-build, code for this GPU's architecture only) and runs
#      the GPU tests (tests/run.sh cuda)
#   2. ResNet-50 images/s with synthetic data already on the device (the engine_bench
#      driver): training at batch 128 and 256, bf16 and tf32; inference at batch 256, bf16
#   3. PyTorch on the same GPU: torchvision resnet50, channels_last, AMP bf16, eager
#   4. reports NCCL's version; with NCCL >= 2.30 runs the 3-rank equivalence test on this
#      one GPU (mpirun -np 3 against --accum 3, NCCL_MULTI_RANK_GPU_ENABLE=1), else one
#      NCCL rank (mpirun -np 1, which also reduces through NCCL) against --accum 3
#   5. ResNet-50 training images/s from real shards through the loader (dstrain), the same
#      four configurations, and dseval inference images/s
#   6. PyTorch with torch.compile, when it works and time is left
# and prints one table (also written to bench/gpu-results.md, or $OUT/gpu-results.md).
# The stages run in that order of importance under one deadline (GPU_BENCH_SECONDS, default
# 470): each has its own time limit, cut to what is left; a stage that fails, runs out of
# time or finds no time left shows as "fail" or "n/a (...)" and the script goes on.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
export PATH="$ROOT/bin:$PATH"
W=$(mktemp -d "${TMPDIR:-/tmp}/ds-gpu.XXXXXX")
trap 'rm -rf "$W"' EXIT
RESULTS=${OUT:-$ROOT/bench}/gpu-results.md
DEADLINE=${GPU_BENCH_SECONDS:-470}
T0=$SECONDS
declare -A R   # table cells: R[row|column] = value
rows=()

log() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*" >&2; }
put() { R["$1|$2"]=$3; [[ " ${rows[*]} " == *" $1 "* ]] || rows+=("$1"); }
# Seconds a stage may take: its own limit, cut to what is left before the deadline (10 s
# are kept for the table).
lim() { local left=$((DEADLINE - 10 - (SECONDS - T0))); echo $(($1 < left ? $1 : left)); }
# run LIMIT COMMAND...: the command under timeout; 124 without running it when less than
# 5 s are left (timeout 0 would mean no limit at all).
run() { local s; s=$(lim "$1"); shift; [ "$s" -ge 5 ] || return 124; timeout "$s" "$@"; }
# the last "images_per_sec" of a metrics.jsonl
ips_of() { grep -o '"images_per_sec":[0-9.]*' "$1" 2>/dev/null | tail -1 | cut -d: -f2; }
# a cell from a rate (or "fail", or "n/a (time)" when the stage was cut by the deadline)
cell() { if [ -n "$1" ]; then echo "$1"; elif [ "$2" -eq 124 ]; then echo "n/a (time)"; else echo fail; fi; }

# ---- 1. build and GPU tests ----
log "build"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader >&2 ||
    log "nvidia-smi failed"
# Code for this GPU only: the four architectures of a plain `make` take minutes in nvcc.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
archs=()
[[ "$cc" =~ ^[0-9]+$ ]] && archs=("CUDA_ARCHS=-gencode arch=compute_$cc,code=sm_$cc")
if ! run 240 make -j16 ${archs[@]+"${archs[@]}"} all bench-build >"$W/build.log" 2>&1; then
    tail -n 30 "$W/build.log" >&2
    log "build failed: nothing else can run"
    exit 1
fi
grep -q 'CUDA=1' "$W/build.log" || log "WARNING: built without CUDA"
log "GPU tests"
run 180 tests/run.sh cuda >"$W/tests.log" 2>&1
tests_rc=$?
tail -n 25 "$W/tests.log" >&2 2>/dev/null
grep -q "^SKIP\|skipped (checks" "$W/tests.log" && log "WARNING: the CUDA tests saw no GPU"

# The Python for PyTorch and h5py: $PYTHON, else the first python3 (on PATH, then the
# system's) whose torch sees a GPU; a distribution's torch may be a CPU-only build.
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for p in python3 /usr/bin/python3; do
        timeout 60 "$p" -c 'import sys, torch, torchvision, h5py; sys.exit(not torch.cuda.is_available())' \
            2>/dev/null && PY=$p && break
    done
    PY=${PY:-python3}
fi
log "Python: $(command -v "$PY") $("$PY" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"

# ---- 2. ds, synthetic data on the device ----
bench=build/bench/engine_bench
synth() {  # ROW PRECISION BATCH MODE
    local out rc
    out=$(run 70 "$bench" --device cuda --precision "$2" --warmup 5 resnet50 224 "$3" "$4" 20 2>"$W/bench.err")
    rc=$?
    [ "$rc" -ne 0 ] && tail -n 3 "$W/bench.err" >&2
    put "$1" synthetic "$(cell "$(printf '%s\n' "$out" | tail -1 | awk 'NF == 5 {print $5}')" "$rc")"
    log "$1: synthetic ${R["$1|synthetic"]}"
}
for prec in bf16 tf32; do
    for b in 256 128; do
        synth "ds resnet50 train $prec b$b" "$prec" "$b" train
    done
done
synth "ds resnet50 infer bf16 b256" bf16 256 infer

# ---- 3. PyTorch eager on the same GPU ----
cat >"$W/torch_bench.py" <<'EOF'
# torchvision resnet50, channels_last, AMP bf16, SGD; synthetic data on the device.
import sys, time, torch, torchvision
mode, batch, compiled = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "compile"
torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
dev = "cuda"
model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device=dev)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
if mode == "train":
    model.train()
    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
else:
    model.eval()
    def step():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            model(x)
if compiled:
    step = torch.compile(step)
for _ in range(15):
    step()
torch.cuda.synchronize()
n, t = 40, time.perf_counter()
for _ in range(n):
    step()
torch.cuda.synchronize()
print("images_per_sec %.1f" % (n * batch / (time.perf_counter() - t)))
EOF
torch_run() {  # ROW COLUMN LIMIT MODE BATCH eager|compile
    local v rc
    run "$3" "$PY" "$W/torch_bench.py" "$4" "$5" "$6" >"$W/torch.out" 2>"$W/torch.err"
    rc=$?
    v=$(grep -o 'images_per_sec [0-9.]*' "$W/torch.out" | tail -1 | grep -o '[0-9.]*$')
    [ -z "$v" ] && [ "$rc" -ne 124 ] && tail -n 3 "$W/torch.err" >&2
    put "$1" "$2" "$(cell "$v" "$rc")"
    log "$1 $2: ${R["$1|$2"]}"
}
torch_run "torch resnet50 train bf16-amp b256" eager 60 train 256 eager
torch_run "torch resnet50 train bf16-amp b128" eager 60 train 128 eager
torch_run "torch resnet50 infer bf16-amp b256" eager 60 infer 256 eager

# ---- 4. NCCL version and the multi-rank equivalence test ----
# The NCCL the tools load (their rpath), else the loader's default.
lib=$(ldd bin/dstrain 2>/dev/null | awk '/libnccl/ {print $3; exit}')
nccl=$("$PY" - "${lib:-libnccl.so.2}" <<'EOF' 2>/dev/null
import ctypes, sys
v = ctypes.c_int()
ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v))
print(v.value)
EOF
)
[[ "$nccl" =~ ^[0-9]+$ ]] || nccl=0
log "NCCL version code $nccl (${lib:-not linked})"

# A small real data set (synthetic JPEG classes) at 64 px for the equivalence test, and one
# at 256 px (ImageNet's stored size) for the throughput runs: 3,230 training images, more
# than the 10 steps of batch 256 a run below takes.
log "data"
run 60 build/data/synth -q --classes 16 --per-class 40 "$W/tree64" &&
    run 30 dsplit -q -o "$W/split64" "$W/tree64" &&
    run 60 dspack -q -o "$W/packed64" --size 64 --threads 16 "$W/split64/train.txt" ||
    log "small data set failed"
run 120 build/data/synth -q --classes 100 --per-class 34 "$W/tree" &&
    run 30 dsplit -q --val 0.05 -o "$W/split" "$W/tree" &&
    run 120 dspack -q -o "$W/packed" --size 256 --threads 16 "$W/split/train.txt" ||
    log "benchmark data set failed"

# dstrain for equivalence: fp32, deterministic cuDNN algorithms, 10 steps of global batch 24.
eq_args=(--train "$W/packed64" --arch resnet20 --crop 56 --epochs 1 --max-steps 10 --lr 0.05
         --device cuda --precision fp32 --deterministic --log-every 0 -q)
if [ "$nccl" -ge 23000 ]; then
    eq_what="3 NCCL ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1) x batch 8 vs 1 process x batch 8 x accum 3"
    (export NCCL_MULTI_RANK_GPU_ENABLE=1
     run 120 mpirun --allow-run-as-root --oversubscribe -np 3 -x NCCL_MULTI_RANK_GPU_ENABLE \
         dstrain "${eq_args[@]}" --batch 8 -o "$W/eq_mpi" >"$W/eq_mpi.log" 2>&1)
else
    # Same micro-batches on both sides (BN normalises per micro-batch, so batch 24 would
    # differ from 3 x 8): this checks the NCCL wiring, not a sum across ranks.
    eq_what="NCCL < 2.30 refuses two ranks on one GPU: 1 NCCL rank (mpirun -np 1) vs no launcher, both batch 8 x accum 3"
    run 120 mpirun --allow-run-as-root -np 1 dstrain "${eq_args[@]}" --batch 8 --accum 3 -o "$W/eq_mpi" \
        >"$W/eq_mpi.log" 2>&1
fi
eq_rc=$?
log "equivalence: $eq_what"
run 90 dstrain "${eq_args[@]}" --batch 8 --accum 3 -o "$W/eq_accum" >"$W/eq_accum.log" 2>&1
eq_rc=$((eq_rc | $?))
eq="fail"
if [ "$eq_rc" -eq 0 ]; then
    eq=$("$PY" - "$W/eq_mpi/last.h5" "$W/eq_accum/last.h5" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r")["model"], h5py.File(sys.argv[2], "r")["model"]
worst = 0.0
for k in a:
    x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
    worst = max(worst, float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-12)))
# 1e-3: fp32 on both sides, but NCCL's sum runs in another order than accumulation, and
# 10 SGD steps compound the difference
print(("pass" if worst <= 1e-3 else "FAIL") + " (max rel diff %.2e)" % worst)
EOF
)
    eq=${eq:-fail (comparison)}
elif [ "$eq_rc" -eq 124 ]; then
    eq="n/a (time)"
else
    tail -n 5 "$W/eq_mpi.log" "$W/eq_accum.log" >&2
fi
log "equivalence: $eq"

# ---- 5. ds, real shards through the loader ----
# 10 steps, a log line every 5: the second window (steps 6-10) is the rate, after the
# first steps' set-up and before the checkpoint --max-steps writes.
for prec in bf16 tf32; do
    for b in 256 128; do
        row="ds resnet50 train $prec b$b"
        run 60 dstrain --train "$W/packed" --arch resnet50 --batch "$b" --epochs 1 --max-steps 10 \
            --log-every 5 --device cuda --precision "$prec" -q -o "$W/run-$prec-$b" >"$W/train.log" 2>&1
        rc=$?
        [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && tail -n 3 "$W/train.log" >&2
        put "$row" shards "$(cell "$(ips_of "$W/run-$prec-$b/metrics.jsonl")" "$rc")"
        log "$row: shards ${R["$row|shards"]}"
    done
done
# Inference over the training shards (3,230 images; the rate includes the loader): any
# ResNet-50 checkpoint of these classes will do.
ckpt=$(ls "$W"/run-*/ckpt-*.h5 2>/dev/null | head -1)
if [ -n "$ckpt" ]; then
    run 60 dseval --json --batch 256 --device cuda --precision bf16 "$ckpt" "$W/packed" >"$W/eval.out" 2>"$W/eval.err"
    rc=$?
    v=$(grep -o '"images_per_sec": [0-9.]*' "$W/eval.out" | grep -o '[0-9.]*$')
    [ -z "$v" ] && [ "$rc" -ne 124 ] && tail -n 3 "$W/eval.err" >&2
    put "ds resnet50 infer bf16 b256" shards "$(cell "$v" "$rc")"
else
    put "ds resnet50 infer bf16 b256" shards "n/a (no checkpoint)"
fi

# ---- 6. PyTorch with torch.compile (slow to compile), batch 256 ----
torch_run "torch resnet50 train bf16-amp b256" compile 150 train 256 compile

# ---- table ----
ratio() {  # ds synthetic bf16 b256 over torch eager b256, when both are numbers
    local a=${R["ds resnet50 train bf16 b256|synthetic"]:-} b=${R["torch resnet50 train bf16-amp b256|eager"]:-}
    [[ "$a" =~ ^[0-9.]+$ && "$b" =~ ^[0-9.]+$ ]] && awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2fx", a / b}' ||
        echo "n/a"
}
{
    echo "# GPU benchmark ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%F))"
    echo
    echo "GPU tests: $(tail -1 "$W/tests.log" 2>/dev/null) (exit $tests_rc)  "
    echo "NCCL: version code $nccl; equivalence, $eq_what: $eq"
    echo
    echo "| run (images/s) | synthetic | shards | eager | compile |"
    echo "|---|---|---|---|---|"
    for r in "${rows[@]}"; do
        echo "| $r | ${R["$r|synthetic"]:-} | ${R["$r|shards"]:-} | ${R["$r|eager"]:-} | ${R["$r|compile"]:-} |"
    done
    echo
    echo "ds bf16 b256 (synthetic) / PyTorch eager AMP b256: $(ratio)."
    echo "Goals on one H200: ds training >= 1.3x PyTorch eager AMP and >= 5,500 images/s."
    echo "Total time: $((SECONDS - T0)) s"
} | tee "$RESULTS"
[ "$tests_rc" -eq 0 ]
