#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *prog_name = "ds";
static void (*abort_hook)(int);
static int log_rank;
int ds_verbosity = 0;

void ds_log_init(const char *prog) { prog_name = prog; }
const char *ds_prog(void) { return prog_name; }
void ds_log_set_rank(int rank) { log_rank = rank; }
int ds_log_rank(void) { return log_rank; }
void ds_set_abort_hook(void (*hook)(int)) { abort_hook = hook; }

/* The bar on the screen, if any: a message clears its line first and draws it again after,
 * so lines and the bar never share a line. */
static ds_progress *shown;
static pthread_mutex_t screen = PTHREAD_MUTEX_INITIALIZER;   /* the bar's state and its line */
static void draw(ds_progress *p, double now, int final);

/* One fprintf per message so lines from threads or ranks do not interleave mid-line. */
static void emit(const char *kind, const char *fmt, va_list ap)
{
    char msg[4096], who[64];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (log_rank > 0)
        snprintf(who, sizeof who, "%s (rank %d)", prog_name, log_rank);
    else
        snprintf(who, sizeof who, "%s", prog_name);
    pthread_mutex_lock(&screen);
    const char *clear = shown && shown->t_drawn > 0 ? "\r\033[K" : "";
    if (kind)
        fprintf(stderr, "%s%s: %s: %s\n", clear, who, kind, msg);
    else
        fprintf(stderr, "%s%s: %s\n", clear, who, msg);
    if (*clear) draw(shown, ds_now(), 0);
    pthread_mutex_unlock(&screen);
}

int ds_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("error", fmt, ap);
    va_end(ap);
    return -1;
}

void ds_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("warning", fmt, ap);
    va_end(ap);
}

void ds_info(const char *fmt, ...)
{
    if (ds_verbosity < 0) return;
    va_list ap;
    va_start(ap, fmt);
    emit(NULL, fmt, ap);
    va_end(ap);
}

void ds_debug(const char *fmt, ...)
{
    if (ds_verbosity < 1) return;
    va_list ap;
    va_start(ap, fmt);
    emit(NULL, fmt, ap);
    va_end(ap);
}

void ds_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit("error", fmt, ap);
    va_end(ap);
    if (abort_hook) abort_hook(1);
    exit(1);
}

uint64_t ds_event_seq(void)
{
    static uint64_t seq;
    return __atomic_add_fetch(&seq, 1, __ATOMIC_SEQ_CST);
}

double ds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ds_format_duration(char *buf, int len, double s)
{
    if (!(s >= 0) || s > 1e7) {
        snprintf(buf, len, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, len, "%ld:%02ld", t / 60, t % 60);
}

void ds_progress_start(ds_progress *p, const char *label, const char *unit, int64_t total, int enabled)
{
    memset(p, 0, sizeof *p);
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->t_start = ds_now();
    if (enabled < 0) enabled = isatty(STDERR_FILENO) && ds_verbosity >= 0;
    p->enabled = enabled;
    if (enabled) {
        pthread_mutex_lock(&screen);
        shown = p;
        pthread_mutex_unlock(&screen);
    }
}

static void draw(ds_progress *p, double now, int final)
{
    double dt = now - p->t_start;
    double rate = dt > 0 ? p->done / dt : 0;
    char eta[32] = "", el[32];
    ds_format_duration(el, sizeof el, dt);
    if (p->total > 0 && !final && rate > 0) {
        char d[24];
        ds_format_duration(d, sizeof d, (p->total - p->done) / rate);
        snprintf(eta, sizeof eta, "  ETA %s", d);
    }
    char bar[32] = "";
    if (p->total > 0) {
        int w = 24, fill = (int)(w * (double)p->done / p->total);
        if (fill > w) fill = w;
        bar[0] = '[';
        for (int i = 0; i < w; i++) bar[1 + i] = i < fill ? '#' : '.';
        bar[w + 1] = ']';
        bar[w + 2] = 0;
        fprintf(stderr, "\r%s %s %lld/%lld  %.1f %s/s  %s%s\033[K%s", p->label, bar,
                (long long)p->done, (long long)p->total, rate, p->unit, el, eta, final ? "\n" : "");
    } else {
        fprintf(stderr, "\r%s %lld  %.1f %s/s  %s\033[K%s", p->label, (long long)p->done, rate,
                p->unit, el, final ? "\n" : "");
    }
    fflush(stderr);
    p->t_drawn = now;
}

void ds_progress_update(ds_progress *p, int64_t done)
{
    if (!p->enabled) {
        p->done = done;
        return;
    }
    pthread_mutex_lock(&screen);
    p->done = done;
    double now = ds_now();
    if (now - p->t_drawn >= 0.1) draw(p, now, 0);
    pthread_mutex_unlock(&screen);
}

void ds_progress_end(ds_progress *p)
{
    pthread_mutex_lock(&screen);
    if (p->enabled) draw(p, ds_now(), 1);
    p->enabled = 0;
    if (shown == p) shown = NULL;
    pthread_mutex_unlock(&screen);
}

void ds_progress_close(ds_progress *p)
{
    pthread_mutex_lock(&screen);
    if (p->enabled && p->t_drawn > 0) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->enabled = 0;
    if (shown == p) shown = NULL;
    pthread_mutex_unlock(&screen);
}
