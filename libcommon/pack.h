/* pack: a manifest -> a directory of shards (dspack's engine).
 *
 * The plan is a pure function of the manifest and the options: the manifest order is
 * shuffled with Philox (seed, DS_RNG_PACK_ORDER), and shard k is planned over the shuffled
 * positions [k * shard_size, (k + 1) * shard_size). It holds the images among those
 * positions that decode, in that order; the rest go to rejected.txt. So shard boundaries do
 * not move when an image is rejected, and the bytes do not depend on the thread count, on
 * timing, or on whether the run was interrupted and resumed. */
#ifndef DS_PACK_H
#define DS_PACK_H

#include "image.h"
#include "manifest.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *root;         /* image paths are relative to this directory */
    const char *out;          /* output directory (created) */
    int size;                 /* output side S: images are [S, S, 3] */
    ds_fit fit;
    size_t shard_size;        /* planned manifest positions per shard */
    int compress;             /* 0: contiguous /images; 1-9: deflate level */
    int threads;              /* 0: OpenMP's default */
    uint64_t seed;
    int shuffle;
    uint64_t max_pixels;
    int resume;               /* keep complete, valid shards that match the plan */
    int overwrite;            /* replace the shards already in `out` (else they are refused,
                                 unless resume) */
    int progress;             /* ds_progress_start's `enabled` */
} ds_pack_options;

typedef struct {
    size_t packed, rejected;
    int shards, shards_kept;  /* shards_kept: reused by --resume */
    double seconds;
} ds_pack_result;

/* Packs every manifest entry (labels already checked against classes). Rejected images are
 * not an error: they are counted in r and listed in OUT/rejected.txt. Returns -1 on an
 * error that stops the run (an unwritable output, out of memory), and, before writing
 * anything, when `out` already holds shard files and neither resume nor overwrite is set. */
int ds_pack_run(const ds_pack_options *o, const ds_manifest *m, char *const *classes, int num_classes,
                ds_pack_result *r);

/* Whether a manifest path stays inside the root: relative, no ".." component. */
int ds_pack_path_ok(const char *path);

#endif
