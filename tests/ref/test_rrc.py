"""dstrain --augment rrc against torchvision's RandomResizedCrop.

Boxes: build/drivers/rrc_check draws boxes with the loader's ds_rrc_box from the loader's
per-sample Philox streams; torchvision's RandomResizedCrop.get_params draws as many from
torch's generator. The random numbers differ, so the test compares distributions: two-sample
Kolmogorov-Smirnov statistics of the area fraction h w / (H W), the log aspect log(w / h) and
the box centre relative to the image, on square and non-square images, N = 20000 each. Under
the same rule, D stays below 1.63 sqrt(2 / N) = 0.016 with probability 0.99 (below 0.0195 with
0.999); the threshold is 0.025. A wrong rule is far past it: a ratio drawn uniformly instead of
log-uniformly moves the log-aspect CDF by about 0.07 at ratio 1; one try instead of ten moves
the fallback rate of the 64 x 256 case from about 0.2 to about 0.85. The fallback rates
are compared apart, within 5 standard errors of their difference. Settings that always fall
back (scale ranges past the image, extreme ratios, odd sizes where Python's round meets a
tie) are deterministic: those boxes must equal torchvision's exactly.

Pixels: rrc_check runs the CPU backend's resized_crop_u8 on random images and boxes (down-
and upscaling, box = output size, thin boxes, flips); the reference is
torchvision.transforms.functional.resized_crop on the float image (values 0..255,
antialias=False), then the flip, x / 255 and Normalize with ImageNet's mean/std. Both
compute the bilinear weights in float; the sums may round in another order, so the
tolerance is 1e-5 absolute on the normalised values (|values| < 3, float's spacing there
2.4e-7).
"""
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as TF

from reflib import BUILD, report, status  # noqa: E402

DRIVER = os.path.join(BUILD, "drivers", "rrc_check")
N = 20000
KS_MAX = 0.025


def ours(H, W, n, seed, scale, ratio):
    out = subprocess.run([DRIVER, "boxes", str(H), str(W), str(n), str(seed), scale, ratio],
                         check=True, capture_output=True, text=True).stdout
    a = np.array([list(map(int, l.split())) for l in out.splitlines()], dtype=np.int64)
    return a[:, :4], a[:, 4].astype(bool)


def fraction(text):
    a, _, b = text.partition("/")
    return float(a) / float(b) if b else float(a)


def rng_range(text):
    return [fraction(x) for x in text.split(",")]


def fallback_box(H, W, ratio):
    """torchvision's fallback, as get_params computes it (the box every failed draw ends in)."""
    in_ratio = W / H
    if in_ratio < min(ratio):
        w, h = W, int(round(W / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = H, int(round(H * max(ratio)))
    else:
        w, h = W, H
    return (H - h) // 2, (W - w) // 2, h, w


def theirs(H, W, n, seed, scale, ratio):
    torch.manual_seed(seed)
    img = torch.empty(3, H, W)
    boxes = np.array([T.RandomResizedCrop.get_params(img, scale, ratio) for _ in range(n)], dtype=np.int64)
    # A box equal to the fallback box, counted as a fallback: a random box hits it by chance
    # about as rarely on both sides.
    return boxes, np.all(boxes == np.array(fallback_box(H, W, ratio)), axis=1)


def ks(a, b):
    a, b = np.sort(a), np.sort(b)
    x = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, x, "right") / len(a) - np.searchsorted(b, x, "right") / len(b))))


def features(boxes, H, W):
    top, left, h, w = boxes.T.astype(np.float64)
    return {"area": h * w / (H * W), "log_aspect": np.log(w / h),
            "centre_y": (top + h / 2) / H, "centre_x": (left + w / 2) / W}


def test_distribution(H, W, scale, ratio, seed):
    name = f"rrc boxes {H}x{W} scale {scale} ratio {ratio}"
    sc, ra = rng_range(scale), rng_range(ratio)
    mine, mine_fb = ours(H, W, N, seed, scale, ratio)
    ref, ref_fb = theirs(H, W, N, seed, sc, ra)
    ok = bool(np.all((mine[:, 2] > 0) & (mine[:, 3] > 0) & (mine[:, 0] >= 0) & (mine[:, 1] >= 0) &
                     (mine[:, 0] + mine[:, 2] <= H) & (mine[:, 1] + mine[:, 3] <= W)))
    fm, fr = features(mine, H, W), features(ref, H, W)
    stats = {k: ks(fm[k], fr[k]) for k in fm}
    worst = max(stats, key=stats.get)
    report(f"{name}: boxes inside the image", ok)
    report(f"{name}: KS of area, log aspect, centre < {KS_MAX}", stats[worst] < KS_MAX,
           ", ".join(f"{k} {v:.4f}" for k, v in stats.items()))
    p1, p2 = mine_fb.mean(), ref_fb.mean()
    p = (p1 + p2) / 2
    se = math.sqrt(max(p * (1 - p), 1 / N) * 2 / N)
    # Our flag says exactly when the fallback ran; torchvision's is inferred from the box.
    fb_box = np.array(fallback_box(H, W, ra))
    ok = bool(np.all(mine[mine_fb] == fb_box))
    report(f"{name}: fallback rate", abs(p1 - p2) < 5 * se and ok,
           f"ours {p1:.4f}, torchvision {p2:.4f} (5 se = {5 * se:.4f})")


def test_fallback_exact():
    """Settings where every try fails: the box is torchvision's, deterministically."""
    cases = [(256, 256, "1.5,2", "3/4,4/3"),     # area past the image: the whole image
             (256, 256, "50,60", "2,3"),          # square, ratio above 1: full width, h = round(W / 2)
             (100, 333, "50,60", "0.2,0.5"),      # wide, ratio below 1: full height, w = round(H / 2)
             (9, 5, "50,60", "2,2"),              # h = round(2.5) = 2: ties to even as Python
             (7, 5, "50,60", "0.5,0.5"),          # w = round(3.5) = 4
             (300, 200, "50,60", "3/4,4/3"),      # tall: full width, h = round(200 / 0.75)
             (300, 250, "50,60", "3/4,4/3"),      # aspect in range: the whole image
             (13, 1000, "2,4", "1,1")]            # very wide, square boxes only
    for H, W, scale, ratio in cases:
        mine, fb = ours(H, W, 50, 7, scale, ratio)
        torch.manual_seed(7)
        want = np.array(T.RandomResizedCrop.get_params(torch.empty(3, H, W), rng_range(scale), rng_range(ratio)))
        report(f"rrc fallback {H}x{W} scale {scale} ratio {ratio}", bool(fb.all() and np.all(mine == want)),
               f"ours {mine[0].tolist()} (fallback {int(fb.sum())}/50), torchvision {want.tolist()}")


def test_pixels(tmp):
    rng = np.random.default_rng(5)
    H, W, crop = 40, 52, 16
    boxes = [(0, 0, 40, 52, 0), (3, 5, 16, 16, 0), (3, 5, 16, 16, 1), (10, 7, 8, 30, 1), (0, 51, 40, 1, 0),
             (39, 0, 1, 52, 1), (5, 9, 33, 17, 0), (2, 2, 5, 7, 1)]
    n = len(boxes)
    imgs = rng.integers(0, 256, (n, H, W, 3), dtype=np.uint8)
    src, dst = os.path.join(tmp, "in.u8"), os.path.join(tmp, "out.f32")
    imgs.tofile(src)
    stdin = "".join(" ".join(map(str, b)) + "\n" for b in boxes)
    subprocess.run([DRIVER, "pixels", str(n), str(H), str(W), str(crop), src, dst], input=stdin, text=True,
                   check=True)
    got = np.fromfile(dst, dtype=np.float32).reshape(n, crop, crop, 3)
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
    worst = 0.0
    for i, (top, left, h, w, flip) in enumerate(boxes):
        x = torch.from_numpy(imgs[i]).permute(2, 0, 1).float()
        y = TF.resized_crop(x, top, left, h, w, [crop, crop], antialias=False)
        if flip:
            y = TF.hflip(y)
        y = (y / 255 - mean) / std
        worst = max(worst, float(np.abs(got[i] - y.permute(1, 2, 0).numpy()).max()))
    report("rrc pixels vs torchvision resized_crop (bilinear, antialias=False) + flip + normalize", worst <= 1e-5,
           f"max |difference| {worst:.3g} (tolerance 1e-5)")


def main():
    if not os.path.exists(DRIVER):
        print(f"FAIL rrc: {DRIVER} is missing (make builds it)")
        sys.exit(1)
    test_distribution(256, 256, "0.08,1", "3/4,4/3", 1)
    test_distribution(224, 320, "0.08,1", "3/4,4/3", 2)
    test_distribution(64, 256, "0.25,0.4", "3/4,4/3", 3)    # falls back on about 1 in 5
    test_distribution(300, 180, "0.25,0.5", "1/2,3", 4)     # other ranges, tall image
    test_fallback_exact()
    with tempfile.TemporaryDirectory(dir=os.environ.get("DS_TEST_TMP")) as tmp:
        test_pixels(tmp)
    sys.exit(status())


if __name__ == "__main__":
    main()
