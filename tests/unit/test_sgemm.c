/* The GEMM kernels of every instruction set the CPU has, in one process: each against the
 * plain kernel bit for bit, and the plain kernel against double-precision sums, on shapes
 * that reach every tile height and width, the masked column tails, segmented reductions,
 * the blocked long reduction, both A layouts and accumulation. A level the CPU lacks is a
 * SKIP line, never a pass.
 *
 * Also the sum rule itself (backend/cpu_sgemm.h), which is what makes the levels agree: each
 * element is one fma chain from 0, in order, then added to C; checked against a scalar
 * fmaf loop that spells the rule out. */
#include "../check.h"
#include "cpu_isa.h"
#include "rng.h"
#include "backend/cpu_sgemm.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static ds_rng rng;

typedef struct {
    long m;
    int n;
    long nseg, kseg, sai, sap, seg_a, ldb, seg_b, ldc;
    int acc;
} shape;

/* Sizes of A, B and C that the shape touches (plus one vector of slack past each: the
 * kernels must not write there). */
static size_t a_len(const shape *s)
{
    return (size_t)((s->m - 1) * s->sai + (s->nseg - 1) * s->seg_a + (s->kseg - 1) * s->sap + 1);
}
static size_t b_len(const shape *s) { return (size_t)((s->nseg - 1) * s->seg_b + (s->kseg - 1) * s->ldb + s->n); }
static size_t c_len(const shape *s) { return (size_t)((s->m - 1) * s->ldc + s->n); }

static float *randn(size_t n)
{
    float *x = malloc((n + 16) * sizeof *x);
    for (size_t i = 0; i < n + 16; i++) x[i] = (float)ds_rng_normal(&rng);
    return x;
}

/* The rule written out one element at a time with fmaf: what every level must produce. */
static void rule(const shape *s, const float *A, const float *B, float *C)
{
    for (long i = 0; i < s->m; i++)
        for (int j = 0; j < s->n; j++) {
            float *c = C + i * s->ldc + j;
            long block = s->nseg == 1 && s->kseg > 512 ? 256 : s->kseg;
            for (long k0 = 0; k0 < s->kseg; k0 += block) {
                float acc = 0;
                for (long g = 0; g < s->nseg; g++)
                    for (long p = k0; p < k0 + block && p < s->kseg; p++)
                        acc = fmaf(A[i * s->sai + g * s->seg_a + p * s->sap], B[g * s->seg_b + p * s->ldb + j], acc);
                *c = s->acc || k0 > 0 ? *c + acc : acc;
            }
        }
}

/* Runs one shape on every level the CPU has; sets *bad (and *why) unless all give the
 * rule's bits, C's slack untouched, and the rule is close to the double sums. */
static void run_shape(const shape *s, int *bad, const char **why)
{
    size_t na = a_len(s), nb = b_len(s), nc = c_len(s);
    float *A = randn(na), *B = randn(nb), *C0 = randn(nc), *want = malloc((nc + 16) * sizeof *want),
          *got = malloc((nc + 16) * sizeof *got);
    memcpy(want, C0, (nc + 16) * sizeof *want);
    rule(s, A, B, want);
    // The rule against double sums: a sequential fp32 sum of kd terms is off by at most
    // about kd * 6e-8 * (sum of |terms|); a wrong index is off by the terms themselves.
    long kd = s->nseg * s->kseg;
    for (long i = 0; i < s->m && !*bad; i++)
        for (int j = 0; j < s->n; j++) {
            double ref = s->acc ? C0[i * s->ldc + j] : 0, mag = fabs(ref);
            for (long g = 0; g < s->nseg; g++)
                for (long p = 0; p < s->kseg; p++) {
                    double t = (double)A[i * s->sai + g * s->seg_a + p * s->sap] * B[g * s->seg_b + p * s->ldb + j];
                    ref += t, mag += fabs(t);
                }
            if (fabs(want[i * s->ldc + j] - ref) > 1.2e-7 * (kd + 1) * mag) {
                *bad = 1, *why = "the rule is off the double sums";
                break;
            }
        }
    for (int l = 0; l < DS_CPU_LEVELS && !*bad; l++) {
        if (!ds_cpu_isa_supported((ds_cpu_isa)l)) continue;
        memcpy(got, C0, (nc + 16) * sizeof *got);
        ds_sgemm_seg_isa((ds_cpu_isa)l, s->m, s->n, s->nseg, s->kseg, A, s->sai, s->sap, s->seg_a, B, s->ldb,
                         s->seg_b, got, s->ldc, s->acc);
        if (memcmp(got, want, (nc + 16) * sizeof *got)) {
            size_t first = 0;
            while (first < nc + 16 && !memcmp(got + first, want + first, sizeof *got)) first++;
            fprintf(stderr, "  %s: m %ld n %d nseg %ld kseg %ld sai %ld sap %ld acc %d: element %zu %s %.9g want %.9g\n",
                    ds_cpu_isa_name((ds_cpu_isa)l), s->m, s->n, s->nseg, s->kseg, s->sai, s->sap, s->acc, first,
                    first >= nc ? "(past C!)" : "", got[first], want[first]);
            *bad = 1, *why = "a level differs from the rule";
        }
    }
    free(A), free(B), free(C0), free(want), free(got);
}

/* A row-major product with strides one past the dense ones (so the kernels cannot assume
 * them), A plain or transposed. */
static shape dense(long m, int n, long kd, int transposed, int acc)
{
    shape s = {m, n, 1, kd, transposed ? 1 : kd + 1, transposed ? m + 3 : 1, 0, n + 5, 0, n + 2, acc};
    return s;
}

static void test_levels_agree(void)
{
    check_begin("sgemm: every level gives the rule's bits");
    int bad = 0;
    const char *why = "";
    // Every tile height (1..16 rows, and the equal-height split past them), every column
    // tail (1..70 columns: one to five vectors of 8 or 16, masked ends), both A layouts.
    for (long m = 1; m <= 34 && !bad; m += (m < 17 ? 1 : 5))
        for (int n = 1; n <= 70 && !bad; n += (n < 26 ? 1 : 7))
        {
            shape s = dense(m, n, 7, (int)(m + n) % 2, n % 3 == 0);
            run_shape(&s, &bad, &why);
        }
    // The A row strides the kernels specialise: 16, 32, 48 and 64 (c = k in a convolution).
    for (int n = 8; n <= 64 && !bad; n += 8) {
        shape s = {9, n, 3, 5 * n / 8, n, 1, 9L * n, n, 5L * n * n / 8, n, 0};
        run_shape(&s, &bad, &why);
    }
    // Segments whose rows overlap (a convolution's windows) and long reductions: one
    // segment past 512 is blocked by 256, several segments are not.
    shape segs[] = {{14, 16, 3, 48, 32, 1, 160, 16, 48 * 16, 16, 0},
                    {5, 40, 1, 1000, 1000, 1, 0, 40, 0, 40, 1},
                    {7, 64, 1, 513, 1, 9, 0, 64, 0, 64, 0},
                    {3, 130, 1, 700, 700, 1, 0, 130, 0, 131, 1},
                    {20, 24, 4, 300, 300, 1, 1200, 24, 300 * 24, 24, 0},
                    {64, 300, 1, 12, 1, 64, 0, 300, 0, 300, 1},
                    // short rows, long reductions: blocked in L1, partial sums carried over
                    {14, 64, 3, 200, 64, 1, 30 * 64, 64, 200 * 64, 64, 1},
                    {7, 130, 2, 300, 300, 1, 600, 136, 300 * 136, 131, 1},
                    {32, 40, 1, 400, 400, 1, 0, 40, 0, 41, 0},
                    {9, 24, 3, 129, 1, 11, 11 * 129, 24, 129 * 24, 24, 1},
                    {33, 24, 3, 129, 1, 40, 40 * 129, 24, 129 * 24, 24, 0}};
    for (size_t i = 0; i < sizeof segs / sizeof *segs && !bad; i++) run_shape(&segs[i], &bad, &why);
    // Random shapes.
    for (int t = 0; t < 300 && !bad; t++) {
        int tr = (int)ds_rng_below(&rng, 2);
        shape s = {1 + (long)ds_rng_below(&rng, 40), 1 + (int)ds_rng_below(&rng, 150), 1 + (long)ds_rng_below(&rng, 3),
                   1 + (long)ds_rng_below(&rng, 90), 0, 0, 0, 0, 0, 0, (int)ds_rng_below(&rng, 2)};
        s.sap = tr ? s.m + (long)ds_rng_below(&rng, 4) : 1;
        s.sai = tr ? 1 : s.kseg * s.nseg + (long)ds_rng_below(&rng, 4);
        s.seg_a = tr ? s.sap * s.kseg : s.kseg;
        s.ldb = s.n + (long)ds_rng_below(&rng, 9);
        s.seg_b = s.ldb * s.kseg;
        s.ldc = s.n + (long)ds_rng_below(&rng, 9);
        run_shape(&s, &bad, &why);
    }
    CHECK(!bad, "%s", why);
    check_end();
}

int main(void)
{
    ds_rng_init(&rng, 5, DS_RNG_DATA, 11);
    for (int l = 0; l < DS_CPU_LEVELS; l++)
        if (!ds_cpu_isa_supported((ds_cpu_isa)l))
            printf("SKIP sgemm %s kernels: this CPU cannot run them (compared where it can)\n",
                   ds_cpu_isa_name((ds_cpu_isa)l));
    test_levels_agree();
    return check_exit();
}
