#!/bin/bash
# The dataset recipes: synth is deterministic and its quirks are what it says they are;
# fashion_mnist refuses damaged IDX files and writes the real dataset exactly.
. "$(dirname "$0")/lib.sh"
SYNTH=$BUILD_DIR/data/synth
FMNIST=$BUILD_DIR/data/fashion_mnist

# ---- synth --------------------------------------------------------------------------------
expect_status "synth --help exits 0" 0 "$SYNTH" --help
expect_status "synth bad option exits 2" 2 "$SYNTH" --classes 0 "$T/x"
tree_sum() { (cd "$1" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum); }
"$SYNTH" -q --classes 4 --per-class 6 --quirks "$T/a" >"$T/quirks_a" && pass "synth runs" || fail "synth runs"
OMP_NUM_THREADS=1 "$SYNTH" -q --classes 4 --per-class 6 --quirks "$T/b" >/dev/null
[ "$(tree_sum "$T/a")" = "$(tree_sum "$T/b")" ] && pass "synth: same seed, same bytes (any thread count)" \
    || fail "synth: same seed, same bytes (any thread count)"
"$SYNTH" -q --classes 4 --per-class 6 --seed 5 "$T/c" >/dev/null
"$SYNTH" -q --classes 4 --per-class 6 "$T/d" >/dev/null
[ "$(tree_sum "$T/c")" != "$(tree_sum "$T/d")" ] && pass "synth: another seed, other images" || fail "synth: another seed, other images"
[ "$(ls -d "$T/a"/n0* | wc -l)" = 5 ] && [ "$(find "$T/a/n01440764" -name 'n01440764_[0-9]*.JPEG' | wc -l)" = 6 ] \
    && pass "synth: classes and per-class counts" || fail "synth: classes and per-class counts"
cmp -s "$T/quirks_a" "$T/a/.quirks.tsv" && [ "$(wc -l <"$T/quirks_a")" = 12 ] && pass "synth: quirks listed on stdout and in .quirks.tsv" \
    || fail "synth: quirks listed on stdout and in .quirks.tsv"
# Every quirk is what its kind says, checked by an independent reader (PIL).
"$PYTHON" - "$T/a" <<'EOF' && pass "synth: each quirk checked by PIL" || fail "synth: each quirk checked by PIL"
import os, sys, glob
from PIL import Image
Image.MAX_IMAGE_PIXELS = None
root = sys.argv[1]
want = {"gray": ("JPEG", "L"), "cmyk": ("JPEG", "CMYK"), "progressive": ("JPEG", "RGB"),
        "png_as_jpeg": ("PNG", "RGB"), "unicode_name": ("JPEG", "RGB")}
bad = []
for line in open(os.path.join(root, ".quirks.tsv"), encoding="utf-8"):
    kind, expect, rel = line.rstrip("\n").split("\t")
    p = os.path.join(root, rel)
    if not os.path.exists(p): bad.append(("missing", rel)); continue
    if kind in want:
        im = Image.open(p); im.load()
        if (im.format, im.mode) != want[kind]: bad.append((kind, im.format, im.mode))
        if kind == "progressive" and not im.info.get("progressive"): bad.append((kind, "not progressive"))
        if kind == "unicode_name" and (" " not in rel or rel.isascii()): bad.append((kind, rel))
    elif kind == "huge_header":
        if Image.open(p).size != (65000, 65000): bad.append((kind, Image.open(p).size))
    elif kind in ("truncated", "not_image", "zero_bytes"):
        try:
            im = Image.open(p); im.load(); bad.append((kind, "decoded"))
        except Exception:
            pass
        if kind == "zero_bytes" and os.path.getsize(p) != 0: bad.append((kind, "not empty"))
    elif kind == "hidden":
        if not os.path.basename(rel).startswith("."): bad.append((kind, rel))
    elif kind == "empty_class":
        if os.listdir(p): bad.append((kind, "not empty"))
sizes = [Image.open(f).size for f in glob.glob(os.path.join(root, "n0*", "n*_[0-9]*.JPEG"))]
if len(sizes) != 24: bad.append(("count", len(sizes)))
if len({s for s in sizes}) < 12: bad.append(("sizes do not vary", sizes))
print(bad)
sys.exit(1 if bad else 0)
EOF
"$SYNTH" -q --classes 2 --per-class 30 "$T/big" >/dev/null
"$PYTHON" -c "
import glob, sys
from PIL import Image
s = [Image.open(f).size for f in glob.glob('$T/big/*/*.JPEG')]
sys.exit(0 if any(max(x) >= 1000 for x in s) and any(w < h for w, h in s) and any(w > h for w, h in s) else 1)" \
    && pass "synth: some images >= 1000 px, tall and wide ones" || fail "synth: some images >= 1000 px, tall and wide ones"
dsplit -q "$T/a" -o "$T/split" --json >"$T/j" 2>/dev/null && grep -q '"classes": 5' "$T/j" && grep -q '"images": 33' "$T/j" \
    && grep -q '"hidden": 3' "$T/j" && pass "dsplit reads the synth tree (24 images + 9 quirks, hidden skipped)" \
    || fail "dsplit reads the synth tree" "$(cat "$T/j")"

# ---- fashion_mnist ------------------------------------------------------------------------
expect_status "fashion_mnist --help exits 0" 0 "$FMNIST" --help
mkdir -p "$T/idx"
printf '\x00\x00\x08\x03\x00\x00\xea\x60\x00\x00\x00\x1c\x00\x00\x00\x1c' | gzip >"$T/idx/train-images-idx3-ubyte.gz"
printf '\x00\x00\x08\x01\x00\x00\xea\x60' | gzip >"$T/idx/train-labels-idx1-ubyte.gz"
expect_status "fashion_mnist refuses a short IDX file" 1 "$FMNIST" --src "$T/idx" "$T/fm_bad"
grep -q 'train-images-idx3-ubyte.gz.*bytes, want' "$T/err" && pass "the refusal names the file" || fail "the refusal names the file"
printf '\x00\x00\x08\x02\x00\x00\xea\x60\x00\x00\x00\x1c\x00\x00\x00\x1c' | gzip >"$T/idx/train-images-idx3-ubyte.gz"
expect_status "fashion_mnist refuses a wrong magic number" 1 "$FMNIST" --src "$T/idx" "$T/fm_bad"
expect_status "fashion_mnist: missing source exits 1" 1 "$FMNIST" --src "$T/none" "$T/fm_bad"
[ ! -e "$T/fm_bad/.fashion-mnist-complete" ] && pass "no completion marker after a failure" || fail "no completion marker after a failure"
SRC=/usr/share/datasets/fashion-mnist
if [ -f "$SRC/train-images-idx3-ubyte.gz" ]; then
    expect_status "fashion_mnist converts the dataset" 0 "$FMNIST" "$T/fm"
    [ "$(find "$T/fm/train" -name '*.png' | wc -l)" = 60000 ] && [ "$(find "$T/fm/test" -name '*.png' | wc -l)" = 10000 ] \
        && [ "$(ls "$T/fm/train" | tr '\n' ' ')" = "Ankle_boot Bag Coat Dress Pullover Sandal Shirt Sneaker T-shirt_top Trouser " ] \
        && pass "fashion_mnist: 60000 + 10000 images in ten named classes" || fail "fashion_mnist: counts and class names"
    "$PYTHON" - "$T/fm" "$SRC" <<'EOF' && pass "fashion_mnist: pixels and labels match the IDX files" || fail "fashion_mnist: pixels and labels match the IDX files"
import gzip, sys, numpy as np
from PIL import Image
out, src = sys.argv[1:]
names = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"]
for split, prefix in (("train", "train"), ("test", "t10k")):
    px = np.frombuffer(gzip.open(f"{src}/{prefix}-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 28, 28)
    lb = np.frombuffer(gzip.open(f"{src}/{prefix}-labels-idx1-ubyte.gz").read()[8:], np.uint8)
    for i in (0, 1, 4321, len(lb) - 1):
        im = Image.open(f"{out}/{split}/{names[lb[i]]}/{i:05d}.png")
        assert im.mode == "L" and (np.array(im) == px[i]).all(), (split, i)
EOF
    t0=$SECONDS; expect_status "fashion_mnist: a complete tree is left alone" 0 "$FMNIST" "$T/fm"
    grep -q 'complete already' "$T/err" && pass "fashion_mnist: rerun is a no-op" || fail "fashion_mnist: rerun is a no-op"
fi

rm -rf "$T"
finish
