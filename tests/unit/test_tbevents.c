/* tbevents: the CRC-32C against published check values, the TFRecord framing against the
 * first bytes every TensorFlow event file starts with, and event files written by the module
 * (directly and through rundir's metrics log) read back by the tests' own decoder
 * (tests/tbdecode.h): every record's CRCs, tags, steps, float32 values, the SessionLog START;
 * a file made later sorts after; a flipped byte and a cut file are reported. */
#include "../check.h"
#include "../tbdecode.h"
#include "fsutil.h"
#include "rundir.h"
#include "tbevents.h"

#include <dirent.h>
#include <limits.h>
#include <sys/time.h>
#include <unistd.h>

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* Reads every record of `path` into ev (up to max); returns the count, or -1 with the
 * decoder's reason in err. */
static int read_all(const char *path, tbd_event *ev, int max, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open %s", path);
        return -1;
    }
    tbd_reader r;
    tbd_open(&r, f);
    int n = 0, rc;
    tbd_event e;
    while ((rc = tbd_next(&r, &e)) == 1)
        if (n < max) ev[n++] = e;
    fclose(f);
    if (rc < 0) snprintf(err, errlen, "%s", r.err);
    return rc < 0 ? -1 : n;
}

/* The event files in dir, in name order (TensorBoard's reading order); returns the count. */
static int event_files(const char *dir, char names[][320], int max)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20) && n < max) snprintf(names[n++], 320, "%s", e->d_name);
    if (d) closedir(d);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char t[320];
                memcpy(t, names[i], 320);
                memcpy(names[i], names[j], 320);
                memcpy(names[j], t, 320);
            }
    return n;
}

static const tbd_value *find(const tbd_event *e, const char *tag)
{
    for (int i = 0; i < e->nvalues; i++)
        if (!strcmp(e->values[i].tag, tag)) return &e->values[i];
    return NULL;
}

static void flip_byte(const char *path, long offset)
{
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, offset, SEEK_SET);
    int c = fgetc(f);
    fseek(f, offset, SEEK_SET);
    fputc(c ^ 0x20, f);
    fclose(f);
}

int main(void)
{
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/tbevents.XXXXXX", getenv("DS_TEST_TMP") ? getenv("DS_TEST_TMP") : "/tmp");
    char *dir = mkdtemp(tmpl);
    if (!dir) return 1;
    char err[256] = "";

    check_begin("crc32c_check_values");
    /* "123456789" is every CRC catalogue's check string; 32 zeros and 32 0xff are RFC 3720's
     * (iSCSI, which CRC-32C was chosen for) B.4 vectors. */
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xff, sizeof ones);
    CHECK(ds_crc32c("123456789", 9) == 0xe3069283u, "got %08x", ds_crc32c("123456789", 9));
    CHECK(ds_crc32c(zeros, 32) == 0x8a9136aau, "got %08x", ds_crc32c(zeros, 32));
    CHECK(ds_crc32c(ones, 32) == 0x62a8ab43u, "got %08x", ds_crc32c(ones, 32));
    CHECK(ds_crc32c("", 0) == 0, "got %08x", ds_crc32c("", 0));
    CHECK(tbd_crc32c((const uint8_t *)"123456789", 9) == 0xe3069283u, "the decoder's own CRC is wrong");
    check_end();

    check_begin("file_starts_as_tensorflows");
    /* Every event file TensorFlow or PyTorch writes starts with the same 12 bytes: the
     * file_version record's length (24: wall_time 9 bytes + "brain.Event:2" 15) and its masked
     * CRC. They pin the framing, the CRC and the mask constant at once. */
    ds_tb_writer w;
    CHECK(ds_tb_open(&w, dir, 1) == 0, "open");
    char first[320];
    snprintf(first, sizeof first, "%s", w.path ? w.path : "");
    ds_tb_close(&w);
    size_t len = 0;
    uint8_t *bytes = (uint8_t *)ds_read_file(first, &len);
    static const uint8_t head[12] = {0x18, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22};
    CHECK(bytes && len >= 12 && !memcmp(bytes, head, 12), "the first 12 bytes differ from TensorFlow's");
    CHECK(bytes && len >= 40 && !memcmp(bytes + 12 + 9, "\x1a\x0d" "brain.Event:2", 15), "file_version bytes");
    /* The second record, SessionLog START at step 1: wall_time, step (field 2, varint 1), then
     * session_log (field 7: key 0x3a, 2 bytes) { status (field 1) = START (1) }, as TensorBoard's
     * event.proto numbers them. */
    static const uint8_t start[] = {0x10, 0x01, 0x3a, 0x02, 0x08, 0x01};
    CHECK(bytes && len == 71 && tbd_le(bytes + 40, 8) == 15 && !memcmp(bytes + 40 + 12 + 9, start, sizeof start),
          "the SessionLog START record's bytes (file of %zu bytes)", len);
    free(bytes);
    check_end();

    check_begin("scalars_read_back");
    double t0 = wall_now();
    CHECK(ds_tb_open(&w, dir, 7) == 0, "open");
    char second[320];
    snprintf(second, sizeof second, "%s", w.path ? w.path : "");
    char longtag[200];
    memset(longtag, 'x', sizeof longtag - 1);   /* a tag past 127 bytes: a two-byte length */
    longtag[sizeof longtag - 1] = 0;
    memcpy(longtag, "long/", 5);
    ds_tb_scalar row1[] = {{"train/loss", 2.302585093}, {"train/lr", 0.1}, {"a", -1.5e-7}};
    ds_tb_scalar row2[] = {{longtag, 65504.0}, {"train/lr", 1e30}};
    int64_t big = (int64_t)1 << 40;   /* a six-byte varint */
    CHECK(ds_tb_write_scalars(&w, 10, row1, 3) == 0, "write");
    CHECK(ds_tb_write_scalars(&w, big, row2, 2) == 0, "write");
    CHECK(ds_tb_write_scalars(&w, 11, NULL, 0) == 0, "an empty summary");
    ds_tb_close(&w);
    double t1 = wall_now();
    tbd_event ev[8];
    int n = read_all(second, ev, 8, err, sizeof err);
    CHECK(n == 5, "%d records (%s)", n, err);
    if (n == 5) {
        CHECK(!strcmp(ev[0].file_version, "brain.Event:2") && ev[0].step == 0 && ev[0].nvalues == 0,
              "first record: version '%s' step %lld", ev[0].file_version, (long long)ev[0].step);
        CHECK(ev[1].session_status == 1 && ev[1].step == 7 && !ev[1].file_version[0],
              "second record: status %d at step %lld", ev[1].session_status, (long long)ev[1].step);
        CHECK(ev[2].step == 10 && ev[2].nvalues == 3, "step %lld, %d values", (long long)ev[2].step, ev[2].nvalues);
        for (int i = 0; i < 3 && i < ev[2].nvalues; i++)
            CHECK(!strcmp(ev[2].values[i].tag, row1[i].tag) && ev[2].values[i].value == (float)row1[i].value,
                  "value %d: %s = %.9g", i, ev[2].values[i].tag, ev[2].values[i].value);
        CHECK(ev[3].step == big && ev[3].nvalues == 2, "step %lld", (long long)ev[3].step);
        const tbd_value *v = find(&ev[3], longtag);
        CHECK(v && v->value == 65504.0f, "the long tag");
        v = find(&ev[3], "train/lr");
        CHECK(v && v->value == 1e30f, "1e30");
        CHECK(ev[4].step == 11 && ev[4].nvalues == 0 && ev[4].session_status == -1, "the empty summary");
        for (int i = 0; i < 5; i++)
            CHECK(ev[i].has_wall_time && ev[i].wall_time >= t0 - 1 && ev[i].wall_time <= t1 + 1,
                  "record %d: wall_time %.3f outside the writing's [%.3f, %.3f]", i, ev[i].wall_time, t0, t1);
    }
    check_end();

    check_begin("a_later_file_sorts_after");
    /* Both files were made within a second or two: TensorBoard reads a directory's files in
     * name order, and a resumed run's file must come after the run's first. */
    const char *b1 = strrchr(first, '/'), *b2 = strrchr(second, '/');
    CHECK(b1 && b2 && strcmp(b2, b1) > 0, "%s then %s", b1 ? b1 : "?", b2 ? b2 : "?");
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    CHECK(b2 && !strncmp(b2 + 1, "events.out.tfevents.", 20) && strlen(b2) > 31 && b2[31] == '.' &&
              !strcmp(b2 + 32, host),
          "name %s", b2 ? b2 : "?");
    check_end();

    check_begin("a_flipped_byte_is_reported");
    /* The third record (step 10) starts after the first two: its length at +0, data at +12. */
    n = read_all(second, ev, 8, err, sizeof err);
    long rec2 = 0;
    {
        FILE *f = fopen(second, "rb");
        uint8_t h[8];
        for (int i = 0; f && i < 2; i++) {
            if (fread(h, 1, 8, f) != 8) break;
            rec2 += 16 + (long)tbd_le(h, 8);
            fseek(f, rec2, SEEK_SET);
        }
        if (f) fclose(f);
    }
    flip_byte(second, rec2 + 20);
    n = read_all(second, ev, 8, err, sizeof err);
    CHECK(n < 0 && strstr(err, "record 2") && strstr(err, "data's CRC"), "got %d: %s", n, err);
    flip_byte(second, rec2 + 20);
    flip_byte(second, rec2 + 1);
    n = read_all(second, ev, 8, err, sizeof err);
    CHECK(n < 0 && strstr(err, "record 2") && strstr(err, "length's CRC"), "got %d: %s", n, err);
    flip_byte(second, rec2 + 1);
    n = read_all(second, ev, 8, err, sizeof err);
    CHECK(n == 5, "restored: %d (%s)", n, err);
    CHECK(truncate(second, rec2 + 14) == 0, "truncate");
    n = read_all(second, ev, 8, err, sizeof err);
    CHECK(n < 0 && strstr(err, "record 2") && strstr(err, "ends inside"), "got %d: %s", n, err);
    check_end();

    check_begin("metrics_rows_as_scalars");
    char *sub = ds_path_join(dir, "run");
    CHECK(ds_mkdirs(sub) == 0, "mkdir");
    ds_metrics_log m;
    CHECK(ds_metrics_log_open(&m, sub, 1, 24) == 0, "open");
    ds_metrics_step sr = {.step = 28, .epoch = 2.3, .crop = 16, .loss = 1.25, .lr = 0.05, .images_per_sec = 812.5,
                          .data_wait = 0.125};
    ds_metrics_epoch er = {.step = 36, .epoch = 3, .crop = 16, .loss = 1.5, .lr = 0.01, .images_per_sec = 700,
                           .have_val = 1, .val_top1 = 0.75, .val_top5 = 1, .val_loss = 0.625, .val_crop = 16,
                           .protocol = "p", .have_standard = 1, .std_top1 = 0.5, .std_top5 = 0.875,
                           .std_loss = 0.875, .std_protocol = "s"};
    CHECK(ds_metrics_log_step(&m, &sr) == 0, "step row");
    CHECK(ds_metrics_log_epoch(&m, &er) == 0, "epoch row");
    er.have_val = 0;
    er.step = 48;
    CHECK(ds_metrics_log_epoch(&m, &er) == 0, "epoch row without val");
    ds_metrics_log_close(&m);
    char names[4][320];
    int nf = event_files(sub, names, 4);
    CHECK(nf == 1, "%d event files", nf);
    char *path = ds_path_join(sub, nf ? names[0] : "none");
    n = read_all(path, ev, 8, err, sizeof err);
    free(path);
    CHECK(n == 5, "%d records (%s)", n, err);
    if (n == 5) {
        /* Steps up to the resumed 24 stay; TensorBoard drops what earlier files hold from 25 on. */
        CHECK(ev[1].session_status == 1 && ev[1].step == 25, "START at %lld", (long long)ev[1].step);
        static const char *step_tags[] = {"train/loss", "train/lr", "train/images_per_sec", "train/data_wait"};
        const float step_vals[] = {1.25f, 0.05f, 812.5f, 0.125f};
        CHECK(ev[2].step == 28 && ev[2].nvalues == 4, "step row at %lld, %d values", (long long)ev[2].step,
              ev[2].nvalues);
        for (int i = 0; i < 4; i++) {
            const tbd_value *v = find(&ev[2], step_tags[i]);
            CHECK(v && v->value == step_vals[i], "%s", step_tags[i]);
        }
        static const char *epoch_tags[] = {"train/epoch_loss", "train/epoch_images_per_sec", "val/top1", "val/top5",
                                           "val/loss", "val_standard/top1", "val_standard/top5", "val_standard/loss"};
        const float epoch_vals[] = {1.5f, 700.0f, 0.75f, 1.0f, 0.625f, 0.5f, 0.875f, 0.875f};
        CHECK(ev[3].step == 36 && ev[3].nvalues == 8, "epoch row at %lld, %d values", (long long)ev[3].step,
              ev[3].nvalues);
        for (int i = 0; i < 8; i++) {
            const tbd_value *v = find(&ev[3], epoch_tags[i]);
            CHECK(v && v->value == epoch_vals[i], "%s", epoch_tags[i]);
        }
        CHECK(ev[4].step == 48 && ev[4].nvalues == 2 && find(&ev[4], "train/epoch_loss") && !find(&ev[4], "val/top1"),
              "an epoch row without val: %d values", ev[4].nvalues);
    }
    CHECK(ds_metrics_log_open(&m, sub, 0, 48) == 0, "open without tensorboard");
    ds_metrics_log_close(&m);
    CHECK(event_files(sub, names, 4) == 1, "a log without tensorboard made an event file");
    check_end();

    check_begin("a_failed_event_write_spares_the_metrics");
    /* The event file's stream swapped for /dev/full (every flush: ENOSPC): the row still goes
     * to metrics.jsonl and succeeds, the event file is closed, later rows go on. */
    CHECK(ds_metrics_log_open(&m, sub, 1, 48) == 0, "open");
    FILE *full = fopen("/dev/full", "w");
    CHECK(full != NULL, "/dev/full");
    if (full && m.tb.f) {
        fclose(m.tb.f);
        m.tb.f = full;
        sr.step = 50;
        CHECK(ds_metrics_log_step(&m, &sr) == 0, "a step row whose event could not be written failed");
        CHECK(m.tb.f == NULL, "the event file is still open");
        sr.step = 52;
        CHECK(ds_metrics_log_step(&m, &sr) == 0, "the next row failed");
    }
    ds_metrics_log_close(&m);
    char *mp = ds_path_join(sub, "metrics.jsonl");
    size_t mlen = 0;
    char *text = ds_read_file(mp, &mlen);
    CHECK(text && strstr(text, "{\"step\":50,") && strstr(text, "{\"step\":52,"), "metrics.jsonl lost a row");
    free(text);
    free(mp);
    free(sub);
    check_end();
    return check_exit();
}
