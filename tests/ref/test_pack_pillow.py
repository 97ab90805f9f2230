"""dspack's pixels against Pillow + torchvision on the same files.

For --fit crop the reference is torchvision's Resize(S) + CenterCrop(S) on a PIL image, for
--fit squash Pillow's resize((S, S), BILINEAR), each after Image.open(...).convert("RGB"),
as a Python user would pack. The contract: mean |difference| per image <= 2 levels. Images
small enough to decode at full size must match exactly when they are PNGs (only the resize
is involved, and ours is Pillow's arithmetic); large JPEGs go through libjpeg-turbo's DCT
scaling first, which is where the small differences come from.
"""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np
from PIL import Image
import torchvision.transforms as T

from reflib import BIN, report, status  # noqa: E402

DSPACK = os.path.join(BIN, "dspack")


def photo(w, h, seed):
    """A smooth picture with some texture and noise, like a downscaled photograph."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = 128 + 100 * np.sin(x / (7 + seed % 5)) * np.cos(y / 11)
    g = 255 * x / w
    b = 128 + 80 * np.sin((x + y) / 23)
    a = np.stack([r, g, b], -1) + rng.normal(0, 6, (h, w, 3))
    return Image.fromarray(a.clip(0, 255).astype(np.uint8))


def make_images(root):
    items = []  # (relative path, kind)
    os.makedirs(f"{root}/a")

    def save(name, im, **kw):
        im.save(f"{root}/a/{name}", **kw)
        items.append(f"a/{name}")

    for i, (w, h) in enumerate([(400, 350), (350, 400), (224, 224), (100, 60), (257, 999), (500, 375)]):
        save(f"rgb{i}.jpg", photo(w, h, i), quality=90)
        save(f"rgb{i}.png", photo(w, h, i))
    # Large: decoded at 1/2, 1/4 and 1/8 scale in the DCT domain.
    for i, (w, h) in enumerate([(1000, 700), (2000, 1500), (3000, 2200), (4000, 1900)]):
        save(f"big{i}.jpg", photo(w, h, 10 + i), quality=90)
    save("prog.jpg", photo(640, 480, 20), quality=85, progressive=True)
    save("gray.jpg", photo(300, 260, 21).convert("L"), quality=90)
    save("graybig.jpg", photo(1600, 1200, 22).convert("L"), quality=90)
    save("cmyk.jpg", photo(320, 240, 23).convert("CMYK"), quality=95)
    save("cmykbig.jpg", photo(1200, 900, 24).convert("CMYK"), quality=95)
    save("sub444.jpg", photo(333, 222, 25), quality=95, subsampling=0)
    save("palette.png", photo(200, 150, 26).convert("P"))
    save("rgba.png", photo(200, 150, 27).convert("RGBA"))
    save("la.png", photo(150, 200, 28).convert("LA"))
    save("gray.png", photo(180, 120, 29).convert("L"))
    save("pngbig.png", photo(1500, 1000, 30))
    save("png_named.jpg", photo(260, 200, 31), format="PNG")
    return items


def reference(path, size, fit):
    im = Image.open(path).convert("RGB")
    if fit == "crop":
        im = T.CenterCrop(size)(T.Resize(size)(im))
    else:
        im = im.resize((size, size), Image.BILINEAR)
    return np.asarray(im, dtype=np.int16)


def main():
    with tempfile.TemporaryDirectory(dir=os.environ.get("DS_TEST_TMP")) as tmp:
        root = f"{tmp}/tree"
        items = make_images(root)
        with open(f"{tmp}/classes.txt", "w") as f:
            f.write("a\n")
        with open(f"{tmp}/train.txt", "w") as f:
            f.write(f"# ds-manifest 1 root={root}\n")
            for p in items:
                f.write(f"0\t{p}\n")
        for size in (224, 64):
            for fit in ("crop", "squash"):
                out = f"{tmp}/out-{fit}-{size}"
                r = subprocess.run([DSPACK, "-q", "-o", out, "--size", str(size), "--fit", fit, "--no-shuffle",
                                    "--max-reject", "0", f"{tmp}/train.txt"], capture_output=True, text=True)
                report(f"dspack_{fit}_{size}_runs", r.returncode == 0, r.stderr.strip())
                if r.returncode:
                    continue
                with h5py.File(f"{out}/shard-00000.h5", "r") as f:
                    images = f["images"][:].astype(np.int16)
                    paths = [p.decode() if isinstance(p, bytes) else p for p in f["paths"][:]]
                report(f"all_packed_{fit}_{size}", paths == items, f"{len(paths)} of {len(items)}")
                worst, worst_name, exact_png = 0.0, "", True
                for img, p in zip(images, paths):
                    ref = reference(f"{root}/{p}", size, fit)
                    d = np.abs(img - ref)
                    if d.mean() > worst:
                        worst, worst_name = d.mean(), p
                    if p.endswith(".png") and d.max() != 0:
                        exact_png = False
                        print(f"  {p}: png differs, max {d.max()}", file=sys.stderr)
                    if d.mean() > 2:
                        print(f"  {p}: mean |diff| {d.mean():.3f} > 2", file=sys.stderr)
                report(f"pillow_mean_diff_le_2_{fit}_{size}", worst <= 2.0, f"worst {worst:.3f} on {worst_name}")
                print(f"  {fit} {size}: worst mean |diff| {worst:.3f} levels ({worst_name})", file=sys.stderr)
                report(f"png_exact_{fit}_{size}", exact_png)
    sys.exit(status())


if __name__ == "__main__":
    main()
