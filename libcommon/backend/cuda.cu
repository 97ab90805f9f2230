/* backend/cuda: the ds_backend interface on one GPU: the device, memory and the pinned
 * staging ring, streams and marks, the linear layer through cuBLAS, the gradient reduction
 * (NCCL, or the ordered one) and the backend's table. The convolutions (cuDNN, algorithms
 * found once per shape and storage types and cached) are in cuda_conv.cu, the other ops in
 * cuda_kernels.cu. Everything runs on one stream, NCCL on a second; see cuda.h for
 * precision, storage and the casts that remain. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
extern "C" {
#include "cuda.h"
#include "comm.h"
#include "cuda_kernels.h"
}
#include "cuda_nccl.h"

ds_cuda_state ds_cuda_backend_state;

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
    /* One process per GPU: the rank's index on its node picks the device. Ranks share one
     * only when each sees every GPU of the node; where a launcher gives each rank its own
     * (CUDA_VISIBLE_DEVICES, one device seen per rank) that cannot be told from here, and
     * NCCL refuses ranks that do share one ("Duplicate GPU detected"). */
    g.device = ds_comm_local_rank() % count;
    if (ds_comm_local_size() > count && !getenv("CUDA_VISIBLE_DEVICES"))
        ds_warn("CUDA: %d ranks on this node share %d GPU(s)", ds_comm_local_size(), count);
    cudaCheck(cudaSetDevice(g.device));
    cudaCheck(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    cudnnCheck(cudnnCreate(&g.cudnn));
    cudnnCheck(cudnnSetStream(g.cudnn, g.stream));
    cublasCheck(cublasCreate(&g.cublas));
    cublasCheck(cublasSetStream(g.cublas, g.stream));
    cudaCheck(cudaMalloc(&g.cublas_ws, CUBLAS_WS_BYTES));
    cublasCheck(cublasSetWorkspace(g.cublas, g.cublas_ws, CUBLAS_WS_BYTES));
    cudaCheck(cudaMalloc(&g.scratch, DS_CUDA_SCRATCH_ALLOC));
    ds_cuda_kernels_init(g.scratch);
    cudaCheck(cudaStreamCreateWithFlags(&g.input_stream, cudaStreamNonBlocking));
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < DS_MARKS; i++) cudaCheck(cudaEventCreate(&g.mark_event[s][i]));
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
    ds_cuda_dout_copy_drop();
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
    ds_cuda_dout_copy_drop();
    cudaCheck(cudaMemsetAsync(p, 0, bytes, g.stream));
}

static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    ds_cuda_dout_copy_drop();
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
    ds_cuda_dout_copy_drop();
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.input_stream));
}

static void cuda_download_async(void *dst, const void *src, size_t bytes)
{
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g.stream));
}

/* --deterministic: a micro-batch's weight gradient is computed into grad_tmp (beta = 0), then
 * added to the gradient by ds_cuda_add, one rounding the same on every micro-batch, so that
 * --accum A adds the micro-batches in order as W ranks' reduction does; cuDNN's and cuBLAS's
 * beta = 1 would add it in their own way (a split-K algorithm may add partial sums into dw).
 * Grown to the largest tensor asked for, which happens in the first step only (the queued
 * work that reads the old buffer is waited for first). */
float *ds_cuda_grad_tmp(size_t floats)
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
        float *tmp = ds_cuda_grad_tmp((size_t)i * o);
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

/* ---- the step as a CUDA graph (backend.h's graph_begin) ----
 * Stream capture of the compute stream, in thread-local mode: a call of this thread that
 * CUDA cannot record (a synchronisation, an allocation, a pageable copy) fails loudly in
 * its check instead of running outside the graph. The multi-rank reduction is not
 * recorded (its NCCL stream, events and, under --deterministic, its staging): such a step
 * runs as calls. */

struct ds_graph {
    cudaGraphExec_t exec;
};

static int graph_refuse(const char *why)
{
    if (!g.graphs_said) ds_debug("CUDA: the training step runs as separate launches, not a CUDA graph: %s", why);
    g.graphs_said = 1;
    return -1;
}

static int cuda_graph_begin(void)
{
    if (!g.graphs) return graph_refuse("DS_CUDA_GRAPHS=0");
    if (g.nccl) return graph_refuse("the gradients are reduced over ranks (NCCL), which is not recorded");
    cudaError_t e = cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return graph_refuse(cudaGetErrorString(e));
    }
    return 0;
}

static ds_graph *cuda_graph_end(void)
{
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(g.stream, &graph);
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess) {
        e = cudaGraphInstantiate(&exec, graph, 0);
        cudaCheck(cudaGraphDestroy(graph));
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        ds_err("CUDA: the training step could not be recorded as a graph: %s (%s)", cudaGetErrorString(e),
               cudaGetErrorName(e));
        return NULL;
    }
    ds_graph *gr = (ds_graph *)calloc(1, sizeof *gr);
    if (!gr) ds_die("out of memory");
    gr->exec = exec;
    return gr;
}

static void cuda_graph_launch(ds_graph *gr)
{
    ds_cuda_dout_copy_drop();   /* the recorded convolutions may have left another note */
    cudaCheck(cudaGraphLaunch(gr->exec, g.stream));
}

static void cuda_graph_free(ds_graph *gr)
{
    if (!gr) return;
    cudaCheck(cudaGraphExecDestroy(gr->exec));
    free(gr);
}

static ds_backend cuda_backend = {
    .name = "cuda",
    .host_memory = 0,
    .precision = DS_PRECISION_BF16,   /* both set by ds_cuda_select */
    .deterministic = 0,
    .relu_mask = 1,
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
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
    .conv_workspace = ds_cuda_conv_workspace,
    .conv_fwd = ds_cuda_conv_fwd,
    .conv_bwd_data = ds_cuda_conv_bwd_data,
    .conv_bwd_weight = ds_cuda_conv_bwd_weight,
    .conv_fwd_bn = NULL,  /* the model runs conv_fwd, then bn_fwd_infer */
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
    .to_bf16 = ds_cuda_to_bf16_runs,
    .normalize_u8 = ds_cuda_normalize_u8,
    .resized_crop_u8 = ds_cuda_resized_crop_u8,
    .reduce_start = cuda_reduce_start,
    .reduce_wait = cuda_reduce_wait,
    .ordered_reduce = 0,   /* 1 under --deterministic (ds_cuda_select) */
    .reduce_stats = NULL,   /* NCCL reduces inside its streams */
    .kernel_set = NULL,
    .reduction = cuda_reduction,
};

/* DS_CUDA_GRAPHS: 1 (the default, and unset) records the training step as a CUDA graph, 0
 * queues its launches one by one (to compare the two on a GPU); read here only. */
static int graphs_switch(int *on)
{
    const char *v = getenv("DS_CUDA_GRAPHS");
    if (!v || !*v || !strcmp(v, "1")) return *on = 1, 0;
    if (!strcmp(v, "0")) return *on = 0, 0;
    return ds_err("DS_CUDA_GRAPHS=%s: expected 0 or 1", v);
}

extern "C" const ds_backend *ds_cuda_select(const ds_backend_opts *opts)
{
    if (bind_device()) return NULL;
    g.precision = opts->precision;
    g.deterministic = opts->deterministic != 0;
    if (graphs_switch(&g.graphs)) return NULL;
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
