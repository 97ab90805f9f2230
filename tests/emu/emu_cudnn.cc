/* emu_cudnn: the cuDNN of the emulated device (emu.h): the handle, tensor, filter and
 * convolution descriptors and the legacy 2-D convolution API, computed on the CPU. Every
 * entry point has the signature of the installed cudnn_graph.h, cudnn_ops.h or cudnn_cnn.h.
 *
 * Emulated: cudnnCreate, cudnnDestroy, cudnnSetStream, cudnnGetStream, cudnnGetVersion,
 * cudnnGetErrorString (every status by the name the header gives it), cudnnGetLastErrorString;
 * tensor descriptors (4-d, NCHW or NHWC, or explicit strides with ...Ex), filter descriptors
 * (4-d, NCHW = KCRS or NHWC = KRSC), convolution descriptors (2-d: padding, stride,
 * dilation, CUDNN_CONVOLUTION, which flips the filter, or CUDNN_CROSS_CORRELATION; the
 * compute type; the math type), cudnnGetConvolution2dForwardOutputDim, and for each of
 * forward, backward-data and backward-filter: the algorithm count, cudnnFind*Algorithm,
 * cudnnGet*Algorithm_v7, cudnnGet*WorkspaceSize and the convolution itself.
 *
 * Configurations: FLOAT and BFLOAT16 tensors, all three of one type, with a FLOAT compute
 * type (cuDNN's FLOAT_CONFIG and PSEUDO_BFLOAT16_CONFIG). HALF, DOUBLE and the integer types
 * may be set in a descriptor, but every algorithm answers CUDNN_STATUS_NOT_SUPPORTED for them
 * (real cuDNN computes several of them; the emulator does not). Groups are 1.
 *
 * Math. The math type of the convolution descriptor permits, the algorithm decides; each
 * algorithm either has a tensor-core kernel or not (the table below). FLOAT tensors: FMA
 * math computes in fp32; DEFAULT math on an emulated sm_90 permits TF32 (as cuDNN documents
 * for Ampere and later), so a tensor-core algorithm computes in tf32 there, as under
 * TENSOR_OP math (inputs rounded to 10 mantissa bits, nearest even); TENSOR_OP_MATH_ALLOW_
 * CONVERSION converts the inputs to fp16 (range included); an algorithm without a tensor-core
 * kernel computes in fp32 under any math. BFLOAT16 tensors need a tensor-core algorithm and
 * TENSOR_OP math (or ALLOW_CONVERSION): any other answers NOT_SUPPORTED. Products accumulate
 * in float; y = alpha * conv + beta * y, y not read when beta is 0; bf16 results are rounded
 * to nearest even. The perf results' mathType is what the algorithm computes with: the
 * descriptor's math for a tensor-core algorithm, CUDNN_FMA_MATH for one without, so setting
 * the answered math type on the descriptor runs what was answered.
 *
 * Algorithms (workspace in bytes, a deterministic function of the shape and data type; N C H
 * W the input, K R S the filter, P Q the output, es the element size; a256 rounds up to 256):
 *   forward
 *     0 IMPLICIT_GEMM          tensor  0
 *     1 IMPLICIT_PRECOMP_GEMM  tensor  a256(8 C R S) + a256(4 N P Q)
 *     2 GEMM                   -       a256(es C R S N P Q)                 (im2col)
 *     3 DIRECT                 never supported (as in real cuDNN)
 *     4 FFT                    -       fft       a256(8 FH (FW/2+1) (N C + K C + N K))
 *     5 FFT_TILING             -       fft tiles a256(8 32 17 (N C T + K C + N K T))
 *     6 WINOGRAD               -       3x3       a256(64 K C)
 *     7 WINOGRAD_NONFUSED      tensor  3x3, 5x5  a256(144 (K C + T' N (C + K)))
 *   backward-data
 *     0 ALGO_0 (non-deterministic) tensor 0
 *     1 ALGO_1                 tensor  a256(es K C R S)
 *     2 FFT, 3 FFT_TILING, 4 WINOGRAD, 5 WINOGRAD_NONFUSED: as forward's 4, 5, 6, 7
 *   backward-filter
 *     0 ALGO_0 (non-deterministic) tensor 0
 *     1 ALGO_1                 tensor  a256(4 K C R S)
 *     2 FFT                    as forward's
 *     3 ALGO_3 (non-deterministic) tensor a256(4 K C R S min(N, 8))
 *     4 WINOGRAD               never supported (not implemented in real cuDNN)
 *     5 WINOGRAD_NONFUSED, 6 FFT_TILING: as forward's
 * "fft": stride 1, dilation 1, padding smaller than the filter, padded input at most 256 x
 * 256 (FH, FW its sizes rounded up to powers of 2); "fft tiles": stride 1, dilation 1,
 * filter at most 32 x 32, padding smaller than the filter (T the input's 32 x 32 tiles);
 * winograd: stride 1, dilation 1 and the filter sizes named (T' the 4 x 4 tiles of y for
 * 3x3, 2 x 2 for 5x5; of dx for backward-data). An algorithm outside its shapes answers NOT_SUPPORTED, in the
 * lists, in GetWorkspaceSize and when run.
 *
 * A non-deterministic algorithm computes as real atomics do: its sum is cut into parts (one
 * per image for backward-filter, up to 4 blocks of K for backward-data, of C for forward)
 * whose partial sums are added in an order drawn from emu::random("cudnn-atomics") for every
 * element, so two runs differ in the last bits; into a BFLOAT16 output, or one added to (beta
 * != 0), each part is added into the output itself, rounded to its type after every add
 * (starting from beta * y, rounded), as atomics into memory do: in bf16 the error grows with
 * the parts. A deterministic algorithm that lists a workspace (a split one) adds, when beta
 * != 0, its two halves (of the batch, of K, of C) into y one after the other, in a fixed
 * order: y = (beta y + p1) + p2, as a split-K epilogue may, where the others compute
 * alpha (p1 + p2) + beta y. A deterministic one sums in one fixed order.
 *
 * The lists. cudnnGet*Algorithm_v7 answers every algorithm of the op in a fixed order (the
 * emulated heuristics: forward 1 0 7 2 5 4 6 3; backward-data 0 1 5 3 2 4; backward-filter
 * 0 1 3 5 6 2 4), the supported ones first, time -1. cudnnFind*Algorithm answers the same
 * entries, the supported ones first in an order drawn from emu::random("cudnn-find") (a run's
 * timing ranks them differently from one process to the next), with made-up increasing
 * times; it runs nothing and needs none of the caller's buffers (the legacy Find allocates
 * its own). GetWorkspaceSize answers what the lists answer.
 *
 * Checked, with the status real cuDNN answers (and a message for cudnnGetLastErrorString,
 * set by every failing call of the thread and emptied when read): NULL or never-set
 * descriptors, sizes not positive, padding negative, stride or dilation not positive,
 * unknown enumerants, tensors of different data types, x's and w's channels differing, a
 * filter larger than the padded input, y not the output size (all CUDNN_STATUS_BAD_PARAM;
 * cuDNN's documentation lists some size disagreements under NOT_SUPPORTED for some ops: the
 * emulator answers BAD_PARAM for every one); an algorithm id out of range,
 * NULL data, alpha or beta pointers, a workSpaceSizeInBytes below what the algorithm needs
 * (BAD_PARAM); data pointers not aligned to their element
 * (BAD_PARAM_MISALIGNED_POINTER); an algorithm or configuration not supported, strides
 * that make two elements of a tensor overlap (NOT_SUPPORTED). Defects of the program
 * (emu::defect): a handle or descriptor never created or destroyed, a tensor, filter or
 * workspace not inside live device memory over the extent its descriptor implies (a strided
 * tensor: sum((dim - 1) * stride) + 1 elements), alpha or beta in device memory, an output
 * overlapping an input, a workspace overlapping a tensor. The descriptors' contents are
 * copied when the convolution is queued, so changing a descriptor afterwards changes
 * nothing already queued. Each convolution writes a pattern (the 32-bit word 0xffc0ffee, NaN
 * as float and as bf16) over the workspace bytes the algorithm needs before it computes, so a
 * caller that expects its workspace to survive a call sees it did not.
 *
 * Fault switches (DS_EMU_FAULT, read once):
 *   cudnn_exec_fail=OP:ALGO[:STATUS][+OP:ALGO[:STATUS]...]
 *                     OP is fwd, bwd_data or bwd_filter, ALGO an algorithm number or * for
 *                     every algorithm of OP, STATUS NOT_SUPPORTED (the default) or
 *                     EXECUTION_FAILED. The algorithm is listed and sized as usable, but
 *                     running it answers STATUS after every other check: NOT_SUPPORTED
 *                     queues nothing; EXECUTION_FAILED queues only the workspace's pattern
 *                     (a first kernel ran, the next did not launch) and writes no output.
 *   cudnn_no_deterministic
 *                     every algorithm of every op reports CUDNN_NON_DETERMINISTIC, and
 *                     computes as one (above).
 *   cudnn_ws_huge[=OP[:ALGO]]
 *                     the algorithms named (bare: every algorithm of every op, even those
 *                     needing none; OP: every algorithm of OP; OP:ALGO: that one) need 1 TiB
 *                     of workspace, more than any device has: cudnnGet*Algorithm_v7 and
 *                     GetWorkspaceSize answer it with success; cudnnFind*Algorithm, which
 *                     would have to allocate it, answers those entries with
 *                     CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED (memory 1 TiB);
 *                     running one with less workspace is BAD_PARAM.
 *   cudnn_no_bf16[=N] every algorithm answers NOT_SUPPORTED for BFLOAT16 tensors (lists,
 *                     GetWorkspaceSize, execution); with N, only for batches smaller than N
 *                     (a support matrix that changes with the shape: a plan made at the full
 *                     batch loses bf16 at a short one).
 *   cudnn_find_nondet_first
 *                     cudnnFind*Algorithm ranks the non-deterministic algorithms first (as
 *                     an H200's timing did), so a run takes them wherever it may.
 *   cudnn_fp16_conversion
 *                     a tensor-core algorithm asked for TENSOR_OP math on FLOAT tensors
 *                     answers (and computes with) TENSOR_OP_MATH_ALLOW_CONVERSION: float
 *                     inputs rounded to fp16, which a tf32 run must not take.
 *
 * Not emulated: real cuDNN's support matrix (which algorithm takes which layout, type and
 * shape on which GPU) and workspace sizes, its numerics beyond the rounding of inputs
 * (summation order, tensor-core accumulation width), its speed, the backend (graph) API,
 * N-d and grouped convolutions, fused operations, the other ops (pooling, activations,
 * batch norm, tensor ops), the Find*Ex variants and the callback and logging interface. */
#include "emu.h"

#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

/* ---- the objects behind the handles ---- */

struct cudnnContext {
    cudaStream_t stream = nullptr;
    int device = 0;   /* current at cudnnCreate */
};

struct cudnnTensorStruct {
    bool set = false;
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    int dim[4] = {0, 0, 0, 0};      /* n, c, h, w */
    int stride[4] = {0, 0, 0, 0};   /* in elements */
};

struct cudnnFilterStruct {
    bool set = false;
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
    int dim[4] = {0, 0, 0, 0};      /* k, c, r, s */
};

struct cudnnConvolutionStruct {
    bool set = false;
    int pad[2] = {0, 0}, stride[2] = {1, 1}, dil[2] = {1, 1};
    cudnnConvolutionMode_t mode = CUDNN_CONVOLUTION;
    cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;   /* cudnnCreateConvolutionDescriptor's */
};

namespace {

/* ---- live objects: a handle or descriptor used after it was destroyed is a defect ---- */

enum kind { HANDLE, TENSOR, FILTER, CONV };
const char *const kind_names[] = {"cuDNN handle", "tensor descriptor", "filter descriptor",
                                  "convolution descriptor"};

struct registry {
    std::mutex m;
    std::unordered_map<const void *, int> live;
};

registry &objects()
{
    static registry *r = new registry;   /* never destroyed: streams' workers may outlive main */
    return *r;
}

void remember(const void *p, int k)
{
    std::lock_guard<std::mutex> lock(objects().m);
    objects().live[p] = k;
}

bool forget(const void *p, int k)
{
    std::lock_guard<std::mutex> lock(objects().m);
    auto it = objects().live.find(p);
    if (it == objects().live.end() || it->second != k) return false;
    objects().live.erase(it);
    return true;
}

/* p must be NULL (the caller answers BAD_PARAM) or a live object of kind k. */
void need_live(const char *fn, const char *arg, const void *p, int k)
{
    if (!p) return;
    std::lock_guard<std::mutex> lock(objects().m);
    auto it = objects().live.find(p);
    if (it == objects().live.end() || it->second != k)
        emu::defect("%s: %s %p is not a live %s (never created, or destroyed)", fn, arg, p, kind_names[k]);
}

/* ---- statuses and the last error's message ---- */

thread_local std::string last_error;

__attribute__((format(printf, 3, 4))) cudnnStatus_t fail(cudnnStatus_t st, const char *fn, const char *fmt, ...)
{
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    last_error = std::string(fn) + ": " + buf;
    emu::note("%s -> %s", last_error.c_str(), cudnnGetErrorString(st));
    return st;
}

const char *type_name(cudnnDataType_t t)
{
    switch (t) {
    case CUDNN_DATA_FLOAT: return "FLOAT";
    case CUDNN_DATA_DOUBLE: return "DOUBLE";
    case CUDNN_DATA_HALF: return "HALF";
    case CUDNN_DATA_BFLOAT16: return "BFLOAT16";
    case CUDNN_DATA_INT8: return "INT8";
    case CUDNN_DATA_INT32: return "INT32";
    case CUDNN_DATA_INT64: return "INT64";
    case CUDNN_DATA_UINT8: return "UINT8";
    default: return "another type";
    }
}

bool known_type(int t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }
size_t type_size(cudnnDataType_t t)
{
    switch (t) {
    case CUDNN_DATA_DOUBLE: case CUDNN_DATA_INT64: return 8;
    case CUDNN_DATA_HALF: case CUDNN_DATA_BFLOAT16: return 2;
    case CUDNN_DATA_INT8: case CUDNN_DATA_UINT8: case CUDNN_DATA_BOOLEAN: return 1;
    default: return 4;
    }
}

bool vector_type(cudnnDataType_t t)
{
    return t == CUDNN_DATA_INT8x4 || t == CUDNN_DATA_UINT8x4 || t == CUDNN_DATA_INT8x32;
}

const char *math_name(cudnnMathType_t m)
{
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "FMA";
    }
    return "?";
}

/* ---- numerics ---- */

uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float bf16_to_float(uint16_t h) { return float_of((uint32_t)h << 16); }

/* nearest even; a NaN stays a (quiet) NaN */
uint16_t float_to_bf16(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

/* TF32: fp32's exponent, 10 mantissa bits; nearest even (an overflow rounds to infinity) */
float tf32_round(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    u = (u + 0xfffu + (u >> 13 & 1)) & ~0x1fffu;
    return float_of(u);
}

float fp16_round(float f) { return (float)(_Float16)f; }

/* What an algorithm computes its products from. */
enum compute { C_FP32, C_TF32, C_FP16, C_BF16 };

float round_input(float v, int c)
{
    switch (c) {
    case C_TF32: return tf32_round(v);
    case C_FP16: return fp16_round(v);
    default: return v;   /* fp32, or bf16 data, which widens exactly */
    }
}

/* ---- the problem a call describes, copied out of its descriptors ---- */

enum op { FWD, BWD_DATA, BWD_FILTER, OPS };
const char *const op_fault_names[OPS] = {"fwd", "bwd_data", "bwd_filter"};

/* A 4-d array: tensor (n, c, h, w) or filter (k, c, r, s), strides in elements. */
struct array4 {
    cudnnDataType_t type;
    int64_t d[4];
    int64_t st[4];
    int format;   /* a filter's CUDNN_TENSOR_NCHW/NHWC; -1 for a tensor */
};

int64_t extent_elems(const array4 &a)
{
    int64_t e = 1;
    for (int i = 0; i < 4; i++) e += (a.d[i] - 1) * a.st[i];
    return e;
}

size_t extent_bytes(const array4 &a) { return (size_t)extent_elems(a) * type_size(a.type); }

/* Whether distinct elements lie at distinct addresses: sorted by stride, each stride at
 * least the span of the dimensions inside it (sufficient, and what any real layout is). */
bool no_overlap(const array4 &a)
{
    int idx[4] = {0, 1, 2, 3};
    std::sort(idx, idx + 4, [&](int x, int y) { return a.st[x] < a.st[y]; });
    int64_t span = 1;
    for (int i : idx) {
        if (a.d[i] == 1) continue;
        if (a.st[i] < span) return false;
        span = a.st[i] * a.d[i];
    }
    return true;
}

/* "NHWC 2x8x8x16 BFLOAT16, 4096 bytes", "KRSC 16x3x3x8 FLOAT, ...", "n2 c3 h5 w5 strides
 * 100,25,5,1 FLOAT, ..." */
std::string describe(const array4 &a)
{
    char buf[200];
    const int64_t *d = a.d, *s = a.st;
    bool nchw = s[3] == 1 && s[2] == d[3] && s[1] == d[2] * d[3] && s[0] == d[1] * d[2] * d[3];
    bool nhwc = s[1] == 1 && s[3] == d[1] && s[2] == d[3] * d[1] && s[0] == d[2] * d[3] * d[1];
    const char *tn = type_name(a.type);
    size_t bytes = extent_bytes(a);
    if (a.format == CUDNN_TENSOR_NHWC)
        snprintf(buf, sizeof buf, "KRSC %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " %s, %zu bytes", d[0], d[2],
                 d[3], d[1], tn, bytes);
    else if (a.format >= 0)
        snprintf(buf, sizeof buf, "KCRS %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " %s, %zu bytes", d[0], d[1],
                 d[2], d[3], tn, bytes);
    else if (nhwc)
        snprintf(buf, sizeof buf, "NHWC %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " %s, %zu bytes", d[0], d[2],
                 d[3], d[1], tn, bytes);
    else if (nchw)
        snprintf(buf, sizeof buf, "NCHW %" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 " %s, %zu bytes", d[0], d[1],
                 d[2], d[3], tn, bytes);
    else
        snprintf(buf, sizeof buf,
                 "n%" PRId64 " c%" PRId64 " h%" PRId64 " w%" PRId64 " strides %" PRId64 ",%" PRId64 ",%" PRId64
                 ",%" PRId64 " %s, %zu bytes",
                 d[0], d[1], d[2], d[3], s[0], s[1], s[2], s[3], tn, bytes);
    return buf;
}

struct conv_params {
    int pad[2], stride[2], dil[2];
    bool flip;   /* CUDNN_CONVOLUTION */
    cudnnDataType_t compute;
    cudnnMathType_t math;
};

struct problem {
    int op;
    array4 x, w, y;   /* y: the output of the forward convolution (dy for the backward ops) */
    conv_params cv;
};

array4 tensor_array(const cudnnTensorStruct *t)
{
    array4 a;
    a.type = t->type;
    a.format = -1;
    for (int i = 0; i < 4; i++) a.d[i] = t->dim[i], a.st[i] = t->stride[i];
    return a;
}

array4 filter_array(const cudnnFilterStruct *f)
{
    array4 a;
    a.type = f->type;
    a.format = f->format;
    int64_t c = f->dim[1], r = f->dim[2], s = f->dim[3];
    for (int i = 0; i < 4; i++) a.d[i] = f->dim[i];
    if (f->format == CUDNN_TENSOR_NHWC) {   /* KRSC */
        a.st[0] = r * s * c, a.st[1] = 1, a.st[2] = s * c, a.st[3] = c;
    } else {                                /* KCRS */
        a.st[0] = c * r * s, a.st[1] = r * s, a.st[2] = s, a.st[3] = 1;
    }
    return a;
}

/* The output's spatial size along dimension i (0: h, 1: w), or <= 0 when the (dilated)
 * filter does not fit in the padded input. */
int64_t out_size(int64_t in, int64_t filt, int pad, int stride, int dil)
{
    int64_t span = (filt - 1) * dil + 1, padded = in + 2 * (int64_t)pad;
    if (padded < span) return 0;
    return (padded - span) / stride + 1;
}

/* Reads the descriptors of op (x: the input tensor, dx for backward-data; y: the output,
 * dy for the backward ops) into *p; BAD_PARAM, with the message, when they do not describe
 * one convolution. */
cudnnStatus_t read_problem(const char *fn, int op, cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                           cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, problem *p)
{
    const char *xn = op == BWD_DATA ? "dxDesc" : "xDesc", *yn = op == FWD ? "yDesc" : "dyDesc",
               *wn = op == BWD_FILTER ? "dwDesc" : "wDesc";
    need_live(fn, xn, xd, TENSOR);
    need_live(fn, yn, yd, TENSOR);
    need_live(fn, wn, wd, FILTER);
    need_live(fn, "convDesc", cd, CONV);
    if (!xd) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s is NULL", xn);
    if (!wd) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s is NULL", wn);
    if (!cd) return fail(CUDNN_STATUS_BAD_PARAM, fn, "convDesc is NULL");
    if (!yd) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s is NULL", yn);
    if (!xd->set) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s was created but never set", xn);
    if (!wd->set) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s was created but never set", wn);
    if (!cd->set) return fail(CUDNN_STATUS_BAD_PARAM, fn, "convDesc was created but never set");
    if (!yd->set) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s was created but never set", yn);
    p->op = op;
    p->x = tensor_array(xd);
    p->y = tensor_array(yd);
    p->w = filter_array(wd);
    p->cv.pad[0] = cd->pad[0], p->cv.pad[1] = cd->pad[1];
    p->cv.stride[0] = cd->stride[0], p->cv.stride[1] = cd->stride[1];
    p->cv.dil[0] = cd->dil[0], p->cv.dil[1] = cd->dil[1];
    p->cv.flip = cd->mode == CUDNN_CONVOLUTION;
    p->cv.compute = cd->compute;
    p->cv.math = cd->math;
    if (p->x.type != p->w.type || p->x.type != p->y.type)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "the data types differ: %s %s, %s %s, %s %s", xn, type_name(p->x.type),
                    wn, type_name(p->w.type), yn, type_name(p->y.type));
    if (p->x.d[1] != p->w.d[1])
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s has %" PRId64 " channels, %s %" PRId64 " input channels", xn,
                    p->x.d[1], wn, p->w.d[1]);
    int64_t P = out_size(p->x.d[2], p->w.d[2], p->cv.pad[0], p->cv.stride[0], p->cv.dil[0]);
    int64_t Q = out_size(p->x.d[3], p->w.d[3], p->cv.pad[1], p->cv.stride[1], p->cv.dil[1]);
    if (P <= 0 || Q <= 0)
        return fail(CUDNN_STATUS_BAD_PARAM, fn,
                    "the %" PRId64 "x%" PRId64 " filter (dilation %dx%d) is larger than the %" PRId64 "x%" PRId64
                    " input padded by %dx%d",
                    p->w.d[2], p->w.d[3], p->cv.dil[0], p->cv.dil[1], p->x.d[2], p->x.d[3], p->cv.pad[0],
                    p->cv.pad[1]);
    if (p->y.d[0] != p->x.d[0] || p->y.d[1] != p->w.d[0] || p->y.d[2] != P || p->y.d[3] != Q)
        return fail(CUDNN_STATUS_BAD_PARAM, fn,
                    "%s is n%" PRId64 " c%" PRId64 " h%" PRId64 " w%" PRId64 "; %s, %s and convDesc give n%" PRId64
                    " c%" PRId64 " h%" PRId64 " w%" PRId64,
                    yn, p->y.d[0], p->y.d[1], p->y.d[2], p->y.d[3], xn, wn, p->x.d[0], p->w.d[0], P, Q);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- faults ---- */

struct faults {
    /* exec_fail[op][algo]: the status running it answers (SUCCESS: none) */
    cudnnStatus_t exec_fail[OPS][8] = {};
    bool no_deterministic = false, fp16_conversion = false, nondet_first = false;
    int no_bf16_below = 0;   /* BFLOAT16 refused for batches below this (INT_MAX: all) */
    bool ws_huge[OPS][8] = {};
};

constexpr size_t HUGE_WS = (size_t)1 << 40;
const int algo_count[OPS] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};

[[noreturn]] void bad_fault(const char *name, const char *value, const char *why)
{
    fprintf(stderr, "ds-emu: DS_EMU_FAULT %s=%s: %s\n", name, value, why);
    exit(2);
}

/* "fwd" -> FWD ...; -1 when not an op's name */
int op_of(const std::string &s)
{
    for (int o = 0; o < OPS; o++)
        if (s == op_fault_names[o]) return o;
    return -1;
}

/* ALGO of op: a number below the op's count, or "*" (-1); -2 when neither */
int algo_of(int op, const std::string &s)
{
    if (s == "*") return -1;
    char *end;
    long a = strtol(s.c_str(), &end, 10);
    return !s.empty() && !*end && a >= 0 && a < algo_count[op] ? (int)a : -2;
}

std::vector<std::string> split(const std::string &s, char sep)
{
    std::vector<std::string> v;
    size_t at = 0;
    for (;;) {
        size_t end = s.find(sep, at);
        v.push_back(s.substr(at, end == std::string::npos ? std::string::npos : end - at));
        if (end == std::string::npos) return v;
        at = end + 1;
    }
}

const faults &fault_switches()
{
    static const faults f = [] {
        faults r;
        const char *v;
        r.no_deterministic = emu::fault("cudnn_no_deterministic") != nullptr;
        if ((v = emu::fault("cudnn_no_bf16"))) {
            char *end;
            long n = *v ? strtol(v, &end, 10) : 0;
            if (*v && (*end || n < 1 || n > 1 << 30)) bad_fault("cudnn_no_bf16", v, "not empty or a batch size");
            r.no_bf16_below = *v ? (int)n : INT_MAX;
        }
        r.fp16_conversion = emu::fault("cudnn_fp16_conversion") != nullptr;
        r.nondet_first = emu::fault("cudnn_find_nondet_first") != nullptr;
        if ((v = emu::fault("cudnn_exec_fail"))) {
            std::string value = v;
            for (const std::string &item : split(value, '+')) {
                std::vector<std::string> f3 = split(item, ':');
                int o = f3.size() >= 2 ? op_of(f3[0]) : -1;
                int a = o >= 0 ? algo_of(o, f3[1]) : -2;
                if (f3.size() < 2 || f3.size() > 3 || o < 0 || a == -2)
                    bad_fault("cudnn_exec_fail", value.c_str(), "not OP:ALGO[:STATUS] (OP fwd, bwd_data or bwd_filter)");
                cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
                if (f3.size() == 3) {
                    if (f3[2] == "EXECUTION_FAILED") st = CUDNN_STATUS_EXECUTION_FAILED;
                    else if (f3[2] != "NOT_SUPPORTED")
                        bad_fault("cudnn_exec_fail", value.c_str(), "STATUS is NOT_SUPPORTED or EXECUTION_FAILED");
                }
                for (int i = 0; i < algo_count[o]; i++)
                    if (a < 0 || a == i) r.exec_fail[o][i] = st;
            }
        }
        if ((v = emu::fault("cudnn_ws_huge"))) {
            std::string value = v;
            std::vector<std::string> f2 = split(value, ':');
            int o = value.empty() ? -1 : op_of(f2[0]);
            int a = f2.size() == 2 && o >= 0 ? algo_of(o, f2[1]) : -1;
            if ((!value.empty() && o < 0) || f2.size() > 2 || a == -2)
                bad_fault("cudnn_ws_huge", value.c_str(), "not empty, OP or OP:ALGO");
            for (int oo = 0; oo < OPS; oo++)
                for (int i = 0; i < algo_count[oo]; i++)
                    if ((o < 0 || o == oo) && (a < 0 || a == i)) r.ws_huge[oo][i] = true;
        }
        return r;
    }();
    return f;
}

/* ---- the algorithms ---- */

enum rule { ANY, NEVER, FFT, FFT_TILES, WINOGRAD3, WINOGRAD35 };

struct algo_def {
    const char *name;
    bool tensor;          /* has a tensor-core kernel */
    bool deterministic;
    rule shapes;
};

const algo_def fwd_algos[] = {
    {"CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM", true, true, ANY},
    {"CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM", true, true, ANY},
    {"CUDNN_CONVOLUTION_FWD_ALGO_GEMM", false, true, ANY},
    {"CUDNN_CONVOLUTION_FWD_ALGO_DIRECT", false, true, NEVER},
    {"CUDNN_CONVOLUTION_FWD_ALGO_FFT", false, true, FFT},
    {"CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING", false, true, FFT_TILES},
    {"CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD", false, true, WINOGRAD3},
    {"CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED", true, true, WINOGRAD35},
};
const algo_def bwd_data_algos[] = {
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_0", true, false, ANY},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_1", true, true, ANY},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT", false, true, FFT},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING", false, true, FFT_TILES},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD", false, true, WINOGRAD3},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED", true, true, WINOGRAD35},
};
const algo_def bwd_filter_algos[] = {
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0", true, false, ANY},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1", true, true, ANY},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT", false, true, FFT},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3", true, false, ANY},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD", false, true, NEVER},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED", true, true, WINOGRAD35},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING", false, true, FFT_TILES},
};
const algo_def *const algos[OPS] = {fwd_algos, bwd_data_algos, bwd_filter_algos};

/* the emulated heuristics' order (cudnnGet*Algorithm_v7), supported ones then moved first */
const int heuristic_order[OPS][8] = {{1, 0, 7, 2, 5, 4, 6, 3}, {0, 1, 5, 3, 2, 4}, {0, 1, 3, 5, 6, 2, 4}};

size_t a256(size_t b) { return (b + 255) / 256 * 256; }

int64_t pow2_at_least(int64_t v)
{
    int64_t p = 1;
    while (p < v) p *= 2;
    return p;
}

/* Why algorithm a of p.op cannot take p's shape, or "" when it can. */
std::string shape_refusal(const problem &p, const algo_def &a)
{
    const conv_params &c = p.cv;
    int64_t R = p.w.d[2], S = p.w.d[3];
    bool unit = c.stride[0] == 1 && c.stride[1] == 1 && c.dil[0] == 1 && c.dil[1] == 1;
    char buf[200] = "";
    switch (a.shapes) {
    case ANY: break;
    case NEVER: snprintf(buf, sizeof buf, "%s is not implemented", a.name); break;
    case FFT:
    case FFT_TILES:
        if (!unit)
            snprintf(buf, sizeof buf, "%s takes stride 1 and dilation 1 only, not stride %dx%d dilation %dx%d", a.name,
                     c.stride[0], c.stride[1], c.dil[0], c.dil[1]);
        else if (c.pad[0] >= R || c.pad[1] >= S)
            snprintf(buf, sizeof buf, "%s takes padding smaller than the filter, not %dx%d for %" PRId64 "x%" PRId64,
                     a.name, c.pad[0], c.pad[1], R, S);
        else if (a.shapes == FFT && (p.x.d[2] + 2 * c.pad[0] > 256 || p.x.d[3] + 2 * c.pad[1] > 256))
            snprintf(buf, sizeof buf, "%s takes a padded input of at most 256x256", a.name);
        else if (a.shapes == FFT_TILES && (R > 32 || S > 32))
            snprintf(buf, sizeof buf, "%s takes filters of at most 32x32", a.name);
        break;
    case WINOGRAD3:
    case WINOGRAD35:
        if (!unit || R != S || !(R == 3 || (a.shapes == WINOGRAD35 && R == 5)))
            snprintf(buf, sizeof buf, "%s takes %s filters at stride 1 and dilation 1 only, not %" PRId64 "x%" PRId64
                     " at stride %dx%d dilation %dx%d", a.name, a.shapes == WINOGRAD3 ? "3x3" : "3x3 and 5x5", R, S,
                     c.stride[0], c.stride[1], c.dil[0], c.dil[1]);
        break;
    }
    return buf;
}

size_t workspace(const problem &p, int algo)
{
    size_t N = p.x.d[0], C = p.x.d[1], H = p.x.d[2], W = p.x.d[3], K = p.w.d[0], R = p.w.d[2], S = p.w.d[3];
    size_t P = p.y.d[2], Q = p.y.d[3], es = type_size(p.x.type);
    size_t ph = p.cv.pad[0], pw = p.cv.pad[1];
    const algo_def &a = algos[p.op][algo];
    if (a.shapes == FFT) {
        size_t fh = pow2_at_least(H + 2 * ph), fw = pow2_at_least(W + 2 * pw);
        return a256(8 * fh * (fw / 2 + 1) * (N * C + K * C + N * K));
    }
    if (a.shapes == FFT_TILES) {
        size_t t = ((H + 2 * ph + 31) / 32) * ((W + 2 * pw + 31) / 32);
        return a256(8 * 32 * 17 * (N * C * t + K * C + N * K * t));
    }
    if (a.shapes == WINOGRAD3) return a256(64 * K * C);
    if (a.shapes == WINOGRAD35) {
        size_t m = R == 3 ? 4 : 2;
        size_t oh = p.op == BWD_DATA ? H : P, ow = p.op == BWD_DATA ? W : Q;
        size_t t = ((oh + m - 1) / m) * ((ow + m - 1) / m);
        return a256(144 * (K * C + t * N * (C + K)));
    }
    switch (p.op) {
    case FWD:
        if (algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) return a256(8 * C * R * S) + a256(4 * N * P * Q);
        if (algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM) return a256(es * C * R * S * N * P * Q);
        return 0;
    case BWD_DATA:
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 ? a256(es * K * C * R * S) : 0;
    default:
        if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) return a256(4 * K * C * R * S);
        if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3) return a256(4 * K * C * R * S * std::min<size_t>(N, 8));
        return 0;
    }
}

/* What algorithm `algo` of p.op answers under math type `math`. */
struct answer {
    cudnnStatus_t status;
    std::string why;          /* when status is not success */
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;     /* what it computes with */
    int compute;
};

answer ask(const problem &p, int algo, cudnnMathType_t math)
{
    const faults &f = fault_switches();
    const algo_def &a = algos[p.op][algo];
    answer r;
    r.status = CUDNN_STATUS_SUCCESS;
    r.memory = f.ws_huge[p.op][algo] ? HUGE_WS : workspace(p, algo);
    r.determinism = a.deterministic && !f.no_deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    r.math = a.tensor ? math : CUDNN_FMA_MATH;
    r.compute = C_FP32;
    cudnnDataType_t t = p.x.type;
    char buf[300];
    if (t != CUDNN_DATA_FLOAT && t != CUDNN_DATA_BFLOAT16) {
        snprintf(buf, sizeof buf, "%s tensors: the emulated cuDNN computes FLOAT and BFLOAT16 only", type_name(t));
        r.status = CUDNN_STATUS_NOT_SUPPORTED, r.why = buf;
    } else if (p.cv.compute != CUDNN_DATA_FLOAT) {
        snprintf(buf, sizeof buf, "%s tensors with a %s compute type: not a configuration (FLOAT_CONFIG and "
                 "PSEUDO_BFLOAT16_CONFIG compute in FLOAT)", type_name(t), type_name(p.cv.compute));
        r.status = CUDNN_STATUS_NOT_SUPPORTED, r.why = buf;
    } else if (!no_overlap(p.x) || !no_overlap(p.y)) {
        r.status = CUDNN_STATUS_NOT_SUPPORTED, r.why = "a tensor whose strides make elements overlap";
    } else if (!(r.why = shape_refusal(p, a)).empty()) {
        r.status = CUDNN_STATUS_NOT_SUPPORTED;
    } else if (t == CUDNN_DATA_BFLOAT16 && p.x.d[0] < f.no_bf16_below) {
        snprintf(buf, sizeof buf, "%s: BFLOAT16 refused at batch %lld (fault cudnn_no_bf16)", a.name,
                 (long long)p.x.d[0]);
        r.status = CUDNN_STATUS_NOT_SUPPORTED, r.why = buf;
    } else if (t == CUDNN_DATA_BFLOAT16) {
        if (!a.tensor || (math != CUDNN_TENSOR_OP_MATH && math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)) {
            snprintf(buf, sizeof buf, "%s: BFLOAT16 tensors need a tensor-core algorithm and TENSOR_OP math (%s math "
                     "asked)", a.name, math_name(math));
            r.status = CUDNN_STATUS_NOT_SUPPORTED, r.why = buf;
        }
        r.math = math;
        r.compute = C_BF16;
    } else if (a.tensor && math == CUDNN_TENSOR_OP_MATH && f.fp16_conversion) {
        r.math = CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;   /* as the fault says cuDNN chose */
        r.compute = C_FP16;
    } else if (a.tensor && math != CUDNN_FMA_MATH) {
        r.compute = math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? C_FP16 : C_TF32;
    }
    return r;
}

/* ---- the computation ---- */

/* Everything a queued convolution needs, by value. */
struct job {
    problem p;
    int algo;
    int compute;
    bool atomics;          /* non-deterministic: partial sums in a random order */
    bool split;            /* deterministic with a workspace: a split sum (see parts) */
    float alpha, beta;
    const void *x, *w, *y; /* the inputs of the op (y: dy); its output is out */
    void *out;
    void *ws;
    size_t ws_used;
};

/* a's elements as float (rounded as `compute` takes them) in the order [d0][d2][d3][d1]
 * (NHWC, or KRSC for a filter, flipped in r and s when asked) */
std::vector<float> pack(const array4 &a, const void *base, int compute, bool flip)
{
    int64_t A = a.d[0], C = a.d[1], H = a.d[2], W = a.d[3];
    std::vector<float> v((size_t)(A * C * H * W));
    float *o = v.data();
    for (int64_t i = 0; i < A; i++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++) {
                int64_t hh = flip ? H - 1 - h : h, ww = flip ? W - 1 - w : w;
                int64_t off = i * a.st[0] + hh * a.st[2] + ww * a.st[3];
                if (a.type == CUDNN_DATA_BFLOAT16) {
                    const uint16_t *b = (const uint16_t *)base + off;
                    for (int64_t c = 0; c < C; c++) *o++ = bf16_to_float(b[c * a.st[1]]);
                } else {
                    const float *b = (const float *)base + off;
                    for (int64_t c = 0; c < C; c++) *o++ = round_input(b[c * a.st[1]], compute);
                }
            }
    return v;
}

/* The parts of each output element in the order they are added: acc[e * m + j] is element
 * e's j-th (e in pack's order). Into out either once, out = alpha * (sum of the parts, in
 * float) + beta * out, rounded once to out's type (each_add false); or part by part as atomics
 * and split-K epilogues add into memory, out = beta * out, then out += alpha * part for each
 * part, rounded to out's type after every add (a bf16 out loses bits at each). out is not
 * read when beta is 0. */
void unpack(const array4 &a, void *base, const std::vector<float> &acc, int m, float alpha, float beta, bool flip,
            bool each_add)
{
    int64_t A = a.d[0], C = a.d[1], H = a.d[2], W = a.d[3];
    const bool bf16 = a.type == CUDNN_DATA_BFLOAT16;
    auto to_out = [bf16](float v) { return bf16 ? bf16_to_float(float_to_bf16(v)) : v; };
    const float *s = acc.data();
    for (int64_t i = 0; i < A; i++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t w = 0; w < W; w++) {
                int64_t hh = flip ? H - 1 - h : h, ww = flip ? W - 1 - w : w;
                int64_t off = i * a.st[0] + hh * a.st[2] + ww * a.st[3];
                for (int64_t c = 0; c < C; c++, s += m) {
                    int64_t e = off + c * a.st[1];
                    uint16_t *b16 = (uint16_t *)base + e;
                    float *b32 = (float *)base + e;
                    float old = beta == 0 ? 0 : bf16 ? bf16_to_float(*b16) : *b32;
                    float v;
                    if (!each_add) {
                        float sum = 0;
                        for (int j = 0; j < m; j++) sum += s[j];
                        v = alpha * sum;
                        if (beta != 0) v += beta * old;
                    } else {
                        v = beta != 0 ? to_out(beta * old) : 0;
                        for (int j = 0; j < m; j++) v = to_out(v + alpha * s[j]);
                    }
                    if (bf16) *b16 = float_to_bf16(v);
                    else *b32 = v;
                }
            }
}

uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* dst[i * m + j] = the j-th of the m partial vectors part[. * len + i] to be added: in order,
 * or (atomics) starting at a part drawn for each element */
void combine(const float *part, int m, int64_t len, float *dst, bool atomics, uint64_t seed, uint64_t at)
{
    for (int64_t i = 0; i < len; i++) {
        int start = atomics ? (int)(mix(seed ^ (at + i) * 0x9e3779b97f4a7c15ull) % m) : 0;
        for (int j = 0; j < m; j++) dst[i * m + j] = part[(int64_t)((start + j) % m) * len + i];
    }
}

/* acc[0..n) += a * v[0..n): four lanes a step, which the compiler's straight-line vectoriser
 * takes at -O2; each acc[i] still sums in the loop's order */
inline void axpy(float *__restrict acc, const float *__restrict v, float a, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        acc[i] += a * v[i];
        acc[i + 1] += a * v[i + 1];
        acc[i + 2] += a * v[i + 2];
        acc[i + 3] += a * v[i + 3];
    }
    for (; i < n; i++) acc[i] += a * v[i];
}

/* The parts an algorithm's sum is cut into: a non-deterministic one's, at most `most`; a
 * split deterministic one's (a workspace, beta != 0), two halves; else one. */
int parts(const job &j, int64_t n, int most)
{
    return j.atomics ? (int)std::min<int64_t>(n, most) : j.split && j.beta != 0 ? (int)std::min<int64_t>(n, 2) : 1;
}

/* Whether the parts go into the output one by one (unpack): atomics into bf16 or onto an
 * output being added to, and a split algorithm's epilogue adding to one. */
bool each_add(const job &j, const array4 &out)
{
    return (j.atomics && (out.type == CUDNN_DATA_BFLOAT16 || j.beta != 0)) || (j.split && j.beta != 0);
}

void run(const job &j)
{
    const problem &p = j.p;
    const int64_t N = p.x.d[0], C = p.x.d[1], H = p.x.d[2], W = p.x.d[3];
    const int64_t K = p.w.d[0], R = p.w.d[2], S = p.w.d[3], P = p.y.d[2], Q = p.y.d[3];
    const int u = p.cv.stride[0], v = p.cv.stride[1], ph = p.cv.pad[0], pw = p.cv.pad[1];
    const int dh = p.cv.dil[0], dw = p.cv.dil[1];
    const bool flip = p.cv.flip;
    uint64_t seed = j.atomics ? emu::random("cudnn-atomics") : 0;

    if (j.ws_used) {   /* the algorithm's own use of its workspace */
        static const unsigned char pattern[4] = {0xee, 0xff, 0xc0, 0xff};   /* 0xffc0ffee */
        unsigned char *b = (unsigned char *)j.ws;
        for (size_t i = 0; i < j.ws_used; i++) b[i] = pattern[i % 4];
    }

    if (p.op == FWD) {
        std::vector<float> x = pack(p.x, j.x, j.compute, false), wk = pack(p.w, j.w, j.compute, flip);
        std::vector<float> wt((size_t)(R * S * C * K));   /* [r][s][c][k] */
        for (int64_t k = 0; k < K; k++)
            for (int64_t rs = 0; rs < R * S; rs++)
                for (int64_t c = 0; c < C; c++) wt[(rs * C + c) * K + k] = wk[(k * R * S + rs) * C + c];
        int m = parts(j, C, 4);
        std::vector<float> y((size_t)(N * P * Q * K * m));
        std::vector<float> part((size_t)(m * K));
        for (int64_t n = 0; n < N; n++)
            for (int64_t pp = 0; pp < P; pp++)
                for (int64_t q = 0; q < Q; q++) {
                    std::fill(part.begin(), part.end(), 0.0f);
                    for (int64_t r = 0; r < R; r++) {
                        int64_t h = pp * u - ph + r * dh;
                        if (h < 0 || h >= H) continue;
                        for (int64_t s = 0; s < S; s++) {
                            int64_t w = q * v - pw + s * dw;
                            if (w < 0 || w >= W) continue;
                            const float *xr = &x[((n * H + h) * W + w) * C];
                            for (int64_t c = 0; c < C; c++)
                                axpy(&part[(c * m / C) * K], &wt[((r * S + s) * C + c) * K], xr[c], K);
                        }
                    }
                    int64_t at = ((n * P + pp) * Q + q) * K;
                    combine(part.data(), m, K, &y[at * m], j.atomics, seed, at);
                }
        unpack(p.y, j.out, y, m, j.alpha, j.beta, false, each_add(j, p.y));
    } else if (p.op == BWD_DATA) {
        std::vector<float> dy = pack(p.y, j.y, j.compute, false), wk = pack(p.w, j.w, j.compute, flip);
        int m = parts(j, K, 4);
        std::vector<float> dx((size_t)(N * H * W * C * m));
        std::vector<float> part((size_t)(m * C));
        for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    std::fill(part.begin(), part.end(), 0.0f);
                    for (int64_t r = 0; r < R; r++) {
                        int64_t t = h + ph - r * dh;
                        if (t < 0 || t % u) continue;
                        int64_t pp = t / u;
                        if (pp >= P) continue;
                        for (int64_t s = 0; s < S; s++) {
                            int64_t t2 = w + pw - s * dw;
                            if (t2 < 0 || t2 % v) continue;
                            int64_t q = t2 / v;
                            if (q >= Q) continue;
                            const float *dyr = &dy[((n * P + pp) * Q + q) * K];
                            for (int64_t k = 0; k < K; k++)
                                axpy(&part[(k * m / K) * C], &wk[((k * R + r) * S + s) * C], dyr[k], C);
                        }
                    }
                    int64_t at = ((n * H + h) * W + w) * C;
                    combine(part.data(), m, C, &dx[at * m], j.atomics, seed, at);
                }
        unpack(p.x, j.out, dx, m, j.alpha, j.beta, false, each_add(j, p.x));
    } else {
        std::vector<float> x = pack(p.x, j.x, j.compute, false), dy = pack(p.y, j.y, j.compute, false);
        /* atomics: one part per image, as cuDNN's non-deterministic backward-filter adds them */
        int m = parts(j, N, INT_MAX);
        std::vector<float> dwk((size_t)(K * R * S * C * m));   /* flipped KRSC, as pack gives w */
        std::vector<float> part((size_t)(m * C));
        for (int64_t k = 0; k < K; k++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t s = 0; s < S; s++) {
                    std::fill(part.begin(), part.end(), 0.0f);
                    for (int64_t n = 0; n < N; n++) {
                        float *acc = &part[(n * m / N) * C];
                        for (int64_t pp = 0; pp < P; pp++) {
                            int64_t h = pp * u - ph + r * dh;
                            if (h < 0 || h >= H) continue;
                            for (int64_t q = 0; q < Q; q++) {
                                int64_t w = q * v - pw + s * dw;
                                if (w < 0 || w >= W) continue;
                                axpy(acc, &x[((n * H + h) * W + w) * C], dy[((n * P + pp) * Q + q) * K + k], C);
                            }
                        }
                    }
                    int64_t at = ((k * R + r) * S + s) * C;
                    combine(part.data(), m, C, &dwk[at * m], j.atomics, seed, at);
                }
        unpack(p.w, j.out, dwk, m, j.alpha, j.beta, flip, each_add(j, p.w));
    }
}

/* ---- the calls shared by the three ops ---- */

const char *const op_names[OPS] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                   "cudnnConvolutionBackwardFilter"};

cudnnStatus_t check_handle(const char *fn, cudnnHandle_t h)
{
    need_live(fn, "handle", h, HANDLE);
    if (!h) return fail(CUDNN_STATUS_BAD_PARAM, fn, "handle is NULL");
    std::string what = std::string(fn) + ": the cuDNN handle";
    emu::check_current(h->device, what.c_str());
    return CUDNN_STATUS_SUCCESS;
}

/* The perf results of p.op: every algorithm once, the supported first; Find's in a drawn
 * order with increasing times, Get_v7's in the heuristics' order. */
template <typename Perf, typename Algo>
cudnnStatus_t list(const char *fn, bool find, cudnnHandle_t h, const problem *p, cudnnStatus_t st, int requested,
                   int *returned, Perf *out)
{
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if ((st = check_handle(fn, h)) != CUDNN_STATUS_SUCCESS) return st;
    if (requested < 1) return fail(CUDNN_STATUS_BAD_PARAM, fn, "requestedAlgoCount %d is not positive", requested);
    if (!returned || !out) return fail(CUDNN_STATUS_BAD_PARAM, fn, "returnedAlgoCount or perfResults is NULL");
    std::vector<Perf> ok, refused;
    for (int i = 0; i < algo_count[p->op]; i++) {
        int a = heuristic_order[p->op][i];
        answer r = ask(*p, a, p->cv.math);
        Perf e;
        memset(&e, 0, sizeof e);
        e.algo = (Algo)a;
        e.status = r.status;
        e.time = -1;
        e.memory = r.memory;
        e.determinism = r.determinism;
        e.mathType = r.math;
        if (find && r.status == CUDNN_STATUS_SUCCESS && r.memory >= HUGE_WS)
            e.status = CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;   /* its workspace could not be had */
        (e.status == CUDNN_STATUS_SUCCESS ? ok : refused).push_back(e);
    }
    if (find) {
        for (size_t i = ok.size(); i > 1; i--) std::swap(ok[i - 1], ok[emu::random("cudnn-find") % i]);
        if (fault_switches().nondet_first)
            std::stable_partition(ok.begin(), ok.end(), [](const Perf &e) { return e.determinism == CUDNN_NON_DETERMINISTIC; });
        for (size_t i = 0; i < ok.size(); i++) ok[i].time = 0.05f * (float)(i + 1);
    }
    ok.insert(ok.end(), refused.begin(), refused.end());
    int n = std::min<int>(requested, (int)ok.size());
    for (int i = 0; i < n; i++) out[i] = ok[i];
    *returned = n;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t workspace_size(const char *fn, cudnnHandle_t h, const problem *p, cudnnStatus_t st, int algo,
                             size_t *bytes)
{
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if ((st = check_handle(fn, h)) != CUDNN_STATUS_SUCCESS) return st;
    if (!bytes) return fail(CUDNN_STATUS_BAD_PARAM, fn, "sizeInBytes is NULL");
    if (algo < 0 || algo >= algo_count[p->op])
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "algo %d is not an algorithm of this op", algo);
    answer r = ask(*p, algo, p->cv.math);
    if (r.status != CUDNN_STATUS_SUCCESS) return fail(r.status, fn, "%s", r.why.c_str());
    *bytes = r.memory;
    return CUDNN_STATUS_SUCCESS;
}

bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}

float scale_of(const char *fn, const char *arg, const void *s)
{
    if (emu::kind_of(s, nullptr, nullptr) == emu::MEM_DEVICE)
        emu::defect("%s: %s %p is device memory; cuDNN reads its scaling factors on the host", fn, arg, s);
    return *(const float *)s;
}

/* One convolution: everything checked that real cuDNN answers with a status, then every
 * range, then queued on the handle's stream. in0, in1: the op's inputs (fwd x, w; bwd data
 * w, dy; bwd filter x, dy); out its output. */
cudnnStatus_t execute(int op, cudnnHandle_t h, const void *alpha, const problem *p, cudnnStatus_t st,
                      const void *in0, const void *in1, int algo, void *ws, size_t ws_bytes, const void *beta,
                      void *out)
{
    const char *fn = op_names[op];
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if ((st = check_handle(fn, h)) != CUDNN_STATUS_SUCCESS) return st;
    static const char *const arg_names[OPS][3] = {{"x", "w", "y"}, {"w", "dy", "dx"}, {"x", "dy", "dw"}};
    const char *const *an = arg_names[op];
    if (!alpha || !beta) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s is NULL", alpha ? "beta" : "alpha");
    if (!in0 || !in1 || !out)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s is NULL", !in0 ? an[0] : !in1 ? an[1] : an[2]);
    if (algo < 0 || algo >= algo_count[op])
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "algo %d is not an algorithm of this op", algo);
    const algo_def &a = algos[op][algo];
    answer r = ask(*p, algo, p->cv.math);
    if (r.status != CUDNN_STATUS_SUCCESS) return fail(r.status, fn, "%s", r.why.c_str());
    if (ws_bytes < r.memory)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "workSpaceSizeInBytes %zu is less than the %zu bytes %s needs", ws_bytes,
                    r.memory, a.name);
    if (r.memory && !ws) return fail(CUDNN_STATUS_BAD_PARAM, fn, "workSpace is NULL; %s needs %zu bytes", a.name, r.memory);
    size_t es = type_size(p->x.type);
    /* the arrays in argument order, and which are read */
    const array4 *arr[OPS][3] = {{&p->x, &p->w, &p->y}, {&p->w, &p->y, &p->x}, {&p->x, &p->y, &p->w}};
    const void *ptr[3] = {in0, in1, out};
    for (int i = 0; i < 3; i++)
        if ((uintptr_t)ptr[i] % es)
            return fail(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, fn, "%s %p is not aligned to its %zu-byte elements",
                        an[i], ptr[i], es);
    cudnnStatus_t injected = fault_switches().exec_fail[op][algo];
    if (injected == CUDNN_STATUS_NOT_SUPPORTED)
        return fail(injected, fn, "%s cannot run this configuration (fault cudnn_exec_fail)", a.name);

    float fa = scale_of(fn, "alpha", alpha), fb = scale_of(fn, "beta", beta);
    size_t bytes[3];
    for (int i = 0; i < 3; i++) {
        bytes[i] = extent_bytes(*arr[op][i]);
        std::string what = std::string(fn) + ": " + an[i] + " (" + describe(*arr[op][i]) + ")";
        emu::check_range(ptr[i], bytes[i], emu::MEM_DEVICE, what.c_str());
        emu::check_device(ptr[i], h->device, what.c_str());
    }
    if (ws && ws_bytes) {
        std::string what = std::string(fn) + ": workSpace (" + std::to_string(ws_bytes) + " bytes)";
        emu::check_range(ws, ws_bytes, emu::MEM_DEVICE, what.c_str());
        emu::check_device(ws, h->device, what.c_str());
    }
    for (int i = 0; i < 2; i++)
        if (overlaps(out, bytes[2], ptr[i], bytes[i]))
            emu::defect("%s: the output %s [%p, +%zu) overlaps the input %s [%p, +%zu)", fn, an[2], out, bytes[2], an[i],
                        ptr[i], bytes[i]);
    size_t ws_need = ws ? r.memory : 0;
    for (int i = 0; i < 3; i++)
        if (overlaps(ws, ws_need, ptr[i], bytes[i]))
            emu::defect("%s: workSpace [%p, +%zu) overlaps %s [%p, +%zu)", fn, ws, ws_need, an[i], ptr[i], bytes[i]);

    job j;
    j.p = *p;
    j.algo = algo;
    j.compute = r.compute;
    j.atomics = r.determinism == CUDNN_NON_DETERMINISTIC;
    j.split = !j.atomics && r.memory > 0;
    j.alpha = fa, j.beta = fb;
    j.ws = ws, j.ws_used = ws_need;
    j.out = out;
    j.x = op == BWD_DATA ? nullptr : in0;
    j.w = op == FWD ? in1 : op == BWD_DATA ? in0 : nullptr;
    j.y = op == FWD ? nullptr : in1;
    if (injected == CUDNN_STATUS_EXECUTION_FAILED) {
        emu::enqueue(h->stream, fn, [j] {
            static const unsigned char pattern[4] = {0xee, 0xff, 0xc0, 0xff};
            for (size_t i = 0; i < j.ws_used; i++) ((unsigned char *)j.ws)[i] = pattern[i % 4];
        }, {{ws, ws_need}});
        return fail(injected, fn, "%s failed to launch its second kernel (fault cudnn_exec_fail)", a.name);
    }
    emu::enqueue(h->stream, fn, [j] { run(j); },
                 {{in0, bytes[0]}, {in1, bytes[1]}, {out, bytes[2]}, {ws, ws_need}});
    return CUDNN_STATUS_SUCCESS;
}

}  // namespace

/* ---- entry points ---- */

extern "C" {

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *cudnnGetErrorString(cudnnStatus_t status)
{
    switch ((int)status) {
#define NAME(s) \
    case s: return #s
        NAME(CUDNN_STATUS_SUCCESS);
        NAME(CUDNN_STATUS_NOT_INITIALIZED);
        NAME(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH);
        NAME(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH);
        NAME(CUDNN_STATUS_DEPRECATED);
        NAME(CUDNN_STATUS_LICENSE_ERROR);
        NAME(CUDNN_STATUS_RUNTIME_IN_PROGRESS);
        NAME(CUDNN_STATUS_RUNTIME_FP_OVERFLOW);
        NAME(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED);
        NAME(CUDNN_STATUS_BAD_PARAM);
        NAME(CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
        NAME(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
        NAME(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
        NAME(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND);
        NAME(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT);
        NAME(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH);
        NAME(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);
        NAME(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES);
        NAME(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
        NAME(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH);
        NAME(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE);
        NAME(CUDNN_STATUS_NOT_SUPPORTED);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_SHAPE);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_PADDING);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API);
        NAME(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE);
        NAME(CUDNN_STATUS_INTERNAL_ERROR);
        NAME(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED);
        NAME(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE);
        NAME(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED);
        NAME(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);
        NAME(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM);
        NAME(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED);
        NAME(CUDNN_STATUS_EXECUTION_FAILED);
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER);
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS);
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CUDART);
        NAME(CUDNN_STATUS_EXECUTION_FAILED_CURAND);
        NAME(CUDNN_STATUS_INVALID_VALUE);   /* the one deprecated alias with a value of its own */
#undef NAME
    }
    return "CUDNN_STATUS_UNKNOWN";
}

void cudnnGetLastErrorString(char *message, size_t max_size)
{
    if (!message || !max_size) return;
    snprintf(message, max_size, "%s", last_error.c_str());
    last_error.clear();
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
    if (!handle) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate", "handle is NULL");
    *handle = new cudnnContext;
    (*handle)->device = emu::current_device();
    remember(*handle, HANDLE);
    return CUDNN_STATUS_SUCCESS;
}

/* As cuDNN documents, destroying a handle synchronises the device. */
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
    if (!handle) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy", "handle is NULL");
    if (!forget(handle, HANDLE)) emu::defect("cudnnDestroy: handle %p is not a live cuDNN handle", (void *)handle);
    emu::sync_all();
    delete handle;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId)
{
    cudnnStatus_t st = check_handle("cudnnSetStream", handle);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    /* cuDNN 9: a stream of another device than the handle's */
    if (emu::stream_device(streamId) != handle->device)
        return fail(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, "cudnnSetStream",
                    "the stream is device %d's, the handle device %d's", emu::stream_device(streamId), handle->device);
    handle->stream = streamId;
    return st;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId)
{
    cudnnStatus_t st = check_handle("cudnnGetStream", handle);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (!streamId) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream", "streamId is NULL");
    *streamId = handle->stream;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- tensor descriptors ---- */

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc)
{
    if (!tensorDesc) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreateTensorDescriptor", "tensorDesc is NULL");
    *tensorDesc = new cudnnTensorStruct;
    remember(*tensorDesc, TENSOR);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc)
{
    if (!tensorDesc) return CUDNN_STATUS_SUCCESS;
    if (!forget(tensorDesc, TENSOR))
        emu::defect("cudnnDestroyTensorDescriptor: %p is not a live tensor descriptor", (void *)tensorDesc);
    delete tensorDesc;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t set_tensor(const char *fn, cudnnTensorDescriptor_t d, cudnnDataType_t type, const int dim[4],
                                const int stride[4])
{
    need_live(fn, "tensorDesc", d, TENSOR);
    if (!d) return fail(CUDNN_STATUS_BAD_PARAM, fn, "tensorDesc is NULL");
    if (!known_type(type)) return fail(CUDNN_STATUS_BAD_PARAM, fn, "dataType %d is not a cudnnDataType_t", (int)type);
    static const char *const dn[4] = {"n", "c", "h", "w"}, *const sn[4] = {"nStride", "cStride", "hStride", "wStride"};
    int64_t elems = 1;
    for (int i = 0; i < 4; i++) {
        if (dim[i] <= 0) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s = %d is not positive", dn[i], dim[i]);
        if (stride[i] < 0) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s = %d is negative", sn[i], stride[i]);
        elems *= dim[i];
    }
    if (elems > INT32_MAX)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, fn, "%" PRId64 " elements: more than the 2^31 a descriptor takes",
                    elems);
    d->type = type;
    memcpy(d->dim, dim, sizeof d->dim);
    memcpy(d->stride, stride, sizeof d->stride);
    d->set = true;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c, int h, int w)
{
    const char *fn = "cudnnSetTensor4dDescriptor";
    int dim[4] = {n, c, h, w};
    int64_t s64[4], C = c, H = h, W = w;
    if (format == CUDNN_TENSOR_NCHW) {
        s64[3] = 1, s64[2] = W, s64[1] = H * W, s64[0] = C * H * W;
    } else if (format == CUDNN_TENSOR_NHWC) {
        s64[1] = 1, s64[3] = C, s64[2] = W * C, s64[0] = H * W * C;
    } else if (format == CUDNN_TENSOR_NCHW_VECT_C) {
        need_live(fn, "tensorDesc", tensorDesc, TENSOR);
        if (!vector_type(dataType))
            return fail(CUDNN_STATUS_BAD_PARAM, fn, "NCHW_VECT_C takes a vector data type, not %s", type_name(dataType));
        return fail(CUDNN_STATUS_NOT_SUPPORTED, fn, "NCHW_VECT_C is not emulated");
    } else {
        need_live(fn, "tensorDesc", tensorDesc, TENSOR);
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "format %d is not a cudnnTensorFormat_t", (int)format);
    }
    /* a stride past int's range comes with a size set_tensor refuses */
    int st[4];
    for (int i = 0; i < 4; i++) st[i] = (int)std::min<int64_t>(std::max<int64_t>(s64[i], 0), INT32_MAX);
    return set_tensor(fn, tensorDesc, dataType, dim, st);
}

cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t tensorDesc, cudnnDataType_t dataType, int n,
                                           int c, int h, int w, int nStride, int cStride, int hStride, int wStride)
{
    int dim[4] = {n, c, h, w}, st[4] = {nStride, cStride, hStride, wStride};
    return set_tensor("cudnnSetTensor4dDescriptorEx", tensorDesc, dataType, dim, st);
}

cudnnStatus_t cudnnGetTensor4dDescriptor(const cudnnTensorDescriptor_t tensorDesc, cudnnDataType_t *dataType,
                                         int *n, int *c, int *h, int *w, int *nStride, int *cStride, int *hStride,
                                         int *wStride)
{
    const char *fn = "cudnnGetTensor4dDescriptor";
    need_live(fn, "tensorDesc", tensorDesc, TENSOR);
    if (!tensorDesc) return fail(CUDNN_STATUS_BAD_PARAM, fn, "tensorDesc is NULL");
    if (!tensorDesc->set) return fail(CUDNN_STATUS_BAD_PARAM, fn, "tensorDesc was created but never set");
    if (!dataType || !n || !c || !h || !w || !nStride || !cStride || !hStride || !wStride)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "an output pointer is NULL");
    *dataType = tensorDesc->type;
    *n = tensorDesc->dim[0], *c = tensorDesc->dim[1], *h = tensorDesc->dim[2], *w = tensorDesc->dim[3];
    *nStride = tensorDesc->stride[0], *cStride = tensorDesc->stride[1];
    *hStride = tensorDesc->stride[2], *wStride = tensorDesc->stride[3];
    return CUDNN_STATUS_SUCCESS;
}

/* ---- filter descriptors ---- */

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc)
{
    if (!filterDesc) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreateFilterDescriptor", "filterDesc is NULL");
    *filterDesc = new cudnnFilterStruct;
    remember(*filterDesc, FILTER);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc)
{
    if (!filterDesc) return CUDNN_STATUS_SUCCESS;
    if (!forget(filterDesc, FILTER))
        emu::defect("cudnnDestroyFilterDescriptor: %p is not a live filter descriptor", (void *)filterDesc);
    delete filterDesc;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w)
{
    const char *fn = "cudnnSetFilter4dDescriptor";
    need_live(fn, "filterDesc", filterDesc, FILTER);
    if (!filterDesc) return fail(CUDNN_STATUS_BAD_PARAM, fn, "filterDesc is NULL");
    if (!known_type(dataType))
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "dataType %d is not a cudnnDataType_t", (int)dataType);
    if (format == CUDNN_TENSOR_NCHW_VECT_C)
        return vector_type(dataType)
                   ? fail(CUDNN_STATUS_NOT_SUPPORTED, fn, "NCHW_VECT_C is not emulated")
                   : fail(CUDNN_STATUS_BAD_PARAM, fn, "NCHW_VECT_C takes a vector data type, not %s", type_name(dataType));
    if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "format %d is not a cudnnTensorFormat_t", (int)format);
    int dim[4] = {k, c, h, w};
    static const char *const dn[4] = {"k", "c", "h", "w"};
    for (int i = 0; i < 4; i++)
        if (dim[i] <= 0) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s = %d is not positive", dn[i], dim[i]);
    if ((int64_t)k * c * h * w > INT32_MAX)
        return fail(CUDNN_STATUS_NOT_SUPPORTED, fn, "more than the 2^31 elements a descriptor takes");
    filterDesc->type = dataType;
    filterDesc->format = format;
    memcpy(filterDesc->dim, dim, sizeof dim);
    filterDesc->set = true;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetFilter4dDescriptor(const cudnnFilterDescriptor_t filterDesc, cudnnDataType_t *dataType,
                                         cudnnTensorFormat_t *format, int *k, int *c, int *h, int *w)
{
    const char *fn = "cudnnGetFilter4dDescriptor";
    need_live(fn, "filterDesc", filterDesc, FILTER);
    if (!filterDesc) return fail(CUDNN_STATUS_BAD_PARAM, fn, "filterDesc is NULL");
    if (!filterDesc->set) return fail(CUDNN_STATUS_BAD_PARAM, fn, "filterDesc was created but never set");
    if (!dataType || !format || !k || !c || !h || !w) return fail(CUDNN_STATUS_BAD_PARAM, fn, "an output pointer is NULL");
    *dataType = filterDesc->type;
    *format = filterDesc->format;
    *k = filterDesc->dim[0], *c = filterDesc->dim[1], *h = filterDesc->dim[2], *w = filterDesc->dim[3];
    return CUDNN_STATUS_SUCCESS;
}

/* ---- convolution descriptors ---- */

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc)
{
    if (!convDesc) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreateConvolutionDescriptor", "convDesc is NULL");
    *convDesc = new cudnnConvolutionStruct;
    remember(*convDesc, CONV);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc)
{
    if (!convDesc) return CUDNN_STATUS_SUCCESS;
    if (!forget(convDesc, CONV))
        emu::defect("cudnnDestroyConvolutionDescriptor: %p is not a live convolution descriptor", (void *)convDesc);
    delete convDesc;
    return CUDNN_STATUS_SUCCESS;
}

/* The math type is the descriptor's own setting: setting the geometry leaves it. */
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u,
                                              int v, int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType)
{
    const char *fn = "cudnnSetConvolution2dDescriptor";
    need_live(fn, "convDesc", convDesc, CONV);
    if (!convDesc) return fail(CUDNN_STATUS_BAD_PARAM, fn, "convDesc is NULL");
    if (pad_h < 0 || pad_w < 0) return fail(CUDNN_STATUS_BAD_PARAM, fn, "padding %dx%d is negative", pad_h, pad_w);
    if (u <= 0 || v <= 0) return fail(CUDNN_STATUS_BAD_PARAM, fn, "stride %dx%d is not positive", u, v);
    if (dilation_h <= 0 || dilation_w <= 0)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "dilation %dx%d is not positive", dilation_h, dilation_w);
    if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "mode %d is not a cudnnConvolutionMode_t", (int)mode);
    if (!known_type(computeType))
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "computeType %d is not a cudnnDataType_t", (int)computeType);
    convDesc->pad[0] = pad_h, convDesc->pad[1] = pad_w;
    convDesc->stride[0] = u, convDesc->stride[1] = v;
    convDesc->dil[0] = dilation_h, convDesc->dil[1] = dilation_w;
    convDesc->mode = mode;
    convDesc->compute = computeType;
    convDesc->set = true;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dDescriptor(const cudnnConvolutionDescriptor_t convDesc, int *pad_h, int *pad_w,
                                              int *u, int *v, int *dilation_h, int *dilation_w,
                                              cudnnConvolutionMode_t *mode, cudnnDataType_t *computeType)
{
    const char *fn = "cudnnGetConvolution2dDescriptor";
    need_live(fn, "convDesc", convDesc, CONV);
    if (!convDesc) return fail(CUDNN_STATUS_BAD_PARAM, fn, "convDesc is NULL");
    if (!convDesc->set) return fail(CUDNN_STATUS_BAD_PARAM, fn, "convDesc was created but never set");
    if (!pad_h || !pad_w || !u || !v || !dilation_h || !dilation_w || !mode || !computeType)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "an output pointer is NULL");
    *pad_h = convDesc->pad[0], *pad_w = convDesc->pad[1];
    *u = convDesc->stride[0], *v = convDesc->stride[1];
    *dilation_h = convDesc->dil[0], *dilation_w = convDesc->dil[1];
    *mode = convDesc->mode;
    *computeType = convDesc->compute;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType)
{
    const char *fn = "cudnnSetConvolutionMathType";
    need_live(fn, "convDesc", convDesc, CONV);
    if (!convDesc) return fail(CUDNN_STATUS_BAD_PARAM, fn, "convDesc is NULL");
    if (mathType < CUDNN_DEFAULT_MATH || mathType > CUDNN_FMA_MATH)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "mathType %d is not a cudnnMathType_t", (int)mathType);
    convDesc->math = mathType;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t *mathType)
{
    const char *fn = "cudnnGetConvolutionMathType";
    need_live(fn, "convDesc", convDesc, CONV);
    if (!convDesc || !mathType) return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s is NULL", convDesc ? "mathType" : "convDesc");
    *mathType = convDesc->math;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h,
                                                    int *w)
{
    const char *fn = "cudnnGetConvolution2dForwardOutputDim";
    need_live(fn, "convDesc", convDesc, CONV);
    need_live(fn, "inputTensorDesc", inputTensorDesc, TENSOR);
    need_live(fn, "filterDesc", filterDesc, FILTER);
    if (!convDesc || !inputTensorDesc || !filterDesc)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "%s is NULL",
                    !convDesc ? "convDesc" : !inputTensorDesc ? "inputTensorDesc" : "filterDesc");
    if (!convDesc->set || !inputTensorDesc->set || !filterDesc->set)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "a descriptor was created but never set");
    if (!n || !c || !h || !w) return fail(CUDNN_STATUS_BAD_PARAM, fn, "an output pointer is NULL");
    const cudnnTensorStruct *x = inputTensorDesc;
    const cudnnFilterStruct *f = filterDesc;
    if (x->dim[1] != f->dim[1])
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "inputTensorDesc has %d channels, filterDesc %d input channels",
                    x->dim[1], f->dim[1]);
    int64_t P = out_size(x->dim[2], f->dim[2], convDesc->pad[0], convDesc->stride[0], convDesc->dil[0]);
    int64_t Q = out_size(x->dim[3], f->dim[3], convDesc->pad[1], convDesc->stride[1], convDesc->dil[1]);
    if (P <= 0 || Q <= 0)
        return fail(CUDNN_STATUS_BAD_PARAM, fn, "the %dx%d filter (dilation %dx%d) is larger than the %dx%d input "
                    "padded by %dx%d", f->dim[2], f->dim[3], convDesc->dil[0], convDesc->dil[1], x->dim[2], x->dim[3],
                    convDesc->pad[0], convDesc->pad[1]);
    *n = x->dim[0], *c = f->dim[0], *h = (int)P, *w = (int)Q;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- forward ---- */

cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle, int *count)
{
    cudnnStatus_t st = check_handle("cudnnGetConvolutionForwardAlgorithmMaxCount", handle);
    if (st == CUDNN_STATUS_SUCCESS && !count)
        st = fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionForwardAlgorithmMaxCount", "count is NULL");
    if (st == CUDNN_STATUS_SUCCESS) *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    return st;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                     const cudnnFilterDescriptor_t filterDesc,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t destDesc,
                                                     const int requestedAlgoCount, int *returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t *perfResults)
{
    const char *fn = "cudnnGetConvolutionForwardAlgorithm_v7";
    problem p;
    cudnnStatus_t st = read_problem(fn, FWD, srcDesc, filterDesc, convDesc, destDesc, &p);
    return list<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(fn, false, handle, &p, st,
                                                                         requestedAlgoCount, returnedAlgoCount,
                                                                         perfResults);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                   const cudnnFilterDescriptor_t wDesc,
                                                   const cudnnConvolutionDescriptor_t convDesc,
                                                   const cudnnTensorDescriptor_t yDesc, const int requestedAlgoCount,
                                                   int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults)
{
    const char *fn = "cudnnFindConvolutionForwardAlgorithm";
    problem p;
    cudnnStatus_t st = read_problem(fn, FWD, xDesc, wDesc, convDesc, yDesc, &p);
    return list<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(fn, true, handle, &p, st, requestedAlgoCount,
                                                                         returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes)
{
    const char *fn = "cudnnGetConvolutionForwardWorkspaceSize";
    problem p;
    cudnnStatus_t st = read_problem(fn, FWD, xDesc, wDesc, convDesc, yDesc, &p);
    return workspace_size(fn, handle, &p, st, (int)algo, sizeInBytes);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
                                      const cudnnTensorDescriptor_t yDesc, void *y)
{
    problem p;
    cudnnStatus_t st = read_problem(op_names[FWD], FWD, xDesc, wDesc, convDesc, yDesc, &p);
    return execute(FWD, handle, alpha, &p, st, x, w, (int)algo, workSpace, workSpaceSizeInBytes, beta, y);
}

/* ---- backward data ---- */

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle, int *count)
{
    cudnnStatus_t st = check_handle("cudnnGetConvolutionBackwardDataAlgorithmMaxCount", handle);
    if (st == CUDNN_STATUS_SUCCESS && !count)
        st = fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionBackwardDataAlgorithmMaxCount", "count is NULL");
    if (st == CUDNN_STATUS_SUCCESS) *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    return st;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
                                                          const cudnnFilterDescriptor_t filterDesc,
                                                          const cudnnTensorDescriptor_t diffDesc,
                                                          const cudnnConvolutionDescriptor_t convDesc,
                                                          const cudnnTensorDescriptor_t gradDesc,
                                                          const int requestedAlgoCount, int *returnedAlgoCount,
                                                          cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
{
    const char *fn = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
    problem p;
    cudnnStatus_t st = read_problem(fn, BWD_DATA, gradDesc, filterDesc, convDesc, diffDesc, &p);
    return list<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        fn, false, handle, &p, st, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                        const cudnnTensorDescriptor_t dyDesc,
                                                        const cudnnConvolutionDescriptor_t convDesc,
                                                        const cudnnTensorDescriptor_t dxDesc,
                                                        const int requestedAlgoCount, int *returnedAlgoCount,
                                                        cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
{
    const char *fn = "cudnnFindConvolutionBackwardDataAlgorithm";
    problem p;
    cudnnStatus_t st = read_problem(fn, BWD_DATA, dxDesc, wDesc, convDesc, dyDesc, &p);
    return list<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        fn, true, handle, &p, st, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                           const cudnnTensorDescriptor_t dyDesc,
                                                           const cudnnConvolutionDescriptor_t convDesc,
                                                           const cudnnTensorDescriptor_t dxDesc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes)
{
    const char *fn = "cudnnGetConvolutionBackwardDataWorkspaceSize";
    problem p;
    cudnnStatus_t st = read_problem(fn, BWD_DATA, dxDesc, wDesc, convDesc, dyDesc, &p);
    return workspace_size(fn, handle, &p, st, (int)algo, sizeInBytes);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
                                           const cudnnFilterDescriptor_t wDesc, const void *w,
                                           const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
                                           size_t workSpaceSizeInBytes, const void *beta,
                                           const cudnnTensorDescriptor_t dxDesc, void *dx)
{
    problem p;
    cudnnStatus_t st = read_problem(op_names[BWD_DATA], BWD_DATA, dxDesc, wDesc, convDesc, dyDesc, &p);
    return execute(BWD_DATA, handle, alpha, &p, st, w, dy, (int)algo, workSpace, workSpaceSizeInBytes, beta, dx);
}

/* ---- backward filter ---- */

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle, int *count)
{
    cudnnStatus_t st = check_handle("cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", handle);
    if (st == CUDNN_STATUS_SUCCESS && !count)
        st = fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", "count is NULL");
    if (st == CUDNN_STATUS_SUCCESS) *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    return st;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                            const cudnnTensorDescriptor_t diffDesc,
                                                            const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t gradDesc,
                                                            const int requestedAlgoCount, int *returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
{
    const char *fn = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
    problem p;
    cudnnStatus_t st = read_problem(fn, BWD_FILTER, srcDesc, gradDesc, convDesc, diffDesc, &p);
    return list<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        fn, false, handle, &p, st, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                          const cudnnTensorDescriptor_t dyDesc,
                                                          const cudnnConvolutionDescriptor_t convDesc,
                                                          const cudnnFilterDescriptor_t dwDesc,
                                                          const int requestedAlgoCount, int *returnedAlgoCount,
                                                          cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
{
    const char *fn = "cudnnFindConvolutionBackwardFilterAlgorithm";
    problem p;
    cudnnStatus_t st = read_problem(fn, BWD_FILTER, xDesc, dwDesc, convDesc, dyDesc, &p);
    return list<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        fn, true, handle, &p, st, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                             const cudnnTensorDescriptor_t dyDesc,
                                                             const cudnnConvolutionDescriptor_t convDesc,
                                                             const cudnnFilterDescriptor_t gradDesc,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes)
{
    const char *fn = "cudnnGetConvolutionBackwardFilterWorkspaceSize";
    problem p;
    cudnnStatus_t st = read_problem(fn, BWD_FILTER, xDesc, gradDesc, convDesc, dyDesc, &p);
    return workspace_size(fn, handle, &p, st, (int)algo, sizeInBytes);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void *x,
                                             const cudnnTensorDescriptor_t dyDesc, const void *dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
                                             size_t workSpaceSizeInBytes, const void *beta,
                                             const cudnnFilterDescriptor_t dwDesc, void *dw)
{
    problem p;
    cudnnStatus_t st = read_problem(op_names[BWD_FILTER], BWD_FILTER, xDesc, dwDesc, convDesc, dyDesc, &p);
    return execute(BWD_FILTER, handle, alpha, &p, st, x, dy, (int)algo, workSpace, workSpaceSizeInBytes, beta, dw);
}

}  // extern "C"
