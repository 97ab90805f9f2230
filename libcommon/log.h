/* log: error and warning messages in the tools' one format, and a progress bar.
 *
 * Library code reports a failure by printing it once and returning -1:
 *     if (!f) return ds_err("%s: %s", path, strerror(errno));
 * Only a tool's main decides to exit (ds_die, or return 1 from main). */
#ifndef DS_LOG_H
#define DS_LOG_H

#include <stdarg.h>
#include <stdint.h>

/* The program name that prefixes every message ("dsplit"). */
void ds_log_init(const char *prog);
const char *ds_prog(void);

/* The process's rank in a job of several (set by ds_comm_init). Messages from ranks other
 * than 0 say which rank they come from ("dstrain (rank 2): warning: ..."); usage errors and
 * --help, the same on every rank, are printed by rank 0 alone. */
void ds_log_set_rank(int rank);
int ds_log_rank(void);

/* 0: normal, -1: quiet (-q: only errors and warnings), 1: verbose. */
extern int ds_verbosity;

/* Prints "prog: error: <msg>" to stderr and returns -1. */
int ds_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ds_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Human information on stderr, silenced by -q. */
void ds_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Printed only with --verbose. */
void ds_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the error and exits 1 (after the abort hook, which MPI programs set so that one
 * failing rank stops all of them instead of leaving them hanging). */
void ds_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void ds_set_abort_hook(void (*hook)(int status));

/* Seconds on a monotonic clock. */
double ds_now(void);
/* The next number (1, 2, ...) of one sequence for the whole process, taken atomically: two
 * events on any threads that each take one are ordered by their numbers, whatever the clock
 * resolution or the machine's load (tests prove an order with them, not with times). */
uint64_t ds_event_seq(void);

/* A one-line progress bar on stderr: "label  [#####.....]  1234/5000  812.3/s  ETA 0:04".
 * Drawn only when enabled (a terminal, or --progress) and at most ~10 times a second. */
typedef struct {
    const char *label;
    const char *unit;   /* "img", "step" */
    int64_t total;      /* 0 when unknown */
    int64_t done;
    double t_start, t_drawn;
    int enabled;
} ds_progress;

/* enabled: 1 always, 0 never, -1 when stderr is a terminal and not quiet. */
void ds_progress_start(ds_progress *p, const char *label, const char *unit, int64_t total, int enabled);
void ds_progress_update(ds_progress *p, int64_t done);
void ds_progress_end(ds_progress *p);
/* Takes the bar off the screen without a final line. While a bar is shown, every message
 * clears its line first and draws the bar again after. */
void ds_progress_close(ds_progress *p);

/* "1:02:03" or "4:05" into buf. */
void ds_format_duration(char *buf, int len, double seconds);

#endif
