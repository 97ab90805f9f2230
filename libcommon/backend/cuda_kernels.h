/* cuda_kernels: the CUDA backend's own kernels, for the ops no library call fits. Each
 * function has the signature and the semantics of its ds_backend entry (backend.h) and
 * follows cpu.c's formulas and rounding (unfused multiply-add where the CPU rounds twice;
 * batch norm subtracts the mean first and sums in float over DS_BN_FLUSH rows, then in
 * double; bf16 stored by the CPU's rounding rule). Each kernel's per-thread work is a body
 * in cuda_bodies.h, which test_cuda_bodies runs on the CPU over every thread of the
 * kernel's grid. The elementwise ops (BN apply and dx given the same statistics, pooling,
 * bias, SGD, scale, axpy, add, the casts and the input ops) give the CPU's bits. The
 * reductions do not, by a bounded amount: batch norm's sums split the rows into other
 * chunks than the CPU's 16 and add them in a tree, softmax sums in a tree and uses the
 * device's exp and log.
 * The kernel subset (the emulated device runs these kernels too, docs/DESIGN.md §4.9): static
 * __shared__ memory, __syncthreads and 16-byte accesses through load16/store16; no warp
 * intrinsics, dynamic shared memory, cooperative launches or atomics; device intrinsics only
 * under __CUDA_ARCH__, beside a host form. */
#ifndef DS_KERNELS_CUDA_H
#define DS_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* Scratch for reductions (partial sums of batch norm), then batch norm's tickets
 * (DS_CUDA_BN_SLICES unsigned ints); allocated once by the backend at start-up, independent
 * of shapes, DS_CUDA_SCRATCH_ALLOC bytes in all. */
#define DS_CUDA_SCRATCH_BYTES ((size_t)16 << 20)
#define DS_CUDA_SCRATCH_ALLOC (DS_CUDA_SCRATCH_BYTES + DS_CUDA_BN_SLICES * sizeof(unsigned))
void ds_cuda_kernels_init(void *scratch);

/* Launch geometry, shared with the host test that replays the kernels' grids and with
 * tests/drivers/step_census. DS_CUDA_THREADS: the threads of a one-dimensional block.
 * Batch norm's per-channel sums are split over chunks of consecutive rows, which come in
 * groups of DS_CUDA_BN_ROWS; a pass's grid is the slices of DS_CUDA_BN_CH channels by blocks
 * of chunks (a scalar block: DS_CUDA_BN_CH channels by DS_CUDA_BN_ROWS chunks; a vector one:
 * a slice's 4 (bf16) or 8 (float32) 16-byte groups by 64 or 32 chunks). The block that
 * finishes a slice last (cuda_kernels.cu, bn_last_block) adds its channels' chunks as
 * DS_CUDA_BN_FINAL_ROWS rows a channel: row w adds chunks w, w + DS_CUDA_BN_FINAL_ROWS, ...
 * in that order, then the rows' sums are added in a fixed tree (row w += row w + s, s =
 * ROWS/2, ..., 1), so the result is the same on every run, whichever block is last, and a
 * serial walk is at most chunks / ROWS long plus the tree's log2(ROWS) levels. The chunk count for m rows of c channels: a chunk of at least
 * one float run (`flush` rows, the CPU's DS_BN_FLUSH) where m allows, at most 256 groups,
 * and the partials [2][chunks][c] doubles with the coefficients [3][c] floats within the
 * scratch; 0 when c channels do not fit at all. Plain C, so that tests/drivers/step_census counts
 * with the kernels' own rule. */
#define DS_CUDA_THREADS 256
#define DS_CUDA_VEC_BYTES 16        /* a vector body's load: 8 bf16 or 4 float32 channels */
#define DS_CUDA_BN_UNROLL 4         /* rows a vector bn_partial loads before it adds them */
#define DS_CUDA_BN_CH 32
#define DS_CUDA_BN_ROWS 8
#define DS_CUDA_BN_FINAL_ROWS 32
#define DS_CUDA_BN_SLICES 4096      /* tickets: slices of DS_CUDA_BN_CH channels, more than the scratch holds */
#define DS_CUDA_BF16_RUNS 64        /* runs of the to_bf16 op one launch takes (its parameters) */
#define DS_CUDA_BN_WALK 16          /* rows a vector apply or dx thread walks (at most) */
/* The vector apply and dx: a thread per group of 16 bytes of channels in each of `lanes` row
 * lanes, thread l taking group l % groups in rows l / groups, + lanes, ... (cuda_bodies.inc):
 * enough lanes that a thread walks at most DS_CUDA_BN_WALK rows, and reads its channels'
 * coefficients once for them. */
static inline long ds_cuda_bn_lanes(int m) { return ((long)m + DS_CUDA_BN_WALK - 1) / DS_CUDA_BN_WALK; }
static inline int ds_cuda_bn_chunks(int m, int c, int flush)
{
    size_t fit = (DS_CUDA_SCRATCH_BYTES - 3 * (size_t)c * sizeof(float)) /
                 (2 * (size_t)c * sizeof(double) * DS_CUDA_BN_ROWS);
    int g = (int)(((long)m + flush * DS_CUDA_BN_ROWS - 1) / (flush * DS_CUDA_BN_ROWS));
    if (g > 256) g = 256;
    if ((size_t)g > fit) g = (int)fit;
    return g > 0 ? g * DS_CUDA_BN_ROWS : 0;
}

/* Activations and their gradients in storage t (backend.h): a bf16 value is widened to
 * float as it is loaded, the arithmetic is the float32 kernels', and a bf16 result is
 * rounded once, by the CPU's rule (cpu_bf16.h: to nearest even, a denormal to a zero of its
 * sign), as it is stored. */
void ds_cuda_bn_fwd_train(void *out, uint8_t *mask, float *mean, float *var, float *invstd, float *mean_sum,
                          float *var_sum, const void *in, const float *gamma, const float *beta,
                          const void *residual, int relu, int m, int c, float eps, ds_dtype t);
void ds_cuda_bn_fwd_infer(void *out, const void *in, const float *gamma, const float *beta,
                          const float *running_mean, const float *running_var, const void *residual,
                          int relu, int m, int c, float eps, ds_dtype t);
void ds_cuda_bn_bwd(void *din, void *dresidual, float *dgamma, float *dbeta, void *dout,
                    const void *out, const uint8_t *mask, const void *in, const float *gamma, const float *mean,
                    const float *invstd, int relu, int m, int c, ds_dtype t);
void ds_cuda_maxpool_fwd(void *out, uint8_t *argmax, const void *in, const ds_pool_desc *d);
void ds_cuda_maxpool_bwd(void *din, const void *dout, const void *in, const void *out, const uint8_t *argmax,
                         const ds_pool_desc *d);
void ds_cuda_avgpool_fwd(float *out, const void *in, int n, int hw, int c, ds_dtype in_t);
void ds_cuda_avgpool_bwd(void *din, const float *dout, int n, int hw, int c, ds_dtype in_t);
/* y += x, one rounding (float32: bitwise axpy with alpha 1) */
void ds_cuda_add(void *y, const void *x, size_t n, ds_dtype t);
/* out [n, o] += b [o];  db [o] += sum over n of dout [n, o] */
void ds_cuda_bias_fwd(float *out, const float *b, int n, int o);
void ds_cuda_bias_bwd(float *db, const float *dout, int n, int o);
void ds_cuda_softmax_xent(float *loss, float *dlogits, const float *logits, const int32_t *labels,
                          int n, int c, float smoothing, float scale);
void ds_cuda_sgd_step(float *w, float *buf, const float *grad, size_t n, const float *lr, float momentum,
                      float wd, int nesterov, int first);
void ds_cuda_scale(float *x, float alpha, size_t n);
void ds_cuda_axpy(float *y, float alpha, const float *x, size_t n);
/* The deterministic reduction's sum (ordered_sum_body) of n elements, on `stream` (a
 * cudaStream_t: the reduction's own, not the compute stream). */
void ds_cuda_ordered_sum(float *out, const float *own, const float *stage, size_t stride, int w, int rank, size_t n,
                         void *stream);
void ds_cuda_normalize_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                          const int32_t *y0, const int32_t *x0, const uint8_t *flip,
                          const float mean[3], const float std[3]);
void ds_cuda_resized_crop_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                             const int32_t *y0, const int32_t *x0, const int32_t *bh, const int32_t *bw,
                             const uint8_t *flip, const float mean[3], const float std[3]);
/* bf16 casts: dst = bf16(src) (the to_bf16 op, and the convolutions' copies of float32
 * tensors for bf16 arithmetic); dst = src or dst += src (a bf16 result into float32). */
void ds_cuda_to_bf16(void *dst, const float *src, size_t n);
void ds_cuda_from_bf16(float *dst, const void *src, size_t n, int accumulate);
/* The to_bf16 op (backend.h): the runs in launches of DS_CUDA_BF16_RUNS */
void ds_cuda_to_bf16_runs(void *dst, const float *src, const ds_bf16_run *runs, int nruns);

#endif
