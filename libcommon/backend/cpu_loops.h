/* cpu_loops: the row loops of the CPU backend's batch norm, SGD step, resized crop, Winograd
 * transforms and max pooling, compiled once per
 * instruction set from one source (cpu_loops.inc); a level's row in cpu_kernels.c says which
 * it runs.
 *
 * They never fuse a multiply and an add unless they say so with fmaf (the build forbids
 * contraction), and a wider vector only changes which elements are computed together, so
 * every level gives the same bits; the wider ones are faster (batch norm is ~10% of a
 * training step, and SGD's fmaf is a library call in a baseline build). The OpenMP loops
 * that split rows across threads, and the order partial sums are added in, stay in
 * cpu.c. */
#ifndef DS_CPU_LOOPS_H
#define DS_CPU_LOOPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_bf16.h"
#include "cpu_isa.h"

/* Rows summed in float before flushing into the double sums: short enough that float
 * rounding stays far below the statistics' own noise, long enough to run at SIMD speed. */
#define DS_BN_FLUSH 32
#define DS_RRC_TILE 256   /* columns of resized_crop_tile */

typedef struct {
    /* Rows [r0, r1) of channels [c0, c0 + cb) of p and q (rows of c floats):
     *     da[j] += sum u,   db[j] += sum u * v,   u = p[i, c0+j] - pu[j],  v = q[i, c0+j] - qv[j]
     * with u = 0 where relu_out[i, c0+j] <= 0 (p is then written back with that zero: the
     * ReLU mask applied in place), summed in float over DS_BN_FLUSH rows at a time. */
    void (*bn_sums)(double *da, double *db, float *p, const float *pu, const float *q, const float *qv,
                    const float *relu_out, long r0, long r1, int c, int c0, int cb);
    /* Rows [r0, r1): out = relu?((in - mean) * a + beta + residual?) */
    void (*bn_apply)(float *out, const float *in, const float *mean, const float *a, const float *beta,
                     const float *residual, int relu, long r0, long r1, int c);
    /* Rows [r0, r1): din = dout * ka + (in - mean) * kb + kc; dresidual (when not NULL) = dout */
    void (*bn_dx)(float *din, float *dresidual, const float *dout, const float *in, const float *mean,
                  const float *ka, const float *kb, const float *kc, long r0, long r1, int c);
    /* conv_fwd_bn's batch norm on a block of rows x cols of a convolution's output (cpu_conv.h),
     * rows ldy apart, the residual's too, mean, a and beta at the block's first channel:
     *   bn_tile:       y = bn_apply's expression on y, in place (a float32 output);
     *   bn_tile_bf16:  out = the same on the float32 sums f (rows ldf apart) each rounded to
     *                  bf16 first (what the convolution would have stored), rounded, as
     *                  bn_apply_bf16 computes it */
    void (*bn_tile)(float *y, long ldy, const float *residual, const float *mean, const float *a, const float *beta,
                    int relu, long rows, int cols);
    void (*bn_tile_bf16)(ds_bf16 *out, long ldo, const float *f, long ldf, const ds_bf16 *residual,
                         const float *mean, const float *a, const float *beta, int relu, long rows, int cols);
    /* The same three on bf16 activations (loaded exactly, float32 arithmetic as above, each
     * stored result rounded once by cpu_bf16.h's rule: the same bits as the float32 loops on
     * the same values, rounded); pu, qv, mean, a, beta, ka, kb, kc stay float32. */
    void (*bn_sums_bf16)(double *da, double *db, ds_bf16 *p, const float *pu, const ds_bf16 *q, const float *qv,
                         const ds_bf16 *relu_out, long r0, long r1, int c, int c0, int cb);
    void (*bn_apply_bf16)(ds_bf16 *out, const ds_bf16 *in, const float *mean, const float *a, const float *beta,
                          const ds_bf16 *residual, int relu, long r0, long r1, int c);
    void (*bn_dx_bf16)(ds_bf16 *din, ds_bf16 *dresidual, const ds_bf16 *dout, const ds_bf16 *in, const float *mean,
                       const float *ka, const float *kb, const float *kc, long r0, long r1, int c);
    /* Elements [i0, i1) of y += x on bf16, each sum rounded once */
    void (*add_bf16)(ds_bf16 *y, const ds_bf16 *x, size_t i0, size_t i1);
    /* Output rows [y_lo, y_hi) and columns [xa, xa + cols) (cols <= DS_RRC_TILE) of the
     * resized crop of one image (cpu.c's resized_crop_u8): box [bh, bw] of rows W pixels
     * apart, resized to ch x cw, flipped when flip, normalised into out [ch, cw, 3] (out and
     * box at the image's first pixel, out's column 0) */
    void (*resized_crop_tile)(float *out, const uint8_t *box, int W, int ch, int cw, int bh, int bw, int flip,
                              int y_lo, int y_hi, int xa, int cols, const float mean[3], const float std[3]);
    /* Elements [i0, i1) of torch.optim.SGD's step (backend.h's sgd_step) */
    void (*sgd)(float *w, float *buf, const float *grad, size_t i0, size_t i1, float lr, float momentum, float wd,
                int nesterov, int first);
    /* Winograd F(2x2, 3x3)'s transforms of one tile (cpu_winograd.c), over ch channels, the
     * 16 positions xi of the transformed tile st floats apart in v or m:
     *   wino_in:   v[xi] = B^T d B of the 4x4 input tile whose pixel (a, b) is p[4a + b]
     *   wino_out:  pixel (a, b) of the 2x2 output tile, o[2a + b], = A^T m A
     *   wino_dout: v[xi] = A dy A^T of the 2x2 tile of dout whose pixel (a, b) is p[2a + b] */
    void (*wino_in)(float *v, long st, const float *const p[16], int ch);
    void (*wino_out)(float *const o[4], const float *m, long st, int ch);
    void (*wino_dout)(float *v, long st, const float *const p[4], int ch);
    /* Max pooling (cpu_maxpool.inc), float32 and bf16 activations: output row p of image n
     * with its argmax (or NULL); image n's din from its dout, the maxima found again in in */
    void (*maxpool_fwd_row)(float *out, uint8_t *argmax, const float *in, const ds_pool_desc *d, int n, int p);
    void (*maxpool_bwd_image)(float *din, const float *dout, const float *in, const ds_pool_desc *d, int n);
    void (*maxpool_fwd_row_bf16)(ds_bf16 *out, uint8_t *argmax, const ds_bf16 *in, const ds_pool_desc *d, int n,
                                 int p);
    void (*maxpool_bwd_image_bf16)(ds_bf16 *din, const ds_bf16 *dout, const ds_bf16 *in, const ds_pool_desc *d,
                                   int n);
} ds_cpu_loops;

/* The loops of each instruction set (cpu_loops.c), for backend/cpu_kernels.c's rows. */
extern const ds_cpu_loops ds_cpu_loops_plain;
#if defined(__x86_64__) || defined(__i386__)
extern const ds_cpu_loops ds_cpu_loops_avx2, ds_cpu_loops_avx512, ds_cpu_loops_avx512bf16;
#endif

#endif
