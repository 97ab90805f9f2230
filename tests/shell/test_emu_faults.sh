#!/bin/bash
# The CUDA backend's error paths on the emulated device (tests/emu; tests/run.sh runs this file
# only in its emulated passes), each fault asked of the emulator by DS_EMU_FAULT and each
# ending in ds's documented behaviour (docs/DESIGN.md §4), never a crash or a hang:
#   - no GPU (no driver, no device): --device cuda is an error saying so, --device auto
#     computes on the CPU;
#   - a driver too old, CUDA failing to start: an error with CUDA's words, under auto too;
#   - device memory that runs out: the model says which memory, no crash;
#   - a kernel launch that fails: an error at that launch, with CUDA's words;
#   - page-locked memory refused: warnings, then the same bits as with it;
#   - an algorithm cuDNN lists but that fails when run: a warning naming it and the one run
#     instead, and the step runs; every algorithm failing: an error naming the convolution;
#   - no deterministic algorithm under --deterministic, every workspace larger than memory:
#     an error at planning naming the convolution and op;
#   - no bf16 algorithm: that op computes in tf32, with a warning, and training runs; bf16
#     lost at a short batch only: tf32 within its own budget, or an error naming each budget;
#   - tensor-op algorithms that would convert float inputs to fp16: a tf32 run takes none;
#   - NCCL that cannot start, a peer that stalls in a reduction, before ncclCommInitRank or
#     in ncclCommFinalize, and a collective that fails on one rank while it lives (NCCL's
#     asynchronous error): the job ends with NCCL's words or ds's --comm-timeout message,
#     and no checkpoint of the failed step;
#   - two ranks on one device (one emulated device, or CUDA_VISIBLE_DEVICES giving every
#     rank the same one): NCCL's refusal in its words, "Duplicate GPU detected", exit 1,
#     never a hang.
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 6 2 31 && split_pack "$T/tree" 0 "$T/split" "$T/train" ||
    { fail data "cannot make the synthetic set"; finish; }
RUN=(--train "$T/train" --arch resnet20 --crop 16 --batch 4 --lr 0.02 --lr-scaling none --warmup-epochs 0
     --augment none --max-steps 2 --threads 1 --loader-threads 1 -q)
dstrain "${RUN[@]}" --device cpu -o "$T/cpu" 2>"$T/cpu.err" || { fail cpu_train "$(tail -3 "$T/cpu.err")"; finish; }
ck=$T/cpu/last.h5

# expect NAME FAULT WANT_STATUS PATTERN CMD...: CMD under DS_EMU_FAULT=FAULT exits WANT_STATUS
# and its stderr matches PATTERN (an extended regular expression).
expect() {
    local name=$1 fault=$2 want=$3 pattern=$4; shift 4
    DS_EMU_FAULT=$fault timeout 300 "$@" >"$T/$name.out" 2>"$T/$name.err"
    local rc=$?
    if [ "$rc" = "$want" ] && grep -Eq -- "$pattern" "$T/$name.err"; then pass "$name"
    else fail "$name" "exit $rc (want $want): $(grep -v '^ds-emu:   ' "$T/$name.err" | head -3)"; fi
}

expect no_device_cuda_is_an_error no_device 1 'error: --device cuda: no CUDA device is visible' \
    dseval --device cuda "$ck" "$T/train"
expect no_device_auto_runs_on_the_cpu no_device 0 '' dseval --device auto "$ck" "$T/train"
expect driver_too_old_is_an_error driver_old 1 \
    'CUDA could not start: CUDA driver version is insufficient.*the driver supports CUDA 11\.4' dseval "$ck" "$T/train"
expect init_error_is_an_error init_error 1 'CUDA could not start: initialization error' \
    dseval --device auto "$ck" "$T/train"
expect out_of_device_memory oom=3 1 'out of cuda memory \(parameters' \
    dstrain "${RUN[@]}" --device cuda -o "$T/oom"
check out_of_device_memory_writes_nothing test ! -e "$T/oom/last.h5"

# a kernel whose launch fails (as one asking for more registers than a block has): ds stops at
# that launch's check, naming the line and CUDA's words (a check left out is an emulator defect)
expect launch_failure_is_an_error launch_fail=bn_apply 1 \
    'cuda_kernels\.cu:[0-9]+: cudaGetLastError\(\): too many resources requested for launch' \
    dstrain "${RUN[@]}" --device cuda -o "$T/launch"
check launch_failure_writes_nothing test ! -e "$T/launch/last.h5"

# page-locked memory refused: uploads staged, the feed copies through the ring; same bits
dstrain "${RUN[@]}" --device cuda --precision fp32 --deterministic -o "$T/pinned" 2>"$T/pinned.err"
expect no_pinned_memory_warns no_pinned 0 'cannot page-lock' \
    dstrain "${RUN[@]}" --device cuda --precision fp32 --deterministic -o "$T/unpinned"
check no_pinned_memory_same_bits sh -c "h5diff -q '$T/pinned/last.h5' '$T/unpinned/last.h5' /model /model &&
    h5diff -q '$T/pinned/last.h5' '$T/unpinned/last.h5' /optimizer /optimizer"

# cuDNN: an algorithm that fails when run. Under --deterministic the heuristics' first
# choice (algo 1 of forward for these shapes) is run, fails, and the next is taken.
expect cudnn_failing_algorithm_falls_back cudnn_exec_fail=fwd:1 0 'forward algo 1 .*failed when run.*running algo' \
    dstrain "${RUN[@]}" --device cuda --precision fp32 --deterministic -o "$T/fallback"
check cudnn_fallback_trains test -f "$T/fallback/ckpt-00000002.h5"
expect cudnn_every_algorithm_failing cudnn_exec_fail='bwd_filter:*:EXECUTION_FAILED' 1 \
    'CUDA conv .*backward-filter algo [0-9]+ .*failed when run.*no other is left' \
    dstrain "${RUN[@]}" --device cuda --precision fp32 --deterministic -o "$T/allfail"
expect cudnn_no_deterministic_algorithm cudnn_no_deterministic 1 'CUDA conv .*--deterministic.*deterministic' \
    dstrain "${RUN[@]}" --device cuda --precision fp32 --deterministic -o "$T/nodet"
expect cudnn_workspace_larger_than_memory cudnn_ws_huge 1 'CUDA conv .*(workspace|bytes)' \
    dstrain "${RUN[@]}" --device cuda --precision fp32 --deterministic -o "$T/huge"
expect cudnn_no_bf16_computes_in_tf32 cudnn_no_bf16 0 'no usable bf16 .* algorithm.*computes in tf32' \
    dstrain "${RUN[@]}" --device cuda --precision bf16 -o "$T/nobf16"
check cudnn_no_bf16_trains test -f "$T/nobf16/ckpt-00000002.h5"
# bf16 lost only at a short batch (planned at 8, the last batch of 12 images is 4): each
# convolution falls back to tf32 within tf32's own budget, its float32 copies counted, and
# where those copies do not fit the workspace planned the error says so for each precision
# (desk check 3, item 7: the budget was bf16's, and the copies found too large only after)
expect cudnn_short_batch_bf16_lost cudnn_no_bf16=8 1 \
    'within the [0-9]+ bytes planned: .*tf32: not asked, its copies take [0-9]+ bytes of the [0-9]+ planned' \
    dseval --device cuda --precision bf16 --batch 8 "$ck" "$T/train"
check cudnn_short_batch_falls_back_where_copies_fit grep -q 'no usable bf16 forward algorithm; that op computes in tf32' \
    "$T/cudnn_short_batch_bf16_lost.err"
dseval --device cuda --precision bf16 --batch 8 --json "$ck" "$T/train" >"$T/bf16-8.json" 2>"$T/bf16-8.err"
check cudnn_short_batch_runs_without_the_fault grep -q '"count": 12' "$T/bf16-8.json"

# cuDNN answering tf32's tensor-op request with fp16 conversion: a tf32 run takes none of
# those algorithms (fp16's range is not float's); without the fault it takes tensor-op math
dstrain "${RUN[@]}" --device cuda --precision tf32 --deterministic -v -o "$T/tf32" 2>"$T/tf32.err"
check tf32_takes_tensor_op_math grep -q 'planned: .*tensor-op' "$T/tf32.err"
DS_EMU_FAULT=cudnn_fp16_conversion dstrain "${RUN[@]}" --device cuda --precision tf32 --deterministic -v \
    -o "$T/conv16" 2>"$T/conv16.err"
check tf32_refuses_fp16_conversion sh -c "test -f '$T/conv16/ckpt-00000002.h5' && grep -q 'planned:' '$T/conv16.err' &&
    ! grep 'planned: .*conversion' '$T/conv16.err'"

# ---- NCCL ----
if command -v mpirun >/dev/null; then
    # each rank on an emulated device of its own, as on a node of two GPUs
    MPI=(env DS_EMU_DEVICES=2 timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2)
    expect nccl_init_failure nccl_init_fail 1 'ncclCommInitRank .*(unhandled system error|system error)' \
        "${MPI[@]}" dstrain "${RUN[@]}" --device cuda -o "$T/ncclinit"
    # a transport that cannot start is not ranks sharing a GPU: no hint saying so
    check nccl_init_failure_no_sharing_hint sh -c "! grep 'each needs its own GPU' '$T/nccl_init_failure.err'"
    expect nccl_stalled_peer_ends_the_job nccl_stall=1 1 'did not finish within 5 s' \
        "${MPI[@]}" dstrain "${RUN[@]}" --device cuda --comm-timeout 5 -o "$T/stall"
    # rank 1's second collective (step 2's one bucket, at --bucket-mb 25) fails while its
    # process lives (NCCL's asynchronous error): the job ends in step 2 with NCCL's words,
    # step 1's checkpoint written, none of step 2
    expect nccl_async_error_ends_the_job nccl_fail=1:2 1 \
        'ncclCommGetAsyncError|async: (unhandled system error|remote process exited)' \
        "${MPI[@]}" dstrain "${RUN[@]}" --device cuda --max-steps 3 --ckpt-steps 1 --bucket-mb 25 -o "$T/afail"
    check nccl_async_error_writes_no_checkpoint_of_its_step sh -c "test -e '$T/afail/ckpt-00000001.h5' &&
        test ! -e '$T/afail/ckpt-00000002.h5' && test ! -e '$T/afail/ckpt-00000003.h5'"
    # a rank alive but stuck before ncclCommInitRank, or in ncclCommFinalize: --comm-timeout
    # ends the job (the peers would wait without end)
    expect nccl_init_stalled_peer_ends_the_job nccl_init_stall=1 1 'ncclCommInitRank did not finish within 5 s' \
        "${MPI[@]}" dstrain "${RUN[@]}" --device cuda --comm-timeout 5 -o "$T/istall"
    # (the steps before must finish within the limit: ThreadSanitizer's build is many times slower)
    fin=5
    case $BIN in *tsan*) fin=120 ;; esac
    expect nccl_finalize_stalled_peer_ends_the_job nccl_finalize_stall=1 1 "ncclCommFinalize did not finish within $fin s" \
        "${MPI[@]}" dstrain "${RUN[@]}" --device cuda --comm-timeout "$fin" -o "$T/fstall"
    # two ranks on one device: refused by NCCL at start-up (the timeout is a hang guard only)
    DUP=(timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2)
    expect nccl_two_ranks_one_device_refused '' 1 'ncclCommInitRank .*invalid usage.*Duplicate GPU detected : rank' \
        env DS_EMU_DEVICES=1 "${DUP[@]}" dstrain "${RUN[@]}" --device cuda -o "$T/dup"
    check nccl_two_ranks_one_device_warned sh -c "grep -q '2 ranks on this node share 1 GPU' '$T/nccl_two_ranks_one_device_refused.err' &&
        grep -q 'each needs its own GPU' '$T/nccl_two_ranks_one_device_refused.err'"
    expect nccl_one_visible_device_each_the_same_refused '' 1 'Duplicate GPU detected' \
        env DS_EMU_DEVICES=2 CUDA_VISIBLE_DEVICES=1 "${DUP[@]}" dstrain "${RUN[@]}" --device cuda -o "$T/dup1"
    check nccl_refused_writes_nothing sh -c "test ! -e '$T/dup/last.h5' && test ! -e '$T/dup1/last.h5'"
else
    echo "SKIP emu nccl faults: mpirun not found"
fi
finish
