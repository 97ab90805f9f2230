#!/bin/bash
# scripts/plot.sh (make plot): curves.png from a run with validation (two panels), without it
# (the loss panel alone), from a run stopped in its first epoch (step rows only) and from
# epoch rows only (--log-every 0), each without a word from gnuplot on stderr; a gnuplot that
# fails half-way leaves no half-drawn curves.png (an earlier one stays as it was), and a
# metrics.jsonl with no rows is an error.
. "$(dirname "$0")/lib.sh"

if ! command -v gnuplot >/dev/null; then
    echo "SKIP plot: gnuplot is not installed (make deps)"; finish
fi
make_bar_images "$T/tree" 12 4 1 || { fail data "cannot make the synthetic set"; finish; }
split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" || { fail pack "dsplit/dspack failed"; finish; }
COMMON=(--train "$T/train" --arch resnet20 --crop 16 --batch 8 --epochs 2 --threads 2 --log-every 1 -q)
dstrain "${COMMON[@]}" --val "$T/val" -o "$T/val_run" 2>/dev/null &&
    dstrain "${COMMON[@]}" -o "$T/noval" 2>/dev/null || { fail train "dstrain failed"; finish; }

PLOT="$DS_ROOT/scripts/plot.sh"
# draws NAME RUN_DIR WIDTH: plot.sh succeeds, prints nothing on stderr, and RUN_DIR/curves.png
# is a PNG WIDTH pixels wide (1200: two panels, 600: the loss panel alone).
draws() {
    if "$PLOT" "$2" >"$T/out" 2>"$T/err" && [ ! -s "$T/err" ] &&
        file "$2/curves.png" | grep -q "PNG image data, $3 x 450" && [ ! -e "$2/curves.png.tmp" ]; then
        pass "$1"
    else
        fail "$1" "$(file "$2/curves.png" 2>&1)"; sed 's/^/      /' "$T/err" | head -5
    fi
}
draws plot_with_val "$T/val_run" 1200
draws plot_without_val "$T/noval" 600
mkdir -p "$T/first" "$T/epochs"
grep -v '"seconds"' "$T/noval/metrics.jsonl" | head -3 >"$T/first/metrics.jsonl"
grep '"seconds"' "$T/noval/metrics.jsonl" >"$T/epochs/metrics.jsonl"
draws plot_step_rows_only "$T/first" 600
draws plot_epoch_rows_only "$T/epochs" 600

# A gnuplot that writes part of its picture and fails (as the old script's did on a run
# without val rows): the earlier curves.png stays, and nothing half-drawn is left.
mkdir -p "$T/fake"
cat >"$T/fake/gnuplot" <<'EOF'
#!/bin/bash
out=$(sed -n 's/^set output "\(.*\)"$/\1/p')
printf '\211PNG half' >"$out"
echo "x range is invalid" >&2
exit 1
EOF
chmod +x "$T/fake/gnuplot"
cp "$T/noval/curves.png" "$T/before.png"
PATH="$T/fake:$PATH" expect_status failed_plot_exits_1 1 "$PLOT" "$T/noval"
check failed_plot_keeps_the_earlier_picture cmp -s "$T/before.png" "$T/noval/curves.png"
check failed_plot_leaves_no_tmp test ! -e "$T/noval/curves.png.tmp"

mkdir -p "$T/empty" && : >"$T/empty/metrics.jsonl"
expect_status no_rows_is_an_error 1 "$PLOT" "$T/empty"
check no_rows_no_picture test ! -e "$T/empty/curves.png"
finish
