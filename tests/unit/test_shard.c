/* Shard files: write -> open -> read round trip, byte-identical rewrites, per-image
 * checksums (stored, checked, absent in older shards), and refusal of files that are
 * truncated, of another kind, or inconsistent within a set. */
#include "../check.h"
#include "fsutil.h"
#include "shard.h"

#include <hdf5.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

static char dir[256];

static char *classes[] = {"cat", "dog", "emu"};

static ds_shard_meta meta_for(int index, int count, int compress)
{
    return (ds_shard_meta){.height = 4, .width = 5, .fit = DS_FIT_CROP, .shard_index = index,
                           .shard_count = count, .classes = classes, .num_classes = 3,
                           .compress = compress};
}

static void fill(uint8_t *img, size_t n, int salt)
{
    for (size_t i = 0; i < n * 4 * 5 * 3; i++) img[i] = (uint8_t)(i * 7 + salt);
}

static int files_equal(const char *a, const char *b)
{
    size_t la, lb;
    char *x = ds_read_file(a, &la), *y = ds_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

static void test_roundtrip(int compress)
{
    check_begin(compress ? "shard_roundtrip_compressed" : "shard_roundtrip_contiguous");
    uint8_t img[3 * 60], back[3 * 60];
    fill(img, 3, 1);
    int32_t labels[3] = {2, 0, 1};
    char *paths[3] = {"emu/a.jpg", "cat/b.JPEG", "dog/ü.png"};
    char p[300];
    snprintf(p, sizeof p, "%s/rt%d.h5", dir, compress);
    ds_shard_meta m = meta_for(1, 2, compress);
    CHECK(ds_shard_write(p, &m, img, labels, paths, 3) == 0, "write");
    char tmp[310];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    CHECK(access(tmp, F_OK) != 0, "tmp file left behind");
    ds_shard s;
    CHECK(ds_shard_open(&s, p) == 0, "open");
    CHECK(s.n == 3 && s.height == 4 && s.width == 5 && s.fit == DS_FIT_CROP, "header n=%zu", s.n);
    CHECK(s.shard_index == 1 && s.shard_count == 2 && s.num_classes == 3, "indices");
    CHECK(s.contiguous == !compress, "contiguous %d", s.contiguous);
    for (int i = 0; i < 3; i++) {
        CHECK(s.labels[i] == labels[i], "label %d", i);
        CHECK(!strcmp(s.paths[i], paths[i]), "path %d: %s", i, s.paths[i]);
        CHECK(!strcmp(s.classes[i], classes[i]), "class %d", i);
    }
    memset(back, 0, sizeof back);
    CHECK(ds_shard_read_images(&s, 1, 2, back) == 0, "read");
    CHECK(memcmp(back, img + 60, 120) == 0, "pixels through HDF5");
    if (!compress) {
        /* The loader's path: pread at images_offset. */
        FILE *f = fopen(p, "rb");
        memset(back, 0, sizeof back);
        CHECK(f && fseek(f, s.images_offset, SEEK_SET) == 0 && fread(back, 1, 180, f) == 180, "pread");
        CHECK(memcmp(back, img, 180) == 0, "pixels at images_offset");
        if (f) fclose(f);
    }
    CHECK(ds_shard_read_images(&s, 2, 2, back) != 0, "out-of-range read refused");
    /* /checksums: XXH3-64 of each image's stored bytes, checked against the pixels read. The
     * known answer of xxHash's reference for the empty input pins the algorithm and seed. */
    CHECK(ds_shard_checksum(img, 0) == 0x2D06800538D394C2ull, "XXH3-64 of nothing: %016llx",
          (unsigned long long)ds_shard_checksum(img, 0));
    CHECK(s.checksums != NULL, "no /checksums");
    for (int i = 0; i < 3 && s.checksums; i++) {
        CHECK(s.checksums[i] == XXH3_64bits(img + i * 60, 60), "checksum %d", i);
        CHECK(ds_shard_check_image(&s, (size_t)i, img + i * 60) == 0, "image %d refused", i);
    }
    memcpy(back, img + 60, 60);
    back[17] ^= 0x10;
    CHECK(ds_shard_check_image(&s, 1, back) != 0, "a flipped bit went unnoticed");
    ds_shard_close(&s);

    /* Same input, same bytes: no timestamps anywhere in the file. */
    char p2[300];
    snprintf(p2, sizeof p2, "%s/rt%d-again.h5", dir, compress);
    sleep(1);
    CHECK(ds_shard_write(p2, &m, img, labels, paths, 3) == 0, "rewrite");
    CHECK(files_equal(p, p2), "rewrite is not byte-identical");
    check_end();
}

/* A streamed shard (pixels written in pieces, out of order, after HDF5 wrote the rest) is
 * byte for byte the shard ds_shard_write makes, also when it commits fewer images than it
 * laid out; an aborted one leaves nothing behind. */
static void test_stream(void)
{
    check_begin("shard_stream_equals_write");
    enum { N = 7 };
    uint8_t img[N * 60];
    fill(img, N, 3);
    int32_t labels[N] = {0, 1, 2, 0, 1, 2, 0};
    char *paths[N] = {"a", "b", "c", "d", "e", "f", "g"};
    char p[300], q[300], tmp[310];
    snprintf(p, sizeof p, "%s/direct.h5", dir);
    snprintf(q, sizeof q, "%s/streamed.h5", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", q);
    ds_shard_meta m = meta_for(0, 1, 0);
    CHECK(ds_shard_write(p, &m, img, labels, paths, N) == 0, "write");
    ds_shard_stream st;
    CHECK(ds_shard_stream_open(&st, q, &m, labels, paths, N) == 0, "stream open");
    CHECK(ds_shard_stream_write(&st, img + 4 * 60, 4, 3) == 0, "write 4..6");
    CHECK(ds_shard_stream_write(&st, img, 0, 1) == 0, "write 0");
    CHECK(ds_shard_stream_write(&st, img + 60, 1, 3) == 0, "write 1..3");
    CHECK(ds_shard_stream_write(&st, img, 6, 2) != 0, "write past the end accepted");
    CHECK(ds_shard_stream_commit(&st, labels, paths, N) == 0, "commit");
    CHECK(access(tmp, F_OK) != 0, "tmp file left behind");
    CHECK(files_equal(p, q), "streamed shard differs from the written one");
    ds_shard s;
    CHECK(ds_shard_open(&s, q) == 0 && s.n == N, "open streamed");
    ds_shard_close(&s);

    /* Laid out for N, committed with 5 (and with 0): the first images written are kept. */
    for (size_t keep = 5;; keep = 0) {
        CHECK(ds_shard_write(p, &m, img, labels + 1, paths + 1, keep) == 0, "write %zu", keep);
        CHECK(ds_shard_stream_open(&st, q, &m, labels, paths, N) == 0, "stream open for fewer");
        CHECK(ds_shard_stream_write(&st, img, 0, N) == 0, "write all");
        CHECK(ds_shard_stream_commit(&st, labels + 1, paths + 1, keep) == 0, "commit %zu", keep);
        CHECK(access(tmp, F_OK) != 0, "tmp file left behind (%zu)", keep);
        CHECK(files_equal(p, q), "shard committed with %zu of %d images differs from the written one", keep, N);
        CHECK(ds_shard_open(&s, q) == 0 && s.n == keep, "open %zu", keep);
        for (size_t i = 0; i < s.n && s.checksums; i++)
            CHECK(s.checksums[i] == XXH3_64bits(img + i * 60, 60), "streamed checksum %zu of %zu", i, keep);
        ds_shard_close(&s);
        if (keep == 0) break;
    }

    CHECK(ds_shard_stream_open(&st, q, &m, labels, paths, N) == 0, "stream open again");
    CHECK(access(tmp, F_OK) == 0, "no tmp file while streaming");
    ds_shard_stream_abort(&st);
    CHECK(access(tmp, F_OK) != 0, "abort left the tmp file");
    m.compress = 1;
    CHECK(ds_shard_stream_open(&st, q, &m, labels, paths, N) != 0, "compressed stream accepted");
    check_end();
}

static void test_refusals(void)
{
    check_begin("shard_refuses_bad_files");
    uint8_t img[2 * 60];
    fill(img, 2, 3);
    int32_t labels[2] = {0, 1};
    char *paths[2] = {"a", "b"};
    char p[300], cmd[700];
    snprintf(p, sizeof p, "%s/good.h5", dir);
    ds_shard_meta m = meta_for(0, 1, 0);
    CHECK(ds_shard_write(p, &m, img, labels, paths, 2) == 0, "write");
    ds_shard s;

    /* Truncated: /images runs past the end of the file. */
    snprintf(cmd, sizeof cmd, "%s/trunc.h5", dir);
    size_t len;
    char *bytes = ds_read_file(p, &len);
    FILE *f = fopen(cmd, "wb");
    CHECK(f && bytes && fwrite(bytes, 1, len - 100, f) == len - 100, "write truncated copy");
    if (f) fclose(f);
    free(bytes);
    CHECK(ds_shard_open(&s, cmd) != 0, "truncated shard accepted");

    /* Not HDF5 at all. */
    snprintf(cmd, sizeof cmd, "%s/text.h5", dir);
    f = fopen(cmd, "w");
    if (f) fputs("hello\n", f), fclose(f);
    CHECK(ds_shard_open(&s, cmd) != 0, "text file accepted");
    CHECK(ds_shard_open(&s, "/nonexistent/shard.h5") != 0, "missing file accepted");

    /* An HDF5 file of another kind. */
    snprintf(cmd, sizeof cmd, "%s/other.h5", dir);
    hid_t h = H5Fcreate(cmd, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(h >= 0, "create other");
    H5Fclose(h);
    CHECK(ds_shard_open(&s, cmd) != 0, "kind-less HDF5 accepted");

    /* Bad label written by a buggy writer. */
    int32_t bad_labels[2] = {0, 3};
    snprintf(cmd, sizeof cmd, "%s/badlabel.h5", dir);
    CHECK(ds_shard_write(cmd, &m, img, bad_labels, paths, 2) == 0, "write bad labels");
    CHECK(ds_shard_open(&s, cmd) != 0, "label out of range accepted");
    check_end();
}

/* Opens path for writing with HDF5 and runs one change on it. */
static int h5_edit(const char *path, int (*edit)(hid_t f))
{
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) return -1;
    int rc = edit(f);
    return H5Fclose(f) < 0 ? -1 : rc;
}
static int drop_checksums(hid_t f) { return H5Ldelete(f, "checksums", H5P_DEFAULT) < 0 ? -1 : 0; }
static int other_algorithm(hid_t f)
{
    hid_t d = H5Dopen2(f, "checksums", H5P_DEFAULT);
    if (d < 0) return -1;
    int rc = H5Adelete(d, "algorithm") < 0 ? -1 : 0;
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(t, 6);
    hid_t a = H5Acreate2(d, "algorithm", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, t, "crc32c") < 0) rc = -1;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp), H5Tclose(t), H5Dclose(d);
    return rc;
}
static int int32_checksums(hid_t f)
{
    int32_t v[2] = {0, 0};
    hsize_t dims[1] = {2};
    if (H5Ldelete(f, "checksums", H5P_DEFAULT) < 0) return -1;
    hid_t sp = H5Screate_simple(1, dims, NULL), d = H5Dcreate2(f, "checksums", H5T_STD_I32LE, sp, H5P_DEFAULT,
                                                                H5P_DEFAULT, H5P_DEFAULT);
    int rc = d < 0 || H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0 ? -1 : 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    return rc;
}

/* A shard packed before checksums (no /checksums) opens and reads, unchecked; a /checksums
 * of another algorithm or type is refused, naming it. */
static void test_checksum_formats(void)
{
    check_begin("shard_checksums_old_and_foreign");
    uint8_t img[2 * 60];
    fill(img, 2, 5);
    int32_t labels[2] = {0, 1};
    char *paths[2] = {"a", "b"};
    char p[300];
    ds_shard_meta m = meta_for(0, 1, 0);
    ds_shard s;
    int (*edits[3])(hid_t) = {drop_checksums, other_algorithm, int32_checksums};
    for (int e = 0; e < 3; e++) {
        snprintf(p, sizeof p, "%s/sums%d.h5", dir, e);
        CHECK(ds_shard_write(p, &m, img, labels, paths, 2) == 0, "write");
        CHECK(h5_edit(p, edits[e]) == 0, "edit %d", e);
        char why[256] = "";
        int rc = ds_shard_open_quiet(&s, p, why, sizeof why);
        if (e == 0) {
            CHECK(rc == 0 && s.checksums == NULL, "shard without /checksums: %s", why);
            img[3] ^= 1;
            CHECK(rc != 0 || ds_shard_check_image(&s, 0, img) == 0, "an unchecked shard refused an image");
            img[3] ^= 1;
            if (rc == 0) ds_shard_close(&s);
        } else {
            CHECK(rc != 0 && strstr(why, "/checksums"), "edit %d accepted or not named: %s", e, why);
        }
    }
    check_end();
}

/* Edits for test_entry_checksums: one label, one path changed as a damaged file would be. */
static int relabel(hid_t f)
{
    hid_t d = H5Dopen2(f, "labels", H5P_DEFAULT);
    int32_t v[3];
    int rc = d < 0 || H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0 ? -1 : 0;
    v[1] ^= 1; /* 0 -> 1: still a valid class, so only the checksum can tell */
    if (rc == 0 && H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) rc = -1;
    if (d >= 0) H5Dclose(d);
    return rc;
}
static int rename_path(hid_t f)
{
    hid_t d = H5Dopen2(f, "paths", H5P_DEFAULT), t = H5Dget_type(d);
    const char *v[3] = {"emu/a.jpg", "cat/b.JPEG", "dog/c.pnf"};
    int rc = d < 0 || H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0 ? -1 : 0;
    if (t >= 0) H5Tclose(t);
    if (d >= 0) H5Dclose(d);
    return rc;
}
static int drop_entry_checksums(hid_t f)
{
    return H5Ldelete(f, "label_checksums", H5P_DEFAULT) < 0 || H5Ldelete(f, "path_checksums", H5P_DEFAULT) < 0 ? -1
                                                                                                               : 0;
}

/* /label_checksums and /path_checksums: XXH3-64 of each label's 4 little-endian bytes and of
 * each path's bytes; a changed label or path is refused naming the image and the field, and
 * ds_shard_check_entries finds every one; a shard without them (packed before them) opens. */
static void test_entry_checksums(void)
{
    check_begin("shard_label_path_checksums");
    uint8_t img[3 * 60];
    fill(img, 3, 3);
    int32_t labels[3] = {2, 0, 1};
    char *paths[3] = {"emu/a.jpg", "cat/b.JPEG", "dog/c.png"};
    char p[300], why[1024];
    ds_shard s;
    for (int compress = 0; compress <= 1; compress++) {
        snprintf(p, sizeof p, "%s/entries%d.h5", dir, compress);
        ds_shard_meta m = meta_for(0, 1, compress);
        CHECK(ds_shard_write(p, &m, img, labels, paths, 3) == 0, "write");
        CHECK(ds_shard_open(&s, p) == 0, "open");
        CHECK(s.label_checksums && s.path_checksums, "no /label_checksums or /path_checksums");
        for (int i = 0; i < 3 && s.label_checksums && s.path_checksums; i++) {
            uint8_t le[4] = {(uint8_t)labels[i], 0, 0, 0};
            CHECK(s.label_checksums[i] == XXH3_64bits(le, 4), "label checksum %d", i);
            CHECK(s.path_checksums[i] == XXH3_64bits(paths[i], strlen(paths[i])), "path checksum %d", i);
        }
        ds_shard_close(&s);
    }
    CHECK(h5_edit(p, relabel) == 0 && h5_edit(p, rename_path) == 0, "edit");
    CHECK(ds_shard_open(&s, p) != 0, "a changed label and path were accepted");
    CHECK(ds_shard_open_quiet(&s, p, why, sizeof why) != 0, "accepted quietly");
    CHECK(strstr(why, "image 1 (cat/b.JPEG) has a damaged label: /labels[1] = 1 does not match /label_checksums[1]") &&
          strstr(why, "1 more damaged"), "first problem not named: %s", why);
    CHECK(ds_shard_open_structure(&s, p) == 0, "structure refused");
    uint8_t bad[3] = {0, 0, 0};
    CHECK(ds_shard_check_entries(&s, bad) == 2 && !bad[0] && bad[1] && bad[2], "bad %d %d %d", bad[0], bad[1], bad[2]);
    ds_shard_close(&s);

    /* Packed before them: opens, uncovered, labels still range-checked. */
    CHECK(h5_edit(p, drop_entry_checksums) == 0, "drop");
    CHECK(ds_shard_open(&s, p) == 0 && !s.label_checksums && !s.path_checksums, "older shard refused");
    ds_shard_close(&s);
    check_end();
}

static void test_set(void)
{
    check_begin("shardset_open_locate");
    char sd[300], p[340];
    snprintf(sd, sizeof sd, "%s/set", dir);
    CHECK(ds_mkdirs(sd) == 0, "mkdir");
    uint8_t img[5 * 60];
    fill(img, 5, 9);
    int32_t labels[5] = {0, 1, 2, 0, 1};
    char *paths[5] = {"a", "b", "c", "d", "e"};
    size_t sizes[3] = {3, 0, 2};
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/shard-%05d.h5", sd, i);
        ds_shard_meta m = meta_for(i, 3, 0);
        CHECK(ds_shard_write(p, &m, img + at * 60, labels + at, paths + at, sizes[i]) == 0, "write %d", i);
        at += sizes[i];
    }
    ds_shardset set;
    CHECK(ds_shardset_open(&set, sd) == 0, "open set");
    CHECK(set.count == 3 && set.total == 5, "count %d total %zu", set.count, set.total);
    int want_shard[5] = {0, 0, 0, 2, 2};
    size_t want_local[5] = {0, 1, 2, 0, 1};
    for (size_t g = 0; g < 5 && set.count == 3; g++) {
        int sh;
        size_t loc;
        ds_shardset_locate(&set, g, &sh, &loc);
        CHECK(sh == want_shard[g] && loc == want_local[g], "locate %zu -> %d/%zu", g, sh, loc);
        CHECK(!strcmp(set.shards[sh].paths[loc], paths[g]), "path at %zu", g);
    }
    if (set.count) ds_shardset_close(&set);

    /* A gap in the numbering, and a shard from another set. */
    snprintf(p, sizeof p, "%s/shard-00001.h5", sd);
    CHECK(remove(p) == 0, "remove");
    CHECK(ds_shardset_open(&set, sd) != 0, "gap accepted");
    ds_shard_meta m = meta_for(1, 3, 0);
    m.height = 5;
    uint8_t big[75];
    memset(big, 0, sizeof big);
    CHECK(ds_shard_write(p, &m, big, labels, paths, 1) == 0, "write odd shard");
    CHECK(ds_shardset_open(&set, sd) != 0, "mismatched size accepted");
    CHECK(ds_shardset_open(&set, dir) != 0, "directory without a full set accepted");
    check_end();
}

int main(void)
{
    snprintf(dir, sizeof dir, "%s/test_shard.XXXXXX", getenv("DS_TEST_TMP") ? getenv("DS_TEST_TMP") : "/tmp");
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    test_roundtrip(0);
    test_roundtrip(5);
    test_stream();
    test_refusals();
    test_checksum_formats();
    test_entry_checksums();
    test_set();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
    return check_exit();
}
