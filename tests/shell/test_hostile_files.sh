#!/bin/bash
# Hostile files: shards and checkpoints whose datasets have the wrong rank, type or shape, or
# whose attributes are out of range (height 0, num_classes larger than /classes, labels
# outside [0, C), a negative step ...), made with h5py from good files. Every reader refuses
# each with exit 1 and a message naming the file and the field, never a crash: dseval and
# dstrain --train on shards, dseval and dstrain --resume on checkpoints. dspack --resume
# never keeps a hostile shard: it rewrites it into the shard a clean run writes.
. "$(dirname "$0")/lib.sh"
SYNTH=$BUILD_DIR/data/synth
[ -x "$SYNTH" ] || { fail synth_built "$SYNTH missing (make)"; finish; }

"$SYNTH" -q --classes 4 --per-class 8 "$T/tree" && dsplit -q --val 0.25 -o "$T/split" "$T/tree" &&
    dspack -q --size 16 -o "$T/train" "$T/split/train.txt" &&
    dstrain -q --train "$T/train" --arch resnet20 --crop 16 --batch 8 --epochs 1 --warmup-epochs 0 --threads 1 \
        -o "$T/run" || { fail setup "synth/dsplit/dspack/dstrain failed"; finish; }
CKPT=$T/run/ckpt-00000003.h5

cat >"$T/gen.py" <<'PY'
import os, shutil, sys

import h5py
import numpy as np

shard, ckpt, out = sys.argv[1], sys.argv[2], sys.argv[3]

def variant(kind, name, field, src, edit):
    d = os.path.join(out, kind + "-" + name)
    os.makedirs(d)
    dst = os.path.join(d, os.path.basename(src))
    shutil.copy(src, dst)
    with h5py.File(dst, "r+") as f:
        edit(f)
    print(kind, name, field, dst)

def replace(f, path, data):
    del f[path]
    f[path] = data

# shards: images [N, H, W, 3] uint8, labels [N] int32, classes [C] strings
variant("shard", "images_rank3", "/images", shard, lambda f: replace(f, "images", f["images"][:, :, :, 0]))
variant("shard", "images_float", "/images", shard, lambda f: replace(f, "images", f["images"][()].astype(np.float32)))
variant("shard", "images_height", "/images", shard, lambda f: replace(f, "images", f["images"][:, :8]))
variant("shard", "images_channels", "/images", shard, lambda f: replace(f, "images", f["images"][:, :, :, :2]))
variant("shard", "height_0", "height", shard, lambda f: f.attrs.__setitem__("height", np.int32(0)))
variant("shard", "width_negative", "width", shard, lambda f: f.attrs.__setitem__("width", np.int32(-16)))
variant("shard", "num_classes_over_classes", "num_classes", shard, lambda f: f.attrs.__setitem__("num_classes", np.int32(9)))
variant("shard", "labels_too_large", "/labels", shard, lambda f: f["labels"].__setitem__(0, 4))
variant("shard", "labels_negative", "/labels", shard, lambda f: f["labels"].__setitem__(1, -1))
variant("shard", "labels_float", "/labels", shard, lambda f: replace(f, "labels", f["labels"][()].astype(np.float64)))
variant("shard", "labels_short", "/labels", shard, lambda f: replace(f, "labels", f["labels"][:-1]))
variant("shard", "labels_rank2", "/labels", shard, lambda f: replace(f, "labels", f["labels"][()].reshape(-1, 1)))
variant("shard", "classes_missing", "/classes", shard, lambda f: f.__delitem__("classes"))
variant("shard", "ds_kind_checkpoint", "ds_kind", shard, lambda f: f.attrs.__setitem__("ds_kind", np.bytes_("checkpoint")))
# checkpoints: /model/<torch name> float32 in PyTorch layouts, /classes, root attributes
variant("ckpt", "conv1_weight_shape", "/model/conv1.weight", ckpt, lambda f: replace(f, "model/conv1.weight", f["model/conv1.weight"][:8]))
variant("ckpt", "conv1_weight_rank", "/model/conv1.weight", ckpt, lambda f: replace(f, "model/conv1.weight", f["model/conv1.weight"][()].reshape(16, -1)))
variant("ckpt", "fc_weight_int", "/model/fc.weight", ckpt, lambda f: replace(f, "model/fc.weight", f["model/fc.weight"][()].astype(np.int32)))
variant("ckpt", "fc_bias_missing", "/model/fc.bias", ckpt, lambda f: f.__delitem__("model/fc.bias"))
variant("ckpt", "num_classes_over_classes", "num_classes", ckpt, lambda f: f.attrs.__setitem__("num_classes", np.int32(9)))
variant("ckpt", "num_classes_0", "num_classes", ckpt, lambda f: f.attrs.__setitem__("num_classes", np.int32(0)))
variant("ckpt", "input_size_negative", "input_size", ckpt, lambda f: f.attrs.__setitem__("input_size", np.int32(-16)))
variant("ckpt", "step_negative", "step", ckpt, lambda f: f.attrs.__setitem__("step", np.int64(-5)))
variant("ckpt", "running_var_rank", "/model/bn1.running_var", ckpt, lambda f: replace(f, "model/bn1.running_var", f["model/bn1.running_var"][()].reshape(4, -1)))
variant("ckpt", "momentum_shape", "/optimizer/fc.weight", ckpt, lambda f: replace(f, "optimizer/fc.weight", f["optimizer/fc.weight"][:1]))
variant("ckpt", "arch_unknown", "arch", ckpt, lambda f: f.attrs.__setitem__("arch", np.bytes_("resnet9000")))
variant("ckpt", "world_size_negative", "world_size", ckpt, lambda f: f.attrs.__setitem__("world_size", np.int32(-2)))
variant("ckpt", "data_height_0", "data_height", ckpt, lambda f: f.attrs.__setitem__("data_height", np.int64(0)))
variant("ckpt", "data_fit_unknown", "data_fit", ckpt, lambda f: f.attrs.__setitem__("data_fit", np.bytes_("stretch")))
variant("ckpt", "epoch_loss_sum_string", "epoch_loss_sum", ckpt, lambda f: f.attrs.__setitem__("epoch_loss_sum", np.bytes_("1.5")))
variant("ckpt", "crop_ramp_end_before_start", "crop_ramp", ckpt, lambda f: f.attrs.__setitem__("crop_ramp", np.int64([8, 5, 2, 4])))
variant("ckpt", "bn_bias_decay_2", "bn_bias_decay", ckpt, lambda f: f.attrs.__setitem__("bn_bias_decay", np.int32(2)))
variant("ckpt", "mean_two_values", "mean", ckpt, lambda f: f.attrs.__setitem__("mean", np.float32([0.5, 0.5])))
variant("ckpt", "kind_shard", "ds_kind", ckpt, lambda f: f.attrs.__setitem__("ds_kind", np.bytes_("shard")))
variant("ckpt", "format_2", "ds_format", ckpt, lambda f: f.attrs.__setitem__("ds_format", np.int32(2)))
PY
"$PYTHON" "$T/gen.py" "$T/train/shard-00000.h5" "$CKPT" "$T/h" >"$T/cases" || { fail setup "h5py edits failed"; finish; }

# refused NAME FILE FIELD CMD...: exit 1 (not a signal, not 0) and an error naming FILE and FIELD.
refused() {
    local name=$1 file=$2 field=$3; shift 3
    "$@" >/dev/null 2>"$T/err"
    local rc=$?
    if [ $rc = 1 ] && grep -q "error: .*$(basename "$file").*$field" "$T/err"; then pass "$name"
    else fail "$name" "exit $rc, want 1 and an error naming $(basename "$file") and $field: $(head -2 "$T/err")"; fi
}
TRAIN=(--arch resnet20 --crop 16 --batch 8 --epochs 2 --warmup-epochs 0 --threads 1 -q)
n=0
while read -r kind name field path; do
    n=$((n + 1))
    dir=$(dirname "$path")
    if [ "$kind" = shard ]; then
        refused "dseval_refuses_shard_$name" "$path" "$field" dseval -q "$CKPT" "$dir"
        refused "dstrain_refuses_shard_$name" "$path" "$field" dstrain "${TRAIN[@]}" --train "$dir" -o "$dir/run"
        dspack -q --resume --size 16 -o "$dir" "$T/split/train.txt" 2>"$T/err"
        check "dspack_resume_rewrites_shard_$name" cmp -s "$path" "$T/train/shard-00000.h5"
    else
        # dseval reads only /model: a damaged /optimizer concerns dstrain --resume alone.
        [ "$name" != momentum_shape ] &&
            refused "dseval_refuses_ckpt_$name" "$path" "$field" dseval -q "$path" "$T/train"
        refused "dstrain_resume_refuses_ckpt_$name" "$path" "$field" dstrain -q --threads 1 --train "$T/train" \
            --resume "$path" -o "$dir/run"
    fi
done <"$T/cases"
check hostile_cases_made test "$n" -ge 20
finish
