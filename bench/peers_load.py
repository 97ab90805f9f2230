"""The peers of ds's training loader (build/bench/loader_bench --augment rrc), for
bench/peers_run.sh: RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3) to CROP x CROP, a random
horizontal flip and (x / 255 - mean) / std to float32 NHWC, in random order, from each
tool's own format, THREADS threads.

    peers_load.py PEER SOURCE [--images N] [--batch 256] [--crop 224] [--threads 2]
                  [--cache warm|cold] [--repeat R]

PEER (each under its own virtual environment, bench/peers.sh --all):
  ffcv  SOURCE is a .beton (bench/peers_pack.py ffcv-raw or ffcv-jpg): Loader(order=RANDOM,
        num_workers=THREADS, os_cache=True), pipeline RandomResizedCropRGBImageDecoder ->
        RandomHorizontalFlip -> NormalizeImage(float32) -> ToTensor, as FFCV's ImageNet
        example writes it for the CPU part
  dali  SOURCE is a dsplit manifest of JPEGs (DALI has no packed format of its own: its
        readers take the JPEG files, or TFRecord / RecordIO files of the same JPEGs):
        fn.readers.file over the files in a random order -> fn.decoders.image_random_crop
        (device="cpu": decodes only the crop's region) -> fn.resize(CROP, CROP) ->
        fn.crop_mirror_normalize(mirror=coin flip, float32, HWC), num_threads=THREADS

Each pass is a fresh loader over N images (whole batches). Its first batch is not timed
(FFCV compiles its pipeline with numba and DALI fills its queues there); the rate is the
images of the later batches over the time from the first batch to the last, and images per
CPU second is over the same span (the whole process: both run their workers as threads).
warm: one untimed pass first, so the files are in the page cache. cold: before each pass
the files' cached pages are dropped (fdatasync + posix_fadvise DONTNEED, as loader_bench
--cache cold does; no privilege needed), with no loader holding them mapped. Prints one
JSON line with the best pass: {"images": N, "images_per_second": R, "images_per_cpu_second": C}.
"""
import argparse
import gc
import json
import os
import resource
import time

import numpy as np

MEAN = np.array([0.485, 0.456, 0.406]) * 255
STD = np.array([0.229, 0.224, 0.225]) * 255


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def drop_cache(files):
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(batches, steps, batch):
    """Consumes `steps` batches; returns (images/s, images per CPU second) after the first."""
    it = iter(batches)
    next(it)
    t0, c0, done = time.perf_counter(), cpu_seconds(), 0
    for _ in range(steps - 1):
        next(it)
        done += batch
    dt, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return done / dt, done / cpu if cpu > 0 else 0.0


def ffcv_passes(a, steps):
    from ffcv.fields.basics import IntDecoder
    from ffcv.fields.rgb_image import RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, ToTensor

    def loader(seed):
        image = [RandomResizedCropRGBImageDecoder((a.crop, a.crop), scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)),
                 RandomHorizontalFlip(), NormalizeImage(MEAN, STD, np.float32), ToTensor()]
        return Loader(a.source, batch_size=a.batch, num_workers=a.threads, os_cache=True,
                      order=OrderOption.RANDOM, seed=seed, drop_last=True,
                      pipelines={"image": image, "label": [IntDecoder(), ToTensor()]})

    for k in range(a.repeat + 1):
        yield (lambda k=k: loader(k)), [a.source]


def dali_passes(a, steps):
    from nvidia.dali import fn, pipeline_def, types

    with open(a.source) as f:
        root = f.readline().split("root=", 1)[1].rstrip("\n")
        rows = [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]
    files = [os.path.join(root, p) for _, p in rows]

    def loader(seed):
        # A random order over the whole set, as FFCV's RANDOM and ds's loader draw it. The
        # reader's own random_shuffle fills a 1,024-sample buffer first, which a cold pass
        # would read untimed in its first batch.
        order = np.random.default_rng(seed).permutation(len(files))

        @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=None, seed=seed + 1)
        def pipe():
            jpegs, labels = fn.readers.file(files=[files[i] for i in order], labels=[int(rows[i][0]) for i in order],
                                            random_shuffle=False, name="reader")
            images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                   random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3],
                                                   num_attempts=10)
            images = fn.resize(images, resize_x=a.crop, resize_y=a.crop, interp_type=types.INTERP_LINEAR,
                               antialias=True)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="HWC", mean=MEAN.tolist(),
                                              std=STD.tolist(), mirror=fn.random.coin_flip(probability=0.5))
            return images, labels

        p = pipe()
        p.build()

        def run():
            while True:
                yield p.run()

        return run()

    for k in range(a.repeat + 1):
        yield (lambda k=k: loader(k)), files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=["ffcv", "dali"])
    ap.add_argument("source")
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", choices=["warm", "cold"], default="warm")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    steps = max(2, a.images // a.batch)
    passes = ffcv_passes if a.peer == "ffcv" else dali_passes
    best = (0.0, 0.0)
    for k, (make, files) in enumerate(passes(a, steps)):
        if a.cache == "cold":
            drop_cache(files)
        rate = timed(make(), steps, a.batch)
        gc.collect()  # the loader's mapping of the file goes before the next drop
        if k > 0 or a.cache == "cold":
            best = max(best, rate)
    print(json.dumps({"images": (steps - 1) * a.batch, "images_per_second": round(best[0], 1),
                      "images_per_cpu_second": round(best[1], 1)}))


if __name__ == "__main__":
    main()
