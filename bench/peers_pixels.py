"""Do the peers' packers compute what dspack computes? Their 256-px images of the same JPEGs
next to dspack's, pixel by pixel, so that a faster peer that computes something else shows.

    peers_pixels.py dump-ffcv BETON OUT.npy      (under FFCV's environment: the images as stored)
    peers_pixels.py compare MANIFEST DS_DIR [--simd H5] [--dali H5] [--ffcv-raw NPY] [--ffcv-jpg NPY]
                    [--note PEER=TEXT ...]       (under an environment with Pillow and h5py)

Every input holds the manifest's first N images in manifest order (dspack --no-shuffle;
bench/peers_pack.py --limit N). dspack, the simd packer and DALI all store torchvision's
Resize(256) + CenterCrop(256) and are compared with dspack's shard directly. FFCV stores
another geometry (the longer side 256: 256x192), which no dspack option gives, so its
images are compared with stock Pillow's BILINEAR resize to that geometry: the row "dspack
vs Pillow" shows that this stands for dspack's resize (Pillow's pixels are dspack's
reference, libcommon/image.h). Prints one table row per peer: mean and max absolute
difference in grey levels (0-255) and the share of bytes that differ.
"""
import argparse
import glob
import os
import sys

import numpy as np


def dump_ffcv(beton, out):
    from ffcv.fields.basics import IntDecoder
    from ffcv.fields.decoders import SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption

    loader = Loader(beton, batch_size=1, num_workers=1, order=OrderOption.SEQUENTIAL, drop_last=False,
                    pipelines={"image": [SimpleRGBImageDecoder()], "label": [IntDecoder()]})
    # Copied at once: the loader hands out views of buffers it reuses for later batches.
    np.save(out, np.concatenate([np.array(img, copy=True) for img, _ in loader]))


def row(name, got, ref, note=""):
    if got is None:
        print(f"| {name} | {note or 'n/a'} | | | | |")
        return
    if got.shape != ref.shape:
        print(f"| {name} | failed: shape {got.shape} against {ref.shape} | | | | |")
        return
    got, ref = got.astype(np.int16), ref.astype(np.int16)
    d = np.abs(got - ref)
    # A window one pixel off (another rounding of the centre crop's corner) would show as a
    # large difference everywhere: the interior's best shift by up to one pixel tells it apart
    # from a different filter.
    shifts = {(dy, dx): np.abs(got[:, 2:-2, 2:-2] - ref[:, 2 + dy:ref.shape[1] - 2 + dy, 2 + dx:ref.shape[2] - 2 + dx]).mean()
              for dy in (-1, 0, 1) for dx in (-1, 0, 1)}
    (dy, dx), best = min(shifts.items(), key=lambda kv: kv[1])
    shifted = "same window" if (dy, dx) == (0, 0) else f"{best:.3f} shifted by ({dy:+d}, {dx:+d}) px"
    print(f"| {name} | {got.shape[0]} images {got.shape[2]}x{got.shape[1]} | {d.mean():.3f} | {d.max()} | "
          f"{100 * np.count_nonzero(d) / d.size:.1f}% | {shifted} |")


def compare(a):
    import h5py
    from PIL import Image

    with open(a.manifest) as f:
        root = f.readline().split("root=", 1)[1].rstrip("\n")
        paths = [os.path.join(root, line.rstrip("\n").split("\t", 1)[1]) for line in f if line.strip()]
    shards = sorted(glob.glob(os.path.join(a.ds, "shard-*.h5")))
    ds = np.concatenate([h5py.File(s, "r")["images"][:] for s in shards])
    paths = paths[:len(ds)]
    notes = dict(n.split("=", 1) for n in a.note)

    def load(kind, path):
        if kind in notes or not path:
            return None
        try:
            if path.endswith(".npy"):
                return np.load(path)
            with h5py.File(path, "r") as h:
                return h["images"][:]
        except (OSError, ValueError, KeyError) as e:
            notes[kind] = f"failed: {e}"
            return None

    def pillow(size_of):
        """Stock Pillow: open, convert("RGB"), resize to the geometry size_of(w, h) gives."""
        out = []
        for p in paths:
            with Image.open(p) as im:
                im = im.convert("RGB")
                out.append(np.asarray(im.resize(size_of(*im.size), Image.BILINEAR)))
        return np.stack(out)

    def crop_geometry(w, h, s=256):
        return (s, int(s * h / w)) if w <= h else (int(s * w / h), s)

    def long_side(w, h, s=256):
        # FFCV's resizer: ratio = s / max(w, h), cv2.resize to (int(w * ratio), int(h * ratio)).
        r = s / max(w, h)
        return int(w * r), int(h * r)

    print(f"{len(ds)} images of {a.manifest}; Pillow {Image.__version__}")
    print("| packer | images | mean abs diff | max abs diff | bytes differing | best window (mean abs diff) |")
    print("|---|---|---|---|---|---|")
    resized = pillow(crop_geometry)
    left = [int(round((r.shape[1] - 256) / 2.0)) for r in resized]  # torchvision's CenterCrop
    top = [int(round((r.shape[0] - 256) / 2.0)) for r in resized]
    ref = np.stack([np.asarray(r)[t:t + 256, l:l + 256] for r, t, l in zip(resized, top, left)])
    row("dspack vs stock Pillow (Resize(256) + CenterCrop(256))", ds, ref)
    row("Pillow-SIMD + h5py vs dspack", load("simd", a.simd), ds, notes.get("simd", ""))
    row("DALI CPU vs dspack", load("dali", a.dali), ds, notes.get("dali", ""))
    ffcv_raw, ffcv_jpg = load("ffcv-raw", a.ffcv_raw), load("ffcv-jpg", a.ffcv_jpg)
    long_ref = pillow(long_side) if ffcv_raw is not None or ffcv_jpg is not None else None
    row("FFCV raw vs Pillow at FFCV's 256x192", ffcv_raw, long_ref, notes.get("ffcv-raw", ""))
    row("FFCV jpg vs Pillow at FFCV's 256x192", ffcv_jpg, long_ref, notes.get("ffcv-jpg", ""))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump-ffcv")
    d.add_argument("beton")
    d.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("manifest")
    c.add_argument("ds")
    for k in ("simd", "dali", "ffcv-raw", "ffcv-jpg"):
        c.add_argument(f"--{k}")
    c.add_argument("--note", action="append", default=[], help="PEER=TEXT: the row says TEXT (n/a: why)")
    a = ap.parse_args()
    if a.cmd == "dump-ffcv":
        dump_ffcv(a.beton, a.out)
    else:
        compare(a)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
