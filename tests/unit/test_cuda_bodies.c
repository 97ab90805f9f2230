/* The CUDA kernels' bodies (backend/cuda_bodies.h), run on the CPU over every thread of the
 * grids cuda_kernels.cu launches them with, against the CPU backend. No GPU, no CUDA: the
 * bodies are plain C here, rounded as on the device (cuda_bodies.h), so this is what the
 * kernels compute, thread by thread, in the kernels' order.
 *
 * Each replay_* function below is its ds_cuda_* twin in cuda_kernels.cu: the same grid, blocks
 * and threads, walked in order (a grid-stride loop's thread (block, x) takes i = block
 * THREADS + x, then i + the grid's size, ...), with the block reductions' shared-memory trees
 * replayed level by level. Outputs start as NaN, so an element no thread writes fails.
 *
 * The cases are the op table's rows marked OPS_BODIES (ops_cases.h), each row's `bodies`
 * naming the tests below that take it; main walks them.
 *
 * Bitwise, where the operation order is the CPU's: BN apply and dx given the same
 * statistics, BN inference, pooling, bias, SGD, scale, axpy, add, the casts, the input ops;
 * and whole BN ops on data whose sums are exact in any order (small integers and quarters:
 * then the chunks do not matter and every other operation is the CPU's).
 * Within a bound, where the order differs: BN statistics and gradients (other row chunks,
 * added in a tree) and softmax (a tree, and on the device its own exp and log). The bounds
 * are computed from each channel's or sample's data, not picked: a float run of at most
 * DS_BN_FLUSH terms is off its exact sum by at most 31 2^-24 times the sum of the terms'
 * magnitudes, the double sums above it by 2^-53 per add, and each side is off that way, so
 * the two differ by at most twice; that difference is carried through the final formulas to
 * first order (with 1% to spare), plus one float rounding of the result (2^-23 |value|),
 * where the two sides may fall either side of a rounding boundary. */
#include "../check.h"
#include "backend.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_kernels.h"
#include "backend/cpu_loops.h"
#include "backend/cuda_bodies.h"
#include "cpu_isa.h"
#include "ops_cases.h"
#include "rng.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const ds_backend *be = &ds_backend_cpu;
static ds_rng rng;

#define THREADS DS_CUDA_THREADS

/* cuda_check.h's ds_cuda_blocks: the grid of a grid-stride launch over n elements */
static long grid_blocks(size_t n)
{
    size_t b = (n + THREADS - 1) / THREADS;
    return (long)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

/* Every thread of a grid-stride launch over n elements, and each element it takes. */
#define FOR_GRID(i, n)                                                                    \
    for (long blk_ = 0, nb_ = grid_blocks(n); blk_ < nb_; blk_++)                         \
        for (int x_ = 0; x_ < THREADS; x_++)                                              \
            for (long i = blk_ * THREADS + x_; i < (long)(n); i += nb_ * THREADS)

/* The body of storage t: name_bf16 or name_f32 (void pointers convert to either). */
#define BY_T(t, name, ...) ((t) == DS_BF16 ? name##_bf16(__VA_ARGS__) : name##_f32(__VA_ARGS__))

/* ---------------------------------------------------------------- data and checks */

static size_t es(ds_dtype t) { return t == DS_BF16 ? 2 : 4; }

static float act_get(const void *p, size_t i, ds_dtype t)
{
    return t == DS_BF16 ? ds_bf16_value(((const ds_bf16 *)p)[i]) : ((const float *)p)[i];
}

static void act_set(void *p, size_t i, float v, ds_dtype t)
{
    if (t == DS_BF16) ((ds_bf16 *)p)[i] = ds_bf16_from(v);
    else ((float *)p)[i] = v;
}

/* n activations of storage t, normal(offset, scale) (rounded to bf16 for bf16) */
static void *act_randn(size_t n, double offset, double scale, ds_dtype t)
{
    void *p = malloc((n ? n : 1) * es(t));
    for (size_t i = 0; i < n; i++) act_set(p, i, (float)(offset + scale * ds_rng_normal(&rng)), t);
    return p;
}

/* n activations, each an integer in [lo, hi] divided by den: exact sums in any order */
static void *act_exact(size_t n, int lo, int hi, int den, ds_dtype t)
{
    void *p = malloc((n ? n : 1) * es(t));
    for (size_t i = 0; i < n; i++) act_set(p, i, (float)(lo + (int)ds_rng_below(&rng, hi - lo + 1)) / den, t);
    return p;
}

static float *f32_randn(size_t n, double offset, double scale)
{
    return act_randn(n, offset, scale, DS_F32);
}

static void *dup(const void *p, size_t bytes)
{
    void *q = malloc(bytes ? bytes : 1);
    memcpy(q, p, bytes);
    return q;
}

/* n elements of es bytes, all NaN (a bf16 NaN is 0x7fc0; 0xff bytes are a float NaN) */
static void *nans(size_t n, size_t size)
{
    void *p = malloc((n ? n : 1) * size);
    if (size == 2)
        for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = 0x7fc0;
    else
        memset(p, 0xff, n * size);
    return p;
}

/* Bitwise: n elements of `size` bytes; prints the first that differs as a float. */
static void check_bits(const char *what, const void *got, const void *want, size_t n, size_t size)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * size, (const char *)want + i * size, size)) {
            if (!bad) first = i;
            bad++;
        }
    if (bad && size == 1) {   /* bytes: an argmax */
        fprintf(stderr, "  %s: %s: %zu of %zu bytes differ; first [%zu] got %d want %d\n", check_case_name, what, bad,
                n, first, ((const uint8_t *)got)[first], ((const uint8_t *)want)[first]);
        check_case_failures++;
    } else if (bad) {
        ds_dtype t = size == 2 ? DS_BF16 : DS_F32;
        fprintf(stderr, "  %s: %s: %zu of %zu elements differ; first [%zu] got %.9g want %.9g\n", check_case_name,
                what, bad, n, first, act_get(got, first, t), act_get(want, first, t));
        check_case_failures++;
    }
}

/* |got - ref| <= bound, element by element; prints the worst by its share of the bound. */
static void check_bound(const char *what, const float *got, const float *ref, const double *bound, size_t n)
{
    size_t bad = 0, worst = 0;
    double worst_share = -1;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]), share = isnan(err) ? INFINITY : err / bound[i];
        if (share > worst_share) worst_share = share, worst = i;
        bad += !(err <= bound[i]);
    }
    if (bad) {
        fprintf(stderr, "  %s: %s: %zu of %zu off; worst [%zu] got %.9g want %.9g, bound %.3g\n", check_case_name,
                what, bad, n, worst, got[worst], ref[worst], bound[worst]);
        check_case_failures++;
    }
}

/* The difference of two computations of a sum whose terms' magnitudes add up to `mag`: each
 * a float run of at most DS_BN_FLUSH terms (31 roundings of 2^-24), then at most 4096
 * double adds; twice that for two of them. When the kernels' chunks are the CPU's (cpu.c
 * cuts the rows into 16 chunks; so do the kernels for 256 < m <= 512), their float runs are
 * the CPU's too, bit for bit, and only the 16 chunks' double adds differ: that far tighter
 * bound also catches a run of another length or a sum kept in float. */
static double sum_gap(double mag, int chunks)
{
    return chunks == 16 ? 2 * 16 * 0x1p-53 * mag : 2 * (31 * 0x1p-24 + 4096 * 0x1p-53) * mag;
}

/* ---------------------------------------------------------------- the kernels' grids */

/* cuda_kernels.cu's vec_ok: the vector bodies serve a channel count that is a multiple of
 * their vector (this test's buffers come from malloc, 16-byte aligned); vec: 0 follows that
 * rule, 1 and -1 force the vector or the scalar bodies (test_vec_bodies). */
static int vec_width(ds_dtype t) { return DS_CUDA_VEC_BYTES / (int)es(t); }
static int use_vec(int c, ds_dtype t, int vec) { return vec ? vec > 0 : c % vec_width(t) == 0; }

/* A pass's partial sums (cuda_kernels.cu, bn_stats_kernel and the others): the vector
 * kernels' grid (ceil(c / BN_CH) slices, blocks of THREADS / per chunks) of THREADS threads,
 * thread i of block (bx, by) taking group bx per + i % per in chunk by (THREADS / per) + i /
 * per, per = BN_CH / the vector; else grid (ceil(c / BN_CH), chunks / BN_ROWS) of (BN_CH,
 * BN_ROWS) threads. With a mask, out is not read (NULL, as the kernels are given it). */
static void replay_bn_partials_as(double *partial, void *dout, const void *out, const uint8_t *mask, const void *in,
                               const float *center, int mode, int relu, int writeback, int m, int c, int chunks,
                               ds_dtype t, int vec)
{
    if (mask) out = NULL;
    if (use_vec(c, t, vec)) {
        const int per = DS_CUDA_BN_CH / vec_width(t), rows = THREADS / per, groups = c / vec_width(t);
        for (int by = 0; by < (chunks + rows - 1) / rows; by++)
            for (int bx = 0; bx < (c + DS_CUDA_BN_CH - 1) / DS_CUDA_BN_CH; bx++)
                for (int i = 0; i < THREADS; i++) {
                    int g = bx * per + i % per, k = by * rows + i / per;
                    if (g < groups && k < chunks)
                        BY_T(t, bn_partial_vec_body, partial, dout, out, mask, in, center, mode, relu, writeback, m, c,
                             chunks, g, k);
                }
        return;
    }
    for (int by = 0; by < chunks / DS_CUDA_BN_ROWS; by++)
        for (int bx = 0; bx < (c + DS_CUDA_BN_CH - 1) / DS_CUDA_BN_CH; bx++)
            for (int ty = 0; ty < DS_CUDA_BN_ROWS; ty++)
                for (int tx = 0; tx < DS_CUDA_BN_CH; tx++) {
                    int ch = bx * DS_CUDA_BN_CH + tx, k = by * DS_CUDA_BN_ROWS + ty;
                    if (ch >= c) continue;
                    BY_T(t, bn_partial_body, partial, dout, out, mask, in, center, mode, relu, writeback, m, c,
                         chunks, ch, k);
                }
}

static void replay_bn_partials(double *partial, void *dout, const void *out, const uint8_t *mask, const void *in,
                            const float *center, int mode, int relu, int writeback, int m, int c, int chunks,
                            ds_dtype t)
{
    replay_bn_partials_as(partial, dout, out, mask, in, center, mode, relu, writeback, m, c, chunks, t, 0);
}

/* bn_apply and bn_dx's vector kernels: thread l takes channel group l % groups in row lane
 * l / groups of `lanes` (the kernels' own count is ds_cuda_bn_lanes(m)) */
static void replay_bn_apply_lanes(void *out, uint8_t *mask, const void *in, const float *mean, const float *a,
                               const float *beta, const void *residual, int relu, int m, int c, ds_dtype t,
                               long lanes)
{
    long groups = c / vec_width(t);
    for (long l = 0; l < groups * lanes; l++)
        BY_T(t, bn_apply_vec_body, out, mask, in, mean, a, beta, residual, relu, m, c, (int)(l % groups), l / groups,
             lanes);
}

static void replay_bn_dx_lanes(void *din, void *dres, const void *dy, const uint8_t *mask, const void *in,
                            const float *mean, const float *ka, const float *kb, const float *kc, int m, int c,
                            ds_dtype t, long lanes)
{
    long groups = c / vec_width(t);
    for (long l = 0; l < groups * lanes; l++)
        BY_T(t, bn_dx_vec_body, din, dres, dy, mask, in, mean, ka, kb, kc, m, c, (int)(l % groups), l / groups,
             lanes);
}

/* bn_apply: the vector kernel's row lanes (the mask written with out), else a grid-stride
 * loop over elements and, with a mask, relu_mask_kernel's over its bytes */
static void replay_bn_apply_as(void *out, uint8_t *mask, const void *in, const float *mean, const float *a,
                            const float *beta, const void *residual, int relu, int m, int c, ds_dtype t, int vec)
{
    size_t n = (size_t)m * c;
    if (use_vec(c, t, vec)) {
        replay_bn_apply_lanes(out, mask, in, mean, a, beta, residual, relu, m, c, t, ds_cuda_bn_lanes(m));
    } else {
        FOR_GRID(i, n) BY_T(t, bn_apply_body, out, in, mean, a, beta, residual, relu, c, i);
        if (mask) FOR_GRID(g, n / vec_width(t)) BY_T(t, relu_mask_body, mask, out, g);
    }
}

static void replay_bn_dx_as(void *din, void *dres, const void *dy, const uint8_t *mask, const void *in,
                         const float *mean, const float *ka, const float *kb, const float *kc, int m, int c,
                         ds_dtype t, int vec)
{
    size_t n = (size_t)m * c;
    if (use_vec(c, t, vec)) {
        replay_bn_dx_lanes(din, dres, dy, mask, in, mean, ka, kb, kc, m, c, t, ds_cuda_bn_lanes(m));
    } else {
        FOR_GRID(i, n) BY_T(t, bn_dx_body, din, dres, dy, mask, in, mean, ka, kb, kc, c, i);
    }
}

static void replay_maxpool_fwd_as(void *out, uint8_t *argmax, const void *in, ds_pool_desc d, int vec)
{
    size_t n = (size_t)d.n * d.p * d.q * d.c;
    if (use_vec(d.c, d.t, vec)) {
        FOR_GRID(g, n / vec_width(d.t)) BY_T(d.t, maxpool_fwd_vec_body, out, argmax, in, d, g);
    } else {
        FOR_GRID(i, n) BY_T(d.t, maxpool_fwd_body, out, argmax, in, d, i);
    }
}

static void replay_maxpool_bwd_as(void *din, const void *dout, const uint8_t *argmax, ds_pool_desc d, int vec)
{
    size_t n = (size_t)d.n * d.h * d.w * d.c;
    if (use_vec(d.c, d.t, vec)) {
        FOR_GRID(g, n / vec_width(d.t)) BY_T(d.t, maxpool_bwd_vec_body, din, dout, argmax, d, g);
    } else {
        FOR_GRID(i, n) BY_T(d.t, maxpool_bwd_body, din, dout, argmax, d, i);
    }
}

/* bn_last_block's sums in the block that finishes slice bx last: its THREADS threads, thread
 * (lane, w0) taking rows w0, w0 + THREADS / BN_CH, ... of the BN_FINAL_ROWS, then the tree
 * level by level (the kernel's __syncthreads between levels: within a level, rows w < s read
 * rows >= s, which no thread of the level writes). Leaves the channels' sums in row 0. */
static void replay_bn_final_sums(double *s1, double *s2, const double *partial, int c, int chunks, int bx)
{
    const int rows = THREADS / DS_CUDA_BN_CH;
    for (int w0 = 0; w0 < rows; w0++)
        for (int lane = 0; lane < DS_CUDA_BN_CH; lane++)
            for (int w = w0; w < DS_CUDA_BN_FINAL_ROWS; w += rows)
                bn_final_sum_body(&s1[w * DS_CUDA_BN_CH + lane], &s2[w * DS_CUDA_BN_CH + lane], partial, c, chunks,
                                  bx * DS_CUDA_BN_CH + lane, w);
    for (int k = DS_CUDA_BN_FINAL_ROWS / 2; k > 0; k >>= 1)
        for (int w0 = 0; w0 < rows; w0++)
            for (int lane = 0; lane < DS_CUDA_BN_CH; lane++)
                for (int w = w0; w < k; w += rows) bn_final_tree_body(s1, s2, lane, w, k);
}

static int chunks_of(int m, int c) { return ds_cuda_bn_chunks(m, c, DS_BN_FLUSH); }

static void replay_bn_fwd_train(void *out, uint8_t *mask, float *mean, float *var, float *invstd, float *mean_sum,
                             float *var_sum, const void *in, const float *gamma, const float *beta,
                             const void *residual, int relu, int m, int c, float eps, ds_dtype t)
{
    const float unbiased = mean_sum ? (float)((double)m / (m - 1)) : 0;
    int chunks = chunks_of(m, c);
    double *partial = nans(2 * (size_t)chunks * c, sizeof(double));
    float *ka = nans(c, 4);
    replay_bn_partials(partial, NULL, NULL, NULL, in, NULL, BN_STATS, 0, 0, m, c, chunks, t);
    for (int bx = 0; bx < (c + DS_CUDA_BN_CH - 1) / DS_CUDA_BN_CH; bx++) {
        double s1[DS_CUDA_BN_FINAL_ROWS * DS_CUDA_BN_CH], s2[DS_CUDA_BN_FINAL_ROWS * DS_CUDA_BN_CH];
        replay_bn_final_sums(s1, s2, partial, c, chunks, bx);
        for (int lane = 0; lane < DS_CUDA_BN_CH; lane++) {
            int j = bx * DS_CUDA_BN_CH + lane;
            if (j < c)
                BY_T(t, bn_stats_final_body, mean, var, invstd, ka, mean_sum, var_sum, unbiased, s1[lane], s2[lane],
                     in, gamma, m, j, eps);
        }
    }
    replay_bn_apply_as(out, mask, in, mean, ka, beta, residual, relu, m, c, t, 0);
    free(partial);
    free(ka);
}

static void replay_bn_fwd_infer(void *out, const void *in, const float *gamma, const float *beta,
                             const float *running_mean, const float *running_var, const void *residual, int relu,
                             int m, int c, float eps, ds_dtype t)
{
    float *ka = nans(c, 4);
    for (int b = 0; b < (c + THREADS - 1) / THREADS; b++)
        for (int x = 0; x < THREADS; x++)
            if (b * THREADS + x < c) bn_infer_coef_body(ka, gamma, running_var, b * THREADS + x, eps);
    replay_bn_apply_as(out, NULL, in, running_mean, ka, beta, residual, relu, m, c, t, 0);
    free(ka);
}

/* ds_cuda_bn_bwd (vec as replay_bn_partials_as's); also returns the coefficients ka, kb, kc of
 * the dx kernel */
static void replay_bn_bwd_as(void *din, void *dresidual, float *dgamma, float *dbeta, void *dout, const void *out,
                          const uint8_t *mask, const void *in, const float *gamma, const float *mean,
                          const float *invstd, int relu, int m, int c, ds_dtype t, float *ka, float *kb, float *kc,
                          int vec)
{
    int chunks = chunks_of(m, c);
    double *partial = nans(2 * (size_t)chunks * c, sizeof(double));
    const int writeback = !mask || dresidual == dout;
    replay_bn_partials_as(partial, dout, out, mask, in, mean, BN_GRADS, relu, writeback, m, c, chunks, t, vec);
    for (int bx = 0; bx < (c + DS_CUDA_BN_CH - 1) / DS_CUDA_BN_CH; bx++) {
        double s1[DS_CUDA_BN_FINAL_ROWS * DS_CUDA_BN_CH], s2[DS_CUDA_BN_FINAL_ROWS * DS_CUDA_BN_CH];
        replay_bn_final_sums(s1, s2, partial, c, chunks, bx);
        for (int lane = 0; lane < DS_CUDA_BN_CH; lane++) {
            int k = bx * DS_CUDA_BN_CH + lane;
            if (k < c) bn_grad_final_body(dgamma, dbeta, ka, kb, kc, s1[lane], s2[lane], gamma, invstd, m, k);
        }
    }
    void *dres = dresidual != dout ? dresidual : NULL;
    replay_bn_dx_as(din, dres, dout, writeback ? NULL : mask, in, mean, ka, kb, kc, m, c, t, vec);
    free(partial);
}

static void replay_bn_bwd(void *din, void *dresidual, float *dgamma, float *dbeta, void *dout, const void *out,
                       const uint8_t *mask, const void *in, const float *gamma, const float *mean,
                       const float *invstd, int relu, int m, int c, ds_dtype t, float *ka, float *kb, float *kc)
{
    replay_bn_bwd_as(din, dresidual, dgamma, dbeta, dout, out, mask, in, gamma, mean, invstd, relu, m, c, t, ka, kb, kc,
                  0);
}

/* ds_cuda_to_bf16_runs: a launch per DS_CUDA_BF16_RUNS runs (none for runs of no values),
 * each a grid-stride loop over its runs' values. */
static void replay_to_bf16_runs(void *dst, const float *src, const ds_bf16_run *runs, int nruns)
{
    bf16_runs r;
    for (int a = 0; a < nruns;) {
        a += bf16_runs_take(&r, runs + a, nruns - a);
        FOR_GRID(i, r.start[r.n]) to_bf16_runs_body(dst, src, &r, i);
    }
}

/* The to_bf16 op over runs as the model's weight copy lays them out (each run's destination
 * aligned, the gaps between them untouched), more runs than one launch takes, runs of no
 * values and of one; bitwise the CPU's, the gaps' bits kept. */
static void test_to_bf16_runs(int nruns)
{
    char name[96];
    snprintf(name, sizeof name, "to_bf16 runs=%d (%d a launch)", nruns, DS_CUDA_BF16_RUNS);
    check_begin(name);
    ds_bf16_run *runs = malloc((size_t)nruns * sizeof *runs);
    size_t nsrc = 0, ndst = 0;
    for (int k = 0; k < nruns; k++) {
        size_t len = k % 7 == 3 ? 0 : k % 11 == 5 ? 1 : ds_rng_below(&rng, 3000);
        runs[k] = (ds_bf16_run){ndst, nsrc + k % 3, len};
        nsrc += len + k % 3;
        ndst += (len + 127) / 128 * 128 + 128 * (k % 2);
    }
    float *src = f32_randn(nsrc ? nsrc : 1, 0, 2);
    ds_bf16 *d_c = nans(ndst ? ndst : 1, 2), *d_g = nans(ndst ? ndst : 1, 2);
    be->to_bf16(d_c, src, runs, nruns);
    replay_to_bf16_runs(d_g, src, runs, nruns);
    check_bits("runs, and the gaps kept", d_g, d_c, ndst, 2);
    size_t values = 0, written = 0;   /* the values are finite, the gaps NaN */
    for (int k = 0; k < nruns; k++) values += runs[k].n;
    for (size_t i = 0; i < ndst; i++) written += (((const ds_bf16 *)d_g)[i] & 0x7fff) <= 0x7f80;
    CHECK(written == values, "%zu values written, %zu in the runs", written, values);
    free(runs), free(src), free(d_c), free(d_g);
    check_end();
}

/* ---------------------------------------------------------------- batch norm */

static const char *tname(ds_dtype t) { return t == DS_BF16 ? "bf16" : "f32"; }

/* data: a row's (ops_cases.h): OPS_BN_NORMAL, OPS_BN_EXACT (integers in [-100, 100]),
 * OPS_BN_FULL_RUNS */
static void test_bn_fwd(int m, int c, ds_dtype t, int relu, int residual, int data, double offset, double spread)
{
    char name[160];
    int exact = data != OPS_BN_NORMAL;
    snprintf(name, sizeof name, "bn_fwd_train %s m=%d c=%d chunks=%d relu=%d res=%d offset=%g%s", tname(t), m, c,
             chunks_of(m, c), relu, residual, offset, data == OPS_BN_EXACT ? " small ints" : exact ? " full runs" : "");
    check_begin(name);
    size_t n = (size_t)m * c;
    const float eps = 1e-5f;
    void *in = data == OPS_BN_EXACT ? act_exact(n, -100, 100, 1, t) : act_randn(n, offset, spread, t);
    if (data == OPS_BN_FULL_RUNS)   /* rows 0, 16, 32 of every 49 large; row 0 (the shift) 0 */
        for (size_t i = 0; i < n; i++) {
            long r = (long)(i / c) % 49;
            act_set(in, i, i < (size_t)c ? 0 : r == 0 || r == 16 || r == 32 ? 2560 : (int)ds_rng_below(&rng, 3) - 1, t);
        }
    void *res = residual ? act_randn(n, 0, 1, t) : NULL;
    float *gamma = f32_randn(c, 1, 0.5), *beta = f32_randn(c, 0, 0.5);
    void *out_c = nans(n, es(t)), *out_g = nans(n, es(t));
    float *mean_c = nans(c, 4), *var_c = nans(c, 4), *is_c = nans(c, 4);
    float *mean_g = nans(c, 4), *var_g = nans(c, 4), *is_g = nans(c, 4);
    /* the running statistics' sums, from the same start on both sides */
    float *ms_c = f32_randn(c, 0, 1), *vs_c = f32_randn(c, 1, 1), *ms_g = dup(ms_c, c * 4), *vs_g = dup(vs_c, c * 4);
    float *ms_want = dup(ms_c, c * 4), *vs_want = dup(vs_c, c * 4);
    be->bn_fwd_train(out_c, NULL, mean_c, var_c, is_c, ms_c, vs_c, in, gamma, beta, res, relu, m, c, eps, t);
    replay_bn_fwd_train(out_g, NULL, mean_g, var_g, is_g, ms_g, vs_g, in, gamma, beta, res, relu, m, c, eps, t);
    /* the kernel's sums are axpy_body's of its own statistics, bitwise (the model's two axpy
     * launches before) */
    for (int j = 0; j < c; j++) {
        axpy_body(ms_want, 1.0f, mean_g, (size_t)j);
        axpy_body(vs_want, (float)((double)m / (m - 1)), var_g, (size_t)j);
    }
    check_bits("mean_sum += mean", ms_g, ms_want, c, 4);
    check_bits("var_sum += unbiased var", vs_g, vs_want, c, 4);
    if (exact) {
        check_bits("mean_sum, the CPU's", ms_g, ms_c, c, 4);
        check_bits("var_sum, the CPU's", vs_g, vs_c, c, 4);
    }
    free(ms_c), free(vs_c), free(ms_g), free(vs_g), free(ms_want), free(vs_want);

    if (exact) {
        check_bits("mean", mean_g, mean_c, c, 4);
        check_bits("var", var_g, var_c, c, 4);
        check_bits("invstd", is_g, is_c, c, 4);
        check_bits("out", out_g, out_c, n, es(t));
    } else {
        /* Statistics: the sums of u = x - shift and u^2 differ by sum_gap; carried through
         * d = s1 / m, v = s2 / m - d^2 and 1 / sqrt(v + eps) to first order. */
        double *bm = calloc(c, sizeof *bm), *bv = calloc(c, sizeof *bv), *bi = calloc(c, sizeof *bi);
        for (int j = 0; j < c; j++) {
            double shift = act_get(in, j, t), a1 = 0, a2 = 0, s1 = 0, s2 = 0;
            for (int i = 0; i < m; i++) {
                double u = (float)(act_get(in, (size_t)i * c + j, t) - (float)shift);
                a1 += fabs(u), a2 += u * u, s1 += u, s2 += u * u;
            }
            double dd = 1.01 * sum_gap(a1, chunks_of(m, c)) / m, d = s1 / m;
            double dv = 1.01 * (sum_gap(a2, chunks_of(m, c)) / m + 2 * fabs(d) * dd + dd * dd) +
                        8 * 0x1p-53 * (s2 / m + d * d);
            double v = fmax(s2 / m - d * d, 0);
            bm[j] = dd + 0x1p-23 * fabs(mean_c[j]) + 4 * 0x1p-53 * fabs(shift + d);
            bv[j] = dv + 0x1p-23 * fabs(var_c[j]);
            bi[j] = 0.51 * dv / (v + eps) * is_c[j] + 0x1p-23 * is_c[j];
        }
        check_bound("mean", mean_g, mean_c, bm, c);
        check_bound("var", var_g, var_c, bv, c);
        check_bound("invstd", is_g, is_c, bi, c);
        free(bm), free(bv), free(bi);
        /* The apply, given the kernels' statistics: the CPU's loop on them, bitwise. */
        float *ka = malloc(c * sizeof *ka);
        for (int j = 0; j < c; j++) ka[j] = (float)((double)gamma[j] * (1.0 / sqrt((double)var_g[j] + eps)));
        const ds_cpu_loops *L = ds_cpu_kernels_for(ds_cpu_isa_get())->loops;
        void *want = nans(n, es(t)), *got = nans(n, es(t));
        replay_bn_apply_as(got, NULL, in, mean_g, ka, beta, res, relu, m, c, t, 0);
        if (t == DS_BF16) L->bn_apply_bf16(want, in, mean_g, ka, beta, res, relu, 0, m, c);
        else L->bn_apply(want, in, mean_g, ka, beta, res, relu, 0, m, c);
        check_bits("out given the statistics", got, want, n, es(t));
        free(ka), free(want), free(got);
    }
    free(in), free(res), free(gamma), free(beta), free(out_c), free(out_g);
    free(mean_c), free(var_c), free(is_c), free(mean_g), free(var_g), free(is_g);
    check_end();
}

static void test_bn_infer(int m, int c, ds_dtype t, int relu, int residual)
{
    char name[128];
    snprintf(name, sizeof name, "bn_fwd_infer %s m=%d c=%d relu=%d res=%d", tname(t), m, c, relu, residual);
    check_begin(name);
    size_t n = (size_t)m * c;
    void *in = act_randn(n, 0.5, 2, t), *res = residual ? act_randn(n, 0, 1, t) : NULL;
    float *gamma = f32_randn(c, 1, 0.5), *beta = f32_randn(c, 0, 0.5), *rmean = f32_randn(c, 0.5, 1);
    float *rvar = f32_randn(c, 0, 2);
    for (int j = 0; j < c; j++) rvar[j] = rvar[j] * rvar[j];
    void *out_c = nans(n, es(t)), *out_g = nans(n, es(t));
    be->bn_fwd_infer(out_c, in, gamma, beta, rmean, rvar, res, relu, m, c, 1e-5f, t);
    replay_bn_fwd_infer(out_g, in, gamma, beta, rmean, rvar, res, relu, m, c, 1e-5f, t);
    check_bits("out", out_g, out_c, n, es(t));
    free(in), free(res), free(gamma), free(beta), free(rmean), free(rvar), free(out_c), free(out_g);
    check_end();
}

/* Backward. dres: 0 none, 1 a buffer of its own, 2 dout itself (no copy). Exact data: dy
 * small integers, x and the mean quarters, so every product and sum is exact. */
static void test_bn_bwd(int m, int c, ds_dtype t, int relu, int dres, int exact)
{
    char name[160];
    snprintf(name, sizeof name, "bn_bwd %s m=%d c=%d chunks=%d relu=%d dres=%s%s", tname(t), m, c, chunks_of(m, c),
             relu, dres == 0 ? "none" : dres == 1 ? "own" : "dout", exact ? " exact" : "");
    check_begin(name);
    size_t n = (size_t)m * c;
    void *in = exact ? act_exact(n, -64, 64, 4, t) : act_randn(n, 0.3, 1.5, t);
    void *out = act_randn(n, 0, 1, t);   /* about half of it <= 0: the ReLU mask */
    void *dout = exact ? act_exact(n, -16, 16, 1, t) : act_randn(n, 0, 1, t);
    float *gamma = f32_randn(c, 1, 0.5), *mean = exact ? act_exact(c, -8, 8, 4, DS_F32) : f32_randn(c, 0.3, 0.1);
    float *invstd = f32_randn(c, 1, 0.2);
    float *dg0 = exact ? act_exact(c, -4, 4, 1, DS_F32) : f32_randn(c, 0, 1);
    float *db0 = exact ? act_exact(c, -4, 4, 1, DS_F32) : f32_randn(c, 0, 1);
    float *dg_c = dup(dg0, c * 4), *db_c = dup(db0, c * 4), *dg_g = dup(dg0, c * 4), *db_g = dup(db0, c * 4);
    void *dout_c = dup(dout, n * es(t)), *dout_g = dup(dout, n * es(t));
    void *din_c = nans(n, es(t)), *din_g = nans(n, es(t));
    void *dres_c = dres == 1 ? nans(n, es(t)) : dres == 2 ? dout_c : NULL;
    void *dres_g = dres == 1 ? nans(n, es(t)) : dres == 2 ? dout_g : NULL;
    float *ka = nans(c, 4), *kb = nans(c, 4), *kc = nans(c, 4);
    be->bn_bwd(din_c, dres_c, dg_c, db_c, dout_c, out, NULL, in, gamma, mean, invstd, relu, m, c, t);
    replay_bn_bwd(din_g, dres_g, dg_g, db_g, dout_g, out, NULL, in, gamma, mean, invstd, relu, m, c, t, ka, kb, kc);

    check_bits("dout after the ReLU mask", dout_g, dout_c, n, es(t));
    if (dres == 1) check_bits("dresidual", dres_g, dres_c, n, es(t));
    if (exact) {
        check_bits("dgamma", dg_g, dg_c, c, 4);
        check_bits("dbeta", db_g, db_c, c, 4);
        check_bits("din", din_g, din_c, n, es(t));
    } else {
        /* sdy = sum dy and sdyx = sum dy (x - mean) differ by sum_gap; dgamma += sdyx invstd
         * and dbeta += sdy, each rounded to float, then added. */
        double *bg = malloc(c * sizeof *bg), *bb = malloc(c * sizeof *bb);
        for (int j = 0; j < c; j++) {
            double a1 = 0, a2 = 0, s1 = 0, s2 = 0;
            for (int i = 0; i < m; i++) {
                size_t at = (size_t)i * c + j;
                double u = act_get(dout_c, at, t), v = (float)(act_get(in, at, t) - mean[j]);
                a1 += fabs(u), a2 += fabs((float)(u * v)), s1 += u, s2 += (float)(u * v);
            }
            bg[j] = 1.01 * sum_gap(a2, chunks_of(m, c)) * invstd[j] +
                    0x1p-23 * (fabs(s2 * invstd[j]) + fabs(dg_c[j]));
            bb[j] = 1.01 * sum_gap(a1, chunks_of(m, c)) + 0x1p-23 * (fabs(s1) + fabs(db_c[j]));
        }
        check_bound("dgamma", dg_g, dg_c, bg, c);
        check_bound("dbeta", db_g, db_c, bb, c);
        free(bg), free(bb);
        /* dx, given the kernels' coefficients: the CPU's loop on them, bitwise. */
        const ds_cpu_loops *L = ds_cpu_kernels_for(ds_cpu_isa_get())->loops;
        void *want = nans(n, es(t));
        if (t == DS_BF16) L->bn_dx_bf16(want, NULL, dout_g, in, mean, ka, kb, kc, 0, m, c);
        else L->bn_dx(want, NULL, dout_g, in, mean, ka, kb, kc, 0, m, c);
        if (dres != 2) check_bits("din given the coefficients", din_g, want, n, es(t));
        free(want);
    }
    /* din written over dout (the op allows it): the same bits as into a buffer of its own */
    if (dres != 2) {
        void *d2 = dup(dout, n * es(t));
        float *g2 = dup(dg0, c * 4), *b2 = dup(db0, c * 4);
        replay_bn_bwd(d2, NULL, g2, b2, d2, out, NULL, in, gamma, mean, invstd, relu, m, c, t, ka, kb, kc);
        check_bits("din over dout", d2, din_g, n, es(t));
        free(d2), free(g2), free(b2);
    }
    free(in), free(out), free(dout), free(gamma), free(mean), free(invstd), free(dg0), free(db0);
    free(dg_c), free(db_c), free(dg_g), free(db_g), free(dout_c), free(dout_g), free(din_c), free(din_g);
    if (dres == 1) free(dres_c), free(dres_g);
    free(ka), free(kb), free(kc);
    check_end();
}

/* ---------------------------------------------------------------- pooling */

/* Pooling's data, a row's kind (ops_cases.h): normal, few values (many ties: the first
 * maximum must win), or normal with NaN and -inf among them. */
static void *pool_data(size_t n, int kind, ds_dtype t)
{
    void *in = kind == OPS_POOL_TIES ? act_exact(n, -2, 2, 1, t) : act_randn(n, 0, 1, t);
    if (kind == OPS_POOL_NAN_INF)
        for (size_t i = 0; i < n; i++) {
            const uint32_t u = ds_rng_below(&rng, 8);
            if (u == 0) act_set(in, i, NAN, t);
            if (u == 1) act_set(in, i, -INFINITY, t);
            if (u == 2) act_set(in, i, -NAN, t);
        }
    return in;
}

/* n argmax bytes that no argmax is (0xff is a window wholly in the padding) */
static uint8_t *unwritten_bytes(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    memset(p, 0xee, n);
    return p;
}

static const char *pool_kind_name(int kind)
{
    return kind == OPS_POOL_TIES ? " ties" : kind == OPS_POOL_NAN_INF ? " NaN and -inf" : "";
}

/* The forward's outputs and argmax and the backward's gradient, against the CPU's */
static void test_maxpool(ds_pool_desc d, int kind)
{
    char name[128];
    snprintf(name, sizeof name, "maxpool %s n=%d %dx%d c=%d k=%d s=%d p=%d%s", tname(d.t), d.n, d.h, d.w, d.c, d.k,
             d.stride, d.pad, pool_kind_name(kind));
    check_begin(name);
    size_t ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.c;
    void *in = pool_data(ni, kind, d.t), *dout = act_randn(no, 0, 1, d.t);
    void *out_c = nans(no, es(d.t)), *out_g = nans(no, es(d.t)), *din_c = nans(ni, es(d.t)), *din_g = nans(ni, es(d.t));
    uint8_t *arg_c = unwritten_bytes(no), *arg_g = unwritten_bytes(no);
    be->maxpool_fwd(out_c, arg_c, in, &d);
    replay_maxpool_fwd_as(out_g, arg_g, in, d, 0);
    check_bits("out", out_g, out_c, no, es(d.t));
    check_bits("argmax", arg_g, arg_c, no, 1);
    be->maxpool_bwd(din_c, dout, in, out_c, arg_c, &d);
    replay_maxpool_bwd_as(din_g, dout, arg_g, d, 0);
    check_bits("din", din_g, din_c, ni, es(d.t));
    free(in), free(dout), free(out_c), free(out_g), free(din_c), free(din_g), free(arg_c), free(arg_g);
    check_end();
}

static float *floats(int n, double lo, double hi)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (int i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * ds_rng_double(&rng));
    return x;
}

/* The vector bodies against the scalar ones they stand for, bitwise, on any data: batch
 * norm's partial sums (the statistics; the gradients with and without the ReLU mask, and
 * dout after the mask), the apply (with and without residual and ReLU), dx (with dresidual),
 * and maxpool backward (with ties, and with none). */
static void test_vec_bodies(int m, int c, ds_dtype t)
{
    char name[96];
    snprintf(name, sizeof name, "vector bodies give the scalar ones' bits %s m=%d c=%d", tname(t), m, c);
    check_begin(name);
    size_t n = (size_t)m * c, ps = 2 * (size_t)chunks_of(m, c) * c;
    int chunks = chunks_of(m, c);
    void *in = act_randn(n, 0.3, 1, t), *out = act_randn(n, 0, 1, t), *dout = act_randn(n, 0, 1, t),
         *res = act_randn(n, 0, 1, t);
    float *center = floats(c, -0.5, 0.5), *mean = floats(c, -0.5, 0.5), *a = floats(c, 0.5, 2),
          *beta = floats(c, -1, 1), *kb = floats(c, -0.1, 0.1), *kc = floats(c, -0.1, 0.1);
    for (int mode = BN_STATS; mode <= BN_GRADS; mode++)
        for (int relu = 0; relu <= (mode == BN_GRADS); relu++) {
            double *p_s = nans(ps, 8), *p_v = nans(ps, 8);
            void *d_s = dup(dout, n * es(t)), *d_v = dup(dout, n * es(t));
            replay_bn_partials_as(p_s, d_s, out, NULL, in, center, mode, relu, 1, m, c, chunks, t, -1);
            replay_bn_partials_as(p_v, d_v, out, NULL, in, center, mode, relu, 1, m, c, chunks, t, 1);
            check_bits(mode == BN_STATS ? "statistics' partial sums" : relu ? "masked gradients' partial sums"
                                                                            : "gradients' partial sums",
                       p_v, p_s, ps, 8);
            check_bits("dout after the mask", d_v, d_s, n, es(t));
            free(p_s), free(p_v), free(d_s), free(d_v);
        }
    for (int relu = 0; relu <= 1; relu++)
        for (int residual = 0; residual <= 1; residual++) {
            void *o_s = nans(n, es(t)), *o_v = nans(n, es(t));
            replay_bn_apply_as(o_s, NULL, in, mean, a, beta, residual ? res : NULL, relu, m, c, t, -1);
            replay_bn_apply_as(o_v, NULL, in, mean, a, beta, residual ? res : NULL, relu, m, c, t, 1);
            check_bits("apply", o_v, o_s, n, es(t));
            free(o_s), free(o_v);
        }
    void *x_s = nans(n, es(t)), *x_v = nans(n, es(t)), *r_s = nans(n, es(t)), *r_v = nans(n, es(t));
    replay_bn_dx_as(x_s, r_s, dout, NULL, in, mean, a, kb, kc, m, c, t, -1);
    replay_bn_dx_as(x_v, r_v, dout, NULL, in, mean, a, kb, kc, m, c, t, 1);
    check_bits("dx", x_v, x_s, n, es(t));
    check_bits("dresidual", r_v, r_s, n, es(t));
    /* any number of row lanes covers every row once: one lane walks them all, three leave
     * a short last pass of the unrolled loop, more lanes than rows leave threads idle */
    const long lanes[] = {1, 3, m + 5};
    for (int k = 0; k < 3; k++) {
        void *o_v = nans(n, es(t)), *o_s = nans(n, es(t)), *d_v = nans(n, es(t)), *q_v = nans(n, es(t));
        replay_bn_apply_as(o_s, NULL, in, mean, a, beta, res, 1, m, c, t, -1);
        replay_bn_apply_lanes(o_v, NULL, in, mean, a, beta, res, 1, m, c, t, lanes[k]);
        check_bits(k == 0 ? "apply in one lane" : k == 1 ? "apply in three lanes" : "apply in more lanes than rows",
                   o_v, o_s, n, es(t));
        replay_bn_dx_lanes(d_v, q_v, dout, NULL, in, mean, a, kb, kc, m, c, t, lanes[k]);
        check_bits(k == 0 ? "dx in one lane" : k == 1 ? "dx in three lanes" : "dx in more lanes than rows", d_v, x_s,
                   n, es(t));
        check_bits("dresidual in lanes", q_v, r_s, n, es(t));
        free(o_v), free(o_s), free(d_v), free(q_v);
    }
    /* dx in place (din = dy), as bn_bwd calls it */
    void *ip = dup(dout, n * es(t));
    replay_bn_dx_as(ip, NULL, ip, NULL, in, mean, a, kb, kc, m, c, t, 1);
    check_bits("dx in place", ip, x_s, n, es(t));
    free(ip);
    free(x_s), free(x_v), free(r_s), free(r_v);
    free(in), free(out), free(dout), free(res), free(center), free(mean), free(a), free(beta), free(kb), free(kc);
    check_end();
}

/* ---------------------------------------------------------------- the ReLU bitmask */

/* Every 5th element one of the values where a ReLU's mask decides: NaN (quiet and signalling,
 * either sign), +-Inf, -0 and +0, the smallest denormals of either sign (a bf16 denormal
 * widens to a float denormal: > 0, bit set) and a negative. */
static void plant_edges(void *p, size_t n, ds_dtype t)
{
    static const uint32_t f32[] = {0x7fc00000, 0xffc00000, 0x7fa00000, 0x7f800000, 0xff800000,
                                   0x80000000, 0,          1,          0x80000001, 0xbf800000};
    static const uint16_t b16[] = {0x7fc0, 0xffc0, 0x7fa0, 0x7f80, 0xff80, 0x8000, 0, 1, 0x8001, 0xbf80};
    for (size_t i = 0; i < n; i += 5) {
        const uint32_t k = ds_rng_below(&rng, 10);
        if (t == DS_BF16) ((uint16_t *)p)[i] = b16[k];
        else memcpy((float *)p + i, &f32[k], 4);
    }
}

/* The mask by its definition (backend.h), from n stored values: bit k of byte g is element
 * g V + k > 0 as a float */
static uint8_t *mask_of(const void *out, size_t n, ds_dtype t)
{
    const size_t v = (size_t)vec_width(t);
    uint8_t *mask = calloc(n / v ? n / v : 1, 1);
    for (size_t i = 0; i < n; i++) mask[i / v] |= (uint8_t)((act_get(out, i, t) > 0) << (i % v));
    return mask;
}

/* The apply's mask: the vector kernel's (in any number of row lanes) and the scalar apply's
 * own kernel give the same bytes, the definition's on the stored out. Channel 0 has a = 0 and
 * beta = -0 (outputs -0 and +0 without a residual), channel 1 a = 0 and beta the smallest
 * denormal (a float32 denormal out; bf16 rounds it to +0); in and the residual hold the
 * planted edges. */
static void test_relu_mask_apply(int m, int c, ds_dtype t)
{
    char name[96];
    snprintf(name, sizeof name, "relu mask: apply %s m=%d c=%d", tname(t), m, c);
    check_begin(name);
    size_t n = (size_t)m * c, bytes = ds_relu_mask_bytes(m, c, t);
    CHECK(bytes == n / vec_width(t), "ds_relu_mask_bytes %zu, want %zu", bytes, n / vec_width(t));
    void *in = act_randn(n, 0.3, 1, t), *res = act_randn(n, 0, 1, t);
    plant_edges(in, n, t), plant_edges(res, n, t);
    float *mean = floats(c, -0.5, 0.5), *a = floats(c, 0.5, 2), *beta = floats(c, -1, 1);
    a[0] = 0, beta[0] = -0.0f, a[1] = 0, beta[1] = 0x1p-149f;
    for (int i = 0; i < m; i++)   /* finite there, or (x - mean) 0 is a NaN */
        act_set(in, (size_t)i * c, i % 2 ? 1 : -1, t), act_set(in, (size_t)i * c + 1, 1, t);
    for (int residual = 0; residual <= 1; residual++) {
        const void *r = residual ? res : NULL;
        void *o_s = nans(n, es(t)), *o_v = nans(n, es(t));
        uint8_t *m_s = unwritten_bytes(bytes), *m_v = unwritten_bytes(bytes);
        replay_bn_apply_as(o_s, m_s, in, mean, a, beta, r, 1, m, c, t, -1);
        uint8_t *want = mask_of(o_s, n, t);
        check_bits("the scalar apply's mask, by the definition", m_s, want, bytes, 1);
        replay_bn_apply_as(o_v, m_v, in, mean, a, beta, r, 1, m, c, t, 1);
        check_bits("the vector apply's out", o_v, o_s, n, es(t));
        check_bits("the vector apply's mask", m_v, want, bytes, 1);
        const long lanes[] = {1, 3, m + 5};
        for (int k = 0; k < 3; k++) {
            memset(m_v, 0xee, bytes);
            replay_bn_apply_lanes(o_v, m_v, in, mean, a, beta, r, 1, m, c, t, lanes[k]);
            check_bits(k == 0 ? "mask in one lane" : k == 1 ? "mask in three lanes" : "mask in more lanes than rows",
                       m_v, want, bytes, 1);
        }
        if (!residual) {   /* the edges a = 0 makes: -0 and +0 both clear, a float32 denormal set */
            int zeros = 0, denormal = 0;
            for (int i = 0; i < m; i++) {
                zeros += !(want[(size_t)i * c / vec_width(t)] & 1);
                denormal += want[((size_t)i * c + 1) / vec_width(t)] >> 1 & 1;
            }
            CHECK(zeros == m, "channel 0 (+-0): %d of %d bits clear", zeros, m);
            CHECK(denormal == (t == DS_F32 ? m : 0), "channel 1 (a denormal): %d of %d bits set", denormal, m);
        }
        free(o_s), free(o_v), free(m_s), free(m_v), free(want);
    }
    free(in), free(res), free(mean), free(a), free(beta);
    check_end();
}

/* The backward reading the mask gives the bits of the backward reading out: din, dresidual,
 * dgamma, dbeta, with the vector and the scalar kernels, dresidual none, a buffer of its own
 * or dout itself (then dout must end masked), and din over dout. out holds the planted edges;
 * the mask is its definition's. */
static void test_relu_mask_bwd(int m, int c, ds_dtype t)
{
    char name[96];
    snprintf(name, sizeof name, "relu mask: backward %s m=%d c=%d", tname(t), m, c);
    check_begin(name);
    size_t n = (size_t)m * c;
    void *in = act_randn(n, 0.3, 1.5, t), *out = act_randn(n, 0, 1, t), *dout = act_randn(n, 0, 1, t);
    plant_edges(out, n, t);
    uint8_t *mask = mask_of(out, n, t);
    float *gamma = f32_randn(c, 1, 0.5), *mean = f32_randn(c, 0.3, 0.1), *invstd = f32_randn(c, 1, 0.2);
    float *dg0 = f32_randn(c, 0, 1), *db0 = f32_randn(c, 0, 1);
    float *ka = nans(c, 4), *kb = nans(c, 4), *kc = nans(c, 4);
    for (int dres = 0; dres <= 2; dres++) {
        /* without the mask (the kernels' own choice of vector or scalar), then with it */
        void *dout_w = dup(dout, n * es(t)), *din_w = nans(n, es(t));
        void *dres_w = dres == 1 ? nans(n, es(t)) : dres == 2 ? dout_w : NULL;
        float *dg_w = dup(dg0, c * 4), *db_w = dup(db0, c * 4);
        replay_bn_bwd(din_w, dres_w, dg_w, db_w, dout_w, out, NULL, in, gamma, mean, invstd, 1, m, c, t, ka, kb, kc);
        for (int vec = -1; vec <= 1; vec += 2) {
            char what[96];
            const char *how = vec > 0 ? "vector" : "scalar", *dn = dres == 0 ? "none" : dres == 1 ? "own" : "dout";
            void *dout_g = dup(dout, n * es(t)), *din_g = nans(n, es(t));
            void *dres_g = dres == 1 ? nans(n, es(t)) : dres == 2 ? dout_g : NULL;
            float *dg_g = dup(dg0, c * 4), *db_g = dup(db0, c * 4);
            replay_bn_bwd_as(din_g, dres_g, dg_g, db_g, dout_g, NULL, mask, in, gamma, mean, invstd, 1, m, c, t, ka, kb,
                          kc, vec);
            snprintf(what, sizeof what, "din (%s, dresidual %s)", how, dn);
            check_bits(what, din_g, din_w, n, es(t));
            snprintf(what, sizeof what, "dgamma (%s, dresidual %s)", how, dn);
            check_bits(what, dg_g, dg_w, c, 4);
            snprintf(what, sizeof what, "dbeta (%s, dresidual %s)", how, dn);
            check_bits(what, db_g, db_w, c, 4);
            snprintf(what, sizeof what, "dresidual (%s, %s)", how, dres == 2 ? "dout itself, masked" : "its own");
            if (dres) check_bits(what, dres_g, dres_w, n, es(t));
            snprintf(what, sizeof what, "dout left as given (%s)", how);
            if (dres != 2) check_bits(what, dout_g, dout, n, es(t));
            if (dres == 0) {   /* din over dout */
                void *d2 = dup(dout, n * es(t));
                float *g2 = dup(dg0, c * 4), *b2 = dup(db0, c * 4);
                replay_bn_bwd_as(d2, NULL, g2, b2, d2, NULL, mask, in, gamma, mean, invstd, 1, m, c, t, ka, kb, kc,
                                 vec);
                snprintf(what, sizeof what, "din over dout (%s)", how);
                check_bits(what, d2, din_w, n, es(t));
                free(d2), free(g2), free(b2);
            }
            free(dout_g), free(din_g), free(dg_g), free(db_g);
            if (dres == 1) free(dres_g);
        }
        free(dout_w), free(din_w), free(dg_w), free(db_w);
        if (dres == 1) free(dres_w);
    }
    free(in), free(out), free(dout), free(mask), free(gamma), free(mean), free(invstd), free(dg0), free(db0);
    free(ka), free(kb), free(kc);
    check_end();
}

static void test_vec_maxpool(ds_pool_desc d, int kind)
{
    char name[128];
    snprintf(name, sizeof name, "maxpool's vector bodies give the scalar ones' bits %s n=%d %dx%d c=%d k=%d s=%d%s",
             tname(d.t), d.n, d.h, d.w, d.c, d.k, d.stride, pool_kind_name(kind));
    check_begin(name);
    size_t ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.c;
    void *in = pool_data(ni, kind, d.t), *dout = act_randn(no, 0, 1, d.t);
    void *g_s = nans(ni, es(d.t)), *g_v = nans(ni, es(d.t)), *o_s = nans(no, es(d.t)), *o_v = nans(no, es(d.t));
    /* the vector argmax one byte off its alignment (on the device: byte loads and stores) */
    uint8_t *a_s = unwritten_bytes(no), *a_v = unwritten_bytes(no + 1);
    replay_maxpool_fwd_as(o_s, a_s, in, d, -1);
    replay_maxpool_fwd_as(o_v, a_v + 1, in, d, 1);
    check_bits("out", o_v, o_s, no, es(d.t));
    check_bits("argmax", a_v + 1, a_s, no, 1);
    replay_maxpool_bwd_as(g_s, dout, a_s, d, -1);
    replay_maxpool_bwd_as(g_v, dout, a_v + 1, d, 1);
    check_bits("din", g_v, g_s, ni, es(d.t));
    replay_maxpool_fwd_as(o_v, NULL, in, d, 1);   /* inference: no argmax */
    check_bits("out without argmax", o_v, o_s, no, es(d.t));
    free(in), free(dout), free(g_s), free(g_v), free(o_s), free(o_v), free(a_s), free(a_v);
    check_end();
}

static void test_avgpool(int n, int hw, int c, ds_dtype t)
{
    char name[96];
    snprintf(name, sizeof name, "avgpool %s n=%d hw=%d c=%d", tname(t), n, hw, c);
    check_begin(name);
    size_t ni = (size_t)n * hw * c, no = (size_t)n * c;
    void *in = act_randn(ni, 0.5, 1, t);
    float *dout = f32_randn(no, 0, 1), *out_c = nans(no, 4), *out_g = nans(no, 4);
    void *din_c = nans(ni, es(t)), *din_g = nans(ni, es(t));
    be->avgpool_fwd(out_c, in, n, hw, c, t);
    for (long b = 0; b < (long)(no + THREADS - 1) / THREADS; b++)   /* one thread an output, no stride */
        for (int x = 0; x < THREADS; x++)
            if (b * THREADS + x < (long)no) BY_T(t, avgpool_fwd_body, out_g, in, hw, c, b * THREADS + x);
    check_bits("out", out_g, out_c, no, 4);
    be->avgpool_bwd(din_c, dout, n, hw, c, t);
    FOR_GRID(i, ni) BY_T(t, avgpool_bwd_body, din_g, dout, hw, c, i);
    check_bits("din", din_g, din_c, ni, es(t));
    free(in), free(dout), free(out_c), free(out_g), free(din_c), free(din_g);
    check_end();
}

/* ---------------------------------------------------------------- bias, loss */

/* The CPU adds the bias after its product (cpu_linear_fwd) and sums db row by row
 * (cpu_linear_bwd): the bias kernels on the product without a bias give those bits. */
static void test_bias(int n, int i, int o)
{
    char name[64];
    snprintf(name, sizeof name, "bias n=%d i=%d o=%d", n, i, o);
    check_begin(name);
    float *in = f32_randn((size_t)n * i, 0, 1), *w = f32_randn((size_t)o * i, 0, 0.3), *b = f32_randn(o, 0, 1);
    float *with = nans((size_t)n * o, 4), *got = nans((size_t)n * o, 4);
    be->linear_fwd(with, in, w, b, n, i, o);
    be->linear_fwd(got, in, w, NULL, n, i, o);
    FOR_GRID(k, (size_t)n * o) bias_fwd_body(got, b, o, k);
    check_bits("out", got, with, (size_t)n * o, 4);

    float *dout = f32_randn((size_t)n * o, 0, 1), *dw = calloc((size_t)o * i, 4);
    float *db_c = f32_randn(o, 0, 1), *db_g = dup(db_c, o * 4);
    be->linear_bwd(NULL, dw, db_c, dout, in, w, n, i, o);
    for (int blk = 0; blk < (o + THREADS - 1) / THREADS; blk++)
        for (int x = 0; x < THREADS; x++)
            if (blk * THREADS + x < o) bias_bwd_body(db_g, dout, n, o, blk * THREADS + x);
    check_bits("db", db_g, db_c, o, 4);
    free(in), free(w), free(b), free(with), free(got), free(dout), free(dw), free(db_c), free(db_g);
    check_end();
}

/* The block's tree (block_reduce): buf[x] = op(buf[x], buf[x + s]) for s = THREADS/2, ..., 1 */
static float tree_max(float *buf)
{
    for (int s = THREADS / 2; s > 0; s >>= 1)
        for (int x = 0; x < s; x++) buf[x] = max_body(buf[x], buf[x + s]);
    return buf[0];
}

static double tree_add(double *buf)
{
    for (int s = THREADS / 2; s > 0; s >>= 1)
        for (int x = 0; x < s; x++) buf[x] = dadd_rn(buf[x], buf[x + s]);
    return buf[0];
}

/* softmax_xent_kernel: one block of THREADS per sample */
static void replay_softmax_xent(float *loss, float *dlogits, const float *logits, const int32_t *labels, int n, int c,
                             float smoothing, float scale)
{
    for (int i = 0; i < n; i++) {
        int y = labels[i];
        const float *z = logits + (long)i * c;
        float *dz = dlogits ? dlogits + (long)i * c : NULL;
        if (y < 0 || y >= c) {
            if (loss) loss[i] = 0;
            if (dz)
                for (int tid = 0; tid < THREADS; tid++)
                    for (int j = tid; j < c; j += THREADS) dz[j] = 0;
            continue;
        }
        float fb[THREADS];
        double eb[THREADS], sb[THREADS];
        for (int tid = 0; tid < THREADS; tid++) fb[tid] = softmax_max_body(z, c, tid);
        float zmax = tree_max(fb);
        for (int tid = 0; tid < THREADS; tid++) softmax_sums_body(&eb[tid], &sb[tid], z, c, zmax, tid);
        double se = tree_add(eb), sz = tree_add(sb), lse = log(se);
        if (loss) loss[i] = softmax_loss_body(z, c, y, zmax, lse, sz, smoothing);
        if (dz)
            for (int tid = 0; tid < THREADS; tid++)
                for (int j = tid; j < c; j += THREADS)
                    dz[j] = softmax_grad_body(z, c, j, y, zmax, lse, smoothing, scale);
    }
}

/* Bound: se (positive terms) and sz differ between the tree and the CPU's sequence by at
 * most 2 c 2^-53 of their terms' magnitudes; exp and log differ by up to an ulp of a double
 * each between the device's and the C library's (4 2^-53 relative with both sides). Carried
 * to first order: lse by 2 c 2^-53 + 4 2^-53 (1 + |lse|), the loss by that plus smoothing
 * times sz's gap / c, dz by |scale| (p times lse's gap plus exp's, plus the roundings of
 * p - target, below 2 2^-53 each); then one float rounding. */
static void test_softmax(int n, int c, float smoothing, float scale)
{
    char name[96];
    snprintf(name, sizeof name, "softmax_xent n=%d c=%d smoothing=%g", n, c, smoothing);
    check_begin(name);
    float *z = f32_randn((size_t)n * c, 0, 3);
    int32_t *labels = malloc(n * sizeof *labels);
    for (int i = 0; i < n; i++) labels[i] = (int32_t)ds_rng_below(&rng, c);
    if (n > 2) labels[1] = -1, labels[2] = c;   /* padding samples */
    float *loss_c = nans(n, 4), *loss_g = nans(n, 4), *dz_c = nans((size_t)n * c, 4), *dz_g = nans((size_t)n * c, 4);
    be->softmax_xent(loss_c, dz_c, z, labels, n, c, smoothing, scale);
    replay_softmax_xent(loss_g, dz_g, z, labels, n, c, smoothing, scale);
    double *bl = malloc(n * sizeof *bl), *bd = malloc((size_t)n * c * sizeof *bd);
    for (int i = 0; i < n; i++) {
        const float *zi = z + (size_t)i * c;
        float zmax = zi[0];
        for (int j = 1; j < c; j++) zmax = fmaxf(zmax, zi[j]);
        double se = 0, az = 0;
        for (int j = 0; j < c; j++) se += exp((double)zi[j] - zmax), az += fabs((double)zi[j] - zmax);
        double dlse = 1.01 * (2.0 * c * 0x1p-53 + 4 * 0x1p-53 * (1 + fabs(log(se))));
        bl[i] = 1.01 * (dlse + smoothing * 2.0 * c * 0x1p-53 * az / c) + 0x1p-23 * fabs(loss_c[i]) + 0x1p-60;
        for (int j = 0; j < c; j++) {
            double p = exp((double)zi[j] - zmax) / se;
            bd[(size_t)i * c + j] = 1.01 * fabs(scale) * (p * (dlse + 4 * 0x1p-53) + 4 * 0x1p-53) +
                                    0x1p-23 * fabs(dz_c[(size_t)i * c + j]) + 0x1p-60;
        }
    }
    check_bound("loss", loss_g, loss_c, bl, n);
    check_bound("dlogits", dz_g, dz_c, bd, (size_t)n * c);
    if (n > 2) {
        check_bits("padding loss", loss_g + 1, loss_c + 1, 2, 4);
        check_bits("padding dlogits", dz_g + c, dz_c + c, 2 * (size_t)c, 4);
    }
    free(z), free(labels), free(loss_c), free(loss_g), free(dz_c), free(dz_g), free(bl), free(bd);
    check_end();
}

/* ---------------------------------------------------------------- optimizer, elementwise */

static void test_sgd(size_t n, float lr, float momentum, float wd, int nesterov, int first)
{
    char name[112];
    snprintf(name, sizeof name, "sgd n=%zu lr=%g momentum=%g wd=%g nesterov=%d first=%d", n, lr, momentum, wd,
             nesterov, first);
    check_begin(name);
    float *w = f32_randn(n, 0, 1), *buf = f32_randn(n, 0, 0.1), *g = f32_randn(n, 0, 0.1);
    float *w_g = dup(w, n * 4), *b_g = dup(buf, n * 4);
    be->sgd_step(w, buf, g, n, &lr, momentum, wd, nesterov, first);
    FOR_GRID(i, n) sgd_body(w_g, b_g, g, i, lr, momentum, wd, nesterov, first);
    check_bits("w", w_g, w, n, 4);
    check_bits("momentum buffer", b_g, buf, n, 4);
    free(w), free(buf), free(g), free(w_g), free(b_g);
    check_end();
}

static void test_elementwise(size_t n)
{
    char name[64];
    snprintf(name, sizeof name, "scale axpy add casts n=%zu", n);
    check_begin(name);
    float *x = f32_randn(n, 0, 1), *y = f32_randn(n, 0, 1), *y_g = dup(y, n * 4);
    be->scale(y, 0.37f, n);
    FOR_GRID(i, n) scale_body(y_g, 0.37f, i);
    check_bits("scale", y_g, y, n, 4);
    be->axpy(y, -1.3f, x, n);
    FOR_GRID(i, n) axpy_body(y_g, -1.3f, x, i);
    check_bits("axpy", y_g, y, n, 4);
    for (int b = 0; b < 2; b++) {   /* add: float32 (the axpy with alpha 1), bf16 */
        ds_dtype t = b ? DS_BF16 : DS_F32;
        void *a = act_randn(n, 0, 1, t), *d = act_randn(n, 0, 1, t), *a_g = dup(a, n * es(t));
        be->add(a, d, n, t);
        FOR_GRID(i, n) BY_T(t, add_body, a_g, d, i);
        check_bits(b ? "add bf16" : "add f32", a_g, a, n, es(t));
        free(a), free(d), free(a_g);
    }
    /* to_bf16 on values that test the rule: ties, denormals (to a zero of their sign), the
     * largest finite, infinities, NaNs (quiet, payload kept), then normal values */
    static const uint32_t special[] = {0x3f808000, 0x3f818000, 0xbf808000, 0x00000001, 0x807fffff, 0x00800000,
                                       0x7f7fffff, 0x7f7f8000, 0x7f800000, 0xff800000, 0x7fa00001, 0xffc12345,
                                       0x7f800001, 0x00000000, 0x80000000, 0x3f80ffff};
    const size_t ns = sizeof special / sizeof *special;
    for (size_t k = 0; k < ns && k < n; k++) memcpy(&x[k], &special[k], 4);
    ds_bf16 *h_c = nans(n, 2), *h_g = nans(n, 2);
    be->to_bf16(h_c, x, &(ds_bf16_run){0, 0, n}, 1);
    FOR_GRID(i, n) narrow_body_bf16(h_g, x, i);
    check_bits("to_bf16", h_g, h_c, n, 2);
    free(h_g), h_g = nans(n, 2);
    replay_to_bf16_runs(h_g, x, &(ds_bf16_run){0, 0, n}, 1);
    check_bits("to_bf16, one run", h_g, h_c, n, 2);
    /* from_bf16: the exact value, or the float sum with what is there */
    float *f_g = nans(n, 4), *f_c = calloc(n, 4), *acc = f32_randn(n, 0, 1), *acc_g = dup(acc, n * 4);
    FOR_GRID(i, n) widen_body_bf16(f_g, h_c, i, 0);
    for (size_t i = 0; i < n; i++) f_c[i] = ds_bf16_value(h_c[i]);
    check_bits("from_bf16", f_g, f_c, n, 4);
    FOR_GRID(i, n) widen_body_bf16(acc_g, h_c, i, 1);
    for (size_t i = 0; i < n; i++) acc[i] += ds_bf16_value(h_c[i]);
    check_bits("from_bf16 accumulate", acc_g, acc, n, 4);
    free(x), free(y), free(y_g), free(h_c), free(h_g), free(f_g), free(f_c), free(acc), free(acc_g);
    check_end();
}

/* ---------------------------------------------------------------- input batch */

static norm_consts imagenet(void)
{
    norm_consts k = {{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
    return k;
}

/* flip: 0 none (NULL), 1 every other sample */
static void test_input(int n, int H, int W, int ch, int cw, int flip)
{
    char name[96];
    snprintf(name, sizeof name, "normalize_u8 resized_crop_u8 n=%d %dx%d to %dx%d flip=%d", n, H, W, ch, cw, flip);
    check_begin(name);
    norm_consts k = imagenet();
    size_t ni = (size_t)n * H * W * 3, no = (size_t)n * ch * cw * 3;
    uint8_t *in = malloc(ni), *fl = flip ? malloc(n) : NULL;
    for (size_t i = 0; i < ni; i++) in[i] = (uint8_t)ds_rng_below(&rng, 256);
    int32_t *y0 = malloc(n * 4), *x0 = malloc(n * 4), *bh = malloc(n * 4), *bw = malloc(n * 4);
    for (int b = 0; b < n; b++) {
        y0[b] = (int32_t)ds_rng_below(&rng, H - ch + 1), x0[b] = (int32_t)ds_rng_below(&rng, W - cw + 1);
        if (fl) fl[b] = b & 1;
    }
    float *c_out = nans(no, 4), *g_out = nans(no, 4);
    be->normalize_u8(c_out, in, n, H, W, ch, cw, y0, x0, fl, k.mean, k.std);
    FOR_GRID(i, no) normalize_u8_body(g_out, in, H, W, ch, cw, y0, x0, fl, k, i);
    check_bits("normalize_u8", g_out, c_out, no, 4);
    /* boxes: the output's own size (no resize), smaller (up), up to the image (down) */
    for (int b = 0; b < n; b++) {
        int kind = b % 3;
        bh[b] = kind == 0 ? ch : kind == 1 ? 1 + (int)ds_rng_below(&rng, ch) : ch + (int)ds_rng_below(&rng, H - ch + 1);
        bw[b] = kind == 0 ? cw : kind == 1 ? 1 + (int)ds_rng_below(&rng, cw) : cw + (int)ds_rng_below(&rng, W - cw + 1);
        y0[b] = (int32_t)ds_rng_below(&rng, H - bh[b] + 1), x0[b] = (int32_t)ds_rng_below(&rng, W - bw[b] + 1);
    }
    float *c_rc = nans(no, 4), *g_rc = nans(no, 4);
    be->resized_crop_u8(c_rc, in, n, H, W, ch, cw, y0, x0, bh, bw, fl, k.mean, k.std);
    FOR_GRID(i, no) resized_crop_u8_body(g_rc, in, H, W, ch, cw, y0, x0, bh, bw, fl, k, i);
    check_bits("resized_crop_u8", g_rc, c_rc, no, 4);
    free(in), free(fl), free(y0), free(x0), free(bh), free(bw), free(c_out), free(g_out), free(c_rc), free(g_rc);
    check_end();
}

/* The BN scratch's capacity rule (cuda_kernels.h): ds_cuda_bn_chunks keeps the partials
 * (two doubles per channel and chunk) and, at the scratch's end, the three coefficient arrays
 * (c floats each) apart, for every channel count and row count a ResNet reaches (up to batch
 * 256 at 112 x 112). Plain arithmetic: large shapes no kernel test runs. */
static void test_bn_scratch_capacity(void)
{
    check_begin("cuda bn scratch: partials and coefficients fit apart at every shape");
    for (int c = 16; c <= 4096; c *= 2)
        for (long m = 1; m <= 256L * 112 * 112; m = m < 64 ? m + 1 : m + m / 7) {
            long chunks = ds_cuda_bn_chunks((int)m, c, DS_BN_FLUSH);
            size_t need = 2 * (size_t)chunks * c * sizeof(double) + 3 * (size_t)c * sizeof(float);
            if (need > DS_CUDA_SCRATCH_BYTES) {
                CHECK(need <= DS_CUDA_SCRATCH_BYTES, "m=%ld c=%d: %ld chunks need %zu bytes of the %zu", m, c, chunks,
                      need, (size_t)DS_CUDA_SCRATCH_BYTES);
                break;
            }
        }
    check_end();
}

/* The op table's rows for this walk (ops_cases.h): a row marked OPS_BODIES names its tests
 * here in `bodies`, and a row naming tests is marked (else it would be skipped without a
 * word); every op family whose kernels have bodies has rows (the convolutions are cuDNN's). */
static void test_bodies_rows(void)
{
    check_begin("op table: every bodies row names a test, every family with bodies has rows");
    for (size_t i = 0; i < OPS_COUNT(ops_bns); i++)
        CHECK(!(ops_bns[i].use & OPS_BODIES) == !ops_bns[i].bodies, "ops_bns[%zu]: use %#x, bodies %#x", i,
              ops_bns[i].use, ops_bns[i].bodies);
    for (size_t i = 0; i < OPS_COUNT(ops_pools); i++)
        CHECK(!(ops_pools[i].use & OPS_BODIES) == !ops_pools[i].bodies, "ops_pools[%zu]: use %#x, bodies %#x", i,
              ops_pools[i].use, ops_pools[i].bodies);
    for (size_t i = 0; i < OPS_COUNT(ops_sgds); i++)
        CHECK(!(ops_sgds[i].use & OPS_BODIES) == !ops_sgds[i].bodies, "ops_sgds[%zu]: use %#x, bodies %#x", i,
              ops_sgds[i].use, ops_sgds[i].bodies);
    for (size_t i = 0; i < OPS_COUNT(ops_members); i++) {
        const ops_member *m = &ops_members[i];
        if (m->family == OPS_FAMILY_NONE || m->family == OPS_FAMILY_HOST || m->family == OPS_FAMILY_GRAPH ||
            m->family == OPS_FAMILY_CONV)
            continue;
        CHECK(ops_family_use(m->family) & OPS_BODIES, "%s: its family has no row for test_cuda_bodies", m->member);
    }
    check_end();
}

/* A batch-norm or pool row's tests (its `bodies`), in storage t */
static void walk_bn(const ops_bn *r, ds_dtype t)
{
    if (r->bodies & OPS_BN_TRAIN) test_bn_fwd(r->m, r->c, t, r->relu, r->residual, r->data, r->offset, r->spread);
    if (r->bodies & OPS_BN_BWD) test_bn_bwd(r->m, r->c, t, r->relu, r->dres, r->data == OPS_BN_EXACT);
    if (r->bodies & OPS_BN_INFER) test_bn_infer(r->m, r->c, t, r->relu, r->residual);
    if (r->bodies & OPS_BN_VEC) test_vec_bodies(r->m, r->c, t);
    if (r->bodies & OPS_BN_MASK_APPLY) test_relu_mask_apply(r->m, r->c, t);
    if (r->bodies & OPS_BN_MASK_BWD) test_relu_mask_bwd(r->m, r->c, t);
}

static void walk_pool(const ops_pool *r, ds_dtype t)
{
    if (r->bodies & OPS_POOL_MAX) test_maxpool(ops_pool_desc(r, t), r->data);
    if (r->bodies & OPS_POOL_MAX_VEC) test_vec_maxpool(ops_pool_desc(r, t), r->data);
    if (r->bodies & OPS_POOL_AVG) test_avgpool(r->n, r->h * r->w, r->c, t);
}

/* An SGD row's tests: the step, or the elementwise ops (their family is walked with these rows) */
static void walk_sgd(const ops_sgd *r)
{
    if (r->bodies & OPS_SGD_STEP) test_sgd(r->n, r->lr, r->momentum, r->wd, r->nesterov, r->first);
    if (r->bodies & OPS_SGD_ELEMENTWISE) test_elementwise(r->n);
    if (r->bodies & OPS_SGD_TO_BF16) test_to_bf16_runs(r->bf16_runs);
}

int main(void)
{
    ds_rng_init(&rng, 7, DS_RNG_DATA, 11);
    test_bn_scratch_capacity();
    test_bodies_rows();
    /* the bodies with a bf16 twin in both storage types; the others are float32's */
    static const ds_dtype types[2] = {DS_F32, DS_BF16};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < OPS_COUNT(ops_bns); i++)
            if (ops_bns[i].use & OPS_BODIES) walk_bn(&ops_bns[i], types[k]);
        for (size_t i = 0; i < OPS_COUNT(ops_pools); i++)
            if (ops_pools[i].use & OPS_BODIES) walk_pool(&ops_pools[i], types[k]);
    }
    for (size_t i = 0; i < OPS_COUNT(ops_linears); i++) {
        const ops_linear *r = &ops_linears[i];
        if (r->use & OPS_BODIES) test_bias(r->n, r->i, r->o);
    }
    for (size_t i = 0; i < OPS_COUNT(ops_xents); i++) {
        const ops_xent *r = &ops_xents[i];
        if (r->use & OPS_BODIES) test_softmax(r->n, r->c, r->smoothing, r->scale ? r->scale : 1.0f / r->n);
    }
    for (size_t i = 0; i < OPS_COUNT(ops_sgds); i++)
        if (ops_sgds[i].use & OPS_BODIES) walk_sgd(&ops_sgds[i]);
    for (size_t i = 0; i < OPS_COUNT(ops_inputs); i++) {
        const ops_input *r = &ops_inputs[i];
        if (r->use & OPS_BODIES) test_input(r->n, r->H, r->W, r->ch, r->cw, !r->no_flip);
    }
    return check_exit();
}
