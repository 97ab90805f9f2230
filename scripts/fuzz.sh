#!/bin/bash
# Builds each libFuzzer harness (tests/fuzz/fuzz_NAME.c) against the libcommon sources with
# clang's -fsanitize=fuzzer,address,undefined and runs it for FUZZ_SECONDS (default 60) on a
# copy of its corpus (tests/fuzz/corpus/NAME/). New crashes land in build/fuzz/NAME/ as
# crash-*; inputs worth keeping can be minimised into the corpus with FUZZ_MERGE=1, which
# merges what the run found back into tests/fuzz/corpus/NAME/ (the suite replays that
# directory).
#   scripts/fuzz.sh tests/fuzz/fuzz_decode.c [...]
set -eu
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
CLANG=${CLANG:-$(command -v clang || command -v clang-14 || true)}
if [ -z "$CLANG" ]; then echo "fuzz: clang not found (Debian: clang-14 libclang-rt-14-dev)"; exit 1; fi
[ $# -gt 0 ] || set -- tests/fuzz/fuzz_*.c
libs=$(pkg-config --cflags --libs hdf5 libturbojpeg libpng)
status=0
for h in "$@"; do
    name=$(basename "$h" .c); name=${name#fuzz_}
    out=build/fuzz/$name
    mkdir -p "$out/corpus"
    echo "fuzz: building $name"
    # Only what the harness needs. The parsers report each refusal on stderr: closed
    # (libFuzzer keeps its own reports on a copy of it).
    case $name in
    decode) srcs="libcommon/image.c libcommon/resize.c libcommon/cpu_isa.c libcommon/log.c" fdmask=0 ;;
    manifest) srcs="libcommon/manifest.c libcommon/fsutil.c libcommon/log.c" fdmask=2 ;;
    matfile) srcs="libcommon/matfile.c libcommon/fsutil.c libcommon/log.c" fdmask=2 ;;
    *) echo "fuzz: no source list for $name in $0"; exit 1 ;;
    esac
    "$CLANG" -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -D_GNU_SOURCE -Ilibcommon "$h" $srcs \
        $libs -lz -lm -o "$out/fuzz_$name"
    seeds=tests/fuzz/corpus/$name
    cp -n "$seeds"/* "$out/corpus/" 2>/dev/null || true
    echo "fuzz: running $name for ${secs}s"
    if ! (cd "$out" && ./fuzz_"$name" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
            -close_fd_mask=$fdmask -print_final_stats=1 corpus >run.log 2>&1); then
        echo "fuzz: $name FOUND A CRASH, see $out/run.log and $out/crash-*"; tail -30 "$out/run.log"; status=1
    else
        tail -3 "$out/run.log"
    fi
    if [ "${FUZZ_MERGE:-0}" = 1 ]; then
        "$out/fuzz_$name" -merge=1 "$seeds" "$out/corpus" >/dev/null 2>&1
        echo "fuzz: $seeds now holds $(ls "$seeds" | wc -l) files"
    fi
done
exit $status
