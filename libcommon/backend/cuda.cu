/* backend/cuda: the ds_backend interface on one GPU. Convolutions through cuDNN (NHWC,
 * algorithms found once per shape and cached), the linear layer through cuBLAS, the rest
 * in cuda_kernels.cu. Everything runs on one stream, NCCL on a second; see cuda.h for precision. */
#include <cublas_v2.h>
#include <cudnn.h>
#include <string.h>

#include "cuda_check.h"
extern "C" {
#include "backend.h"
#include "cuda.h"
#include "comm.h"
#include "cuda_kernels.h"
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

/* As on the CPU, src may be reused as soon as upload returns: wait for the copy (from
 * pageable memory the wait is short, the copy is staged before cudaMemcpyAsync returns). */
static void cuda_upload(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.stream));
    cudaCheck(cudaStreamSynchronize(g.stream));
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

/* One plan per (shape, precision, determinism): descriptors, the algorithm of each of the
 * three ops and the workspace they need. Plans are made by conv_workspace (the model's
 * planning pass) and only looked up afterwards. */
typedef struct {
    ds_conv_desc d;
    ds_precision precision;
    int deterministic;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv[3];   /* fwd, bwd data, bwd filter: own math types */
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t cudnn_ws;          /* the largest of the three algorithms' workspaces */
    size_t bf16_bytes;        /* bf16 copies of in, w, out placed before it (bf16 only) */
} conv_plan;

static conv_plan *plans;
static int nplans, cap_plans;

/* An algorithm may use at most this much workspace: the arena is sized from the largest. */
#define CONV_WS_LIMIT ((size_t)1 << 30)

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

static conv_plan *plan_find(const ds_conv_desc *d)
{
    for (int i = 0; i < nplans; i++)
        if (!memcmp(&plans[i].d, d, sizeof *d) && plans[i].precision == g.precision &&
            plans[i].deterministic == g.deterministic)
            return &plans[i];
    return NULL;
}

/* Picks the fastest result cuDNN measured that succeeded, fits the limit, is deterministic
 * when asked, and uses no tensor cores under fp32. */
#define PICK(results, count, out, what, d)                                                   \
    do {                                                                                     \
        int found_ = 0;                                                                      \
        for (int i_ = 0; i_ < (count) && !found_; i_++) {                                    \
            if (results[i_].status != CUDNN_STATUS_SUCCESS || results[i_].memory > CONV_WS_LIMIT) continue; \
            if (g.deterministic && results[i_].determinism != CUDNN_DETERMINISTIC) continue; \
            if (g.precision == DS_PRECISION_FP32 && results[i_].mathType == CUDNN_TENSOR_OP_MATH) continue; \
            (out) = results[i_].algo;                                                        \
            math_[op_] = results[i_].mathType;                                               \
            ws_ = results[i_].memory > ws_ ? results[i_].memory : ws_;                       \
            found_ = 1;                                                                      \
        }                                                                                    \
        if (!found_)                                                                         \
            ds_die("cuDNN has no usable %s algorithm for conv %dx%dx%dx%d -> %d (%dx%d/%d)%s", \
                   what, d->n, d->h, d->w, d->c, d->k, d->r, d->s, d->stride,               \
                   g.deterministic ? " that is deterministic" : "");                         \
    } while (0)

static conv_plan *plan_make(const ds_conv_desc *d)
{
    if (nplans == cap_plans) {
        int cap = cap_plans ? 2 * cap_plans : 32;
        conv_plan *p = (conv_plan *)realloc(plans, cap * sizeof *p);
        if (!p) ds_die("out of memory for convolution plans");
        plans = p, cap_plans = cap;
    }
    conv_plan *p = &plans[nplans];
    memset(p, 0, sizeof *p);
    p->d = *d;
    p->precision = g.precision;
    p->deterministic = g.deterministic;
    cudnnDataType_t type = g.precision == DS_PRECISION_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    /* x [n,h,w,c], y [n,p,q,k], w [k,r,s,c]: cuDNN's NHWC filter layout is exactly KRSC */
    cudnnCheck(cudnnCreateTensorDescriptor(&p->x));
    cudnnCheck(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, type, d->n, d->c, d->h, d->w));
    cudnnCheck(cudnnCreateTensorDescriptor(&p->y));
    cudnnCheck(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, type, d->n, d->k, d->p, d->q));
    cudnnCheck(cudnnCreateFilterDescriptor(&p->w));
    cudnnCheck(cudnnSetFilter4dDescriptor(p->w, type, CUDNN_TENSOR_NHWC, d->k, d->c, d->r, d->s));
    /* fp32: FMA only (DEFAULT would allow TF32 on Ampere and later); tf32/bf16: tensor cores */
    cudnnMathType_t math = g.precision == DS_PRECISION_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    for (int i = 0; i < 3; i++) {
        cudnnCheck(cudnnCreateConvolutionDescriptor(&p->conv[i]));
        cudnnCheck(cudnnSetConvolution2dDescriptor(p->conv[i], d->pad, d->pad, d->stride, d->stride, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        cudnnCheck(cudnnSetConvolutionMathType(p->conv[i], math));
    }
    int op_ = 0, n = 0;
    size_t ws_ = 0;
    cudnnMathType_t math_[3];
    /* cudnnFind* runs every algorithm once on buffers it allocates itself: exact choices for
     * this GPU, paid once per shape at planning time. Timing can rank two algorithms either
     * way from one process to the next, so under --deterministic the choice comes from
     * cuDNN's heuristics instead (same arguments): a pure function of the shape, the GPU and
     * the cuDNN version, so a resumed run computes with the algorithms the first run used. */
#define CHOOSE(op, ...) (g.deterministic ? cudnnGet##op##Algorithm_v7(__VA_ARGS__) : cudnnFind##op##Algorithm(__VA_ARGS__))
    cudnnConvolutionFwdAlgoPerf_t rf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnCheck(CHOOSE(ConvolutionForward, g.cudnn, p->x, p->w, p->conv[0], p->y,
                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, rf));
    PICK(rf, n, p->fwd, "forward", d);
    op_ = 1;
    cudnnConvolutionBwdDataAlgoPerf_t rd[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnCheck(CHOOSE(ConvolutionBackwardData, g.cudnn, p->w, p->y, p->conv[1], p->x,
                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, rd));
    PICK(rd, n, p->bwd_data, "backward-data", d);
    op_ = 2;
    cudnnConvolutionBwdFilterAlgoPerf_t rw[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    cudnnCheck(CHOOSE(ConvolutionBackwardFilter, g.cudnn, p->x, p->y, p->conv[2], p->w,
                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, rw));
    PICK(rw, n, p->bwd_filter, "backward-filter", d);
#undef CHOOSE
    /* run each op with the math type its algorithm was measured with */
    for (int i = 0; i < 3; i++) cudnnCheck(cudnnSetConvolutionMathType(p->conv[i], math_[i]));
    p->cudnn_ws = ws_;
    if (g.precision == DS_PRECISION_BF16) {
        size_t in = (size_t)d->n * d->h * d->w * d->c, w = (size_t)d->k * d->r * d->s * d->c,
               out = (size_t)d->n * d->p * d->q * d->k;
        p->bf16_bytes = align256(in * 2) + align256(w * 2) + align256(out * 2);
    }
    nplans++;
    return p;
}

static size_t cuda_conv_workspace(const ds_conv_desc *d)
{
    conv_plan *p = plan_find(d);
    if (!p) p = plan_make(d);
    return p->bf16_bytes + p->cudnn_ws;
}

static conv_plan *plan_get(const ds_conv_desc *d)
{
    conv_plan *p = plan_find(d);
    if (!p)   /* its workspace was never counted: running it could overrun the arena */
        ds_die("CUDA conv %dx%dx%dx%d -> %d (%dx%d/%d) was not planned with conv_workspace "
               "(or the precision changed after planning)", d->n, d->h, d->w, d->c, d->k, d->r, d->s, d->stride);
    return p;
}

/* Workspace layout under bf16: [in bf16][w bf16][out bf16][cuDNN workspace]. */
typedef struct { void *in, *w, *out, *cudnn; } conv_ws;

static conv_ws ws_split(const conv_plan *p, void *ws)
{
    const ds_conv_desc *d = &p->d;
    conv_ws s = {NULL, NULL, NULL, ws};
    if (p->precision != DS_PRECISION_BF16) return s;
    char *b = (char *)ws;
    s.in = b;
    b += align256((size_t)d->n * d->h * d->w * d->c * 2);
    s.w = b;
    b += align256((size_t)d->k * d->r * d->s * d->c * 2);
    s.out = b;
    b += align256((size_t)d->n * d->p * d->q * d->k * 2);
    s.cudnn = b;
    return s;
}

static size_t n_in(const ds_conv_desc *d) { return (size_t)d->n * d->h * d->w * d->c; }
static size_t n_w(const ds_conv_desc *d) { return (size_t)d->k * d->r * d->s * d->c; }
static size_t n_out(const ds_conv_desc *d) { return (size_t)d->n * d->p * d->q * d->k; }

/* out [n,p,q,k] = conv(in [n,h,w,c], w [k,r,s,c]) */
static void cuda_conv_fwd(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws)
{
    conv_plan *p = plan_get(d);
    conv_ws s = ws_split(p, ws);
    const float one = 1, zero = 0;
    if (p->precision == DS_PRECISION_BF16) {
        ds_cuda_to_bf16(s.in, in, n_in(d));
        ds_cuda_to_bf16(s.w, w, n_w(d));
        cudnnCheck(cudnnConvolutionForward(g.cudnn, &one, p->x, s.in, p->w, s.w, p->conv[0], p->fwd,
                                           s.cudnn, p->cudnn_ws, &zero, p->y, s.out));
        ds_cuda_from_bf16(out, s.out, n_out(d), 0);
        return;
    }
    cudnnCheck(cudnnConvolutionForward(g.cudnn, &one, p->x, in, p->w, w, p->conv[0], p->fwd,
                                       ws, p->cudnn_ws, &zero, p->y, out));
}

/* din [n,h,w,c] = conv_transpose(dout [n,p,q,k], w) (overwritten) */
static void cuda_conv_bwd_data(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws)
{
    conv_plan *p = plan_get(d);
    conv_ws s = ws_split(p, ws);
    const float one = 1, zero = 0;
    if (p->precision == DS_PRECISION_BF16) {
        ds_cuda_to_bf16(s.out, dout, n_out(d));
        ds_cuda_to_bf16(s.w, w, n_w(d));
        cudnnCheck(cudnnConvolutionBackwardData(g.cudnn, &one, p->w, s.w, p->y, s.out, p->conv[1], p->bwd_data,
                                                s.cudnn, p->cudnn_ws, &zero, p->x, s.in));
        ds_cuda_from_bf16(din, s.in, n_in(d), 0);
        return;
    }
    cudnnCheck(cudnnConvolutionBackwardData(g.cudnn, &one, p->w, w, p->y, dout, p->conv[1], p->bwd_data,
                                            ws, p->cudnn_ws, &zero, p->x, din));
}

/* dw [k,r,s,c] += correlation(in, dout): beta = 1 accumulates, as the interface asks */
static void cuda_conv_bwd_weight(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws)
{
    conv_plan *p = plan_get(d);
    conv_ws s = ws_split(p, ws);
    const float one = 1, zero = 0;
    if (p->precision == DS_PRECISION_BF16) {
        /* this micro-batch's gradient in bf16, added to the fp32 gradient (autocast's rule) */
        ds_cuda_to_bf16(s.out, dout, n_out(d));
        ds_cuda_to_bf16(s.in, in, n_in(d));
        cudnnCheck(cudnnConvolutionBackwardFilter(g.cudnn, &one, p->x, s.in, p->y, s.out, p->conv[2], p->bwd_filter,
                                                  s.cudnn, p->cudnn_ws, &zero, p->w, s.w));
        ds_cuda_from_bf16(dw, s.w, n_w(d), 1);
        return;
    }
    cudnnCheck(cudnnConvolutionBackwardFilter(g.cudnn, &one, p->x, in, p->y, dout, p->conv[2], p->bwd_filter,
                                              ws, p->cudnn_ws, &one, p->w, dw));
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
 * the next synchronisation; what is queued afterwards runs after the sums. */
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
