# Sourced by the pipeline tests: PASS/FAIL reporting in the suite's format, and a scratch
# directory. Each test file runs cases; `check NAME CMD...` passes when CMD succeeds.
set -u
T=$(mktemp -d "${DS_TEST_TMP:-/tmp}/$(basename "$0" .sh).XXXXXX")
DS_ROOT=${DS_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${BIN:-bin}
PATH="$DS_ROOT/$BIN:$PATH"
BUILD_DIR="$DS_ROOT/${BUILD:-build}"
PYTHON=${PYTHON:-/usr/bin/python3}
_failures=0

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1${2:+: $2}"; _failures=$((_failures + 1)); }
# check NAME CMD...: runs CMD, PASS when it exits 0.
check() {
    local name=$1; shift
    if "$@"; then pass "$name"; else fail "$name" "command failed: $*"; fi
}
# long NAME: true when the long tier runs (tests/run.sh --long, make check); in the quick
# tier prints "LONG NAME" (run.sh counts it as left to make check) and is false:
#     if long resnet50_steps; then ...checks...; fi
long() { [ "${DS_TEST_LONG:-0}" = 1 ] && return 0; echo "LONG $1"; return 1; }
# expect_status NAME CODE CMD...: PASS when CMD exits with CODE.
expect_status() {
    local name=$1 want=$2; shift 2
    "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then pass "$name"; else
        fail "$name" "exit $rc, want $want: $*"; sed 's/^/      /' "$T/err" | head -5; fi
}
# same_state A B: two checkpoints' /model and /optimizer identical, value for value.
same_state() {
    h5diff -r "$1" "$2" /model /model >/dev/null 2>&1 && h5diff -r "$1" "$2" /optimizer /optimizer >/dev/null 2>&1
}
# standin_ncu FILE CSV: FILE becomes a stand-in for Nsight Compute's ncu: it copies CSV (what
# ncu --csv would log) to the file its --log-file names, skips its other options, and runs
# the program it was given.
standin_ncu() {
    cat >"$1" <<EOF
#!/bin/bash
while [ \$# -gt 0 ]; do
    case \$1 in
    --log-file) cp "$2" "\$2"; shift 2 ;;
    --*) case \$2 in --*|/*) shift ;; *) shift 2 ;; esac ;;
    *) break ;;
    esac
done
exec "\$@"
EOF
    chmod +x "$1"
}
# make_bar_images OUT N_PER_CLASS CLASSES SEED: a tiny learnable class-folder tree of 20x20
# PNGs (noise plus a bright bar whose orientation and colour give the class).
make_bar_images() {
    "$PYTHON" - "$@" <<'PY'
import os, struct, sys, zlib
import numpy as np
try:
    from PIL import Image
    def save_png(a, path): Image.fromarray(a).save(path)
except ImportError:   # a Python with numpy alone (bench/gpu.sh's venv): 8-bit RGB PNG by hand
    def save_png(a, path):
        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        rows = b"".join(b"\0" + a[y].tobytes() for y in range(a.shape[0]))   # filter 0 per row
        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", a.shape[1], a.shape[0], 8, 2, 0, 0, 0))
                    + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
out, n, classes, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(seed)
for c in range(classes):
    d = os.path.join(out, "class%d" % c)
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        img = rng.integers(0, 90, (20, 20, 3)).astype(np.int32)
        k = rng.integers(0, 16)
        if c % 2 == 0: img[k:k + 4, :, c % 3] += 150
        else: img[:, k:k + 4, c % 3] += 150
        save_png(np.clip(img, 0, 255).astype(np.uint8), os.path.join(d, "%03d.png" % i))
PY
}

# split_pack TREE VAL SPLIT TRAIN [VALSHARDS]: dsplit TREE with --val VAL into SPLIT, then
# pack its train list into TRAIN (and its val list into VALSHARDS) as 16x16 shards.
split_pack() {
    dsplit -q --val "$2" -o "$3" "$1" >/dev/null &&
        dspack -q --size 16 -o "$4" "$3/train.txt" >/dev/null &&
        { [ -z "${5:-}" ] || dspack -q --size 16 -o "$5" "$3/val.txt" >/dev/null; }
}

# steps_close A B LIMIT WHAT: two checkpoints of the same training steps on the CPU and on a
# GPU (docs/DESIGN.md §7: no bitwise promise between them). Each op agrees to ~1e-5, but a
# ReLU whose input lies within that rounding of 0 can decide the other way on the two, and
# that element's gradient then differs wholly and spreads through every later step: a
# tensor's largest difference says little. So each group (/model, /optimizer: the momentum
# buffers, the steps' gradients summed) is compared as a whole, |a - b| / |a| over all its
# float elements, which one flipped ReLU moves by ~1e-3 and a fault in the steps' plumbing
# (an input, a learning rate, a micro-batch) by far more; exit 1 past LIMIT. The largest
# per-tensor difference is printed too.
steps_close() {
    "$PYTHON" - "$@" <<'PY'
import sys
import h5py, numpy as np
a, b = (h5py.File(f, "r") for f in sys.argv[1:3])
limit, bad = float(sys.argv[3]), False
for group in ("model", "optimizer"):
    num = den = worst = 0.0
    where = "-"
    def visit(name, x):
        global num, den, worst, where
        if not isinstance(x, h5py.Dataset) or x.dtype.kind != "f":
            return
        u, v = x[()].astype(np.float64), b[group][name][()].astype(np.float64)
        num += float(((u - v) ** 2).sum())
        den += float((u ** 2).sum())
        d = float(np.abs(u - v).max() / max(np.abs(u).max(), 1e-30))
        if d > worst:
            worst, where = d, name
    a[group].visititems(visit)
    rel = (num / max(den, 1e-300)) ** 0.5
    print("%s, /%s: relative difference %.3g as a whole (limit %g); largest in one tensor %.3g (%s)"
          % (sys.argv[4], group, rel, limit, worst, where))
    bad = bad or not rel <= limit
sys.exit(bad)
PY
}

finish() { exit $((_failures > 0)); }
