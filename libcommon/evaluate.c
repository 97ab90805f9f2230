#include "evaluate.h"

#include "fsutil.h"
#include "log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The centre crop's name (ds_eval_protocol without the mirror); 1 for the standard one. */
static int centre_crop_protocol(char *buf, size_t len, const ds_source *src, int crop)
{
    int S = src->height;
    if (src->height != src->width || (src->fit != DS_FIT_CROP && src->fit != DS_FIT_SQUASH)) {
        snprintf(buf, len, "stored %dx%d, centre crop %d", src->height, src->width, crop);
        return 0;
    }
    if (src->fit == DS_FIT_SQUASH) {
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

int ds_eval_protocol(char *buf, size_t len, const ds_source *src, int crop, int flip)
{
    int standard = centre_crop_protocol(buf, len, src, crop);
    if (!flip) return standard;
    size_t l = strlen(buf);   /* the standard evaluation is the centre crop alone */
    snprintf(buf + l, len - l, ", and mirrored (mean logits)");
    return 0;
}

int ds_eval_standard_crop(const ds_source *src)
{
    char name[96];
    return ds_eval_protocol(name, sizeof name, src, DS_STANDARD_CROP, 0) ? DS_STANDARD_CROP : 0;
}

/* A batch's logits on their way to the host: copied on the stream, counted once the batch
 * after it is queued, so the device never waits for the host between batches. */
typedef struct {
    float *logits;         /* [B, C], backend host memory */
    float *mirrored;       /* [B, C], backend host memory: the mirrored pass's (flip only) */
    int32_t *labels;       /* [B] the batch's, kept: the loader refills its own */
    uint8_t *valid;        /* [B] */
    int n, mark;           /* n = 0: nothing pending */
} eval_slot;

static void count_batch(const ds_backend *be, eval_slot *s, const ds_eval_options *o, ds_topk *t, int C,
                        size_t *done, ds_progress *bar)
{
    if (!s->n) return;
    be->mark_wait(s->mark);
    if (o->flip)   /* the mean of the two passes, in one order: the same bits on every device */
        for (size_t i = 0; i < (size_t)s->n * C; i++) s->logits[i] = 0.5f * (s->logits[i] + s->mirrored[i]);
    if (o->nan_first && *done == 0)
        for (int c = 0; c < C; c++) s->logits[c] = NAN;
    ds_topk_add(t, s->logits, s->labels, s->valid, s->n);
    if (o->logits) memcpy(o->logits + *done * C, s->logits, (size_t)s->n * C * sizeof *s->logits);
    if (o->valid) memcpy(o->valid + *done, s->valid, (size_t)s->n);
    *done += (size_t)s->n;
    s->n = 0;
    ds_progress_update(bar, (int64_t)*done);
}

/* The batch again, each image mirrored left to right (its flip inverted: the feed's
 * normalize mirrors while it crops), forward, its logits downloaded into `into`. The
 * flips go to the device at once (feed.c's upload), so they are put back before returning. */
static int mirrored_pass(ds_model *m, ds_feed *feed, ds_batch *b, const ds_eval_options *o, float *into)
{
    for (int i = 0; i < b->n; i++) b->flip[i] ^= 1;
    int rc = ds_feed_batch(feed, m, b, o->mean, o->std);
    for (int i = 0; i < b->n; i++) b->flip[i] ^= 1;
    if (rc) return rc;
    const float *logits = ds_model_forward(m, b->n, 0);
    ds_model_backend(m)->download_async(into, logits, (size_t)b->n * ds_model_config_of(m)->num_classes * sizeof *into);
    return 0;
}

int ds_evaluate(ds_model *m, ds_loader *L, ds_feed *feed, const ds_eval_options *o, ds_topk *t, double *seconds)
{
    double t0 = ds_now();
    const ds_backend *be = ds_model_backend(m);
    int C = ds_model_config_of(m)->num_classes, B = ds_model_config_of(m)->max_batch;
    eval_slot slot[2];
    for (int k = 0; k < 2; k++) {
        slot[k] = (eval_slot){.labels = ds_xmalloc((size_t)B * sizeof(int32_t)), .valid = ds_xmalloc((size_t)B)};
        slot[k].logits = be->host_alloc((size_t)B * C * sizeof(float));
        slot[k].mirrored = o->flip ? be->host_alloc((size_t)B * C * sizeof(float)) : NULL;
        if (!slot[k].logits || (o->flip && !slot[k].mirrored))
            ds_die("%s: no host memory for %d x %d logits", be->name, B, C);
    }
    ds_progress bar;
    ds_progress_start(&bar, "eval", "img", (int64_t)ds_loader_eval_count(L), o->progress);
    int rc = ds_loader_start(L, 0, 0);
    size_t done = 0;
    ds_batch *b;
    for (int k = 0; rc == 0 && (rc = ds_loader_next(L, &b)) == 1; k ^= 1) {
        rc = ds_feed_batch(feed, m, b, o->mean, o->std);
        if (rc == 0) {
            const float *logits = ds_model_forward(m, b->n, 0);
            eval_slot *s = &slot[k];
            be->download_async(s->logits, logits, (size_t)b->n * C * sizeof *s->logits);
            /* queued after the download above, whose source the second forward overwrites */
            if (o->flip) rc = mirrored_pass(m, feed, b, o, s->mirrored);
        }
        if (rc == 0) {
            eval_slot *s = &slot[k];
            s->mark = be->mark(DS_STREAM_COMPUTE);
            memcpy(s->labels, b->labels, (size_t)b->n * sizeof *s->labels);
            memcpy(s->valid, b->valid, (size_t)b->n);
            s->n = b->n;
            count_batch(be, &slot[k ^ 1], o, t, C, &done, &bar);   /* the batch before, now this one is queued */
        }
        ds_feed_release(feed, L, b);
    }
    for (int k = 0; k < 2; k++) count_batch(be, &slot[k], o, t, C, &done, &bar);   /* the last (one is pending) */
    ds_loader_stop(L);
    ds_progress_end(&bar);
    for (int k = 0; k < 2; k++) {
        be->host_free(slot[k].logits);
        if (slot[k].mirrored) be->host_free(slot[k].mirrored);
        free(slot[k].labels);
        free(slot[k].valid);
    }
    *seconds = ds_now() - t0;
    return rc < 0 ? -1 : 0;
}
