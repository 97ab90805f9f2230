/* Loader: epoch order, micro-batch slicing (world x accum equivalence), evaluation exactly
 * once for any world size, thread-count independence, resume from a step, padding and
 * crops, RandomResizedCrop boxes. An in-memory source stands in for shards: image i's bytes are a function of i, so
 * any mix-up of samples shows. */
#include "../check.h"
#include "loader.h"
#include "log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#define H 6
#define W 5

static uint8_t pixel(size_t i, size_t k) { return (uint8_t)(1 + (i * 31 + k * 7) % 250); }

static int fake_read(ds_source *s, int worker, size_t i, uint8_t *out, char *reason, size_t len)
{
    for (size_t k = 0; k < (size_t)H * W * 3; k++) out[k] = pixel(i, k);
    return 0;
}

static const char *fake_path(const ds_source *s, size_t i) { return "x"; }

static void fake_source(ds_source *s, size_t n)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->height = H;
    s->width = W;
    s->num_classes = 10;
    s->labels = malloc(n * sizeof *s->labels);
    for (size_t i = 0; i < n; i++) s->labels[i] = (int32_t)(i % 10);
    s->name = "fake";
    s->read = fake_read;
    s->path = fake_path;
}

static ds_loader_config config(int batch, int world, int rank, int accum, int train, int threads)
{
    ds_loader_config c = {.batch = batch, .world = world, .rank = rank, .accum = accum, .crop = 4, .pad = 0,
                          .augment = 1, .train = train, .seed = 42, .threads = threads};
    return c;
}

/* Every batch of one epoch: indices (and optionally y0/x0/flip/pixels) appended in order. */
typedef struct {
    size_t *idx;
    int32_t *y0, *x0, *bh, *bw;
    uint8_t *flip;
    uint8_t *pix;
    size_t n, img;
    int resize, height, width;
} trace;

static int run_epoch(ds_source *src, const ds_loader_config *c, int64_t epoch, int64_t first, trace *t)
{
    ds_loader *L = ds_loader_new(src, c);
    if (!L) return -1;
    memset(t, 0, sizeof *t);
    if (ds_loader_start(L, epoch, first)) return -1;
    ds_batch *b;
    int rc;
    while ((rc = ds_loader_next(L, &b)) == 1) {
        size_t img = (size_t)b->height * b->width * 3;
        t->img = img;
        t->resize = b->resize, t->height = b->height, t->width = b->width;
        t->idx = realloc(t->idx, (t->n + b->n) * sizeof *t->idx);
        t->y0 = realloc(t->y0, (t->n + b->n) * sizeof *t->y0);
        t->x0 = realloc(t->x0, (t->n + b->n) * sizeof *t->x0);
        t->bh = realloc(t->bh, (t->n + b->n) * sizeof *t->bh);
        t->bw = realloc(t->bw, (t->n + b->n) * sizeof *t->bw);
        t->flip = realloc(t->flip, t->n + b->n);
        t->pix = realloc(t->pix, (t->n + b->n) * img);
        memcpy(t->idx + t->n, b->index, b->n * sizeof *t->idx);
        memcpy(t->y0 + t->n, b->y0, b->n * sizeof *t->y0);
        memcpy(t->x0 + t->n, b->x0, b->n * sizeof *t->x0);
        memcpy(t->bh + t->n, b->bh, b->n * sizeof *t->bh);
        memcpy(t->bw + t->n, b->bw, b->n * sizeof *t->bw);
        memcpy(t->flip + t->n, b->flip, b->n);
        memcpy(t->pix + t->n * img, b->images, b->n * img);
        for (int i = 0; i < b->n; i++)
            if (b->labels[i] != src->labels[b->index[i]]) return -1;
        t->n += b->n;
        ds_loader_release(L, b);
    }
    ds_loader_free(L);
    return rc;
}

static void trace_free(trace *t)
{
    free(t->idx), free(t->y0), free(t->x0), free(t->bh), free(t->bw), free(t->flip), free(t->pix);
}

static void test_permutation(void)
{
    check_begin("epoch_order_is_a_seeded_permutation");
    size_t n = 1000;
    uint32_t *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    char *seen = calloc(n, 1);
    ds_loader_epoch_order(a, n, 42, 0);
    ds_loader_epoch_order(b, n, 42, 0);
    ds_loader_epoch_order(c, n, 42, 1);
    int dup = 0, same01 = 0, identity = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] >= n || seen[a[i]]++) dup++;
        same01 += a[i] == c[i];
        identity += a[i] == i;
    }
    CHECK(dup == 0, "%d repeated or out-of-range entries", dup);
    CHECK(memcmp(a, b, n * 4) == 0, "the same (seed, epoch) gave another order");
    CHECK(same01 < 20, "epochs 0 and 1 agree at %d of %zu positions", same01, n);
    CHECK(identity < 20, "the order is close to the identity (%d fixed points)", identity);
    free(a), free(b), free(c), free(seen);
    check_end();
}

static void test_world_accum(void)
{
    check_begin("world3_accum1_equals_world1_accum3");
    ds_source src;
    fake_source(&src, 103);  /* G = 4 x 3 = 12: 8 steps, 7 samples dropped */
    trace one, ranks[3];
    ds_loader_config c1 = config(4, 1, 0, 3, 1, 2);
    CHECK(run_epoch(&src, &c1, 5, 0, &one) == 0, "world 1 epoch failed");
    CHECK(one.n == 96, "world 1 x accum 3 saw %zu samples, want 96 (8 full steps)", one.n);
    for (int r = 0; r < 3; r++) {
        ds_loader_config c = config(4, 3, r, 1, 1, 1 + r);
        CHECK(run_epoch(&src, &c, 5, 0, &ranks[r]) == 0, "rank %d epoch failed", r);
        CHECK(ranks[r].n == 32, "rank %d saw %zu samples, want 32", r, ranks[r].n);
    }
    /* step s, micro-batch m: world 1 yields it as its (s*3 + m)-th batch; world 3 as rank m's s-th */
    int bad = 0;
    for (int s = 0; s < 8; s++)
        for (int m = 0; m < 3; m++)
            for (int i = 0; i < 4; i++) {
                size_t p1 = (size_t)(s * 3 + m) * 4 + i, p3 = (size_t)s * 4 + i;
                if (one.idx[p1] != ranks[m].idx[p3] || one.y0[p1] != ranks[m].y0[p3] ||
                    one.x0[p1] != ranks[m].x0[p3] || one.flip[p1] != ranks[m].flip[p3])
                    bad++;
            }
    CHECK(bad == 0, "%d samples differ between the two layouts", bad);
    /* and it is the epoch permutation, in order */
    uint32_t perm[103];
    ds_loader_epoch_order(perm, 103, 42, 5);
    int off = 0;
    for (size_t i = 0; i < one.n; i++) off += one.idx[i] != perm[i];
    CHECK(off == 0, "%d positions are not the epoch permutation's", off);
    trace_free(&one);
    for (int r = 0; r < 3; r++) trace_free(&ranks[r]);
    free(src.labels);
    check_end();
}

static void test_eval_once(void)
{
    check_begin("eval_sees_every_sample_once_for_world_1_to_3");
    ds_source src;
    fake_source(&src, 47);
    for (int world = 1; world <= 3; world++) {
        int *seen = calloc(47, sizeof *seen);
        for (int r = 0; r < world; r++) {
            ds_loader_config c = config(5, world, r, 1, 0, 2);
            trace t;
            CHECK(run_epoch(&src, &c, 0, 0, &t) == 0, "world %d rank %d failed", world, r);
            for (size_t i = 0; i < t.n; i++) seen[t.idx[i]]++;
            for (size_t i = 0; i < t.n; i++)
                CHECK(t.y0[i] == 1 && t.x0[i] == 0 && !t.flip[i], "eval crop not centred / flipped");
            trace_free(&t);
        }
        int wrong = 0;
        for (int i = 0; i < 47; i++) wrong += seen[i] != 1;
        CHECK(wrong == 0, "world %d: %d samples not seen exactly once", world, wrong);
        free(seen);
    }
    free(src.labels);
    check_end();
}

static void test_threads_and_resume(void)
{
    check_begin("batches_independent_of_threads_and_resume_step");
    ds_source src;
    fake_source(&src, 64);
    ds_loader_config c = config(3, 1, 0, 2, 1, 1);
    c.pad = 2;
    c.crop = 6;
    trace t1, t4, tail;
    CHECK(run_epoch(&src, &c, 2, 0, &t1) == 0, "1 thread failed");
    c.threads = 4;
    c.depth = 3;
    CHECK(run_epoch(&src, &c, 2, 0, &t4) == 0, "4 threads failed");
    CHECK(t1.n == t4.n && t1.n == 60, "sample counts %zu vs %zu, want 60", t1.n, t4.n);
    CHECK(memcmp(t1.idx, t4.idx, t1.n * sizeof *t1.idx) == 0, "order differs with the thread count");
    CHECK(memcmp(t1.pix, t4.pix, t1.n * t1.img) == 0, "pixels differ with the thread count");
    CHECK(memcmp(t1.y0, t4.y0, t1.n * 4) == 0 && memcmp(t1.flip, t4.flip, t1.n) == 0, "crops differ");
    int boxes = 0;
    for (size_t s = 0; s < t1.n; s++) boxes += t1.bh[s] != 6 || t1.bw[s] != 6;
    CHECK(!t1.resize && boxes == 0, "random crops are not crop x crop boxes (%d)", boxes);
    CHECK(run_epoch(&src, &c, 2, 4, &tail) == 0, "start at step 4 failed");
    CHECK(tail.n == 60 - 24, "resumed at step 4 saw %zu samples, want 36", tail.n);
    CHECK(tail.n <= t1.n && memcmp(tail.idx, t1.idx + 24, tail.n * sizeof *tail.idx) == 0,
          "starting at step 4 does not give the rest of the epoch");
    CHECK(tail.n <= t1.n && memcmp(tail.pix, t1.pix + 24 * t1.img, tail.n * t1.img) == 0, "resumed pixels differ");
    /* padding: a zero border of 2 around the stored image; crops and flips vary */
    int border = 0, inner = 0, ymax = 0, flips = 0;
    for (size_t s = 0; s < t1.n; s++) {
        const uint8_t *p = t1.pix + s * t1.img;
        for (int y = 0; y < H + 4; y++)
            for (int x = 0; x < W + 4; x++)
                for (int ch = 0; ch < 3; ch++) {
                    uint8_t v = p[((size_t)y * (W + 4) + x) * 3 + ch];
                    int in = y >= 2 && y < H + 2 && x >= 2 && x < W + 2;
                    if (!in) border += v != 0;
                    else inner += v != pixel(t1.idx[s], ((size_t)(y - 2) * W + (x - 2)) * 3 + ch);
                }
        if (t1.y0[s] > ymax) ymax = t1.y0[s];
        CHECK(t1.y0[s] >= 0 && t1.y0[s] <= H + 4 - 6 && t1.x0[s] >= 0 && t1.x0[s] <= W + 4 - 6, "crop out of range");
        flips += t1.flip[s];
    }
    CHECK(border == 0, "%d border bytes are not zero", border);
    CHECK(inner == 0, "%d interior bytes are not the sample's", inner);
    CHECK(ymax == 4, "random crops never reach the far edge (max y0 %d)", ymax);
    CHECK(flips > 10 && flips < 50, "%d of 60 samples flipped", flips);
    trace_free(&t1), trace_free(&t4), trace_free(&tail);
    free(src.labels);
    check_end();
}

/* --augment rrc: each sample's box is ds_rrc_box on its own stream, then its flip; the
 * batches do not depend on threads or the resume step; padding is ignored; a crop larger
 * than the stored images is fine (the box is resized). */
static void test_rrc(void)
{
    check_begin("rrc_boxes_from_the_sample_stream_independent_of_threads");
    ds_source src;
    fake_source(&src, 64);
    ds_loader_config c = config(3, 1, 0, 2, 1, 1);
    c.augment = DS_AUGMENT_RRC;
    c.pad = 2;
    c.crop = 8;
    c.rrc_scale[0] = 0.08, c.rrc_scale[1] = 1;
    c.rrc_ratio[0] = 0.75, c.rrc_ratio[1] = 4.0 / 3;
    trace t1, t4, tail;
    CHECK(run_epoch(&src, &c, 2, 0, &t1) == 0, "1 thread failed");
    c.threads = 4;
    c.depth = 3;
    CHECK(run_epoch(&src, &c, 2, 0, &t4) == 0, "4 threads failed");
    CHECK(run_epoch(&src, &c, 2, 4, &tail) == 0, "start at step 4 failed");
    CHECK(t1.n == 60 && t4.n == 60 && tail.n == 36, "sample counts %zu, %zu, %zu", t1.n, t4.n, tail.n);
    CHECK(t1.resize && t1.height == H && t1.width == W, "batch: resize %d, %dx%d images (want the unpadded %dx%d)",
          t1.resize, t1.height, t1.width, H, W);
    int differ = memcmp(t1.idx, t4.idx, t1.n * sizeof *t1.idx) || memcmp(t1.pix, t4.pix, t1.n * t1.img) ||
                 memcmp(t1.y0, t4.y0, t1.n * 4) || memcmp(t1.x0, t4.x0, t1.n * 4) ||
                 memcmp(t1.bh, t4.bh, t1.n * 4) || memcmp(t1.bw, t4.bw, t1.n * 4) || memcmp(t1.flip, t4.flip, t1.n);
    CHECK(!differ, "batches differ between 1 and 4 threads");
    differ = memcmp(tail.y0, t1.y0 + 24, tail.n * 4) || memcmp(tail.x0, t1.x0 + 24, tail.n * 4) ||
             memcmp(tail.bh, t1.bh + 24, tail.n * 4) || memcmp(tail.bw, t1.bw + 24, tail.n * 4) ||
             memcmp(tail.flip, t1.flip + 24, tail.n);
    CHECK(!differ, "starting at step 4 gives other boxes");
    int wrong = 0, outside = 0, sizes = 0, flips = 0;
    for (size_t s = 0; s < t1.n; s++) {
        ds_rng r;
        int32_t box[4];
        ds_rng_init(&r, 42, DS_RNG_AUGMENT, (uint64_t)2 << 32 | t1.idx[s]);
        ds_rrc_box(&r, H, W, c.rrc_scale, c.rrc_ratio, box);
        int flip = (int)ds_rng_below(&r, 2);
        wrong += box[0] != t1.y0[s] || box[1] != t1.x0[s] || box[2] != t1.bh[s] || box[3] != t1.bw[s] ||
                 flip != t1.flip[s];
        outside += t1.y0[s] < 0 || t1.x0[s] < 0 || t1.bh[s] < 1 || t1.bw[s] < 1 || t1.y0[s] + t1.bh[s] > H ||
                   t1.x0[s] + t1.bw[s] > W;
        sizes += t1.bh[s] != t1.bh[0] || t1.bw[s] != t1.bw[0];
        flips += t1.flip[s];
    }
    CHECK(wrong == 0, "%d samples' box or flip are not ds_rrc_box's on their stream", wrong);
    CHECK(outside == 0, "%d boxes outside the image", outside);
    CHECK(sizes > 10, "box sizes hardly vary (%d of 60 differ from the first)", sizes);
    CHECK(flips > 10 && flips < 50, "%d of 60 samples flipped", flips);
    trace_free(&t1), trace_free(&t4), trace_free(&tail);

    /* the draw order: ten tries of two doubles, then top and left; no draws after a fallback */
    ds_rng r, q;
    int32_t box[4];
    const double never[2] = {40, 50}, square[2] = {1, 1};
    ds_rng_init(&r, 7, DS_RNG_AUGMENT, 9);
    ds_rng_init(&q, 7, DS_RNG_AUGMENT, 9);
    CHECK(ds_rrc_box(&r, 6, 20, never, square, box) == 1, "an area 40 times the image's was accepted");
    CHECK(box[0] == 0 && box[1] == 7 && box[2] == 6 && box[3] == 6, "fallback box %d %d %d %d, want 0 7 6 6", box[0],
          box[1], box[2], box[3]);
    for (int i = 0; i < 20; i++) ds_rng_double(&q);
    CHECK(ds_rng_u32(&r) == ds_rng_u32(&q), "the fallback did not leave the stream after 20 doubles");
    free(src.labels);
    check_end();
}

/* The batch shape is the loader's to say: the global batch, the accumulation a global batch
 * needs on another world, and the padded size, before a loader exists and from one (a feed's
 * device buffers are sized by it); a crop that does not fit is refused before a loader. */
static void test_shape(void)
{
    check_begin("loader_batch_shape");
    ds_source src;
    fake_source(&src, 40);
    ds_loader_config c = config(3, 2, 1, 4, 1, 1);
    CHECK(ds_loader_global_batch(&c) == 24, "global batch %zu, want 3 x 2 x 4", ds_loader_global_batch(&c));
    CHECK(ds_loader_accum_for(3, 2, 24) == 4 && ds_loader_accum_for(3, 4, 24) == 2 && ds_loader_accum_for(5, 2, 24) == 0,
          "accumulation for a global batch of 24: %lld, %lld, %lld; want 4, 2, 0",
          (long long)ds_loader_accum_for(3, 2, 24), (long long)ds_loader_accum_for(3, 4, 24),
          (long long)ds_loader_accum_for(5, 2, 24));
    struct { int train, augment, pad, height; } cases[] = {
        {1, DS_AUGMENT_CROP, 2, H + 4}, {1, DS_AUGMENT_NONE, 2, H}, {1, DS_AUGMENT_RRC, 0, H}, {0, DS_AUGMENT_CROP, 2, H},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = config(3, 1, 0, 1, cases[i].train, 1);
        c.augment = cases[i].augment;
        c.pad = cases[i].pad;
        c.rrc_scale[0] = 0.5, c.rrc_scale[1] = 1, c.rrc_ratio[0] = 0.75, c.rrc_ratio[1] = 1.5;
        ds_batch_shape want = {.capacity = 3, .height = cases[i].height, .width = W + cases[i].height - H};
        ds_batch_shape s = ds_loader_shape(&c, &src);
        CHECK(!memcmp(&s, &want, sizeof s), "case %zu: shape %d %dx%d, want %d %dx%d", i, s.capacity, s.height, s.width,
              want.capacity, want.height, want.width);
        ds_loader *L = ds_loader_new(&src, &c);
        CHECK(L != NULL, "case %zu: no loader", i);
        if (!L) continue;
        s = ds_loader_batch_shape(L);
        CHECK(!memcmp(&s, &want, sizeof s), "case %zu: the loader's shape %d %dx%d", i, s.capacity, s.height, s.width);
        ds_batch *b;
        CHECK(ds_loader_start(L, 0, 0) == 0 && ds_loader_next(L, &b) == 1, "case %zu: no batch", i);
        CHECK(b->capacity == s.capacity && b->height == s.height && b->width == s.width,
              "case %zu: a batch of %d %dx%d, not the shape said", i, b->capacity, b->height, b->width);
        ds_loader_release(L, b);
        ds_loader_free(L);
    }
    c = config(3, 1, 0, 1, 1, 1);
    c.pad = 1;
    c.crop = W + 2;   /* W < H: the width decides */
    CHECK(ds_loader_check_crop(&c, &src) == 0, "a crop within the padding refused");
    c.crop = W + 3;
    CHECK(ds_loader_check_crop(&c, &src) == -1, "a crop past the padding accepted");
    c.augment = DS_AUGMENT_RRC;
    c.pad = 0;
    CHECK(ds_loader_check_crop(&c, &src) == 0, "a RandomResizedCrop box refused for its size");
    free(src.labels);
    check_end();
}

static void test_refusals(void)
{
    check_begin("loader_refuses_bad_configurations");
    ds_source src;
    fake_source(&src, 10);
    ds_loader_config c = config(4, 1, 0, 3, 1, 1);
    CHECK(ds_loader_new(&src, &c) == NULL, "accepted a global batch larger than the set");
    c = config(4, 1, 0, 1, 0, 1);
    c.crop = 7;
    CHECK(ds_loader_new(&src, &c) == NULL, "accepted a crop larger than the images");
    c = config(4, 1, 0, 1, 1, 1);
    c.augment = DS_AUGMENT_RRC;
    double bad[][4] = {{0, 1, 0.75, 1.5}, {0.5, 0.4, 0.75, 1.5}, {0.1, 1, 0, 1}, {0.1, 1, 2, 1}, {0.1, NAN, 0.5, 2},
                       {0.1, 1, 0.5, INFINITY}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c.rrc_scale[0] = bad[i][0], c.rrc_scale[1] = bad[i][1], c.rrc_ratio[0] = bad[i][2], c.rrc_ratio[1] = bad[i][3];
        ds_loader *L = ds_loader_new(&src, &c);
        CHECK(L == NULL, "accepted RandomResizedCrop scale (%g, %g) ratio (%g, %g)", bad[i][0], bad[i][1], bad[i][2],
              bad[i][3]);
        ds_loader_free(L);
    }
    c.augment = 3;
    CHECK(ds_loader_new(&src, &c) == NULL, "accepted augmentation 3");
    free(src.labels);
    check_end();
}

/* ds_loader_wait_seconds, made exact: the loader reads a clock the test moves by hand, and a
 * source that cannot deliver batch k until the consumer is blocked waiting for it. The clock
 * advances 5 s only while the consumer is blocked (the opener thread moves it, then lets batch
 * k through) and 100 s between batches, while the consumer "computes". The count must be
 * 5 s per batch exactly, on any machine and under any load: time blocked is counted, the
 * consumer's own time is not. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double t;             /* the clock, seconds */
    int reads;            /* clock reads: ds_loader_next reads it as a wait begins and ends */
    int waits;            /* waits begun */
    int open;             /* batches the source may deliver */
    int images_read;
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0};

enum { GATE_BATCH = 4, GATE_BATCHES = 10 };

static double gate_clock(void)
{
    pthread_mutex_lock(&gate.mu);
    double t = gate.t;
    if (gate.reads++ % 2 == 0) {  /* a wait begins */
        gate.waits++;
        pthread_cond_broadcast(&gate.cv);
    }
    pthread_mutex_unlock(&gate.mu);
    return t;
}

static int gated_read(ds_source *s, int worker, size_t i, uint8_t *out, char *reason, size_t len)
{
    pthread_mutex_lock(&gate.mu);
    int batch = gate.images_read++ / GATE_BATCH;  /* one worker: the images come in batch order */
    while (batch >= gate.open) pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
    return fake_read(s, worker, i, out, reason, len);
}

static void *gate_opener(void *arg)
{
    for (int k = 0; k < GATE_BATCHES; k++) {
        pthread_mutex_lock(&gate.mu);
        while (gate.waits <= k) pthread_cond_wait(&gate.cv, &gate.mu);  /* the consumer waits for batch k */
        gate.t += 5;
        gate.open = k + 1;
        pthread_cond_broadcast(&gate.cv);
        pthread_mutex_unlock(&gate.mu);
    }
    return arg;
}

/* Takes every batch of epoch 0 from L, calling work() (when given) after each: 0 when the
 * epoch ended well, with *batches counted. */
static int consume_epoch(ds_loader *L, void (*work)(void), int *batches)
{
    int rc = ds_loader_start(L, 0, 0);
    ds_batch *b;
    *batches = 0;
    while (rc == 0 && (rc = ds_loader_next(L, &b)) == 1) {
        ++*batches;
        ds_loader_release(L, b);
        if (work) work();
        rc = 0;
    }
    return rc;
}

static void gate_work(void)
{
    pthread_mutex_lock(&gate.mu);
    gate.t += 100;  /* the consumer's own work */
    pthread_mutex_unlock(&gate.mu);
}

static void test_wait_seconds(void)
{
    check_begin("wait_seconds_counts_time_blocked_on_workers");
    ds_source src;
    fake_source(&src, GATE_BATCH * GATE_BATCHES);
    src.read = gated_read;
    ds_loader_config c = config(GATE_BATCH, 1, 0, 1, 1, 1);
    c.clock = gate_clock;
    ds_loader *L = ds_loader_new(&src, &c);
    pthread_t opener;
    CHECK(L && pthread_create(&opener, NULL, gate_opener, NULL) == 0, "setup");
    if (L) {
        int batches, rc = consume_epoch(L, gate_work, &batches);
        pthread_join(opener, NULL);
        double w = ds_loader_wait_seconds(L);
        CHECK(rc == 0 && batches == GATE_BATCHES, "rc %d after %d batches", rc, batches);
        CHECK(w == 5.0 * GATE_BATCHES, "%.1f s counted, want %.1f: the %d waits of 5 s, none of the consumer's "
              "%.0f s", w, 5.0 * GATE_BATCHES, GATE_BATCHES, 100.0 * GATE_BATCHES);
        printf("wait counted: %.1f s of %.1f s on the clock\n", w, gate.t);
        ds_loader_free(L);
    }
    free(src.labels);
    check_end();
}

/* Under a read delay (DS_TESTHOOK_READ_DELAY_MS) nothing is read ahead: every image of batch k
 * is read only once the consumer has begun to wait for batch k (the clock counts the waits as
 * ds_loader_next reads it), so each wait lasts at least the batch's delays, however fast the
 * consumer is. Two workers, which would otherwise read two batches ahead from the start. */
static struct {
    pthread_mutex_t mu;
    int reads, waits, early;
} ahead = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};

enum { AHEAD_BATCH = 3, AHEAD_BATCHES = 6 };

static double ahead_clock(void)
{
    pthread_mutex_lock(&ahead.mu);
    if (ahead.reads++ % 2 == 0) ahead.waits++;  /* a wait begins */
    pthread_mutex_unlock(&ahead.mu);
    return 0;
}

static int ahead_read(ds_source *s, int worker, size_t i, uint8_t *out, char *reason, size_t len)
{
    /* eval order: image i is in batch i / AHEAD_BATCH */
    pthread_mutex_lock(&ahead.mu);
    if (ahead.waits <= (int)(i / AHEAD_BATCH)) ahead.early++;
    pthread_mutex_unlock(&ahead.mu);
    return fake_read(s, worker, i, out, reason, len);
}

static void test_read_delay(void)
{
    check_begin("read_delay_reads_no_batch_ahead");
    ds_source src;
    fake_source(&src, AHEAD_BATCH * AHEAD_BATCHES);
    src.read = ahead_read;
    ds_loader_config c = config(AHEAD_BATCH, 1, 0, 1, 0, 2);
    c.clock = ahead_clock;
    c.read_delay_ms = 1;
    ds_loader *L = ds_loader_new(&src, &c);
    CHECK(L != NULL, "setup");
    if (L) {
        int batches, rc = consume_epoch(L, NULL, &batches);
        CHECK(rc == 0 && batches == AHEAD_BATCHES, "rc %d after %d batches", rc, batches);
        CHECK(ahead.early == 0, "%d of %d images read before the consumer asked for their batch", ahead.early,
              AHEAD_BATCH * AHEAD_BATCHES);
        CHECK(ahead.waits == AHEAD_BATCHES, "the consumer waited for %d of %d batches", ahead.waits, AHEAD_BATCHES);
        ds_loader_free(L);
    }
    free(src.labels);
    check_end();
}

static void test_center(void)
{
    check_begin("center_offset_rounds_like_torchvision");
    /* torchvision: int(round((size - crop) / 2.0)), Python rounds half to even */
    int want[][3] = {{256, 224, 16}, {32, 32, 0}, {33, 32, 0}, {35, 32, 2}, {37, 32, 2}, {39, 32, 4}, {6, 4, 1}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(ds_center_offset(want[i][0], want[i][1]) == want[i][2], "size %d crop %d: got %d want %d", want[i][0],
              want[i][1], ds_center_offset(want[i][0], want[i][1]), want[i][2]);
    check_end();
}

int main(void)
{
    test_permutation();
    test_world_accum();
    test_eval_once();
    test_threads_and_resume();
    test_rrc();
    test_refusals();
    test_shape();
    test_center();
    test_wait_seconds();
    test_read_delay();
    return check_exit();
}
