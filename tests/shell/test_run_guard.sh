#!/bin/bash
# A dstrain run guarded and watched: one process per run directory (a second is refused
# with the holder's pid, a resume too); Slurm tasks that MPI does not join refused; SIGHUP
# stops with a checkpoint as SIGTERM does; a reader of stderr that goes away ends the
# printing, not the run; a warmup as long as the run is warned of; the start line says how
# the lr was derived; the progress bar on --progress and the summary line at the end; an
# impossible --crop refused before the model is planned; --val equal to --train and an empty
# class said.
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 32 4 1 || { fail data "cannot make the synthetic set"; finish; }
split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" || { fail pack "dsplit/dspack failed"; finish; }

# 96 training images, batch 8: 12 steps per epoch.
COMMON=(--train "$T/train" --arch resnet20 --crop 16 --batch 8 --epochs 2 --lr 0.05 --lr-scaling none
        --warmup-epochs 0.5 --threads 1 --log-every 4)

# Waits until the run whose stderr is FILE waits after its step (DS_TESTHOOK_PAUSE_AFTER_STEP).
wait_paused() { for _ in $(seq 1 600); do grep -q 'waiting for a signal' "$1" && return 0; sleep 0.1; done; return 1; }

# One run per directory: B, and a resume of A's directory, are refused while A holds it;
# A is not disturbed and ends as it would.
DS_TESTHOOK_PAUSE_AFTER_STEP=2 dstrain "${COMMON[@]}" -o "$T/held" 2>"$T/a.err" &
a=$!
if wait_paused "$T/a.err"; then
    expect_status second_process_refused 1 dstrain "${COMMON[@]}" -o "$T/held" --seed 2
    check second_process_names_holder grep -q "held is in use by another dstrain (pid $a on " "$T/err"
    kill -TERM $a
else
    fail second_process_refused "the first run never paused"
    kill -KILL $a
fi
wait $a
check holder_ends_with_its_checkpoint test "$(readlink "$T/held/last.h5")" = ckpt-00000002.h5
dstrain --resume "$T/held" -q --max-steps 3 2>"$T/after.err"
check free_after_the_holder_exits test "$(readlink "$T/held/last.h5")" = ckpt-00000003.h5

# srun without an MPI plugin: each task alone in its world would run into the same directory.
expect_status slurm_tasks_alone_refused 1 env SLURM_PROCID=1 SLURM_NTASKS=2 dstrain "${COMMON[@]}" -o "$T/srun"
check slurm_tasks_alone_named grep -q "srun --mpi=pmix" "$T/err"
check slurm_refused_before_any_file test ! -e "$T/srun"
expect_status slurm_one_task_runs 0 env SLURM_PROCID=0 SLURM_NTASKS=1 dstrain "${COMMON[@]}" -o "$T/srun1" \
    --max-steps 1 -q

# SIGHUP (a closed terminal or ssh session): the step finishes and a checkpoint is written.
DS_TESTHOOK_PAUSE_AFTER_STEP=3 dstrain "${COMMON[@]}" -o "$T/hup" 2>"$T/hup.err" &
pid=$!
wait_paused "$T/hup.err" && kill -HUP $pid
wait $pid
rc=$?
if [ "$rc" = 129 ] && [ "$(readlink "$T/hup/last.h5")" = ckpt-00000003.h5 ]; then pass sighup_checkpoints; else
    fail sighup_checkpoints "exit $rc, last.h5 -> '$(readlink "$T/hup/last.h5")'"; fi
check sighup_said grep -q "stopped at step 3 on SIGHUP" "$T/hup.err"

# stderr read by a process that exits at once: the run goes on to its end, silently.
dstrain "${COMMON[@]}" -o "$T/pipe" --log-every 1 2>&1 >/dev/null | head -c 1 >/dev/null
rc=${PIPESTATUS[0]}
if [ "$rc" = 0 ] && [ "$(readlink "$T/pipe/last.h5")" = ckpt-00000024.h5 ]; then pass broken_stderr_run_goes_on; else
    fail broken_stderr_run_goes_on "exit $rc, last.h5 -> '$(readlink "$T/pipe/last.h5")'"; fi

# A warmup as long as the run: warned of, and how the lr was derived is on the start line.
dstrain "${COMMON[@]}" -o "$T/warm" --warmup-epochs 5 --lr-scaling linear --max-steps 1 2>"$T/warm.err"
check long_warmup_warned grep -q "warning: --warmup-epochs 5 is not shorter than the 2-epoch run" "$T/warm.err"
check lr_derivation_said grep -q "lr 0.0015625 = 0.05 x 8/256 (--lr-scaling linear)" "$T/warm.err"
dstrain "${COMMON[@]}" -o "$T/warm2" --max-steps 1 2>"$T/warm2.err"
check short_warmup_not_warned sh -c "! grep -q warmup '$T/warm2.err'"

# --progress: the bar over the run (images of the steps to run), cleared before each line;
# at the end one summary line with the best validation and the file.
dstrain "${COMMON[@]}" --val "$T/val" -o "$T/bar" --progress 2>"$T/bar.err"
check progress_bar_drawn grep -aq "train \[#*\.*\] [0-9]*/192 " "$T/bar.err"
check progress_bar_cleared_before_lines grep -aq $'\r\033\\[Kdstrain: epoch 1/2' "$T/bar.err"
check summary_line grep -aq "done: 2 epochs, 24 steps, in .*; best val top-1 .* after epoch [12]: $T/bar/best.h5; the last checkpoint: $T/bar/ckpt-00000024.h5" "$T/bar.err"
dstrain "${COMMON[@]}" -o "$T/nobar" 2>"$T/nobar.err"
check no_bar_off_a_terminal sh -c "! grep -aq 'train \[' '$T/nobar.err'"
check summary_without_val grep -q "done: 2 epochs, 24 steps, in [0-9:]*; the last checkpoint:" "$T/nobar.err"

# A crop the stored images cannot give, refused before the model is planned for it (at
# 5000x5000 the plan alone would ask for terabytes).
expect_status impossible_crop_refused 1 dstrain "${COMMON[@]}" -o "$T/crop" --crop 5000
check impossible_crop_named grep -q -- "--crop 5000 is larger than the stored 16x16 images" "$T/err"

# Said, not refused: --val that is --train (validation would measure the training set), and a
# class folder without images (an output nothing teaches).
dstrain "${COMMON[@]}" --val "$T/train" -o "$T/same" --max-steps 1 -q 2>"$T/same.err"
check val_same_as_train_warned grep -q "holds the same images as --train" "$T/same.err"
check val_other_not_warned sh -c "! grep -q 'same images' '$T/bar.err'"
mkdir -p "$T/tree/class9" && split_pack "$T/tree" 0.25 "$T/split9" "$T/train9" 2>/dev/null
dstrain "${COMMON[@]}" --train "$T/train9" -o "$T/empty" --max-steps 1 -q 2>"$T/empty.err"
check empty_class_warned grep -q "1 of the 5 classes of --train .* have no training image (class9)" "$T/empty.err"

finish
