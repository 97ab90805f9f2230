#!/usr/bin/python3
"""PyTorch side of bench/engine_bench.sh: images/s of one configuration.
   engine_bench_torch.py ARCH SIZE BATCH train|infer default|channels_last STEPS"""
import sys, time, torch, torch.nn as nn, torchvision
sys.path.insert(0, "scripts")
import torchvision_to_ds as tv
arch, size, batch, mode, fmt, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
torch.set_num_threads(int(__import__("os").environ["OMP_NUM_THREADS"]))
classes = 10 if arch == "resnet20" else 1000
m = tv.build(arch, classes)
x = torch.randn(batch, 3, size, size)
y = torch.randint(0, classes, (batch,))
mf = torch.channels_last if fmt == "channels_last" else torch.contiguous_format
m = m.to(memory_format=mf); x = x.contiguous(memory_format=mf)
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
lf = nn.CrossEntropyLoss()
def step():
    if mode == "train":
        m.train(); opt.zero_grad(); lf(m(x), y).backward(); opt.step()
    else:
        m.eval()
        with torch.no_grad(): m(x)
step()
t0 = time.perf_counter()
for _ in range(steps): step()
print("%.2f" % (steps * batch / (time.perf_counter() - t0)))
