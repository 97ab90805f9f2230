#!/bin/bash
# dspack against the Python packer a user would write (bench/pack_peer.py: Pillow + h5py,
# multiprocessing.Pool) on the same ImageNet-like JPEGs, and against libjpeg-turbo's
# decode-only speed on those files (tjbench), which no packer can beat.
#   bench/pack_bench.sh [N_IMAGES (1000)]     THREADS=2 SIZE=224 FIT=squash REPEAT=3
#   DSPACK=path/to/other/dspack races another build (before/after comparisons).
# Needs `make` (bin/dspack, build/data/synth) and libjpeg-turbo-progs (tjbench).
set -eu
[ -n "${DSPACK:-}" ] && DSPACK=$(realpath "$DSPACK")
cd "$(dirname "$0")/.."
N=${1:-1000} THREADS=${THREADS:-2} SIZE=${SIZE:-224} FIT=${FIT:-squash}
PY=${PYTHON:-/usr/bin/python3}
DSPACK=${DSPACK:-bin/dspack}
work=$(mktemp -d "${TMPDIR:-/tmp}/pack-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ~400x350 JPEGs at quality 90, every tenth larger than 1000 px (data/synth.c).
build/data/synth -q --classes 10 --per-class $(( (N + 9) / 10 )) "$work/tree" >/dev/null
{
    echo "# ds-manifest 1 root=$work/tree"
    label=0
    for d in $(cd "$work/tree" && ls -d n* | sort); do
        (cd "$work/tree" && ls "$d" | LC_ALL=C sort | sed "s|^|$label\t$d/|")
        label=$((label + 1))
    done
} | head -n $((N + 1)) >"$work/all.txt"
(cd "$work/tree" && ls -d n* | sort) >"$work/classes.txt"
n=$(($(wc -l <"$work/all.txt") - 1))
cat "$work"/tree/*/* >/dev/null   # page cache warm for every contender
load_before=$(cut -d" " -f1-3 /proc/loadavg)

# Alternate the contenders and keep each one's best of REPEAT runs, so a burst of other load
# on the machine does not decide the ratio. CPU seconds (user + system of the command and its
# children) are reported too: on a shared machine they measure the work, wall time the luck.
REPEAT=${REPEAT:-3}
"$PY" - "$REPEAT" "$work" "$SIZE" "$FIT" "$THREADS" "$n" "$DSPACK" >"$work/rates" <<'PYEOF'
import resource, subprocess, sys, time, shutil, os
rep, work, size, fit, threads, n, dspack = sys.argv[1:8]
cmds = {
    "ds": [dspack, "-q", "-o", f"{work}/ds", "--size", size, "--fit", fit, "--threads", threads,
           "--max-reject", n, f"{work}/all.txt"],
    "py": [sys.executable, "bench/pack_peer.py", f"{work}/all.txt", f"{work}/peer.h5", "--size", size,
           "--workers", threads],
}
best = {k: (0.0, 1e9) for k in cmds}
for _ in range(int(rep)):
    for k, cmd in cmds.items():
        shutil.rmtree(f"{work}/ds", ignore_errors=True)
        r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        dt, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        best[k] = (max(best[k][0], int(n) / dt), min(best[k][1], cpu))


# Peak memory, in one more (untimed) run of each: the resident set summed over the command's
# whole process tree (the Python packer's pool workers are processes), sampled every 20 ms.
def tree_rss_kb(root):
    kids, rss = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            kids.setdefault(int(st[1]), []).append(int(d))
            rss[int(d)] = int(st[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
        except (OSError, IndexError, ValueError):
            pass
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += kids.get(p, [])
    return total


peak = {}
for k, cmd in cmds.items():
    shutil.rmtree(f"{work}/ds", ignore_errors=True)
    proc, top = subprocess.Popen(cmd, stdout=subprocess.DEVNULL), 0
    while proc.poll() is None:
        top = max(top, tree_rss_kb(proc.pid))
        time.sleep(0.02)
    peak[k] = top / 1024
print(f"{best['ds'][0]:.1f} {best['py'][0]:.1f} {best['ds'][1]:.2f} {best['py'][1]:.2f} {peak['ds']:.0f} {peak['py']:.0f}")
PYEOF
read -r ds_rate py_rate ds_cpu py_cpu ds_rss py_rss <"$work/rates"

# Decode-only bound: tjbench (full-size decode, as dspack does below ~900 px; it decodes larger
# files at 1/2) on a sample of the files; images/s = THREADS / mean seconds per image.
tj_rate=n/a
if command -v tjbench >/dev/null; then
    sample=$(grep -v '^#' "$work/all.txt" | cut -f2 | awk -v n="$n" 'NR % int((n + 39) / 40) == 0')
    tj_rate=$(cd "$work/tree" && echo "$sample" | while IFS= read -r f; do
        tjbench "$f" -benchtime 0.2 -warmup 0.05 2>/dev/null | sed -n 's/.*Frame rate: *\([0-9.]*\) fps.*/\1/p' | head -1
    done | awk -v t="$THREADS" '{ s += 1 / $1; k++ } END { if (k) printf "%.1f", t * k / s; else print "n/a" }')
fi

echo "pack benchmark: $n JPEGs (data/synth, q90), --size $SIZE --fit $FIT, $THREADS threads, $(nproc) cores, best of $REPEAT"
echo "  load average before: $load_before, after: $(cut -d" " -f1-3 /proc/loadavg)"
printf '  %-44s %8s img/s  %6s CPU s  %5s MB peak RSS\n' "dspack" "$ds_rate" "$ds_cpu" "$ds_rss"
printf '  %-44s %8s img/s  %6s CPU s  %5s MB peak RSS\n' "Python (Pillow + h5py, Pool($THREADS))" "$py_rate" "$py_cpu" "$py_rss"
printf '  %-44s %8s img/s\n' "libjpeg-turbo decode only (tjbench, bound)" "$tj_rate"
"$PY" - "$ds_rate" "$py_rate" "$tj_rate" "$ds_cpu" "$py_cpu" <<'PYEOF'
import sys
ds, py, tj, dc, pc = sys.argv[1:6]
print(f"  dspack / Python = {float(ds) / float(py):.2f}x images/s, {float(pc) / float(dc):.2f}x less CPU time")
if tj != "n/a":
    print(f"  dspack / decode-only bound = {100 * float(ds) / float(tj):.0f}%")
PYEOF
