#!/bin/bash
# dspack on the synthetic ImageNet-like tree with every quirk: each file synth marks "ok" is
# packed, each marked "reject" is listed in rejected.txt (and nothing else is), and
# packed + rejected = manifest lines in both splits.
source "$(dirname "$0")/lib.sh"
SYNTH=$BUILD_DIR/data/synth
[ -x "$SYNTH" ] || { fail synth_built "$SYNTH missing (make)"; finish; }

"$SYNTH" -q --quirks --classes 3 --per-class 6 "$T/tree" >"$T/quirks.tsv" || fail synth_ran
dsplit -q -o "$T/split" "$T/tree" || fail dsplit_ran
: >"$T/rejected.all"
: >"$T/manifests.all"
for s in train val; do
    dspack -q -o "$T/p-$s" --size 48 --shard-size 7 --max-reject 100 "$T/split/$s.txt" || fail "pack_$s"
    cat "$T/p-$s/rejected.txt" >>"$T/rejected.all"
    grep -v '^#' "$T/split/$s.txt" | cut -f2- >>"$T/manifests.all"
    lines=$(grep -vc '^#' "$T/split/$s.txt")
    packed=0
    for f in "$T/p-$s"/shard-*.h5; do
        packed=$((packed + $(h5ls "$f" | sed -n 's/^labels *Dataset {\([0-9]*\)}.*/\1/p')))
    done
    check "packed_plus_rejected_$s" test $((packed + $(wc -l <"$T/p-$s/rejected.txt"))) -eq "$lines"
done

n_ok=0 n_rej=0
while IFS=$'\t' read -r kind want path; do
    case $want in
    ok)
        n_ok=$((n_ok + 1))
        if ! grep -qxF "$path" "$T/manifests.all"; then fail "quirk_$kind" "not in a manifest: $path"
        elif cut -f1 "$T/rejected.all" | grep -qxF "$path"; then fail "quirk_$kind" "rejected: $(grep -F "$path" "$T/rejected.all")"
        else pass "quirk_${kind}_packed"; fi ;;
    reject)
        n_rej=$((n_rej + 1))
        if cut -f1 "$T/rejected.all" | grep -qxF "$path"; then pass "quirk_${kind}_rejected"
        else fail "quirk_$kind" "not in rejected.txt: $path"; fi ;;
    esac
done <"$T/quirks.tsv"
check quirks_listed test $n_ok -ge 4 -a $n_rej -ge 4
check only_quirks_rejected test "$(wc -l <"$T/rejected.all")" -eq $n_rej
rm -rf "$T"
finish
