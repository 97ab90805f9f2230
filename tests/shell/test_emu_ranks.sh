#!/bin/bash
# Two ranks over the emulated NCCL, one training step each way the gradients are summed
# (NCCL's allreduce, and --deterministic's exchange and ordered sum), on two emulated
# devices (tests/emu; tests/run.sh runs this file only in its emulated passes). Tiny on
# purpose: it is the multi-rank case of the ThreadSanitizer pass (the other multi-rank
# scripts are too long there), which sees a compute-stream kernel or memset racing the
# reduction stream's read of a bucket (a wait missing between them) as a data race.
. "$(dirname "$0")/lib.sh"

if ! command -v mpirun >/dev/null; then
    echo "SKIP emu_ranks: mpirun not found"
    finish
fi
make_bar_images "$T/tree" 4 2 31 && split_pack "$T/tree" 0 "$T/split" "$T/train" ||
    { fail data "cannot make the synthetic set"; finish; }
RUN=(--train "$T/train" --arch resnet20 --crop 16 --batch 2 --lr 0.05 --lr-scaling none --warmup-epochs 0
     --augment none --max-steps 1 --threads 1 --loader-threads 1 --device cuda --precision fp32 -q)
export DS_EMU_DEVICES=2
for how in allreduce deterministic; do
    extra=()
    [ "$how" = deterministic ] && extra=(--deterministic)
    timeout 900 mpirun --allow-run-as-root --oversubscribe -np 2 dstrain "${RUN[@]}" "${extra[@]}" -o "$T/$how" \
        2>"$T/$how.err"
    rc=$?
    if [ $rc = 0 ] && [ -e "$T/$how/ckpt-00000001.h5" ] && ! grep -q 'ThreadSanitizer\|ds-emu: defect' "$T/$how.err"; then
        pass "emu_ranks_np2_$how"
    else
        fail "emu_ranks_np2_$how" "exit $rc: $(grep -m3 'WARNING: ThreadSanitizer\|ds-emu: defect\|error' "$T/$how.err")"
    fi
done
finish
