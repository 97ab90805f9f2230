"""Races ds against its peers on the same files in the same run and prints the tables of
bench/PEERS.md (markdown). Called by bench/peers_run.sh; each peer runs under the
interpreter of its own virtual environment, given as NAME=PYTHON, or as NAME=n/a: REASON
when it could not be installed (its cells then say so and the other rows go on).

    peers_race.py pack --manifest M --work DIR --dspack BIN --peer NAME=PY ... [--size 256]
                       [--threads 2] [--repeat 3]
    peers_race.py load --shards DIR --beton-raw F --beton-jpg F --manifest M --loader-bench BIN
                       --peer NAME=PY ... [--images N] [--threads 2] [--repeat 3]

pack: every contender packs the manifest REPEAT times, the contenders taking turns, and each
keeps its best images/s (wall clock of the whole command, interpreter start included) and
its least CPU seconds (user + system of the command and all its processes). The last
outputs stay in DIR for the load race and the pixel check. The decode-only bound is
libjpeg-turbo's tjbench on 40 of the files, THREADS / mean seconds per image.

load: images/s of RandomResizedCrop + flip + normalise to 224 in the training order, warm
and cold, from each tool's own format (bench/peers_load.py; ds: build/bench/loader_bench
--augment rrc, the loader threads and the CPU input op's OpenMP threads both THREADS).
A failed command prints "failed" in its cells and its last error line under the table.
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ALONE = "ds loader alone (reads + draws; on a GPU the resize runs there)"
errors = []


def run(name, cmd, env=None):
    """Runs cmd; returns (wall s, CPU s of its process tree, stdout) or None when it fails."""
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
        errors.append(f"{name}: {last}")
        return None
    return dt, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, p.stdout


def peers(specs):
    out = {}
    for s in specs:
        name, py = s.split("=", 1)
        out[name] = py
    return out


def fmt(x, nd=1):
    return f"{x:,.{nd}f}" if isinstance(x, float) else str(x)


def pack(a):
    py = peers(a.peer)
    n = sum(1 for line in open(a.manifest) if line.strip() and not line.startswith("#"))
    w = a.work
    contenders = {"dspack": ([a.dspack, "-q", "-o", f"{w}/ds", "--size", str(a.size), "--fit", "crop", "--threads",
                              str(a.threads), "--max-reject", str(n), a.manifest], f"{w}/ds")}
    label = {"dspack": "dspack (ds)", "simd": "Pillow-SIMD + h5py, Pool(%d)" % a.threads,
             "dali": "DALI CPU: decode + resize + crop, + h5py", "ffcv-raw": "FFCV DatasetWriter, raw",
             "ffcv-jpg": "FFCV DatasetWriter, jpg q90"}
    env_of = {"simd": "simd", "dali": "dali", "ffcv-raw": "ffcv", "ffcv-jpg": "ffcv"}
    for k, venv in env_of.items():
        p = py.get(venv, "n/a: not set up")
        if p.startswith("n/a"):
            continue
        out = f"{w}/{k}.beton" if k.startswith("ffcv") else f"{w}/{k}.h5"
        contenders[k] = ([p, f"{HERE}/peers_pack.py", k, a.manifest, out, "--size", str(a.size), "--threads",
                          str(a.threads)], out)
    best = {k: [0.0, 1e9, 0.0, 0] for k in contenders}  # images/s, CPU s, in-process images/s, runs ok
    for _ in range(a.repeat):
        for k, (cmd, out) in contenders.items():
            shutil.rmtree(out, ignore_errors=True) if k == "dspack" else (os.path.exists(out) and os.remove(out))
            r = run(label[k], cmd)
            if r is None:
                continue
            dt, cpu, stdout = r
            inner = json.loads(stdout.strip().splitlines()[-1])["images_per_second"] if k != "dspack" else n / dt
            b = best[k]
            best[k] = [max(b[0], n / dt), min(b[1], cpu), max(b[2], inner), b[3] + 1]

    # Decode-only bound: tjbench decodes each sampled file at full size for 0.2 s, one thread.
    tj = "n/a: tjbench missing (Debian: libjpeg-turbo-progs)"
    if shutil.which("tjbench"):
        with open(a.manifest) as f:
            root = f.readline().split("root=", 1)[1].rstrip("\n")
            files = [os.path.join(root, line.rstrip("\n").split("\t", 1)[1]) for line in f if line.strip()]
        sample = files[:: max(1, len(files) // 40)][:40]
        secs = []
        for f in sample:
            p = subprocess.run(["tjbench", f, "-benchtime", "0.2", "-warmup", "0.05"], capture_output=True, text=True)
            m = re.search(r"Frame rate:\s*([0-9.]+) fps", p.stdout)
            if m:
                secs.append(1 / float(m.group(1)))
        if secs:
            tj = a.threads * len(secs) / sum(secs)

    ds_rate, ds_cpu = best["dspack"][0], best["dspack"][1]
    print(f"\n### Packing: {n} JPEGs to {a.size}x{a.size}, {a.threads} threads, best of {a.repeat}\n")
    print("| packer | images/s | CPU s / 1,000 images | images/s after start-up | KB stored per image | "
          "ds / peer, images/s | peer / ds, CPU s |")
    print("|---|---|---|---|---|---|---|")
    for k in ["dspack", "simd", "dali", "ffcv-raw", "ffcv-jpg"]:
        if k not in contenders:
            reason = py.get(env_of[k], "n/a: not set up")
            print(f"| {label[k]} | {reason} | | | | | |")
            continue
        rate, cpu, inner, ok = best[k]
        if not ok:
            print(f"| {label[k]} | failed | failed | failed | | | |")
            continue
        ratio = f"{ds_rate / rate:.2f}x" if k != "dspack" and ds_rate else ""
        cratio = f"{cpu / ds_cpu:.2f}x" if k != "dspack" and best['dspack'][3] else ""
        out = contenders[k][1]
        size = (sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out)) if os.path.isdir(out)
                else os.path.getsize(out) if os.path.exists(out) else 0)
        print(f"| {label[k]} | {rate:,.0f} | {1000 * cpu / n:.2f} | {inner:,.0f} | {size / n / 1000:,.1f} | {ratio} | "
              f"{cratio} |")
    if isinstance(tj, float):
        print(f"| libjpeg-turbo decode only (tjbench, bound) | {tj:,.0f} | {1000 * a.threads / tj:.2f} | | | "
              f"dspack at {100 * ds_rate / tj:.0f}% of it | |")
    else:
        print(f"| libjpeg-turbo decode only (tjbench, bound) | {tj} | | | | | |")


def load(a):
    py = peers(a.peer)
    batch = a.batch
    n = sum(1 for line in open(a.manifest) if line.strip() and not line.startswith("#"))
    steps = min(a.images, n) // batch  # whole batches within one epoch, as loader_bench times
    if steps < 2:
        sys.exit(f"peers_race: load needs two batches of {batch}; {a.manifest} has {n} images")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    rows = [("ds loader + resized_crop_u8 (dspack shards)", "ds", None),
            ("FFCV Loader (raw .beton)", "ffcv", a.beton_raw),
            ("FFCV Loader (jpg .beton)", "ffcv", a.beton_jpg),
            ("DALI CPU pipeline (the JPEG files)", "dali", a.manifest)]
    print(f"\n### Loading for training: RandomResizedCrop + flip + normalise to 224, float32, batch {batch}, "
          f"{a.threads} threads, best of {a.repeat}\n")
    print("| loader | warm images/s | warm images / CPU s | cold images/s | cold images / CPU s | "
          "ds / peer, warm | ds / peer, cold |")
    print("|---|---|---|---|---|---|---|")
    result = {}
    for cache in ("warm", "cold"):
        for _ in range(a.repeat):
            for label, peer, src in rows:
                key = (label, cache)
                if peer == "ds":
                    cmd = [a.loader_bench, "--threads", str(a.threads), "--augment", "rrc", "--batch", str(batch),
                           "--images", str(steps * batch), "--cache", cache, a.shards]
                elif py.get(peer, "n/a").startswith("n/a") or not src or not os.path.exists(src):
                    continue
                else:
                    cmd = [py[peer], f"{HERE}/peers_load.py", peer, src, "--images", str(steps * batch), "--batch",
                           str(batch), "--threads", str(a.threads), "--cache", cache, "--repeat", "1"]
                r = run(f"{label} {cache}", cmd, env)
                if r is None:
                    result.setdefault(key, None)
                    continue
                out = r[2]
                if peer == "ds":
                    m = re.search(rf"^{a.threads}\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*$", out, re.M)
                    if not m:
                        errors.append(f"{label} {cache}: no row for {a.threads} threads in loader_bench's output")
                        result.setdefault(key, None)
                        continue
                    rate, per_cpu = float(m.group(3)), float(m.group(4))
                    # The loader alone: what dstrain's CUDA backend is fed (the resize runs there).
                    old = result.get((ALONE, cache)) or (0.0, 0.0)
                    result[(ALONE, cache)] = (max(old[0], float(m.group(1))), max(old[1], float(m.group(2))))
                else:
                    j = json.loads(out.strip().splitlines()[-1])
                    rate, per_cpu = j["images_per_second"], j["images_per_cpu_second"]
                old = result.get(key) or (0.0, 0.0)
                result[key] = (max(old[0], rate), max(old[1], per_cpu))
    ds = {c: result.get((rows[0][0], c)) for c in ("warm", "cold")}
    for label, peer, src in [(ALONE, "ds-alone", None)] + rows:
        if peer not in ("ds", "ds-alone") and py.get(peer, "n/a").startswith("n/a"):
            print(f"| {label} | {py.get(peer, 'n/a: not set up')} | | | | | |")
            continue
        if peer not in ("ds", "ds-alone") and (not src or not os.path.exists(src)):
            print(f"| {label} | n/a: its packer failed (above) | | | | | |")
            continue
        cells = []
        for c in ("warm", "cold"):
            v = result.get((label, c))
            cells += [f"{v[0]:,.0f}", f"{v[1]:,.0f}"] if v else ["failed", "failed"]
        for c in ("warm", "cold"):
            v = result.get((label, c))
            cells.append(f"{ds[c][0] / v[0]:.2f}x" if peer not in ("ds", "ds-alone") and v and ds[c] else "")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--manifest", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--dspack", required=True)
    l = sub.add_parser("load")
    l.add_argument("--shards", required=True)
    l.add_argument("--beton-raw", required=True)
    l.add_argument("--beton-jpg", required=True)
    l.add_argument("--manifest", required=True)
    l.add_argument("--loader-bench", required=True)
    l.add_argument("--images", type=int, default=5000)
    l.add_argument("--batch", type=int, default=256)
    for s in (p, l):
        s.add_argument("--peer", action="append", default=[], help="NAME=PYTHON or NAME=n/a: REASON")
        s.add_argument("--size", type=int, default=256)
        s.add_argument("--threads", type=int, default=2)
        s.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    pack(a) if a.cmd == "pack" else load(a)
    if errors:
        print("\nfailed (last error line of each):")
        for e in dict.fromkeys(errors):
            print("  " + e)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
