/* evaluate: one inference pass of a model over an evaluation loader (dstrain's per-epoch
 * validation and dseval): every batch is fed, run forward with the BN running statistics
 * (with ds_eval_options.flip, a second time mirrored, the two logits averaged), and scored
 * into a ds_topk (this rank's samples; ds_topk_reduce sums the ranks). */
#ifndef DS_EVALUATE_H
#define DS_EVALUATE_H

#include "feed.h"
#include "loader.h"
#include "model.h"
#include "topk.h"

typedef struct {
    float mean[3], std[3];   /* input normalisation (the checkpoint's); the crop is the loader's */
    float *logits;           /* optional host [ds_loader_eval_count, num_classes]: this rank's
                                logits in data order */
    uint8_t *valid;          /* optional host [ds_loader_eval_count]: 0 for undecodable images */
    int progress;            /* ds_progress_start's `enabled` */
    int flip;                /* test-time augmentation: each batch also runs mirrored left to right, and
                                an image's logits are the mean of its two passes' (FFCV's evaluation) */
    int nan_first;           /* DS_TESTHOOK_NAN_VAL_EPOCH (testhook.h): this rank's first image is
                                scored from NaN logits */
} ds_eval_options;

/* What an evaluation of src's images at crop measures, by name, into buf: the stored images
 * are the fit of dspack (or of a manifest decoded as dspack would), so a shard set of
 * --size S --fit crop at crop C is torchvision's Resize(S) + CenterCrop(C) pixel for pixel
 * when S - C is a multiple of 4: "resize S, centre crop C" ("resize 256, centre crop 224" is
 * the standard ImageNet evaluation). Otherwise the two centre crops' roundings can differ
 * by a pixel and the name says both: "resize S, centre crop S, centre crop C". Squashed
 * images: "resize to SxS (squash)[, centre crop C]". With flip (ds_eval_options.flip) the
 * name ends in ", and mirrored (mean logits)", never the standard protocol. Returns 1 for
 * the standard protocol. */
int ds_eval_protocol(char *buf, size_t len, const ds_source *src, int crop, int flip);

/* The standard ImageNet evaluation's crop, 224, when src's images are what it crops from
 * (stored at 256 x 256 by --fit crop), else 0. */
#define DS_STANDARD_SIZE 256
#define DS_STANDARD_CROP 224
int ds_eval_standard_crop(const ds_source *src);

/* Returns 0, or -1 with a message (a loader failure). Adds to t; *seconds gets the wall time. */
int ds_evaluate(ds_model *m, ds_loader *L, ds_feed *feed, const ds_eval_options *o, ds_topk *t, double *seconds);

#endif
