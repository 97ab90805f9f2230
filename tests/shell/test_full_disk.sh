#!/bin/bash
# Full disk: every writer, when write() fails (RLIMIT_FSIZE with SIGXFSZ ignored makes write()
# return EFBIG, as ENOSPC would), exits 1 with an error naming the file and the cause, and
# leaves what was there before intact: dsplit's manifests, dspack's complete shards, dstrain's
# previous checkpoint and last.h5. No temporary file is left behind.
. "$(dirname "$0")/lib.sh"
SYNTH=$BUILD_DIR/data/synth
[ -x "$SYNTH" ] || { fail synth_built "$SYNTH missing (make)"; finish; }

# Runs CMD with files limited to KB kilobytes. stderr goes through a pipe (a pipe has no size
# limit, so the error message itself is not lost) into $T/err; the exit status into $rc.
limited() {  # KB CMD...
    local kb=$1; shift
    (trap '' XFSZ; ulimit -f "$kb"; exec "$@" >/dev/null) 2>&1 | cat >"$T/err"
    rc=${PIPESTATUS[0]}
}
# expect_full_disk NAME FILE_PATTERN: exit 1 and one error line naming the file and the cause.
expect_full_disk() {
    if [ "$rc" = 1 ] && grep -q "error: .*$2.*File too large" "$T/err"; then pass "$1"
    else fail "$1" "exit $rc, want 1 and an error naming $2 and the cause: $(head -3 "$T/err")"; fi
}
no_tmp_left() { [ -z "$(find "$1" -name '*.tmp' -o -name '*.new')" ]; }

"$SYNTH" -q --classes 4 --per-class 16 "$T/tree" || { fail setup synth; finish; }

# dsplit: a second split into the same directory cannot write its first byte.
dsplit -q -o "$T/split" "$T/tree" && cp -a "$T/split" "$T/split.before" || { fail setup dsplit; finish; }
limited 0 dsplit -q -o "$T/split" "$T/tree"
expect_full_disk dsplit_full_disk_fails_naming_file 'split/[a-z]*\.txt'
check dsplit_full_disk_manifests_intact diff -r "$T/split" "$T/split.before"
check dsplit_full_disk_no_temporary_left no_tmp_left "$T/split"

# dspack: shards 0-2 are complete, shard 3 (about 12 KB at 32x32) cannot be written.
PACK=(-q --size 32 --shard-size 4 --threads 1 "$T/split/train.txt")
dspack "${PACK[@]}" -o "$T/pref" && mkdir "$T/pack" && cp "$T/pref"/shard-0000[012].h5 "$T/pack/" ||
    { fail setup dspack; finish; }
limited 8 dspack --resume -o "$T/pack" "${PACK[@]}"
expect_full_disk dspack_full_disk_fails_naming_file 'shard-00003\.h5'
ok=1
for k in 0 1 2; do cmp -s "$T/pack/shard-0000$k.h5" "$T/pref/shard-0000$k.h5" || ok=0; done
check dspack_full_disk_complete_shards_intact test $ok = 1
check dspack_full_disk_no_partial_shard test ! -e "$T/pack/shard-00003.h5"
check dspack_full_disk_no_temporary_left no_tmp_left "$T/pack"
dspack --resume -o "$T/pack" "${PACK[@]}"
check dspack_full_disk_resume_after_space_returns diff -r "$T/pack" "$T/pref"

# dstrain: checkpoints 1 and 2 written; the third (about 2 MB: resnet20 weights and momentum)
# does not fit under 1 MB.
TRAIN=(--train "$T/pref" --arch resnet20 --crop 32 --batch 8 --epochs 2 --lr 0.05 --lr-scaling none
       --warmup-epochs 0 --threads 1 --log-every 1 --ckpt-steps 1 -q)
dstrain "${TRAIN[@]}" -o "$T/run" --max-steps 2 && cp "$T/run/ckpt-00000002.h5" "$T/ckpt2.copy" ||
    { fail setup dstrain; finish; }
limited 1024 dstrain "${TRAIN[@]}" --resume "$T/run"
expect_full_disk dstrain_full_disk_fails_naming_file 'ckpt-00000003\.h5'
check dstrain_full_disk_previous_checkpoint_intact cmp -s "$T/run/ckpt-00000002.h5" "$T/ckpt2.copy"
check dstrain_full_disk_last_still_previous test "$(readlink "$T/run/last.h5")" = ckpt-00000002.h5
check dstrain_full_disk_no_partial_checkpoint test ! -e "$T/run/ckpt-00000003.h5"
check dstrain_full_disk_no_temporary_left no_tmp_left "$T/run"
check dstrain_full_disk_last_loads sh -c "dseval -q '$T/run/last.h5' '$T/pref' >/dev/null"
finish
