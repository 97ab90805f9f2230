#!/bin/bash
# Training resolution by epoch (--min-crop ramp), validation and dseval at other crops, the
# evaluation protocol by name, and --no-bn-bias-decay, through the command line on a tiny
# synthetic set (4 classes of 20x20 images packed at --size 20 --fit crop; 8 of the val
# images also at 256, for the standard protocol at 224).
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 32 4 5 || { fail data "cannot make the synthetic set"; finish; }
dsplit -q --val 0.25 -o "$T/split" "$T/tree" >/dev/null &&
    dspack -q --size 20 -o "$T/train" "$T/split/train.txt" >/dev/null &&
    dspack -q --size 20 -o "$T/val" "$T/split/val.txt" >/dev/null &&
    dspack -q --size 20 --fit squash -o "$T/val_squash" "$T/split/val.txt" >/dev/null &&
    awk 'NR == 1 || (NR - 2) % 4 == 0' "$T/split/val.txt" >"$T/split/val8.txt" &&
    dspack -q --size 256 -o "$T/val256" "$T/split/val8.txt" >/dev/null || { fail pack "dsplit/dspack failed"; finish; }

# 96 training images, batch 8: 12 steps per epoch. Crops 8, 12, 16 over epochs 0, 1, 2
# (FFCV's rule with step 4); validation at 20, above every training crop.
COMMON=(--train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --val-crop 20 --batch 8 --epochs 3 --lr 0.05
        --lr-scaling none --warmup-epochs 0.5 --threads 2 --log-every 4 -q)
RAMP=(--min-crop 8 --ramp-start 0 --ramp-end 2 --crop-step 4)
dstrain "${COMMON[@]}" "${RAMP[@]}" -o "$T/full" 2>"$T/full.err"
check ramp_runs test -f "$T/full/ckpt-00000036.h5"
"$PYTHON" - "$T/full/metrics.jsonl" <<'PY' && pass ramp_crop_per_epoch_in_metrics || fail ramp_crop_per_epoch_in_metrics
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
epochs = [r for r in rows if "val_top1" in r]
steps = [r for r in rows if "val_top1" not in r]
assert [r["crop"] for r in epochs] == [8, 12, 16], epochs
assert [r["crop"] for r in steps] == [8] * 3 + [12] * 3 + [16] * 3, steps
assert all(r["val_crop"] == 20 and r["protocol"] == "resize 20, centre crop 20" for r in epochs), epochs
PY

# Stop at step 15, inside epoch 1 (crop 12), resume without repeating the ramp (the
# checkpoint's crop_ramp is taken): bitwise the uninterrupted run.
dstrain "${COMMON[@]}" "${RAMP[@]}" -o "$T/part" --max-steps 15 2>/dev/null
check ramp_recorded "$PYTHON" -c "import h5py, sys; a = h5py.File(sys.argv[1], 'r').attrs['crop_ramp']; sys.exit(list(a) != [8, 0, 2, 4])" "$T/part/ckpt-00000015.h5"
expect_status ramp_resume_refuses_other_ramp 1 dstrain "${COMMON[@]}" --min-crop 12 --resume "$T/part"
check ramp_resume_message_names_option grep -q -- "--min-crop 12 (the run's: 8)" "$T/err"
dstrain "${COMMON[@]}" --resume "$T/part" 2>/dev/null
check ramp_resume_is_bitwise same_state "$T/full/ckpt-00000036.h5" "$T/part/ckpt-00000036.h5"

# Validation at 20 (the model planned at 20) equals dseval --crop 20, a model made at 20.
dseval -q --json --crop 20 --threads 2 "$T/full/ckpt-00000036.h5" "$T/val" >"$T/e20"
"$PYTHON" - "$T/full/metrics.jsonl" "$T/e20" 20 <<'PY' && pass val_crop_above_equals_dseval || fail val_crop_above_equals_dseval
import json, sys
row = [json.loads(l) for l in open(sys.argv[1]) if "val_top1" in l][-1]
ev = json.load(open(sys.argv[2]))
print(row, ev, file=sys.stderr)
assert ev["crop"] == int(sys.argv[3]) and ev["count"] == 32
assert abs(row["val_top1"] - ev["top1"]) < 1e-6 and abs(row["val_top5"] - ev["top5"]) < 1e-6
assert abs(row["val_loss"] - ev["loss"]) <= 5e-6 * max(1, abs(ev["loss"])), (row["val_loss"], ev["loss"])  # %.6g
PY

# Validation at 12, below the training crop 16 (the model planned at 16 runs at 12), equals
# dseval --crop 12 of the same checkpoint.
dstrain --train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --val-crop 12 --batch 8 --epochs 1 --lr 0.05 \
    --lr-scaling none --threads 2 -q -o "$T/below" 2>/dev/null
dseval -q --json --crop 12 --threads 2 "$T/below/ckpt-00000012.h5" "$T/val" >"$T/e12"
"$PYTHON" - "$T/below/metrics.jsonl" "$T/e12" 12 <<'PY' && pass val_crop_below_equals_dseval || fail val_crop_below_equals_dseval
import json, sys
row = [json.loads(l) for l in open(sys.argv[1]) if "val_top1" in l][-1]
ev = json.load(open(sys.argv[2]))
print(row, ev, file=sys.stderr)
assert row["val_crop"] == 12 and row["crop"] == 16 and ev["crop"] == 12
assert row["protocol"] == ev["protocol"] == "resize 20, centre crop 12", (row["protocol"], ev["protocol"])
assert abs(row["val_top1"] - ev["top1"]) < 1e-6 and abs(row["val_top5"] - ev["top5"]) < 1e-6
assert abs(row["val_loss"] - ev["loss"]) <= 5e-6 * max(1, abs(ev["loss"])), (row["val_loss"], ev["loss"])  # %.6g
PY
# dseval's default crop is the checkpoint's (16), and --crop changes the numbers.
dseval -q --json --threads 2 "$T/full/ckpt-00000036.h5" "$T/val" >"$T/e16"
"$PYTHON" - "$T/e16" "$T/e20" <<'PY' && pass dseval_default_crop_is_checkpoints || fail dseval_default_crop_is_checkpoints
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
assert a["crop"] == 16 and a["protocol"] == "resize 20, centre crop 16" and a["loss"] != b["loss"], (a, b)
PY

# The protocol by name: shards, squashed shards, a manifest decoded on the fly, and the
# standard one (stored 256, crop 224) named as such, never for any other crop.
ck="$T/full/ckpt-00000036.h5"
proto() { dseval -q --json --threads 2 "$@" | "$PYTHON" -c 'import json,sys; r=json.load(sys.stdin); print(r["protocol"], r["standard_protocol"])'; }
check protocol_crop_two_stage test "$(proto --crop 18 "$ck" "$T/val")" = "resize 20, centre crop 20, centre crop 18 False"
check protocol_squash test "$(proto --crop 16 "$ck" "$T/val_squash")" = "resize to 20x20 (squash), centre crop 16 False"
check protocol_manifest test "$(proto --crop 16 --size 20 "$ck" "$T/split/val.txt")" = "resize 20, centre crop 16 False"
check protocol_standard test "$(proto --crop 224 "$ck" "$T/val256")" = "resize 256, centre crop 224 True"
check protocol_not_standard_at_192 test "$(proto --crop 192 "$ck" "$T/val256")" = "resize 256, centre crop 192 False"
check protocol_in_text sh -c "dseval -q --crop 224 --threads 2 '$ck' '$T/val256' | grep -q 'protocol: resize 256, centre crop 224 (the standard ImageNet evaluation)'"

# The standard protocol is measured every epoch where the val images allow it (stored 256 by
# --fit crop), beside --val-crop when that is another crop, and reported apart: it equals
# dseval --crop 224 of the checkpoint, and the val fields stay those of --val-crop.
dstrain --train "$T/train" --val "$T/val256" --arch resnet20 --crop 16 --batch 8 --epochs 1 --lr 0.05 \
    --lr-scaling none --threads 2 -o "$T/std" 2>"$T/std.err"
dseval -q --json --crop 224 --threads 2 "$T/std/ckpt-00000012.h5" "$T/val256" >"$T/e224"
dseval -q --json --crop 16 --threads 2 "$T/std/ckpt-00000012.h5" "$T/val256" >"$T/e16s"
"$PYTHON" - "$T/std/metrics.jsonl" "$T/e224" "$T/e16s" <<'PY' && pass standard_protocol_beside_val_crop || fail standard_protocol_beside_val_crop
import json, sys
row = [json.loads(l) for l in open(sys.argv[1]) if "val_top1" in l][-1]
std, own = (json.load(open(f)) for f in sys.argv[2:])
print(row, std, own, file=sys.stderr)
s = row["standard"]
assert s["protocol"] == std["protocol"] == "resize 256, centre crop 224", s
assert abs(s["top1"] - std["top1"]) < 1e-6 and abs(s["top5"] - std["top5"]) < 1e-6
assert abs(s["loss"] - std["loss"]) <= 5e-6 * max(1, abs(std["loss"])), (s["loss"], std["loss"])  # %.6g
assert row["val_crop"] == 16 and row["protocol"] == own["protocol"] == "resize 256, centre crop 16"
assert abs(row["val_loss"] - own["loss"]) <= 5e-6 * max(1, abs(own["loss"])), (row["val_loss"], own["loss"])
PY
check standard_protocol_in_epoch_line grep -q "standard (resize 256, centre crop 224): top-1" "$T/std.err"
# at --val-crop 224 the val fields are the standard protocol, and no second pass is made
dstrain --train "$T/train" --val "$T/val256" --arch resnet20 --crop 16 --val-crop 224 --batch 8 --epochs 1 \
    --lr 0.05 --lr-scaling none --threads 2 -q -o "$T/std224" 2>/dev/null
check standard_protocol_not_twice "$PYTHON" -c "import json, sys; r = [json.loads(l) for l in open(sys.argv[1]) if 'val_top1' in l][-1]; sys.exit('standard' in r or r['protocol'] != 'resize 256, centre crop 224')" "$T/std224/metrics.jsonl"

# --no-bn-bias-decay: recorded in the config; BN and bias tensors move differently, and the
# run differs from the default one.
dstrain --train "$T/train" --arch resnet20 --crop 16 --batch 8 --epochs 1 --lr 0.05 --lr-scaling none --wd 0.05 \
    --threads 2 -q --max-steps 2 -o "$T/wd" 2>/dev/null
dstrain --train "$T/train" --arch resnet20 --crop 16 --batch 8 --epochs 1 --lr 0.05 --lr-scaling none --wd 0.05 \
    --threads 2 -q --max-steps 2 --no-bn-bias-decay -o "$T/nowd" 2>/dev/null
"$PYTHON" - "$T/wd/ckpt-00000002.h5" "$T/nowd/ckpt-00000002.h5" <<'PY' && pass without_bn_bias_decay_recorded_and_applied || fail without_bn_bias_decay_recorded_and_applied
import json, sys
import h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
ca, cb = (json.loads(f.attrs["config"]) for f in (a, b))
assert ca["bn-bias-decay"] in (True, 1) and cb["bn-bias-decay"] in (False, 0), (ca["bn-bias-decay"], cb["bn-bias-decay"])
assert not np.array_equal(a["model/fc.bias"][()], b["model/fc.bias"][()])
assert not np.array_equal(a["model/bn1.weight"][()], b["model/bn1.weight"][()])
assert a.attrs["bn_bias_decay"] == 1 and b.attrs["bn_bias_decay"] == 0
PY
# a resume takes the checkpoint's setting, and refuses the other one
dstrain --train "$T/train" --resume "$T/nowd" --crop 16 --batch 8 --epochs 1 --lr 0.05 --lr-scaling none --wd 0.05 \
    --threads 2 -q --max-steps 3 2>/dev/null
check without_bn_bias_decay_kept_on_resume "$PYTHON" -c "import h5py, sys; sys.exit(int(h5py.File(sys.argv[1], 'r').attrs['bn_bias_decay'] != 0))" "$T/nowd/ckpt-00000003.h5"
expect_status without_bn_bias_decay_resume_refuses_other 1 dstrain --train "$T/train" --resume "$T/nowd" --crop 16 \
    --batch 8 --epochs 1 --threads 2 --bn-bias-decay

# Refusals.
expect_status dstrain_refuses_min_crop_above_crop 2 dstrain --train "$T/train" -o "$T/x1" --arch resnet20 --crop 12 \
    --min-crop 16 --threads 2
expect_status dstrain_refuses_ramp_end_before_start 2 dstrain --train "$T/train" -o "$T/x2" --arch resnet20 --crop 16 \
    --min-crop 8 --ramp-start 3 --ramp-end 1 --threads 2
expect_status dstrain_refuses_ramp_without_min_crop 2 dstrain --train "$T/train" -o "$T/x3" --arch resnet20 \
    --crop 16 --ramp-end 2 --threads 2
expect_status dstrain_refuses_val_crop_too_large 1 dstrain --train "$T/train" --val "$T/val" -o "$T/x4" \
    --arch resnet20 --crop 16 --val-crop 24 --batch 8 --threads 2
check val_crop_message_names_it grep -q -- "--val-crop 24 is larger than the 20x20 images" "$T/err"
expect_status dseval_refuses_crop_too_large 1 dseval --crop 24 "$ck" "$T/val"
finish
