#!/bin/bash
# dsplit_bench.sh [CLASSES] [PER_CLASS] [DIR]: how much more than listing the files dsplit
# costs. Builds a tree of CLASSES x PER_CLASS empty .JPEG files (default 1000 x 200, the
# shape of ImageNet's directories at a sixth of the files), then times, with a warm cache,
# `find ROOT -type f | wc -l` and `dsplit ROOT -o OUT`, best of 3 each.
set -euo pipefail
classes=${1:-1000} per=${2:-200}
here=$(cd "$(dirname "$0")/.." && pwd)
DSPLIT=${DSPLIT:-$here/bin/dsplit}
[ -x "$DSPLIT" ] || { echo "dsplit_bench: build first ($DSPLIT missing)" >&2; exit 1; }
work=${3:-$(mktemp -d "${TMPDIR:-/tmp}/dsplit-bench.XXXXXX")}
trap 'rm -rf "$work"' EXIT
root=$work/root
echo "building $classes x $per files under $root ..." >&2
for ((c = 0; c < classes; c++)); do
    d=$(printf '%s/n%08d' "$root" $((1440764 + c * 2791)))
    mkdir -p "$d"
    (cd "$d" && eval "touch img_{1..$per}.JPEG")
done

best() {  # "wall cpu" seconds of the fastest (by wall clock) of 3 runs of "$@"
    local b="" TIMEFORMAT='%R %U %S' t
    for _ in 1 2 3; do
        t=$( { time "$@" >/dev/null 2>&1; } 2>&1 ) || { echo "dsplit_bench: $* failed" >&2; exit 1; }
        b=$(echo "$t ${b:-}" | awk '{w = $1; c = $2 + $3; if (NF == 3 || w < $4) print w, c; else print $4, $5}')
    done
    echo "$b"
}
find_count() { find "$root" -type f | wc -l; }
split_run() { "$DSPLIT" -q "$root" -o "$work/out"; }
find_count >/dev/null; split_run  # warm the cache
read -r fw fc < <(best find_count)
read -r sw sc < <(best split_run)
n=$(find_count)
printf 'files: %d in %d classes  (load average %s)\n' "$n" "$classes" "$(cut -d' ' -f1 /proc/loadavg)"
printf '%-28s %8s %8s\n' "" "wall s" "cpu s"
printf '%-28s %8.3f %8.3f\n' "find ROOT -type f | wc -l" "$fw" "$fc"
printf '%-28s %8.3f %8.3f\n' "dsplit ROOT -o OUT" "$sw" "$sc"
awk -v a="$sw" -v b="$fw" -v c="$sc" -v d="$fc" 'BEGIN { printf "%-28s %8.2f %8.2f\n", "ratio dsplit / find", a / b, c / d }'
echo "(dsplit's wall time includes fsyncing its ~4 MB of manifests; find writes nothing)"
