#!/bin/bash
# Non-finite numbers never pass for results: a checkpoint whose weights hold an Inf or a NaN
# (its checksum consistent, as if dstrain had written it so) evaluates with every image it
# breaks counted wrong, never above the real model, and dseval prints the result, names the
# count and exits 1; the same edit with a stale checksum is named as damage. dstrain's
# validation with a non-finite image (a test hook poisons one) is reported and never becomes
# best.h5, and its /metrics row records no score.
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 16 4 1 || { fail data "cannot make the synthetic set"; finish; }
split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" || { fail pack "dsplit/dspack failed"; finish; }

# 48 training images, batch 8: 6 steps per epoch.
TRAIN=(--train "$T/train" --val "$T/val" --arch resnet20 --crop 16 --batch 8 --lr 0.05 --lr-scaling none
       --warmup-epochs 0 --threads 2 --loader-threads 2 -q)
dstrain "${TRAIN[@]}" --epochs 1 -o "$T/run" 2>"$T/run.err" || { fail train "$(tail -3 "$T/run.err")"; finish; }

# poison SRC DST DATASET VALUE [stale]: DST is SRC with the dataset's first element set to
# VALUE, and its xxh3_64 attribute rewritten to the hash of the new stored bytes (with libxxhash
# itself, the library dstrain uses), unless stale: then the old one is kept.
poison() {
    "$PYTHON" - "$@" <<'PY'
import ctypes, shutil, sys
import h5py, numpy as np
src, dst, name, value = sys.argv[1:5]
shutil.copy(src, dst)
xxh3 = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
xxh3.restype, xxh3.argtypes = ctypes.c_uint64, [ctypes.c_char_p, ctypes.c_size_t]
with h5py.File(dst, "r+") as f:
    d = f[name]
    x = d[()]
    x.flat[0] = float(value)
    d[...] = x
    if sys.argv[5:] != ["stale"]:
        raw = np.ascontiguousarray(d[()]).astype(d.dtype).tobytes()
        d.attrs.modify("xxh3_64", np.uint64(xxh3(raw, len(raw))))
PY
}
# field FILE KEY: the value of KEY in dseval's --json output
field() { "$PYTHON" -c "import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print('null' if v is None else v)" "$1" "$2"; }

expect_status dseval_real_model 0 dseval --json "$T/run/last.h5" "$T/val"
cp "$T/out" "$T/real.json"
[ "$(field "$T/real.json" nonfinite)" = 0 ] && pass json_nonfinite_zero || fail json_nonfinite_zero "$(cat "$T/out")"
real_top1=$(field "$T/real.json" top1)

# an Inf in the first convolution (every image's logits turn non-finite) and a NaN in fc.weight[0, 0]
# (class 0's logit of every image): the report's two cases
poison "$T/run/last.h5" "$T/inf.h5" model/conv1.weight inf && poison "$T/run/last.h5" "$T/nan.h5" model/fc.weight nan ||
    fail poison
for kind in inf nan; do
    expect_status "dseval_${kind}_weight_exits_1" 1 dseval --json --per-class "$T/$kind.csv" "$T/$kind.h5" "$T/val"
    if "$PYTHON" - "$T/out" "$real_top1" <<'PY'; then pass "dseval_${kind}_weight_result"; else fail "dseval_${kind}_weight_result" "$(cat "$T/out" "$T/err")"; fi
import json, sys
r = json.load(open(sys.argv[1]))
print("non-finite model:", r, "real top-1", sys.argv[2])
assert r["nonfinite"] == r["count"] == 16, r       # every val image is hit
assert r["top1"] == 0 and r["top5"] == 0 and r["top1"] <= float(sys.argv[2]), r
assert r["loss"] is None, r                          # undefined, not a number
PY
    grep -q "dseval: error: 16 of 16 images gave non-finite outputs (NaN or Inf logits), counted as wrong: the weights of .*$kind.h5 are broken" "$T/err" &&
        pass "dseval_${kind}_weight_named" || fail "dseval_${kind}_weight_named" "$(cat "$T/err")"
done
# the text result is printed first, then the error
expect_status dseval_nan_text 1 dseval "$T/nan.h5" "$T/val"
grep -q "^top-1 0.00%  top-5 0.00%  loss nan  count 16 " "$T/out" && grep -q "error: 16 of 16 images" "$T/err" &&
    pass dseval_nan_text_result || fail dseval_nan_text_result "$(cat "$T/out" "$T/err")"
# Under mpirun the ranks' counts are summed: every image once, each of them non-finite, exit 1.
if command -v mpirun >/dev/null; then
    expect_status dseval_nan_3_ranks 1 timeout 120 mpirun --allow-run-as-root --oversubscribe -np 3 dseval --json \
        --threads 1 "$T/nan.h5" "$T/val"
    [ "$(field "$T/out" nonfinite)" = 16 ] && [ "$(field "$T/out" count)" = 16 ] && pass nonfinite_summed_over_ranks ||
        fail nonfinite_summed_over_ranks "$(cat "$T/out" "$T/err")"
else
    echo "SKIP nonfinite_summed_over_ranks: mpirun not found"
fi
# the same Inf with the checksum dstrain wrote: named as damage before anything is evaluated
poison "$T/run/last.h5" "$T/stale.h5" model/conv1.weight inf stale || fail poison
expect_status dseval_stale_checksum 1 dseval --json "$T/stale.h5" "$T/val"
grep -q "stale.h5: /model/conv1.weight is corrupt: its stored bytes hash to" "$T/err" && [ ! -s "$T/out" ] &&
    pass dseval_stale_checksum_named || fail dseval_stale_checksum_named "$(cat "$T/out" "$T/err")"

# --- dstrain: a validation with a non-finite image ---
# Epoch 1's validation scores its first image from NaN logits (the hook): epoch 1 may not
# become best.h5 even though it is the first; epoch 2's clean validation does.
DS_TESTHOOK_NAN_VAL_EPOCH=1 dstrain "${TRAIN[@]}" --epochs 2 -o "$T/hook" 2>"$T/hook.err" ||
    fail hook_run "$(tail -3 "$T/hook.err")"
grep -q "warning: epoch 1: 1 of 16 validation images gave non-finite outputs (NaN or Inf logits), counted as wrong: this epoch has no val score and never becomes best.h5" "$T/hook.err" &&
    ! grep -q "warning: epoch 2:" "$T/hook.err" && pass nonfinite_validation_warned ||
    fail nonfinite_validation_warned "$(cat "$T/hook.err")"
check nonfinite_validation_never_best test "$(readlink "$T/hook/best.h5")" = ckpt-00000012.h5
"$PYTHON" - "$T/hook/metrics.jsonl" "$T/hook/ckpt-00000012.h5" <<'PY' && pass nonfinite_validation_recorded || fail nonfinite_validation_recorded
import json, math, sys
import h5py
epochs = [r for r in map(json.loads, open(sys.argv[1])) if "seconds" in r]
print([(r["epoch"], r["val_top1"], r["val_nonfinite"], r["val_loss"]) for r in epochs])
assert [r["val_nonfinite"] for r in epochs] == [1, 0], epochs
assert epochs[0]["val_loss"] is None and epochs[1]["val_loss"] is not None, epochs
rows = h5py.File(sys.argv[2], "r")["metrics"][()]
print(rows)
assert math.isnan(rows[0]["val_top1"]) and math.isnan(rows[0]["val_top5"]), rows   # no score: never best on resume
assert 0 <= rows[1]["val_top1"] <= 1, rows
PY
# A run whose only validation is non-finite has no best.h5 at all.
DS_TESTHOOK_NAN_VAL_EPOCH=1 dstrain "${TRAIN[@]}" --epochs 1 -o "$T/hook1" 2>"$T/hook1.err" ||
    fail hook1_run "$(tail -3 "$T/hook1.err")"
check nonfinite_only_validation_no_best test -e "$T/hook1/last.h5" -a ! -e "$T/hook1/best.h5"
# Resumed from there, the next clean validation becomes best (the NaN row is no best to beat).
dstrain "${TRAIN[@]}" --epochs 2 --override --resume "$T/hook1" 2>"$T/hook1r.err" || fail hook1_resume "$(tail -3 "$T/hook1r.err")"
check resume_after_nonfinite_best test "$(readlink "$T/hook1/best.h5")" = ckpt-00000012.h5

[ -n "${KEEP_T:-}" ] || rm -rf "$T"
finish
