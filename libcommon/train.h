/* train: the training loop of dstrain (docs/DESIGN.md §3) — steps, per-epoch validation, logging,
 * checkpoints and stopping.
 *
 * One step: for each of the rank's `accum` micro-batches, feed, forward, and backward with
 * the loss scaled by 1 / G; the last micro-batch's backward hands the reduction buffer
 * (gradients and BN statistics) to the backend in buckets as it completes them (on the CPU
 * with several micro-batches per rank, each micro-batch's, in the global order: model.h);
 * then the summed loss; then SGD at the schedule's learning rate for this global step.
 * Every rank takes the same decisions (stop, NaN) through ds_comm_any, and only rank 0
 * writes files.
 *
 * Position: a run is at global step g; with S full steps per epoch it is in epoch g / S at
 * step g % S. A checkpoint stores g (and the model, momentum and BN buffers), so resuming
 * from it continues bitwise exactly on the CPU: the epoch order, augmentation and learning
 * rate are pure functions of (seed, epoch, sample, g). */
#ifndef DS_TRAIN_H
#define DS_TRAIN_H

#include <stdint.h>

#include "checkpoint.h"
#include "loader.h"
#include "model.h"
#include "schedule.h"
#include "source.h"

typedef struct {
    ds_source *train;
    ds_source *val;          /* NULL: no validation */
    const char *out;         /* run directory (rank 0 writes into it) */
    int64_t epochs;
    ds_loader_config loader; /* the training micro-batches (.train = 1), .crop the largest of
                                `ramp`; validation reads with the same batch, world, rank and
                                threads, centre-cropped to val_crop */
    ds_crop_ramp ramp;       /* the training crop of each epoch, up to loader.crop (ds_crop_for_epoch) */
    int val_crop;            /* the validation crop; the model is planned for the largest crop */
    int val_every;           /* validation after every val_every-th epoch and after the last (1: each) */
    int standard_crop;       /* 0, or DS_STANDARD_CROP when the val images are the standard
                                evaluation's (ds_eval_standard_crop) and val_crop is another:
                                each epoch also evaluates that protocol, reported apart */
    ds_schedule_spec schedule; /* the learning rate's; ds_train makes the run's schedule from it
                                with its training loader's steps per epoch and `epochs` */
    ds_sgd sgd;              /* momentum, weight decay, nesterov (lr from the schedule) */
    float smoothing;
    int log_every;           /* steps between log lines (0: only epoch lines) */
    int tensorboard;         /* 1: the metrics rows also go to a TensorBoard event file (rundir.h) */
    int64_t ckpt_steps;      /* 0: checkpoints at epoch ends only */
    int64_t max_steps;       /* 0: no limit; else stop after global step max_steps */
    int keep;                /* newest checkpoints kept */
    int64_t start_step;      /* global step to start from (0, or the resumed checkpoint's) */
    int64_t pause_after_step; /* DS_TESTHOOK_PAUSE_AFTER_STEP (testhook.h): once this step is done,
                                wait for a signal; 0: never */
    int progress;            /* the bar over the whole run: 1 always, -1 on a terminal (rank 0) */
    int64_t nan_val_epoch;   /* DS_TESTHOOK_NAN_VAL_EPOCH (testhook.h): the validation after this
                                epoch scores each rank's first image from NaN logits; 0: never */
    ds_ckpt_meta *meta;      /* everything a checkpoint records besides the tensors: config,
                                classes, data size and fit, metrics rows so far; updated */
} ds_train_plan;

/* Runs until the last epoch, --max-steps, or a signal. Returns 0 when the epochs are done,
 * 1 when stopped early (with a checkpoint written), -1 on an error (NaN loss, I/O), with a
 * message. */
int ds_train(ds_model *m, const ds_train_plan *p);

#endif
