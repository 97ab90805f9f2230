/* The bf16 products (backend/cpu_bf16.h) on every kernel set the CPU has, in one process:
 *   - the rounding against the rule spelled out, and, on a CPU with AVX512-BF16, against
 *     VCVTNEPS2BF16 itself; the vector rounding against the scalar one;
 *   - every level's kernel bit for bit against the rule written out one element at a time
 *     (pairs, odd element first, flushing), on shapes that reach every tile height and
 *     width, masked tails, segments, the blocked long reduction and accumulation, with data
 *     of wide exponent ranges and values near the bottom of the normal range;
 *   - on a CPU with AVX512-BF16, the rule against the instruction (that is what the
 *     emulations promise: the same bits as VDPBF16PS);
 *   - the rule against double sums of the same bf16 operands;
 *   - the amx level's kernel (cpu_bf16_amx.inc) on a model of the tiles, on every CPU: the
 *     tiles' rules kept, no load past an operand, the model's sums bit for bit; and within
 *     cpu_bf16.h's bound of the rule, on the model and, on a CPU with AMX, on the hardware.
 * A level the CPU lacks is a SKIP line, never a pass. */
#include "../check.h"
#include "cpu_isa.h"
#include "rng.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

static ds_rng rng;


/* A float of the given class: 0 normal in [-8, 8), 1 any finite float (every exponent),
 * 2 near the bottom of the normal range (products there underflow), 3 denormal. */
static float value(int cls)
{
    uint32_t sign = (uint32_t)ds_rng_below(&rng, 2) << 31, man = (uint32_t)(ds_rng_u64(&rng) & 0x7fffff);
    switch (cls) {
    case 0: return (float)(16.0 * ds_rng_double(&rng) - 8.0);
    case 1: return ds_bits_float(sign | (uint32_t)(1 + ds_rng_below(&rng, 254)) << 23 | man);
    case 2: return ds_bits_float(sign | (uint32_t)(58 + ds_rng_below(&rng, 12)) << 23 | man);
    default: return ds_bits_float(sign | man);
    }
}

/* ---- rounding ---- */

/* The rule of cpu_bf16.h in other words: the nearest bf16, ties to even, by arithmetic on
 * the two neighbours; NaN quiet; denormals to zero. */
static uint16_t round_rule(float x)
{
    uint32_t u = ds_float_bits(x);
    if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
    if (fabsf(x) < FLT_MIN) return (uint16_t)((u >> 16) & 0x8000);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    /* past the largest bf16 the upper neighbour is 2^128, which rounds to infinity */
    double vhi = (hi & 0x7f800000u) == 0x7f800000u ? copysign(ldexp(1.0, 128), x) : ds_bits_float(hi);
    double dlo = fabs((double)ds_bits_float(lo) - x), dhi = fabs(vhi - x);
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
            x[i] = ds_bits_float((uint32_t)(ds_rng_u64(&rng) & 0xfeff0000u) | 0x8000u | (uint32_t)(i & 1) << 16);
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

/* n + 16 floats for C (16 of slack) of class cls: normal values, or bf16 ones of the class. */
static float *random_c(size_t n, int cls)
{
    float *c = malloc((n + 16) * sizeof *c);
    for (size_t i = 0; i < n + 16; i++) c[i] = cls == 0 ? value(0) : ds_bf16_value(ds_bf16_round(value(cls)));
    return c;
}

/* got against want over C and its slack; on a difference, the first one on stderr. */
static int same_c(const char *who, const shape *s, int cls, const float *got, const float *want)
{
    const size_t nc = c_len(s);
    if (!memcmp(got, want, (nc + 16) * sizeof *got)) return 1;
    size_t first = 0;
    while (first < nc + 16 && !memcmp(got + first, want + first, sizeof *got)) first++;
    fprintf(stderr, "  %s: class %d m %ld n %d nseg %ld kseg %ld sai %ld acc %d: element %zu %s %a want %a\n", who,
            cls, s->m, s->n, s->nseg, s->kseg, s->sai, s->acc, first, first >= nc ? "(past C!)" : "", got[first],
            want[first]);
    return 0;
}

/* One shape on every level; sets *bad unless all give the rule's bits with C's slack
 * untouched, and (for class 0 data) the rule is close to the double sums. */
static void run_shape(const shape *s, int cls, int *bad, const char **why)
{
    size_t na = a_len(s), nb = b_len(s), nc = c_len(s);
    ds_bf16 *A = random_bf16(na, cls), *B = random_bf16(nb, cls);
    float *C0 = random_c(nc, cls), *want = malloc((nc + 16) * sizeof *want), *got = malloc((nc + 16) * sizeof *got);
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
        if (!ds_cpu_isa_exact((ds_cpu_isa)l) || !ds_cpu_isa_supported((ds_cpu_isa)l)) continue;
        memcpy(got, C0, (nc + 16) * sizeof *got);
        ds_bgemm_seg_isa((ds_cpu_isa)l, s->m, s->n, s->nseg, s->kseg, A, s->sai, s->seg_a, B, s->ldb, s->seg_b, got,
                         s->ldc, s->acc);
        if (!same_c(ds_cpu_isa_name((ds_cpu_isa)l), s, cls, got, want)) *bad = 1, *why = "a level differs from the rule";
    }
    free(A), free(B), free(C0), free(want), free(got);
}

static shape dense(long m, int n, long kd, int acc)
{
    shape s = {m, n, 1, kd, kd + 2, 0, 2L * n + 4, 0, n + 3, acc};
    return s;
}

typedef void shape_fn(const shape *s, int cls, int *bad, const char **why);

/* fn on each class of classes (a bit mask) and each shape: every tile height and column tail
 * (vectors of 8 and 16 columns, masked ends; AMX's 16 x 16 tiles and 32 x 32 blocks), segments,
 * whole and partial reduction steps, long reductions, random shapes; until one is bad. */
static void every_shape(shape_fn *fn, unsigned classes, int *bad, const char **why)
{
    for (int cls = 0; cls < 4 && !*bad; cls++) {
        if (!(classes >> cls & 1)) continue;
        for (long m = 1; m <= 34 && !*bad; m += (m < 17 ? 1 : 5))
            for (int n = 1; n <= 70 && !*bad; n += (n < 26 ? 1 : 7)) {
                shape s = dense(m, n, 2 + 2 * ((m + n) % 5), n % 3 == 0);
                fn(&s, cls, bad, why);
            }
        // Segments (a convolution's window rows, overlapping) and long reductions: one
        // segment past BGEMM_KC_MAX is blocked, several are not.
        shape segs[] = {{14, 16, 3, 48, 32, 160, 40, 48 / 2 * 40, 16, 0},
                        {5, 40, 1, 1100, 1100, 0, 80, 0, 40, 1},
                        {7, 64, 1, 1026, 1026, 0, 128, 0, 64, 0},
                        {3, 130, 1, 1400, 1400, 0, 262, 0, 131, 1},
                        {20, 24, 4, 300, 300, 1200, 48, 150 * 48, 24, 0},
                        {64, 300, 1, 12, 12, 0, 600, 0, 300, 1},
                        {9, 24, 3, 130, 260, 130, 50, 65 * 50, 24, 1},
                        {32, 32, 1, 32, 32, 0, 64, 0, 32, 0},
                        {48, 64, 2, 64, 130, 64, 128, 32 * 128, 64, 1},
                        {33, 33, 3, 34, 110, 34, 70, 17 * 70, 35, 0},
                        {16, 16, 1, 2048, 2048, 0, 32, 0, 16, 1},
                        // tall: several row tiles at every width
                        {70, 12, 1, 64, 64, 0, 24, 0, 12, 1},
                        {50, 30, 2, 20, 50, 20, 60, 10 * 60, 30, 0},
                        {45, 40, 3, 18, 60, 18, 80, 9 * 80, 41, 1},
                        {40, 140, 2, 24, 48, 24, 280, 12 * 280, 140, 1}};
        for (size_t i = 0; i < sizeof segs / sizeof *segs && !*bad; i++) fn(&segs[i], cls, bad, why);
        for (int t = 0; t < 150 && !*bad; t++) {
            shape s = {1 + (long)ds_rng_below(&rng, 40), 1 + (int)ds_rng_below(&rng, 150),
                       1 + (long)ds_rng_below(&rng, 3), 2 + 2 * (long)ds_rng_below(&rng, 45), 0, 0, 0, 0, 0,
                       (int)ds_rng_below(&rng, 2)};
            s.sai = s.kseg * s.nseg + 2 * (long)ds_rng_below(&rng, 3);
            s.seg_a = s.kseg;
            s.ldb = 2L * s.n + 2 * (long)ds_rng_below(&rng, 5);
            s.seg_b = s.ldb * s.kseg / 2;
            s.ldc = s.n + (long)ds_rng_below(&rng, 9);
            fn(&s, cls, bad, why);
        }
    }
}

/* The same shape rounded as it is stored (ds_bgemm_seg16): every level's bf16 D is the rule's
 * float32 sums rounded by the rule (round_rule), D's slack and gaps untouched; with add, D's
 * element plus that rounded sum, rounded again. */
static void run_shape16(const shape *s, int cls, int *bad, const char **why)
{
    shape s0 = *s;
    s0.acc = 0;
    const size_t na = a_len(&s0), nb = b_len(&s0), nc = c_len(&s0);
    ds_bf16 *A = random_bf16(na, cls), *B = random_bf16(nb, cls), *D0 = random_bf16(nc + 16, cls);
    float *sums = random_c(nc, cls), *scratch = malloc((size_t)(s0.m * s0.n) * sizeof *scratch);
    uint16_t *want = malloc((nc + 16) * sizeof *want), *got = malloc((nc + 16) * sizeof *got);
    rule(&s0, A, B, sums);
    for (int add = 0; add < 2; add++) {
        for (size_t e = 0; e < nc + 16; e++) want[e] = add ? D0[e] : 0xeeee;
        for (long i = 0; i < s0.m; i++)
            for (int j = 0; j < s0.n; j++) {
                const long e = i * s0.ldc + j;
                const uint16_t r = round_rule(sums[e]);
                want[e] = add ? round_rule(ds_bf16_value(D0[e]) + ds_bf16_value(r)) : r;
            }
        for (int l = 0; l < DS_CPU_LEVELS && !*bad; l++) {
            if (!ds_cpu_isa_exact((ds_cpu_isa)l) || !ds_cpu_isa_supported((ds_cpu_isa)l)) continue;
            for (size_t e = 0; e < nc + 16; e++) got[e] = add ? D0[e] : 0xeeee;
            ds_bgemm_seg16_isa((ds_cpu_isa)l, s0.m, s0.n, s0.nseg, s0.kseg, A, s0.sai, s0.seg_a, B, s0.ldb,
                               s0.seg_b, got, s0.ldc, add, scratch);
            if (memcmp(got, want, (nc + 16) * sizeof *got)) {
                size_t first = 0;
                while (got[first] == want[first]) first++;
                fprintf(stderr,
                        "  %s (rounded, add %d): class %d m %ld n %d nseg %ld kseg %ld: element %zu%s 0x%04x want 0x%04x\n",
                        ds_cpu_isa_name((ds_cpu_isa)l), add, cls, s0.m, s0.n, s0.nseg, s0.kseg, first,
                        first >= nc ? " (past D!)" : "", got[first], want[first]);
                *bad = 1, *why = "a level's rounded product differs from the rule's sums rounded (and added)";
            }
        }
    }
    free(A), free(B), free(D0), free(sums), free(scratch), free(want), free(got);
}

/* One check: fn on every shape of the first three classes. */
static void levels_agree(const char *name, shape_fn *fn)
{
    check_begin(name);
    int bad = 0;
    const char *why = "";
    every_shape(fn, 0x7, &bad, &why);
    CHECK(!bad, "%s", why);
    check_end();
}

/* ---- the amx level ---- */

/* A model of the AMX tiles, to run cpu_bf16_amx.inc's kernel on any CPU: eight tiles of 16 rows
 * of 64 bytes; the configuration checked as LDTILECFG checks it; a load or store moves exactly
 * the configured rows and bytes; a product needs tiles whose shapes chain (C rows = A rows,
 * A bytes = 4 x B rows, B bytes = C bytes). What would fault on the hardware counts here as a
 * fault. TDPBF16PS as the probe's nearest model: each element of C plus its row's products
 * (all of the tile's pairs, in order) summed in double and rounded once, denormal inputs and
 * result as zeros. The hardware's adder differs in last bits; cpu_bf16.h's bound covers both. */
static void model_config(const void *p);
static void model_zero(int t);
static void model_load(int t, const void *p, long stride);
static void model_store(int t, void *p, long stride);
static void model_dot(int c, int a, int b);
static void model_release(void);
#define AMX_NAME bgemm_amx_model
#define AMX_TARGET
#define AMX_CONFIG(cfg) model_config(cfg)
#define AMX_ZERO(t) model_zero(t)
#define AMX_LOAD(t, p, stride) model_load(t, p, stride)
#define AMX_STORE(t, p, stride) model_store(t, p, stride)
#define AMX_DOT(c, a, b) model_dot(c, a, b)
#define AMX_RELEASE() model_release()
#include "backend/cpu_bf16_amx.inc"

/* The model's state: the configuration (the kernel's own amx_tilecfg) and eight tiles. */
static struct {
    amx_tilecfg cfg;
    int configured;
    unsigned char t[8][1024];
} tiles;
static long tile_faults;

static int tile_ok(int t) { return tiles.configured && t >= 0 && t < 8 && tiles.cfg.rows[t] && tiles.cfg.colsb[t]; }

static void model_config(const void *p)
{
    memcpy(&tiles.cfg, p, sizeof tiles.cfg);
    int ok = tiles.cfg.palette == 1 && tiles.cfg.start_row == 0;
    for (int t = 0; t < 16; t++) {
        const int rows = tiles.cfg.rows[t], colsb = tiles.cfg.colsb[t];
        ok &= t < 8 ? rows <= 16 && colsb <= 64 && colsb % 4 == 0 && !rows == !colsb : !rows && !colsb;
    }
    tile_faults += !ok;
    tiles.configured = ok;
    memset(tiles.t, 0, sizeof tiles.t);
}
static void model_zero(int t)
{
    if (!tile_ok(t)) { tile_faults++; return; }
    memset(tiles.t[t], 0, sizeof tiles.t[t]);
}
static void model_load(int t, const void *p, long stride)
{
    if (!tile_ok(t)) { tile_faults++; return; }
    memset(tiles.t[t], 0, sizeof tiles.t[t]);
    for (int r = 0; r < tiles.cfg.rows[t]; r++)
        memcpy(tiles.t[t] + 64 * r, (const char *)p + r * stride, tiles.cfg.colsb[t]);
}
static void model_store(int t, void *p, long stride)
{
    if (!tile_ok(t)) { tile_faults++; return; }
    for (int r = 0; r < tiles.cfg.rows[t]; r++) memcpy((char *)p + r * stride, tiles.t[t] + 64 * r, tiles.cfg.colsb[t]);
}
static float daz(float x) { return ftz(x); }
static double amx_term(ds_bf16 a, ds_bf16 b) { return (double)daz(ds_bf16_value(a)) * daz(ds_bf16_value(b)); }
static float amx_step(float acc, double sum) { return ftz(acc + ftz((float)sum)); }
static void model_dot(int c, int a, int b)
{
    const amx_tilecfg *g = &tiles.cfg;
    if (!tile_ok(c) || !tile_ok(a) || !tile_ok(b) || c == a || c == b || a == b || g->rows[c] != g->rows[a] ||
        g->colsb[a] != 4 * g->rows[b] || g->colsb[b] != g->colsb[c]) {
        tile_faults++;
        return;
    }
    for (int i = 0; i < g->rows[c]; i++)
        for (int j = 0; j < g->colsb[c] / 4; j++) {
            double sum = 0;
            for (int k = 0; k < g->rows[b]; k++)
                for (int e = 0; e < 2; e++) {
                    ds_bf16 x, y;
                    memcpy(&x, tiles.t[a] + 64 * i + 4 * k + 2 * e, 2);
                    memcpy(&y, tiles.t[b] + 64 * k + 4 * j + 2 * e, 2);
                    sum += amx_term(x, y);
                }
            float acc;
            memcpy(&acc, tiles.t[c] + 64 * i + 4 * j, 4);
            acc = amx_step(acc, sum);
            memcpy(tiles.t[c] + 64 * i + 4 * j, &acc, 4);
        }
}
static void model_release(void) { tiles.configured = 0; }


/* What the kernel must give on the model, one element at a time: the driver's blocks, each
 * segment's steps of 16 pairs (the missing pairs of a short step zeros, as in the tiles). */
static void amx_rule(const shape *s, const ds_bf16 *A, const ds_bf16 *B, float *C)
{
    const long block = s->nseg == 1 && s->kseg > BGEMM_KC_MAX ? BGEMM_KC : s->kseg;
    for (long i = 0; i < s->m; i++)
        for (int j = 0; j < s->n; j++) {
            float *c = C + i * s->ldc + j, acc = s->acc ? *c : 0.0f;
            for (long k0 = 0; k0 < s->kseg; k0 += block)
                for (long g = 0; g < s->nseg; g++)
                    for (long p0 = k0; p0 < k0 + block && p0 < s->kseg; p0 += 32) {
                        double sum = 0;
                        for (long p = p0; p < p0 + 32; p++)
                            sum += p < s->kseg && p < k0 + block
                                       ? amx_term(A[i * s->sai + g * s->seg_a + p],
                                                  B[g * s->seg_b + p / 2 * s->ldb + 2 * j + p % 2])
                                       : 0.0 * 0.0;
                        acc = amx_step(acc, sum);
                    }
            *c = acc;
        }
}

/* Operands whose every element outside the shape is a NaN, so that a load reaching past a row,
 * a segment or a step shows in the results. */
static ds_bf16 *poisoned(size_t n) {
    ds_bf16 *x = malloc((n + 64) * sizeof *x);
    for (size_t i = 0; i < n + 64; i++) x[i] = 0x7fc0;
    return x;
}
static void fill_shape(const shape *s, int cls, ds_bf16 *A, ds_bf16 *B)
{
    for (long i = 0; i < s->m; i++)
        for (long g = 0; g < s->nseg; g++)
            for (long p = 0; p < s->kseg; p++) A[i * s->sai + g * s->seg_a + p] = ds_bf16_round(value(cls));
    for (long g = 0; g < s->nseg; g++)
        for (long t = 0; t < s->kseg / 2; t++)
            for (int j = 0; j < 2 * s->n; j++) B[g * s->seg_b + t * s->ldb + j] = ds_bf16_round(value(cls));
}

/* The kernel on the model: the model's bits (amx_rule), no fault, C's slack untouched. */
static void run_amx_model(const shape *s, int cls, int *bad, const char **why)
{
    size_t nc = c_len(s);
    ds_bf16 *A = poisoned(a_len(s)), *B = poisoned(b_len(s));
    fill_shape(s, cls, A, B);
    float *want = random_c(nc, cls), *got = malloc((nc + 16) * sizeof *got);
    memcpy(got, want, (nc + 16) * sizeof *got);
    amx_rule(s, A, B, want);
    const long faults = tile_faults;
    ds_bgemm_seg_with(bgemm_amx_model, s->m, s->n, s->nseg, s->kseg, A, s->sai, s->seg_a, B, s->ldb, s->seg_b, got,
                      s->ldc, s->acc);
    if (tile_faults != faults) {
        fprintf(stderr, "  amx model: m %ld n %d nseg %ld kseg %ld: %ld tile faults\n", s->m, s->n, s->nseg, s->kseg,
                tile_faults - faults);
        *bad = 1, *why = "the kernel breaks the tiles' rules";
    } else if (!same_c("amx model", s, cls, got, want)) {
        *bad = 1, *why = "the kernel on the tile model differs from the model's sums";
    }
    free(A), free(B), free(want), free(got);
}

/* kernel (the hardware's, or the model's) within cpu_bf16.h's bound of the exact rule, C's
 * slack untouched; returns the largest error as a share of the bound through *worst. */
static void amx_within_bound(ds_bgemm_kernel *kernel, const shape *s, int cls, int *bad, const char **why,
                             double *worst)
{
    size_t nc = c_len(s);
    ds_bf16 *A = poisoned(a_len(s)), *B = poisoned(b_len(s));
    fill_shape(s, cls, A, B);
    float *C0 = random_c(nc, cls), *want = malloc((nc + 16) * sizeof *want), *got = malloc((nc + 16) * sizeof *got);
    memcpy(want, C0, (nc + 16) * sizeof *want);
    memcpy(got, C0, (nc + 16) * sizeof *got);
    rule(s, A, B, want);
    ds_bgemm_seg_with(kernel, s->m, s->n, s->nseg, s->kseg, A, s->sai, s->seg_a, B, s->ldb, s->seg_b, got, s->ldc,
                      s->acc);
    const long K = s->nseg * s->kseg;
    for (long i = 0; i < s->m && !*bad; i++)
        for (int j = 0; j < s->n; j++) {
            const long at = i * s->ldc + j;
            double mag = s->acc ? fabs(C0[at]) : 0;
            for (long g = 0; g < s->nseg; g++)
                for (long p = 0; p < s->kseg; p++)
                    mag += fabs(amx_term(A[i * s->sai + g * s->seg_a + p], B[g * s->seg_b + p / 2 * s->ldb + 2 * j + p % 2]));
            const double bound = (K + 2 * ((K + 31) / 32) + 64) * 0x1p-24 * mag + K * 0x1p-125,
                         err = fabs((double)got[at] - want[at]);
            if (!(err <= bound)) {
                fprintf(stderr, "  amx: class %d m %ld n %d nseg %ld kseg %ld acc %d: C(%ld, %d) %a, rule %a, bound %g\n",
                        cls, s->m, s->n, s->nseg, s->kseg, s->acc, i, j, got[at], want[at], bound);
                *bad = 1, *why = "a result outside the bound";
                break;
            }
            if (bound > 0 && err / bound > *worst) *worst = err / bound;
        }
    if (!*bad && memcmp(got + nc, C0 + nc, 16 * sizeof *got)) *bad = 1, *why = "written past C";
    free(A), free(B), free(C0), free(want), free(got);
}

static ds_bgemm_kernel *bound_kernel;
static double bound_worst;
static void run_amx_bound(const shape *s, int cls, int *bad, const char **why)
{
    amx_within_bound(bound_kernel, s, cls, bad, why, &bound_worst);
}

static void test_amx(void)
{
    check_begin("bgemm_amx_kernel_on_tile_model");
    int bad = 0;
    const char *why = "";
    every_shape(run_amx_model, 0xf, &bad, &why);
    CHECK(!bad, "%s", why);
    bad = 0;
    // The bound on data whose sums stay finite: normal values, underflowing products, denormals.
    bound_kernel = bgemm_amx_model, bound_worst = 0;
    every_shape(run_amx_bound, 0xd, &bad, &why);
    CHECK(!bad, "the model: %s", why);
    printf("  amx tile model: largest error %.3g of the bound\n", bound_worst);
    check_end();
#if defined(__x86_64__) && defined(__linux__)
    if (!ds_cpu_isa_supported(DS_CPU_AMX)) {
        printf("SKIP bgemm_amx_within_bound: this CPU has no AMX-BF16 (the kernel ran on the tile model only)\n");
        return;
    }
    check_begin("bgemm_amx_within_bound");
    bad = 0;
    bound_kernel = ds_bgemm_amx, bound_worst = 0;
    every_shape(run_amx_bound, 0xd, &bad, &why);
    CHECK(!bad, "TDPBF16PS: %s", why);
    printf("  amx: largest error %.3g of the bound\n", bound_worst);
    check_end();
#else
    printf("SKIP bgemm_amx_within_bound: AMX is x86-64 Linux only\n");
#endif
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
            uint16_t a0 = (uint16_t)(ds_float_bits(value(cls)) >> 16), a1 = (uint16_t)(ds_float_bits(value(cls)) >> 16);
            uint16_t b0 = (uint16_t)(ds_float_bits(value(cls)) >> 16), b1 = (uint16_t)(ds_float_bits(value(cls)) >> 16);
            float acc = t % 3 ? value(cls) : 0.0f;
            float want = ftz(acc);
            want = ftz(fmaf(ftz(ds_bf16_value(a1)), ftz(ds_bf16_value(b1)), want));
            want = ftz(fmaf(ftz(ds_bf16_value(a0)), ftz(ds_bf16_value(b0)), want));
            float got = dp_instruction(acc, (uint32_t)a1 << 16 | a0, (uint32_t)b1 << 16 | b0);
            if (ds_float_bits(got) != ds_float_bits(want) && bad++ < 3)
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

/* transpose: a[j ld + i] = row[i][j], the 8 x 8 blocks and both edges (rows and columns
 * past a multiple of 8), the rows anywhere in memory, nothing written outside the rows mr. */
static void test_transpose(void)
{
    check_begin("bf16_transpose");
    static const int shapes[][2] = {{8, 8}, {16, 24}, {13, 21}, {7, 5}, {1, 9}, {33, 64}, {0, 3}};
    int bad = 0;
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        const long mr = shapes[t][0], ld = mr + 3;
        const int k = shapes[t][1];
        ds_bf16 src[40 * 70], a[70 * 40];
        const ds_bf16 *row[40];
        for (int e = 0; e < 40 * 70; e++) src[e] = (ds_bf16)(e * 7 + 1);
        for (long i = 0; i < mr; i++) row[i] = src + (i * 5 % 40) * 70 + i % 3;  /* scattered rows */
        memset(a, 0xff, sizeof a);
        ds_bf16_transpose(a, ld, row, mr, k);
        for (int j = 0; j < k; j++)
            for (long i = 0; i < ld; i++) bad += a[j * ld + i] != (i < mr ? row[i][j] : 0xffff);
    }
    CHECK(!bad, "%d elements wrong", bad);
    check_end();
}

/* interleave: dst[2i] = a[i], dst[2i + 1] = b[i] (zeros for a NULL side), of every kernel set
 * this CPU runs, at lengths around each vector width, from any element offset; nothing
 * written past 2n. */
static void test_interleave(void)
{
    check_begin("bf16_interleave: every kernel set, lengths 0 to 40, either side NULL");
    ds_bf16 a[48], b[48], dst[100];
    for (int e = 0; e < 48; e++) a[e] = (ds_bf16)(e * 31 + 5), b[e] = (ds_bf16)(0x8000 | (e * 17 + 3));
    int bad = 0;
    for (int l = 0; l < DS_CPU_LEVELS; l++) {
        if (!ds_cpu_isa_supported((ds_cpu_isa)l)) continue;
        void (*interleave)(ds_bf16 *, const ds_bf16 *, const ds_bf16 *, size_t) =
            ds_cpu_kernels_for((ds_cpu_isa)l)->bf16_interleave;
        for (size_t n = 0; n <= 40; n++)
            for (int off = 0; off < 3; off++)
                for (int sides = 0; sides < 4; sides++) {
                    const ds_bf16 *pa = sides & 1 ? NULL : a + off, *pb = sides & 2 ? NULL : b + off;
                    memset(dst, 0xee, sizeof dst);
                    interleave(dst + off, pa, pb, n);
                    for (size_t i = 0; i < 100; i++) {
                        const size_t at = i - (size_t)off;
                        const ds_bf16 want = i < (size_t)off || at >= 2 * n ? 0xeeee
                                             : at % 2 ? (pb ? pb[at / 2] : 0) : (pa ? pa[at / 2] : 0);
                        if (dst[i] != want && bad++ < 3)
                            printf("  %s: n %zu, offset %d, sides %d: element %zu is 0x%04x, want 0x%04x\n",
                                   ds_cpu_isa_name((ds_cpu_isa)l), n, off, sides, i, dst[i], want);
                    }
                }
    }
    CHECK(!bad, "%d elements wrong", bad);
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
    test_transpose();
    test_interleave();
    test_rule_is_the_instruction();
    levels_agree("bgemm: every level gives the rule's bits", run_shape);
    levels_agree("bgemm rounded as stored, or added to a bf16 D: every level gives the rule's bits", run_shape16);
    test_amx();
    return check_exit();
}
