"""bench/gpu.sh's stage 14: Nsight Compute's per-launch counters (ncu --csv --print-units base)
of one training step turned into kernels.md and the lines of the checks table.
   ncu_kernels.py --ds DS.csv --all ALL.csv --ds-regex RE --tensor-metric NAME [--copy-tbs X]
                  --out kernels.md
DS.csv: ds's kernels with every counter (time, DRAM bytes and throughput, L2 bytes, SM and warp
activity, issue-active, the stall ratios, grid, registers, occupancy limits); ALL.csv: every
kernel with time, DRAM throughput, the tensor pipe and grid, of which those not matching RE
(cuDNN's and cuBLAS's) are kept, in launch order. Sums over a kernel's launches for times and
bytes, time-weighted means for the percentages and ratios, the largest grid and register count,
the smallest occupancy limit (blocks per SM) and the limit that sets it. --copy-tbs: stage 13's
copy rate, each kernel's TB/s beside it. Prints "NAME<TAB>RESULT" lines, the longest kernels
first. Standard library only."""
import argparse, csv, re, sys

p = argparse.ArgumentParser()
p.add_argument("--ds", required=True)
p.add_argument("--all", required=True)
p.add_argument("--ds-regex", required=True)
p.add_argument("--tensor-metric", required=True)
p.add_argument("--copy-tbs", type=float)
p.add_argument("--out", required=True)
a = p.parse_args()


def launches(path):
    """{launch id: {"name": kernel, metric: value}} in launch order"""
    out = {}
    try:
        lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    except OSError:
        return out
    for r in csv.DictReader(lines):
        try:
            v = float(r["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        k = out.setdefault(r["ID"], {"name": r["Kernel Name"]})
        k[r["Metric Name"]] = v
    return out


def short(name):
    return re.sub(r"\(.*$", "", re.sub(r"^void ", "", name))


T = "gpu__time_duration.sum"
ds = launches(a.ds)
kern = {}
for l in ds.values():
    kern.setdefault(short(l["name"]), []).append(l)


def wmean(ls, m):
    w = [(l.get(T, 0), l[m]) for l in ls if m in l]
    tot = sum(t for t, _ in w)
    return sum(t * v for t, v in w) / tot if tot else float("nan")


LIMITS = ("registers", "shared_mem", "warps", "blocks")
rows = []
for name, ls in kern.items():
    ms = sum(l.get(T, 0) for l in ls) / 1e6
    gb = sum(l.get("dram__bytes_read.sum", 0) + l.get("dram__bytes_write.sum", 0) for l in ls) / 1e9
    l2 = sum(l.get("lts__t_bytes.sum", 0) for l in ls) / 1e9
    lim = {k: min((l.get("launch__occupancy_limit_" + k, 1e9) for l in ls), default=1e9) for k in LIMITS}
    limiter = min(lim, key=lim.get)
    rows.append(dict(name=name, n=len(ls), ms=ms, gb=gb, l2=l2, tbs=gb / ms if ms else 0,
                     dram=wmean(ls, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                     sm=wmean(ls, "sm__cycles_active.avg.pct_of_peak_sustained_elapsed"),
                     warps=wmean(ls, "sm__warps_active.avg.pct_of_peak_sustained_active"),
                     issue=wmean(ls, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
                     lsb=wmean(ls, "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"),
                     lg=wmean(ls, "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio"),
                     mio=wmean(ls, "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"),
                     grid=max(l.get("launch__grid_size", 0) for l in ls),
                     regs=max(l.get("launch__registers_per_thread", 0) for l in ls),
                     limiter=limiter, blocks=lim[limiter]))
rows.sort(key=lambda r: -r["ms"])

ds_re = re.compile(a.ds_regex)
others = [l for l in launches(a.all).values() if not ds_re.search(short(l["name"]))]


def copy_share(tbs):
    return " (%.0f%% of the copy's %.2f)" % (100 * tbs / a.copy_tbs, a.copy_tbs) if a.copy_tbs else ""


with open(a.out, "w") as f:
    f.write("# ds's kernels and cuDNN's, one training step under Nsight Compute\n\n")
    f.write("Times are ncu's, each launch serialised (clocks as they are); TB/s = DRAM bytes read and written "
            "over the time%s.\n\n" % ("; the copy: stage 13's torch copy, %.2f TB/s" % a.copy_tbs if a.copy_tbs else ""))
    f.write("| kernel | launches | ms | DRAM GB | TB/s | L2 GB | DRAM % of peak | SM active % | warps active % "
            "| issue active % | stalls per issue: long scoreboard / lg / mio | grid (largest) | registers "
            "| occupancy limit (blocks per SM) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        f.write("| %s | %d | %.3f | %.2f | %.2f | %.2f | %.1f | %.1f | %.1f | %.1f | %.2f / %.2f / %.2f | %d | %d | %s (%d) |\n"
                % (r["name"], r["n"], r["ms"], r["gb"], r["tbs"], r["l2"], r["dram"], r["sm"], r["warps"], r["issue"],
                   r["lsb"], r["lg"], r["mio"], r["grid"], r["regs"], r["limiter"], r["blocks"]))
    f.write("\n## cuDNN's and cuBLAS's kernels, in launch order\n\n| # | kernel | ms | DRAM %% of peak | tensor pipe %% (%s) "
            "| grid |\n|---|---|---|---|---|---|\n" % a.tensor_metric)
    for i, l in enumerate(others):
        f.write("| %d | %s | %.3f | %.1f | %.1f | %d |\n" % (i, short(l["name"])[:100], l.get(T, 0) / 1e6,
                l.get("dram__throughput.avg.pct_of_peak_sustained_elapsed", float("nan")),
                l.get(a.tensor_metric, float("nan")), l.get("launch__grid_size", 0)))

if rows:
    ms, gb = sum(r["ms"] for r in rows), sum(r["gb"] for r in rows)
    print("ncu: ds's kernels, one step\t%d launches of %d kernels, %.2f ms serialised, %.1f GB from DRAM: %.2f TB/s%s"
          % (sum(r["n"] for r in rows), len(rows), ms, gb, gb / ms if ms else 0, copy_share(gb / ms if ms else 0)))
    for r in rows[:8]:
        print("ncu: %s\t%d launches, %.3f ms, %.2f GB, %.2f TB/s%s; issue %.0f%%, warps %.0f%%, SM %.0f%%; stalls per issue "
              "long-sb %.2f, lg %.2f, mio %.2f; L2 %.2f GB; grid %d, %d registers, occupancy limit %s (%d blocks)"
              % (r["name"], r["n"], r["ms"], r["gb"], r["tbs"], copy_share(r["tbs"]), r["issue"], r["warps"], r["sm"],
                 r["lsb"], r["lg"], r["mio"], r["l2"], r["grid"], r["regs"], r["limiter"], r["blocks"]))
if others:
    ms = sum(l.get(T, 0) for l in others) / 1e6
    tw = [(l.get(T, 0), l[a.tensor_metric]) for l in others if a.tensor_metric in l]
    tensor = sum(t * v for t, v in tw) / sum(t for t, _ in tw) if tw and sum(t for t, _ in tw) else float("nan")
    print("ncu: cuDNN's and cuBLAS's kernels, one step\t%d launches, %.2f ms serialised, tensor pipe %.0f%% (time-weighted; "
          "per launch in kernels.md)" % (len(others), ms, tensor))
if not rows and not others:
    sys.exit("ncu_kernels.py: no launch in %s or %s" % (a.ds, a.all))
