/* feed: moves a loader batch into a model's input on the computing device.
 *
 * The batch's uint8 images and boxes / flips go to the backend (a no-op on the CPU, whose
 * memory is the host's), then backend->normalize_u8 (or resized_crop_u8 for a batch whose
 * boxes are resized) crops, flips and normalises by the mean/std into ds_model_input: only
 * bytes cross to an accelerator, never floats. */
#ifndef DS_FEED_H
#define DS_FEED_H

#include "loader.h"
#include "model.h"

typedef struct {
    const ds_backend *be;
    int host;                /* the backend computes in host memory: pass pointers through */
    int batch, height, width;
    uint8_t *images;         /* backend memory [batch, height, width, 3] (not host) */
    int32_t *y0, *x0;        /* [batch] */
    int32_t *bh, *bw;        /* [batch] box sizes (batches with `resize` only) */
    uint8_t *flip;           /* [batch] */
} ds_feed;

/* For batches of up to `batch` images of height x width (the loader's batch size). */
int ds_feed_init(ds_feed *f, const ds_backend *be, int batch, int height, int width);
void ds_feed_free(ds_feed *f);
/* Writes batch b, cut to its crop x crop, into the model's input, first setting the model's
 * input size to the batch's crop when it is another (ds_model_set_input_size: progressive
 * resizing, validation at another crop): the crop travels with the batch. */
int ds_feed_batch(ds_feed *f, ds_model *m, const ds_batch *b, const float mean[3], const float std[3]);

#endif
