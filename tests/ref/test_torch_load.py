#!/usr/bin/python3
"""A ds checkpoint in PyTorch, through the reader docs/TOOLS.md documents.

dstrain trains resnet18 and resnet50 for one short epoch (4 classes x 6 images stored at
36x36, crop 32, so the BN running statistics and num_batches_tracked have moved); the
python block under "Reading a checkpoint in PyTorch" in docs/TOOLS.md is taken from there
and run as it stands (so the documented reader cannot rot), loading each checkpoint into
torchvision's model with load_state_dict(strict=True). Checked: every tensor's dtype and
shape against torchvision's own state_dict, num_batches_tracked = the optimizer steps, and
the logits of PyTorch (centre crop of the stored images, the returned normalisation) against
dseval --logits on the same shards.

Tolerance on the logits: 1e-4 x max(1, max |logit|): both run float32, summing in
different orders (ds's GEMM, PyTorch's oneDNN), which leaves ~1e-6 relative per op.
"""
import os
import re
import shutil
import sys
import tempfile

import h5py
import numpy as np
import torch
import torchvision
from PIL import Image

from reflib import BIN, ROOT, report, run, status  # noqa: E402


def documented_reader():
    """docs/TOOLS.md's python block of the section, executed; returns its load_ds_checkpoint."""
    text = open(os.path.join(ROOT, "docs", "TOOLS.md")).read()
    m = re.search(r"^## Reading a checkpoint in PyTorch\n.*?^```python\n(.*?)^```", text, re.S | re.M)
    if not m:
        report("docs_have_the_reader", False, "no python block under '## Reading a checkpoint in PyTorch'")
        sys.exit(1)
    scope = {}
    exec(compile(m.group(1), "docs/TOOLS.md (Reading a checkpoint in PyTorch)", "exec"), scope)
    report("docs_have_the_reader", "load_ds_checkpoint" in scope)
    return scope["load_ds_checkpoint"]


def main():
    torch.set_num_threads(2)
    tmp = tempfile.mkdtemp(dir=os.environ.get("DS_TEST_TMP"))
    rng = np.random.default_rng(11)
    for c in range(4):
        d = os.path.join(tmp, "tree", "c%d" % c)
        os.makedirs(d)
        for i in range(6):
            img = rng.integers(0, 200, (40, 44, 3), dtype=np.uint8)
            img[5 + 6 * c:12 + 6 * c, :, c % 3] += 55
            Image.fromarray(img).save(os.path.join(d, "%d.png" % i))
    run(BIN + "/dsplit", "-q", "--val", "0", "-o", tmp + "/split", tmp + "/tree")
    run(BIN + "/dspack", "-q", "--size", "36", "-o", tmp + "/packed", tmp + "/split/train.txt")
    load = documented_reader()

    with h5py.File(tmp + "/packed/shard-00000.h5", "r") as f:
        stored = {p: img for p, img in zip(f["paths"].asstr()[()], f["images"][()])}

    for arch in ("resnet18", "resnet50"):
        run_dir = "%s/run-%s" % (tmp, arch)
        run(BIN + "/dstrain", "-q", "--train", tmp + "/packed", "-o", run_dir, "--arch", arch, "--crop", "32",
            "--batch", "6", "--epochs", "1", "--threads", "2")
        ckpt = run_dir + "/last.h5"
        run(BIN + "/dseval", "-q", "--threads", "2", "--logits", run_dir + "/logits.h5", ckpt, tmp + "/packed")

        try:
            model, crop, normalize = load(ckpt)
        except Exception as e:   # noqa: BLE001 - any failure of the documented reader is the finding
            report("%s_loads_strict" % arch, False, repr(e))
            continue
        report("%s_loads_strict" % arch, isinstance(model, torchvision.models.ResNet) and crop == 32)

        # strict=True checks names and shapes; copy_ would cast a wrong dtype silently.
        with h5py.File(ckpt, "r") as f:
            raw = {k: torch.as_tensor(d[()]) for k, d in f["model"].items()}
            step = int(f.attrs["step"])
        ref = getattr(torchvision.models, arch)(num_classes=4).state_dict()
        bad = [k for k, v in ref.items() if raw[k].dtype != v.dtype or raw[k].shape != v.shape]
        report("%s_dtypes_and_shapes_are_torchvisions" % arch, not bad and len(raw) == len(ref), ", ".join(bad[:3]))
        nbt = {int(v) for k, v in model.state_dict().items() if k.endswith("num_batches_tracked")}
        report("%s_num_batches_tracked_is_the_step_count" % arch, nbt == {step} and step > 0,
               "%s, step %d" % (sorted(nbt), step))
        moved = float(model.state_dict()["layer1.0.bn1.running_mean"].abs().max())
        report("%s_running_statistics_moved" % arch, moved > 0)

        with h5py.File(run_dir + "/logits.h5", "r") as f:
            got, paths = f["logits"][()], list(f["paths"].asstr()[()])
        x = torch.from_numpy(np.stack([stored[p] for p in paths])).permute(0, 3, 1, 2).float() / 255
        x = normalize(torchvision.transforms.CenterCrop(crop)(x))
        with torch.no_grad():
            want = model(x).numpy()
        err = float(np.abs(got - want).max())
        tol = 1e-4 * max(1.0, float(np.abs(want).max()))
        print("  %s: %d images, logits up to %.3f, worst difference %.2e (tolerance %.1e)"
              % (arch, len(paths), np.abs(want).max(), err, tol), file=sys.stderr)
        report("%s_logits_match_dseval" % arch, len(paths) == 24 and err <= tol, "worst %.3g, tolerance %.3g" % (err, tol))
    shutil.rmtree(tmp, ignore_errors=True)
    return status()


if __name__ == "__main__":
    sys.exit(main())
