/* loader: the micro-batches a rank trains or evaluates on, prepared by background threads.
 *
 * Training (docs/DESIGN.md §3). Epoch e visits the n samples in the order of a Philox permutation
 * keyed by (seed, DS_RNG_EPOCH, e). A step takes the next global batch of
 * G = batch x world x accum positions; micro-batch m = a x world + rank (a = accumulation
 * index) takes positions [m x batch, (m + 1) x batch) of it, so world 3 x accum 1 and
 * world 1 x accum 3 see the same samples in each step. The last partial global batch of
 * an epoch is dropped. Each sample's augmentation comes from Philox keyed by
 * (seed, DS_RNG_AUGMENT, epoch << 32 | sample index), drawn in this order:
 *   DS_AUGMENT_CROP: y0 = below(H + 2 pad - crop + 1), x0 = below(W + 2 pad - crop + 1): a
 *     random crop x crop from the stored H x W image zero-padded by `pad` on every side
 *     (pad 0: from the image itself); then flip = below(2).
 *   DS_AUGMENT_RRC: torchvision's RandomResizedCrop box (ds_rrc_box: up to ten tries of two
 *     doubles, then top and left of an accepted box), resized to crop x crop by the backend;
 *     then flip = below(2). `pad` is ignored (no padding); crop may exceed the stored size.
 * Without augmentation: the centre crop (torchvision's CenterCrop rounding), no flip.
 *
 * Evaluation: rank r of W takes the samples [n r / W, n (r + 1) / W) in data order, in
 * batches of up to `batch` (the last one may be short), centre-cropped: every sample is
 * seen exactly once whatever the world size.
 *
 * A batch carries uint8 images at the stored size (plus padding) and the box and flip per
 * image; backend->normalize_u8 (boxes of crop x crop) or backend->resized_crop_u8 (boxes to
 * resize, `resize` set) crops, flips and normalises on the computing device.
 *
 * Threads: `threads` workers fill a ring of `depth` batches ahead of the consumer; a
 * batch's content is a pure function of (seed, epoch, step, micro-batch), never of which
 * thread filled it or when, so results do not depend on the thread count. Memory: depth
 * batches. */
#ifndef DS_LOADER_H
#define DS_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "source.h"

/* ds_loader_config.augment; 0 and 1 keep their old meaning (none, random crop). */
enum { DS_AUGMENT_NONE = 0, DS_AUGMENT_CROP = 1, DS_AUGMENT_RRC = 2 };
/* dstrain's --augment names, in the order of DS_AUGMENT_*: a choice's index is its value. */
#define DS_AUGMENT_CHOICES "none|standard|rrc"

/* Progressive resizing: the training crop rises from `min` to the loader's crop over epochs
 * [start, end] in multiples of `step` (ds_crop_for_epoch, schedule.h). dstrain's --min-crop,
 * --ramp-start, --ramp-end and --crop-step, in that order, which is also the order of a
 * checkpoint's int64[4] crop_ramp attribute: one shape from the options to the file. */
typedef struct {
    int64_t min;         /* the first crop; 0: no ramp */
    int64_t start, end;  /* epochs (0-based) where the ramp starts and ends */
    int64_t step;        /* crops inside the ramp are multiples of it (>= 1); 0 in a checkpoint's
                            meta: not recorded */
} ds_crop_ramp;

typedef struct {
    int batch;           /* micro-batch per rank */
    int world, rank;
    int accum;           /* micro-batches per rank per step (training) */
    int crop;            /* network input: crop x crop */
    int pad;             /* training with DS_AUGMENT_CROP only: zero padding around the stored image */
    int augment;         /* DS_AUGMENT_*: random crop + flip, RandomResizedCrop + flip, or centre crop */
    double rrc_scale[2]; /* DS_AUGMENT_RRC: box area / image area in [lo, hi], 0 < lo <= hi */
    double rrc_ratio[2]; /* DS_AUGMENT_RRC: box width / height in [lo, hi], 0 < lo <= hi, log-uniform */
    int train;           /* 1: training order; 0: evaluation slice */
    uint64_t seed;
    int threads;         /* background workers, >= 1 */
    int depth;           /* batches kept ready; 0: threads + 2 */
    int read_delay_ms;   /* DS_TESTHOOK_READ_DELAY_MS; 0: none. Each image read takes this many ms
                          * longer, and no batch is begun before ds_loader_next asks for it, so the
                          * consumer waits at least batch x read_delay_ms for every one, whatever
                          * its own speed */
    double (*clock)(void); /* the clock ds_loader_wait_seconds counts with (seconds); NULL: ds_now. A test
                            * gives its own to make the count exact */
} ds_loader_config;

typedef struct {
    int n;               /* images in this batch */
    int height, width;   /* of each image in `images`: stored size + 2 pad */
    uint8_t *images;     /* [n, height, width, 3] */
    int32_t *labels;     /* [n] */
    int32_t *y0, *x0;    /* [n] box corner within the (padded) image */
    int32_t *bh, *bw;    /* [n] box size: crop x crop unless `resize` */
    int crop;            /* the network's input this batch is cut to: crop x crop */
    int resize;          /* 1: the boxes are resized to crop x crop (DS_AUGMENT_RRC) */
    uint8_t *flip;       /* [n] */
    uint8_t *valid;      /* [n] 0: the image could not be decoded (manifest); pixels are 0 */
    size_t *index;       /* [n] source index of each image */
    int nvalid;
    int64_t epoch;
    int64_t step;        /* training: step within the epoch; evaluation: batch number */
    int micro;           /* training: accumulation index a */
    int capacity;        /* images each buffer above holds (the loader's batch) */
} ds_batch;

typedef struct ds_loader ds_loader;

/* The shape of the batches a loader makes: what a device buffer for one must hold
 * (feed.h). The loader is its one source: the padding rule lives in ds_loader_shape. */
typedef struct {
    int capacity;        /* images a batch holds at most: the micro-batch */
    int height, width;   /* of each image: the stored size, plus `pad` on every side when
                            training with DS_AUGMENT_CROP */
} ds_batch_shape;

/* G = batch x world x accum: the images of one training step over all ranks. */
size_t ds_loader_global_batch(const ds_loader_config *c);
/* The accumulation that makes a global batch of G with this micro-batch on `world` ranks;
 * 0 when the micro-batch x world does not divide G. */
int64_t ds_loader_accum_for(int batch, int world, int64_t G);
/* The batches' shape for this configuration on src, before any loader exists. */
ds_batch_shape ds_loader_shape(const ds_loader_config *c, const ds_source *src);
/* 0 when the configuration's crop fits src's (padded) images; -1 with a message naming
 * src when it does not. ds_loader_new checks it too; a tool may ask before it plans a model
 * for the crop. */
int ds_loader_check_crop(const ds_loader_config *c, const ds_source *src);

/* Checks the configuration against the source (crop fits, batch sizes) and allocates the
 * ring. Returns NULL with a message. */
ds_loader *ds_loader_new(ds_source *src, const ds_loader_config *cfg);
void ds_loader_free(ds_loader *L);
/* The shape of L's batches (ds_loader_shape of its configuration and source). */
ds_batch_shape ds_loader_batch_shape(const ds_loader *L);

/* Training: full global batches in an epoch (a run's schedule is made from it). Evaluation:
 * this rank's batches. */
int64_t ds_loader_steps_per_epoch(const ds_loader *L);
/* Training steps per epoch over n samples with this configuration, before any loader exists:
 * n / (batch x world x accum), the last partial batch dropped. */
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
/* Seconds ds_loader_next has spent blocked, waiting for a worker to finish the batch asked
 * for, since ds_loader_new: over a stretch of training, its growth divided by the stretch's
 * wall time is the share of step time lost to input (metrics.jsonl's data_wait). */
double ds_loader_wait_seconds(const ds_loader *L);
/* Stops and joins the workers (also mid-epoch). */
void ds_loader_stop(ds_loader *L);

/* The epoch order: perm = the Philox permutation of 0..n-1 for (seed, epoch). */
void ds_loader_epoch_order(uint32_t *perm, size_t n, uint64_t seed, int64_t epoch);
/* torchvision's RandomResizedCrop.get_params on an H x W image with scale and ratio ranges
 * [lo, hi]: up to ten tries of area = H W (scale lo + (hi - lo) u1), aspect = exp(log lo_r +
 * (log hi_r - log lo_r) u2) (u1, u2 = ds_rng_double), w = round(sqrt(area aspect)),
 * h = round(sqrt(area / aspect)) (half to even, as Python), accepted when 0 < w <= W and
 * 0 < h <= H, then top = below(H - h + 1), left = below(W - w + 1). Past ten tries, no more
 * draws: the centre box of the whole image with its aspect clamped into the ratio range
 * (one side rounded; at least 1 pixel, where torchvision would give an empty box).
 * box = {top, left, h, w}. Returns 1 when the fallback was taken, else 0. */
int ds_rrc_box(ds_rng *r, int H, int W, const double scale[2], const double ratio[2], int32_t box[4]);
/* torchvision's CenterCrop offset: round((size - crop) / 2), half to even as Python. */
int ds_center_offset(int size, int crop);

#endif
