/* The bf16 products (backend/cpu_bf16.h) on every kernel set the CPU has, in one process:
 *   - the rounding against the rule spelled out, and, on a CPU with AVX512-BF16, against
 *     VCVTNEPS2BF16 itself; the vector rounding against the scalar one;
 *   - every level's kernel bit for bit against the rule written out one element at a time
 *     (pairs, odd element first, flushing), on shapes that reach every tile height and
 *     width, masked tails, segments, the blocked long reduction and accumulation, with data
 *     of wide exponent ranges and values near the bottom of the normal range;
 *   - on a CPU with AVX512-BF16, the rule against the instruction (that is what the
 *     emulations promise: the same bits as VDPBF16PS);
 *   - the rule against double sums of the same bf16 operands.
 * A level the CPU lacks is a SKIP line, never a pass. */
#include "../check.h"
#include "cpu_isa.h"
#include "rng.h"
#include "backend/cpu_bf16.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

static ds_rng rng;

static float bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A float of the given class: 0 normal in [-8, 8), 1 any finite float (every exponent),
 * 2 near the bottom of the normal range (products there underflow), 3 denormal. */
static float value(int cls)
{
    uint32_t sign = (uint32_t)ds_rng_below(&rng, 2) << 31, man = (uint32_t)(ds_rng_u64(&rng) & 0x7fffff);
    switch (cls) {
    case 0: return (float)(16.0 * ds_rng_double(&rng) - 8.0);
    case 1: return bits_float(sign | (uint32_t)(1 + ds_rng_below(&rng, 254)) << 23 | man);
    case 2: return bits_float(sign | (uint32_t)(58 + ds_rng_below(&rng, 12)) << 23 | man);
    default: return bits_float(sign | man);
    }
}

/* ---- rounding ---- */

/* The rule of cpu_bf16.h in other words: the nearest bf16, ties to even, by arithmetic on
 * the two neighbours; NaN quiet; denormals to zero. */
static uint16_t round_rule(float x)
{
    uint32_t u = float_bits(x);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    if (fabsf(x) < FLT_MIN) return (uint16_t)((u >> 16) & 0x8000);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    /* past the largest bf16 the upper neighbour is 2^128, which rounds to infinity */
    double vhi = (hi & 0x7f800000u) == 0x7f800000u ? copysign(ldexp(1.0, 128), x) : bits_float(hi);
    double dlo = fabs((double)bits_float(lo) - x), dhi = fabs(vhi - x);
    if ((lo & 0x7f800000u) == 0x7f800000u) return (uint16_t)(lo >> 16);  /* infinity */
    if (dlo < dhi || (dlo == dhi && !(lo & 0x10000u))) return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);  /* carries into the exponent, to infinity at the top */
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx512f,avx512bf16"))) static uint16_t round_instruction(float x)
{
    __m256i r = (__m256i)_mm512_cvtneps_pbh(_mm512_set1_ps(x));
    return (uint16_t)_mm256_extract_epi16(r, 0);
}
#endif

static void test_rounding(void)
{
    check_begin("bf16_rounding");
    enum { N = 200000 };
    static float x[N];
    static uint16_t got[N];
    /* edge values, then exact ties (the lower half 0x8000) with even and odd upper halves,
     * which random data hits too rarely to tell ties-to-even from ties-away */
    static const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, FLT_MIN, -FLT_MIN * 0.5f};
    const int nedge = (int)(sizeof edge / sizeof *edge), nties = 64;
    for (int i = 0; i < N; i++) {
        if (i < nedge)
            x[i] = edge[i];
        else if (i < nedge + nties)
            x[i] = bits_float((uint32_t)(ds_rng_u64(&rng) & 0xfeff0000u) | 0x8000u | (uint32_t)(i & 1) << 16);
        else
            x[i] = value(i % 4);
    }
    int bad = 0, instr = ds_cpu_isa_supported(DS_CPU_AVX512BF16), bad_instr = 0;
    ds_bf16_round_n(got, x, N);
    for (int i = 0; i < N; i++) {
        uint16_t want = round_rule(x[i]);
        if (ds_bf16_round(x[i]) != want || got[i] != want) {
            if (bad++ < 3)
                fprintf(stderr, "  %a: rule %04x, ds_bf16_round %04x, vector %04x\n", x[i], want, ds_bf16_round(x[i]),
                        got[i]);
        }
#if defined(__x86_64__) || defined(__i386__)
        if (instr && round_instruction(x[i]) != want && bad_instr++ < 3)
            fprintf(stderr, "  %a: rule %04x, VCVTNEPS2BF16 %04x\n", x[i], want, round_instruction(x[i]));
#endif
    }
    CHECK(!bad, "%d of %d roundings differ from the rule", bad, N);
    /* every length up to a few vectors and unaligned starts: the vector loops' tails */
    int bad_len = 0;
    for (int len = 1; len <= 100; len++) {
        memset(got, 0xff, (size_t)(len + 1) * sizeof *got);
        ds_bf16_round_n(got, x + nedge + len, (size_t)len);
        for (int i = 0; i < len; i++) bad_len += got[i] != round_rule(x[nedge + len + i]);
        bad_len += got[len] != 0xffff;  /* nothing written past the end */
    }
    CHECK(!bad_len, "%d elements of short or unaligned roundings differ from the rule", bad_len);
    if (instr)
        CHECK(!bad_instr, "VCVTNEPS2BF16 differs from the rule %d times", bad_instr);
    else
        printf("SKIP bf16_rounding_instruction: this CPU has no AVX512-BF16 (the rule is checked alone)\n");
    check_end();
}

/* ---- products ---- */

typedef struct {
    long m;
    int n;
    long nseg, kseg, sai, seg_a, ldb, seg_b, ldc;
    int acc;
} shape;

static size_t a_len(const shape *s) { return (size_t)((s->m - 1) * s->sai + (s->nseg - 1) * s->seg_a + s->kseg); }
static size_t b_len(const shape *s) { return (size_t)((s->nseg - 1) * s->seg_b + (s->kseg / 2 - 1) * s->ldb + 2 * s->n); }
static size_t c_len(const shape *s) { return (size_t)((s->m - 1) * s->ldc + s->n); }

static float ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* The rule one element at a time. */
static void rule(const shape *s, const ds_bf16 *A, const ds_bf16 *B, float *C)
{
    for (long i = 0; i < s->m; i++)
        for (int j = 0; j < s->n; j++) {
            float *c = C + i * s->ldc + j;
            long block = s->nseg == 1 && s->kseg > BGEMM_KC_MAX ? BGEMM_KC : s->kseg;
            for (long k0 = 0; k0 < s->kseg; k0 += block) {
                float acc = 0;
                for (long g = 0; g < s->nseg; g++)
                    for (long p = k0; p < k0 + block && p < s->kseg; p += 2) {
                        const ds_bf16 *a = A + i * s->sai + g * s->seg_a + p;
                        const ds_bf16 *b = B + g * s->seg_b + p / 2 * s->ldb + 2 * j;
                        acc = ftz(fmaf(ds_bf16_value(a[1]), ds_bf16_value(b[1]), acc));
                        acc = ftz(fmaf(ds_bf16_value(a[0]), ds_bf16_value(b[0]), acc));
                    }
                *c = s->acc || k0 > 0 ? ftz(ftz(*c) + acc) : acc;
            }
        }
}

static ds_bf16 *random_bf16(size_t n, int cls)
{
    ds_bf16 *x = malloc((n + 64) * sizeof *x);
    for (size_t i = 0; i < n + 64; i++) x[i] = ds_bf16_round(value(cls));
    return x;
}

/* One shape on every level; sets *bad unless all give the rule's bits with C's slack
 * untouched, and (for class 0 data) the rule is close to the double sums. */
static void run_shape(const shape *s, int cls, int *bad, const char **why)
{
    size_t na = a_len(s), nb = b_len(s), nc = c_len(s);
    ds_bf16 *A = random_bf16(na, cls), *B = random_bf16(nb, cls);
    float *C0 = malloc((nc + 16) * sizeof *C0), *want = malloc((nc + 16) * sizeof *want),
          *got = malloc((nc + 16) * sizeof *got);
    for (size_t i = 0; i < nc + 16; i++) C0[i] = cls == 0 ? value(0) : ds_bf16_value(ds_bf16_round(value(cls)));
    memcpy(want, C0, (nc + 16) * sizeof *want);
    rule(s, A, B, want);
    long kd = s->nseg * s->kseg;
    for (long i = 0; i < s->m && cls == 0 && !*bad; i++)
        for (int j = 0; j < s->n; j++) {
            double ref = s->acc ? C0[i * s->ldc + j] : 0, mag = fabs(ref);
            for (long g = 0; g < s->nseg; g++)
                for (long p = 0; p < s->kseg; p++) {
                    double t = (double)ds_bf16_value(A[i * s->sai + g * s->seg_a + p]) *
                               ds_bf16_value(B[g * s->seg_b + p / 2 * s->ldb + 2 * j + p % 2]);
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
        ds_bgemm_seg_isa((ds_cpu_isa)l, s->m, s->n, s->nseg, s->kseg, A, s->sai, s->seg_a, B, s->ldb, s->seg_b, got,
                         s->ldc, s->acc);
        if (memcmp(got, want, (nc + 16) * sizeof *got)) {
            size_t first = 0;
            while (first < nc + 16 && !memcmp(got + first, want + first, sizeof *got)) first++;
            fprintf(stderr, "  %s: class %d m %ld n %d nseg %ld kseg %ld sai %ld acc %d: element %zu %s %a want %a\n",
                    ds_cpu_isa_name((ds_cpu_isa)l), cls, s->m, s->n, s->nseg, s->kseg, s->sai, s->acc, first,
                    first >= nc ? "(past C!)" : "", got[first], want[first]);
            *bad = 1, *why = "a level differs from the rule";
        }
    }
    free(A), free(B), free(C0), free(want), free(got);
}

static shape dense(long m, int n, long kd, int acc)
{
    shape s = {m, n, 1, kd, kd + 2, 0, 2L * n + 4, 0, n + 3, acc};
    return s;
}

static void test_levels_agree(void)
{
    check_begin("bgemm: every level gives the rule's bits");
    int bad = 0;
    const char *why = "";
    for (int cls = 0; cls < 3 && !bad; cls++) {
        // Every tile height and column tail (vectors of 8 and 16 columns, masked ends).
        for (long m = 1; m <= 34 && !bad; m += (m < 17 ? 1 : 5))
            for (int n = 1; n <= 70 && !bad; n += (n < 26 ? 1 : 7)) {
                shape s = dense(m, n, 2 + 2 * ((m + n) % 5), n % 3 == 0);
                run_shape(&s, cls, &bad, &why);
            }
        // Segments (a convolution's window rows, overlapping) and long reductions: one
        // segment past BGEMM_KC_MAX is blocked, several are not.
        shape segs[] = {{14, 16, 3, 48, 32, 160, 40, 48 / 2 * 40, 16, 0},
                        {5, 40, 1, 1100, 1100, 0, 80, 0, 40, 1},
                        {7, 64, 1, 1026, 1026, 0, 128, 0, 64, 0},
                        {3, 130, 1, 1400, 1400, 0, 262, 0, 131, 1},
                        {20, 24, 4, 300, 300, 1200, 48, 150 * 48, 24, 0},
                        {64, 300, 1, 12, 12, 0, 600, 0, 300, 1},
                        {9, 24, 3, 130, 260, 130, 50, 65 * 50, 24, 1}};
        for (size_t i = 0; i < sizeof segs / sizeof *segs && !bad; i++) run_shape(&segs[i], cls, &bad, &why);
        for (int t = 0; t < 150 && !bad; t++) {
            shape s = {1 + (long)ds_rng_below(&rng, 40), 1 + (int)ds_rng_below(&rng, 150),
                       1 + (long)ds_rng_below(&rng, 3), 2 + 2 * (long)ds_rng_below(&rng, 45), 0, 0, 0, 0, 0,
                       (int)ds_rng_below(&rng, 2)};
            s.sai = s.kseg * s.nseg + 2 * (long)ds_rng_below(&rng, 3);
            s.seg_a = s.kseg;
            s.ldb = 2L * s.n + 2 * (long)ds_rng_below(&rng, 5);
            s.seg_b = s.ldb * s.kseg / 2;
            s.ldc = s.n + (long)ds_rng_below(&rng, 9);
            run_shape(&s, cls, &bad, &why);
        }
    }
    CHECK(!bad, "%s", why);
    check_end();
}

#if defined(__x86_64__) || defined(__i386__)
/* VDPBF16PS on one lane: acc + the pair's two products, as the hardware computes it. */
__attribute__((target("avx512f,avx512bf16"))) static float dp_instruction(float acc, uint32_t a, uint32_t b)
{
    __m512 r = _mm512_dpbf16_ps(_mm512_set1_ps(acc), (__m512bh)_mm512_set1_epi32((int)a),
                                (__m512bh)_mm512_set1_epi32((int)b));
    return _mm512_cvtss_f32(r);
}
#endif

/* The rule's step against the instruction, on pairs and accumulators of every class. */
static void test_rule_is_the_instruction(void)
{
    if (!ds_cpu_isa_supported(DS_CPU_AVX512BF16)) {
        printf("SKIP bf16_rule_is_vdpbf16ps: this CPU has no AVX512-BF16\n");
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    check_begin("bf16_rule_is_vdpbf16ps");
    long bad = 0, n = 0;
    for (int cls = 0; cls < 4; cls++)
        for (int t = 0; t < 300000; t++, n++) {
            /* operands straight from the generator: denormal bf16 inputs too (DAZ) */
            uint16_t a0 = (uint16_t)(float_bits(value(cls)) >> 16), a1 = (uint16_t)(float_bits(value(cls)) >> 16);
            uint16_t b0 = (uint16_t)(float_bits(value(cls)) >> 16), b1 = (uint16_t)(float_bits(value(cls)) >> 16);
            float acc = t % 3 ? value(cls) : 0.0f;
            float want = ftz(acc);
            want = ftz(fmaf(ftz(ds_bf16_value(a1)), ftz(ds_bf16_value(b1)), want));
            want = ftz(fmaf(ftz(ds_bf16_value(a0)), ftz(ds_bf16_value(b0)), want));
            float got = dp_instruction(acc, (uint32_t)a1 << 16 | a0, (uint32_t)b1 << 16 | b0);
            if (float_bits(got) != float_bits(want) && bad++ < 3)
                fprintf(stderr, "  acc %a a (%a, %a) b (%a, %a): VDPBF16PS %a, rule %a\n", acc, ds_bf16_value(a0),
                        ds_bf16_value(a1), ds_bf16_value(b0), ds_bf16_value(b1), got, want);
        }
    CHECK(!bad, "%ld of %ld steps differ", bad, n);
    check_end();
#endif
}

/* pack_pairs: element (p, j) lands at pair row p / 2, lane 2 j + p % 2; an odd k gets zeros. */
static void test_pack_pairs(void)
{
    check_begin("bf16_pack_pairs");
    const long k = 7, n = 5, sp = 11, sj = 2, ldb = 2 * n + 2;
    float src[7 * 11];
    ds_bf16 dst[4 * 12];
    for (int i = 0; i < 77; i++) src[i] = (float)i + 0.5f;
    memset(dst, 0xff, sizeof dst);
    ds_bf16_pack_pairs(dst, ldb, src, sp, sj, k, (int)n);
    int bad = 0;
    for (long p = 0; p < 8; p++)
        for (long j = 0; j < n; j++) {
            ds_bf16 want = p < k ? ds_bf16_round(src[p * sp + j * sj]) : 0;
            bad += dst[p / 2 * ldb + 2 * j + p % 2] != want;
        }
    CHECK(!bad, "%d elements misplaced", bad);
    check_end();
}

int main(void)
{
    ds_rng_init(&rng, 7, DS_RNG_DATA, 13);
    for (int l = 0; l < DS_CPU_LEVELS; l++)
        if (!ds_cpu_isa_supported((ds_cpu_isa)l))
            printf("SKIP bgemm %s kernels: this CPU cannot run them (compared where it can)\n",
                   ds_cpu_isa_name((ds_cpu_isa)l));
    test_rounding();
    test_pack_pairs();
    test_rule_is_the_instruction();
    test_levels_agree();
    return check_exit();
}
