/* verify: dspack --verify, a full check of a shard directory (docs/DESIGN.md §2).
 *
 * Every shard-NNNNN.h5 in the directory is opened and validated as the loader would
 * (attributes, types, shapes, the checksums' algorithm), every image's label and path is
 * checked against /label_checksums and /path_checksums (and each label's range), the set is
 * checked for gaps and agreement (index, count, size, fit, classes), and every image's
 * pixels are read and hashed against /checksums. Nothing stops at the first problem: each bad
 * shard and each bad image (shard, index, source path, and which field: pixels, label or
 * path) gets its own error line. Shards are
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
    size_t images_bad;          /* unreadable, or pixels, label or path not matching its checksum */
    size_t images_unchecked;    /* in shards without /checksums: read, not checked */
    int shards_entries_unchecked;    /* valid, but no /label_checksums or /path_checksums */
    size_t images_entries_unchecked; /* their images: labels checked for range only */
    uint64_t bytes;             /* pixel bytes read */
    double seconds;
} ds_verify_result;

/* Checks the shard directory `dir` with `threads` threads (0: OpenMP's default). Returns 0
 * when every shard and image is good, 1 when something is bad (each printed), -1 when the
 * directory cannot be read or holds no shard. */
int ds_verify_shards(const char *dir, int threads, ds_verify_result *r);

#endif
