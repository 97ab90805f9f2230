#!/bin/bash
# bench/gpu.sh: the GPU check and benchmark, one run of at most 7 minutes on one GPU, from the
# GPU bundle (`make gpu-bundle` on a build machine: build/gpu-bundle/, tools, GPU tests and
# every library but CUDA's and the C runtime), so the GPU machine needs no compiler, HDF5 or
# Open MPI; its CUDA libraries are found by the bundle's env.sh (PyTorch's nvidia wheels of the
# python3 on PATH first, then /usr/local/cuda/lib64, then the system). bench/GPU.md has the
# command for a first call and what to read first in what comes back.
#   bench/gpu.sh [--bundle DIR] [--out DIR] [--seconds N] [--only N,N...] [--dry-run]
#   bench/gpu.sh --build [...]     build here instead (make, for this GPU only), for a
#                                  machine with the build's libraries (HDF5, Open MPI, ...)
#   --bundle DIR   the bundle (default build/gpu-bundle, or $DS_BUNDLE)
#   --out DIR      where gpu-results.md and gpu-logs.tar.gz go (default $OUT, else bench/)
#   --seconds N    the deadline (default $GPU_BENCH_SECONDS, else 420)
#   --only N,N...  run only these stages (numbers below)
#   --dry-run      no GPU needed: every stage runs on the CPU at toy sizes (ResNet-20, 32 px,
#                  2 steps), test_cuda.sh with DS_TEST_GPU_DEVICE=cpu, compute-sanitizer left
#                  out; checks this script's plumbing (tests/shell/test_bundle.sh runs it),
#                  says nothing about a GPU; its commands have only the deadline, not their
#                  stages' limits. GPU_BENCH_HANG=N (dry runs only) replaces stage
#                  N by a command that ignores SIGTERM, to show the stage is still ended.
# Stages, in this order, under one deadline; each has its own time limit cut to what is left
# and runs under `timeout -k` (SIGTERM, then SIGKILL to the stage's whole process group
# GPU_BENCH_GRACE seconds later, default 10: dstrain takes SIGTERM as "finish the step,
# checkpoint, stop", and one stuck in a kernel would not stop at all):
#   1. the op tests: test_cuda_ops (every CUDA op against the CPU backend, fp32, tf32, bf16;
#      sizes below the planned ones). Outside --dry-run a SKIP here counts as a failure.
#   2. planning canaries: engine_bench plans and runs one step of ResNet-50 bf16 at batch 256,
#      of the same under --deterministic, and of ResNet-20 fp32, each with a short limit, so a
#      convolution cuDNN cannot plan shows in seconds
#   3. end to end: tests/shell/test_cuda.sh (dseval CPU vs GPU; training steps CPU vs GPU,
#      also with RandomResizedCrop at the small end of a crop ramp; a resume bitwise equal
#      under --deterministic; bf16 learns; a SKIP of its GPU checks is a failure), then
#      ResNet-50 training from real shards through the loader (dstrain, one row with
#      --augment rrc at the small end of a crop ramp) and dseval
#   4. ResNet-50 images/s on synthetic data already on the device (engine_bench): training
#      bf16 and tf32 at batch 256, bf16 at 128, inference bf16 at 256
#   5. PyTorch on the same GPU (bench/gpu_torch.py, the venv's python3): the same rows,
#      AMP bf16 and tf32, eager
#   6. NCCL: one rank under the bundle's `mpirun -np 1` against no launcher (same
#      micro-batches, fp32, --deterministic); with NCCL >= 2.30, 3 ranks on the one GPU
#      against --accum 3
#   7. PyTorch with torch.compile, when time is left (slow to compile)
#   8. test_cuda_ops under compute-sanitizer --tool memcheck, capped at 60 s; n/a when the
#      toolkit has none or the container refuses it the device
# After every stage (and when the script ends, however it ends) the table is written anew to
# $OUT/gpu-results.md and stdout's copy, and every log is packed into $OUT/gpu-logs.tar.gz.
# Data is made on the machine by the bundle's synth, dsplit and dspack.
# To locate a first failure: CUDA_LAUNCH_BLOCKING=1 (a kernel's fault reported at its
# launch), CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr (cuDNN 9's own error log).
# UNRUN: this script has never run on a GPU (no GPU where it was written); only --dry-run has
# been run (on the CPU, from the bundle, by tests/shell/test_bundle.sh). The first real run
# tests it.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
BUNDLE=${DS_BUNDLE:-$ROOT/build/gpu-bundle} BUILD_HERE=0 DRY=0 ONLY=1,2,3,4,5,6,7,8
RESULTS_DIR=${OUT:-$ROOT/bench} DEADLINE=${GPU_BENCH_SECONDS:-420} GRACE=${GPU_BENCH_GRACE:-10}
STAGE_NAMES=("" "op tests" "planning canaries" "end to end (test_cuda.sh, shards)" "ds synthetic" "torch eager" "NCCL"
             "torch compile" "compute-sanitizer")
while [ $# -gt 0 ]; do
    case $1 in
    --bundle) [ $# -ge 2 ] || usage; BUNDLE=$2; shift ;;
    --build) BUILD_HERE=1 ;;
    --out) [ $# -ge 2 ] || usage; RESULTS_DIR=$2; shift ;;
    --seconds) [[ "${2:-}" =~ ^[0-9]+$ ]] || usage; DEADLINE=$2; shift ;;
    --dry-run) DRY=1 ;;
    --only) [[ "${2:-}" =~ ^[1-8](,[1-8])*$ ]] || usage; ONLY=$2; shift ;;
    -h | --help) usage ;;
    *) echo "gpu.sh: unknown argument '$1'" >&2; usage ;;
    esac
    shift
done
[[ "$GRACE" =~ ^[0-9]+$ ]] || { echo "gpu.sh: GPU_BENCH_GRACE must be a whole number of seconds" >&2; exit 2; }
HANG=${GPU_BENCH_HANG:-}
[ -n "$HANG" ] && [ "$DRY" != 1 ] && { echo "gpu.sh: GPU_BENCH_HANG is for --dry-run only" >&2; exit 2; }
mkdir -p "$RESULTS_DIR" || exit 1
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
RESULTS=$RESULTS_DIR/gpu-results.md
W=$(mktemp -d "${TMPDIR:-/tmp}/ds-gpu.XXXXXX")
T0=$SECONDS
declare -A R   # table cells: R[row|column] = value
declare -A S   # stage status: S[n]
rows=() checks=() tests_ok=1 canaries_ok=1
for n in 1 2 3 4 5 6 7 8; do S[$n]="not selected"; done

want() { [[ ",$ONLY," == *",$1,"* ]]; }
log() { printf '[%4ds] %s\n' $((SECONDS - T0)) "$*" >&2; }
put() { R["$1|$2"]=$3; [[ " ${rows[*]-} " == *" $1 "* ]] || rows+=("$1"); }
check_line() { checks+=("| $1 | $2 |"); log "$1: $2"; }
# Seconds a stage may take: its own limit, cut to what is left before the deadline (10 s
# are kept for the table). A dry run's commands have only the deadline: their limits are sized
# for a GPU at full size, and a toy run that a loaded CPU slows must not end as a timeout
# (the deadline stays the guard against a hang; GPU_BENCH_HANG's stage keeps its own limit).
lim() {
    local left=$((DEADLINE - 10 - (SECONDS - T0)))
    if [ "$DRY" = 1 ] && [ "${OWN_LIMIT:-0}" != 1 ]; then echo "$left"; else echo $(($1 < left ? $1 : left)); fi
}
# run LIMIT COMMAND...: the command under timeout, SIGKILL GRACE seconds after SIGTERM (to
# its whole process group: dstrain under test_cuda.sh too); 124 (or 137 after SIGKILL)
# without running it when less than 5 s are left (timeout 0 would mean no limit at all).
run() { local s; s=$(lim "$1"); shift; [ "$s" -ge 5 ] || return 124; timeout -k "$GRACE" "$s" "$@"; }
ips_of() { grep -o '"images_per_sec": *[0-9.]*' "$1" 2>/dev/null | tail -1 | grep -o '[0-9.]*$'; }
# a cell from a rate (or "fail", or "n/a (time)" when the stage was cut by its limit)
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
cell() { if [ -n "$1" ]; then echo "$1"; elif timed_out "$2"; then echo "n/a (time)"; else echo fail; fi; }
# counts of a test's PASS/FAIL/SKIP lines, for the checks table
counts() { echo "$(grep -c '^PASS' "$1") passed, $(grep -c '^FAIL' "$1") failed, $(grep -c '^SKIP' "$1") skipped"; }

# Toy sizes for --dry-run: the plumbing on a CPU in seconds.
if [ "$DRY" = 1 ]; then
    DEV=cpu ARCH=resnet20 SIZE=32 STEPS=2 WARM=1 B_BIG=8 B_SMALL=4 SYN_CLASSES=4 SYN_PER=8 PACK=40 RAMP_MIN=24
else
    DEV=cuda ARCH=resnet50 SIZE=224 STEPS=20 WARM=5 B_BIG=256 B_SMALL=128 SYN_CLASSES=100 SYN_PER=34 PACK=256 RAMP_MIN=160
fi
# The benchmark rows: "LABEL|MODE|PRECISION|BATCH". A dry run's second row is fp32: tf32 is
# a tensor-core format, which the CPU refuses.
TF32=$([ "$DRY" = 1 ] && echo fp32 || echo tf32)
rows_of=("train bf16 b$B_BIG|train|bf16|$B_BIG" "train $TF32 b$B_BIG|train|$TF32|$B_BIG"
         "train bf16 b$B_SMALL|train|bf16|$B_SMALL" "infer bf16 b$B_BIG|infer|bf16|$B_BIG")

# ---- the programs: the bundle, or a build here ----
if [ "$BUILD_HERE" = 1 ]; then
    log "build"
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    archs=()
    [[ "$cc" =~ ^[0-9]+$ ]] && archs=("CUDA_ARCHS=-gencode arch=compute_$cc,code=sm_$cc")
    if ! run 240 make -j"$(nproc)" ${archs[@]+"${archs[@]}"} all bench-build >"$W/build.log" 2>&1; then
        tail -n 30 "$W/build.log" >&2
        log "build failed: nothing else can run"
        exit 1
    fi
    grep -q 'CUDA=1' "$W/build.log" || log "WARNING: built without CUDA"
    mkdir -p "$W/bin"
    for p in bin/* build/data/synth build/tests/test_cuda_ops build/bench/engine_bench; do ln -s "$ROOT/$p" "$W/bin/"; done
    BINDIR=$W/bin
    report="built here: $(grep -o 'CUDA=1 ([^)]*)' "$W/build.log")"
else
    [ -f "$BUNDLE/env.sh" ] || { echo "gpu.sh: no bundle at $BUNDLE (make gpu-bundle on a build machine, or --build)" >&2; exit 1; }
    BUNDLE=$(cd "$BUNDLE" && pwd)
    # The Python (torch) sees the machine's environment as it was, not the bundle's.
    PY_ENV=(env "PATH=$PATH" "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
    . "$BUNDLE/env.sh" || exit 1
    BINDIR=$BUNDLE/bin
    "$BUNDLE/env.sh" --report >"$W/report" 2>&1
    report_rc=$?
    sed 's/^/    /' "$W/report" >&2
    report="bundle $BUNDLE; $([ $report_rc -eq 0 ] && echo "every library found" || echo "LIBRARIES MISSING")"
fi
PY_ENV=(${PY_ENV[@]+"${PY_ENV[@]}"})
export PATH="$BINDIR:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader >&2 ||
    log "nvidia-smi failed"

# The Python for PyTorch and h5py: $PYTHON, else the first python3 (on PATH, then the
# system's) whose torch sees a GPU (in a dry run: that has torch and h5py).
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    probe='import sys, torch, h5py, numpy; sys.exit(not torch.cuda.is_available())'
    [ "$DRY" = 1 ] && probe='import torch, h5py, numpy'
    for p in python3 /usr/bin/python3; do
        run 60 ${PY_ENV[@]+"${PY_ENV[@]}"} "$p" -c "$probe" 2>/dev/null && PY=$(command -v "$p") && break
    done
    PY=${PY:-python3}
fi
pyrun() { ${PY_ENV[@]+"${PY_ENV[@]}"} "$PY" "$@"; }
log "Python: $PY $(pyrun -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"
check_line "libraries" "$report"

torch_run() {  # ROW COLUMN LIMIT MODE BATCH PRECISION [--compile]
    local v rc
    run "$3" ${PY_ENV[@]+"${PY_ENV[@]}"} "$PY" bench/gpu_torch.py --device "$DEV" --size "$SIZE" \
        $([ "$DRY" = 1 ] && echo --steps 2 --warmup 1) ${7:-} "$4" "$5" "$6" >"$W/torch.out" 2>"$W/torch.err"
    rc=$?
    v=$(grep -o 'images_per_sec [0-9.]*' "$W/torch.out" | tail -1 | grep -o '[0-9.]*$')
    [ -z "$v" ] && ! timed_out "$rc" && tail -n 3 "$W/torch.err" >&2
    put "$1" "$2" "$(cell "$v" "$rc")"
    log "$1 $2: ${R["$1|$2"]}"
}

# ---- 1. the op tests ----
stage_1() {
    run 90 test_cuda_ops >"$W/ops.log" 2>&1
    ops_rc=$?
    check_line "test_cuda_ops (every CUDA op vs the CPU backend; fp32, tf32, bf16)" "$(counts "$W/ops.log") (exit $ops_rc)"
    grep '^FAIL' "$W/ops.log" | head -5 >&2
    [ "$ops_rc" -eq 0 ] || tests_ok=0
    # On a GPU machine a SKIP means the GPU was not used: a failure of this run, not a pass.
    if [ "$DRY" = 0 ] && grep -q '^SKIP' "$W/ops.log"; then
        tests_ok=0
        check_line "test_cuda_ops skipped on a GPU machine" "FAIL: $(grep -m1 '^SKIP' "$W/ops.log")"
    fi
}

# ---- 2. planning canaries: a convolution cuDNN cannot plan shows in seconds ----
canary() {  # LABEL LIMIT ENGINE_BENCH_ARGS...
    local label=$1 limit=$2 t=$SECONDS rc; shift 2
    run "$limit" engine_bench --device "$DEV" --warmup 0 "$@" >"$W/canary-${#checks[@]}.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then check_line "canary: $label" "pass (planned and one step in $((SECONDS - t)) s)"
    elif timed_out $rc; then check_line "canary: $label" "n/a (time: over $limit s)"; canaries_ok=0
    else
        check_line "canary: $label" "FAIL (exit $rc): $(grep -m1 'error' "$W/canary-${#checks[@]}.log" | cut -c1-160)"
        canaries_ok=0
    fi
}
stage_2() {
    canary "$ARCH bf16 b$B_BIG train" 90 --precision bf16 --verbose "$ARCH" "$SIZE" "$B_BIG" train 1
    # conv1 (3 input channels) is the layer whose NHWC bf16 kernels may be a slow fallback:
    # what cuDNN chose for it decides whether its input is worth padding to 4 channels
    local conv1
    conv1=$(grep -h -m1 'CUDA conv [0-9]*x[0-9]*x[0-9]*x3 -> ' "$W"/canary-*.log 2>/dev/null | sed 's/^.*CUDA conv //' | cut -c1-300)
    check_line "conv1's algorithms (bf16)" "${conv1:-n/a (not in the first canary log)}"
    canary "$ARCH bf16 --deterministic b$B_BIG train" 90 --precision bf16 --deterministic "$ARCH" "$SIZE" "$B_BIG" train 1
    local b=$([ "$DRY" = 1 ] && echo 8 || echo 128)
    canary "resnet20 fp32 b$b train" 40 --precision fp32 resnet20 32 "$b" train 1
}

# ---- 3. end to end: the GPU against the CPU through the tools, then ResNet-50 from shards ----
stage_3() {
    # test_cuda.sh takes its tools from $DS_ROOT/$BIN and its Python from $PYTHON.
    gpu_tests=(env DS_ROOT="$ROOT" BIN="$(realpath --relative-to="$ROOT" "$BINDIR")" PYTHON="$PY" OMP_NUM_THREADS=8)
    [ "$DRY" = 1 ] && gpu_tests+=(DS_TEST_GPU_DEVICE=cpu)
    run 180 "${gpu_tests[@]}" bash tests/shell/test_cuda.sh >"$W/cuda.log" 2>&1
    cuda_rc=$?
    for c in cannot_start_is_an_error_init dseval_fp32_matches_cpu dseval_tf32_bf16_close_to_cpu step_fp32_matches_cpu \
        rrc_ramp_fp32_matches_cpu resume_bitwise bf16_learns; do
        v=$(grep -E "^(PASS|FAIL|SKIP) cuda.?$c" "$W/cuda.log" | head -1 | cut -d' ' -f1)
        [ -z "$v" ] && grep -q '^SKIP' "$W/cuda.log" && v="SKIP ($(grep -m1 '^SKIP' "$W/cuda.log" | sed 's/^[^:]*: //'))"
        check_line "test_cuda.sh $c" "${v:-$(timed_out $cuda_rc && echo "n/a (time)" || echo "not reached (exit $cuda_rc)")}"
    done
    grep '^FAIL' "$W/cuda.log" | head -5 >&2
    [ "$cuda_rc" -eq 0 ] || tests_ok=0
    if [ "$DRY" = 0 ] && grep -q '^SKIP cuda ' "$W/cuda.log"; then
        tests_ok=0
        check_line "test_cuda.sh skipped on a GPU machine" "FAIL: $(grep -m1 '^SKIP cuda ' "$W/cuda.log")"
    fi
    run 120 synth -q --classes "$SYN_CLASSES" --per-class "$SYN_PER" "$W/tree" &&
        run 30 dsplit -q --val 0.05 -o "$W/split" "$W/tree" &&
        run 120 dspack -q -o "$W/packed" --size "$PACK" --threads 16 "$W/split/train.txt" ||
        log "benchmark data set failed"
    # the benchmark rows, then RandomResizedCrop at the small end of a crop ramp (epoch 0 of
    # 3 trains at the ramp's first crop: the convolutions planned at SIZE run smaller)
    local i=0
    for spec in "${rows_of[@]:0:3}" "train bf16 b$B_BIG rrc, ramp from $RAMP_MIN|train|bf16|$B_BIG|rrc"; do
        IFS='|' read -r row mode prec b extra <<<"$spec"
        i=$((i + 1))
        args=(--epochs 1)
        [ "${extra:-}" = rrc ] && args=(--augment rrc --min-crop "$RAMP_MIN" --ramp-start 1 --ramp-end 2 --crop-step 8
                                          --epochs 3)
        run 60 dstrain --train "$W/packed" --arch "$ARCH" --batch "$b" --max-steps 10 --crop "$SIZE" "${args[@]}" \
            --log-every 5 --device "$DEV" --precision "$prec" --comm-timeout 30 -q -o "$W/run-$i" >"$W/train-$i.log" 2>&1
        rc=$?
        [ "$rc" -ne 0 ] && ! timed_out "$rc" && tail -n 3 "$W/train-$i.log" >&2
        put "$ARCH $row" "ds shards" "$(cell "$(ips_of "$W/run-$i/metrics.jsonl")" "$rc")"
        log "$ARCH $row: ds shards ${R["$ARCH $row|ds shards"]}"
    done
    ckpt=$(ls "$W"/run-*/last.h5 2>/dev/null | head -1)
    row="$ARCH ${rows_of[3]%%|*}"
    if [ -n "$ckpt" ]; then
        run 60 dseval --json --batch "$B_BIG" --device "$DEV" --precision bf16 "$ckpt" "$W/packed" >"$W/eval.out" 2>"$W/eval.err"
        rc=$?
        v=$(grep -o '"images_per_sec": *[0-9.]*' "$W/eval.out" | grep -o '[0-9.]*$')
        [ -z "$v" ] && ! timed_out "$rc" && tail -n 3 "$W/eval.err" >&2
        put "$row" "ds shards" "$(cell "$v" "$rc")"
    else
        put "$row" "ds shards" "n/a (no checkpoint)"
    fi
}

# ---- 4. ds, synthetic data on the device ----
stage_4() {
    for spec in "${rows_of[@]}"; do
        IFS='|' read -r row mode prec b <<<"$spec"
        out=$(run 70 engine_bench --device "$DEV" --precision "$prec" --warmup "$WARM" "$ARCH" "$SIZE" "$b" "$mode" "$STEPS" 2>"$W/bench.err")
        rc=$?
        [ "$rc" -ne 0 ] && tail -n 3 "$W/bench.err" >&2
        put "$ARCH $row" "ds synthetic" "$(cell "$(printf '%s\n' "$out" | tail -1 | awk 'NF == 5 {print $5}')" "$rc")"
        log "$ARCH $row: ds synthetic ${R["$ARCH $row|ds synthetic"]}"
    done
}

# ---- 5. PyTorch eager on the same GPU ----
stage_5() {
    for spec in "${rows_of[@]}"; do
        IFS='|' read -r row mode prec b <<<"$spec"
        torch_run "$ARCH $row" "torch eager" 60 "$mode" "$b" "$prec"
    done
}

# ---- 6. NCCL ----
stage_6() {
    nccl=$(pyrun - "$(ldd "$BINDIR/dstrain" 2>/dev/null | awk '/libnccl/ {print $3; exit}')" <<'EOF' 2>/dev/null
import ctypes, sys
v = ctypes.c_int()
ctypes.CDLL(sys.argv[1] or "libnccl.so.2").ncclGetVersion(ctypes.byref(v))
print(v.value)
EOF
    )
    [[ "$nccl" =~ ^[0-9]+$ ]] || nccl=0
    log "NCCL version code $nccl"
    log "data"
    run 60 synth -q --classes 16 --per-class 40 "$W/tree64" &&
        run 30 dsplit -q -o "$W/split64" "$W/tree64" &&
        run 60 dspack -q -o "$W/packed64" --size 64 --threads 16 "$W/split64/train.txt" ||
        log "small data set failed"
    eq_args=(--train "$W/packed64" --arch resnet20 --crop 56 --epochs 1 --max-steps $([ "$DRY" = 1 ] && echo 2 || echo 10)
             --lr 0.05 --device "$DEV" --precision fp32 --deterministic --log-every 0 --comm-timeout 60 -q)
    if [ "$nccl" -ge 23000 ] && [ "$DRY" = 0 ]; then
        eq_what="3 NCCL ranks on one GPU x batch 8 vs 1 process x batch 8 x accum 3"
        (export NCCL_MULTI_RANK_GPU_ENABLE=1
         run 120 mpirun --oversubscribe --bind-to none -np 3 -x NCCL_MULTI_RANK_GPU_ENABLE -x LD_LIBRARY_PATH \
             dstrain "${eq_args[@]}" --batch 8 -o "$W/eq_mpi" >"$W/eq_mpi.log" 2>&1)
    else
        # Same micro-batches on both sides (BN normalises per micro-batch): the NCCL wiring of
        # one rank, not a sum across ranks.
        eq_what="1 NCCL rank (mpirun -np 1) vs no launcher, both batch 8 x accum 3"
        [ "$DRY" = 1 ] && eq_what="dry run, CPU (MPI, no NCCL): mpirun -np 1 vs no launcher, both batch 8 x accum 3"
        run 120 mpirun --bind-to none -np 1 -x LD_LIBRARY_PATH dstrain "${eq_args[@]}" --batch 8 --accum 3 \
            -o "$W/eq_mpi" >"$W/eq_mpi.log" 2>&1
    fi
    eq_rc=$?
    run 90 dstrain "${eq_args[@]}" --batch 8 --accum 3 -o "$W/eq_accum" >"$W/eq_accum.log" 2>&1
    eq_rc=$((eq_rc | $?))
    eq="fail"
    if [ "$eq_rc" -eq 0 ]; then
        eq=$(pyrun - "$W/eq_mpi/last.h5" "$W/eq_accum/last.h5" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r")["model"], h5py.File(sys.argv[2], "r")["model"]
worst = 0.0
for k in a:
    x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
    worst = max(worst, float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-12)))
# 1e-3: fp32 on both sides, but a sum across ranks runs in another order than accumulation
print(("pass" if worst <= 1e-3 else "FAIL") + " (max rel diff %.2e)" % worst)
EOF
    )
        eq=${eq:-fail (comparison)}
    elif timed_out "$eq_rc"; then
        eq="n/a (time)"
    else
        tail -n 5 "$W/eq_mpi.log" "$W/eq_accum.log" >&2
    fi
    check_line "NCCL $nccl: $eq_what" "$eq"
}

# ---- 7. PyTorch with torch.compile (slow to compile: after the checks that matter more) ----
stage_7() {
    torch_run "$ARCH ${rows_of[0]%%|*}" "torch compile" 150 train "$B_BIG" bf16 --compile
}

# ---- 8. the op tests under compute-sanitizer (last: where it works it is slow) ----
stage_8() {
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    what="test_cuda_ops under compute-sanitizer memcheck"
    if [ "$DRY" = 1 ]; then
        check_line "$what" "n/a (dry run)"
    elif [ -z "$san" ]; then
        check_line "$what" "n/a (no compute-sanitizer)"
    else
        run 60 "$san" --tool memcheck --error-exitcode 99 test_cuda_ops >"$W/memcheck.log" 2>&1
        rc=$?
        tail -n 4 "$W/memcheck.log" >&2
        if grep -qiE 'device not supported|unable to (attach|initialize)|not supported on this' "$W/memcheck.log"; then
            check_line "$what" "n/a (compute-sanitizer refused the device: $(grep -m1 -iE 'not supported|unable to' "$W/memcheck.log" | cut -c1-80))"
        else
            v="$(counts "$W/memcheck.log"), $(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$W/memcheck.log" | tail -1)"
            check_line "$what" "$(timed_out $rc && echo "n/a (time): ")$v (exit $rc)"
        fi
    fi
}

# ---- the table, after every stage and at the end however it comes ----
ratio() {  # ds synthetic over torch eager, when both are numbers
    local a=${R["$1|ds synthetic"]:-} b=${R["$1|torch eager"]:-}
    [[ "$a" =~ ^[0-9.]+$ && "$b" =~ ^[0-9.]+$ ]] && awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2fx", a / b}' || echo "n/a"
}
write_table() {
    local n r
    {
        echo "# GPU benchmark ($([ "$DRY" = 1 ] && echo "DRY RUN on the CPU, toy sizes: says nothing about a GPU" ||
            nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(date -u +%F))"
        echo
        echo "| stage | status |"
        echo "|---|---|"
        for n in 1 2 3 4 5 6 7 8; do echo "| $n. ${STAGE_NAMES[$n]} | ${S[$n]} |"; done
        echo
        echo "| check | result |"
        echo "|---|---|"
        printf '%s\n' ${checks[@]+"${checks[@]}"}
        echo
        echo "| run (images/s) | ds synthetic | ds shards | torch eager | torch compile | ds / torch eager |"
        echo "|---|---|---|---|---|---|"
        for r in ${rows[@]+"${rows[@]}"}; do
            echo "| $r | ${R["$r|ds synthetic"]:-} | ${R["$r|ds shards"]:-} | ${R["$r|torch eager"]:-} | ${R["$r|torch compile"]:-} | $(ratio "$r") |"
        done
        echo
        echo "torch: bench/gpu_torch.py (ResNet-50$([ "$DRY" = 1 ] && echo " at $SIZE px, whatever the row says")), bf16 = AMP autocast, tf32 = fp32 with TF32 allowed; channels_last."
        echo "Goal on one H200: ds training >= 1.3x PyTorch eager AMP. Its fp32 activations, cast to bf16 around every convolution, bound it near 4,400 images/s at batch 256 (bench/GPU.md)."
        echo "Total time: $((SECONDS - T0)) s; logs: gpu-logs.tar.gz"
    } >"$RESULTS.tmp" && mv "$RESULTS.tmp" "$RESULTS"
}
# Every log, error and output file and the runs' metrics, not the data: small enough to come back.
pack_logs() {
    (cd "$W" && find . -maxdepth 2 -type f \( -name '*.log' -o -name '*.err' -o -name '*.out' -o -name report \
        -o -name metrics.jsonl \) -print0 | tar -czf "$RESULTS_DIR/gpu-logs.tar.gz.tmp" --null -T - 2>/dev/null) &&
        mv "$RESULTS_DIR/gpu-logs.tar.gz.tmp" "$RESULTS_DIR/gpu-logs.tar.gz"
}
finish_up() {
    local n
    for n in 1 2 3 4 5 6 7 8; do [ "${S[$n]}" = running ] && S[$n]="cut off (the script was stopped)"; done
    write_table
    pack_logs
    rm -rf "$W"
}
trap finish_up EXIT
trap 'exit 143' TERM INT
# GPU_BENCH_HANG (dry runs): a stage that ignores SIGTERM, so the table shows it ended anyway.
hang() { OWN_LIMIT=1 run 5 bash -c 'trap "" TERM; while :; do sleep 1; done'; }

for stage in 1 2 3 4 5 6 7 8; do
    want "$stage" || continue
    S[$stage]=running
    write_table
    t=$SECONDS
    if [ "$HANG" = "$stage" ]; then hang; rc=$?; else "stage_$stage"; rc=0; fi
    if [ "$HANG" = "$stage" ]; then S[$stage]="ended by its limit (exit $rc after $((SECONDS - t)) s)"
    else S[$stage]="done ($((SECONDS - t)) s)"; fi
    [ "$(lim 999)" -lt 5 ] && S[$stage]="${S[$stage]}; deadline reached"
    write_table
    pack_logs
done
cat "$RESULTS"
[ "$tests_ok" -eq 1 ] && [ "$canaries_ok" -eq 1 ]
