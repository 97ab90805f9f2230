/* source: where a loader's images come from, behind one small interface.
 *
 * A source is an indexed set of n labelled images of one size [height, width, 3] (uint8
 * RGB): a shard directory (dspack's output; contiguous shards are read with pread at the
 * offset HDF5 reports, compressed ones through HDF5 under a lock), or a manifest whose
 * images are decoded and resized on the fly exactly as dspack stores them (image.h).
 * An image of a shard that has /checksums is checked against its checksum the first time
 * the source reads it (a mismatch is an I/O error naming the shard, index and path). Reads are safe from many
 * threads at once; each reading thread passes its own worker index (0 .. workers-1, fixed
 * by ds_source_prepare) so decoders are never shared. */
#ifndef DS_SOURCE_H
#define DS_SOURCE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "manifest.h"
#include "shard.h"

typedef struct ds_source ds_source;
struct ds_source {
    size_t n;                    /* images */
    int height, width;           /* stored size */
    ds_fit fit;                  /* crop or squash */
    int num_classes;
    char **classes;              /* [num_classes], owned */
    int32_t *labels;             /* [n], owned */
    const char *name;            /* directory or manifest file, for messages */
    int decodes;                 /* 1: images are decoded on the fly (a manifest) */
    /* Reads image i into out [height, width, 3]. Returns 0; -1 with a message for an I/O
     * error (fatal); 1 with `reason` for an image that cannot be decoded (a manifest's
     * broken file: the caller skips it). */
    int (*read)(ds_source *s, int worker, size_t i, uint8_t *out, char *reason, size_t reason_len);
    /* The image's path relative to its root (for --logits and messages). */
    const char *(*path)(const ds_source *s, size_t i);
    void *impl;
};

/* A shard directory, opened and validated (ds_shardset_open). */
int ds_source_open_shards(ds_source *s, const char *dir);
/* A manifest decoded on the fly at `size` with `fit`; classes come from the classes.txt
 * beside it. root NULL: the manifest header's root. */
int ds_source_open_manifest(ds_source *s, const char *manifest, const char *root, int size, ds_fit fit);
/* Opens DATA as dseval takes it: a directory is a shard set, a file a manifest. */
int ds_source_open(ds_source *s, const char *data, int size, ds_fit fit);
/* Sets up per-worker state (decoders) for up to `workers` concurrent readers. */
int ds_source_prepare(ds_source *s, int workers);
void ds_source_close(ds_source *s);

/* The identity of a source's data, for a resumed run to check that it trains on the same
 * images: XXH3-64 over the count, stored size and fit, class names, labels, paths and (for
 * shards) the pixels' checksums. A shard set repacked from the same manifest at the same
 * size gives the same digest; one image, label or name different gives another. */
uint64_t ds_source_digest(const ds_source *s);

/* 0 when both class lists are identical; otherwise -1 with a message naming both sources
 * and the first difference. */
int ds_classes_match(char *const *a, int na, const char *name_a, char *const *b, int nb,
                     const char *name_b);

#endif
