/* loader_bench: images/s of the training input pipeline over a shard directory, per loader
 * thread count: (a) the loader alone (shard reads + sampling, batches consumed and given
 * back), (b) the loader plus the CPU backend's input op on each batch, as dstrain's feed
 * runs it.
 *
 *   loader_bench [options] SHARD_DIR
 *
 * Each augmentation names the ops it times (--augment, the table `augments`): the loader's
 * share (sampling, per-image draws, shard reads) and the input op's share on the backend.
 * A new augmentation is one row of that table plus the loader configuration it sets; a
 * way of checking the images read likewise one row of `verifies` (--verify).
 *
 * Cache: --cache warm reads the shards once untimed, then times a second pass (the page
 * cache rate, what a machine with the data set in memory sees); --cache cold drops the
 * shard files' pages (fdatasync + posix_fadvise DONTNEED on every file of the directory,
 * which needs no privilege, unlike /proc/sys/vm/drop_caches) before each timed pass: the
 * disk's rate. Every figure is the wall clock of `--images` images (whole batches, within
 * one epoch) from the workers' start to the last batch given back. */
#include "backend.h"
#include "cli.h"
#include "fsutil.h"
#include "loader.h"
#include "log.h"
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* One row per augmentation the loader knows: what it sets, and the ops it costs. */
typedef struct {
    const char *name;
    int augment, pad;        /* ds_loader_config fields */
    const char *loader_ops;  /* work in the loader threads, per image */
    const char *input_ops;   /* work in the backend's input op, per image */
} augment_mode;

static const augment_mode augments[] = {
    {"crop-flip", DS_AUGMENT_CROP, 0, "Philox crop corner + flip draw, pread of the stored image",
     "normalize_u8: crop, horizontal flip, /255, (x - mean) / std to float"},
    {"rrc", DS_AUGMENT_RRC, 0,
     "Philox RandomResizedCrop box (ds_rrc_box, scale 0.08-1, ratio 3/4-4/3) + flip draw, pread of the stored image",
     "resized_crop_u8: bilinear resize of the box to crop x crop, horizontal flip, /255, (x - mean) / std to float"},
    {"center", DS_AUGMENT_NONE, 0, "centre-crop corner, pread of the stored image",
     "normalize_u8: crop, /255, (x - mean) / std to float"},
};

/* One row per way the loader checks what it reads. The shard source checks each image
 * against the shard's /checksums (XXH3-64) the first time a process reads it: a process's
 * first epoch pays for the hashing, later ones do not. */
typedef struct {
    const char *name;
    int fresh;               /* 1: the source is reopened (nothing checked yet) before each timed pass */
    const char *ops;         /* work in the loader threads, per image */
} verify_mode;

static const verify_mode verifies[] = {
    {"later-epochs", 0, "images already checked by this process: no hashing"},
    {"first-epoch", 1,
     "XXH3-64 of each image against /checksums, as in a process's first epoch (the source reopened before "
     "each timed pass; shards without /checksums are not hashed)"},
};

static const char *threads_list = "1,2,4", *augment = "crop-flip", *verify = "later-epochs", *cache = "warm";
static long long batch = 256, crop = 224, images = 12800, seed = 1;
static int aug_index, verify_index;

static ds_option opts[] = {
    DS_OPT("threads", DS_OPT_STRING, &threads_list, "LIST", "loader thread counts to time, comma-separated"),
    DS_NUM("batch", DS_OPT_INT, &batch, "N", "images per batch", 1, 1 << 20),
    DS_NUM("crop", DS_OPT_INT, &crop, "N", "network input crop x crop", 1, 1 << 16),
    DS_NUM("images", DS_OPT_INT, &images, "N", "images timed per figure (whole batches, at most one epoch)", 1,
           1e12),
    DS_CHOICE_INDEX("augment", &augment, &aug_index, "crop-flip|rrc|center",
                    "crop-flip: random crop and flip; rrc: RandomResizedCrop and flip (dstrain's defaults); "
                    "center: evaluation's centre crop"),
    DS_CHOICE_INDEX("verify", &verify, &verify_index, "later-epochs|first-epoch",
                    "the checksum check on read: later-epochs (done already) or first-epoch (every image hashed)"),
    DS_CHOICE("cache", &cache, "warm|cold", "warm: page cache (second pass); cold: shard pages dropped first"),
    DS_NUM("seed", DS_OPT_INT, &seed, "S", "sampling seed", 0, 9.2e18),
    {0},
};

static ds_cli cli = {
    .prog = "loader_bench",
    .args = "[options] SHARD_DIR",
    .summary = "Images/s of the loader alone and of the loader plus the CPU input op, per thread count.",
    .min_pos = 1,
    .max_pos = 1,
    .opts = opts,
};

/* Drops the page cache of every .h5 file in dir (written pages are flushed first, since
 * DONTNEED leaves dirty pages in memory). Returns the bytes dropped, -1 on error. */
static long long drop_cache(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return ds_err("%s: %s", dir, strerror(errno)), -1;
    long long bytes = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 3, ".h5")) continue;
        char *p = ds_path_join(dir, e->d_name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || fdatasync(fd) || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)) {
            ds_err("%s: cannot drop its cached pages: %s", p, strerror(errno));
            if (fd >= 0) close(fd);
            free(p);
            closedir(d);
            return -1;
        }
        bytes += lseek(fd, 0, SEEK_END);
        close(fd);
        free(p);
    }
    closedir(d);
    return bytes;
}

/* Times one pass of epoch 0 over `steps` batches, from the start of the workers to the
 * release of the last batch; with `out`, each batch also goes through normalize_u8 into it.
 * Returns images/s, or -1. */
static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* *per_cpu gets images per CPU second of the whole process (all threads): on a machine shared
 * with other jobs it moves less than the wall-clock rate. */
static double timed_pass(ds_loader *L, const ds_loader_config *c, int64_t steps, const float *mean, const float *sd,
                         float *out, double *per_cpu)
{
    double t0 = ds_now(), c0 = cpu_seconds();
    if (ds_loader_start(L, 0, 0)) return -1;
    ds_batch *b;
    int rc = 1;
    int64_t done = 0, counted = 0;
    while (done < steps && (rc = ds_loader_next(L, &b)) == 1) {
        if (out && b->resize)  /* the input op ds_feed_batch would run */
            ds_backend_cpu.resized_crop_u8(out, b->images, b->n, b->height, b->width, c->crop, c->crop, b->y0, b->x0,
                                           b->bh, b->bw, b->flip, mean, sd);
        else if (out)
            ds_backend_cpu.normalize_u8(out, b->images, b->n, b->height, b->width, c->crop, c->crop, b->y0, b->x0,
                                        b->flip, mean, sd);
        counted += b->n;
        ds_loader_release(L, b);
        done++;
    }
    double dt = ds_now() - t0, cpu = cpu_seconds() - c0;
    ds_loader_stop(L);
    *per_cpu = cpu > 0 ? (double)counted / cpu : 0;
    if (rc < 0) return -1;
    return dt > 0 ? (double)counted / dt : 0;
}

int main(int argc, char **argv)
{
    char **pos;
    ds_cli_parse(&cli, argc, argv, &pos);
    const char *dir = pos[0];
    int cold = !strcmp(cache, "cold");
    const augment_mode *am = &augments[aug_index];
    const verify_mode *vm = &verifies[verify_index];

    int nthreads[16], nt = 0;
    for (const char *p = threads_list; *p && nt < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 256 || (*end && *end != ',')) ds_usage_error(&cli, "--threads: bad list '%s'", threads_list);
        nthreads[nt++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (nt == 0) ds_usage_error(&cli, "--threads: empty list");

    ds_source src;
    if (ds_source_open_shards(&src, dir)) return 1;
    ds_loader_config c = {.batch = (int)batch, .world = 1, .rank = 0, .accum = 1, .crop = (int)crop,
                          .pad = am->pad, .augment = am->augment, .rrc_scale = {0.08, 1.0},
                          .rrc_ratio = {3.0 / 4.0, 4.0 / 3.0}, .train = 1, .seed = (uint64_t)seed};
    int64_t steps = (int64_t)((images + batch - 1) / batch);
    int64_t epoch_steps = ds_loader_train_steps(&c, src.n);
    if (steps > epoch_steps) steps = epoch_steps;
    if (steps < 1) {
        ds_err("%s: %zu images are fewer than one batch of %lld", dir, src.n, batch);
        ds_source_close(&src);
        return 1;
    }
    float *out = ds_xmalloc((size_t)batch * crop * crop * 3 * sizeof *out);
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};

    printf("loader_bench: %s  %zu images %dx%d  batch %lld  crop %lld  %lld images per figure  cache %s\n", dir,
           src.n, src.height, src.width, batch, crop, (long long)steps * batch, cache);
    printf("augment %s, verify %s\n  loader: %s; %s\n  input:  %s (cpu backend, %s)\n", am->name, vm->name,
           am->loader_ops, vm->ops, am->input_ops,
           getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "OpenMP default threads");
    printf("%-8s %14s %14s %20s %14s\n", "threads", "loader img/s", "img/cpu-s", "loader+input img/s", "img/cpu-s");
    int rc = 0;
    for (int k = 0; k < nt && !rc; k++) {
        c.threads = nthreads[k];
        double rate[2], per_cpu[2];
        for (int input = 0; input < 2 && !rc; input++) {
            float *o = input ? out : NULL;
            ds_loader *L = ds_loader_new(&src, &c);
            /* The untimed pass faults in the ring (and fills the page cache when warm). */
            rc = !L || timed_pass(L, &c, steps, mean, sd, o, &per_cpu[input]) < 0 || (cold && drop_cache(dir) < 0);
            if (!rc && vm->fresh) {
                /* Reopened in place: the stopped loader reads the new source through the same
                 * pointer, into its ring already faulted in (a first epoch pays that once per
                 * process, which a short pass would overstate). */
                size_t n = src.n;
                ds_source_close(&src);
                rc = ds_source_open_shards(&src, dir) || src.n != n;
            }
            if (!rc && (rate[input] = timed_pass(L, &c, steps, mean, sd, o, &per_cpu[input])) < 0) rc = 1;
            ds_loader_free(L);
        }
        if (!rc) {
            printf("%-8d %14.0f %14.0f %20.0f %14.0f\n", c.threads, rate[0], per_cpu[0], rate[1], per_cpu[1]);
            fflush(stdout);
        }
    }
    free(out);
    ds_source_close(&src);
    return rc;
}
