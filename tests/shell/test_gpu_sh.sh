#!/bin/bash
# bench/gpu.sh's plan and plumbing, without a GPU and without the bundle (--tools, --dry-run):
#   - the plan (--plan): round 4's by default (12-19, then 4 and 10), the set-up and 12-18
#     within the default deadline at their full budgets; --sweep the first calls' (1-11, the
#     set-up and 1-7 within it); bench/GPU.md's budget tables hold the same budgets as the
#     script;
#   - --only runs the stages in the order given: with stand-in tools that record their calls,
#     `--only 4,5,3` runs 4, then 5, then 3 (the script's log, the tools' calls, the table);
#     stage 5's evaluation, which needs stage 3's checkpoint, says so instead of failing; a
#     warning of an algorithm that failed when run is counted in the table; outside
#     --dry-run (each command under its own limit within its stage's budget) the rows still
#     get their numbers, and stage 11 reads the profile's groups (stand-in ncu and PyTorch)
#     into the checks table;
#   - round 4's stages outside --dry-run with stand-ins for the GPU's tools (test_cuda_ops,
#     ncu, compute-sanitizer, the fusion probe, PyTorch's HBM script, mpirun, an --old
#     folder): `--only 12,...,19` runs them in that order and reads each one's answers into
#     the checks table; a planted failure in each of them (the stand-ins fail with a marked
#     error) marks every one of those stages with failures, and each marker is in its
#     stage's folder in gpu-logs.tar.gz; a stage whose command ignores SIGTERM (mpirun in
#     stage 18, hanging) is ended by its budget and reported as a hang;
#   - every failure's words come back: the real tools, with dseval failing under
#     --precision bf16 and dstrain failing on --resume (stand-ins that wrap them and print a
#     marked error), run test_cuda.sh as stage 7; both errors must be inside
#     gpu-logs.tar.gz, and the table must show the FAIL lines and quote the error.
. "$(dirname "$0")/lib.sh"
cd "$DS_ROOT" || exit 1
GPU_SH=bench/gpu.sh

# ---- the plan ----
stages() { awk 'NR > 1 && $1 ~ /^[0-9]+$/ {printf "%s ", $1}' "$1"; }
"$GPU_SH" --plan >"$T/plan" 2>&1
check gpu_sh_plan_default_is_round_4 test "$(stages "$T/plan")" = "0 12 13 14 15 16 17 18 19 4 10 "
check gpu_sh_plan_round_4_to_18_within_the_deadline sh -c "! awk '\$1 ~ /^(0|1[2-8])\$/' '$T/plan' | grep -q 'past' &&
    awk '\$1 == 19' '$T/plan' | grep -q 'past'"
"$GPU_SH" --plan --sweep >"$T/plan-sweep" 2>&1
check gpu_sh_plan_sweep_1_to_11 test "$(stages "$T/plan-sweep")" = "0 1 2 3 4 5 6 7 8 9 10 11 "
check gpu_sh_plan_sweep_1_to_7_within_the_deadline sh -c "! awk '\$1 ~ /^[0-7]\$/' '$T/plan-sweep' | grep -q 'past'"
# bench/GPU.md's budget tables: "| N | name | B s | ..." rows against every stage's budget
"$GPU_SH" --plan --only "$(seq -s, 1 19)" | awk '$1 ~ /^[0-9]+$/ {sub(/s$/, "", $2); print $1, $2}' | sort -n >"$T/plan.budgets"
awk -F'|' '$2 ~ /^ *[0-9]+ *$/ && $4 ~ /^ *[0-9]+ s *$/ {gsub(/[ s]/, "", $2); gsub(/[ s]/, "", $4); print $2, $4}' \
    bench/GPU.md | sort -n -u >"$T/doc.budgets"
check gpu_sh_budgets_match_gpu_md sh -c "[ -s '$T/doc.budgets' ] && diff '$T/plan.budgets' '$T/doc.budgets'"
# --help: the header's usage, not the whole script
expect_status gpu_sh_help_exits_2 2 "$GPU_SH" --help
"$GPU_SH" --help >"$T/help" 2>&1
check gpu_sh_help_is_the_header sh -c "grep -q -- '--sweep' '$T/help' && grep -q -- '--old PATH' '$T/help' && ! grep -q 'set -u' '$T/help'"
expect_status gpu_sh_rejects_a_stage_past_19 2 "$GPU_SH" --only 20
expect_status gpu_sh_rejects_a_repeated_stage 2 "$GPU_SH" --only 4,4
expect_status gpu_sh_only_or_sweep 2 "$GPU_SH" --only 4 --sweep
expect_status gpu_sh_old_must_be_a_bundle_or_tools 1 "$GPU_SH" --dry-run --old "$T/no-old"
expect_status gpu_sh_needs_its_tools 1 "$GPU_SH" --tools "$T/no-tools"

# ---- --only 4,5,3 with stand-in tools ----
S=$T/standin
mkdir -p "$S"
cat >"$S/standin" <<'EOF'
#!/bin/bash
# a stand-in for a tool of bench/gpu.sh: records the call, makes what the script reads
me=$(basename "$0") last=${!#} all=" $* " out=
echo "$me $*" >>"$GPU_SH_CALLS"
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
# GPU_SH_PLANT=1: each tool of round 4's stages fails with a marked error
plant() { [ -z "${GPU_SH_PLANT:-}" ] || { echo "$me: error: planted: $1 (mark-plant-$me)" >&2; exit 1; }; }
case $me in
engine_bench) plant "cudaErrorIllegalAddress"; echo "resnet20 32 8 mode 100.0"
    # as a GPU run whose first choice failed when run would warn
    [[ $all = *" infer "* ]] && echo "engine_bench: warning: CUDA conv 8x32x32x16 -> 16 3x3/1: fwd algo 1 (bf16, tensor-op math) failed when run (CUDNN_STATUS_EXECUTION_FAILED); running algo 0 (bf16, tensor-op math) instead" >&2 ;;
dstrain) mkdir -p "$out" && echo '{"step": 10, "images_per_sec": 50.0}' >"$out/metrics.jsonl" && : >"$out/last.h5" ;;
dseval) echo '{"images_per_sec": 70.0}' ;;
synth) mkdir -p "$last" ;;
dsplit) mkdir -p "$out" && : >"$out/train.txt" ;;
dspack) mkdir -p "$out" ;;
test_cuda_ops) plant "a kernel's bits"; echo "PASS standin"
    [[ $all = *" --verbose "* ]] && echo "test_cuda_ops: CUDA conv 2x5x5x8 -> 8 (3x3/1; in bf16, out bf16, w bf16), planned: forward: algo 1, tensor-op, bf16, 0.0 MiB; backward-data: algo 1, tensor-op, bf16, 0.0 MiB; backward-filter: algo 1, tensor-op, bf16, 0.0 MiB" >&2 ;;
h5diff) ;;
compute-sanitizer)
    # its tool's report over the test it ran
    [ -n "${GPU_SH_PLANT:-}" ] && { echo "========= Invalid __global__ read of size 16 bytes (mark-plant-sanitizer)"; echo "========= ERROR SUMMARY: 1 error"; exit 99; }
    echo "PASS standin"; echo "========= ERROR SUMMARY: 0 errors" ;;
cudnn_fusion_probe) plant "cudnnCreate: CUDNN_STATUS_NOT_INITIALIZED"
    echo "| a | l1 3x3 64: ... | yes | 2: #1* (tensor-core) | 900 | 1.0 | 1.000 | 0.900; algo 1 | 1.11x | same |"
    echo "fusion (a) conv + statistics: 22 of 22 shapes ran (0 not reached), fused / legacy median 1.05x over 22, 0 nondeterministic and 22 runtime-compiled plans, bits repeat in 22 of 22" ;;
mpirun)
    # two ranks on one GPU: real NCCL refuses; hanging (GPU_SH_HANG) or failing without ds's words when planted
    if [ -n "${GPU_SH_HANG:-}" ]; then trap '' TERM; while :; do sleep 1; done; fi
    [ -n "${GPU_SH_PLANT:-}" ] && { echo "mpirun noticed that process rank 0 exited on signal 6 (mark-plant-mpirun)" >&2; exit 134; }
    echo "NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000" >&2
    echo "dstrain: error: ncclCommInitRank: invalid usage (run with NCCL_DEBUG=WARN for details)" >&2; exit 1 ;;
esac
exit 0
EOF
cat >"$S/python3" <<EOF
#!/bin/bash
# PyTorch's side stood in for (with --profile FILE, one kernel of 5 ms a step); any other
# Python runs as the suite's
case "\${1:-}" in
bench/gpu_hbm.py | */bench/gpu_hbm.py)
    [ -n "\${GPU_SH_PLANT:-}" ] && { echo "torch.OutOfMemoryError: CUDA out of memory (mark-plant-hbm)" >&2; exit 1; }
    echo "hbm copy 3.50 TB/s, add 3.60 TB/s, sum 3.70 TB/s"; exit 0 ;;
bench/gpu_torch.py | */bench/gpu_torch.py)
    echo "gpu_torch.py \${*:2}" >>"\$GPU_SH_CALLS"
    while [ \$# -gt 0 ]; do [ "\$1" = --profile ] && printf '5.000\\t53\\tbatch_norm_collect_statistics\\n' >"\$2"; shift; done
    echo "images_per_sec 10.0"; exit 0 ;;
esac
exec "$PYTHON" "\$@"
EOF
# Nsight Compute stood in for: stage 11's one kernel, 3 ms in each of 3 launches; stage 14's
# ds kernel with its counters (-k) and every kernel with the tensor pipe; stage 13's metric
# names; stage 17's full sections
{
    echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    for i in 1 2 3; do echo '"'$i'","bn_stats_vec_kernel","gpu__time_duration.sum","nsecond","3000000"'; done
} >"$T/ncu.csv"
{
    echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    echo '"0","void bn_dx_vec_kernel<bf16>(int)","gpu__time_duration.sum","ns","2,000,000"'
    echo '"0","void bn_dx_vec_kernel<bf16>(int)","dram__bytes_read.sum","byte","5000000000"'
    echo '"0","void bn_dx_vec_kernel<bf16>(int)","dram__bytes_write.sum","byte","1000000000"'
    echo '"0","void bn_dx_vec_kernel<bf16>(int)","smsp__issue_active.avg.pct_of_peak_sustained_active","%","45"'
    echo '"0","void bn_dx_vec_kernel<bf16>(int)","launch__occupancy_limit_registers","block","6"'
    echo '"0","void bn_dx_vec_kernel<bf16>(int)","launch__occupancy_limit_warps","block","8"'
} >"$T/ncu-ds.csv"
{
    echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    echo '"0","sm90_xmma_fprop_implicit_gemm","gpu__time_duration.sum","ns","4000000"'
    echo '"0","sm90_xmma_fprop_implicit_gemm","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active","%","70"'
    echo '"1","bn_dx_vec_kernel","gpu__time_duration.sum","ns","2000000"'
} >"$T/ncu-all.csv"
cat >"$S/ncu" <<NCU
#!/bin/bash
all=" \$* "
if [[ \$all = *" --query-metrics "* ]]; then
    [ -n "\${GPU_SH_PLANT:-}" ] && { echo "==ERROR== planted (mark-plant-ncu-query)" >&2; exit 1; }
    printf 'dram__bytes_read  Counter  byte  # of bytes read from DRAM\\nsm__pipe_tensor_op_hmma_cycles_active  Counter  cycle  # of cycles\\n'
    exit 0
fi
[ -n "\${GPU_SH_PLANT:-}" ] && { echo "==ERROR== planted: the profiler could not attach (mark-plant-ncu)" >&2; exit 1; }
if [[ \$all = *" --set full "* ]]; then
    printf '    Section: GPU Speed Of Light Throughput\\n    DRAM Throughput    %%    80.10\\n    Duration    us    12.50\\n    Achieved Occupancy    %%    50.00\\n'
    exit 0
fi
csv=$T/ncu.csv
[[ \$all = *" -k "* ]] && csv=$T/ncu-ds.csv
[[ \$all = *"pipe_tensor"* ]] && csv=$T/ncu-all.csv
while [ \$# -gt 0 ]; do
    case \$1 in
    --log-file) cp "\$csv" "\$2"; shift 2 ;;
    --set | -k | --metrics | --launch-skip | --launch-count | --clock-control | --print-units | --chip) shift 2 ;;
    --*) shift ;;
    *) break ;;
    esac
done
exec "\$@"
NCU
chmod +x "$S/standin" "$S/python3" "$S/ncu"
for t in engine_bench dstrain dseval synth dsplit dspack test_cuda_ops h5diff compute-sanitizer cudnn_fusion_probe mpirun; do
    ln -s standin "$S/$t"
done
export GPU_SH_CALLS=$T/calls
: >"$GPU_SH_CALLS"
PYTHON=$S/python3 "$GPU_SH" --dry-run --tools "$S" --only 4,5,3 --seconds 3600 --out "$T/order" >"$T/order.log" 2>&1
rc=$?
check gpu_sh_only_4_5_3_runs test "$rc" = 0 || tail -20 "$T/order.log" | sed 's/^/    /'
# the order the script started its stages in, from its own log
order=$(grep -o '\] stage [0-9]* (' "$T/order.log" | grep -o '[0-9]*' | tr '\n' ' ')
check gpu_sh_only_4_5_3_in_that_order test "$order" = "0 4 5 3 "
# the order of the tools' calls, each mapped to its stage (4: PyTorch training; 5: inference;
# 3: the shards' data and training), repeats folded
calls=$(awk '/^gpu_torch.py .*train/ {print 4; next} /^gpu_torch.py .*infer/ || /^engine_bench .*infer/ || /^dseval/ {print 5; next}
             /^(synth|dsplit|dspack|dstrain) / {print 3; next} {print "?"}' "$GPU_SH_CALLS" | uniq | tr '\n' ' ')
check gpu_sh_only_4_5_3_tools_called_in_that_order test "$calls" = "4 5 3 "
table=$T/order/gpu-results.md
check gpu_sh_only_table_lists_the_stages_in_that_order test \
    "$(grep -oE '^\| [0-9]+\. ' "$table" | grep -o '[0-9]*' | head -4 | tr '\n' ' ')" = "0 4 5 3 "
check gpu_sh_only_leaves_the_rest_not_selected test "$(grep -c '| not selected |$' "$table")" = 16
check gpu_sh_evaluation_before_stage_3_says_why grep -qF 'n/a (no checkpoint: stage 3 makes it)' "$table"
check gpu_sh_table_counts_the_fallbacks grep -q "^| cuDNN's fallbacks (ds's warnings) | 1 algorithm(s) failed when run and were replaced, 0 op(s)" "$table"
check gpu_sh_prints_each_stage_time sh -c "[ \$(grep -cE '\] stage [0-9]+ done in [0-9]+ s \(budget [0-9]+ s\)' '$T/order.log') -eq 4 ]"
# The same stand-ins outside --dry-run (full sizes; no GPU, so nvidia-smi's line may fail):
# every command under its own limit within its stage's budget, down to the data's few
# seconds; the shard row and the evaluation after it get their numbers; the profile (stage
# 11, bench/gpu_profile.sh with the stand-in ncu and PyTorch) its groups' ms per step.
PYTHON=$S/python3 "$GPU_SH" --tools "$S" --only 3,5,11 --out "$T/real" >"$T/real.log" 2>&1
table=$T/real/gpu-results.md
check gpu_sh_limits_outside_dry_runs sh -c "grep -q '^| resnet50 train bf16 b256 --deterministic |  | 50.0 |' '$table' &&
    grep -q '^| resnet50 infer bf16 b256 --deterministic |  | 70.0 |' '$table' && ! grep -q 'cut for time' '$table'" ||
    tail -20 "$T/real.log" | sed 's/^/    /'
check gpu_sh_profile_stage_reads_the_groups grep -q \
    '^| profile of a resnet50 bf16 b256 training step, ms per step, ds / PyTorch | batch norm 3.00 / 5.00; all 3.00 / 5.00 |$' \
    "$table" || grep 'profile' "$table" | sed 's/^/    /'

# ---- round 4's stages with stand-ins for the GPU's tools, outside --dry-run ----
# (the stand-in folder doubles as the --old bundle's tools)
r4() {  # OUT [ENV...]: --only 12,...,19 into $T/OUT
    local out=$1; shift
    env PYTHON="$S/python3" "$@" "$GPU_SH" --tools "$S" --old "$S" --only 12,13,14,15,16,17,18,19 --out "$T/$out" \
        >"$T/$out.log" 2>&1
}
# the default plan in a dry run: every stage in order, each one's time printed, the table written
PYTHON=$S/python3 "$GPU_SH" --dry-run --tools "$S" --seconds 3600 --out "$T/dry4" >"$T/dry4.log" 2>&1
check gpu_sh_dry_run_runs_round_4_in_order test "$(grep -o '\] stage [0-9]* (' "$T/dry4.log" | grep -o '[0-9]*' | tr '\n' ' ')" = \
    "0 12 13 14 15 16 17 18 19 4 10 "
check gpu_sh_dry_run_round_4_stage_times test "$(grep -cE '\] stage [0-9]+ done in [0-9]+ s \(budget [0-9]+ s\)' "$T/dry4.log")" = 11
check gpu_sh_dry_run_round_4_table sh -c "[ \$(grep -cE '^\| (0|1[2-9]|4|10)\. .* \| done \([0-9]+ s\)' '$T/dry4/gpu-results.md') -eq 11 ] &&
    grep -q '^| cuDNN fusion probe | n/a (dry: no cuDNN graph to build); --dry-run lists' '$T/dry4/gpu-results.md'" ||
    grep -E '^\| [0-9]+\. ' "$T/dry4/gpu-results.md" | sed 's/^/    /'

r4 round4
table=$T/round4/gpu-results.md
order=$(grep -o '\] stage [0-9]* (' "$T/round4.log" | grep -o '[0-9]*' | tr '\n' ' ')
check gpu_sh_round4_stages_in_order test "$order" = "0 12 13 14 15 16 17 18 19 "
check gpu_sh_round4_every_stage_done sh -c "[ \$(grep -cE '^\| 1[2-9]\. .* \| done \([0-9]+ s\) \|\$' '$table') -eq 8 ]" ||
    grep -E '^\| 1[2-9]\. ' "$table" | sed 's/^/    /'
result() { awk -F' [|] ' -v k="$1" '$1 == "| " k {sub(/ [|]$/, "", $2); print $2; exit}' "$table"; }
matches() { printf '%s\n' "$1" | grep -qE "$2" || { echo "    '$1'"; return 1; }; }
check gpu_sh_round4_bits matches "$(result "test_cuda_ops --verbose (bitwise where the CPU's bits are promised)")$(
    result "bf16 backward-data algorithms in test_cuda_ops' plans")$(
    result "resnet20 bf16 --deterministic, 3 steps, with and without DS_CUDA_VEC=0")" \
    '^1 passed, 0 failed, 0 skipped \(exit 0\)none nondeterministic: algo 1 x1bitwise the same'
check gpu_sh_round4_hbm matches "$(result "HBM: copy, add, sum over 1 GiB of bf16 (torch, CUDA events, median of 20)")$(
    result "ncu's metric names")" '^copy 3.50 TB/s, add 3.60 TB/s, sum 3.70 TB/stensor pipe: sm__pipe_tensor_op_hmma_cycles_active; 1 dram__'
# stage 14: ds's kernel against the copy's rate, cuDNN's by the tensor pipe metric stage 13 found
check gpu_sh_round4_counters matches "$(result "ncu: bn_dx_vec_kernel<bf16>")|$(result "ncu: cuDNN's and cuBLAS's kernels, one step")" \
    '^1 launches, 2.000 ms, 6.00 GB, 3.00 TB/s \(86% of the copy.s 3.50\); issue 45%.*occupancy limit registers \(6 blocks\)[|]1 launches, 4.00 ms serialised, tensor pipe 70%'
check gpu_sh_round4_sanitizers test "$(grep -c '^| compute-sanitizer [a-z]*check, .* | 1 passed, 0 failed, 0 skipped, ERROR SUMMARY: 0 errors (exit 0) |$' "$table")" = 7
check gpu_sh_round4_fusion matches "$(result "fusion (a) conv + statistics")" '^22 of 22 shapes ran'
check gpu_sh_round4_ncu_full test "$(grep -c '^| ncu --set full: .* | duration 12.50 us, DRAM throughput 80.10 %, achieved occupancy 50.00 % (full-' "$table")" = 5
check gpu_sh_round4_nccl_refusal matches "$(result "NCCL: mpirun -np 2 dstrain on one GPU (NCCL_DEBUG=WARN)")" \
    '^refused: ended in [0-9]+ s, exit 1: dstrain: error: ncclCommInitRank: invalid usage .*\(NCCL: Duplicate GPU detected\)$'
check gpu_sh_round4_old_new matches "$(result "old against new: engine_bench resnet50 bf16 b256 --deterministic, images/s, 3 runs each interleaved")" \
    '^new 100.0/100.0/100.0 \(median 100.0\); old 100.0/100.0/100.0 \(median 100.0\); new / old 1.000x$'
check gpu_sh_round4_nothing_failed sh -c "! grep -qE '\| (FAIL|fail)' '$table'" || grep -E '\| (FAIL|fail)' "$table" | sed 's/^/    /'

# a planted failure in each: every stage marked, each marker in its stage's folder of the archive
r4 planted4 GPU_SH_PLANT=1
table=$T/planted4/gpu-results.md
check gpu_sh_round4_planted_every_stage_fails \
    sh -c "[ \$(grep -cE '^\| 1[2-9]\. .* \| done \([0-9]+ s\); failures \|\$' '$table') -eq 8 ]" ||
    grep -E '^\| 1[2-9]\. ' "$table" | sed 's/^/    /'
mkdir -p "$T/logs4"
tar -xzf "$T/planted4/gpu-logs.tar.gz" -C "$T/logs4" 2>/dev/null
missing=""
for m in 12-bits:test_cuda_ops 13-hbm:hbm 14-counters:ncu 15-sanitizers:sanitizer 16-fusion:cudnn_fusion_probe \
    17-ncu_full:ncu 18-nccl_one:mpirun 19-old_new:engine_bench; do
    grep -rqF "mark-plant-${m#*:})" "$T/logs4/${m%%:*}" 2>/dev/null || missing="$missing $m"
done
check gpu_sh_round4_planted_in_the_archive test -z "$missing" || echo "    missing:$missing"
check gpu_sh_round4_planted_next_call grep -q '^Failures in stage 12 (12-bits/) 13 (13-hbm/) 14 (14-counters/) 15 (15-sanitizers/) 16 (16-fusion/) 17 (17-ncu_full/) 18 (18-nccl_one/) 19 (19-old_new/)' "$table"

# a hang in stage 18 (mpirun ignoring SIGTERM): ended by the stage's budget, reported as a hang
env PYTHON="$S/python3" GPU_SH_HANG=1 GPU_BENCH_GRACE=1 "$GPU_SH" --tools "$S" --only 18 --out "$T/hang" >"$T/hang.log" 2>&1
table=$T/hang/gpu-results.md
check gpu_sh_round4_overrun_ended_and_reported sh -c "grep -qE '^\| 18\. .* \| done \([0-9]+ s\); 1 command\(s\) cut for time; failures \|\$' '$table' &&
    grep -q '^| NCCL: mpirun -np 2 dstrain on one GPU (NCCL_DEBUG=WARN) | FAIL: no end after [0-9]* s (a hang, ended by its limit)' '$table' &&
    grep -q '^Next call: .* --only 18\`' '$table'" || sed 's/^/    /' "$table"

# ---- a failure in a GPU dseval and in a resume: its words in the log archive ----
if [ "${DS_TEST_PASS:-normal}" = san ]; then
    echo "SKIP gpu_sh_planted_failures: the normal pass's (its test_cuda.sh runs every GPU check on the CPU, slow under the sanitizers)"
    finish
fi
if [ ! -x "$DS_ROOT/$BIN/dstrain" ] || [ ! -x "$DS_ROOT/$BIN/dseval" ] || ! command -v h5diff >/dev/null; then
    echo "SKIP gpu_sh_planted_failures: needs the tools in $BIN/ (make) and h5diff"
    finish
fi
P=$T/planted
mkdir -p "$P"
for t in dsplit dspack; do ln -s "$DS_ROOT/$BIN/$t" "$P/$t"; done
planted() {  # TOOL ARGUMENT MESSAGE: the real tool, failing with MESSAGE when ARGUMENT is given
    cat >"$P/$1" <<EOF
#!/bin/bash
case " \$* " in *" $2 "*) echo "$1: error: planted: $3" >&2; exit 1 ;; esac
exec "$DS_ROOT/$BIN/$1" "\$@"
EOF
    chmod +x "$P/$1"
}
planted dseval "--precision bf16" "cudnnConvolutionForward: CUDNN_STATUS_EXECUTION_FAILED (mark-dseval-51)"
planted dstrain "--resume" "the resumed run failed (mark-resume-52)"
"$GPU_SH" --dry-run --tools "$P" --only 7 --seconds 3600 --out "$T/planted-out" >"$T/planted.log" 2>&1
table=$T/planted-out/gpu-results.md
mkdir -p "$T/logs"
tar -xzf "$T/planted-out/gpu-logs.tar.gz" -C "$T/logs" 2>/dev/null
check gpu_sh_planted_failures_are_failures sh -c "grep -q '^| test_cuda.sh dseval_tf32_bf16_close_to_cpu | FAIL |' '$table' &&
    grep -q '^| test_cuda.sh resume_bitwise | FAIL |' '$table' && grep -q '^| test_cuda.sh step_fp32_matches_cpu | PASS |' '$table'" ||
    sed 's/^/    /' "$table"
check gpu_sh_dseval_failure_in_the_archive sh -c "grep -rl 'mark-dseval-51' '$T/logs/7-test_cuda' | grep -q '\.err$'"
check gpu_sh_resume_failure_in_the_archive sh -c "grep -rl 'mark-resume-52' '$T/logs/7-test_cuda' | grep -q '\.err$'"
check gpu_sh_table_quotes_the_failures sh -c "grep -q 'mark-dseval-51' '$table' && grep -q 'mark-resume-52' '$table'"
check gpu_sh_archive_holds_its_own_log test -s "$T/logs/gpu.sh.log"
finish
