/* verify: dspack --verify, a full check of a shard directory (docs/DESIGN.md §2).
 *
 * Every shard-NNNNN.h5 in the directory is opened and validated as the loader would
 * (ds_shard_open: attributes, types, shapes, labels in range, the checksums' algorithm), the
 * set is checked for gaps and agreement (index, count, size, fit, classes), and every image's
 * pixels are read and hashed against /checksums. Nothing stops at the first problem: each bad
 * shard and each bad image (shard, index, source path) gets its own error line. Shards are
 * checked in parallel (contiguous ones with pread; compressed ones are read through HDF5,
 * one at a time, and hashed in parallel). */
#ifndef DS_VERIFY_H
#define DS_VERIFY_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int shards;                 /* shard files expected: 0 .. the highest index found */
    int shards_bad;             /* missing, invalid, not matching the set, or holding a bad image */
    int shards_unchecked;       /* valid, but no /checksums (packed before dspack wrote them) */
    size_t images;              /* images in the valid shards */
    size_t images_bad;          /* unreadable or not matching their checksum */
    size_t images_unchecked;    /* in shards without /checksums: read, not checked */
    uint64_t bytes;             /* pixel bytes read */
    double seconds;
} ds_verify_result;

/* Checks the shard directory `dir` with `threads` threads (0: OpenMP's default). Returns 0
 * when every shard and image is good, 1 when something is bad (each printed), -1 when the
 * directory cannot be read or holds no shard. */
int ds_verify_shards(const char *dir, int threads, ds_verify_result *r);

#endif
