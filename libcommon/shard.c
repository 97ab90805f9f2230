/* shard: writing and validating the HDF5 shard files of docs/DESIGN.md §2.
 *
 * HDF5 prints its own error stack on failure by default; these functions turn that off
 * while they run and report one ds_err line naming the file and the object instead. */
#include "shard.h"
#include "fsutil.h"
#include "h5util.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__x86_64__)
/* libxxhash's runtime dispatch: XXH3 in AVX-512, AVX2 or SSE2, whichever this CPU has (the
 * same value from each); plain XXH3_64bits is its SSE2 code alone, at half the speed. */
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

/* ---- writing ---- */

/* Integer attributes are stored as 32-bit little-endian whatever the host. */
static int attr_int(hid_t loc, const char *name, int v)
{
    return ds_h5_attr_write(loc, name, H5T_STD_I32LE, H5T_NATIVE_INT, 0, &v);
}

/* A 1-D dataset of n items, without timestamps. */
static int write_1d(hid_t f, const char *name, hid_t file_t, hid_t mem_t, const void *data, size_t n)
{
    hsize_t dims[1] = {n};
    return ds_h5_write_dataset(f, name, file_t, mem_t, 1, dims, data);
}

/* offset non-NULL: the dataset is created and its space allocated, but nothing is written
 * into it (no fill value is set, so HDF5 writes none); *offset gets its file offset. */
static int write_images(hid_t f, const ds_shard_meta *m, const uint8_t *images, size_t n, uint64_t *offset)
{
    hsize_t dims[4] = {n, (hsize_t)m->height, (hsize_t)m->width, 3};
    hid_t sp = H5Screate_simple(4, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    int rc = -1;
    if (sp < 0 || dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0) goto out;
    if (m->compress > 0 && n > 0) {
        /* One chunk per image: the loader's random access touches one image at a time. */
        hsize_t chunk[4] = {1, dims[1], dims[2], 3};
        if (H5Pset_chunk(dcpl, 4, chunk) < 0 || H5Pset_shuffle(dcpl) < 0 ||
            H5Pset_deflate(dcpl, (unsigned)m->compress) < 0)
            goto out;
    } else {
        /* Early allocation pins the data's file offset before the write, so the loader can
         * pread [offset, offset + n*H*W*3) directly. */
        if (H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0 || H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) < 0)
            goto out;
    }
    if ((d = H5Dcreate2(f, "images", H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) goto out;
    if (offset) {
        haddr_t a = n ? H5Dget_offset(d) : HADDR_UNDEF;
        if (n && a == HADDR_UNDEF) goto out;
        *offset = a;
        rc = 0;
        goto out;
    }
    rc = n == 0 || H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images) >= 0 ? 0 : -1;
out:
    if (d >= 0) H5Dclose(d);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

uint64_t ds_shard_checksum(const uint8_t *image, size_t bytes) { return XXH3_64bits(image, bytes); }

uint64_t ds_shard_label_checksum(int32_t label)
{
    uint8_t le[4];
    for (int b = 0; b < 4; b++) le[b] = (uint8_t)((uint32_t)label >> (8 * b));
    return XXH3_64bits(le, sizeof le);
}

uint64_t ds_shard_path_checksum(const char *path) { return XXH3_64bits(path, strlen(path)); }

/* /checksums: contiguous and allocated early like a streamed /images, so a streamed shard
 * can write the values last at *offset (offset non-NULL: nothing is written). */
static int write_checksums(hid_t f, const uint64_t *sums, size_t n, uint64_t *offset)
{
    hsize_t dims[1] = {n};
    hid_t sp = H5Screate_simple(1, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    int rc = -1;
    if (sp < 0 || dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0 || H5Pset_layout(dcpl, H5D_CONTIGUOUS) < 0 ||
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) < 0)
        goto out;
    if ((d = H5Dcreate2(f, "checksums", H5T_STD_U64LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) goto out;
    if (ds_h5_attr_write_str(d, "algorithm", DS_SHARD_CHECKSUM_NAME)) goto out;
    if (offset) {
        haddr_t a = n ? H5Dget_offset(d) : HADDR_UNDEF;
        if (n && a == HADDR_UNDEF) goto out;
        *offset = a;
        rc = 0;
        goto out;
    }
    rc = n == 0 || H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sums) >= 0 ? 0 : -1;
out:
    if (d >= 0) H5Dclose(d);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

/* A uint64 [n] dataset of checksums with its `algorithm` attribute. */
static int write_sum_dataset(hid_t f, const char *name, const uint64_t *sums, size_t n)
{
    hsize_t dims[1] = {n};
    if (ds_h5_write_dataset(f, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, dims, sums)) return -1;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) return -1;
    int rc = ds_h5_attr_write_str(d, "algorithm", DS_SHARD_CHECKSUM_NAME);
    H5Dclose(d);
    return rc;
}

/* /label_checksums and /path_checksums: computed here from the labels and paths being
 * written (a few bytes per image), so every writer stores the same values. */
static int write_entry_checksums(hid_t f, const int32_t *labels, char *const *paths, size_t n)
{
    uint64_t *sums = ds_xmalloc((n ? n : 1) * sizeof *sums);
    for (size_t i = 0; i < n; i++) sums[i] = ds_shard_label_checksum(labels[i]);
    int rc = write_sum_dataset(f, "label_checksums", sums, n);
    for (size_t i = 0; i < n && rc == 0; i++) sums[i] = ds_shard_path_checksum(paths[i]);
    if (rc == 0) rc = write_sum_dataset(f, "path_checksums", sums, n);
    free(sums);
    return rc;
}

/* The whole shard file through HDF5 at `tmp`; with offset non-NULL every byte but the
 * pixels' and the checksums', which stay holes at *offset and *sums_offset for the caller to
 * fill. Both give the same bytes around them: the same calls in the same order, the two
 * writes aside. */
static int write_file(const char *tmp, const ds_shard_meta *meta, const uint8_t *images, const uint64_t *sums,
                      const int32_t *labels, char *const *paths, size_t n, uint64_t *offset, uint64_t *sums_offset)
{
    if (meta->height <= 0 || meta->width <= 0 || meta->num_classes <= 0 || meta->compress < 0 ||
        meta->compress > 9 || (meta->fit != DS_FIT_CROP && meta->fit != DS_FIT_SQUASH))
        return ds_err("%s: bad shard parameters", tmp);
    ds_h5_quiet q;
    const char *what = "create";
    hid_t f = ds_h5_file_create(&q, tmp), str_t = -1;
    int ok = 0;
    if (f < 0) goto out;
    what = "attributes";
    if (ds_h5_write_header(f, "shard") ||
        attr_int(f, "height", meta->height) || attr_int(f, "width", meta->width) ||
        ds_h5_attr_write_str(f, "fit", ds_fit_name(meta->fit)) || attr_int(f, "shard_index", meta->shard_index) ||
        attr_int(f, "shard_count", meta->shard_count) || attr_int(f, "num_classes", meta->num_classes))
        goto out;
    if (meta->config && ds_h5_attr_write_str(f, "config", meta->config)) goto out;
    what = "/images";
    if (write_images(f, meta, images, n, offset)) goto out;
    what = "/labels";
    if (write_1d(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, labels, n)) goto out;
    what = "/paths";
    if ((str_t = ds_h5_vlen_utf8()) < 0 || write_1d(f, "paths", str_t, str_t, paths, n)) goto out;
    what = "/classes";
    if (write_1d(f, "classes", str_t, str_t, meta->classes, (size_t)meta->num_classes)) goto out;
    what = "/checksums";
    if (write_checksums(f, sums, n, sums_offset)) goto out;
    what = "/label_checksums";
    if (write_entry_checksums(f, labels, paths, n)) goto out;
    ok = 1;
out:
    if (str_t >= 0) H5Tclose(str_t);
    return ds_h5_file_finish(&q, f, ok, tmp, "shard", what);
}

int ds_shard_write(const char *path, const ds_shard_meta *meta, const uint8_t *images,
                   const int32_t *labels, char *const *paths, size_t n)
{
    size_t bytes = (size_t)meta->height * meta->width * 3;
    uint64_t *sums = ds_xmalloc((n ? n : 1) * sizeof *sums);
    for (size_t i = 0; i < n && meta->height > 0 && meta->width > 0; i++)
        sums[i] = ds_shard_checksum(images + i * bytes, bytes);
    char *tmp = ds_tmp_name(path);
    int rc = write_file(tmp, meta, images, sums, labels, paths, n, NULL, NULL);
    if (rc == 0) rc = ds_commit_file(tmp, path);
    free(tmp);
    free(sums);
    return rc;
}

int ds_shard_stream_open(ds_shard_stream *s, const char *path, const ds_shard_meta *meta, const int32_t *labels,
                         char *const *paths, size_t n)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (meta->compress != 0 || n == 0) return ds_err("%s: only a non-empty contiguous shard can be streamed", path);
    s->path = ds_xstrdup(path);
    s->tmp = ds_tmp_name(path);
    s->meta = *meta;
    s->n = n;
    s->image_bytes = (size_t)meta->height * meta->width * 3;
    s->sums = ds_xcalloc(n, sizeof *s->sums);
    if (write_file(s->tmp, meta, NULL, NULL, labels, paths, n, &s->offset, &s->sums_offset)) goto fail;
    if ((s->fd = open(s->tmp, O_RDWR | O_CLOEXEC)) < 0) {
        ds_err("%s: %s", s->tmp, strerror(errno));
        goto fail;
    }
    return 0;
fail:
    ds_shard_stream_abort(s);
    return -1;
}

static int pwrite_all(int fd, const uint8_t *p, size_t len, off_t at)
{
    while (len) {
        ssize_t w = pwrite(fd, p, len, at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return -1;
        }
        p += w, at += w, len -= (size_t)w;
    }
    return 0;
}

int ds_shard_stream_write(ds_shard_stream *s, const uint8_t *images, size_t first, size_t count)
{
    if (first + count > s->n) return ds_err("%s: images [%zu, %zu) outside the shard's %zu", s->tmp, first,
                                            first + count, s->n);
    if (pwrite_all(s->fd, images, count * s->image_bytes, (off_t)(s->offset + first * s->image_bytes)))
        return ds_err("%s: write: %s", s->tmp, strerror(errno));
    for (size_t i = 0; i < count; i++)
        s->sums[first + i] = ds_shard_checksum(images + i * s->image_bytes, s->image_bytes);
    return 0;
}

/* The first n checksums into the file's /checksums at `at`, little-endian as its type says. */
static int write_sums(int fd, const uint64_t *sums, size_t n, uint64_t at, const char *name)
{
    uint8_t *le = ds_xmalloc((n ? n : 1) * 8);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < 8; b++) le[i * 8 + b] = (uint8_t)(sums[i] >> (8 * b));
    int rc = pwrite_all(fd, le, n * 8, (off_t)at) ? ds_err("%s: writing /checksums: %s", name, strerror(errno)) : 0;
    free(le);
    return rc;
}

/* Fewer images than laid out: a second file laid out for n gets the first n images' pixels
 * from the streamed one (a copy inside the kernel where it can), then replaces it. */
static int stream_repack(ds_shard_stream *s, const int32_t *labels, char *const *paths, size_t n)
{
    size_t len = strlen(s->tmp);
    char *repack = ds_xmalloc(len + 8);
    memcpy(repack, s->tmp, len - 4);
    memcpy(repack + len - 4, ".repack.tmp", 12);
    uint64_t to = 0, sums_to = 0;
    int rc = -1, fd = -1;
    if (write_file(repack, &s->meta, NULL, s->sums, labels, paths, n, n ? &to : NULL, n ? &sums_to : NULL)) goto out;
    if (n && (fd = open(repack, O_WRONLY | O_CLOEXEC)) < 0) {
        ds_err("%s: %s", repack, strerror(errno));
        goto out;
    }
    loff_t in_at = (loff_t)s->offset, out_at = (loff_t)to;
    size_t left = n * s->image_bytes;
    while (left) {
        ssize_t c = copy_file_range(s->fd, &in_at, fd, &out_at, left, 0);
        if (c < 0 && errno == EINTR) continue;
        if (c > 0) {
            left -= (size_t)c;
            continue;
        }
        /* No in-kernel copy here (another file system, an old kernel): through a buffer. */
        size_t step = left < ((size_t)4 << 20) ? left : ((size_t)4 << 20);
        uint8_t *buf = ds_xmalloc(step);
        while (left) {
            size_t k = left < step ? left : step;
            ssize_t r = pread(s->fd, buf, k, in_at);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0 || pwrite_all(fd, buf, (size_t)r, out_at)) {
                ds_err("%s: copying pixels: %s", repack, r == 0 ? "file shorter than expected" : strerror(errno));
                free(buf);
                goto out;
            }
            in_at += r, out_at += r, left -= (size_t)r;
        }
        free(buf);
    }
    if (n && write_sums(fd, s->sums, n, sums_to, repack)) goto out;
    if (fd >= 0 && close(fd)) {
        fd = -1;
        ds_err("%s: close: %s", repack, strerror(errno));
        goto out;
    }
    fd = -1;
    rc = ds_commit_file(repack, s->path);
out:
    if (fd >= 0) close(fd);
    if (rc) unlink(repack);
    free(repack);
    return rc;
}

int ds_shard_stream_commit(ds_shard_stream *s, const int32_t *labels, char *const *paths, size_t n)
{
    int rc;
    if (n > s->n) {
        rc = ds_err("%s: %zu images committed, %zu laid out", s->tmp, n, s->n);
    } else if (n < s->n) {
        rc = stream_repack(s, labels, paths, n);
    } else {
        rc = write_sums(s->fd, s->sums, n, s->sums_offset, s->tmp);
        if (close(s->fd) && rc == 0) rc = ds_err("%s: close: %s", s->tmp, strerror(errno));
        s->fd = -1;
        if (rc == 0) {
            rc = ds_commit_file(s->tmp, s->path);
            free(s->tmp); /* renamed, or removed on failure */
            s->tmp = NULL;
        }
    }
    ds_shard_stream_abort(s);
    return rc;
}

void ds_shard_stream_abort(ds_shard_stream *s)
{
    if (s->fd >= 0) close(s->fd);
    if (s->tmp) unlink(s->tmp);
    free(s->tmp);
    free(s->path);
    free(s->sums);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

/* ---- reading ---- */

/* Reads an integer scalar attribute; -1 when absent or not an integer. */
static int read_attr_int(hid_t f, const char *name, int *v)
{
    return ds_h5_attr_read(f, name, H5T_INTEGER, H5T_NATIVE_INT, 1, v);
}

/* Reads a scalar string attribute into buf; -1 when absent, not a string, or too long. */
static int read_attr_str(hid_t f, const char *name, char *buf, size_t cap)
{
    char *s = ds_h5_attr_read_str(f, name);
    int rc = s && strlen(s) < cap ? 0 : -1;
    if (rc == 0) strcpy(buf, s);
    free(s);
    return rc;
}

/* Opens dataset `name`, checks its class and rank, and returns its dims. */
static hid_t open_dataset(hid_t f, const char *name, H5T_class_t cls, int rank, hsize_t *dims)
{
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0) return -1;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    if (d < 0) return -1;
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    int ok = t >= 0 && sp >= 0 && H5Tget_class(t) == cls && H5Sget_simple_extent_ndims(sp) == rank &&
             H5Sget_simple_extent_dims(sp, dims, NULL) == rank;
    if (ok && cls == H5T_INTEGER) ok = H5Tget_size(t) <= 4;
    if (ok && cls == H5T_STRING) ok = H5Tis_variable_str(t) > 0;
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (!ok) {
        H5Dclose(d);
        return -1;
    }
    return d;
}

static void free_strings(char **s, size_t n)
{
    if (!s) return;
    for (size_t i = 0; i < n; i++) free(s[i]);
    free(s);
}

void ds_shard_close(ds_shard *s)
{
    if (s->hid >= 0) H5Fclose((hid_t)s->hid);
    free_strings(s->classes, s->classes ? (size_t)s->num_classes : 0);
    free_strings(s->paths, s->n);
    free(s->labels);
    free(s->config);
    free(s->checksums);
    free(s->label_checksums);
    free(s->path_checksums);
    free(s->path);
    memset(s, 0, sizeof *s);
    s->hid = -1;
}

/* A checksum dataset (/checksums, /label_checksums, /path_checksums) when the shard has it:
 * uint64 [n] of a known algorithm. NULL with err set when it is there but unusable; NULL
 * with err empty when it is absent (a shard packed before it). */
static uint64_t *read_checksums(hid_t f, const char *name, size_t n, char *err, size_t err_len)
{
    err[0] = 0;
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0) return NULL;
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT), t = -1, sp = -1;
    hsize_t dims[1];
    uint64_t *sums = NULL;
    char *alg = NULL;
    snprintf(err, err_len, "/%s is not a uint64 [N] dataset", name);
    if (d < 0 || (t = H5Dget_type(d)) < 0 || (sp = H5Dget_space(d)) < 0) goto out;
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) != 8 || H5Tget_sign(t) != H5T_SGN_NONE ||
        H5Sget_simple_extent_ndims(sp) != 1 || H5Sget_simple_extent_dims(sp, dims, NULL) != 1 || dims[0] != n)
        goto out;
    alg = ds_h5_attr_read_str(d, "algorithm");
    snprintf(err, err_len, "/%s has no 'algorithm' attribute or not '" DS_SHARD_CHECKSUM_NAME
             "' (written by a newer dspack?)", name);
    if (!alg || strcmp(alg, DS_SHARD_CHECKSUM_NAME)) goto out;
    sums = ds_xmalloc((n ? n : 1) * sizeof *sums);
    snprintf(err, err_len, "/%s cannot be read", name);
    if (n && H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sums) < 0) {
        free(sums);
        sums = NULL;
        goto out;
    }
    err[0] = 0;
out:
    free(alg);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (d >= 0) H5Dclose(d);
    return sums;
}

#define CHANGED_HINT "the file changed after dspack wrote it: repack it or restore it from a copy"

int ds_shard_check_image(const ds_shard *s, size_t i, const uint8_t *pixels)
{
    if (!s->checksums || i >= s->n) return 0;
    uint64_t got = ds_shard_checksum(pixels, (size_t)s->height * s->width * 3);
    if (got == s->checksums[i]) return 0;
    return ds_err("%s: image %zu (%s) is corrupt: its pixels hash to %llu, /checksums[%zu] holds %llu (" CHANGED_HINT
                  ")", s->path, i, s->paths[i], (unsigned long long)got, i, (unsigned long long)s->checksums[i]);
}

/* The problems of image i's label and path, each field on its own (`field` 0: the label
 * against /label_checksums, then its range; 1: the path against /path_checksums): 1 with
 * msg set when that field is bad. A label that fails its checksum is not also reported as
 * out of range. */
static int entry_problem(const ds_shard *s, size_t i, int field, char *msg, size_t len)
{
    int32_t label = s->labels[i];
    if (field == 0 && s->label_checksums && ds_shard_label_checksum(label) != s->label_checksums[i]) {
        snprintf(msg, len, "%s: image %zu (%s) has a damaged label: /labels[%zu] = %d does not match "
                 "/label_checksums[%zu] (" CHANGED_HINT ")", s->path, i, s->paths[i], i, (int)label, i);
        return 1;
    }
    if (field == 0 && (label < 0 || label >= s->num_classes)) {
        snprintf(msg, len, "%s: not a valid shard: /labels has a label outside [0, num_classes = %d): /labels[%zu] = "
                 "%d (image %zu, %s)", s->path, s->num_classes, i, (int)label, i, s->paths[i]);
        return 1;
    }
    if (field == 1 && s->path_checksums && ds_shard_path_checksum(s->paths[i]) != s->path_checksums[i]) {
        snprintf(msg, len, "%s: image %zu has a damaged path: /paths[%zu] = \"%s\" does not match "
                 "/path_checksums[%zu] (" CHANGED_HINT ")", s->path, i, i, s->paths[i], i);
        return 1;
    }
    return 0;
}

/* Prints at most this many damaged entries of one shard, then how many more there are. */
#define MAX_ENTRY_ERRORS 10

size_t ds_shard_check_entries(const ds_shard *s, uint8_t *bad)
{
    size_t images = 0, printed = 0, more = 0;
    char msg[1536];
    for (size_t i = 0; i < s->n; i++) {
        int any = 0;
        for (int field = 0; field < 2; field++) {
            if (!entry_problem(s, i, field, msg, sizeof msg)) continue;
            any = 1;
            if (printed < MAX_ENTRY_ERRORS) ds_err("%s", msg), printed++;
            else more++;
        }
        images += any;
        if (bad && any) bad[i] = 1;
    }
    if (more) ds_err("%s: %zu more damaged labels or paths", s->path, more);
    return images;
}

/* Opens and validates everything but the labels' and paths' values (entry_problem). */
static int open_structure(ds_shard *s, const char *path, char *why, size_t why_len)
{
    memset(s, 0, sizeof *s);
    s->hid = -1;
    s->path = ds_xstrdup(path);
    struct stat st;
    if (stat(path, &st)) {
        int e = errno;
        ds_shard_close(s);
        snprintf(why, why_len, "%s: %s", path, strerror(e));
        return -1;
    }
    ds_h5_quiet q;
    ds_h5_quiet_begin(&q);
    const char *bad = NULL;
    hid_t f = -1, d = -1;
    hsize_t dims[4];
    char header_why[128], sums_why[160];
    if (H5Fis_hdf5(path) <= 0 || (f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        bad = "not an HDF5 file";
        goto out;
    }
    s->hid = f;
    if (ds_h5_check_header(f, "shard", header_why, sizeof header_why)) {
        bad = header_why;
        goto out;
    }
    if (read_attr_int(f, "height", &s->height) || read_attr_int(f, "width", &s->width) ||
        s->height <= 0 || s->width <= 0 || s->height > 65535 || s->width > 65535) {
        bad = "height/width attributes missing or out of range";
        goto out;
    }
    char fit[8];
    if (read_attr_str(f, "fit", fit, sizeof fit) || (s->fit = (ds_fit)ds_fit_parse(fit)) == DS_FIT_UNSET) {
        bad = "fit attribute missing or not 'crop'/'squash'";
        goto out;
    }
    if (read_attr_int(f, "shard_index", &s->shard_index) || read_attr_int(f, "shard_count", &s->shard_count) ||
        s->shard_count <= 0 || s->shard_index < 0 || s->shard_index >= s->shard_count) {
        bad = "shard_index/shard_count attributes missing or out of range";
        goto out;
    }
    if (read_attr_int(f, "num_classes", &s->num_classes) || s->num_classes <= 0) {
        bad = "num_classes attribute missing or not positive";
        goto out;
    }

    char cfg[4096];
    if (H5Aexists(f, "config") > 0) {
        if (read_attr_str(f, "config", cfg, sizeof cfg)) { bad = "config attribute unreadable or too long"; goto out; }
        s->config = ds_xstrdup(cfg);
    }

    if ((d = open_dataset(f, "images", H5T_INTEGER, 4, dims)) < 0) { bad = "/images missing or not a 4-D integer dataset"; goto out; }
    {
        hid_t t = H5Dget_type(d);
        int u8 = t >= 0 && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE;
        if (t >= 0) H5Tclose(t);
        if (!u8) { bad = "/images is not uint8"; goto out; }
    }
    if (dims[1] != (hsize_t)s->height || dims[2] != (hsize_t)s->width || dims[3] != 3) {
        bad = "/images shape is not [N, height, width, 3]";
        goto out;
    }
    s->n = dims[0];
    hid_t dcpl = H5Dget_create_plist(d);
    H5D_layout_t layout = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (layout == H5D_LAYOUT_ERROR) { bad = "/images has an unreadable layout"; goto out; }
    s->contiguous = layout == H5D_CONTIGUOUS;
    s->images_offset = -1;
    if (s->contiguous && s->n > 0) {
        haddr_t off = H5Dget_offset(d);
        uint64_t bytes = (uint64_t)s->n * s->height * s->width * 3;
        if (off == HADDR_UNDEF) { bad = "/images has no storage allocated"; goto out; }
        if ((uint64_t)off + bytes > (uint64_t)st.st_size) { bad = "file is truncated (/images runs past its end)"; goto out; }
        s->images_offset = (int64_t)off;
    }
    H5Dclose(d);

    if ((d = open_dataset(f, "labels", H5T_INTEGER, 1, dims)) < 0 || dims[0] != s->n) {
        bad = "/labels missing, not integer, or not [N]";
        goto out;
    }
    s->labels = ds_xmalloc((s->n ? s->n : 1) * sizeof *s->labels);
    if (s->n && H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, s->labels) < 0) {
        bad = "/labels cannot be read";
        goto out;
    }
    H5Dclose(d);

    if ((d = open_dataset(f, "paths", H5T_STRING, 1, dims)) < 0 || dims[0] != s->n) {
        bad = "/paths missing, not variable-length strings, or not [N]";
        goto out;
    }
    if (!(s->paths = ds_h5_read_strings(d, s->n))) { bad = "/paths cannot be read"; goto out; }
    H5Dclose(d);

    if ((d = open_dataset(f, "classes", H5T_STRING, 1, dims)) < 0 || dims[0] != (hsize_t)s->num_classes) {
        bad = "/classes missing, not variable-length strings, or not [num_classes]";
        goto out;
    }
    if (!(s->classes = ds_h5_read_strings(d, (size_t)s->num_classes))) { bad = "/classes cannot be read"; goto out; }
    H5Dclose(d);
    d = -1;

    bad = sums_why;
    s->checksums = read_checksums(f, "checksums", s->n, sums_why, sizeof sums_why);
    if (sums_why[0]) goto out;
    s->label_checksums = read_checksums(f, "label_checksums", s->n, sums_why, sizeof sums_why);
    if (sums_why[0]) goto out;
    s->path_checksums = read_checksums(f, "path_checksums", s->n, sums_why, sizeof sums_why);
    if (sums_why[0]) goto out;
    bad = NULL;

    /* A contiguous shard is read by pread: keep no HDF5 handle (and no descriptor) open, so
     * a set of thousands of shards stays under the process's file limit. */
    if (s->contiguous) {
        H5Fclose(f);
        s->hid = -1;
    }
out:
    if (bad && d >= 0) H5Dclose(d);
    ds_h5_quiet_end(&q);
    if (bad) {
        snprintf(why, why_len, "%s: not a valid shard: %s", path, bad);
        ds_shard_close(s);
        return -1;
    }
    return 0;
}

int ds_shard_open_structure(ds_shard *s, const char *path)
{
    char why[1024];
    if (open_structure(s, path, why, sizeof why) == 0) return 0;
    return ds_err("%s", why);
}

int ds_shard_open(ds_shard *s, const char *path)
{
    if (ds_shard_open_structure(s, path)) return -1;
    if (ds_shard_check_entries(s, NULL) == 0) return 0;
    ds_shard_close(s);
    return -1;
}

int ds_shard_open_quiet(ds_shard *s, const char *path, char *why, size_t why_len)
{
    if (open_structure(s, path, why, why_len)) return -1;
    /* why keeps the first problem; the rest are counted (snprintf into NULL, 0 writes nothing). */
    size_t bad = 0;
    for (size_t i = 0; i < s->n; i++)
        for (int field = 0; field < 2; field++)
            if (entry_problem(s, i, field, bad ? NULL : why, bad ? 0 : why_len)) bad++;
    if (bad == 0) return 0;
    if (bad > 1) {
        size_t l = strlen(why);
        snprintf(why + l, why_len - l, "; %zu more damaged labels or paths", bad - 1);
    }
    ds_shard_close(s);
    return -1;
}

int ds_shard_read_images(ds_shard *s, size_t start, size_t count, uint8_t *out)
{
    if (start > s->n || count > s->n - start)
        return ds_err("%s: images [%zu, %zu) out of range (%zu images)", s->path, start, start + count, s->n);
    if (count == 0) return 0;
    ds_h5_quiet q;
    ds_h5_quiet_begin(&q);
    int rc = -1;
    hid_t d = -1, fs = -1, ms = -1;
    if (s->hid < 0 && (s->hid = H5Fopen(s->path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) goto out;
    if ((d = H5Dopen2((hid_t)s->hid, "images", H5P_DEFAULT)) < 0 || (fs = H5Dget_space(d)) < 0) goto out;
    hsize_t off[4] = {start, 0, 0, 0}, cnt[4] = {count, (hsize_t)s->height, (hsize_t)s->width, 3};
    if (H5Sselect_hyperslab(fs, H5S_SELECT_SET, off, NULL, cnt, NULL) < 0) goto out;
    if ((ms = H5Screate_simple(4, cnt, NULL)) < 0) goto out;
    rc = H5Dread(d, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, out) < 0 ? -1 : 0;
out:
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (d >= 0) H5Dclose(d);
    ds_h5_quiet_end(&q);
    if (rc && count == 1)
        ds_err("%s: image %zu (%s) cannot be read from /images (damaged or unreadable data)", s->path, start,
               s->paths[start]);
    else if (rc)
        ds_err("%s: cannot read images [%zu, %zu) from /images", s->path, start, start + count);
    return rc;
}

/* ---- a directory of shards ---- */

static int is_shard_name(const char *name, int *index)
{
    /* shard-NNNNN.h5: at least five digits, nothing else. */
    if (strncmp(name, "shard-", 6) != 0) return 0;
    const char *p = name + 6;
    int digits = 0;
    long v = 0;
    while (*p >= '0' && *p <= '9' && digits < 9) v = v * 10 + (*p++ - '0'), digits++;
    if (digits < 5 || strcmp(p, ".h5") != 0) return 0;
    *index = (int)v;
    return 1;
}

int ds_shard_file_index(const char *name)
{
    int index;
    return is_shard_name(name, &index) ? index : -1;
}

void ds_shardset_close(ds_shardset *set)
{
    for (int i = 0; i < set->count; i++) ds_shard_close(&set->shards[i]);
    free(set->shards);
    free(set->first);
    free(set->dir);
    memset(set, 0, sizeof *set);
}

int ds_shardset_open(ds_shardset *set, const char *dir)
{
    memset(set, 0, sizeof *set);
    DIR *dh = opendir(dir);
    if (!dh) return ds_err("%s: %s", dir, strerror(errno));
    int max_index = -1, found = 0;
    struct dirent *e;
    while ((e = readdir(dh))) {
        int idx;
        if (!is_shard_name(e->d_name, &idx)) continue;
        found++;
        if (idx > max_index) max_index = idx;
    }
    closedir(dh);
    if (!found) return ds_err("%s: no shard-NNNNN.h5 files (not a dspack output directory?)", dir);
    if (found != max_index + 1)
        return ds_err("%s: shards are not numbered 0..%d without gaps (%d found)", dir, max_index, found);

    set->dir = ds_xstrdup(dir);
    set->count = found;
    set->shards = ds_xcalloc((size_t)found, sizeof *set->shards);
    set->first = ds_xcalloc((size_t)found + 1, sizeof *set->first);
    for (int i = 0; i < found; i++) set->shards[i].hid = -1;
    for (int i = 0; i < found; i++) {
        char name[32];
        snprintf(name, sizeof name, "shard-%05d.h5", i);
        char *p = ds_path_join(dir, name);
        int rc = ds_shard_open(&set->shards[i], p);
        free(p);
        if (rc) {
            set->count = i;
            ds_shardset_close(set);
            return -1;
        }
        ds_shard *s = &set->shards[i], *s0 = &set->shards[0];
        const char *bad = NULL;
        if (s->shard_index != i) bad = "shard_index does not match its file name";
        else if (s->shard_count != found) bad = "shard_count does not match the number of shard files";
        else if (s->height != s0->height || s->width != s0->width || s->fit != s0->fit)
            bad = "image size or fit differs from shard-00000.h5";
        else if (s->num_classes != s0->num_classes) bad = "num_classes differs from shard-00000.h5";
        else
            for (int c = 0; c < s->num_classes && !bad; c++)
                if (strcmp(s->classes[c], s0->classes[c])) bad = "/classes differs from shard-00000.h5";
        if (bad) {
            ds_err("%s: %s", s->path, bad);
            set->count = i + 1;
            ds_shardset_close(set);
            return -1;
        }
        set->first[i + 1] = set->first[i] + s->n;
    }
    set->total = set->first[found];
    return 0;
}

void ds_shardset_locate(const ds_shardset *set, size_t global, int *shard, size_t *local)
{
    /* The last shard whose first index is <= global; empty shards share their first index
     * with the next one, and upper-bound search skips them. */
    int lo = 0, hi = set->count;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (set->first[mid] <= global) lo = mid;
        else hi = mid;
    }
    *shard = lo;
    *local = global - set->first[lo];
}
