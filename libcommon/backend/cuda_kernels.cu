/* cuda_kernels: own kernels of the CUDA backend (see cuda_kernels.h). NHWC everywhere: the
 * channel is the fastest index, so threads of a warp take neighbouring channels and every
 * load is coalesced. Reductions run over a fixed split of the rows and add the partial
 * sums in a fixed order: results are the same from run to run. */
#include <cuda_bf16.h>
#include <math.h>

#include "cuda_check.h"
extern "C" {
#include "cuda.h"
#include "cuda_kernels.h"
#include "cpu_loops.h"   /* DS_BN_FLUSH: the CPU's float run length, shared */
}

static double *scratch;   /* DS_CUDA_SCRATCH_BYTES: partial sums, then per-channel coefficients */

void ds_cuda_kernels_init(void *p) { scratch = (double *)p; }

#define THREADS 256

/* ---- storage of activations ----
 * float32 or bf16 (ds_dtype): the kernels below are templates over it. A bf16 value is
 * widened exactly as it is loaded; a result is rounded once, to nearest even, as it is
 * stored; everything between is the float32 arithmetic. */

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float ld(const float *p, long i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16 *p, long i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void st(float *p, long i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16 *p, long i, float v) { p[i] = __float2bfloat16_rn(v); }

/* ---- batch norm ---- */

/* Per-channel sums are split over chunks of consecutive rows: a block of (BN_CH channels,
 * BN_ROWS) threads takes BN_ROWS chunks, the grid's y its groups of chunks. */
#define BN_CH 32
#define BN_ROWS DS_CUDA_BN_ROWS

static int bn_chunks(int m, int c)
{
    int chunks = ds_cuda_bn_chunks(m, c, DS_BN_FLUSH);
    if (!chunks) ds_die("batch norm: %d channels exceed the CUDA backend's scratch", c);
    return chunks;
}

/* Mode of bn_partial_kernel: what it sums per channel. */
enum { BN_STATS, BN_GRADS };

/* partial [2][chunks][c]: for each chunk of consecutive rows, sums over its rows of
 *   BN_STATS: u = x - shift, u * u                     (shift = row 0's x, as the CPU)
 *   BN_GRADS: u = dy, u * (x - mean), with dy = dout masked by out > 0 when relu,
 *             written back into dout (the op's contract: dout becomes the pre-ReLU grad).
 * As the CPU's bn_sums (cpu_loops.inc): u and the products in float, rounded once each (no
 * fused multiply-add), summed in float over DS_BN_FLUSH rows and then added into a double.
 * Thread (channel, chunk) walks its chunk's rows in order; a warp's threads are neighbouring
 * channels of the same row, so the loads stay coalesced. */
template <typename T>
__global__ void bn_partial_kernel(double *partial, T *dout, const T *out, const T *in, const float *center,
                                  int mode, int relu, int m, int c, int chunks)
{
    int ch = blockIdx.x * BN_CH + threadIdx.x, t = blockIdx.y * BN_ROWS + threadIdx.y;
    if (ch >= c) return;
    long r0 = (long)t * m / chunks, r1 = (long)(t + 1) * m / chunks;
    float mu = mode == BN_GRADS ? center[ch] : m ? ld(in, ch) : 0;
    double a = 0, b = 0;
    for (long i0 = r0; i0 < r1; i0 += DS_BN_FLUSH) {
        long i1 = i0 + DS_BN_FLUSH < r1 ? i0 + DS_BN_FLUSH : r1;
        float fa = 0, fb = 0;
        for (long i = i0; i < i1; i++) {
            long at = i * c + ch;
            float v = __fsub_rn(ld(in, at), mu), u;
            if (mode == BN_STATS) {
                u = v;
            } else {
                u = ld(dout, at);
                if (relu && !(ld(out, at) > 0)) {
                    u = 0;
                    st(dout, at, u);
                }
            }
            fa = __fadd_rn(fa, u);
            fb = __fadd_rn(fb, __fmul_rn(u, v));
        }
        a += fa, b += fb;
    }
    partial[(long)t * c + ch] = a;
    partial[((long)chunks + t) * c + ch] = b;
}

template <typename T>
static void bn_partials(double *partial, T *dout, const T *out, const T *in, const float *center, int mode,
                        int relu, int m, int c, int chunks)
{
    dim3 grid((c + BN_CH - 1) / BN_CH, chunks / BN_ROWS), block(BN_CH, BN_ROWS);
    bn_partial_kernel<<<grid, block, 0, ds_cuda_stream()>>>(partial, dout, out, in, center, mode, relu, m, c,
                                                            chunks);
    launchCheck();
}

/* One thread per channel: the statistics and a = gamma * invstd (CPU: bn_fwd_train). The
 * chunks' sums are added in chunk order; the double arithmetic rounds each operation. */
template <typename T>
__global__ void bn_stats_final_kernel(float *mean, float *var, float *invstd, float *ka, const double *partial,
                                      const T *in, const float *gamma, int m, int c, int chunks, float eps)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    double s1 = 0, s2 = 0;
    for (int t = 0; t < chunks; t++) s1 += partial[(long)t * c + j], s2 += partial[((long)chunks + t) * c + j];
    float shift = m ? ld(in, j) : 0;
    double d = m ? s1 / m : 0, v = m ? __dsub_rn(s2 / m, __dmul_rn(d, d)) : 0;
    if (v < 0) v = 0;
    double is = 1.0 / sqrt(v + eps);
    mean[j] = (float)(shift + d);
    var[j] = (float)v;
    invstd[j] = (float)is;
    ka[j] = (float)(gamma[j] * is);
}

/* Inference: a = gamma / sqrt(running_var + eps), as the CPU (a division, not * invstd). */
__global__ void bn_infer_coef_kernel(float *ka, const float *gamma, const float *rvar, int c, float eps)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    ka[j] = (float)(gamma[j] / sqrt((double)rvar[j] + eps));
}

/* out [m, c] = relu?((in - mean) * a + beta + residual?), the CPU's formula and rounding
 * (cpu_loops.inc bn_apply): the mean is subtracted first, which keeps the precision when
 * |mean| >> std, and no multiply-add is fused. */
template <typename T>
__global__ void bn_apply_kernel(T *out, const T *in, const float *mean, const float *a, const float *beta,
                                const T *residual, int relu, long total, int c)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int j = (int)(i % c);
        float v = __fadd_rn(__fmul_rn(__fsub_rn(ld(in, i), mean[j]), a[j]), beta[j]);
        if (residual) v = __fadd_rn(v, ld(residual, i));
        st(out, i, relu && v < 0 ? 0 : v);
    }
}

static float *bn_coef(int c, int which)   /* coefficient arrays live past the partial sums */
{
    return (float *)((char *)scratch + DS_CUDA_SCRATCH_BYTES) - (size_t)(3 - which) * c;
}

template <typename T>
static void bn_fwd_train(T *out, float *mean, float *var, float *invstd, const T *in, const float *gamma,
                         const float *beta, const T *residual, int relu, int m, int c, float eps)
{
    int chunks = bn_chunks(m, c);
    float *ka = bn_coef(c, 0);
    bn_partials(scratch, (T *)NULL, (const T *)NULL, in, NULL, BN_STATS, 0, m, c, chunks);
    bn_stats_final_kernel<<<(c + THREADS - 1) / THREADS, THREADS, 0, ds_cuda_stream()>>>(
        mean, var, invstd, ka, scratch, in, gamma, m, c, chunks, eps);
    launchCheck();
    long total = (long)m * c;
    bn_apply_kernel<<<ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream()>>>(out, in, mean, ka, beta, residual,
                                                                                      relu, total, c);
    launchCheck();
}

void ds_cuda_bn_fwd_train(void *out, float *mean, float *var, float *invstd, const void *in,
                          const float *gamma, const float *beta, const void *residual, int relu,
                          int m, int c, float eps, ds_dtype t)
{
    if (t == DS_BF16)
        bn_fwd_train((bf16 *)out, mean, var, invstd, (const bf16 *)in, gamma, beta, (const bf16 *)residual, relu,
                     m, c, eps);
    else
        bn_fwd_train((float *)out, mean, var, invstd, (const float *)in, gamma, beta, (const float *)residual, relu,
                     m, c, eps);
}

template <typename T>
static void bn_fwd_infer(T *out, const T *in, const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, const T *residual, int relu, int m, int c, float eps)
{
    float *ka = bn_coef(c, 0);
    bn_infer_coef_kernel<<<(c + THREADS - 1) / THREADS, THREADS, 0, ds_cuda_stream()>>>(ka, gamma, running_var, c, eps);
    launchCheck();
    long total = (long)m * c;
    bn_apply_kernel<<<ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream()>>>(out, in, running_mean, ka, beta,
                                                                                      residual, relu, total, c);
    launchCheck();
}

void ds_cuda_bn_fwd_infer(void *out, const void *in, const float *gamma, const float *beta,
                          const float *running_mean, const float *running_var, const void *residual,
                          int relu, int m, int c, float eps, ds_dtype t)
{
    if (t == DS_BF16)
        bn_fwd_infer((bf16 *)out, (const bf16 *)in, gamma, beta, running_mean, running_var, (const bf16 *)residual,
                     relu, m, c, eps);
    else
        bn_fwd_infer((float *)out, (const float *)in, gamma, beta, running_mean, running_var,
                     (const float *)residual, relu, m, c, eps);
}

/* dgamma, dbeta += ; the coefficients of din = dy * ka + (x - mean) * kb + kc (CPU: bn_bwd) */
__global__ void bn_grad_final_kernel(float *dgamma, float *dbeta, float *ka, float *kb, float *kc,
                                     const double *partial, const float *gamma, const float *invstd, int m,
                                     int c, int chunks)
{
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= c) return;
    double sdy = 0, sdyx = 0;
    for (int t = 0; t < chunks; t++) sdy += partial[(long)t * c + k], sdyx += partial[((long)chunks + t) * c + k];
    double is = invstd[k], gi = gamma[k] * is;
    dgamma[k] += (float)(sdyx * is);
    dbeta[k] += (float)sdy;
    double mdy = m ? sdy / m : 0, mdyx = m ? sdyx * is * is / m : 0;
    ka[k] = (float)gi;
    kb[k] = (float)(-gi * mdyx);
    kc[k] = (float)(-gi * mdy);
}

/* din = dy * ka + (x - mean) * kb + kc, the CPU's formula and rounding (cpu_loops.inc bn_dx);
 * din may be dy (elementwise). dresidual (when not NULL) = dy: the residual's gradient is
 * written from the dy this kernel reads anyway, instead of a copy that reads it again. */
template <typename T>
__global__ void bn_dx_kernel(T *din, T *dresidual, const T *dy, const T *in, const float *mean,
                             const float *ka, const float *kb, const float *kc, long total, int c)
{
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int j = (int)(i % c);
        if (dresidual) dresidual[i] = dy[i];   /* before din, which may be dy, is written */
        st(din, i, __fadd_rn(__fadd_rn(__fmul_rn(ld(dy, i), ka[j]), __fmul_rn(__fsub_rn(ld(in, i), mean[j]), kb[j])),
                             kc[j]));
    }
}

template <typename T>
static void bn_bwd(T *din, T *dresidual, float *dgamma, float *dbeta, T *dout, const T *out, const T *in,
                   const float *gamma, const float *mean, const float *invstd, int relu, int m, int c)
{
    int chunks = bn_chunks(m, c);
    float *ka = bn_coef(c, 0), *kb = bn_coef(c, 1), *kc = bn_coef(c, 2);
    long total = (long)m * c;
    bn_partials(scratch, dout, out, in, mean, BN_GRADS, relu, m, c, chunks);
    bn_grad_final_kernel<<<(c + THREADS - 1) / THREADS, THREADS, 0, ds_cuda_stream()>>>(
        dgamma, dbeta, ka, kb, kc, scratch, gamma, invstd, m, c, chunks);
    launchCheck();
    /* dresidual = dout (after the ReLU mask) is written by the dx kernel, unless they are one
     * buffer */
    bn_dx_kernel<<<ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream()>>>(
        din, dresidual != dout ? dresidual : NULL, dout, in, mean, ka, kb, kc, total, c);
    launchCheck();
}

void ds_cuda_bn_bwd(void *din, void *dresidual, float *dgamma, float *dbeta, void *dout,
                    const void *out, const void *in, const float *gamma, const float *mean,
                    const float *invstd, int relu, int m, int c, ds_dtype t)
{
    if (t == DS_BF16)
        bn_bwd((bf16 *)din, (bf16 *)dresidual, dgamma, dbeta, (bf16 *)dout, (const bf16 *)out, (const bf16 *)in,
               gamma, mean, invstd, relu, m, c);
    else
        bn_bwd((float *)din, (float *)dresidual, dgamma, dbeta, (float *)dout, (const float *)out, (const float *)in,
               gamma, mean, invstd, relu, m, c);
}

/* ---- pooling ---- */

/* out [n, p, q, c] = max over the window of in [n, h, w, c]; padding never wins. The
 * maximum is one of the inputs, so a bf16 one is stored exactly. */
template <typename T>
__global__ void maxpool_fwd_kernel(T *out, const T *in, ds_pool_desc d)
{
    long total = (long)d.n * d.p * d.q * d.c;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int j = (int)(i % d.c);
        long t = i / d.c;
        int q = (int)(t % d.q), p = (int)(t / d.q % d.p), n = (int)(t / ((long)d.q * d.p));
        float y = -INFINITY;
        for (int r = 0; r < d.k; r++) {
            int ih = p * d.stride - d.pad + r;
            if (ih < 0 || ih >= d.h) continue;
            for (int s = 0; s < d.k; s++) {
                int iw = q * d.stride - d.pad + s;
                if (iw < 0 || iw >= d.w) continue;
                float x = ld(in, (((long)n * d.h + ih) * d.w + iw) * d.c + j);
                y = x > y ? x : y;
            }
        }
        st(out, i, y);
    }
}

/* Gather form of the CPU's scatter: each input element sums dout over the windows whose
 * first maximum it is, visiting windows in the CPU's (p, q) order, so the sums match
 * bitwise and need no atomics. */
template <typename T>
__global__ void maxpool_bwd_kernel(T *din, const T *dout, const T *in, ds_pool_desc d)
{
    long total = (long)d.n * d.h * d.w * d.c;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int j = (int)(i % d.c);
        long t = i / d.c;
        int iw0 = (int)(t % d.w), ih0 = (int)(t / d.w % d.h), n = (int)(t / ((long)d.w * d.h));
        const T *img = in + (long)n * d.h * d.w * d.c;
        /* windows p with p*stride - pad <= ih0 <= p*stride - pad + k - 1 */
        int p0 = ih0 + d.pad - d.k + 1, q0 = iw0 + d.pad - d.k + 1;
        p0 = p0 <= 0 ? 0 : (p0 + d.stride - 1) / d.stride;
        q0 = q0 <= 0 ? 0 : (q0 + d.stride - 1) / d.stride;
        int p1 = min((ih0 + d.pad) / d.stride, d.p - 1), q1 = min((iw0 + d.pad) / d.stride, d.q - 1);
        float g = 0;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) {
                float best = -INFINITY;
                int at_h = -1, at_w = -1;
                for (int r = 0; r < d.k; r++) {
                    int ih = p * d.stride - d.pad + r;
                    if (ih < 0 || ih >= d.h) continue;
                    for (int s = 0; s < d.k; s++) {
                        int iw = q * d.stride - d.pad + s;
                        if (iw < 0 || iw >= d.w) continue;
                        float x = ld(img, ((long)ih * d.w + iw) * d.c + j);
                        if (at_h < 0 || x > best) best = x, at_h = ih, at_w = iw;
                    }
                }
                if (at_h == ih0 && at_w == iw0) g += ld(dout, (((long)n * d.p + p) * d.q + q) * d.c + j);
            }
        st(din, i, g);
    }
}

void ds_cuda_maxpool_fwd(void *out, const void *in, const ds_pool_desc *d)
{
    long total = (long)d->n * d->p * d->q * d->c;
    unsigned blocks = ds_cuda_blocks(total, THREADS);
    if (d->t == DS_BF16)
        maxpool_fwd_kernel<<<blocks, THREADS, 0, ds_cuda_stream()>>>((bf16 *)out, (const bf16 *)in, *d);
    else
        maxpool_fwd_kernel<<<blocks, THREADS, 0, ds_cuda_stream()>>>((float *)out, (const float *)in, *d);
    launchCheck();
}

void ds_cuda_maxpool_bwd(void *din, const void *dout, const void *in, const void *out,
                         const ds_pool_desc *d)
{
    (void)out;  /* each input finds its window's first maximum again from `in` */
    long total = (long)d->n * d->h * d->w * d->c;
    unsigned blocks = ds_cuda_blocks(total, THREADS);
    if (d->t == DS_BF16)
        maxpool_bwd_kernel<<<blocks, THREADS, 0, ds_cuda_stream()>>>((bf16 *)din, (const bf16 *)dout,
                                                                     (const bf16 *)in, *d);
    else
        maxpool_bwd_kernel<<<blocks, THREADS, 0, ds_cuda_stream()>>>((float *)din, (const float *)dout,
                                                                     (const float *)in, *d);
    launchCheck();
}

/* out [n, c] (float32) = sum over hw of in [n, hw, c], then / hw (CPU order) */
template <typename T>
__global__ void avgpool_fwd_kernel(float *out, const T *in, int n, int hw, int c)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i >= (long)n * c) return;
    long b = i / c;
    int j = (int)(i % c);
    float y = 0;
    for (int k = 0; k < hw; k++) y += ld(in, (b * hw + k) * c + j);
    out[i] = y / (float)hw;
}

template <typename T>
__global__ void avgpool_bwd_kernel(T *din, const float *dout, int n, int hw, int c)
{
    long total = (long)n * hw * c;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x)
        st(din, i, dout[i / ((long)hw * c) * c + i % c] / (float)hw);
}

void ds_cuda_avgpool_fwd(float *out, const void *in, int n, int hw, int c, ds_dtype in_t)
{
    unsigned blocks = (unsigned)(((long)n * c + THREADS - 1) / THREADS);
    if (in_t == DS_BF16)
        avgpool_fwd_kernel<<<blocks, THREADS, 0, ds_cuda_stream()>>>(out, (const bf16 *)in, n, hw, c);
    else
        avgpool_fwd_kernel<<<blocks, THREADS, 0, ds_cuda_stream()>>>(out, (const float *)in, n, hw, c);
    launchCheck();
}

void ds_cuda_avgpool_bwd(void *din, const float *dout, int n, int hw, int c, ds_dtype in_t)
{
    unsigned blocks = ds_cuda_blocks((long)n * hw * c, THREADS);
    if (in_t == DS_BF16)
        avgpool_bwd_kernel<<<blocks, THREADS, 0, ds_cuda_stream()>>>((bf16 *)din, dout, n, hw, c);
    else
        avgpool_bwd_kernel<<<blocks, THREADS, 0, ds_cuda_stream()>>>((float *)din, dout, n, hw, c);
    launchCheck();
}

/* ---- linear bias ---- */

__global__ void bias_fwd_kernel(float *out, const float *b, int n, int o)
{
    long total = (long)n * o;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x)
        out[i] += b[i % o];
}

__global__ void bias_bwd_kernel(float *db, const float *dout, int n, int o)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= o) return;
    float s = 0;
    for (int r = 0; r < n; r++) s += dout[(long)r * o + j];
    db[j] += s;
}

void ds_cuda_bias_fwd(float *out, const float *b, int n, int o)
{
    bias_fwd_kernel<<<ds_cuda_blocks((long)n * o, THREADS), THREADS, 0, ds_cuda_stream()>>>(out, b, n, o);
    launchCheck();
}

void ds_cuda_bias_bwd(float *db, const float *dout, int n, int o)
{
    bias_bwd_kernel<<<(o + THREADS - 1) / THREADS, THREADS, 0, ds_cuda_stream()>>>(db, dout, n, o);
    launchCheck();
}

/* ---- loss ---- */

/* Sum of v over the block (THREADS threads), in a fixed tree order; every thread gets it. */
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op)
{
    __shared__ T buf[THREADS];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }
    T r = buf[0];
    __syncthreads();
    return r;
}

struct max_op { __device__ float operator()(float a, float b) const { return b > a ? b : a; } };
struct add_op { __device__ double operator()(double a, double b) const { return a + b; } };

/* One block per sample: loss [n], dlogits [n, c] from logits [n, c] (CPU: softmax_xent). */
__global__ void softmax_xent_kernel(float *loss, float *dlogits, const float *logits,
                                    const int32_t *labels, int c, float smoothing, float scale)
{
    int i = blockIdx.x, y = labels[i];
    const float *z = logits + (long)i * c;
    float *dz = dlogits ? dlogits + (long)i * c : NULL;
    if (y < 0 || y >= c) {   /* a padding sample: no loss, no gradient */
        if (loss && threadIdx.x == 0) loss[i] = 0;
        if (dz)
            for (int j = threadIdx.x; j < c; j += blockDim.x) dz[j] = 0;
        return;
    }
    float zmax = -INFINITY;
    for (int j = threadIdx.x; j < c; j += blockDim.x) zmax = z[j] > zmax ? z[j] : zmax;
    zmax = block_reduce(zmax, max_op());
    double se = 0, sz = 0;
    for (int j = threadIdx.x; j < c; j += blockDim.x) se += exp((double)z[j] - zmax), sz += (double)z[j] - zmax;
    se = block_reduce(se, add_op());
    sz = block_reduce(sz, add_op());
    double lse = log(se), zy = (double)z[y] - zmax;
    if (loss && threadIdx.x == 0)
        loss[i] = (float)((1.0 - smoothing) * (lse - zy) + smoothing * (lse - sz / c));
    if (dz) {
        double off = (double)smoothing / c;
        for (int j = threadIdx.x; j < c; j += blockDim.x) {
            double t = off + (j == y ? 1.0 - smoothing : 0.0);
            dz[j] = (float)((exp((double)z[j] - zmax - lse) - t) * scale);
        }
    }
}

void ds_cuda_softmax_xent(float *loss, float *dlogits, const float *logits, const int32_t *labels,
                          int n, int c, float smoothing, float scale)
{
    if (n <= 0) return;
    softmax_xent_kernel<<<n, THREADS, 0, ds_cuda_stream()>>>(loss, dlogits, logits, labels, c, smoothing, scale);
    launchCheck();
}

/* ---- optimizer and elementwise ---- */

/* torch.optim.SGD, rounded as cpu.c: fmaf where torch fuses, mul then add where not */
__global__ void sgd_kernel(float *w, float *buf, const float *grad, size_t n, float lr,
                           float momentum, float wd, int nesterov, int first)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = wd != 0 ? fmaf(wd, w[i], grad[i]) : grad[i];
        if (momentum != 0) {
            float b = first ? g : __fadd_rn(__fmul_rn(buf[i], momentum), g);
            buf[i] = b;
            g = nesterov ? fmaf(momentum, b, g) : b;
        }
        w[i] = fmaf(-lr, g, w[i]);
    }
}

void ds_cuda_sgd_step(float *w, float *buf, const float *grad, size_t n, float lr, float momentum,
                      float wd, int nesterov, int first)
{
    if (!n) return;
    sgd_kernel<<<ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream()>>>(w, buf, grad, n, lr, momentum, wd, nesterov, first);
    launchCheck();
}

__global__ void scale_kernel(float *x, float alpha, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= alpha;
}

__global__ void axpy_kernel(float *y, float alpha, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

void ds_cuda_scale(float *x, float alpha, size_t n)
{
    if (!n) return;
    scale_kernel<<<ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream()>>>(x, alpha, n);
    launchCheck();
}

void ds_cuda_axpy(float *y, float alpha, const float *x, size_t n)
{
    if (!n) return;
    axpy_kernel<<<ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream()>>>(y, alpha, x, n);
    launchCheck();
}

/* y += x in bf16: the float sum of the two values, rounded once */
__global__ void add_bf16_kernel(bf16 *y, const bf16 *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        st(y, (long)i, __fadd_rn(ld(y, (long)i), ld(x, (long)i)));
}

void ds_cuda_add(void *y, const void *x, size_t n, ds_dtype t)
{
    if (!n) return;
    if (t != DS_BF16) {
        ds_cuda_axpy((float *)y, 1.0f, (const float *)x, n);   /* x * 1 is exact: y + x */
        return;
    }
    add_bf16_kernel<<<ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream()>>>((bf16 *)y, (const bf16 *)x, n);
    launchCheck();
}

/* ---- input batch ---- */

struct norm_consts { float mean[3], std[3]; };

/* out [n, ch, cw, 3] = (crop/flip of in [n, H, W, 3]) / 255 - mean) / std, as torchvision's
 * ToTensor + Normalize. Only the uint8 batch crossed PCIe. */
__global__ void normalize_u8_kernel(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                                    const int32_t *y0, const int32_t *x0, const uint8_t *flip,
                                    norm_consts k)
{
    long total = (long)n * ch * cw * 3;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int col = (int)(i % 3);
        long t = i / 3;
        int x = (int)(t % cw), y = (int)(t / cw % ch), b = (int)(t / ((long)cw * ch));
        int sx = flip && flip[b] ? cw - 1 - x : x;
        uint8_t px = in[(((long)b * H + y0[b] + y) * W + x0[b] + sx) * 3 + col];
        out[i] = __fdiv_rn(__fsub_rn(__fdiv_rn((float)px, 255.0f), k.mean[col]), k.std[col]);
    }
}

void ds_cuda_normalize_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                          const int32_t *y0, const int32_t *x0, const uint8_t *flip,
                          const float mean[3], const float std[3])
{
    norm_consts k;
    for (int j = 0; j < 3; j++) k.mean[j] = mean[j], k.std[j] = std[j];
    long total = (long)n * ch * cw * 3;
    if (total <= 0) return;
    normalize_u8_kernel<<<ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream()>>>(out, in, n, H, W, ch, cw, y0, x0, flip, k);
    launchCheck();
}

/* backend/cpu.c's bilinear_tap, with the roundings spelled out so no fma contracts them. */
__device__ __forceinline__ void bilinear_tap(float scale, int d, int in, int *i0, int *i1, float *l)
{
    float src = __fsub_rn(__fmul_rn(scale, __fadd_rn((float)d, 0.5f)), 0.5f);
    if (src < 0) src = 0;
    int i = (int)src;
    if (i > in - 1) i = in - 1;
    float f = __fsub_rn(src, (float)i);
    *i0 = i;
    *i1 = i + (i < in - 1);
    *l = f > 1 ? 1 : f;
}

__device__ __forceinline__ float lerp_rn(float a, float b, float l)
{
    return __fadd_rn(__fmul_rn(a, __fsub_rn(1.0f, l)), __fmul_rn(b, l));
}

/* out [n, ch, cw, 3] = normalised, flipped bilinear resize of each sample's box
 * (y0, x0, bh, bw) of in [n, H, W, 3], the same float operations as cpu_resized_crop_u8. */
__global__ void resized_crop_u8_kernel(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                                       const int32_t *y0, const int32_t *x0, const int32_t *bh,
                                       const int32_t *bw, const uint8_t *flip, norm_consts k)
{
    long total = (long)n * ch * cw * 3;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        int col = (int)(i % 3);
        long t = i / 3;
        int x = (int)(t % cw), y = (int)(t / cw % ch), b = (int)(t / ((long)cw * ch));
        int sx = flip && flip[b] ? cw - 1 - x : x;
        int r0, r1, c0, c1;
        float ly, lx;
        bilinear_tap(__fdiv_rn((float)bh[b], (float)ch), y, bh[b], &r0, &r1, &ly);
        bilinear_tap(__fdiv_rn((float)bw[b], (float)cw), sx, bw[b], &c0, &c1, &lx);
        const uint8_t *row0 = in + (((long)b * H + y0[b] + r0) * W + x0[b]) * 3 + col;
        const uint8_t *row1 = in + (((long)b * H + y0[b] + r1) * W + x0[b]) * 3 + col;
        float v = lerp_rn(lerp_rn((float)row0[c0 * 3], (float)row0[c1 * 3], lx),
                          lerp_rn((float)row1[c0 * 3], (float)row1[c1 * 3], lx), ly);
        out[i] = __fdiv_rn(__fsub_rn(__fdiv_rn(v, 255.0f), k.mean[col]), k.std[col]);
    }
}

void ds_cuda_resized_crop_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                             const int32_t *y0, const int32_t *x0, const int32_t *bh, const int32_t *bw,
                             const uint8_t *flip, const float mean[3], const float std[3])
{
    norm_consts k;
    for (int j = 0; j < 3; j++) k.mean[j] = mean[j], k.std[j] = std[j];
    long total = (long)n * ch * cw * 3;
    if (total <= 0) return;
    resized_crop_u8_kernel<<<ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream()>>>(
        out, in, n, H, W, ch, cw, y0, x0, bh, bw, flip, k);
    launchCheck();
}

/* ---- bf16 casts (round to nearest even) ---- */

__global__ void to_bf16_kernel(bf16 *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void from_bf16_kernel(float *dst, const bf16 *src, size_t n, int accumulate)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = accumulate ? dst[i] + __bfloat162float(src[i]) : __bfloat162float(src[i]);
}

void ds_cuda_to_bf16(void *dst, const float *src, size_t n)
{
    if (!n) return;
    to_bf16_kernel<<<ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream()>>>((bf16 *)dst, src, n);
    launchCheck();
}

void ds_cuda_from_bf16(float *dst, const void *src, size_t n, int accumulate)
{
    if (!n) return;
    from_bf16_kernel<<<ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream()>>>(dst, (const bf16 *)src, n, accumulate);
    launchCheck();
}
