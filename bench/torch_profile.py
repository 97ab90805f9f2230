"""Where PyTorch's ResNet-50 training step spends its time on the CPU: the convolutions
(oneDNN) against everything else, eager or torch.compile'd, channels_last, batch 16 at
224 px, fp32, 2 threads; torch.profiler's self time per step, averaged over 3 steps after
2 untimed ones (which compile). bench/PEERS.md sets it beside ds's own split
(build/bench/ops_bench resnet50).

    build/peers/venv/bin/python3 bench/torch_profile.py eager|compile
"""
import sys
import time

import torch
import torchvision
from torch.profiler import ProfilerActivity, profile

if len(sys.argv) != 2 or sys.argv[1] not in ("eager", "compile"):
    sys.exit("usage: torch_profile.py eager|compile")
mode = sys.argv[1]
torch.set_num_threads(2)
net = torchvision.models.resnet50().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
x = torch.randn(16, 3, 224, 224).to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (16,))
loss_fn = torch.nn.CrossEntropyLoss()
model = torch.compile(net) if mode == "compile" else net


def step():
    opt.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    opt.step()


t = time.time()
for _ in range(2):
    step()
print(f"{mode}: untimed steps (compiling) {time.time() - t:.1f} s")
with profile(activities=[ProfilerActivity.CPU]) as prof:
    t = time.time()
    for _ in range(3):
        step()
    wall = (time.time() - t) / 3
conv = rest = 0.0
for e in prof.key_averages():
    ms = e.self_cpu_time_total / 1e3 / 3
    if "conv" in e.key.lower() or "mkldnn" in e.key.lower():
        conv += ms
    else:
        rest += ms
print(f"{mode}: {1e3 * wall:.0f} ms per step under the profiler ({16 / wall:.2f} images/s); "
      f"self time: convolutions {conv:.0f} ms, everything else {rest:.0f} ms")
