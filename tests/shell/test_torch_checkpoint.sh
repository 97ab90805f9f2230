#!/bin/bash
# Checkpoints written by hand with h5py from a full torchvision state_dict (weights that never
# trained under ds): every tensor, num_batches_tracked as int64 scalars, and only some root
# attributes. dseval and dstrain --init need the weights, the architecture and the input
# metadata alone; --resume needs the training state and refuses these files naming what is
# missing. dseval's logits are compared with PyTorch's on the same images, so a tensor read
# into the wrong place fails the test.
. "$(dirname "$0")/lib.sh"

"$PYTHON" -c 'import h5py, torch, torchvision' 2>/dev/null ||
    { fail python_modules "$PYTHON lacks h5py, torch or torchvision"; finish; }
make_bar_images "$T/tree" 8 4 1 && split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" ||
    { fail data "cannot make the synthetic set"; finish; }

# Four files of one random resnet18 (4 classes, input 16):
#   ws0      every attribute torchvision_to_ds.py writes and /classes, but world_size 0
#   bare     ds_format, ds_kind, arch, num_classes, input_size, mean, std: no world_size, no
#            training state, no /classes, no /metrics; strings as h5py writes them (vlen)
#   noinput  bare without input_size, mean and std: enough for --init, not for dseval
#   badmean  bare with a mean of two values: a field that is there must be well formed
"$PYTHON" - "$T" <<'PY' || { fail write "h5py could not write the checkpoints"; finish; }
import sys

import h5py
import numpy as np
import torch
import torchvision

out = sys.argv[1]
torch.manual_seed(1)
model = torchvision.models.resnet18(num_classes=4)
# Non-trivial BN buffers and counters, so a buffer read into the wrong place shows.
with torch.no_grad():
    for name, t in model.state_dict().items():
        if name.endswith("running_mean"):
            t.uniform_(-0.1, 0.1)
        elif name.endswith("running_var"):
            t.uniform_(0.5, 1.5)
        elif name.endswith("num_batches_tracked"):
            t.fill_(7)
sd = model.state_dict()
torch.save(sd, out + "/sd.pt")
assert any(k.endswith("num_batches_tracked") for k in sd)

def write(path, attrs, classes=None):
    with h5py.File(path, "w") as f:
        for k, v in attrs.items():
            f.attrs[k] = v
        for name, t in sd.items():
            if name.endswith("num_batches_tracked"):
                f.create_dataset("model/" + name, data=np.int64(t.item()))  # int64 scalar
            else:
                f.create_dataset("model/" + name, data=t.numpy())
        if classes is not None:
            f.create_dataset("classes", data=np.array(classes, dtype=object), dtype=h5py.string_dtype())

bare = {"ds_format": np.int32(1), "ds_kind": "checkpoint", "arch": "resnet18", "num_classes": 4,
        "input_size": 16, "mean": [0.5, 0.4, 0.3], "std": [0.25, 0.2, 0.3]}
write(out + "/bare.h5", bare)
write(out + "/noinput.h5", {k: v for k, v in bare.items() if k not in ("input_size", "mean", "std")})
write(out + "/badmean.h5", dict(bare, mean=[0.5, 0.4]))
ws0 = dict(bare, ds_kind=np.bytes_("checkpoint"), arch=np.bytes_("resnet18"), epoch=np.int64(0),
           step=np.int64(0), seed=np.uint64(42), world_size=np.int32(0), global_batch=np.int32(8),
           config=np.bytes_("{}"), epoch_loss_sum=0.0, epoch_seconds=0.0)
write(out + "/ws0.h5", ws0, ["class%d" % i for i in range(4)])
PY

# PyTorch's logits of the images dseval saw (from its --logits /paths, read from the shards),
# normalised as dseval does: (x / 255 - mean) / std, NCHW.
cat >"$T/compare.py" <<'PY'
import glob, sys

import h5py
import numpy as np
import torch
import torchvision

sd_path, logits_path, shards = sys.argv[1], sys.argv[2], sys.argv[3]
mean, std = np.array([0.5, 0.4, 0.3], np.float32), np.array([0.25, 0.2, 0.3], np.float32)
images = {}
for s in sorted(glob.glob(shards + "/shard-*.h5")):
    with h5py.File(s, "r") as f:
        for p, img in zip(f["paths"].asstr()[()], f["images"][()]):
            images[p] = img
with h5py.File(logits_path, "r") as f:
    got, paths = f["logits"][()], list(f["paths"].asstr()[()])
x = np.stack([(images[p].astype(np.float32) / 255 - mean) / std for p in paths]).transpose(0, 3, 1, 2)
model = torchvision.models.resnet18(num_classes=4)
model.load_state_dict(torch.load(sd_path))
model.eval()
with torch.no_grad():
    want = model(torch.from_numpy(np.ascontiguousarray(x))).numpy()
err = np.abs(got - want).max()
# fp32 through different summation orders: ~1e-5 relative to logits of order 1.
tol = 1e-4 * max(1.0, np.abs(want).max())
print("%d images, logits up to %.3f, worst difference %.2e (tolerance %.1e)" % (len(paths), np.abs(want).max(), err, tol))
sys.exit(0 if len(paths) > 0 and err <= tol else 1)
PY

TRAIN=(--train "$T/train" --arch resnet18 --crop 16 --batch 4 --epochs 1 --lr 0 --warmup-epochs 0 --threads 2)
for v in ws0 bare; do
    F=$T/$v.h5
    expect_status "dseval_accepts_$v" 0 dseval -q --threads 2 --logits "$T/$v.logits.h5" "$F" "$T/val"
    check "dseval_logits_match_pytorch_$v" "$PYTHON" "$T/compare.py" "$T/sd.pt" "$T/$v.logits.h5" "$T/val"
    # --lr 0: one step leaves the convolution weights as loaded.
    expect_status "dstrain_init_accepts_$v" 0 dstrain "${TRAIN[@]}" --init "$F" --max-steps 1 -o "$T/init-$v"
    check "dstrain_init_says_initialised_$v" grep -q "initialised from" "$T/err"
    # (the values: dstrain adds the tensor's xxh3_64 checksum, which the converted file lacks)
    check "dstrain_init_loads_weights_$v" h5diff --exclude-attribute /model/layer4.1.conv2.weight "$F" \
        "$T/init-$v/ckpt-00000001.h5" /model/layer4.1.conv2.weight \
        /model/layer4.1.conv2.weight
    expect_status "dstrain_resume_refuses_$v" 1 dstrain "${TRAIN[@]}" --resume "$F" -o "$T/resume-$v"
    check "dstrain_resume_names_world_size_$v" grep -q "error: .*$v.h5: --resume needs the .*world_size" "$T/err"
    check "dstrain_resume_writes_nothing_$v" test ! -e "$T/resume-$v/ckpt-00000001.h5"
done
# ws0 holds every other training attribute: world_size itself is what --resume misses.
dstrain "${TRAIN[@]}" --resume "$T/ws0.h5" -o "$T/resume-ws0b" 2>"$T/err"
check dstrain_resume_ws0_missing_is_world_size grep -q "needs the world_size attribute (non-zero)" "$T/err"
# bare lacks the training state from epoch on: the first missing attribute is named.
dstrain "${TRAIN[@]}" --resume "$T/bare.h5" -o "$T/resume-bareb" 2>"$T/err"
check dstrain_resume_bare_missing_is_epoch grep -q "needs the epoch attribute" "$T/err"

# Lenient about what a use does not need, strict about what it does.
expect_status dstrain_init_accepts_noinput 0 dstrain "${TRAIN[@]}" --init "$T/noinput.h5" --max-steps 1 \
    -o "$T/init-noinput"
expect_status dseval_refuses_noinput 1 dseval -q --threads 2 "$T/noinput.h5" "$T/val"
check dseval_names_input_size grep -q "error: .*noinput.h5: evaluation needs the input_size attribute" "$T/err"
expect_status dseval_refuses_badmean 1 dseval -q --threads 2 "$T/badmean.h5" "$T/val"
check dseval_names_mean grep -q "error: .*badmean.h5: mean attribute is not 3 float values" "$T/err"
expect_status dstrain_init_refuses_badmean 1 dstrain "${TRAIN[@]}" --init "$T/badmean.h5" --max-steps 1 \
    -o "$T/init-badmean"
finish
