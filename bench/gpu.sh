#!/bin/bash
# bench/gpu.sh: the GPU check and benchmark, one call of at most 9 minutes on one GPU, from the
# GPU bundle (`make gpu-bundle` on a build machine: build/gpu-bundle/, tools, GPU tests and
# every library but CUDA's and the C runtime), so the GPU machine needs no compiler, HDF5 or
# Open MPI; its CUDA libraries are found by the bundle's env.sh (PyTorch's nvidia wheels of the
# python3 on PATH first, then /usr/local/cuda/lib64, then the system). bench/GPU.md has the
# command for a first call, the stage budget and its basis, what to read first in what comes
# back, and what to run next.
#   bench/gpu.sh [--bundle DIR | --build | --tools DIR] [--out DIR] [--seconds N]
#                [--only N,N... | --sweep] [--old PATH] [--dry-run | --emulated] [--plan]
#   --bundle DIR   the bundle (default build/gpu-bundle, or $DS_BUNDLE)
#   --build        build here instead (make, for this GPU only), for a machine with the
#                  build's libraries (HDF5, Open MPI, ...)
#   --tools DIR    the programs as they are in DIR (dstrain dseval dsplit dspack synth
#                  test_cuda_ops engine_bench; h5diff and mpirun there or on PATH), with the
#                  machine's own libraries: no bundle, nothing built
#   --out DIR      where gpu-results.md and gpu-logs.tar.gz go (default $OUT, else bench/)
#   --seconds N    the deadline (default $GPU_BENCH_SECONDS, else 540; 1800 with --emulated)
#   --only N,N...  run only these stages, in the order given (each once)
#   --sweep        the first calls' plan, stages 1-11 in order (the default is round 4's: the
#                  stages 12-19, then 4 and 10 with the time left)
#   --old PATH     for stage 19's runs of old against new: the previous call's bundle (a
#                  folder with env.sh), a folder of its tools (with engine_bench), or its
#                  engine_bench alone (copied into this bundle's bin/, whose libraries it
#                  then loads: two whole bundles would not travel together)
#   --plan         print the plan (the stages in order, each one's budget, the time by which
#                  it ends at the latest) and run nothing
#   --dry-run      no GPU needed: every stage runs on the CPU at toy sizes (ResNet-20, 32 px,
#                  2 steps), test_cuda.sh with DS_TEST_GPU_DEVICE=cpu, compute-sanitizer left
#                  out; checks this script's plumbing (tests/shell/test_gpu_sh.sh and
#                  test_bundle.sh run it), says nothing about a GPU; its commands have only
#                  the deadline, not their stages' budgets. GPU_BENCH_HANG=N (dry runs only)
#                  replaces stage N by a command that ignores SIGTERM, to show it is still ended.
#   --emulated     the rehearsal: every stage's commands with --device cuda on the emulated CUDA
#                  device (tests/emu; the tools of `make emu`, bin-emu/ and build-emu/, with
#                  build-emu/bench/engine_bench; or those in --tools DIR) at the rehearsal's
#                  sizes (sizes_setup: ResNet-50 at 32 px, batches of 4 and 2, a step or two;
#                  GPU_BENCH_EMU_ARCH=resnet20 the smallest), deadline 1800 s unless --seconds,
#                  commands with only the deadline as in a dry run; PyTorch's cells n/a (no
#                  CUDA torch), NCCL over 2 ranks of the emulated NCCL, compute-sanitizer n/a.
#                  Proves this script and ds's own code paths (bench/GPU.md: the rehearsal),
#                  nothing of a GPU's libraries or speed.
# Stages. Each has a budget (BUDGET below; bench/GPU.md gives the basis)
# that its commands' own limits share, and every command runs under `timeout -k` (SIGTERM,
# then SIGKILL to its whole process group GPU_BENCH_GRACE seconds later, default 10: dstrain
# takes SIGTERM as "finish the step, checkpoint, stop", and one stuck in a kernel would not
# stop at all). The default plan (round 4, bench/GPU.md) runs 12-19, then 4 and 10; at the
# default deadline the set-up and 12-18 get their whole budgets, 19, 4 and 10 take what time
# is left, and a command that would get under 5 s is not started. --sweep runs 1-11 (the
# first calls': the set-up and 1-7 at their whole budgets, 8-11 with the time left).
#   0. set-up, always: nvidia-smi, the CUDA libraries loaded and their versions (env.sh
#      --report), the Python for PyTorch and what it loads
#   1. op tests: test_cuda_ops (every CUDA op against the CPU backend, fp32, tf32, bf16;
#      sizes below the planned ones). Outside --dry-run a SKIP here counts as a failure.
#   2. planning canaries: engine_bench ResNet-50 bf16 training at batch 256 planned by cuDNN's
#      search (cudnnFind; no later process searches this plan again), 5 + 20 steps: also the
#      first "ds synthetic" row; the same under --deterministic (planned by cuDNN's
#      heuristics, no search), 2 + 10 steps; ResNet-20 fp32. A convolution cuDNN cannot plan
#      shows in seconds; --verbose logs every convolution's algorithms.
#   3. ds from shards: ResNet-50 bf16 b256 training through the loader (dstrain, 10 steps,
#      --deterministic: heuristics, no second search), on data made here (synth, dsplit, dspack)
#   4. PyTorch eager (bench/gpu_torch.py, the venv's python3; AMP bf16, channels_last):
#      training bf16 b256
#   5. inference bf16 b256: engine_bench, PyTorch eager, and dseval (--deterministic) of stage
#      3's checkpoint on its shards
#   6. NCCL: one rank under the bundle's `mpirun -np 1` against no launcher (same
#      micro-batches, fp32, --deterministic); with NCCL >= 2.30, 3 ranks on the one GPU
#      against --accum 3
#   7. end to end against the CPU: tests/shell/test_cuda.sh (dseval CPU vs GPU; training
#      steps CPU vs GPU, also with RandomResizedCrop at the small end of a crop ramp; a resume
#      bitwise equal under --deterministic; bf16 learns; a SKIP of its GPU checks is a
#      failure), its scratch folder inside the stage's, so its logs come back
#   8. the other rows: training tf32 b256 and bf16 b128 (engine_bench, PyTorch eager, shards),
#      and from shards with --augment rrc at the small end of a crop ramp
#   9. test_cuda_ops under compute-sanitizer --tool memcheck; n/a when the toolkit has none or
#      the container refuses it the device
#  10. PyTorch with torch.compile (slow to compile)
#  11. where a training step's time goes (bench/gpu_profile.sh: every kernel of ds's ResNet-50
#      bf16 b256 step under Nsight Compute, PyTorch's under torch.profiler): the groups' ms per
#      step in the checks table, profile.md and the per-kernel tables in the logs; n/a in a
#      dry run and on the emulated device (no GPU to profile), or without ncu
#  12. the device's own bits: test_cuda_ops --verbose (its bitwise comparisons on the GPU, and
#      which algorithm each bf16 backward-data plan took: algo 0 is cuDNN's nondeterministic
#      one), the same under DS_CUDA_VEC=0 (the scalar twins), and ResNet-20 bf16
#      --deterministic training 3 steps with and without DS_CUDA_VEC=0, checkpoints compared
#      with h5diff (/model, /optimizer)
#  13. HBM calibration (bench/gpu_hbm.py, the bundle's torch: copy, add and sum over 1 GiB of
#      bf16, median of 20 by CUDA events) and the metric names this ncu knows (tensor pipes,
#      DRAM throughput); n/a on the emulated device
#  14. kernel counters: Nsight Compute over one ResNet-50 bf16 b256 training step, ds's kernels
#      with the metrics of time, DRAM bytes and throughput, L2 bytes, SM and warp activity,
#      issue-active, the long-scoreboard / lg / mio stalls, grid, registers and the occupancy
#      limits, then cuDNN's kernels (time, DRAM, tensor pipe, grid) in launch order;
#      bench/ncu_kernels.py makes kernels.md of both; n/a without a GPU or ncu
#  15. sanitizers on test_cuda_ops (compute-sanitizer): memcheck over everything, racecheck and
#      synccheck on the kernels with shared-memory trees (bn_, softmax), initcheck on those
#      reading the never-zeroed scratch (bn_, maxpool); the filters keep cuDNN's kernels out
#  16. the cuDNN fusion probe (cudnn_fusion_probe: ResNet-50's bottleneck convolutions as
#      backend graphs, fused against ds's legacy calls): its table and verdict lines; in a dry
#      run and on the emulated device its --dry-run, the plan alone
#  17. `ncu --set full` on five single launches of ds's batch-norm and max-pool kernels
#      (bench/GPU.md: which, and how they are counted)
#  18. NCCL with two ranks on one GPU (`mpirun -np 2 dstrain`, NCCL_DEBUG=WARN): real NCCL
#      refuses; ds must end within the stage's limit with an error line, never hang
#  19. old against new: engine_bench ResNet-50 bf16 b256 --deterministic, the --old bundle's
#      and this one's interleaved, 3 runs each on the same warm GPU (this one's alone without
#      --old): the medians in the checks, this one's in the images/s table
# After every stage (and when the script ends, however it ends) the table is written anew to
# $OUT/gpu-results.md and stdout's copy, with a line saying what to run next, and everything
# the stages wrote but data and checkpoints (every command's stdout and stderr, this script's
# own log, nvidia-smi, the libraries' report, cuDNN's algorithm choices) is packed into
# $OUT/gpu-logs.tar.gz, one folder per stage. Data is made on the machine by the bundle's
# synth, dsplit and dspack.
# cuDNN's own log of errors and warnings goes to each process's stderr (CUDNN_LOGLEVEL_DBG=2,
# CUDNN_LOGDEST_DBG=stderr, unless set already; CUDNN_LOGLEVEL_DBG=0 turns it off). To locate a
# kernel's fault: CUDA_LAUNCH_BLOCKING=1 (reported at its launch).
# The programs and their environment are chosen in one place, tools_setup below (the bundle,
# a build here, or a folder of tools); the sizes and the device in another (sizes_setup).
# Run on one H200 (bench/GPU.md, Results: stages 0-10 in its first call, 0-8 since); stage 11
# has run only as bench/gpu_profile.sh on its own, with the bundle rather than --tools; stages
# 12-19 (round 4) have not run on a GPU at all. On the
# CPU: --dry-run, runs with stand-in tools (tests/shell/test_gpu_sh.sh) and the rehearsal on
# the emulated device (--emulated, tests/shell/test_emu_gpu_sh.sh).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
usage() { sed -n '2,/^# Stages\. Each has a budget/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
# The stages: names, folders (under the work folder) and budgets in seconds, set-up first.
NAMES=("set-up" "op tests" "planning canaries" "ds from shards" "torch eager" "inference" "NCCL"
       "end to end (test_cuda.sh)" "the other rows" "compute-sanitizer" "torch compile" "profile"
       "device bits" "HBM calibration" "kernel counters (ncu)" "sanitizers" "cuDNN fusion probe"
       "ncu --set full" "NCCL, two ranks on one GPU" "old against new")
SLUGS=(setup ops canaries shards torch infer nccl test_cuda rows sanitizer compile profile
       bits hbm counters sanitizers fusion ncu_full nccl_one old_new)
BUDGET=(40 40 90 70 60 75 45 100 245 60 150 100
        50 25 100 110 120 60 20 45)
LAST=$((${#NAMES[@]} - 1))
# The default plan (round 4) and --sweep's (the first calls')
PLAN_ROUND4=(12 13 14 15 16 17 18 19 4 10)
PLAN_SWEEP=(1 2 3 4 5 6 7 8 9 10 11)
BUNDLE=${DS_BUNDLE:-$ROOT/build/gpu-bundle} TOOLS_FROM=bundle TOOLS='' DRY=0 EMULATED=0 PLAN_ONLY=0 ONLY='' SWEEP=0
OLD=''
RESULTS_DIR=${OUT:-$ROOT/bench} DEADLINE=${GPU_BENCH_SECONDS:-} GRACE=${GPU_BENCH_GRACE:-10} TOOLS_SET=''
while [ $# -gt 0 ]; do
    case $1 in
    --bundle) [ $# -ge 2 ] || usage; BUNDLE=$2 TOOLS_FROM=bundle TOOLS_SET=$1; shift ;;
    --build) TOOLS_FROM=build TOOLS_SET=$1 ;;
    --tools) [ $# -ge 2 ] || usage; TOOLS=$2 TOOLS_FROM=tools TOOLS_SET=$1; shift ;;
    --out) [ $# -ge 2 ] || usage; RESULTS_DIR=$2; shift ;;
    --seconds) [[ "${2:-}" =~ ^[0-9]+$ ]] || usage; DEADLINE=$2; shift ;;
    --dry-run) DRY=1 ;;
    --emulated) EMULATED=1 ;;
    --plan) PLAN_ONLY=1 ;;
    --only) [[ "${2:-}" =~ ^[0-9]+(,[0-9]+)*$ ]] || usage; ONLY=$2; shift ;;
    --sweep) SWEEP=1 ;;
    --old) [ $# -ge 2 ] || usage; OLD=$2; shift ;;
    -h | --help) usage ;;
    *) echo "gpu.sh: unknown argument '$1'" >&2; usage ;;
    esac
    shift
done
# The mode: a GPU, a dry run on the CPU, or the rehearsal on the emulated device, whose tools
# are make emu's unless --tools names others (the bundle and a build here link NVIDIA's).
MODE=gpu
[ "$DRY" = 1 ] && MODE=dry
if [ "$EMULATED" = 1 ]; then
    [ "$DRY" = 1 ] && { echo "gpu.sh: --dry-run and --emulated are two modes: one of them" >&2; exit 2; }
    case $TOOLS_SET in
    "") TOOLS_FROM=emulated ;;
    --tools) ;;
    *) echo "gpu.sh: --emulated takes make emu's tools (bin-emu/, build-emu/) or --tools DIR, not $TOOLS_SET" >&2; exit 2 ;;
    esac
    MODE=emulated
fi
DEADLINE=${DEADLINE:-$([ "$MODE" = emulated ] && echo 1800 || echo 540)}
[[ "$GRACE" =~ ^[0-9]+$ ]] || { echo "gpu.sh: GPU_BENCH_GRACE must be a whole number of seconds" >&2; exit 2; }
# The stages to run, in order: --only's, each a stage and each once.
ORDER=()
for n in ${ONLY:+${ONLY//,/ }}; do
    n=$((10#$n))
    if [ "$n" -lt 1 ] || [ "$n" -gt "$LAST" ] || [[ " ${ORDER[*]-} " == *" $n "* ]]; then
        echo "gpu.sh: --only takes stages 1 to $LAST, each once ('$ONLY')" >&2; usage
    fi
    ORDER+=("$n")
done
[ -n "$ONLY" ] && [ "$SWEEP" = 1 ] && { echo "gpu.sh: --only and --sweep are two plans: one of them" >&2; exit 2; }
if [ -z "$ONLY" ]; then
    if [ "$SWEEP" = 1 ]; then ORDER=("${PLAN_SWEEP[@]}"); else ORDER=("${PLAN_ROUND4[@]}"); fi
fi
if [ -n "$OLD" ]; then
    { [ -f "$OLD/env.sh" ] || [ -x "$OLD/engine_bench" ] || { [ -f "$OLD" ] && [ -x "$OLD" ]; }; } ||
        { echo "gpu.sh: --old $OLD is not a bundle (env.sh), a folder with engine_bench or an engine_bench" >&2; exit 1; }
    OLD=$(realpath "$OLD")
fi
HANG=${GPU_BENCH_HANG:-}
[ -n "$HANG" ] && [ "$DRY" != 1 ] && { echo "gpu.sh: GPU_BENCH_HANG is for --dry-run only" >&2; exit 2; }
# The emulated device's tools (make emu), linked into the work folder's bin/ as --build's are.
EMU_TOOLS=(bin-emu/dstrain bin-emu/dseval bin-emu/dspack bin-emu/dsplit build-emu/data/synth
           build-emu/tests/test_cuda_ops build-emu/bench/engine_bench)
# Every command ends GRACE s after the deadline's SIGTERM at the latest; 5 s more are kept
# for the table and the logs.
RESERVE=$((GRACE + 5))

# The plan: each stage's budget and the time by which it ends at the latest.
plan() {
    local n t=${BUDGET[0]} cut=$((DEADLINE - RESERVE)) note
    printf '%-6s %6s %8s  %s\n' stage budget "ends by" what
    printf '%-6s %5ss %8s  %s\n' 0 "${BUDGET[0]}" "$t s" "${NAMES[0]}"
    for n in "${ORDER[@]}"; do
        t=$((t + BUDGET[n])) note=""
        [ "$t" -gt "$cut" ] && note=" (past ${cut} s: with the time left)"
        printf '%-6s %5ss %8s  %s%s\n' "$n" "${BUDGET[n]}" "$([ "$t" -gt "$cut" ] && echo "-" || echo "$t s")" "${NAMES[n]}" "$note"
    done
    echo "deadline $DEADLINE s: every command ends by $cut s, $GRACE s for a kill and 5 s for the table and the logs"
}
if [ "$PLAN_ONLY" = 1 ]; then plan; exit 0; fi
# Where the programs come from, checked before anything is written.
case $TOOLS_FROM in
bundle) [ -f "$BUNDLE/env.sh" ] || { echo "gpu.sh: no bundle at $BUNDLE (make gpu-bundle on a build machine, or --build)" >&2; exit 1; } ;;
tools) [ -x "$TOOLS/dstrain" ] || { echo "gpu.sh: no dstrain in $TOOLS" >&2; exit 1; } ;;
emulated)
    for p in "${EMU_TOOLS[@]}"; do
        [ -x "$ROOT/$p" ] || { echo "gpu.sh: no $p (make emu builds the emulated device's tools, engine_bench among them)" >&2; exit 1; }
    done ;;
esac

mkdir -p "$RESULTS_DIR" || exit 1
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
RESULTS=$RESULTS_DIR/gpu-results.md
W=$(mktemp -d "${TMPDIR:-/tmp}/ds-gpu.XXXXXX")
T0=$SECONDS
declare -A R       # table cells: R[row|column] = value
declare -A ROW_SEEN
declare -A S       # stage status: S[n]
declare -A CUT     # commands of stage n cut (or not started) for want of time
declare -A BAD     # failures in stage n
rows=() checks=() tests_ok=1 canaries_ok=1 STAGE=0 STAGE_END=$((SECONDS + BUDGET[0]))
for n in $(seq 1 "$LAST"); do S[$n]="not selected"; CUT[$n]=0; BAD[$n]=0; done
for n in "${ORDER[@]}"; do S[$n]="not reached"; done
CUT[0]=0 BAD[0]=0
SW=$W/0-setup
mkdir -p "$SW"

# This script's own messages: on stderr and in its log, which is packed with the rest.
say() { printf '%s\n' "$*" >&2; printf '%s\n' "$*" >>"$W/gpu.sh.log"; }
log() { say "$(printf '[%4ds] %s' $((SECONDS - T0)) "$*")"; }
# (a row is new when it has no cell yet: a name that begins another's is a row of its own)
put() { [ -n "${ROW_SEEN["$1"]:-}" ] || { rows+=("$1"); ROW_SEEN["$1"]=1; }; R["$1|$2"]=$3; }
check_line() {
    checks+=("| $1 | $2 |"); log "$1: $2"
    [[ "$2" =~ ^(FAIL|fail) ]] && BAD[$STAGE]=$((BAD[$STAGE] + 1))
    return 0
}
# A failed command's own words, from its logs: the first "error:" line of ds's, else the
# first line naming an error or a FAIL, else the last line.
why() {
    local f line=""
    for f in "$@"; do [ -s "$f" ] && [ -z "$line" ] && line=$(grep -h -m1 ': error: ' "$f"); done
    for f in "$@"; do [ -s "$f" ] && [ -z "$line" ] && line=$(grep -h -m1 -E 'Error|error|FAIL' "$f"); done
    for f in "$@"; do [ -s "$f" ] && [ -z "$line" ] && line=$(grep -v '^[[:space:]]*$' "$f" | tail -1); done
    printf '%s' "${line:-no message}" | cut -c1-200 | tr '|' '/'
}
# Seconds a command may take: its own limit, cut to what is left of its stage's budget and of
# the deadline. A dry run's commands have only the deadline: their limits are sized for a GPU
# at full size, and a toy run that a loaded CPU slows must not end as a timeout (the deadline
# stays the guard against a hang; GPU_BENCH_HANG's stage keeps its own limit).
lim() {
    local left=$((DEADLINE - RESERVE - (SECONDS - T0))) stage=$((STAGE_END - SECONDS)) s=$1
    if [ "$OWN_LIMITS" = 1 ] || [ "${OWN_LIMIT:-0}" = 1 ]; then
        [ "$stage" -lt "$s" ] && s=$stage
        [ "$left" -lt "$s" ] && s=$left
    else
        s=$left
    fi
    echo "$s"
}
# run LIMIT COMMAND...: the command under timeout, SIGKILL GRACE seconds after SIGTERM (to
# its whole process group: dstrain under test_cuda.sh too); 124 without running it when less
# than 5 s are left of the stage or the deadline (timeout 0 would mean no limit at all). A
# command cut by its limit (124, or 137 after SIGKILL) counts against its stage.
run() {
    local s rc; s=$(lim "$1"); shift
    if [ "$(lim 100000)" -lt 5 ]; then CUT[$STAGE]=$((CUT[$STAGE] + 1)); log "no time left for: ${*:1:3}"; return 124; fi
    timeout -k "$GRACE" "$s" "$@"
    rc=$?
    timed_out "$rc" && CUT[$STAGE]=$((CUT[$STAGE] + 1))
    return "$rc"
}
timed_out() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; }
# a cell from a rate (or "n/a (time)" when cut by its limit, "fail (exit 0, ...)" when a command that
# succeeded gave no rate, or "fail (exit N)")
cell() {
    if [ -n "$1" ]; then echo "$1"
    elif timed_out "$2"; then echo "n/a (time)"
    elif [ "$2" -eq 0 ]; then echo "fail (exit 0, no images/s in its output)"
    else echo "fail (exit $2)"; fi
}
# cell_of ROW COLUMN VALUE RC LOGS...: the cell, and for a failure its own words in the checks
cell_of() {
    local row=$1 col=$2 v=$3 rc=$4; shift 4
    put "$row" "$col" "$(cell "$v" "$rc")"
    log "$row: $col ${R["$row|$col"]}"
    [ -z "$v" ] && ! timed_out "$rc" && check_line "$row, $col" "FAIL (exit $rc): $(why "$@")"
    return 0
}
ips_of() { grep -o '"images_per_sec": *[0-9.]*' "$1" 2>/dev/null | tail -1 | grep -o '[0-9.]*$'; }
# counts of a test's PASS/FAIL/SKIP lines, for the checks table
counts() { echo "$(grep -c '^PASS' "$1") passed, $(grep -c '^FAIL' "$1") failed, $(grep -c '^SKIP' "$1") skipped"; }

# ---- the sizes and the device ----
# A dry run and the rehearsal give their commands only the deadline (their limits are sized
# for a GPU at full size); both run at toy sizes (TOY=1: the torch rows' note says so).
sizes_setup() {
    case $MODE in
    dry) DEV=cpu OWN_LIMITS=0 TOY=1 ;;
    emulated) DEV=cuda OWN_LIMITS=0 TOY=1 ;;
    *) DEV=cuda OWN_LIMITS=1 TOY=0 ;;
    esac
    # the NCCL stage's ResNet-20 and its data (64 px, cropped to NCCL_CROP); the shard rows'
    # images/s from their last step row, every LOG_EVERY steps
    NCCL_CROP=56 NCCL_PER=40 LOG_EVERY=5
    if [ "$MODE" = emulated ]; then
        # The emulated device's convolutions are reference loops on the CPU (a ResNet-50
        # training step at 32 px and batch 4 takes seconds on two cores): the GPU call's model
        # at 32 px, batches of 4 and 2 (batch norm at 1x1 needs 2 values a channel), one step
        # after one of warm-up, 2 from the shards; GPU_BENCH_EMU_ARCH=resnet20 the smallest.
        ARCH=${GPU_BENCH_EMU_ARCH:-resnet50} SIZE=32 STEPS=1 WARM=1 DSTEPS=1 DWARM=0 B_BIG=4 B_SMALL=2 R20_B=8 MAX_STEPS=2
        SYN_CLASSES=4 SYN_PER=8 SYN_PX=48 PACK=40 RAMP_MIN=24 NCCL_CROP=24 NCCL_PER=8 LOG_EVERY=1
    elif [ "$TOY" = 1 ]; then
        ARCH=resnet20 SIZE=32 STEPS=2 WARM=1 DSTEPS=2 DWARM=1 B_BIG=8 B_SMALL=4 R20_B=8 MAX_STEPS=10
        SYN_CLASSES=4 SYN_PER=8 SYN_PX=48 PACK=40 RAMP_MIN=24
    else
        ARCH=resnet50 SIZE=224 STEPS=20 WARM=5 DSTEPS=10 DWARM=2 B_BIG=256 B_SMALL=128 R20_B=128 MAX_STEPS=10
        SYN_CLASSES=100 SYN_PER=34 SYN_PX=256 PACK=256 RAMP_MIN=160
    fi
    # tf32 is a tensor-core format, which the CPU refuses: fp32 in its place there
    TF32=$([ "$DEV" = cpu ] && echo fp32 || echo tf32)
    # test_cuda.sh's threads: on the CPU its "GPU" runs take every thread they are given, and
    # a CPU shared with other work slows down many times over when its threads wait in turn
    # (the emulated device's too)
    OMP=$([ "$MODE" = gpu ] && echo 8 || echo 1)
}

# ---- the programs and their environment: the bundle, a build here, or a folder ----
# Sets BINDIR (first on PATH), PY_ENV (the environment PyTorch's Python runs in: the machine's
# as it was) and report (the libraries' line of the checks table); writes what it found to
# the set-up folder.
tools_setup() {
    PY_ENV=()
    case $TOOLS_FROM in
    emulated)
        local p
        mkdir -p "$W/bin"
        for p in "${EMU_TOOLS[@]}"; do ln -s "$ROOT/$p" "$W/bin/"; done
        # the fusion probe's --dry-run needs no GPU: the normal build's, where there is one
        [ -x "$ROOT/build/bench/cudnn_fusion_probe" ] && ln -s "$ROOT/build/bench/cudnn_fusion_probe" "$W/bin/"
        # engine_bench and test_cuda_ops link build-emu/libcommon.a as the tools do: one
        # built before the library's last change would run other code than the tools
        for p in "${EMU_TOOLS[@]}"; do
            [ "$ROOT/$p" -ot "$ROOT/build-emu/libcommon.a" ] && check_line "emulated tools" "WARNING: $p is older than build-emu/libcommon.a (make emu)"
        done
        BINDIR=$W/bin
        ldd "$BINDIR/dstrain" >"$SW/libraries.txt" 2>&1
        report="emulated CUDA device (tests/emu: runtime, cuDNN, cuBLAS, NCCL on the CPU, linked into the tools): bin-emu/, build-emu/"
        ;;
    build)
        log "build"
        local cc archs=() p
        cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>>"$SW/build.err" | head -1 | tr -d ' .')
        [[ "$cc" =~ ^[0-9]+$ ]] && archs=("CUDA_ARCHS=-gencode arch=compute_$cc,code=sm_$cc")
        if ! OWN_LIMIT=1 STAGE_END=$((SECONDS + 240)) run 240 make -j"$(nproc)" ${archs[@]+"${archs[@]}"} all bench-build \
            >"$SW/build.log" 2>&1; then
            tail -n 30 "$SW/build.log" >&2
            log "build failed: nothing else can run"
            exit 1
        fi
        grep -q 'CUDA=1' "$SW/build.log" || log "WARNING: built without CUDA"
        mkdir -p "$W/bin"
        for p in bin/* build/data/synth build/tests/test_cuda_ops build/bench/engine_bench build/bench/cudnn_fusion_probe; do
            ln -s "$ROOT/$p" "$W/bin/"
        done
        BINDIR=$W/bin
        ldd "$BINDIR/dstrain" >"$SW/libraries.txt" 2>&1
        report="built here: $(grep -o 'CUDA=1 ([^)]*)' "$SW/build.log")"
        ;;
    tools)
        BINDIR=$(cd "$TOOLS" && pwd)
        ldd "$BINDIR/dstrain" >"$SW/libraries.txt" 2>&1
        report="tools $BINDIR, the machine's libraries (libraries.txt)"
        ;;
    bundle)
        BUNDLE=$(cd "$BUNDLE" && pwd)
        # The Python (torch) sees the machine's environment as it was, not the bundle's.
        PY_ENV=(env "PATH=$PATH" "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}")
        . "$BUNDLE/env.sh" || exit 1
        BINDIR=$BUNDLE/bin
        run 15 "$BUNDLE/env.sh" --report >"$SW/env-report.txt" 2>&1
        local rc=$? versions
        sed 's/^/    /' "$SW/env-report.txt" >&2
        # "  libcudnn   91900" and the like, from the report's versions
        versions=$(sed -n '/^versions:/,$p' "$SW/env-report.txt" | awk 'NR > 1 && NF >= 2 {$1 = $1; print}' | paste -sd';' -)
        report="bundle $BUNDLE; $([ $rc -eq 0 ] && echo "every library found" || echo "LIBRARIES MISSING")${versions:+; $versions}"
        ;;
    esac
    export PATH="$BINDIR:$PATH"
}

# ---- 0. set-up: the GPU, the libraries, the Python ----
stage_0() {
    tools_setup
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # cuDNN's log for ds's processes; PyTorch's keep theirs off unless asked for (its
    # benchmark mode tries engines by the hundred, and would fill its stderr with their refusals)
    if [ -z "${CUDNN_LOGLEVEL_DBG:-}" ]; then
        export CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=${CUDNN_LOGDEST_DBG:-stderr}
        PY_ENV=(env -u CUDNN_LOGLEVEL_DBG -u CUDNN_LOGDEST_DBG ${PY_ENV[@]+"${PY_ENV[@]:1}"})
    fi
    if [ "$MODE" = gpu ]; then
        run 5 nvidia-smi >"$SW/nvidia-smi.txt" 2>&1
        run 5 nvidia-smi -q >>"$SW/nvidia-smi.txt" 2>&1
        gpu=$(run 5 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -1)
        check_line "GPU" "${gpu:-nvidia-smi failed (nvidia-smi.txt)}"
        [[ $gpu == *,*,*,* ]] && GPU_NAME=${gpu%%,*}   # name, driver, memory, compute capability
    fi
    check_line "libraries" "$report"
    # The Python for PyTorch (and h5py and numpy, which test_cuda.sh and the NCCL stage's
    # comparison need): $PYTHON, else the first python3 (on PATH, then the system's) whose
    # torch sees a GPU (in a dry run: that has torch); what it loads, and whether it has h5py
    local probe p i=0
    probe='import sys
import torch, numpy
try:
    import h5py
    h5 = "h5py " + h5py.__version__
except ImportError:
    h5 = "NO h5py (test_cuda.sh and the NCCL comparison need it)"
try:
    nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
except Exception:
    nccl = "n/a"
gpu = torch.cuda.is_available()
print("torch %s (CUDA %s, cuDNN %s, NCCL %s; GPU: %s); %s" % (torch.__version__, torch.version.cuda,
      torch.backends.cudnn.version(), nccl, torch.cuda.get_device_name(0) if gpu else "none", h5))
sys.exit(0 if gpu or sys.argv[1] == "1" else 1)'
    # the rehearsal runs no torch (none runs on the emulated device): numpy and h5py for
    # test_cuda.sh and the NCCL comparison are what it needs of a Python
    [ "$MODE" = emulated ] && probe='import numpy, h5py
print("numpy %s, h5py %s (no torch needed: the emulated device runs none)" % (numpy.__version__, h5py.__version__))'
    PY=${PYTHON:-}
    if [ -z "$PY" ]; then
        for p in python3 /usr/bin/python3; do
            i=$((i + 1))
            if run 25 ${PY_ENV[@]+"${PY_ENV[@]}"} "$p" -c "$probe" "$DRY" >"$SW/python-$i.out" 2>"$SW/python-$i.err"; then
                PY=$(command -v "$p") && break
            fi
        done
        if [ -n "$PY" ]; then check_line "Python" "$PY: $(tail -1 "$SW/python-$i.out")"
        else PY=python3; check_line "Python" "none whose torch sees a GPU: $(why "$SW/python-$i.err" "$SW/python-$i.out")"; fi
    else
        check_line "Python" "$PY (\$PYTHON)"
    fi
}

torch_run() {  # ROW COLUMN LIMIT MODE BATCH PRECISION [--compile]
    local v rc f=$SW/torch-$4-$6-b$5${7:+-compile}
    if [ "$MODE" = emulated ]; then
        echo "not run: bench/gpu_torch.py $4 $5 $6 ${7:-} needs a CUDA torch, and none runs on the emulated device" >"$f.log"
        put "$1" "$2" "n/a (emulated: no CUDA torch)"
        log "$1: $2 ${R["$1|$2"]}"
        return 0
    fi
    run "$3" ${PY_ENV[@]+"${PY_ENV[@]}"} "$PY" bench/gpu_torch.py --device "$DEV" --size "$SIZE" \
        $([ "$TOY" = 1 ] && echo --steps 2 --warmup 1) ${7:-} "$4" "$5" "$6" >"$f.out" 2>"$f.err"
    rc=$?
    v=$(grep -o 'images_per_sec [0-9.]*' "$f.out" | tail -1 | grep -o '[0-9.]*$')
    cell_of "$1" "$2" "$v" "$rc" "$f.err" "$f.out"
}

# engine_bench ROW LIMIT PRECISION BATCH MODE WARM STEPS [ARGS...]: images/s on data already
# on the device, in the ds synthetic column
synthetic() {
    local row=$1 limit=$2 prec=$3 b=$4 mode=$5 warm=$6 steps=$7 f rc; shift 7
    f=$SW/engine-$mode-$prec-b$b
    run "$limit" engine_bench --device "$DEV" --precision "$prec" --warmup "$warm" --verbose "$@" \
        "$ARCH" "$SIZE" "$b" "$mode" "$steps" >"$f.out" 2>"$f.err"
    rc=$?
    cell_of "$row" "ds synthetic" "$(tail -1 "$f.out" | awk 'NF == 5 {print $5}')" "$rc" "$f.err"
}

# ---- 1. the op tests ----
# ops_check LOG RC LABEL: the op tests' counts into the checks; a failure counts against the
# stage and the script's exit. On a GPU machine a SKIP means the GPU was not used: a failure
# of this run, not a pass.
ops_check() {
    check_line "$3" "$(counts "$1") (exit $2)"
    grep '^FAIL' "$1" | head -5 >&2
    [ "$2" -eq 0 ] || { tests_ok=0; BAD[$STAGE]=$((BAD[$STAGE] + 1)); }
    if [ "$DRY" = 0 ] && grep -q '^SKIP' "$1"; then
        tests_ok=0
        check_line "${3%% (*} skipped on a GPU machine" "FAIL: $(grep -m1 '^SKIP' "$1")"
    fi
}
stage_1() {
    run 40 test_cuda_ops >"$SW/ops.log" 2>&1
    ops_check "$SW/ops.log" $? "test_cuda_ops (every CUDA op vs the CPU backend; fp32, tf32, bf16)"
}

# ---- 2. planning canaries: a convolution cuDNN cannot plan shows in seconds ----
canary() {  # LABEL LIMIT ROW(or "") ENGINE_BENCH_ARGS...
    local label=$1 limit=$2 row=$3 t=$SECONDS rc f v; shift 3
    CANARY=$((${CANARY:-0} + 1)) f=$SW/canary-$CANARY
    run "$limit" engine_bench --device "$DEV" "$@" >"$f.out" 2>"$f.err"
    rc=$?
    v=$(tail -1 "$f.out" | awk 'NF == 5 {print $5}')
    if [ $rc -eq 0 ]; then check_line "canary: $label" "pass (planned and run in $((SECONDS - t)) s)"
    elif timed_out $rc; then check_line "canary: $label" "n/a (time: cut by its limit)"; canaries_ok=0
    else check_line "canary: $label" "FAIL (exit $rc): $(why "$f.err" "$f.out")"; canaries_ok=0
    fi
    if [ -n "$row" ]; then put "$row" "ds synthetic" "$(cell "$v" "$rc")"; log "$row: ds synthetic ${R["$row|ds synthetic"]}"; fi
    return 0
}
stage_2() {
    canary "$ARCH bf16 b$B_BIG train, cuDNN's search" 55 "$ARCH train bf16 b$B_BIG" \
        --precision bf16 --warmup "$WARM" --verbose "$ARCH" "$SIZE" "$B_BIG" train "$STEPS"
    # conv1 (3 input channels) is the layer whose NHWC bf16 kernels may be a slow fallback:
    # what cuDNN chose for it decides whether its input is worth padding to 4 channels
    local conv1
    conv1=$(grep -h -m1 'CUDA conv [0-9]*x[0-9]*x[0-9]*x3 -> ' "$SW/canary-1.err" 2>/dev/null | sed 's/^.*CUDA conv //' | cut -c1-300)
    check_line "conv1's algorithms (bf16)" "${conv1:-n/a (not in the first canary log)}"
    canary "$ARCH bf16 b$B_BIG train, --deterministic (heuristics)" 22 "$ARCH train bf16 b$B_BIG --deterministic" \
        --precision bf16 --deterministic --warmup "$DWARM" --verbose "$ARCH" "$SIZE" "$B_BIG" train "$DSTEPS"
    canary "resnet20 fp32 b$R20_B train" 13 "" --precision fp32 --warmup 0 resnet20 32 "$R20_B" train 1
}

# ---- 3. ds from shards ----
# The benchmark's data set, made once (by whichever stage needs it first) into $W/data.
shard_data() {
    [ -f "$W/data/ok" ] && return 0
    [ -d "$W/data" ] && return 1   # tried before, and failed
    mkdir -p "$W/data"
    local d=$W/data
    run 12 synth -q --classes "$SYN_CLASSES" --per-class "$SYN_PER" --width "$SYN_PX" --height "$SYN_PX" "$d/tree" \
            >"$SW/synth.out" 2>"$SW/synth.err" &&
        run 3 dsplit -q --val 0.05 -o "$d/split" "$d/tree" >"$SW/dsplit.out" 2>"$SW/dsplit.err" &&
        run 10 dspack -q -o "$d/packed" --size "$PACK" --threads 16 "$d/split/train.txt" >"$SW/dspack.out" 2>"$SW/dspack.err" &&
        touch "$d/ok" && return 0
    check_line "benchmark data set (synth, dsplit, dspack)" "FAIL: $(why "$SW"/synth.err "$SW"/dsplit.err "$SW"/dspack.err)"
    return 1
}
# The small data set of the ResNet-20 runs (stages 6, 12 and 18: 16 classes of 64 px), made
# once into $W/small by whichever stage needs it first.
small_data() {
    [ -f "$W/small/ok" ] && return 0
    [ -d "$W/small" ] && return 1   # tried before, and failed
    mkdir -p "$W/small"
    run 5 synth -q --classes 16 --per-class "$NCCL_PER" --width 64 --height 64 "$W/small/tree64" >"$SW/synth.out" 2>"$SW/synth.err" &&
        run 2 dsplit -q -o "$W/small/split64" "$W/small/tree64" >"$SW/dsplit.out" 2>"$SW/dsplit.err" &&
        run 5 dspack -q -o "$W/small/packed64" --size 64 --threads 16 "$W/small/split64/train.txt" >"$SW/dspack.out" \
            2>"$SW/dspack.err" && touch "$W/small/ok" && return 0
    log "small data set failed: $(why "$SW"/synth.err "$SW"/dsplit.err "$SW"/dspack.err)"
    return 1
}
# shard_row ROW LIMIT PRECISION BATCH [rrc]: dstrain from the shards, --deterministic
# (planned by cuDNN's heuristics: the loader's path is what it measures, and the call's one
# search is stage 2's); images/s from its last step row (wall clock)
shard_row() {
    local row=$1 limit=$2 prec=$3 b=$4 args=(--epochs 1) f rc
    # RandomResizedCrop at the small end of a crop ramp: epoch 0 of 3 trains at the ramp's
    # first crop, so the convolutions planned at SIZE run smaller
    [ "${5:-}" = rrc ] && args=(--augment rrc --min-crop "$RAMP_MIN" --ramp-start 1 --ramp-end 2 --crop-step 8 --epochs 3)
    f=$SW/train-$prec-b$b${5:+-$5}
    if ! shard_data; then put "$row" "ds shards" "n/a (no data)"; return 0; fi
    run "$limit" dstrain --train "$W/data/packed" --arch "$ARCH" --batch "$b" --max-steps "$MAX_STEPS" --crop "$SIZE" \
        "${args[@]}" --log-every "$LOG_EVERY" --device "$DEV" --precision "$prec" --deterministic --comm-timeout 30 -v \
        -o "$f" >"$f.out" 2>"$f.err"
    rc=$?
    cell_of "$row" "ds shards" "$(ips_of "$f/metrics.jsonl")" "$rc" "$f.err"
}
stage_3() {
    shard_row "$ARCH train bf16 b$B_BIG --deterministic" 45 bf16 "$B_BIG"
}

# ---- 4. PyTorch eager on the same GPU ----
stage_4() {
    torch_run "$ARCH train bf16 b$B_BIG" "torch eager" 60 train "$B_BIG" bf16
}

# ---- 5. inference ----
stage_5() {
    local row="$ARCH infer bf16 b$B_BIG" ckpt=$W/3-shards/train-bf16-b$B_BIG/last.h5 f=$SW/dseval rc
    synthetic "$row" 20 bf16 "$B_BIG" infer "$WARM" "$STEPS"
    torch_run "$row" "torch eager" 35 infer "$B_BIG" bf16
    # dseval reads the shards through the loader: planned by heuristics, as stage 3's run
    if [ -f "$ckpt" ]; then
        run 20 dseval --json --batch "$B_BIG" --device "$DEV" --precision bf16 --deterministic -v "$ckpt" "$W/data/packed" \
            >"$f.out" 2>"$f.err"
        rc=$?
        cell_of "$row --deterministic" "ds shards" "$(grep -o '"images_per_sec": *[0-9.]*' "$f.out" | grep -o '[0-9.]*$')" "$rc" "$f.err"
    else
        put "$row --deterministic" "ds shards" "n/a (no checkpoint: stage 3 makes it)"
    fi
}

# ---- 6. NCCL ----
stage_6() {
    local nccl_lib rc
    nccl=0
    # the emulated NCCL is linked into the tools: no library to ask its version
    if [ "$MODE" != emulated ]; then
        nccl_lib=$(ldd "$BINDIR/dstrain" 2>/dev/null | awk '/libnccl/ {print $3; exit}')
        run 5 ${PY_ENV[@]+"${PY_ENV[@]}"} "$PY" - "$nccl_lib" >"$SW/nccl-version.out" 2>"$SW/nccl-version.err" <<'EOF'
import ctypes, sys
v = ctypes.c_int()
ctypes.CDLL(sys.argv[1] or "libnccl.so.2").ncclGetVersion(ctypes.byref(v))
print(v.value)
EOF
        nccl=$(tail -1 "$SW/nccl-version.out")
        [[ "$nccl" =~ ^[0-9]+$ ]] || nccl=0
        log "NCCL version code $nccl"
    fi
    small_data
    eq_args=(--train "$W/small/packed64" --arch resnet20 --crop "$NCCL_CROP" --epochs 1 --max-steps "$MAX_STEPS"
             --lr 0.05 --device "$DEV" --precision fp32 --deterministic --log-every 0 --comm-timeout 20 -q)
    if [ "$MODE" = emulated ]; then
        # the emulated NCCL sums across the ranks of an mpirun, on two emulated devices
        eq_what="2 ranks over the emulated NCCL x batch 8 vs 1 process x batch 8 x accum 2"
        run 15 env DS_EMU_DEVICES=2 mpirun --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH -x DS_EMU_DEVICES \
            dstrain "${eq_args[@]}" --batch 8 -o "$SW/eq_mpi" >"$SW/eq_mpi.log" 2>&1
    elif [ "$nccl" -ge 23000 ] && [ "$DRY" = 0 ]; then
        eq_what="3 NCCL ranks on one GPU x batch 8 vs 1 process x batch 8 x accum 3"
        run 15 env NCCL_MULTI_RANK_GPU_ENABLE=1 mpirun --oversubscribe --bind-to none -np 3 -x NCCL_MULTI_RANK_GPU_ENABLE \
            -x LD_LIBRARY_PATH -x CUDNN_LOGLEVEL_DBG -x CUDNN_LOGDEST_DBG dstrain "${eq_args[@]}" --batch 8 -o "$SW/eq_mpi" \
            >"$SW/eq_mpi.log" 2>&1
    else
        # Same micro-batches on both sides (BN normalises per micro-batch): the NCCL wiring of
        # one rank, not a sum across ranks.
        eq_what="1 NCCL rank (mpirun -np 1) vs no launcher, both batch 8 x accum 3"
        [ "$DRY" = 1 ] && eq_what="dry run, CPU (MPI, no NCCL): mpirun -np 1 vs no launcher, both batch 8 x accum 3"
        run 15 mpirun --bind-to none -np 1 -x LD_LIBRARY_PATH -x CUDNN_LOGLEVEL_DBG -x CUDNN_LOGDEST_DBG \
            dstrain "${eq_args[@]}" --batch 8 --accum 3 -o "$SW/eq_mpi" >"$SW/eq_mpi.log" 2>&1
    fi
    eq_rc=$?
    run 15 dstrain "${eq_args[@]}" --batch 8 --accum "$([ "$MODE" = emulated ] && echo 2 || echo 3)" -o "$SW/eq_accum" \
        >"$SW/eq_accum.log" 2>&1
    rc=$?
    eq="fail"
    if [ "$eq_rc" -eq 0 ] && [ "$rc" -eq 0 ]; then
        run 5 ${PY_ENV[@]+"${PY_ENV[@]}"} "$PY" - "$SW/eq_mpi/last.h5" "$SW/eq_accum/last.h5" >"$SW/compare.out" 2>"$SW/compare.err" <<'EOF'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r")["model"], h5py.File(sys.argv[2], "r")["model"]
worst = 0.0
for k in a:
    x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
    worst = max(worst, float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-12)))
# 1e-3: fp32 on both sides, but a sum across ranks runs in another order than accumulation
print(("pass" if worst <= 1e-3 else "FAIL") + " (max rel diff %.2e)" % worst)
EOF
        eq=$(tail -1 "$SW/compare.out")
        eq=${eq:-fail (comparison): $(why "$SW/compare.err")}
    elif timed_out "$eq_rc" || timed_out "$rc"; then
        eq="n/a (time)"
    else
        eq="FAIL: $(why "$SW/eq_mpi.log" "$SW/eq_accum.log")"
    fi
    check_line "NCCL $([ "$MODE" = emulated ] && echo emulated || echo "$nccl"): $eq_what" "$eq"
}

# ---- 7. end to end: the GPU against the CPU through the tools ----
stage_7() {
    # test_cuda.sh takes its tools from $DS_ROOT/$BIN and its Python from $PYTHON; its scratch
    # folder goes in this stage's, so every .err it keeps is packed
    local gpu_tests=(env DS_ROOT="$ROOT" BIN="$(realpath --relative-to="$ROOT" "$BINDIR")" PYTHON="$PY"
                     OMP_NUM_THREADS="$OMP" DS_TEST_TMP="$SW") c v f
    [ "$DEV" = cpu ] && gpu_tests+=(DS_TEST_GPU_DEVICE=cpu)
    run 100 "${gpu_tests[@]}" bash tests/shell/test_cuda.sh >"$SW/cuda.log" 2>&1
    cuda_rc=$?
    for c in cannot_start_is_an_error_init dseval_fp32_matches_cpu dseval_tf32_bf16_close_to_cpu step_fp32_matches_cpu \
        rrc_ramp_fp32_matches_cpu resume_bitwise bf16_learns; do
        v=$(grep -E "^(PASS|FAIL|SKIP) cuda.?$c" "$SW/cuda.log" | head -1 | cut -d' ' -f1)
        [ -z "$v" ] && grep -q '^SKIP' "$SW/cuda.log" && v="SKIP ($(grep -m1 '^SKIP' "$SW/cuda.log" | sed 's/^[^:]*: //'))"
        check_line "test_cuda.sh $c" "${v:-$(timed_out $cuda_rc && echo "n/a (time)" || echo "not reached (exit $cuda_rc)")}"
    done
    grep '^FAIL' "$SW/cuda.log" | head -5 >&2
    # after a failure, the first error line of each of its GPU runs' stderr (the stand-in
    # runtimes' are errors by design)
    if grep -q '^FAIL' "$SW/cuda.log"; then
        for f in "$SW"/test_cuda.*/*.err; do
            [[ $f = */stub-* ]] || ! grep -q ': error: ' "$f" || check_line "test_cuda.sh's ${f##*/}" "$(why "$f")"
        done
    fi
    [ "$cuda_rc" -eq 0 ] || { tests_ok=0; BAD[$STAGE]=$((BAD[$STAGE] + 1)); }
    if [ "$DRY" = 0 ] && grep -q '^SKIP cuda ' "$SW/cuda.log"; then
        tests_ok=0
        check_line "test_cuda.sh skipped on a GPU machine" "FAIL: $(grep -m1 '^SKIP cuda ' "$SW/cuda.log")"
    fi
}

# ---- 8. the other rows ----
stage_8() {
    local row
    row="$ARCH train $TF32 b$B_BIG"
    synthetic "$row" 45 "$TF32" "$B_BIG" train "$WARM" "$STEPS"
    torch_run "$row" "torch eager" 45 train "$B_BIG" "$TF32"
    row="$ARCH train bf16 b$B_SMALL"
    synthetic "$row" 35 bf16 "$B_SMALL" train "$WARM" "$STEPS"
    torch_run "$row" "torch eager" 35 train "$B_SMALL" bf16
    shard_row "$ARCH train $TF32 b$B_BIG --deterministic" 30 "$TF32" "$B_BIG"
    shard_row "$ARCH train bf16 b$B_SMALL --deterministic" 25 bf16 "$B_SMALL"
    shard_row "$ARCH train bf16 b$B_BIG --deterministic, rrc, ramp from $RAMP_MIN" 30 bf16 "$B_BIG" rrc
}

# ---- 9. the op tests under compute-sanitizer (where it works it is slow) ----
# sanitize TOOL FILTER LIMIT LABEL: test_cuda_ops under compute-sanitizer's TOOL, only the
# kernels whose names hold FILTER when one is given (cuDNN's kept out), into the checks
sanitize() {
    local tool=$1 filter=$2 limit=$3 label=$4 f=$SW/${1}${2:+-$2} san rc v first
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    if [ "$DRY" = 1 ]; then
        check_line "$label" "n/a (dry run)"
    elif [ "$MODE" = emulated ]; then
        echo "not run: compute-sanitizer instruments a GPU's kernels; the emulated device's run on the CPU" >"$f.log"
        check_line "$label" "n/a (emulated: compute-sanitizer needs a GPU)"
    elif [ -z "$san" ]; then
        check_line "$label" "n/a (no compute-sanitizer)"
    else
        run "$limit" "$san" --tool "$tool" --error-exitcode 99 ${filter:+--kernel-name "kns=$filter"} test_cuda_ops \
            >"$f.log" 2>&1
        rc=$?
        tail -n 4 "$f.log" >&2
        if grep -qiE 'device not supported|unable to (attach|initialize)|not supported on this' "$f.log"; then
            check_line "$label" "n/a (compute-sanitizer refused the device: $(grep -m1 -iE 'not supported|unable to' "$f.log" | cut -c1-80))"
            return 0
        fi
        v="$(counts "$f.log"), $(grep -o 'ERROR SUMMARY: [0-9]* error[s]*' "$f.log" | tail -1)"
        # the first report's own line ("========= Invalid __global__ read ...", a race, ...)
        first=$(grep -E '^=========  *[A-Z]' "$f.log" | grep -vE 'COMPUTE-SANITIZER|SUMMARY' | head -1 | cut -c1-160 | tr '|' '/')
        if timed_out "$rc"; then v="n/a (time): $v"
        elif [ "$rc" -ne 0 ]; then v="FAIL: $v${first:+; first: $first}"
        fi
        check_line "$label" "$v (exit $rc)"
    fi
}
stage_9() {
    sanitize memcheck "" 60 "test_cuda_ops under compute-sanitizer memcheck"
}

# ---- 10. PyTorch with torch.compile (slow to compile: last) ----
stage_10() {
    torch_run "$ARCH train bf16 b$B_BIG" "torch compile" 150 train "$B_BIG" bf16 --compile
}

# ---- 11. where a training step's time goes ----
stage_11() {
    local what="profile of a $ARCH bf16 b$B_BIG training step, ms per step, ds / PyTorch" left rc
    if [ "$MODE" != gpu ]; then
        check_line "$what" "n/a ($([ "$MODE" = dry ] && echo "dry run" || echo "emulated"): no GPU to profile)"
        return 0
    fi
    left=$(lim 100)
    # ds's side under ncu first, PyTorch's in what is left
    # (PyTorch runs in the bundle's environment here, with its CUDA libraries from the same
    # wheels: so it ran in the first GPU calls)
    run 100 env GPU_PROFILE_DS_SECONDS=$((left * 3 / 5)) GPU_PROFILE_TORCH_SECONDS=$((left * 2 / 5 - 5)) \
        bash "$ROOT/bench/gpu_profile.sh" --tools "$BINDIR" --python "${PY:-python3}" --out "$SW" "$ARCH" "$SIZE" \
        "$B_BIG" bf16 >"$SW/profile.log" 2>&1
    rc=$?
    if [ -s "$SW/profile.md" ]; then
        # "| batch norm | 30.17 | 24.47 |" rows as "batch norm 30.17 / 24.47"
        check_line "$what" "$(awk -F'|' '/^\| [a-z]/ && $3 ~ /[0-9]/ {gsub(/^ +| +$/, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4); printf "%s%s %s / %s", sep, $2, $3, $4; sep = "; "}' "$SW/profile.md")$(grep -q '^ds: no ncu' "$SW/profile.md" && echo " (no ncu: ds's side not profiled)")"
    else
        check_line "$what" "FAIL (exit $rc): $(why "$SW/profile.log")"
    fi
}

# ---- 12. the device's own bits ----
# test_cuda_ops' bitwise comparisons on the device, the scalar twins (DS_CUDA_VEC=0) against
# the same tests and, through training, against the vector kernels; which algorithm each bf16
# backward-data plan took (algo 0 is cuDNN's nondeterministic one: the class of the first
# call's defect, there in backward-filter)
stage_12() {
    local rc rc2 algos v args
    run 25 test_cuda_ops --verbose >"$SW/ops.log" 2>&1
    ops_check "$SW/ops.log" $? "test_cuda_ops --verbose (bitwise where the CPU's bits are promised)"
    # "backward-data: algo 1, tensor-op, bf16" per plan, counted by algorithm
    algos=$(grep -oE 'backward-data: algo [0-9]+, [a-z-]+, bf16' "$SW/ops.log" | awk '{print $3}' | tr -d , | sort -n | uniq -c |
        awk '{printf "%salgo %s x%s", sep, $2, $1; sep = ", "}')
    if [ -z "$algos" ]; then v="n/a (no bf16 backward-data plan in ops.log)"
    elif grep -qE 'backward-data: algo 0, [a-z-]+, bf16' "$SW/ops.log"; then
        v="LIVE: algo 0 (cuDNN's nondeterministic backward-data) was taken; $algos"
    else v="none nondeterministic: $algos"; fi
    check_line "bf16 backward-data algorithms in test_cuda_ops' plans" "$v"
    run 20 env DS_CUDA_VEC=0 test_cuda_ops >"$SW/ops-scalar.log" 2>&1
    ops_check "$SW/ops-scalar.log" $? "test_cuda_ops under DS_CUDA_VEC=0 (the scalar twins)"
    if ! small_data; then check_line "training with and without DS_CUDA_VEC=0" "FAIL: no data (the small set failed)"; return 0; fi
    args=(--train "$W/small/packed64" --arch resnet20 --crop "$NCCL_CROP" --batch 16 --epochs 1 --max-steps 3 --lr 0.05
          --device "$DEV" --precision bf16 --deterministic --log-every 0 -q)
    run 15 dstrain "${args[@]}" -o "$SW/train-vec" >"$SW/train-vec.log" 2>&1
    rc=$?
    run 15 env DS_CUDA_VEC=0 dstrain "${args[@]}" -o "$SW/train-scalar" >"$SW/train-scalar.log" 2>&1
    rc2=$?
    if [ $rc -ne 0 ] || [ $rc2 -ne 0 ]; then
        v="$( (timed_out $rc || timed_out $rc2) && echo "n/a (time)" || echo "FAIL (exit $rc, $rc2)"): $(why "$SW/train-vec.log" "$SW/train-scalar.log")"
    elif run 10 h5diff -q "$SW/train-vec/last.h5" "$SW/train-scalar/last.h5" /model /model >"$SW/h5diff.log" 2>&1 &&
        run 10 h5diff -q "$SW/train-vec/last.h5" "$SW/train-scalar/last.h5" /optimizer /optimizer >>"$SW/h5diff.log" 2>&1; then
        v="bitwise the same (/model, /optimizer)"
    else
        v="FAIL: the checkpoints differ: $(why "$SW/h5diff.log")"
    fi
    check_line "resnet20 bf16 --deterministic, 3 steps, with and without DS_CUDA_VEC=0" "$v"
}

# ---- 13. HBM calibration, and the metric names this ncu knows ----
ncu_path() { command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1; }
stage_13() {
    local what="HBM: copy, add, sum over 1 GiB of bf16 (torch, CUDA events, median of 20)" rc v ncu chip
    if [ "$MODE" = emulated ]; then
        echo "not run: bench/gpu_hbm.py needs a CUDA torch, and none runs on the emulated device" >"$SW/hbm.out"
        check_line "$what" "n/a (emulated: no CUDA torch)"
    else
        run 20 ${PY_ENV[@]+"${PY_ENV[@]}"} "$PY" bench/gpu_hbm.py --device "$DEV" $([ "$TOY" = 1 ] && echo --mib 16) \
            >"$SW/hbm.out" 2>"$SW/hbm.err"
        rc=$?
        # "hbm copy 3.71 TB/s, add 3.80 TB/s, sum 3.95 TB/s"
        v=$(grep '^hbm ' "$SW/hbm.out" | tail -1 | cut -d' ' -f2-)
        HBM_COPY=$(grep -o '^hbm copy [0-9.]*' "$SW/hbm.out" | tail -1 | grep -o '[0-9.]*$')
        if [ -n "$v" ]; then check_line "$what" "$v$([ "$TOY" = 1 ] && echo " (dry run: 16 MiB of the CPU's memory)")"
        else check_line "$what" "$(timed_out $rc && echo "n/a (time)" || echo "FAIL (exit $rc)"): $(why "$SW/hbm.err" "$SW/hbm.out")"; fi
    fi
    ncu=$(ncu_path)
    if [ "$MODE" != gpu ] || [ -z "$ncu" ]; then
        check_line "ncu's metric names" "n/a ($([ "$MODE" != gpu ] && echo "$MODE: no GPU" || echo "no ncu"))"
        return 0
    fi
    # the chip's name for --query-metrics (9.0: gh100), else the GPU ncu finds
    chip=$(run 5 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' ')
    run 15 "$ncu" --query-metrics $([ "$chip" = 9.0 ] && echo --chip gh100) >"$SW/ncu-metrics.txt" 2>&1
    rc=$?
    v=$(awk '$1 ~ /^sm__pipe_tensor[a-z_]*cycles_active$/ {print $1; exit}' "$SW/ncu-metrics.txt")
    [ -n "$v" ] && TENSOR_METRIC=$v.avg.pct_of_peak_sustained_active
    check_line "ncu's metric names" "$([ -n "$v" ] && echo "tensor pipe: $v" || echo "no sm__pipe_tensor*cycles_active (exit $rc; the default $TENSOR_METRIC kept)"); $(grep -c '^dram__' "$SW/ncu-metrics.txt") dram__ metrics"
}

# ---- 14. ds's and cuDNN's kernels of one training step under Nsight Compute ----
DS_KERNELS='^(bn_|maxpool_|avgpool_|to_bf16|from_bf16|add_bf16|axpy|scale_|sgd_|softmax_|bias_|normalize_u8|resized_crop|ordered_sum)'
COUNTER_METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_bytes.sum,sm__cycles_active.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_warps,launch__occupancy_limit_blocks
TENSOR_METRIC=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
stage_14() {
    local what="ncu over one $ARCH bf16 b$B_BIG training step" ncu rc rc2 line step=(engine_bench --device cuda --precision bf16
        --deterministic --warmup 0 "$ARCH" "$SIZE" "$B_BIG" train 1)
    ncu=$(ncu_path)
    if [ "$MODE" != gpu ]; then check_line "$what" "n/a ($MODE: no GPU to count)"; return 0; fi
    [ -n "$ncu" ] || { check_line "$what" "n/a (no ncu)"; return 0; }
    # ds's kernels with every counter the decisions need (several replays each), then every
    # kernel with four (cuDNN's are the ones not ds's)
    run 60 "$ncu" --clock-control none --csv --print-units base --log-file "$SW/ds-ncu.csv" -k "regex:$DS_KERNELS" \
        --metrics "$COUNTER_METRICS" "${step[@]}" >"$SW/ds.out" 2>"$SW/ds.err"
    rc=$?
    run 35 "$ncu" --clock-control none --csv --print-units base --log-file "$SW/all-ncu.csv" \
        --metrics "gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,$TENSOR_METRIC,launch__grid_size" \
        "${step[@]}" >"$SW/all.out" 2>"$SW/all.err"
    rc2=$?
    run 15 ${PY_ENV[@]+"${PY_ENV[@]}"} "${PY:-python3}" bench/ncu_kernels.py --ds "$SW/ds-ncu.csv" --all "$SW/all-ncu.csv" \
        --ds-regex "$DS_KERNELS" --tensor-metric "$TENSOR_METRIC" ${HBM_COPY:+--copy-tbs "$HBM_COPY"} \
        --out "$SW/kernels.md" >"$SW/kernels.out" 2>"$SW/kernels.err"
    # its lines "check<TAB>result", the longest kernels first
    while IFS=$'\t' read -r name line; do check_line "$name" "$line"; done < <(grep $'^[^\t][^\t]*\t' "$SW/kernels.out")
    [ "$rc" -eq 0 ] || check_line "$what: ds's kernels" "$(timed_out $rc && echo "n/a (time)" || echo "FAIL (exit $rc)"): $(why "$SW/ds.err" "$SW/ds.out")"
    [ "$rc2" -eq 0 ] || check_line "$what: every kernel" "$(timed_out $rc2 && echo "n/a (time)" || echo "FAIL (exit $rc2)"): $(why "$SW/all.err" "$SW/all.out")"
    grep -q $'^[^\t][^\t]*\t' "$SW/kernels.out" || check_line "$what: the tables" "FAIL: $(why "$SW/kernels.err" "$SW/kernels.out")"
}

# ---- 15. sanitizers on what never ran under them ----
# (bench/GPU.md: the plan and its times; the kernel-name filters keep cuDNN's kernels out)
stage_15() {
    sanitize memcheck "" 40 "compute-sanitizer memcheck, test_cuda_ops (every kernel, the vector ones and the bf16 scalar twins among them)"
    sanitize racecheck bn_ 15 "compute-sanitizer racecheck, kernels *bn_*"
    sanitize racecheck softmax 10 "compute-sanitizer racecheck, kernels *softmax*"
    sanitize synccheck bn_ 10 "compute-sanitizer synccheck, kernels *bn_*"
    sanitize synccheck softmax 8 "compute-sanitizer synccheck, kernels *softmax*"
    sanitize initcheck bn_ 15 "compute-sanitizer initcheck, kernels *bn_* (the never-zeroed scratch)"
    sanitize initcheck maxpool 10 "compute-sanitizer initcheck, kernels *maxpool*"
}

# ---- 16. cuDNN's fusion engines on this GPU ----
stage_16() {
    local probe what="cuDNN fusion probe" rc left l
    probe=$(command -v cudnn_fusion_probe || ls "$ROOT/build/bench/cudnn_fusion_probe" 2>/dev/null)
    [ -n "$probe" ] || { check_line "$what" "n/a (no cudnn_fusion_probe: the bundle's, or make bench-build)"; return 0; }
    if [ "$MODE" != gpu ]; then
        # the plan alone: every graph and shape, no GPU needed
        run 10 "$probe" --dry-run --batch "$B_BIG" >"$SW/fusion-plan.txt" 2>"$SW/fusion.err"
        rc=$?
        if [ $rc -eq 0 ]; then check_line "$what" "n/a ($MODE: no cuDNN graph to build); --dry-run lists $(grep -c '^(' "$SW/fusion-plan.txt") graphs (fusion-plan.txt)"
        else check_line "$what" "FAIL (exit $rc): $(why "$SW/fusion.err" "$SW/fusion-plan.txt")"; fi
        return 0
    fi
    # its own deadline within the stage's: the rows done so far and the verdicts come back
    left=$(lim 120)
    run 120 "$probe" --batch "$B_BIG" --seconds $((left > 30 ? left - 15 : 15)) >"$SW/fusion.md" 2>"$SW/fusion.err"
    rc=$?
    if grep -q '^fusion (' "$SW/fusion.md"; then
        while IFS= read -r l; do check_line "${l%%:*}" "${l#*: }"; done < <(grep '^fusion (' "$SW/fusion.md")
        [ $rc -eq 0 ] || check_line "$what" "FAIL (exit $rc) after its verdicts: $(why "$SW/fusion.err")"
    else
        check_line "$what" "$(timed_out $rc && echo "n/a (time)" || echo "FAIL (exit $rc)"): $(grep -c '^| [a-e] |' "$SW/fusion.md") rows; $(why "$SW/fusion.err" "$SW/fusion.md")"
    fi
}

# ---- 17. Nsight Compute's full sections on single launches ----
# KERNEL LAUNCHES-SKIPPED WHAT: which launch of ResNet-50's step after one warm-up step
# (53 norms a step, in the order stem, l1.0.bn1, l1.0.bn2, l1.0.downsample, l1.0.bn3, ...:
# bench/GPU.md, round 4)
FULL_LAUNCHES=("bn_apply_vec_kernel 57 l1.0.bn3 forward (56x56x256, with the residual)"
               "bn_dx_vec_kernel 101 l1.0.bn3 backward"
               "bn_stats_vec_kernel 53 the stem's statistics and their final"
               "bn_grads_vec_kernel 104 l1.0.bn1's gradient sums and their final"
               "maxpool_bwd_vec_kernel 1 the stem's max-pool backward")
stage_17() {
    local ncu i=0 l k skip what f rc v
    ncu=$(ncu_path)
    if [ "$MODE" != gpu ] || [ -z "$ncu" ]; then
        check_line "ncu --set full on single launches" "n/a ($([ "$MODE" != gpu ] && echo "$MODE: no GPU to profile" || echo "no ncu"))"
        return 0
    fi
    for l in "${FULL_LAUNCHES[@]}"; do
        read -r k skip what <<<"$l"
        i=$((i + 1)) f=$SW/full-$i-${k%_kernel}
        run 12 "$ncu" --set full -k "regex:^$k" --launch-skip "$skip" --launch-count 1 engine_bench --device cuda \
            --precision bf16 --deterministic --warmup 1 "$ARCH" "$SIZE" "$B_BIG" train 1 >"$f.txt" 2>"$f.err"
        rc=$?
        # the Speed Of Light section's lines: "    Duration    us    123.45"
        v=$(awk '/^ +Duration / {d = "duration " $NF " " $(NF-1)} /^ +DRAM Throughput / {m = ", DRAM throughput " $NF " %"}
                 /^ +Achieved Occupancy / {o = ", achieved occupancy " $NF " %"} END {if (d) print d m o}' "$f.txt")
        if [ -n "$v" ]; then check_line "ncu --set full: $k, $what" "$v ($(basename "$f").txt)"
        else check_line "ncu --set full: $k, $what" "$(timed_out $rc && echo "n/a (time)" || echo "FAIL (exit $rc)"): $(why "$f.err" "$f.txt")"; fi
    done
}

# ---- 18. two ranks on one GPU: real NCCL refuses; ds must end, not hang ----
stage_18() {
    local t=$SECONDS rc secs v what="NCCL: mpirun -np 2 dstrain on one GPU (NCCL_DEBUG=WARN)"
    [ "$MODE" = gpu ] || what="$what ($MODE: $([ "$DEV" = cpu ] && echo "CPU ranks, no NCCL" || echo "the emulated NCCL"))"
    if ! small_data; then check_line "$what" "FAIL: no data (the small set failed)"; return 0; fi
    run 20 env NCCL_DEBUG=WARN mpirun --oversubscribe --bind-to none -np 2 -x LD_LIBRARY_PATH -x NCCL_DEBUG -x CUDNN_LOGLEVEL_DBG \
        -x CUDNN_LOGDEST_DBG dstrain --train "$W/small/packed64" --arch resnet20 --crop "$NCCL_CROP" --batch 8 --epochs 1 \
        --max-steps 1 --device "$DEV" --precision fp32 --log-every 0 --comm-timeout 10 -q -o "$SW/run" >"$SW/np2.log" 2>&1
    rc=$? secs=$((SECONDS - t))
    if timed_out $rc; then
        v="FAIL: no end after $secs s (a hang, ended by its limit): $(why "$SW/np2.log")"
    elif [ $rc -ne 0 ]; then
        if grep -q ': error: ' "$SW/np2.log"; then v="refused: ended in $secs s, exit $rc: $(why "$SW/np2.log")"
        else v="FAIL: ended in $secs s, exit $rc, without an error line of ds's: $(why "$SW/np2.log")"; fi
        grep -q 'Duplicate GPU' "$SW/np2.log" && v="$v (NCCL: Duplicate GPU detected)"
    else
        v="both ranks ran (exit 0 in $secs s)$([ "$MODE" = gpu ] && echo ": this NCCL shares one GPU between ranks")"
    fi
    check_line "$what" "$v"
}

# ---- 19. old against new, interleaved on the same warm GPU ----
stage_19() {
    local row="$ARCH train bf16 b$B_BIG --deterministic" i which f rc new=() old=() v args
    args=(--device "$DEV" --precision bf16 --deterministic --warmup "$DWARM" "$ARCH" "$SIZE" "$B_BIG" train "$DSTEPS")
    for i in 1 2 3; do
        for which in ${OLD:+old} new; do
            f=$SW/$which-$i
            if [ "$which" = new ]; then run 15 engine_bench "${args[@]}"
            elif [ -f "$OLD/env.sh" ]; then run 15 "$OLD/env.sh" "$OLD/bin/engine_bench" "${args[@]}"
            elif [ -d "$OLD" ]; then run 15 "$OLD/engine_bench" "${args[@]}"
            else run 15 "$OLD" "${args[@]}"; fi >"$f.out" 2>"$f.err"
            rc=$?
            v=$(tail -1 "$f.out" | awk 'NF == 5 {print $5}')
            if [ -n "$v" ]; then
                if [ "$which" = new ]; then new+=("$v"); else old+=("$v"); fi
            elif ! timed_out $rc; then
                check_line "old against new: the $which bundle's run $i" "FAIL (exit $rc): $(why "$f.err" "$f.out")"
            fi
        done
    done
    median() { [ $# -gt 0 ] && printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
    v="new $(IFS=/; echo "${new[*]:-none}") (median $(median ${new[@]+"${new[@]}"} || echo n/a))"
    if [ -n "$OLD" ]; then
        v="$v; old $(IFS=/; echo "${old[*]:-none}") (median $(median ${old[@]+"${old[@]}"} || echo n/a))"
        [ ${#new[@]} -gt 0 ] && [ ${#old[@]} -gt 0 ] &&
            v="$v; new / old $(awk -v a="$(median "${new[@]}")" -v b="$(median "${old[@]}")" 'BEGIN {printf "%.3fx", a / b}')"
    else
        v="$v; old n/a (no --old bundle)"
    fi
    check_line "old against new: engine_bench $ARCH bf16 b$B_BIG --deterministic, images/s, 3 runs each interleaved" "$v"
    put "$row" "ds synthetic" "$(cell "$(median ${new[@]+"${new[@]}"})" "$rc")"
}

# ---- the table, after every stage and at the end however it comes ----
ratio() {  # ds synthetic over torch eager, when both are numbers (ds's --deterministic row's when
            # the row has none of its own: round 4's plan runs no search)
    local a=${R["$1|ds synthetic"]:-} b=${R["$1|torch eager"]:-} note=""
    if ! [[ "$a" =~ ^[0-9.]+$ ]] && [[ "${R["$1 --deterministic|ds synthetic"]:-}" =~ ^[0-9.]+$ ]]; then
        a=${R["$1 --deterministic|ds synthetic"]} note=" (ds --deterministic)"
    fi
    [[ "$a" =~ ^[0-9.]+$ && "$b" =~ ^[0-9.]+$ ]] && awk -v a="$a" -v b="$b" -v n="$note" 'BEGIN {printf "%.2fx%s", a / b, n}' ||
        echo "n/a"
}
# What to run next: the stages that did not finish (cut by time, not reached, stopped) again,
# and where the failures' words are.
next_call() {
    local n again=() failed=()
    for n in "${ORDER[@]}"; do
        case ${S[$n]} in
        "done"*) [ "${CUT[$n]}" -gt 0 ] && again+=("$n") ;;
        *) again+=("$n") ;;
        esac
        [ "${BAD[$n]}" -gt 0 ] && failed+=("$n ($n-${SLUGS[$n]}/)")
    done
    if [ ${#again[@]} -eq 0 ]; then echo "Every stage ran to its end."
    else echo "Next call: \`bash bench/gpu.sh $(case $MODE in dry) echo --dry-run ;; emulated) echo --emulated ;;
        *) echo --bundle build/gpu-bundle ;; esac)${OLD:+ --old $OLD} --out \"\$OUT\" --only $(IFS=,; echo "${again[*]}")\` (the stages that did not finish; bench/GPU.md: what to run next)."
    fi
    [ ${#failed[@]} -eq 0 ] || echo "Failures in stage ${failed[*]}: their logs in gpu-logs.tar.gz under those folders."
}
# cuDNN's fallbacks, from ds's warnings in every log so far: algorithms that failed when run
# (and were replaced by the next that fits) and ops computing below the run's precision.
fallbacks() {
    local logs run low first
    logs=$(grep -rh --include='*.err' --include='*.log' -E 'warning: CUDA conv .*(failed when run|that op computes in)' \
        "$W" 2>/dev/null | sort -u)
    [ -n "$logs" ] || return 0
    run=$(grep -c 'failed when run' <<<"$logs") low=$(grep -c 'that op computes in' <<<"$logs")
    first=$(head -1 <<<"$logs" | cut -c1-200 | tr '|' '/')
    echo "| cuDNN's fallbacks (ds's warnings) | $run algorithm(s) failed when run and were replaced, $low op(s) compute below the run's precision; first: $first |"
}
write_table() {
    local n r
    {
        echo "# GPU benchmark ($(case $MODE in
            dry) echo "DRY RUN on the CPU, toy sizes: says nothing about a GPU" ;;
            emulated) echo "REHEARSAL on the emulated CUDA device at the rehearsal's sizes: proves the script and ds's code paths, says nothing of a GPU's speed" ;;
            *) echo "${GPU_NAME:-no GPU named by nvidia-smi}" ;;
            esac), $(date -u +%F))"
        echo
        echo "| stage | budget | status |"
        echo "|---|---|---|"
        echo "| 0. ${NAMES[0]} | ${BUDGET[0]} s | ${S[0]:-running} |"
        for n in "${ORDER[@]}"; do echo "| $n. ${NAMES[$n]} | ${BUDGET[$n]} s | ${S[$n]} |"; done
        for n in $(seq 1 "$LAST"); do
            [[ " ${ORDER[*]} " == *" $n "* ]] || echo "| $n. ${NAMES[$n]} | ${BUDGET[$n]} s | ${S[$n]} |"
        done
        echo
        echo "| check | result |"
        echo "|---|---|"
        printf '%s\n' ${checks[@]+"${checks[@]}"}
        fallbacks
        echo
        echo "| run (images/s) | ds synthetic | ds shards | torch eager | torch compile | ds / torch eager |"
        echo "|---|---|---|---|---|---|"
        for r in ${rows[@]+"${rows[@]}"}; do
            echo "| $r | ${R["$r|ds synthetic"]:-} | ${R["$r|ds shards"]:-} | ${R["$r|torch eager"]:-} | ${R["$r|torch compile"]:-} | $(ratio "$r") |"
        done
        echo
        echo "ds synthetic: engine_bench, planned by cuDNN's search (cudnnFind), except on --deterministic rows (cuDNN's heuristics); ds shards: dstrain and dseval through the loader, --deterministic."
        if [ "$MODE" = emulated ]; then
            echo "Sizes: the rehearsal's ($ARCH at $SIZE px, batches $B_BIG and $B_SMALL, $WARM + $STEPS steps, $MAX_STEPS from the shards; the GPU call's: resnet50 at 224 px, 256 and 128); images/s of the emulated device's reference loops on the CPU, not of a GPU."
            echo "torch: not run (emulated: no CUDA torch; none runs on the emulated device)."
        else
            echo "torch: bench/gpu_torch.py (ResNet-50$([ "$TOY" = 1 ] && echo " at $SIZE px, whatever the row says")), bf16 = AMP autocast, tf32 = fp32 with TF32 allowed; channels_last, cudnn.benchmark."
        fi
        echo "Goal on one H200: ds training >= 1.3x PyTorch eager AMP. ds's own kernels' traffic (bench/GPU.md, step census: 66 GB a step in bf16) bounds it near 18,700 images/s at batch 256 before cuDNN computes anything."
        next_call
        echo "Total time: $((SECONDS - T0)) s of $DEADLINE; logs: gpu-logs.tar.gz (gpu.sh.log first, then one folder per stage)"
    } >"$RESULTS.tmp" && mv "$RESULTS.tmp" "$RESULTS"
}
# Every text file the stages wrote (logs, stdout, stderr, reports, metrics), not the data or
# the checkpoints: small enough to come back. cuDNN's choices, gathered from every log first.
pack_logs() {
    local f
    # a log past 4 MiB comes back as its first and last 512 KiB
    while IFS= read -r -d '' f; do
        { head -c 524288 "$f"; printf '\n[... %s bytes in all ...]\n' "$(stat -c %s "$f")"; tail -c 524288 "$f"; } >"$f.ends"
    done < <(find "$W" -type f \( -name '*.log' -o -name '*.err' -o -name '*.out' \) -size +4M -print0 2>/dev/null)
    grep -r --include='*.err' --include='*.log' 'CUDA conv ' "$W" 2>/dev/null | sed "s|^$W/||" >"$W/cudnn-algorithms.txt"
    (cd "$W" && find . -type f \( -name '*.log' -o -name '*.err' -o -name '*.out' -o -name '*.txt' -o -name '*.json' \
        -o -name '*.jsonl' -o -name '*.ends' -o -name '*.md' -o -name '*.tsv' \) -not -path './data/*' -not -path '*split*/*' -size -4M -print0 |
        tar -czf "$RESULTS_DIR/gpu-logs.tar.gz.tmp" --null -T - 2>/dev/null) &&
        mv "$RESULTS_DIR/gpu-logs.tar.gz.tmp" "$RESULTS_DIR/gpu-logs.tar.gz"
}
finish_up() {
    local n
    for n in "${ORDER[@]}"; do [ "${S[$n]}" = running ] && S[$n]="cut off (the script was stopped)"; done
    [ "${S[0]:-running}" = running ] && S[0]="cut off (the script was stopped)"
    write_table
    pack_logs
    rm -rf "$W"
}
trap finish_up EXIT
trap 'exit 143' TERM INT
# GPU_BENCH_HANG (dry runs): a stage that ignores SIGTERM, so the table shows it ended anyway.
hang() { OWN_LIMIT=1 run 5 bash -c 'trap "" TERM; while :; do sleep 1; done'; }

sizes_setup
say "$(plan)"
log "stage 0 (${NAMES[0]}): budget ${BUDGET[0]} s"
stage_0
S[0]="done ($((SECONDS - T0)) s)"
log "stage 0 done in $((SECONDS - T0)) s (budget ${BUDGET[0]} s)"
for stage in "${ORDER[@]}"; do
    STAGE=$stage SW=$W/$stage-${SLUGS[$stage]} STAGE_END=$((SECONDS + BUDGET[stage]))
    mkdir -p "$SW"
    S[$stage]=running
    write_table
    t=$SECONDS
    log "stage $stage (${NAMES[$stage]}): budget ${BUDGET[$stage]} s, $((DEADLINE - RESERVE - (SECONDS - T0))) s left"
    if [ "$HANG" = "$stage" ]; then hang; rc=$?; else "stage_$stage"; rc=0; fi
    if [ "$HANG" = "$stage" ]; then S[$stage]="ended by its limit (exit $rc after $((SECONDS - t)) s)"
    else S[$stage]="done ($((SECONDS - t)) s)"; fi
    [ "${CUT[$stage]}" -gt 0 ] && S[$stage]="${S[$stage]}; ${CUT[$stage]} command(s) cut for time"
    [ "${BAD[$stage]}" -gt 0 ] && S[$stage]="${S[$stage]}; failures"
    [ $((DEADLINE - RESERVE - (SECONDS - T0))) -lt 5 ] && S[$stage]="${S[$stage]}; deadline reached"
    log "stage $stage done in $((SECONDS - t)) s (budget ${BUDGET[$stage]} s)"
    write_table
    pack_logs
done
cat "$RESULTS"
[ "$tests_ok" -eq 1 ] && [ "$canaries_ok" -eq 1 ]
