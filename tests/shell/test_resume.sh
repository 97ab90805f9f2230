#!/bin/bash
# dstrain --resume as the same run: `--resume RUN` alone continues bitwise (every option taken
# from the checkpoint's config, the data found by its absolute path from any directory); an
# option given again with another value is refused unless --override, which prints it and
# records it in the checkpoint's history; options that change nothing trained (--log-every,
# --keep, ...) are taken as given; another training set is refused by its digest while the
# same images repacked elsewhere are not; resuming from an older checkpoint moves the later
# ones (and the metrics as they were) aside and says where; and a resume into another
# directory that holds a run's checkpoints is refused.
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 32 4 1 && make_bar_images "$T/other" 32 4 7 ||
    { fail data "cannot make the synthetic sets"; finish; }
split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" && split_pack "$T/other" 0.25 "$T/osplit" "$T/otrain" &&
    dspack -q --size 16 -o "$T/repacked" "$T/split/train.txt" >/dev/null ||
    { fail pack "dsplit/dspack failed"; finish; }

# Options that are not dstrain's defaults, so that a resume that fell back to a default would
# train otherwise. Relative paths: the resume runs from another directory.
cd "$T" || exit 1
RUN=(--train train --val val --arch resnet20 --crop 16 --pad 2 --batch 8 --epochs 3 --lr 0.05 --lr-scaling none
     --warmup-epochs 0.5 --wd 0.0005 --label-smoothing 0 --no-nesterov --seed 7 --threads 2 --log-every 4 -q)
dstrain "${RUN[@]}" -o full 2>full.err || fail full_run "$(tail -3 full.err)"
dstrain "${RUN[@]}" -o part --max-steps 7 2>part.err
mkdir -p elsewhere && cd elsewhere || exit 1
dstrain --resume ../part -q 2>../alone.err
cd "$T" || exit 1
check resume_alone_is_bitwise same_state full/ckpt-00000036.h5 part/ckpt-00000036.h5
check resume_alone_said_nothing_changed test ! -s alone.err

# Given again with another value: refused, nothing written; the message names both values.
cp -r part changed && rm -f changed/.lock
before=$(cd changed && md5sum ./* | sort)
expect_status changed_option_refused 1 dstrain --resume changed --lr 0.5 --epochs 4
check changed_option_named grep -q -- "--epochs 4 (the run's: 3), --lr 0.5 (the run's: 0.05)" "$T/err"
check changed_option_points_to_override grep -q -- "--override" "$T/err"
check refused_resume_writes_nothing test "$before" = "$(cd changed && md5sum ./* | sort)"

# --override: continued with the change, said, and recorded beside what the run had.
mkdir -p over && cp part/ckpt-00000012.h5 over/ && ln -s ckpt-00000012.h5 over/last.h5
dstrain --resume over --lr 0.5 --override --max-steps 14 2>over.err
check override_continues test -f over/ckpt-00000014.h5
check override_said grep -q "resuming with --lr 0.5 (the run had 0.05), by --override" over.err
"$PYTHON" - over/last.h5 <<'PY' && pass override_in_history || fail override_in_history
import json, sys
import h5py
a = h5py.File(sys.argv[1], "r").attrs
lines = [json.loads(l) for l in a["history"].splitlines()]
config = json.loads(a["config"])
print(lines[-1], config["lr"])
# part's own resume at step 7 is there too, before this one
assert [l["step"] for l in lines] == [7, 12], lines
assert lines[-1]["checkpoint"] == "ckpt-00000012.h5"
assert lines[-1]["changed"] == {"lr": {"from": "0.05", "to": "0.5"}}, lines[-1]
assert config["lr"] == 0.5 and config["epochs"] == 3 and config["seed"] == 7
PY

# What changes nothing trained is taken as given, without --override, and said.
mkdir -p logs && cp part/ckpt-00000012.h5 logs/ && ln -s ckpt-00000012.h5 logs/last.h5
dstrain --resume logs --log-every 3 --keep 5 2>logs.err
check free_change_accepted test -f logs/ckpt-00000036.h5
check free_change_is_bitwise same_state full/ckpt-00000036.h5 logs/ckpt-00000036.h5
check free_change_said grep -q "resuming with --log-every 3 (the run had 4)" logs.err

# The training set by its images: other images refused (even under the same class names),
# the same images repacked into another directory taken.
mkdir -p data && cp part/ckpt-00000012.h5 data/ && ln -s ckpt-00000012.h5 data/last.h5
expect_status other_training_set_refused 1 dstrain --resume data --train otrain
check other_training_set_named grep -q "otrain holds other images than the run trained on" "$T/err"
dstrain --resume data --train repacked 2>repacked.err
check repacked_set_is_the_same same_state full/ckpt-00000036.h5 data/ckpt-00000036.h5

# From an older checkpoint of a finished run: the later checkpoints, the links to them and
# the metrics as they were go to superseded-00000012/, said; the run goes on from step 12.
cp -r full rewind && rm -f rewind/.lock
sum36=$(md5sum <rewind/ckpt-00000036.h5) metrics=$(md5sum <rewind/metrics.jsonl)
dstrain --resume rewind/ckpt-00000012.h5 2>rewind.err
check rewind_said grep -q "went on past step 12: its 2 later checkpoints and metrics.jsonl as they were are moved to rewind/superseded-00000012" rewind.err
check rewind_kept_the_old_checkpoint test "$(md5sum <rewind/superseded-00000012/ckpt-00000036.h5)" = "$sum36"
check rewind_kept_the_old_metrics test "$(md5sum <rewind/superseded-00000012/metrics.jsonl)" = "$metrics"
check rewind_old_links_still_resolve test -f rewind/superseded-00000012/last.h5
check rewind_new_run_is_bitwise same_state full/ckpt-00000036.h5 rewind/ckpt-00000036.h5
"$PYTHON" - rewind/last.h5 <<'PY' && pass rewind_in_history || fail rewind_in_history
import json, sys
import h5py
line = json.loads(h5py.File(sys.argv[1], "r").attrs["history"].splitlines()[-1])
assert line == {"step": 12, "checkpoint": "ckpt-00000012.h5", "changed": {}, "moved_aside": "superseded-00000012"}, line
PY

# Into another directory that holds a run's checkpoints: refused like a fresh run.
expect_status resume_into_other_run_refused 1 dstrain --resume part/ckpt-00000012.h5 -o full
check resume_into_other_run_named grep -q "full already holds a run's checkpoints" "$T/err"

finish
