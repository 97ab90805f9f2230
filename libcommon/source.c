#include "source.h"

#include "fsutil.h"
#include "image.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* Descriptors kept open at most; past this a read opens and closes its shard, so a set of
 * many thousands of shards never hits the process's file limit. */
#define MAX_CACHED_FDS 256

typedef struct {
    ds_shardset set;
    int *fds;                    /* [count], -1 until first read */
    int cached;                  /* descriptors held */
    pthread_mutex_t fd_lock;     /* guards fds / cached */
    pthread_mutex_t h5_lock;     /* HDF5 is built without thread safety */
    uint8_t *verified;           /* [n] 1: image i matched its checksum once in this process */
} shard_impl;

typedef struct {
    ds_manifest m;
    char *root;
    int size;
    ds_fit fit;
    ds_decoder **dec;            /* [workers] */
    int workers;
} manifest_impl;

static int read_full(int fd, uint8_t *out, size_t len, off_t off)
{
    while (len) {
        ssize_t r = pread(fd, out, len, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r < 0 ? -1 : (errno = EIO, -1);
        out += r, len -= (size_t)r, off += r;
    }
    return 0;
}

static int shard_fd(shard_impl *im, int k, int *owned)
{
    *owned = 0;
    pthread_mutex_lock(&im->fd_lock);
    int fd = im->fds[k];
    if (fd < 0) {
        fd = open(im->set.shards[k].path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && im->cached < MAX_CACHED_FDS) {
            im->fds[k] = fd;
            im->cached++;
        } else if (fd >= 0) {
            *owned = 1;
        }
    }
    pthread_mutex_unlock(&im->fd_lock);
    return fd;
}

/* Checks global image i (local in shard sh) against its checksum the first time this process
 * reads it. Hashing costs about half of a page-cache pread (bench/checksum_bench.c): on every
 * read that would slow the loader by tens of percent; once per image the first epoch alone
 * pays it, and every image is still checked before a step trains on it (evaluation reads each
 * image once: all checked). Two threads reading the same unchecked image both hash it. */
static int verify(shard_impl *im, size_t i, const ds_shard *sh, size_t local, const uint8_t *out)
{
    if (__atomic_load_n(&im->verified[i], __ATOMIC_RELAXED)) return 0;
    if (ds_shard_check_image(sh, local, out)) return -1;
    __atomic_store_n(&im->verified[i], 1, __ATOMIC_RELAXED);
    return 0;
}

static int shard_read(ds_source *s, int worker, size_t i, uint8_t *out, char *reason, size_t reason_len)
{
    shard_impl *im = s->impl;
    int k;
    size_t local;
    ds_shardset_locate(&im->set, i, &k, &local);
    ds_shard *sh = &im->set.shards[k];
    size_t bytes = (size_t)s->height * s->width * 3;
    if (!sh->contiguous) {
        pthread_mutex_lock(&im->h5_lock);
        int rc = ds_shard_read_images(sh, local, 1, out);
        pthread_mutex_unlock(&im->h5_lock);
        return rc ? rc : verify(im, i, sh, local, out);
    }
    int owned;
    int fd = shard_fd(im, k, &owned);
    if (fd < 0) return ds_err("%s: %s", sh->path, strerror(errno));
    int rc = read_full(fd, out, bytes, (off_t)(sh->images_offset + (int64_t)(local * bytes)));
    int e = errno;
    if (owned) close(fd);
    if (rc) return ds_err("%s: reading image %zu: %s", sh->path, local, e == EIO ? "file is truncated" : strerror(e));
    return verify(im, i, sh, local, out);
}

static const char *shard_path(const ds_source *s, size_t i)
{
    shard_impl *im = s->impl;
    int k;
    size_t local;
    ds_shardset_locate(&im->set, i, &k, &local);
    return im->set.shards[k].paths[local];
}

int ds_source_open_shards(ds_source *s, const char *dir)
{
    memset(s, 0, sizeof *s);
    shard_impl *im = ds_xcalloc(1, sizeof *im);
    if (ds_shardset_open(&im->set, dir)) {
        free(im);
        return -1;
    }
    if (im->set.count == 0 || im->set.total == 0) {
        ds_shardset_close(&im->set);
        free(im);
        return ds_err("%s: no images in this shard directory", dir);
    }
    ds_shard *first = &im->set.shards[0];
    s->n = im->set.total;
    s->height = first->height;
    s->width = first->width;
    s->fit = first->fit;
    s->num_classes = first->num_classes;
    s->classes = ds_xmalloc((size_t)s->num_classes * sizeof *s->classes);
    for (int c = 0; c < s->num_classes; c++) s->classes[c] = ds_xstrdup(first->classes[c]);
    s->labels = ds_xmalloc(s->n * sizeof *s->labels);
    for (int k = 0; k < im->set.count; k++)
        memcpy(s->labels + im->set.first[k], im->set.shards[k].labels, im->set.shards[k].n * sizeof *s->labels);
    int unchecked = 0, entries_unchecked = 0;
    for (int k = 0; k < im->set.count; k++) {
        unchecked += !im->set.shards[k].checksums;
        entries_unchecked += !im->set.shards[k].label_checksums || !im->set.shards[k].path_checksums;
    }
    if (unchecked)
        ds_debug("%s: %d of %d shards have no /checksums (packed before dspack wrote them): their images are read "
                 "unverified", dir, unchecked, im->set.count);
    if (entries_unchecked)
        ds_debug("%s: %d of %d shards have no /label_checksums and /path_checksums (packed before dspack wrote them): "
                 "their labels are checked for range only", dir, entries_unchecked, im->set.count);
    im->verified = ds_xcalloc(s->n, 1);
    im->fds = ds_xmalloc((size_t)im->set.count * sizeof *im->fds);
    for (int k = 0; k < im->set.count; k++) im->fds[k] = -1;
    pthread_mutex_init(&im->fd_lock, NULL);
    pthread_mutex_init(&im->h5_lock, NULL);
    s->name = im->set.dir;
    s->read = shard_read;
    s->path = shard_path;
    s->impl = im;
    return 0;
}

static int manifest_read(ds_source *s, int worker, size_t i, uint8_t *out, char *reason, size_t reason_len)
{
    manifest_impl *im = s->impl;
    if (worker < 0 || worker >= im->workers) return ds_err("%s: reader %d was not prepared", s->name, worker);
    char *file = ds_path_join(im->root, im->m.items[i].path);
    int rc = ds_image_load_resized(im->dec[worker], file, im->size, im->fit, DS_DEFAULT_MAX_PIXELS, out,
                                   reason, reason_len);
    free(file);
    return rc ? 1 : 0;
}

static const char *manifest_path(const ds_source *s, size_t i)
{
    const manifest_impl *im = s->impl;
    return im->m.items[i].path;
}

int ds_source_open_manifest(ds_source *s, const char *manifest, const char *root, int size, ds_fit fit)
{
    memset(s, 0, sizeof *s);
    if (fit != DS_FIT_CROP && fit != DS_FIT_SQUASH) return ds_err("%s: fit %d is not crop or squash", manifest, (int)fit);
    if (size <= 0) return ds_err("%s: image size %d is not positive", manifest, size);
    manifest_impl *im = ds_xcalloc(1, sizeof *im);
    if (ds_manifest_read(&im->m, manifest)) {
        free(im);
        return -1;
    }
    char *cpath = ds_classes_path_for(manifest);
    int rc = ds_classes_read(cpath, &s->classes, &s->num_classes);
    free(cpath);
    if (rc) {
        ds_manifest_free(&im->m);
        free(im);
        return -1;
    }
    if (im->m.n == 0) {
        ds_classes_free(s->classes, s->num_classes);
        ds_manifest_free(&im->m);
        free(im);
        return ds_err("%s: the manifest lists no images", manifest);
    }
    s->n = im->m.n;
    s->labels = ds_xmalloc(s->n * sizeof *s->labels);
    for (size_t i = 0; i < s->n; i++) {
        s->labels[i] = im->m.items[i].label;
        if (s->labels[i] < 0 || s->labels[i] >= s->num_classes) {
            ds_err("%s: label %d of '%s' is outside the %d classes of its classes.txt", manifest, s->labels[i],
                   im->m.items[i].path, s->num_classes);
            ds_source_close(s);
            ds_manifest_free(&im->m);
            free(im);
            return -1;
        }
    }
    im->root = ds_xstrdup(root ? root : im->m.root);
    im->size = size;
    im->fit = fit;
    s->height = s->width = size;
    s->fit = fit;
    s->name = manifest;
    s->decodes = 1;
    s->read = manifest_read;
    s->path = manifest_path;
    s->impl = im;
    return 0;
}

int ds_source_open(ds_source *s, const char *data, int size, ds_fit fit)
{
    struct stat st;
    if (stat(data, &st)) return ds_err("%s: %s", data, strerror(errno));
    if (S_ISDIR(st.st_mode)) return ds_source_open_shards(s, data);
    return ds_source_open_manifest(s, data, NULL, size, fit);
}

int ds_source_prepare(ds_source *s, int workers)
{
    if (s->read != manifest_read) return 0;
    manifest_impl *im = s->impl;
    if (workers <= im->workers) return 0;
    im->dec = ds_xrealloc(im->dec, (size_t)workers * sizeof *im->dec);
    for (int w = im->workers; w < workers; w++) {
        if (!(im->dec[w] = ds_decoder_new())) {
            im->workers = w;
            return ds_err("%s: cannot create an image decoder", s->name);
        }
    }
    im->workers = workers;
    return 0;
}

void ds_source_close(ds_source *s)
{
    if (s->impl && s->read == shard_read) {
        shard_impl *im = s->impl;
        for (int k = 0; k < im->set.count; k++)
            if (im->fds[k] >= 0) close(im->fds[k]);
        free(im->fds);
        free(im->verified);
        pthread_mutex_destroy(&im->fd_lock);
        pthread_mutex_destroy(&im->h5_lock);
        ds_shardset_close(&im->set);
        free(im);
    } else if (s->impl && s->read == manifest_read) {
        manifest_impl *im = s->impl;
        for (int w = 0; w < im->workers; w++) ds_decoder_free(im->dec[w]);
        free(im->dec);
        free(im->root);
        ds_manifest_free(&im->m);
        free(im);
    }
    if (s->classes) ds_classes_free(s->classes, s->num_classes);
    free(s->labels);
    memset(s, 0, sizeof *s);
}

int ds_classes_match(char *const *a, int na, const char *name_a, char *const *b, int nb, const char *name_b)
{
    if (na != nb) return ds_err("%s has %d classes but %s has %d: they must be the same classes", name_a, na, name_b, nb);
    for (int i = 0; i < na; i++)
        if (strcmp(a[i], b[i]))
            return ds_err("class %d is '%s' in %s but '%s' in %s: they must be the same classes in the same order", i,
                          a[i], name_a, b[i], name_b);
    return 0;
}

static void digest_add(XXH3_state_t *st, const void *data, size_t len) { XXH3_64bits_update(st, data, len); }

uint64_t ds_source_digest(const ds_source *s)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) ds_die("out of memory");
    XXH3_64bits_reset(st);
    uint64_t head[4] = {s->n, (uint64_t)s->height, (uint64_t)s->width, (uint64_t)s->fit};
    digest_add(st, head, sizeof head);
    for (int c = 0; c < s->num_classes; c++) digest_add(st, s->classes[c], strlen(s->classes[c]) + 1);
    digest_add(st, s->labels, s->n * sizeof *s->labels);
    for (size_t i = 0; i < s->n; i++) {
        const char *p = s->path(s, i);
        digest_add(st, p, strlen(p) + 1);
    }
    if (!s->decodes) {   /* a shard set: its pixels, by the checksums dspack wrote (where it did) */
        const shard_impl *im = s->impl;
        for (int k = 0; k < im->set.count; k++)
            if (im->set.shards[k].checksums)
                digest_add(st, im->set.shards[k].checksums, im->set.shards[k].n * sizeof(uint64_t));
    }
    uint64_t d = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return d;
}
