/* cuda_kernels: own kernels of the CUDA backend (see cuda_kernels.h). NHWC everywhere: the
 * channel is the fastest index, so threads of a warp take neighbouring channels and every
 * load is coalesced. Each kernel is its index arithmetic and a call to its body in
 * cuda_bodies.h, the one source test_cuda_bodies runs on the CPU over the same grids.
 * Reductions run over a fixed split of the rows and add the partial sums in a fixed order:
 * results are the same from run to run. */
#include <cuda_bf16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
extern "C" {
#include "cuda.h"
#include "cuda_kernels.h"
#include "cpu_loops.h"   /* DS_BN_FLUSH: the CPU's float run length, shared */
}
#include "cuda_bodies.h"

static double *scratch;   /* DS_CUDA_SCRATCH_BYTES: partial sums, then per-channel coefficients */

static unsigned *bn_tickets;   /* DS_CUDA_BN_SLICES, 0 between launches (see bn_last_block) */

void ds_cuda_kernels_init(void *p)
{
    scratch = (double *)p;
    bn_tickets = (unsigned *)((char *)p + DS_CUDA_SCRATCH_BYTES);
    /* on the compute stream, ahead of every batch-norm pass */
    cudaCheck(cudaMemsetAsync(bn_tickets, 0, DS_CUDA_BN_SLICES * sizeof *bn_tickets, ds_cuda_stream()));
}

#define THREADS DS_CUDA_THREADS

/* Activations in float32 or bf16 (ds_dtype): the kernels below are templates over the
 * storage, their bodies overloads of one name (cuda_bodies.inc). */
typedef body_bf16 bf16;

/* Grid-stride loop over [0, n): thread (block, x) takes i = block THREADS + x, then i plus
 * the grid's size, ... */
#define FOR_GRID(i, n) \
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (long)(n); i += (long)gridDim.x * blockDim.x)

/* DS_CUDA_VEC=0 in the environment runs the scalar twins everywhere: a check, read once here
 * and nowhere else, that the vector kernels give the scalar ones' bits on a GPU (a run with it
 * and one without must be bitwise the same; docs/TOOLS.md, Environment). */
static int vec_allowed(void)
{
    static const int allowed = !(getenv("DS_CUDA_VEC") && !strcmp(getenv("DS_CUDA_VEC"), "0"));
    return allowed;
}

/* The vector bodies (cuda_bodies.h) serve c channels of storage T when c is a multiple of
 * their vector and every tensor given (NULL: not used) is 16-byte aligned; they give the
 * scalar bodies' bits. */
template <typename T>
static int vec_ok(int c, const void *a, const void *b = NULL, const void *d = NULL, const void *e = NULL)
{
    const void *p[] = {a, b, d, e};
    if (!vec_allowed()) return 0;
    if (c % (DS_CUDA_VEC_BYTES / (int)sizeof(T))) return 0;
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)p[i] % DS_CUDA_VEC_BYTES) return 0;
    return 1;
}

template <typename T>
static __host__ __device__ long vec_of(long n) { return n / (DS_CUDA_VEC_BYTES / (long)sizeof(T)); }

/* ---- batch norm ---- */

/* Per-channel sums are split over chunks of consecutive rows (cuda_kernels.h) */
#define BN_CH DS_CUDA_BN_CH
#define BN_ROWS DS_CUDA_BN_ROWS
#define BN_FINAL_ROWS DS_CUDA_BN_FINAL_ROWS

static int bn_chunks(int m, int c)
{
    int chunks = ds_cuda_bn_chunks(m, c, DS_BN_FLUSH);
    if (!chunks || (c + BN_CH - 1) / BN_CH > DS_CUDA_BN_SLICES)
        ds_die("batch norm: %d channels exceed the CUDA backend's scratch", c);
    return chunks;
}

/* A pass's partial sums and its final in one launch. The grid's x is the channel slices of
 * BN_CH channels, its y the slice's blocks of chunks; a block has THREADS threads. Each
 * thread writes its (channels, chunk)'s partial sums [2][chunks][c] (bn_partial_body or its
 * vector twin); then a ticket per slice, taken after a __threadfence (so that the partials
 * of every block that took one before it are visible), tells the block that finishes the
 * slice last. That block adds the slice's partials as the final kernels did: a thread per
 * channel and row w of BN_FINAL_ROWS adds chunks w, w + BN_FINAL_ROWS, ..., then the rows
 * are added in a fixed tree (cuda_kernels.h); its THREADS threads take those 32 x 32 in
 * turn. It computes the channels' results and sets the ticket back to 0 for the next
 * launch. No block waits for another, and every sum's order is fixed: the bits do not
 * depend on which block is last. */
/* Called by every thread of the block after its partial sums: true in the block that
 * finishes its slice last, with lane's channel's two sums in s[0][0][lane], s[1][0][lane]
 * for the threads of row 0 (tid < BN_CH). */
__device__ __forceinline__ bool bn_last_block(double (*s)[BN_FINAL_ROWS][BN_CH], unsigned *tickets,
                                              const double *partial, int c, int chunks)
{
    __shared__ int last;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, lane = tid % BN_CH, w0 = tid / BN_CH;
    const int rows = THREADS / BN_CH, ch = blockIdx.x * BN_CH + lane;
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&tickets[blockIdx.x], 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    for (int w = w0; w < BN_FINAL_ROWS; w += rows)
        bn_final_sum_body(&s[0][w][lane], &s[1][w][lane], partial, c, chunks, ch, w);
    for (int k = BN_FINAL_ROWS / 2; k > 0; k >>= 1) {
        __syncthreads();
        for (int w = w0; w < k; w += rows) bn_final_tree_body(&s[0][0][0], &s[1][0][0], lane, w, k);
    }
    if (tid == 0) atomicExch(&tickets[blockIdx.x], 0u);
    return true;
}

/* The thread's share of a pass: the scalar kernels' block is (BN_CH, BN_ROWS), thread (x, y)
 * taking channel x of the slice in chunk blockIdx.y BN_ROWS + y; the vector kernels' block is
 * one-dimensional, thread i taking group i % per of the slice's per = BN_CH / vector groups in
 * chunk blockIdx.y (THREADS / per) + i / per, so that a warp's loads are whole 16-byte pieces
 * of rows. False past the channels or the chunks (the thread still takes part in the end). */
__device__ __forceinline__ bool bn_scalar_share(int c, int *ch, int *t)
{
    *ch = blockIdx.x * BN_CH + threadIdx.x, *t = blockIdx.y * BN_ROWS + threadIdx.y;
    return *ch < c;
}

template <typename T>
static __host__ __device__ int bn_vec_per_slice() { return BN_CH / (DS_CUDA_VEC_BYTES / (int)sizeof(T)); }

template <typename T>
__device__ __forceinline__ bool bn_vec_share(int c, int chunks, int *g, int *t)
{
    const int per = bn_vec_per_slice<T>();
    *g = blockIdx.x * per + threadIdx.x % per, *t = blockIdx.y * (THREADS / per) + threadIdx.x / per;
    return *g < vec_of<T>(c) && *t < chunks;
}

/* The statistics' pass (bn_partial_body's BN_STATS, then bn_stats_final_body) */
template <typename T>
__device__ __forceinline__ void bn_stats_end(double (*s)[BN_FINAL_ROWS][BN_CH], unsigned *tickets,
                                             const double *partial, const T *in, float *mean, float *var,
                                             float *invstd, float *ka, float *mean_sum, float *var_sum,
                                             float unbiased, const float *gamma, float eps, int m, int c, int chunks)
{
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, ch = blockIdx.x * BN_CH + tid;
    if (bn_last_block(s, tickets, partial, c, chunks) && tid < BN_CH && ch < c)
        bn_stats_final_body(mean, var, invstd, ka, mean_sum, var_sum, unbiased, s[0][0][tid], s[1][0][tid], in, gamma,
                            m, ch, eps);
}

template <typename T>
__global__ void bn_stats_kernel(double *partial, const T *in, float *mean, float *var, float *invstd, float *ka,
                                float *mean_sum, float *var_sum, float unbiased, const float *gamma, float eps, int m,
                                int c, int chunks, unsigned *tickets)
{
    __shared__ double s[2][BN_FINAL_ROWS][BN_CH];
    int ch, t;
    if (bn_scalar_share(c, &ch, &t))
        bn_partial_body(partial, (T *)NULL, (const T *)NULL, (const uint8_t *)NULL, in, NULL, BN_STATS, 0, 0, m, c,
                        chunks, ch, t);
    bn_stats_end(s, tickets, partial, in, mean, var, invstd, ka, mean_sum, var_sum, unbiased, gamma, eps, m, c,
                 chunks);
}

template <typename T>
__global__ void bn_stats_vec_kernel(double *partial, const T *in, float *mean, float *var, float *invstd, float *ka,
                                    float *mean_sum, float *var_sum, float unbiased, const float *gamma, float eps,
                                    int m, int c, int chunks, unsigned *tickets)
{
    __shared__ double s[2][BN_FINAL_ROWS][BN_CH];
    int g, t;
    if (bn_vec_share<T>(c, chunks, &g, &t))
        bn_partial_vec_body(partial, (T *)NULL, (const T *)NULL, (const uint8_t *)NULL, in, NULL, BN_STATS, 0, 0, m,
                            c, chunks, g, t);
    bn_stats_end(s, tickets, partial, in, mean, var, invstd, ka, mean_sum, var_sum, unbiased, gamma, eps, m, c,
                 chunks);
}

/* The gradients' pass (bn_partial_body's BN_GRADS, then bn_grad_final_body) */
__device__ __forceinline__ void bn_grads_end(double (*s)[BN_FINAL_ROWS][BN_CH], unsigned *tickets,
                                             const double *partial, float *dgamma, float *dbeta, float *ka,
                                             float *kb, float *kc, const float *gamma, const float *invstd, int m,
                                             int c, int chunks)
{
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, ch = blockIdx.x * BN_CH + tid;
    if (bn_last_block(s, tickets, partial, c, chunks) && tid < BN_CH && ch < c)
        bn_grad_final_body(dgamma, dbeta, ka, kb, kc, s[0][0][tid], s[1][0][tid], gamma, invstd, m, ch);
}

/* The ReLU's cut comes from mask where given (out is then NULL), else from out; the masked
 * dout is written back where writeback (bn_bwd). */
template <typename T>
__global__ void bn_grads_kernel(double *partial, T *dout, const T *out, const uint8_t *mask, const T *in,
                                const float *mean, int relu, int writeback, float *dgamma, float *dbeta, float *ka,
                                float *kb, float *kc, const float *gamma, const float *invstd, int m, int c,
                                int chunks, unsigned *tickets)
{
    __shared__ double s[2][BN_FINAL_ROWS][BN_CH];
    int ch, t;
    if (bn_scalar_share(c, &ch, &t))
        bn_partial_body(partial, dout, out, mask, in, mean, BN_GRADS, relu, writeback, m, c, chunks, ch, t);
    bn_grads_end(s, tickets, partial, dgamma, dbeta, ka, kb, kc, gamma, invstd, m, c, chunks);
}

template <typename T>
__global__ void bn_grads_vec_kernel(double *partial, T *dout, const T *out, const uint8_t *mask, const T *in,
                                    const float *mean, int relu, int writeback, float *dgamma, float *dbeta,
                                    float *ka, float *kb, float *kc, const float *gamma, const float *invstd, int m,
                                    int c, int chunks, unsigned *tickets)
{
    __shared__ double s[2][BN_FINAL_ROWS][BN_CH];
    int g, t;
    if (bn_vec_share<T>(c, chunks, &g, &t))
        bn_partial_vec_body(partial, dout, out, mask, in, mean, BN_GRADS, relu, writeback, m, c, chunks, g, t);
    bn_grads_end(s, tickets, partial, dgamma, dbeta, ka, kb, kc, gamma, invstd, m, c, chunks);
}

/* The grid and block of a pass over c channels in `chunks` chunks, vector or scalar */
template <typename T>
static dim3 bn_pass_grid(int c, int chunks, int vec)
{
    const int rows = vec ? THREADS / bn_vec_per_slice<T>() : BN_ROWS;
    return dim3((c + BN_CH - 1) / BN_CH, (chunks + rows - 1) / rows);
}
static dim3 bn_pass_block(int vec) { return vec ? dim3(THREADS) : dim3(BN_CH, BN_ROWS); }

__global__ void bn_infer_coef_kernel(float *ka, const float *gamma, const float *rvar, int c, float eps)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < c) bn_infer_coef_body(ka, gamma, rvar, j, eps);
}

template <typename T>
__global__ void bn_apply_kernel(T *out, const T *in, const float *mean, const float *a, const float *beta,
                                const T *residual, int relu, long total, int c)
{
    FOR_GRID(i, total) bn_apply_body(out, in, mean, a, beta, residual, relu, c, i);
}

/* Thread l of the vector kernels of apply and dx: channel group l % groups in row lane
 * l / groups (ds_cuda_bn_lanes); the threads past groups x lanes have nothing to do. */
template <typename T>
__global__ void bn_apply_vec_kernel(T *out, uint8_t *mask, const T *in, const float *mean, const float *a,
                                    const float *beta, const T *residual, int relu, int m, int c, long lanes)
{
    const int groups = (int)vec_of<T>(c);
    const long l = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (l < groups * lanes)
        bn_apply_vec_body(out, mask, in, mean, a, beta, residual, relu, m, c, (int)(l % groups), l / groups, lanes);
}

/* The ReLU bitmask after the scalar apply: a thread per byte, reading its elements of out */
template <typename T>
__global__ void relu_mask_kernel(uint8_t *mask, const T *out, long bytes)
{
    FOR_GRID(g, bytes) relu_mask_body(mask, out, g);
}

/* the blocks of a vector apply or dx over m rows of c channels: a thread each (not a
 * grid-stride loop, so not ds_cuda_blocks' capped count) */
template <typename T>
static unsigned bn_vec_blocks(int m, int c)
{
    const long threads = vec_of<T>(c) * ds_cuda_bn_lanes(m);
    return threads > 0 ? (unsigned)((threads + THREADS - 1) / THREADS) : 1;
}

/* out = relu?((in - mean) a + beta + residual?) over m rows of c channels, and the ReLU
 * bitmask when given one: by the vector apply as it stores out, else by a kernel of its own
 * after the scalar apply (whose threads are elements: two could share a byte). */
template <typename T>
static void bn_apply(T *out, uint8_t *mask, const T *in, const float *mean, const float *a, const float *beta,
                     const T *residual, int relu, int m, int c)
{
    long total = (long)m * c;
    if (vec_ok<T>(c, out, in, residual)) {
        DS_LAUNCH(bn_apply_vec_kernel, bn_vec_blocks<T>(m, c), THREADS, 0, ds_cuda_stream(), out, mask, in, mean, a,
            beta, residual, relu, m, c, ds_cuda_bn_lanes(m));
    } else {
        DS_LAUNCH(bn_apply_kernel, ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream(), out, in, mean, a,
            beta, residual, relu, total, c);
        if (mask) {
            launchCheck();
            const long bytes = vec_of<T>(total);
            DS_LAUNCH(relu_mask_kernel, ds_cuda_blocks(bytes, THREADS), THREADS, 0, ds_cuda_stream(), mask, out,
                bytes);
        }
    }
    launchCheck();
}

/* A ReLU bitmask serves a ReLU over whole bytes' elements (backend.h): any other call is a
 * mistake of the caller's, not a case to fall back from. */
static_assert(DS_RELU_MASK_BYTES == DS_CUDA_VEC_BYTES, "a mask byte is one vector body's 16 bytes");
template <typename T>
static void relu_mask_check(const uint8_t *mask, int relu, int c)
{
    const int v = ds_relu_mask_elems(sizeof(T) == 2 ? DS_BF16 : DS_F32);
    if (mask && (!relu || c % v))
        ds_die("batch norm: a ReLU bitmask needs the ReLU and a multiple of %d channels (relu %d, %d channels)", v,
               relu, c);
}

static float *bn_coef(int c, int which)   /* coefficient arrays live past the partial sums */
{
    return (float *)((char *)scratch + DS_CUDA_SCRATCH_BYTES) - (size_t)(3 - which) * c;
}

template <typename T>
static void bn_fwd_train(T *out, uint8_t *mask, float *mean, float *var, float *invstd, float *mean_sum,
                         float *var_sum, const T *in, const float *gamma, const float *beta, const T *residual,
                         int relu, int m, int c, float eps)
{
    relu_mask_check<T>(mask, relu, c);
    int chunks = bn_chunks(m, c);
    float *ka = bn_coef(c, 0);
    /* the running statistics' sums, added by the final (the model's two axpy before) */
    const float unbiased = mean_sum ? (float)((double)m / (m - 1)) : 0;
    if (vec_ok<T>(c, in))
        DS_LAUNCH(bn_stats_vec_kernel, bn_pass_grid<T>(c, chunks, 1), bn_pass_block(1), 0, ds_cuda_stream(), scratch,
            in, mean, var, invstd, ka, mean_sum, var_sum, unbiased, gamma, eps, m, c, chunks, bn_tickets);
    else
        DS_LAUNCH(bn_stats_kernel, bn_pass_grid<T>(c, chunks, 0), bn_pass_block(0), 0, ds_cuda_stream(), scratch, in,
            mean, var, invstd, ka, mean_sum, var_sum, unbiased, gamma, eps, m, c, chunks, bn_tickets);
    launchCheck();
    bn_apply(out, mask, in, mean, ka, beta, residual, relu, m, c);
}

void ds_cuda_bn_fwd_train(void *out, uint8_t *mask, float *mean, float *var, float *invstd, float *mean_sum,
                          float *var_sum, const void *in, const float *gamma, const float *beta,
                          const void *residual, int relu, int m, int c, float eps, ds_dtype t)
{
    if (t == DS_BF16)
        bn_fwd_train((bf16 *)out, mask, mean, var, invstd, mean_sum, var_sum, (const bf16 *)in, gamma, beta,
                     (const bf16 *)residual, relu, m, c, eps);
    else
        bn_fwd_train((float *)out, mask, mean, var, invstd, mean_sum, var_sum, (const float *)in, gamma, beta,
                     (const float *)residual, relu, m, c, eps);
}

template <typename T>
static void bn_fwd_infer(T *out, const T *in, const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, const T *residual, int relu, int m, int c, float eps)
{
    float *ka = bn_coef(c, 0);
    DS_LAUNCH(bn_infer_coef_kernel, (c + THREADS - 1) / THREADS, THREADS, 0, ds_cuda_stream(), ka, gamma, running_var,
        c, eps);
    launchCheck();
    bn_apply(out, (uint8_t *)NULL, in, running_mean, ka, beta, residual, relu, m, c);
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

/* dresidual (when not NULL) = dy is written from the dy this kernel reads anyway, instead of
 * a copy that reads it again; with mask, dy is masked as it is read. */
template <typename T>
__global__ void bn_dx_kernel(T *din, T *dresidual, const T *dy, const uint8_t *mask, const T *in,
                             const float *mean, const float *ka, const float *kb, const float *kc, long total, int c)
{
    FOR_GRID(i, total) bn_dx_body(din, dresidual, dy, mask, in, mean, ka, kb, kc, c, i);
}

template <typename T>
__global__ void bn_dx_vec_kernel(T *din, T *dresidual, const T *dy, const uint8_t *mask, const T *in,
                                 const float *mean, const float *ka, const float *kb, const float *kc, int m, int c,
                                 long lanes)
{
    const int groups = (int)vec_of<T>(c);
    const long l = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (l < groups * lanes)
        bn_dx_vec_body(din, dresidual, dy, mask, in, mean, ka, kb, kc, m, c, (int)(l % groups), l / groups, lanes);
}

/* With the ReLU bitmask, out is not read, and dout is not written unless it is dresidual:
 * the partial sums take the mask's cut in registers, and dx cuts dy again from the mask as it
 * reads it (writing it to a dresidual of its own). Where dresidual is dout, the partial sums
 * write the masked dout back, as without a mask, and dx reads it masked. */
template <typename T>
static void bn_bwd(T *din, T *dresidual, float *dgamma, float *dbeta, T *dout, const T *out, const uint8_t *mask,
                   const T *in, const float *gamma, const float *mean, const float *invstd, int relu, int m, int c)
{
    relu_mask_check<T>(mask, relu, c);
    int chunks = bn_chunks(m, c);
    float *ka = bn_coef(c, 0), *kb = bn_coef(c, 1), *kc = bn_coef(c, 2);
    long total = (long)m * c;
    const int writeback = !mask || dresidual == dout;
    if (mask) out = NULL;   /* the ReLU's cut comes from the mask; out is not read */
    if (vec_ok<T>(c, dout, out, in))
        DS_LAUNCH(bn_grads_vec_kernel, bn_pass_grid<T>(c, chunks, 1), bn_pass_block(1), 0, ds_cuda_stream(), scratch,
            dout, out, mask, in, mean, relu, writeback, dgamma, dbeta, ka, kb, kc, gamma, invstd, m, c, chunks,
            bn_tickets);
    else
        DS_LAUNCH(bn_grads_kernel, bn_pass_grid<T>(c, chunks, 0), bn_pass_block(0), 0, ds_cuda_stream(), scratch, dout,
            out, mask, in, mean, relu, writeback, dgamma, dbeta, ka, kb, kc, gamma, invstd, m, c, chunks, bn_tickets);
    launchCheck();
    /* dresidual = dout (after the ReLU mask) is written by the dx kernel, unless they are one
     * buffer */
    T *dres = dresidual != dout ? dresidual : NULL;
    const uint8_t *dx_mask = writeback ? NULL : mask;
    if (vec_ok<T>(c, din, dres, dout, in))
        DS_LAUNCH(bn_dx_vec_kernel, bn_vec_blocks<T>(m, c), THREADS, 0, ds_cuda_stream(), din, dres, dout, dx_mask,
            in, mean, ka, kb, kc, m, c, ds_cuda_bn_lanes(m));
    else
        DS_LAUNCH(bn_dx_kernel, ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream(), din, dres, dout,
            dx_mask, in, mean, ka, kb, kc, total, c);
    launchCheck();
}

void ds_cuda_bn_bwd(void *din, void *dresidual, float *dgamma, float *dbeta, void *dout,
                    const void *out, const uint8_t *mask, const void *in, const float *gamma, const float *mean,
                    const float *invstd, int relu, int m, int c, ds_dtype t)
{
    if (t == DS_BF16)
        bn_bwd((bf16 *)din, (bf16 *)dresidual, dgamma, dbeta, (bf16 *)dout, (const bf16 *)out, mask,
               (const bf16 *)in, gamma, mean, invstd, relu, m, c);
    else
        bn_bwd((float *)din, (float *)dresidual, dgamma, dbeta, (float *)dout, (const float *)out, mask,
               (const float *)in, gamma, mean, invstd, relu, m, c);
}

/* ---- pooling ---- */

/* The forward writes each output's argmax byte beside it (in training); the backward reads
 * those bytes and dout alone, one thread per input element (or 16-byte group of channels):
 * at most four windows of a 3x3/2 pool, never the windows' inputs again. */
template <typename T>
__global__ void maxpool_fwd_kernel(T *out, uint8_t *argmax, const T *in, ds_pool_desc d)
{
    FOR_GRID(i, (long)d.n * d.p * d.q * d.c) maxpool_fwd_body(out, argmax, in, d, i);
}

template <typename T>
__global__ void maxpool_bwd_kernel(T *din, const T *dout, const uint8_t *argmax, ds_pool_desc d)
{
    FOR_GRID(i, (long)d.n * d.h * d.w * d.c) maxpool_bwd_body(din, dout, argmax, d, i);
}

template <typename T>
__global__ void maxpool_fwd_vec_kernel(T *out, uint8_t *argmax, const T *in, ds_pool_desc d)
{
    FOR_GRID(g, vec_of<T>((long)d.n * d.p * d.q * d.c)) maxpool_fwd_vec_body(out, argmax, in, d, g);
}

template <typename T>
static void maxpool_fwd(T *out, uint8_t *argmax, const T *in, const ds_pool_desc *d)
{
    long total = (long)d->n * d->p * d->q * d->c;
    if (vec_ok<T>(d->c, out, in))
        DS_LAUNCH(maxpool_fwd_vec_kernel, ds_cuda_blocks(vec_of<T>(total), THREADS), THREADS, 0, ds_cuda_stream(), out,
            argmax, in, *d);
    else
        DS_LAUNCH(maxpool_fwd_kernel, ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream(), out, argmax, in,
            *d);
    launchCheck();
}

void ds_cuda_maxpool_fwd(void *out, uint8_t *argmax, const void *in, const ds_pool_desc *d)
{
    if (d->t == DS_BF16) maxpool_fwd((bf16 *)out, argmax, (const bf16 *)in, d);
    else maxpool_fwd((float *)out, argmax, (const float *)in, d);
}

template <typename T>
__global__ void maxpool_bwd_vec_kernel(T *din, const T *dout, const uint8_t *argmax, ds_pool_desc d)
{
    FOR_GRID(g, vec_of<T>((long)d.n * d.h * d.w * d.c)) maxpool_bwd_vec_body(din, dout, argmax, d, g);
}

template <typename T>
static void maxpool_bwd(T *din, const T *dout, const uint8_t *argmax, const ds_pool_desc *d)
{
    long total = (long)d->n * d->h * d->w * d->c;
    if (vec_ok<T>(d->c, din, dout))
        DS_LAUNCH(maxpool_bwd_vec_kernel, ds_cuda_blocks(vec_of<T>(total), THREADS), THREADS, 0, ds_cuda_stream(), din,
            dout, argmax, *d);
    else
        DS_LAUNCH(maxpool_bwd_kernel, ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream(), din, dout, argmax,
            *d);
    launchCheck();
}

void ds_cuda_maxpool_bwd(void *din, const void *dout, const void *in, const void *out, const uint8_t *argmax,
                         const ds_pool_desc *d)
{
    (void)in, (void)out;  /* the forward's argmax says where each window's gradient goes */
    if (d->t == DS_BF16) maxpool_bwd((bf16 *)din, (const bf16 *)dout, argmax, d);
    else maxpool_bwd((float *)din, (const float *)dout, argmax, d);
}

template <typename T>
__global__ void avgpool_fwd_kernel(float *out, const T *in, int n, int hw, int c)
{
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < (long)n * c) avgpool_fwd_body(out, in, hw, c, i);
}

template <typename T>
__global__ void avgpool_bwd_kernel(T *din, const float *dout, int n, int hw, int c)
{
    FOR_GRID(i, (long)n * hw * c) avgpool_bwd_body(din, dout, hw, c, i);
}

void ds_cuda_avgpool_fwd(float *out, const void *in, int n, int hw, int c, ds_dtype in_t)
{
    unsigned blocks = (unsigned)(((long)n * c + THREADS - 1) / THREADS);
    if (in_t == DS_BF16)
        DS_LAUNCH(avgpool_fwd_kernel, blocks, THREADS, 0, ds_cuda_stream(), out, (const bf16 *)in, n, hw, c);
    else
        DS_LAUNCH(avgpool_fwd_kernel, blocks, THREADS, 0, ds_cuda_stream(), out, (const float *)in, n, hw, c);
    launchCheck();
}

void ds_cuda_avgpool_bwd(void *din, const float *dout, int n, int hw, int c, ds_dtype in_t)
{
    unsigned blocks = ds_cuda_blocks((long)n * hw * c, THREADS);
    if (in_t == DS_BF16)
        DS_LAUNCH(avgpool_bwd_kernel, blocks, THREADS, 0, ds_cuda_stream(), (bf16 *)din, dout, n, hw, c);
    else
        DS_LAUNCH(avgpool_bwd_kernel, blocks, THREADS, 0, ds_cuda_stream(), (float *)din, dout, n, hw, c);
    launchCheck();
}

/* ---- linear bias ---- */

__global__ void bias_fwd_kernel(float *out, const float *b, int n, int o)
{
    FOR_GRID(i, (long)n * o) bias_fwd_body(out, b, o, i);
}

__global__ void bias_bwd_kernel(float *db, const float *dout, int n, int o)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < o) bias_bwd_body(db, dout, n, o, j);
}

void ds_cuda_bias_fwd(float *out, const float *b, int n, int o)
{
    DS_LAUNCH(bias_fwd_kernel, ds_cuda_blocks((long)n * o, THREADS), THREADS, 0, ds_cuda_stream(), out, b, n, o);
    launchCheck();
}

void ds_cuda_bias_bwd(float *db, const float *dout, int n, int o)
{
    DS_LAUNCH(bias_bwd_kernel, (o + THREADS - 1) / THREADS, THREADS, 0, ds_cuda_stream(), db, dout, n, o);
    launchCheck();
}

/* ---- loss ---- */

/* v combined over the block (THREADS threads) in a fixed tree order, buf[t] = op(buf[t],
 * buf[t + s]) for s = THREADS/2, ..., 1; every thread gets the result. */
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op)
{
    __shared__ T buf[THREADS];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + s]);
        __syncthreads();
    }
    T r = buf[0];
    __syncthreads();
    return r;
}

struct max_op { __device__ float operator()(float a, float b) const { return max_body(a, b); } };
struct add_op { __device__ double operator()(double a, double b) const { return dadd_rn(a, b); } };

/* One block per sample: loss [n], dlogits [n, c] from logits [n, c] (CPU: softmax_xent). */
__global__ void softmax_xent_kernel(float *loss, float *dlogits, const float *logits,
                                    const int32_t *labels, int c, float smoothing, float scale)
{
    int i = blockIdx.x, y = labels[i], tid = threadIdx.x;
    const float *z = logits + (long)i * c;
    float *dz = dlogits ? dlogits + (long)i * c : NULL;
    if (y < 0 || y >= c) {   /* a padding sample: no loss, no gradient */
        if (loss && tid == 0) loss[i] = 0;
        if (dz)
            for (int j = tid; j < c; j += THREADS) dz[j] = 0;
        return;
    }
    float zmax = block_reduce(softmax_max_body(z, c, tid), max_op());
    double se, sz;
    softmax_sums_body(&se, &sz, z, c, zmax, tid);
    se = block_reduce(se, add_op());
    sz = block_reduce(sz, add_op());
    double lse = log(se);
    if (loss && tid == 0) loss[i] = softmax_loss_body(z, c, y, zmax, lse, sz, smoothing);
    if (dz)
        for (int j = tid; j < c; j += THREADS) dz[j] = softmax_grad_body(z, c, j, y, zmax, lse, smoothing, scale);
}

void ds_cuda_softmax_xent(float *loss, float *dlogits, const float *logits, const int32_t *labels,
                          int n, int c, float smoothing, float scale)
{
    if (n <= 0) return;
    DS_LAUNCH(softmax_xent_kernel, n, THREADS, 0, ds_cuda_stream(), loss, dlogits, logits, labels, c, smoothing,
        scale);
    launchCheck();
}

/* ---- optimizer and elementwise ---- */

/* lr in device memory (backend.h): read when the kernel runs, so a replayed graph takes the
 * rate written before its launch, where an argument would keep the captured step's */
__global__ void sgd_kernel(float *w, float *buf, const float *grad, size_t n, const float *lr,
                           float momentum, float wd, int nesterov, int first)
{
    const float rate = *lr;
    FOR_GRID(i, n) sgd_body(w, buf, grad, (size_t)i, rate, momentum, wd, nesterov, first);
}

void ds_cuda_sgd_step(float *w, float *buf, const float *grad, size_t n, const float *lr, float momentum,
                      float wd, int nesterov, int first)
{
    if (!n) return;
    DS_LAUNCH(sgd_kernel, ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream(), w, buf, grad, n, lr, momentum, wd,
        nesterov, first);
    launchCheck();
}

__global__ void scale_kernel(float *x, float alpha, size_t n)
{
    FOR_GRID(i, n) scale_body(x, alpha, (size_t)i);
}

__global__ void axpy_kernel(float *y, float alpha, const float *x, size_t n)
{
    FOR_GRID(i, n) axpy_body(y, alpha, x, (size_t)i);
}

void ds_cuda_scale(float *x, float alpha, size_t n)
{
    if (!n) return;
    DS_LAUNCH(scale_kernel, ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream(), x, alpha, n);
    launchCheck();
}

void ds_cuda_axpy(float *y, float alpha, const float *x, size_t n)
{
    if (!n) return;
    DS_LAUNCH(axpy_kernel, ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream(), y, alpha, x, n);
    launchCheck();
}

__global__ void ordered_sum_kernel(float *out, const float *own, const float *stage, size_t stride, int w, int rank,
                                   size_t n)
{
    FOR_GRID(i, n) ordered_sum_body(out, own, stage, stride, w, rank, (size_t)i);
}

void ds_cuda_ordered_sum(float *out, const float *own, const float *stage, size_t stride, int w, int rank, size_t n,
                         void *stream)
{
    if (!n) return;
    DS_LAUNCH(ordered_sum_kernel, ds_cuda_blocks(n, THREADS), THREADS, 0, (cudaStream_t)stream, out, own, stage, stride,
        w, rank, n);
    launchCheck();
}

__global__ void add_bf16_kernel(bf16 *y, const bf16 *x, size_t n)
{
    FOR_GRID(i, n) add_body(y, x, (size_t)i);
}

void ds_cuda_add(void *y, const void *x, size_t n, ds_dtype t)
{
    if (!n) return;
    if (t != DS_BF16) {
        ds_cuda_axpy((float *)y, 1.0f, (const float *)x, n);   /* x * 1 is exact: y + x */
        return;
    }
    DS_LAUNCH(add_bf16_kernel, ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream(), (bf16 *)y, (const bf16 *)x,
        n);
    launchCheck();
}

/* ---- input batch: only the uint8 batch crossed PCIe ---- */

static norm_consts norm_of(const float mean[3], const float std[3])
{
    norm_consts k;
    for (int j = 0; j < 3; j++) k.mean[j] = mean[j], k.std[j] = std[j];
    return k;
}

__global__ void normalize_u8_kernel(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                                    const int32_t *y0, const int32_t *x0, const uint8_t *flip,
                                    norm_consts k)
{
    FOR_GRID(i, (long)n * ch * cw * 3) normalize_u8_body(out, in, H, W, ch, cw, y0, x0, flip, k, i);
}

void ds_cuda_normalize_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                          const int32_t *y0, const int32_t *x0, const uint8_t *flip,
                          const float mean[3], const float std[3])
{
    long total = (long)n * ch * cw * 3;
    if (total <= 0) return;
    DS_LAUNCH(normalize_u8_kernel, ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream(), out, in, n, H, W, ch,
        cw, y0, x0, flip, norm_of(mean, std));
    launchCheck();
}

__global__ void resized_crop_u8_kernel(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                                       const int32_t *y0, const int32_t *x0, const int32_t *bh,
                                       const int32_t *bw, const uint8_t *flip, norm_consts k)
{
    FOR_GRID(i, (long)n * ch * cw * 3) resized_crop_u8_body(out, in, H, W, ch, cw, y0, x0, bh, bw, flip, k, i);
}

void ds_cuda_resized_crop_u8(float *out, const uint8_t *in, int n, int H, int W, int ch, int cw,
                             const int32_t *y0, const int32_t *x0, const int32_t *bh, const int32_t *bw,
                             const uint8_t *flip, const float mean[3], const float std[3])
{
    long total = (long)n * ch * cw * 3;
    if (total <= 0) return;
    DS_LAUNCH(resized_crop_u8_kernel, ds_cuda_blocks(total, THREADS), THREADS, 0, ds_cuda_stream(), out, in, n, H, W,
        ch, cw, y0, x0, bh, bw, flip, norm_of(mean, std));
    launchCheck();
}

/* ---- bf16 casts ---- */

__global__ void to_bf16_kernel(bf16 *dst, const float *src, size_t n)
{
    FOR_GRID(i, n) narrow_body(dst, src, (size_t)i);
}

__global__ void from_bf16_kernel(float *dst, const bf16 *src, size_t n, int accumulate)
{
    FOR_GRID(i, n) widen_body(dst, src, (size_t)i, accumulate);
}

void ds_cuda_to_bf16(void *dst, const float *src, size_t n)
{
    if (!n) return;
    DS_LAUNCH(to_bf16_kernel, ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream(), (bf16 *)dst, src, n);
    launchCheck();
}

__global__ void to_bf16_runs_kernel(bf16 *dst, const float *src, bf16_runs r)
{
    FOR_GRID(i, r.start[r.n]) to_bf16_runs_body(dst, src, &r, i);
}

void ds_cuda_to_bf16_runs(void *dst, const float *src, const ds_bf16_run *runs, int nruns)
{
    bf16_runs r;
    for (int a = 0; a < nruns;) {
        a += bf16_runs_take(&r, runs + a, nruns - a);
        if (!r.start[r.n]) continue;
        DS_LAUNCH(to_bf16_runs_kernel, ds_cuda_blocks(r.start[r.n], THREADS), THREADS, 0, ds_cuda_stream(), (bf16 *)dst,
            src, r);
        launchCheck();
    }
}

void ds_cuda_from_bf16(float *dst, const void *src, size_t n, int accumulate)
{
    if (!n) return;
    DS_LAUNCH(from_bf16_kernel, ds_cuda_blocks(n, THREADS), THREADS, 0, ds_cuda_stream(), dst, (const bf16 *)src, n,
        accumulate);
    launchCheck();
}
