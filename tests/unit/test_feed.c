/* test_feed: the order of feed.c's two streams (feed.h), against a mock device.
 *
 * The mock backend queues every copy and every normalize on its stream and carries them out
 * only when something forces it: a host wait for a mark (which runs the least that passes
 * the mark: its stream up to it, and on the other stream only what a wait in the way needs),
 * a sync, or, between the host's calls, a random number of ready ops on random streams. A
 * copy reads its source and a normalize its device buffer when they run, as a GPU would,
 * and the host overwrites a batch's buffers as soon as ds_feed_done returns, as the loader
 * may. Each normalize checks that it sees exactly its own batch: a missing wait on either
 * stream or a release before the copy shows up as another batch's bytes. Checked too: copies
 * that do not wait read only page-locked memory, nothing is unlocked while a copy of it is queued, everything
 * is unlocked at the end, and a refused lock sends batches through upload; and the point of
 * the second buffer: the next batch's copy does not wait for the current batch's normalize.
 * alloc zeroes on the compute stream, as the CUDA backend does: the first copy into each
 * buffer must come after that zeroing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "feed.h"
#include "log.h"
#include "rng.h"

/* ---- the mock device ---- */

enum { OP_COPY, OP_WRITE, OP_ZERO, OP_NORMALIZE, OP_WAIT, OP_MARK };

typedef struct {
    int kind;
    void *dst;               /* COPY, WRITE, ZERO */
    const void *src;         /* COPY: read when it runs */
    void *data;              /* WRITE: the bytes as upload was given them (the staging copy) */
    size_t bytes;
    int mark;                /* WAIT: the mark waited for; MARK: its number */
    int64_t batch;           /* NORMALIZE: the batch it must see */
    const uint8_t *in, *flip;
    const int32_t *y0, *x0, *bh, *bw;
    int n, resize;
} op;

#define QUEUE 4096
static struct {
    op q[2][QUEUE];
    int head[2], tail[2];
    int mark_stream[1 << 16], mark_pos[1 << 16], marks;
    struct { const char *lo; size_t bytes; } locked[64];
    int nlocked;
    int refuse_lock_after;   /* host_register fails once this many are locked (-1: never) */
    int64_t expect[QUEUE];   /* the batches normalize is given, in order */
    int nexpect, nseen;
    int bad;                 /* a normalize saw another batch's bytes */
    int unlocked_copy, unlock_busy, deadlock;
    int bh_bw_size;          /* what the batches are, for the checks */
    int H, W;
    ds_rng rng;
} dev;

static int passed(int mark) { return dev.head[dev.mark_stream[mark]] > dev.mark_pos[mark]; }
static int ready(int s)
{
    if (dev.head[s] == dev.tail[s]) return 0;
    const op *o = &dev.q[s][dev.head[s] % QUEUE];
    return o->kind != OP_WAIT || passed(o->mark);
}

static uint8_t pixel(int64_t batch, size_t i) { return (uint8_t)(batch * 31 + i * 7 + 1); }
static int32_t coord(int64_t batch, int j, int which) { return (int32_t)(batch * 1000 + j * 10 + which); }

static void run_op(int s)
{
    op *o = &dev.q[s][dev.head[s]++ % QUEUE];
    switch (o->kind) {
    case OP_COPY: memcpy(o->dst, o->src, o->bytes); break;
    case OP_WRITE:
        memcpy(o->dst, o->data, o->bytes);
        free(o->data);
        break;
    case OP_ZERO: memset(o->dst, 0, o->bytes); break;
    case OP_NORMALIZE: {
        int64_t b = dev.expect[dev.nseen++ % QUEUE];
        size_t px = (size_t)o->n * dev.H * dev.W * 3;
        int wrong = 0;
        for (size_t i = 0; i < px; i++) wrong += o->in[i] != pixel(b, i);
        for (int j = 0; j < o->n; j++) {
            wrong += o->y0[j] != coord(b, j, 0) || o->x0[j] != coord(b, j, 1) || o->flip[j] != (uint8_t)((b + j) & 1);
            if (o->resize) wrong += o->bh[j] != coord(b, j, 2) || o->bw[j] != coord(b, j, 3);
        }
        if (wrong && !dev.bad) fprintf(stderr, "  batch %lld: its normalize saw %d values of another\n", (long long)b, wrong);
        dev.bad += wrong != 0;
        break;
    }
    default: break;
    }
}

static op *push(int s)
{
    if (dev.tail[s] - dev.head[s] == QUEUE) {
        fprintf(stderr, "test_feed: mock queue full\n");
        exit(2);
    }
    op *o = &dev.q[s][dev.tail[s]++ % QUEUE];
    memset(o, 0, sizeof *o);
    return o;
}

/* The least work that passes the mark: its stream's ops before it, and for a wait in the
 * way, the other stream's up to the mark waited for. */
static void run_until(int mark)
{
    while (!passed(mark)) {
        int s = dev.mark_stream[mark];
        if (ready(s)) {
            run_op(s);
            continue;
        }
        const op *o = &dev.q[s][dev.head[s] % QUEUE];
        if (o->kind != OP_WAIT || dev.mark_stream[o->mark] == s) {
            dev.deadlock = 1;
            return;
        }
        run_until(o->mark);
        if (dev.deadlock) return;
    }
}

/* Between host calls: up to k ready ops, on streams chosen at random. */
static void wander(int k)
{
    for (int i = 0; i < k; i++) {
        int s = (int)(ds_rng_u64(&dev.rng) & 1);
        if (!ready(s)) s ^= 1;
        if (!ready(s)) return;
        run_op(s);
    }
}

static int mock_mark(int s)
{
    s = s == DS_STREAM_INPUT;
    int m = dev.marks++;
    dev.mark_stream[m] = s;
    dev.mark_pos[m] = dev.tail[s];
    push(s)->kind = OP_MARK;
    return m;
}

static void mock_stream_wait(int s, int mark)
{
    op *o = push(s == DS_STREAM_INPUT);
    o->kind = OP_WAIT;
    o->mark = mark;
}

static void mock_mark_wait(int mark) { run_until(mark); }

static void mock_sync(void)
{
    while (ready(0) || ready(1)) run_op(ready(0) ? 0 : 1);
    if (dev.head[0] != dev.tail[0] || dev.head[1] != dev.tail[1]) dev.deadlock = 1;
}

static int is_locked(const void *p, size_t bytes)
{
    for (int i = 0; i < dev.nlocked; i++)
        if ((const char *)p >= dev.locked[i].lo && (const char *)p + bytes <= dev.locked[i].lo + dev.locked[i].bytes)
            return 1;
    return 0;
}

static int mock_register(void *p, size_t bytes)
{
    if (dev.refuse_lock_after >= 0 && dev.nlocked >= dev.refuse_lock_after) return -1;
    dev.locked[dev.nlocked].lo = p;
    dev.locked[dev.nlocked++].bytes = bytes;
    return 0;
}

static void mock_unregister(void *p)
{
    for (int i = 0; i < dev.nlocked; i++)
        if (dev.locked[i].lo == p) {
            for (int s = 0; s < 2; s++)
                for (int k = dev.head[s]; k < dev.tail[s]; k++) {
                    const op *o = &dev.q[s][k % QUEUE];
                    if (o->kind == OP_COPY && (const char *)o->src >= dev.locked[i].lo &&
                        (const char *)o->src < dev.locked[i].lo + dev.locked[i].bytes)
                        dev.unlock_busy++;
                }
            dev.locked[i] = dev.locked[--dev.nlocked];
            return;
        }
}

static void mock_upload_async(void *dst, const void *src, size_t bytes)
{
    if (!is_locked(src, bytes)) dev.unlocked_copy++;
    op *o = push(1);
    o->kind = OP_COPY, o->dst = dst, o->src = src, o->bytes = bytes;
}

/* upload copies src before it returns (the staging ring), the device write comes later */
static void mock_upload(void *dst, const void *src, size_t bytes)
{
    op *o = push(0);
    o->kind = OP_WRITE, o->dst = dst, o->bytes = bytes;
    o->data = malloc(bytes);
    memcpy(o->data, src, bytes);
}

static void queue_normalize(const uint8_t *in, int n, const int32_t *y0, const int32_t *x0, const int32_t *bh,
                            const int32_t *bw, const uint8_t *flip, int resize)
{
    op *o = push(0);
    o->kind = OP_NORMALIZE, o->in = in, o->n = n, o->y0 = y0, o->x0 = x0, o->bh = bh, o->bw = bw;
    o->flip = flip, o->resize = resize;
}

static void mock_normalize_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                              const int32_t *y0, const int32_t *x0, const uint8_t *flip, const float mean[3],
                              const float std[3])
{
    queue_normalize(in, n, y0, x0, NULL, NULL, flip, 0);
}

static void mock_resized_crop_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                                 const int32_t *y0, const int32_t *x0, const int32_t *bh, const int32_t *bw,
                                 const uint8_t *flip, const float mean[3], const float std[3])
{
    queue_normalize(in, n, y0, x0, bh, bw, flip, 1);
}

/* As cuda.cu's alloc: fresh device memory holds anything until the zeroing queued on the
 * compute stream runs (a copy on the input stream that ran before it would be zeroed). */
static void *mock_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    memset(p, 0x5a, bytes);
    op *o = push(0);
    o->kind = OP_ZERO, o->dst = p, o->bytes = bytes;
    return p;
}

static const ds_backend mock = {
    .name = "mock",
    .host_memory = 0,
    .alloc = mock_alloc,
    .free = free,
    .upload = mock_upload,
    .sync = mock_sync,
    .mark = mock_mark,
    .mark_wait = mock_mark_wait,
    .stream_wait = mock_stream_wait,
    .host_register = mock_register,
    .host_unregister = mock_unregister,
    .upload_async = mock_upload_async,
    .normalize_u8 = mock_normalize_u8,
    .resized_crop_u8 = mock_resized_crop_u8,
};

/* ---- the loader's side ---- */

enum { B = 4, H = 6, W = 5, DEPTH = 3 };

typedef struct {
    ds_batch b;
} slot;

static void slot_init(slot *s)
{
    memset(s, 0, sizeof *s);
    s->b.capacity = B, s->b.height = H, s->b.width = W;
    s->b.images = malloc((size_t)B * H * W * 3);
    s->b.y0 = malloc(B * sizeof(int32_t)), s->b.x0 = malloc(B * sizeof(int32_t));
    s->b.bh = malloc(B * sizeof(int32_t)), s->b.bw = malloc(B * sizeof(int32_t));
    s->b.flip = malloc(B);
}

static void slot_free(slot *s)
{
    free(s->b.images), free(s->b.y0), free(s->b.x0), free(s->b.bh), free(s->b.bw), free(s->b.flip);
}

/* What a loader worker writes for batch t (t < 0: a refill of garbage). */
static void slot_fill(slot *s, int64_t t, int n, int resize)
{
    ds_batch *b = &s->b;
    b->n = n, b->resize = resize, b->crop = 4;
    for (size_t i = 0; i < (size_t)B * H * W * 3; i++) b->images[i] = pixel(t, i);
    for (int j = 0; j < B; j++) {
        b->y0[j] = coord(t, j, 0), b->x0[j] = coord(t, j, 1), b->bh[j] = coord(t, j, 2), b->bw[j] = coord(t, j, 3);
        b->flip[j] = (uint8_t)((t + j) & 1);
    }
}

/* mutation: how the feed under test is driven */
typedef struct {
    const char *name;
    int refuse_lock_after;   /* -1: every lock granted */
    int wander;              /* at most this many random ops between host calls */
} scenario;

/* `batches` batches through the feed, the loader refilling each as soon as it is released. */
static void run_scenario(const scenario *sc, uint64_t seed, int batches)
{
    memset(&dev, 0, sizeof dev);
    dev.refuse_lock_after = sc->refuse_lock_after;
    dev.H = H, dev.W = W;
    ds_rng_init(&dev.rng, seed, 0, 0);
    slot s[DEPTH];
    for (int i = 0; i < DEPTH; i++) slot_init(&s[i]);
    ds_feed f;
    CHECK(ds_feed_init(&f, &mock, (ds_batch_shape){.capacity = B, .height = H, .width = W}) == 0, "feed init");
    float *out = malloc(16);
    for (int64_t t = 0; t < batches; t++) {
        slot *sl = &s[t % DEPTH];
        int n = 1 + (int)(ds_rng_u64(&dev.rng) % B), resize = (int)(ds_rng_u64(&dev.rng) & 1);
        slot_fill(sl, t, n, resize);
        dev.expect[dev.nexpect++ % QUEUE] = t;
        ds_feed_input(&f, out, &sl->b, (const float[3]){0}, (const float[3]){1, 1, 1});
        wander((int)(ds_rng_u64(&dev.rng) % (sc->wander + 1)));
        ds_feed_done(&f, &sl->b);
        slot_fill(sl, -1 - t, n, resize);   /* refilled at once */
        wander((int)(ds_rng_u64(&dev.rng) % (sc->wander + 1)));
    }
    ds_feed_free(&f);
    CHECK(!dev.deadlock, "the mock streams waited on each other");
    CHECK(dev.nseen == batches, "%d of %d normalizes ran", dev.nseen, batches);
    CHECK(dev.bad == 0, "%d normalizes saw bytes that are not their batch's", dev.bad);
    CHECK(dev.unlocked_copy == 0, "%d copies read memory that is not page-locked", dev.unlocked_copy);
    CHECK(dev.unlock_busy == 0, "%d buffers unlocked while a copy of them was queued", dev.unlock_busy);
    CHECK(dev.nlocked == 0, "%d buffers still locked after ds_feed_free", dev.nlocked);
    free(out);
    for (int i = 0; i < DEPTH; i++) slot_free(&s[i]);
}

/* The second buffer: with batch 0's normalize queued and not run, batch 1's copy runs and is
 * waited for without it (a single buffer would have to wait for that normalize first). */
static void test_overlap(void)
{
    check_begin("feed_copy_overlaps_compute");
    memset(&dev, 0, sizeof dev);
    dev.refuse_lock_after = -1;
    dev.H = H, dev.W = W;
    slot s[2];
    slot_init(&s[0]), slot_init(&s[1]);
    ds_feed f;
    ds_feed_init(&f, &mock, (ds_batch_shape){.capacity = B, .height = H, .width = W});
    float out[4];
    for (int t = 0; t < 2; t++) {
        slot_fill(&s[t], t, B, 0);
        dev.expect[dev.nexpect++] = t;
        ds_feed_input(&f, out, &s[t].b, (const float[3]){0}, (const float[3]){1, 1, 1});
        ds_feed_done(&f, &s[t].b);
    }
    CHECK(dev.nseen == 0, "batch 1's copy waited for %d normalize(s)", dev.nseen);
    CHECK(dev.head[1] == dev.tail[1], "batch 1's copy has not run");
    ds_feed_free(&f);
    CHECK(dev.nseen == 2 && dev.bad == 0, "%d normalizes, %d wrong", dev.nseen, dev.bad);
    slot_free(&s[0]), slot_free(&s[1]);
    check_end();
}

int main(void)
{
    ds_log_init("test_feed");
    const scenario sc[] = {
        {"feed_streams_as_late_as_possible", -1, 0},
        {"feed_streams_random_order", -1, 6},
        {"feed_lock_refused", 0, 6},
        {"feed_lock_refused_midway", 1, 6},
    };
    for (size_t i = 0; i < sizeof sc / sizeof *sc; i++) {
        check_begin(sc[i].name);
        for (uint64_t seed = 1; seed <= 40; seed++) run_scenario(&sc[i], seed, 60);
        check_end();
    }
    test_overlap();
    return check_exit();
}
