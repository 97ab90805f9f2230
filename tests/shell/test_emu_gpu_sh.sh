#!/bin/bash
# LONG: every stage of gpu.sh --emulated on the emulated device (about 3 minutes on 2 shared cores), then stages 3 and 5 with a planted failure
# bench/gpu.sh --emulated, the rehearsal of the GPU call on the emulated CUDA device (make emu;
# tests/run.sh runs this file only in its emulated passes), at its smallest
# (GPU_BENCH_EMU_ARCH=resnet20):
#   - round 4's plan (the default): its stages in order (0, 12-19, 4, 10), each one's time
#     printed and each `done` without failures, the table written: the device's bits (op tests
#     with and without DS_CUDA_VEC=0, training both ways bitwise, the bf16 backward-data
#     algorithms counted), the fusion probe's plan (77 graphs, from the normal build's probe
#     where there is one), two ranks over the emulated NCCL ended, engine_bench 3 times in the
#     images/s table; the GPU-only stages n/a; their logs in the archive;
#   - the first calls' plan (--sweep): every stage runs, in the order 0 to 11, each one's time
#     printed, and each ends `done` without failures;
#   - the checks: test_cuda_ops none failed or skipped, the three canaries pass, conv1's
#     algorithms read from the first canary's log, NCCL over 2 emulated ranks passes,
#     test_cuda.sh's GPU checks PASS, compute-sanitizer n/a;
#   - the images/s table: every row has a ds cell and every ds cell is a number; PyTorch's
#     cells read n/a (emulated: no CUDA torch); the table says the sizes are the rehearsal's;
#   - the archive holds gpu.sh.log and each stage's folder with its commands' logs;
#   - a planted failure: stages 3 and 5 with the emulated tools but dseval, a wrapper that
#     fails with a marked error (--emulated --tools): its cell reads fail, the checks table
#     quotes the error, stage 5 is marked with failures, and its stderr is in the archive.
. "$(dirname "$0")/lib.sh"
cd "$DS_ROOT" || exit 1
GPU_SH=bench/gpu.sh

if [ "${DS_TEST_PASS:-emu}" != emu ]; then
    echo "SKIP emu_gpu_sh: the plain emulated pass's (gpu.sh --emulated runs bin-emu/; the sanitizer builds' device is many times slower)"
    finish
fi
for p in bin-emu/dstrain bin-emu/dseval bin-emu/dspack bin-emu/dsplit build-emu/data/synth build-emu/tests/test_cuda_ops \
    build-emu/bench/engine_bench; do
    [ -x "$p" ] || { echo "SKIP emu_gpu_sh: no $p (make emu)"; finish; }
done
command -v mpirun >/dev/null && command -v h5diff >/dev/null || { echo "SKIP emu_gpu_sh: needs mpirun and h5diff"; finish; }
export GPU_BENCH_EMU_ARCH=resnet20 TMPDIR=$T

result() { awk -F' [|] ' -v k="$1" '$1 == "| " k {sub(/ [|]$/, "", $2); print $2; exit}' "$table"; }
matches() { printf '%s\n' "$1" | grep -qE "$2" || { echo "    '$1'"; return 1; }; }

# ---- round 4's plan ----
"$GPU_SH" --emulated --out "$T/r4" >"$T/r4.log" 2>&1
rc=$?
table=$T/r4/gpu-results.md
check emu_gpu_sh_round4_runs test "$rc" = 0 || tail -30 "$T/r4.log" | sed 's/^/    /'
order=$(grep -o '\] stage [0-9]* (' "$T/r4.log" | grep -o '[0-9]*' | tr '\n' ' ')
check emu_gpu_sh_round4_stages_in_order test "$order" = "0 12 13 14 15 16 17 18 19 4 10 "
check emu_gpu_sh_round4_prints_each_stage_time \
    test "$(grep -cE '\] stage [0-9]+ done in [0-9]+ s \(budget [0-9]+ s\)' "$T/r4.log")" = 11
check emu_gpu_sh_round4_every_stage_done sh -c "[ \$(grep -cE '^\| [0-9]+\. .* \| done \([0-9]+ s\) \|\$' '$table') -eq 11 ]" ||
    grep -E '^\| [0-9]+\. ' "$table" | sed 's/^/    /'
check emu_gpu_sh_round4_bits matches "$(result "test_cuda_ops --verbose (bitwise where the CPU's bits are promised)")|$(
    result "test_cuda_ops under DS_CUDA_VEC=0 (the scalar twins)")|$(
    result "resnet20 bf16 --deterministic, 3 steps, with and without DS_CUDA_VEC=0")|$(
    result "bf16 backward-data algorithms in test_cuda_ops' plans")" \
    '^[1-9][0-9]* passed, 0 failed, 0 skipped \(exit 0\)[|][1-9][0-9]* passed, 0 failed, 0 skipped \(exit 0\)[|]bitwise the same \(/model, /optimizer\)[|](LIVE: algo 0|none nondeterministic).* algo [0-9]+ x[0-9]+'
if [ -x "$DS_ROOT/build/bench/cudnn_fusion_probe" ]; then
    check emu_gpu_sh_round4_fusion_plan matches "$(result "cuDNN fusion probe")" '^n/a \(emulated: no cuDNN graph to build\); --dry-run lists 77 graphs'
else
    echo "SKIP emu_gpu_sh_round4_fusion_plan: no build/bench/cudnn_fusion_probe (make bench-build)"
fi
# the emulated NCCL, on its one device, refuses two ranks as NCCL does: the stage sees the end
check emu_gpu_sh_round4_nccl_two_ranks matches "$(result "NCCL: mpirun -np 2 dstrain on one GPU (NCCL_DEBUG=WARN) (emulated: the emulated NCCL)")" \
    '^refused: ended in [0-9]+ s, exit [1-9][0-9]*: .*Duplicate GPU detected.* \(NCCL: Duplicate GPU detected\)$'
check emu_gpu_sh_round4_old_new sh -c "grep -qE '^\| old against new: .* \| new [0-9.]+/[0-9.]+/[0-9.]+ \(median [0-9.]+\); old n/a \(no --old bundle\) \|\$' '$table' &&
    grep -qE '^\| resnet20 train bf16 b4 --deterministic \| [0-9.]+ \|' '$table'"
check emu_gpu_sh_round4_gpu_only_na sh -c "[ \$(grep -cE '\| n/a \(emulated' '$table') -ge 12 ]"
check emu_gpu_sh_round4_no_failure sh -c "! grep -qE '\| (FAIL|fail)' '$table'" || grep -E '\| (FAIL|fail)' "$table" | sed 's/^/    /'
mkdir -p "$T/logs4"
tar -xzf "$T/r4/gpu-logs.tar.gz" -C "$T/logs4" 2>/dev/null
missing=""
for f in gpu.sh.log 12-bits/ops.log 12-bits/ops-scalar.log 12-bits/train-vec.log 13-hbm/hbm.out 18-nccl_one/np2.log 19-old_new/new-1.out; do
    [ -s "$T/logs4/$f" ] || missing="$missing $f"
done
check emu_gpu_sh_round4_archive test -z "$missing" || echo "    missing:$missing"

# ---- the first calls' plan, the whole rehearsal ----
"$GPU_SH" --emulated --sweep --out "$T/emu" >"$T/emu.log" 2>&1
rc=$?
table=$T/emu/gpu-results.md
check emu_gpu_sh_runs test "$rc" = 0 || tail -30 "$T/emu.log" | sed 's/^/    /'
order=$(grep -o '\] stage [0-9]* (' "$T/emu.log" | grep -o '[0-9]*' | tr '\n' ' ')
check emu_gpu_sh_stages_in_order test "$order" = "0 1 2 3 4 5 6 7 8 9 10 11 "
check emu_gpu_sh_prints_each_stage_time \
    test "$(grep -cE '\] stage [0-9]+ done in [0-9]+ s \(budget [0-9]+ s\)' "$T/emu.log")" = 12
check emu_gpu_sh_every_stage_done sh -c "[ \$(grep -cE '^\| [0-9]+\. .* \| done \([0-9]+ s\) \|\$' '$table') -eq 12 ]" ||
    grep -E '^\| [0-9]+\. ' "$table" | sed 's/^/    /'
check emu_gpu_sh_says_rehearsal sh -c "head -1 '$table' | grep -q 'REHEARSAL on the emulated CUDA device' &&
    grep -q \"^Sizes: the rehearsal's (resnet20 at 32 px\" '$table'"

# the checks table
check emu_gpu_sh_ops_pass matches "$(result "test_cuda_ops (every CUDA op vs the CPU backend; fp32, tf32, bf16)")" \
    '^[1-9][0-9]* passed, 0 failed, 0 skipped \(exit 0\)$'
check emu_gpu_sh_canaries_pass test "$(grep -c '^| canary: .* | pass (planned and run in [0-9]* s) |$' "$table")" = 3
check emu_gpu_sh_conv1_algorithms_read sh -c "grep -q \"^| conv1's algorithms (bf16) | 4x32x32x3 -> 16 .*forward: algo\" '$table'"
check emu_gpu_sh_nccl_passes grep -q '^| NCCL emulated: 2 ranks over the emulated NCCL .* | pass (max rel diff' "$table"
check emu_gpu_sh_test_cuda_passes test "$(grep -cE '^\| test_cuda.sh (dseval|step|rrc|resume|bf16)[a-z0-9_]* \| PASS \|$' "$table")" = 6
check emu_gpu_sh_sanitizer_na grep -qF '| n/a (emulated: compute-sanitizer needs a GPU) |' "$table"
check emu_gpu_sh_no_failure sh -c "! grep -qE '\| (FAIL|fail)' '$table'" || grep -E '\| (FAIL|fail)' "$table" | sed 's/^/    /'

# the images/s table: ds cells (columns 2 and 3) numbers, torch's (4 and 5) n/a
awk -F'|' '/^\| run \(images\/s\)/ {on = 1; getline; next} on && /^\|/ {print} on && !/^\|/ {exit}' "$table" >"$T/rows"
check emu_gpu_sh_all_rows sh -c "[ \$(wc -l <'$T/rows') -eq 9 ] && head -1 '$T/rows' | grep -q '^| resnet20 train bf16 b4 |'" ||
    sed 's/^/    /' "$T/rows"
check emu_gpu_sh_ds_cells_are_numbers awk -F' *[|] *' '{ds = 0; for (i = 3; i <= 4; i++) if ($i != "") { if ($i !~ /^[0-9]+(\.[0-9]+)?$/) exit 1; ds++ }
    if (!ds) exit 1}' "$T/rows"
check emu_gpu_sh_torch_cells_na awk -F' *[|] *' '{for (i = 5; i <= 6; i++) if ($i != "") { if ($i != "n/a (emulated: no CUDA torch)") exit 1; n++ }}
    END {exit !(n >= 5)}' "$T/rows"

# the archive: the script's log and every stage's folder with what its commands wrote (each
# file there, those that hold a command's words or numbers not empty; -q runs' may be)
mkdir -p "$T/logs"
tar -xzf "$T/emu/gpu-logs.tar.gz" -C "$T/logs" 2>/dev/null
missing=""
for f in gpu.sh.log+ cudnn-algorithms.txt+ 0-setup/libraries.txt+ 1-ops/ops.log+ 2-canaries/canary-1.err+ \
    2-canaries/canary-3.out+ 3-shards/dspack.err 3-shards/train-bf16-b4.err+ 3-shards/train-bf16-b4/metrics.jsonl+ \
    4-torch/torch-train-bf16-b4.log+ 5-infer/engine-infer-bf16-b4.out+ 5-infer/dseval.out+ 5-infer/dseval.err \
    6-nccl/eq_mpi.log 6-nccl/eq_accum.log 6-nccl/compare.out+ 7-test_cuda/cuda.log+ 8-rows/engine-train-tf32-b4.out+ \
    8-rows/train-bf16-b4-rrc.err+ 8-rows/train-bf16-b4-rrc/metrics.jsonl+ 9-sanitizer/memcheck.log+ \
    10-compile/torch-train-bf16-b4-compile.log+; do
    if [[ $f = *+ ]]; then [ -s "$T/logs/${f%+}" ] || missing="$missing ${f%+}"
    else [ -f "$T/logs/$f" ] || missing="$missing $f"; fi
done
ls -d "$T"/logs/7-test_cuda/test_cuda.*/ >/dev/null 2>&1 || missing="$missing 7-test_cuda/test_cuda.*/"
check emu_gpu_sh_archive_holds_every_stage test -z "$missing" || echo "    missing:$missing"

# ---- a planted failure: dseval in stage 5 ----
P=$T/planted
mkdir -p "$P"
for p in bin-emu/dstrain bin-emu/dspack bin-emu/dsplit build-emu/data/synth build-emu/tests/test_cuda_ops build-emu/bench/engine_bench; do
    ln -s "$DS_ROOT/$p" "$P/"
done
cat >"$P/dseval" <<'EOF'
#!/bin/bash
echo "dseval: error: planted: cudnnConvolutionForward: CUDNN_STATUS_EXECUTION_FAILED (mark-emu-dseval-71)" >&2
exit 1
EOF
chmod +x "$P/dseval"
"$GPU_SH" --emulated --tools "$P" --only 3,5 --out "$T/planted-out" >"$T/planted.log" 2>&1
table=$T/planted-out/gpu-results.md
check emu_gpu_sh_planted_cell_fails grep -q '^| resnet20 infer bf16 b4 --deterministic |  | fail (exit 1) |' "$table" ||
    sed 's/^/    /' "$table"
check emu_gpu_sh_planted_quoted grep -q '^| resnet20 infer bf16 b4 --deterministic, ds shards | FAIL (exit 1): dseval: error: planted: .*mark-emu-dseval-71' "$table"
check emu_gpu_sh_planted_stage_marked sh -c "grep -q '^| 5\. inference | 75 s | done ([0-9]* s); failures |\$' '$table' &&
    grep -q '^| 3\. ds from shards | 70 s | done ([0-9]* s) |\$' '$table' && grep -q '^Failures in stage 5 (5-infer/)' '$table'"
mkdir -p "$T/planted-logs"
tar -xzf "$T/planted-out/gpu-logs.tar.gz" -C "$T/planted-logs" 2>/dev/null
check emu_gpu_sh_planted_in_the_archive grep -q 'mark-emu-dseval-71' "$T/planted-logs/5-infer/dseval.err"
finish
