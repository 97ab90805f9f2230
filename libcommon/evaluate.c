#include "evaluate.h"

#include "fsutil.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds_eval_protocol(char *buf, size_t len, const ds_source *src, int crop)
{
    int S = src->height;
    if (src->height != src->width || (strcmp(src->fit, "crop") && strcmp(src->fit, "squash"))) {
        snprintf(buf, len, "stored %dx%d, centre crop %d", src->height, src->width, crop);
        return 0;
    }
    if (!strcmp(src->fit, "squash")) {
        if (crop == S) snprintf(buf, len, "resize to %dx%d (squash)", S, S);
        else snprintf(buf, len, "resize to %dx%d (squash), centre crop %d", S, S, crop);
        return 0;
    }
    /* centre crop C of the centre S x S equals centre crop C of the resized image when
     * (S - C) / 2 is even: torchvision's round((L - C) / 2), halves to even, then agrees with
     * round((L - S) / 2) + (S - C) / 2 for every longer side L. */
    if ((S - crop) % 4 == 0) snprintf(buf, len, "resize %d, centre crop %d", S, crop);
    else snprintf(buf, len, "resize %d, centre crop %d, centre crop %d", S, S, crop);
    return S == DS_STANDARD_SIZE && crop == DS_STANDARD_CROP;
}

int ds_eval_standard_crop(const ds_source *src)
{
    char name[96];
    return ds_eval_protocol(name, sizeof name, src, DS_STANDARD_CROP) ? DS_STANDARD_CROP : 0;
}

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
        rc = ds_feed_batch(feed, m, b, o->mean, o->std);
        if (rc == 0) {
            const float *logits = ds_model_forward(m, b->n, 0);
            be->download(host, logits, (size_t)b->n * C * sizeof *host);
            ds_topk_add(t, host, b->labels, b->valid, b->n);
            if (o->logits) memcpy(o->logits + done * C, host, (size_t)b->n * C * sizeof *host);
            if (o->valid) memcpy(o->valid + done, b->valid, (size_t)b->n);
            done += (size_t)b->n;
            ds_progress_update(&bar, (int64_t)done);
        }
        ds_feed_release(feed, L, b);
    }
    ds_loader_stop(L);
    ds_progress_end(&bar);
    free(host);
    *seconds = ds_now() - t0;
    return rc < 0 ? -1 : 0;
}
