#include "cli.h"

#include "cpu_isa.h"
#include "fsutil.h"
#include "json.h"
#include "testhook.h"
#include "log.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#ifndef DS_VERSION
#define DS_VERSION "dev"
#endif

int ds_cli_progress;

void ds_usage_error(const ds_cli *cli, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ds_log_rank() == 0) fprintf(stderr, "%s: %s\n%s: try '%s --help'\n", cli->prog, msg, cli->prog, cli->prog);
    exit(2);
}

static void print_value(FILE *f, const ds_option *o)
{
    switch (o->type) {
    case DS_OPT_FLAG: fprintf(f, "%s", *(int *)o->value ? "on" : "off"); break;
    case DS_OPT_INT: fprintf(f, "%lld", *(long long *)o->value); break;
    case DS_OPT_DOUBLE: fprintf(f, "%g", *(double *)o->value); break;
    case DS_OPT_STRING:
    case DS_OPT_CHOICE: {
        const char *s = *(const char **)o->value;
        fprintf(f, "%s", s ? s : "none");
        break;
    }
    }
}

/* Whether a flag also takes the form --no-NAME. */
static int negatable(const ds_option *o)
{
    return o->type == DS_OPT_FLAG && strncmp(o->name, "no-", 3) != 0;
}

static void print_help(const ds_cli *cli)
{
    printf("usage: %s %s\n%s\n\noptions:\n", cli->prog, cli->args, cli->summary);
    for (const ds_option *o = cli->opts; o->name; o++) {
        char head[96];
        int n = 0;
        const char *no = negatable(o) ? "[no-]" : "";
        if (o->short_name)
            n = snprintf(head, sizeof head, "  -%c, --%s%s", o->short_name, no, o->name);
        else
            n = snprintf(head, sizeof head, "      --%s%s", no, o->name);
        if (o->type == DS_OPT_CHOICE)
            snprintf(head + n, sizeof head - n, " %s", o->choices);
        else if (o->type != DS_OPT_FLAG)
            snprintf(head + n, sizeof head - n, " %s", o->arg ? o->arg : "X");
        printf("%-34s %s (default: ", head, o->help);
        print_value(stdout, o);
        printf(")\n");
    }
    printf("%-34s %s\n", "  -q, --quiet", "print only errors and warnings");
    printf("%-34s %s\n", "  -v, --verbose", "print more detail");
    printf("%-34s %s\n", "      --progress", "draw the progress bar even when stderr is not a terminal");
    printf("%-34s %s\n", "  -h, --help", "print this help and exit");
    printf("%-34s %s\n", "      --version", "print the version and exit");
    if (cli->epilog) printf("\n%s\n", cli->epilog);
}

/* The position of v in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *v)
{
    size_t n = strlen(v);
    int i = 0;
    for (const char *c = choices; *c; i++) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, v, n) == 0) return i;
        if (!bar) break;
        c = bar + 1;
    }
    return -1;
}

/* A mistake in a tool's option table, not in the command line. */
static __attribute__((format(printf, 2, 3), noreturn)) void internal_error(const ds_cli *cli, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: internal error: ", cli->prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static void set_value(ds_cli *cli, const ds_option *o, const char *v, int negated)
{
    char *end;
    switch (o->type) {
    case DS_OPT_FLAG: *(int *)o->value = !negated; return;
    case DS_OPT_INT: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end)
            ds_usage_error(cli, "--%s wants a whole number, not '%s'", o->name, v);
        if (o->min < o->max && (x < o->min || x > o->max))
            ds_usage_error(cli, "--%s %s is out of range [%.0f, %.0f]", o->name, v, o->min, o->max);
        *(long long *)o->value = x;
        return;
    }
    case DS_OPT_DOUBLE: {
        errno = 0;
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x))
            ds_usage_error(cli, "--%s wants a number, not '%s'", o->name, v);
        if (o->min < o->max && (x < o->min || x > o->max))
            ds_usage_error(cli, "--%s %s is out of range [%g, %g]", o->name, v, o->min, o->max);
        *(double *)o->value = x;
        return;
    }
    case DS_OPT_CHOICE:
        if (choice_index(o->choices, v) < 0)
            ds_usage_error(cli, "--%s must be one of %s, not '%s'", o->name, o->choices, v);
        /* fallthrough */
    case DS_OPT_STRING:
        *(const char **)o->value = v;
        return;
    }
}

/* The version, and the CPU kernels this machine would use (or why DS_CPU_KERNELS cannot be
 * honoured). */
static void print_version(const ds_cli *cli)
{
    if (ds_log_rank() != 0) return;
    printf("%s (ds) %s\n", cli->prog, DS_VERSION);
    if (ds_cpu_isa_init() == 0) printf("cpu kernels: %s\n", ds_cpu_isa_name(ds_cpu_isa_get()));
}

int ds_cli_parse(ds_cli *cli, int argc, char **argv, char ***pos)
{
    ds_log_init(cli->prog);
    int nopts = 0;
    while (cli->opts[nopts].name) nopts++;
    if (nopts > DS_CLI_MAX_OPTS)
        internal_error(cli, "%d options, more than the %d bits of ds_cli.given", nopts, DS_CLI_MAX_OPTS);
    /* Positional arguments are compacted to the front of argv[1..]. */
    int npos = 0, only_pos = 0;
    char **out = argv + 1;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == 0) {
            out[npos++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) { only_pos = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { if (ds_log_rank() == 0) print_help(cli); exit(0); }
        if (!strcmp(a, "--version")) { print_version(cli); exit(0); }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) { ds_verbosity = -1; continue; }
        if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { ds_verbosity = 1; continue; }
        if (!strcmp(a, "--progress")) { ds_cli_progress = 1; continue; }

        const ds_option *o = NULL;
        const char *val = NULL;
        int negated = 0;
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            for (const ds_option *p = cli->opts; p->name; p++)
                if (strlen(p->name) == len && strncmp(p->name, name, len) == 0) { o = p; break; }
            if (!o && len > 3 && strncmp(name, "no-", 3) == 0)
                for (const ds_option *p = cli->opts; p->name; p++)
                    if (negatable(p) && strlen(p->name) == len - 3 && strncmp(p->name, name + 3, len - 3) == 0) {
                        o = p;
                        negated = 1;
                        break;
                    }
            if (!o) ds_usage_error(cli, "unknown option '--%.*s'", (int)len, name);
            if (eq) {
                if (o->type == DS_OPT_FLAG) ds_usage_error(cli, "--%.*s takes no value", (int)len, name);
                val = eq + 1;
            }
        } else {
            for (const ds_option *p = cli->opts; p->name; p++)
                if (p->short_name && p->short_name == a[1]) { o = p; break; }
            if (!o) ds_usage_error(cli, "unknown option '-%c'", a[1]);
            if (a[2]) {
                if (o->type == DS_OPT_FLAG) ds_usage_error(cli, "unknown option '%s'", a);
                val = a + 2;
            }
        }
        if (o->type != DS_OPT_FLAG && !val) {
            if (i + 1 >= argc) ds_usage_error(cli, "--%s needs a value", o->name);
            val = argv[++i];
        }
        set_value(cli, o, val, negated);
        cli->given |= 1ull << (o - cli->opts);
    }
    for (int k = 0; k < nopts; k++) {
        const ds_option *o = &cli->opts[k];
        if (o->type == DS_OPT_CHOICE && o->index) {
            const char *v = *(const char **)o->value;
            *o->index = v ? choice_index(o->choices, v) : -1;
            if (v && *o->index < 0) internal_error(cli, "the default of --%s is not one of %s", o->name, o->choices);
        }
    }
    if (npos < cli->min_pos)
        ds_usage_error(cli, "missing argument: %s", cli->args);
    if (cli->max_pos >= 0 && npos > cli->max_pos)
        ds_usage_error(cli, "unexpected argument '%s'", out[cli->max_pos]);
    // The CPU kernels are chosen here, once, so that a DS_CPU_KERNELS this CPU cannot honour
    // is an error before any work starts.
    if (ds_cpu_isa_init()) exit(1);
    // Test hooks (testhook.h) likewise: an unknown DS_TESTHOOK_* or a bad value stops here.
    if (ds_test_hooks_init()) exit(1);
    ds_debug("cpu kernels: %s", ds_cpu_isa_name(ds_cpu_isa_get()));
    *pos = out;
    return npos;
}

int ds_cli_given(const ds_cli *cli, const char *name)
{
    for (const ds_option *o = cli->opts; o->name; o++)
        if (!strcmp(o->name, name)) return (cli->given >> (o - cli->opts)) & 1;
    return 0;
}

int ds_cli_progress_mode(void) { return ds_cli_progress ? 1 : -1; }

char *ds_cli_json(const ds_cli *cli)
{
    ds_json j;
    ds_json_init(&j, DS_JSON_SPACED);
    ds_json_begin(&j, NULL);
    for (const ds_option *o = cli->opts; o->name; o++) {
        switch (o->type) {
        case DS_OPT_FLAG: ds_json_bool(&j, o->name, *(int *)o->value); break;
        case DS_OPT_INT: ds_json_int(&j, o->name, *(long long *)o->value); break;
        case DS_OPT_DOUBLE: ds_json_double(&j, o->name, *(double *)o->value, "%.17g"); break;
        default: ds_json_string(&j, o->name, *(const char **)o->value);
        }
    }
    ds_json_end(&j);
    return ds_json_release(&j);
}

/* One number of a range: a decimal or A/B, ending at `end`. */
static int range_number(const char *s, char end, const char **rest, double *out)
{
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (e == s || errno) return -1;
    if (*e == '/') {
        const char *d = e + 1;
        double q = strtod(d, &e);
        if (e == d || errno || q == 0) return -1;
        v /= q;
    }
    if (*e != end || !isfinite(v)) return -1;
    *out = v;
    *rest = e;
    return 0;
}

int ds_cli_range(const char *s, double out[2])
{
    const char *p;
    if (range_number(s, ',', &p, &out[0]) || range_number(p + 1, 0, &p, &out[1])) return -1;
    return 0;
}

/* The shortest decimal that reads back as x. */
static void shortest(double x, char *buf, size_t len)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* An option's value as --help prints it, a number in full (the shortest decimal that is
 * exactly it), into buf. */
static void value_text(const ds_option *o, char *buf, size_t len)
{
    switch (o->type) {
    case DS_OPT_FLAG: snprintf(buf, len, "%s", *(int *)o->value ? "on" : "off"); break;
    case DS_OPT_INT: snprintf(buf, len, "%lld", *(long long *)o->value); break;
    case DS_OPT_DOUBLE: shortest(*(double *)o->value, buf, len); break;
    default: {
        const char *s = *(const char **)o->value;
        snprintf(buf, len, "%s", s ? s : "none");
    }
    }
}

/* The strings taken back live as long as the process, as argv's do: a variable may be pointed
 * elsewhere later (an absolute path), so they are held here, not by the variables. */
static char **kept;
static size_t nkept;
static char *keep(char *s)
{
    kept = ds_xrealloc(kept, (nkept + 1) * sizeof *kept);
    return kept[nkept++] = s;
}

typedef struct {
    ds_cli *cli;
    const char *const *fresh;
    const char *what;
    ds_cli_change *changes;
    int nchanges;
} restore_ctx;

static int is_fresh(const restore_ctx *r, const char *name)
{
    for (const char *const *f = r->fresh; f && *f; f++)
        if (!strcmp(*f, name)) return 1;
    return 0;
}

/* The saved value of o, from v, into the option's variable (when take) or into saved_text. */
static int restore_member(void *ctx, const char *key, const ds_json_value *v)
{
    restore_ctx *r = ctx;
    const ds_option *o = NULL;
    for (const ds_option *p = r->cli->opts; p->name; p++)
        if (!strcmp(p->name, key)) o = p;
    if (!o || is_fresh(r, key)) return 0;   /* an option of another version, or one of this process's */
    /* the saved value, in the option's type */
    int flag = 0;
    long long integer = 0;
    double number = 0;
    const char *string = NULL;
    int ok;
    switch (o->type) {
    case DS_OPT_FLAG: ok = v->kind == DS_JSON_BOOL, flag = (int)v->number; break;
    case DS_OPT_INT: {
        char num[32], *e;
        ok = v->kind == DS_JSON_NUMBER && v->raw_len < sizeof num;
        if (ok) {
            memcpy(num, v->raw, v->raw_len);
            num[v->raw_len] = 0;
            errno = 0;
            integer = strtoll(num, &e, 10);
            ok = !errno && !*e;
        }
        break;
    }
    case DS_OPT_DOUBLE: ok = v->kind == DS_JSON_NUMBER, number = v->number; break;
    default:
        ok = v->kind == DS_JSON_STRING || v->kind == DS_JSON_NULL;
        string = v->kind == DS_JSON_STRING ? v->string : NULL;
        if (ok && o->type == DS_OPT_CHOICE && string) ok = choice_index(o->choices, string) >= 0;
    }
    if (!ok) {   /* -2: said here, apart from the reader's -1 for malformed text */
        ds_err("%s: its recorded --%s (%.*s) is not a value %s takes", r->what, key, (int)v->raw_len, v->raw,
               r->cli->prog);
        return -2;
    }
    int given = ds_cli_given(r->cli, key);
    int same;
    switch (o->type) {
    case DS_OPT_FLAG: same = *(int *)o->value == flag; break;
    case DS_OPT_INT: same = *(long long *)o->value == integer; break;
    case DS_OPT_DOUBLE: same = *(double *)o->value == number; break;
    default: {
        const char *now = *(const char **)o->value;
        same = now && string ? !strcmp(now, string) : now == string;
    }
    }
    if (same) return 0;
    if (given) {
        r->changes = ds_xrealloc(r->changes, (size_t)(r->nchanges + 1) * sizeof *r->changes);
        ds_cli_change *c = &r->changes[r->nchanges++];
        c->opt = o;
        value_text(o, c->now, sizeof c->now);
        /* the saved value as the same function prints it */
        switch (o->type) {
        case DS_OPT_FLAG: snprintf(c->saved, sizeof c->saved, "%s", flag ? "on" : "off"); break;
        case DS_OPT_INT: snprintf(c->saved, sizeof c->saved, "%lld", integer); break;
        case DS_OPT_DOUBLE: shortest(number, c->saved, sizeof c->saved); break;
        default: snprintf(c->saved, sizeof c->saved, "%s", string ? string : "none");
        }
        return 0;
    }
    switch (o->type) {
    case DS_OPT_FLAG: *(int *)o->value = flag; break;
    case DS_OPT_INT: *(long long *)o->value = integer; break;
    case DS_OPT_DOUBLE: *(double *)o->value = number; break;
    default:
        *(const char **)o->value = string ? keep(ds_xstrdup(string)) : NULL;
        if (o->type == DS_OPT_CHOICE && o->index) *o->index = string ? choice_index(o->choices, string) : -1;
    }
    return 0;
}

int ds_cli_restore(ds_cli *cli, const char *json, const char *const *fresh, const char *what,
                   ds_cli_change **changes)
{
    restore_ctx r = {.cli = cli, .fresh = fresh, .what = what};
    int rc = ds_json_read_members(json ? json : "{}", restore_member, &r);
    if (rc == -1) ds_err("%s: its recorded options (config) are not a JSON object", what);
    if (rc) {
        free(r.changes);
        return -1;
    }
    *changes = r.changes;
    return r.nchanges;
}
