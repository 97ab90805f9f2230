#include "loader.h"

#include "fsutil.h"
#include "log.h"
#include "rng.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    ds_batch b;
    int64_t job;         /* which job the slot holds; -1: none */
    int ready;
    int failed;
} slot;

struct ds_loader {
    ds_source *src;
    ds_loader_config cfg;
    int pad;                 /* effective padding (training with augment only) */
    int height, width;       /* batch image size */
    size_t global_batch;
    uint32_t *perm;          /* [n] the running epoch's order (training) */
    size_t eval_lo, eval_hi; /* this rank's evaluation slice */

    slot *slots;             /* [depth] */
    uint8_t **scratch;       /* [threads] one stored-size image, for padded copies */
    pthread_t *tids;
    int running;

    pthread_mutex_t lock;
    pthread_cond_t cond;
    int64_t epoch, first_step;
    int64_t njobs;           /* jobs in the running epoch */
    int64_t next_job;        /* next job a worker takes */
    int64_t consumed;        /* jobs handed to the consumer */
    int64_t released;        /* jobs the consumer gave back */
    int64_t asked;           /* read_delay_ms: jobs [0, asked) have been asked for by the consumer */
    int stop;
    double wait_seconds;     /* the consumer's time blocked in ds_loader_next (its thread only) */
};

void ds_loader_epoch_order(uint32_t *perm, size_t n, uint64_t seed, int64_t epoch)
{
    ds_rng r;
    ds_rng_init(&r, seed, DS_RNG_EPOCH, (uint64_t)epoch);
    ds_rng_permutation(&r, perm, n);
}

int ds_center_offset(int size, int crop)
{
    int d = size - crop, q = d / 2;
    return (d & 1) && (q & 1) ? q + 1 : q;
}

int ds_rrc_box(ds_rng *r, int H, int W, const double scale[2], const double ratio[2], int32_t box[4])
{
    double area = (double)H * W, lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int t = 0; t < 10; t++) {
        double target = area * (scale[0] + (scale[1] - scale[0]) * ds_rng_double(r));
        double aspect = exp(lr0 + (lr1 - lr0) * ds_rng_double(r));
        double w = rint(sqrt(target * aspect)), h = rint(sqrt(target / aspect));  /* ties to even */
        if (w > 0 && w <= W && h > 0 && h <= H) {
            box[2] = (int32_t)h, box[3] = (int32_t)w;
            box[0] = (int32_t)ds_rng_below(r, (uint64_t)(H - box[2] + 1));
            box[1] = (int32_t)ds_rng_below(r, (uint64_t)(W - box[3] + 1));
            return 0;
        }
    }
    double in_ratio = (double)W / H, h = H, w = W;
    if (in_ratio < ratio[0]) h = rint(w / ratio[0]);
    else if (in_ratio > ratio[1]) w = rint(h * ratio[1]);
    box[2] = h < 1 ? 1 : (int32_t)h, box[3] = w < 1 ? 1 : (int32_t)w;
    box[0] = (H - box[2]) / 2, box[1] = (W - box[3]) / 2;
    return 1;
}

/* A batch's pixels start and end on page boundaries, so a device can page-lock each batch's
 * pixels alone (ds_feed) without touching a page of anything else. Zeroed. */
static uint8_t *page_alloc(size_t bytes)
{
    long ps = sysconf(_SC_PAGESIZE);
    size_t page = ps > 0 ? (size_t)ps : 4096, size = bytes ? (bytes + page - 1) / page * page : page;
    void *p = NULL;
    if (posix_memalign(&p, page, size)) ds_die("out of memory (%zu bytes)", size);
    memset(p, 0, size);
    return p;
}

size_t ds_loader_global_batch(const ds_loader_config *c) { return (size_t)c->batch * c->world * c->accum; }

int64_t ds_loader_accum_for(int batch, int world, int64_t G)
{
    /* the images of one micro-batch on every rank: the global batch of accum 1 */
    int64_t per_micro = (int64_t)ds_loader_global_batch(&(ds_loader_config){.batch = batch, .world = world, .accum = 1});
    return per_micro > 0 && G % per_micro == 0 ? G / per_micro : 0;
}

ds_batch_shape ds_loader_shape(const ds_loader_config *c, const ds_source *src)
{
    int pad = c->train && c->augment == DS_AUGMENT_CROP ? c->pad : 0;
    return (ds_batch_shape){.capacity = c->batch, .height = src->height + 2 * pad, .width = src->width + 2 * pad};
}

int ds_loader_check_crop(const ds_loader_config *c, const ds_source *src)
{
    if (c->train && c->augment == DS_AUGMENT_RRC) return 0;  /* a resized box may be any size */
    ds_batch_shape shape = ds_loader_shape(c, src);
    if (c->crop > shape.height || c->crop > shape.width)
        return ds_err("%s: --crop %d is larger than the stored %dx%d images%s", src->name, c->crop, src->height,
                      src->width, shape.height > src->height ? " plus padding" : "");
    return 0;
}

ds_loader *ds_loader_new(ds_source *src, const ds_loader_config *cfg)
{
    const ds_loader_config *c = cfg;
    if (c->batch <= 0 || c->world <= 0 || c->rank < 0 || c->rank >= c->world || c->accum <= 0 || c->threads <= 0 ||
        c->crop <= 0 || c->pad < 0 || c->read_delay_ms < 0) {
        ds_err("loader: invalid configuration (batch %d, world %d, rank %d, accum %d, threads %d, crop %d, pad %d, "
               "read delay %d ms)", c->batch, c->world, c->rank, c->accum, c->threads, c->crop, c->pad, c->read_delay_ms);
        return NULL;
    }
    int rrc = c->train && c->augment == DS_AUGMENT_RRC;
    if (c->augment < DS_AUGMENT_NONE || c->augment > DS_AUGMENT_RRC) {
        ds_err("loader: unknown augmentation %d", c->augment);
        return NULL;
    }
    /* written so that NaN fails too */
    if (rrc && !(c->rrc_scale[0] > 0 && c->rrc_scale[0] <= c->rrc_scale[1] && isfinite(c->rrc_scale[1]) &&
                 c->rrc_ratio[0] > 0 && c->rrc_ratio[0] <= c->rrc_ratio[1] && isfinite(c->rrc_ratio[1]))) {
        ds_err("loader: RandomResizedCrop needs 0 < lo <= hi in its scale (%g, %g) and ratio (%g, %g) ranges",
               c->rrc_scale[0], c->rrc_scale[1], c->rrc_ratio[0], c->rrc_ratio[1]);
        return NULL;
    }
    ds_loader *L = ds_xcalloc(1, sizeof *L);
    L->src = src;
    L->cfg = *c;
    if (!L->cfg.clock) L->cfg.clock = ds_now;
    if (L->cfg.depth <= 0) L->cfg.depth = c->threads + 2;
    if (L->cfg.depth < 2) L->cfg.depth = 2;
    ds_batch_shape shape = ds_loader_shape(c, src);
    L->height = shape.height;
    L->width = shape.width;
    L->pad = (shape.height - src->height) / 2;
    L->global_batch = ds_loader_global_batch(c);
    if (ds_loader_check_crop(c, src)) {
        free(L);
        return NULL;
    }
    if (c->train && src->n < L->global_batch) {
        ds_err("%s: %zu images are fewer than one global batch of %zu (batch %d x world %d x accum %d)", src->name,
               src->n, L->global_batch, c->batch, c->world, c->accum);
        free(L);
        return NULL;
    }
    L->eval_lo = src->n * (size_t)c->rank / (size_t)c->world;
    L->eval_hi = src->n * (size_t)(c->rank + 1) / (size_t)c->world;
    if (ds_source_prepare(src, c->threads)) {
        free(L);
        return NULL;
    }
    if (c->train) L->perm = ds_xmalloc(src->n * sizeof *L->perm);
    size_t img = (size_t)L->height * L->width * 3, B = (size_t)c->batch;
    L->slots = ds_xcalloc((size_t)L->cfg.depth, sizeof *L->slots);
    for (int s = 0; s < L->cfg.depth; s++) {
        ds_batch *b = &L->slots[s].b;
        b->height = L->height;
        b->width = L->width;
        b->capacity = c->batch;
        b->images = page_alloc(B * img);
        b->labels = ds_xmalloc(B * sizeof *b->labels);
        b->y0 = ds_xmalloc(B * sizeof *b->y0);
        b->x0 = ds_xmalloc(B * sizeof *b->x0);
        b->bh = ds_xmalloc(B * sizeof *b->bh);
        b->bw = ds_xmalloc(B * sizeof *b->bw);
        b->resize = rrc;
        b->flip = ds_xmalloc(B);
        b->valid = ds_xmalloc(B);
        b->index = ds_xmalloc(B * sizeof *b->index);
        L->slots[s].job = -1;
    }
    L->scratch = ds_xcalloc((size_t)c->threads, sizeof *L->scratch);
    if (L->pad)
        for (int t = 0; t < c->threads; t++) L->scratch[t] = ds_xmalloc((size_t)src->height * src->width * 3);
    L->tids = ds_xcalloc((size_t)c->threads, sizeof *L->tids);
    pthread_mutex_init(&L->lock, NULL);
    pthread_cond_init(&L->cond, NULL);
    return L;
}

int64_t ds_loader_train_steps(const ds_loader_config *c, size_t n)
{
    size_t G = ds_loader_global_batch(c);
    return G ? (int64_t)(n / G) : 0;
}

ds_batch_shape ds_loader_batch_shape(const ds_loader *L)
{
    return (ds_batch_shape){.capacity = L->cfg.batch, .height = L->height, .width = L->width};
}

int64_t ds_loader_steps_per_epoch(const ds_loader *L)
{
    if (L->cfg.train) return ds_loader_train_steps(&L->cfg, L->src->n);
    size_t n = L->eval_hi - L->eval_lo;
    return (int64_t)((n + (size_t)L->cfg.batch - 1) / (size_t)L->cfg.batch);
}

size_t ds_loader_eval_count(const ds_loader *L) { return L->eval_hi - L->eval_lo; }

/* Fills slot `sl` with job j: which samples, their crops, and their pixels. */
static int fill(ds_loader *L, int worker, slot *sl, int64_t j)
{
    const ds_loader_config *c = &L->cfg;
    ds_batch *b = &sl->b;
    ds_source *src = L->src;
    size_t B = (size_t)c->batch;
    b->epoch = L->epoch;
    b->crop = c->crop;
    if (c->train) {
        int64_t step = L->first_step + j / c->accum;
        int a = (int)(j % c->accum);
        size_t m = (size_t)a * c->world + c->rank;
        size_t pos = (size_t)step * L->global_batch + m * B;
        b->n = c->batch;
        b->step = step;
        b->micro = a;
        for (size_t i = 0; i < B; i++) b->index[i] = L->perm[pos + i];
    } else {
        size_t pos = L->eval_lo + (size_t)j * B;
        b->n = (int)(L->eval_hi - pos < B ? L->eval_hi - pos : B);
        b->step = j;
        b->micro = 0;
        for (int i = 0; i < b->n; i++) b->index[i] = pos + (size_t)i;
    }
    size_t img = (size_t)L->height * L->width * 3, row = (size_t)src->width * 3;
    b->nvalid = 0;
    for (int i = 0; i < b->n; i++) {
        size_t idx = b->index[i];
        b->labels[i] = src->labels[idx];
        b->bh[i] = b->bw[i] = c->crop;
        if (c->train && c->augment) {
            ds_rng r;
            ds_rng_init(&r, c->seed, DS_RNG_AUGMENT, (uint64_t)L->epoch << 32 | (uint64_t)idx);
            if (c->augment == DS_AUGMENT_RRC) {
                int32_t box[4];
                ds_rrc_box(&r, L->height, L->width, c->rrc_scale, c->rrc_ratio, box);
                b->y0[i] = box[0], b->x0[i] = box[1], b->bh[i] = box[2], b->bw[i] = box[3];
            } else {
                b->y0[i] = (int32_t)ds_rng_below(&r, (uint64_t)(L->height - c->crop + 1));
                b->x0[i] = (int32_t)ds_rng_below(&r, (uint64_t)(L->width - c->crop + 1));
            }
            b->flip[i] = (uint8_t)ds_rng_below(&r, 2);
        } else {
            b->y0[i] = ds_center_offset(L->height, c->crop);
            b->x0[i] = ds_center_offset(L->width, c->crop);
            b->flip[i] = 0;
        }
        uint8_t *dst = b->images + (size_t)i * img;
        uint8_t *into = L->pad ? L->scratch[worker] : dst;
        char reason[256] = "";
        int rc = src->read(src, worker, idx, into, reason, sizeof reason);
        if (rc < 0) return -1;
        if (c->read_delay_ms) {
            struct timespec d = {c->read_delay_ms / 1000, (long)(c->read_delay_ms % 1000) * 1000000L};
            while (nanosleep(&d, &d)) {}
        }
        b->valid[i] = rc == 0;
        if (rc > 0) {
            ds_warn("%s: skipping %s: %s", src->name, src->path(src, idx), reason);
            memset(into, 0, (size_t)src->height * row);
        }
        b->nvalid += b->valid[i];
        if (L->pad)  /* the border stays zero: it is never written */
            for (int y = 0; y < src->height; y++)
                memcpy(dst + ((size_t)(y + L->pad) * L->width + L->pad) * 3, into + (size_t)y * row, row);
    }
    return 0;
}

typedef struct {
    ds_loader *L;
    int worker;
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    ds_loader *L = wa->L;
    int worker = wa->worker;
    free(wa);
    int depth = L->cfg.depth;
    pthread_mutex_lock(&L->lock);
    for (;;) {
        /* Job j may use slot j % depth once job j - depth has been released; under a read
         * delay (a test hook), only once the consumer has asked for it: nothing read ahead. */
        while (!L->stop && L->next_job < L->njobs &&
               (L->next_job >= L->released + depth || (L->cfg.read_delay_ms && L->next_job >= L->asked)))
            pthread_cond_wait(&L->cond, &L->lock);
        if (L->stop || L->next_job >= L->njobs) break;
        int64_t j = L->next_job++;
        slot *sl = &L->slots[j % depth];
        pthread_mutex_unlock(&L->lock);
        int rc = fill(L, worker, sl, j);
        pthread_mutex_lock(&L->lock);
        sl->job = j;
        sl->failed = rc != 0;
        sl->ready = 1;
        pthread_cond_broadcast(&L->cond);
    }
    pthread_mutex_unlock(&L->lock);
    return NULL;
}

void ds_loader_stop(ds_loader *L)
{
    if (!L->running) return;
    pthread_mutex_lock(&L->lock);
    L->stop = 1;
    pthread_cond_broadcast(&L->cond);
    pthread_mutex_unlock(&L->lock);
    for (int t = 0; t < L->cfg.threads; t++) pthread_join(L->tids[t], NULL);
    L->running = 0;
}

int ds_loader_start(ds_loader *L, int64_t epoch, int64_t first_step)
{
    ds_loader_stop(L);
    int64_t steps = ds_loader_steps_per_epoch(L);
    if (first_step < 0 || first_step > steps)
        return ds_err("%s: step %lld is outside the epoch's %lld steps", L->src->name, (long long)first_step,
                      (long long)steps);
    L->epoch = epoch;
    L->first_step = first_step;
    if (L->cfg.train) ds_loader_epoch_order(L->perm, L->src->n, L->cfg.seed, epoch);
    L->njobs = (steps - first_step) * (L->cfg.train ? L->cfg.accum : 1);
    L->next_job = L->consumed = L->released = L->asked = 0;
    L->stop = 0;
    for (int s = 0; s < L->cfg.depth; s++) L->slots[s].ready = 0, L->slots[s].job = -1;
    for (int t = 0; t < L->cfg.threads; t++) {
        worker_arg *wa = ds_xmalloc(sizeof *wa);
        wa->L = L;
        wa->worker = t;
        if (pthread_create(&L->tids[t], NULL, worker_main, wa)) {
            free(wa);
            L->cfg.threads = t;  /* join only the ones that started */
            L->running = t > 0;
            ds_loader_stop(L);
            return ds_err("loader: cannot start a reader thread");
        }
    }
    L->running = 1;
    return 0;
}

int ds_loader_next(ds_loader *L, ds_batch **b)
{
    *b = NULL;
    if (!L->running) return ds_err("loader: next batch asked before ds_loader_start");
    pthread_mutex_lock(&L->lock);
    if (L->consumed != L->released) {
        pthread_mutex_unlock(&L->lock);
        return ds_err("loader: the previous batch was not released");
    }
    if (L->consumed >= L->njobs) {
        pthread_mutex_unlock(&L->lock);
        return 0;
    }
    slot *sl = &L->slots[L->consumed % L->cfg.depth];
    if (L->cfg.read_delay_ms) {
        L->asked = L->consumed + 1;   /* a worker may begin it now, and the wait below counts it */
        pthread_cond_broadcast(&L->cond);
    }
    if (!(sl->ready && sl->job == L->consumed)) {
        double t0 = L->cfg.clock();
        while (!(sl->ready && sl->job == L->consumed)) pthread_cond_wait(&L->cond, &L->lock);
        L->wait_seconds += L->cfg.clock() - t0;
    }
    int failed = sl->failed;
    L->consumed++;
    pthread_mutex_unlock(&L->lock);
    if (failed) return -1;
    *b = &sl->b;
    return 1;
}

double ds_loader_wait_seconds(const ds_loader *L) { return L->wait_seconds; }

void ds_loader_release(ds_loader *L, ds_batch *b)
{
    pthread_mutex_lock(&L->lock);
    slot *sl = &L->slots[L->released % L->cfg.depth];
    if (b == NULL || &sl->b == b) {
        sl->ready = 0;
        L->released++;
        pthread_cond_broadcast(&L->cond);
    }
    pthread_mutex_unlock(&L->lock);
}

void ds_loader_free(ds_loader *L)
{
    if (!L) return;
    ds_loader_stop(L);
    for (int s = 0; s < L->cfg.depth; s++) {
        ds_batch *b = &L->slots[s].b;
        free(b->images), free(b->labels), free(b->y0), free(b->x0), free(b->bh), free(b->bw), free(b->flip);
        free(b->valid), free(b->index);
    }
    free(L->slots);
    for (int t = 0; t < L->cfg.threads; t++) free(L->scratch[t]);
    free(L->scratch);
    free(L->tids);
    free(L->perm);
    pthread_mutex_destroy(&L->lock);
    pthread_cond_destroy(&L->cond);
    free(L);
}

int ds_loader_set_crop(ds_loader *L, int crop)
{
    int rrc = L->cfg.train && L->cfg.augment == DS_AUGMENT_RRC;  /* a resized box may be any size */
    if (crop <= 0 || (!rrc && (crop > L->height || crop > L->width)))
        return ds_err("%s: crop %d does not fit the stored %dx%d images%s", L->src->name, crop, L->src->height,
                      L->src->width, L->pad ? " plus padding" : "");
    ds_loader_stop(L);
    L->cfg.crop = crop;
    return 0;
}
