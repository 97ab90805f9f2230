/* cli: command-line options declared as a table, so every tool's --help, defaults and
 * usage errors look the same.
 *
 * The default of an option is the value its variable holds before ds_cli_parse; --help
 * prints it. Every tool also gets -h/--help, --version, -q/--quiet, -v/--verbose and
 * --progress. A usage error prints one line naming the problem plus a hint and exits 2.
 *
 * A flag --x also has the form --no-x, which sets it to 0 (the last one given wins); --help
 * shows the pair as --[no-]x. A flag whose own name begins with "no-" has no such form. */
#ifndef DS_CLI_H
#define DS_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    DS_OPT_FLAG,    /* int *: 1 by --NAME, 0 by --no-NAME */
    DS_OPT_INT,     /* long long * */
    DS_OPT_DOUBLE,  /* double * */
    DS_OPT_STRING,  /* const char **: NULL default prints as "none" */
    DS_OPT_CHOICE,  /* const char **: one of .choices, "a|b|c"; .index optionally gets its position */
} ds_opt_type;

typedef struct {
    const char *name;      /* long name, no dashes; NULL ends the table */
    char short_name;       /* 0: none */
    ds_opt_type type;
    void *value;
    const char *arg;       /* metavar in --help: "N", "DIR" */
    const char *help;
    const char *choices;   /* DS_OPT_CHOICE only */
    double min, max;       /* DS_OPT_INT / DS_OPT_DOUBLE: inclusive range, checked when min < max */
    int *index;            /* DS_OPT_CHOICE, optional: set by ds_cli_parse to the value's 0-based position
                              in .choices (the default's too; -1 for a NULL default), so a tool can keep
                              the choice as an enum listed in the same order */
} ds_option;

/* Table entries: OPT for strings and flags, NUM for numbers in [lo, hi], CHOICE for one of
 * "a|b|c" (CHOICE_INDEX also stores the value's position in *ix). */
#define DS_OPT(n, t, v, a, h) {.name = n, .type = t, .value = v, .arg = a, .help = h}
#define DS_NUM(n, t, v, a, h, lo, hi) {.name = n, .type = t, .value = v, .arg = a, .help = h, .min = lo, .max = hi}
#define DS_CHOICE(n, v, c, h) {.name = n, .type = DS_OPT_CHOICE, .value = v, .choices = c, .help = h}
#define DS_CHOICE_INDEX(n, v, ix, c, h) \
    {.name = n, .type = DS_OPT_CHOICE, .value = v, .index = ix, .choices = c, .help = h}

typedef struct {
    const char *prog;      /* "dsplit" */
    const char *args;      /* "[options] ROOT" */
    const char *summary;   /* one sentence for --help */
    const char *epilog;    /* optional text after the options */
    int min_pos, max_pos;  /* positional argument count; max_pos < 0: unlimited */
    ds_option *opts;       /* at most DS_CLI_MAX_OPTS entries before the {0} that ends it */
    uint64_t given;        /* bit i: opts[i] appeared on the command line, either form of a flag (set by parse) */
} ds_cli;

/* The bits of ds_cli.given; ds_cli_parse stops with an internal error on a longer table. */
#define DS_CLI_MAX_OPTS 64

/* Global flag set by --progress: draw progress even when stderr is not a terminal. */
extern int ds_cli_progress;

/* Parses argv. Exits 0 after --help/--version, 2 on a usage error. Returns the number of
 * positional arguments and points *pos at them (inside argv). */
int ds_cli_parse(ds_cli *cli, int argc, char **argv, char ***pos);

/* Whether the option named `name` was given on the command line (a flag: --NAME or --no-NAME). */
int ds_cli_given(const ds_cli *cli, const char *name);

/* For checks that need more than a range: "dsX: MSG" + hint, exit 2. */
void ds_usage_error(const ds_cli *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Every option's value as one JSON object, for the `config` attribute. Caller frees. */
char *ds_cli_json(const ds_cli *cli);

/* Taking back the options a run was started with (dstrain --resume): json is ds_cli_json's
 * text as a checkpoint recorded it. Every option of the table that it holds, that is not
 * named in `fresh` (a NULL-ended list of options that belong to one process, such as
 * --max-steps) and that was not given on this command line takes the recorded value;
 * each one that was given with another value is listed in *changes (caller frees; NULL when
 * none), with both values as --help prints them (numbers in full). Members the table does
 * not know (options of another version) are passed over. Returns the number of changes, or
 * -1 with a message naming `what` when the text is malformed or holds a value the option
 * cannot take. */
typedef struct {
    const ds_option *opt;
    char saved[256], now[256];
} ds_cli_change;
int ds_cli_restore(ds_cli *cli, const char *json, const char *const *fresh, const char *what,
                   ds_cli_change **changes);

/* The progress setting for ds_progress_start: 1 with --progress, else -1 (terminal only). */
int ds_cli_progress_mode(void);

/* Parses a range "LO,HI" of two numbers, each a decimal or a fraction A/B ("3/4,4/3"), into
 * out[0], out[1]. Returns 0, or -1 when s is not of that form (no message: the caller names
 * the option). The order of LO and HI is not checked. */
int ds_cli_range(const char *s, double out[2]);


#endif
