#!/bin/bash
# make plot RUN=RUN_DIR: loss and accuracy curves from RUN_DIR/metrics.jsonl to
# RUN_DIR/curves.png (gnuplot). Left: training loss per logged step and per epoch, and the
# validation loss. Right: validation top-1 and top-5 per epoch. A run without validation rows
# (trained without --val) gets the left panel alone. The picture is drawn as curves.png.tmp and
# renamed into place only once gnuplot has succeeded: a failure leaves no half-drawn file, and
# an earlier curves.png as it was.
set -euo pipefail
run=${1:?usage: plot.sh RUN_DIR}
m=$run/metrics.jsonl
[ -f "$m" ] || { echo "plot.sh: error: $m: no such file" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot.sh: error: gnuplot is not installed (make deps)" >&2; exit 1; }
tmp=$(mktemp -d)
out=$run/curves.png
trap 'rm -rf "$tmp" "$out.tmp"' EXIT

# metrics.jsonl lines are flat JSON objects of numbers: pull fields out by name.
field() { awk -v k="\"$1\":" '{ i = index($0, k); if (!i) { print "?"; next }
    s = substr($0, i + length(k)); sub(/[,}].*/, "", s); print s }'; }
# epoch rows carry "seconds" (and the val fields after a validated epoch), step rows do not
grep -v '"seconds"' "$m" >"$tmp/steps" || true
grep '"seconds"' "$m" >"$tmp/epochs" || true
paste <(field epoch <"$tmp/steps") <(field loss <"$tmp/steps") >"$tmp/loss.dat"
paste <(field epoch <"$tmp/epochs") <(field val_top1 <"$tmp/epochs") <(field val_top5 <"$tmp/epochs") \
    <(field loss <"$tmp/epochs") <(field val_loss <"$tmp/epochs") >"$tmp/acc.dat"
[ -s "$tmp/loss.dat" ] || [ -s "$tmp/acc.dat" ] || { echo "plot.sh: error: $m holds no metrics" >&2; exit 1; }

# Only the series that have points: gnuplot refuses a plot none of whose files has one.
val=0
grep -q '"val_top1"' "$tmp/epochs" && val=1
loss=()
[ -s "$tmp/loss.dat" ] && loss+=("\"$tmp/loss.dat\" using 1:2 with lines title \"train loss (logged steps)\"")
[ -s "$tmp/acc.dat" ] && loss+=("\"$tmp/acc.dat\" using 1:4 with linespoints title \"train loss (epoch)\"")
[ $val = 1 ] && loss+=("\"$tmp/acc.dat\" using 1:5 with linespoints title \"val loss\"")
loss_plot=$(IFS=,; echo "plot ${loss[*]}")

gnuplot <<GP
set terminal pngcairo size $([ $val = 1 ] && echo 1200 || echo 600),450 noenhanced
set output "$out.tmp"
set multiplot layout 1,$((1 + val)) title "$run"
set datafile missing "?"
set grid
set xlabel "epoch"
set ylabel "loss"
set key top right
$loss_plot
$([ $val = 1 ] && cat <<ACC
set ylabel "accuracy (%)"
set key bottom right
plot "$tmp/acc.dat" using 1:(100*\$2) with linespoints title "val top-1", \
     "$tmp/acc.dat" using 1:(100*\$3) with linespoints title "val top-5"
ACC
)
unset multiplot
GP
mv -f "$out.tmp" "$out"
echo "$out"
