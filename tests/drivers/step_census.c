/* step_census: what one training step asks of the CUDA backend's own kernels, counted on the
 * CPU (no GPU, no CUDA call).
 *
 *   step_census ARCH SIZE BATCH fp32|tf32|bf16        e.g. step_census resnet50 224 256 bf16
 *
 * The real model (ds_model_create, model.c) runs one training step as dstrain and engine_bench
 * take it, ds_model_zero_reduction, ds_model_forward (training), ds_model_backward,
 * ds_model_step, ds_model_end_step, then the step before's loss read (ds_model_step_loss: the
 * loss read late), over a spy backend: a
 * ds_backend whose ops compute nothing and touch no backend memory, and instead count what
 * cuda.cu, cuda_conv.cu and cuda_kernels.cu, as they are, would launch for that call and how
 * many bytes those launches read and write in device memory. The spy sees the model only through the
 * op table, so the census follows the model's plan (which activations are bf16, which
 * layers have a residual, where gradients are added) as it is.
 *
 * Counting rules, one function per backend op below, each naming the kernels it mirrors:
 *   - bytes: each distinct byte a kernel (or memset / memcpy) reads or writes, once per
 *     launch, at the tensor's storage size (ds_dtype_size of the type the op is given);
 *     caches between launches are ignored, as are re-reads within one (maxpool_bwd_kernel
 *     reads each argmax byte and dout value up to four times, the per-channel vectors are
 *     read by every thread);
 *   - launches: ds's own kernels, plus the cudaMemsetAsync of zero (one operation on the
 *     stream);
 *   - cuDNN and cuBLAS calls are counted apart; their traffic is theirs, not counted;
 *   - host: uploads, downloads (cuda_download waits for the stream), be->sync calls, copies
 *     back on the stream (download_async), and host waits for marks: for one of the counted
 *     step's own (the device idles while the host catches up) or of the step before (the
 *     counted step is queued behind it: the device has work).
 * A first, uncounted step brings the model to its steady state (momentum buffers in use, the
 * bf16 weight copy made once per step, after SGD); the second is the one counted.
 * The gradient reduction over W GPUs, counted apart (one process reduces nothing) from the
 * model's own bucket plan, with cuda.cu's chunking (ordered_reduce_start): for each bucket
 * and world of 2, 3, 4 and 8, what ncclAllReduce moves per rank (a ring's 2 (W - 1) / W of
 * the bucket sent and as much received; NCCL's tree or NVLS algorithms move otherwise) and
 * its launches (one collective a bucket), against the ordered reduction of --deterministic:
 * the all-to-all and the all-gather (two NCCL groups), its summation kernel (one launch, W
 * copies of a chunk read and the sum written, in device memory), the busiest rank's bytes;
 * and with --accum A the A - 1 earlier micro-batches' all-to-all and gather to rank 0. Then
 * the one-GPU cost of --deterministic at fp32/tf32: each weight gradient computed apart and
 * added by ds_cuda_add (add_kernel: dw, the micro-batch's gradient, read, dw written).
 * The milliseconds are bytes / 4.8 TB/s (the H200's HBM3e): a floor on the time of these
 * kernels, and batch over the total is a ceiling on images/s that cuDNN's own time only
 * lowers. Exit status: 0, 1 when the model cannot be built or run, 2 on a usage error. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend.h"
#include "backend/cpu_loops.h"      /* DS_BN_FLUSH, which bn_chunks passes */
#include "backend/cuda_kernels.h"   /* ds_cuda_bn_chunks: the kernels' chunking */
#include "backend/cuda_plan.h"      /* ds_conv_op, ds_conv_op_name */
#include "fsutil.h"
#include "log.h"
#include "model.h"

#define HBM_BYTES_PER_S 4.8e12

/* ---- the tally ---- */

typedef enum { CAT_BN, CAT_CAST, CAT_ELEMENTWISE, CAT_POOL, CAT_LOSS, CAT_OTHER, NCAT } category;
static const char *const cat_name[NCAT] = {"batch norm", "casts", "optimizer/elementwise", "pooling", "loss", "other"};

enum {
    K_BN_STATS, K_BN_APPLY, K_BN_GRADS, K_BN_DX,
    K_CONV_TO_BF16, K_CONV_FROM_BF16, K_DW_ACCUMULATE, K_WEIGHT_COPY,
    K_SGD, K_SCALE, K_AXPY, K_ADD, K_ZERO,
    K_MAXPOOL_FWD, K_MAXPOOL_BWD, K_AVGPOOL_FWD, K_AVGPOOL_BWD,
    K_SOFTMAX_XENT, K_BIAS_FWD, K_BIAS_BWD,
    NKERNELS
};

static struct {
    const char *name;
    category cat;
    uint64_t launches, bytes;
} kernels[NKERNELS] = {
    [K_BN_STATS] = {"bn_stats_kernel (sums and final)", CAT_BN},
    [K_BN_APPLY] = {"bn_apply_kernel", CAT_BN},
    [K_BN_GRADS] = {"bn_grads_kernel (sums and final)", CAT_BN},
    [K_BN_DX] = {"bn_dx_kernel", CAT_BN},
    [K_CONV_TO_BF16] = {"to_bf16_kernel (a conv's operand copy)", CAT_CAST},
    [K_CONV_FROM_BF16] = {"from_bf16_kernel (a conv's operand or result)", CAT_CAST},
    [K_DW_ACCUMULATE] = {"from_bf16_kernel (bf16 dw added to float32)", CAT_CAST},
    [K_WEIGHT_COPY] = {"to_bf16_runs_kernel (the bf16 weight copy)", CAT_CAST},
    [K_SGD] = {"sgd_kernel", CAT_ELEMENTWISE},
    [K_SCALE] = {"scale_kernel", CAT_ELEMENTWISE},
    [K_AXPY] = {"axpy_kernel", CAT_ELEMENTWISE},
    [K_ADD] = {"add_bf16_kernel (float32: axpy_kernel)", CAT_ELEMENTWISE},
    [K_ZERO] = {"cudaMemsetAsync (zero)", CAT_ELEMENTWISE},
    [K_MAXPOOL_FWD] = {"maxpool_fwd_kernel", CAT_POOL},
    [K_MAXPOOL_BWD] = {"maxpool_bwd_kernel", CAT_POOL},
    [K_AVGPOOL_FWD] = {"avgpool_fwd_kernel", CAT_POOL},
    [K_AVGPOOL_BWD] = {"avgpool_bwd_kernel", CAT_POOL},
    [K_SOFTMAX_XENT] = {"softmax_xent_kernel", CAT_LOSS},
    [K_BIAS_FWD] = {"bias_fwd_kernel", CAT_OTHER},
    [K_BIAS_BWD] = {"bias_bwd_kernel", CAT_OTHER},
};

static void launch(int k, uint64_t bytes)
{
    kernels[k].launches++;
    kernels[k].bytes += bytes;
}

static uint64_t cudnn_calls[DS_CONV_OPS], cublas_calls;
static ds_dtype bn_storage;   /* the activations' storage, as batch norm is told it */
static uint64_t uploads, upload_bytes, downloads, download_bytes, syncs, copies_back, copy_back_bytes;
static int marks, first_mark;                  /* marks made; the counted step's first */
static uint64_t waits_own, waits_before;       /* host waits for a mark of this step, of one before */

/* Batch-norm layers by shape, for the serial depth of their final kernels. */
typedef struct { int m, c, chunks, depth, layers; } bn_shape;
static bn_shape *bn_shapes;
static int n_bn_shapes;

static void reset_tally(void)
{
    for (int k = 0; k < NKERNELS; k++) kernels[k].launches = kernels[k].bytes = 0;
    memset(cudnn_calls, 0, sizeof cudnn_calls);
    cublas_calls = uploads = upload_bytes = downloads = download_bytes = syncs = 0;
    copies_back = copy_back_bytes = waits_own = waits_before = 0;
    first_mark = marks;
    n_bn_shapes = 0;
}

static uint64_t es(ds_dtype t) { return ds_dtype_size(t); }
#define F32 ((uint64_t)sizeof(float))

/* ---- memory: address space only ----
 * A ResNet-50 at batch 256 plans tens of GiB of activations. The spy maps them PROT_NONE and
 * MAP_NORESERVE: nothing is committed, and an op that touched backend memory would fault. */

static struct { void *p; size_t bytes; } maps[8];   /* the model makes at most six allocations */

static void *spy_alloc(size_t bytes)
{
    size_t len = bytes ? bytes : 1;
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
        if (maps[i].p) continue;
        void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return NULL;
        maps[i].p = p, maps[i].bytes = len;
        return p;
    }
    ds_err("spy backend: more allocations than it keeps track of");
    return NULL;
}

static void spy_free(void *p)
{
    for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++)
        if (maps[i].p == p) {
            munmap(p, maps[i].bytes);
            maps[i].p = NULL;
        }
}

/* ---- host transfers and the stream ---- */

/* cuda_conv.cu keeps a note of a convolution's copied output gradient (dout_copy); every call that
 * may write device memory drops it. */
static struct { const void *dout, *ws; ds_conv_desc d; } dout_note;

static void spy_upload(void *dst, const void *src, size_t bytes)
{
    dout_note.dout = NULL;
    uploads++;
    upload_bytes += bytes;
}

/* cuda_download: a copy, then cudaStreamSynchronize. The host's copy reads as zeros. */
static void spy_download(void *dst, const void *src, size_t bytes)
{
    memset(dst, 0, bytes);
    downloads++;
    download_bytes += bytes;
}

static void spy_sync(void) { syncs++; }

/* Marks (cudaEventRecord), waits and copies back on the stream (cuda.cu's streams and marks). */
static int spy_mark(int stream) { (void)stream; return marks++; }
static void spy_mark_wait(int mark)
{
    if (mark >= first_mark) waits_own++;
    else waits_before++;
}
static void spy_download_async(void *dst, const void *src, size_t bytes)
{
    memset(dst, 0, bytes);
    copies_back++;
    copy_back_bytes += bytes;
}
static void *spy_host_alloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }

/* cuda_zero: cudaMemsetAsync writes the bytes. */
static void spy_zero(void *p, size_t bytes)
{
    dout_note.dout = NULL;
    launch(K_ZERO, bytes);
}

/* ---- convolutions: cuDNN's call, and around it cuda_conv.cu's copies in the workspace ---- */

static ds_precision run_precision;

/* The type an op computes in (cuda_conv.cu op_type). The census takes the run's precision for
 * every op; cuda_conv.cu runs an op at a lower one where cuDNN has no usable algorithm at the
 * run's (ds_conv_choose), which only a GPU can tell, and that op would then copy more. */
static ds_dtype compute_type(void) { return run_precision == DS_PRECISION_BF16 ? DS_BF16 : DS_F32; }

static uint64_t n_in(const ds_conv_desc *d) { return (uint64_t)d->n * d->h * d->w * d->c; }
static uint64_t n_w(const ds_conv_desc *d) { return (uint64_t)d->k * d->r * d->s * d->c; }
static uint64_t n_out(const ds_conv_desc *d) { return (uint64_t)d->n * d->p * d->q * d->k; }

/* cuda_conv.cu cast: to_bf16_kernel or from_bf16_kernel, n elements read in one type and written
 * in the other. */
static void cast(uint64_t n, ds_dtype from, ds_dtype to)
{
    launch(to == DS_BF16 ? K_CONV_TO_BF16 : K_CONV_FROM_BF16, n * (es(from) + es(to)));
}

/* cuda_conv.cu layout + read_as: an operand stored in another type than ct is copied into it. */
static void operand(uint64_t n, ds_dtype stored, ds_dtype ct)
{
    if (stored != ct) cast(n, stored, ct);
}

/* cuda_conv.cu layout + write_back: a result computed in ct is cast back into its storage. */
static void result(uint64_t n, ds_dtype stored, ds_dtype ct)
{
    if (stored != ct) cast(n, ct, stored);
}

/* cuda_conv.cu dout_read: dout is copied unless it is stored in ct, or the op before (the same
 * convolution's other backward op, same workspace) left its copy. */
static void dout_read(const void *dout, const ds_conv_desc *d, const void *ws, ds_dtype ct)
{
    int noted = dout_note.dout == dout && dout_note.ws == ws && !memcmp(&dout_note.d, d, sizeof *d);
    dout_note.dout = NULL;
    if (d->out_t == ct || noted) return;
    dout_note.dout = dout, dout_note.ws = ws, dout_note.d = *d;
    cast(n_out(d), d->out_t, ct);
}

/* The spy allocates nothing per convolution: its workspace needs no size. */
static size_t spy_conv_workspace(const ds_conv_desc *d) { return 0; }

/* cuda_conv_fwd */
static void spy_conv_fwd(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws)
{
    ds_dtype ct = compute_type();
    dout_note.dout = NULL;
    operand(n_in(d), d->in_t, ct);
    operand(n_w(d), d->w_t, ct);
    cudnn_calls[DS_CONV_FWD]++;
    result(n_out(d), d->out_t, ct);
}

/* cuda_conv_bwd_data. Accumulating into a din stored in ct, cuDNN adds the result itself
 * (beta = 1): nothing of ours. Computed in the other type, the result is rounded to din's
 * storage and added: for a float32 din, from_bf16_kernel (accumulate) reads it and din and
 * writes din; for a bf16 din, to_bf16_kernel into the workspace, then add_bf16_kernel. */
static void spy_conv_bwd_data(void *din, const void *dout, const void *w, const ds_conv_desc *d, int accumulate,
                              void *ws)
{
    ds_dtype ct = compute_type();
    dout_read(dout, d, ws, ct);
    operand(n_w(d), d->w_t, ct);
    cudnn_calls[DS_CONV_BWD_DATA]++;
    if (!accumulate) {
        result(n_in(d), d->in_t, ct);
    } else if (d->in_t == DS_F32 && ct != DS_F32) {
        launch(K_CONV_FROM_BF16, n_in(d) * (es(ct) + 2 * F32));
    } else if (d->in_t != ct) {
        cast(n_in(d), ct, d->in_t);
        launch(K_ADD, 3 * n_in(d) * es(d->in_t));
    }
}

/* cuda_conv_bwd_weight: cuDNN accumulates into the float32 dw itself when it computes in
 * float32; otherwise it writes this micro-batch's dw in ct to the workspace and
 * from_bf16_kernel (accumulate) reads it and dw and writes dw. */
static void spy_conv_bwd_weight(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws)
{
    ds_dtype ct = compute_type();
    dout_read(dout, d, ws, ct);
    operand(n_in(d), d->in_t, ct);
    cudnn_calls[DS_CONV_BWD_FILTER]++;
    if (ct != DS_F32) launch(K_DW_ACCUMULATE, n_w(d) * (es(ct) + 2 * F32));
}

/* ---- batch norm (cuda_kernels.cu bn_fwd_train, bn_bwd) ---- */

/* cuda_kernels.cu's bn_chunks: the chunks of rows the partial sums are split into. */
static int bn_chunks(int m, int c)
{
    int chunks = ds_cuda_bn_chunks(m, c, DS_BN_FLUSH);
    if (!chunks) ds_die("batch norm: %d channels exceed the CUDA backend's scratch", c);
    return chunks;
}

/* The partial sums, [2][chunks][c] doubles: written by a pass's blocks, read by the last
 * block of each slice. */
static uint64_t partial_bytes(int chunks, int c) { return 2 * (uint64_t)chunks * c * sizeof(double); }

/* The longest serial walk of a channel's final sum (cuda_kernels.h): a row's share of the
 * chunks (chunks w, w + ROWS, ...), then one add per level of the tree. */
static int bn_final_depth(int chunks)
{
    int levels = 0;
    for (int r = DS_CUDA_BN_FINAL_ROWS; r > 1; r >>= 1) levels++;
    return (chunks + DS_CUDA_BN_FINAL_ROWS - 1) / DS_CUDA_BN_FINAL_ROWS + levels;
}

static void bn_depth(int m, int c, int chunks)
{
    for (int i = 0; i < n_bn_shapes; i++)
        if (bn_shapes[i].m == m && bn_shapes[i].c == c) {
            bn_shapes[i].layers++;
            return;
        }
    bn_shapes = ds_xrealloc(bn_shapes, (size_t)(n_bn_shapes + 1) * sizeof *bn_shapes);
    bn_shapes[n_bn_shapes++] = (bn_shape){m, c, chunks, bn_final_depth(chunks), 1};
}

static void spy_bn_fwd_train(void *out, uint8_t *mask, float *mean, float *var, float *invstd, float *mean_sum,
                             float *var_sum, const void *in, const float *gamma, const float *beta,
                             const void *residual, int relu, int m, int c, float eps, ds_dtype t)
{
    int chunks = bn_chunks(m, c);
    uint64_t E = (uint64_t)m * c * es(t), C = (uint64_t)c * F32, P = partial_bytes(chunks, c);
    bn_depth(m, c, chunks);
    bn_storage = t;
    /* bn_stats_kernel: reads in; writes the partial sums. Its slices' last blocks read the
     * partials, in's row 0 (the shift) and gamma; write mean, var, invstd and the coefficient
     * a; read and write the running statistics' sums when given them */
    launch(K_BN_STATS, E + P + P + c * es(t) + C + 4 * C + (mean_sum ? 4 * C : 0));
    /* bn_apply_kernel: reads in, the residual, mean, a and beta; writes out and, when given
     * one, the ReLU bitmask (a byte per 16 bytes of out, by the vector kernel the plan's
     * aligned tensors of whole bytes' channels take: no kernel of its own) */
    launch(K_BN_APPLY, E + (residual ? E : 0) + 3 * C + E + (mask ? E / DS_RELU_MASK_BYTES : 0));
}

static void spy_bn_bwd(void *din, void *dresidual, float *dgamma, float *dbeta, void *dout, const void *out,
                       const uint8_t *mask, const void *in, const float *gamma, const float *mean,
                       const float *invstd, int relu, int m, int c, ds_dtype t)
{
    int chunks = bn_chunks(m, c);
    uint64_t E = (uint64_t)m * c * es(t), C = (uint64_t)c * F32, P = partial_bytes(chunks, c);
    uint64_t M = mask ? E / DS_RELU_MASK_BYTES : 0;
    /* cuda_kernels.cu bn_bwd: with the mask, dout is written back only where it is dresidual */
    const int writeback = relu && (!mask || dresidual == dout), dx_mask = mask && !writeback;
    /* bn_grads_kernel: reads in, dout and the mean, and with relu the ReLU bitmask, or without
     * one out; writes the partials and, where it writes dout back, dout where the mask cuts.
     * Which elements those are depends on the data: counted as all of dout, since with about
     * half of a ReLU's outputs zero nearly every 32-byte sector holds one (an upper bound). Its
     * slices' last blocks read the partials, gamma, invstd, dgamma and dbeta; write dgamma,
     * dbeta and the coefficients ka, kb, kc */
    launch(K_BN_GRADS, 2 * E + C + (relu ? (mask ? M : E) : 0) + (writeback ? E : 0) + P + P + 4 * C + 5 * C);
    /* bn_dx_kernel: reads dout, in, mean, ka, kb, kc, and the mask where dout was not
     * written back; writes din and dresidual (= the masked dout), unless dresidual is dout */
    launch(K_BN_DX, 2 * E + 4 * C + E + (dresidual && dresidual != dout ? E : 0) + (dx_mask ? M : 0));
}

/* ---- pooling ---- */

/* maxpool_fwd_kernel: reads in, writes out and (in training) the argmax byte of each output */
static void spy_maxpool_fwd(void *out, uint8_t *argmax, const void *in, const ds_pool_desc *d)
{
    uint64_t in_n = (uint64_t)d->n * d->h * d->w * d->c, out_n = (uint64_t)d->n * d->p * d->q * d->c;
    launch(K_MAXPOOL_FWD, (in_n + out_n) * es(d->t) + (argmax ? out_n : 0));
}

/* maxpool_bwd_kernel: one thread per input element gathers dout from the windows whose
 * argmax byte names it; in and out are not read. Reads argmax and dout, writes din. */
static void spy_maxpool_bwd(void *din, const void *dout, const void *in, const void *out, const uint8_t *argmax,
                            const ds_pool_desc *d)
{
    uint64_t in_n = (uint64_t)d->n * d->h * d->w * d->c, out_n = (uint64_t)d->n * d->p * d->q * d->c;
    launch(K_MAXPOOL_BWD, (in_n + out_n) * es(d->t) + out_n);
}

/* avgpool_fwd_kernel: reads in, writes the float32 out [n, c] */
static void spy_avgpool_fwd(float *out, const void *in, int n, int hw, int c, ds_dtype in_t)
{
    launch(K_AVGPOOL_FWD, (uint64_t)n * hw * c * es(in_t) + (uint64_t)n * c * F32);
}

/* avgpool_bwd_kernel: reads the float32 dout [n, c], writes din */
static void spy_avgpool_bwd(void *din, const float *dout, int n, int hw, int c, ds_dtype in_t)
{
    launch(K_AVGPOOL_BWD, (uint64_t)n * c * F32 + (uint64_t)n * hw * c * es(in_t));
}

/* ---- fully connected: cuBLAS, and the bias kernels ---- */

/* cuda_linear_fwd: one GEMM; bias_fwd_kernel reads out and b, writes out */
static void spy_linear_fwd(float *out, const float *in, const float *w, const float *b, int n, int i, int o)
{
    cublas_calls++;
    if (b) launch(K_BIAS_FWD, 2 * (uint64_t)n * o * F32 + (uint64_t)o * F32);
}

/* cuda_linear_bwd: a GEMM for din (when asked), one for dw; bias_bwd_kernel reads dout and
 * db, writes db */
static void spy_linear_bwd(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                           int n, int i, int o)
{
    cublas_calls += 1 + (din != NULL);
    if (db) launch(K_BIAS_BWD, (uint64_t)n * o * F32 + 2 * (uint64_t)o * F32);
}

/* ---- loss ---- */

/* softmax_xent_kernel: reads logits and labels, writes the losses and dlogits */
static void spy_softmax_xent(float *loss, float *dlogits, const float *logits, const int32_t *labels, int n, int c,
                             float smoothing, float scale)
{
    if (n <= 0) return;
    uint64_t z = (uint64_t)n * c * F32;
    launch(K_SOFTMAX_XENT, z + (uint64_t)n * sizeof(int32_t) + (loss ? n * F32 : 0) + (dlogits ? z : 0));
}

/* ---- optimizer and elementwise (each returns at once for n = 0, as the CUDA ones) ---- */

/* sgd_kernel: reads grad and w, writes w; with momentum writes buf, and reads it after the
 * first step */
static void spy_sgd_step(float *w, float *buf, const float *grad, size_t n, const float *lr, float momentum, float wd,
                         int nesterov, int first)
{
    if (!n) return;
    uint64_t per = 3 * F32 + (momentum != 0 ? (first ? 1 : 2) * F32 : 0);
    launch(K_SGD, n * per);
}

/* scale_kernel: reads and writes x */
static void spy_scale(float *x, float alpha, size_t n)
{
    if (n) launch(K_SCALE, 2 * n * F32);
}

/* axpy_kernel: reads y and x, writes y */
static void spy_axpy(float *y, float alpha, const float *x, size_t n)
{
    if (n) launch(K_AXPY, 3 * n * F32);
}

/* ds_cuda_add: add_bf16_kernel, or axpy_kernel on float32: reads y and x, writes y */
static void spy_add(void *y, const void *x, size_t n, ds_dtype t)
{
    if (n) launch(K_ADD, 3 * n * es(t));
}

/* The to_bf16 op (ds_cuda_to_bf16_runs): the model's bf16 copy of its convolution weights,
 * one to_bf16_runs_kernel launch for each DS_CUDA_BF16_RUNS runs that hold a value */
static void spy_to_bf16(void *dst, const float *src, const ds_bf16_run *runs, int nruns)
{
    for (int a = 0; a < nruns; a += DS_CUDA_BF16_RUNS) {
        uint64_t n = 0;
        for (int k = a; k < nruns && k < a + DS_CUDA_BF16_RUNS; k++) n += runs[k].n;
        if (n) launch(K_WEIGHT_COPY, n * (F32 + es(DS_BF16)));
    }
}

/* Ops a training step does not call (inference BN, the input ops, copy, the reduction: one
 * process, ds_model_backward) are left NULL. */
static ds_backend spy = {
    .name = "spy",
    .host_memory = 0,
    .relu_mask = 1,   /* the CUDA backend's */
    .alloc = spy_alloc,
    .free = spy_free,
    .upload = spy_upload,
    .download = spy_download,
    .zero = spy_zero,
    .sync = spy_sync,
    .mark = spy_mark,
    .mark_wait = spy_mark_wait,
    .download_async = spy_download_async,
    .host_alloc = spy_host_alloc,
    .host_free = free,
    .conv_workspace = spy_conv_workspace,
    .conv_fwd = spy_conv_fwd,
    .conv_bwd_data = spy_conv_bwd_data,
    .conv_bwd_weight = spy_conv_bwd_weight,
    .bn_fwd_train = spy_bn_fwd_train,
    .bn_bwd = spy_bn_bwd,
    .maxpool_fwd = spy_maxpool_fwd,
    .maxpool_bwd = spy_maxpool_bwd,
    .avgpool_fwd = spy_avgpool_fwd,
    .avgpool_bwd = spy_avgpool_bwd,
    .linear_fwd = spy_linear_fwd,
    .linear_bwd = spy_linear_bwd,
    .softmax_xent = spy_softmax_xent,
    .sgd_step = spy_sgd_step,
    .scale = spy_scale,
    .axpy = spy_axpy,
    .add = spy_add,
    .to_bf16 = spy_to_bf16,
    .ordered_reduce = 0,
};

/* ---- the step and the report ---- */

/* One training step as engine_bench takes it (its SGD settings: one sgd_step call), the
 * step before's loss read once this one is queued (*last: that step's mark, -1 for none). */
static int train_step(ds_model *m, const int32_t *labels, int batch, int *last)
{
    ds_sgd sgd = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 0, .bn_bias_decay = 1};
    ds_model_zero_reduction(m);
    if (!ds_model_forward(m, batch, 1)) return -1;
    if (isnan(ds_model_backward(m, labels, batch, 1.0f / (float)batch, 0.1f))) return -1;
    ds_model_step(m, &sgd, 1);
    int now = ds_model_end_step(m);
    if (now < 0 || (*last >= 0 && isnan(ds_model_step_loss(m, *last)))) return -1;
    *last = now;
    return 0;
}

static double ms_of(uint64_t bytes) { return 1e3 * (double)bytes / HBM_BYTES_PER_S; }

static void report(const char *arch, int size, int batch, ds_precision p, const ds_model *m)
{
    ds_model_memory mem = ds_model_memory_plan(m);
    printf("step_census %s %dx%d batch %d %s: one training step (zero_reduction, forward, backward, SGD step) of the\n"
           "real model over a spy backend, computed on the CPU: what the CUDA backend's own kernels (cuda.cu,\n"
           "cuda_conv.cu, cuda_kernels.cu) move through device memory, each distinct byte once per launch; cuDNN's\n"
           "and cuBLAS's traffic is not counted. Batch norm's activations in %s; %.2f GiB of activations planned.\n\n",
           arch, size, size, batch, ds_precision_name(p), ds_dtype_name(bn_storage), (double)mem.activations / (1 << 30));

    uint64_t cl[NCAT] = {0}, cb[NCAT] = {0}, tl = 0, tb = 0;
    for (int k = 0; k < NKERNELS; k++) {
        cl[kernels[k].cat] += kernels[k].launches;
        cb[kernels[k].cat] += kernels[k].bytes;
    }
    printf("%-24s %10s %16s %10s %16s\n", "category", "launches", "bytes", "GB/step", "ms @ 4.8 TB/s");
    for (int c = 0; c < NCAT; c++) {
        printf("%-24s %10llu %16llu %10.3f %16.3f\n", cat_name[c], (unsigned long long)cl[c],
               (unsigned long long)cb[c], cb[c] / 1e9, ms_of(cb[c]));
        tl += cl[c], tb += cb[c];
    }
    printf("%-24s %10llu %16llu %10.3f %16.3f\n", "total", (unsigned long long)tl, (unsigned long long)tb, tb / 1e9,
           ms_of(tb));
    printf("ceiling from this traffic alone: %d images / %.3f ms = %.0f images/s\n\n", batch, ms_of(tb),
           batch / ((double)tb / HBM_BYTES_PER_S));

    printf("  %-48s %10s %16s %10s\n", "kernel (launched at least once)", "launches", "bytes", "GB/step");
    for (int k = 0; k < NKERNELS; k++)
        if (kernels[k].launches)
            printf("  %-48s %10llu %16llu %10.3f\n", kernels[k].name, (unsigned long long)kernels[k].launches,
                   (unsigned long long)kernels[k].bytes, kernels[k].bytes / 1e9);

    printf("\nlibrary calls (their traffic not counted): cuDNN %llu (%s %llu, %s %llu, %s %llu), cuBLAS %llu\n",
           (unsigned long long)(cudnn_calls[0] + cudnn_calls[1] + cudnn_calls[2]), ds_conv_op_name(DS_CONV_FWD),
           (unsigned long long)cudnn_calls[DS_CONV_FWD], ds_conv_op_name(DS_CONV_BWD_DATA),
           (unsigned long long)cudnn_calls[DS_CONV_BWD_DATA], ds_conv_op_name(DS_CONV_BWD_FILTER),
           (unsigned long long)cudnn_calls[DS_CONV_BWD_FILTER], (unsigned long long)cublas_calls);

    int layers = 0, max_depth = 0;
    long sum_depth = 0;
    printf("\nbatch-norm final sums (a slice's last block): serial depth, the adds one thread makes in order per\n"
           "channel: its row's share of the chunks (bn_chunks; %d rows a channel), then the tree\n",
           DS_CUDA_BN_FINAL_ROWS);
    printf("  %10s %8s %8s %8s %8s\n", "rows m", "channels", "chunks", "depth", "layers");
    for (int i = 0; i < n_bn_shapes; i++) {
        const bn_shape *s = &bn_shapes[i];
        printf("  %10d %8d %8d %8d %8d\n", s->m, s->c, s->chunks, s->depth, s->layers);
        layers += s->layers;
        sum_depth += (long)s->depth * s->layers;
        if (s->depth > max_depth) max_depth = s->depth;
    }
    printf("bn depth: max %d, sum over the %d layers %ld (bn_stats_kernel); bn_grads_kernel walks the same, %ld per "
           "step\n", max_depth, layers, sum_depth, 2 * sum_depth);

    printf("\nhost: %llu upload(s) of %llu bytes; %llu copy(ies) back on the stream of %llu bytes; %llu download(s) "
           "of %llu bytes and %llu be->sync, each waiting for the stream; %llu wait(s) for the step before's end\n"
           "host waits for the step's own work: %llu\n",
           (unsigned long long)uploads, (unsigned long long)upload_bytes, (unsigned long long)copies_back,
           (unsigned long long)copy_back_bytes, (unsigned long long)downloads, (unsigned long long)download_bytes,
           (unsigned long long)syncs, (unsigned long long)waits_before,
           (unsigned long long)(downloads + syncs + waits_own));
}

/* ---- the gradient reduction (cuda.cu's cuda_reduce_start), per step ---- */

typedef struct { uint64_t groups, kernels, collectives, sent, received, hbm; } reduce_tally;

/* One bucket of n floats reduced by rank r of w, the ordered way (ordered_reduce_start) */
static void ordered_bucket(reduce_tally *t, uint64_t n, int w, int r, int to_all)
{
    uint64_t mlo = n * r / w, mn = n * (r + 1) / w - mlo;
    for (int j = 0; j < w; j++) {   /* the all-to-all */
        uint64_t len = n * (j + 1) / w - n * j / w;
        if (j != r) t->sent += len * F32, t->received += mn * F32;
    }
    t->groups++;
    t->kernels++, t->hbm += (uint64_t)(w + 1) * mn * F32;   /* ordered_sum_kernel */
    for (int j = 0; j < w; j++) {   /* the all-gather, or the gather to rank 0 */
        uint64_t len = n * (j + 1) / w - n * j / w;
        if (j == r) continue;
        if (to_all || j == 0) t->sent += mn * F32;
        if (to_all || r == 0) t->received += len * F32;
    }
    t->groups++;
}

static void report_reduction(ds_model *m, ds_precision p)
{
    size_t lo, hi;
    int nb = ds_model_bucket(m, 0, &lo, &hi);
    uint64_t total = 0;
    for (int i = 0; i < nb; i++) ds_model_bucket(m, i, &lo, &hi), total += hi - lo;
    printf("\ngradient reduction over W GPUs, per step: %d buckets (--bucket-mb 25), %llu floats (%.1f MB); bytes\n"
           "per rank each way, the busiest rank (NCCL's ring for ncclAllReduce; NVLink/IB traffic, not HBM)\n",
           nb, (unsigned long long)total, total * 4 / 1e6);
    printf("  %3s %-34s %8s %8s %14s %14s %14s\n", "W", "reduction", "NCCL ops", "kernels", "sent", "received",
           "kernel HBM");
    const int worlds[] = {2, 3, 4, 8};
    for (size_t k = 0; k < sizeof worlds / sizeof *worlds; k++) {
        int w = worlds[k];
        uint64_t ring = 0;
        for (int i = 0; i < nb; i++) {
            ds_model_bucket(m, i, &lo, &hi);
            ring += 2 * (uint64_t)(w - 1) * (hi - lo) * F32 / w;
        }
        printf("  %3d %-34s %8d %8d %14llu %14llu %14s\n", w, "ncclAllReduce (default)", nb, 0,
               (unsigned long long)ring, (unsigned long long)ring, "(NCCL's)");
        const int accums[] = {1, 2};
        for (size_t a = 0; a < 2; a++) {
            reduce_tally best = {0};
            for (int r = 0; r < w; r++) {
                reduce_tally t = {0};
                for (int micro = 0; micro < accums[a]; micro++)
                    for (int i = 0; i < nb; i++) {
                        ds_model_bucket(m, i, &lo, &hi);
                        ordered_bucket(&t, hi - lo, w, r, micro == accums[a] - 1);
                    }
                if (t.sent + t.received > best.sent + best.received) best = t;
            }
            char name[64];
            snprintf(name, sizeof name, "ordered (--deterministic%s)", accums[a] > 1 ? ", --accum 2" : "");
            printf("  %3d %-34s %8llu %8llu %14llu %14llu %14llu\n", w, name, (unsigned long long)best.groups,
                   (unsigned long long)best.kernels, (unsigned long long)best.sent, (unsigned long long)best.received,
                   (unsigned long long)best.hbm);
        }
    }
    uint64_t dw = 0, n_dw = 0;
    for (int i = 0; i < ds_model_tensor_count(m); i++) {
        const ds_tensor_info *t = ds_model_tensor(m, i);
        if (t->kind == DS_TENSOR_PARAM && (t->ndim == 4 || !strcmp(t->name, "fc.weight"))) dw += t->count, n_dw++;
    }
    printf("--deterministic on one GPU%s: %llu weight gradients added by add_kernel: %llu launches, %llu bytes\n",
           p == DS_PRECISION_BF16 ? " (bf16: the convolutions' already are, by from_bf16_kernel; fc.weight's only)"
                                  : "",
           (unsigned long long)(p == DS_PRECISION_BF16 ? 1 : n_dw),
           (unsigned long long)(p == DS_PRECISION_BF16 ? 1 : n_dw),
           (unsigned long long)(p == DS_PRECISION_BF16 ? 3 * F32 * (uint64_t)ds_model_tensor(m, ds_model_tensor_find(m, "fc.weight"))->count
                                                       : 3 * F32 * dw));
}

static int usage(void)
{
    fprintf(stderr, "usage: step_census ARCH SIZE BATCH fp32|tf32|bf16   (e.g. step_census resnet50 224 256 bf16)\n");
    return 2;
}

int main(int argc, char **argv)
{
    ds_log_init("step_census");
    if (argc != 5) return usage();
    const char *arch = argv[1];
    int size = atoi(argv[2]), batch = atoi(argv[3]);
    if (size <= 0 || batch <= 0 || ds_precision_parse(argv[4], &run_precision)) return usage();
    if (run_precision == DS_PRECISION_AUTO) return usage();   /* a request, not a precision */
    spy.precision = run_precision;

    ds_model_config cfg = {.arch = arch, .num_classes = !strcmp(arch, "resnet20") ? 10 : 1000,
                           .max_batch = batch, .height = size, .width = size, .training = 1};
    ds_model *m = ds_model_create(&spy, &cfg);
    if (!m) return 1;
    int32_t *labels = ds_xcalloc((size_t)batch, sizeof *labels);
    int last = -1;
    int rc = ds_model_defer_loss(m, 1) ? -1 : train_step(m, labels, batch, &last);   /* the uncounted first step */
    reset_tally();
    if (rc == 0) rc = train_step(m, labels, batch, &last);
    if (rc == 0) report(arch, size, batch, run_precision, m);
    if (rc == 0) report_reduction(m, run_precision);
    free(labels);
    free(bn_shapes);
    ds_model_free(m);
    return rc == 0 ? 0 : 1;
}
