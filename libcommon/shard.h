/* shard: the HDF5 files dspack writes and the loader / dseval read (docs/DESIGN.md §2).
 *
 *   /images   uint8 [N, H, W, 3]  RGB NHWC; contiguous, or chunked per image + deflate
 *   /labels   int32 [N]
 *   /paths    vlen UTF-8 string [N]   source path relative to the root
 *   /classes  vlen UTF-8 string [C]   all class names, the same in every shard
 *   /checksums uint64 [N]              XXH3-64 of each image's H*W*3 stored bytes (attribute
 *                                      algorithm = "xxh3-64"); absent in shards packed before it
 *   /label_checksums uint64 [N]        XXH3-64 of each label as 4 little-endian bytes
 *   /path_checksums  uint64 [N]        XXH3-64 of each path's bytes (no terminating NUL); both
 *                                      with algorithm = "xxh3-64", absent in shards packed
 *                                      before them (their labels and paths are not covered)
 *   root attributes: ds_format (int 1), ds_kind ("shard"), height, width, fit ("crop" or
 *   "squash"), shard_index, shard_count, num_classes
 *
 * Files are written with object time tracking off, to NAME.tmp, then fsynced and renamed:
 * the same input gives byte-identical shards, and a crash never leaves a half shard. */
#ifndef DS_SHARD_H
#define DS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "image.h"

/* ---- writing (dspack) ---- */

typedef struct {
    int height, width;
    ds_fit fit;                  /* DS_FIT_CROP or DS_FIT_SQUASH */
    int shard_index, shard_count;
    char *const *classes;        /* [num_classes] */
    int num_classes;
    int compress;                /* 0: contiguous /images; 1-9: chunked per image, deflate */
    const char *config;          /* optional: stored as the `config` attribute (JSON); NULL: none */
} ds_shard_meta;

/* Writes one complete shard atomically (path.tmp, fsync, rename). images: [n, H, W, 3]. */
int ds_shard_write(const char *path, const ds_shard_meta *meta, const uint8_t *images,
                   const int32_t *labels, char *const *paths, size_t n);

/* A contiguous shard whose pixels are written while they are still being produced: open
 * writes every byte of the file but the pixels and their checksums (HDF5 lays out /images
 * and /checksums for n images and leaves their space unwritten), write puts images
 * [first, first + count) there with plain writes, in any order, from one thread at a time,
 * and keeps their checksums, and commit writes the checksums, fsyncs and renames. Commit
 * may name fewer images than open did (images were rejected meanwhile): the first n written
 * are kept, in a file laid out again for n. Either way the result is byte for byte the file
 * ds_shard_write makes from the same arguments. abort removes the temporary file. */
typedef struct {
    char *path, *tmp;
    int fd;
    ds_shard_meta meta;          /* its pointers must stay valid until commit */
    uint64_t offset;             /* file offset of /images[0] */
    uint64_t sums_offset;        /* file offset of /checksums[0], written at commit */
    uint64_t *sums;              /* [n] checksum of each image written */
    size_t n, image_bytes;       /* images laid out */
} ds_shard_stream;

int ds_shard_stream_open(ds_shard_stream *s, const char *path, const ds_shard_meta *meta, const int32_t *labels,
                         char *const *paths, size_t n);
/* images: [count, H, W, 3], the pixels of images first .. first + count - 1. */
int ds_shard_stream_write(ds_shard_stream *s, const uint8_t *images, size_t first, size_t count);
/* labels, paths: [n] of the shard as committed (the same as open's when n is unchanged). */
int ds_shard_stream_commit(ds_shard_stream *s, const int32_t *labels, char *const *paths, size_t n);
void ds_shard_stream_abort(ds_shard_stream *s);

/* The checksum stored for an image: XXH3-64 (seed 0) of its H*W*3 bytes. */
#define DS_SHARD_CHECKSUM_NAME "xxh3-64"
uint64_t ds_shard_checksum(const uint8_t *image, size_t bytes);
/* The checksums stored for a label (its 4 bytes, little-endian) and a path (its bytes). */
uint64_t ds_shard_label_checksum(int32_t label);
uint64_t ds_shard_path_checksum(const char *path);

/* ---- reading (loader, dseval, dspack --resume, dspack --verify) ---- */

typedef struct {
    char *path;
    int64_t hid;                 /* the open HDF5 file (hid_t), kept open for compressed reads;
                                    -1 for contiguous shards (closed after validation, so
                                    thousands of shards do not hold thousands of descriptors;
                                    ds_shard_read_images reopens it when called) */
    size_t n;                    /* images in this shard */
    int height, width;
    ds_fit fit;                  /* from the "fit" attribute: crop or squash */
    int shard_index, shard_count;
    int num_classes;
    char **classes;              /* [num_classes] */
    int32_t *labels;             /* [n], each checked to lie in [0, num_classes) */
    char **paths;                /* [n] */
    int contiguous;              /* 1: /images can be pread at images_offset */
    int64_t images_offset;       /* byte offset of /images in the file when contiguous */
    char *config;                /* the `config` attribute (dspack's options as JSON); NULL if absent */
    uint64_t *checksums;         /* [n] from /checksums; NULL: a shard packed before checksums */
    uint64_t *label_checksums;   /* [n] from /label_checksums; NULL: packed before them */
    uint64_t *path_checksums;    /* [n] from /path_checksums; NULL: packed before them */
} ds_shard;

/* Opens and validates a shard: kind, version, every dataset's type, rank and shape, the
 * attributes' ranges, the checksums' algorithm, and every image's label and path: each
 * against /label_checksums and /path_checksums when the shard has them, each label in
 * range. Errors name the file and the field (for a damaged label or path: the image index,
 * the field and its value). Pixels are not read: ds_shard_check_image checks them as they
 * are read. */
int ds_shard_open(ds_shard *s, const char *path);
/* The same without printing: on failure `why` gets the first message ds_shard_open would
 * print (dspack --resume uses it to decide, quietly, whether a shard can be kept). */
int ds_shard_open_quiet(ds_shard *s, const char *path, char *why, size_t why_len);
/* ds_shard_open without the labels' and paths' check: the labels may be out of range until
 * ds_shard_check_entries has passed. dspack --verify opens shards so, to report every
 * damaged entry and still check the pixels. */
int ds_shard_open_structure(ds_shard *s, const char *path);
/* Checks every image's label and path (as ds_shard_open does), prints each damaged one
 * (at most 10 per shard, then a count), and returns how many images have one; bad ([n], or
 * NULL) gets 1 at each such image. */
size_t ds_shard_check_entries(const ds_shard *s, uint8_t *bad);
/* A shard may hold 0 images (every image planned for it was rejected); then images_offset
 * is -1 and there is nothing to read. */
/* Reads images [start, start + count) into out ([count, H, W, 3]) through HDF5; thread-safe
 * only under the caller's lock (HDF5 is built without thread safety). The loader preads
 * contiguous shards directly instead. */
int ds_shard_read_images(ds_shard *s, size_t start, size_t count, uint8_t *out);
/* Checks image i's pixels ([H, W, 3], as read) against its stored checksum: 0 when they
 * match or the shard has none; otherwise -1 with a message naming the shard file, the image
 * index and its source path. */
int ds_shard_check_image(const ds_shard *s, size_t i, const uint8_t *pixels);
void ds_shard_close(ds_shard *s);

/* A directory of shards: shard-00000.h5 ... in order, every one opened and validated,
 * all with the same size, fit and classes. */
typedef struct {
    char *dir;
    int count;
    ds_shard *shards;
    size_t total;                /* images in all shards */
    size_t *first;               /* [count + 1]: global index of each shard's first image */
} ds_shardset;

int ds_shardset_open(ds_shardset *set, const char *dir);
/* The index of a shard file name ("shard-00042.h5": 42; at least five digits); -1 for any
 * other name. */
int ds_shard_file_index(const char *name);
void ds_shardset_close(ds_shardset *set);
/* Global image index -> (shard, index within it). */
void ds_shardset_locate(const ds_shardset *set, size_t global, int *shard, size_t *local);

#endif
