/* rundir: a training run's directory (docs/DESIGN.md §2).
 *
 *   ckpt-<global step, 8 digits>.h5   checkpoints; the newest --keep are kept (and the one
 *                                     best.h5 names, whatever its age)
 *   last.h5 -> the newest checkpoint  relative symlinks, replaced atomically (a new link is
 *   best.h5 -> the best val top-1     made under a temporary name, then renamed over the old)
 *   metrics.jsonl                     one JSON object per line, each line fsynced
 *   events.out.tfevents.<time>.<host> with --tensorboard: the same rows as TensorBoard scalars
 *                                     (tbevents.h), one file per run or resumed part of one
 */
#ifndef DS_RUNDIR_H
#define DS_RUNDIR_H

#include <stdint.h>
#include <stdio.h>

#include "tbevents.h"

/* "DIR/ckpt-00001234.h5"; caller frees. */
char *ds_rundir_ckpt_path(const char *dir, int64_t step);
/* Points DIR/name (last.h5, best.h5) at the file `target` in DIR, atomically. */
int ds_rundir_link(const char *dir, const char *name, const char *target);
/* Removes the oldest ckpt-*.h5 beyond the newest `keep`, sparing best.h5's target. */
int ds_rundir_prune(const char *dir, int keep);
/* 1 when dir holds checkpoints (ckpt-*.h5 or last.h5), 0 when not (or it does not exist). */
int ds_rundir_has_checkpoints(const char *dir);
/* The checkpoint a --resume argument names: a file as it is, a run directory's last.h5
 * resolved to its target (or, with no last.h5 yet, its newest ckpt-*.h5). Caller frees;
 * NULL with a message. */
char *ds_rundir_resolve(const char *arg);

/* One run at a time in DIR (created if need be): an exclusive flock on DIR/.lock, held until
 * the process exits, with the holder's pid, host and start written in the file. -1 with a
 * message naming the holder when another process holds it. */
int ds_rundir_lock(const char *dir);
/* A run resumed from an older checkpoint of DIR: its checkpoints after `step` (and last.h5,
 * best.h5 where they name one of those, and a copy of metrics.jsonl) move into a new
 * DIR/superseded-<step>[-k]/, which is returned (caller frees), with *moved the number of
 * checkpoints moved. NULL with *moved 0 when there are none; NULL with *moved -1 (and a
 * message) when they could not be moved. */
char *ds_rundir_set_aside(const char *dir, int64_t step, int *moved);

/* metrics.jsonl: appended, each line flushed and fsynced; with an event writer, each row also
 * goes to a new TensorBoard event file in the same directory. */
typedef struct {
    FILE *f;
    char *path;
    ds_tb_writer tb;  /* .f NULL: no event file (not asked for, or it failed and was closed) */
} ds_metrics_log;

/* Opens DIR/metrics.jsonl for appending; with `tensorboard`, also a new event file whose rows
 * after step start_step replace the ones earlier files logged there (a resumed run's; see
 * tbevents.h), so TensorBoard shows what metrics.jsonl holds after ds_metrics_log_truncate. An
 * event row that cannot be written is warned about once and the event file closed: the
 * metrics.jsonl row stands. */
int ds_metrics_log_open(ds_metrics_log *m, const char *dir, int tensorboard, int64_t start_step);
/* Appends one line (a complete JSON object without the newline). */
int ds_metrics_log_write(ds_metrics_log *m, const char *json);

/* The two kinds of row (docs/DESIGN.md §2), each written by one function. A step row every
 * --log-every steps: the window's mean loss, lr, images/s and the share of its time spent
 * waiting for data; epoch is fractional.
 *
 * In the event file each row is one Event at its global step, tagged as a PyTorch script
 * would: a step row's train/loss, train/lr, train/images_per_sec, train/data_wait; an epoch
 * row's train/epoch_loss, train/epoch_images_per_sec, with a val set val/top1, val/top5,
 * val/loss, and with the standard protocol val_standard/top1, val_standard/top5,
 * val_standard/loss (accuracies as fractions, as in metrics.jsonl). */
typedef struct {
    int64_t step;
    double epoch;
    int crop;
    double loss, lr, images_per_sec, data_wait;
} ds_metrics_step;
int ds_metrics_log_step(ds_metrics_log *m, const ds_metrics_step *r);
/* An epoch row at every epoch's end: the epoch's mean training loss, its images/s and
 * training seconds, resident memory; the validation result when there is a val set
 * (have_val), and the standard protocol's when it was measured apart (have_standard). */
typedef struct {
    int64_t step, epoch;
    int crop;
    double loss, lr, images_per_sec, seconds, data_wait;
    long rss_kb;
    int have_val;
    double val_top1, val_top5, val_loss;
    int64_t val_nonfinite;   /* images whose logits held a NaN or an Inf (counted wrong) */
    int val_crop;
    const char *protocol;
    int have_standard;
    double std_top1, std_top5, std_loss;
    int64_t std_nonfinite;
    const char *std_protocol;
} ds_metrics_epoch;
int ds_metrics_log_epoch(ds_metrics_log *m, const ds_metrics_epoch *r);
void ds_metrics_log_close(ds_metrics_log *m);
/* Drops lines whose "step" is greater than `step` (a resumed run rewrites what came after
 * its checkpoint, so no line is written twice; a step that ends an epoch has two lines, the
 * step's and the epoch's). */
int ds_metrics_log_truncate(const char *dir, int64_t step);

#endif
