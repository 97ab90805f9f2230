/* Option tables (cli) and the shared compute options (compute): the --no- form of flags and
 * the last form given winning, choice indices, the recorded config JSON, the limit of
 * 64 options, and the order of --precision's choices. */
#include "../check.h"
#include "cli.h"
#include "compute.h"
#include "image.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int flag, nesterov_like, deterministic_like;
static const char *mode, *unset;
static int mode_index, unset_index;
static long long n;
static double x;

static ds_option opts[] = {
    DS_OPT("flag", DS_OPT_FLAG, &flag, NULL, "a flag"),
    DS_OPT("on", DS_OPT_FLAG, &nesterov_like, NULL, "a flag on by default"),
    DS_OPT("no-thing", DS_OPT_FLAG, &deterministic_like, NULL, "a flag named no-: no --no-no-thing"),
    DS_CHOICE_INDEX("mode", &mode, &mode_index, "a|bb|c", "a choice"),
    DS_CHOICE_INDEX("unset", &unset, &unset_index, "x|y", "a choice without default"),
    DS_NUM("n", DS_OPT_INT, &n, "N", "a number", 0, 10),
    DS_NUM("x", DS_OPT_DOUBLE, &x, "X", "a real number", 0, 10),
    {0},
};

/* Parses the NULL-terminated words after a program name with fresh defaults. */
static ds_cli parse(const char *const *words)
{
    flag = 0, nesterov_like = 1, deterministic_like = 0, mode = "bb", unset = NULL, n = 3, x = 0.1;
    mode_index = unset_index = 99;
    char *argv[16] = {"prog"};
    int argc = 1;
    for (; words[argc - 1]; argc++) argv[argc] = (char *)words[argc - 1];
    ds_cli cli = {.prog = "prog", .args = "[options]", .summary = "test", .max_pos = -1, .opts = opts};
    char **pos;
    ds_cli_parse(&cli, argc, argv, &pos);
    return cli;
}

static void test_no_forms(void)
{
    check_begin("cli_no_forms");
    ds_cli c = parse((const char *[]){"--flag", NULL});
    CHECK(flag == 1 && ds_cli_given(&c, "flag"), "--flag");
    c = parse((const char *[]){"--flag", "--no-flag", NULL});
    CHECK(flag == 0 && ds_cli_given(&c, "flag"), "--no-flag after --flag: %d", flag);
    c = parse((const char *[]){"--no-flag", "--flag", NULL});
    CHECK(flag == 1, "the last form given wins: %d", flag);
    /* A flag on by default (dstrain's --nesterov) follows the same rule both ways. */
    c = parse((const char *[]){"--no-on", NULL});
    CHECK(nesterov_like == 0 && ds_cli_given(&c, "on"), "--no-on: %d", nesterov_like);
    c = parse((const char *[]){"--no-on", "--on", NULL});
    CHECK(nesterov_like == 1, "--no-on --on: the last wins: %d", nesterov_like);
    c = parse((const char *[]){NULL});
    CHECK(nesterov_like == 1 && !ds_cli_given(&c, "on"), "the default stays: %d", nesterov_like);
    c = parse((const char *[]){"--no-thing", NULL});
    CHECK(deterministic_like == 1, "a flag named no-thing is set by its own name");
    check_end();
}

static void test_choice_index(void)
{
    check_begin("cli_choice_index");
    parse((const char *[]){NULL});
    CHECK(mode_index == 1 && unset_index == -1, "defaults: mode %d (want 1), unset %d (want -1)", mode_index,
          unset_index);
    parse((const char *[]){"--mode", "c", "--unset=y", NULL});
    CHECK(mode_index == 2 && !strcmp(mode, "c") && unset_index == 1, "given: mode %d, unset %d", mode_index,
          unset_index);
    check_end();
}

/* The recorded config: every option in table order, a flag as its value. */
static void test_json(void)
{
    check_begin("cli_json");
    const char *want[] = {
        "{\"flag\": false, \"on\": true, \"no-thing\": false, \"mode\": \"bb\", "
        "\"unset\": null, \"n\": 3, \"x\": 0.10000000000000001}",
        "{\"flag\": true, \"on\": false, \"no-thing\": false, \"mode\": \"a\", "
        "\"unset\": \"x\", \"n\": 7, \"x\": 0.10000000000000001}",
    };
    const char *const *lines[] = {(const char *[]){NULL},
                                  (const char *[]){"--on", "--no-on", "--flag", "--mode=a", "--unset", "x",
                                                   "--n", "7", NULL}};
    for (int i = 0; i < 2; i++) {
        ds_cli c = parse(lines[i]);
        char *j = ds_cli_json(&c);
        CHECK(j && !strcmp(j, want[i]), "got %s\nwant %s", j ? j : "NULL", want[i]);
        free(j);
    }
    check_end();
}

/* --resume's taking back of a recorded config: what was not given comes from the record,
 * exactly (a double to the bit); what was given again with another value is a change with
 * both values; options named fresh are left alone; a malformed record or a value the
 * option cannot take is an error. */
static void test_restore(void)
{
    check_begin("cli_restore");
    ds_cli c = parse((const char *[]){"--flag", "--no-on", "--mode=a", "--n", "7", "--unset", "y", "--x", "0.3", NULL});
    char *saved = ds_cli_json(&c);
    static const char *const fresh[] = {"unset", NULL};
    c = parse((const char *[]){"--n", "7", "--mode", "c", NULL});
    ds_cli_change *ch = NULL;
    int k = ds_cli_restore(&c, saved, fresh, "a.h5", &ch);
    CHECK(k == 1 && ch && !strcmp(ch[0].opt->name, "mode") && !strcmp(ch[0].saved, "a") && !strcmp(ch[0].now, "c"),
          "changes: %d (%s %s -> %s)", k, k > 0 ? ch[0].opt->name : "", k > 0 ? ch[0].saved : "", k > 0 ? ch[0].now : "");
    CHECK(flag == 1 && nesterov_like == 0 && n == 7 && x == 0.3, "taken back: flag %d on %d n %lld x %.17g", flag,
          nesterov_like, n, x);
    CHECK(!strcmp(mode, "c") && mode_index == 2, "the given value stays: %s (%d)", mode, mode_index);
    CHECK(unset == NULL, "a fresh option is not taken back: %s", unset ? unset : "NULL");
    free(ch);
    /* a choice taken back gets its index too; the double's change is said in its shortest form */
    c = parse((const char *[]){"--x", "0.25", NULL});
    ch = NULL;
    k = ds_cli_restore(&c, saved, NULL, "a.h5", &ch);
    CHECK(k == 1 && !strcmp(ch[0].saved, "0.3") && !strcmp(ch[0].now, "0.25"), "double change: %d %s -> %s", k,
          k > 0 ? ch[0].saved : "", k > 0 ? ch[0].now : "");
    CHECK(!strcmp(mode, "a") && mode_index == 0 && unset && !strcmp(unset, "y") && unset_index == 1,
          "choices taken back: %s (%d), %s (%d)", mode, mode_index, unset ? unset : "NULL", unset_index);
    free(ch);
    /* an option the record lacks keeps its default; one the table lacks is passed over */
    c = parse((const char *[]){NULL});
    CHECK(ds_cli_restore(&c, "{\"n\": 9, \"gone\": 1}", NULL, "a.h5", &ch) == 0 && n == 9 && x == 0.1,
          "n %lld x %g", n, x);
    const char *bad[] = {"{\"mode\": \"zz\"}", "{\"n\": 1.5}", "{\"flag\": 1}", "{\"n\": \"3\"}", "not json"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = parse((const char *[]){NULL});
        CHECK(ds_cli_restore(&c, bad[i], NULL, "a.h5", &ch) == -1, "%s accepted", bad[i]);
    }
    free(saved);
    check_end();
}

/* Runs fn in a child, its messages discarded; returns its wait status. */
static int in_child(void (*fn)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static void parse_unknown_no(void) { parse((const char *[]){"--no-n", NULL}); }
static void parse_flag_value(void) { parse((const char *[]){"--no-flag=1", NULL}); }

static void parse_65(void)
{
    static int v[65];
    static ds_option big[66];
    static char names[65][16];
    for (int i = 0; i < 65; i++) {
        snprintf(names[i], sizeof names[i], "o%d", i);
        big[i] = (ds_option)DS_OPT(names[i], DS_OPT_FLAG, &v[i], NULL, "x");
    }
    ds_cli cli = {.prog = "prog", .args = "", .summary = "test", .max_pos = -1, .opts = big};
    char *argv[] = {"prog", NULL};
    char **pos;
    ds_cli_parse(&cli, 1, argv, &pos);
}

static void test_errors(void)
{
    check_begin("cli_errors");
    int st = in_child(parse_unknown_no);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "--no- of a number is a usage error (exit 2)");
    st = in_child(parse_flag_value);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "--no-flag=1 is a usage error (exit 2)");
    st = in_child(parse_65);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "a 65-option table must stop with an internal error");
    check_end();
}

/* A --precision choice's index is its ds_precision. */
static void test_precision_choices(void)
{
    check_begin("compute_precision_choices");
    char names[] = DS_PRECISION_CHOICES;
    int i = 0;
    for (char *save, *p = strtok_r(names, "|", &save); p; p = strtok_r(NULL, "|", &save), i++) {
        ds_precision e;
        CHECK(ds_precision_parse(p, &e) == 0 && (int)e == i && !strcmp(ds_precision_name(e), p),
              "choice %d '%s' is not ds_precision %d", i, p, i);
    }
    CHECK(i == DS_PRECISION_AUTO + 1, "%d precisions, not %d", i, DS_PRECISION_AUTO + 1);
    ds_compute_options d = DS_COMPUTE_DEFAULTS;
    CHECK(!strcmp(ds_precision_name((ds_precision)d.precision_index), d.precision), "defaults disagree");
    CHECK(d.precision_index == DS_PRECISION_AUTO, "the default is auto (bf16 on a GPU, fp32 on the CPU)");
    check_end();
}

/* A --device choice's index is its ds_device, and a --fit choice's its ds_fit. */
static void test_device_and_fit_choices(void)
{
    check_begin("compute_device_and_fit_choices");
    char devices[] = DS_DEVICE_CHOICES, fits[] = DS_FIT_CHOICES;
    int i = 0;
    for (char *save, *p = strtok_r(devices, "|", &save); p; p = strtok_r(NULL, "|", &save), i++) {
        ds_device e;
        CHECK(ds_device_parse(p, &e) == 0 && (int)e == i && !strcmp(ds_device_name(e), p),
              "choice %d '%s' is not ds_device %d", i, p, i);
    }
    CHECK(i == DS_DEVICE_CUDA + 1, "%d devices, not %d", i, DS_DEVICE_CUDA + 1);
    ds_compute_options d = DS_COMPUTE_DEFAULTS;
    CHECK(!strcmp(ds_device_name((ds_device)d.device_index), d.device), "defaults disagree");
    i = 0;
    for (char *save, *p = strtok_r(fits, "|", &save); p; p = strtok_r(NULL, "|", &save), i++)
        CHECK(ds_fit_parse(p) == i && !strcmp(ds_fit_name((ds_fit)i), p), "choice %d '%s' is not ds_fit %d", i, p, i);
    CHECK(i == DS_FIT_SQUASH + 1, "%d fits, not %d", i, DS_FIT_SQUASH + 1);
    check_end();
}

/* "LO,HI" ranges: decimals and fractions; anything else refused. */
static void test_range(void)
{
    check_begin("cli_range");
    double r[2] = {0, 0};
    CHECK(ds_cli_range("0.08,1", r) == 0 && r[0] == 0.08 && r[1] == 1, "0.08,1 gave %g, %g", r[0], r[1]);
    CHECK(ds_cli_range("3/4,4/3", r) == 0 && r[0] == 0.75 && r[1] == 4.0 / 3, "3/4,4/3 gave %g, %g", r[0], r[1]);
    CHECK(ds_cli_range("1e-1,2", r) == 0 && r[0] == 0.1 && r[1] == 2, "1e-1,2 gave %g, %g", r[0], r[1]);
    const char *bad[] = {"", "1", "1,", ",1", "1,2,3", "a,b", "1/0,2", "1/,2", "1,2x", "nan,1", "1,inf", "1;2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(ds_cli_range(bad[i], r) == -1, "'%s' accepted as %g, %g", bad[i], r[0], r[1]);
    check_end();
}

int main(void)
{
    test_no_forms();
    test_choice_index();
    test_json();
    test_errors();
    test_precision_choices();
    test_device_and_fit_choices();
    test_range();
    test_restore();
    return check_exit();
}
