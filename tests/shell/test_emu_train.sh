#!/bin/bash
# EMU-TSAN: skip: its CPU reference runs alone take over 15 minutes under ThreadSanitizer; test_cuda_ops and test_emu_faults.sh race the device paths there
# dstrain and dseval with --device cuda on the emulated CUDA device (tests/emu, make emu;
# tests/run.sh runs this file only in its emulated passes, with bin-emu*/ first on PATH): the
# CUDA backend's own code end to end, small enough for the sanitizer builds.
#   - resnet20 fp32 (--deterministic) against the CPU: checkpoints within 2e-2 after 3 steps,
#     each group as a whole (lib.sh steps_close; docs/DESIGN.md §7: the GPU sums in other
#     orders, and a ReLU may flip);
#   - the same run bitwise again, and under other schedules of the streams (DS_EMU_SCHED
#     delay with two seeds, lazy): a result that depends on when a stream ran is a missing
#     wait;
#   - bf16 with --augment rrc at the small end of a crop ramp (boxes resized on the device,
#     convolutions planned at 16x16 running at 12x12): runs, and is bitwise under another
#     schedule;
#   - bf16 one step: at least as close to the CPU's bf16 step as that is to fp32's;
#   - --accum 32 (more marks a step than the ring holds): step times stay finite;
#   - --deterministic: stopped at step 3 and resumed to 6 equals 6 steps in one go, bitwise;
#   - mpirun -np 2 --device cuda: the gradients summed over the emulated NCCL; the two ranks
#     agree with one process at --accum 2 within that bound (NCCL's order is not fixed);
#   - dseval --device cuda of a CPU checkpoint against dseval --device cpu.
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 12 4 21 && make_bar_images "$T/evtree" 10 4 22 ||
    { fail data "cannot make the synthetic sets"; finish; }
split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" && split_pack "$T/evtree" 0 "$T/evsplit" "$T/ev" ||
    { fail pack "dsplit/dspack failed"; finish; }

# 36 training images: steps of 8 (4 a epoch, the last one short of 4)
BASE=(--train "$T/train" --arch resnet20 --crop 16 --batch 8 --lr 0.02 --lr-scaling none --warmup-epochs 0
      --log-every 100 -q --threads 2 --loader-threads 1)
STEP=("${BASE[@]}" --augment none --max-steps 3)

dstrain "${STEP[@]}" --device cpu -o "$T/cpu" 2>"$T/cpu.err" || { fail cpu_train "$(tail -3 "$T/cpu.err")"; finish; }
dstrain "${STEP[@]}" --device cuda --precision fp32 --deterministic -o "$T/g1" 2>"$T/g1.err" ||
    { fail emu_train_fp32_runs "$(tail -5 "$T/g1.err")"; finish; }
pass emu_train_fp32_runs
# without DS_EMU_FAULT every algorithm runs: a fallback is cuDNN refusing what ds handed it
check emu_fp32_no_algorithm_fallback sh -c "! grep -m2 'failed when run' '$T/g1.err'"

bitwise() {  # A B: /model and /optimizer identical
    h5diff -q "$1" "$2" /model /model && h5diff -q "$1" "$2" /optimizer /optimizer
}
ck=ckpt-00000003.h5
check emu_fp32_matches_cpu steps_close "$T/cpu/$ck" "$T/g1/$ck" 2e-2 "3 steps, emulated fp32 against the CPU"

dstrain "${STEP[@]}" --device cuda --precision fp32 --deterministic -o "$T/g2" 2>"$T/g2.err"
check emu_fp32_bitwise_run_to_run bitwise "$T/g1/$ck" "$T/g2/$ck"
for sched in delay=400:7 delay=400:8 lazy=20:1; do
    DS_EMU_SCHED=${sched%:*} DS_EMU_SEED=${sched#*:} \
        dstrain "${STEP[@]}" --device cuda --precision fp32 --deterministic -o "$T/s-$sched" 2>"$T/s-$sched.err"
    check "emu_fp32_bitwise_under_schedule_${sched//[=:]/_}" bitwise "$T/g1/$ck" "$T/s-$sched/$ck"
done

# ---- bf16, RandomResizedCrop at crop 12 (epoch 0 of a ramp to 16) ----
RRC=("${BASE[@]}" --augment rrc --min-crop 12 --ramp-start 1 --ramp-end 2 --crop-step 4 --epochs 3 --max-steps 3
     --device cuda --precision bf16 --deterministic)
dstrain "${RRC[@]}" -o "$T/b1" 2>"$T/b1.err" && pass emu_bf16_rrc_ramp_runs ||
    fail emu_bf16_rrc_ramp_runs "$(tail -5 "$T/b1.err")"
DS_EMU_SCHED=delay=400 DS_EMU_SEED=3 dstrain "${RRC[@]}" -o "$T/b2" 2>"$T/b2.err"
check emu_bf16_rrc_bitwise_under_another_schedule bitwise "$T/b1/$ck" "$T/b2/$ck"

# ---- bf16 against the CPU's bf16: one step (no augmentation). At this size a bf16 step's
# gradients are ~30% from fp32's (BN's backward cancels digits), so a bound of their own
# says little; the device's bf16 step must be at least as close to the CPU's bf16 step as
# that is to fp32 (a wrong cast or rounding of a tensor is far from both) ----
ONE=("${BASE[@]}" --augment none --max-steps 1)
dstrain "${ONE[@]}" --device cpu --precision fp32 -o "$T/c32" 2>"$T/c32.err" &&
    dstrain "${ONE[@]}" --device cpu --precision bf16 -o "$T/c16" 2>"$T/c16.err" &&
    dstrain "${ONE[@]}" --device cuda --precision bf16 --deterministic -o "$T/g16" 2>"$T/g16.err"
"$PYTHON" - "$T"/c32/ckpt-00000001.h5 "$T"/c16/ckpt-00000001.h5 "$T"/g16/ckpt-00000001.h5 <<'PY' &&
import sys
import h5py, numpy as np
c32, c16, g16 = (h5py.File(f, "r")["optimizer"] for f in sys.argv[1:4])
def dist(a, b):
    num = sum(float(((a[k][()].astype(np.float64) - b[k][()].astype(np.float64)) ** 2).sum()) for k in a)
    return (num / sum(float((a[k][()].astype(np.float64) ** 2).sum()) for k in a)) ** 0.5
near, far = dist(c16, g16), dist(c16, c32)
print("momentum after one step: device bf16 to CPU bf16 %.3g, CPU bf16 to CPU fp32 %.3g" % (near, far))
sys.exit(not near <= far)
PY
    pass emu_bf16_step_near_the_cpus_bf16 || fail emu_bf16_step_near_the_cpus_bf16

# ---- --accum 32: a step's 34 marks exceed the ring of DS_MARKS / 2 that step times once
# relied on; its images/s stay a number (the model's own clocks) ----
dstrain "${BASE[@]}" --augment none --batch 1 --accum 32 --epochs 2 --device cuda --precision fp32 -o "$T/acc32" \
    2>"$T/acc32.err"
"$PYTHON" - "$T/acc32/metrics.jsonl" <<'PY' && pass emu_accum32_step_times_finite || fail emu_accum32_step_times_finite
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("images/s by epoch at --accum 32:", [r.get("images_per_sec") for r in rows])
assert len(rows) == 2 and all(isinstance(r.get("images_per_sec"), (int, float)) and math.isfinite(r["images_per_sec"])
                              and r["images_per_sec"] > 0 for r in rows)
PY

# ---- resume: 3 steps, stopped, then to 6 == 6 in one go ----
RES=("${BASE[@]}" --augment standard --pad 2 --epochs 3 --device cuda --precision bf16 --deterministic)
dstrain "${RES[@]}" --max-steps 6 -o "$T/once" 2>"$T/once.err"
dstrain "${RES[@]}" --max-steps 3 -o "$T/twice" 2>"$T/twice.err" &&
    dstrain "${RES[@]}" --max-steps 6 --resume "$T/twice" 2>"$T/twice2.err"
check emu_resume_bitwise bitwise "$T/once/ckpt-00000006.h5" "$T/twice/ckpt-00000006.h5"

# ---- two ranks over the emulated NCCL, on two emulated devices, against one process at --accum 2 ----
if command -v mpirun >/dev/null; then
    MPI=(--train "$T/train" --arch resnet20 --crop 16 --batch 4 --lr 0.02 --lr-scaling none --warmup-epochs 0
         --log-every 100 -q --threads 1 --loader-threads 1 --augment none --max-steps 3 --device cuda
         --precision fp32 --deterministic)
    DS_EMU_DEVICES=2 timeout 600 mpirun --allow-run-as-root --oversubscribe -np 2 dstrain "${MPI[@]}" -o "$T/np2" 2>"$T/np2.err" &&
        pass emu_np2_nccl_runs || fail emu_np2_nccl_runs "$(tail -5 "$T/np2.err")"
    dstrain "${MPI[@]}" --accum 2 -o "$T/acc2" 2>"$T/acc2.err"
    check emu_np2_matches_accum2 steps_close "$T/acc2/$ck" "$T/np2/$ck" 2e-2 "np 2 over NCCL against --accum 2"
else
    echo "SKIP emu_np2_nccl: mpirun not found"
fi

# ---- dseval of the CPU's checkpoint on the emulated device ----
dseval --device cpu --json --logits "$T/c.h5" "$T/cpu/$ck" "$T/ev" >"$T/c.json" 2>"$T/c.err"
dseval --device cuda --precision fp32 --json --logits "$T/g.h5" "$T/cpu/$ck" "$T/ev" >"$T/g.json" 2>"$T/g.err" ||
    fail emu_dseval_runs "$(tail -5 "$T/g.err")"
"$PYTHON" - "$T/c.json" "$T/g.json" "$T/c.h5" "$T/g.h5" <<'PY' && pass emu_dseval_matches_cpu ||
import json, sys
import h5py, numpy as np
c, g = (json.load(open(f)) for f in sys.argv[1:3])
assert c["count"] == g["count"] == 40, (c, g)
a, b = (h5py.File(f, "r")["logits"][()] for f in sys.argv[3:5])
d = float(np.abs(a - b).max() / np.abs(a).max())
print("dseval logits, emulated fp32 against the CPU: %.3g of the largest" % d)
assert d <= 1e-3
PY
    fail emu_dseval_matches_cpu

# ---- dseval --tta flip on the emulated device: two forwards a batch, the first's logits
# downloaded before the second overwrites them (one stream), in batches of 6 (the last of 4).
# Against the CPU's --tta flip, and bitwise under a schedule that delays the streams' work.
dseval --device cpu --tta flip --batch 6 --logits "$T/ct.h5" "$T/cpu/$ck" "$T/ev" >/dev/null 2>"$T/ct.err" &&
    dseval --device cuda --precision fp32 --tta flip --batch 6 --logits "$T/gt.h5" "$T/cpu/$ck" "$T/ev" \
        >/dev/null 2>"$T/gt.err" &&
    DS_EMU_SCHED=delay=400 DS_EMU_SEED=5 dseval --device cuda --precision fp32 --tta flip --batch 6 \
        --logits "$T/gt2.h5" "$T/cpu/$ck" "$T/ev" >/dev/null 2>"$T/gt2.err" || fail emu_dseval_tta_runs "$(tail -3 "$T/gt.err")"
"$PYTHON" - "$T/ct.h5" "$T/gt.h5" "$T/gt2.h5" "$T/g.h5" <<'PY' && pass emu_dseval_tta_matches_cpu ||
import sys
import h5py, numpy as np
c, g, g2, plain = (h5py.File(f, "r")["logits"][()] for f in sys.argv[1:5])
d = float(np.abs(c - g).max() / np.abs(c).max())
print("dseval --tta flip logits, emulated fp32 against the CPU: %.3g of the largest; differ from the plain pass in %d"
      % (d, int((g != plain).sum())))
assert c.shape == g.shape == (40, 4) and d <= 1e-3 and (g != plain).any()
assert np.array_equal(g, g2), "another schedule of the streams changed the logits"
PY
    fail emu_dseval_tta_matches_cpu
finish
