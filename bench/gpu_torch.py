"""PyTorch's side of bench/gpu.sh: ResNet-50 images/s on synthetic data already on the device.
   gpu_torch.py [--device cuda] [--size 224] [--steps 40] [--warmup 15] [--compile]
                train|infer BATCH bf16|tf32|fp32
bf16 is AMP (autocast to bfloat16, fp32 weights), tf32 is fp32 with TensorFloat-32 matmuls and
convolutions, fp32 without them (gpu.sh's dry run on a CPU, which has no tf32); channels_last, cuDNN autotuning, SGD with Nesterov momentum. Prints
"images_per_sec N". torchvision's resnet50 when it is installed; otherwise the same network
defined here (torchvision's layout: Bottleneck with the stride on the 3x3 convolution), so a
venv with torch alone will do."""
import argparse, time
import torch
import torch.nn as nn


def resnet50(classes=1000):
    try:
        import torchvision
        return torchvision.models.resnet50(num_classes=classes)
    except ImportError:
        pass

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            return torch.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--profile", metavar="FILE",
                    help="after the timed steps, profile 2 more and write each GPU kernel's time per step to FILE")
    ap.add_argument("mode", choices=("train", "infer"))
    ap.add_argument("batch", type=int)
    ap.add_argument("precision", choices=("bf16", "tf32", "fp32"))
    a = ap.parse_args()
    cuda = a.device.startswith("cuda")
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = a.precision != "fp32"
        torch.backends.cudnn.allow_tf32 = a.precision != "fp32"
    model = resnet50().to(a.device).to(memory_format=torch.channels_last)
    x = torch.randn(a.batch, 3, a.size, a.size, device=a.device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), device=a.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    amp = a.precision == "bf16"

    def autocast():
        return torch.autocast("cuda" if cuda else "cpu", dtype=torch.bfloat16, enabled=amp)

    if a.mode == "train":
        model.train()

        def step():
            with autocast():
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    else:
        model.eval()

        def step():
            with torch.no_grad(), autocast():
                model(x)
    if a.compile:
        step = torch.compile(step)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for _ in range(a.warmup):
        step()
    sync()
    t = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    print("images_per_sec %.1f" % (a.steps * a.batch / (time.perf_counter() - t)))
    if a.profile:
        profile(step, sync, a.profile)


def profile(step, sync, path, steps=2):
    """Each GPU kernel's time per step over `steps` steps, longest first, as tab-separated
    milliseconds, launches per step and name (bench/gpu_profile.sh's format)."""
    from torch.profiler import profile as prof, ProfilerActivity
    with prof(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(steps):
            step()
        sync()
    rows = {}
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            r = rows.setdefault(e.name, [0.0, 0])
            r[0] += getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            r[1] += 1
    with open(path, "w") as f:
        for name, (us, n) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
            f.write("%.3f\t%g\t%s\n" % (us / 1000 / steps, n / steps, name))


if __name__ == "__main__":
    main()
