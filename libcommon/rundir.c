#include "rundir.h"

#include "fsutil.h"
#include "json.h"
#include "log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *ds_rundir_ckpt_path(const char *dir, int64_t step)
{
    char name[64];
    snprintf(name, sizeof name, "ckpt-%08lld.h5", (long long)step);
    return ds_path_join(dir, name);
}

int ds_rundir_link(const char *dir, const char *name, const char *target)
{
    char *path = ds_path_join(dir, name), *tmp = ds_tmp_name(path);
    unlink(tmp);
    int rc = 0;
    if (symlink(target, tmp)) rc = ds_err("%s: cannot create a symlink: %s", tmp, strerror(errno));
    else if (rename(tmp, path)) rc = ds_err("%s: cannot rename the symlink into place: %s", path, strerror(errno)), unlink(tmp);
    else rc = ds_fsync_dir_of(path);
    free(tmp);
    free(path);
    return rc;
}

static int is_ckpt_name(const char *n)
{
    size_t len = strlen(n);
    if (len != 16 || strncmp(n, "ckpt-", 5) || strcmp(n + 13, ".h5")) return 0;
    for (int i = 5; i < 13; i++)
        if (n[i] < '0' || n[i] > '9') return 0;
    return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int ds_rundir_prune(const char *dir, int keep)
{
    if (keep <= 0) return 0;
    DIR *d = opendir(dir);
    if (!d) return ds_err("%s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_ckpt_name(e->d_name)) continue;
        if (n == cap) names = ds_xrealloc(names, (cap = cap ? 2 * cap : 16) * sizeof *names);
        names[n++] = ds_xstrdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);  /* 8-digit steps sort by name */
    char best[PATH_MAX] = "";
    char *bpath = ds_path_join(dir, "best.h5");
    ssize_t bl = readlink(bpath, best, sizeof best - 1);
    best[bl > 0 ? bl : 0] = 0;
    free(bpath);
    int rc = 0;
    for (size_t i = 0; i + (size_t)keep < n; i++) {
        if (!strcmp(names[i], best)) continue;
        char *p = ds_path_join(dir, names[i]);
        if (unlink(p) && errno != ENOENT) rc = ds_err("%s: cannot remove an old checkpoint: %s", p, strerror(errno));
        free(p);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

int ds_rundir_has_checkpoints(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) found = is_ckpt_name(e->d_name) || !strcmp(e->d_name, "last.h5");
    closedir(d);
    return found;
}

int ds_rundir_lock(const char *dir)
{
    if (ds_mkdirs(dir)) return ds_err("%s: cannot create the run directory", dir);
    char *path = ds_path_join(dir, ".lock");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        ds_err("%s: %s", path, strerror(errno));
        free(path);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        char holder[256] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            ds_err("%s is in use by another dstrain (%s): one run directory takes one run at a time", dir,
                   holder[0] ? holder : "its holder wrote nothing yet");
        else
            ds_err("%s: cannot lock: %s", path, strerror(e));
        free(path);
        return -1;
    }
    /* who holds it, for the message above; the lock itself is the flock, held until exit */
    char host[128] = "?", when[64] = "?", line[320];
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    int len = snprintf(line, sizeof line, "pid %ld on %s, since %s\n", (long)getpid(), host, when);
    if (ftruncate(fd, 0) || pwrite(fd, line, (size_t)len, 0) != len)
        ds_warn("%s: cannot write who holds the lock: %s", path, strerror(errno));
    free(path);
    return 0;   /* fd stays open: the lock lasts as long as the process */
}

/* The step of a checkpoint's name, -1 for any other name. */
static int64_t ckpt_step(const char *name)
{
    return is_ckpt_name(name) ? strtoll(name + 5, NULL, 10) : -1;
}

/* Whether DIR/link is a symlink whose target is one of the names[n]. */
static int links_to_any(const char *dir, const char *link, char *const *names, size_t n)
{
    char target[PATH_MAX], *p = ds_path_join(dir, link);
    ssize_t len = readlink(p, target, sizeof target - 1);
    free(p);
    if (len <= 0) return 0;
    target[len] = 0;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(target, names[i])) return 1;
    return 0;
}

static int move_into(const char *dir, const char *name, const char *aside)
{
    char *from = ds_path_join(dir, name), *to = ds_path_join(aside, name);
    int rc = rename(from, to) ? ds_err("cannot move %s to %s: %s", from, to, strerror(errno)) : 0;
    free(from);
    free(to);
    return rc;
}

char *ds_rundir_set_aside(const char *dir, int64_t step, int *moved)
{
    *moved = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (ckpt_step(e->d_name) > step) {
            if (n == cap) names = ds_xrealloc(names, (cap = cap ? 2 * cap : 8) * sizeof *names);
            names[n++] = ds_xstrdup(e->d_name);
        }
    closedir(d);
    if (!n) return NULL;
    qsort(names, n, sizeof *names, cmp_str);
    /* superseded-<step>[-k]: a name no earlier rewind took */
    char base[64];
    snprintf(base, sizeof base, "superseded-%08lld", (long long)step);
    char *aside = ds_path_join(dir, base);
    for (int k = 2; mkdir(aside, 0755); k++) {
        if (errno != EEXIST) {
            ds_err("%s: %s", aside, strerror(errno));
            free(aside);
            aside = NULL;
            goto out;
        }
        char numbered[80];
        snprintf(numbered, sizeof numbered, "%s-%d", base, k);
        free(aside);
        aside = ds_path_join(dir, numbered);
    }
    int rc = 0;
    /* links first while their targets are still beside them; moved together they stay valid */
    static const char *const links[] = {"last.h5", "best.h5"};
    for (int i = 0; i < 2 && !rc; i++)
        if (links_to_any(dir, links[i], names, n)) rc = move_into(dir, links[i], aside);
    for (size_t i = 0; i < n && !rc; i++)
        if (!(rc = move_into(dir, names[i], aside))) (*moved)++;
    /* the metrics as they were: the resumed run rewrites its lines after `step` */
    char *log = ds_path_join(dir, "metrics.jsonl"), *copy = ds_path_join(aside, "metrics.jsonl");
    if (!rc && access(log, F_OK) == 0) {
        size_t len;
        char *text = ds_read_file(log, &len);
        ds_atomic a;
        if (!text || ds_atomic_open(&a, copy)) rc = -1;
        else if (fwrite(text, 1, len, a.f) != len) rc = ds_err("%s: %s", a.tmp, strerror(errno)), ds_atomic_abort(&a);
        else rc = ds_atomic_commit(&a);
        free(text);
    }
    if (!rc) rc = ds_fsync_dir_of(copy) || ds_fsync_dir_of(aside);
    free(log);
    free(copy);
    if (rc) {
        ds_err("%s: the later checkpoints were only partly moved aside", dir);
        free(aside);
        aside = NULL;
    }
out:
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!aside) *moved = -1;
    return aside;
}

/* DIR/ckpt-<largest step>.h5, or NULL when there is none; caller frees. */
static char *newest_ckpt(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char best[17] = "";  /* ckpt-NNNNNNNN.h5 */
    struct dirent *e;
    while ((e = readdir(d)))
        if (is_ckpt_name(e->d_name) && strcmp(e->d_name, best) > 0) memcpy(best, e->d_name, sizeof best);
    closedir(d);
    if (!best[0]) return NULL;
    char *p = ds_path_join(dir, best), *real = ds_realpath(p);
    free(p);
    return real;
}

char *ds_rundir_resolve(const char *arg)
{
    struct stat st;
    if (stat(arg, &st)) {
        ds_err("%s: %s", arg, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) return ds_xstrdup(arg);
    char *last = ds_path_join(arg, "last.h5");
    if (stat(last, &st)) {
        /* A kill between a checkpoint's rename and the first last.h5 link leaves a complete
         * ckpt-*.h5 and no link: resume from the newest one (never a .tmp, which the name
         * check excludes). */
        int e = errno;
        char *newest = newest_ckpt(arg);
        free(last);
        if (newest) return newest;
        ds_err("%s: no last.h5 and no ckpt-*.h5 in this run directory (%s)", arg, strerror(e));
        return NULL;
    }
    char *real = ds_realpath(last);
    free(last);
    return real;
}

int ds_metrics_log_open(ds_metrics_log *m, const char *dir, int tensorboard, int64_t start_step)
{
    m->tb.f = NULL;
    m->tb.path = NULL;
    m->path = ds_path_join(dir, "metrics.jsonl");
    m->f = fopen(m->path, "a");
    if (!m->f) {
        int e = errno;
        ds_err("%s: %s", m->path, strerror(e));
        free(m->path);
        m->path = NULL;
        return -1;
    }
    /* TensorBoard drops what it read at the purge step or later: start_step's own rows were
     * written before its checkpoint and stay, as in metrics.jsonl. */
    if (tensorboard && ds_tb_open(&m->tb, dir, start_step + 1)) {
        ds_metrics_log_close(m);
        return -1;
    }
    return 0;
}

/* One row's scalars as one Event; a failure ends the event file, never the run's metrics. */
static void tb_row(ds_metrics_log *m, int64_t step, const ds_tb_scalar *s, int n)
{
    if (!m->tb.f || !ds_tb_write_scalars(&m->tb, step, s, n)) return;
    ds_warn("%s: no more TensorBoard events are written to it; metrics.jsonl goes on", m->tb.path);
    ds_tb_close(&m->tb);
}

int ds_metrics_log_write(ds_metrics_log *m, const char *json)
{
    if (fprintf(m->f, "%s\n", json) < 0 || fflush(m->f) || fsync(fileno(m->f)))
        return ds_err("%s: %s", m->path, strerror(errno));
    return 0;
}

int ds_metrics_log_step(ds_metrics_log *m, const ds_metrics_step *r)
{
    ds_json j;
    ds_json_init(&j, DS_JSON_COMPACT);
    ds_json_begin(&j, NULL);
    ds_json_int(&j, "step", r->step);
    ds_json_double(&j, "epoch", r->epoch, "%.4f");
    ds_json_int(&j, "crop", r->crop);
    ds_json_double(&j, "loss", r->loss, "%.6g");
    ds_json_double(&j, "lr", r->lr, "%.6g");
    ds_json_double(&j, "images_per_sec", r->images_per_sec, "%.1f");
    ds_json_double(&j, "data_wait", r->data_wait, "%.4f");
    ds_json_end(&j);
    int rc = ds_metrics_log_write(m, ds_json_text(&j));
    ds_json_free(&j);
    ds_tb_scalar s[] = {{"train/loss", r->loss},
                        {"train/lr", r->lr},
                        {"train/images_per_sec", r->images_per_sec},
                        {"train/data_wait", r->data_wait}};
    tb_row(m, r->step, s, 4);
    return rc;
}

int ds_metrics_log_epoch(ds_metrics_log *m, const ds_metrics_epoch *r)
{
    ds_json j;
    ds_json_init(&j, DS_JSON_COMPACT);
    ds_json_begin(&j, NULL);
    ds_json_int(&j, "step", r->step);
    ds_json_int(&j, "epoch", r->epoch);
    ds_json_int(&j, "crop", r->crop);
    ds_json_double(&j, "loss", r->loss, "%.6g");
    ds_json_double(&j, "lr", r->lr, "%.6g");
    ds_json_double(&j, "images_per_sec", r->images_per_sec, "%.1f");
    if (r->have_val) {
        ds_json_double(&j, "val_top1", r->val_top1, "%.6f");
        ds_json_double(&j, "val_top5", r->val_top5, "%.6f");
        ds_json_double(&j, "val_loss", r->val_loss, "%.6g");
        ds_json_int(&j, "val_nonfinite", r->val_nonfinite);
        ds_json_int(&j, "val_crop", r->val_crop);
        ds_json_string(&j, "protocol", r->protocol);
    }
    ds_json_double(&j, "seconds", r->seconds, "%.2f");
    ds_json_int(&j, "rss_kb", r->rss_kb);
    ds_json_double(&j, "data_wait", r->data_wait, "%.4f");
    if (r->have_val && r->have_standard) {
        ds_json_begin(&j, "standard");
        ds_json_double(&j, "top1", r->std_top1, "%.6f");
        ds_json_double(&j, "top5", r->std_top5, "%.6f");
        ds_json_double(&j, "loss", r->std_loss, "%.6g");
        ds_json_int(&j, "nonfinite", r->std_nonfinite);
        ds_json_string(&j, "protocol", r->std_protocol);
        ds_json_end(&j);
    }
    ds_json_end(&j);
    int rc = ds_metrics_log_write(m, ds_json_text(&j));
    ds_json_free(&j);
    ds_tb_scalar s[8] = {{"train/epoch_loss", r->loss}, {"train/epoch_images_per_sec", r->images_per_sec}};
    int n = 2;
    if (r->have_val) {
        s[n++] = (ds_tb_scalar){"val/top1", r->val_top1};
        s[n++] = (ds_tb_scalar){"val/top5", r->val_top5};
        s[n++] = (ds_tb_scalar){"val/loss", r->val_loss};
    }
    if (r->have_val && r->have_standard) {
        s[n++] = (ds_tb_scalar){"val_standard/top1", r->std_top1};
        s[n++] = (ds_tb_scalar){"val_standard/top5", r->std_top5};
        s[n++] = (ds_tb_scalar){"val_standard/loss", r->std_loss};
    }
    tb_row(m, r->step, s, n);
    return rc;
}

void ds_metrics_log_close(ds_metrics_log *m)
{
    ds_tb_close(&m->tb);
    if (m->f) fclose(m->f);
    free(m->path);
    m->f = NULL;
    m->path = NULL;
}

int ds_metrics_log_truncate(const char *dir, int64_t step)
{
    char *path = ds_path_join(dir, "metrics.jsonl");
    if (access(path, F_OK)) {
        free(path);
        return 0;
    }
    size_t len;
    char *text = ds_read_file(path, &len);
    if (!text) {
        free(path);
        return -1;
    }
    ds_atomic a;
    if (ds_atomic_open(&a, path)) {
        free(text);
        free(path);
        return -1;
    }
    for (char *line = text, *next; line && *line; line = next) {
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl) *nl = 0;
        const char *s = strstr(line, "\"step\":");
        long long v = s ? strtoll(s + 7, NULL, 10) : 0;
        if (!s || v <= step) fprintf(a.f, "%s\n", line);
    }
    free(text);
    free(path);
    return ds_atomic_commit(&a);
}
