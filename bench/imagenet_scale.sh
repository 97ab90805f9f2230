#!/bin/bash
# What ImageNet at full scale costs, measured on a slice of it: (i) dsplit over a tree of
# CLASSES x PER_CLASS empty .JPEG files (ImageNet's 1,000 x 1,281 names: dsplit reads names,
# never pixels), its time and peak memory; (ii) dspack of N synthetic ImageNet-like JPEGs
# (500x375, quality 90, noise 0.35: ~110 KB each, ImageNet's mean) at --size 256 --fit
# crop, its images/s and peak RSS, with the RSS sampled every second against the shards
# written (flat from the first shard to the last: the packer streams); (iii) loader_bench
# over those shards, warm and cold. Not part of `make test`; ~15 minutes on 2 cores.
#   bench/imagenet_scale.sh [options]
#     --images N       JPEGs to pack (default 50000)
#     --classes C      dsplit tree classes (default 1000)
#     --per-class P    dsplit tree files per class (default 1281)
#     --unique U       distinct JPEGs rendered (default 5000, in 100 classes); the N files are
#                      hard-linked copies of their class directories (each file still decoded
#                      by dspack: rendering takes longer than packing)
#     --threads T      dspack threads (default: nproc)
#     --loader-images M  images per loader_bench figure (default 12800)
#     --dir DIR        where to work (default: a new directory under $TMPDIR or /tmp)
#     --keep           keep the tree, JPEGs and shards
# The shards need about N x 200 KB, the JPEGs U x 110 KB; N is lowered (and said so) when the free space
# of DIR's filesystem minus 5 GB cannot hold them. Needs `make bench-build` and /usr/bin/time.
set -eu
cd "$(dirname "$0")/.."
here=$PWD
N=50000 unique=5000 classes=1000 per=1281 threads=$(nproc) limages=12800 dir="" keep=0
while [ $# -gt 0 ]; do
    case $1 in
    --images) N=$2; shift ;;
    --unique) unique=$2; shift ;;
    --classes) classes=$2; shift ;;
    --per-class) per=$2; shift ;;
    --threads) threads=$2; shift ;;
    --loader-images) limages=$2; shift ;;
    --dir) dir=$2; shift ;;
    --keep) keep=1 ;;
    -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "imagenet_scale.sh: unknown option '$1' (--help)" >&2; exit 2 ;;
    esac
    shift
done
for v in "$N" "$unique" "$classes" "$per" "$threads" "$limages"; do
    [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "imagenet_scale.sh: '$v' is not a positive integer" >&2; exit 2; }
done
[ -x /usr/bin/time ] || { echo "imagenet_scale.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 1; }
for b in bin/dsplit bin/dspack build/data/synth build/bench/loader_bench; do
    [ -x "$b" ] || { echo "imagenet_scale.sh: $b missing (make bench-build)" >&2; exit 1; }
done
if [ -z "$dir" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/imagenet-scale.XXXXXX")
else
    mkdir -p "$dir"
fi
dir=$(cd "$dir" && pwd)
[ $keep = 1 ] || trap 'rm -rf "$dir"' EXIT
# Copies of the programs, so a rebuild during the run changes nothing.
mkdir -p "$dir/bin"
cp bin/dsplit bin/dspack build/data/synth build/bench/loader_bench "$dir/bin/"
B=$dir/bin

free_kb=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
fit=$(( (free_kb - 5 * 1024 * 1024 - unique * 110) / 200 ))
if [ "$fit" -lt "$N" ]; then
    [ "$fit" -ge 2000 ] || { echo "imagenet_scale.sh: $((free_kb / 1024)) MB free in $dir: too little" >&2; exit 1; }
    echo "note: $((free_kb / 1024 / 1024)) GB free in $dir: packing $fit images instead of $N"
    N=$fit
fi

echo "== machine"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(grep -q avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2 or less)"
echo "memory: $(free -g | awk '/^Mem/ {print $2}') GB; disk free at start: $((free_kb / 1024 / 1024)) GB in $dir"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (other jobs share the machine when above 0)"

# "wall_s peak_rss_kb cpu_s" of a /usr/bin/time -v log (cpu: user + system).
time_fields() {
    awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]}
                /Maximum resident set size/ {m = $2} /(User|System) time \(seconds\)/ {c += $2}
                END {print s, m, c}' "$1"
}

echo "== (i) dsplit over $classes x $per names"
t0=$SECONDS
for ((c = 0; c < classes; c++)); do
    d=$(printf '%s/names/n%08d' "$dir" $((1440764 + c * 2791)))
    mkdir -p "$d"
    (cd "$d" && eval "touch n$(printf %08d $((1440764 + c * 2791)))_{1..$per}.JPEG")
done
echo "tree built in $((SECONDS - t0)) s"
/usr/bin/time -v "$B/dsplit" -q "$dir/names" -o "$dir/names-m" 2>"$dir/dsplit.time"
read -r sw srss sc < <(time_fields "$dir/dsplit.time")
lines=$(($(wc -l <"$dir/names-m/train.txt") + $(wc -l <"$dir/names-m/val.txt") - 2))
echo "dsplit: $lines names in $sw s ($sc CPU s), peak RSS $((srss / 1024)) MB"
rm -rf "$dir/names" "$dir/names-m"

echo "== (ii) dspack of $N JPEGs (500x375, quality 90) at --size 256 --fit crop, $threads threads"
[ "$unique" -le "$N" ] || unique=$N
pc=$(( (unique + 99) / 100 ))
t0=$SECONDS
"$B/synth" -q --classes 100 --per-class "$pc" --width 500 --height 375 --noise 0.35 "$dir/jpeg" >/dev/null
read -r njpeg jbytes < <(find "$dir/jpeg" -name '*.JPEG' -printf '%s\n' | awk '{n++; s += $1} END {print n, s}')
echo "synth: $njpeg distinct JPEGs in $((SECONDS - t0)) s, mean $((jbytes / njpeg / 1024)) KB ($jbytes bytes / $njpeg)"
# Hard-linked copies of the class directories up to N files (n..._c1, n..._c2, ...: with the
# defaults 1,000 classes of 50, ImageNet's class count); dspack decodes every file.
copies=$(( (N + njpeg - 1) / njpeg ))
for d in "$dir"/jpeg/n*; do
    for ((k = 1; k < copies; k++)); do cp -al "$d" "${d}_c$k"; done
done
"$B/dsplit" -q "$dir/jpeg" -o "$dir/m" --val 0
head -n $((N + 1)) "$dir/m/train.txt" >"$dir/m/pack.txt"
N=$(($(wc -l <"$dir/m/pack.txt") - 1))
sync
/usr/bin/time -v "$B/dspack" -q -o "$dir/shards" --size 256 --fit crop --threads "$threads" "$dir/m/pack.txt" \
    2>"$dir/dspack.time" &
tpid=$!
# RSS of dspack (the child of time) and the shards finished, every second.
: >"$dir/rss.tsv"
t0=$(date +%s.%N)
while kill -0 $tpid 2>/dev/null; do
    kid=$(cat /proc/$tpid/task/$tpid/children 2>/dev/null | awk '{print $1}')
    if [ -n "$kid" ]; then
        rss=$(awk '/^VmRSS:/ {print $2}' /proc/"$kid"/status 2>/dev/null || true)
        done_shards=$(find "$dir/shards" -maxdepth 1 -name 'shard-*.h5' 2>/dev/null | wc -l)
        [ -n "$rss" ] && printf '%.0f\t%s\t%s\n' "$(echo "$(date +%s.%N) - $t0" | bc)" "$rss" "$done_shards" >>"$dir/rss.tsv"
    fi
    sleep 1
done
wait $tpid
read -r pw prss pcpu < <(time_fields "$dir/dspack.time")
nshards=$(find "$dir/shards" -maxdepth 1 -name 'shard-*.h5' | wc -l)
echo "dspack: $N images in $pw s = $(awk -v n="$N" -v s="$pw" 'BEGIN {printf "%.0f", n / s}') images/s ($pcpu CPU s: $(awk -v n="$N" -v s="$pcpu" 'BEGIN {printf "%.0f", n / s}') images per CPU second), peak RSS $((prss / 1024)) MB, $nshards shards, $(du -sm "$dir/shards" | cut -f1) MB"
# RSS while the first shard was being written (no shard finished yet, after start-up) and
# while the last one was; the full series is in rss.tsv (seconds, kB, shards finished).
awk -v last="$nshards" -F'\t' '
    $3 == 0 {f = $2} $3 == 1 && f == "" {f = $2}
    $3 >= last - 1 {l = $2}
    {if ($2 > m) m = $2; n++}
    END {printf "RSS sampled %d times: while the first shard was written %d MB, while the last %d MB, highest %d MB\n", n, f / 1024, l / 1024, m / 1024}' "$dir/rss.tsv"
awk -F'\t' 'NR % 30 == 1 {printf "  t=%ss rss=%d MB shards=%s\n", $1, $2 / 1024, $3}' "$dir/rss.tsv"
rm -rf "$dir/jpeg"

echo "== (iii) loader_bench over the $N shards' images"
for cache in warm cold; do
    "$B/loader_bench" --threads 1,2,4 --images "$limages" --cache $cache "$dir/shards"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
