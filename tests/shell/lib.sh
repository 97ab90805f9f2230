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

finish() { exit $((_failures > 0)); }
