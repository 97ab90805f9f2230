#!/bin/bash
# The module map of docs/DESIGN.md §1 as a contract: its table gives each libcommon module a
# layer (base, data, engine, run, in that order), and a module may include only headers of
# its own layer or the ones above it. Every file under backend/ is the engine's. The layers
# are read from the document itself, so a move in the code without the map (or the other
# way round) fails here. A planted include that points down the layers must be found.
# The emulated CUDA device (tests/emu) is a test build's: production code (libcommon/,
# tools/) never names it (emu::, DS_CUDA_EMULATED, DS_EMU_*, an include of an emu header or
# of tests/); a planted name must be found.
. "$(dirname "$0")/lib.sh"
design=$DS_ROOT/docs/DESIGN.md

# module -> layer number, from the rows of §1's table ("| layer | `module` (+ `other`) | ...")
awk -F'|' '
    /^## 1\./ { in1 = 1; next }
    /^## 2\./ { in1 = 0 }
    in1 && /^\| / && $3 ~ /`/ {
        layer = $2; gsub(/ /, "", layer)
        if (layer == "layer") next
        if (layer != "") { if (!(layer in num)) num[layer] = ++n; cur = num[layer] }
        s = $3
        while (match(s, /`[^`]+`/)) { name = substr(s, RSTART + 1, RLENGTH - 2); s = substr(s, RSTART + RLENGTH)
                                      sub(/^backend\/.*/, "backend", name); print name, cur }
    }' "$design" | sort -u >"$T/layers"
check layers_read_from_design sh -c "grep -q '^log 1$' '$T/layers' && grep -q '^train ' '$T/layers' &&
    grep -q '^backend ' '$T/layers' && [ \$(cut -d' ' -f2 '$T/layers' | sort -u | wc -l) -ge 4 ]"

# Prints "file (layer L) -> x.h (layer M)" for each include of a module of a lower layer.
violations() {  # ROOT
    local f m ml i il
    for f in "$1"/libcommon/*.[ch] "$1"/libcommon/backend/*; do
        m=$(basename "${f%.*}")
        case $f in */backend/*) m=backend ;; esac
        ml=$(awk -v m="$m" '$1 == m {print $2}' "$T/layers")
        [ -z "$ml" ] && continue
        grep -o '^#include "[^"]*\.h"' "$f" | sed 's/#include "//; s/\.h"$//; s|^backend/.*|backend|' | sort -u |
            while read -r i; do
                il=$(awk -v m="$i" '$1 == m {print $2}' "$T/layers")
                [ -n "$il" ] && [ "$il" -gt "$ml" ] && echo "${f#"$1"/} (layer $ml) -> $i.h (layer $il)"
            done
    done
    return 0
}
# Every module of libcommon is in the map (private headers aside).
missing=""
for f in "$DS_ROOT"/libcommon/*.h; do
    m=$(basename "$f" .h)
    case $m in *_internal) continue ;; esac   # a module's private header (DESIGN §1)
    grep -q "^$m " "$T/layers" || missing="$missing $m"
done
check "every_module_in_the_map${missing:+ (missing:$missing)}" test -z "$missing"

violations "$DS_ROOT" >"$T/found"
check no_include_points_down_the_layers test ! -s "$T/found"
sed 's/^/    down: /' "$T/found"

# A planted violation (log.c, base, including train.h, run) is found.
mkdir -p "$T/tree/libcommon/backend"
cp "$DS_ROOT"/libcommon/*.[ch] "$T/tree/libcommon/" && cp "$DS_ROOT"/libcommon/backend/* "$T/tree/libcommon/backend/"
sed -i '1a #include "train.h"' "$T/tree/libcommon/log.c"
violations "$T/tree" >"$T/planted"
check planted_violation_found grep -q '^libcommon/log.c (layer 1) -> train.h (layer 4)' "$T/planted"

# Prints "file:line:text" for each place under ROOT's libcommon/ and tools/ that names the
# emulator. DS_EMU_VEC16, the hook of backend/cuda_bodies.h's vector bodies (a no-op there
# unless the emulator defines it), is the one name allowed.
emulator_names() {  # ROOT
    (cd "$1" && grep -rnE -e 'emu::|DS_CUDA_EMULATED|DS_EMU[A-Z0-9_]*' \
        -e '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^">]*/)?(tests/|emu[_.])' libcommon tools) |
        grep -vE '^[^:]+:[0-9]+:.*DS_EMU_VEC16' || true
}
emulator_names "$DS_ROOT" >"$T/emu_found"
check production_never_names_the_emulator test ! -s "$T/emu_found"
sed 's/^/    names the emulator: /' "$T/emu_found"

# Planted: a launch macro that names emu:: in a backend header, an include of the emulator's
# header in a tool.
mkdir -p "$T/etree"
cp -r "$DS_ROOT/libcommon" "$DS_ROOT/tools" "$T/etree/"
printf '#define DS_PLANTED(k) ::emu::launch_kernel(#k)\n' >>"$T/etree/libcommon/backend/cuda_check.h"
sed -i '1a #include "../../tests/emu/emu.h"' "$T/etree/tools/train/dstrain.c"
emulator_names "$T/etree" >"$T/emu_planted"
check planted_emulator_names_found sh -c "grep -q '^libcommon/backend/cuda_check.h:[0-9]*:#define DS_PLANTED' '$T/emu_planted' &&
    grep -q '^tools/train/dstrain.c:2:#include \"../../tests/emu/emu.h\"' '$T/emu_planted'"
finish
