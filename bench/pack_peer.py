"""The Python packer a user would write, for bench/pack_bench.sh to race dspack against.

Pillow open -> convert("RGB") -> resize((S, S), BILINEAR) in a multiprocessing.Pool, the
results written in manifest order into one HDF5 file with h5py. Prints one JSON line:
{"images": N, "seconds": T, "images_per_second": R}.

    pack_peer.py MANIFEST OUT.h5 [--size 224] [--workers 2]
"""
import argparse
import json
import multiprocessing
import os
import time

import h5py
import numpy as np
from PIL import Image

SIZE = 224


def load(path):
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR))


def init(size):
    global SIZE
    SIZE = size


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    with open(a.manifest) as f:
        header = f.readline()
        root = header.split("root=", 1)[1].rstrip("\n")
        rows = [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]
    paths = [os.path.join(root, p) for _, p in rows]
    labels = np.array([int(l) for l, _ in rows], dtype=np.int32)
    t0 = time.perf_counter()
    with h5py.File(a.out, "w") as h, multiprocessing.Pool(a.workers, initializer=init, initargs=(a.size,)) as pool:
        images = h.create_dataset("images", (len(paths), a.size, a.size, 3), dtype=np.uint8)
        h["labels"] = labels
        for i, img in enumerate(pool.imap(load, paths, chunksize=16)):
            images[i] = img
    dt = time.perf_counter() - t0
    print(json.dumps({"images": len(paths), "seconds": round(dt, 3), "images_per_second": round(len(paths) / dt, 1)}))


if __name__ == "__main__":
    main()
