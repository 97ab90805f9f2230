#!/usr/bin/python3
"""The engine against PyTorch: resnet20, resnet18 and resnet50 on small inputs.

For each network: random weights and random BN statistics (so eval mode is not the
identity on BN), written as a ds checkpoint by scripts/torchvision_to_ds.py; the driver
build/drivers/engine_ref loads it, runs the engine and writes its results; this test runs the
same steps in PyTorch in float64 and compares:
  eval-mode logits, training-mode logits and loss, every parameter gradient, every tensor
  (BN running statistics included) after one SGD step, every tensor and momentum buffer
  after 3 steps (momentum 0.9, nesterov, weight decay, label smoothing), and the ds
  checkpoint the driver writes at the end (read back with h5py, PyTorch names and layouts).
Each of the 3 steps is checked from the engine's own state before it (weights, running
statistics and momentum loaded into PyTorch), see run_case for why.

ReLU decisions: a ReLU input within rounding of 0 (with ~10^6 inputs per pass, about one
lies within 1e-7 of its scale) goes to either side in any fp32 implementation, and which
side changes that element's gradient by the whole of it, and so every gradient upstream.
The engine's result is right either way; a float64 reference taking the other side would
fail it. So the driver writes the engine's decisions, and the references (float64 and
PyTorch float32) follow them for inputs within KINK_BAND of 0 (relative to that ReLU's
input RMS) and decide by themselves elsewhere; outside the band the engine must agree with
float64 on every element (the relu_decisions check). That makes the comparison as robust
on one CPU's rounding as on another's, with no seed chosen to dodge a kink.

Errors are measured per tensor as max|got - ref| / max|ref| (the tensor's scale), because
elementwise relative error is meaningless for entries near zero.

Tolerances and why:
  - logits, loss, running statistics: 1e-4. A forward in fp32 through 20-50 layers keeps
    about 5-6 significant digits against a float64 reference.
  - gradients: 2e-3 (resnet20) / 5e-3 (resnet18, resnet50 at 64x64). BatchNorm backward
    subtracts the per-channel means of dy and dy*x_hat from dy; with few rows per channel
    (2 images x 2x2 in the last stage = 8 rows) that cancellation loses 2-3 digits in fp32,
    which is why the reference is float64: PyTorch's own fp32 gradients differ from the
    float64 ones by the same order (printed with --verbose for comparison).
  - weights after a step: the change (w - w_before) is compared, with the gradient
    tolerance, since that is all SGD adds; the untouched part is exact up to fp32 rounding.
  - every tolerance is raised to 4x PyTorch's own float32 error where that is larger: a
    change below the fp32 resolution of its weight (a tiny bias update) is noise in any
    fp32 implementation. A comparison fails when PyTorch fp32 is lost (> 5%) on more than a
    quarter of the tensors, since it would then prove nothing.
"""
import copy
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch
import torch.nn as nn

from reflib import BUILD, ROOT, long, report, status  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import torchvision_to_ds as tv  # noqa: E402

DRIVER = os.path.join(BUILD, "drivers", "engine_ref")
VERBOSE = "--verbose" in sys.argv
HYPER = dict(lr=0.01, momentum=0.9, wd=5e-3, nesterov=1, smoothing=0.1, steps=3)

# PyTorch's float32 run is "lost" on a tensor it gets wrong by more than 5% of its scale.
LOST = 0.05
# The most a tensor may be off when a max-pool near-tie resolves the other way (check_tensors).
KINK_MAX = 0.5
# ReLU inputs closer to 0 than this fraction of their tensor's RMS take the engine's
# decision in the references: far wider than fp32's forward error (~1e-5 at the logits), so
# no input the engine could have put on the other side is decided twice.
KINK_BAND = 1e-3


class Kinks:
    """The engine's ReLU decisions for one training forward (flat NHWC uint8 masks, in call
    order) and, as the reference's ReLUs run, how often each disagreed outside the band."""

    def __init__(self, masks):
        self.masks, self.calls, self.active, self.disagree = masks, 0, False, 0


class MaskedReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask, None


class EngineReLU(nn.Module):
    """nn.ReLU that, while kinks.active, decides inputs within KINK_BAND of 0 as the engine
    did (the mask and the gradient both follow that decision)."""

    def __init__(self, kinks):
        super().__init__()
        self.kinks = kinks

    def forward(self, x):
        k = self.kinks
        if not k.active:
            return torch.relu(x)
        if k.calls >= len(k.masks):
            raise RuntimeError("the reference calls more ReLUs than the engine has (%d)" % len(k.masks))
        n, c, h, w = x.shape
        eng = torch.from_numpy(k.masks[k.calls].reshape(n, h, w, c)).permute(0, 3, 1, 2).to(x.dtype)
        k.calls += 1
        xd = x.detach()
        own = (xd > 0).to(x.dtype)
        band = xd.abs() < KINK_BAND * xd.pow(2).mean().sqrt()
        k.disagree += int(((own != eng) & ~band).sum())
        return MaskedReLU.apply(x, torch.where(band, eng, own))


def follow_engine_relus(model, kinks):
    """Replaces every nn.ReLU of model (in place) by an EngineReLU reading kinks."""
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, nn.ReLU):
                setattr(mod, name, EngineReLU(kinks))


def rel_err(got, ref):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return float("inf")
    scale = max(np.abs(ref).max(), 1e-12)
    return float(np.abs(got - ref).max() / scale)


def check_tensors(name, got, ref, tol, yard, base=None):
    """Compares {name: array} dicts got (engine) and ref (PyTorch float64). Each tensor's
    tolerance is max(tol, 4 x the error of PyTorch's own float32 run (yard) against ref).
    Up to a tenth of the tensors (none of a one-tensor quantity) may exceed it, by at most
    KINK_MAX: two inputs of a max-pool window within fp32 rounding of each other (the stem's
    pool has ~10^5 windows) send that window's gradient to either, which moves the stem's
    gradients only. (ReLU kinks, which would move every layer upstream, are taken out by
    following the engine's decisions: see the module comment.) A broken op moves nearly
    every tensor it feeds. With base, compares the changes got - base, ref - base."""
    errs, lost = [], 0
    missing = [k for k in ref if k not in got]
    for k, r in ref.items():
        if k not in got:
            continue
        g, r, y = (np.asarray(a, dtype=np.float64) for a in (got[k], r, yard[k]))
        if base is not None:
            g, r, y = g - base[k], r - base[k], y - base[k]
        yerr = rel_err(y, r)
        lost += yerr > LOST
        e = rel_err(g, r)
        errs.append((e / max(tol, 4 * yerr), e, k))
    errs.sort(reverse=True)
    over = [x for x in errs if x[0] > 1]
    worst = errs[0] if errs else (0, 0, None)
    if VERBOSE:
        print("  %-32s worst %.3g of its tolerance (%s, error %.3g); %d over; PyTorch fp32 lost on %d of %d"
              % (name, worst[0], worst[2], worst[1], len(over), lost, len(ref)))
    # A comparison where PyTorch fp32 itself is lost on most tensors proves nothing.
    informative = lost <= len(ref) // 4
    ok = not missing and informative and len(over) <= len(ref) // 10 and all(x[1] <= KINK_MAX for x in over)
    report(name, ok,
           "missing %s" % missing[:3] if missing else
           "PyTorch fp32 lost on %d of %d tensors" % (lost, len(ref)) if not informative else
           "%d of %d tensors over tolerance, worst %s at %.3g x (error %.3g)" % (len(over), len(ref), worst[2], worst[0], worst[1]))


def torch_step(model, dtype, x, labels, n, weights, momentum, kinks):
    """One training step in PyTorch at dtype from the engine's state (weights: every float
    tensor; momentum: None before the first step), its training forward following the
    engine's ReLU decisions near 0 (kinks). Returns {quantity: {name: array}}."""
    m = copy.deepcopy(model).to(dtype)
    follow_engine_relus(m, kinks)
    sd = m.state_dict()
    for k, v in weights.items():
        sd[k].copy_(torch.from_numpy(v))
    params = dict(m.named_parameters())
    opt = torch.optim.SGD(m.parameters(), lr=HYPER["lr"], momentum=HYPER["momentum"],
                          weight_decay=HYPER["wd"], nesterov=bool(HYPER["nesterov"]))
    if momentum is not None:
        for k, p in params.items():
            opt.state[p]["momentum_buffer"] = torch.from_numpy(momentum[k]).to(dtype)
    loss_fn = nn.CrossEntropyLoss(reduction="sum", label_smoothing=HYPER["smoothing"])
    x = x.to(dtype)
    out = {}
    m.eval()
    with torch.no_grad():
        out["eval_logits"] = {"l": m(x).double().numpy()}
    m.train()
    kinks.active = True
    logits = m(x)
    kinks.active = False
    loss = loss_fn(logits, labels)
    (loss / n).backward()
    out["train_logits"] = {"l": logits.detach().double().numpy()}
    out["loss"] = {"l": np.float64(loss.item())}
    out["grad"] = {k: p.grad.double().numpy().copy() for k, p in params.items()}
    opt.step()
    out["after"] = {k: v.detach().double().numpy().copy() for k, v in m.state_dict().items()
                    if v.is_floating_point()}
    out["momentum"] = {k: opt.state[p]["momentum_buffer"].double().numpy() for k, p in params.items()}
    return out


def randomize_bn(model, gen):
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            c = mod.num_features
            mod.weight.data = torch.rand(c, generator=gen) + 0.5
            mod.bias.data = torch.randn(c, generator=gen) * 0.2
            mod.running_mean = torch.randn(c, generator=gen) * 0.2
            mod.running_var = torch.rand(c, generator=gen) * 1.5 + 0.5
            mod.num_batches_tracked = torch.tensor(5, dtype=torch.long)


def group(f, name):
    return {k: np.array(v) for k, v in f[name].items()}


def make_case(arch, classes, n, hw, seed, steps):
    """A random network (random BN statistics too) as a ds checkpoint, a random batch and the
    hyperparameters as the driver's input file. Returns (tmp, model, x, labels, ckpt, inp)."""
    tmp = tempfile.mkdtemp(dir=os.environ.get("DS_TEST_TMP"))
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = tv.build(arch, classes)
    randomize_bn(model, gen)
    ckpt = os.path.join(tmp, "in.h5")
    tv.write_checkpoint(ckpt, model, arch, input_size=hw)
    x = torch.randn(n, 3, hw, hw, generator=gen)
    labels = torch.randint(0, classes, (n,), generator=gen)
    inp = os.path.join(tmp, "input.h5")
    with h5py.File(inp, "w") as f:
        f["x"] = x.permute(0, 2, 3, 1).contiguous().numpy()
        f["labels"] = labels.numpy().astype(np.int32)
        for k, v in dict(HYPER, steps=steps).items():
            f.attrs[k] = float(v)
    return tmp, model, x, labels, ckpt, inp


def run_case(arch, classes, n, hw, grad_tol, seed):
    tmp, model, x, labels, ckpt, inp = make_case(arch, classes, n, hw, seed, HYPER["steps"])
    out, out_ckpt = os.path.join(tmp, "out.h5"), os.path.join(tmp, "out_ckpt.h5")
    r = subprocess.run([DRIVER, ckpt, inp, out, out_ckpt], capture_output=True, text=True)
    if r.returncode != 0:
        report(arch + "/driver", False, r.stderr.strip()[-400:])
        return

    with h5py.File(out, "r") as f:
        eng = {g: group(f, g) for g in f if isinstance(f[g], h5py.Group)}
        eng["eval_logits"] = {"l": f["eval_logits"][()]}
        eng["train_logits"] = {"l": f["train_logits"][()]}
        for k in range(HYPER["steps"]):
            eng["loss%d" % k] = {"l": f["loss%d" % k][()]}
            relu = f["relu%d" % k]
            eng["relu%d" % k] = [np.array(relu[str(i)]) for i in range(len(relu))]
    running = lambda d: {k: v for k, v in d.items() if "running" in k}
    weights = lambda d: {k: v for k, v in d.items() if "running" not in k}
    for k in range(HYPER["steps"]):
        # Each step starts from the engine's own state: after the first step, fp32 rounding
        # can flip a ReLU or max-pool decision on a few of the 8 rows of the last stage,
        # which changes later gradients discretely; from the same state it cannot.
        w, mom = eng["w%d" % k], eng.get("m%d" % k)
        kinks = Kinks(eng["relu%d" % k])
        ref = torch_step(model, torch.float64, x, labels, n, w, mom, kinks)
        calls, disagree = kinks.calls, kinks.disagree
        yard = torch_step(model, torch.float32, x, labels, n, w, mom, Kinks(eng["relu%d" % k]))
        tag = "%s/step%d/" % (arch, k + 1)
        report(tag + "relu_decisions", calls == len(kinks.masks) and disagree == 0,
               "%d ReLUs called, the engine has %d; %d decisions differ outside the band"
               % (calls, len(kinks.masks), disagree))
        if k == 0:
            for q in ("eval_logits", "train_logits"):
                check_tensors(arch + "/" + q, eng[q], ref[q], 1e-4, yard[q])
        check_tensors(tag + "loss", eng["loss%d" % k], ref["loss"], 1e-4, yard["loss"])
        check_tensors(tag + "grads", eng["g%d" % k], ref["grad"], grad_tol, yard["grad"])
        nxt = eng["w%d" % (k + 1)]
        check_tensors(tag + "running_stats", nxt, running(ref["after"]), 1e-4, yard["after"])
        check_tensors(tag + "weights", nxt, weights(ref["after"]), grad_tol, yard["after"], base=w)
        check_tensors(tag + "momentum", eng["m%d" % (k + 1)], ref["momentum"], grad_tol, yard["momentum"])
    final = eng["w%d" % HYPER["steps"]]

    # The checkpoint the engine wrote reads back in PyTorch names and layouts.
    got = tv.read_checkpoint(out_ckpt)
    same = all(k in got and np.array_equal(got[k].numpy(), final[k]) for k in final)
    counters = {int(got[k]) for k in got if k.endswith("num_batches_tracked")}
    keys_ok = set(got) == set(model.state_dict())
    report(arch + "/checkpoint_out", same and keys_ok and counters == {5 + HYPER["steps"]},
           "keys %s, tensors equal %s, counters %s" % (keys_ok, same, counters))


# arch, classes, batch, input size, gradient tolerance, seed. (Before the references
# followed the engine's ReLU decisions, some seeds failed: resnet18 with seed 2 has an input
# 7.7e-8 from 0 in layer2.0.bn1, channel 71, which alone moved 18 tensors.)
# resnet18 (basic blocks, 7x7 stem, max pool: ~11 s) is in the long tier; resnet20 and the
# bottlenecks of resnet50 (same stem) are in the quick one.
CASES = [("resnet20", 10, 4, 32, 2e-3, 1), ("resnet18", 7, 2, 64, 5e-3, 4), ("resnet50", 5, 2, 64, 5e-3, 3)]
LONG_CASES = {"resnet18"}


def main():
    if not os.path.exists(DRIVER):
        report("engine_ref_driver_built", False, DRIVER + " missing (run make)")
        sys.exit(1)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    only = [a for a in sys.argv[1:] if not a.startswith("-")]
    for arch, classes, n, hw, tol, seed in CASES:
        if (not only or arch in only) and (arch not in LONG_CASES or only or long(arch)):
            run_case(arch, classes, n, hw, tol, seed)
    sys.exit(status())


if __name__ == "__main__":
    main()
