#!/bin/bash
# The peers ds is measured against, each in its own virtual environment under the build
# folder, so nothing outside it changes and `make clean` removes them. For benchmarks only:
# no build, demo or test uses them.
#   bench/peers.sh          a current PyTorch (2.x, CPU) next to Debian's 1.13, which is what
#                           /usr/bin/python3 imports: creates $BUILD/peers/venv (default
#                           build/peers/venv) or completes it; prints its python3 on the last
#                           line of stdout
#   bench/peers.sh --all    the same, then the data-pipeline peers (bench/PEERS.md), each in
#                           its own environment because their pins clash (Pillow-SIMD replaces
#                           the Pillow that torchvision needs; FFCV builds against OpenCV):
#                             simd-venv  Pillow-SIMD (built here with -mavx2) + h5py
#                             dali-venv  NVIDIA DALI (its CPU operators need no GPU) + h5py
#                             ffcv-venv  FFCV (built here against Debian's OpenCV and
#                                        libturbojpeg), with its PyTorch, numba and OpenCV
#                           A peer that cannot be installed does not stop the others: its
#                           $BUILD/peers/NAME.status says "n/a: WHY" (else "ok VERSIONS"),
#                           and bench/peers_run.sh marks its cells with it. The Debian packages
#                           a peer needs only to build are installed here with apt-get (as
#                           root), never by `make deps`.
# Then: PYTHON=build/peers/venv/bin/python3 bench/engine_bench.sh   (bench/README.md)
# Also h5py: scripts/torchvision_to_ds.py, where engine_bench_torch.py takes its ResNet-20
# from, imports it (Pillow, for bench/pack_peer.py, comes with torchvision).
# Idempotent: an environment that already imports what it should is left as it is (delete
# its folder to upgrade). torch and torchvision come from PyTorch's CPU-only index when it
# answers (a few hundred MB; it did not where this was written); otherwise from PyPI, whose
# Linux torch wheel brings CUDA's libraries with it (5.4 GB in all, 1.5 minutes here;
# unused on the CPU but needed for `import torch`). FFCV's environment has its own copy.
# Environment:
#   BUILD                the build folder (default build)
#   PEERS_PYTHON         the interpreter the environments are made from (default /usr/bin/python3)
#   PEERS_TORCH          pip requirements for the two packages (default the pins below)
set -u
cd "$(dirname "$0")/.." || exit 1
PEERS=${BUILD:-build}/peers
VENV=$PEERS/venv
BASE=${PEERS_PYTHON:-/usr/bin/python3}
# The versions measured in bench/PEERS.md.
TORCH_PIN="torch==2.15.0 torchvision==0.29.2"
REQS=${PEERS_TORCH:-$TORCH_PIN}
NUMPY_PIN="numpy==2.4.6 h5py==3.16.0"
SIMD_PIN="pillow-simd==12.1.1.post0"
DALI_PIN="nvidia-dali-cuda130==2.4.0"
FFCV_PIN="ffcv==1.0.2"
# FFCV's own requirements, pinned; OpenCV as the headless wheel (FFCV names opencv-python,
# whose GUI parts want libGL), so FFCV itself goes in with --no-deps.
FFCV_DEPS="torch==2.15.0 numba==0.68.1 opencv-python-headless==5.0.0.93 pillow==13.0.0 assertpy==1.1
           fastargs==1.2.0 psutil==7.2.2 pytorch_pfn_extras==0.9.0 terminaltables==3.1.10 tqdm==4.70.1"
CPU_INDEX=https://download.pytorch.org/whl/cpu
PY=$VENV/bin/python3
die() { echo "peers: $*" >&2; exit 1; }
ALL=0
case ${1:-} in
"") ;;
--all) ALL=1 ;;
*) die "usage: bench/peers.sh [--all]" ;;
esac

# Prints "torch X torchvision Y" and succeeds when the environment has the three and torch is
# 2.x or later; a half-finished install (an interrupted pip) fails here and is completed below.
ready() {
    [ -x "$PY" ] && "$PY" - 2>/dev/null <<'EOF'
import sys, h5py, torch, torchvision
if int(torch.__version__.split(".")[0]) < 2: sys.exit(1)
print("torch", torch.__version__, "torchvision", torchvision.__version__)
EOF
}

# Makes the environment $1 from $BASE when it is missing. Debian splits venv's pip bootstrap
# into python3-venv; say so instead of its long message.
make_venv() {
    [ -x "$1/bin/python3" ] && return 0
    mkdir -p "$(dirname "$1")" || { why="cannot create $(dirname "$1")"; return 1; }
    "$BASE" -m venv "$1" >&2 || { why="python3 -m venv failed (Debian: apt-get install python3-venv)"; return 1; }
}

# Installs the Debian packages among "$@" that are missing (headers and tools a peer needs to
# build, nothing ds needs). Sets `why` and fails when it cannot.
need_debs() {
    local missing=() p
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" = 0 ] || { why="needs the Debian packages ${missing[*]} (apt-get install as root)"; return 1; }
    echo "peers: apt-get install ${missing[*]}" >&2
    # A fresh machine's package lists may be missing or stale: update once, then try again.
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2 ||
        { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >&2; } ||
        { why="apt-get install ${missing[*]} failed"; return 1; }
}

# pip into environment $1 (the rest are pip's arguments); sets `why` from pip's last error.
pip_in() {
    local venv=$1 log
    shift
    log=$(mktemp)
    if "$venv/bin/python3" -m pip install --no-input --progress-bar off "$@" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        return 0
    fi
    cat "$log" >&2
    why="pip install $*: $(grep -E 'error|Error' "$log" | grep -v '^ *$' | tail -1 | sed 's/^ *//' | cut -c1-200)"
    rm -f "$log"
    return 1
}

# Sets up the peer NAME with the function setup_NAME (which sets `why` on failure) unless
# check_NAME already prints its versions; writes $PEERS/NAME.status either way.
peer() {
    local name=$1 have why=""
    if have=$("check_$name" 2>/dev/null); then
        echo "peers: $name already has $have" >&2
    elif "setup_$name" && have=$("check_$name" 2>&1); then
        echo "peers: $name has $have" >&2
    else
        [ -n "$why" ] || why="installed but does not import: $(echo "$have" | tail -1 | cut -c1-200)"
        echo "peers: $name n/a: $why" >&2
        echo "n/a: $why" >"$PEERS/$name.status"
        return 1
    fi
    echo "ok $have" >"$PEERS/$name.status"
}

check_torch() { ready; }
setup_torch() {
    [ -x "$BASE" ] || { why="$BASE missing (set PEERS_PYTHON)"; return 1; }
    make_venv "$VENV" || return 1
    # The CPU index serves torch without CUDA; probed first because pip would otherwise spend
    # its retries and time-outs on a host that does not answer before falling back.
    local index=()
    if "$PY" -c "import urllib.request as u; u.urlopen('$CPU_INDEX/torch/', timeout=15)" 2>/dev/null; then
        index=(--index-url "$CPU_INDEX")
        echo "peers: installing $REQS from $CPU_INDEX" >&2
    else
        echo "peers: $CPU_INDEX does not answer; installing $REQS from PyPI (with CUDA's libraries, a few GB)" >&2
    fi
    # Plain pip from the environment, so a pip.conf's index or find-links still apply to PyPI.
    # shellcheck disable=SC2086  # REQS is a list of requirements
    pip_in "$VENV" "${index[@]}" $REQS || return 1
    # From the default index: PyTorch's CPU index need not carry it.
    pip_in "$VENV" h5py==3.16.0
}

check_simd() {
    "$PEERS/simd-venv/bin/python3" - <<'EOF'
import h5py, PIL
from PIL import features
assert "post" in PIL.__version__, "Pillow, not Pillow-SIMD"
print(f"Pillow-SIMD {PIL.__version__} (libjpeg-turbo {features.version('libjpeg_turbo')}), h5py {h5py.__version__}")
EOF
}
setup_simd() {
    need_debs gcc python3-dev libjpeg62-turbo-dev zlib1g-dev || return 1
    make_venv "$PEERS/simd-venv" || return 1
    # Pillow-SIMD is built from source; -mavx2 turns on its AVX2 resampling (SSE4 otherwise),
    # as its documentation says. It has no AVX-512 code.
    # shellcheck disable=SC2086  # lists of requirements
    CC="cc -mavx2" pip_in "$PEERS/simd-venv" --no-binary pillow-simd $SIMD_PIN $NUMPY_PIN
}

check_dali() {
    "$PEERS/dali-venv/bin/python3" -c 'import h5py, nvidia.dali as d; print("DALI", d.__version__, "h5py", h5py.__version__)'
}
setup_dali() {
    make_venv "$PEERS/dali-venv" || return 1
    # shellcheck disable=SC2086
    pip_in "$PEERS/dali-venv" $DALI_PIN $NUMPY_PIN
}

check_ffcv() {
    "$PEERS/ffcv-venv/bin/python3" - <<'EOF'
import importlib.metadata as m
import cv2, numba, torch
import ffcv.loader, ffcv.writer
print(f"FFCV {m.version('ffcv')}, numba {numba.__version__}, OpenCV {cv2.__version__}, torch {torch.__version__}, "
      f"Pillow {m.version('pillow')}")
EOF
}
setup_ffcv() {
    # FFCV compiles a C extension against OpenCV and libturbojpeg, which it finds with pkg-config.
    need_debs g++ pkg-config python3-dev libopencv-dev libturbojpeg0-dev || return 1
    make_venv "$PEERS/ffcv-venv" || return 1
    # shellcheck disable=SC2086
    pip_in "$PEERS/ffcv-venv" $FFCV_DEPS $NUMPY_PIN || return 1
    # Built without pip's isolation so that its setup.py sees the environment it will run in.
    # shellcheck disable=SC2086
    pip_in "$PEERS/ffcv-venv" --no-deps --no-build-isolation $FFCV_PIN
}

mkdir -p "$PEERS" || die "cannot create $PEERS"
if [ $ALL = 0 ]; then
    why=""
    if have=$(ready); then
        echo "peers: $VENV already has $have" >&2
    else
        setup_torch || die "$why; run again to resume, or delete $VENV to start over"
        have=$(ready) || die "$VENV still does not import torch >= 2, torchvision and h5py"
        echo "peers: $VENV has $have" >&2
    fi
    echo "ok $have" >"$PEERS/torch.status"
else
    failed=0
    for name in torch simd dali ffcv; do peer "$name" || failed=1; done
    [ $failed = 0 ] || echo "peers: some peers are n/a (above, and $PEERS/*.status); the others are ready" >&2
    [ -x "$PY" ] && ready >/dev/null || exit 1
fi
echo "$(cd "$(dirname "$PY")" && pwd)/python3"
