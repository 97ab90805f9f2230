/* backend/cpu: the reference backend, host memory, OpenMP inside every op.
 *
 * Reductions (batch-norm statistics and gradients, bias gradients) run over a fixed
 * chunking of the rows that does not depend on the thread count, and the partial sums are
 * added in chunk order, so every op here gives bitwise the same result for any number of
 * threads. They are also the same on every CPU: the loops below never fuse a multiply and
 * an add unless they say so with fmaf (the build forbids contraction, -ffp-contract=off),
 * so a wider vector only changes which elements are computed together, and the products
 * (convolutions, fully connected) follow ds_sgemm_small's sum rule on every instruction
 * set. The convolutions live in cpu_conv.c. */
#include "backend.h"
#include "comm.h"
#include "cpu_bf16.h"
#include "cpu_conv.h"
#include "cpu_kernels.h"
#include "cpu_loops.h"
#include "cpu_sgemm.h"
#include "log.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory: plain host memory, 64-byte aligned for AVX-512 loads ---- */

static void *cpu_alloc(size_t bytes)
{
    size_t n = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p) memset(p, 0, n ? n : 64);
    return p;
}

static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memmove(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_sync(void) {}

/* Every op is done when it returns: a mark is passed as it is made, and holds its time (for
 * mark_seconds); streams wait for nothing; page-locked memory is ordinary memory. */
static double mark_time[DS_MARKS];
static int marks;

static int cpu_mark(int stream)
{
    (void)stream;
    mark_time[marks % DS_MARKS] = ds_now();
    return marks++;
}

static void cpu_mark_wait(int mark) { (void)mark; }
static void cpu_stream_wait(int stream, int mark) { (void)stream, (void)mark; }

static double cpu_mark_seconds(int from, int to)
{
    if (from < marks - DS_MARKS || to < marks - DS_MARKS || from >= marks || to >= marks) return NAN;
    return mark_time[to % DS_MARKS] - mark_time[from % DS_MARKS];
}

/* A clock is the time it was recorded (NAN: never). */
struct ds_clock { double t; };

static ds_clock *cpu_clock_alloc(void)
{
    ds_clock *c = malloc(sizeof *c);
    if (c) c->t = NAN;
    return c;
}

static void cpu_clock_free(ds_clock *c) { free(c); }
static void cpu_clock_record(ds_clock *c) { c->t = ds_now(); }
static double cpu_clock_seconds(const ds_clock *from, const ds_clock *to) { return to->t - from->t; }

static void *cpu_host_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }
static int cpu_host_register(void *p, size_t bytes) { (void)p, (void)bytes; return 0; }
static void cpu_host_unregister(void *p) { (void)p; }

/* ---- batch norm ---- */

/* Row chunks of every channel reduction: fixed, so sums do not depend on thread count. */
#define BN_CHUNKS 16
/* Channels reduced at a time: bounds the partial sums kept on the stack. */
#define BN_CBLOCK 256

/* The row loops of this CPU's instruction set (cpu_loops.h). */
static const ds_cpu_loops *loops(void) { return ds_cpu_kernels_for(ds_cpu_isa_get())->loops; }

/* Rows per task of the elementwise batch-norm loops: about 16 KiB of each operand. */
static long bn_rows_per_task(int c) { return c >= 4096 ? 1 : 4096 / c; }

/* Per-channel sums over m rows, for channels [c0, c0+cb), in double:
 *     su[j] = sum_i u,   suv[j] = sum_i u * v,   u = p[i, c0+j] - pu[j],  v = q[i, c0+j] - qv[j]
 * with u = 0 where relu_out[i, c0+j] <= 0 (then p is written back with that zero: the ReLU
 * mask applied in place); p, q and relu_out of storage t. Summed over BN_CHUNKS fixed row
 * chunks, then in chunk order. */
static void bn_sums(double *su, double *suv, void *p, const float *pu, const void *q, const float *qv,
                    const void *relu_out, long m, int c, int c0, int cb, ds_dtype t)
{
    double part[BN_CHUNKS][2][BN_CBLOCK];
    const ds_cpu_loops *L = loops();
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < BN_CHUNKS; ch++) {
        double *da = part[ch][0], *db = part[ch][1];
        for (int j = 0; j < cb; j++) da[j] = db[j] = 0;
        const long r0 = ch * m / BN_CHUNKS, r1 = (ch + 1) * m / BN_CHUNKS;
        if (t == DS_BF16)
            L->bn_sums_bf16(da, db, p, pu, q, qv, relu_out, r0, r1, c, c0, cb);
        else
            L->bn_sums(da, db, p, pu, q, qv, relu_out, r0, r1, c, c0, cb);
    }
    for (int j = 0; j < cb; j++) {
        double a = 0, b = 0;
        for (int t = 0; t < BN_CHUNKS; t++) a += part[t][0][j], b += part[t][1][j];
        su[j] = a, suv[j] = b;
    }
}

/* out = relu?((in - mean) * a + beta + residual?) with a = gamma * invstd. Subtracting the
 * mean first (rather than folding it into one constant, in * a + (beta - mean * a)) keeps
 * the precision when |mean| >> std. */
static void bn_apply(void *out, const void *in, const float *mean, const float *a, const float *beta,
                     const void *residual, int relu, int m, int c, ds_dtype t)
{
    const ds_cpu_loops *L = loops();
    const long rows = bn_rows_per_task(c);
#pragma omp parallel for schedule(static)
    for (long i0 = 0; i0 < m; i0 += rows) {
        const long i1 = i0 + rows < m ? i0 + rows : m;
        if (t == DS_BF16)
            L->bn_apply_bf16(out, in, mean, a, beta, residual, relu, i0, i1, c);
        else
            L->bn_apply(out, in, mean, a, beta, residual, relu, i0, i1, c);
    }
}

/* Element i of an activation of storage t, as float32 (exact). */
static float act_value(const void *x, long i, ds_dtype t)
{
    return t == DS_BF16 ? ds_bf16_value(((const ds_bf16 *)x)[i]) : ((const float *)x)[i];
}

/* The ReLU bitmask (mask) is not written: this backend's backward masks from out itself. */
static void cpu_bn_fwd_train(void *out, uint8_t *mask, float *mean, float *var, float *invstd, float *mean_sum,
                             float *var_sum, const void *in, const float *gamma, const float *beta,
                             const void *residual, int relu, int m, int c, float eps, ds_dtype t)
{
    float sa[c];
    for (int c0 = 0; c0 < c; c0 += BN_CBLOCK) {
        int cb = c - c0 < BN_CBLOCK ? c - c0 : BN_CBLOCK;
        double s1[BN_CBLOCK], s2[BN_CBLOCK];
        // Sums of (x - x0) for a per-channel shift x0 (the first row): E[d^2] - E[d]^2 then
        // loses nothing that matters even when |mean| >> std.
        float shift[BN_CBLOCK];
        for (int j = 0; j < cb; j++) shift[j] = m ? act_value(in, c0 + j, t) : 0;
        bn_sums(s1, s2, (void *)in, shift, in, shift, NULL, m, c, c0, cb, t);
        for (int j = 0; j < cb; j++) {
            double d = m ? s1[j] / m : 0, v = m ? s2[j] / m - d * d : 0;
            if (v < 0) v = 0;
            double is = 1.0 / sqrt(v + eps);
            mean[c0 + j] = (float)(shift[j] + d);
            var[c0 + j] = (float)v;
            invstd[c0 + j] = (float)is;
            sa[c0 + j] = (float)(gamma[c0 + j] * is);
        }
    }
    if (mean_sum) {   /* as cpu_axpy: the product rounded, then the sum */
        const float unbiased = (float)((double)m / (m - 1));
        for (int j = 0; j < c; j++) {
            mean_sum[j] += 1.0f * mean[j];
            var_sum[j] += unbiased * var[j];
        }
    }
    bn_apply(out, in, mean, sa, beta, residual, relu, m, c, t);
}

/* Inference's per-channel scale gamma / sqrt(running_var + eps), for bn_fwd_infer and
 * conv_fwd_bn alike. */
static void bn_infer_scale(float *sa, const float *gamma, const float *running_var, float eps, int c)
{
    for (int j = 0; j < c; j++) sa[j] = (float)(gamma[j] / sqrt((double)running_var[j] + eps));
}

static void cpu_bn_fwd_infer(void *out, const void *in, const float *gamma, const float *beta,
                             const float *running_mean, const float *running_var, const void *residual, int relu,
                             int m, int c, float eps, ds_dtype t)
{
    float sa[c];
    bn_infer_scale(sa, gamma, running_var, eps, c);
    bn_apply(out, in, running_mean, sa, beta, residual, relu, m, c, t);
}

/* conv_fwd_bn: the convolutions (fwd, of either backend) apply bn_fwd_infer's batch norm
 * block by block (cpu_conv.h). */
typedef void conv_fwd_bn_fn(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws,
                            const ds_cpu_conv_bn *bn);
static void conv_fwd_bn(conv_fwd_bn_fn *fwd, void *out, const void *in, const void *w, const ds_conv_desc *d,
                        void *ws, const ds_conv_bn *bn)
{
    float sa[d->k];
    bn_infer_scale(sa, bn->gamma, bn->running_var, bn->eps, d->k);
    const ds_cpu_conv_bn e = {bn->running_mean, sa, bn->beta, bn->residual, bn->relu};
    fwd(out, in, w, d, ws, &e);
}
static void cpu_conv_fwd_bn(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws,
                            const ds_conv_bn *bn)
{
    conv_fwd_bn(ds_cpu_conv_fwd_bn, out, in, w, d, ws, bn);
}
static void cpu_conv_fwd_bn_bf16(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws,
                                 const ds_conv_bn *bn)
{
    conv_fwd_bn(ds_cpu_conv_fwd_bn_bf16, out, in, w, d, ws, bn);
}

/* The mask is not read: bn_sums masks dout from out in place, in the same pass as its sums,
 * and dx then reads the masked dout (which is also what dresidual gets). */
static void cpu_bn_bwd(void *din, void *dresidual, float *dgamma, float *dbeta, void *dout, const void *out,
                       const uint8_t *mask, const void *in, const float *gamma, const float *mean,
                       const float *invstd, int relu, int m, int c, ds_dtype t)
{
    // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), xhat = (x - mean) * invstd
    float ka[c], kb[c], kc[c];
    for (int c0 = 0; c0 < c; c0 += BN_CBLOCK) {
        int cb = c - c0 < BN_CBLOCK ? c - c0 : BN_CBLOCK;
        double sdy[BN_CBLOCK], sdyx[BN_CBLOCK];
        static const float zero[BN_CBLOCK];
        bn_sums(sdy, sdyx, dout, zero, in, mean + c0, relu ? out : NULL, m, c, c0, cb, t);
        for (int j = 0; j < cb; j++) {
            int k = c0 + j;
            double is = invstd[k], g = gamma[k] * is;
            dgamma[k] += (float)(sdyx[j] * is);
            dbeta[k] += (float)sdy[j];
            // dx = dy * ka + (x - mean) * kb + kc
            double mdy = m ? sdy[j] / m : 0, mdyx = m ? sdyx[j] * is * is / m : 0;
            ka[k] = (float)g;
            kb[k] = (float)(-g * mdyx);
            kc[k] = (float)(-g * mdy);
        }
    }
    void *dres = dresidual && dresidual != dout ? dresidual : NULL;
    const ds_cpu_loops *L = loops();
    const long rows = bn_rows_per_task(c);
#pragma omp parallel for schedule(static)
    for (long i0 = 0; i0 < m; i0 += rows) {
        const long i1 = i0 + rows < m ? i0 + rows : m;
        if (t == DS_BF16)
            L->bn_dx_bf16(din, dres, dout, in, mean, ka, kb, kc, i0, i1, c);
        else
            L->bn_dx(din, dres, dout, in, mean, ka, kb, kc, i0, i1, c);
    }
}

/* ---- pooling ----
 * One source for both storages: POOL_T, POOL_LD and POOL_ST below (cpu_pool.inc; max
 * pooling's, cpu_maxpool.inc, in each kernel set's loops). The
 * maximum of bf16 values is one of them (exact); the backward adds each window's gradient to
 * its maximum in window order, a bf16 sum rounded at each add; average pooling sums in
 * float32 and stores float32 features. */
#define POOL_T float
#define POOL_LD(x) (x)
#define POOL_ST(v) (v)
#define POOL_FN(name) name
#include "cpu_pool.inc"
#undef POOL_T
#undef POOL_LD
#undef POOL_ST
#undef POOL_FN

#define POOL_T ds_bf16
#define POOL_LD(x) ds_bf16_value(x)
#define POOL_ST(v) ds_bf16_from(v)
#define POOL_FN(name) name##_bf16
#include "cpu_pool.inc"
#undef POOL_T
#undef POOL_LD
#undef POOL_ST
#undef POOL_FN

/* Max pooling: the kernel set's loops (cpu_maxpool.inc), a row of an image a task forward,
 * an image a task backward (its windows overlap). */
static void cpu_maxpool_fwd(void *out, uint8_t *argmax, const void *in, const ds_pool_desc *d)
{
    const ds_cpu_loops *L = loops();
#pragma omp parallel for collapse(2) schedule(static)
    for (int n = 0; n < d->n; n++)
        for (int p = 0; p < d->p; p++) {
            if (d->t == DS_BF16) L->maxpool_fwd_row_bf16(out, argmax, in, d, n, p);
            else L->maxpool_fwd_row(out, argmax, in, d, n, p);
        }
}

static void cpu_maxpool_bwd(void *din, const void *dout, const void *in, const void *out, const uint8_t *argmax,
                            const ds_pool_desc *d)
{
    (void)out, (void)argmax;
    const ds_cpu_loops *L = loops();
#pragma omp parallel for schedule(static)
    for (int n = 0; n < d->n; n++) {
        if (d->t == DS_BF16) L->maxpool_bwd_image_bf16(din, dout, in, d, n);
        else L->maxpool_bwd_image(din, dout, in, d, n);
    }
}

static void cpu_avgpool_fwd(float *out, const void *in, int n, int hw, int c, ds_dtype in_t)
{
    if (in_t == DS_BF16) avgpool_fwd_bf16(out, in, n, hw, c);
    else avgpool_fwd(out, in, n, hw, c);
}

static void cpu_avgpool_bwd(void *din, const float *dout, int n, int hw, int c, ds_dtype in_t)
{
    if (in_t == DS_BF16) avgpool_bwd_bf16(din, dout, n, hw, c);
    else avgpool_bwd(din, dout, n, hw, c);
}

/* ---- fully connected: ds_sgemm_small, one block of 64 output columns per task ---- */

/* The reduction over the inputs runs in blocks of this many, each block's sum added to the
 * output in order: the forward transposes one (LIN_KC, 64) block of the weights at a time
 * into a buffer on the stack. */
#define LIN_KC 256

static void cpu_linear_fwd(float *out, const float *in, const float *w, const float *b, int n,
                           int i, int o)
{
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < o; o0 += 64) {
        const int ob = o - o0 < 64 ? o - o0 : 64;
        float wt[LIN_KC * 64];
        for (int k0 = 0; k0 < i; k0 += LIN_KC) {
            const int kb = i - k0 < LIN_KC ? i - k0 : LIN_KC;
            // wt (kb, ob) = w[o0:o0+ob, k0:k0+kb]^T
            for (int r = 0; r < ob; r++)
                for (int k = 0; k < kb; k++) wt[k * ob + r] = w[(long)(o0 + r) * i + k0 + k];
            // out[:, o0:o0+ob] (n, ob) (+)= in[:, k0:k0+kb] (n, kb) * wt (kb, ob)
            ds_sgemm_small(n, ob, kb, in + k0, i, 1, wt, ob, out + o0, o, k0 > 0);
        }
        if (b)
            for (int r = 0; r < n; r++)
                for (int j = 0; j < ob; j++) out[(long)r * o + o0 + j] += b[o0 + j];
    }
}

static void cpu_linear_bwd(float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int n, int i, int o)
{
    if (din) {
#pragma omp parallel for schedule(static)
        for (int i0 = 0; i0 < i; i0 += 64) {
            // din[:, i0:i0+64] (n, ib) = dout (n, o) * w[:, i0:i0+64] (o, ib)
            ds_sgemm_small(n, i - i0 < 64 ? i - i0 : 64, o, dout, o, 1, w + i0, i, din + i0, i, 0);
        }
    }
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < o; o0 += 64) {
        const int ob = o - o0 < 64 ? o - o0 : 64;
        // dw[o0:o0+ob] (ob, i) += dout[:, o0:o0+ob]^T (ob, n) * in (n, i)
        ds_sgemm_small(ob, i, n, dout + o0, 1, o, in, i, dw + (long)o0 * i, i, 1);
        if (db)
            for (int j = o0; j < o0 + ob; j++) {
                float s = 0;
                for (int r = 0; r < n; r++) s += dout[(long)r * o + j];
                db[j] += s;
            }
    }
}

/* ---- loss ---- */

static void cpu_softmax_xent(float *loss, float *dlogits, const float *logits,
                             const int32_t *labels, int n, int c, float smoothing, float scale)
{
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        const float *z = logits + (long)i * c;
        float *dz = dlogits ? dlogits + (long)i * c : NULL;
        int y = labels[i];
        if (y < 0 || y >= c) {  // a padding sample: no loss, no gradient
            if (loss) loss[i] = 0;
            if (dz) memset(dz, 0, (size_t)c * sizeof(float));
            continue;
        }
        float zmax = z[0];
        for (int j = 1; j < c; j++) zmax = z[j] > zmax ? z[j] : zmax;
        double se = 0, sz = 0;
        for (int j = 0; j < c; j++) se += exp((double)z[j] - zmax), sz += (double)z[j] - zmax;
        double lse = log(se);  // log sum exp (z - zmax)
        // -sum target * logsoftmax, target = (1 - eps) onehot + eps / c
        double zy = (double)z[y] - zmax;
        if (loss) loss[i] = (float)((1.0 - smoothing) * (lse - zy) + smoothing * (lse - sz / c));
        if (dz) {
            double off = (double)smoothing / c;
            for (int j = 0; j < c; j++) {
                double t = off + (j == y ? 1.0 - smoothing : 0.0);
                dz[j] = (float)((exp((double)z[j] - zmax - lse) - t) * scale);
            }
        }
    }
}

/* ---- optimizer ---- */

static void cpu_sgd_step(float *w, float *buf, const float *grad, size_t n, const float *rate,
                         float momentum, float wd, int nesterov, int first)
{
    const ds_cpu_loops *L = loops();
    const float lr = *rate;
    const size_t block = 16384;
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += block)
        L->sgd(w, buf, grad, i0, i0 + block < n ? i0 + block : n, lr, momentum, wd, nesterov, first);
}

/* ---- elementwise ---- */

static void cpu_scale(float *x, float alpha, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

static void cpu_axpy(float *y, float alpha, const float *x, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

static void cpu_add(void *y, const void *x, size_t n, ds_dtype t)
{
    if (t != DS_BF16) {
        cpu_axpy(y, 1.0f, x, n);
        return;
    }
    const ds_cpu_loops *L = loops();
    const size_t block = 16384;
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += block) L->add_bf16(y, x, i0, i0 + block < n ? i0 + block : n);
}

static void cpu_to_bf16(void *dst, const float *src, const ds_bf16_run *runs, int nruns)
{
    const size_t block = (size_t)1 << 16;
    for (int r = 0; r < nruns; r++) {
        ds_bf16 *d = (ds_bf16 *)dst + runs[r].dst_off;
        const float *s = src + runs[r].src_off;
        const size_t n = runs[r].n;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i += block) ds_bf16_round_n(d + i, s + i, n - i < block ? n - i : block);
    }
}

/* As torchvision: ToTensor (x / 255) then Normalize ((x - mean) / std). A byte has 256
 * values: each channel's results are computed once, by the same float expression, into a
 * table (the same bits as computing them per pixel, a few times faster). */
static void cpu_normalize_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                             const int32_t *y0, const int32_t *x0, const uint8_t *flip,
                             const float mean[3], const float std[3])
{
    float table[256][3];
    for (int v = 0; v < 256; v++)
        for (int k = 0; k < 3; k++) table[v][k] = ((float)v / 255.0f - mean[k]) / std[k];
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++)
        for (int y = 0; y < ch; y++) {
            const uint8_t *row = in + (((long)i * H + y0[i] + y) * W + x0[i]) * 3;
            float *dst = out + (((long)i * ch + y) * cw) * 3;
            int fl = flip && flip[i];
            for (int x = 0; x < cw; x++) {
                const uint8_t *px = row + (long)(fl ? cw - 1 - x : x) * 3;
                for (int k = 0; k < 3; k++) dst[x * 3 + k] = table[px[k]][k];
            }
        }
}

/* RandomResizedCrop's resize on the box, then flip, ToTensor and Normalize, as PyTorch's
 * upsample_bilinear2d (align_corners=False) on the box and the sums in its order (each
 * row's (v0 w0 + v1 w1), then rows weighted), so a box of ch x cw (all weights 1 and 0)
 * reproduces cpu_normalize_u8 bit for bit. Separable (cpu_loops.inc's resized_crop_tile):
 * each tile's column taps once, each source row's horizontal sums once for the output rows
 * that read it; every value the same expression in the same order as the direct form
 * (test_ops checks it against that form). Work is images x RRC_BANDS bands of output rows x
 * tiles of DS_RRC_TILE columns, so a short batch still has parts for every thread. */
#define RRC_BANDS 4

static void cpu_resized_crop_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                                const int32_t *y0, const int32_t *x0, const int32_t *bh, const int32_t *bw,
                                const uint8_t *flip, const float mean[3], const float std[3])
{
    const ds_cpu_loops *L = loops();
    const int tiles = (cw + DS_RRC_TILE - 1) / DS_RRC_TILE;
#pragma omp parallel for collapse(3) schedule(static)
    for (int i = 0; i < n; i++)
        for (int band = 0; band < RRC_BANDS; band++)
            for (int tile = 0; tile < tiles; tile++) {
                const int xa = tile * DS_RRC_TILE, cols = cw - xa < DS_RRC_TILE ? cw - xa : DS_RRC_TILE;
                L->resized_crop_tile(out + ((long)i * ch * cw + xa) * 3, in + (((long)i * H + y0[i]) * W + x0[i]) * 3,
                                     W, ch, cw, bh[i], bw[i], flip && flip[i], band * ch / RRC_BANDS,
                                     (band + 1) * ch / RRC_BANDS, xa, cols, mean, std);
            }
}

/* ---- convolutions: cpu_conv.c (fp32), cpu_conv_bf16.c (bf16 products) ----
 * An accumulating backward-data (the second consumer of an input) computes its result whole
 * in the workspace, after what the convolution itself asks for, and adds it to din with the
 * add op: bitwise what computing it elsewhere and calling add gives; or, where the product
 * rounds its sums into a bf16 din as it stores them, adds them there itself (bwd_data_add),
 * the same bits without the whole result's pass through the workspace. */
typedef struct {
    size_t (*workspace)(const ds_conv_desc *d);
    void (*bwd_data)(void *din, const void *dout, const void *w, const ds_conv_desc *d, void *ws);
    int (*bwd_data_add)(void *din, const void *dout, const void *w, const ds_conv_desc *d, void *ws);
} conv_impl;

static const conv_impl conv_fp32 = {ds_cpu_conv_workspace, ds_cpu_conv_bwd_data, NULL};
static const conv_impl conv_bf16 = {ds_cpu_conv_workspace_bf16, ds_cpu_conv_bwd_data_bf16,
                                    ds_cpu_conv_bwd_data_add_bf16};

static size_t round64(size_t bytes) { return (bytes + 63) / 64 * 64; }

static size_t conv_workspace(const conv_impl *c, const ds_conv_desc *d)
{
    size_t own = c->workspace(d);
    if (own == SIZE_MAX || d->no_dx) return own;
    return round64(own) + (size_t)d->n * d->h * d->w * d->c * ds_dtype_size(d->in_t);
}

static void conv_bwd_data(const conv_impl *c, void *din, const void *dout, const void *w, const ds_conv_desc *d,
                          int accumulate, void *ws)
{
    if (!accumulate) {
        c->bwd_data(din, dout, w, d, ws);
        return;
    }
    if (c->bwd_data_add && c->bwd_data_add(din, dout, w, d, ws)) return;
    void *part = (char *)ws + round64(c->workspace(d));
    c->bwd_data(part, dout, w, d, ws);
    cpu_add(din, part, (size_t)d->n * d->h * d->w * d->c, d->in_t);
}

static size_t cpu_conv_workspace(const ds_conv_desc *d) { return conv_workspace(&conv_fp32, d); }
static size_t cpu_conv_workspace_bf16(const ds_conv_desc *d) { return conv_workspace(&conv_bf16, d); }
static void cpu_conv_bwd_data(void *din, const void *dout, const void *w, const ds_conv_desc *d, int accumulate,
                              void *ws)
{
    conv_bwd_data(&conv_fp32, din, dout, w, d, accumulate, ws);
}
static void cpu_conv_bwd_data_bf16(void *din, const void *dout, const void *w, const ds_conv_desc *d, int accumulate,
                                   void *ws)
{
    conv_bwd_data(&conv_bf16, din, dout, w, d, accumulate, ws);
}

static const char *cpu_kernel_set(void) { return ds_cpu_isa_name(ds_cpu_isa_get()); }
static const char *cpu_reduction(void) { return "ordered"; }

/* Every entry but the convolutions and the precision: the two CPU backends share them. */
#define CPU_COMMON \
    .host_memory = 1, \
    .deterministic = 1, \
    .alloc = cpu_alloc, \
    .free = cpu_free, \
    .upload = cpu_copy, \
    .download = cpu_copy, \
    .zero = cpu_zero, \
    .copy = cpu_copy, \
    .sync = cpu_sync, \
    .mark = cpu_mark, \
    .mark_wait = cpu_mark_wait, \
    .stream_wait = cpu_stream_wait, \
    .mark_seconds = cpu_mark_seconds, \
    .clock_alloc = cpu_clock_alloc, \
    .clock_free = cpu_clock_free, \
    .clock_record = cpu_clock_record, \
    .clock_seconds = cpu_clock_seconds, \
    .host_alloc = cpu_host_alloc, \
    .host_free = free, \
    .host_register = cpu_host_register, \
    .host_unregister = cpu_host_unregister, \
    .upload_async = cpu_copy, \
    .download_async = cpu_copy, \
    .bn_fwd_train = cpu_bn_fwd_train, \
    .bn_fwd_infer = cpu_bn_fwd_infer, \
    .bn_bwd = cpu_bn_bwd, \
    .maxpool_fwd = cpu_maxpool_fwd, \
    .maxpool_bwd = cpu_maxpool_bwd, \
    .avgpool_fwd = cpu_avgpool_fwd, \
    .avgpool_bwd = cpu_avgpool_bwd, \
    .linear_fwd = cpu_linear_fwd, \
    .linear_bwd = cpu_linear_bwd, \
    .softmax_xent = cpu_softmax_xent, \
    .sgd_step = cpu_sgd_step, \
    .scale = cpu_scale, \
    .axpy = cpu_axpy, \
    .add = cpu_add, \
    .to_bf16 = cpu_to_bf16, \
    .normalize_u8 = cpu_normalize_u8, \
    .resized_crop_u8 = cpu_resized_crop_u8, \
    /* host buffers: comm's ordered sums, on its worker thread */ \
    .reduce_start = ds_comm_reduce_start, \
    .reduce_wait = ds_comm_reduce_wait, \
    .ordered_reduce = 1, \
    .reduce_stats = ds_comm_reduce_stats, \
    .kernel_set = cpu_kernel_set, \
    .reduction = cpu_reduction,

const ds_backend ds_backend_cpu = {
    .name = "cpu",
    .precision = DS_PRECISION_FP32,
    .conv_workspace = cpu_conv_workspace,
    .conv_fwd = ds_cpu_conv_fwd,
    .conv_bwd_data = cpu_conv_bwd_data,
    .conv_bwd_weight = ds_cpu_conv_bwd_weight,
    .conv_fwd_bn = cpu_conv_fwd_bn,
    CPU_COMMON
};

/* --precision bf16: convolutions on bf16 operands with float32 sums (cpu_conv_bf16.c); the
 * rest as above, in float32 on either storage (docs/DESIGN.md §4 has the table). */
const ds_backend ds_backend_cpu_bf16 = {
    .name = "cpu",
    .precision = DS_PRECISION_BF16,
    .conv_workspace = cpu_conv_workspace_bf16,
    .conv_fwd = ds_cpu_conv_fwd_bf16,
    .conv_bwd_data = cpu_conv_bwd_data_bf16,
    .conv_bwd_weight = ds_cpu_conv_bwd_weight_bf16,
    .conv_fwd_bn = cpu_conv_fwd_bn_bf16,
    CPU_COMMON
};
