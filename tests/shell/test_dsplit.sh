#!/bin/bash
# dsplit end to end: reproducible output, exact coverage of the image files, stability
# when a class is added, every --materialize mode (an interrupted move included), and
# every kind of bad input.
. "$(dirname "$0")/lib.sh"

# make_tree DIR ORDER: classes of 0, 1, 2, 5, 13 and 101 images plus entries that are not
# images; ORDER=rev creates everything in the opposite order (other directory order).
make_tree() {
    local dir=$1 order=$2 specs=("n00:0" "n01:1" "n02:2" "n03:5" "n04 sp:13" "n05:101")
    local files=()
    for s in "${specs[@]}"; do
        local c=${s%:*} n=${s##*:}
        for ((i = 0; i < n; i++)); do
            case $((i % 3)) in 0) ext=jpg ;; 1) ext=JPEG ;; 2) ext=png ;; esac
            files+=("$c/img_$i.$ext")
        done
        files+=("$c/.hidden.jpg" "$c/notes.txt")
    done
    files+=("n05/caf"$'\xc3\xa9'" 1.jpg")
    if [ "$order" = rev ]; then
        local r=(); for ((i = ${#files[@]} - 1; i >= 0; i--)); do r+=("${files[i]}"); done; files=("${r[@]}")
        mapfile -t specs < <(printf '%s\n' "${specs[@]}" | sort -r)
    fi
    for s in "${specs[@]}"; do mkdir -p "$dir/${s%:*}"; done
    mkdir -p "$dir/n03/nested"
    for f in "${files[@]}"; do printf '%s' "$f" >"$dir/$f"; done  # distinct contents and sizes
    echo readme >"$dir/README"
}
# The image files of a tree as "class/file" lines, sorted (the rule, restated with find).
images_of() {
    (cd "$1" && find . -mindepth 2 -maxdepth 2 -type f ! -name '.*' \
        \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' \) | sed 's|^\./||' | LC_ALL=C sort)
}
listed() { tail -n +2 "$1/train.txt" | cut -f2; tail -n +2 "$1/val.txt" | cut -f2; }
same_outputs() { cmp -s "$1/classes.txt" "$2/classes.txt" && cmp -s "$1/train.txt" "$2/train.txt" && cmp -s "$1/val.txt" "$2/val.txt"; }

# ---- usage ------------------------------------------------------------------------------
expect_status "--help exits 0" 0 dsplit --help
grep -q -- '--materialize' "$T/out" && grep -q 'default: 0.2' "$T/out" && pass "--help lists options and defaults" || fail "--help lists options and defaults"
expect_status "bad option exits 2" 2 dsplit --bogus x -o y
expect_status "missing -o exits 2" 2 dsplit "$T"
expect_status "--val out of range exits 2" 2 dsplit --val 1.5 "$T" -o "$T/o"
expect_status "--how needs --materialize" 2 dsplit --how copy "$T" -o "$T/o"
expect_status "bad --how exits 2" 2 dsplit --materialize "$T/m" --how teleport "$T" -o "$T/o"

# ---- reproducibility ----------------------------------------------------------------------
R=$T/root
make_tree "$R" fwd
expect_status "split runs" 0 dsplit "$R" -o "$T/s1" --json
json=$(cat "$T/out")
[[ $json == *'"classes": 6'* && $json == *'"images": 123'* && $json == *'"empty_classes": 1'* ]] \
    && pass "--json counts" || fail "--json counts" "$json"
[[ $json == *'"hidden": 6'* && $json == *'"not_image": 6'* && $json == *'"nested_dir": 1'* && $json == *'"root_file": 1'* ]] \
    && pass "--json counts skipped entries" || fail "--json counts skipped entries" "$json"
grep -q 'class n00 has no images' "$T/err" && pass "empty class warned" || fail "empty class warned"
dsplit -q "$R" -o "$T/s2" && same_outputs "$T/s1" "$T/s2" && pass "rerun is byte-identical" || fail "rerun is byte-identical"
rm -rf "$R"; make_tree "$R" rev
dsplit -q "$R" -o "$T/s3" && same_outputs "$T/s1" "$T/s3" && pass "tree made in another order: byte-identical" \
    || fail "tree made in another order: byte-identical"
OMP_NUM_THREADS=1 dsplit -q "$R" -o "$T/s4" && same_outputs "$T/s1" "$T/s4" && pass "one thread: byte-identical" \
    || fail "one thread: byte-identical"

# ---- content ------------------------------------------------------------------------------
[ "$(head -1 "$T/s1/train.txt")" = "# ds-manifest 1 root=$(realpath "$R")" ] && pass "manifest header" || fail "manifest header"
diff <(images_of "$R") <(listed "$T/s1" | LC_ALL=C sort) >"$T/d" && pass "train + val = exactly the image files" \
    || { fail "train + val = exactly the image files"; head "$T/d"; }
[ -z "$(LC_ALL=C comm -12 <(tail -n +2 "$T/s1/train.txt" | cut -f2 | LC_ALL=C sort) <(tail -n +2 "$T/s1/val.txt" | cut -f2 | LC_ALL=C sort))" ] \
    && pass "train and val are disjoint" || fail "train and val are disjoint"
val_of() { tail -n +2 "$1/val.txt" | grep -c "^[0-9]*	$2/"; }
[ "$(val_of "$T/s1" n01)" = 0 ] && [ "$(val_of "$T/s1" n02)" = 1 ] && [ "$(val_of "$T/s1" n03)" = 1 ] \
    && [ "$(val_of "$T/s1" "n04 sp")" = 3 ] && [ "$(val_of "$T/s1" n05)" = 21 ] \
    && pass "val counts 0,1,1,3,21 for n = 1,2,5,13,102" || fail "val counts per class"
labels_ok=1
while IFS=$'\t' read -r label path; do
    [ "$(sed -n "$((label + 1))p" "$T/s1/classes.txt")" = "${path%%/*}" ] || { labels_ok=0; break; }
done < <(tail -q -n +2 "$T/s1/train.txt" "$T/s1/val.txt")
[ $labels_ok = 1 ] && pass "labels are classes.txt line numbers" || fail "labels are classes.txt line numbers"
for f in train val; do
    tail -n +2 "$T/s1/$f.txt" | LC_ALL=C sort -t$'\t' -k1,1n -k2,2 -c 2>/dev/null && pass "$f.txt sorted by (label, path)" \
        || fail "$f.txt sorted by (label, path)"
done
dsplit -q --seed 7 "$R" -o "$T/s7" && ! cmp -s "$T/s1/val.txt" "$T/s7/val.txt" && pass "--seed changes the split" \
    || fail "--seed changes the split"
# Into an -o holding another split's manifests: replaced, and said so in one line; a rerun
# with the same options changes nothing and says nothing.
cp -a "$T/s7" "$T/s7b"
dsplit --seed 7 "$R" -o "$T/s7b" 2>"$T/err" && ! grep -q replaced "$T/err" && pass "same split again: silent" ||
    fail "same split again: silent" "$(cat "$T/err")"
dsplit --seed 8 "$R" -o "$T/s7b" 2>"$T/err" && grep -qF "replaced train.txt, val.txt in $T/s7b: they held another split" \
    "$T/err" && pass "another split into the same -o says which files it replaced" ||
    fail "another split into the same -o says which files it replaced" "$(cat "$T/err")"

# A new class (sorting first, so every label shifts) leaves every other class's split alone.
mkdir "$R/a_new"; for i in 1 2 3 4 5 6; do echo $i >"$R/a_new/$i.jpg"; done
dsplit -q "$R" -o "$T/s5"
diff <(tail -n +2 "$T/s1/val.txt" | cut -f2) <(tail -n +2 "$T/s5/val.txt" | cut -f2 | grep -v '^a_new/') >/dev/null \
    && pass "a new class leaves the others' splits alone" || fail "a new class leaves the others' splits alone"
[ "$(head -1 "$T/s5/classes.txt")" = a_new ] && [ "$(val_of "$T/s5" a_new)" = 2 ] && pass "the new class is split too" \
    || fail "the new class is split too"
rm -rf "$R/a_new"

# ---- materialize --------------------------------------------------------------------------
src_state() { (cd "$R" && find . -printf '%p %s %i\n' | LC_ALL=C sort); }
before=$(src_state)
# tree_matches OUT SPLITDIR: every manifest entry sits at SPLITDIR/{train,val}/<path>, nothing else.
tree_matches() {
    diff <( (tail -n +2 "$1/train.txt" | cut -f2 | sed 's|^|train/|'; tail -n +2 "$1/val.txt" | cut -f2 | sed 's|^|val/|') | LC_ALL=C sort) \
         <(cd "$2" && find . -mindepth 3 ! -type d | sed 's|^\./||' | LC_ALL=C sort) >/dev/null
}
for how in symlink hardlink copy; do
    M=$T/mat_$how
    if dsplit -q "$R" -o "$T/m_$how" --materialize "$M" --how $how --json >"$T/j" && tree_matches "$T/m_$how" "$M"; then
        pass "materialize $how builds the tree"; else fail "materialize $how builds the tree"; fi
    f=$(tail -n +2 "$T/m_$how/train.txt" | head -1 | cut -f2)
    case $how in
        symlink) [ -L "$M/train/$f" ] && [ "$(readlink "$M/train/$f")" = "$(realpath "$R")/$f" ] ;;
        hardlink) [ "$(stat -c %i "$M/train/$f")" = "$(stat -c %i "$R/$f")" ] ;;
        copy) [ ! -L "$M/train/$f" ] && [ "$(stat -c %i "$M/train/$f")" != "$(stat -c %i "$R/$f")" ] && cmp -s "$M/train/$f" "$R/$f" ;;
    esac && pass "materialize $how: file kind" || fail "materialize $how: file kind"
    [ -d "$M/train/n00" ] && [ -d "$M/val/n01" ] && pass "materialize $how: empty class dirs kept" \
        || fail "materialize $how: empty class dirs kept"
    [ "$(src_state)" = "$before" ] && pass "materialize $how leaves the source alone" || fail "materialize $how leaves the source alone"
    dsplit -q "$R" -o "$T/m_$how" --materialize "$M" --how $how --json >"$T/j" && grep -q '"placed": 0, "present": 123' "$T/j" \
        && pass "materialize $how: rerun finds everything in place" || fail "materialize $how: rerun" "$(cat "$T/j")"
done
expect_status "materialize with another seed into the same tree is refused" 1 dsplit -q --seed 8 "$R" -o "$T/m_seed" --materialize "$T/mat_symlink"
grep -q 'earlier run with other --seed' "$T/err" && pass "the refusal names the cause" || fail "the refusal names the cause"
[ ! -e "$T/m_seed/train.txt" ] && pass "a refused materialize writes no manifest" ||
    fail "a refused materialize writes no manifest"
# The same refusal into the first run's -o leaves its manifests as they were.
cp -a "$T/m_symlink" "$T/m_symlink_keep"
expect_status "rerun with another seed refused" 1 dsplit -q --seed 8 "$R" -o "$T/m_symlink" --materialize "$T/mat_symlink"
same_outputs "$T/m_symlink" "$T/m_symlink_keep" && pass "a refused rerun keeps the earlier manifests" ||
    fail "a refused rerun keeps the earlier manifests"
first=$(tail -n +2 "$T/m_copy/train.txt" | head -1 | cut -f2)
echo different >"$T/mat_copy/train/$first"
expect_status "materialize refuses to overwrite a different file" 1 dsplit -q "$R" -o "$T/m_copy" --materialize "$T/mat_copy" --how copy
grep -q 'already exists' "$T/err" && cmp -s <(echo different) "$T/mat_copy/train/$first" && pass "the different file is untouched" \
    || fail "the different file is untouched"

# move: copy the tree (move consumes it), then interrupt a move by a conflict half-way.
MV=$T/mvroot
cp -a "$R" "$MV"
orig=$(images_of "$MV")
all_files() {  # every image file under the source and the materialized tree, as class/file
    { images_of "$MV"; [ -d "$T/mat_move/train" ] && images_of "$T/mat_move/train"; [ -d "$T/mat_move/val" ] && images_of "$T/mat_move/val"; } | LC_ALL=C sort
}
mkdir -p "$T/mat_move/val/n05"
blocker=$(dsplit -q "$MV" -o "$T/probe" && tail -n +2 "$T/probe/val.txt" | tail -1 | cut -f2)
echo "in the way" >"$T/mat_move/val/$blocker"
expect_status "move stops at a conflict" 1 dsplit -q "$MV" -o "$T/m_move" --materialize "$T/mat_move" --how move
# Every conflict is found before anything moves or any manifest is written.
[ ! -e "$T/mat_move/train" ] && [ "$(images_of "$MV")" = "$orig" ] && [ ! -e "$T/m_move/train.txt" ] &&
    pass "a conflict stops the move before any file moves" || fail "a conflict stops the move before any file moves"
rm "$T/mat_move/val/$blocker"
[ "$(all_files | uniq)" = "$orig" ] && pass "no file lost by the interruption" || fail "no file lost by the interruption"
expect_status "rerun finishes the move" 0 dsplit -q "$MV" -o "$T/m_move" --materialize "$T/mat_move" --how move
[ -z "$(images_of "$MV")" ] && [ "$(all_files)" = "$orig" ] && tree_matches "$T/m_move" "$T/mat_move" \
    && pass "after the rerun every image is in the materialized tree" || fail "after the rerun every image is in the materialized tree"
diff <(tail -n +2 "$T/m_move/val.txt") <(tail -n +2 "$T/s1/val.txt") >/dev/null && pass "the move kept the split of a plain run" \
    || fail "the move kept the split of a plain run"
[ "$(head -1 "$T/m_move/train.txt")" = "# ds-manifest 1 root=$(realpath "$T/mat_move")/train" ] \
    && pass "after a move the manifests point at the new tree" || fail "after a move the manifests point at the new tree"
# A move interrupted after some files: put a few back by hand, as if the run had stopped there.
cp "$T/m_move/val.txt" "$T/val_before"
tail -n +2 "$T/m_move/train.txt" | cut -f2 | grep '^n05/' | head -5 | while IFS= read -r f; do mv "$T/mat_move/train/$f" "$MV/$f"; done
dsplit -q "$MV" -o "$T/m_move" --materialize "$T/mat_move" --how move --json >"$T/j" \
    && grep -q '"placed": 5, "present": 118' "$T/j" && [ -z "$(images_of "$MV")" ] && cmp -s "$T/val_before" "$T/m_move/val.txt" \
    && pass "rerun after a partial move moves only the rest" || fail "rerun after a partial move moves only the rest" "$(cat "$T/j")"
cp -a "$T/m_move" "$T/m_move_keep"
expect_status "rerun with another seed refuses to scramble a finished move" 1 \
    dsplit -q --seed 9 "$MV" -o "$T/m_move" --materialize "$T/mat_move" --how move
grep -q 'earlier run with other --seed' "$T/err" && pass "the refusal says why" || fail "the refusal says why"
# ... and leaves the manifests pointing at the moved files, as they were.
same_outputs "$T/m_move" "$T/m_move_keep" && pass "the refused move rerun keeps the manifests" ||
    fail "the refused move rerun keeps the manifests"

# A move to another file system copies, fsyncs, then unlinks the source.
if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -c %d /dev/shm)" != "$(stat -c %d "$T")" ]; then
    XD=$(mktemp -d /dev/shm/ds-xdev.XXXXXX)
    cp -a "$R" "$T/xroot"
    expect_status "move across file systems" 0 dsplit -q "$T/xroot" -o "$T/m_x" --materialize "$XD" --how move
    [ -z "$(images_of "$T/xroot")" ] && tree_matches "$T/m_x" "$XD" \
        && cmp -s "$R/n05/img_7.JPEG" "$XD/$(grep -q $'\tn05/img_7.JPEG$' "$T/m_x/val.txt" && echo val || echo train)/n05/img_7.JPEG" \
        && [ -z "$(find "$XD" -name '.*dsplit-tmp')" ] && pass "move across file systems: copied whole, sources gone" \
        || fail "move across file systems: copied whole, sources gone"
    expect_status "hardlink across file systems is refused" 1 dsplit -q "$R" -o "$T/m_xh" --materialize "$XD/h" --how hardlink
    grep -q 'different file systems' "$T/err" && pass "the hardlink refusal says why" || fail "the hardlink refusal says why"
    rm -rf "$XD"
fi

# ---- names a manifest or a shard cannot hold ---------------------------------------------
# A TAB, a newline, or bytes that are not UTF-8 (/paths is UTF-8): skipped as bad_name,
# counted, warned about; never in a manifest. A valid UTF-8 name (café, in make_tree) stays.
BN=$T/badnames
mkdir -p "$BN/a" "$BN/b"
for i in 1 2 3; do echo $i >"$BN/a/$i.jpg"; echo $i >"$BN/b/$i.jpg"; done
echo latin1 >"$BN/a/caf"$'\xe9'".jpg"
echo tab >"$BN/b/x"$'\t'"y.jpg"
printf 'c' >"$BN/a/ok_caf"$'\xc3\xa9'".jpg"
expect_status "bad names split" 0 dsplit --json --val 0 "$BN" -o "$T/bn"
[[ $(cat "$T/out") == *'"bad_name": 2'* ]] && grep -q "warning: 2 entries are left out because their names hold .*not UTF-8" "$T/err" &&
    [ "$(tail -n +2 "$T/bn/train.txt" | wc -l)" = 7 ] && grep -qF "a/ok_caf"$'\xc3\xa9'".jpg" "$T/bn/train.txt" &&
    ! grep -q $'caf\xe9' "$T/bn/train.txt" && pass "non-UTF-8 and TAB names: skipped, counted, warned" ||
    fail "non-UTF-8 and TAB names: skipped, counted, warned" "$(cat "$T/out" "$T/err")"
# A non-UTF-8 class directory is left out the same way.
mkdir "$BN/cl"$'\xff' && echo 1 >"$BN/cl"$'\xff'"/1.jpg"
dsplit -q --val 0 "$BN" -o "$T/bn2" 2>"$T/err" && [ "$(wc -l <"$T/bn2/classes.txt")" = 2 ] && pass "non-UTF-8 class left out" ||
    fail "non-UTF-8 class left out" "$(cat "$T/bn2/classes.txt")"

# ---- bad input ----------------------------------------------------------------------------
expect_status "missing root exits 1" 1 dsplit "$T/nope" -o "$T/b1"
grep -q "dsplit: error: .*nope" "$T/err" && [ ! -e "$T/b1" ] && pass "missing root: message, nothing written" \
    || fail "missing root: message, nothing written"
mkdir -p "$T/noclass"; echo x >"$T/noclass/a.jpg"
expect_status "root without class directories exits 1" 1 dsplit "$T/noclass" -o "$T/b2"
grep -q "no class directories" "$T/err" && [ ! -e "$T/b2/classes.txt" ] && pass "no classes: message, nothing written" \
    || fail "no classes: message, nothing written"
expect_status "root that is a file exits 1" 1 dsplit "$R/README" -o "$T/b3"
echo x >"$T/afile"
expect_status "unwritable output directory exits 1" 1 dsplit "$R" -o "$T/afile/out"
expect_status "output inside the root exits 1" 1 dsplit "$R" -o "$R/split"
[ ! -e "$R/split" ] && pass "output inside the root: not created" || fail "output inside the root: not created"
if [ "$(id -u)" != 0 ]; then
    mkdir -p "$T/locked/c"; chmod 000 "$T/locked"
    expect_status "unreadable root exits 1" 1 dsplit "$T/locked" -o "$T/b4"
    chmod 755 "$T/locked"; chmod 000 "$T/locked/c"
    expect_status "unreadable class directory exits 1" 1 dsplit "$T/locked" -o "$T/b5"
    chmod 755 "$T/locked/c"
    mkdir -p "$T/ro"; chmod 555 "$T/ro"
    expect_status "read-only output directory exits 1" 1 dsplit "$R" -o "$T/ro"
    chmod 755 "$T/ro"
fi
# A failure while writing leaves the previous outputs whole and no temporaries behind.
cp -a "$T/s1" "$T/s1_keep"
mkdir "$T/s1/val.txt.new.tmp"
expect_status "failed write exits 1" 1 dsplit --seed 3 "$R" -o "$T/s1"
rmdir "$T/s1/val.txt.new.tmp"
same_outputs "$T/s1" "$T/s1_keep" && [ -z "$(ls "$T/s1" | grep -v '^[a-z]*\.txt$')" ] \
    && pass "failed write: old outputs intact, no temporaries" || fail "failed write: old outputs intact, no temporaries"

rm -rf "$T"
finish
