#!/usr/bin/python3
"""compare.py: runs of dstrain side by side, in one table and one picture.

    scripts/compare.py [--json] [--png FILE] [--allow-different] RUN_DIR...   (make compare RUNS="...")

Each RUN_DIR is a dstrain run directory: its metrics.jsonl (read as it is, so a run still
going or one that was resumed compares as far as it got) and its newest checkpoint (last.h5,
else the highest ckpt-*.h5), whose attributes say how it was run: the options (`config`),
the ranks (`world_size`), the global batch, the learning rate in effect, the precision.

The table (Markdown, or --json) has one row per run: what differs between the runs (its
label), ranks (as its newest checkpoint records them: a run resumed on another rank count at
the same global batch shows the last), global batch, lr, epochs done of planned, the final and the best validation
top-1 / top-5, the standard protocol's top-1 where it was measured apart, the training time
(the sum of the finished epochs' seconds; validation not counted), images/s in total and per
rank, the share of time spent waiting for data, and the speed-up and parallel efficiency
against the first run (images/s over the first run's; efficiency = speed-up over the ratio
of ranks).

The picture (--png, gnuplot) overlays the runs: training and validation loss and validation
top-1 (solid) and top-5 (dashed) against the epoch, and the same against training time, the
axis that shows what more ranks buy. Each run is labelled by the settings that differ.

Runs of different architectures or training data (the --train directory, its image size or
class count) are refused, naming them, unless --allow-different.

Exit status: 0; 1 when a run cannot be read (no metrics, no checkpoint) or the runs differ
in what must be the same; 2 for a usage error.
"""
import argparse
import glob
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile

PROG = "compare"

# The settings a label may name, in this order: (key in the run's settings, how it is said).
LABEL_KEYS = [("ranks", "ranks"), ("global_batch", "global batch"), ("batch", "batch"), ("accum", "accum"),
              ("lr", "lr"), ("precision", "precision"), ("device", "device"), ("augment", "augment"),
              ("crop_schedule", "crops"), ("epochs", "epochs"), ("schedule", "schedule"),
              ("warmup_epochs", "warmup"), ("wd", "wd"), ("label_smoothing", "smoothing"), ("seed", "seed"),
              ("arch", "arch"), ("data", "data")]


def die(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(1)


def newest_checkpoint(run):
    last = os.path.join(run, "last.h5")
    if os.path.exists(last):
        return last
    ckpts = sorted(glob.glob(os.path.join(run, "ckpt-*.h5")))
    ckpts = [c for c in ckpts if not c.endswith(".tmp")]
    return ckpts[-1] if ckpts else None


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def read_settings(run):
    """How the run was set up, from its newest checkpoint's attributes."""
    import h5py
    ck = newest_checkpoint(run)
    if ck is None:
        die(f"{run}: no checkpoint yet (the first is written at the first epoch's end)")
    try:
        with h5py.File(ck, "r") as f:
            a = f.attrs
            config = json.loads(text(a["config"])) if "config" in a else {}
            s = {
                "checkpoint": ck,
                "arch": text(a.get("arch", config.get("arch", "?"))),
                "ranks": int(a.get("world_size", 1)) or 1,
                "global_batch": int(a.get("global_batch", 0)),
                "lr": float(a["lr_effective"]) if "lr_effective" in a else None,
                "precision": text(a.get("precision", config.get("precision", "?"))),
                "device": text(a.get("device", config.get("device", "?"))),
                "num_classes": int(a.get("num_classes", 0)),
                "data_size": f"{int(a.get('data_height', 0))}x{int(a.get('data_width', 0))}",
            }
    except (OSError, KeyError, ValueError) as e:
        die(f"{ck}: cannot read the run's settings: {e}")
    train = config.get("train")
    s["data"] = "%s (%s, %d classes)" % (os.path.realpath(train) if train else "?", s["data_size"], s["num_classes"])
    s["batch"] = config.get("batch")
    s["accum"] = config.get("accum")
    s["epochs"] = config.get("epochs")
    s["augment"] = config.get("augment")
    s["schedule"] = config.get("schedule")
    s["warmup_epochs"] = config.get("warmup-epochs")
    s["wd"] = config.get("wd")
    s["label_smoothing"] = config.get("label-smoothing")
    s["seed"] = config.get("seed")
    crop, lo = config.get("crop"), config.get("min-crop") or 0
    s["crop_schedule"] = (f"{lo} to {crop} over epochs {config.get('ramp-start')}-{config.get('ramp-end')}"
                          if lo else f"{crop}")
    return s


def read_metrics(run):
    """Step rows and epoch rows of metrics.jsonl; a last line still being written is left out."""
    path = os.path.join(run, "metrics.jsonl")
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        die(f"{path}: {e.strerror}")
    steps, epochs = [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            if i == len(lines) - 1:
                continue
            die(f"{path}:{i + 1}: not a JSON row")
        (epochs if "seconds" in row else steps).append(row)
    if not steps and not epochs:
        die(f"{path}: no rows yet")
    return steps, epochs


def summarise(run, s, steps, epochs):
    r = {"run": run, "label": None, "ranks": s["ranks"], "global_batch": s["global_batch"], "lr": s["lr"],
         "precision": s["precision"], "epochs_done": len(epochs), "epochs_planned": s["epochs"]}
    val = [e for e in epochs if "val_top1" in e]
    r["final_top1"] = val[-1]["val_top1"] if val else None
    r["final_top5"] = val[-1]["val_top5"] if val else None
    best = max(val, key=lambda e: e["val_top1"]) if val else None
    r["best_top1"] = best["val_top1"] if best else None
    r["best_top5"] = best["val_top5"] if best else None
    r["best_epoch"] = best["epoch"] if best else None
    std = [e["standard"]["top1"] for e in val if isinstance(e.get("standard"), dict)]
    r["standard_top1"] = std[-1] if std else None
    seconds = sum(e["seconds"] for e in epochs)
    images = sum(e["images_per_sec"] * e["seconds"] for e in epochs)
    r["train_seconds"] = seconds
    r["images_per_sec"] = images / seconds if seconds > 0 else None
    r["images_per_sec_per_rank"] = r["images_per_sec"] / s["ranks"] if r["images_per_sec"] else None
    r["data_wait"] = (sum(e.get("data_wait", 0) * e["seconds"] for e in epochs) / seconds) if seconds > 0 else None
    r["last_step"] = max([x["step"] for x in steps + epochs])
    return r


def labels(settings):
    """Per run: the settings that differ between the runs, as 'ranks 2, lr 0.05'."""
    differ = [(k, say) for k, say in LABEL_KEYS if len({json.dumps(s.get(k), sort_keys=True) for s in settings}) > 1]
    out = []
    for s in settings:
        parts = []
        for k, say in differ:
            v = s.get(k)
            parts.append(f"{say} {v:.6g}" if isinstance(v, float) else f"{say} {v}")
        out.append(", ".join(parts))
    return out


def check_same(runs, settings, allow):
    for key, what in (("arch", "architecture"), ("data", "training data")):
        values = {s[key] for s in settings}
        if len(values) > 1 and not allow:
            listing = "; ".join(f"{run}: {s[key]}" for run, s in zip(runs, settings))
            die(f"the runs differ in {what} ({listing}); compare such runs with --allow-different")


def fmt(v, kind):
    if v is None:
        return "-"
    if kind == "pct":
        return f"{100 * v:.2f}%"
    if kind == "s":
        return f"{v:.1f} s" if v < 120 else f"{v / 60:.1f} min" if v < 7200 else f"{v / 3600:.2f} h"
    if kind == "rate":
        return f"{v:.1f}"
    if kind == "x":
        return f"{v:.2f}x"
    if kind == "share":
        return f"{v:.3f}"
    if kind == "g":
        return f"{v:.6g}"
    return str(v)


def markdown(rows):
    cols = [("run", "label", None), ("ranks", "ranks", None), ("global batch", "global_batch", None),
            ("lr", "lr", "g"), ("epochs", "epochs", None), ("final top-1", "final_top1", "pct"),
            ("final top-5", "final_top5", "pct"), ("best top-1", "best_top1", "pct"),
            ("best top-5", "best_top5", "pct"), ("standard top-1", "standard_top1", "pct"),
            ("training time", "train_seconds", "s"), ("images/s", "images_per_sec", "rate"),
            ("images/s per rank", "images_per_sec_per_rank", "rate"), ("data wait", "data_wait", "share"),
            ("speed-up", "speedup", "x"), ("efficiency", "efficiency", "pct")]
    out = ["| " + " | ".join(c[0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        r = dict(r, epochs=f"{r['epochs_done']} of {r['epochs_planned']}")
        out.append("| " + " | ".join(fmt(r.get(key), kind) for _, key, kind in cols) + " |")
    return "\n".join(out)


def plot(png, runs, rows, curves, title):
    if not shutil.which("gnuplot"):
        die("gnuplot is not installed (make deps)")
    tmp = tempfile.mkdtemp()
    try:
        scale, unit = 1.0, "s"
        longest = max((r["train_seconds"] for r in rows), default=0)
        if longest > 7200:
            scale, unit = 3600.0, "h"
        elif longest > 120:
            scale, unit = 60.0, "min"
        plots = {"loss_e": [], "acc_e": [], "loss_t": [], "acc_t": []}
        for i, ((steps, epochs), r) in enumerate(zip(curves, rows)):
            label = (r["label"] or os.path.basename(os.path.normpath(r["run"]))).replace('"', "'")
            st, ep = os.path.join(tmp, f"s{i}.dat"), os.path.join(tmp, f"e{i}.dat")
            with open(st, "w") as f:
                for x in steps:
                    f.write(f"{x['epoch']} {x['loss']}\n")
            t = 0.0
            with open(ep, "w") as f:
                for e in epochs:
                    t += e["seconds"]
                    f.write("%s %s %s %s %s %s\n" % (e["epoch"], e["loss"], e.get("val_loss", "?"),
                                                     e.get("val_top1", "?"), e.get("val_top5", "?"), t / scale))
            lt = f"lt {i + 1}"
            plots["loss_e"].append(f'"{st}" using 1:2 with lines {lt} title "{label}: train (steps)"')
            plots["loss_e"].append(f'"{ep}" using 1:3 with linespoints {lt} dt 2 title "{label}: val"')
            plots["acc_e"].append(f'"{ep}" using 1:(100*$4) with linespoints {lt} title "{label}: top-1"')
            plots["acc_e"].append(f'"{ep}" using 1:(100*$5) with linespoints {lt} dt 2 title "{label}: top-5"')
            plots["loss_t"].append(f'"{ep}" using 6:2 with linespoints {lt} title "{label}: train"')
            plots["loss_t"].append(f'"{ep}" using 6:3 with linespoints {lt} dt 2 title "{label}: val"')
            plots["acc_t"].append(f'"{ep}" using 6:(100*$4) with linespoints {lt} title "{label}: top-1"')
            plots["acc_t"].append(f'"{ep}" using 6:(100*$5) with linespoints {lt} dt 2 title "{label}: top-5"')
        script = f"""set terminal pngcairo size 1400,900 noenhanced
set output "{png}"
set multiplot layout 2,2 title "{title.replace('"', "'")}"
set datafile missing "?"
set grid
set key top right font ",8"
set xlabel "epoch"
set ylabel "loss"
plot {", ".join(plots["loss_e"])}
set key bottom right
set ylabel "validation accuracy (%)"
set yrange [0:105]
plot {", ".join(plots["acc_e"])}
set xlabel "training time ({unit}; validation not counted)"
set ylabel "loss"
set key top right
set autoscale y
plot {", ".join(plots["loss_t"])}
set key bottom right
set ylabel "validation accuracy (%)"
set yrange [0:105]
plot {", ".join(plots["acc_t"])}
unset multiplot
"""
        r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True)
        if r.returncode != 0:
            die(f"gnuplot failed: {r.stderr.strip()}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)   # `compare ... | head` ends quietly
    ap = argparse.ArgumentParser(prog=PROG, description="Runs of dstrain side by side: a table and a picture.")
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--json", action="store_true", help="the table as JSON on stdout")
    ap.add_argument("--png", metavar="FILE", help="draw the runs overlaid into FILE (gnuplot)")
    ap.add_argument("--allow-different", action="store_true",
                    help="compare runs of different architectures or training data")
    a = ap.parse_args()
    for run in a.runs:
        if not os.path.isdir(run):
            die(f"{run}: not a run directory")
    settings = [read_settings(run) for run in a.runs]
    check_same(a.runs, settings, a.allow_different)
    curves = [read_metrics(run) for run in a.runs]
    rows = [summarise(run, s, st, ep) for run, s, (st, ep) in zip(a.runs, settings, curves)]
    named = labels(settings)
    for r, label in zip(rows, named):
        name = os.path.basename(os.path.normpath(r["run"]))
        # runs set up alike are told apart by their directories
        r["label"] = (f"{label} ({name})" if named.count(label) > 1 else label) if label else name
    base = rows[0]
    for r in rows:
        if r["images_per_sec"] and base["images_per_sec"]:
            r["speedup"] = r["images_per_sec"] / base["images_per_sec"]
            r["efficiency"] = r["speedup"] / (r["ranks"] / base["ranks"])
        else:
            r["speedup"] = r["efficiency"] = None
    if a.png:
        plot(a.png, a.runs, rows, curves, "dstrain runs: " + ", ".join(os.path.basename(os.path.normpath(x))
                                                                          for x in a.runs))
    if a.json:
        print(json.dumps({"runs": rows}, indent=1, allow_nan=False, default=lambda v: None))
    else:
        print(markdown(rows))
        print(f"\nspeed-up and efficiency against the first run ({rows[0]['label']}); training time sums the "
              "finished epochs, without validation")


if __name__ == "__main__":
    main()
