#!/bin/bash
# EMU-TSAN: skip: four more runs of test_cuda_ops, which the ThreadSanitizer pass runs itself
# The CUDA backend's op tests (test_cuda_ops) on the emulated device (tests/emu; tests/run.sh
# runs this file only in its emulated passes, which run test_cuda_ops eagerly) under the
# device's other schedules: lazy (work held back until something waits for its stream) and
# delay with two seeds (each operation late at random); and once with cuDNN's
# non-deterministic algorithms ranked first (below). A wait missing from ds's own code
# then reads, overwrites or unlocks memory at the worst moment: under lazy, the feed freed
# with a batch's copy still queued unlocks the batch's pixels under that copy unless it waits
# for it first, a step's loss read before its mark is the copy's empty destination, and an
# upload that reuses the staging ring under a queued copy gives that copy other bytes, every
# time.
# No run may fall back to another cuDNN algorithm: without DS_EMU_FAULT every algorithm runs,
# so a "failed when run" warning is ds handing cuDNN something it refuses (a workspace
# smaller than asked for, a descriptor that does not match), which the fallback would
# otherwise hide.
. "$(dirname "$0")/lib.sh"

ops=$BUILD_DIR/tests/test_cuda_ops
[ -x "$ops" ] || { fail emu_cuda_ops_built "$ops is not built (make emu)"; finish; }

for sched in lazy=2000:1 delay=300:1 delay=300:2; do
    name=emu_cuda_ops_under_${sched//[=:]/_}
    DS_EMU_SCHED=${sched%:*} DS_EMU_SEED=${sched#*:} timeout 600 "$ops" >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
    if [ $rc = 0 ] && ! grep -q '^FAIL' "$T/$name.out"; then pass "$name"
    else fail "$name" "exit $rc: $( (grep -E 'ds-emu: defect|error' "$T/$name.err"; grep '^FAIL' "$T/$name.out") | head -3)"; fi
    check "${name}_no_algorithm_fallback" sh -c "! grep -m2 'failed when run' '$T/$name.err'"
done

# cuDNN's Find ranking its non-deterministic algorithms first, as an H200's timing did: every
# op takes one wherever ds's rules let it, and the emulated atomics add each part into a bf16
# result rounding at every add, as the real ones do (a bf16 weight gradient left to them is
# several percent off: the H200's first defect)
name=emu_cuda_ops_nondeterministic_algorithms_first
DS_EMU_FAULT=cudnn_find_nondet_first timeout 600 "$ops" >"$T/$name.out" 2>"$T/$name.err"
rc=$?
if [ $rc = 0 ] && ! grep -q '^FAIL' "$T/$name.out"; then pass "$name"
else fail "$name" "exit $rc: $( (grep -E 'ds-emu: defect|error' "$T/$name.err"; grep -A1 '^FAIL' "$T/$name.out"; grep ' off; worst' "$T/$name.out") | head -4)"; fi
finish
