#include "feed.h"

#include "log.h"

#include <string.h>

static void buffer_free(const ds_backend *be, ds_feed_buffer *d)
{
    void *p[] = {d->images, d->y0, d->x0, d->bh, d->bw, d->flip};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (p[i]) be->free(p[i]);
    memset(d, 0, sizeof *d);
}

int ds_feed_init(ds_feed *f, const ds_backend *be, ds_batch_shape shape)
{
    memset(f, 0, sizeof *f);
    f->be = be;
    f->host = be->host_memory;
    f->batch = shape.capacity;
    f->height = shape.height;
    f->width = shape.width;
    f->consumed[0] = f->consumed[1] = -1;
    if (f->host) return 0;
    size_t B = (size_t)f->batch, height = (size_t)f->height, width = (size_t)f->width;
    for (int k = 0; k < 2; k++) {
        ds_feed_buffer *d = &f->buf[k];
        d->images = be->alloc(B * height * width * 3);
        d->y0 = be->alloc(B * sizeof *d->y0);
        d->x0 = be->alloc(B * sizeof *d->x0);
        d->bh = be->alloc(B * sizeof *d->bh);
        d->bw = be->alloc(B * sizeof *d->bw);
        d->flip = be->alloc(B);
        if (!d->images || !d->y0 || !d->x0 || !d->bh || !d->bw || !d->flip) {
            ds_feed_free(f);
            return ds_err("%s: cannot allocate the input buffers (2 x %zu bytes)", be->name, B * height * width * 3);
        }
    }
    /* alloc zeroes on the compute stream: the first copy into each buffer, on the input
     * stream, waits for that as a later copy waits for the buffer's last reader */
    f->consumed[0] = f->consumed[1] = be->mark(DS_STREAM_COMPUTE);
    return 0;
}

/* The pixels of a batch: what is page-locked (the loader gives each batch's pixels pages of
 * their own). */
static size_t pixel_bytes(const ds_batch *b) { return (size_t)b->capacity * b->height * b->width * 3; }

void ds_feed_free(ds_feed *f)
{
    if (!f->host && f->be) {
        if (f->copying) ds_feed_done(f, f->copying);
        for (int i = 0; i < f->nregistered; i++) f->be->host_unregister(f->registered[i]->images);
        f->be->sync();   /* nothing queued reads the buffers any more */
        for (int k = 0; k < 2; k++) buffer_free(f->be, &f->buf[k]);
    }
    memset(f, 0, sizeof *f);
}

/* 1: b's pixels are page-locked (now, if they were not yet), so the device may copy them
 * directly; 0: they go through upload. A batch made outside a loader (capacity 0), the
 * table full, or the device refusing (once: then never again) leave them unlocked. */
static int locked(ds_feed *f, const ds_batch *b)
{
    if (f->staged || b->capacity < b->n || b->capacity <= 0) return 0;
    for (int i = 0; i < f->nregistered; i++)
        if (f->registered[i] == b) return 1;
    if (f->nregistered == DS_FEED_REGISTERED) return 0;
    if (f->be->host_register(b->images, pixel_bytes(b))) {
        f->staged = 1;
        return 0;
    }
    f->registered[f->nregistered++] = b;
    return 1;
}

/* Queues batch b's bytes into device buffer k (feed.h: the order of the two streams). The
 * boxes and flips, a few bytes an image, go through upload: copied at once into the
 * backend's staging, written on the compute stream, which is past buffer k's last reader. */
static void copy_in(ds_feed *f, int k, const ds_batch *b)
{
    const ds_backend *be = f->be;
    ds_feed_buffer *d = &f->buf[k];
    size_t n = (size_t)b->n, pixels = n * b->height * b->width * 3;
    be->upload(d->y0, b->y0, n * sizeof *b->y0);
    be->upload(d->x0, b->x0, n * sizeof *b->x0);
    if (b->resize) {
        be->upload(d->bh, b->bh, n * sizeof *b->bh);
        be->upload(d->bw, b->bw, n * sizeof *b->bw);
    }
    be->upload(d->flip, b->flip, n);
    if (!locked(f, b)) {
        be->upload(d->images, b->images, pixels);
        return;
    }
    if (f->copying) ds_feed_done(f, f->copying);   /* one copy in flight is followed: the last */
    if (f->consumed[k] >= 0) be->stream_wait(DS_STREAM_INPUT, f->consumed[k]);
    be->upload_async(d->images, b->images, pixels);
    f->copied = be->mark(DS_STREAM_INPUT);
    f->copying = b;
    be->stream_wait(DS_STREAM_COMPUTE, f->copied);
}

void ds_feed_input(ds_feed *f, float *out, const ds_batch *b, const float mean[3], const float std[3])
{
    const ds_backend *be = f->be;
    const uint8_t *img = b->images, *flip = b->flip;
    const int32_t *y0 = b->y0, *x0 = b->x0, *bh = b->bh, *bw = b->bw;
    int k = f->turn;
    if (!f->host) {
        copy_in(f, k, b);
        f->turn ^= 1;
        const ds_feed_buffer *d = &f->buf[k];
        img = d->images, y0 = d->y0, x0 = d->x0, bh = d->bh, bw = d->bw, flip = d->flip;
    }
    if (b->resize)
        be->resized_crop_u8(out, img, b->n, b->height, b->width, b->crop, b->crop, y0, x0, bh, bw, flip, mean, std);
    else
        be->normalize_u8(out, img, b->n, b->height, b->width, b->crop, b->crop, y0, x0, flip, mean, std);
    if (!f->host) f->consumed[k] = be->mark(DS_STREAM_COMPUTE);
}

int ds_feed_batch(ds_feed *f, ds_model *m, const ds_batch *b, const float mean[3], const float std[3])
{
    if (b->n > f->batch || b->height != f->height || b->width != f->width)
        return ds_err("feed: batch of %d %dx%d images does not fit the %d %dx%d planned", b->n, b->height, b->width,
                      f->batch, f->height, f->width);
    int h, w;
    ds_model_input_size(m, &h, &w);
    if ((h != b->crop || w != b->crop) && ds_model_set_input_size(m, b->crop, b->crop)) return -1;
    ds_feed_input(f, ds_model_input(m), b, mean, std);
    return 0;
}

void ds_feed_done(ds_feed *f, const ds_batch *b)
{
    if (!f->copying || f->copying != b) return;
    f->be->mark_wait(f->copied);
    f->copying = NULL;
}

void ds_feed_release(ds_feed *f, ds_loader *L, ds_batch *b)
{
    ds_feed_done(f, b);
    ds_loader_release(L, b);
}
