#!/bin/bash
# A current PyTorch (2.x, CPU) for the benchmarks' peer side, next to Debian's 1.13, which is
# what /usr/bin/python3 imports: a virtual environment under the build folder, so nothing
# outside it changes and `make clean` removes it. For benchmarks only: no build, demo or test
# uses it.
#   bench/peers.sh          creates $BUILD/peers/venv (default build/peers/venv) or completes
#                           it; prints its python3 on the last line of stdout
# Then: PYTHON=build/peers/venv/bin/python3 bench/engine_bench.sh   (bench/README.md)
# Also h5py: scripts/torchvision_to_ds.py, where engine_bench_torch.py takes its ResNet-20
# from, imports it (Pillow, for bench/pack_peer.py, comes with torchvision).
# Idempotent: an environment that already imports torch >= 2, torchvision and h5py is left as
# it is (delete the folder to upgrade). torch and torchvision come from PyTorch's CPU-only
# index when it answers (a few hundred MB; it did not where this was written); otherwise
# from PyPI, whose Linux torch wheel brings CUDA's libraries with it (5.4 GB in all, 1.5
# minutes here; unused on the CPU but needed for `import torch`).
# Environment:
#   BUILD                the build folder (default build)
#   PEERS_PYTHON         the interpreter the environment is made from (default /usr/bin/python3)
#   PEERS_TORCH          pip requirements for the two packages (default "torch>=2 torchvision")
set -u
cd "$(dirname "$0")/.." || exit 1
VENV=${BUILD:-build}/peers/venv
BASE=${PEERS_PYTHON:-/usr/bin/python3}
REQS=${PEERS_TORCH:-torch>=2 torchvision}
CPU_INDEX=https://download.pytorch.org/whl/cpu
PY=$VENV/bin/python3
die() { echo "peers: $*" >&2; exit 1; }

# Prints "torch X torchvision Y" and succeeds when the environment has the three and torch is
# 2.x or later; a half-finished install (an interrupted pip) fails here and is completed below.
ready() {
    [ -x "$PY" ] && "$PY" - 2>/dev/null <<'EOF'
import sys, h5py, torch, torchvision
if int(torch.__version__.split(".")[0]) < 2: sys.exit(1)
print("torch", torch.__version__, "torchvision", torchvision.__version__)
EOF
}

if have=$(ready); then
    echo "peers: $VENV already has $have" >&2
else
    [ -x "$BASE" ] || die "$BASE missing (set PEERS_PYTHON)"
    if [ ! -x "$PY" ]; then
        mkdir -p "$(dirname "$VENV")" || die "cannot create $(dirname "$VENV")"
        # Debian splits venv's pip bootstrap into python3-venv; say so instead of its long message.
        "$BASE" -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    fi
    # The CPU index serves torch without CUDA; probed first because pip would otherwise spend
    # its retries and time-outs on a host that does not answer before falling back.
    if "$PY" -c "import urllib.request as u; u.urlopen('$CPU_INDEX/torch/', timeout=15)" 2>/dev/null; then
        index=(--index-url "$CPU_INDEX")
        echo "peers: installing $REQS from $CPU_INDEX" >&2
    else
        index=()
        echo "peers: $CPU_INDEX does not answer; installing $REQS from PyPI (with CUDA's libraries, a few GB)" >&2
    fi
    # Plain pip from the environment, so a pip.conf's index or find-links still apply to PyPI.
    # shellcheck disable=SC2086  # REQS is a list of requirements
    "$PY" -m pip install --no-input --progress-bar off "${index[@]}" $REQS >&2 ||
        die "pip install failed (above); run again to resume, or delete $VENV to start over"
    # From the default index: PyTorch's CPU index need not carry it.
    "$PY" -m pip install --no-input --progress-bar off h5py >&2 || die "pip install h5py failed (above)"
    have=$(ready) || die "$VENV still does not import torch >= 2, torchvision and h5py"
    echo "peers: $VENV has $have" >&2
fi
echo "$(cd "$(dirname "$PY")" && pwd)/python3"
