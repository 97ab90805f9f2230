/* cudnn_fusion_probe: what cuDNN's fusion engines offer on this GPU for ResNet-50's
 * bottleneck convolutions, built through the backend graph API (the legacy convolution calls
 * ds makes are deprecated in cuDNN 9.19, its legacy fused-ops API with them). Decides whether
 * ds should fuse batch norm into cuDNN's convolutions (bench/GPU.md).
 *
 *   cudnn_fusion_probe [--dry-run] [--batch N] [--graphs abcde] [--seconds S] [--runs N]
 *
 * For each distinct bottleneck convolution (cudnn_fusion_table.h) in bf16 NHWC, float
 * accumulation, the graphs that apply to it:
 *   (a) conv + statistics (sum and sum of squares per channel of its output)
 *   (b) scale-bias-ReLU -> conv -> statistics (the norm before it applied on the way in)
 *   (c) scale-bias-ReLU -> wgrad
 *   (d) dgrad -> dReLU -> batch norm's weight gradients (and its dx coefficients)
 *   (e) wgrad with a float32 result
 * and for each: whether it finalizes, the engines cuDNN's heuristics (mode A) offer with their
 * numerical and behaviour notes, the first plan that finalizes (its build time and
 * workspace), the median of N runs (default 20) against the legacy call ds makes for the
 * same op (cudnnFind's first algorithm that succeeds, deterministic for the backward ops as
 * ds takes them in bf16), and whether 3 runs give the same bits (outputs set to 0xff first).
 * One table row a graph on stdout as it is done, then one verdict line per graph; at the
 * deadline (--seconds) the rest are listed as not reached. --dry-run lists every graph and
 * shape and needs no GPU. Unrun on a GPU so far: what it prints there is unverified. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudnn_fusion_table.h"

static int usage(void)
{
    fprintf(stderr, "usage: cudnn_fusion_probe [--dry-run] [--batch N] [--graphs abcde] [--seconds S] [--runs N]\n");
    return 2;
}

#if DS_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>

/* the table's note names follow cuDNN's values */
_Static_assert(CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC == FUSION_NOTE_NONDETERMINISTIC, "numerical note values");
_Static_assert(CUDNN_NUMERICAL_NOTE_TYPE_COUNT == sizeof fusion_numerical_names / sizeof *fusion_numerical_names,
               "numerical note names");
_Static_assert(CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION == FUSION_NOTE_RUNTIME_COMPILATION, "behaviour note values");
_Static_assert(CUDNN_BEHAVIOR_NOTE_TYPE_COUNT == sizeof fusion_behaviour_names / sizeof *fusion_behaviour_names,
               "behaviour note names");

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void print_answer(const fusion_answer *a, int n)
{
    char row[2048];
    fusion_row(row, sizeof row, a, n);
    fputs(row, stdout);
    fflush(stdout);
}

#define CUDA_OK(call)                                                                                           \
    do {                                                                                                        \
        cudaError_t e_ = (call);                                                                                \
        if (e_ != cudaSuccess) {                                                                                \
            fprintf(stderr, "cudnn_fusion_probe: error: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
                    cudaGetErrorString(e_));                                                                    \
            exit(1);                                                                                            \
        }                                                                                                       \
    } while (0)

/* A cuDNN call inside a graph's build: on failure, the answer records where and why, and
 * the build stops there (goto out). */
#define DNN(a, what, call)                                                                                      \
    do {                                                                                                        \
        cudnnStatus_t s_ = (call);                                                                              \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                                       \
            snprintf((a)->where, sizeof (a)->where, "%s", what);                                                \
            snprintf((a)->status, sizeof (a)->status, "%s", cudnnGetErrorString(s_));                           \
            goto out;                                                                                           \
        }                                                                                                       \
    } while (0)

static cudnnHandle_t dnn;
static cudaStream_t stream;

/* The descriptors of one graph, freed together. */
typedef struct {
    cudnnBackendDescriptor_t d[48];
    int n;
} pool;
static cudnnBackendDescriptor_t make(pool *p, cudnnBackendDescriptorType_t type)
{
    cudnnBackendDescriptor_t d = NULL;
    if (p->n == (int)(sizeof p->d / sizeof *p->d) || cudnnBackendCreateDescriptor(type, &d) != CUDNN_STATUS_SUCCESS)
        return NULL;
    return p->d[p->n++] = d;
}
static void pool_free(pool *p)
{
    while (p->n) cudnnBackendDestroyDescriptor(p->d[--p->n]);
}
#define SET(d, attr, type, count, ptr) cudnnBackendSetAttribute(d, attr, type, count, ptr)

/* The tensors' ids in the variant pack; virtual ones past 100. */
enum { T_X = 1, T_W, T_Y, T_SUM, T_SQSUM, T_SCALE, T_BIAS, T_DY, T_DW, T_DX, T_MEAN, T_INVSTD, T_DSCALE, T_DBIAS,
       T_EQ_DY, T_EQ_X, T_EQ_B, T_VIRTUAL = 100 };

/* An NHWC tensor (dims n, c, h, w in cuDNN's order; a filter's k, c, r, s) or a per-channel
 * one (n = h = w = 1). */
static cudnnStatus_t tensor(pool *p, cudnnBackendDescriptor_t *out, int64_t uid, cudnnDataType_t type, int64_t n,
                            int64_t c, int64_t h, int64_t w, int virt)
{
    cudnnBackendDescriptor_t d = make(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    if (!d) return CUDNN_STATUS_ALLOC_FAILED;
    int64_t dims[4] = {n, c, h, w}, strides[4] = {c * h * w, 1, w * c, c}, align = 16;
    bool v = virt;
    cudnnStatus_t s;
    if ((s = SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)) ||
        (s = SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims)) ||
        (s = SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides)) ||
        (s = SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)) ||
        (s = SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align)) ||
        (s = SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v)) || (s = cudnnBackendFinalize(d)))
        return s;
    *out = d;
    return CUDNN_STATUS_SUCCESS;
}

/* A pointwise operation y = mode(x[, b]), or for RELU_BWD dx = mode(dy, x). */
static cudnnStatus_t pointwise(pool *p, cudnnBackendDescriptor_t *op, cudnnPointwiseMode_t mode,
                               cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y)
{
    cudnnBackendDescriptor_t pw = make(p, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cudnnBackendDescriptor_t o = make(p, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!pw || !o) return CUDNN_STATUS_ALLOC_FAILED;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnStatus_t s;
    if ((s = SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)) ||
        (s = SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec)) || (s = cudnnBackendFinalize(pw)) ||
        (s = SET(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw)))
        return s;
    if (mode == CUDNN_POINTWISE_RELU_BWD) {
        if ((s = SET(o, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b)) ||
            (s = SET(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x)) ||
            (s = SET(o, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y)))
            return s;
    } else if ((s = SET(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x)) ||
               (b && (s = SET(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b))) ||
               (s = SET(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))) {
        return s;
    }
    if ((s = cudnnBackendFinalize(o))) return s;
    *op = o;
    return CUDNN_STATUS_SUCCESS;
}

/* A convolution operation of kind (forward, backward-data, backward-filter): a, b, c are
 * (x, w, y), (dx, w, dy) and (x, dw, dy). */
static cudnnStatus_t convolution(pool *p, cudnnBackendDescriptor_t *op, cudnnBackendDescriptorType_t kind,
                                 const fusion_shape *sh, cudnnBackendDescriptor_t t0, cudnnBackendDescriptor_t t1,
                                 cudnnBackendDescriptor_t t2)
{
    cudnnBackendDescriptor_t cd = make(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR), o = make(p, kind);
    if (!cd || !o) return CUDNN_STATUS_ALLOC_FAILED;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2, one[2] = {1, 1}, stride[2] = {sh->stride, sh->stride}, pad[2] = {sh->r / 2, sh->r / 2};
    float alpha = 1, beta = 0;
    cudnnStatus_t s;
    if ((s = SET(cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp)) ||
        (s = SET(cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)) ||
        (s = SET(cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims)) ||
        (s = SET(cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one)) ||
        (s = SET(cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride)) ||
        (s = SET(cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad)) ||
        (s = SET(cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad)) || (s = cudnnBackendFinalize(cd)))
        return s;
    cudnnBackendAttributeName_t names[3][6] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
    int k = kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR       ? 0
            : kind == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ? 1
                                                                                   : 2;
    if ((s = SET(o, names[k][0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t0)) ||
        (s = SET(o, names[k][1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t1)) ||
        (s = SET(o, names[k][2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t2)) ||
        (s = SET(o, names[k][3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd)) ||
        (s = SET(o, names[k][4], CUDNN_TYPE_FLOAT, 1, &alpha)) || (s = SET(o, names[k][5], CUDNN_TYPE_FLOAT, 1, &beta)) ||
        (s = cudnnBackendFinalize(o)))
        return s;
    *op = o;
    return CUDNN_STATUS_SUCCESS;
}

/* Per-channel statistics of y: sum and sum of squares. */
static cudnnStatus_t genstats(pool *p, cudnnBackendDescriptor_t *op, cudnnBackendDescriptor_t y,
                              cudnnBackendDescriptor_t sum, cudnnBackendDescriptor_t sq)
{
    cudnnBackendDescriptor_t o = make(p, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    if (!o) return CUDNN_STATUS_ALLOC_FAILED;
    cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnStatus_t s;
    if ((s = SET(o, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode)) ||
        (s = SET(o, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec)) ||
        (s = SET(o, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y)) ||
        (s = SET(o, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum)) ||
        (s = SET(o, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq)) ||
        (s = cudnnBackendFinalize(o)))
        return s;
    *op = o;
    return CUDNN_STATUS_SUCCESS;
}

/* Batch norm's weight gradients from x and dy, with the coefficients of its dx. */
static cudnnStatus_t bn_bwd_weights(pool *p, cudnnBackendDescriptor_t *op, cudnnBackendDescriptor_t *t)
{
    cudnnBackendDescriptor_t o = make(p, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
    if (!o) return CUDNN_STATUS_ALLOC_FAILED;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    cudnnBackendAttributeName_t names[] = {
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC,        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC,    CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC,          CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC,    CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC,  CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS};
    cudnnStatus_t s = SET(o, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    for (int i = 0; !s && i < (int)(sizeof names / sizeof *names); i++)
        s = SET(o, names[i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t[i]);
    if (s || (s = cudnnBackendFinalize(o))) return s;
    *op = o;
    return CUDNN_STATUS_SUCCESS;
}

/* The device buffers of one shape: activations in bf16, filters in bf16 and float, the
 * per-channel vectors in float. */
typedef struct {
    void *x, *y, *w, *dw32, *dw16, *dy, *dx, *ch[11], *ws;
    size_t nx, ny, nw, ws_bytes;
} buffers;
enum { CH_SUM, CH_SQSUM, CH_SCALE, CH_BIAS, CH_MEAN, CH_INVSTD, CH_DSCALE, CH_DBIAS, CH_EQ_DY, CH_EQ_X, CH_EQ_B };
#define WORKSPACE_MAX ((size_t)1 << 30)

/* bf16 values near N(0, 1)-ish, or floats in [lo, hi), from a fixed generator */
static void fill(void *dev, size_t n, int bf16, float lo, float hi, uint64_t seed)
{
    size_t bytes = n * (bf16 ? 2 : 4);
    unsigned char *h = malloc(bytes);
    if (!h) {
        fprintf(stderr, "cudnn_fusion_probe: error: out of host memory\n");
        exit(1);
    }
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        float f = lo + (hi - lo) * (float)((z >> 40) / 16777216.0);
        uint32_t u;
        memcpy(&u, &f, 4);
        if (bf16) {
            uint16_t b = (uint16_t)(u >> 16);
            memcpy(h + 2 * i, &b, 2);
        } else {
            memcpy(h + 4 * i, &f, 4);
        }
    }
    CUDA_OK(cudaMemcpy(dev, h, bytes, cudaMemcpyHostToDevice));
    free(h);
}

static void buffers_make(buffers *b, const fusion_shape *s, int n)
{
    int p = fusion_out_size(s), cmax = s->c > s->k ? s->c : s->k;
    memset(b, 0, sizeof *b);
    b->nx = (size_t)n * s->h * s->h * s->c, b->ny = (size_t)n * p * p * s->k, b->nw = (size_t)s->k * s->r * s->r * s->c;
    CUDA_OK(cudaMalloc(&b->x, b->nx * 2));
    CUDA_OK(cudaMalloc(&b->dx, b->nx * 2));
    CUDA_OK(cudaMalloc(&b->y, b->ny * 2));
    CUDA_OK(cudaMalloc(&b->dy, b->ny * 2));
    CUDA_OK(cudaMalloc(&b->w, b->nw * 2));
    CUDA_OK(cudaMalloc(&b->dw16, b->nw * 2));
    CUDA_OK(cudaMalloc(&b->dw32, b->nw * 4));
    for (int i = 0; i < 11; i++) CUDA_OK(cudaMalloc(&b->ch[i], (size_t)cmax * 4));
    fill(b->x, b->nx, 1, -2, 2, 1);
    fill(b->dy, b->ny, 1, -1, 1, 2);
    fill(b->w, b->nw, 1, -0.1f, 0.1f, 3);
    fill(b->ch[CH_SCALE], cmax, 0, 0.5f, 1.5f, 4);
    fill(b->ch[CH_BIAS], cmax, 0, -0.5f, 0.5f, 5);
    fill(b->ch[CH_MEAN], cmax, 0, -0.5f, 0.5f, 6);
    fill(b->ch[CH_INVSTD], cmax, 0, 0.5f, 1.5f, 7);
}

static void buffers_free(buffers *b)
{
    void *all[] = {b->x, b->y, b->w, b->dw32, b->dw16, b->dy, b->dx, b->ws};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) cudaFree(all[i]);
    for (int i = 0; i < 11; i++) cudaFree(b->ch[i]);
}

static int workspace(buffers *b, size_t bytes)
{
    if (bytes <= b->ws_bytes) return 0;
    if (bytes > WORKSPACE_MAX) return -1;
    cudaFree(b->ws);
    b->ws = NULL, b->ws_bytes = 0;
    if (cudaMalloc(&b->ws, bytes) != cudaSuccess) return -1;
    b->ws_bytes = bytes;
    return 0;
}

/* What a graph writes, to set to 0xff before a run and to hash after it. */
typedef struct {
    void *p[8];
    size_t bytes[8];
    int n;
} outputs;
static void out_add(outputs *o, void *p, size_t bytes) { o->p[o->n] = p, o->bytes[o->n++] = bytes; }

static uint64_t hash_outputs(const outputs *o)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < o->n; i++) {
        unsigned char *buf = malloc(o->bytes[i]);
        if (!buf) return 0;
        CUDA_OK(cudaMemcpy(buf, o->p[i], o->bytes[i], cudaMemcpyDeviceToHost));
        /* FNV-1a over 8-byte words (every buffer here is a multiple of 4 bytes; a tail byte-wise) */
        size_t j = 0;
        for (; j + 8 <= o->bytes[i]; j += 8) {
            uint64_t w;
            memcpy(&w, buf + j, 8);
            h = (h ^ w) * 1099511628211ull;
        }
        for (; j < o->bytes[i]; j++) h = (h ^ buf[j]) * 1099511628211ull;
        free(buf);
    }
    return h;
}

static void clear_outputs(const outputs *o)
{
    for (int i = 0; i < o->n; i++) CUDA_OK(cudaMemsetAsync(o->p[i], 0xff, o->bytes[i], stream));
}

/* ms of one call of run(arg), by events on the stream */
typedef int (*runner)(void *arg);
static double timed(runner run, void *arg)
{
    cudaEvent_t a, b;
    float ms = -1;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    CUDA_OK(cudaEventRecord(a, stream));
    int rc = run(arg);
    CUDA_OK(cudaEventRecord(b, stream));
    CUDA_OK(cudaEventSynchronize(b));
    if (!rc) CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a), cudaEventDestroy(b);
    return rc ? -1 : ms;
}

typedef struct {
    cudnnBackendDescriptor_t plan, pack;
} backend_run;
static int run_plan(void *arg)
{
    backend_run *r = arg;
    return cudnnBackendExecute(dnn, r->plan, r->pack) != CUDNN_STATUS_SUCCESS;
}

/* Builds graph g at shape s, asks the heuristics, makes the first plan that finalizes, runs
 * it: everything into a. */
static void probe_graph(fusion_answer *a, const fusion_shape *s, int n, buffers *b, int runs)
{
    pool p = {.n = 0};
    int pq = fusion_out_size(s), g = a->graph;
    cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t ops[6], t[24] = {0}, heur = NULL, cfg[FUSION_MAX_ENGINES] = {0};
    int nops = 0;
    int64_t uids[16];
    void *ptrs[16];
    int nt = 0;
    outputs o = {.n = 0};
    a->chosen = -1, a->same_bits = -1, a->outcome = FUSION_REFUSED;
#define T(i, uid, type, nn, cc, hh, ww, virt, dev)                                                             \
    do {                                                                                                        \
        DNN(a, "a tensor", tensor(&p, &t[i], uid, type, nn, cc, hh, ww, virt));                                 \
        if (!(virt)) uids[nt] = uid, ptrs[nt++] = dev;                                                          \
    } while (0)
    /* the per-channel vectors of the norm before (c = s->c) or after (k) the convolution */
    int cn = g == FG_CONV_STATS || g == FG_SBR_CONV_STATS ? s->k : s->c;
    T(0, T_X, BF, n, s->c, s->h, s->h, 0, b->x);
    T(1, T_W, BF, s->k, s->c, s->r, s->r, 0, b->w);
    if (g == FG_CONV_STATS || g == FG_SBR_CONV_STATS) {
        T(2, T_Y, BF, n, s->k, pq, pq, 0, b->y);
        T(3, T_SUM, F, 1, cn, 1, 1, 0, b->ch[CH_SUM]);
        T(4, T_SQSUM, F, 1, cn, 1, 1, 0, b->ch[CH_SQSUM]);
        cudnnBackendDescriptor_t in = t[0];
        if (g == FG_SBR_CONV_STATS) {
            T(5, T_SCALE, F, 1, s->c, 1, 1, 0, b->ch[CH_SCALE]);
            T(6, T_BIAS, F, 1, s->c, 1, 1, 0, b->ch[CH_BIAS]);
            T(7, T_VIRTUAL + 1, F, n, s->c, s->h, s->h, 1, NULL);
            T(8, T_VIRTUAL + 2, F, n, s->c, s->h, s->h, 1, NULL);
            T(9, T_VIRTUAL + 3, BF, n, s->c, s->h, s->h, 1, NULL);
            DNN(a, "the scale", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_MUL, t[0], t[5], t[7]));
            DNN(a, "the bias", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_ADD, t[7], t[6], t[8]));
            DNN(a, "the ReLU", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_RELU_FWD, t[8], NULL, t[9]));
            in = t[9];
        }
        DNN(a, "the convolution", convolution(&p, &ops[nops++], CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, s,
                                              in, t[1], t[2]));
        DNN(a, "the statistics", genstats(&p, &ops[nops++], t[2], t[3], t[4]));
        out_add(&o, b->y, b->ny * 2), out_add(&o, b->ch[CH_SUM], cn * 4), out_add(&o, b->ch[CH_SQSUM], cn * 4);
    } else if (g == FG_SBR_WGRAD || g == FG_WGRAD_F32) {
        int f32 = g == FG_WGRAD_F32;
        T(2, T_DY, BF, n, s->k, pq, pq, 0, b->dy);
        T(3, T_DW, f32 ? F : BF, s->k, s->c, s->r, s->r, 0, f32 ? b->dw32 : b->dw16);
        cudnnBackendDescriptor_t in = t[0];
        if (g == FG_SBR_WGRAD) {
            T(5, T_SCALE, F, 1, s->c, 1, 1, 0, b->ch[CH_SCALE]);
            T(6, T_BIAS, F, 1, s->c, 1, 1, 0, b->ch[CH_BIAS]);
            T(7, T_VIRTUAL + 1, F, n, s->c, s->h, s->h, 1, NULL);
            T(8, T_VIRTUAL + 2, F, n, s->c, s->h, s->h, 1, NULL);
            T(9, T_VIRTUAL + 3, BF, n, s->c, s->h, s->h, 1, NULL);
            DNN(a, "the scale", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_MUL, t[0], t[5], t[7]));
            DNN(a, "the bias", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_ADD, t[7], t[6], t[8]));
            DNN(a, "the ReLU", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_RELU_FWD, t[8], NULL, t[9]));
            in = t[9];
        }
        DNN(a, "the wgrad", convolution(&p, &ops[nops++], CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                                        s, in, t[3], t[2]));
        out_add(&o, f32 ? b->dw32 : b->dw16, b->nw * (f32 ? 4 : 2));
    } else {
        /* dy of this convolution's output -> dgrad (virtual) -> through the ReLU of the norm
         * before, whose output is recomputed from its input x (scale, bias) -> the norm's
         * weight gradients; the ReLU's gradient is written for the norm's dx */
        T(2, T_DY, BF, n, s->k, pq, pq, 0, b->dy);
        T(3, T_VIRTUAL + 1, F, n, s->c, s->h, s->h, 1, NULL);   /* dgrad's output */
        T(4, T_SCALE, F, 1, s->c, 1, 1, 0, b->ch[CH_SCALE]);
        T(5, T_BIAS, F, 1, s->c, 1, 1, 0, b->ch[CH_BIAS]);
        T(6, T_VIRTUAL + 2, F, n, s->c, s->h, s->h, 1, NULL);
        T(7, T_VIRTUAL + 3, F, n, s->c, s->h, s->h, 1, NULL);   /* the norm's output before the ReLU */
        T(8, T_DX, BF, n, s->c, s->h, s->h, 0, b->dx);          /* the ReLU's gradient */
        T(9, T_MEAN, F, 1, s->c, 1, 1, 0, b->ch[CH_MEAN]);
        T(10, T_INVSTD, F, 1, s->c, 1, 1, 0, b->ch[CH_INVSTD]);
        T(11, T_DSCALE, F, 1, s->c, 1, 1, 0, b->ch[CH_DSCALE]);
        T(12, T_DBIAS, F, 1, s->c, 1, 1, 0, b->ch[CH_DBIAS]);
        T(13, T_EQ_DY, F, 1, s->c, 1, 1, 0, b->ch[CH_EQ_DY]);
        T(14, T_EQ_X, F, 1, s->c, 1, 1, 0, b->ch[CH_EQ_X]);
        T(15, T_EQ_B, F, 1, s->c, 1, 1, 0, b->ch[CH_EQ_B]);
        DNN(a, "the dgrad", convolution(&p, &ops[nops++], CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, s,
                                        t[3], t[1], t[2]));
        DNN(a, "the scale", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_MUL, t[0], t[4], t[6]));
        DNN(a, "the bias", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_ADD, t[6], t[5], t[7]));
        DNN(a, "the dReLU", pointwise(&p, &ops[nops++], CUDNN_POINTWISE_RELU_BWD, t[7], t[3], t[8]));
        cudnnBackendDescriptor_t bn[10] = {t[9], t[10], t[4], t[0], t[8], t[11], t[12], t[13], t[14], t[15]};
        DNN(a, "the norm's weight gradients", bn_bwd_weights(&p, &ops[nops++], bn));
        out_add(&o, b->dx, b->nx * 2);
        for (int i = CH_DSCALE; i <= CH_EQ_B; i++) out_add(&o, b->ch[i], (size_t)s->c * 4);
    }
#undef T
    cudnnBackendDescriptor_t graph = make(&p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    DNN(a, "the graph", graph ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED);
    DNN(a, "the graph", SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops));
    DNN(a, "the graph", SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn));
    DNN(a, "the graph's finalize", cudnnBackendFinalize(graph));
    heur = make(&p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    DNN(a, "the heuristics", heur ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED);
    DNN(a, "the heuristics", SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph));
    DNN(a, "the heuristics", SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
    DNN(a, "the heuristics' finalize", cudnnBackendFinalize(heur));
    int64_t offered = 0;
    DNN(a, "the heuristics' results",
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &offered, NULL));
    a->engines = (int)offered;
    if (offered > FUSION_MAX_ENGINES) offered = FUSION_MAX_ENGINES;
    for (int i = 0; i < offered; i++)
        DNN(a, "the heuristics' results", cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[i]));
    DNN(a, "the heuristics' results", cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, offered, &offered, cfg));
    for (int i = 0; i < offered; i++) {
        cudnnBackendDescriptor_t eng = make(&p, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
        int64_t got = 0, idx = -1;
        int notes[16] = {0};
        if (!eng || cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                             &eng) != CUDNN_STATUS_SUCCESS)
            break;
        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &idx);
        a->engine_index[i] = (long)idx;
        cudnnBackendNumericalNote_t nn[16];
        cudnnBackendBehaviorNote_t bb[16];
        if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16, &got, nn) ==
            CUDNN_STATUS_SUCCESS) {
            for (int j = 0; j < got && j < 16; j++) notes[j] = (int)nn[j];
            a->numerical[i] = fusion_notes_mask(notes, (int)got);
        }
        if (cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 16, &got, bb) ==
            CUDNN_STATUS_SUCCESS) {
            for (int j = 0; j < got && j < 16; j++) notes[j] = (int)bb[j];
            a->behaviour[i] = fusion_notes_mask(notes, (int)got);
        }
        a->engines_noted = i + 1;
    }
    /* the first configuration, in the heuristics' order, that makes a plan whose workspace fits */
    cudnnBackendDescriptor_t plan = NULL;
    snprintf(a->where, sizeof a->where, "the heuristics");
    snprintf(a->status, sizeof a->status, "no engine offered");
    for (int i = 0; i < offered && !plan; i++) {
        cudnnBackendDescriptor_t pl = make(&p, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        if (!pl) break;
        double t0 = now_ms();
        cudnnStatus_t st = SET(pl, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dnn);
        if (!st) st = SET(pl, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (!st) st = cudnnBackendFinalize(pl);
        int64_t wsz = 0, got = 0;
        if (!st) st = cudnnBackendGetAttribute(pl, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &wsz);
        if (!st && workspace(b, (size_t)wsz)) st = CUDNN_STATUS_ALLOC_FAILED;
        if (st) {
            snprintf(a->where, sizeof a->where, "every plan's finalize");
            snprintf(a->status, sizeof a->status, "%s", cudnnGetErrorString(st));
            continue;
        }
        a->build_ms = now_ms() - t0, a->workspace = wsz, a->chosen = i, plan = pl;
    }
    a->outcome = a->engines ? FUSION_NO_PLAN : FUSION_REFUSED;
    if (!plan) goto out;
    cudnnBackendDescriptor_t pack = make(&p, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    a->outcome = FUSION_RUN_FAILED;
    DNN(a, "the variant pack", pack ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED);
    DNN(a, "the variant pack", SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, nt, uids));
    DNN(a, "the variant pack", SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, nt, ptrs));
    DNN(a, "the variant pack", SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &b->ws));
    DNN(a, "the variant pack", cudnnBackendFinalize(pack));
    backend_run r = {plan, pack};
    uint64_t first = 0;
    a->same_bits = 1;
    for (int i = 0; i < 3; i++) {
        clear_outputs(&o);
        DNN(a, "a run", cudnnBackendExecute(dnn, plan, pack));
        CUDA_OK(cudaStreamSynchronize(stream));
        uint64_t h = hash_outputs(&o);
        if (i == 0) first = h;
        else if (h != first) a->same_bits = 0;
    }
    for (a->runs = 0; a->runs < runs; a->runs++) {
        double ms = timed(run_plan, &r);
        DNN(a, "a timed run", ms < 0 ? CUDNN_STATUS_EXECUTION_FAILED : CUDNN_STATUS_SUCCESS);
        a->ms[a->runs] = ms;
    }
    a->outcome = FUSION_RAN;
out:
    for (int i = 0; i < FUSION_MAX_ENGINES; i++)
        if (cfg[i]) cudnnBackendDestroyDescriptor(cfg[i]);
    pool_free(&p);
    if (cudaGetLastError() != cudaSuccess) CUDA_OK(cudaStreamSynchronize(stream));
}

/* ---- the legacy call ds makes for the same op (deprecated in 9.19; ds still makes it) ---- */
typedef struct {
    int op, algo;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    buffers *b;
    size_t ws;
} legacy_run;
static int run_legacy(void *arg)
{
    legacy_run *l = arg;
    float one = 1, zero = 0;
    buffers *b = l->b;
    cudnnStatus_t s;
    if (l->op == FUSION_LEGACY_FWD)
        s = cudnnConvolutionForward(dnn, &one, l->x, b->x, l->w, b->w, l->conv, l->algo, b->ws, l->ws, &zero, l->y, b->y);
    else if (l->op == FUSION_LEGACY_BWD_FILTER)
        s = cudnnConvolutionBackwardFilter(dnn, &one, l->x, b->x, l->y, b->dy, l->conv, l->algo, b->ws, l->ws, &zero, l->w,
                                           b->dw16);
    else
        s = cudnnConvolutionBackwardData(dnn, &one, l->w, b->w, l->y, b->dy, l->conv, l->algo, b->ws, l->ws, &zero, l->x,
                                         b->dx);
    return s != CUDNN_STATUS_SUCCESS;
}

/* ms of the legacy op at shape s (cudnnFind's choice, as ds plans by default), into ms[] */
static int probe_legacy(const fusion_shape *s, int n, int op, buffers *b, int runs, double *ms, int *algo, int *det)
{
    legacy_run l = {.op = op, .b = b};
    int pq = fusion_out_size(s), found = 0, ok = 0;
    if (cudnnCreateTensorDescriptor(&l.x) || cudnnCreateTensorDescriptor(&l.y) || cudnnCreateFilterDescriptor(&l.w) ||
        cudnnCreateConvolutionDescriptor(&l.conv) ||
        cudnnSetTensor4dDescriptor(l.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, n, s->c, s->h, s->h) ||
        cudnnSetTensor4dDescriptor(l.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_BFLOAT16, n, s->k, pq, pq) ||
        cudnnSetFilter4dDescriptor(l.w, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_NHWC, s->k, s->c, s->r, s->r) ||
        cudnnSetConvolution2dDescriptor(l.conv, s->r / 2, s->r / 2, s->stride, s->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT) ||
        cudnnSetConvolutionMathType(l.conv, CUDNN_TENSOR_OP_MATH))
        goto out;
    if (op == FUSION_LEGACY_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (cudnnFindConvolutionForwardAlgorithm(dnn, l.x, l.w, l.conv, l.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, r))
            goto out;
        for (int i = 0; i < found && !ok; i++)
            if (r[i].status == CUDNN_STATUS_SUCCESS && !workspace(b, r[i].memory))
                l.algo = r[i].algo, l.ws = r[i].memory, *det = r[i].determinism == CUDNN_DETERMINISTIC, ok = 1;
    } else if (op == FUSION_LEGACY_BWD_FILTER) {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (cudnnFindConvolutionBackwardFilterAlgorithm(dnn, l.x, l.y, l.conv, l.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                        &found, r))
            goto out;
        /* ds takes only a deterministic algorithm for a bf16 weight gradient */
        for (int i = 0; i < found && !ok; i++)
            if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].determinism == CUDNN_DETERMINISTIC &&
                !workspace(b, r[i].memory))
                l.algo = r[i].algo, l.ws = r[i].memory, *det = 1, ok = 1;
    } else {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (cudnnFindConvolutionBackwardDataAlgorithm(dnn, l.w, l.y, l.conv, l.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                      &found, r))
            goto out;
        for (int i = 0; i < found && !ok; i++)
            if (r[i].status == CUDNN_STATUS_SUCCESS && !workspace(b, r[i].memory))
                l.algo = r[i].algo, l.ws = r[i].memory, *det = r[i].determinism == CUDNN_DETERMINISTIC, ok = 1;
    }
    if (!ok) goto out;
    *algo = l.algo;
    run_legacy(&l);   /* warm */
    int i;
    for (i = 0; i < runs; i++)
        if ((ms[i] = timed(run_legacy, &l)) < 0) break;
    ok = i;
out:
    cudnnDestroyTensorDescriptor(l.x), cudnnDestroyTensorDescriptor(l.y);
    cudnnDestroyFilterDescriptor(l.w), cudnnDestroyConvolutionDescriptor(l.conv);
    cudaGetLastError();
    return ok;
}
#endif

int main(int argc, char **argv)
{
    int dry = 0, n = 256, runs = FUSION_MAX_RUNS;
    double seconds = 1e9;
    const char *graphs = "abcde";
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--dry-run")) dry = 1;
        else if (!strcmp(argv[i], "--batch") && v && atoi(v) > 0) n = atoi(v), i++;
        else if (!strcmp(argv[i], "--runs") && v && atoi(v) > 0 && atoi(v) <= FUSION_MAX_RUNS) runs = atoi(v), i++;
        else if (!strcmp(argv[i], "--seconds") && v && atof(v) > 0) seconds = atof(v), i++;
        else if (!strcmp(argv[i], "--graphs") && v && *v && strspn(v, "abcde") == strlen(v)) graphs = v, i++;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage();
        else {
            fprintf(stderr, "cudnn_fusion_probe: error: bad argument '%s'\n", argv[i]);
            return usage();
        }
    }
    /* the plan: graph by graph in network order, the shapes within */
    static fusion_answer answers[FUSION_GRAPHS * FUSION_SHAPES];
    int count = 0;
    for (int g = 0; g < FUSION_GRAPHS; g++) {
        if (!strchr(graphs, fusion_graphs[g].letter)) continue;
        for (int s = 0; s < FUSION_SHAPES; s++)
            if (fusion_applies(g, s)) answers[count++] = (fusion_answer){.graph = g, .shape = s, .chosen = -1, .same_bits = -1};
    }
    if (dry) {
        printf("cudnn_fusion_probe --dry-run: %d graphs at batch %d, bf16 NHWC, float accumulation, %d runs each\n", count,
               n, runs);
        for (int i = 0; i < count; i++) {
            const fusion_shape *s = &fusion_shapes[answers[i].shape];
            int p = fusion_out_size(s);
            printf("(%c) %-40s %-34s %dx%dx%dx%d -> %d %dx%d/%d, out %dx%d; against legacy %s\n",
                   fusion_graphs[answers[i].graph].letter, fusion_graphs[answers[i].graph].name, s->name, n, s->h, s->h,
                   s->c, s->k, s->r, s->r, s->stride, p, p, fusion_legacy_names[fusion_graphs[answers[i].graph].legacy]);
        }
        return 0;
    }
#if !DS_HAVE_CUDA
    (void)seconds;
    fprintf(stderr, "cudnn_fusion_probe: error: built without CUDA: only --dry-run\n");
    return 1;
#else
    double t0 = now_ms();
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev < 1) {
        fprintf(stderr, "cudnn_fusion_probe: error: no CUDA device\n");
        return 1;
    }
    CUDA_OK(cudaStreamCreate(&stream));
    cudnnStatus_t st = cudnnCreate(&dnn);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(dnn, stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        fprintf(stderr, "cudnn_fusion_probe: error: cudnnCreate: %s\n", cudnnGetErrorString(st));
        return 1;
    }
    printf("cuDNN %zu (built against %d), batch %d, %d runs each, deadline %.0f s\n\n", cudnnGetVersion(), CUDNN_VERSION,
           n, runs, seconds);
    fputs(fusion_table_head, stdout);
    /* shape by shape, so each shape's buffers are made once; the legacy times cached per op */
    for (int s = 0; s < FUSION_SHAPES; s++) {
        buffers b;
        int made = 0;
        double legacy[3][FUSION_MAX_RUNS];
        int legacy_runs[3] = {-1, -1, -1}, legacy_algo[3] = {0}, legacy_det[3] = {0};
        for (int i = 0; i < count; i++) {
            fusion_answer *a = &answers[i];
            if (a->shape != s) continue;
            if ((now_ms() - t0) / 1e3 > seconds) break;
            if (!made) buffers_make(&b, &fusion_shapes[s], n), made = 1;
            probe_graph(a, &fusion_shapes[s], n, &b, runs);
            int op = fusion_graphs[a->graph].legacy;
            if (legacy_runs[op] < 0)
                legacy_runs[op] = probe_legacy(&fusion_shapes[s], n, op, &b, runs, legacy[op], &legacy_algo[op], &legacy_det[op]);
            memcpy(a->legacy_ms, legacy[op], sizeof legacy[op]);
            a->legacy_runs = legacy_runs[op], a->legacy_algo = legacy_algo[op], a->legacy_deterministic = legacy_det[op];
            print_answer(a, n);
        }
        if (made) buffers_free(&b);
    }
    for (int i = 0; i < count; i++)
        if (answers[i].outcome == FUSION_NOT_REACHED) print_answer(&answers[i], n);
    printf("\n");
    for (int g = 0; g < FUSION_GRAPHS; g++) {
        if (!strchr(graphs, fusion_graphs[g].letter)) continue;
        char line[512];
        fusion_summary(line, sizeof line, answers, count, g);
        fputs(line, stdout);
    }
    cudnnDestroy(dnn);
    return 0;
#endif
}
