/* backend/cuda: the ds_backend interface on one GPU. Convolutions through cuDNN (NHWC,
 * algorithms found once per shape and cached), the linear layer through cuBLAS, the rest
 * in cuda_kernels.cu. Everything runs on one stream, NCCL on a second; see cuda.h for precision. */
#include <cublas_v2.h>
#include <cudnn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
extern "C" {
#include "backend.h"
#include "cuda.h"
#include "comm.h"
#include "cuda_kernels.h"
#include "cuda_plan.h"
}

#define cudnnCheck(call)                                                                   \
    do {                                                                                   \
        cudnnStatus_t s_ = (call);                                                         \
        if (s_ != CUDNN_STATUS_SUCCESS)                                                    \
            ds_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudnnGetErrorString(s_));   \
    } while (0)

#define cublasCheck(call)                                                                  \
    do {                                                                                   \
        cublasStatus_t s_ = (call);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                   \
            ds_die("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call, cublasGetStatusName(s_), \
                   cublasGetStatusString(s_));                                             \
    } while (0)

static struct {
    int ready, device;
    cudaStream_t stream;
    cudnnHandle_t cudnn;
    cublasHandle_t cublas;
    void *scratch;            /* kernels' reductions, DS_CUDA_SCRATCH_BYTES */
    void *cublas_ws;          /* cuBLAS workspace, fixed so it never allocates mid-step */
    ds_precision precision;
    int deterministic;
    int nccl;                 /* joined the ranks' communicator: gradients are reduced */
    cudaStream_t comm_stream; /* NCCL's stream, beside the compute stream */
    cudaEvent_t produced;     /* recorded on the compute stream as a bucket is started */
} g;

#define CUBLAS_WS_BYTES ((size_t)32 << 20)

extern "C" int ds_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();   /* no driver or no device: clear the sticky-free error, report none */
        return 0;
    }
    return n;
}

/* Binds the device (the rank's index on its node), the stream, cuDNN, cuBLAS and their
 * workspaces: once per process. */
static int bind_device(void)
{
    if (g.ready) return 0;
    int count = ds_cuda_device_count();
    if (count == 0) return ds_err("CUDA: no GPU is visible (driver missing or no device)");
    /* One process per GPU: the rank's index on its node picks the device. */
    g.device = ds_comm_local_rank() % count;
    if (ds_comm_local_size() > count)
        ds_warn("CUDA: %d ranks on this node share %d GPU(s)", ds_comm_local_size(), count);
    cudaCheck(cudaSetDevice(g.device));
    cudaCheck(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    cudnnCheck(cudnnCreate(&g.cudnn));
    cudnnCheck(cudnnSetStream(g.cudnn, g.stream));
    cublasCheck(cublasCreate(&g.cublas));
    cublasCheck(cublasSetStream(g.cublas, g.stream));
    cudaCheck(cudaMalloc(&g.cublas_ws, CUBLAS_WS_BYTES));
    cublasCheck(cublasSetWorkspace(g.cublas, g.cublas_ws, CUBLAS_WS_BYTES));
    cudaCheck(cudaMalloc(&g.scratch, DS_CUDA_SCRATCH_BYTES));
    ds_cuda_kernels_init(g.scratch);
    g.ready = 1;
    return 0;
}

extern "C" cudaStream_t ds_cuda_stream(void) { return g.stream; }

/* ---- memory ---- */

static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        cudaGetLastError();
        ds_err("cudaMalloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    cudaCheck(cudaMemsetAsync(p, 0, bytes, g.stream));
    return p;
}

static void cuda_free(void *p)
{
    if (p) cudaCheck(cudaFree(p));
}

/* Uploads go through a pinned staging ring: src is copied into it, so (as on the CPU) src
 * may be reused as soon as upload returns, and the device copy is queued on the stream
 * without waiting for the work before it. A copy from pinned memory is a DMA at the link's
 * speed; one from pageable memory goes through the driver's own staging, and had to be
 * waited for before src could be reused. A region of the ring is reused once the copy that read it is done (an
 * event per copy), so the host runs at most a ring's worth of uploads ahead of the GPU;
 * an upload larger than half the ring goes in pieces. The ring is made at the first
 * upload; when pinned memory is refused, uploads copy from pageable memory and wait. */
#define STAGE_BYTES ((size_t)64 << 20)
#define STAGE_COPIES 32   /* copies in flight at most */

static struct {
    char *buf;            /* pinned, STAGE_BYTES */
    int made, failed;
    size_t head;          /* where the next piece goes */
    struct { size_t lo, hi; cudaEvent_t done; } copy[STAGE_COPIES];
    int first, count;     /* the copies in flight, oldest first */
} stage;

static void stage_make(void)
{
    stage.made = 1;
    cudaError_t e = cudaHostAlloc((void **)&stage.buf, STAGE_BYTES, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        cudaGetLastError();
        stage.buf = NULL;
        stage.failed = 1;
        ds_warn("CUDA: no pinned staging buffer (%s): uploads copy from pageable memory", cudaGetErrorString(e));
        return;
    }
    for (int i = 0; i < STAGE_COPIES; i++) cudaCheck(cudaEventCreateWithFlags(&stage.copy[i].done, cudaEventDisableTiming));
}

static void stage_wait_oldest(void)
{
    cudaCheck(cudaEventSynchronize(stage.copy[stage.first].done));
    stage.first = (stage.first + 1) % STAGE_COPIES;
    stage.count--;
}

/* 1 when a copy in flight still reads [lo, hi) of the ring */
static int stage_busy(size_t lo, size_t hi)
{
    for (int k = 0; k < stage.count; k++) {
        int i = (stage.first + k) % STAGE_COPIES;
        if (stage.copy[i].lo < hi && lo < stage.copy[i].hi) return 1;
    }
    return 0;
}

static void cuda_upload(void *dst, const void *src, size_t bytes)
{
    if (!stage.made) stage_make();
    if (stage.failed) {
        cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.stream));
        cudaCheck(cudaStreamSynchronize(g.stream));
        return;
    }
    const char *from = (const char *)src;
    char *to = (char *)dst;
    while (bytes) {
        size_t n = bytes < STAGE_BYTES / 2 ? bytes : STAGE_BYTES / 2;
        if (stage.head + n > STAGE_BYTES) stage.head = 0;
        size_t lo = stage.head, hi = lo + n;
        while (stage_busy(lo, hi) || stage.count == STAGE_COPIES) stage_wait_oldest();
        memcpy(stage.buf + lo, from, n);
        cudaCheck(cudaMemcpyAsync(to, stage.buf + lo, n, cudaMemcpyHostToDevice, g.stream));
        int i = (stage.first + stage.count++) % STAGE_COPIES;
        stage.copy[i].lo = lo, stage.copy[i].hi = hi;
        cudaCheck(cudaEventRecord(stage.copy[i].done, g.stream));
        stage.head = hi;
        from += n, to += n, bytes -= n;
    }
}

static void cuda_download(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g.stream));
    cudaCheck(cudaStreamSynchronize(g.stream));
}

static void cuda_zero(void *p, size_t bytes)
{
    cudaCheck(cudaMemsetAsync(p, 0, bytes, g.stream));
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (dst != src) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g.stream));
}

static void cuda_sync(void)
{
    cudaCheck(cudaStreamSynchronize(g.stream));
}

/* ---- convolution ---- */

/* Plans (cuda_plan.h): one per (shape, precision, determinism, planned batch), made by
 * conv_workspace (the model's planning pass) and only looked up afterwards. A plan serves
 * every batch n and input h x w up to its planned ones: each (n, h, w) run gets a slot,
 * with its own tensor and convolution descriptors and the plan's algorithms, or others
 * where those would need more workspace at that size than the arena holds. */
typedef struct {
    cudnnTensorDescriptor_t x, y;            /* for the slot's n; NULL until first set up */
    cudnnConvolutionDescriptor_t conv[3];    /* fwd, bwd data, bwd filter: own math types */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t cudnn_ws;                         /* the largest of the three algorithms' workspaces */
} conv_slot;

typedef struct {
    cudnnDataType_t type;
    cudnnFilterDescriptor_t w;
    /* what cuDNN chose at the planned n, with the math type each was measured with */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t math[3];
    conv_slot slot[DS_CONV_PLAN_SLOTS];
} conv_impl;

static ds_conv_plans plans;

/* An algorithm may use at most this much workspace: the arena is sized from the largest. */
#define CONV_WS_LIMIT ((size_t)1 << 30)

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

static size_t n_in(const ds_conv_desc *d) { return (size_t)d->n * d->h * d->w * d->c; }
static size_t n_w(const ds_conv_desc *d) { return (size_t)d->k * d->r * d->s * d->c; }
static size_t n_out(const ds_conv_desc *d) { return (size_t)d->n * d->p * d->q * d->k; }

/* bf16 copies of in, w, out placed before cuDNN's workspace (bf16 only), for batch d->n */
static size_t bf16_bytes(const ds_conv_desc *d)
{
    if (g.precision != DS_PRECISION_BF16) return 0;
    return align256(n_in(d) * 2) + align256(n_w(d) * 2) + align256(n_out(d) * 2);
}

/* fp32: FMA only (DEFAULT would allow TF32 on Ampere and later); tf32/bf16: tensor cores */
static cudnnMathType_t base_math(void)
{
    return g.precision == DS_PRECISION_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

/* A result cuDNN reported is usable when it succeeded, fits the budget, is deterministic
 * when asked, and under fp32 runs plain FMA math: a result with DEFAULT math (TF32 allowed
 * on Ampere and later) or tensor-op math would silently compute in TF32. */
static int usable(cudnnStatus_t status, cudnnDeterminism_t det, cudnnMathType_t math, size_t memory, size_t budget)
{
    if (status != CUDNN_STATUS_SUCCESS || memory > budget) return 0;
    if (g.deterministic && det != CUDNN_DETERMINISTIC) return 0;
    if (g.precision == DS_PRECISION_FP32 && math != CUDNN_FMA_MATH) return 0;
    return 1;
}

/* Picks the first usable result (Find lists the fastest first, Get_v7 the likeliest best). */
#define PICK(results, count, budget, out, math_out, mem_out, what, d)                            \
    do {                                                                                         \
        int found_ = 0;                                                                          \
        for (int i_ = 0; i_ < (count) && !found_; i_++) {                                        \
            if (!usable(results[i_].status, results[i_].determinism, results[i_].mathType,       \
                        results[i_].memory, budget))                                             \
                continue;                                                                        \
            (out) = results[i_].algo;                                                            \
            (math_out) = results[i_].mathType;                                                   \
            (mem_out) = results[i_].memory;                                                      \
            found_ = 1;                                                                          \
        }                                                                                        \
        if (!found_)                                                                             \
            ds_die("cuDNN has no usable %s algorithm for conv %dx%dx%dx%d -> %d (%dx%d/%d)%s"    \
                   " within %zu bytes of workspace", what, d->n, d->h, d->w, d->c, d->k, d->r,   \
                   d->s, d->stride, g.deterministic ? " that is deterministic" : "", (size_t)(budget)); \
    } while (0)

/* Sets the slot's descriptors for d (its n, h, w), each convolution descriptor with the math type
 * given; creates them the first time. */
static void slot_describe(conv_slot *s, cudnnDataType_t type, const ds_conv_desc *d, const cudnnMathType_t math[3])
{
    if (!s->x) {
        cudnnCheck(cudnnCreateTensorDescriptor(&s->x));
        cudnnCheck(cudnnCreateTensorDescriptor(&s->y));
        for (int i = 0; i < 3; i++) cudnnCheck(cudnnCreateConvolutionDescriptor(&s->conv[i]));
    }
    /* x [n,h,w,c], y [n,p,q,k] */
    cudnnCheck(cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NHWC, type, d->n, d->c, d->h, d->w));
    cudnnCheck(cudnnSetTensor4dDescriptor(s->y, CUDNN_TENSOR_NHWC, type, d->n, d->k, d->p, d->q));
    for (int i = 0; i < 3; i++) {
        cudnnCheck(cudnnSetConvolution2dDescriptor(s->conv[i], d->pad, d->pad, d->stride, d->stride, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[i], math[i]));
    }
}

static conv_impl *plan_make(const ds_conv_desc *d, size_t *bytes)
{
    conv_impl *p = (conv_impl *)calloc(1, sizeof *p);
    if (!p) ds_die("out of memory for a convolution plan");
    p->type = g.precision == DS_PRECISION_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    /* w [k,r,s,c]: cuDNN's NHWC filter layout is exactly KRSC */
    cudnnCheck(cudnnCreateFilterDescriptor(&p->w));
    cudnnCheck(cudnnSetFilter4dDescriptor(p->w, p->type, CUDNN_TENSOR_NHWC, d->k, d->c, d->r, d->s));
    const cudnnMathType_t base[3] = {base_math(), base_math(), base_math()};
    conv_slot *s = &p->slot[0];   /* describes the planned n for the search */
    slot_describe(s, p->type, d, base);
    int n = 0;
    /* cudnnFind* runs every algorithm once on buffers it allocates itself: exact choices for
     * this GPU, paid once per shape at planning time. Timing can rank two algorithms either
     * way from one process to the next, so under --deterministic the choice comes from
     * cuDNN's heuristics instead (same arguments): a pure function of the shape, the GPU and
     * the cuDNN version, so a resumed run computes with the algorithms the first run used. */
#define CHOOSE(op, ...) (g.deterministic ? cudnnGet##op##Algorithm_v7(__VA_ARGS__) : cudnnFind##op##Algorithm(__VA_ARGS__))
    size_t mem[3];
    cudnnConvolutionFwdAlgoPerf_t rf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnCheck(CHOOSE(ConvolutionForward, g.cudnn, s->x, p->w, s->conv[0], s->y,
                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, rf));
    PICK(rf, n, CONV_WS_LIMIT, p->fwd, p->math[0], mem[0], "forward", d);
    cudnnConvolutionBwdDataAlgoPerf_t rd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnCheck(CHOOSE(ConvolutionBackwardData, g.cudnn, p->w, s->y, s->conv[1], s->x,
                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, rd));
    PICK(rd, n, CONV_WS_LIMIT, p->bwd_data, p->math[1], mem[1], "backward-data", d);
    cudnnConvolutionBwdFilterAlgoPerf_t rw[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    cudnnCheck(CHOOSE(ConvolutionBackwardFilter, g.cudnn, s->x, s->y, s->conv[2], p->w,
                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, rw));
    PICK(rw, n, CONV_WS_LIMIT, p->bwd_filter, p->math[2], mem[2], "backward-filter", d);
#undef CHOOSE
    size_t ws = mem[0] > mem[1] ? mem[0] : mem[1];
    *bytes = bf16_bytes(d) + (mem[2] > ws ? mem[2] : ws);
    return p;
}

static size_t cuda_conv_workspace(const ds_conv_desc *d)
{
    ds_conv_plan *p = ds_conv_plans_exact(&plans, d, g.precision, g.deterministic);
    if (p) return p->bytes;
    size_t bytes = 0;
    conv_impl *impl = plan_make(d, &bytes);
    if (!ds_conv_plans_add(&plans, d, g.precision, g.deterministic, bytes, impl))
        ds_die("out of memory for convolution plans");
    return bytes;
}

/* Sets up slot s of plan p for d's n, h and w: descriptors for that size, and for each op the
 * plan's algorithm when its workspace at this size fits the budget, else the first usable
 * one of cuDNN's heuristic list that fits (a short batch or a smaller input can change what
 * an algorithm needs). */
static void slot_set_up(conv_impl *p, conv_slot *s, const ds_conv_desc *d, size_t limit)
{
    size_t lead = bf16_bytes(d);
    if (lead > limit)   /* cannot happen: bf16_bytes grows with n, h and w, each <= the planned one */
        ds_die("CUDA conv %dx%dx%dx%d -> %d: the workspace (%zu bytes) cannot hold its bf16 copies",
               d->n, d->h, d->w, d->c, d->k, limit);
    size_t budget = limit - lead, need[3] = {0, 0, 0};
    const cudnnMathType_t base[3] = {base_math(), base_math(), base_math()};
    slot_describe(s, p->type, d, p->math);
    s->fwd = p->fwd, s->bwd_data = p->bwd_data, s->bwd_filter = p->bwd_filter;
    /* A query that fails counts as not fitting: the op then picks another algorithm. */
    if (cudnnGetConvolutionForwardWorkspaceSize(g.cudnn, s->x, p->w, s->conv[0], s->y, s->fwd, &need[0]) !=
        CUDNN_STATUS_SUCCESS)
        need[0] = SIZE_MAX;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(g.cudnn, p->w, s->y, s->conv[1], s->x, s->bwd_data,
                                                     &need[1]) != CUDNN_STATUS_SUCCESS)
        need[1] = SIZE_MAX;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(g.cudnn, s->x, s->y, s->conv[2], p->w, s->bwd_filter,
                                                       &need[2]) != CUDNN_STATUS_SUCCESS)
        need[2] = SIZE_MAX;
    int n = 0;
    cudnnMathType_t math;
    if (need[0] > budget) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[0], base[0]));
        cudnnCheck(cudnnGetConvolutionForwardAlgorithm_v7(g.cudnn, s->x, p->w, s->conv[0], s->y,
                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r));
        PICK(r, n, budget, s->fwd, math, need[0], "forward", d);
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[0], math));
        cudnnCheck(cudnnGetConvolutionForwardWorkspaceSize(g.cudnn, s->x, p->w, s->conv[0], s->y, s->fwd, &need[0]));
    }
    if (need[1] > budget) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[1], base[1]));
        cudnnCheck(cudnnGetConvolutionBackwardDataAlgorithm_v7(g.cudnn, p->w, s->y, s->conv[1], s->x,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r));
        PICK(r, n, budget, s->bwd_data, math, need[1], "backward-data", d);
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[1], math));
        cudnnCheck(cudnnGetConvolutionBackwardDataWorkspaceSize(g.cudnn, p->w, s->y, s->conv[1], s->x,
                                                                s->bwd_data, &need[1]));
    }
    if (need[2] > budget) {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[2], base[2]));
        cudnnCheck(cudnnGetConvolutionBackwardFilterAlgorithm_v7(g.cudnn, s->x, s->y, s->conv[2], p->w,
                                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r));
        PICK(r, n, budget, s->bwd_filter, math, need[2], "backward-filter", d);
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[2], math));
        cudnnCheck(cudnnGetConvolutionBackwardFilterWorkspaceSize(g.cudnn, s->x, s->y, s->conv[2], p->w,
                                                                  s->bwd_filter, &need[2]));
    }
    for (int i = 0; i < 3; i++)
        if (need[i] > budget)   /* the heuristics' estimate and the exact query disagree */
            ds_die("CUDA conv %dx%dx%dx%d -> %d (%dx%d/%d): op %d needs %zu bytes of workspace, %zu planned",
                   d->n, d->h, d->w, d->c, d->k, d->r, d->s, d->stride, i, need[i], budget);
    s->cudnn_ws = need[0] > need[1] ? need[0] : need[1];
    s->cudnn_ws = need[2] > s->cudnn_ws ? need[2] : s->cudnn_ws;
}

/* The plan and slot that run d (its n), set up on first use. */
typedef struct { conv_impl *p; conv_slot *s; } conv_run;

static conv_run plan_get(const ds_conv_desc *d)
{
    char why[160];
    size_t limit = 0;
    ds_conv_plan *plan = ds_conv_plans_lookup(&plans, d, g.precision, g.deterministic, &limit, why, sizeof why);
    if (!plan)   /* its workspace was never counted: running it could overrun the arena */
        ds_die("CUDA conv %dx%dx%dx%d -> %d (%dx%d/%d): %s", d->n, d->h, d->w, d->c, d->k, d->r, d->s,
               d->stride, why);
    int fresh = 0, k = ds_conv_plan_slot_for(&plans, plan, d, &fresh);
    conv_run run = {(conv_impl *)plan->impl, &((conv_impl *)plan->impl)->slot[k]};
    if (fresh) slot_set_up(run.p, run.s, d, limit);
    return run;
}

/* Workspace layout under bf16, for the batch actually run:
 * [in bf16][w bf16][out bf16][cuDNN workspace]. */
typedef struct { void *in, *w, *out, *cudnn; } conv_ws;

static conv_ws ws_split(const ds_conv_desc *d, void *ws)
{
    conv_ws s = {NULL, NULL, NULL, ws};
    if (g.precision != DS_PRECISION_BF16) return s;
    char *b = (char *)ws;
    s.in = b;
    b += align256(n_in(d) * 2);
    s.w = b;
    b += align256(n_w(d) * 2);
    s.out = b;
    b += align256(n_out(d) * 2);
    s.cudnn = b;
    return s;
}

/* bf16: the two backward ops of a convolution take the same dout, and the model calls one
 * right after the other (conv_bwd_weight, then conv_bwd_data) with the same workspace. The
 * first converts dout into the workspace's out slot and leaves a note; the second, seeing
 * the same dout, batch shape and workspace, skips the conversion. Any other convolution
 * call (the forward writes the out slot) drops the note, and it is used only once. */
static struct { const float *dout; void *ws; ds_conv_desc d; } dout_bf16;

static void dout_to_bf16(void *dst, const float *dout, const ds_conv_desc *d, void *ws)
{
    if (dout_bf16.dout == dout && dout_bf16.ws == ws && !memcmp(&dout_bf16.d, d, sizeof *d)) {
        dout_bf16.dout = NULL;
        return;
    }
    ds_cuda_to_bf16(dst, dout, n_out(d));
    dout_bf16.dout = dout, dout_bf16.ws = ws, dout_bf16.d = *d;
}

/* out [n,p,q,k] = conv(in [n,h,w,c], w [k,r,s,c]) */
static void cuda_conv_fwd(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws)
{
    conv_run r = plan_get(d);
    conv_ws s = ws_split(d, ws);
    const float one = 1, zero = 0;
    dout_bf16.dout = NULL;
    if (g.precision == DS_PRECISION_BF16) {
        ds_cuda_to_bf16(s.in, in, n_in(d));
        ds_cuda_to_bf16(s.w, w, n_w(d));
        cudnnCheck(cudnnConvolutionForward(g.cudnn, &one, r.s->x, s.in, r.p->w, s.w, r.s->conv[0], r.s->fwd,
                                           s.cudnn, r.s->cudnn_ws, &zero, r.s->y, s.out));
        ds_cuda_from_bf16(out, s.out, n_out(d), 0);
        return;
    }
    cudnnCheck(cudnnConvolutionForward(g.cudnn, &one, r.s->x, in, r.p->w, w, r.s->conv[0], r.s->fwd,
                                       ws, r.s->cudnn_ws, &zero, r.s->y, out));
}

/* din [n,h,w,c] = conv_transpose(dout [n,p,q,k], w) (overwritten) */
static void cuda_conv_bwd_data(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws)
{
    conv_run r = plan_get(d);
    conv_ws s = ws_split(d, ws);
    const float one = 1, zero = 0;
    if (g.precision == DS_PRECISION_BF16) {
        dout_to_bf16(s.out, dout, d, ws);
        ds_cuda_to_bf16(s.w, w, n_w(d));
        cudnnCheck(cudnnConvolutionBackwardData(g.cudnn, &one, r.p->w, s.w, r.s->y, s.out, r.s->conv[1],
                                                r.s->bwd_data, s.cudnn, r.s->cudnn_ws, &zero, r.s->x, s.in));
        ds_cuda_from_bf16(din, s.in, n_in(d), 0);
        return;
    }
    cudnnCheck(cudnnConvolutionBackwardData(g.cudnn, &one, r.p->w, w, r.s->y, dout, r.s->conv[1], r.s->bwd_data,
                                            ws, r.s->cudnn_ws, &zero, r.s->x, din));
}

/* dw [k,r,s,c] += correlation(in, dout): beta = 1 accumulates, as the interface asks */
static void cuda_conv_bwd_weight(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws)
{
    conv_run r = plan_get(d);
    conv_ws s = ws_split(d, ws);
    const float one = 1, zero = 0;
    if (g.precision == DS_PRECISION_BF16) {
        /* this micro-batch's gradient in bf16, added to the fp32 gradient (autocast's rule) */
        dout_to_bf16(s.out, dout, d, ws);
        ds_cuda_to_bf16(s.in, in, n_in(d));
        cudnnCheck(cudnnConvolutionBackwardFilter(g.cudnn, &one, r.s->x, s.in, r.s->y, s.out, r.s->conv[2],
                                                  r.s->bwd_filter, s.cudnn, r.s->cudnn_ws, &zero, r.p->w, s.w));
        ds_cuda_from_bf16(dw, s.w, n_w(d), 1);
        return;
    }
    cudnnCheck(cudnnConvolutionBackwardFilter(g.cudnn, &one, r.s->x, in, r.s->y, dout, r.s->conv[2],
                                              r.s->bwd_filter, ws, r.s->cudnn_ws, &one, r.p->w, dw));
}

/* ---- fully connected, row-major through column-major cuBLAS ----
 * A row-major [r, c] matrix is a column-major [c, r] one, so each product below is the
 * transpose of the row-major formula. */

/* out [n,o] = in [n,i] w[o,i]^T + b:  out^T (o x n) = w (o x i, stored as col-major i x o, so T) * in^T */
static void cuda_linear_fwd(float *out, const float *in, const float *w, const float *b, int n, int i, int o)
{
    const float one = 1, zero = 0;
    cublasCheck(cublasSgemm(g.cublas, CUBLAS_OP_T, CUBLAS_OP_N, o, n, i, &one, w, i, in, i, &zero, out, o));
    if (b) ds_cuda_bias_fwd(out, b, n, o);
}

static void cuda_linear_bwd(float *din, float *dw, float *db, const float *dout, const float *in,
                            const float *w, int n, int i, int o)
{
    const float one = 1, zero = 0;
    /* din [n,i] = dout [n,o] w [o,i]:  din^T (i x n) = w^T (i x o) * dout^T (o x n) */
    if (din) cublasCheck(cublasSgemm(g.cublas, CUBLAS_OP_N, CUBLAS_OP_N, i, n, o, &one, w, i, dout, o, &zero, din, i));
    /* dw [o,i] += dout^T [o,n] in [n,i]:  dw^T (i x o) += in^T (i x n) * dout (n x o) */
    cublasCheck(cublasSgemm(g.cublas, CUBLAS_OP_N, CUBLAS_OP_T, i, o, n, &one, in, i, dout, o, &one, dw, i));
    if (db) ds_cuda_bias_bwd(db, dout, n, o);
}

/* ---- gradient reduction: NCCL on its own stream, each bucket behind the compute work that
 * produced it (an event), so backward goes on while the bucket travels ---- */

static void cuda_reduce_start(float *buf, size_t n)
{
    if (!g.nccl) return;
    cudaCheck(cudaEventRecord(g.produced, g.stream));
    cudaCheck(cudaStreamWaitEvent(g.comm_stream, g.produced, 0));
    ds_nccl_allreduce_sum_f32(buf, n, g.comm_stream);
}

/* The host waits, polling NCCL, so a peer that died ends the job here instead of hanging
 * the next synchronisation; what is queued afterwards runs after the sums. A peer that is
 * alive but stuck raises no NCCL error (NVLink and P2P transports see none), so the wait
 * has comm's limit too (--comm-timeout). */
static void cuda_reduce_wait(void)
{
    if (g.nccl) ds_nccl_sync(g.comm_stream, ds_comm_timeout());
}

static ds_backend cuda_backend = {
    .name = "cuda",
    .host_memory = 0,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .sync = cuda_sync,
    .conv_workspace = cuda_conv_workspace,
    .conv_fwd = cuda_conv_fwd,
    .conv_bwd_data = cuda_conv_bwd_data,
    .conv_bwd_weight = cuda_conv_bwd_weight,
    .bn_fwd_train = ds_cuda_bn_fwd_train,
    .bn_fwd_infer = ds_cuda_bn_fwd_infer,
    .bn_bwd = ds_cuda_bn_bwd,
    .maxpool_fwd = ds_cuda_maxpool_fwd,
    .maxpool_bwd = ds_cuda_maxpool_bwd,
    .avgpool_fwd = ds_cuda_avgpool_fwd,
    .avgpool_bwd = ds_cuda_avgpool_bwd,
    .linear_fwd = cuda_linear_fwd,
    .linear_bwd = cuda_linear_bwd,
    .softmax_xent = ds_cuda_softmax_xent,
    .sgd_step = ds_cuda_sgd_step,
    .scale = ds_cuda_scale,
    .axpy = ds_cuda_axpy,
    .normalize_u8 = ds_cuda_normalize_u8,
    .resized_crop_u8 = ds_cuda_resized_crop_u8,
    .reduce_start = cuda_reduce_start,
    .reduce_wait = cuda_reduce_wait,
};

extern "C" const ds_backend *ds_cuda_select(const ds_backend_opts *opts)
{
    if (bind_device()) return NULL;
    g.precision = opts->precision;
    g.deterministic = opts->deterministic != 0;
    /* cuBLAS runs only the (small) linear layer: plain fp32 or tf32, also under bf16. */
    cublasCheck(cublasSetMathMode(g.cublas, g.precision == DS_PRECISION_FP32 ? CUBLAS_PEDANTIC_MATH
                                                                               : CUBLAS_TF32_TENSOR_OP_MATH));
    cuda_backend.precision = g.precision;
    cuda_backend.deterministic = g.deterministic;
    /* Under a launcher even a world of one reduces through NCCL, so `mpirun -np 1` runs the
     * path on a machine with one GPU (NCCL before 2.30 refuses two ranks on one GPU). */
    if (opts->data_parallel && !g.nccl && (ds_comm_world() > 1 || ds_comm_launched())) {
        if (ds_nccl_init()) {
            ds_err("cannot set up NCCL between the ranks");
            return NULL;
        }
        cudaCheck(cudaStreamCreateWithFlags(&g.comm_stream, cudaStreamNonBlocking));
        cudaCheck(cudaEventCreateWithFlags(&g.produced, cudaEventDisableTiming));
        g.nccl = 1;
    }
    return &cuda_backend;
}
