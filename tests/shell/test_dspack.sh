#!/bin/bash
# dspack end to end: the shard schema as h5dump/h5ls show it, every kind of good and bad
# input, rejected.txt, thread-count-independent bytes, --resume after kill -9 and after
# damage, --compress, --max-reject and the usage errors.
source "$(dirname "$0")/lib.sh"

# A small tree with one image of every kind, good and bad (made with Pillow).
mkdir -p "$T/tree"
"$PYTHON" - "$T/tree" <<'EOF' || { fail tree_made "python could not make the images"; finish; }
import sys, os, struct, zlib
import numpy as np
from PIL import Image
root = sys.argv[1]
rng = np.random.default_rng(3)
def img(w, h):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // w, y * 255 // h, (x * y) % 256], -1).astype(np.int16)
    return Image.fromarray((a + rng.integers(-10, 10, a.shape)).clip(0, 255).astype(np.uint8))
for c in ["ant", "bee", "cat"]:
    os.makedirs(f"{root}/{c}")
    for i in range(8):
        img(int(rng.integers(40, 160)), int(rng.integers(40, 160))).save(f"{root}/{c}/{i}.JPEG", quality=90)
img(90, 70).convert("L").save(f"{root}/ant/gray.JPEG")
img(90, 70).convert("CMYK").save(f"{root}/ant/cmyk.JPEG")
img(300, 200).save(f"{root}/ant/progressive.JPEG", progressive=True)
img(80, 60).save(f"{root}/bee/png_named.JPEG", format="PNG")
img(80, 60).convert("P").save(f"{root}/bee/palette.png")
img(80, 60).convert("RGBA").save(f"{root}/bee/alpha.png")
good = open(f"{root}/ant/0.JPEG", "rb").read()
open(f"{root}/cat/truncated.JPEG", "wb").write(good[: len(good) // 2])
open(f"{root}/cat/zero.JPEG", "wb").close()
open(f"{root}/cat/text.JPEG", "w").write("this is not an image\n")
# A JPEG whose header claims 65000 x 65000.
b = bytearray(good)
i = b.find(b"\xff\xc0")
b[i + 5:i + 9] = struct.pack(">HH", 65000, 65000)
open(f"{root}/cat/huge.JPEG", "wb").write(bytes(b))
EOF

dsplit -q -o "$T/split" --val 0.25 "$T/tree" || fail dsplit_ran
M=$T/split/train.txt
n_lines=$(($(wc -l <"$M") - 1))

# --- a first run: schema, counts, rejects ---
expect_status pack_runs 0 dspack -q -o "$T/a" --size 32 --shard-size 5 --threads 1 "$M"
n_shards=$(( (n_lines + 4) / 5 ))
check shard_count_planned test "$(ls "$T/a" | grep -c '^shard-.*\.h5$')" -eq "$n_shards"
h5dump -H "$T/a/shard-00000.h5" >"$T/h0" 2>&1
schema_ok=1
for a in ds_format ds_kind height width fit shard_index shard_count num_classes; do
    grep -q "ATTRIBUTE \"$a\"" "$T/h0" || { schema_ok=0; echo "missing attribute $a"; }
done
h5ls "$T/a/shard-00000.h5" >"$T/ls0"
grep -Eq '^images +Dataset \{[0-9]+, 32, 32, 3\}' "$T/ls0" || schema_ok=0
grep -Eq '^labels +Dataset \{[0-9]+\}' "$T/ls0" && grep -Eq '^paths +Dataset' "$T/ls0" || schema_ok=0
grep -Eq '^classes +Dataset \{3\}' "$T/ls0" || schema_ok=0
h5dump -d images -p -H "$T/a/shard-00000.h5" | grep -q CONTIGUOUS || schema_ok=0
h5dump -d images -H "$T/a/shard-00000.h5" | grep -q H5T_STD_U8LE || schema_ok=0
h5dump -a ds_kind "$T/a/shard-00000.h5" | grep -q '"shard"' || schema_ok=0
h5dump -a fit "$T/a/shard-00000.h5" | grep -q '"crop"' || schema_ok=0
if [ $schema_ok = 1 ]; then pass shard_schema; else fail shard_schema "$(cat "$T/ls0")"; fi

# Every manifest line is packed or rejected, never both, never neither.
packed=0
for s in "$T"/a/shard-*.h5; do
    packed=$((packed + $(h5ls "$s" | sed -n 's/^labels *Dataset {\([0-9]*\)}.*/\1/p')))
done
rejected=$(wc -l <"$T/a/rejected.txt")
check packed_plus_rejected_is_manifest test $((packed + rejected)) -eq "$n_lines"

# Each quirk: decoded, or rejected with the right reason (whichever split it landed in).
expect_reject() {  # file, reason pattern
    if ! grep -q "/$1" "$M"; then pass "quirk_$1 (in val)"; return; fi
    if grep -P "/$1\t" "$T/a/rejected.txt" | grep -q "$2"; then pass "quirk_$1"; else
        fail "quirk_$1" "not rejected with '$2': $(grep "$1" "$T/a/rejected.txt")"; fi
}
expect_packed() {
    if ! grep -q "/$1" "$M"; then pass "quirk_$1 (in val)"; return; fi
    if grep -q "/$1" "$T/a/rejected.txt"; then fail "quirk_$1" "rejected: $(grep "$1" "$T/a/rejected.txt")"; else
        pass "quirk_$1"; fi
}
# Make sure the quirky files are in the train split: pack the val split as well.
dspack -q -o "$T/v" --size 32 --max-reject 100 "$T/split/val.txt" || fail val_packs
cat "$T/v/rejected.txt" >>"$T/a/rejected.txt.all"; cat "$T/a/rejected.txt" >>"$T/a/rejected.txt.all"
all_rej=$T/a/rejected.txt.all
quirk() {  # file, expected: "packed" or a reason pattern
    if [ "$2" = packed ]; then
        if grep -q "/$1	" "$all_rej"; then fail "quirk_$1" "rejected: $(grep "/$1" "$all_rej")"; else pass "quirk_$1"; fi
    elif grep -P "/\Q$1\E\t" "$all_rej" | grep -q "$2"; then pass "quirk_$1"
    else fail "quirk_$1" "want a rejection matching '$2', got: $(grep "/$1" "$all_rej")"; fi
}
quirk gray.JPEG packed
quirk cmyk.JPEG packed
quirk progressive.JPEG packed
quirk png_named.JPEG packed
quirk palette.png packed
quirk alpha.png packed
quirk truncated.JPEG "truncated JPEG"
quirk zero.JPEG "empty file"
quirk text.JPEG "not a JPEG or PNG"
quirk huge.JPEG "65000x65000 = 4225000000 pixels exceeds the limit of"
check rejected_is_exactly_the_bad_files test "$(wc -l <"$all_rej")" -eq 4

# --- same bytes whatever the thread count ---
expect_status pack_two_threads 0 dspack -q -o "$T/b" --size 32 --shard-size 5 --threads 2 "$M"
same=1
for s in "$T"/a/shard-*.h5 "$T/a/rejected.txt"; do cmp -s "$s" "$T/b/$(basename "$s")" || { same=0; echo "differs: $s"; }; done
[ "$(ls "$T/b" | wc -l)" -eq "$(ls "$T/a" | grep -vc all)" ] || same=0
if [ $same = 1 ]; then pass threads_1_and_2_identical; else fail threads_1_and_2_identical; fi

# The seed shuffles the order; --no-shuffle keeps the manifest's.
dspack -q -o "$T/ns" --size 32 --shard-size 1000 --no-shuffle "$M"
shard_paths() { h5dump -d paths -y "$1" | sed -n '/DATA {/,$p' | grep -o '"[^"]*"' | tr -d '"'; }
shard_paths "$T/ns/shard-00000.h5" >"$T/ns_paths"
grep -v '^#' "$M" | cut -f2 | grep -vxFf <(cut -f1 "$T/ns/rejected.txt") >"$T/manifest_paths"
check no_shuffle_keeps_order cmp -s "$T/ns_paths" "$T/manifest_paths"
dspack -q -o "$T/s7" --size 32 --shard-size 1000 --seed 7 "$M"
shard_paths "$T/s7/shard-00000.h5" >"$T/s7_paths"
if cmp -s "$T/s7_paths" "$T/manifest_paths"; then fail seed_shuffles; else
    check seed_shuffles cmp -s <(sort "$T/s7_paths") <(sort "$T/manifest_paths"); fi

# --- resume ---
# Damage a finished run every way an interruption can: a missing shard, a truncated one, a
# leftover .tmp, no rejected.txt. --resume must rebuild exactly the uninterrupted result.
cp -r "$T/a" "$T/r"; rm -f "$T/r/rejected.txt.all"
rm "$T/r/shard-00001.h5"
head -c 3000 "$T/a/shard-00002.h5" >"$T/r/shard-00002.h5"
echo junk >"$T/r/shard-00003.h5.tmp"
rm "$T/r/rejected.txt"
dspack -q -o "$T/r" --size 32 --shard-size 5 --resume --json "$M" >"$T/resume.json"
same=1
for s in "$T"/a/shard-*.h5 "$T/a/rejected.txt"; do cmp -s "$s" "$T/r/$(basename "$s")" || { same=0; echo "differs: $s"; }; done
[ -e "$T/r/shard-00003.h5.tmp" ] && same=0
if [ $same = 1 ]; then pass resume_after_damage_identical; else fail resume_after_damage_identical; fi
check resume_kept_the_intact_shards grep -q "\"shards_kept\": $((n_shards - 2))" "$T/resume.json"

# A shard written with other options is not kept.
cp -r "$T/a" "$T/o"
dspack -q -o "$T/o" --size 32 --shard-size 5 --seed 9 --resume "$M"
dspack -q -o "$T/o9" --size 32 --shard-size 5 --seed 9 "$M"
same=1
for s in "$T"/o9/shard-*.h5; do cmp -s "$s" "$T/o/$(basename "$s")" || same=0; done
if [ $same = 1 ]; then pass resume_other_options_rewrites; else fail resume_other_options_rewrites; fi

# kill -9 in the middle of a real run (more images, one thread, small shards), then resume.
"$PYTHON" - "$T/tree" <<'EOF'
import sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(5)
for i in range(150):
    Image.fromarray(rng.integers(0, 255, (300, 400, 3), dtype=np.uint8)).save(f"{sys.argv[1]}/bee/k{i:03d}.JPEG", quality=90)
EOF
dsplit -q -o "$T/split2" --val 0.1 "$T/tree"
M2=$T/split2/train.txt
dspack -q -o "$T/k" --size 64 --shard-size 8 --threads 1 --max-reject 100 "$M2" &
pid=$!
for _ in $(seq 1 200); do [ -e "$T/k/shard-00003.h5" ] && break; sleep 0.05; done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
partial=$(ls "$T/k" | grep -c '^shard-.*\.h5$')
dspack -q -o "$T/k" --size 64 --shard-size 8 --threads 2 --max-reject 100 --resume "$M2" || fail kill9_resume_runs
dspack -q -o "$T/k_full" --size 64 --shard-size 8 --threads 2 --max-reject 100 "$M2"
same=1
for s in "$T"/k_full/*; do cmp -s "$s" "$T/k/$(basename "$s")" || { same=0; echo "differs: $s"; }; done
[ "$(ls "$T/k" | wc -l)" -eq "$(ls "$T/k_full" | wc -l)" ] || same=0
if [ $same = 1 ]; then pass "resume_after_kill9_identical ($partial shards before the kill)"; else
    fail resume_after_kill9_identical; fi

# --- --compress: chunked + deflate, same pixels ---
expect_status compress_runs 0 dspack -q -o "$T/c" --size 32 --shard-size 5 --compress 6 "$M"
# Only the deflate level differs: same images, labels and paths, other bytes. Not kept.
dspack -q -o "$T/c1" --size 32 --shard-size 5 --compress 1 "$M"
dspack -q -o "$T/c1" --size 32 --shard-size 5 --compress 6 --resume "$M"
same=1
for s in "$T"/c/shard-*.h5; do cmp -s "$s" "$T/c1/$(basename "$s")" || same=0; done
if [ $same = 1 ]; then pass resume_other_level_rewrites; else fail resume_other_level_rewrites; fi
h5dump -p -H -d images "$T/c/shard-00000.h5" >"$T/hc"
if grep -q CHUNKED "$T/hc" && grep -q DEFLATE "$T/hc"; then pass compress_layout; else fail compress_layout; fi
h5dump -d images -y "$T/a/shard-00000.h5" | sed -n '/DATA/,$p' >"$T/pa"
h5dump -d images -y "$T/c/shard-00000.h5" | sed -n '/DATA/,$p' >"$T/pc"
check compress_same_pixels cmp -s "$T/pa" "$T/pc"

# --- --fit squash and paths outside the root ---
printf '# ds-manifest 1 root=%s\n0\tant/0.JPEG\n0\t../tree/ant/1.JPEG\n1\t%s/ant/2.JPEG\n1\tbee/0.JPEG\n' \
    "$T/tree" "$T/tree" >"$T/split/evil.txt"
expect_status outside_root_runs 0 dspack -q -o "$T/e" --size 16 --fit squash "$T/split/evil.txt"
if [ "$(grep -c 'path outside the root' "$T/e/rejected.txt")" -eq 2 ]; then pass outside_root_rejected; else
    fail outside_root_rejected "$(cat "$T/e/rejected.txt")"; fi
h5dump -a fit "$T/e/shard-00000.h5" | grep -q '"squash"' && pass fit_squash_recorded || fail fit_squash_recorded

# A hand-written manifest path that is not UTF-8 (dsplit skips such names): rejected, as
# /paths holds UTF-8 strings that h5py must decode.
cp "$T/tree/ant/0.JPEG" "$T/tree/ant/caf"$'\xe9'".JPEG"
printf '# ds-manifest 1 root=%s\n0\tant/caf\xe9.JPEG\n0\tant/0.JPEG\n' "$T/tree" >"$T/split/latin1.txt"
expect_status non_utf8_path_runs 0 dspack -q -o "$T/u" --size 16 "$T/split/latin1.txt"
grep -q $'^ant/caf\xe9.JPEG\tpath is not UTF-8' "$T/u/rejected.txt" &&
    "$PYTHON" -c "import h5py,sys; assert list(h5py.File(sys.argv[1],'r')['paths'].asstr()[()]) == ['ant/0.JPEG']" \
        "$T/u/shard-00000.h5" && pass non_utf8_path_rejected || fail non_utf8_path_rejected "$(cat "$T/u/rejected.txt")"
rm "$T/tree/ant/caf"$'\xe9'".JPEG"

# --- --max-reject: exit 1, but everything is written ---
expect_status max_reject_exceeded 1 dspack -q -o "$T/m" --size 16 --max-reject 1 "$T/split/evil.txt"
grep -q "more than --max-reject 1" "$T/err" && [ -e "$T/m/shard-00000.h5" ] && [ "$(wc -l <"$T/m/rejected.txt")" -eq 2 ] \
    && pass max_reject_writes_everything || fail max_reject_writes_everything "$(cat "$T/err")"
expect_status max_reject_not_exceeded 0 dspack -q -o "$T/m" --size 16 --max-reject 2 --overwrite "$T/split/evil.txt"

# --- an -o that already holds shards: refused, nothing touched; --overwrite replaces ---
# (the slip: the val manifest packed into the training set's directory)
dspack -q -o "$T/w" --size 32 --shard-size 5 "$M" && dspack -q -o "$T/w2" --size 32 --shard-size 5 "$M" &&
    touch "$T/w/shard-00099.h5" || fail setup_w
before=$(cd "$T/w" && ls -l --time-style=+%s.%N && md5sum *)
expect_status refuses_other_shard_set 1 dspack -o "$T/w" --size 16 "$T/split/val.txt"
n_w=$(ls "$T/w" | grep -c '^shard-.*\.h5$')
if grep -qF "$T/w already holds a shard set of $n_w shard files (shard-00000.h5: 5 images of 32x32, fit crop" \
    "$T/err" && grep -q -- "--overwrite" "$T/err" && grep -q -- "--resume" "$T/err" &&
    [ "$(cd "$T/w" && ls -l --time-style=+%s.%N && md5sum *)" = "$before" ]; then
    pass refusal_names_the_set_and_touches_nothing; else fail refusal_names_the_set_and_touches_nothing "$(cat "$T/err")"; fi
expect_status refuses_same_manifest_too 1 dspack -o "$T/w2" --size 32 --shard-size 5 "$M"
expect_status overwrite_replaces 0 dspack -o "$T/w" --size 16 --overwrite "$T/split/val.txt"
grep -qF "replacing the $n_w shards in $T/w (--overwrite)" "$T/err" && [ "$(ls "$T/w" | grep -c '^shard-')" = 1 ] &&
    h5dump -a height "$T/w/shard-00000.h5" | grep -q '(0): 16' && pass overwrite_says_so_and_replaces ||
    fail overwrite_says_so_and_replaces "$(cat "$T/err"; ls "$T/w")"
# --resume keeps its meaning: into a complete set of the same plan it rewrites nothing.
expect_status resume_into_a_set_allowed 0 dspack -o "$T/w2" --size 32 --shard-size 5 --resume "$M"
grep -q "kept $(ls "$T/w2" | grep -c '^shard-') of" "$T/err" && pass resume_keeps_matching_shards ||
    fail resume_keeps_matching_shards "$(cat "$T/err")"
# A directory with no shard (only a stale temporary, or nothing) is not a set.
mkdir -p "$T/w3" && touch "$T/w3/shard-00000.h5.123.tmp" "$T/w3/notes.txt"
expect_status dir_without_shards_packs 0 dspack -q -o "$T/w3" --size 16 "$T/split/val.txt"

# --- nothing to pack is an error, not "packed 0 images" ---
printf '# ds-manifest 1 root=%s
' "$T/tree" >"$T/split/empty.txt"
expect_status header_only_manifest 1 dspack -o "$T/hdr0" --size 16 "$T/split/empty.txt"
grep -q "empty.txt lists no images" "$T/err" && [ ! -e "$T/hdr0" ] && pass header_only_named ||
    fail header_only_named "$(cat "$T/err")"
printf '# ds-manifest 1 root=%s
0\t../tree/ant/1.JPEG\n' "$T/tree" >"$T/split/none.txt"
expect_status nothing_packed 1 dspack -o "$T/n0" --size 16 "$T/split/none.txt"
grep -q "none of the 1 images of .*none.txt could be packed" "$T/err" && pass nothing_packed_named ||
    fail nothing_packed_named "$(cat "$T/err")"

# --- usage and runtime errors ---
expect_status size_zero 2 dspack -o "$T/x" --size 0 "$M"
expect_status no_out 2 dspack "$M"
expect_status bad_fit 2 dspack -o "$T/x" --fit stretch "$M"
expect_status missing_manifest 1 dspack -o "$T/x" "$T/nope.txt"
grep -q "nope.txt" "$T/err" && pass missing_manifest_named || fail missing_manifest_named
expect_status missing_root 1 dspack -o "$T/x" --root "$T/no-such-root" "$M"
printf '# ds-manifest 1 root=%s\n7\tant/0.JPEG\n' "$T/tree" >"$T/split/badlabel.txt"
expect_status label_out_of_range 1 dspack -o "$T/x" "$T/split/badlabel.txt"
grep -q "out of range" "$T/err" && pass label_error_says_why || fail label_error_says_why "$(cat "$T/err")"

# --json summary
dspack -q -o "$T/j" --size 16 --json "$T/split/evil.txt" >"$T/j.json"
"$PYTHON" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['packed']==2 and d['rejected']==2 and d['shards']==1, d" \
    "$T/j.json" && pass json_summary || fail json_summary "$(cat "$T/j.json")"

rm -rf "$T"
finish
