/* testhook: see testhook.h. */
#include "testhook.h"

#include "log.h"
#include "signals.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern char **environ;

static ds_test_hooks hooks;

/* One table: the variable, where its value goes, its range, and what a warning says it does. */
typedef struct {
    const char *name;
    int64_t *value;
    int64_t min, max;
    const char *effect;
} hook_spec;

static const hook_spec specs[] = {
    {"DS_TESTHOOK_READ_DELAY_MS", &hooks.read_delay_ms, 0, 10000, "every image a loader reads takes that many ms longer, none read ahead"},
    {"DS_TESTHOOK_PAUSE_AFTER_STEP", &hooks.pause_after_step, 0, INT64_MAX,
     "dstrain waits for a signal once that step is done"},
    {"DS_TESTHOOK_PAUSE_BEFORE_EXIT", &hooks.pause_before_exit, 0, 1, "the tool waits for a signal before it exits"},
    {"DS_TESTHOOK_NAN_VAL_EPOCH", &hooks.nan_val_epoch, 0, INT64_MAX,
     "dstrain's validation after that epoch scores each rank's first image from NaN logits"},
};
#define NSPECS (sizeof specs / sizeof specs[0])

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char problem[256];

static void read_hooks(void)
{
    static const char prefix[] = "DS_TESTHOOK_";
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, prefix, sizeof prefix - 1)) continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        const hook_spec *s = NULL;
        for (size_t k = 0; k < NSPECS; k++)
            if (strlen(specs[k].name) == len && !strncmp(specs[k].name, *e, len)) s = &specs[k];
        if (!s) {
            int at = snprintf(problem, sizeof problem, "%.*s: unknown test hook (known:", (int)(len > 64 ? 64 : len), *e);
            for (size_t k = 0; k < NSPECS && at < (int)sizeof problem - 1; k++)
                at += snprintf(problem + at, sizeof problem - (size_t)at, " %s%s", specs[k].name,
                               k + 1 < NSPECS ? "" : ")");
            return;
        }
        const char *v = eq ? eq + 1 : "";
        if (!*v) continue;  /* set but empty: off, as an unset variable */
        char *end;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || *end || x < s->min || x > s->max) {
            snprintf(problem, sizeof problem, "%s=%.40s: not a whole number in [%lld, %lld]", s->name, v,
                     (long long)s->min, (long long)s->max);
            return;
        }
        *s->value = x;
        if (x) ds_warn("test hook %s=%lld: %s", s->name, x, s->effect);
    }
}

int ds_test_hooks_init(void)
{
    pthread_once(&once, read_hooks);
    if (problem[0]) {
        memset(&hooks, 0, sizeof hooks);
        return ds_err("%s", problem);
    }
    return 0;
}

const ds_test_hooks *ds_test_hooks_get(void) { return &hooks; }

void ds_test_pause(const char *what)
{
    ds_warn("test hook: %s; waiting for a signal", what);
    struct timespec nap = {0, 10 * 1000000L};
    while (!ds_signals_pending()) nanosleep(&nap, NULL);
}
