#!/bin/bash
# bench/gpu.sh's plan and plumbing, without a GPU and without the bundle (--tools, --dry-run):
#   - the plan (--plan): stages 1-11 in order by default; at the default deadline the set-up
#     and stages 1-7 end within it at their full budgets, and bench/GPU.md's budget table
#     holds the same budgets as the script;
#   - --only runs the stages in the order given: with stand-in tools that record their calls,
#     `--only 4,5,3` runs 4, then 5, then 3 (the script's log, the tools' calls, the table);
#     stage 5's evaluation, which needs stage 3's checkpoint, says so instead of failing; a
#     warning of an algorithm that failed when run is counted in the table; outside
#     --dry-run (each command under its own limit within its stage's budget) the rows still
#     get their numbers, and stage 11 reads the profile's groups (stand-in ncu and PyTorch)
#     into the checks table;
#   - every failure's words come back: the real tools, with dseval failing under
#     --precision bf16 and dstrain failing on --resume (stand-ins that wrap them and print a
#     marked error), run test_cuda.sh as stage 7; both errors must be inside
#     gpu-logs.tar.gz, and the table must show the FAIL lines and quote the error.
. "$(dirname "$0")/lib.sh"
cd "$DS_ROOT" || exit 1
GPU_SH=bench/gpu.sh

# ---- the plan ----
"$GPU_SH" --plan >"$T/plan" 2>&1
check gpu_sh_plan_default_order_1_to_11 test "$(awk 'NR > 2 && $1 ~ /^[0-9]+$/ {printf "%s ", $1}' "$T/plan")" = "1 2 3 4 5 6 7 8 9 10 11 "
check gpu_sh_plan_stages_1_to_7_within_the_deadline sh -c "! awk '\$1 ~ /^[0-7]\$/' '$T/plan' | grep -q 'past'"
# bench/GPU.md's budget table: "| N | name | B s | ..." rows against the plan's "N  Bs" lines
awk '$1 ~ /^[0-9]+$/ {sub(/s$/, "", $2); print $1, $2}' "$T/plan" | sort -n >"$T/plan.budgets"
awk -F'|' '$2 ~ /^ *[0-9]+ *$/ && $4 ~ /^ *[0-9]+ s *$/ {gsub(/[ s]/, "", $2); gsub(/[ s]/, "", $4); print $2, $4}' \
    bench/GPU.md | sort -n >"$T/doc.budgets"
check gpu_sh_budgets_match_gpu_md sh -c "[ -s '$T/doc.budgets' ] && diff '$T/plan.budgets' '$T/doc.budgets'"
expect_status gpu_sh_rejects_a_stage_past_11 2 "$GPU_SH" --only 12
expect_status gpu_sh_rejects_a_repeated_stage 2 "$GPU_SH" --only 4,4
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
case $me in
engine_bench) echo "resnet20 32 8 mode 100.0"
    # as a GPU run whose first choice failed when run would warn
    [[ $all = *" infer "* ]] && echo "engine_bench: warning: CUDA conv 8x32x32x16 -> 16 3x3/1: fwd algo 1 (bf16, tensor-op math) failed when run (CUDNN_STATUS_EXECUTION_FAILED); running algo 0 (bf16, tensor-op math) instead" >&2 ;;
dstrain) mkdir -p "$out" && echo '{"step": 10, "images_per_sec": 50.0}' >"$out/metrics.jsonl" && : >"$out/last.h5" ;;
dseval) echo '{"images_per_sec": 70.0}' ;;
synth) mkdir -p "$last" ;;
dsplit) mkdir -p "$out" && : >"$out/train.txt" ;;
dspack) mkdir -p "$out" ;;
test_cuda_ops) echo "PASS standin" ;;
esac
EOF
cat >"$S/python3" <<EOF
#!/bin/bash
# PyTorch's side stood in for (with --profile FILE, one kernel of 5 ms a step); any other
# Python runs as the suite's
case "\${1:-}" in
bench/gpu_torch.py | */bench/gpu_torch.py)
    echo "gpu_torch.py \${*:2}" >>"\$GPU_SH_CALLS"
    while [ \$# -gt 0 ]; do [ "\$1" = --profile ] && printf '5.000\\t53\\tbatch_norm_collect_statistics\\n' >"\$2"; shift; done
    echo "images_per_sec 10.0"; exit 0 ;;
esac
exec "$PYTHON" "\$@"
EOF
# Nsight Compute stood in for (stage 11): one kernel, 3 ms in each of 3 launches
{
    echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    for i in 1 2 3; do echo '"'$i'","bn_partial_vec_kernel","gpu__time_duration.sum","nsecond","3000000"'; done
} >"$T/ncu.csv"
standin_ncu "$S/ncu" "$T/ncu.csv"
chmod +x "$S/standin" "$S/python3"
for t in engine_bench dstrain dseval synth dsplit dspack test_cuda_ops; do ln -s standin "$S/$t"; done
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
check gpu_sh_only_leaves_the_rest_not_selected test "$(grep -c '| not selected |$' "$table")" = 8
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
