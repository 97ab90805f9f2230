#!/bin/bash
# dstrain and dseval through the command line on a tiny synthetic set (4 classes of 16x16
# images, a bright bar whose orientation and colour give the class): learning, exact resume
# after --max-steps and after SIGTERM, --augment rrc and its exact resume, --init with another
# class count, dseval's invariance to threads and to shards vs manifest, and every refusal.
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 32 4 1 || { fail data "cannot make the synthetic set"; finish; }
make_bar_images "$T/tree3" 16 3 2
split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" &&
    split_pack "$T/tree3" 0.25 "$T/split3" "$T/train3" ||
    { fail pack "dsplit/dspack failed"; finish; }

# 96 training images, batch 8: 12 steps per epoch, 36 in all; CIFAR-style pad-2 random crops.
COMMON=(--train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --pad 2 --batch 8 --epochs 3 --lr 0.05
        --lr-scaling none --warmup-epochs 0.5 --threads 2 --log-every 4 -q)

dstrain "${COMMON[@]}" -o "$T/full" 2>"$T/full.err"
check train_runs test -f "$T/full/ckpt-00000036.h5"
check last_and_best_links test "$(readlink "$T/full/last.h5")" = ckpt-00000036.h5 -a -L "$T/full/best.h5"
"$PYTHON" - "$T/full/metrics.jsonl" <<'PY' && pass loss_falls_accuracy_beats_chance || fail loss_falls_accuracy_beats_chance
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "val_top1" not in r]
epochs = [r for r in rows if "val_top1" in r]
assert all(k in r for r in rows for k in ("step", "epoch", "loss", "lr", "images_per_sec")), rows
assert len(epochs) == 3 and all("val_top5" in r and "val_loss" in r for r in epochs), epochs
print("first loss", steps[0]["loss"], "last", steps[-1]["loss"], "val top1", epochs[-1]["val_top1"])
assert steps[-1]["loss"] < 0.8 * steps[0]["loss"], "loss did not fall"
assert epochs[-1]["val_top1"] >= 0.6, "val top-1 not clearly above chance (0.25)"
PY
"$PYTHON" - "$T/full/metrics.jsonl" <<'PY' && pass metrics_data_wait_is_a_share || fail metrics_data_wait_is_a_share
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
waits = [r["data_wait"] for r in rows]
print("data_wait", waits)
assert all(isinstance(w, float) and 0 <= w <= 1 for w in waits), waits
PY
# --val-every 2 over 3 epochs: validation after epochs 2 and 3 (the last) only, best.h5 among
# those, and the training itself the same bits as the run validated every epoch.
dstrain "${COMMON[@]}" --val-every 2 -o "$T/ve" 2>"$T/ve.err" || fail val_every_runs "$(tail -3 "$T/ve.err")"
"$PYTHON" - "$T/ve/metrics.jsonl" <<'PY' && pass val_every_validates_epochs_2_and_last || fail val_every_validates_epochs_2_and_last
import json, sys
epochs = [json.loads(l) for l in open(sys.argv[1]) if '"seconds"' in l]
print([(r["epoch"], r.get("val_top1")) for r in epochs])
assert [r["epoch"] for r in epochs] == [1, 2, 3] and [("val_top1" in r) for r in epochs] == [False, True, True]
PY
check val_every_best_is_a_validated_epoch sh -c "readlink '$T/ve/best.h5' | grep -qE 'ckpt-000000(24|36).h5'"
check val_every_same_training h5diff -q "$T/full/ckpt-00000036.h5" "$T/ve/ckpt-00000036.h5" /model
check val_every_same_optimizer h5diff -q "$T/full/ckpt-00000036.h5" "$T/ve/ckpt-00000036.h5" /optimizer

# An input-bound run by construction: every image read takes 25 ms more and no batch is read
# ahead (a test hook, libcommon/testhook.h), so the training loop waits at least 200 ms for
# each batch of 8, however fast or slow the network computes on this CPU and kernel set. The
# loader's count of that wait is checked exactly in test_loader (with a clock the test moves);
# this checks that dstrain reports it: a non-zero data_wait in every row, and a progress line
# that names the share (over 10%) exactly when its row's is. How large the share is depends on
# the network's speed, so it is not compared with anything.
DS_TESTHOOK_READ_DELAY_MS=25 dstrain --train "$T/train" -o "$T/slow" --arch resnet20 --crop 8 --batch 8 \
    --loader-threads 1 --threads 1 --epochs 1 --log-every 2 --max-steps 6 2>"$T/slow.err"
check test_hook_announced grep -q "warning: test hook DS_TESTHOOK_READ_DELAY_MS=25" "$T/slow.err"
"$PYTHON" - "$T/slow/metrics.jsonl" <<'PY' && pass data_wait_counted_when_input_bound || fail data_wait_counted_when_input_bound
import json, re, sys
rows = {r["step"]: r["data_wait"] for r in map(json.loads, open(sys.argv[1])) if "seconds" not in r}
print("input-bound data_wait", rows)
assert sorted(rows) == [2, 4, 6] and all(w > 0 for w in rows.values()), rows
PY
"$PYTHON" - "$T/slow/metrics.jsonl" "$T/slow.err" <<'PY' && pass input_bound_progress_line || fail input_bound_progress_line
import json, re, sys
rows = {r["step"]: r["data_wait"] for r in map(json.loads, open(sys.argv[1])) if "seconds" not in r}
lines = [re.search(r"step (\d+)/\d+ .*?(?:input-bound: (\d+)% of step time waiting for data)?$", l)
         for l in open(sys.argv[2]) if " step " in l and "(then a line" not in l]
said = {int(m.group(1)): m.group(2) for m in lines if m}
assert sorted(said) == sorted(rows), (said, rows)
for step, share in rows.items():
    note = said[step]
    # the row keeps 4 decimals, the line none: they agree to a percent
    assert (note is not None) == (share > 0.10) or abs(share - 0.10) < 1e-4, (step, share, note)
    assert note is None or abs(int(note) - 100 * share) <= 1, (step, share, note)
print("progress lines", said)
PY

if command -v gnuplot >/dev/null; then
    "$DS_ROOT/scripts/plot.sh" "$T/full" >/dev/null 2>&1
    check plot_draws_curves sh -c "file '$T/full/curves.png' | grep -q 'PNG image'"
fi

# Stop after step 7 (mid-epoch), resume: bitwise equal to the uninterrupted run.
dstrain "${COMMON[@]}" -o "$T/part" --max-steps 7
check max_steps_checkpoint test -f "$T/part/ckpt-00000007.h5" -a ! -e "$T/part/ckpt-00000012.h5"
dstrain "${COMMON[@]}" --resume "$T/part"
check resume_is_bitwise same_state "$T/full/ckpt-00000036.h5" "$T/part/ckpt-00000036.h5"
check resume_epoch_checkpoint_bitwise same_state "$T/full/ckpt-00000012.h5" "$T/part/ckpt-00000012.h5"
check metrics_not_duplicated test "$(grep -c '"step":36,.*val_top1' "$T/part/metrics.jsonl")" = 1

# SIGTERM mid-epoch: the step finishes, a checkpoint is written, resume ends identical. The
# run waits after step 3 (a test hook) until the signal has come, so it lands mid-run on any
# machine: the checkpoint is step 3's.
DS_TESTHOOK_PAUSE_AFTER_STEP=3 dstrain "${COMMON[@]}" -o "$T/sig" --log-every 1 2>"$T/sig.err" &
pid=$!
for _ in $(seq 1 600); do grep -q 'waiting for a signal' "$T/sig.err" && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
ck=$(readlink "$T/sig/last.h5")
if [ "$rc" = 143 ] && [ "$ck" = ckpt-00000003.h5 ]; then pass sigterm_checkpoints; else
    fail sigterm_checkpoints "exit $rc, last.h5 -> '$ck', want 143 and ckpt-00000003.h5"; fi
dstrain "${COMMON[@]}" --resume "$T/sig" 2>/dev/null
check sigterm_resume_is_bitwise same_state "$T/full/ckpt-00000036.h5" "$T/sig/ckpt-00000036.h5"

# --augment rrc: RandomResizedCrop boxes of the 16x16 images resized to 12x12 crops, evaluated
# on centre crops; stopped at step 5 and resumed, bitwise the uninterrupted run.
RRC=(--train "$T/train" --val "$T/val" --arch resnet20 --crop 12 --augment rrc --rrc-scale 0.25,1 --batch 8
     --epochs 1 --lr 0.05 --lr-scaling none --warmup-epochs 0 --threads 2 --log-every 4 -q)
dstrain "${RRC[@]}" -o "$T/rrc" 2>"$T/rrc.err"
check rrc_runs test -f "$T/rrc/ckpt-00000012.h5"
dstrain "${RRC[@]}" -o "$T/rrc_part" --max-steps 5 && dstrain "${RRC[@]}" --resume "$T/rrc_part"
check rrc_resume_is_bitwise same_state "$T/rrc/ckpt-00000012.h5" "$T/rrc_part/ckpt-00000012.h5"
dstrain "${RRC[@]}" -o "$T/rrc_scale" --rrc-scale 1,1 --rrc-ratio 1,1 --max-steps 2 2>/dev/null
dstrain "${RRC[@]}" -o "$T/rrc_two" --max-steps 2 2>/dev/null
h5diff -q "$T/rrc_scale/last.h5" "$T/rrc_two/last.h5" /model /model >/dev/null
check rrc_scale_changes_training test $? = 1    # 1: the files differ (0: equal, 2: cannot compare)
"$PYTHON" - "$T/rrc/last.h5" <<'PY' && pass rrc_config_recorded || fail rrc_config_recorded
import json, sys
import h5py
c = json.loads(h5py.File(sys.argv[1], "r").attrs["config"])
assert c["augment"] == "rrc" and c["rrc-scale"] == "0.25,1" and c["rrc-ratio"] == "3/4,4/3", c
PY
# The test hooks themselves: an unknown name or a bad value stops a tool before any work.
expect_status testhook_unknown_refused 1 env DS_TESTHOOK_READ_DELAY=5 dstrain "${COMMON[@]}" -o "$T/h1"
check testhook_unknown_named grep -q 'DS_TESTHOOK_READ_DELAY: unknown test hook' "$T/err"
expect_status testhook_bad_value_refused 1 env DS_TESTHOOK_PAUSE_AFTER_STEP=-3 dseval "$T/full/last.h5" "$T/val"
check testhook_bad_value_named grep -q 'DS_TESTHOOK_PAUSE_AFTER_STEP=-3: not a whole number' "$T/err"
check testhook_refusal_wrote_nothing test ! -e "$T/h1"
expect_status dstrain_rrc_refuses_pad 2 dstrain "${RRC[@]}" -o "$T/x5" --pad 2
check rrc_pad_message grep -q -- "--pad is for --augment standard" "$T/err"
expect_status dstrain_rrc_options_need_rrc 2 dstrain "${COMMON[@]}" -o "$T/x6" --rrc-ratio 1/2,2
expect_status dstrain_rrc_refuses_reversed_scale 2 dstrain "${RRC[@]}" -o "$T/x7" --rrc-scale 1,0.5
expect_status dstrain_rrc_refuses_bad_ratio 2 dstrain "${RRC[@]}" -o "$T/x8" --rrc-ratio 3/4
check rrc_ratio_message grep -q -- "--rrc-ratio wants LO,HI" "$T/err"

# --init from a 4-class checkpoint on 3 classes: fc re-initialised, the rest loaded
# (lr 0: the weights stay as loaded).
dstrain --train "$T/train3" --arch resnet20 --crop 12 --batch 8 --epochs 1 --lr 0 --threads 2 -o "$T/init" \
    --init "$T/full/last.h5" --max-steps 1 2>"$T/init.err"
check init_other_classes_runs test -f "$T/init/ckpt-00000001.h5"
check init_says_fc_reinitialised grep -q "fc re-initialised" "$T/init.err"
check init_loads_weights h5diff "$T/full/last.h5" "$T/init/ckpt-00000001.h5" /model/conv1.weight /model/conv1.weight
check init_new_fc_shape sh -c "h5ls '$T/init/ckpt-00000001.h5/model/fc.weight' | grep -q '{3, 64}'"

# dseval: the same numbers with 1 or 2 threads, and from shards or the manifest.
ck="$T/full/last.h5"
strip() { sed 's/, "images_per_sec": [0-9.]*//' "$1"; }
dseval --json --threads 1 --loader-threads 1 "$ck" "$T/val" >"$T/e1" &&
    dseval --json --threads 2 --loader-threads 3 --batch 5 "$ck" "$T/val" >"$T/e2" &&
    dseval --json --threads 2 "$ck" "$T/split/val.txt" >"$T/e3" || fail dseval_runs
check dseval_threads_same test "$(strip "$T/e1")" = "$(strip "$T/e2")"
"$PYTHON" - "$T/e1" "$T/e3" <<'PY' && pass dseval_shards_equal_manifest || fail dseval_shards_equal_manifest
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
print(a, b)
assert a["count"] == b["count"] == 32 and a["top1"] == b["top1"] and a["top5"] == b["top5"]
assert abs(a["loss"] - b["loss"]) < 1e-5
PY
dseval --per-class "$T/pc.csv" --logits "$T/lg.h5" "$ck" "$T/val" >/dev/null
check dseval_per_class test "$(wc -l <"$T/pc.csv")" = 5
check dseval_logits_shape sh -c "h5ls '$T/lg.h5/logits' | grep -q '{32, 4}'"

# --tta flip: each image's logits are the mean of its own and its mirror's, to the bit. The
# stored 16x16 pixels of the val shards, as they are and mirrored, become two manifests of
# PNGs (a 16x16 image at --size 16 decodes to itself); each is evaluated plainly, and the
# shards with --tta flip, here in batches of 5 so that the last batch is short.
"$PYTHON" - "$T/val" "$T/mirror" <<'PY' || fail tta_data
import glob, os, sys
import h5py, numpy as np
from PIL import Image
src, out = sys.argv[1:]
for name, flip in (("plain", False), ("mirrored", True)):
    lines = ["# ds-manifest 1 root=%s" % os.path.join(out, name)]
    for shard in sorted(glob.glob(os.path.join(src, "shard-*.h5"))):
        with h5py.File(shard, "r") as f:
            classes = list(f["classes"].asstr()[()])
            for i, (img, label) in enumerate(zip(f["images"][()], f["labels"][()])):
                path = "%s/%s-%03d.png" % (classes[label], os.path.basename(shard), i)
                os.makedirs(os.path.dirname(os.path.join(out, name, path)), exist_ok=True)
                Image.fromarray(img[:, ::-1] if flip else img).save(os.path.join(out, name, path))
                lines.append("%d\t%s" % (label, path))
    open(os.path.join(out, name + ".txt"), "w").write("\n".join(lines) + "\n")
    open(os.path.join(out, "classes.txt"), "w").write("\n".join(classes) + "\n")
PY
dseval --logits "$T/tta-plain.h5" "$ck" "$T/mirror/plain.txt" >/dev/null &&
    dseval --logits "$T/tta-mirrored.h5" "$ck" "$T/mirror/mirrored.txt" >/dev/null &&
    dseval --json --tta flip --batch 5 --logits "$T/tta.h5" "$ck" "$T/val" >"$T/tta.json" || fail dseval_tta_runs
"$PYTHON" - "$T/tta-plain.h5" "$T/tta-mirrored.h5" "$T/tta.h5" "$T/tta.json" "$T/e1" <<'PY' &&
import json, sys
import h5py, numpy as np
a, b, t = (h5py.File(f, "r")["logits"][()] for f in sys.argv[1:4])
want = np.float32(0.5) * (a + b)
print("tta logits: %d x %d, %d differ from the mean of the two passes; plain and mirrored differ in %d"
      % (t.shape + (int((t != want).sum()), int((a != b).sum()))))
assert t.dtype == np.float32 and t.shape == a.shape == (32, 4) and (a != b).any()
assert np.array_equal(t, want)
j, plain = json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))
assert j["tta"] == "flip" and j["protocol"].endswith(", and mirrored (mean logits)") and plain["tta"] == "none", j
PY
    pass dseval_tta_flip_is_the_mean_of_both || fail dseval_tta_flip_is_the_mean_of_both
expect_status dseval_refuses_unknown_tta 2 dseval --tta rotate "$ck" "$T/val"

# Refusals: exit 1 with a message.
echo "not a checkpoint" >"$T/text.h5"
head -c 100000 "$ck" >"$T/trunc.h5"
expect_status dseval_refuses_text 1 dseval "$T/text.h5" "$T/val"
expect_status dseval_refuses_shard 1 dseval "$T/train/shard-00000.h5" "$T/val"
expect_status dseval_refuses_truncated 1 dseval "$T/trunc.h5" "$T/val"
expect_status dseval_refuses_other_classes 1 dseval "$ck" "$T/train3"
check dseval_message_names_classes grep -q "classes" "$T/err"
expect_status dseval_usage 2 dseval "$ck"
expect_status dstrain_refuses_train_val_mismatch 1 dstrain --train "$T/train" --val "$T/train3" -o "$T/x1" \
    --arch resnet20 --crop 12 --batch 8 --threads 2
expect_status dstrain_refuses_resume_other_classes 1 dstrain --train "$T/train3" --resume "$T/full" --arch resnet20 \
    --crop 12 --batch 8 --threads 2
expect_status dstrain_refuses_init_truncated 1 dstrain --train "$T/train" -o "$T/x2" --arch resnet20 --crop 12 \
    --batch 8 --threads 2 --init "$T/trunc.h5"
expect_status dstrain_refuses_crop_too_large 1 dstrain --train "$T/train" -o "$T/x3" --arch resnet20 --crop 20 \
    --batch 8 --threads 2
expect_status dstrain_refuses_fresh_run_over_old 1 dstrain "${COMMON[@]}" -o "$T/full"
expect_status dstrain_needs_train 2 dstrain -o "$T/x4"
expect_status dstrain_nan_loss 1 dstrain --train "$T/train" -o "$T/nan" --arch resnet20 --crop 12 --batch 8 \
    --threads 2 --lr 1000 --lr-scaling none --warmup-epochs 0 --ckpt-steps 1 --label-smoothing 0
check nan_message_names_step grep -q "step [0-9]*.*the loss is" "$T/err"

# dseval takes a run directory (its best.h5, named), refuses --size/--fit on shards (they are
# evaluated as stored), and writes a path that is not UTF-8 into --logits escaped, said.
dseval -q --json "$T/full/best.h5" "$T/val" >"$T/best.json" 2>/dev/null
dseval --json "$T/full" "$T/val" >"$T/dir.json" 2>"$T/dir.err"
# the same result, field by field, but for the speed (which is no result)
"$PYTHON" - "$T/best.json" "$T/dir.json" <<'PY' && pass dseval_run_dir_is_best || fail dseval_run_dir_is_best
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for d in (a, b): d.pop("images_per_sec")
assert a == b, (a, b)
PY
check dseval_run_dir_named grep -q "is a run directory: evaluating its best.h5" "$T/dir.err"
expect_status dseval_refuses_size_on_shards 2 dseval --size 32 "$T/full/best.h5" "$T/val"
check dseval_size_on_shards_named grep -q -- "--size and --fit say how to decode a manifest" "$T/err"
odd=$(printf 'caf\xe9.png')
mkdir -p "$T/odd" && cp "$T/split/val.txt" "$T/odd/val.txt" && cp "$T/split/classes.txt" "$T/odd/" &&
    first=$(sed -n 2p "$T/odd/val.txt" | cut -f 2) && root=$(sed -n '1s/.*root=//p' "$T/odd/val.txt") &&
    cp "$root/$first" "$T/odd/$odd" && sed -i "1s|root=.*|root=$T/odd|; 2s|\t[^\t]*$|\t$odd|" "$T/odd/val.txt"
dseval -q --logits "$T/odd.h5" "$T/full/best.h5" "$T/odd/val.txt" 2>"$T/odd.err" >/dev/null
check dseval_logits_non_utf8_said grep -q "1 path of .* is not UTF-8" "$T/odd.err"
"$PYTHON" - "$T/odd.h5" <<'PY' && pass dseval_logits_non_utf8_readable || fail dseval_logits_non_utf8_readable
import sys
import h5py
paths = list(h5py.File(sys.argv[1], "r")["paths"].asstr()[()])
assert "caf\\xe9.png" in paths, paths[:3]
PY
finish
