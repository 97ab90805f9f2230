/* cli: command-line options declared as a table, so every tool's --help, defaults and
 * usage errors look the same.
 *
 * The default of an option is the value its variable holds before ds_cli_parse; --help
 * prints it. Every tool also gets -h/--help, --version, -q/--quiet, -v/--verbose and
 * --progress. A usage error prints one line naming the problem plus a hint and exits 2. */
#ifndef DS_CLI_H
#define DS_CLI_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    DS_OPT_FLAG,    /* int *: set to 1 */
    DS_OPT_INT,     /* long long * */
    DS_OPT_DOUBLE,  /* double * */
    DS_OPT_STRING,  /* const char **: NULL default prints as "none" */
    DS_OPT_CHOICE,  /* const char **: one of .choices, "a|b|c" */
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
} ds_option;

typedef struct {
    const char *prog;      /* "dsplit" */
    const char *args;      /* "[options] ROOT" */
    const char *summary;   /* one sentence for --help */
    const char *epilog;    /* optional text after the options */
    int min_pos, max_pos;  /* positional argument count; max_pos < 0: unlimited */
    ds_option *opts;
    uint64_t given;        /* bit i: opts[i] appeared on the command line (set by parse) */
} ds_cli;

/* Global flag set by --progress: draw progress even when stderr is not a terminal. */
extern int ds_cli_progress;

/* Parses argv. Exits 0 after --help/--version, 2 on a usage error. Returns the number of
 * positional arguments and points *pos at them (inside argv). */
int ds_cli_parse(ds_cli *cli, int argc, char **argv, char ***pos);

/* Whether the option named `name` was given on the command line. */
int ds_cli_given(const ds_cli *cli, const char *name);

/* For checks that need more than a range: "dsX: MSG" + hint, exit 2. */
void ds_usage_error(const ds_cli *cli, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* Every option's value as one JSON object, for the `config` attribute. Caller frees. */
char *ds_cli_json(const ds_cli *cli);

/* The progress setting for ds_progress_start: 1 with --progress, else -1 (terminal only). */
int ds_cli_progress_mode(void);

/* Writes s as a JSON string literal (quotes included). */
void ds_json_string(FILE *f, const char *s);

#endif
