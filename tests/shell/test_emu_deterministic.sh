#!/bin/bash
# EMU-TSAN: skip: its runs of up to three ranks take many minutes under ThreadSanitizer; test_emu_ranks.sh is the multi-rank case there
# --deterministic training on several GPUs, on the emulated CUDA device (tests/emu, make emu;
# tests/run.sh runs this file only in its emulated passes). Under --deterministic the CUDA
# backend reduces the gradients with NCCL moving data only (an all-to-all, then an
# all-gather or a gather to rank 0) and its own kernel adding the ranks' copies in rank
# order, and adds one rank's micro-batches in the same order; the emulated NCCL's allreduce
# sums in an order that varies per call, as real NCCL's may, so a sum left to it shows.
#   - mpirun -np 3 equals one process at --accum 3, bitwise, with the devices chosen either
#     way, and under the lazy and delay schedules; three ranks on two devices are refused at start-up (NCCL's duplicate-GPU check);
#   - -np 2 --accum 3 equals --accum 6, bitwise (micro-batches reduced to rank 0 as they end);
#   - a run stopped at step 2 on 3 ranks and resumed on 1 (--accum 3) equals the run never
#     stopped, bitwise;
#   - without --deterministic the NCCL allreduce runs, agrees within the GPU's bound, and is
#     not those bits (so the cases above would see a sum left to NCCL);
#   - the start-up line and the checkpoint's /reduction name the reduction that ran.
# The ranks run on three emulated devices (DS_EMU_DEVICES=3), as on a node of three GPUs,
# set as the launchers people use set them: every device visible and the rank's index on the
# node choosing (the np 3 cases), or one device per rank through CUDA_VISIBLE_DEVICES (the
# np 2 case).
# Small on purpose: resnet20 at crop 16, micro-batches of 2, one thread each.
. "$(dirname "$0")/lib.sh"

if ! command -v mpirun >/dev/null; then
    echo "SKIP emu_deterministic: mpirun not found"
    finish
fi
make_bar_images "$T/tree" 12 4 31 && split_pack "$T/tree" 0.25 "$T/split" "$T/train" ||
    { fail data "cannot make the synthetic set"; finish; }

# 36 training images; micro-batches of 2: global batch 6 (6 steps an epoch) or 12 (3)
RUN=(--train "$T/train" --arch resnet20 --crop 16 --batch 2 --lr 0.05 --lr-scaling none --warmup-epochs 0
     --augment standard --pad 2 --log-every 100 --threads 1 --loader-threads 1 --device cuda --precision fp32)
DET=("${RUN[@]}" --deterministic)
MPIRUN=(timeout 900 mpirun --allow-run-as-root --oversubscribe)
export DS_EMU_DEVICES=3
# as srun --gpus-per-task=1 or a wrapper exporting one device per rank: each rank sees one
PER_RANK=(sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec "$0" "$@"')

bitwise() {  # A B: /model and /optimizer identical
    h5diff -q "$1" "$2" /model /model && h5diff -q "$1" "$2" /optimizer /optimizer
}
reduction_is() {  # CKPT NAME: the checkpoint records NAME as its reduction
    "$PYTHON" - "$@" <<'PY'
import sys
import h5py
f = h5py.File(sys.argv[1], "r")
got = f.attrs.get("reduction")
got = got.decode() if isinstance(got, bytes) else got
print("%s: reduction %s" % (sys.argv[1].split("/")[-2], got))
sys.exit(got != sys.argv[2])
PY
}

# ---- one process, 3 micro-batches a step: the reference, checkpoints at 2 and 4 ----
dstrain "${DET[@]}" --accum 3 --max-steps 4 --ckpt-steps 2 -o "$T/acc3" 2>"$T/acc3.err" ||
    { fail emu_det_accum3_runs "$(tail -5 "$T/acc3.err")"; finish; }
pass emu_det_accum3_runs

# ---- 3 ranks, one micro-batch each ----
"${MPIRUN[@]}" -np 3 dstrain "${DET[@]}" --max-steps 2 -o "$T/np3" 2>"$T/np3.err" ||
    { fail emu_det_np3_runs "$(tail -5 "$T/np3.err")"; finish; }
pass emu_det_np3_runs
check emu_det_np3_equals_accum3 bitwise "$T/acc3/ckpt-00000002.h5" "$T/np3/ckpt-00000002.h5"
check emu_det_np3_startup_line_names_ordered grep -q "gradients summed ordered" "$T/np3.err"
check emu_det_np3_checkpoint_names_ordered reduction_is "$T/np3/ckpt-00000002.h5" ordered
# the same three ranks, each given its device by CUDA_VISIBLE_DEVICES (every rank sets device 0)
"${MPIRUN[@]}" -np 3 "${PER_RANK[@]}" dstrain "${DET[@]}" --max-steps 2 -o "$T/np3v" 2>"$T/np3v.err" ||
    fail emu_det_np3_one_device_each_runs "$(tail -5 "$T/np3v.err")"
check emu_det_np3_one_device_each_equals_accum3 bitwise "$T/acc3/ckpt-00000002.h5" "$T/np3v/ckpt-00000002.h5"
# three ranks on two devices: NCCL refuses the two that share one at start-up, the job ends
# (the timeout is a hang guard only)
DS_EMU_DEVICES=2 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 3 dstrain "${DET[@]}" --max-steps 2 \
    -o "$T/np3on2" >/dev/null 2>"$T/np3on2.err"
rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q 'Duplicate GPU detected : rank [02] and rank [02] both on CUDA device' "$T/np3on2.err" &&
    [ ! -e "$T/np3on2/last.h5" ]; then pass emu_det_np3_on_two_devices_refused
else fail emu_det_np3_on_two_devices_refused "exit $rc: $(grep -v '^ds-emu:   ' "$T/np3on2.err" | tail -3)"; fi

# the same under the schedules that expose a missing wait between the compute and the
# reduction streams: work held back until waited for, and each operation late at random
for sched in lazy=20 delay=400; do
    DS_EMU_SCHED=$sched "${MPIRUN[@]}" -np 3 dstrain "${DET[@]}" --max-steps 2 -o "$T/np3-$sched" 2>"$T/np3-$sched.err" ||
        fail "emu_det_np3_under_${sched%=*}_runs" "$(tail -5 "$T/np3-$sched.err")"
    check "emu_det_np3_under_${sched%=*}_equals_accum3" bitwise "$T/acc3/ckpt-00000002.h5" "$T/np3-$sched/ckpt-00000002.h5"
done

# ---- stopped at step 2 on 3 ranks, resumed on 1 to step 4 ----
dstrain "${DET[@]}" --accum 3 --max-steps 4 --resume "$T/np3" 2>"$T/resume1.err" ||
    fail emu_det_resume_np3_on_1_runs "$(tail -5 "$T/resume1.err")"
check emu_det_resume_np3_on_1_equals_uninterrupted bitwise "$T/acc3/ckpt-00000004.h5" "$T/np3/ckpt-00000004.h5"

# ---- 2 ranks of 3 micro-batches against one process of 6 ----
dstrain "${DET[@]}" --accum 6 --max-steps 2 -o "$T/acc6" 2>"$T/acc6.err" ||
    fail emu_det_accum6_runs "$(tail -5 "$T/acc6.err")"
"${MPIRUN[@]}" -np 2 "${PER_RANK[@]}" dstrain "${DET[@]}" --accum 3 --max-steps 2 -o "$T/np2a3" 2>"$T/np2a3.err" ||
    fail emu_det_np2_accum3_runs "$(tail -5 "$T/np2a3.err")"
check emu_det_np2_accum3_equals_accum6 bitwise "$T/acc6/ckpt-00000002.h5" "$T/np2a3/ckpt-00000002.h5"
# one GPU seen per rank is not GPUs shared: no warning saying so
check emu_det_np2_one_device_each_no_sharing_warning sh -c "! grep 'share' '$T/np2a3.err'"

# ---- without --deterministic: NCCL's allreduce, within the bound ----
"${MPIRUN[@]}" -np 3 dstrain "${RUN[@]}" --max-steps 2 -o "$T/np3nd" 2>"$T/np3nd.err" ||
    fail emu_nondet_np3_runs "$(tail -5 "$T/np3nd.err")"
check emu_nondet_np3_startup_line_names_allreduce grep -q "gradients summed nccl-allreduce" "$T/np3nd.err"
check emu_nondet_np3_checkpoint_names_allreduce reduction_is "$T/np3nd/ckpt-00000002.h5" nccl-allreduce
# the emulated NCCL's order shows: what the bitwise cases above would see of a sum left to it
if bitwise "$T/acc3/ckpt-00000002.h5" "$T/np3nd/ckpt-00000002.h5" 2>/dev/null; then
    fail emu_nondet_np3_differs_from_ordered "ncclAllReduce's sums gave the ordered bits: the cases above prove nothing"
else
    pass emu_nondet_np3_differs_from_ordered
fi
check emu_nondet_np3_close_to_accum3 steps_close "$T/acc3/ckpt-00000002.h5" "$T/np3nd/ckpt-00000002.h5" 2e-2 \
    "np 3 over ncclAllReduce against --deterministic --accum 3"
finish
