/* checksum_bench: what verifying /checksums costs the loader (docs/DESIGN.md §2).
 *
 *   checksum_bench [images] [size] [epochs] [loader_threads]     defaults 1024 256 3 2
 *
 * Writes a set of 4 contiguous shards of `images` size x size x 3 images twice: as dspack
 * does (with /checksums) and the same shards without /checksums (as packed before checksums:
 * read unverified). With both in the page cache it times, on one thread in CPU seconds,
 * pread of every image alone and pread + XXH3-64, then the loader (ds_loader: training
 * order, centre crop, the default `pad 0`) over each set on `loader_threads` threads: its
 * first epoch (the source checks each image the first time it reads it) and `epochs` more,
 * in CPU time per image of all threads, as the machine may be shared. The first epoch also
 * pays the loader's first touch of its batch memory, with or without checksums. */
#include "fsutil.h"
#include "loader.h"
#include "log.h"
#include "shard.h"
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SHARDS 4

static int make_set(const char *dir, size_t n, int size, int with_sums)
{
    static char *classes[] = {"a", "b"};
    if (ds_mkdirs(dir)) return -1;
    size_t per = (n + SHARDS - 1) / SHARDS, bytes = (size_t)size * size * 3;
    uint8_t *img = ds_xmalloc(per * bytes);
    int32_t *labels = ds_xmalloc(per * sizeof *labels);
    char **paths = ds_xmalloc(per * sizeof *paths);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < per * bytes; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: incompressible pixels */
        img[i] = (uint8_t)x;
    }
    for (size_t i = 0; i < per; i++) {
        labels[i] = (int32_t)(i % 2);
        paths[i] = ds_xmalloc(32);
        snprintf(paths[i], 32, "a/%zu.JPEG", i);
    }
    int rc = 0;
    for (int k = 0; k < SHARDS && rc == 0; k++) {
        size_t count = n - k * per < per ? n - k * per : per;
        char name[32];
        snprintf(name, sizeof name, "shard-%05d.h5", k);
        char *p = ds_path_join(dir, name);
        ds_shard_meta m = {.height = size, .width = size, .fit = DS_FIT_CROP, .shard_index = k, .shard_count = SHARDS,
                           .classes = classes, .num_classes = 2};
        img[0] = (uint8_t)k;
        rc = ds_shard_write(p, &m, img, labels, paths, count);
        if (rc == 0 && !with_sums) {
            hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
            rc = f < 0 || H5Ldelete(f, "checksums", H5P_DEFAULT) < 0 ? ds_err("%s: cannot delete /checksums", p) : 0;
            if (f >= 0) H5Fclose(f);
        }
        free(p);
    }
    for (size_t i = 0; i < per; i++) free(paths[i]);
    free(paths);
    free(labels);
    free(img);
    return rc;
}

static double thread_cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Reads every image of the set once on this thread, hashing each when `hash`; images per
 * CPU second of this thread (the machine's other load does not count). */
static double read_all(const ds_shardset *set, int hash, uint64_t *sink)
{
    size_t bytes = (size_t)set->shards[0].height * set->shards[0].width * 3;
    uint8_t *buf = ds_xmalloc(bytes);
    double t0 = thread_cpu_now();
    for (int k = 0; k < set->count; k++) {
        const ds_shard *s = &set->shards[k];
        int fd = open(s->path, O_RDONLY);
        if (fd < 0) ds_die("%s: %s", s->path, strerror(errno));
        for (size_t i = 0; i < s->n; i++) {
            if (pread(fd, buf, bytes, s->images_offset + (off_t)(i * bytes)) != (ssize_t)bytes)
                ds_die("%s: short read", s->path);
            *sink += hash ? ds_shard_checksum(buf, bytes) : buf[i % bytes];
        }
        close(fd);
    }
    double dt = thread_cpu_now() - t0;
    free(buf);
    return set->total / dt;
}

/* CPU seconds of the whole process (user + system, every thread). */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The loader over the set: epoch 0 (each image read for the first time: every one checked)
 * and then `epochs` more (none checked again). cpu_us[0], cpu_us[1]: CPU microseconds per
 * image in each (what the checks cost whatever else the machine runs). */
static void loader_cpu(const char *dir, int size, int epochs, int threads, double cpu_us[2])
{
    ds_source src;
    if (ds_source_open_shards(&src, dir)) ds_die("cannot open %s", dir);
    ds_loader_config c = {.batch = 32, .world = 1, .rank = 0, .accum = 1, .crop = size * 7 / 8, .train = 1,
                          .seed = 1, .threads = threads};
    ds_loader *L = ds_loader_new(&src, &c);
    if (!L) ds_die("cannot make a loader");
    for (int part = 0; part < 2; part++) {
        size_t images = 0;
        double c0 = cpu_now();
        for (int e = part; e < (part ? 1 + epochs : 1); e++) {
            if (ds_loader_start(L, e, 0)) ds_die("loader start");
            ds_batch *b;
            int rc;
            while ((rc = ds_loader_next(L, &b)) == 1) {
                images += (size_t)b->n;
                ds_loader_release(L, b);
            }
            if (rc < 0) ds_die("loader failed");
        }
        cpu_us[part] = (cpu_now() - c0) / images * 1e6;
    }
    ds_loader_free(L);
    ds_source_close(&src);
}

int main(int argc, char **argv)
{
    ds_log_init("checksum_bench");
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
    int size = argc > 2 ? atoi(argv[2]) : 256, epochs = argc > 3 ? atoi(argv[3]) : 3;
    int threads = argc > 4 ? atoi(argv[4]) : 2;
    if (n < 4 * 32 || size < 8 || epochs < 1 || threads < 1)
        ds_die("usage: checksum_bench [images >= 128] [size >= 8] [epochs >= 1] [threads >= 1]");
    char dir[256];
    snprintf(dir, sizeof dir, "%s/checksum_bench.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) ds_die("mkdtemp: %s", strerror(errno));
    char *with_dir = ds_path_join(dir, "with"), *without_dir = ds_path_join(dir, "without");
    if (make_set(with_dir, n, size, 1) || make_set(without_dir, n, size, 0)) ds_die("cannot write the shards");
    double mb = (double)size * size * 3 / 1e9;

    ds_shardset set;
    if (ds_shardset_open(&set, with_dir)) ds_die("cannot open %s", with_dir);
    uint64_t sink = 0;
    read_all(&set, 0, &sink); /* into the page cache */
    double best_read = 0, best_hash = 0;
    for (int r = 0; r < 5; r++) {
        double a = read_all(&set, 0, &sink), b = read_all(&set, 1, &sink);
        if (a > best_read) best_read = a;
        if (b > best_hash) best_hash = b;
    }
    ds_shardset_close(&set);
    printf("%zu images of %dx%dx3 (%.1f MB) in %d shards, page cache; best of 5, one thread, per CPU second:\n", n,
           size, size, n * mb * 1e3, SHARDS);
    printf("  pread               %9.0f images/s  %6.2f GB/s\n", best_read, best_read * mb);
    printf("  pread + xxh3-64     %9.0f images/s  %6.2f GB/s  (+%.0f%% time)\n", best_hash, best_hash * mb,
           100 * (best_read / best_hash - 1));

    double without[2] = {1e30, 1e30}, with[2] = {1e30, 1e30}, a[2], b[2];
    for (int r = 0; r < 3; r++) { /* alternated, best of 3: the machine's other load moves both alike */
        loader_cpu(without_dir, size, epochs, threads, a);
        loader_cpu(with_dir, size, epochs, threads, b);
        for (int p = 0; p < 2; p++) {
            if (a[p] < without[p]) without[p] = a[p];
            if (b[p] < with[p]) with[p] = b[p];
        }
    }
    printf("loader, %d threads, batch 32, CPU time of all threads per image, best of 3:\n", threads);
    printf("                      first epoch   next %d epochs\n", epochs);
    printf("  without /checksums  %8.1f us   %8.1f us\n", without[0], without[1]);
    printf("  with /checksums     %8.1f us   %8.1f us\n", with[0], with[1]);
    /* Later epochs check nothing (their difference is the machine's noise): a run pays the
     * first epoch's difference once. */
    printf("  difference          %+8.1f%%    %+8.1f%%    (the first epoch's, over a 90-epoch run: %+.1f%%)\n",
           100 * (with[0] / without[0] - 1), 100 * (with[1] / without[1] - 1),
           100 * (with[0] - without[0]) / (without[0] + 89 * without[1]));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cannot remove %s\n", dir);
    free(with_dir);
    free(without_dir);
    return sink == 42; /* keeps the reads from being optimised away */
}
