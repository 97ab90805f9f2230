#!/bin/bash
# scripts/compare.py (make compare): three tiny runs, two settings (1 rank; 2 ranks at the same
# global batch) and one stopped and resumed, side by side. The table's numbers are checked
# against each run's own metrics.jsonl, the labels against what the runs' checkpoints
# record; the resumed run reads as the uninterrupted one; runs of another architecture are
# refused unless asked; the picture is a PNG.
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { fail compare "mpirun not found (Debian: openmpi-bin)"; finish; }
make_bar_images "$T/tree" 24 4 1 && split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" ||
    { fail data "cannot make the synthetic set"; finish; }
COMMON=(--train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --epochs 3 --lr 0.2 --warmup-epochs 0
        --threads 1 --loader-threads 1 --log-every 2 -q)
dstrain "${COMMON[@]}" --batch 8 -o "$T/one" 2>/dev/null
timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 dstrain "${COMMON[@]}" --batch 4 -o "$T/two" 2>/dev/null
dstrain "${COMMON[@]}" --batch 8 --max-steps 5 -o "$T/resumed" 2>/dev/null &&
    dstrain "${COMMON[@]}" --batch 8 --resume "$T/resumed" 2>/dev/null
check runs_made test -f "$T/one/last.h5" -a -f "$T/two/last.h5" -a -f "$T/resumed/last.h5"

"$PYTHON" "$DS_ROOT/scripts/compare.py" --json --png "$T/c.png" "$T/one" "$T/two" "$T/resumed" >"$T/c.json" 2>"$T/c.err"
check compare_runs test $? = 0
"$PYTHON" - "$T/c.json" "$T/one" "$T/two" "$T/resumed" <<'PY' && pass compare_table_matches_the_metrics || fail compare_table_matches_the_metrics
import json, os, sys
table = json.load(open(sys.argv[1]))["runs"]
assert [r["run"] for r in table] == sys.argv[2:], [r["run"] for r in table]
def rows(run):
    rs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    return [r for r in rs if "seconds" in r]
for r, run in zip(table, sys.argv[2:]):
    ep = rows(run)
    secs = sum(e["seconds"] for e in ep)
    imgs = sum(e["images_per_sec"] * e["seconds"] for e in ep)
    want = {"epochs_done": len(ep), "epochs_planned": 3, "final_top1": ep[-1]["val_top1"],
            "final_top5": ep[-1]["val_top5"], "best_top1": max(e["val_top1"] for e in ep),
            "global_batch": 8, "last_step": ep[-1]["step"]}
    for k, v in want.items():
        assert r[k] == v, (run, k, r[k], v)
    # the same sums in the same order: the same doubles (JSON keeps every bit of a double)
    assert (r["train_seconds"], r["images_per_sec"]) == (secs, imgs / secs), (r, secs, imgs)
    assert r["images_per_sec_per_rank"] == r["images_per_sec"] / r["ranks"], r
one, two, res = table
assert (one["ranks"], two["ranks"], res["ranks"]) == (1, 2, 1)
assert one["speedup"] == 1 and two["speedup"] == two["images_per_sec"] / one["images_per_sec"]
assert two["efficiency"] == two["speedup"] / 2
# the resumed run trained as the uninterrupted one: the same accuracies, epoch by epoch
assert [(e["val_top1"], e["val_top5"]) for e in rows(sys.argv[4])] == [(e["val_top1"], e["val_top5"]) for e in rows(sys.argv[2])]
print({r["label"]: (r["final_top1"], round(r["images_per_sec"], 1)) for r in table})
PY
"$PYTHON" - "$T/c.json" <<'PY' && pass compare_labels_name_what_differs || fail compare_labels_name_what_differs
import json, sys
labels = [r["label"] for r in json.load(open(sys.argv[1]))["runs"]]
print(labels)
assert labels == ["ranks 1, batch 8 (one)", "ranks 2, batch 4", "ranks 1, batch 8 (resumed)"], labels
PY
check compare_draws_a_png sh -c "file '$T/c.png' | grep -q 'PNG image'"
"$PYTHON" "$DS_ROOT/scripts/compare.py" "$T/one" "$T/two" >"$T/c.md" 2>/dev/null
check compare_markdown_table sh -c "grep -q '^| run | ranks | global batch |' '$T/c.md' && grep -q '^| ranks 2, batch 4 | 2 | 8 |' '$T/c.md'"

# another architecture: refused, naming it, unless --allow-different
dstrain --train "$T/train" --arch resnet18 --crop 16 --epochs 1 --batch 8 --threads 1 -q -o "$T/r18" 2>/dev/null
expect_status compare_refuses_another_arch 1 "$PYTHON" "$DS_ROOT/scripts/compare.py" "$T/one" "$T/r18"
check compare_refusal_names_it grep -q 'differ in architecture.*resnet18.*--allow-different' "$T/err"
"$PYTHON" "$DS_ROOT/scripts/compare.py" --allow-different --json "$T/one" "$T/r18" >"$T/c2.json" 2>/dev/null
check compare_allow_different sh -c "grep -q '\"label\": \"[^\"]*arch resnet18' '$T/c2.json'"
expect_status compare_needs_a_checkpoint 1 "$PYTHON" "$DS_ROOT/scripts/compare.py" "$T/one" "$T/train"
expect_status make_compare_usage 2 make -s -C "$DS_ROOT" compare
finish
