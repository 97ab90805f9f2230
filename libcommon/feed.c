#include "feed.h"

#include "log.h"

#include <string.h>

int ds_feed_init(ds_feed *f, const ds_backend *be, int batch, int height, int width)
{
    memset(f, 0, sizeof *f);
    f->be = be;
    f->host = be->host_memory;
    f->batch = batch;
    f->height = height;
    f->width = width;
    if (f->host) return 0;
    size_t B = (size_t)batch;
    f->images = be->alloc(B * height * width * 3);
    f->y0 = be->alloc(B * sizeof *f->y0);
    f->x0 = be->alloc(B * sizeof *f->x0);
    f->bh = be->alloc(B * sizeof *f->bh);
    f->bw = be->alloc(B * sizeof *f->bw);
    f->flip = be->alloc(B);
    if (!f->images || !f->y0 || !f->x0 || !f->bh || !f->bw || !f->flip) {
        ds_feed_free(f);
        return ds_err("%s: cannot allocate the input staging buffers (%zu bytes)", be->name,
                      B * height * width * 3);
    }
    return 0;
}

void ds_feed_free(ds_feed *f)
{
    if (!f->host && f->be) {
        if (f->images) f->be->free(f->images);
        if (f->y0) f->be->free(f->y0);
        if (f->x0) f->be->free(f->x0);
        if (f->bh) f->be->free(f->bh);
        if (f->bw) f->be->free(f->bw);
        if (f->flip) f->be->free(f->flip);
    }
    memset(f, 0, sizeof *f);
}

int ds_feed_batch(ds_feed *f, ds_model *m, const ds_batch *b, const float mean[3], const float std[3])
{
    if (b->n > f->batch || b->height != f->height || b->width != f->width)
        return ds_err("feed: batch of %d %dx%d images does not fit the %d %dx%d planned", b->n, b->height, b->width,
                      f->batch, f->height, f->width);
    const int crop = b->crop;
    int h, w;
    ds_model_input_size(m, &h, &w);
    if ((h != crop || w != crop) && ds_model_set_input_size(m, crop, crop)) return -1;
    const ds_backend *be = f->be;
    const uint8_t *img = b->images, *flip = b->flip;
    const int32_t *y0 = b->y0, *x0 = b->x0, *bh = b->bh, *bw = b->bw;
    if (!f->host) {
        size_t n = (size_t)b->n;
        be->upload(f->images, b->images, n * b->height * b->width * 3);
        be->upload(f->y0, b->y0, n * sizeof *b->y0);
        be->upload(f->x0, b->x0, n * sizeof *b->x0);
        if (b->resize) {
            be->upload(f->bh, b->bh, n * sizeof *b->bh);
            be->upload(f->bw, b->bw, n * sizeof *b->bw);
        }
        be->upload(f->flip, b->flip, n);
        img = f->images, y0 = f->y0, x0 = f->x0, bh = f->bh, bw = f->bw, flip = f->flip;
    }
    if (b->resize)
        be->resized_crop_u8(ds_model_input(m), img, b->n, b->height, b->width, crop, crop, y0, x0, bh, bw, flip,
                            mean, std);
    else
        be->normalize_u8(ds_model_input(m), img, b->n, b->height, b->width, crop, crop, y0, x0, flip, mean, std);
    return 0;
}
