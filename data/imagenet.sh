#!/bin/bash
# imagenet.sh ARCHIVE OUT_DIR
#
# Turns ILSVRC2012_img_train.tar (1,000 per-class tars, nXXXXXXXX.tar, inside) into the
# class-folder tree dsplit reads: OUT_DIR/nXXXXXXXX/*.JPEG.
#
# One pass over the archive: GNU tar hands each inner tar to this script (--to-command),
# which unpacks it into a hidden temporary directory and renames that into place, so the
# archive is never held twice on disk and a class directory is complete or absent.
# A class is done when OUT_DIR/.imagenet-done/<class> exists (written after the rename).
# Rerun after any interruption: done classes are skipped (tar seeks past them), leftover
# temporaries are removed, and the rest is extracted.
set -euo pipefail
prog=imagenet.sh

if [ "${1:-}" = --member ]; then
    # Called by tar once per member, the member's bytes on stdin.
    out=$2 name=${TAR_FILENAME:?run by tar --to-command}
    base=${name##*/} cls=${base%.tar}
    if [ "$cls" = "$base" ] || [ -z "$cls" ] || [[ $cls == .* ]]; then
        echo "$prog: skipping $name (not a per-class .tar)" >&2
        cat >/dev/null
        exit 0
    fi
    tmp=$out/.imagenet-tmp-$cls
    rm -rf "$tmp"
    mkdir -p "$tmp"
    if ! tar -x -C "$tmp" --no-same-owner --no-same-permissions; then
        echo "$prog: error: cannot unpack $name; rerun to retry it" >&2
        rm -rf "$tmp"
        exit 1
    fi
    # A class directory without a marker is left from a run stopped between the rename
    # and the marker; this fresh copy replaces it.
    rm -rf "${out:?}/$cls"
    mv -T "$tmp" "$out/$cls"
    touch "$out/.imagenet-done/$cls"
    n=$(find "$out/$cls" -type f | wc -l)
    echo "$prog: $cls: $n files ($(ls "$out/.imagenet-done" | wc -l) classes done)" >&2
    exit 0
fi

case "${1:-}" in -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
if [ $# -ne 2 ]; then
    echo "usage: $prog ARCHIVE OUT_DIR" >&2
    echo "$prog: try '$prog --help'" >&2
    exit 2
fi
archive=$1 out=$2
[ -f "$archive" ] && [ -r "$archive" ] || { echo "$prog: error: $archive: not a readable file" >&2; exit 1; }
tar --version 2>/dev/null | grep -q 'GNU tar' || { echo "$prog: error: needs GNU tar (for --to-command)" >&2; exit 1; }
mkdir -p "$out/.imagenet-done"
out=$(cd "$out" && pwd)
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
rm -rf "$out"/.imagenet-tmp-*

exclude=$(mktemp)
trap 'rm -f "$exclude"' EXIT
for m in "$out"/.imagenet-done/*; do
    [ -e "$m" ] && echo "${m##*/}.tar"
done >"$exclude"
ndone=$(wc -l <"$exclude")
[ "$ndone" -gt 0 ] && echo "$prog: $ndone classes done by an earlier run; skipping them" >&2

status=0
tar -xf "$archive" --wildcards -X "$exclude" \
    --to-command="$(printf '%q --member %q' "$self" "$out")" '*.tar' 2>"$exclude.err" || status=$?
# "Not found in archive" only means every class was already done.
grep -v -e 'Not found in archive' -e 'Exiting with failure status due to previous errors' "$exclude.err" >&2 || true
found=$(grep -c 'Not found in archive' "$exclude.err" || true)
rm -f "$exclude.err"
nclass=$(ls "$out/.imagenet-done" | wc -l)
if [ "$nclass" -eq 0 ] && [ "$found" -gt 0 ]; then
    echo "$prog: error: $archive holds no per-class .tar members" >&2
    exit 1
fi
if [ "$status" -ne 0 ] && ! { [ "$found" -gt 0 ] && [ "$nclass" -eq "$ndone" ]; }; then
    echo "$prog: error: extraction of $archive stopped ($nclass classes done); rerun to finish" >&2
    exit 1
fi
echo "$prog: $nclass classes in $out" >&2
