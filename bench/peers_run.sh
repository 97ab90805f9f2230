#!/bin/bash
# ds against its peers at their best, side by side (bench/PEERS.md): sets the peers up
# (bench/peers.sh --all), then prints every table in one go, each peer and ds on the same
# files, with the same threads, in the same run, each one's best of REPEAT:
#   1. packing  dspack vs Pillow-SIMD + h5py vs DALI's CPU decode + resize vs FFCV's writer
#               (raw and jpg), N ImageNet-sized JPEGs to 256 px; the tjbench decode bound
#   2. pixels   each peer's 256-px images against dspack's, on the first PIXELS images
#   3. loading  RandomResizedCrop + flip + normalise to 224 from each tool's own format,
#               page cache warm and cold: ds's loader vs FFCV's Loader vs DALI's pipeline
#   4. engine   ResNet training and inference against PyTorch 2.x, fp32 and bf16, eager
#               and torch.compile (bench/engine_bench.sh)
#   bench/peers_run.sh            (make bench-peers; `make bench-build` first)
#   PEERS_QUICK=1 bench/peers_run.sh   the smallest setting of each, to check the whole
#                                 script in a few minutes: the numbers mean little
# Environment: N (images, default 5000; quick 600), REPEAT (best of, default 3; quick 1),
# THREADS (2), ENGINE_STEPS (3; quick 1), ENGINE_REPEAT (2; quick 1) and ENGINE_COMPILE_REPEAT
# (1: each torch.compile'd process compiles for minutes first), ENGINE_ONLY (the engine rows,
# engine_bench.sh's ONLY; quick "resnet20"), SECTIONS (which tables: default "pack pixels load
# engine"; pixels and load use pack's files, so they bring it along), BUILD (build). The JPEGs are
# made once by build/data/synth and kept in $BUILD/peers/data/; the packed files go to a
# temporary folder (about 4 GB for 5,000 images), removed at the end.
# A peer that cannot be installed or fails shows "n/a: why" or "failed" in its cells; the
# other rows go on. Not a test: the numbers move with the machine's load, printed per table.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${BUILD:-build}
if [ -n "${PEERS_QUICK:-}" ] && [ "${PEERS_QUICK:-}" != 0 ]; then
    quick=1 N=${N:-600} REPEAT=${REPEAT:-1} ENGINE_STEPS=${ENGINE_STEPS:-1} ENGINE_REPEAT=${ENGINE_REPEAT:-1}
    ENGINE_ONLY=${ENGINE_ONLY:-resnet20}
else
    quick=0 N=${N:-5000} REPEAT=${REPEAT:-3} ENGINE_STEPS=${ENGINE_STEPS:-3} ENGINE_REPEAT=${ENGINE_REPEAT:-2}
    ENGINE_ONLY=${ENGINE_ONLY:-}
fi
THREADS=${THREADS:-2}
SECTIONS=" ${SECTIONS:-pack pixels load engine} "
case $SECTIONS in *" pixels "* | *" load "*) SECTIONS="$SECTIONS pack " ;; esac
want() { [[ $SECTIONS == *" $1 "* ]]; }
PIXELS=${PIXELS:-200}
PY3=/usr/bin/python3   # runs the race (standard library only); each peer runs in its own venv
for b in bin/dsplit bin/dspack build/data/synth build/bench/loader_bench build/bench/engine_bench; do
    [ -x "$b" ] || { echo "peers_run: $b missing (make bench-build)" >&2; exit 1; }
done
start=$(date +%s)

echo "== set-up (bench/peers.sh --all)"
bench/peers.sh --all >/dev/null
# The interpreter of each peer, or "n/a: why" from its status file.
peer_arg() {
    local st
    st=$(cat "$B/peers/$1.status" 2>/dev/null || echo "n/a: bench/peers.sh did not run")
    case $st in
    # Not realpath: the venv's python3 is a link to the base interpreter, which would lose the venv.
    ok*) echo "$1=$(cd "$B/peers/$2/bin" && pwd)/python3" ;;
    *) echo "$1=$st" ;;
    esac
}
peer_args=(--peer "$(peer_arg simd simd-venv)" --peer "$(peer_arg dali dali-venv)" --peer "$(peer_arg ffcv ffcv-venv)")
TORCH_PY=$B/peers/venv/bin/python3

echo
echo "## Machine and versions"
echo
cpu=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)
echo "- CPU: ${cpu:-unknown}, $(nproc) cores; $(grep -o -w 'avx512f\|avx512_bf16\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "- $(sed -n 's/^PRETTY_NAME="\(.*\)"/\1/p' /etc/os-release), kernel $(uname -r), $(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo) memory"
echo "- ds: $(bin/dspack --version 2>&1 | tr '\n' ' ')"
for p in torch simd dali ffcv; do echo "- $p: $(cat "$B/peers/$p.status" 2>/dev/null || echo "n/a: not set up")"; done
echo "- tjbench: $(dpkg-query -W -f '${Package} ${Version}' libjpeg-turbo-progs 2>/dev/null || echo "n/a: libjpeg-turbo-progs not installed")"
echo "- settings: N=$N REPEAT=$REPEAT THREADS=$THREADS$([ $quick = 1 ] && echo " (PEERS_QUICK: numbers mean little)")"
echo "- load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"

# The JPEGs: ImageNet-sized (500x375, quality 90, mean ~110 KB: bench/SCALE.md), 100 classes,
# made once per N and kept, since making them takes longer than packing them.
data=$B/peers/data/synth-$N
if [ ! -f "$data/m/train.txt" ]; then
    rm -rf "$data"
    mkdir -p "$data" || exit 1
    classes=$(( N >= 1000 ? 100 : 10 ))
    build/data/synth -q --classes $classes --per-class $(( (N + classes - 1) / classes )) --width 500 --height 375 \
        --noise 0.35 "$data/tree" >/dev/null || { echo "peers_run: build/data/synth failed" >&2; exit 1; }
    bin/dsplit -q "$data/tree" -o "$data/m.tmp" --val 0 || exit 1
    # Exactly N images: the first N in the manifest's order.
    head -n $((N + 1)) "$data/m.tmp/train.txt" >"$data/m.tmp/n.txt" && mv "$data/m.tmp/n.txt" "$data/m.tmp/train.txt" &&
        mv "$data/m.tmp" "$data/m" || exit 1
fi
manifest=$(realpath "$data/m/train.txt")
n=$(($(wc -l <"$manifest") - 1))
bytes=$(grep -v '^#' "$manifest" | cut -f2 | (cd "$data/tree" && xargs stat -c %s) | awk '{ s += $1 } END { print s }')
echo "- data: $n JPEGs of $data (build/data/synth --width 500 --height 375 --noise 0.35), mean $((bytes / n / 1000)) KB"

work=$(mktemp -d "${TMPDIR:-/tmp}/peers.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
cat "$data"/tree/*/* >/dev/null   # the page cache warm for every packer

want pack && {
echo
echo "== 1. packing"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
$PY3 bench/peers_race.py pack --manifest "$manifest" --work "$work" --dspack bin/dspack --threads "$THREADS" \
    --repeat "$REPEAT" "${peer_args[@]}"
echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}

want pixels && {
echo
echo "== 2. pixels: each peer's 256-px images against dspack's, first $PIXELS images"
echo
px=$work/pixels
mkdir -p "$px"
head -n $((PIXELS + 1)) "$manifest" >"$px/m.txt"
cp "$data/m/classes.txt" "$px/"   # dspack reads the class names beside the manifest
bin/dspack -q -o "$px/ds" --size 256 --fit crop --threads "$THREADS" --no-shuffle "$px/m.txt"
notes=()
for k in simd dali ffcv-raw ffcv-jpg; do
    st=$(cat "$B/peers/${k%-*}.status" 2>/dev/null || echo "n/a: not set up")
    [[ $st == ok* ]] || { notes+=(--note "$k=$st"); continue; }
    case $k in
    ffcv-*) out=$px/$k.beton ;;
    *) out=$px/$k.h5 ;;
    esac
    py=$B/peers/${k%-*}-venv/bin/python3
    if ! err=$("$py" bench/peers_pack.py "$k" "$px/m.txt" "$out" --threads "$THREADS" 2>&1 >/dev/null); then
        notes+=(--note "$k=failed: $(echo "$err" | tail -1 | cut -c1-150)")
    elif [[ $k == ffcv-* ]]; then
        "$py" bench/peers_pixels.py dump-ffcv "$out" "$px/$k.npy" 2>/dev/null ||
            notes+=(--note "$k=failed: could not read $out back")
        out=$px/$k.npy
    fi
    eval "px_${k/-/_}=\$out"
done
pix_py=$TORCH_PY
[ -x "$pix_py" ] || pix_py=$B/peers/simd-venv/bin/python3   # any environment with h5py and a Pillow
"$pix_py" bench/peers_pixels.py compare "$px/m.txt" "$px/ds" --simd "${px_simd:-}" --dali "${px_dali:-}" \
    --ffcv-raw "${px_ffcv_raw:-}" --ffcv-jpg "${px_ffcv_jpg:-}" "${notes[@]}" ||
    echo "peers_run: the pixel check failed (above)"
}

want load && {
echo
echo "== 3. loading for training"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
$PY3 bench/peers_race.py load --shards "$work/ds" --beton-raw "$work/ffcv-raw.beton" --beton-jpg "$work/ffcv-jpg.beton" \
    --manifest "$manifest" --loader-bench build/bench/loader_bench --images "$n" --threads "$THREADS" \
    --repeat "$REPEAT" "${peer_args[@]}"
echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}

want engine && {
echo
echo "== 4. engine: PyTorch 2.x, fp32 and bf16 (autocast), eager and torch.compile"
if [ -x "$TORCH_PY" ]; then
    for compile in 0 1; do
        echo
        rep=$ENGINE_REPEAT
        [ $compile = 1 ] && rep=${ENGINE_COMPILE_REPEAT:-1}
        echo "### torch.compile: $([ $compile = 1 ] && echo yes || echo no), best of $rep, $ENGINE_STEPS steps"
        echo
        OMP_NUM_THREADS=$THREADS PYTHON=$TORCH_PY PRECISION=both TORCH_COMPILE=$compile REPEAT=$rep \
            ONLY=$ENGINE_ONLY bench/engine_bench.sh "$ENGINE_STEPS"
    done
else
    echo "n/a: $(cat "$B/peers/torch.status" 2>/dev/null || echo "PyTorch 2 not set up")"
fi
}
echo
echo "== done in $(( $(date +%s) - start )) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
