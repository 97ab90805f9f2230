/* check.h: the helpers every C unit test uses.
 *
 * A test program runs named cases; each prints "PASS name" or "FAIL name" (with the worst
 * element or the failed condition on stderr), and main returns check_exit(), non-zero when
 * any case failed. tests/run.sh counts the PASS and FAIL lines. */
#ifndef DS_CHECK_H
#define DS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int check_case_failures, check_total_failures;
static const char *check_case_name;

static inline void check_begin(const char *name)
{
    check_case_name = name;
    check_case_failures = 0;
}

static inline void check_end(void)
{
    printf("%s %s\n", check_case_failures ? "FAIL" : "PASS", check_case_name);
    fflush(stdout);
    check_total_failures += check_case_failures != 0;
}

static inline int check_exit(void) { return check_total_failures ? 1 : 0; }

/* 1 when the long tier runs (tests/run.sh --long, make check); in the quick tier prints
 * "LONG name" (run.sh counts it as left to make check) and returns 0. */
static inline int check_long(const char *name)
{
    const char *v = getenv("DS_TEST_LONG");
    if (v && v[0] == '1') return 1;
    printf("LONG %s\n", name);
    fflush(stdout);
    return 0;
}

#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "  %s:%d: %s: check failed: %s: ", __FILE__, __LINE__, \
                    check_case_name, #cond);                                      \
            fprintf(stderr, __VA_ARGS__);                                         \
            fputc('\n', stderr);                                                  \
            check_case_failures++;                                                \
        }                                                                         \
    } while (0)

/* Compares got against ref elementwise: |got - ref| <= atol + rtol * |ref|. Prints the worst
 * element (by its excess over the tolerance) when any fails. */
static inline int check_close_d(const char *what, const double *got, const double *ref, size_t n,
                                double atol, double rtol)
{
    size_t worst = 0, bad = 0;
    double worst_excess = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - ref[i]), tol = atol + rtol * fabs(ref[i]);
        double excess = isnan(got[i]) != isnan(ref[i]) || isnan(err) ? INFINITY : err - tol;
        if (excess > worst_excess) worst_excess = excess, worst = i;
        if (excess > 0) bad++;
    }
    if (bad) {
        fprintf(stderr, "  %s: %s: %zu of %zu elements off; worst [%zu] got %.9g want %.9g (atol %g rtol %g)\n",
                check_case_name, what, bad, n, worst, got[worst], ref[worst], atol, rtol);
        check_case_failures++;
    }
    return bad == 0;
}

static inline int check_close(const char *what, const float *got, const float *ref, size_t n,
                              double atol, double rtol)
{
    double *g = malloc((n ? n : 1) * sizeof *g), *r = malloc((n ? n : 1) * sizeof *r);
    for (size_t i = 0; i < n; i++) g[i] = got[i], r[i] = ref[i];
    int ok = check_close_d(what, g, r, n, atol, rtol);
    free(g);
    free(r);
    return ok;
}

#endif
