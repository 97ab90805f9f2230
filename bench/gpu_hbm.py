"""HBM calibration for bench/gpu.sh (stage 13): what this GPU's memory moves in PyTorch's own
streaming kernels, the rate every "ms saved" of ds's kernels is measured against.
   gpu_hbm.py [--device cuda] [--mib 1024] [--runs 20]
Three ops on bf16 tensors of MIB MiB each: y.copy_(x) (a read and a write), torch.add(a, b,
out=c) (two reads, a write) and x.sum() (a read), each once to warm up, then the median of
RUNS runs timed by CUDA events (on the CPU, a dry run's: by the clock). Prints one line per op
and then "hbm copy X TB/s, add Y TB/s, sum Z TB/s" (bytes moved over the median time; 1 TB =
1e12 bytes)."""
import argparse, statistics, time
import torch

p = argparse.ArgumentParser()
p.add_argument("--device", default="cuda")
p.add_argument("--mib", type=int, default=1024)
p.add_argument("--runs", type=int, default=20)
a = p.parse_args()
dev = torch.device(a.device)
cuda = dev.type == "cuda"
n = a.mib * (1 << 20) // 2   # bf16 elements
x = torch.full((n,), 1.0, dtype=torch.bfloat16, device=dev)
y, c = torch.empty_like(x), torch.empty_like(x)
b = torch.full_like(x, 2.0)


def median_seconds(fn):
    fn()
    times = []
    for _ in range(a.runs):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


size = n * 2
rates = {}
for name, moved, fn in (("copy", 2 * size, lambda: y.copy_(x)), ("add", 3 * size, lambda: torch.add(x, b, out=c)),
                        ("sum", size, lambda: x.sum())):
    t = median_seconds(fn)
    rates[name] = moved / t / 1e12
    print("%s: %d MiB of bf16, %.1f MB moved, median %.3f ms of %d: %.2f TB/s" % (name, a.mib, moved / 1e6, t * 1e3,
                                                                                a.runs, rates[name]), flush=True)
print("hbm " + ", ".join("%s %.2f TB/s" % (k, v) for k, v in rates.items()))
