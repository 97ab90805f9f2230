#!/usr/bin/python3
"""PyTorch side of bench/engine_bench.sh: images/s of one configuration.
   engine_bench_torch.py ARCH SIZE BATCH train|infer default|channels_last STEPS [fp32|bf16]
bf16 (default fp32) is mixed precision as a PyTorch user writes it on the CPU:
torch.autocast("cpu", dtype=torch.bfloat16) around the forward and the loss (training) or
the forward (inference); weights, gradients and the SGD step stay fp32.
TORCH_COMPILE=1 runs the model through torch.compile (PyTorch 2 or later; the C++ compiler
that inductor needs must be on PATH); the first steps compile and are not timed."""
import os, sys, time, torch, torch.nn as nn, torchvision
sys.path.insert(0, "scripts")
import torchvision_to_ds as tv
if len(sys.argv) not in (7, 8):
    sys.exit("usage: " + __doc__.splitlines()[1].strip())
arch, size, batch, mode, fmt, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
precision = sys.argv[7] if len(sys.argv) > 7 else "fp32"
if precision not in ("fp32", "bf16"):
    sys.exit("engine_bench_torch: precision must be fp32 or bf16, not '%s'" % precision)
compiled = os.environ.get("TORCH_COMPILE", "0") not in ("", "0")
if compiled and not hasattr(torch, "compile"):
    sys.exit("engine_bench_torch: TORCH_COMPILE=1 needs PyTorch 2 or later, this is %s" % torch.__version__)
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
classes = 10 if arch == "resnet20" else 1000
m = tv.build(arch, classes)
x = torch.randn(batch, 3, size, size)
y = torch.randint(0, classes, (batch,))
mf = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
m = m.to(memory_format=mf); x = x.contiguous(memory_format=mf)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
lf = nn.CrossEntropyLoss()
# The optimizer holds the parameters themselves, which torch.compile's wrapper shares.
net = torch.compile(m) if compiled else m
net.train(mode == "train")
# enabled=False makes fp32 the same code path, without a second copy of the step.
amp = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
def step():
    if mode == "train":
        opt.zero_grad()
        with amp(): loss = lf(net(x), y)
        loss.backward(); opt.step()
    else:
        with torch.no_grad(), amp(): net(x)
# One warm-up step, as the ds side; a compiled model traces and compiles its forward and
# backward there, and one more step makes sure no late recompilation is timed.
for _ in range(2 if compiled else 1): step()
t0 = time.perf_counter()
for _ in range(steps): step()
print("%.2f" % (steps * batch / (time.perf_counter() - t0)))
