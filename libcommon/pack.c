/* pack: plan shards over shuffled manifest positions; for each shard, decode its images in
 * parallel while a writer thread streams the finished prefix into the shard file, repeat.
 * Memory: a ring of a few MB of pixels (contiguous shards) or one shard of pixels
 * (compressed shards, written whole), plus each thread's decoder scratch, whatever the
 * dataset size. */
#include "pack.h"

#include "fsutil.h"
#include "json.h"
#include "log.h"
#include "rng.h"
#include "shard.h"

#include <dirent.h>
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REASON_LEN 200

typedef struct {
    const ds_pack_options *o;
    const ds_manifest *m;
    const uint32_t *order;        /* [n]: shuffled position -> manifest index */
    char *const *classes;
    int num_classes, shard_count;
    char *config;                 /* the options that shape the bytes, as JSON */
    ds_decoder **dec;             /* [threads] */
    int threads;
    uint8_t *pixels;              /* [slots, S, S, 3]: a ring (contiguous shards) or the shard */
    size_t slots, chunk;          /* images the pixels hold; images per write when streaming */
    int32_t *labels;              /* [shard_size] */
    char **paths;                 /* [shard_size] */
    char (*reasons)[REASON_LEN];  /* [shard_size]: "" when packed */
    uint8_t *finished;            /* [shard_size]: decoded or rejected (under the writer's lock) */
    FILE *rejected;               /* rejected.txt being written */
    ds_progress progress;
    size_t done;
} packer;

int ds_pack_path_ok(const char *path)
{
    if (path[0] == '/' || path[0] == 0) return 0;
    for (const char *p = path; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') return 0;
        if (!slash) break;
        p = slash + 1;
    }
    return 1;
}

/* Decodes manifest entry `idx` into out; 0 or -1 with reason. */
static int load_one(packer *pk, ds_decoder *dec, size_t idx, uint8_t *out, char *reason)
{
    const ds_manifest_entry *e = &pk->m->items[idx];
    if (!ds_pack_path_ok(e->path)) {
        snprintf(reason, REASON_LEN, "path outside the root");
        return -1;
    }
    if (!ds_utf8_valid(e->path)) {
        snprintf(reason, REASON_LEN, "path is not UTF-8 (a shard's /paths holds UTF-8 strings; rename the file)");
        return -1;
    }
    char *full = ds_path_join(pk->o->root, e->path);
    int rc = ds_image_load_resized(dec, full, pk->o->size, pk->o->fit, pk->o->max_pixels, out, reason, REASON_LEN);
    free(full);
    if (rc && !reason[0]) snprintf(reason, REASON_LEN, "undecodable");
    return rc;
}

static size_t image_bytes(const packer *pk) { return (size_t)pk->o->size * pk->o->size * 3; }

static void shard_range(const packer *pk, int k, size_t *first, size_t *count)
{
    size_t n = pk->m->n, s = pk->o->shard_size;
    *first = (size_t)k * s;
    *count = n - *first < s ? n - *first : s;
}

static char *shard_path(const packer *pk, int k)
{
    char name[32];
    snprintf(name, sizeof name, "shard-%05d.h5", k);
    return ds_path_join(pk->o->out, name);
}

static void note_rejects(packer *pk, size_t first, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (pk->reasons[i][0]) fprintf(pk->rejected, "%s\t%s\n", pk->m->items[pk->order[first + i]].path, pk->reasons[i]);
}

/* --resume: whether shard k on disk is exactly what this run would write. Its images must be
 * the planned entries that decode, in plan order; the planned entries it lacks are decoded
 * again (they are few: the rejects) to recover their reasons and to prove they still fail. */
static int shard_reusable(packer *pk, int k, size_t first, size_t count, size_t *packed)
{
    char *path = shard_path(pk, k);
    if (access(path, F_OK)) {
        free(path);
        return 0;
    }
    int ok = 0;
    ds_shard s;
    char why[256];
    if (ds_shard_open_quiet(&s, path, why, sizeof why)) {
        ds_info("resume: rewriting %s", why);
        free(path);
        return 0;
    }
    if (s.shard_index != k || s.shard_count != pk->shard_count || s.height != pk->o->size || s.width != pk->o->size ||
        s.fit != pk->o->fit || s.num_classes != pk->num_classes || s.n > count ||
        s.contiguous != (pk->o->compress == 0) || !s.checksums || !s.label_checksums || !s.path_checksums)
        /* a missing checksum dataset: packed before dspack wrote it; rewritten to get it */
        goto out;
    for (int c = 0; c < s.num_classes; c++)
        if (strcmp(s.classes[c], pk->classes[c])) goto out;
    /* The config attribute holds every option that shapes the bytes (seed, max-pixels, ...). */
    if (!s.config || strcmp(s.config, pk->config)) goto out;
    size_t j = 0;
    uint8_t *scratch = pk->pixels;
    for (size_t i = 0; i < count; i++) {
        const ds_manifest_entry *e = &pk->m->items[pk->order[first + i]];
        pk->reasons[i][0] = 0;
        if (j < s.n && s.labels[j] == e->label && !strcmp(s.paths[j], e->path)) {
            j++;
            continue;
        }
        if (load_one(pk, pk->dec[0], pk->order[first + i], scratch, pk->reasons[i]) == 0) goto out;
    }
    ok = j == s.n;
    *packed = s.n;
out:
    if (!ok) ds_info("resume: %s does not match this plan, rewriting it", path);
    ds_shard_close(&s);
    free(path);
    return ok;
}

/* The ordered writer of a contiguous shard. The shard file is laid out for every planned
 * image before decoding starts (ds_shard_stream_open); decoders put image i into ring slot
 * i % slots, and this thread writes the finished prefix of the plan into the file, skipping
 * rejects, while later images are still decoding. A decoder waits while its slot still
 * holds an unwritten image. So the disk write overlaps the decode, and memory is a few MB
 * of ring whatever the shard size. Rejected images make the shard shorter than laid out;
 * ds_shard_stream_commit then lays it out again (rejects are rare). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t work;        /* the writer waits here for finished images */
    pthread_cond_t room;        /* decoders wait here for a free slot */
    ds_shard_stream st;
    packer *pk;
    size_t count, chunk, slots; /* images planned; images per write; ring slots */
    size_t ready;               /* plan positions [0, ready) decoded or rejected */
    size_t consumed;            /* plan positions [0, consumed) written or skipped: slots free */
    size_t packed;              /* images written (the writer's own until it is joined) */
    int waiting;                /* decoders waiting for a slot */
    int stop;                   /* every image is finished */
    int failed;                 /* a write failed (the error is printed) */
} shard_writer;

static uint8_t *slot(const packer *pk, const shard_writer *w, size_t i)
{
    return pk->pixels + (i % w->slots) * image_bytes(pk);
}

/* Writes plan positions [from, to) that were not rejected, as runs of adjacent slots. */
static int write_range(shard_writer *w, size_t from, size_t to)
{
    packer *pk = w->pk;
    for (size_t i = from; i < to;) {
        if (pk->reasons[i][0]) {
            i++;
            continue;
        }
        size_t run = 1;
        while (i + run < to && !pk->reasons[i + run][0] && (i + run) % w->slots != 0) run++;
        if (ds_shard_stream_write(&w->st, slot(pk, w, i), w->packed, run)) return -1;
        w->packed += run;
        i += run;
    }
    return 0;
}

static void *writer_main(void *arg)
{
    shard_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && w->ready - w->consumed < w->chunk && !(w->waiting && w->ready > w->consumed))
            pthread_cond_wait(&w->work, &w->mu);
        size_t from = w->consumed, to = w->ready;
        if (from == to) break; /* stop, and everything is written */
        pthread_mutex_unlock(&w->mu);
        int rc = write_range(w, from, to);
        pthread_mutex_lock(&w->mu);
        w->consumed = to;
        pthread_cond_broadcast(&w->room);
        if (rc) {
            w->failed = 1;
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Waits until image i's slot is free; 0 when the writer has failed (skip the image). */
static int writer_claim(shard_writer *w, size_t i)
{
    pthread_mutex_lock(&w->mu);
    while (!w->failed && i >= w->consumed + w->slots) {
        w->waiting++;
        pthread_cond_signal(&w->work);
        pthread_cond_wait(&w->room, &w->mu);
        w->waiting--;
    }
    int ok = !w->failed;
    pthread_mutex_unlock(&w->mu);
    return ok;
}

/* Image i is decoded or rejected: advance the finished prefix, wake the writer when a chunk
 * is due or a decoder waits. reasons[] of the prefix are read under the lock their decoders
 * took after writing them. */
static void writer_note(packer *pk, shard_writer *w, size_t i)
{
    pthread_mutex_lock(&w->mu);
    pk->finished[i] = 1;
    while (w->ready < w->count && pk->finished[w->ready]) w->ready++;
    if (w->ready - w->consumed >= w->chunk || w->waiting) pthread_cond_signal(&w->work);
    pthread_mutex_unlock(&w->mu);
}

/* Moves the labels and paths of the images that decoded to the front, in plan order (the
 * pixels too when the whole shard is in memory); returns how many there are. */
static size_t compact(packer *pk, size_t count, int pixels)
{
    size_t ib = image_bytes(pk), j = 0;
    for (size_t i = 0; i < count; i++) {
        if (pk->reasons[i][0]) continue;
        if (pixels && j != i) memmove(pk->pixels + j * ib, pk->pixels + i * ib, ib);
        pk->labels[j] = pk->labels[i];
        pk->paths[j] = pk->paths[i];
        j++;
    }
    return j;
}

/* Decodes the planned entries of shard k in parallel (each into its own slot, so the result
 * does not depend on which thread took which image) and writes them in plan order, rejects
 * left out: streamed for a contiguous shard, whole for a compressed one. */
static int pack_shard(packer *pk, int k, size_t first, size_t count, size_t *packed)
{
    size_t ib = image_bytes(pk);
    size_t done = pk->done;
    ds_shard_meta meta = {.height = pk->o->size, .width = pk->o->size, .fit = pk->o->fit,
                          .shard_index = k, .shard_count = pk->shard_count, .classes = pk->classes,
                          .num_classes = pk->num_classes, .compress = pk->o->compress, .config = pk->config};
    char *path = shard_path(pk, k);
    /* The plan's labels and paths: the shard's, unless an image is rejected. */
    for (size_t i = 0; i < count; i++) {
        const ds_manifest_entry *e = &pk->m->items[pk->order[first + i]];
        pk->labels[i] = e->label;
        pk->paths[i] = e->path;
        pk->finished[i] = 0;
        pk->reasons[i][0] = 0;
    }
    int streaming = pk->o->compress == 0;
    shard_writer w = {.pk = pk, .count = count, .chunk = pk->chunk, .slots = pk->slots};
    pthread_t writer;
    if (streaming) {
        if (ds_shard_stream_open(&w.st, path, &meta, pk->labels, pk->paths, count)) {
            free(path);
            return -1;
        }
        pthread_mutex_init(&w.mu, NULL);
        pthread_cond_init(&w.work, NULL);
        pthread_cond_init(&w.room, NULL);
        if (pthread_create(&writer, NULL, writer_main, &w)) {
            ds_shard_stream_abort(&w.st);
            pthread_cond_destroy(&w.room);
            pthread_cond_destroy(&w.work);
            pthread_mutex_destroy(&w.mu);
            free(path);
            return ds_err("cannot start the shard writer thread");
        }
    }
    double t_decode = ds_now();
#pragma omp parallel for schedule(dynamic, 1) num_threads(pk->threads)
    for (size_t i = 0; i < count; i++) {
        int t = omp_get_thread_num();
        if (streaming) {
            if (writer_claim(&w, i)) load_one(pk, pk->dec[t], pk->order[first + i], slot(pk, &w, i), pk->reasons[i]);
            writer_note(pk, &w, i);
        } else {
            load_one(pk, pk->dec[t], pk->order[first + i], pk->pixels + i * ib, pk->reasons[i]);
        }
        size_t now;
#pragma omp atomic capture
        now = ++done;
        /* The bar is not thread-safe: only thread 0 draws it. */
        if (t == 0) ds_progress_update(&pk->progress, (int64_t)now);
    }
    double t_write = ds_now();
    int rc;
    size_t j = compact(pk, count, !streaming);
    if (streaming) {
        pthread_mutex_lock(&w.mu);
        w.stop = 1;
        pthread_cond_signal(&w.work);
        pthread_mutex_unlock(&w.mu);
        pthread_join(writer, NULL);
        pthread_cond_destroy(&w.room);
        pthread_cond_destroy(&w.work);
        pthread_mutex_destroy(&w.mu);
        if (w.failed) {
            ds_shard_stream_abort(&w.st);
            rc = -1;
        } else {
            rc = ds_shard_stream_commit(&w.st, pk->labels, pk->paths, j);
        }
    } else {
        rc = ds_shard_write(path, &meta, pk->pixels, pk->labels, pk->paths, j);
    }
    ds_debug("%s: %zu images, decoded in %.2f s, %s %.2f s after", path, j, t_write - t_decode,
             streaming ? "streamed, committed" : "written", ds_now() - t_write);
    free(path);
    *packed = j;
    return rc;
}

/* Refuses an output directory that already holds shards, unless --resume (which keeps the
 * ones that match) or --overwrite says to replace them; a new or shard-less one passes. */
static int check_out_dir(const ds_pack_options *o)
{
    DIR *d = opendir(o->out);
    /* Absent: created later; not a directory: ds_mkdirs says so. */
    if (!d) return errno == ENOENT || errno == ENOTDIR ? 0 : ds_err("%s: %s", o->out, strerror(errno));
    int shards = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        shards += ds_shard_file_index(e->d_name) >= 0;
    closedir(d);
    if (shards == 0 || o->resume) return 0;
    if (o->overwrite) {
        ds_info("replacing the %d shard%s in %s (--overwrite)", shards, shards == 1 ? "" : "s", o->out);
        return 0;
    }
    /* What the set is, from its first shard alone (cheap whatever the set's size). */
    char what[160] = "", why[256];
    char *first = ds_path_join(o->out, "shard-00000.h5");
    ds_shard s;
    if (ds_shard_open_quiet(&s, first, why, sizeof why) == 0) {
        snprintf(what, sizeof what, " (shard-00000.h5: %zu images of %dx%d, fit %s, 1 of %d)", s.n, s.height, s.width,
                 ds_fit_name(s.fit), s.shard_count);
        ds_shard_close(&s);
    }
    free(first);
    return ds_err("%s already holds a shard set of %d shard file%s%s: replace it with --overwrite, continue an "
                  "interrupted run with --resume, or choose another -o", o->out, shards, shards == 1 ? "" : "s", what);
}

/* Removes shard files (and leftover .tmp files) a previous run with another plan left
 * beyond this plan's last shard, so the directory is one consistent set. */
static int remove_stale(const char *out, int shard_count)
{
    DIR *d = opendir(out);
    if (!d) return ds_err("%s: %s", out, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        const char *name = e->d_name, *p = name + 6;
        if (strncmp(name, "shard-", 6) || *p < '0' || *p > '9') continue;
        long idx = strtol(p, (char **)&p, 10);
        size_t plen = strlen(p);
        int is_tmp = !strncmp(p, ".h5.", 4) && plen >= 7 && !strcmp(p + plen - 4, ".tmp");
        if (!is_tmp && (strcmp(p, ".h5") || idx < shard_count)) continue;
        char *full = ds_path_join(out, name);
        if (unlink(full) && errno != ENOENT) rc = ds_err("cannot remove stale %s: %s", full, strerror(errno));
        free(full);
    }
    closedir(d);
    return rc;
}

static char *make_config(const ds_pack_options *o)
{
    ds_json j;
    ds_json_init(&j, DS_JSON_SPACED);
    ds_json_begin(&j, NULL);
    ds_json_int(&j, "size", o->size);
    ds_json_string(&j, "fit", ds_fit_name(o->fit));
    ds_json_uint(&j, "shard_size", o->shard_size);
    ds_json_int(&j, "compress", o->compress);
    ds_json_uint(&j, "seed", (unsigned long long)o->seed);
    ds_json_bool(&j, "shuffle", o->shuffle);
    ds_json_uint(&j, "max_pixels", (unsigned long long)o->max_pixels);
    ds_json_end(&j);
    return ds_json_release(&j);
}

int ds_pack_run(const ds_pack_options *o, const ds_manifest *m, char *const *classes, int num_classes,
                ds_pack_result *r)
{
    memset(r, 0, sizeof *r);
    double t0 = ds_now();
    packer pk = {.o = o, .m = m, .classes = classes, .num_classes = num_classes};
    pk.shard_count = (int)((m->n + o->shard_size - 1) / o->shard_size);
    if (check_out_dir(o)) return -1;
    if (ds_mkdirs(o->out)) return -1;
    if (remove_stale(o->out, pk.shard_count)) return -1;

    uint32_t *order = ds_xmalloc((m->n ? m->n : 1) * sizeof *order);
    if (o->shuffle) {
        ds_rng rng;
        ds_rng_init(&rng, o->seed, DS_RNG_PACK_ORDER, 0);
        ds_rng_permutation(&rng, order, m->n);
    } else {
        for (size_t i = 0; i < m->n; i++) order[i] = (uint32_t)i;
    }
    pk.order = order;
    pk.config = make_config(o);
    pk.threads = o->threads > 0 ? o->threads : omp_get_max_threads();
    pk.dec = ds_xcalloc((size_t)pk.threads, sizeof *pk.dec);
    int rc = -1;
    for (int t = 0; t < pk.threads; t++)
        if (!(pk.dec[t] = ds_decoder_new())) {
            ds_err("cannot create a JPEG decoder (out of memory)");
            goto out;
        }
    size_t cap = m->n < o->shard_size ? m->n : o->shard_size;
    if (cap == 0) cap = 1;
    /* Contiguous shards stream through a ring: writes of ~4 MB, three writes' worth of slots
     * so decoders rarely wait for the writer. Compressed shards are written whole. */
    pk.chunk = ((size_t)4 << 20) / image_bytes(&pk) + 1;
    pk.slots = o->compress ? cap : 3 * pk.chunk + 2 * (size_t)pk.threads;
    if (pk.slots > cap) pk.slots = cap;
    size_t bytes = pk.slots * image_bytes(&pk);
    if (!(pk.pixels = malloc(bytes))) {
        ds_err("cannot allocate %.0f MB of pixels: lower --shard-size or --size", bytes / 1e6);
        goto out;
    }
    pk.labels = ds_xmalloc(cap * sizeof *pk.labels);
    pk.paths = ds_xmalloc(cap * sizeof *pk.paths);
    pk.reasons = ds_xmalloc(cap * sizeof *pk.reasons);
    pk.finished = ds_xmalloc(cap);

    char *rej_path = ds_path_join(o->out, "rejected.txt");
    ds_atomic rej;
    int rej_rc = ds_atomic_open(&rej, rej_path);
    free(rej_path);
    if (rej_rc) goto out;
    pk.rejected = rej.f;

    ds_progress_start(&pk.progress, "pack", "img", (int64_t)m->n, o->progress);
    for (int k = 0; k < pk.shard_count; k++) {
        size_t first, count, packed = 0;
        shard_range(&pk, k, &first, &count);
        if (o->resume && shard_reusable(&pk, k, first, count, &packed)) {
            r->shards_kept++;
        } else if (pack_shard(&pk, k, first, count, &packed)) {
            ds_atomic_abort(&rej);
            goto out;
        }
        note_rejects(&pk, first, count);
        r->packed += packed;
        r->rejected += count - packed;
        pk.done = first + count;
        ds_progress_update(&pk.progress, (int64_t)pk.done);
    }
    ds_progress_end(&pk.progress);
    if (ferror(rej.f)) {
        ds_atomic_abort(&rej);
        ds_err("%s/rejected.txt: write error", o->out);
        goto out;
    }
    if (ds_atomic_commit(&rej)) goto out;
    r->shards = pk.shard_count;
    rc = 0;
out:
    r->seconds = ds_now() - t0;
    for (int t = 0; t < pk.threads; t++) ds_decoder_free(pk.dec[t]);
    free(pk.dec);
    free(pk.pixels);
    free(pk.labels);
    free(pk.paths);
    free(pk.reasons);
    free(pk.finished);
    free(pk.config);
    free(order);
    return rc;
}
