/* evaluate: one inference pass of a model over an evaluation loader (dstrain's per-epoch
 * validation and dseval): every batch is fed, run forward with the BN running statistics,
 * and scored into a ds_topk (this rank's samples; ds_topk_reduce sums the ranks). */
#ifndef DS_EVALUATE_H
#define DS_EVALUATE_H

#include "feed.h"
#include "loader.h"
#include "model.h"
#include "topk.h"

typedef struct {
    float mean[3], std[3];   /* input normalisation (the checkpoint's) */
    int crop;                /* the model's input size */
    float *logits;           /* optional host [ds_loader_eval_count, num_classes]: this rank's
                                logits in data order */
    uint8_t *valid;          /* optional host [ds_loader_eval_count]: 0 for undecodable images */
    int progress;            /* ds_progress_start's `enabled` */
} ds_eval_options;

/* Returns 0, or -1 with a message (a loader failure). Adds to t; *seconds gets the wall time. */
int ds_evaluate(ds_model *m, ds_loader *L, ds_feed *feed, const ds_eval_options *o, ds_topk *t, double *seconds);

#endif
