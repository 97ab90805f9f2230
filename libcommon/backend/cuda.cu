/* backend/cuda: the ds_backend interface on one GPU. Convolutions through cuDNN (NHWC,
 * algorithms found once per shape and storage types and cached; bf16 tensors go to cuDNN
 * as they are, copies in the workspace only where storage and arithmetic differ), the
 * linear layer through cuBLAS, the rest in cuda_kernels.cu. Everything runs on one stream,
 * NCCL on a second; see cuda.h for precision, storage and the casts that remain. */
#include <cublas_v2.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
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
#include "cuda_nccl.h"

/* cuDNN 9 keeps a message of its own on the last failure: said with the status. */
#define cudnnCheck(call)                                                                   \
    do {                                                                                   \
        cudnnStatus_t s_ = (call);                                                         \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                  \
            char last_[512] = "";                                                          \
            cudnnGetLastErrorString(last_, sizeof last_);                                  \
            ds_die("%s:%d: %s: %s%s%s", __FILE__, __LINE__, #call, cudnnGetErrorString(s_), \
                   last_[0] ? ": " : "", last_);                                           \
        }                                                                                  \
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
    /* --deterministic: the ordered reduction (cuda_reduce_start) in place of ncclAllReduce,
     * its staging (the ranks' copies of this rank's chunk of a bucket) and its per-peer
     * arguments; and the gradient of one micro-batch before it is added (grad_tmp) */
    int ordered;
    float *stage;
    size_t stage_floats;
    float **x_send, **x_recv;
    size_t *x_send_n, *x_recv_n;
    float *grad_tmp;
    size_t grad_tmp_floats;
    cudaStream_t input_stream;  /* upload_async: the next batch crosses beside the compute */
    /* marks: the last DS_MARKS of each stream, an event each (timing ones, for mark_seconds) */
    cudaEvent_t mark_event[2][DS_MARKS];
    int marks[2];
} g;

#define CUBLAS_WS_BYTES ((size_t)32 << 20)

/* No device, or no driver at all (the runtime then reports an insufficient driver, and the
 * driver version it finds is 0): a machine without a GPU. Any other failure (a driver too old
 * for this runtime, a device the sandbox refuses, an initialisation error) is CUDA failing
 * to start on a machine that has a GPU: an error with CUDA's words, never a quiet 0. */
extern "C" int ds_cuda_device_count(void)
{
    int n = 0, driver = 0, runtime = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) return n;
    cudaGetLastError();   /* clear the (non-sticky) error */
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (e == cudaErrorNoDevice || (e == cudaErrorInsufficientDriver && driver == 0)) return 0;
    ds_err("CUDA could not start: %s (%s; the driver supports CUDA %d.%d, this build's runtime is %d.%d)",
           cudaGetErrorString(e), cudaGetErrorName(e), driver / 1000, driver % 1000 / 10, runtime / 1000,
           runtime % 1000 / 10);
    return -1;
}

/* Binds the device (the rank's index on its node), the stream, cuDNN, cuBLAS and their
 * workspaces: once per process. */
static int bind_device(void)
{
    if (g.ready) return 0;
    int count = ds_cuda_device_count();
    if (count < 0) return -1;
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
    cudaCheck(cudaStreamCreateWithFlags(&g.input_stream, cudaStreamNonBlocking));
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < DS_MARKS; i++) cudaCheck(cudaEventCreate(&g.mark_event[s][i]));
    g.ready = 1;
    return 0;
}

extern "C" cudaStream_t ds_cuda_stream(void) { return g.stream; }

/* ---- memory ---- */

/* Forgets the convolutions' copy of an output gradient (see dout_copy below): anything that
 * may write device memory calls it. */
static void dout_copy_drop(void);

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
    dout_copy_drop();
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
    dout_copy_drop();
    cudaCheck(cudaMemsetAsync(p, 0, bytes, g.stream));
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    dout_copy_drop();
    if (dst != src) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g.stream));
}

static void cuda_sync(void)
{
    cudaCheck(cudaStreamSynchronize(g.stream));
}

/* ---- streams and marks (backend.h) ----
 * Mark number k of stream s is 2k + s, recorded in event k % DS_MARKS of s: an older mark's
 * event has been recorded again at a later point of the same stream, which is what
 * backend.h promises for it. */

static cudaStream_t stream_of(int s) { return s == DS_STREAM_INPUT ? g.input_stream : g.stream; }
static cudaEvent_t mark_event(int mark) { return g.mark_event[mark & 1][(mark >> 1) % DS_MARKS]; }

static int cuda_mark(int s)
{
    s = s == DS_STREAM_INPUT;
    int mark = 2 * g.marks[s]++ + s;
    cudaCheck(cudaEventRecord(mark_event(mark), stream_of(s)));
    return mark;
}

static void cuda_mark_wait(int mark) { cudaCheck(cudaEventSynchronize(mark_event(mark))); }

static void cuda_stream_wait(int s, int mark) { cudaCheck(cudaStreamWaitEvent(stream_of(s), mark_event(mark), 0)); }

static int mark_held(int mark)
{
    int s = mark & 1, k = mark >> 1;
    return mark >= 0 && k < g.marks[s] && k >= g.marks[s] - DS_MARKS;
}

static double cuda_mark_seconds(int from, int to)
{
    if ((from & 1) || (to & 1) || !mark_held(from) || !mark_held(to)) return NAN;
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, mark_event(from), mark_event(to)));
    return ms / 1e3;
}

/* A clock: a timing event of its own, recorded on the compute stream (backend.h). */
struct ds_clock {
    cudaEvent_t event;
    int recorded;
};

static ds_clock *cuda_clock_alloc(void)
{
    ds_clock *c = (ds_clock *)calloc(1, sizeof *c);
    if (!c) return NULL;
    cudaError_t e = cudaEventCreate(&c->event);
    if (e != cudaSuccess) {
        cudaGetLastError();
        ds_err("CUDA: cannot create a timing event: %s", cudaGetErrorString(e));
        free(c);
        return NULL;
    }
    return c;
}

static void cuda_clock_free(ds_clock *c)
{
    if (!c) return;
    cudaCheck(cudaEventDestroy(c->event));
    free(c);
}

static void cuda_clock_record(ds_clock *c)
{
    cudaCheck(cudaEventRecord(c->event, g.stream));
    c->recorded = 1;
}

static double cuda_clock_seconds(const ds_clock *from, const ds_clock *to)
{
    if (!from->recorded || !to->recorded) return NAN;
    float ms = 0;
    cudaCheck(cudaEventElapsedTime(&ms, from->event, to->event));
    return ms / 1e3;
}

/* Page-locked, so that a copy is a DMA the host need not wait for; where the driver refuses
 * it, ordinary memory (copies are then synchronous, and correct). */
static void *cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) == cudaSuccess) return p;
    cudaGetLastError();
    return calloc(1, bytes ? bytes : 1);
}

static void cuda_host_free(void *p)
{
    if (!p) return;
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost)
        cudaCheck(cudaFreeHost(p));
    else
        cudaGetLastError(), free(p);
}

static int cuda_host_register(void *p, size_t bytes)
{
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (e == cudaSuccess) return 0;
    cudaGetLastError();
    ds_warn("CUDA: cannot page-lock %zu bytes of the loader's buffers (%s): batches are copied through the "
            "staging ring", bytes, cudaGetErrorString(e));
    return -1;
}

static void cuda_host_unregister(void *p) { cudaCheck(cudaHostUnregister(p)); }

static void cuda_upload_async(void *dst, const void *src, size_t bytes)
{
    dout_copy_drop();
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.input_stream));
}

static void cuda_download_async(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g.stream));
}

/* ---- convolution ---- */

/* Plans (cuda_plan.h): one per (shape and storage types, precision, determinism, planned
 * batch), made by conv_workspace (the model's planning pass) and only looked up afterwards.
 * A plan serves every batch n and input h x w up to its planned ones: each (n, h, w) run
 * gets a slot, with its own tensor and convolution descriptors and the plan's algorithms,
 * or others where those would need more workspace at that size than the arena holds or
 * will not run there (conv_issue). Each op has its own precision: the run's, or a lower one
 * where the run's has no usable algorithm for it (ds_conv_choose); [0] descriptors are fp32
 * tensors (fp32 and tf32 ops), [1] bf16. */
typedef struct {
    cudnnTensorDescriptor_t x[2], y[2];      /* for the slot's n, h, w; [1] only in bf16 runs */
    cudnnConvolutionDescriptor_t conv[DS_CONV_OPS];  /* each with its op's math type */
    ds_conv_choice choice[DS_CONV_OPS];      /* what the slot runs: the plan's, or others that fit */
    size_t cudnn_ws[DS_CONV_OPS];            /* each op's cuDNN workspace at the slot's size */
    size_t limit;                            /* the workspace a run at this size may use */
    ds_conv_list list[DS_CONV_OPS];          /* cuDNN's answers at this size, for other choices */
    int ran[DS_CONV_OPS];                    /* 1: the op has run at this size with its choice */
} conv_slot;

typedef struct {
    cudnnFilterDescriptor_t w[2];            /* fp32, bf16 ([1] only in bf16 runs) */
    ds_conv_choice choice[DS_CONV_OPS];      /* what cuDNN chose at the planned size */
    ds_conv_list list[DS_CONV_OPS];          /* and what it answered there */
    conv_slot slot[DS_CONV_PLAN_SLOTS];
} conv_impl;

static ds_conv_plans plans;

/* An algorithm may use at most this much workspace: the arena is sized from the largest. */
#define CONV_WS_LIMIT ((size_t)1 << 30)

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

static size_t n_in(const ds_conv_desc *d) { return (size_t)d->n * d->h * d->w * d->c; }
static size_t n_w(const ds_conv_desc *d) { return (size_t)d->k * d->r * d->s * d->c; }
static size_t n_out(const ds_conv_desc *d) { return (size_t)d->n * d->p * d->q * d->k; }

/* The tensors of an op computing in precision p are of this type. */
static ds_dtype op_type(int p) { return p == DS_PRECISION_BF16 ? DS_BF16 : DS_F32; }

/* The workspace of one op of d, at d's n, h and w, computing in type ct: first a copy in ct
 * of each of the op's three tensors stored in the other type (the byte offset of each, or
 * NO_COPY: cuDNN takes the tensor where it is), then for backward-data of a bf16 din
 * computed in float32 the result rounded to bf16 (`sum`, which an accumulating call adds
 * to din), then cuDNN's own workspace at `cudnn`. The three are out (dout), in (din) and the
 * weights: w_t for forward and backward-data, float32 for backward-filter's dw. dout comes
 * first, so two backward ops that copy it into the same type place it alike (see
 * dout_copy). */
#define NO_COPY SIZE_MAX
typedef struct { size_t out, in, w, sum, cudnn; } conv_layout;

static conv_layout layout(const ds_conv_desc *d, int op, ds_dtype ct)
{
    conv_layout l = {NO_COPY, NO_COPY, NO_COPY, NO_COPY, 0};
    size_t es = ds_dtype_size(ct);
    ds_dtype w_t = op == DS_CONV_BWD_FILTER ? DS_F32 : d->w_t;
    if (d->out_t != ct) l.out = l.cudnn, l.cudnn += align256(n_out(d) * es);
    if (d->in_t != ct) l.in = l.cudnn, l.cudnn += align256(n_in(d) * es);
    if (w_t != ct) l.w = l.cudnn, l.cudnn += align256(n_w(d) * es);
    if (op == DS_CONV_BWD_DATA && d->in_t == DS_BF16 && ct == DS_F32)
        l.sum = l.cudnn, l.cudnn += align256(n_in(d) * ds_dtype_size(DS_BF16));
    return l;
}

/* The math an op computing in precision p asks for: fp32 FMA only (DEFAULT would allow TF32
 * on Ampere and later); tf32 and bf16 tensor cores. */
static cudnnMathType_t base_math(int p) { return p == DS_PRECISION_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }
static int type_index(int p) { return p == DS_PRECISION_BF16; }

static ds_conv_math math_of(cudnnMathType_t m)
{
    switch (m) {
    case CUDNN_TENSOR_OP_MATH: return DS_MATH_TENSOR_OP;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return DS_MATH_TENSOR_OP_CONVERSION;
    case CUDNN_FMA_MATH: return DS_MATH_FMA;
    default: return DS_MATH_DEFAULT;
    }
}

static cudnnMathType_t cudnn_math(ds_conv_math m)
{
    switch (m) {
    case DS_MATH_TENSOR_OP: return CUDNN_TENSOR_OP_MATH;
    case DS_MATH_TENSOR_OP_CONVERSION: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case DS_MATH_FMA: return CUDNN_FMA_MATH;
    default: return CUDNN_DEFAULT_MATH;
    }
}

/* "64x56x56x64 -> 64 (3x3/1; in bf16, out bf16, w bf16)" */
#define CONV_NAME 128
static const char *conv_name(const ds_conv_desc *d, char *buf, size_t len)
{
    snprintf(buf, len, "%dx%dx%dx%d -> %d (%dx%d/%d; in %s, out %s, w %s)", d->n, d->h, d->w, d->c, d->k, d->r,
             d->s, d->stride, ds_dtype_name(d->in_t), ds_dtype_name(d->out_t), ds_dtype_name(d->w_t));
    return buf;
}

/* Sets the slot's descriptors for d (its n, h, w); creates them the first time. */
static void slot_describe(conv_slot *s, const ds_conv_desc *d)
{
    int types = g.precision == DS_PRECISION_BF16 ? 2 : 1;
    static const cudnnDataType_t type[2] = {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16};
    for (int t = 0; t < types; t++) {
        if (!s->x[t]) {
            cudnnCheck(cudnnCreateTensorDescriptor(&s->x[t]));
            cudnnCheck(cudnnCreateTensorDescriptor(&s->y[t]));
        }
        /* x [n,h,w,c], y [n,p,q,k] */
        cudnnCheck(cudnnSetTensor4dDescriptor(s->x[t], CUDNN_TENSOR_NHWC, type[t], d->n, d->c, d->h, d->w));
        cudnnCheck(cudnnSetTensor4dDescriptor(s->y[t], CUDNN_TENSOR_NHWC, type[t], d->n, d->k, d->p, d->q));
    }
    for (int i = 0; i < DS_CONV_OPS; i++) {
        if (!s->conv[i]) cudnnCheck(cudnnCreateConvolutionDescriptor(&s->conv[i]));
        cudnnCheck(cudnnSetConvolution2dDescriptor(s->conv[i], d->pad, d->pad, d->stride, d->stride, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    }
}

/* ds_conv_query for cuDNN: op's algorithms for the slot's size at precision p, by cudnnFind*
 * (find = 1: every algorithm run once on buffers cuDNN allocates itself, fastest first) or
 * by the heuristics of cudnnGet*_v7 (best guess first). */
typedef struct { conv_impl *p; conv_slot *s; int find; } conv_query_ctx;

#define TO_ALGOS(perf, count, out, cap)                                                            \
    do {                                                                                           \
        for (int i_ = 0; i_ < (count) && i_ < (cap); i_++) {                                       \
            (out)[i_].algo = (int)(perf)[i_].algo;                                                 \
            (out)[i_].ok = (perf)[i_].status == CUDNN_STATUS_SUCCESS;                              \
            (out)[i_].status = cudnnGetErrorString((perf)[i_].status);                             \
            (out)[i_].deterministic = (perf)[i_].determinism == CUDNN_DETERMINISTIC;               \
            (out)[i_].math = math_of((perf)[i_].mathType);                                         \
            (out)[i_].memory = (perf)[i_].memory;                                                  \
        }                                                                                          \
    } while (0)

static int cudnn_query(void *ctx, const ds_conv_desc *d, ds_conv_op op, int p, ds_conv_algo *out, int cap,
                       char *why, size_t why_len)
{
    conv_query_ctx *c = (conv_query_ctx *)ctx;
    conv_slot *s = c->s;   /* its descriptors hold d's sizes */
    (void)d;
    int t = type_index(p), n = 0;
    cudnnFilterDescriptor_t w = c->p->w[t];
    cudnnStatus_t st = cudnnSetConvolutionMathType(s->conv[op], base_math(p));
#define ASK(kind, ...) (c->find ? cudnnFind##kind##Algorithm(__VA_ARGS__) : cudnnGet##kind##Algorithm_v7(__VA_ARGS__))
    if (st == CUDNN_STATUS_SUCCESS && op == DS_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        st = ASK(ConvolutionForward, g.cudnn, s->x[t], w, s->conv[op], s->y[t], CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r);
        if (st == CUDNN_STATUS_SUCCESS) TO_ALGOS(r, n, out, cap);
    } else if (st == CUDNN_STATUS_SUCCESS && op == DS_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        st = ASK(ConvolutionBackwardData, g.cudnn, w, s->y[t], s->conv[op], s->x[t],
                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r);
        if (st == CUDNN_STATUS_SUCCESS) TO_ALGOS(r, n, out, cap);
    } else if (st == CUDNN_STATUS_SUCCESS) {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        st = ASK(ConvolutionBackwardFilter, g.cudnn, s->x[t], s->y[t], s->conv[op], w,
                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r);
        if (st == CUDNN_STATUS_SUCCESS) TO_ALGOS(r, n, out, cap);
    }
#undef ASK
    if (st != CUDNN_STATUS_SUCCESS) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(why, why_len, "%s%s%s", cudnnGetErrorString(st), last[0] ? ": " : "", last);
        return -1;
    }
    return n < cap ? n : cap;
}

/* Gives each op of slot s the math type of its choice. */
static void slot_set_math(conv_slot *s)
{
    for (int i = 0; i < DS_CONV_OPS; i++)
        if (s->choice[i].needed) cudnnCheck(cudnnSetConvolutionMathType(s->conv[i], cudnn_math(s->choice[i].math)));
}

/* The workspace op i of slot s needs with its chosen algorithm at the slot's size;
 * SIZE_MAX when cuDNN cannot say (the algorithm does not run at this size). */
static size_t op_workspace(const conv_impl *p, const conv_slot *s, int i)
{
    const ds_conv_choice *c = &s->choice[i];
    int t = type_index(c->precision);
    size_t need = 0;
    cudnnStatus_t st;
    if (i == DS_CONV_FWD)
        st = cudnnGetConvolutionForwardWorkspaceSize(g.cudnn, s->x[t], p->w[t], s->conv[i], s->y[t],
                                                     (cudnnConvolutionFwdAlgo_t)c->algo, &need);
    else if (i == DS_CONV_BWD_DATA)
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(g.cudnn, p->w[t], s->y[t], s->conv[i], s->x[t],
                                                          (cudnnConvolutionBwdDataAlgo_t)c->algo, &need);
    else
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(g.cudnn, s->x[t], s->y[t], s->conv[i], p->w[t],
                                                            (cudnnConvolutionBwdFilterAlgo_t)c->algo, &need);
    return st == CUDNN_STATUS_SUCCESS ? need : SIZE_MAX;
}

/* Says once per plan which ops compute below the run's precision, and at --verbose what
 * each op of the plan runs. */
static void plan_report(const ds_conv_desc *d, const ds_conv_choice choice[DS_CONV_OPS], const char *where)
{
    char name[CONV_NAME], text[512];
    conv_name(d, name, sizeof name);
    for (int i = 0; i < DS_CONV_OPS; i++)
        if (choice[i].needed && choice[i].precision != g.precision)
            ds_warn("CUDA conv %s: cuDNN has no usable %s %s algorithm%s; that op computes in %s", name,
                    ds_precision_name(g.precision), ds_conv_op_name((ds_conv_op)i),
                    g.deterministic ? " that is deterministic" : "", ds_precision_name((ds_precision)choice[i].precision));
    ds_conv_choice_describe(choice, text, sizeof text);
    ds_debug("CUDA conv %s, %s: %s", name, where, text);
}

/* Chooses the plan's algorithms at the planned size: NULL, with a message, when an op d
 * needs has none at any precision. */
static conv_impl *plan_make(const ds_conv_desc *d, size_t *bytes)
{
    conv_impl *p = (conv_impl *)calloc(1, sizeof *p);
    if (!p) ds_die("out of memory for a convolution plan");
    int types = g.precision == DS_PRECISION_BF16 ? 2 : 1;
    static const cudnnDataType_t type[2] = {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16};
    for (int t = 0; t < types; t++) {
        /* w [k,r,s,c]: cuDNN's NHWC filter layout is exactly KRSC */
        cudnnCheck(cudnnCreateFilterDescriptor(&p->w[t]));
        cudnnCheck(cudnnSetFilter4dDescriptor(p->w[t], type[t], CUDNN_TENSOR_NHWC, d->k, d->c, d->r, d->s));
    }
    conv_slot *s = &p->slot[0];   /* describes the planned size for the search */
    slot_describe(s, d);
    /* Find times every algorithm: exact choices for this GPU, paid once per shape at planning
     * time. Timing can rank two algorithms either way from one process to the next, so under
     * --deterministic the choice comes from cuDNN's heuristics instead: a pure function of the
     * shape, the GPU and the cuDNN version, so a resumed run computes as the first run did. */
    conv_query_ctx ctx = {p, s, !g.deterministic};
    char msg[1024], name[CONV_NAME];
    if (ds_conv_choose(d, g.precision, g.deterministic, CONV_WS_LIMIT, cudnn_query, &ctx, p->list, p->choice, msg,
                       sizeof msg)) {
        ds_err("CUDA conv %s, --precision %s%s: %s", conv_name(d, name, sizeof name), ds_precision_name(g.precision),
               g.deterministic ? " --deterministic" : "", msg);
        return NULL;   /* the model stops before anything runs; the plan's few descriptors are not freed */
    }
    plan_report(d, p->choice, "planned");
    /* the ops run one at a time: the largest of their copies plus cuDNN workspace */
    *bytes = 0;
    for (int i = 0; i < DS_CONV_OPS; i++) {
        const ds_conv_choice *c = &p->choice[i];
        size_t need = c->needed ? layout(d, i, op_type(c->precision)).cudnn + c->memory : 0;
        if (need > *bytes) *bytes = need;
    }
    return p;
}

static size_t cuda_conv_workspace(const ds_conv_desc *d)
{
    ds_conv_plan *p = ds_conv_plans_exact(&plans, d, g.precision, g.deterministic);
    if (p) return p->bytes;
    size_t bytes = 0;
    conv_impl *impl = plan_make(d, &bytes);
    if (!impl) return SIZE_MAX;
    if (!ds_conv_plans_add(&plans, d, g.precision, g.deterministic, bytes, impl))
        ds_die("out of memory for convolution plans");
    return bytes;
}

/* The bytes of copies op i of d makes at each precision it could compute in. */
static ds_conv_budget op_budget(const ds_conv_desc *d, int i, size_t limit)
{
    ds_conv_budget b = {limit, {0}};
    for (int p = 0; p < DS_CONV_PRECISIONS; p++) b.copies[p] = layout(d, i, op_type(p)).cudnn;
    return b;
}

/* Chooses op i of slot s again, from its precision in the plan down: the first usable
 * algorithm of the slot's lists (cuDNN's heuristics at this size, asked when first needed)
 * whose copies and listed workspace fit the slot's limit, and then whose exact workspace at
 * this size fits too (one over it is ruled out, and the next one taken). Sets the op's math
 * type. -1 with msg when none is left. */
static int slot_choose(conv_impl *p, conv_slot *s, const ds_conv_desc *d, int i, char *msg, size_t len)
{
    const ds_conv_budget b = op_budget(d, i, s->limit);
    conv_query_ctx ctx = {p, s, 0};
    for (;;) {
        if (ds_conv_choose_op(d, (ds_conv_op)i, p->choice[i].precision, g.deterministic, &b, cudnn_query, &ctx,
                              &s->list[i], &s->choice[i], msg, len))
            return -1;
        const ds_conv_choice *c = &s->choice[i];
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[i], cudnn_math(c->math)));
        size_t need = op_workspace(p, s, i), room = s->limit - b.copies[c->precision];
        if (need <= room) {
            s->cudnn_ws[i] = need;
            return 0;
        }
        char why[160];
        snprintf(why, sizeof why, "algo %d needs %zu bytes of workspace at this size, %zu listed", c->algo, need,
                 c->memory);
        if (ds_conv_list_rule_out(&s->list[i], c->precision, c->algo, why))
            ds_die("CUDA conv: algorithm id %d is beyond what a plan can rule out", c->algo);
    }
}

/* Sets up slot s of plan p (planned for `planned`) for d's n, h and w within `limit`
 * workspace bytes: descriptors for that size, and for each op the plan's algorithm when its
 * copies and workspace at this size fit, else another (slot_choose: a short batch or a
 * smaller input can change what an algorithm needs). A slot of the planned size keeps the
 * plan's answers for later choices. */
static void slot_set_up(conv_impl *p, conv_slot *s, const ds_conv_desc *d, const ds_conv_desc *planned,
                        size_t limit)
{
    char name[CONV_NAME];
    slot_describe(s, d);
    memcpy(s->choice, p->choice, sizeof s->choice);
    s->limit = limit;
    int same = d->n == planned->n && d->h == planned->h && d->w == planned->w;
    for (int i = 0; i < DS_CONV_OPS; i++) {
        s->ran[i] = 0;
        if (same) s->list[i] = p->list[i];
        else memset(&s->list[i], 0, sizeof s->list[i]);
    }
    slot_set_math(s);
    int changed = 0;
    for (int i = 0; i < DS_CONV_OPS; i++) {
        s->cudnn_ws[i] = 0;
        if (!s->choice[i].needed) continue;
        /* the op's copies at this size, then cuDNN's workspace in what is left */
        size_t lead = layout(d, i, op_type(s->choice[i].precision)).cudnn;
        size_t need = op_workspace(p, s, i);
        if (lead <= limit && need <= limit - lead) {
            s->cudnn_ws[i] = need;
            continue;
        }
        char msg[1024];
        if (slot_choose(p, s, d, i, msg, sizeof msg))
            ds_die("CUDA conv %s, --precision %s: within the %zu bytes planned: %s", conv_name(d, name, sizeof name),
                   ds_precision_name(g.precision), limit, msg);
        changed = 1;
    }
    if (changed) plan_report(d, s->choice, "at this size");
}

/* cuDNN's answer when an algorithm cannot run this call although it was listed (the
 * heuristics' guess was wrong for this configuration, or it refuses a setting such as beta
 * = 1): the next one may. */
static int runs_elsewhere(cudnnStatus_t st)
{
    int cat = CUDNN_STATUS_CATEGORY(st);
    return cat == CUDNN_STATUS_NOT_SUPPORTED || cat == CUDNN_STATUS_EXECUTION_FAILED || cat == CUDNN_STATUS_BAD_PARAM;
}

/* The plan and slot that run d (its n), set up on first use. */
typedef struct { conv_impl *p; conv_slot *s; } conv_run;

static conv_run plan_get(const ds_conv_desc *d)
{
    char why[160], name[CONV_NAME];
    size_t limit = 0;
    ds_conv_plan *plan = ds_conv_plans_lookup(&plans, d, g.precision, g.deterministic, &limit, why, sizeof why);
    if (!plan)   /* its workspace was never counted: running it could overrun the arena */
        ds_die("CUDA conv %s: %s", conv_name(d, name, sizeof name), why);
    int fresh = 0, k = ds_conv_plan_slot_for(&plans, plan, d, &fresh);
    conv_run run = {(conv_impl *)plan->impl, &((conv_impl *)plan->impl)->slot[k]};
    if (fresh) slot_set_up(run.p, run.s, d, &plan->d, limit);
    return run;
}

/* Issues op i of run r: issue() makes the op's copies for its choice of the moment and calls
 * cuDNN once. On the op's first run at the slot's size, an algorithm cuDNN will not run
 * (runs_elsewhere) is ruled out and the next usable one is issued, with a warning naming the
 * convolution, the op and both algorithms; issuing again computes what the first would have
 * (NOT_SUPPORTED and BAD_PARAM come before anything runs; EXECUTION_FAILED is a kernel that
 * could not launch, which writes nothing: only an algorithm of several kernels whose later
 * one failed could have added part of a result into an output it accumulates into, beta =
 * 1, and that is not undone). Stops the program when none is left, and on any failure once
 * the op has run at this size. */
template <typename Issue>
static void conv_issue(conv_run *r, const ds_conv_desc *d, int i, Issue issue)
{
    char name[CONV_NAME], msg[1024], last[512];
    for (;;) {
        cudnnStatus_t st = issue();
        if (st == CUDNN_STATUS_SUCCESS) {
            r->s->ran[i] = 1;
            return;
        }
        last[0] = 0;
        cudnnGetLastErrorString(last, sizeof last);
        const ds_conv_choice old = r->s->choice[i];
        const char *op = ds_conv_op_name((ds_conv_op)i);
        conv_name(d, name, sizeof name);
        if (r->s->ran[i] || !runs_elsewhere(st))
            ds_die("CUDA conv %s: %s algo %d (%s): %s%s%s", name, op, old.algo,
                   ds_precision_name((ds_precision)old.precision), cudnnGetErrorString(st), last[0] ? ": " : "", last);
        /* a launch that failed inside cuDNN leaves its error for the next launch's check:
         * cleared here; a fault of the context itself (every later call fails) is not the
         * algorithm's, and stops here with both messages */
        cudaError_t e = cudaGetLastError(), q = cudaStreamQuery(g.stream);
        if (q != cudaSuccess && q != cudaErrorNotReady)
            ds_die("CUDA conv %s: %s algo %d failed when run (%s%s%s), and the device then: %s", name, op, old.algo,
                   cudnnGetErrorString(st), e != cudaSuccess ? ", " : "", e != cudaSuccess ? cudaGetErrorString(e) : "",
                   cudaGetErrorString(q));
        char why[160];
        snprintf(why, sizeof why, "algo %d failed when run: %s", old.algo, cudnnGetErrorString(st));
        if (ds_conv_list_rule_out(&r->s->list[i], old.precision, old.algo, why))
            ds_die("CUDA conv %s: %s algo %d failed when run (%s), an id beyond what a plan can rule out", name, op,
                   old.algo, cudnnGetErrorString(st));
        if (slot_choose(r->p, r->s, d, i, msg, sizeof msg))
            ds_die("CUDA conv %s, --precision %s%s: %s algo %d (%s) failed when run (%s%s%s), and no other is left "
                   "within the %zu bytes planned: %s",
                   name, ds_precision_name(g.precision), g.deterministic ? " --deterministic" : "", op, old.algo,
                   ds_precision_name((ds_precision)old.precision), cudnnGetErrorString(st), last[0] ? ": " : "",
                   last, r->s->limit, msg);
        const ds_conv_choice *now = &r->s->choice[i];
        ds_warn("CUDA conv %s: %s algo %d (%s, %s math) failed when run (%s%s%s); running algo %d (%s, %s math) "
                "instead",
                name, op, old.algo, ds_precision_name((ds_precision)old.precision), ds_conv_math_name(old.math),
                cudnnGetErrorString(st), last[0] ? ": " : "", last, now->algo,
                ds_precision_name((ds_precision)now->precision), ds_conv_math_name(now->math));
    }
}

/* One op of a run: its algorithm, the type it computes in, the descriptor index of that
 * type, and its workspace layout for the batch actually run. */
typedef struct {
    const ds_conv_choice *c;
    ds_dtype ct;
    int t;
    conv_layout l;
    char *ws;
} conv_op_run;

static conv_op_run op_run(const conv_run *r, const ds_conv_desc *d, int op, void *ws)
{
    const ds_conv_choice *c = &r->s->choice[op];
    ds_dtype ct = op_type(c->precision);
    conv_op_run o = {c, ct, type_index(c->precision), layout(d, op, ct), (char *)ws};
    return o;
}

/* dst (n elements of type `to`) = src (the other type), rounded to nearest even into bf16 */
static void cast(void *dst, ds_dtype to, const void *src, size_t n)
{
    if (to == DS_BF16) ds_cuda_to_bf16(dst, (const float *)src, n);
    else ds_cuda_from_bf16((float *)dst, src, n, 0);
}

/* What cuDNN reads for an input of n elements: x where it is, or its copy at `at`, made now. */
static const void *read_as(const conv_op_run *o, const void *x, size_t at, size_t n)
{
    if (at == NO_COPY) return x;
    cast(o->ws + at, o->ct, x, n);
    return o->ws + at;
}

/* Where cuDNN writes an output: y itself, or its copy at `at` (cast back by write_back). */
static void *write_to(const conv_op_run *o, void *y, size_t at) { return at == NO_COPY ? y : o->ws + at; }

static void write_back(const conv_op_run *o, void *y, ds_dtype y_t, size_t at, size_t n)
{
    if (at != NO_COPY) cast(y, y_t, o->ws + at, n);
}

/* The two backward ops of a convolution take the same dout, and the model calls one right
 * after the other (conv_bwd_weight, then conv_bwd_data) with the same workspace. When both
 * compute in a type dout is not stored in (float32 dout under bf16 arithmetic, or a bf16
 * dout under float32 arithmetic), the first copies dout to the start of the workspace and
 * leaves a note; the second, seeing the same dout, convolution (types included), workspace
 * and type, skips the copy. The model's bf16 storage under bf16 arithmetic copies no dout,
 * and leaves no note. Every other call that could change the copy or dout (any other
 * convolution op, upload, zero, copy) drops the note, and it is used only once. */
static struct { const void *dout; void *ws; ds_conv_desc d; ds_dtype ct; } dout_copy;

static void dout_copy_drop(void) { dout_copy.dout = NULL; }

static const void *dout_read(const conv_op_run *o, const void *dout, const ds_conv_desc *d)
{
    if (o->l.out == NO_COPY) {
        dout_copy_drop();
        return dout;
    }
    if (dout_copy.dout == dout && dout_copy.ws == o->ws && dout_copy.ct == o->ct &&
        !memcmp(&dout_copy.d, d, sizeof *d)) {
        dout_copy_drop();
        return o->ws + o->l.out;
    }
    dout_copy.dout = dout, dout_copy.ws = o->ws, dout_copy.d = *d, dout_copy.ct = o->ct;
    return read_as(o, dout, o->l.out, n_out(d));
}

/* --deterministic: a micro-batch's weight gradient is computed into grad_tmp (beta = 0), then
 * added to the gradient by ds_cuda_add, one rounding the same on every micro-batch, so that
 * --accum A adds the micro-batches in order as W ranks' reduction does; cuDNN's and cuBLAS's
 * beta = 1 would add it in their own way (a split-K algorithm may add partial sums into dw).
 * Grown to the largest tensor asked for, which happens in the first step only (the queued
 * work that reads the old buffer is waited for first). */
static float *grad_tmp(size_t floats)
{
    if (floats > g.grad_tmp_floats) {
        cudaCheck(cudaStreamSynchronize(g.stream));
        if (g.grad_tmp) cudaCheck(cudaFree(g.grad_tmp));
        g.grad_tmp = NULL;
        cudaCheck(cudaMalloc((void **)&g.grad_tmp, floats * sizeof(float)));
        g.grad_tmp_floats = floats;
    }
    return g.grad_tmp;
}

/* out [n,p,q,k] = conv(in [n,h,w,c], w [k,r,s,c]) */
static void cuda_conv_fwd(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws)
{
    conv_run r = plan_get(d);
    const float one = 1, zero = 0;
    dout_copy_drop();
    conv_issue(&r, d, DS_CONV_FWD, [&]() {
        conv_op_run o = op_run(&r, d, DS_CONV_FWD, ws);
        const void *x = read_as(&o, in, o.l.in, n_in(d)), *k = read_as(&o, w, o.l.w, n_w(d));
        void *y = write_to(&o, out, o.l.out);
        cudnnStatus_t st = cudnnConvolutionForward(g.cudnn, &one, r.s->x[o.t], x, r.p->w[o.t], k,
                                                   r.s->conv[DS_CONV_FWD], (cudnnConvolutionFwdAlgo_t)o.c->algo,
                                                   o.ws + o.l.cudnn, r.s->cudnn_ws[DS_CONV_FWD], &zero, r.s->y[o.t], y);
        if (st == CUDNN_STATUS_SUCCESS) write_back(&o, out, d->out_t, o.l.out, n_out(d));
        return st;
    });
}

/* din [n,h,w,c] = conv_transpose(dout [n,p,q,k], w), or += with accumulate */
static void cuda_conv_bwd_data(void *din, const void *dout, const void *w, const ds_conv_desc *d, int accumulate,
                               void *ws)
{
    conv_run r = plan_get(d);
    char name[CONV_NAME];
    if (!r.s->choice[DS_CONV_BWD_DATA].needed)
        ds_die("CUDA conv %s: backward-data asked of a convolution planned without it (its input needs no "
               "gradient)", conv_name(d, name, sizeof name));
    const float one = 1, zero = 0;
    conv_issue(&r, d, DS_CONV_BWD_DATA, [&]() {
        conv_op_run o = op_run(&r, d, DS_CONV_BWD_DATA, ws);
        const void *dy = dout_read(&o, dout, d), *k = read_as(&o, w, o.l.w, n_w(d));
        void *dx = write_to(&o, din, o.l.in);
        /* din stored in the type cuDNN computes in: beta = 1 adds the result to it in cuDNN's
         * own epilogue, with no pass of ours over din */
        const float *beta = accumulate && o.l.in == NO_COPY ? &one : &zero;
        cudnnStatus_t st = cudnnConvolutionBackwardData(
            g.cudnn, &one, r.p->w[o.t], k, r.s->y[o.t], dy, r.s->conv[DS_CONV_BWD_DATA],
            (cudnnConvolutionBwdDataAlgo_t)o.c->algo, o.ws + o.l.cudnn, r.s->cudnn_ws[DS_CONV_BWD_DATA], beta,
            r.s->x[o.t], dx);
        if (st != CUDNN_STATUS_SUCCESS) return st;
        if (!accumulate || o.l.in == NO_COPY) {
            write_back(&o, din, d->in_t, o.l.in, n_in(d));
        } else if (d->in_t == DS_F32) {
            /* computed in the other type: the result rounded to din's storage, then added; a
             * bf16 result widens exactly, so it is added in one pass */
            ds_cuda_from_bf16((float *)din, o.ws + o.l.in, n_in(d), 1);
        } else {
            cast(o.ws + o.l.sum, DS_BF16, o.ws + o.l.in, n_in(d));
            ds_cuda_add(din, o.ws + o.l.sum, n_in(d), DS_BF16);
        }
        return st;
    });
}

/* dw [k,r,s,c] (float32) += correlation(in, dout) */
static void cuda_conv_bwd_weight(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws)
{
    conv_run r = plan_get(d);
    const float one = 1, zero = 0;
    conv_issue(&r, d, DS_CONV_BWD_FILTER, [&]() {
        conv_op_run o = op_run(&r, d, DS_CONV_BWD_FILTER, ws);
        const cudnnConvolutionBwdFilterAlgo_t algo = (cudnnConvolutionBwdFilterAlgo_t)o.c->algo;
        const void *dy = dout_read(&o, dout, d), *x = read_as(&o, in, o.l.in, n_in(d));
        if (o.l.w == NO_COPY && !g.deterministic)   /* float32 arithmetic: beta = 1 accumulates */
            return cudnnConvolutionBackwardFilter(g.cudnn, &one, r.s->x[o.t], x, r.s->y[o.t], dy,
                                                  r.s->conv[DS_CONV_BWD_FILTER], algo, o.ws + o.l.cudnn,
                                                  r.s->cudnn_ws[DS_CONV_BWD_FILTER], &one, r.p->w[o.t], dw);
        if (o.l.w == NO_COPY) {   /* --deterministic: this micro-batch's gradient, then added (grad_tmp) */
            float *tmp = grad_tmp(n_w(d));
            cudnnStatus_t st = cudnnConvolutionBackwardFilter(g.cudnn, &one, r.s->x[o.t], x, r.s->y[o.t], dy,
                                                              r.s->conv[DS_CONV_BWD_FILTER], algo, o.ws + o.l.cudnn,
                                                              r.s->cudnn_ws[DS_CONV_BWD_FILTER], &zero, r.p->w[o.t],
                                                              tmp);
            if (st == CUDNN_STATUS_SUCCESS) ds_cuda_add(dw, tmp, n_w(d), DS_F32);
            return st;
        }
        /* bf16: this micro-batch's gradient in bf16, added to the float32 gradient (autocast's rule) */
        cudnnStatus_t st = cudnnConvolutionBackwardFilter(g.cudnn, &one, r.s->x[o.t], x, r.s->y[o.t], dy,
                                                          r.s->conv[DS_CONV_BWD_FILTER], algo, o.ws + o.l.cudnn,
                                                          r.s->cudnn_ws[DS_CONV_BWD_FILTER], &zero, r.p->w[o.t],
                                                          o.ws + o.l.w);
        if (st == CUDNN_STATUS_SUCCESS) ds_cuda_from_bf16(dw, o.ws + o.l.w, n_w(d), 1);
        return st;
    });
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
    /* dw [o,i] += dout^T [o,n] in [n,i]:  dw^T (i x o) += in^T (i x n) * dout (n x o);
     * --deterministic: into grad_tmp, then added (as the convolutions' weights) */
    if (!g.deterministic) {
        cublasCheck(cublasSgemm(g.cublas, CUBLAS_OP_N, CUBLAS_OP_T, i, o, n, &one, in, i, dout, o, &one, dw, i));
    } else {
        float *tmp = grad_tmp((size_t)i * o);
        cublasCheck(cublasSgemm(g.cublas, CUBLAS_OP_N, CUBLAS_OP_T, i, o, n, &one, in, i, dout, o, &zero, tmp, i));
        ds_cuda_add(dw, tmp, (size_t)i * o, DS_F32);
    }
    if (db) ds_cuda_bias_bwd(db, dout, n, o);
}

/* ---- gradient reduction: NCCL on its own stream, each bucket behind the compute work that
 * produced it (an event), so backward goes on while the bucket travels ----
 *
 * By default a bucket is one ncclAllReduce, summed in NCCL's order (the ring, the channels,
 * the algorithm and the size decide it). Under --deterministic (g.ordered) NCCL only moves
 * data and ds adds, in the CPU's order, so the sum is the same bits for any number of GPUs
 * and any NCCL: the bucket is cut into W chunks, chunk j = [n j / W, n (j + 1) / W); rank r
 * owns chunk r. (1) All-to-all, one group of sends and receives: chunk j of every rank's
 * buffer to rank j, into the staging; (2) rank r adds the W copies of its chunk in rank
 * order, ((c0 + c1) + c2) + ... (ordered_sum_body), into its buffer; (3) the sums: to_all,
 * an all-gather (a group: its chunk to every rank, theirs into its buffer); to rank 0 alone
 * (one micro-batch of several in a step: backend.h), a gather to rank 0 (the others' sums
 * stay in their staging, their buffers as they were). Per rank and bucket of B bytes, (1)
 * sends and receives (W - 1) B / W and (3) as much: 2 (W - 1) B / W each way, a ring
 * allreduce's bytes; one kernel and two NCCL groups where the default has one collective. */

/* The staging holds W chunks of the largest bucket; grown (after the reduction stream has
 * finished with the old one) only when a larger bucket comes, in the first step. */
static float *stage_reserve(size_t floats)
{
    if (floats > g.stage_floats) {
        ds_nccl_sync(g.comm_stream, ds_comm_timeout());
        if (g.stage) cudaCheck(cudaFree(g.stage));
        g.stage = NULL;
        cudaCheck(cudaMalloc((void **)&g.stage, floats * sizeof(float)));
        g.stage_floats = floats;
    }
    return g.stage;
}

static void ordered_reduce_start(float *buf, size_t n, int to_all)
{
    const int w = ds_comm_world(), r = ds_comm_rank();
    const size_t cmax = (n + w - 1) / w, mlo = n * r / w, mn = n * (r + 1) / w - mlo;
    float *stage = g.stage;   /* reserved by cuda_reduce_start */
    for (int j = 0; j < w; j++) {
        size_t lo = n * j / w;
        g.x_send[j] = buf + lo, g.x_send_n[j] = n * (j + 1) / w - lo;
        g.x_recv[j] = stage + (size_t)j * cmax, g.x_recv_n[j] = mn;
    }
    ds_nccl_exchange_f32(g.x_send, g.x_send_n, g.x_recv, g.x_recv_n, g.comm_stream);
    float *sum = to_all || r == 0 ? buf + mlo : stage + (size_t)r * cmax;
    ds_cuda_ordered_sum(sum, buf + mlo, stage, cmax, w, r, mn, g.comm_stream);
    for (int j = 0; j < w; j++) {
        size_t lo = n * j / w, len = n * (j + 1) / w - lo;
        int give = to_all || j == 0, take = to_all || r == 0;
        g.x_send[j] = give ? sum : NULL, g.x_send_n[j] = give ? mn : 0;
        g.x_recv[j] = take ? buf + lo : NULL, g.x_recv_n[j] = take ? len : 0;
    }
    ds_nccl_exchange_f32(g.x_send, g.x_send_n, g.x_recv, g.x_recv_n, g.comm_stream);
}

static void cuda_reduce_start(float *buf, size_t n, int to_all)
{
    /* NCCL's allreduce sums in its own order (ordered_reduce = 0): only whole sums */
    if (!to_all && !g.ordered) ds_die("CUDA: a reduction to rank 0 alone was asked of NCCL");
    if (!g.nccl || (g.ordered && ds_comm_world() == 1)) return;
    /* before the event: growing waits for the reduction stream, not for this bucket's producer */
    if (g.ordered) stage_reserve((size_t)ds_comm_world() * ((n + ds_comm_world() - 1) / ds_comm_world()));
    cudaCheck(cudaEventRecord(g.produced, g.stream));
    cudaCheck(cudaStreamWaitEvent(g.comm_stream, g.produced, 0));
    if (g.ordered) ordered_reduce_start(buf, n, to_all);
    else ds_nccl_allreduce_sum_f32(buf, n, g.comm_stream);
}

/* The host waits, polling NCCL, so a peer that died ends the job here instead of hanging
 * the next synchronisation; what is queued afterwards runs after the sums. A peer that is
 * alive but stuck raises no NCCL error (NVLink and P2P transports see none), so the wait
 * has comm's limit too (--comm-timeout). */
static void cuda_reduce_wait(void)
{
    if (g.nccl) ds_nccl_sync(g.comm_stream, ds_comm_timeout());
}

/* What sums the gradients (backend.h) */
static const char *cuda_reduction(void)
{
    return g.ordered ? "ordered" : g.nccl ? "nccl-allreduce" : "accumulate";
}

static ds_backend cuda_backend = {
    .name = "cuda",
    .host_memory = 0,
    .precision = DS_PRECISION_BF16,   /* both set by ds_cuda_select */
    .deterministic = 0,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .zero = cuda_zero,
    .copy = cuda_copy,
    .sync = cuda_sync,
    .mark = cuda_mark,
    .mark_wait = cuda_mark_wait,
    .stream_wait = cuda_stream_wait,
    .mark_seconds = cuda_mark_seconds,
    .clock_alloc = cuda_clock_alloc,
    .clock_free = cuda_clock_free,
    .clock_record = cuda_clock_record,
    .clock_seconds = cuda_clock_seconds,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .upload_async = cuda_upload_async,
    .download_async = cuda_download_async,
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
    .add = ds_cuda_add,
    .to_bf16 = ds_cuda_to_bf16,
    .normalize_u8 = ds_cuda_normalize_u8,
    .resized_crop_u8 = ds_cuda_resized_crop_u8,
    .reduce_start = cuda_reduce_start,
    .reduce_wait = cuda_reduce_wait,
    .ordered_reduce = 0,   /* 1 under --deterministic (ds_cuda_select) */
    .kernel_set = NULL,
    .reduction = cuda_reduction,
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
    /* --deterministic: the ordered reduction; the micro-batches of one rank add in order too */
    g.ordered = g.deterministic;
    cuda_backend.ordered_reduce = g.ordered;
    if (g.nccl && !g.x_send) {
        int w = ds_comm_world();
        g.x_send = (float **)calloc((size_t)w, sizeof *g.x_send);
        g.x_recv = (float **)calloc((size_t)w, sizeof *g.x_recv);
        g.x_send_n = (size_t *)calloc((size_t)w, sizeof *g.x_send_n);
        g.x_recv_n = (size_t *)calloc((size_t)w, sizeof *g.x_recv_n);
        if (!g.x_send || !g.x_recv || !g.x_send_n || !g.x_recv_n) ds_die("out of memory");
    }
    return &cuda_backend;
}
