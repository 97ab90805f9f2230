/* cuda_bodies: the per-thread work of every kernel in cuda_kernels.cu, one source for two
 * compilers. nvcc builds it into the kernels, which keep only their index arithmetic and a
 * call; the C compiler builds it into tests/unit/test_cuda_bodies.c, which runs each body
 * over every thread of the grid its kernel is launched with and compares the result with
 * the CPU backend's op. What the test sees is what the device computes, operation for
 * operation:
 *   - rounding: on the device the explicit round-to-nearest intrinsics (__fadd_rn,
 *     __dmul_rn, ...), which nvcc never fuses into an FMA; on the host the plain operations,
 *     which the build's -ffp-contract=off never fuses either. fmaf where torch fuses (SGD).
 *   - bf16 storage: __nv_bfloat16 on the device, its bits (cpu_bf16.h's ds_bf16) on the
 *     host. Widened exactly; rounded by the CPU's rule (cpu_bf16.h: to nearest even, a
 *     denormal to a zero of its sign, a NaN kept quiet), written once below for both, so a
 *     bf16 result of these kernels has the CPU's bits where the float it rounds has.
 * What stays apart: the double exp and log of softmax are the device's own on the GPU and
 * the C library's on the host (both within an ulp of a double; the test's bound for
 * softmax covers them); sqrt and every division are correctly rounded on both.
 *
 * The bodies of activations in either storage are in cuda_bodies.inc, included once per
 * storage: in C++ as overloads of one name (load_act(p, i) for float and for bf16 p), in C
 * with the storage in the name (load_act_f32, load_act_bf16). */
#ifndef DS_CUDA_BODIES_H
#define DS_CUDA_BODIES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "cpu_loops.h"      /* DS_BN_FLUSH, ds_bf16 */
#include "cuda_kernels.h"   /* the launch geometry */
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <cuda_bf16.h>
#define BODY static __host__ __device__ __forceinline__
typedef __nv_bfloat16 body_bf16;
BODY uint16_t bf16_bits(body_bf16 h) { return __bfloat16_as_ushort(h); }
BODY body_bf16 bf16_of_bits(uint16_t u) { return __ushort_as_bfloat16(u); }
#else
#define BODY static inline
typedef ds_bf16 body_bf16;
BODY uint16_t bf16_bits(body_bf16 h) { return h; }
BODY body_bf16 bf16_of_bits(uint16_t u) { return u; }
#endif

/* BODY_UNROLL before a loop of constant count: the device compiler unrolls it whole, so that
 * the arrays it indexes stay in registers (where its own heuristics stop short of a nested
 * loop's copies, they go to the stack). Nothing for the host compilers. */
#ifdef __CUDA_ARCH__
#define BODY_UNROLL _Pragma("unroll")
#else
#define BODY_UNROLL
#endif

/* ---- arithmetic, each operation rounded to nearest ---- */
#ifdef __CUDA_ARCH__
BODY float fadd_rn(float a, float b) { return __fadd_rn(a, b); }
BODY float fsub_rn(float a, float b) { return __fsub_rn(a, b); }
BODY float fmul_rn(float a, float b) { return __fmul_rn(a, b); }
BODY float fdiv_rn(float a, float b) { return __fdiv_rn(a, b); }
BODY double dadd_rn(double a, double b) { return __dadd_rn(a, b); }
BODY double dsub_rn(double a, double b) { return __dsub_rn(a, b); }
BODY double dmul_rn(double a, double b) { return __dmul_rn(a, b); }
BODY double ddiv_rn(double a, double b) { return __ddiv_rn(a, b); }
BODY uint32_t float_bits(float x) { return __float_as_uint(x); }
BODY float bits_float(uint32_t u) { return __uint_as_float(u); }
#else
BODY float fadd_rn(float a, float b) { return a + b; }
BODY float fsub_rn(float a, float b) { return a - b; }
BODY float fmul_rn(float a, float b) { return a * b; }
BODY float fdiv_rn(float a, float b) { return a / b; }
BODY double dadd_rn(double a, double b) { return a + b; }
BODY double dsub_rn(double a, double b) { return a - b; }
BODY double dmul_rn(double a, double b) { return a * b; }
BODY double ddiv_rn(double a, double b) { return a / b; }
BODY uint32_t float_bits(float x) { return ds_float_bits(x); }
BODY float bits_float(uint32_t u) { return ds_bits_float(u); }
#endif

/* bf16: the CPU's rounding (cpu_bf16.h ds_bf16_from), integer operations on both sides;
 * the value of a bf16 is its bits in the high half of a float. */
BODY uint16_t bf16_round_bits(float x)
{
    const uint32_t u = float_bits(x), nan = (u & 0x7fffffffu) > 0x7f800000u, tiny = (u & 0x7f800000u) == 0;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
    return (uint16_t)(nan ? (u >> 16) | 0x40 : tiny ? (u >> 16) & 0x8000 : rounded);
}
BODY float bf16_widen(body_bf16 h) { return bits_float((uint32_t)bf16_bits(h) << 16); }
BODY body_bf16 bf16_narrow(float x) { return bf16_of_bits(bf16_round_bits(x)); }

/* What bn_partial_body sums per channel: the statistics or the gradients. */
enum { BN_STATS, BN_GRADS };

/* ---- 16 bytes at a time: the vector bodies ----
 * The vector bodies (name_vec_body) take DS_CUDA_VEC_BYTES of consecutive channels per
 * thread, 8 bf16 or 4 float32 values, in one 16-byte load or store, and give each element
 * exactly the arithmetic, order and rounding of the scalar body they stand for: the same
 * bits, with an eighth (bf16) or a quarter of the loads and threads. They serve tensors whose
 * channel count is a multiple of the vector and whose pointers are 16-byte aligned (vec_ok
 * in cuda_kernels.cu); the scalar bodies serve the rest. The 16 bytes are four 32-bit
 * words, element k of a bf16 vector in half k % 2 of word k / 2 (little-endian, as both the
 * GPU and x86 store them). */
#if defined(__CUDA_ARCH__) || defined(DS_EMU_VEC16)
/* The device's 16-byte accesses; the emulated device (tests/emu) compiles them too, each
 * address checked first by DS_EMU_VEC16 (a misaligned one faults on the GPU). */
#ifndef DS_EMU_VEC16
#define DS_EMU_VEC16(p) ((void)0)
#endif
BODY void load16(const void *p, uint32_t w[4])
{
    DS_EMU_VEC16(p);
    const uint4 u = *(const uint4 *)p;
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
}
BODY void store16(void *p, const uint32_t w[4])
{
    DS_EMU_VEC16(p);
    *(uint4 *)p = make_uint4(w[0], w[1], w[2], w[3]);
}
#else
BODY void load16(const void *p, uint32_t w[4]) { memcpy(w, p, 16); }
BODY void store16(void *p, const uint32_t w[4]) { memcpy(p, w, 16); }
#endif
BODY float vec_get_f32(const uint32_t *w, int k) { return bits_float(w[k]); }
BODY void vec_put_f32(uint32_t *w, int k, float v) { w[k] = float_bits(v); }
BODY void vec_zero_f32(uint32_t *w, int k) { w[k] = 0; }
BODY float vec_get_bf16(const uint32_t *w, int k)
{
    const uint32_t x = w[k >> 1];
    return bits_float(k & 1 ? x & 0xffff0000u : x << 16);
}
BODY void vec_put_bf16(uint32_t *w, int k, float v)
{
    const uint32_t b = bf16_round_bits(v), x = w[k >> 1];
    w[k >> 1] = k & 1 ? (x & 0xffffu) | b << 16 : (x & 0xffff0000u) | b;
}
BODY void vec_zero_bf16(uint32_t *w, int k) { w[k >> 1] &= k & 1 ? 0xffffu : 0xffff0000u; }

/* n <= 8 bytes (a vector's argmax bytes), element k in bits 8k of the value: one load or
 * store where p is aligned to n (as the plan's tensors are), else byte by byte. */
#ifdef __CUDA_ARCH__
BODY uint64_t load_bytes(const uint8_t *p, int n)
{
    if (n == 8 && !((uintptr_t)p & 7)) return *(const unsigned long long *)p;
    if (n == 4 && !((uintptr_t)p & 3)) return *(const uint32_t *)p;
    uint64_t u = 0;
    for (int k = 0; k < n; k++) u |= (uint64_t)p[k] << 8 * k;
    return u;
}
BODY void store_bytes(uint8_t *p, uint64_t u, int n)
{
    if (n == 8 && !((uintptr_t)p & 7)) *(unsigned long long *)p = u;
    else if (n == 4 && !((uintptr_t)p & 3)) *(uint32_t *)p = (uint32_t)u;
    else
        for (int k = 0; k < n; k++) p[k] = (uint8_t)(u >> 8 * k);
}
#else
BODY uint64_t load_bytes(const uint8_t *p, int n)
{
    uint64_t u = 0;
    for (int k = 0; k < n; k++) u |= (uint64_t)p[k] << 8 * k;
    return u;
}
BODY void store_bytes(uint8_t *p, uint64_t u, int n)
{
    for (int k = 0; k < n; k++) p[k] = (uint8_t)(u >> 8 * k);
}
#endif

/* Element i's bit in the ReLU bitmask (backend.h) of vec elements a byte: byte i / vec, bit
 * i % vec. */
BODY int relu_bit(const uint8_t *mask, long i, int vec) { return mask[i / vec] >> (i % vec) & 1; }

/* ---- the activations' bodies, per storage ---- */
#define BODY_T float
#define BODY_WIDEN(x) (x)
#define BODY_NARROW(v) (v)
#define BODY_VEC 4
#define BODY_VGET vec_get_f32
#define BODY_VPUT vec_put_f32
#define BODY_VZERO vec_zero_f32
#ifdef __cplusplus
#define BODY_FN(name) name
#else
#define BODY_FN(name) name##_f32
#endif
#include "cuda_bodies.inc"
#undef BODY_T
#undef BODY_WIDEN
#undef BODY_NARROW
#undef BODY_FN
#undef BODY_VEC
#undef BODY_VGET
#undef BODY_VPUT
#undef BODY_VZERO

#define BODY_T body_bf16
#define BODY_WIDEN(x) bf16_widen(x)
#define BODY_NARROW(v) bf16_narrow(v)
#define BODY_VEC 8
#define BODY_VGET vec_get_bf16
#define BODY_VPUT vec_put_bf16
#define BODY_VZERO vec_zero_bf16
#ifdef __cplusplus
#define BODY_FN(name) name
#else
#define BODY_FN(name) name##_bf16
#endif
#include "cuda_bodies.inc"
#undef BODY_T
#undef BODY_WIDEN
#undef BODY_NARROW
#undef BODY_FN
#undef BODY_VEC
#undef BODY_VGET
#undef BODY_VPUT
#undef BODY_VZERO

/* ---- batch norm: the final sums (in each channel slice's last block) ---- */

/* Row w of channel ch in the final sums (cuda_kernels.cu, bn_last_block): the partial sums
 * [2][chunks][c] of chunks w, w + DS_CUDA_BN_FINAL_ROWS, ... added in that order (zeros for
 * a channel past c, whose thread only takes part in the tree). */
BODY void bn_final_sum_body(double *s1, double *s2, const double *partial, int c, int chunks, int ch, int w)
{
    double a = 0, b = 0;
    if (ch < c)
        for (int t = w; t < chunks; t += DS_CUDA_BN_FINAL_ROWS) {
            a = dadd_rn(a, partial[(long)t * c + ch]);
            b = dadd_rn(b, partial[((long)chunks + t) * c + ch]);
        }
    *s1 = a, *s2 = b;
}

/* One step of the block's tree over the rows' sums, laid out [DS_CUDA_BN_FINAL_ROWS]
 * [DS_CUDA_BN_CH]: row w of lane `lane` adds row w + s (the level s = ROWS/2, ..., 1; rows
 * w < s take part). */
BODY void bn_final_tree_body(double *s1, double *s2, int lane, int w, int s)
{
    const int at = w * DS_CUDA_BN_CH + lane, from = (w + s) * DS_CUDA_BN_CH + lane;
    s1[at] = dadd_rn(s1[at], s1[from]);
    s2[at] = dadd_rn(s2[at], s2[from]);
}

/* Channel k's gradients from its sums over the rows, sdy = sum dy and sdyx = sum dy (x -
 * mean) (CPU: cpu_bn_bwd): dgamma, dbeta += ; the coefficients of din = dy ka + (x - mean)
 * kb + kc. */
BODY void bn_grad_final_body(float *dgamma, float *dbeta, float *ka, float *kb, float *kc, double sdy, double sdyx,
                             const float *gamma, const float *invstd, int m, int k)
{
    double is = invstd[k], gi = dmul_rn(gamma[k], is);
    dgamma[k] = fadd_rn(dgamma[k], (float)dmul_rn(sdyx, is));
    dbeta[k] = fadd_rn(dbeta[k], (float)sdy);
    double mdy = m ? ddiv_rn(sdy, m) : 0, mdyx = m ? ddiv_rn(dmul_rn(dmul_rn(sdyx, is), is), m) : 0;
    ka[k] = (float)gi;
    kb[k] = (float)dmul_rn(-gi, mdyx);
    kc[k] = (float)dmul_rn(-gi, mdy);
}

/* ---- the to_bf16 op: runs of float32 values rounded into bf16, one launch for many ----
 * A launch's runs, passed by value: run k's values go from src + src[k] to dst + dst[k],
 * and are elements start[k] .. start[k + 1] - 1 of the launch's count start[n]. */
typedef struct {
    int n;
    size_t start[DS_CUDA_BF16_RUNS + 1], dst[DS_CUDA_BF16_RUNS], src[DS_CUDA_BF16_RUNS];
} bf16_runs;

/* Fills r with up to DS_CUDA_BF16_RUNS of the runs from runs[0]; returns how many it took. */
BODY int bf16_runs_take(bf16_runs *r, const ds_bf16_run *runs, int nruns)
{
    size_t total = 0;
    r->n = 0;
    for (; r->n < nruns && r->n < DS_CUDA_BF16_RUNS; r->n++) {
        r->start[r->n] = total;
        r->dst[r->n] = runs[r->n].dst_off;
        r->src[r->n] = runs[r->n].src_off;
        total += runs[r->n].n;
    }
    r->start[r->n] = total;
    return r->n;
}

/* Element i of the launch's count: its run is the last whose start is at most i (runs of no
 * values share their start with the next), found by bisection; then narrow_body's rounding. */
BODY void to_bf16_runs_body(body_bf16 *dst, const float *src, const bf16_runs *r, long i)
{
    int lo = 0, hi = r->n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if ((long)r->start[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    const long k = i - (long)r->start[lo];
    dst[r->dst[lo] + k] = bf16_narrow(src[r->src[lo] + k]);
}

/* Inference: a = gamma / sqrt(running_var + eps), as the CPU (a division, not * invstd). */
BODY void bn_infer_coef_body(float *ka, const float *gamma, const float *rvar, int j, float eps)
{
    ka[j] = (float)ddiv_rn(gamma[j], sqrt(dadd_rn((double)rvar[j], eps)));
}

/* ---- softmax cross-entropy, one block of DS_CUDA_THREADS threads per sample ----
 * Thread tid takes the classes j = tid, tid + THREADS, ...; its maximum and its two sums are
 * combined over the block in a fixed tree (the kernel's block_reduce: buf[t] = op(buf[t],
 * buf[t + s]) for s = THREADS/2, ..., 1), with max_body and dadd_rn. */

BODY float softmax_max_body(const float *z, int c, int tid)
{
    float zmax = -INFINITY;
    for (int j = tid; j < c; j += DS_CUDA_THREADS) zmax = z[j] > zmax ? z[j] : zmax;
    return zmax;
}

BODY float max_body(float a, float b) { return b > a ? b : a; }

/* se = sum exp(z - zmax), sz = sum (z - zmax) over the thread's classes */
BODY void softmax_sums_body(double *se, double *sz, const float *z, int c, float zmax, int tid)
{
    double e = 0, s = 0;
    for (int j = tid; j < c; j += DS_CUDA_THREADS) {
        e = dadd_rn(e, exp(dsub_rn((double)z[j], zmax)));
        s = dadd_rn(s, dsub_rn((double)z[j], zmax));
    }
    *se = e, *sz = s;
}

/* The loss -sum target log softmax, target = (1 - smoothing) onehot(y) + smoothing / c, from
 * lse = log se and the block's sums (CPU: cpu_softmax_xent). */
BODY float softmax_loss_body(const float *z, int c, int y, float zmax, double lse, double sz, float smoothing)
{
    double zy = dsub_rn((double)z[y], zmax);
    return (float)dadd_rn(dmul_rn(dsub_rn(1.0, smoothing), dsub_rn(lse, zy)),
                          dmul_rn(smoothing, dsub_rn(lse, ddiv_rn(sz, c))));
}

/* dlogits [j] = (softmax - target) * scale */
BODY float softmax_grad_body(const float *z, int c, int j, int y, float zmax, double lse, float smoothing,
                             float scale)
{
    double t = dadd_rn(ddiv_rn((double)smoothing, c), j == y ? dsub_rn(1.0, smoothing) : 0.0);
    return (float)dmul_rn(dsub_rn(exp(dsub_rn(dsub_rn((double)z[j], zmax), lse)), t), scale);
}

/* ---- linear bias ---- */

/* out [n, o] += b [o], element i */
BODY void bias_fwd_body(float *out, const float *b, int o, long i) { out[i] = fadd_rn(out[i], b[i % o]); }

/* db [j] += sum over the n rows of dout [n, o] (a float sum in row order, as the CPU) */
BODY void bias_bwd_body(float *db, const float *dout, int n, int o, int j)
{
    float s = 0;
    for (int r = 0; r < n; r++) s = fadd_rn(s, dout[(long)r * o + j]);
    db[j] = fadd_rn(db[j], s);
}

/* ---- optimizer and float32 elementwise ---- */

/* torch.optim.SGD, rounded as cpu_loops.inc: fmaf where torch fuses, mul then add where not */
BODY void sgd_body(float *w, float *buf, const float *grad, size_t i, float lr, float momentum, float wd,
                   int nesterov, int first)
{
    float g = wd != 0 ? fmaf(wd, w[i], grad[i]) : grad[i];
    if (momentum != 0) {
        float b = first ? g : fadd_rn(fmul_rn(buf[i], momentum), g);
        buf[i] = b;
        g = nesterov ? fmaf(momentum, b, g) : b;
    }
    w[i] = fmaf(-lr, g, w[i]);
}

BODY void scale_body(float *x, float alpha, size_t i) { x[i] = fmul_rn(x[i], alpha); }

BODY void axpy_body(float *y, float alpha, const float *x, size_t i) { y[i] = fadd_rn(y[i], fmul_rn(alpha, x[i])); }

/* ---- the deterministic gradient reduction (cuda.cu) ----
 * Element i of this rank's chunk: the w ranks' copies added in rank order, ((c0 + c1) + c2)
 * + ..., as comm adds the ranks' buffers on the CPU and one process adds its micro-batches.
 * Rank `rank`'s own copy is own[i] (its buffer, which out may be), rank j's is
 * stage[j * stride + i]. */
BODY void ordered_sum_body(float *out, const float *own, const float *stage, size_t stride, int w, int rank,
                           size_t i)
{
    float s = rank == 0 ? own[i] : stage[i];
    for (int j = 1; j < w; j++) s = fadd_rn(s, j == rank ? own[i] : stage[(size_t)j * stride + i]);
    out[i] = s;
}

/* ---- input batch: uint8 images to normalised float32 ---- */

/* The mean and std of the three colours, passed by value: each is picked by a comparison
 * with constant indices, so nothing is indexed at run time (which would copy them to a
 * stack frame on the device). */
typedef struct { float mean[3], std[3]; } norm_consts;

/* (v / 255 - mean) / std of colour col, as torchvision's ToTensor + Normalize */
BODY float normalize_body(float v, norm_consts k, int col)
{
    float mean = col == 0 ? k.mean[0] : col == 1 ? k.mean[1] : k.mean[2];
    float std = col == 0 ? k.std[0] : col == 1 ? k.std[1] : k.std[2];
    return fdiv_rn(fsub_rn(fdiv_rn(v, 255.0f), mean), std);
}

/* out [n, ch, cw, 3] element i: the crop at (y0, x0) of in [n, H, W, 3], flipped */
BODY void normalize_u8_body(float *out, const uint8_t *in, int H, int W, int ch, int cw, const int32_t *y0,
                            const int32_t *x0, const uint8_t *flip, norm_consts k, long i)
{
    int col = (int)(i % 3);
    long t = i / 3;
    int x = (int)(t % cw), y = (int)(t / cw % ch), b = (int)(t / ((long)cw * ch));
    int sx = flip && flip[b] ? cw - 1 - x : x;
    uint8_t px = in[(((long)b * H + y0[b] + y) * W + x0[b] + sx) * 3 + col];
    out[i] = normalize_body((float)px, k, col);
}

/* backend/cpu.c's bilinear_tap: output coordinate d of a resize from `in` samples; source
 * scale (d + 1/2) - 1/2 clamped at 0, neighbours i0, i1, weight l of i1. */
BODY void bilinear_tap_body(float scale, int d, int in, int *i0, int *i1, float *l)
{
    float src = fsub_rn(fmul_rn(scale, fadd_rn((float)d, 0.5f)), 0.5f);
    if (src < 0) src = 0;
    int i = (int)src;
    if (i > in - 1) i = in - 1;
    float f = fsub_rn(src, (float)i);
    *i0 = i;
    *i1 = i + (i < in - 1);
    *l = f > 1 ? 1 : f;
}

BODY float lerp_body(float a, float b, float l) { return fadd_rn(fmul_rn(a, fsub_rn(1.0f, l)), fmul_rn(b, l)); }

/* out [n, ch, cw, 3] element i: the normalised, flipped bilinear resize of the sample's box
 * (y0, x0, bh, bw) of in [n, H, W, 3] (CPU: cpu_resized_crop_u8, PyTorch's order) */
BODY void resized_crop_u8_body(float *out, const uint8_t *in, int H, int W, int ch, int cw, const int32_t *y0,
                               const int32_t *x0, const int32_t *bh, const int32_t *bw, const uint8_t *flip,
                               norm_consts k, long i)
{
    int col = (int)(i % 3);
    long t = i / 3;
    int x = (int)(t % cw), y = (int)(t / cw % ch), b = (int)(t / ((long)cw * ch));
    int sx = flip && flip[b] ? cw - 1 - x : x;
    int r0, r1, c0, c1;
    float ly, lx;
    bilinear_tap_body(fdiv_rn((float)bh[b], (float)ch), y, bh[b], &r0, &r1, &ly);
    bilinear_tap_body(fdiv_rn((float)bw[b], (float)cw), sx, bw[b], &c0, &c1, &lx);
    const uint8_t *row0 = in + (((long)b * H + y0[b] + r0) * W + x0[b]) * 3 + col;
    const uint8_t *row1 = in + (((long)b * H + y0[b] + r1) * W + x0[b]) * 3 + col;
    float v = lerp_body(lerp_body((float)row0[c0 * 3], (float)row0[c1 * 3], lx),
                        lerp_body((float)row1[c0 * 3], (float)row1[c1 * 3], lx), ly);
    out[i] = normalize_body(v, k, col);
}

#endif
