#!/bin/bash
# bench/gpu.sh: the GPU check and benchmark, one run of at most ~8 minutes on one GPU.
#   1. builds (make -j16) and runs the GPU tests (tests/run.sh cuda)
#   2. reports NCCL's version; with NCCL >= 2.30 runs the 3-rank equivalence test on this
#      one GPU (mpirun -np 3 against --accum 3, NCCL_MULTI_RANK_GPU_ENABLE=1), else one rank
#   3. ResNet-50 training images/s: batch 128 and 256, bf16 and tf32, synthetic data on the
#      device (the engine bench driver, when built) and real shards (dstrain), plus dseval
#      inference images/s
#   4. PyTorch on the same GPU: torchvision resnet50, channels_last, AMP bf16, eager and
#      torch.compile (when it works)
# and prints one table (also written to bench/gpu-results.md, or $OUT/gpu-results.md).
# Every stage has its own time limit; a stage that fails or runs out of time shows as
# "fail"/"n/a" in the table and the script goes on.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH="$ROOT/bin:$PATH"
PY=${PYTHON:-/usr/bin/python3}
W=$(mktemp -d "${TMPDIR:-/tmp}/ds-gpu.XXXXXX")
trap 'rm -rf "$W"' EXIT
RESULTS=${OUT:-$ROOT/bench}/gpu-results.md
T0=$SECONDS
declare -A R   # table cells: R[row|column] = value
rows=()

# seconds used so far; stages past their share are skipped to stay inside 8 minutes
used() { echo $((SECONDS - T0)); }
log() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*" >&2; }
put() { R["$1|$2"]=$3; [[ " ${rows[*]} " == *" $1 "* ]] || rows+=("$1"); }
# the last "images_per_sec" of a metrics.jsonl
ips_of() { grep -o '"images_per_sec":[0-9.]*' "$1" 2>/dev/null | tail -1 | cut -d: -f2; }

# ---- 1. build and GPU tests ----
log "build"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >&2 || log "nvidia-smi failed"
if ! timeout 240 make -j16 >"$W/build.log" 2>&1; then
    tail -30 "$W/build.log" >&2
    log "build failed: nothing else can run"
    exit 1
fi
log "GPU tests"
timeout 120 tests/run.sh cuda >"$W/tests.log" 2>&1
tests_rc=$?
tail -25 "$W/tests.log" >&2
grep -q 'skipped: no GPU' "$W/tests.log" && log "WARNING: the CUDA tests saw no GPU"

# ---- 2. NCCL version and the multi-rank equivalence test ----
nccl=$("$PY" - <<'EOF' 2>/dev/null
import ctypes
v = ctypes.c_int()
ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v))
print(v.value)
EOF
)
nccl=${nccl:-0}
log "NCCL version code $nccl"

# A small real data set (synthetic JPEG classes), packed at 64 px for the equivalence test
# and at 256 px (ImageNet's stored size) for the throughput runs.
log "data"
timeout 120 build/data/synth --classes 16 --per-class 40 "$W/tree64" >/dev/null &&
    timeout 30 dsplit -o "$W/split64" "$W/tree64" >/dev/null &&
    timeout 60 dspack -o "$W/packed64" --size 64 "$W/split64/train.txt" >/dev/null ||
    log "small data set failed"
timeout 150 build/data/synth --classes 100 --per-class 34 "$W/tree" >/dev/null &&
    timeout 30 dsplit --val 0.05 -o "$W/split" "$W/tree" >/dev/null &&
    timeout 120 dspack -o "$W/packed" --size 256 --threads 16 "$W/split/train.txt" >/dev/null &&
    timeout 60 dspack -o "$W/packed_val" --size 256 --threads 16 "$W/split/val.txt" >/dev/null ||
    log "benchmark data set failed"

# dstrain for equivalence: fp32, deterministic algorithms where offered, 10 steps.
eq_args=(--train "$W/packed64" --arch resnet20 --crop 56 --epochs 1 --max-steps 10 --lr 0.05
         --device cuda --precision fp32 --log-every 0 -q)
if [ "$nccl" -ge 23000 ]; then
    ranks=3
    log "NCCL >= 2.30: 3 ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1) against --accum 3"
    NCCL_MULTI_RANK_GPU_ENABLE=1 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 3 \
        -x NCCL_MULTI_RANK_GPU_ENABLE dstrain "${eq_args[@]}" --batch 8 -o "$W/eq_mpi" >"$W/eq_mpi.log" 2>&1
else
    ranks=1
    log "NCCL < 2.30 refuses two ranks on one GPU: one NCCL rank (mpirun -np 1) against --accum 3"
    timeout 120 mpirun --allow-run-as-root -np 1 dstrain "${eq_args[@]}" --batch 24 -o "$W/eq_mpi" >"$W/eq_mpi.log" 2>&1
fi
eq_rc=$?
timeout 120 dstrain "${eq_args[@]}" --batch 8 --accum 3 -o "$W/eq_accum" >"$W/eq_accum.log" 2>&1
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
# 1e-3: fp32 on both sides, but cuDNN may pick other algorithms for other batch sizes,
# and 10 SGD steps compound the different summation orders
print(("pass" if worst <= 1e-3 else "FAIL") + " (max rel diff %.2e)" % worst)
EOF
)
else
    tail -5 "$W/eq_mpi.log" "$W/eq_accum.log" >&2
fi
log "equivalence ($ranks NCCL rank(s) vs --accum 3): $eq"

# ---- 3. ds throughput ----
# Synthetic data already on the device: the engine bench driver, when one is built.
bench_drv=""
for d in build/drivers/engine_bench build/drivers/model_bench build/drivers/bench_engine; do
    [ -x "$d" ] && bench_drv=$d && break
done
for prec in bf16 tf32; do
    for b in 128 256; do
        row="ds resnet50 train $prec b$b"
        if [ -n "$bench_drv" ]; then
            out=$(timeout 60 "$bench_drv" --arch resnet50 --batch "$b" --precision "$prec" --device cuda 2>"$W/drv.err")
            v=$(printf '%s\n' "$out" | grep -o 'images_per_sec[": ]*[0-9.]*' | tail -1 | grep -o '[0-9.]*$')
            put "$row" synthetic "${v:-fail}"
        else
            put "$row" synthetic "n/a (no bench driver)"
        fi
        # real shards through the loader: 30 steps, the rate of the last logged window
        if [ "$(used)" -gt 330 ]; then put "$row" shards "n/a (time)"; continue; fi
        rm -rf "$W/run"
        timeout 75 dstrain --train "$W/packed" --arch resnet50 --batch "$b" --epochs 1 --max-steps 30 \
            --log-every 15 --device cuda --precision "$prec" -q -o "$W/run" >"$W/train.log" 2>&1
        v=$(ips_of "$W/run/metrics.jsonl")
        put "$row" shards "${v:-fail}"
        log "$row: synthetic ${R["$row|synthetic"]}, shards ${R["$row|shards"]}"
    done
done
# inference on the validation shards: any checkpoint of the right shape will do
ckpt=$(ls "$W"/run/ckpt-*.h5 2>/dev/null | tail -1)
if [ -n "$ckpt" ]; then
    for b in 256; do
        v=$(timeout 60 dseval --json --batch "$b" --device cuda "$ckpt" "$W/packed_val" 2>/dev/null |
            grep -o '"images_per_sec": [0-9.]*' | grep -o '[0-9.]*$')
        put "ds resnet50 infer b$b" shards "${v:-fail}"
    done
fi

# ---- 4. PyTorch on the same GPU ----
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
# eager at both batch sizes; torch.compile (slow to compile) at 256 only, when time is left
for run in "128 eager" "256 eager" "256 compile"; do
    read -r b c <<<"$run"
    lim=60; [ "$c" = compile ] && lim=150
    if [ "$(used)" -gt $((480 - lim - 30)) ]; then put "torch resnet50 train bf16-amp b$b" "$c" "n/a (time)"; continue; fi
    v=$(timeout $lim "$PY" "$W/torch_bench.py" train "$b" "$c" 2>"$W/torch.err" | grep -o '[0-9.]*$')
    [ -z "$v" ] && tail -3 "$W/torch.err" >&2
    put "torch resnet50 train bf16-amp b$b" "$c" "${v:-fail}"
    log "torch train b$b $c: ${v:-fail}"
done
v=$(timeout 60 "$PY" "$W/torch_bench.py" infer 256 eager 2>/dev/null | grep -o '[0-9.]*$')
put "torch resnet50 infer bf16-amp b256" eager "${v:-fail}"

# ---- table ----
{
    echo "# GPU benchmark ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%F))"
    echo
    echo "GPU tests: $(tail -1 "$W/tests.log") (exit $tests_rc)  "
    echo "NCCL: version code $nccl; equivalence, $ranks NCCL rank(s) vs --accum 3: $eq"
    echo
    echo "| run (images/s) | synthetic | shards | eager | compile |"
    echo "|---|---|---|---|---|"
    for r in "${rows[@]}"; do
        echo "| $r | ${R["$r|synthetic"]:-} | ${R["$r|shards"]:-} | ${R["$r|eager"]:-} | ${R["$r|compile"]:-} |"
    done
    echo
    echo "Goals on one H200: ds training >= 1.3x PyTorch eager AMP and >= 5,500 images/s."
    echo "Total time: $((SECONDS - T0)) s"
} | tee "$RESULTS"
[ "$tests_rc" -eq 0 ]
