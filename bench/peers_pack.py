"""The peers of dspack, for bench/peers_run.sh to race it against: each one packs the JPEGs
of a dsplit manifest at 256 px the way its own users are told to.

    peers_pack.py PEER MANIFEST OUT [--size 256] [--threads 2] [--limit N]

PEER (each runs under its own virtual environment, bench/peers.sh --all):
  simd      Pillow-SIMD + h5py, multiprocessing.Pool(threads): bench/pack_peer.py's packer
            with torchvision's Resize(S) + CenterCrop(S) geometry, dspack's --fit crop
  dali      NVIDIA DALI on the CPU: fn.readers.file -> fn.decoders.image(device="cpu") ->
            fn.resize(resize_shorter=S) -> fn.crop(S, S), num_threads=threads; the batches
            written to one HDF5 file with h5py, as the simd packer does
  ffcv-raw  FFCV's DatasetWriter, RGBImageField(write_mode="raw", max_resolution=S) (the
            longer side becomes S: 256x192 from 500x375), num_workers=threads; the images
            opened with Pillow, as torchvision's ImageFolder in FFCV's ImageNet example
  ffcv-jpg  the same with write_mode="jpg" (re-encoded with OpenCV at quality 90)

OUT is an .h5 file (simd, dali) or a .beton file (ffcv-*). Prints one JSON line:
{"images": N, "seconds": T, "images_per_second": R}, T from the first image read to the
output closed (no interpreter start or imports: the caller times the whole command too).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

SIZE = 256


def read_manifest(path, limit):
    with open(path) as f:
        header = f.readline()
        root = header.split("root=", 1)[1].rstrip("\n")
        rows = [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]
    if limit:
        rows = rows[:limit]
    return [os.path.join(root, p) for _, p in rows], np.array([int(l) for l, _ in rows], dtype=np.int32)


def fit_crop(im, size):
    """torchvision's Resize(size) + CenterCrop(size) on a Pillow image (dspack --fit crop)."""
    from PIL import Image

    w, h = im.size
    rw, rh = (size, int(size * h / w)) if w <= h else (int(size * w / h), size)
    im = im.resize((rw, rh), Image.BILINEAR)
    left, top = int(round((rw - size) / 2.0)), int(round((rh - size) / 2.0))
    return im.crop((left, top, left + size, top + size))


def simd_load(path):
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(fit_crop(im.convert("RGB"), SIZE))


def simd_init(size):
    global SIZE
    SIZE = size


def pack_simd(paths, labels, out, size, threads):
    import multiprocessing

    import h5py

    with h5py.File(out, "w") as h, multiprocessing.Pool(threads, initializer=simd_init, initargs=(size,)) as pool:
        images = h.create_dataset("images", (len(paths), size, size, 3), dtype=np.uint8)
        h["labels"] = labels
        for i, img in enumerate(pool.imap(simd_load, paths, chunksize=16)):
            images[i] = img


def pack_dali(paths, labels, out, size, threads):
    import h5py
    from nvidia.dali import fn, pipeline_def, types

    batch = 64

    # device_id=None: no GPU is looked for; every operator below is a CPU one.
    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None, prefetch_queue_depth=2)
    def pipe():
        jpegs, lab = fn.readers.file(files=paths, labels=labels.tolist(), random_shuffle=False,
                                     pad_last_batch=True, name="reader")
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_shorter=size, interp_type=types.INTERP_LINEAR, antialias=True)
        images = fn.crop(images, crop=(size, size))  # centred: crop_pos_x = crop_pos_y = 0.5
        return images, lab

    p = pipe()
    p.build()
    n = len(paths)
    with h5py.File(out, "w") as h:
        dset = h.create_dataset("images", (n, size, size, 3), dtype=np.uint8)
        h["labels"] = labels
        for start in range(0, n, batch):
            images, _ = p.run()
            arr = images.as_array()  # (batch, size, size, 3): every sample has the crop's shape
            k = min(batch, n - start)
            dset[start:start + k] = arr[:k]


def pack_ffcv(paths, labels, out, size, threads, mode):
    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from PIL import Image

    class Folder:
        """What torchvision.datasets.ImageFolder returns: (RGB Pillow image, label)."""

        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            with Image.open(paths[i]) as im:
                return im.convert("RGB"), int(labels[i])

    writer = DatasetWriter(out, {"image": RGBImageField(write_mode=mode, max_resolution=size, jpeg_quality=90),
                                 "label": IntField()}, num_workers=threads)
    writer.from_indexed_dataset(Folder(), chunksize=100)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=["simd", "dali", "ffcv-raw", "ffcv-jpg"])
    ap.add_argument("manifest")
    ap.add_argument("out")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="pack only the first N images")
    a = ap.parse_args()
    paths, labels = read_manifest(a.manifest, a.limit)
    # The peer's modules are imported before the clock starts (the caller's whole-command time
    # has them): FFCV's import brings PyTorch and numba, seconds on 2 cores.
    if a.peer == "simd":
        import h5py  # noqa: F401
        import PIL.Image  # noqa: F401
    elif a.peer == "dali":
        import h5py  # noqa: F401,F811
        import nvidia.dali  # noqa: F401
    else:
        import ffcv.fields  # noqa: F401
        import ffcv.writer  # noqa: F401
        import PIL.Image  # noqa: F401,F811
    t0 = time.perf_counter()
    if a.peer == "simd":
        pack_simd(paths, labels, a.out, a.size, a.threads)
    elif a.peer == "dali":
        pack_dali(paths, labels, a.out, a.size, a.threads)
    else:
        # FFCV draws a progress bar on stderr; keep the caller's log to errors.
        import contextlib

        with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):
            pack_ffcv(paths, labels, a.out, a.size, a.threads, a.peer.split("-")[1])
    dt = time.perf_counter() - t0
    print(json.dumps({"images": len(paths), "seconds": round(dt, 3), "images_per_second": round(len(paths) / dt, 1)}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
