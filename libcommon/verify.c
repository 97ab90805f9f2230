/* verify: every shard and every image of a shard directory, each problem reported. */
#include "verify.h"
#include "fsutil.h"
#include "log.h"
#include "shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Contiguous shards are read this many images at a time (~12 MB at 256 x 256). */
#define BLOCK_IMAGES 64

/* The highest shard index in dir; -1 when there is none, -2 when dir cannot be read. */
static int highest_index(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return ds_err("%s: %s", dir, strerror(errno)), -2;
    int hi = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int k = ds_shard_file_index(e->d_name);
        if (k > hi) hi = k;
    }
    closedir(d);
    return hi;
}

/* Whether shard s (file index k of count) belongs to the set that ref (the first valid
 * shard) belongs to; NULL or why not. */
static const char *set_mismatch(const ds_shard *s, int k, int count, const ds_shard *ref)
{
    if (s->shard_index != k) return "shard_index does not match its file name";
    if (s->shard_count != count) return "shard_count does not match the number of shard files";
    if (!ref || ref == s) return NULL;
    if (s->height != ref->height || s->width != ref->width || s->fit != ref->fit)
        return "image size or fit differs from the set's first shard";
    if (s->num_classes != ref->num_classes) return "num_classes differs from the set's first shard";
    for (int c = 0; c < s->num_classes; c++)
        if (strcmp(s->classes[c], ref->classes[c])) return "/classes differs from the set's first shard";
    return NULL;
}

/* Reads every image of a contiguous shard with pread and checks it; bad images counted,
 * except those already marked in bad[] (a damaged label or path). */
static size_t check_contiguous(const ds_shard *s, const uint8_t *marked, uint8_t *buf, int *failed)
{
    size_t bytes = (size_t)s->height * s->width * 3, bad = 0;
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ds_err("%s: %s", s->path, strerror(errno));
        *failed = 1;
        return 0;
    }
    for (size_t i = 0; i < s->n; i += BLOCK_IMAGES) {
        size_t count = s->n - i < BLOCK_IMAGES ? s->n - i : BLOCK_IMAGES, len = count * bytes, got = 0;
        off_t at = (off_t)(s->images_offset + (int64_t)(i * bytes));
        int e = 0;
        while (got < len) {
            ssize_t r = pread(fd, buf + got, len - got, at + (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                e = r < 0 ? errno : 0;
                break;
            }
            got += (size_t)r;
        }
        if (got < len) {
            ds_err("%s: images %zu and on cannot be read: %s", s->path, i + got / bytes,
                   e ? strerror(e) : "file is truncated");
            *failed = 1;
            break;
        }
        for (size_t j = 0; j < count; j++)
            bad += ds_shard_check_image(s, i + j, buf + j * bytes) != 0 && !marked[i + j];
    }
    close(fd);
    return bad;
}

/* Reads every image of a compressed shard through HDF5 (not thread-safe: one reader at a
 * time) and checks it outside the lock; an image HDF5 cannot read (a damaged deflate
 * stream) is a bad image. */
static size_t check_chunked(ds_shard *s, const uint8_t *marked, uint8_t *buf)
{
    size_t bad = 0;
    for (size_t i = 0; i < s->n; i++) {
        int rc;
#pragma omp critical(ds_verify_hdf5)
        rc = ds_shard_read_images(s, i, 1, buf);
        if ((rc || ds_shard_check_image(s, i, buf)) && !marked[i]) bad++;
    }
    return bad;
}

int ds_verify_shards(const char *dir, int threads, ds_verify_result *r)
{
    memset(r, 0, sizeof *r);
    double t0 = ds_now();
    int hi = highest_index(dir);
    if (hi == -2) return -1;
    if (hi < 0) return ds_err("%s: no shard-NNNNN.h5 files (not a dspack output directory?)", dir);
    int count = hi + 1;
    r->shards = count;
    ds_shard *shards = ds_xcalloc((size_t)count, sizeof *shards);
    uint8_t *ok = ds_xcalloc((size_t)count, 1);
    const ds_shard *ref = NULL;
    /* Structure first, one shard after the other (HDF5). */
    for (int k = 0; k < count; k++) {
        char name[32];
        snprintf(name, sizeof name, "shard-%05d.h5", k);
        char *p = ds_path_join(dir, name);
        shards[k].hid = -1;
        if (access(p, F_OK)) {
            ds_err("%s: missing (the set has shards up to shard-%05d.h5)", p, hi);
        } else if (ds_shard_open_structure(&shards[k], p) == 0) {
            const char *bad = set_mismatch(&shards[k], k, count, ref);
            if (bad) {
                ds_err("%s: %s", p, bad);
                ds_shard_close(&shards[k]);
            } else {
                ok[k] = 1;
                if (!ref) ref = &shards[k];
            }
        }
        free(p);
        if (!ok[k]) r->shards_bad++;
    }
    /* Labels and paths: each damaged one printed; its shard is still checked for pixels. */
    uint8_t **marked = ds_xcalloc((size_t)count, sizeof *marked);
    size_t entries_bad = 0;
    int shards_entries_bad = 0;
    for (int k = 0; k < count; k++) {
        if (!ok[k]) continue;
        marked[k] = ds_xcalloc(shards[k].n ? shards[k].n : 1, 1);
        size_t bad = ds_shard_check_entries(&shards[k], marked[k]);
        entries_bad += bad;
        shards_entries_bad += bad > 0;
        if (!shards[k].label_checksums || !shards[k].path_checksums) {
            r->shards_entries_unchecked++;
            r->images_entries_unchecked += shards[k].n;
        }
    }
    for (int k = 0; k < count; k++) {
        if (!ok[k]) continue;
        r->images += shards[k].n;
        r->bytes += (uint64_t)shards[k].n * shards[k].height * shards[k].width * 3;
        if (!shards[k].checksums) {
            r->shards_unchecked++;
            r->images_unchecked += shards[k].n;
            ds_debug("%s: no /checksums (packed before dspack wrote them): its pixels are read, not checked",
                     shards[k].path);
        }
    }
    /* Pixels: shards in parallel; each thread closes the shards it is done with. */
    size_t images_bad = entries_bad, block = ref ? (size_t)BLOCK_IMAGES * ref->height * ref->width * 3 : 0;
    int shards_failed = 0;
    int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel num_threads(nt) reduction(+ : images_bad, shards_failed)
    {
        uint8_t *buf = NULL;
#pragma omp for schedule(dynamic, 1)
        for (int k = 0; k < count; k++) {
            ds_shard *s = &shards[k];
            if (!ok[k] || s->n == 0) continue;
            if (!buf) buf = ds_xmalloc(block);
            int failed = 0;
            size_t bad = s->contiguous ? check_contiguous(s, marked[k], buf, &failed) : check_chunked(s, marked[k], buf);
            images_bad += bad;
            /* A shard whose labels or paths are damaged is already counted. */
            int entries = 0;
            for (size_t i = 0; i < s->n && !entries; i++) entries = marked[k][i];
            shards_failed += (failed || bad) && !entries;
#pragma omp critical(ds_verify_hdf5)
            ds_shard_close(s); /* a compressed shard holds its HDF5 file open until here */
            ok[k] = 2;
        }
        free(buf);
    }
    r->images_bad = images_bad;
    r->shards_bad += shards_failed + shards_entries_bad;
    for (int k = 0; k < count; k++) free(marked[k]);
    free(marked);
    for (int k = 0; k < count; k++)
        if (ok[k] == 1) ds_shard_close(&shards[k]);
    free(shards);
    free(ok);
    r->seconds = ds_now() - t0;
    return r->shards_bad || r->images_bad ? 1 : 0;
}
