#!/usr/bin/python3
"""Write a torchvision ResNet's weights as a ds checkpoint (docs/DESIGN.md §2).

  scripts/torchvision_to_ds.py --arch resnet50 --pretrained -o r50.h5
  scripts/torchvision_to_ds.py --arch resnet50 --weights resnet50-11ad3fa6.pth -o r50.h5
  scripts/torchvision_to_ds.py --arch resnet18 --num-classes 10 --seed 1 -o r18.h5

The file carries the state_dict under /model with PyTorch's names and OIHW layouts, so
`dstrain --init FILE` starts from it (add --skip-fc semantics there when the class count
differs) and `dseval FILE DATA` evaluates it. Needs Debian's python3-torch,
python3-torchvision and python3-h5py; run it with /usr/bin/python3.

Also a module: the tests import resnet20() and write_checkpoint() from here.
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn
import torchvision

DS_FORMAT = 1
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
METRICS_DTYPE = np.dtype([("epoch", "<i8"), ("train_loss", "<f8"), ("val_top1", "<f8"),
                          ("val_top5", "<f8"), ("images_per_s", "<f8"), ("seconds", "<f8")])


class BasicBlock(nn.Module):
    """torchvision's BasicBlock with the same attribute names, so state_dict keys match."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet20(nn.Module):
    """The CIFAR-style network ds calls resnet20: 3x3 stem of 16 channels, no max pool,
    3 stages of 3 basic blocks (16/32/64 channels), projection shortcuts where the shape
    changes, global average pool, fc. Initialised as torchvision initialises its ResNets."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        cin = 16
        for s, width in enumerate((16, 32, 64)):
            blocks = []
            for b in range(3):
                blocks.append(BasicBlock(cin, width, 2 if b == 0 and s > 0 else 1))
                cin = width
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)
        for mod in self.modules():
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(mod, nn.BatchNorm2d):
                nn.init.constant_(mod.weight, 1)
                nn.init.constant_(mod.bias, 0)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet20(num_classes=10):
    return ResNet20(num_classes)


def build(arch, num_classes):
    """A torchvision ResNet (any name torchvision.models knows) or our resnet20."""
    if arch == "resnet20":
        return resnet20(num_classes)
    ctor = getattr(torchvision.models, arch, None)
    if ctor is None or not arch.startswith(("resnet", "wide_resnet", "resnext")):
        raise SystemExit("torchvision_to_ds: unknown ResNet '%s'" % arch)
    return ctor(num_classes=num_classes)


def pretrained_state_dict(arch):
    """torchvision's default weights: from the local cache if present, else a download."""
    try:
        weights = torchvision.models.get_model_weights(arch).DEFAULT
    except (ValueError, AttributeError) as e:
        raise SystemExit("torchvision_to_ds: no pretrained weights for '%s': %s" % (arch, e))
    cache = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(weights.url))
    try:
        return weights.get_state_dict(progress=False)
    except Exception as e:  # urllib raises several types; all mean "could not fetch"
        raise SystemExit("torchvision_to_ds: cannot get the pretrained %s weights (%s).\n"
                         "  Not in the cache (%s) and the download failed.\n"
                         "  Fetch %s on a machine with network access and pass it with --weights FILE."
                         % (arch, e, cache, weights.url))


def write_checkpoint(path, model, arch, classes=None, input_size=224, mean=IMAGENET_MEAN,
                     std=IMAGENET_STD, seed=0, config=None, momentum=None):
    """Writes model.state_dict() as a ds checkpoint at path (atomically: path.tmp, rename).
    momentum: optional {name: tensor} written under /optimizer."""
    sd = model.state_dict()
    num_classes = sd["fc.weight"].shape[0]
    if classes is None:
        classes = ["class%d" % i for i in range(num_classes)]
    if len(classes) != num_classes:
        raise SystemExit("torchvision_to_ds: %d class names for %d outputs" % (len(classes), num_classes))
    tmp = path + ".tmp"
    with h5py.File(tmp, "w", track_order=False) as f:
        a = f.attrs
        a.create("ds_format", DS_FORMAT, dtype="<i4")
        a["ds_kind"] = np.bytes_("checkpoint")
        a["arch"] = np.bytes_(arch)
        a.create("num_classes", num_classes, dtype="<i4")
        a.create("input_size", input_size, dtype="<i4")
        a.create("mean", np.array(mean, dtype="<f4"))
        a.create("std", np.array(std, dtype="<f4"))
        a.create("epoch", 0, dtype="<i8")
        a.create("step", 0, dtype="<i8")
        a.create("seed", seed, dtype="<u8")
        a.create("world_size", 0, dtype="<i4")  # 0: weights that never trained under ds
        a.create("global_batch", 0, dtype="<i4")
        a["config"] = np.bytes_(json.dumps(config or {"source": "torchvision_to_ds.py", "arch": arch}))
        g = f.create_group("model", track_order=False)
        for name, t in sd.items():
            if name.endswith("num_batches_tracked"):
                g.create_dataset(name, data=np.int64(t.item()), dtype="<i8", track_times=False)
            else:
                g.create_dataset(name, data=t.detach().cpu().float().numpy(), dtype="<f4", track_times=False)
        if momentum:
            g = f.create_group("optimizer")
            for name, t in momentum.items():
                g.create_dataset(name, data=t.detach().cpu().float().numpy(), dtype="<f4", track_times=False)
        f.create_dataset("classes", data=np.array(classes, dtype=object), dtype=h5py.string_dtype(),
                         track_times=False)
        f.create_dataset("metrics", shape=(0,), dtype=METRICS_DTYPE, track_times=False)
    os.replace(tmp, path)


def read_checkpoint(path):
    """{name: torch tensor} of /model in a ds checkpoint (for tests and round trips)."""
    with h5py.File(path, "r") as f:
        return {name: torch.from_numpy(np.array(d)) for name, d in f["model"].items()}


def main(argv=None):
    p = argparse.ArgumentParser(description="Write a torchvision ResNet as a ds checkpoint.")
    p.add_argument("--arch", default="resnet50", help="torchvision ResNet name or resnet20 (default resnet50)")
    p.add_argument("-o", "--out", required=True, help="output checkpoint (.h5)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--pretrained", action="store_true",
                     help="torchvision's default weights (from its cache, else downloaded)")
    src.add_argument("--weights", metavar="FILE.pth", help="a saved state_dict to convert")
    p.add_argument("--num-classes", type=int, default=None,
                   help="output classes (default: 1000, or those of --weights/--classes)")
    p.add_argument("--classes", metavar="classes.txt", help="class names, one per line (dsplit's classes.txt)")
    p.add_argument("--seed", type=int, default=42, help="seed of the random init (default 42)")
    p.add_argument("--input-size", type=int, default=224, help="input_size attribute (default 224)")
    args = p.parse_args(argv)

    classes = None
    if args.classes:
        with open(args.classes, encoding="utf-8") as f:
            classes = [line.rstrip("\n") for line in f if line.strip()]
    sd = None
    if args.pretrained:
        sd = pretrained_state_dict(args.arch)
    elif args.weights:
        sd = torch.load(args.weights, map_location="cpu")
        if isinstance(sd, dict) and "state_dict" in sd:
            sd = sd["state_dict"]
        if not isinstance(sd, dict) or "fc.weight" not in sd:
            raise SystemExit("torchvision_to_ds: %s: not a ResNet state_dict (no fc.weight)" % args.weights)
    src_classes = sd["fc.weight"].shape[0] if sd is not None else None
    n = args.num_classes or (len(classes) if classes else None) or src_classes or 1000
    if classes is not None and len(classes) != n:
        raise SystemExit("torchvision_to_ds: %d names in %s, %d classes" % (len(classes), args.classes, n))

    torch.manual_seed(args.seed)
    model = build(args.arch, n)
    if sd is not None:
        if src_classes != n:
            # A new head for another class count: keep the random (seeded) fc.
            sd = {k: v for k, v in sd.items() if not k.startswith("fc.")}
            print("torchvision_to_ds: fc has %d outputs in the weights, %d asked: fc left random"
                  % (src_classes, n), file=sys.stderr)
        missing, unexpected = model.load_state_dict(sd, strict=False)
        missing = [k for k in missing if not k.startswith("fc.") or src_classes == n]
        if missing or unexpected:
            raise SystemExit("torchvision_to_ds: weights do not fit %s: missing %s, unexpected %s"
                             % (args.arch, missing[:5], unexpected[:5]))
    write_checkpoint(args.out, model, args.arch, classes, args.input_size, seed=args.seed,
                     config={"source": "torchvision_to_ds.py", "arch": args.arch,
                             "weights": "pretrained" if args.pretrained else args.weights or "random",
                             "seed": args.seed})
    params = sum(t.numel() for t in model.parameters())
    print("%s: %s, %d classes, %d parameters" % (args.out, args.arch, n, params))


if __name__ == "__main__":
    main()
