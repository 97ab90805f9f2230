/* loader: the micro-batches a rank trains or evaluates on, prepared by background threads.
 *
 * Training (docs/DESIGN.md §3). Epoch e visits the n samples in the order of a Philox permutation
 * keyed by (seed, DS_RNG_EPOCH, e). A step takes the next global batch of
 * G = batch x world x accum positions; micro-batch m = a x world + rank (a = accumulation
 * index) takes positions [m x batch, (m + 1) x batch) of it, so world 3 x accum 1 and
 * world 1 x accum 3 see the same samples in each step. The last partial global batch of
 * an epoch is dropped. Each sample's augmentation comes from Philox keyed by
 * (seed, DS_RNG_AUGMENT, epoch << 32 | sample index): a random crop of crop x crop from the
 * stored image zero-padded by `pad` on every side (pad 0: from the image itself), then a
 * horizontal flip with probability 1/2. Without augmentation: the centre crop
 * (torchvision's CenterCrop rounding), no flip.
 *
 * Evaluation: rank r of W takes the samples [n r / W, n (r + 1) / W) in data order, in
 * batches of up to `batch` (the last one may be short), centre-cropped: every sample is
 * seen exactly once whatever the world size.
 *
 * A batch carries uint8 images at the stored size (plus padding) and the crop corner and
 * flip per image; backend->normalize_u8 crops, flips and normalises on the computing device.
 *
 * Threads: `threads` workers fill a ring of `depth` batches ahead of the consumer; a
 * batch's content is a pure function of (seed, epoch, step, micro-batch), never of which
 * thread filled it or when, so results do not depend on the thread count. Memory: depth
 * batches. */
#ifndef DS_LOADER_H
#define DS_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "source.h"

typedef struct {
    int batch;           /* micro-batch per rank */
    int world, rank;
    int accum;           /* micro-batches per rank per step (training) */
    int crop;            /* network input: crop x crop */
    int pad;             /* training with augment only: zero padding around the stored image */
    int augment;         /* 1: random crop + flip; 0: centre crop, no flip */
    int train;           /* 1: training order; 0: evaluation slice */
    uint64_t seed;
    int threads;         /* background workers, >= 1 */
    int depth;           /* batches kept ready; 0: threads + 2 */
} ds_loader_config;

typedef struct {
    int n;               /* images in this batch */
    int height, width;   /* of each image in `images`: stored size + 2 pad */
    uint8_t *images;     /* [n, height, width, 3] */
    int32_t *labels;     /* [n] */
    int32_t *y0, *x0;    /* [n] crop corner within the (padded) image */
    uint8_t *flip;       /* [n] */
    uint8_t *valid;      /* [n] 0: the image could not be decoded (manifest); pixels are 0 */
    size_t *index;       /* [n] source index of each image */
    int nvalid;
    int64_t epoch;
    int64_t step;        /* training: step within the epoch; evaluation: batch number */
    int micro;           /* training: accumulation index a */
} ds_batch;

typedef struct ds_loader ds_loader;

/* Checks the configuration against the source (crop fits, batch sizes) and allocates the
 * ring. Returns NULL with a message. */
ds_loader *ds_loader_new(ds_source *src, const ds_loader_config *cfg);
void ds_loader_free(ds_loader *L);

/* Training: full global batches in an epoch. Evaluation: this rank's batches. */
int64_t ds_loader_steps_per_epoch(const ds_loader *L);
/* Training steps per epoch over n samples with this configuration, before any loader exists
 * (a schedule is made from it): n / (batch x world x accum), the last partial batch dropped. */
int64_t ds_loader_train_steps(const ds_loader_config *c, size_t n);
/* Samples this rank sees in one evaluation pass. */
size_t ds_loader_eval_count(const ds_loader *L);

/* Starts the workers on epoch `epoch` from step `first_step` (training; evaluation takes
 * 0). A running epoch is stopped first. */
int ds_loader_start(ds_loader *L, int64_t epoch, int64_t first_step);
/* Crops crop x crop from the next ds_loader_start on (a running epoch is stopped): training
 * at a resolution per epoch. -1 with a message when it does not fit the (padded) images. */
int ds_loader_set_crop(ds_loader *L, int crop);
/* The next batch in order: 1 with *b set, 0 when the epoch is done, -1 when a worker failed
 * (its message was printed). The batch stays valid until ds_loader_release. */
int ds_loader_next(ds_loader *L, ds_batch **b);
void ds_loader_release(ds_loader *L, ds_batch *b);
/* Stops and joins the workers (also mid-epoch). */
void ds_loader_stop(ds_loader *L);

/* The epoch order: perm = the Philox permutation of 0..n-1 for (seed, epoch). */
void ds_loader_epoch_order(uint32_t *perm, size_t n, uint64_t seed, int64_t epoch);
/* torchvision's CenterCrop offset: round((size - crop) / 2), half to even as Python. */
int ds_center_offset(int size, int crop);

#endif
