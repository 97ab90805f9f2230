/* schedule: the learning rate as a pure function of the global step (and the training crop
 * of progressive resizing as one of the epoch), so a resumed run (or any rank) computes the
 * same value without saved state.
 *
 *   warmup   steps [0, warmup): lr = base x (step + 1) / warmup   (Goyal et al. 2017)
 *   cosine   then lr = base x (1 + cos(pi x t)) / 2, t = (step - warmup) / (total - warmup)
 *            (Loshchilov & Hutter, SGDR, without restarts; the last step, total - 1, has
 *            t = 1 - 1 / (total - warmup), so a rate just above 0)
 *   step     then lr = base x gamma^floor((step - warmup) / every)   (He et al. 2016)
 *   constant then lr = base */
#ifndef DS_SCHEDULE_H
#define DS_SCHEDULE_H

#include <stdint.h>

#include "loader.h"

typedef enum { DS_SCHEDULE_COSINE, DS_SCHEDULE_STEP, DS_SCHEDULE_CONSTANT } ds_schedule_kind;

typedef struct {
    ds_schedule_kind kind;
    double base;             /* peak learning rate */
    int64_t warmup;          /* warmup steps */
    int64_t total;           /* all steps of the run */
    int64_t every;           /* step schedule: steps between decays */
    double gamma;            /* step schedule: factor per decay */
} ds_schedule;

/* --schedule's choices, in the order of ds_schedule_kind. */
#define DS_SCHEDULE_CHOICES "cosine|step|constant"

/* A schedule as the options state it, its durations in epochs: what a run's plan carries
 * (train.h). The run makes its ds_schedule once its loader knows the steps per epoch. */
typedef struct {
    ds_schedule_kind kind;
    double base;             /* peak learning rate */
    double warmup_epochs;
    double step_epochs;      /* step schedule: epochs between decays */
    double gamma;            /* step schedule: factor per decay */
} ds_schedule_spec;

/* The schedule of a run of `epochs` epochs of steps_per_epoch steps: warmup and step-every
 * become llround(epochs x steps_per_epoch) steps. */
ds_schedule ds_schedule_make(const ds_schedule_spec *spec, int64_t steps_per_epoch, int64_t epochs);
/* Progressive resizing (FFCV's ResNet recipe): the training crop of epoch e (0-based), up to
 * the largest crop `max`, is
 *     min        for e <= start
 *     max        for e >= end
 *     round(interp(e, [start, end], [min, max]) / step) x step   between, rounded half to
 *                even as numpy.round, then kept within [min, max]
 * min == max (or min 0): max for every epoch. A pure function of the options and e, so a
 * resumed run and every rank agree. */
int ds_crop_for_epoch(const ds_crop_ramp *r, int max, int64_t epoch);
/* "cosine", "step", "constant" -> kind; -1 for anything else. */
int ds_schedule_parse(const char *name);
/* The learning rate for the step about to be taken (0-based). */
double ds_schedule_lr(const ds_schedule *s, int64_t step);

#endif
