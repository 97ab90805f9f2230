#!/bin/bash
# dstrain and dseval on a GPU against the CPU (the reference), through the command line:
#   - dseval of one checkpoint: fp32 logits within 1e-3 of the CPU's, top-1 within 0.2
#     points; tf32 and bf16 within 1 point. Its 1000 images at dseval's default --batch 64
#     end with a batch of 40: convolutions planned for 64 run shorter batches too
#   - three training steps from the same weights: fp32 weights, BN statistics and momentum
#     within 2e-2 of the CPU's, each group as a whole (lib.sh steps_close); again with
#     --augment rrc at the small end of a crop ramp (boxes resized on the device, convolutions
#     planned at 16x16 run at 12x12)
#   - --deterministic: a run stopped and resumed ends bitwise equal to one never stopped
#   - bf16 training from scratch learns (loss falls, accuracy well above chance)
# Without a GPU (or in a build without CUDA) `--device cuda` must fail with a clear message,
# and the GPU checks print SKIP lines (counted apart, never as passes). A driver that is
# there but cannot start CUDA is an error with CUDA's words, under --device auto too, never
# a SKIP or a quiet CPU run: shown on any machine with a stand-in for the CUDA runtime's
# first calls (LD_PRELOAD), which answers as such a driver would.
# DS_TEST_GPU_DEVICE=cpu runs every GPU check with --device cpu: a dry run of this script's
# own plumbing on a machine without a GPU (it says nothing about the GPU).
. "$(dirname "$0")/lib.sh"
GPU=${DS_TEST_GPU_DEVICE:-cuda}
# The CPU refuses tf32 (a tensor-core format): the dry run takes fp32 in its place.
TF32=$([ "$GPU" = cpu ] && echo fp32 || echo tf32)

# 4 classes: 160 images, half to train on (5 steps of 16 per epoch) and half to validate;
# 4 x 250 to evaluate (0.2 points = 2 images)
make_bar_images "$T/tree" 40 4 11 && make_bar_images "$T/evtree" 250 4 12 ||
    { fail data "cannot make the synthetic sets"; finish; }
split_pack "$T/tree" 0.5 "$T/split" "$T/train" "$T/val" && split_pack "$T/evtree" 0 "$T/evsplit" "$T/ev" ||
    { fail pack "dsplit/dspack failed"; finish; }
COMMON=(--train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --pad 2 --batch 16 --lr 0.05
        --lr-scaling none --warmup-epochs 0 --log-every 100 -q)

# A partly trained CPU checkpoint: predictions neither all right nor all alike.
dstrain "${COMMON[@]}" --device cpu --threads 2 --epochs 2 -o "$T/cpu" 2>"$T/cpu.err" ||
    { fail cpu_train "$(tail -3 "$T/cpu.err")"; finish; }
ck=$T/cpu/last.h5

# ---- CUDA that cannot start (a stand-in runtime: initialisation error; a driver too old) ----
if ! command -v cc >/dev/null; then
    echo "SKIP cuda_cannot_start: no C compiler here to build the stand-in runtime"
elif ldd "$(command -v dseval)" 2>/dev/null | grep -q libcudart; then
    for kind in init old; do
        code=$([ $kind = init ] && echo 3 || echo 35) driver=$([ $kind = init ] && echo 13000 || echo 11040)
        printf '%s\n' "/* as a machine whose driver is broken or too old answers */" \
            "int cudaGetDeviceCount(int *n) { *n = 0; return $code; }" \
            "int cudaDriverGetVersion(int *v) { *v = $driver; return 0; }" >"$T/stub-$kind.c"
        cc -shared -fPIC -o "$T/stub-$kind.so" "$T/stub-$kind.c" || { fail "cuda stub $kind" "cannot compile"; continue; }
        LD_PRELOAD="$T/stub-$kind.so" dseval --json "$ck" "$T/ev" >/dev/null 2>"$T/stub-$kind.err"
        rc=$?
        want=$([ $kind = init ] && echo 'CUDA could not start: initialization error' ||
            echo 'CUDA could not start: CUDA driver version is insufficient.*driver supports CUDA 11.4')
        if [ $rc = 1 ] && grep -Eq "$want" "$T/stub-$kind.err"; then pass "cuda_cannot_start_is_an_error_$kind"
        else fail "cuda_cannot_start_is_an_error_$kind" "exit $rc: $(head -2 "$T/stub-$kind.err")"; fi
    done
    LD_PRELOAD="$T/stub-init.so" dseval --device cpu --json "$ck" "$T/ev" >/dev/null 2>"$T/stub-cpu.err"
    check cuda_cannot_start_device_cpu_unaffected test $? = 0
else
    echo "SKIP cuda_cannot_start: this build links no CUDA runtime a stand-in could replace (on the emulated device test_emu_faults.sh makes these checks)"
fi

# fp32 first: the probe asks for the plainest arithmetic there is (its output and logits are
# the fp32 side of the comparison below)
dseval --device "$GPU" --precision fp32 --json --logits "$T/g.h5" "$ck" "$T/ev" >"$T/g32.json" 2>"$T/probe.err"
rc=$?
if [ $rc -ne 0 ]; then
    if grep -Eq 'error: --device cuda: (no CUDA device is visible|this build has no CUDA support)' "$T/probe.err"; then
        why=$(sed -n 's/.*error: --device cuda: //p' "$T/probe.err" | head -1)
        pass "cuda: --device cuda without a GPU fails with a clear message ($why)"
        for c in dseval_fp32 dseval_tf32_bf16 step_fp32 rrc_ramp_fp32 resume_bitwise bf16_learns; do
            echo "SKIP cuda $c: ${why% (*}"
        done
    else
        fail "cuda: dseval --device cuda" "exit $rc: $(head -3 "$T/probe.err")"
    fi
    finish
fi

# ---- dseval: CPU against GPU in each precision ----
dseval --device cpu --threads 2 --json --logits "$T/c.h5" "$ck" "$T/ev" >"$T/c.json" 2>/dev/null
dseval --device "$GPU" --precision "$TF32" --json "$ck" "$T/ev" >"$T/gtf.json" 2>"$T/gtf.err"
dseval --device "$GPU" --precision bf16 --json "$ck" "$T/ev" >"$T/gbf.json" 2>"$T/gbf.err"
"$PYTHON" - "$T/c.json" "$T/g32.json" "$T/c.h5" "$T/g.h5" <<'PY' && pass cuda_dseval_fp32_matches_cpu ||
import json, sys
import h5py, numpy as np
c, g = (json.load(open(f)) for f in sys.argv[1:3])
print("cpu", c, "\ngpu fp32", g)
assert c["count"] == g["count"] == 1000
assert abs(c["top1"] - g["top1"]) <= 0.002 + 1e-9, "top-1 differs by more than 0.2 points"
assert abs(c["loss"] - g["loss"]) <= 1e-3 * abs(c["loss"]) + 1e-6
a, b = (h5py.File(f, "r")["logits"][()] for f in sys.argv[3:5])
d = float(np.abs(a - b).max() / np.abs(a).max())
print("logits: max difference %.3g of the largest" % d)
assert d <= 1e-3
PY
    fail cuda_dseval_fp32_matches_cpu
"$PYTHON" - "$T/c.json" "$T/gtf.json" "$T/gbf.json" <<'PY' && pass cuda_dseval_tf32_bf16_close_to_cpu ||
import json, sys
c, tf, bf = (json.load(open(f)) for f in sys.argv[1:])
print("tf32", tf, "\nbf16", bf)
assert tf["count"] == bf["count"] == 1000
assert abs(tf["top1"] - c["top1"]) <= 0.01 and abs(bf["top1"] - c["top1"]) <= 0.01
PY
    fail cuda_dseval_tf32_bf16_close_to_cpu

# ---- three SGD steps from the same weights, no augmentation: CPU against GPU fp32 ----
STEP=(--train "$T/train" --arch resnet20 --crop 16 --batch 16 --augment none --lr 0.01 --lr-scaling none
      --warmup-epochs 0 --init "$ck" --max-steps 3 -q)
dstrain "${STEP[@]}" --device cpu --threads 2 -o "$T/sc" 2>/dev/null
dstrain "${STEP[@]}" --device "$GPU" --precision fp32 --deterministic -o "$T/sg" 2>"$T/sg.err" ||
    fail cuda_step_runs "$(tail -3 "$T/sg.err")"
# (lib.sh steps_close: each checkpoint group as a whole, as a ReLU may flip between the two)
check cuda_step_fp32_matches_cpu steps_close "$T/sc/ckpt-00000003.h5" "$T/sg/ckpt-00000003.h5" 2e-2 "3 steps, GPU fp32 against CPU"

# ---- RandomResizedCrop and progressive resizing: the same three steps at crop 12 (epoch 0
# of a ramp to 16) with boxes resized on the device: convolutions planned at 16x16 run at
# 12x12, resized_crop_u8 on the GPU ----
RRC=("${STEP[@]}" --augment rrc --min-crop 12 --ramp-start 1 --ramp-end 2 --crop-step 4 --epochs 3)
dstrain "${RRC[@]}" --device cpu --threads 2 -o "$T/rc" 2>/dev/null
dstrain "${RRC[@]}" --device "$GPU" --precision fp32 --deterministic -o "$T/rg" 2>"$T/rg.err" ||
    fail cuda_rrc_ramp_runs "$(tail -3 "$T/rg.err")"
check cuda_rrc_ramp_fp32_matches_cpu steps_close "$T/rc/ckpt-00000003.h5" "$T/rg/ckpt-00000003.h5" 2e-2 \
    "3 rrc steps at 12x12, GPU fp32 against CPU"

# ---- --deterministic: stopped at step 4 and resumed to 8 == 8 steps in one go ----
RUN=("${COMMON[@]}" --device "$GPU" --precision bf16 --deterministic --epochs 3)
dstrain "${RUN[@]}" --max-steps 8 -o "$T/once" 2>"$T/once.err"
dstrain "${RUN[@]}" --max-steps 4 -o "$T/twice" 2>"$T/twice.err" &&
    dstrain "${RUN[@]}" --max-steps 8 --resume "$T/twice" 2>"$T/resume.err"
check cuda_resume_bitwise sh -c "h5diff -r '$T/once/ckpt-00000008.h5' '$T/twice/ckpt-00000008.h5' /model /model >/dev/null &&
    h5diff -r '$T/once/ckpt-00000008.h5' '$T/twice/ckpt-00000008.h5' /optimizer /optimizer >/dev/null"

# ---- bf16 from scratch learns ----
dstrain "${COMMON[@]}" --device "$GPU" --precision bf16 --epochs 6 -o "$T/bf" 2>"$T/bf.err"
"$PYTHON" - "$T/bf/metrics.jsonl" <<'PY' && pass cuda_bf16_learns || fail cuda_bf16_learns
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
epochs = [r for r in rows if "val_top1" in r]
print("bf16 val top-1 by epoch:", [r["val_top1"] for r in epochs])
assert len(epochs) == 6
assert epochs[-1]["loss"] < epochs[0]["loss"]
assert epochs[-1]["val_top1"] >= 0.6, "4 classes: chance is 0.25"
PY
finish
