#!/bin/bash
# dsplit --val-images: an ILSVRC2012-shaped validation set (a flat folder of
# ILSVRC2012_val_<8 digits>.JPEG, packed as a tar and extracted as docs/IMAGENET.md says) with its
# ground truth as the devkit gives it (ID list + meta.mat, written here byte by byte as MATLAB
# writes a level 5 file, compressed and not) and as Kaggle gives it (LOC_val_solution.csv +
# LOC_synset_mapping.txt). Each image is one flat colour that encodes its class, so every
# manifest label is checked against the pixels. The IDs run in another order than the sorted
# WNIDs (as in the real devkit): a label taken from the ID instead of the WNID fails. Then the
# errors (unknown WNID, missing image, unlisted image, duplicates, hostile meta.mat) and
# dspack + dseval on the manifest.
. "$(dirname "$0")/lib.sh"

"$PYTHON" -c 'import PIL, numpy' 2>/dev/null || { fail python_modules "$PYTHON lacks Pillow or numpy"; finish; }

# Six leaf classes; ILSVRC2012_ID i (1-based) names WNIDS[i-1], so ID order != sorted order.
# meta.mat also holds three inner nodes (IDs 7, 300, 1860), as the real one holds 860.
"$PYTHON" - "$T" <<'PY' || { fail fixture "cannot write the fake devkit"; finish; }
import os, random, struct, sys, zlib
import numpy as np
from PIL import Image

out = sys.argv[1]
WNIDS = ["n04000005", "n01000001", "n09000009", "n02000002", "n07000007", "n03000003"]
INNER = ["n00001740", "n00002137", "n00004258"]
ORDER = sorted(WNIDS)                      # the training tree's classes.txt
COLOURS = [(230, 30, 30), (30, 200, 30), (30, 30, 230), (220, 220, 30), (30, 210, 210), (200, 30, 200)]
def colour(wnid):                           # by training label, so the test can read it back
    return COLOURS[ORDER.index(wnid)]

def jpeg(path, wnid, size=(20, 16)):
    Image.new("RGB", size, colour(wnid)).save(path, quality=95)

# Training tree: two images per class in sorted class folders.
for w in WNIDS:
    os.makedirs(os.path.join(out, "train", w))
    for i in range(2):
        jpeg(os.path.join(out, "train", w, "%s_%d.JPEG" % (w, i)), w)

# 36 validation images, six per class, in a shuffled class order.
rng = random.Random(7)
truth = [1 + i % 6 for i in range(36)]
rng.shuffle(truth)
os.makedirs(os.path.join(out, "valsrc"))
for i, ident in enumerate(truth, 1):
    jpeg(os.path.join(out, "valsrc", "ILSVRC2012_val_%08d.JPEG" % i), WNIDS[ident - 1], (18 + i % 5, 16))
os.makedirs(os.path.join(out, "devkit", "data"))
with open(os.path.join(out, "devkit", "data", "ILSVRC2012_validation_ground_truth.txt"), "w") as f:
    f.write("".join("%d\n" % t for t in truth))

# Kaggle: LOC_synset_mapping.txt (line i = ID i) and LOC_val_solution.csv (any row order,
# CRLF, several boxes per image).
with open(os.path.join(out, "LOC_synset_mapping.txt"), "w") as f:
    f.write("".join("%s words for %d, more words\n" % (w, i) for i, w in enumerate(WNIDS)))
rows = ["ILSVRC2012_val_%08d,%s 1 2 10 12 %s 0 0 5 5" % (i, WNIDS[t - 1], WNIDS[t - 1]) for i, t in enumerate(truth, 1)]
rng.shuffle(rows)
with open(os.path.join(out, "LOC_val_solution.csv"), "w", newline="") as f:
    f.write("ImageId,PredictionString\r\n" + "".join(r + "\r\n" for r in rows))

# MAT-file level 5, as MATLAB writes it: small elements for <= 4 bytes, a double's value in
# the smallest type that holds it (uint8, uint16, else double), strings as uint16 (one as
# UTF-8, as other writers do), struct fields element-major.
def el(t, data):
    if len(data) <= 4:
        return struct.pack("<HH", t, len(data)) + data.ljust(4, b"\0")
    return struct.pack("<II", t, len(data)) + data + b"\0" * (-len(data) % 8)
def matrix(cls, dims, name, *parts):
    body = (el(6, struct.pack("<II", cls, 0)) + el(5, struct.pack("<%di" % len(dims), *dims)) + el(1, name)
            + b"".join(parts))
    return struct.pack("<II", 14, len(body)) + body
def double(v):
    data = el(2, bytes([v])) if v < 256 else el(4, struct.pack("<H", v)) if v < 1000 else el(9, struct.pack("<d", v))
    return matrix(6, [1, 1], b"", data)
def string(s):
    return matrix(4, [1, len(s)], b"", el(16, s.encode()) if s == INNER[0] else el(4, s.encode("utf-16-le")))
def synsets(entries, fields=("ILSVRC2012_ID", "WNID", "words", "num_children", "children")):
    names = b"".join(f.encode().ljust(32, b"\0") for f in fields)
    parts = [el(5, struct.pack("<i", 32)), el(1, names)]
    for ident, wnid in entries:
        value = {"ILSVRC2012_ID": double(ident), "WNID": string(wnid), "words": string("words of " + wnid),
                 "num_children": double(0 if ident <= 6 else 2),
                 "children": matrix(6, [1, 0], b"", el(9, b""))}
        parts += [value[f] for f in fields]
    return matrix(2, [len(entries), 1], b"synsets", *parts)
def matfile(var, compressed):
    head = b"MATLAB 5.0 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2012".ljust(116, b" ")
    head += b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM"
    if compressed:
        z = zlib.compress(var)
        return head + struct.pack("<II", 15, len(z)) + z
    return head + var
entries = [(i + 1, w) for i, w in enumerate(WNIDS)] + list(zip((7, 300, 1860), INNER))
mixed = entries[3:] + entries[:3]                          # element order is not ID order
other = matrix(6, [1, 1], b"x", el(9, struct.pack("<d", 1.5)))   # a variable before the one read
def write(name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
write("devkit/data/meta.mat", matfile(synsets(mixed), True))
write("meta-plain.mat", matfile(other + synsets(mixed), False))
write("meta-dupid.mat", matfile(synsets(mixed + [(3, "n05000005")]), False))
write("meta-dupwnid.mat", matfile(synsets(mixed + [(10, WNIDS[0])]), False))
write("meta-nofield.mat", matfile(synsets(mixed, ("ILSVRC2012_ID", "words")), False))
write("meta-novar.mat", matfile(other, False))
big = bytearray(matfile(synsets(mixed), False)); big[126:128] = b"MI"
write("meta-bigendian.mat", bytes(big))
write("meta-v73.mat", b"MATLAB 7.3 MAT-file, Platform: GLNXA64".ljust(512, b" "))
PY

# The documented step (docs/IMAGENET.md): the images come as one tar, extracted into a folder.
tar -cf "$T/ILSVRC2012_img_val.tar" -C "$T/valsrc" . && mkdir -p "$T/val" && tar -xf "$T/ILSVRC2012_img_val.tar" -C "$T/val" \
    || { fail fixture "cannot make the val tar"; finish; }
dsplit -q --val 0 -o "$T/split" "$T/train" >/dev/null || { fail fixture "dsplit of the training tree"; finish; }

# check_labels MANIFEST [N]: every line's label is the training label of its image's colour
# (the nearest of the six), and the manifest has N lines (36).
check_labels() {
    "$PYTHON" - "$1" "${2:-36}" <<'PY'
import os, sys
import numpy as np
from PIL import Image
COLOURS = np.array([(230, 30, 30), (30, 200, 30), (30, 30, 230), (220, 220, 30), (30, 210, 210), (200, 30, 200)])
lines = open(sys.argv[1]).read().splitlines()
root = lines[0].split("root=", 1)[1]
bad = 0
for line in lines[1:]:
    label, path = line.split("\t")
    px = np.asarray(Image.open(os.path.join(root, path)).convert("RGB"), np.float64).reshape(-1, 3).mean(0)
    want = int(np.argmin(((COLOURS - px) ** 2).sum(1)))
    if int(label) != want:
        bad += 1
        print("  %s: label %s, its pixels say %d" % (path, label, want), file=sys.stderr)
n = len(lines) - 1
if n != int(sys.argv[2]):
    print("  %d entries, want %s" % (n, sys.argv[2]), file=sys.stderr)
sys.exit(1 if bad or n != int(sys.argv[2]) else 0)
PY
}
VAL=(dsplit --val-images "$T/val" --classes "$T/split/classes.txt")

# The three ways of naming the ground truth give the same manifest, labelled by the pixels.
expect_status "devkit (compressed meta.mat) exits 0" 0 "${VAL[@]}" --devkit "$T/devkit" -o "$T/v-devkit" --json
check "devkit: every label matches its image" check_labels "$T/v-devkit/val.txt"
grep -q '"images": 36, "left_out": 0, "classes": 6' "$T/out" && pass "devkit: --json counts" \
    || fail "devkit: --json counts" "$(cat "$T/out")"
cmp -s "$T/split/classes.txt" "$T/v-devkit/classes.txt" && pass "devkit: classes.txt beside val.txt is the training one" \
    || fail "devkit: classes.txt beside val.txt is the training one"
head -1 "$T/v-devkit/val.txt" | grep -qx "# ds-manifest 1 root=$(cd "$T/val" && pwd -P)" \
    && pass "devkit: the manifest's root is the images folder" || fail "devkit: the manifest's root is the images folder"
sort -t$'\t' -k1,1n -k2,2 "$T/v-devkit/val.txt" | grep -v '^#' | diff -q - <(grep -v '^#' "$T/v-devkit/val.txt") >/dev/null \
    && pass "devkit: lines sorted by (label, path)" || fail "devkit: lines sorted by (label, path)"
expect_status "plain meta.mat after another variable" 0 "${VAL[@]}" --val-labels "$T/devkit/data/ILSVRC2012_validation_ground_truth.txt" \
    --synsets "$T/meta-plain.mat" -o "$T/v-plain"
check "plain meta.mat: every label matches its image" check_labels "$T/v-plain/val.txt"
check "plain meta.mat: the same manifest" cmp -s "$T/v-devkit/val.txt" "$T/v-plain/val.txt"
expect_status "ID list + LOC_synset_mapping.txt" 0 "${VAL[@]}" --val-labels "$T/devkit/data/ILSVRC2012_validation_ground_truth.txt" \
    --synsets "$T/LOC_synset_mapping.txt" -o "$T/v-list"
check "synset list: every label matches its image" check_labels "$T/v-list/val.txt"
check "synset list: the same manifest" cmp -s "$T/v-devkit/val.txt" "$T/v-list/val.txt"
expect_status "Kaggle LOC_val_solution.csv" 0 "${VAL[@]}" --val-labels "$T/LOC_val_solution.csv" -o "$T/v-csv"
check "Kaggle: every label matches its image" check_labels "$T/v-csv/val.txt"
check "Kaggle: the same manifest" cmp -s "$T/v-devkit/val.txt" "$T/v-csv/val.txt"
# The trap this mode exists for: labels taken as ILSVRC2012_ID - 1 disagree with the pixels.
paste <(seq 1 36) "$T/devkit/data/ILSVRC2012_validation_ground_truth.txt" | sort -n | while read -r i id; do
    printf '%d\tILSVRC2012_val_%08d.JPEG\n' $((id - 1)) "$i"; done | (head -1 "$T/v-devkit/val.txt"; cat) >"$T/naive.txt"
if check_labels "$T/naive.txt" 2>/dev/null; then fail "the ID order differs from the sorted WNIDs (a naive mapping fails)"
else pass "the ID order differs from the sorted WNIDs (a naive mapping fails)"; fi

# Errors name the file and line; nothing is written.
err_case() {   # NAME PATTERN ARGS...: exit 1, the message matches, no val.txt in the output
    local name=$1 pat=$2; shift 2
    rm -rf "$T/v-err"
    expect_status "$name exits 1" 1 "${VAL[@]}" -o "$T/v-err" "$@"
    if grep -q -- "$pat" "$T/err" && [ ! -e "$T/v-err/val.txt" ]; then pass "$name: message, nothing written"
    else fail "$name: message, nothing written" "$(head -3 "$T/err")"; fi
}
GT=$T/devkit/data/ILSVRC2012_validation_ground_truth.txt
grep -v n09000009 "$T/split/classes.txt" >"$T/classes5.txt"
err_case "unknown WNID" "LOC_val_solution.csv:[0-9]*: n09000009 (image ILSVRC2012_val_[0-9]*.JPEG) is not one of the 5 training classes (6 images" \
    --classes "$T/classes5.txt" --val-labels "$T/LOC_val_solution.csv"
expect_status "--subset leaves them out" 0 "${VAL[@]}" --classes "$T/classes5.txt" --val-labels "$T/LOC_val_solution.csv" \
    --subset -o "$T/v-subset" --json
grep -q '"images": 30, "left_out": 6' "$T/out" && ! grep -q $'^5\t' "$T/v-subset/val.txt" \
    && pass "--subset: 30 images, labels of the 5 classes" || fail "--subset: 30 images, labels of the 5 classes"
mv "$T/val/ILSVRC2012_val_00000017.JPEG" "$T/moved.JPEG"
err_case "missing image" "ground_truth.txt:17: image ILSVRC2012_val_00000017.JPEG is not in .*(1 of the 36" --devkit "$T/devkit"
mv "$T/moved.JPEG" "$T/val/ILSVRC2012_val_00000017.JPEG"
cp "$T/val/ILSVRC2012_val_00000001.JPEG" "$T/val/ILSVRC2012_val_00000037.JPEG"
err_case "unlisted image (count mismatch)" "holds 1 images that .* does not list (the first: ILSVRC2012_val_00000037.JPEG); the folder holds 37, the ground truth lists 36" \
    --devkit "$T/devkit"
rm "$T/val/ILSVRC2012_val_00000037.JPEG"
mkdir -p "$T/sorted/n01000001" && cp "$T/val/ILSVRC2012_val_00000001.JPEG" "$T/sorted/n01000001/"
err_case "a folder of class folders" "sorted holds no images but 1 folders: .* is a class-folder tree" --val-images "$T/sorted" --devkit "$T/devkit"
{ cat "$T/split/classes.txt"; head -1 "$T/split/classes.txt"; } >"$T/dupclasses.txt"
err_case "a class twice in classes.txt" "class n01000001 is listed twice" --classes "$T/dupclasses.txt" --devkit "$T/devkit"
head -35 "$GT" >"$T/gt35.txt"
err_case "short ground truth" "does not list (the first: ILSVRC2012_val_00000036.JPEG)" --val-labels "$T/gt35.txt" --synsets "$T/meta-plain.mat"
{ head -1 "$T/LOC_val_solution.csv"; sed -n 2p "$T/LOC_val_solution.csv"; tail -n +2 "$T/LOC_val_solution.csv"; } >"$T/dup.csv"
err_case "duplicate image id" "dup.csv:[0-9]*: image ILSVRC2012_val_[0-9]*.JPEG is listed again (first on line 2)" --val-labels "$T/dup.csv"
sed '5s/.*/12/' "$GT" >"$T/gt-range.txt"
err_case "ID without a synset" "gt-range.txt:5: ILSVRC2012_ID 12 has no synset in" --val-labels "$T/gt-range.txt" --synsets "$T/meta-plain.mat"
sed '5s/.*/3x/' "$GT" >"$T/gt-bad.txt"
err_case "malformed ID" "gt-bad.txt:5: '3x' is not an ILSVRC2012_ID" --val-labels "$T/gt-bad.txt" --synsets "$T/meta-plain.mat"
err_case "ID list without synsets" "needs the synset table" --val-labels "$GT"
err_case "duplicate ID in meta.mat" "meta-dupid.mat: ILSVRC2012_ID 3 is given twice" --val-labels "$GT" --synsets "$T/meta-dupid.mat"
err_case "duplicate WNID in meta.mat" "meta-dupwnid.mat: WNID n04000005 is given to two ILSVRC2012_IDs, 1 and 10" \
    --val-labels "$GT" --synsets "$T/meta-dupwnid.mat"
{ cat "$T/LOC_synset_mapping.txt"; head -1 "$T/LOC_synset_mapping.txt"; } >"$T/dupsyn.txt"
err_case "duplicate WNID in a synset list" "dupsyn.txt: WNID n04000005 is given to two lines, 1 and 7" --val-labels "$GT" --synsets "$T/dupsyn.txt"
err_case "meta.mat without the WNID field" "meta-nofield.mat: variable 'synsets' has no field 'WNID'" --val-labels "$GT" --synsets "$T/meta-nofield.mat"
err_case "meta.mat without synsets" "meta-novar.mat: no variable 'synsets'" --val-labels "$GT" --synsets "$T/meta-novar.mat"
err_case "big-endian meta.mat" "big-endian MAT-file is not supported" --val-labels "$GT" --synsets "$T/meta-bigendian.mat"
err_case "v7.3 meta.mat" "not a MATLAB level 5 MAT-file" --val-labels "$GT" --synsets "$T/meta-v73.mat"
sed 's/^ImageId,PredictionString/ImageId,Prediction/' "$T/LOC_val_solution.csv" >"$T/badhead.csv"
err_case "CSV header" "badhead.csv:1: expected the header" --val-labels "$T/badhead.csv"

# Truncated and corrupted meta.mat files: refused with a message (exit 1; a flipped byte may
# also give a WNID no class has, named as such) or, when a flip leaves a readable file, read;
# never a crash (ASan checks the reads in the sanitizer pass). Every cut is refused.
"$PYTHON" - "$T" <<'PY'
import os, random, sys
t = sys.argv[1]
os.makedirs(t + "/hostile")
for name in ("meta-plain.mat", "devkit/data/meta.mat"):
    data = open(os.path.join(t, name), "rb").read()
    tag = "c" if "devkit" in name else "p"
    for cut in range(0, len(data), 13 if tag == "p" else 5):
        open("%s/hostile/%s-cut%05d.mat" % (t, tag, cut), "wb").write(data[:cut])
    rng = random.Random(5)
    for k in range(60):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(128, len(b))] = rng.randrange(256)
        open("%s/hostile/%s-flip%02d.mat" % (t, tag, k), "wb").write(bytes(b))
PY
# The sanitizer pass takes every third file (test_matfile refuses every cut under it too).
crashed=0 accepted_cut=0 n=0 k=0 every=1
[[ $BIN == *san* ]] && every=3
for f in "$T"/hostile/*.mat; do
    k=$((k + 1))
    [ $(((k - 1) % every)) -eq 0 ] || continue
    "${VAL[@]}" -q --val-labels "$GT" --synsets "$f" -o "$T/v-hostile" >/dev/null 2>"$T/err"
    rc=$?
    n=$((n + 1))
    if [ $rc -ne 0 ] && [ $rc -ne 1 ]; then crashed=$((crashed + 1)); echo "      $f: exit $rc" >&2
    elif [ $rc -eq 1 ] && ! grep -q "^dsplit: error: " "$T/err"; then crashed=$((crashed + 1)); echo "      $f: no message" >&2
    elif [ $rc -eq 0 ] && [[ $f == *cut* ]]; then accepted_cut=$((accepted_cut + 1)); fi
    rm -rf "$T/v-hostile"
done
[ $crashed -eq 0 ] && pass "hostile meta.mat ($n files): exit 0 or 1 with a message, never a crash" \
    || fail "hostile meta.mat ($n files): exit 0 or 1 with a message, never a crash" "$crashed bad exits"
[ $accepted_cut -eq 0 ] && pass "every truncated meta.mat is refused" || fail "every truncated meta.mat is refused" "$accepted_cut accepted"

# Usage and output-directory errors.
expect_status "--val-images without --classes exits 2" 2 dsplit --val-images "$T/val" --devkit "$T/devkit" -o "$T/u1"
expect_status "--val-images with a ROOT exits 2" 2 "${VAL[@]}" --devkit "$T/devkit" -o "$T/u2" "$T/train"
expect_status "--devkit with --synsets exits 2" 2 "${VAL[@]}" --devkit "$T/devkit" --synsets "$T/meta-plain.mat" -o "$T/u3"
expect_status "--classes without --val-images exits 2" 2 dsplit --classes "$T/split/classes.txt" -o "$T/u4" "$T/train"
cp "$T/split/val.txt" "$T/split-val.before"
expect_status "-o a training split exits 1" 1 "${VAL[@]}" --devkit "$T/devkit" -o "$T/split"
grep -q "holds a training split (train.txt)" "$T/err" && cmp -s "$T/split/val.txt" "$T/split-val.before" \
    && pass "-o a training split: refused, its val.txt kept" || fail "-o a training split: refused, its val.txt kept"
mkdir -p "$T/v-other" && printf 'a\nb\n' >"$T/v-other/classes.txt"
expect_status "-o with other classes exits 1" 1 "${VAL[@]}" --devkit "$T/devkit" -o "$T/v-other"
grep -q "holds other classes than" "$T/err" && [ ! -e "$T/v-other/val.txt" ] && pass "-o with other classes: refused" \
    || fail "-o with other classes: refused"
expect_status "a rerun into the same folder exits 0" 0 "${VAL[@]}" --devkit "$T/devkit" -o "$T/v-devkit"

# dspack the manifest; dseval a checkpoint trained on the training tree on it (shards and
# manifest). The classes travel with it: dseval checks the checkpoint's names against them.
dspack -q --size 16 -o "$T/packed-train" "$T/split/train.txt" >/dev/null &&
    dstrain -q --train "$T/packed-train" --arch resnet20 --crop 16 --batch 4 --epochs 1 --threads 2 -o "$T/run" >/dev/null 2>&1 \
    || fail "train a checkpoint" "dspack or dstrain failed"
expect_status "dspack the validation manifest" 0 dspack -q --size 16 -o "$T/packed-val" "$T/v-devkit/val.txt"
expect_status "dseval on the validation shards" 0 dseval -q --threads 2 --json --logits "$T/logits.h5" "$T/run/last.h5" "$T/packed-val"
grep -q '"count": 36' "$T/out" && pass "dseval counts the 36 images" || fail "dseval counts the 36 images" "$(cat "$T/out")"
"$PYTHON" - "$T/logits.h5" "$T/v-devkit/val.txt" <<'PY' && pass "dseval's labels are the manifest's" || fail "dseval's labels are the manifest's"
import sys
import h5py
with h5py.File(sys.argv[1], "r") as f:
    got = dict(zip(f["paths"].asstr()[()], f["labels"][()]))
want = {p: int(l) for l, p in (line.split("\t") for line in open(sys.argv[2]).read().splitlines()[1:])}
sys.exit(0 if got == want else 1)
PY
expect_status "dseval on the manifest itself" 0 dseval -q --threads 2 --json "$T/run/last.h5" "$T/v-devkit/val.txt"
grep -q '"count": 36' "$T/out" && pass "dseval on the manifest counts 36" || fail "dseval on the manifest counts 36" "$(cat "$T/out")"

# make pipeline's way: the val tar and the devkit archive as downloaded.
tar -czf "$T/ILSVRC2012_devkit_t12.tar.gz" -C "$T" devkit
OUT=$T/pipe IMAGENET=$T/train VAL_TAR=$T/ILSVRC2012_img_val.tar VAL_DEVKIT=$T/ILSVRC2012_devkit_t12.tar.gz ARCH=resnet20 \
    SIZE=16 CROP=16 EPOCHS=1 BATCH=4 DEVICE=cpu TRAIN_ARGS="--threads 2" BIN=$BIN bash "$DS_ROOT/scripts/pipeline.sh" >"$T/out" 2>"$T/err" \
    && pass "pipeline with VAL_TAR and VAL_DEVKIT" || fail "pipeline with VAL_TAR and VAL_DEVKIT" "$(tail -3 "$T/err")"
diff <(tail -n +2 "$T/v-devkit/val.txt") <(tail -n +2 "$T/pipe/split-ilsvrc-val/val.txt") >/dev/null \
    && grep -q '"count": 36' "$T/pipe/val.json" 2>/dev/null \
    && pass "pipeline: the same val manifest, evaluated on 36 images" || fail "pipeline: the same val manifest, evaluated on 36 images"

rm -rf "$T"
finish
