#!/bin/bash
# dstrain --tensorboard on a tiny synthetic set (4 classes of 16x16 bar images): the event
# file it writes beside metrics.jsonl, read by the tests' own decoder (drivers/tbevents_dump,
# tests/tbdecode.h: every record's CRCs checked), holds every row of metrics.jsonl under its
# tags at its global step, to float32 precision; a run resumed from an earlier checkpoint
# writes a second file whose SessionLog START makes TensorBoard's view (earlier files' events
# at that step or later dropped) equal to the truncated-and-continued metrics.jsonl; a flipped
# byte is reported; only rank 0 writes; without the option nothing is written; the checkpoint's
# config records it.
. "$(dirname "$0")/lib.sh"

DUMP="$BUILD_DIR/drivers/tbevents_dump"
[ -x "$DUMP" ] || { fail tbevents_dump "$DUMP not built (make)"; finish; }
make_bar_images "$T/tree" 16 4 1 || { fail data "cannot make the synthetic set"; finish; }
split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" || { fail pack "dsplit/dspack failed"; finish; }

# 48 training images, batch 8: 6 steps per epoch, 12 in all; a step row every 2 steps.
COMMON=(--train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --batch 8 --epochs 2 --lr 0.05
        --lr-scaling none --warmup-epochs 0.5 --threads 2 --log-every 2 -q)

events() { ls "$1"/events.out.tfevents.* 2>/dev/null | LC_ALL=C sort; }

# tb_matches RUN_DIR: TensorBoard's view of RUN_DIR's event files (read in name order; a
# SessionLog START at step s drops every scalar read before it at step s or later, as its
# EventAccumulator does) holds exactly metrics.jsonl's rows: each (step, tag) once, each value
# within what metrics.jsonl's printed digits and float32 allow.
tb_matches() {
    local files
    files=$(events "$1")
    [ -n "$files" ] || { echo "no event file in $1" >&2; return 1; }
    # shellcheck disable=SC2086
    "$DUMP" $files >"$T/dump" || return 1
    "$PYTHON" - "$1/metrics.jsonl" "$T/dump" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = {}
# tag: (metrics.jsonl field, tolerance of its printed form: relative for %g, absolute for %f)
STEP = {"train/loss": ("loss", "r", 5e-6), "train/lr": ("lr", "r", 5e-6),
        "train/images_per_sec": ("images_per_sec", "a", 0.05), "train/data_wait": ("data_wait", "a", 5e-5)}
EPOCH = {"train/epoch_loss": ("loss", "r", 5e-6), "train/epoch_images_per_sec": ("images_per_sec", "a", 0.05)}
VAL = {"val/top1": ("val_top1", "a", 5e-7), "val/top5": ("val_top5", "a", 5e-7), "val/loss": ("val_loss", "r", 5e-6)}
for r in rows:
    tags = dict(EPOCH, **VAL) if "val_top1" in r else EPOCH if "seconds" in r else STEP
    for tag, (field, kind, tol) in tags.items():
        key = (r["step"], tag)
        assert key not in want, "metrics.jsonl holds %s twice" % (key,)
        want[key] = (r[field], kind, tol)
seen, lines = {}, [l.split() for l in open(sys.argv[2])]
assert lines[0] == ["0", "file_version", "brain.Event:2"], lines[0]
for step, tag, value in lines:
    step = int(step)
    if tag == "file_version":
        continue
    if tag == "session_log":
        assert value == "START", value
        seen = {k: v for k, v in seen.items() if k[0] < step}
        continue
    assert (step, tag) not in seen, "(%d, %s) twice in TensorBoard's view" % (step, tag)
    seen[(step, tag)] = float(value)
missing, extra = sorted(set(want) - set(seen)), sorted(set(seen) - set(want))
assert not missing and not extra, "missing %s, extra %s" % (missing[:5], extra[:5])
worst = 0
for key, (ref, kind, tol) in want.items():
    got = seen[key]
    # float32 rounding of the double, then the printed digits of metrics.jsonl
    limit = ((tol * abs(ref) if kind == "r" else tol) + 6e-8 * abs(ref)) * 1.0001
    assert abs(got - ref) <= limit, "%s: %r in the event file, %r in metrics.jsonl" % (key, got, ref)
    worst = max(worst, abs(got - ref) / max(limit, 1e-30))
print("%d scalars at %d steps agree with metrics.jsonl (worst %.2f of the tolerance)"
      % (len(want), len({k[0] for k in want}), worst))
PY
}

dstrain "${COMMON[@]}" --tensorboard -o "$T/run" 2>"$T/run.err" || fail train_runs "$(tail -3 "$T/run.err")"
check one_event_file_beside_metrics test "$(events "$T/run" | wc -l)" = 1
named_as_tensorflows() { basename "$(events "$1")" | grep -qxE 'events\.out\.tfevents\.[0-9]{10}\..+'; }
check event_file_is_named_as_tensorflows named_as_tensorflows "$T/run"
check events_equal_metrics tb_matches "$T/run"
check events_start_purges_from_step_1 sh -c "sed -n 2p '$T/dump' | grep -qx '1 session_log START'"
"$PYTHON" - "$T/run/last.h5" <<'PY' && pass config_records_tensorboard || fail config_records_tensorboard
import h5py, json, sys
assert json.loads(h5py.File(sys.argv[1], "r").attrs["config"])["tensorboard"] is True
PY

# A planted defect: one byte of the last record flipped. The dump prints the good records,
# then names the bad one and exits 1.
cp "$(events "$T/run")" "$T/bad.tfevents"
"$PYTHON" - "$T/bad.tfevents" <<'PY'
import os, sys
with open(sys.argv[1], "r+b") as f:
    f.seek(os.path.getsize(sys.argv[1]) - 8)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x01]))
PY
expect_status corrupt_record_fails_the_dump 1 "$DUMP" "$T/bad.tfevents"
check corrupt_record_is_named grep -q "record [0-9]* (byte [0-9]*): the data's CRC does not match" "$T/err"
check corrupt_dump_kept_the_good_records test "$(wc -l <"$T/out")" -gt 2

# Resumed from an earlier checkpoint (step 4, mid-epoch) into the same directory: metrics.jsonl
# is cut back to step 4 and continued; the first file still holds steps 6..12, and the second
# file's START at step 5 hides them from TensorBoard.
dstrain "${COMMON[@]}" --tensorboard --ckpt-steps 4 --keep 10 -o "$T/res" 2>"$T/res.err" ||
    fail resume_first_part "$(tail -3 "$T/res.err")"
dstrain "${COMMON[@]}" --tensorboard --resume "$T/res/ckpt-00000004.h5" 2>"$T/res2.err" ||
    fail resume_runs "$(tail -3 "$T/res2.err")"
check resume_writes_a_second_file test "$(events "$T/res" | wc -l)" = 2
dump_file() { "$DUMP" "$(events "$1" | sed -n "$2p")"; }   # RUN_DIR N: the N-th event file, in name order
starts_at() { dump_file "$1" "$2" | sed -n 2p | grep -qx "$3 session_log START"; }
check resume_file_starts_at_step_5 starts_at "$T/res" 2 5
holds() { dump_file "$1" "$2" | grep -q "$3"; }
check resume_first_file_kept_later_steps holds "$T/res" 1 '^12 val/top1 '
check resumed_events_equal_metrics tb_matches "$T/res"

# Without --tensorboard: no event file.
dstrain "${COMMON[@]}" --max-steps 2 -o "$T/plain" 2>/dev/null
check no_option_no_event_file test -z "$(events "$T/plain")" -a -f "$T/plain/metrics.jsonl"

# Two ranks: rank 0 alone writes the one event file.
if command -v mpirun >/dev/null; then
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 dstrain "${COMMON[@]}" --batch 4 --threads 1 \
        --tensorboard --max-steps 4 -o "$T/mpi" 2>"$T/mpi.err" || fail mpi_runs "$(tail -3 "$T/mpi.err")"
    check mpi_one_event_file test "$(events "$T/mpi" | wc -l)" = 1
    check mpi_events_equal_metrics tb_matches "$T/mpi"
else
    echo "SKIP mpi_one_event_file: mpirun not found (Debian: openmpi-bin)"
fi
finish
