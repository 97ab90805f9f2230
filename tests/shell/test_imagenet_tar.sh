#!/bin/bash
# data/imagenet.sh on a small nested tar shaped like ILSVRC2012_img_train.tar: a complete
# run, an interrupted one (the archive cut in the middle of a class) and its resumption.
. "$(dirname "$0")/lib.sh"
IMNET="$DS_ROOT/data/imagenet.sh"

# Source tree: four classes of small files with distinct contents, one inner tar each.
S=$T/src
for c in n01440764 n01443537 n01484850 n01491361; do
    mkdir -p "$S/$c"
    for i in 1 2 3 4 5 6 7 8; do head -c $((3000 + i * 517)) /dev/urandom >"$S/$c/${c}_$i.JPEG"; done
    tar -cf "$T/$c.tar" -C "$S/$c" .
done
(cd "$T" && tar -cf outer.tar n01440764.tar n01443537.tar n01484850.tar n01491361.tar)

expect_status "--help exits 0" 0 "$IMNET" --help
expect_status "no arguments exits 2" 2 "$IMNET"
expect_status "missing archive exits 1" 1 "$IMNET" "$T/nope.tar" "$T/o0"
echo junk >"$T/flat.JPEG"; tar -cf "$T/flat.tar" -C "$T" flat.JPEG
expect_status "archive without class tars exits 1" 1 "$IMNET" "$T/flat.tar" "$T/o1"
grep -q "no per-class .tar members" "$T/err" && pass "the refusal says why" || fail "the refusal says why"

expect_status "full run" 0 "$IMNET" "$T/outer.tar" "$T/full"
diff -r -x '.imagenet-done' "$S" "$T/full" >/dev/null && pass "full run: the tree equals the source" \
    || fail "full run: the tree equals the source"
dsplit -q "$T/full" -o "$T/split" --json >"$T/j" && grep -q '"classes": 4, "images": 32' "$T/j" \
    && pass "dsplit reads the extracted tree" || fail "dsplit reads the extracted tree" "$(cat "$T/j")"

# Interruption: the archive ends in the middle of the second class's tar.
first=$(stat -c %s "$T/n01440764.tar")
head -c $((512 + first + 512 + 9000)) "$T/outer.tar" >"$T/cut.tar"
expect_status "interrupted run fails" 1 "$IMNET" "$T/cut.tar" "$T/resume"
[ -d "$T/resume/n01440764" ] && [ -e "$T/resume/.imagenet-done/n01440764" ] && [ ! -e "$T/resume/n01443537" ] \
    && [ ! -e "$T/resume/.imagenet-done/n01443537" ] && pass "interrupted: first class done, the cut one absent" \
    || fail "interrupted: first class done, the cut one absent"
ino=$(stat -c %i "$T/resume/n01440764/n01440764_1.JPEG")
mkdir -p "$T/resume/.imagenet-tmp-n01484850"; echo stale >"$T/resume/.imagenet-tmp-n01484850/x"   # as after a kill
expect_status "rerun finishes" 0 "$IMNET" "$T/outer.tar" "$T/resume"
grep -q '1 classes done by an earlier run' "$T/err" && [ "$ino" = "$(stat -c %i "$T/resume/n01440764/n01440764_1.JPEG")" ] \
    && pass "rerun skips the finished class" || fail "rerun skips the finished class"
diff -r -x '.imagenet-done' "$S" "$T/resume" >/dev/null && pass "after the rerun the tree equals the source (no temporaries)" \
    || fail "after the rerun the tree equals the source (no temporaries)"
expect_status "a run on a finished tree is a no-op" 0 "$IMNET" "$T/outer.tar" "$T/resume"
grep -q '4 classes done by an earlier run' "$T/err" && pass "the no-op run says so" || fail "the no-op run says so"

rm -rf "$T"
finish
