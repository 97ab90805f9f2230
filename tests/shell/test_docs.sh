#!/bin/bash
# The docs against the programs (git's t0450, which holds each command's page against its -h):
# every long option a tool's --help prints is named in docs/TOOLS.md, in that tool's section
# ("### dstrain ...", down to the next section of its rank) or in the options every tool shares
# (the paragraph under "## The tools"); an on/off option may be named --x, --no-x or --[no-]x.
# And the rule of docs/DESIGN.md §1: a tool includes only public headers, never backend/* or a
# module's *_internal.h. Planted faults (an option taken out of a copy of TOOLS.md, a private
# include added to a copy of a tool) must be found.
. "$(dirname "$0")/lib.sh"
tools_md=$DS_ROOT/docs/TOOLS.md
TOOLS="dsplit dspack dstrain dseval"

# The long options of TOOL's --help, one a line, without the dashes or "[no-]".
help_options() {  # TOOL
    "$1" --help 2>&1 | grep -oE '^ +(-[A-Za-z0-9], )?--(\[no-\])?[a-z][a-z0-9-]*' |
        sed -E 's/^ +(-[A-Za-z0-9], )?--(\[no-\])?//' | sort -u
}
# The text TOOL's options may be named in: the shared paragraph and the tool's own section.
doc_text() {  # TOOLS_MD TOOL
    awk -v tool="$2" '
        /^## / { shared = ($0 ~ /^## The tools/); own = 0 }
        /^### / { shared = 0; own = ($2 == tool) }
        shared || own' "$1"
}
# Prints "TOOL: --OPTION" for each option of TOOL's --help that the text does not name.
missing_options() {  # TOOLS_MD
    local t o
    for t in $TOOLS; do
        doc_text "$1" "$t" >"$T/doc-$t"
        help_options "$t" >"$T/opts-$t"
        while read -r o; do
            grep -qE -- "--(\[no-\]|no-)?$o([^a-z0-9-]|$)" "$T/doc-$t" || echo "$t: --$o"
        done <"$T/opts-$t"
    done
}

for t in $TOOLS; do
    check "${t}_help_lists_options" sh -c "[ \$(\"$t\" --help 2>&1 | grep -cE '^ +(-[A-Za-z0-9], )?--') -ge 4 ]"
done
missing_options "$tools_md" >"$T/missing"
check every_help_option_in_tools_md test ! -s "$T/missing"
sed 's/^/    not in docs\/TOOLS.md: /' "$T/missing"

# Planted: dstrain's --step-gamma taken out of a copy of TOOLS.md is found, and only it.
sed 's/--step-gamma/--step-GAMMA/g' "$tools_md" >"$T/TOOLS.md"
missing_options "$T/TOOLS.md" >"$T/planted"
check planted_missing_option_found sh -c "[ \"\$(cat '$T/planted')\" = 'dstrain: --step-gamma' ]"

# Prints "FILE: HEADER" for each private header a tool includes.
private_includes() {  # ROOT
    grep -nE '^#include "(backend/[^"]*|[^"]*_internal\.h)"' -r "$1/tools" --include='*.c' --include='*.h' |
        sed "s|^$1/||"
    return 0
}
private_includes "$DS_ROOT" >"$T/private"
check no_tool_includes_a_private_header test ! -s "$T/private"
sed 's/^/    private: /' "$T/private"

mkdir -p "$T/tree"
cp -r "$DS_ROOT/tools" "$T/tree/"
sed -i '1a #include "model_internal.h"' "$T/tree/tools/train/dstrain.c"
private_includes "$T/tree" >"$T/planted_include"
check planted_private_include_found grep -q '^tools/train/dstrain.c:2:#include "model_internal.h"' "$T/planted_include"
finish
