#!/bin/bash
# Per-image checksums end to end: dspack writes /checksums (XXH3-64 of each image's pixels)
# and /label_checksums, /path_checksums, dspack --verify passes an intact set and names every
# bad shard, image and field, dstrain and dseval stop on a flipped pixel byte naming shard,
# index and source path, in both layouts (contiguous, --compress), and on a flipped label bit
# or path byte naming the image and the field; shards packed before checksums still read,
# unchecked. Checkpoint tensors: each carries the XXH3-64 of its stored bytes, and a flipped
# bit in one is named by dseval, dstrain --init and --resume; a checkpoint without checksums
# still loads.
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 16 4 1 || { fail data "cannot make the synthetic set"; finish; }
dsplit -q --val 0.25 -o "$T/split" "$T/tree" &&
    dspack -q --size 16 --shard-size 12 -o "$T/c" "$T/split/train.txt" &&
    dspack -q --size 16 --shard-size 12 --compress 6 -o "$T/z" "$T/split/train.txt" ||
    { fail pack "dsplit/dspack failed"; finish; }

# FILE IMAGE [recompress]: flips one bit in the middle of that image's stored bytes
# (contiguous: inside /images at its offset; compressed: inside its deflate chunk, which
# deflate's own check catches) and prints the image's path. recompress: a compressed image's
# chunk is replaced by a valid deflate stream of pixels with one bit flipped, which only the
# checksum can catch.
flip() {
    "$PYTHON" - "$1" "$2" "${3:-}" <<'PY'
import sys, zlib, h5py, numpy as np
path, i = sys.argv[1], int(sys.argv[2])
if sys.argv[3] == "recompress":
    with h5py.File(path, "r+") as f:
        d = f["images"]
        a = np.ascontiguousarray(d[i:i + 1])
        a.reshape(-1)[a.size // 2] ^= 0x10
        # The shuffle filter of 1-byte elements leaves bytes as they are: deflate alone.
        d.id.write_direct_chunk((i, 0, 0, 0), zlib.compress(a.tobytes(), 6))
        p = f["paths"][i]
        print(p.decode() if isinstance(p, bytes) else p)
    sys.exit(0)
with h5py.File(path, "r") as f:
    d = f["images"]
    n, h, w, c = d.shape
    if d.chunks is None:
        at = d.id.get_offset() + i * h * w * c + h * w * c // 2
    else:
        info = d.id.get_chunk_info_by_coord((i, 0, 0, 0))
        at = info.byte_offset + info.size // 2
    p = f["paths"][i]
    print(p.decode() if isinstance(p, bytes) else p)
with open(path, "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0x10]))
PY
}
# names ERRFILE SHARD INDEX PATH: the error names that shard file, image index and path.
names() { grep -qF "$2: image $3 ($4)" "$1"; }

# --- the format ---
h5dump -H -A -d checksums "$T/c/shard-00000.h5" >"$T/h" 2>&1
if grep -q 'H5T_STD_U64LE' "$T/h" && grep -q '( 12 )' "$T/h" && h5dump -a checksums/algorithm "$T/c/shard-00000.h5" |
    grep -q '"xxh3-64"'; then pass checksums_schema; else fail checksums_schema "$(cat "$T/h")"; fi
ok=1
for d in label_checksums path_checksums; do
    h5dump -H -A -d $d "$T/c/shard-00000.h5" 2>&1 | grep -q 'H5T_STD_U64LE' &&
        h5dump -a $d/algorithm "$T/c/shard-00000.h5" | grep -q '"xxh3-64"' || ok=0
done
# (their values: tests/unit/test_shard.c)
[ $ok = 1 ] && pass label_path_checksums_schema || fail label_path_checksums_schema
# The values are the same whichever layout stored the pixels.
h5dump -d checksums -y "$T/c/shard-00001.h5" | sed -n '/DATA/,$p' >"$T/sc"
h5dump -d checksums -y "$T/z/shard-00001.h5" | sed -n '/DATA/,$p' >"$T/sz"
check checksums_same_both_layouts cmp -s "$T/sc" "$T/sz"

# --- intact sets pass ---
for set in c z; do
    expect_status "verify_intact_$set" 0 dspack --verify --json "$T/$set"
    if grep -q 'verified .*: 4 shards, 48 images, 0.0369 MB .*0 bad shards, 0 bad images' "$T/err" &&
        "$PYTHON" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['images']==48 and d['images_bad']==0 \
            and d['shards']==4 and d['bytes']==48*16*16*3 and d['shards_unchecked']==0, d" "$T/out"; then
        pass "verify_summary_$set"; else fail "verify_summary_$set" "$(cat "$T/err" "$T/out")"; fi
done
expect_status verify_one_thread 0 dspack --verify --threads 1 "$T/c"

# A checkpoint trained on the intact set, for dseval.
TRAIN=(--arch resnet20 --crop 16 --batch 8 --epochs 1 --lr 0.05 --threads 2 --loader-threads 2 -q)
dstrain --train "$T/c" "${TRAIN[@]}" -o "$T/run" 2>"$T/run.err"
check train_on_intact_set test -f "$T/run/last.h5"
expect_status dseval_intact 0 dseval "$T/run/last.h5" "$T/c"

# --- a flipped byte, contiguous: two images in two shards ---
cp -r "$T/c" "$T/cb"
p1=$(flip "$T/cb/shard-00001.h5" 5) && p3=$(flip "$T/cb/shard-00003.h5" 0) || fail flip_contiguous
expect_status verify_finds_flips 1 dspack --verify "$T/cb"
if names "$T/err" shard-00001.h5 5 "$p1" && names "$T/err" shard-00003.h5 0 "$p3" &&
    [ "$(grep -c 'is corrupt' "$T/err")" -eq 2 ] && grep -q '2 bad shards, 2 bad images' "$T/err"; then
    pass verify_names_every_bad_image; else fail verify_names_every_bad_image "$(cat "$T/err")"; fi
# The shards without a flip are not blamed.
grep -qE 'shard-0000[02]\.h5' "$T/err" && fail verify_blames_only_bad_shards "$(cat "$T/err")" ||
    pass verify_blames_only_bad_shards

expect_status dstrain_stops_on_flip 1 dstrain --train "$T/cb" "${TRAIN[@]}" -o "$T/run_bad"
if { names "$T/err" shard-00001.h5 5 "$p1" || names "$T/err" shard-00003.h5 0 "$p3"; } &&
    grep -q 'is corrupt' "$T/err" && [ ! -e "$T/run_bad/last.h5" ]; then
    pass dstrain_names_the_image; else fail dstrain_names_the_image "$(cat "$T/err")"; fi

expect_status dseval_stops_on_flip 1 dseval "$T/run/last.h5" "$T/cb"
if names "$T/err" shard-00001.h5 5 "$p1" || names "$T/err" shard-00003.h5 0 "$p3"; then
    pass dseval_names_the_image; else fail dseval_names_the_image "$(cat "$T/err")"; fi

# --- a flipped byte, compressed: deflate or the checksum catches it ---
cp -r "$T/z" "$T/zb"
pz=$(flip "$T/zb/shard-00002.h5" 7) || fail flip_compressed
expect_status verify_finds_flip_compressed 1 dspack --verify "$T/zb"
if names "$T/err" shard-00002.h5 7 "$pz" && grep -q '1 bad shards, 1 bad images' "$T/err"; then
    pass verify_names_compressed_image; else fail verify_names_compressed_image "$(cat "$T/err")"; fi
expect_status dstrain_stops_on_flip_compressed 1 dstrain --train "$T/zb" "${TRAIN[@]}" -o "$T/run_zb"
names "$T/err" shard-00002.h5 7 "$pz" && pass dstrain_names_compressed_image ||
    fail dstrain_names_compressed_image "$(cat "$T/err")"
expect_status dseval_stops_on_flip_compressed 1 dseval "$T/run/last.h5" "$T/zb"
names "$T/err" shard-00002.h5 7 "$pz" && pass dseval_names_compressed_image ||
    fail dseval_names_compressed_image "$(cat "$T/err")"

# A compressed image whose chunk inflates cleanly to other pixels: the checksum catches it.
pr=$(flip "$T/zb/shard-00000.h5" 3 recompress) || fail recompress
expect_status verify_finds_recompressed 1 dspack --verify "$T/zb"
if names "$T/err" shard-00000.h5 3 "$pr" && grep -q "shard-00000.h5: image 3 .* is corrupt" "$T/err" &&
    names "$T/err" shard-00002.h5 7 "$pz" && grep -q '2 bad shards, 2 bad images' "$T/err"; then
    pass verify_checksum_catches_valid_deflate; else fail verify_checksum_catches_valid_deflate "$(cat "$T/err")"; fi
rm "$T/zb/shard-00002.h5" && cp "$T/z/shard-00002.h5" "$T/zb/"
expect_status dseval_stops_on_recompressed 1 dseval "$T/run/last.h5" "$T/zb"
grep -q "shard-00000.h5: image 3 ($pr) is corrupt" "$T/err" && pass dseval_checksum_catches_valid_deflate ||
    fail dseval_checksum_catches_valid_deflate "$(cat "$T/err")"

# --- damaged structure: every bad shard named, the good ones still checked ---
cp -r "$T/c" "$T/s"
rm "$T/s/shard-00001.h5"
head -c 2000 "$T/c/shard-00002.h5" >"$T/s/shard-00002.h5"
pl=$(flip "$T/s/shard-00003.h5" 4)
"$PYTHON" -c "import h5py,sys; f=h5py.File(sys.argv[1],'r+'); f['labels'][0]=99; f.close()" "$T/s/shard-00000.h5"
expect_status verify_structure 1 dspack --verify "$T/s"
if grep -q 'shard-00000.h5: image 0 (.*) has a damaged label: /labels\[0\] = 99 does not match' "$T/err" &&
    grep -q 'shard-00001.h5: missing' "$T/err" && grep -q 'shard-00002.h5: not a valid shard' "$T/err" &&
    names "$T/err" shard-00003.h5 4 "$pl" && grep -q '4 bad shards, 2 bad images' "$T/err"; then
    pass verify_names_every_bad_shard; else fail verify_names_every_bad_shard "$(cat "$T/err")"; fi

# --- a flipped bit in /labels and a flipped byte in a /paths string: each named ---
# FILE LABEL_INDEX PATH_INDEX: flips bit 0 of /labels[LABEL_INDEX] (at the dataset's file
# offset) and one letter of /paths[PATH_INDEX] (where its bytes sit in the file's heap);
# prints that path as it reads after the flip.
flip_entries() {
    "$PYTHON" - "$@" <<'PY'
import sys, h5py
p, li, pi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with h5py.File(p, "r") as f:
    off = f["labels"].id.get_offset() + 4 * li
    path = f["paths"][pi]
b = bytearray(open(p, "rb").read())
b[off] ^= 1
assert b.count(path) == 1, path
at = b.find(path) + len(path) - 5    # a letter of the name, before its extension
b[at] ^= 1
open(p, "wb").write(b)
print(bytes(b[b.find(path[:-5]):][:len(path)]).decode())
PY
}
cp -r "$T/c" "$T/e"
pe=$(flip_entries "$T/e/shard-00002.h5" 3 6) || fail flip_entries
le=$("$PYTHON" -c "import h5py,sys; print(h5py.File(sys.argv[1],'r')['paths'][3].decode())" "$T/e/shard-00002.h5")
expect_status verify_finds_label_and_path 1 dspack --verify "$T/e"
if grep -qF "shard-00002.h5: image 3 ($le) has a damaged label: /labels[3] =" "$T/err" &&
    grep -qF "shard-00002.h5: image 6 has a damaged path: /paths[6] = \"$pe\" does not match /path_checksums[6]" "$T/err" &&
    grep -q '1 bad shards, 2 bad images' "$T/err"; then
    pass verify_names_label_and_path; else fail verify_names_label_and_path "$(cat "$T/err")"; fi
expect_status dstrain_stops_on_label 1 dstrain --train "$T/e" "${TRAIN[@]}" -o "$T/run_e"
if grep -qF "shard-00002.h5: image 3 ($le) has a damaged label" "$T/err" &&
    grep -qF "shard-00002.h5: image 6 has a damaged path" "$T/err" && [ ! -e "$T/run_e/last.h5" ]; then
    pass dstrain_names_label_and_path; else fail dstrain_names_label_and_path "$(cat "$T/err")"; fi
expect_status dseval_stops_on_label 1 dseval "$T/run/last.h5" "$T/e"
grep -qF "shard-00002.h5: image 3 ($le) has a damaged label" "$T/err" && pass dseval_names_label ||
    fail dseval_names_label "$(cat "$T/err")"
# --resume does not keep a shard whose label or path changed: the set equals a fresh run's.
dspack -q --size 16 --shard-size 12 --resume -o "$T/e" "$T/split/train.txt"
cmp -s "$T/c/shard-00002.h5" "$T/e/shard-00002.h5" && pass resume_rewrites_damaged_entries ||
    fail resume_rewrites_damaged_entries

# --- shards packed before checksums: read, unchecked, said so ---
cp -r "$T/c" "$T/old"
"$PYTHON" -c "
import h5py, sys
for p in sys.argv[1:]:
    with h5py.File(p, 'r+') as f: del f['checksums'], f['label_checksums'], f['path_checksums']
" "$T"/old/shard-0000[013].h5
expect_status verify_old_shards 0 dspack --verify "$T/old"
grep -q '3 of 4 shards (36 images) have no /checksums' "$T/err" && pass verify_says_unchecked ||
    fail verify_says_unchecked "$(cat "$T/err")"
grep -q '3 of 4 shards (36 images) have no /label_checksums and /path_checksums .*not covered' "$T/err" &&
    pass verify_says_labels_uncovered || fail verify_says_labels_uncovered "$(cat "$T/err")"
expect_status dseval_old_shards 0 dseval -v "$T/run/last.h5" "$T/old"
grep -q '3 of 4 shards have no /checksums' "$T/err" && pass dseval_verbose_says_unchecked ||
    fail dseval_verbose_says_unchecked "$(cat "$T/err")"
expect_status dstrain_old_shards 0 dstrain --train "$T/old" "${TRAIN[@]}" -o "$T/run_old"
# --resume rewrites a shard packed before checksums: the set equals a fresh run's.
dspack -q --size 16 --shard-size 12 --resume -o "$T/old" "$T/split/train.txt"
same=1
for f in "$T"/c/shard-*.h5; do cmp -s "$f" "$T/old/$(basename "$f")" || { same=0; echo "differs: $f"; }; done
[ $same = 1 ] && pass resume_rewrites_unchecked_shards || fail resume_rewrites_unchecked_shards
# A /checksums this build does not know is refused, not ignored.
cp -r "$T/c" "$T/alg"
"$PYTHON" -c "import h5py,sys; f=h5py.File(sys.argv[1],'r+'); f['checksums'].attrs['algorithm']='crc32c'; f.close()" \
    "$T/alg/shard-00001.h5"
expect_status dseval_unknown_algorithm 1 dseval "$T/run/last.h5" "$T/alg"
grep -q "shard-00001.h5: not a valid shard: /checksums has no 'algorithm' attribute or not 'xxh3-64'" "$T/err" &&
    pass unknown_algorithm_named || fail unknown_algorithm_named "$(cat "$T/err")"

# --- checkpoint tensors ---
# ckflip FILE DATASET: flips one exponent bit of the dataset's second float where the file
# holds its bytes (below HDF5, as a disk or a copy would).
ckflip() {
    "$PYTHON" - "$1" "$2" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    at = f[sys.argv[2]].id.get_offset() + 4 + 3   # little-endian float32: byte 3 holds the exponent
with open(sys.argv[1], "r+b") as f:
    f.seek(at)
    b = f.read(1)
    f.seek(at)
    f.write(bytes([b[0] ^ 0x40]))
PY
}
h5dump -A -a model/conv1.weight/xxh3_64 "$T/run/last.h5" >"$T/h" 2>&1
grep -q 'H5T_STD_U64LE' "$T/h" && h5dump -A -a optimizer/fc.weight/xxh3_64 -a metrics/xxh3_64 "$T/run/last.h5"     >/dev/null 2>&1 && pass checkpoint_checksum_schema || fail checkpoint_checksum_schema "$(cat "$T/h")"
cp "$T/run/last.h5" "$T/wflip.h5"
ckflip "$T/wflip.h5" model/layer2.0.conv1.weight || fail ckflip
ckbad() { grep -q "$2: /$3 is corrupt: its stored bytes hash to [0-9]*, its xxh3_64 attribute holds [0-9]* (the file changed after dstrain wrote it" "$1"; }
expect_status dseval_refuses_flipped_weight 1 dseval "$T/wflip.h5" "$T/c"
ckbad "$T/err" wflip.h5 model/layer2.0.conv1.weight && pass dseval_names_flipped_tensor ||
    fail dseval_names_flipped_tensor "$(cat "$T/err")"
expect_status init_refuses_flipped_weight 1 dstrain --train "$T/c" "${TRAIN[@]}" --init "$T/wflip.h5" -o "$T/run_init"
ckbad "$T/err" wflip.h5 model/layer2.0.conv1.weight && pass init_names_flipped_tensor ||
    fail init_names_flipped_tensor "$(cat "$T/err")"
# --resume reads the momentum too: a flip there is named, where dseval (weights only) reads none of it
cp -r "$T/run" "$T/run_m"
last=$(readlink "$T/run_m/last.h5")
ckflip "$T/run_m/$last" optimizer/fc.weight || fail ckflip
expect_status resume_refuses_flipped_momentum 1 dstrain --train "$T/c" "${TRAIN[@]}" --epochs 2 --override --resume "$T/run_m"
ckbad "$T/err" "$last" optimizer/fc.weight && pass resume_names_flipped_tensor ||
    fail resume_names_flipped_tensor "$(cat "$T/err")"
expect_status dseval_reads_no_momentum 0 dseval "$T/run_m/$last" "$T/c"
# A checkpoint without checksums (an older build's, or an import's) loads, unverified; --verbose says so.
cp "$T/run/last.h5" "$T/nosum.h5"
"$PYTHON" -c "
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    for g in ('model', 'optimizer'):
        for d in f[g].values(): del d.attrs['xxh3_64']
    del f['metrics'].attrs['xxh3_64']
" "$T/nosum.h5"
expect_status dseval_loads_unchecked_checkpoint 0 dseval -v "$T/nosum.h5" "$T/c"
grep -q "nosum.h5: its tensors carry no xxh3_64 checksums" "$T/err" && pass dseval_verbose_says_unverified ||
    fail dseval_verbose_says_unverified "$(cat "$T/err")"

# --- usage ---
expect_status verify_with_out 2 dspack --verify -o "$T/x" "$T/c"
expect_status verify_missing_dir 1 dspack --verify "$T/nope"
grep -q "nope" "$T/err" && pass verify_missing_dir_named || fail verify_missing_dir_named "$(cat "$T/err")"
expect_status verify_not_shards 1 dspack --verify "$T/split"
grep -q "no shard-NNNNN.h5 files" "$T/err" && pass verify_not_shards_named || fail verify_not_shards_named

[ -n "${KEEP_T:-}" ] || rm -rf "$T"
finish
