#include "tbevents.h"

#include "fsutil.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t ds_crc32c(const void *data, size_t n)
{
    pthread_once(&crc_once, crc_table_init);
    const uint8_t *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t ds_tb_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* A growing byte string: one protobuf message being encoded. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} pb;

static void pb_bytes(pb *b, const void *data, size_t n)
{
    if (!n) return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = ds_xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void pb_varint(pb *b, uint64_t v)
{
    uint8_t out[10];
    int n = 0;
    do {
        out[n] = v & 0x7f;
        v >>= 7;
        if (v) out[n] |= 0x80;
        n++;
    } while (v);
    pb_bytes(b, out, (size_t)n);
}

/* Little-endian, whatever the host's order. */
static void pb_fixed(pb *b, uint64_t v, int nbytes)
{
    uint8_t out[8];
    for (int i = 0; i < nbytes; i++) out[i] = (uint8_t)(v >> (8 * i));
    pb_bytes(b, out, (size_t)nbytes);
}

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

static void pb_key(pb *b, int field, int wire) { pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void pb_len(pb *b, int field, const void *data, size_t n)
{
    pb_key(b, field, WIRE_LEN);
    pb_varint(b, n);
    pb_bytes(b, data, n);
}

/* Event's fields 1 and 2. A step of 0 is left out, as proto3 leaves out every default (the
 * file_version record is then byte for byte TensorFlow's); an int64 is its two's complement
 * as a varint. */
static void event_head(pb *b, int64_t step)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    double wall = (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
    uint64_t bits;
    memcpy(&bits, &wall, sizeof bits);
    pb_key(b, 1, WIRE_FIXED64);
    pb_fixed(b, bits, 8);
    if (step) {
        pb_key(b, 2, WIRE_VARINT);
        pb_varint(b, (uint64_t)step);
    }
}

/* One TFRecord around `data`, flushed and fsynced. */
static int write_record(ds_tb_writer *w, const pb *data)
{
    pb rec = {0};
    pb_fixed(&rec, data->n, 8);
    pb_fixed(&rec, ds_tb_mask_crc(ds_crc32c(rec.p, 8)), 4);
    pb_bytes(&rec, data->p, data->n);
    pb_fixed(&rec, ds_tb_mask_crc(ds_crc32c(data->p, data->n)), 4);
    int rc = 0;
    if (fwrite(rec.p, 1, rec.n, w->f) != rec.n || fflush(w->f) || fsync(fileno(w->f)))
        rc = ds_err("%s: %s", w->path, strerror(errno));
    free(rec.p);
    return rc;
}

/* The largest seconds field among DIR's event file names (0 when there is none). */
static long long newest_stamp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    long long newest = 0;
    size_t plen = strlen(DS_TB_FILE_PREFIX);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, DS_TB_FILE_PREFIX, plen)) continue;
        char *end;
        long long t = strtoll(e->d_name + plen, &end, 10);
        if (end != e->d_name + plen && t > newest) newest = t;
    }
    closedir(d);
    return newest;
}

int ds_tb_open(ds_tb_writer *w, const char *dir, int64_t purge_step)
{
    w->f = NULL;
    w->path = NULL;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) == 0) host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    /* A run resumed within the second its last file was made still gets a later name. */
    long long stamp = (long long)time(NULL), newest = newest_stamp(dir);
    if (stamp <= newest) stamp = newest + 1;
    char name[320];
    snprintf(name, sizeof name, DS_TB_FILE_PREFIX "%010lld.%s", stamp, host);
    w->path = ds_path_join(dir, name);
    int fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 || !(w->f = fdopen(fd, "wb"))) {
        int rc = ds_err("%s: %s", w->path, strerror(errno));
        if (fd >= 0) close(fd);
        free(w->path);
        w->path = NULL;
        return rc;
    }
    pb ev = {0};
    event_head(&ev, 0);
    pb_len(&ev, 3, DS_TB_FILE_VERSION, strlen(DS_TB_FILE_VERSION));
    int rc = write_record(w, &ev);
    if (!rc) {
        ev.n = 0;
        pb log = {0};
        pb_key(&log, 1, WIRE_VARINT);
        pb_varint(&log, 1);  /* SessionLog.START */
        event_head(&ev, purge_step);
        pb_len(&ev, 7, log.p, log.n);
        free(log.p);
        rc = write_record(w, &ev);
    }
    free(ev.p);
    if (!rc) rc = ds_fsync_dir_of(w->path);
    if (rc) ds_tb_close(w);
    return rc;
}

int ds_tb_write_scalars(ds_tb_writer *w, int64_t step, const ds_tb_scalar *s, int n)
{
    pb summary = {0}, value = {0}, ev = {0};
    for (int i = 0; i < n; i++) {
        value.n = 0;
        pb_len(&value, 1, s[i].tag, strlen(s[i].tag));
        float f = (float)s[i].value;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        pb_key(&value, 2, WIRE_FIXED32);
        pb_fixed(&value, bits, 4);
        pb_len(&summary, 1, value.p, value.n);
    }
    event_head(&ev, step);
    pb_len(&ev, 5, summary.p, summary.n);
    int rc = write_record(w, &ev);
    free(summary.p);
    free(value.p);
    free(ev.p);
    return rc;
}

void ds_tb_close(ds_tb_writer *w)
{
    if (w->f) fclose(w->f);
    free(w->path);
    w->f = NULL;
    w->path = NULL;
}
