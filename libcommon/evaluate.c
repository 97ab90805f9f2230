#include "evaluate.h"

#include "fsutil.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

int ds_evaluate(ds_model *m, ds_loader *L, ds_feed *feed, const ds_eval_options *o, ds_topk *t, double *seconds)
{
    double t0 = ds_now();
    const ds_backend *be = ds_model_backend(m);
    int C = ds_model_config_of(m)->num_classes, B = ds_model_config_of(m)->max_batch;
    float *host = ds_xmalloc((size_t)B * C * sizeof *host);
    ds_progress bar;
    ds_progress_start(&bar, "eval", "img", (int64_t)ds_loader_eval_count(L), o->progress);
    int rc = ds_loader_start(L, 0, 0);
    size_t done = 0;
    ds_batch *b;
    while (rc == 0 && (rc = ds_loader_next(L, &b)) == 1) {
        rc = ds_feed_batch(feed, m, b, o->crop, o->mean, o->std);
        if (rc == 0) {
            const float *logits = ds_model_forward(m, b->n, 0);
            be->download(host, logits, (size_t)b->n * C * sizeof *host);
            ds_topk_add(t, host, b->labels, b->valid, b->n);
            if (o->logits) memcpy(o->logits + done * C, host, (size_t)b->n * C * sizeof *host);
            if (o->valid) memcpy(o->valid + done, b->valid, (size_t)b->n);
            done += (size_t)b->n;
            ds_progress_update(&bar, (int64_t)done);
        }
        ds_loader_release(L, b);
    }
    ds_loader_stop(L);
    ds_progress_end(&bar);
    free(host);
    *seconds = ds_now() - t0;
    return rc < 0 ? -1 : 0;
}
