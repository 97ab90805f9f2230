#!/bin/bash
# tensorboard_read.sh: dstrain --tensorboard's event files read by TensorBoard itself, from
# PyPI (never a dependency of the build or the tests, which read the files with their own
# decoder: tests/shell/test_tensorboard.sh). Makes a virtual environment with TensorBoard
# ($BUILD/venv-tb, default build/venv-tb; TB_PIN the requirement, default the version below),
# trains resnet20 for 3 epochs on a small synthetic set with --val and --ckpt-steps, resumes
# it from a mid-run checkpoint into the same directory (a second event file, whose SessionLog
# START must hide the first file's later rows), then:
#   - reads every record of each file with TensorBoard's record reader (which checks the
#     CRCs) and its Event protobuf class, and prints what each file holds;
#   - loads the run directory with EventAccumulator (TensorBoard's Python loader, the one
#     that honours the START record) and prints each tag's points, compared with
#     metrics.jsonl: each (step, tag) once, each value within metrics.jsonl's printed digits.
# Exits 1 when TensorBoard's view and metrics.jsonl differ.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$here/bin} SYNTH=${SYNTH:-$here/build/data/synth}
VENV=${BUILD:-$here/build}/venv-tb
TB_PIN=${TB_PIN:-tensorboard==2.21.0}
for p in "$BIN/dstrain" "$BIN/dsplit" "$BIN/dspack" "$SYNTH"; do
    [ -x "$p" ] || { echo "tensorboard_read: build first ($p missing)" >&2; exit 1; }
done
if ! "$VENV/bin/python3" -c "import tensorboard" 2>/dev/null; then
    /usr/bin/python3 -m venv "$VENV" ||
        { echo "tensorboard_read: cannot make $VENV (Debian: apt-get install python3-venv)" >&2; exit 1; }
    "$VENV/bin/pip" install -q "$TB_PIN"
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tensorboard-read.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$SYNTH" -q --classes 4 --per-class 40 --width 20 --height 20 "$work/tree"
"$BIN/dsplit" -q --val 0.25 -o "$work/split" "$work/tree"
"$BIN/dspack" -q --size 16 -o "$work/train" "$work/split/train.txt"
"$BIN/dspack" -q --size 16 -o "$work/val" "$work/split/val.txt"
ARGS=(--train "$work/train" --val "$work/val" --arch resnet20 --crop 16 --batch 8 --epochs 3 --lr 0.05
      --lr-scaling none --warmup-epochs 0.5 --threads 2 --log-every 3 --tensorboard -q)
"$BIN/dstrain" "${ARGS[@]}" --ckpt-steps 9 --keep 20 -o "$work/run"
"$BIN/dstrain" "${ARGS[@]}" --resume "$work/run/ckpt-00000009.h5"
"$VENV/bin/python3" - "$work/run" <<'PY'
import glob, json, math, os, sys
import tensorboard
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run = sys.argv[1]
print("TensorBoard", tensorboard.__version__)
files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")))
for f in files:
    events = list(event_file_loader.LegacyEventFileLoader(f).Load())
    version = [e.file_version for e in events if e.file_version]
    starts = [e.step for e in events if e.HasField("session_log") and e.session_log.status == 1]
    steps = [e.step for e in events if e.HasField("summary")]
    print("%s: %d records, file_version %s, SessionLog START at %s, summaries at steps %d..%d"
          % (os.path.basename(f), len(events), version, starts, min(steps), max(steps)))

acc = EventAccumulator(run, size_guidance={"scalars": 0})
acc.Reload()
rows = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
STEP = {"train/loss": ("loss", "r", 5e-6), "train/lr": ("lr", "r", 5e-6),
        "train/images_per_sec": ("images_per_sec", "a", 0.05), "train/data_wait": ("data_wait", "a", 5e-5)}
EPOCH = {"train/epoch_loss": ("loss", "r", 5e-6), "train/epoch_images_per_sec": ("images_per_sec", "a", 0.05),
         "val/top1": ("val_top1", "a", 5e-7), "val/top5": ("val_top5", "a", 5e-7),
         "val/loss": ("val_loss", "r", 5e-6)}
want = {}
for r in rows:
    for tag, (field, kind, tol) in (EPOCH if "seconds" in r else STEP).items():
        if field in r:
            want.setdefault(tag, []).append((r["step"], r[field], kind, tol))
bad = 0
print("%-28s %6s  %-22s %-22s %s" % ("tag", "points", "first (step, value)", "last (step, value)",
                                      "largest |TensorBoard - metrics.jsonl|"))
for tag in sorted(set(acc.Tags()["scalars"]) | set(want)):
    got = acc.Scalars(tag) if tag in acc.Tags()["scalars"] else []
    ref = want.get(tag, [])
    same_steps = [g.step for g in got] == [s for s, _, _, _ in ref]
    worst, ok = 0.0, same_steps
    for g, (s, v, kind, tol) in zip(got, ref):
        limit = (tol * abs(v) if kind == "r" else tol) + 6e-8 * abs(v)
        worst = max(worst, abs(g.value - v))
        ok = ok and abs(g.value - v) <= limit * 1.0001
    bad += not ok
    fmt = lambda e: "(%d, %.6g)" % (e.step, e.value) if e else "-"
    print("%-28s %6d  %-22s %-22s %.3g%s" % (tag, len(got), fmt(got[0] if got else None),
                                             fmt(got[-1] if got else None), worst,
                                             "" if ok else "  DIFFERS (steps %s, want %s)"
                                             % ([g.step for g in got], [s for s, _, _, _ in ref])))
n = sum(len(v) for v in want.values())
print("%d scalars in metrics.jsonl; TensorBoard's view %s" % (n, "agrees" if not bad else "differs on %d tags" % bad))
sys.exit(1 if bad else 0)
PY
