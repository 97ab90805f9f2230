/* The emulated device's cuDNN and cuBLAS themselves (emu_cudnn.cc, emu_cublas.cc), used as a
 * program uses them: buffers from cudaMalloc, work on a stream, results copied back. The
 * three convolution ops against a direct loop in double (NCHW and NHWC tensors and
 * filters, explicit strides, padding, stride, dilation, both modes, alpha and beta, beta 0
 * over NaN), tf32 and bf16 arithmetic, the algorithm lists, the statuses of bad calls, the
 * workspace's pattern, non-deterministic sums, the defects that end a program and every
 * fault switch (each in a child process of its own: DS_EMU_FAULT is read once), and SGEMM
 * against a loop for the four transpose combinations with leading dimensions past the rows. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "emu_test.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#define DNN(call)                                                                                   \
    do {                                                                                            \
        cudnnStatus_t s_ = (call);                                                                  \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                           \
            char m_[512];                                                                           \
            cudnnGetLastErrorString(m_, sizeof m_);                                                 \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call, cudnnGetErrorString(s_), m_); \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

#define BLAS(call)                                                                                    \
    do {                                                                                              \
        cublasStatus_t s_ = (call);                                                                   \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                            \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasGetStatusName(s_));   \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

static std::string last_message()
{
    char m[512];
    cudnnGetLastErrorString(m, sizeof m);
    return m;
}

/* ---- numbers ---- */

static uint64_t rng = 88172645463325252ull;
static float uniform()   /* [-1, 1), with all 24 bits of mantissa in play */
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2 - 1);
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* the test's own roundings, to nearest even */
static float tf32(float f)
{
    uint32_t u = bits(f);
    uint32_t low = u & 0x1fff, half = 0x1000;
    u &= ~0x1fffu;
    if (low > half || (low == half && (u & 0x2000))) u += 0x2000;
    return from_bits(u);
}

static uint16_t to_bf16(float f)
{
    uint32_t u = bits(f), low = u & 0xffff;
    uint32_t hi = u >> 16;
    if (low > 0x8000 || (low == 0x8000 && (hi & 1))) hi++;
    return (uint16_t)hi;
}

static float from_bf16(uint16_t h) { return from_bits((uint32_t)h << 16); }

/* got vs ref (n values): |got - ref| <= atol + rtol |ref| for all; the worst in *why */
static bool close(const std::vector<double> &got, const std::vector<double> &ref, double atol, double rtol,
                  std::string *why)
{
    double worst = -1;
    size_t at = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        double err = std::fabs(got[i] - ref[i]), lim = atol + rtol * std::fabs(ref[i]);
        double excess = std::isnan(got[i]) ? INFINITY : err - lim;
        if (excess > worst) worst = excess, at = i;
    }
    if (worst <= 0) return true;
    char buf[200];
    snprintf(buf, sizeof buf, "element %zu of %zu: got %.9g, want %.9g (atol %g, rtol %g)", at, ref.size(), got[at],
             ref[at], atol, rtol);
    *why = buf;
    return false;
}

/* ---- 4-d arrays on the host, as cuDNN's descriptors lay them out ---- */

struct layout {
    int d[4];     /* n c h w, or k c r s */
    long st[4];
    long extent() const
    {
        long e = 1;
        for (int i = 0; i < 4; i++) e += (d[i] - 1) * st[i];
        return e;
    }
    long at(int a, int b, int c, int e) const { return a * st[0] + b * st[1] + c * st[2] + e * st[3]; }
};

static layout nchw(int n, int c, int h, int w) { return {{n, c, h, w}, {(long)c * h * w, (long)h * w, w, 1}}; }
static layout nhwc(int n, int c, int h, int w) { return {{n, c, h, w}, {(long)h * w * c, 1, (long)w * c, c}}; }

struct conv_case {
    const char *name;
    layout x, w, y;
    bool w_nhwc;       /* filter format (its layout must be nchw()/nhwc() of k, c, r, s) */
    bool x_ex, y_ex;   /* set with explicit strides */
    cudnnTensorFormat_t x_fmt, y_fmt;
    int pad[2], stride[2], dil[2];
    cudnnConvolutionMode_t mode;
};

/* y, dx and dw of one convolution in double, by scattering every tap: a loop unlike the
 * emulator's gathers */
static void reference(const conv_case &c, const std::vector<float> &x, const std::vector<float> &w,
                      const std::vector<float> &dy, std::vector<double> *y, std::vector<double> *dx,
                      std::vector<double> *dw)
{
    const int N = c.x.d[0], C = c.x.d[1], H = c.x.d[2], W = c.x.d[3], K = c.w.d[0], R = c.w.d[2], S = c.w.d[3];
    const int P = c.y.d[2], Q = c.y.d[3];
    bool flip = c.mode == CUDNN_CONVOLUTION;
    y->assign(c.y.extent(), 0.0);
    dx->assign(c.x.extent(), 0.0);
    dw->assign(c.w.extent(), 0.0);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++)
            for (int p = 0; p < P; p++)
                for (int q = 0; q < Q; q++)
                    for (int ch = 0; ch < C; ch++)
                        for (int r = 0; r < R; r++)
                            for (int s = 0; s < S; s++) {
                                int h = p * c.stride[0] - c.pad[0] + r * c.dil[0];
                                int ww = q * c.stride[1] - c.pad[1] + s * c.dil[1];
                                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                                long wi = c.w.at(k, ch, flip ? R - 1 - r : r, flip ? S - 1 - s : s);
                                long xi = c.x.at(n, ch, h, ww), yi = c.y.at(n, k, p, q);
                                (*y)[yi] += (double)x[xi] * w[wi];
                                (*dx)[xi] += (double)dy[yi] * w[wi];
                                (*dw)[wi] += (double)dy[yi] * x[xi];
                            }
}

/* The elements of a layout (its extent holds gaps too) */
static std::vector<long> elements(const layout &l)
{
    std::vector<long> v;
    for (int a = 0; a < l.d[0]; a++)
        for (int b = 0; b < l.d[1]; b++)
            for (int c = 0; c < l.d[2]; c++)
                for (int e = 0; e < l.d[3]; e++) v.push_back(l.at(a, b, c, e));
    return v;
}

struct descs {
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
};

static void set_tensor(cudnnTensorDescriptor_t t, const layout &l, bool ex, cudnnTensorFormat_t fmt,
                       cudnnDataType_t type)
{
    if (ex)
        DNN(cudnnSetTensor4dDescriptorEx(t, type, l.d[0], l.d[1], l.d[2], l.d[3], (int)l.st[0], (int)l.st[1],
                                         (int)l.st[2], (int)l.st[3]));
    else
        DNN(cudnnSetTensor4dDescriptor(t, fmt, type, l.d[0], l.d[1], l.d[2], l.d[3]));
}

static descs make_descs(const conv_case &c, cudnnDataType_t type, cudnnMathType_t math)
{
    descs d;
    DNN(cudnnCreateTensorDescriptor(&d.x));
    DNN(cudnnCreateTensorDescriptor(&d.y));
    DNN(cudnnCreateFilterDescriptor(&d.w));
    DNN(cudnnCreateConvolutionDescriptor(&d.conv));
    set_tensor(d.x, c.x, c.x_ex, c.x_fmt, type);
    set_tensor(d.y, c.y, c.y_ex, c.y_fmt, type);
    DNN(cudnnSetFilter4dDescriptor(d.w, type, c.w_nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, c.w.d[0], c.w.d[1],
                                   c.w.d[2], c.w.d[3]));
    DNN(cudnnSetConvolution2dDescriptor(d.conv, c.pad[0], c.pad[1], c.stride[0], c.stride[1], c.dil[0], c.dil[1],
                                        c.mode, CUDNN_DATA_FLOAT));
    DNN(cudnnSetConvolutionMathType(d.conv, math));
    return d;
}

static void free_descs(descs &d)
{
    DNN(cudnnDestroyTensorDescriptor(d.x));
    DNN(cudnnDestroyTensorDescriptor(d.y));
    DNN(cudnnDestroyFilterDescriptor(d.w));
    DNN(cudnnDestroyConvolutionDescriptor(d.conv));
}

static std::vector<conv_case> cases()
{
    std::vector<conv_case> v;
    /* NCHW, KCRS, 3x3 pad 1, cross-correlation */
    conv_case a = {"nchw_pad1", nchw(2, 3, 7, 6), nchw(4, 3, 3, 3), nchw(2, 4, 7, 6), false, false, false,
                   CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NCHW, {1, 1}, {1, 1}, {1, 1}, CUDNN_CROSS_CORRELATION};
    v.push_back(a);
    /* NHWC, KRSC, 3x2 filter, pad 2x1, stride 2x1, dilation 2x1, convolution (flipped):
     * p = (9 + 4 - 5) / 2 + 1 = 5, q = (8 + 2 - 2) / 1 + 1 = 9 */
    conv_case b = {"nhwc_stride_dilation_conv", nhwc(2, 5, 9, 8), nhwc(3, 5, 3, 2), nhwc(2, 3, 5, 9), true, false,
                   false, CUDNN_TENSOR_NHWC, CUDNN_TENSOR_NHWC, {2, 1}, {2, 1}, {2, 1}, CUDNN_CONVOLUTION};
    v.push_back(b);
    /* explicit strides with gaps: x NCHW rows of pitch 6 (w 4) and images 7 elements apart
     * beyond; y NHWC-like with k pitch 5 (k 4); KRSC filter 2x2, stride 2, convolution */
    conv_case e = {"explicit_strides", {{3, 3, 5, 4}, {3 * 5 * 6 + 7, 5 * 6, 6, 1}}, nhwc(4, 3, 2, 2),
                   {{3, 4, 2, 2}, {2 * 2 * 5 + 3, 1, 2 * 5, 5}}, true, true, true, CUDNN_TENSOR_NCHW,
                   CUDNN_TENSOR_NCHW, {0, 0}, {2, 2}, {1, 1}, CUDNN_CONVOLUTION};
    v.push_back(e);
    return v;
}

/* ---- running the ops ---- */

static cudnnHandle_t dnn;
static cudaStream_t stream;

static void *dev_alloc(size_t bytes)
{
    void *p;
    CK(cudaMalloc(&p, bytes));
    return p;
}

static void upload(void *d, const void *h, size_t bytes) { CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice)); }
static void download(void *h, const void *d, size_t bytes) { CK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost)); }

enum { FWD, BWD_DATA, BWD_FILTER };
static const char *const op_names[] = {"fwd", "bwd_data", "bwd_filter"};

static cudnnStatus_t ws_size(int op, const descs &d, int algo, size_t *bytes)
{
    switch (op) {
    case FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(dnn, d.x, d.w, d.conv, d.y, (cudnnConvolutionFwdAlgo_t)algo,
                                                       bytes);
    case BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(dnn, d.w, d.y, d.conv, d.x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn, d.x, d.y, d.conv, d.w,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
    }
}

/* One op of d: the two inputs and the output as the op names them (fwd x, w -> y; bwd
 * data w, dy -> dx; bwd filter x, dy -> dw) */
static cudnnStatus_t run_op(int op, const descs &d, int algo, const void *in0, const void *in1, void *out, void *ws,
                            size_t ws_bytes, float alpha, float beta)
{
    switch (op) {
    case FWD:
        return cudnnConvolutionForward(dnn, &alpha, d.x, in0, d.w, in1, d.conv, (cudnnConvolutionFwdAlgo_t)algo, ws,
                                       ws_bytes, &beta, d.y, out);
    case BWD_DATA:
        return cudnnConvolutionBackwardData(dnn, &alpha, d.w, in0, d.y, in1, d.conv,
                                            (cudnnConvolutionBwdDataAlgo_t)algo, ws, ws_bytes, &beta, d.x, out);
    default:
        return cudnnConvolutionBackwardFilter(dnn, &alpha, d.x, in0, d.y, in1, d.conv,
                                              (cudnnConvolutionBwdFilterAlgo_t)algo, ws, ws_bytes, &beta, d.w, out);
    }
}

/* One algorithm's answer, whatever the op */
struct entry {
    int algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
};

template <typename Perf>
static std::vector<entry> entries(const Perf *r, int n)
{
    std::vector<entry> v;
    for (int i = 0; i < n; i++)
        v.push_back({(int)r[i].algo, r[i].status, r[i].time, r[i].memory, r[i].determinism, r[i].mathType});
    return v;
}

/* Get_v7 (find = false) or Find for op; returns the call's status */
static cudnnStatus_t algos(int op, const descs &d, bool find, std::vector<entry> *out, int requested = 8)
{
    int n = 0;
    cudnnStatus_t st;
    if (op == FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[8];
        st = find ? cudnnFindConvolutionForwardAlgorithm(dnn, d.x, d.w, d.conv, d.y, requested, &n, r)
                  : cudnnGetConvolutionForwardAlgorithm_v7(dnn, d.x, d.w, d.conv, d.y, requested, &n, r);
        *out = entries(r, st == CUDNN_STATUS_SUCCESS ? n : 0);
    } else if (op == BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[8];
        st = find ? cudnnFindConvolutionBackwardDataAlgorithm(dnn, d.w, d.y, d.conv, d.x, requested, &n, r)
                  : cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn, d.w, d.y, d.conv, d.x, requested, &n, r);
        *out = entries(r, st == CUDNN_STATUS_SUCCESS ? n : 0);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[8];
        st = find ? cudnnFindConvolutionBackwardFilterAlgorithm(dnn, d.x, d.y, d.conv, d.w, requested, &n, r)
                  : cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn, d.x, d.y, d.conv, d.w, requested, &n, r);
        *out = entries(r, st == CUDNN_STATUS_SUCCESS ? n : 0);
    }
    return st;
}

static const int algo_counts[] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};

/* A convolution's buffers on the device: x, w, y and dy, dx, dw, with host copies of the
 * inputs (fp32 values; bf16 runs upload them rounded) and the double references */
struct problem {
    conv_case c;
    cudnnDataType_t type;
    size_t es;
    std::vector<float> x, w, dy;                   /* by layout offset, gaps included (0) */
    std::vector<double> y_ref, dx_ref, dw_ref;
    void *dx_, *dw_, *dy_, *x_, *w_, *y_;          /* device */
};

static void upload_as(void *d, const std::vector<float> &v, cudnnDataType_t t)
{
    if (t == CUDNN_DATA_FLOAT) return upload(d, v.data(), v.size() * 4);
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = to_bf16(v[i]);
    upload(d, h.data(), h.size() * 2);
}

static std::vector<double> download_as(const void *d, size_t n, cudnnDataType_t t)
{
    std::vector<double> out(n);
    if (t == CUDNN_DATA_FLOAT) {
        std::vector<float> h(n);
        download(h.data(), d, n * 4);
        for (size_t i = 0; i < n; i++) out[i] = h[i];
    } else {
        std::vector<uint16_t> h(n);
        download(h.data(), d, n * 2);
        for (size_t i = 0; i < n; i++) out[i] = from_bf16(h[i]);
    }
    return out;
}

/* rounds: what the inputs are before the reference sees them (bf16 storage, tf32 math) */
static problem make_problem(const conv_case &c, cudnnDataType_t type, float (*rounds)(float))
{
    problem p;
    p.c = c;
    p.type = type;
    p.es = type == CUDNN_DATA_FLOAT ? 4 : 2;
    auto fill = [&](const layout &l, std::vector<float> *v) {
        v->assign(l.extent(), 0.0f);
        for (long i : elements(l)) (*v)[i] = uniform();
        if (type == CUDNN_DATA_BFLOAT16)
            for (float &f : *v) f = from_bf16(to_bf16(f));
    };
    fill(c.x, &p.x);
    fill(c.w, &p.w);
    fill(c.y, &p.dy);
    std::vector<float> rx = p.x, rw = p.w, rdy = p.dy;
    if (rounds)
        for (auto *v : {&rx, &rw, &rdy})
            for (float &f : *v) f = rounds(f);
    reference(c, rx, rw, rdy, &p.y_ref, &p.dx_ref, &p.dw_ref);
    p.x_ = dev_alloc(c.x.extent() * p.es), p.dx_ = dev_alloc(c.x.extent() * p.es);
    p.w_ = dev_alloc(c.w.extent() * p.es), p.dw_ = dev_alloc(c.w.extent() * p.es);
    p.y_ = dev_alloc(c.y.extent() * p.es), p.dy_ = dev_alloc(c.y.extent() * p.es);
    upload_as(p.x_, p.x, type);
    upload_as(p.w_, p.w, type);
    upload_as(p.dy_, p.dy, type);
    return p;
}

static void free_problem(problem &p)
{
    for (void *d : {p.x_, p.dx_, p.w_, p.dw_, p.y_, p.dy_}) CK(cudaFree(d));
}

/* Runs op with algo on p (alpha, beta; the output first holds `prior` where beta != 0, NaN
 * poison elsewhere, gaps included) and compares with alpha ref + beta prior over the
 * elements, and the gaps with the poison. */
static bool check_op(problem &p, const descs &d, int op, int algo, float alpha, float beta, double atol, double rtol,
                     std::string *why)
{
    const layout &ol = op == FWD ? p.c.y : op == BWD_DATA ? p.c.x : p.c.w;
    const std::vector<double> &ref = op == FWD ? p.y_ref : op == BWD_DATA ? p.dx_ref : p.dw_ref;
    const void *in0 = op == BWD_DATA ? p.w_ : p.x_, *in1 = op == FWD ? p.w_ : p.dy_;
    void *out = op == FWD ? p.y_ : op == BWD_DATA ? p.dx_ : p.dw_;
    size_t n = ol.extent();
    std::vector<float> prior(n, 0.0f);
    CK(cudaMemset(out, 0xff, n * p.es));
    std::vector<long> el = elements(ol);
    if (beta != 0) {
        /* prior values at the elements, the gaps left as NaN poison */
        std::vector<float> all(n, NAN);
        for (long i : el) prior[i] = all[i] = uniform();
        if (p.type == CUDNN_DATA_BFLOAT16)
            for (long i : el) prior[i] = all[i] = from_bf16(to_bf16(all[i]));
        if (p.type == CUDNN_DATA_FLOAT) {
            upload(out, all.data(), n * 4);
        } else {
            std::vector<uint16_t> h(n, 0xffff);
            for (long i : el) h[i] = to_bf16(all[i]);
            upload(out, h.data(), n * 2);
        }
    }
    size_t need = 0;
    cudnnStatus_t st = ws_size(op, d, algo, &need);
    if (st != CUDNN_STATUS_SUCCESS) {
        *why = std::string("workspace size: ") + cudnnGetErrorString(st);
        return false;
    }
    void *ws = need ? dev_alloc(need) : nullptr;
    st = run_op(op, d, algo, in0, in1, out, ws, need, alpha, beta);
    if (st != CUDNN_STATUS_SUCCESS) {
        *why = std::string(cudnnGetErrorString(st)) + ": " + last_message();
        if (ws) CK(cudaFree(ws));
        return false;
    }
    CK(cudaStreamSynchronize(stream));
    if (ws) CK(cudaFree(ws));
    std::vector<double> got = download_as(out, n, p.type), g, r;
    for (long i : el) {
        g.push_back(got[i]);
        r.push_back(alpha * ref[i] + (double)beta * prior[i]);
    }
    if (!close(g, r, atol, rtol, why)) return false;
    std::vector<bool> is_el(n, false);
    for (long i : el) is_el[i] = true;
    for (size_t i = 0; i < n; i++)
        if (!is_el[i] && !std::isnan(got[i])) {
            *why = "a gap between elements was written (offset " + std::to_string(i) + ")";
            return false;
        }
    return true;
}

/* ---- the cases run in this process ---- */

static void test_conv_fp32()
{
    for (const conv_case &c : cases()) {
        problem p = make_problem(c, CUDNN_DATA_FLOAT, nullptr);
        descs d = make_descs(c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
        for (int op = 0; op < 3; op++) {
            std::vector<entry> list;
            DNN(algos(op, d, false, &list));
            int ran = 0;
            for (const entry &e : list) {
                if (e.status != CUDNN_STATUS_SUCCESS) continue;
                std::string why, name = std::string("conv_") + c.name + "_" + op_names[op] + "_algo" +
                                        std::to_string(e.algo);
                /* fp32 sums of a few dozen terms of size 1: 1e-5 is some 100 ulps */
                bool ok = check_op(p, d, op, e.algo, 1.5f, 0.0f, 1e-5, 1e-5, &why) &&
                          check_op(p, d, op, e.algo, 0.5f, 0.75f, 1e-5, 1e-5, &why);
                report(name.c_str(), ok, why);
                ran++;
            }
            report((std::string("conv_") + c.name + "_" + op_names[op] + "_has_algorithms").c_str(), ran >= 2,
                   std::to_string(ran) + " supported");
        }
        free_descs(d);
        free_problem(p);
    }
}

/* tf32: TENSOR_OP (and DEFAULT) math on a tensor-core algorithm rounds the inputs to tf32;
 * FMA math and an algorithm without tensor cores compute in fp32 */
static void test_conv_tf32()
{
    conv_case c = cases()[0];
    problem p32 = make_problem(c, CUDNN_DATA_FLOAT, nullptr);
    problem pt = p32;   /* the same buffers, references from the inputs rounded to tf32 */
    std::vector<float> rx = pt.x, rw = pt.w, rdy = pt.dy;
    for (auto *v : {&rx, &rw, &rdy})
        for (float &f : *v) f = tf32(f);
    reference(c, rx, rw, rdy, &pt.y_ref, &pt.dx_ref, &pt.dw_ref);
    std::string why;
    descs d = make_descs(c, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH);
    for (int op = 0; op < 3; op++) {
        int algo = op == FWD ? CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM : 1;
        bool ok = check_op(pt, d, op, algo, 1, 0, 1e-5, 1e-5, &why);
        report((std::string("tf32_") + op_names[op] + "_matches_rounded_inputs").c_str(), ok, why);
        /* rounding 13 bits off every input moves a sum of ~27 terms by ~1e-3: far outside fp32's 1e-5 */
        ok = !check_op(p32, d, op, algo, 1, 0, 1e-5, 1e-5, &why);
        report((std::string("tf32_") + op_names[op] + "_differs_from_fp32").c_str(), ok, "matched fp32");
    }
    /* GEMM has no tensor-core kernel: fp32 under TENSOR_OP math */
    report("tf32_gemm_without_tensor_cores_is_fp32",
           check_op(p32, d, FWD, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, 1, 0, 1e-5, 1e-5, &why), why);
    DNN(cudnnSetConvolutionMathType(d.conv, CUDNN_DEFAULT_MATH));
    report("default_math_permits_tf32", check_op(pt, d, FWD, 0, 1, 0, 1e-5, 1e-5, &why), why);
    DNN(cudnnSetConvolutionMathType(d.conv, CUDNN_FMA_MATH));
    report("fma_math_is_fp32", check_op(p32, d, FWD, 0, 1, 0, 1e-5, 1e-5, &why), why);
    free_descs(d);
    free_problem(p32);
}

static void test_conv_bf16()
{
    for (const conv_case &c : cases()) {
        problem p = make_problem(c, CUDNN_DATA_BFLOAT16, nullptr);
        descs d = make_descs(c, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH);
        for (int op = 0; op < 3; op++) {
            std::vector<entry> list;
            DNN(algos(op, d, false, &list));
            bool any = false;
            for (const entry &e : list) {
                if (e.status != CUDNN_STATUS_SUCCESS) continue;
                any = true;
                std::string why;
                /* the result rounded once to bf16 (2^-9 relative) after a float sum; where the
                 * parts go into the output one by one (atomics; a split algorithm adding onto
                 * y), rounded at each add: up to 8 roundings of values up to the output's
                 * scale (the prior's 1 included) */
                const std::vector<double> &ref = op == FWD ? p.y_ref : op == BWD_DATA ? p.dx_ref : p.dw_ref;
                double scale = 1;
                for (double v : ref) scale = std::max(scale, std::fabs(v) + 1);
                bool nondet = e.det == CUDNN_NON_DETERMINISTIC;
                double each = scale * 8 / 512;
                bool ok = check_op(p, d, op, e.algo, 1, 0, nondet ? each : 1e-4, 1.0 / 256, &why) &&
                          check_op(p, d, op, e.algo, 1, 1, nondet || e.memory ? each : 1e-4, 1.0 / 256, &why);
                report((std::string("bf16_") + c.name + "_" + op_names[op] + "_algo" + std::to_string(e.algo)).c_str(),
                       ok, why);
            }
            report((std::string("bf16_") + c.name + "_" + op_names[op] + "_has_algorithms").c_str(), any);
        }
        /* bf16 needs tensor-op math */
        DNN(cudnnSetConvolutionMathType(d.conv, CUDNN_FMA_MATH));
        std::vector<entry> list;
        DNN(algos(FWD, d, false, &list));
        bool none = true;
        for (const entry &e : list) none = none && e.status == CUDNN_STATUS_NOT_SUPPORTED;
        void *ws = dev_alloc(1 << 20);
        cudnnStatus_t st = run_op(FWD, d, 0, p.x_, p.w_, p.y_, ws, 1 << 20, 1, 0);
        std::string msg = last_message();
        report((std::string("bf16_") + c.name + "_fma_not_supported").c_str(),
               none && st == CUDNN_STATUS_NOT_SUPPORTED && !msg.empty(), cudnnGetErrorString(st));
        CK(cudaFree(ws));
        free_descs(d);
        free_problem(p);
    }
}

/* bf16 results are rounded to nearest even: a sum whose float value lies between two bf16
 * values, with alpha scaling a single product */
static void test_bf16_rounding()
{
    conv_case c = {"one", nchw(1, 1, 1, 1), nchw(1, 1, 1, 1), nchw(1, 1, 1, 1), false, false, false,
                   CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NCHW, {0, 0}, {1, 1}, {1, 1}, CUDNN_CROSS_CORRELATION};
    descs d = make_descs(c, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH);
    void *x = dev_alloc(2), *w = dev_alloc(2), *y = dev_alloc(2);
    uint16_t one = to_bf16(1.0f), got = 0;
    upload(x, &one, 2);
    upload(w, &one, 2);
    bool ok = true;
    std::string why;
    /* 1 + 2^-8 (a tie: to 1, even), 1 + 3 * 2^-8 (a tie: up to 1 + 2^-6), 1 + 2^-8 + 2^-12 (up) */
    const float alphas[] = {1 + 1.0f / 256, 1 + 3.0f / 256, 1 + 1.0f / 256 + 1.0f / 4096};
    const float want[] = {1.0f, 1 + 4.0f / 256, 1 + 2.0f / 256};
    for (int i = 0; i < 3; i++) {
        DNN(run_op(FWD, d, 0, x, w, y, nullptr, 0, alphas[i], 0));
        CK(cudaStreamSynchronize(stream));
        download(&got, y, 2);
        if (from_bf16(got) != want[i]) {
            ok = false;
            why = "alpha " + std::to_string(alphas[i]) + " gave " + std::to_string(from_bf16(got));
        }
    }
    report("bf16_output_rounds_to_nearest_even", ok, why);
    for (void *b : {x, w, y}) CK(cudaFree(b));
    free_descs(d);
}

static std::string order_text(const std::vector<entry> &v)
{
    std::string s;
    for (const entry &e : v) s += std::to_string(e.algo) + (e.status == CUDNN_STATUS_SUCCESS ? "" : "x") + " ";
    return s;
}

static void test_algorithm_lists()
{
    std::vector<conv_case> cs = cases();
    const conv_case &a = cs[0], &b = cs[1];   /* a: stride 1, 3x3; b: stride 2, dilation 2 */
    descs da = make_descs(a, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH), db = make_descs(b, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
    /* the heuristics' order, fixed; supported first */
    const char *want[3] = {"1 0 7 2 5 4 6 3x ", "0 1 5 3 2 4 ", "0 1 3 5 6 2 4x "};
    for (int op = 0; op < 3; op++) {
        std::vector<entry> g1, g2;
        DNN(algos(op, da, false, &g1));
        DNN(algos(op, da, false, &g2));
        report((std::string("get_v7_order_") + op_names[op]).c_str(),
               order_text(g1) == want[op] && order_text(g2) == want[op], order_text(g1) + "/ " + order_text(g2));
        bool sizes = (int)g1.size() == algo_counts[op], det = true, times = true;
        std::string why;
        for (const entry &e : g1) {
            size_t bytes = 12345;
            cudnnStatus_t st = ws_size(op, da, e.algo, &bytes);
            if (e.status == CUDNN_STATUS_SUCCESS ? st != CUDNN_STATUS_SUCCESS || bytes != e.memory
                                                 : st != CUDNN_STATUS_NOT_SUPPORTED)
                sizes = false, why = "algo " + std::to_string(e.algo) + ": " + cudnnGetErrorString(st) + ", " +
                                     std::to_string(bytes) + " vs listed " + std::to_string(e.memory);
            bool nondet = (op == BWD_DATA && e.algo == 0) || (op == BWD_FILTER && (e.algo == 0 || e.algo == 3));
            if ((e.det == CUDNN_NON_DETERMINISTIC) != nondet) det = false;
            if (e.time != -1) times = false;
            if (e.math != CUDNN_FMA_MATH) det = false, why = "math type not FMA";
        }
        report((std::string("get_v7_workspace_agrees_") + op_names[op]).c_str(), sizes, why);
        report((std::string("get_v7_determinism_") + op_names[op]).c_str(), det && times, why);
        /* Find: the same entries, the supported first in a drawn order, times increasing */
        std::set<std::string> orders;
        bool same = true;
        for (int i = 0; i < 8; i++) {
            std::vector<entry> f;
            DNN(algos(op, da, true, &f));
            orders.insert(order_text(f));
            std::vector<entry> fs = f, gs = g1;
            auto by_algo = [](const entry &x, const entry &y) { return x.algo < y.algo; };
            std::sort(fs.begin(), fs.end(), by_algo);
            std::sort(gs.begin(), gs.end(), by_algo);
            bool failed_seen = false;
            float last = 0;
            for (size_t j = 0; j < f.size(); j++) {
                if (f[j].status != CUDNN_STATUS_SUCCESS) failed_seen = true;
                else if (failed_seen || f[j].time <= last) same = false;
                else last = f[j].time;
            }
            if (fs.size() != gs.size()) same = false;
            for (size_t j = 0; same && j < fs.size(); j++)
                if (fs[j].algo != gs[j].algo || fs[j].status != gs[j].status || fs[j].memory != gs[j].memory ||
                    fs[j].det != gs[j].det || fs[j].math != gs[j].math)
                    same = false;
        }
        report((std::string("find_lists_what_get_v7_does_") + op_names[op]).c_str(), same);
        report((std::string("find_order_varies_") + op_names[op]).c_str(), orders.size() >= 2,
               std::to_string(orders.size()) + " orders in 8 calls");
    }
    /* shapes the FFT and Winograd algorithms cannot take (stride 2, dilation 2) */
    {
        std::vector<entry> g;
        DNN(algos(FWD, db, false, &g));
        std::string s = order_text(g);
        size_t bytes;
        cudnnStatus_t st = ws_size(FWD, db, CUDNN_CONVOLUTION_FWD_ALGO_FFT, &bytes);
        std::string msg = last_message();
        report("fft_and_winograd_refuse_stride_2", s == "1 0 2 7x 5x 4x 6x 3x " && st == CUDNN_STATUS_NOT_SUPPORTED &&
                                                       msg.find("stride") != std::string::npos,
               s + cudnnGetErrorString(st) + " " + msg);
    }
    /* requestedAlgoCount bounds the answer */
    {
        std::vector<entry> g;
        DNN(algos(BWD_FILTER, da, false, &g, 2));
        report("requested_count_bounds_the_list", g.size() == 2 && g[0].algo == 0 && g[1].algo == 1, order_text(g));
        cudnnStatus_t st = algos(BWD_FILTER, da, false, &g, 0);
        report("requested_count_zero_is_bad_param", st == CUDNN_STATUS_BAD_PARAM, cudnnGetErrorString(st));
    }
    /* math types answered under TENSOR_OP: the tensor-core algorithms say TENSOR_OP, GEMM FMA */
    {
        DNN(cudnnSetConvolutionMathType(da.conv, CUDNN_TENSOR_OP_MATH));
        std::vector<entry> g;
        DNN(algos(FWD, da, false, &g));
        bool ok = true;
        for (const entry &e : g) {
            bool tensor = e.algo == 0 || e.algo == 1 || e.algo == 7;
            if (e.math != (tensor ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH)) ok = false;
        }
        report("math_type_answered_per_algorithm", ok);
        descs bf = make_descs(a, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH);
        DNN(algos(FWD, bf, false, &g));
        report("bf16_tensor_op_algorithms", order_text(g) == "1 0 7 2x 5x 4x 6x 3x ", order_text(g));
        free_descs(bf);
    }
    free_descs(da);
    free_descs(db);
}

static void test_bad_params()
{
    std::vector<conv_case> cs = cases();
    conv_case c = cs[0];
    descs d = make_descs(c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
    problem p = make_problem(c, CUDNN_DATA_FLOAT, nullptr);
    std::vector<entry> list;
    cudnnStatus_t st;
    std::string msg;

    /* x's channels against w's */
    cudnnFilterDescriptor_t w5;
    DNN(cudnnCreateFilterDescriptor(&w5));
    DNN(cudnnSetFilter4dDescriptor(w5, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 5, 3, 3));
    descs bad = d;
    bad.w = w5;
    st = algos(FWD, bad, false, &list);
    msg = last_message();
    bool ok = st == CUDNN_STATUS_BAD_PARAM && msg.find("channels") != std::string::npos;
    st = run_op(BWD_FILTER, bad, 1, p.x_, p.dy_, p.dw_, nullptr, 1 << 20, 1, 0);
    ok = ok && st == CUDNN_STATUS_BAD_PARAM;
    report("bad_param_channels_differ", ok, cudnnGetErrorString(st) + std::string(": ") + msg);

    /* y not the output size */
    cudnnTensorDescriptor_t y6;
    DNN(cudnnCreateTensorDescriptor(&y6));
    DNN(cudnnSetTensor4dDescriptor(y6, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 4, 6, 6));
    bad = d;
    bad.y = y6;
    ok = true;
    for (int op = 0; op < 3; op++) {
        st = algos(op, bad, op == BWD_DATA, &list);
        msg = last_message();
        ok = ok && st == CUDNN_STATUS_BAD_PARAM && msg.find("give") != std::string::npos;
        size_t bytes;
        ok = ok && ws_size(op, bad, 0, &bytes) == CUDNN_STATUS_BAD_PARAM;
    }
    st = run_op(FWD, bad, 0, p.x_, p.w_, p.y_, nullptr, 0, 1, 0);
    report("bad_param_y_size", ok && st == CUDNN_STATUS_BAD_PARAM, msg);

    /* the data types differ */
    cudnnTensorDescriptor_t ybf;
    DNN(cudnnCreateTensorDescriptor(&ybf));
    DNN(cudnnSetTensor4dDescriptor(ybf, CUDNN_TENSOR_NCHW, CUDNN_DATA_BFLOAT16, 2, 4, 7, 6));
    bad = d;
    bad.y = ybf;
    st = algos(FWD, bad, false, &list);
    report("bad_param_types_differ", st == CUDNN_STATUS_BAD_PARAM, cudnnGetErrorString(st));

    /* a workspace smaller than the algorithm needs */
    size_t need = 0;
    DNN(ws_size(FWD, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, &need));
    void *ws = dev_alloc(need);
    st = run_op(FWD, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, p.x_, p.w_, p.y_, ws, need - 1, 1, 0);
    msg = last_message();
    report("bad_param_workspace_too_small",
           need > 0 && st == CUDNN_STATUS_BAD_PARAM && msg.find("workSpaceSizeInBytes") != std::string::npos,
           cudnnGetErrorString(st) + std::string(": ") + msg);
    st = run_op(FWD, d, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, p.x_, p.w_, p.y_, nullptr, need, 1, 0);
    report("bad_param_workspace_null", st == CUDNN_STATUS_BAD_PARAM, cudnnGetErrorString(st));

    /* an algorithm the op has not, one the shape does not take */
    st = run_op(FWD, d, 9, p.x_, p.w_, p.y_, ws, need, 1, 0);
    report("bad_param_algo_out_of_range", st == CUDNN_STATUS_BAD_PARAM, cudnnGetErrorString(st));
    st = run_op(FWD, d, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, p.x_, p.w_, p.y_, ws, need, 1, 0);
    report("direct_not_supported", st == CUDNN_STATUS_NOT_SUPPORTED, cudnnGetErrorString(st));

    /* NULL descriptors and pointers, a descriptor never set */
    bad = d;
    bad.x = nullptr;
    st = algos(FWD, bad, false, &list);
    bool nul = st == CUDNN_STATUS_BAD_PARAM;
    st = run_op(FWD, d, 0, nullptr, p.w_, p.y_, nullptr, 0, 1, 0);
    nul = nul && st == CUDNN_STATUS_BAD_PARAM;
    float one = 1;
    st = cudnnConvolutionForward(dnn, &one, d.x, p.x_, d.w, p.w_, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                 nullptr, 0, nullptr, d.y, p.y_);
    nul = nul && st == CUDNN_STATUS_BAD_PARAM;
    report("bad_param_null", nul, cudnnGetErrorString(st));
    cudnnTensorDescriptor_t unset;
    DNN(cudnnCreateTensorDescriptor(&unset));
    bad = d;
    bad.x = unset;
    st = algos(FWD, bad, true, &list);
    msg = last_message();
    report("bad_param_never_set", st == CUDNN_STATUS_BAD_PARAM && msg.find("never set") != std::string::npos, msg);

    /* the setters */
    bool set_ok = cudnnSetTensor4dDescriptor(unset, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, -1, 3, 4, 4) ==
                      CUDNN_STATUS_BAD_PARAM &&
                  cudnnSetTensor4dDescriptor(unset, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, 0, 4, 4) ==
                      CUDNN_STATUS_BAD_PARAM &&
                  cudnnSetTensor4dDescriptorEx(unset, CUDNN_DATA_FLOAT, 1, 3, 4, 4, 48, 16, -4, 1) ==
                      CUDNN_STATUS_BAD_PARAM &&
                  cudnnSetTensor4dDescriptor(unset, (cudnnTensorFormat_t)7, CUDNN_DATA_FLOAT, 1, 3, 4, 4) ==
                      CUDNN_STATUS_BAD_PARAM &&
                  cudnnSetFilter4dDescriptor(w5, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, 5, 0, 3) ==
                      CUDNN_STATUS_BAD_PARAM &&
                  cudnnSetConvolution2dDescriptor(d.conv, -1, 0, 1, 1, 1, 1, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT) ==
                      CUDNN_STATUS_BAD_PARAM &&
                  cudnnSetConvolution2dDescriptor(d.conv, 0, 0, 0, 1, 1, 1, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT) ==
                      CUDNN_STATUS_BAD_PARAM &&
                  cudnnSetConvolution2dDescriptor(d.conv, 0, 0, 1, 1, 1, 0, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT) ==
                      CUDNN_STATUS_BAD_PARAM &&
                  cudnnSetConvolutionMathType(d.conv, (cudnnMathType_t)9) == CUDNN_STATUS_BAD_PARAM;
    /* the failed sets left d.conv as it was */
    int ph, pw, u, v, dh, dw;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t ct;
    DNN(cudnnGetConvolution2dDescriptor(d.conv, &ph, &pw, &u, &v, &dh, &dw, &mode, &ct));
    set_ok = set_ok && ph == 1 && pw == 1 && u == 1 && dh == 1 && mode == CUDNN_CROSS_CORRELATION;
    report("bad_param_setters", set_ok);

    /* output dims */
    int n, k, h, w;
    DNN(cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, &n, &k, &h, &w));
    bool dims = n == 2 && k == 4 && h == 7 && w == 6;
    cudnnConvolutionDescriptor_t big;
    DNN(cudnnCreateConvolutionDescriptor(&big));
    DNN(cudnnSetConvolution2dDescriptor(big, 0, 0, 1, 1, 4, 4, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT));
    st = cudnnGetConvolution2dForwardOutputDim(big, d.x, d.w, &n, &k, &h, &w);   /* 9x9 dilated, 7x6 input */
    dims = dims && st == CUDNN_STATUS_BAD_PARAM;
    report("output_dim", dims, cudnnGetErrorString(st));

    /* names and the last message */
    bool names = !strcmp(cudnnGetErrorString(CUDNN_STATUS_SUCCESS), "CUDNN_STATUS_SUCCESS") &&
                 !strcmp(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM") &&
                 !strcmp(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED") &&
                 !strcmp(cudnnGetErrorString(CUDNN_STATUS_EXECUTION_FAILED), "CUDNN_STATUS_EXECUTION_FAILED") &&
                 !strcmp(cudnnGetErrorString(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
                         "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED") &&
                 cudnnGetVersion() == CUDNN_VERSION;
    cudnnSetConvolutionMathType(d.conv, (cudnnMathType_t)9);
    std::string first = last_message(), second = last_message();
    report("error_strings", names && !first.empty() && second.empty(), first + " / " + second);

    CK(cudaFree(ws));
    DNN(cudnnDestroyConvolutionDescriptor(big));
    DNN(cudnnDestroyTensorDescriptor(unset));
    DNN(cudnnDestroyTensorDescriptor(ybf));
    DNN(cudnnDestroyTensorDescriptor(y6));
    DNN(cudnnDestroyFilterDescriptor(w5));
    free_descs(d);
    free_problem(p);
}

/* The pattern over the workspace bytes the algorithm needs, nothing past them */
static void test_workspace_scribbled()
{
    conv_case c = cases()[0];
    descs d = make_descs(c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
    problem p = make_problem(c, CUDNN_DATA_FLOAT, nullptr);
    bool ok = true;
    std::string why;
    for (int op = 0; op < 3; op++) {
        int algo = op == FWD ? CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM : 1;
        size_t need;
        DNN(ws_size(op, d, algo, &need));
        size_t given = need + 512;
        void *ws = dev_alloc(given);
        CK(cudaMemset(ws, 0, given));
        const void *in0 = op == BWD_DATA ? p.w_ : p.x_, *in1 = op == FWD ? p.w_ : p.dy_;
        void *out = op == FWD ? p.y_ : op == BWD_DATA ? p.dx_ : p.dw_;
        DNN(run_op(op, d, algo, in0, in1, out, ws, given, 1, 0));
        CK(cudaStreamSynchronize(stream));
        std::vector<uint32_t> h(given / 4);
        download(h.data(), ws, given);
        for (size_t i = 0; i < h.size(); i++)
            if (h[i] != (i < need / 4 ? 0xffc0ffeeu : 0u)) {
                ok = false;
                why = std::string(op_names[op]) + ": word " + std::to_string(i) + " of " + std::to_string(need / 4);
                break;
            }
        CK(cudaFree(ws));
    }
    report("workspace_scribbled", ok, why);
    free_descs(d);
    free_problem(p);
}

/* Non-deterministic algorithms' sums in a drawn order: bits vary between runs; a
 * deterministic algorithm's do not */
static void test_nondeterminism()
{
    conv_case c = {"batch8", nchw(8, 6, 6, 6), nchw(4, 6, 3, 3), nchw(8, 4, 6, 6), false, false, false,
                   CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NCHW, {1, 1}, {1, 1}, {1, 1}, CUDNN_CROSS_CORRELATION};
    descs d = make_descs(c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
    problem p = make_problem(c, CUDNN_DATA_FLOAT, nullptr);
    void *ws = dev_alloc(1 << 20);
    auto runs = [&](int op, int algo) {
        std::set<std::vector<uint32_t>> seen;
        const void *in0 = op == BWD_DATA ? p.w_ : p.x_, *in1 = op == FWD ? p.w_ : p.dy_;
        void *out = op == BWD_DATA ? p.dx_ : p.dw_;
        size_t n = (op == BWD_DATA ? c.x : c.w).extent();
        for (int i = 0; i < 6; i++) {
            DNN(run_op(op, d, algo, in0, in1, out, ws, 1 << 20, 1, 0));
            CK(cudaStreamSynchronize(stream));
            std::vector<uint32_t> h(n);
            download(h.data(), out, n * 4);
            seen.insert(h);
        }
        return seen.size();
    };
    size_t a0 = runs(BWD_FILTER, 0), a3 = runs(BWD_FILTER, 3), a1 = runs(BWD_FILTER, 1), d0 = runs(BWD_DATA, 0),
           d1 = runs(BWD_DATA, 1);
    report("nondeterministic_algorithms_vary", a0 > 1 && a3 > 1 && d0 > 1,
           std::to_string(a0) + " " + std::to_string(a3) + " " + std::to_string(d0));
    report("deterministic_algorithms_repeat", a1 == 1 && d1 == 1, std::to_string(a1) + " " + std::to_string(d1));
    CK(cudaFree(ws));
    free_descs(d);
    free_problem(p);
}

/* ---- cuBLAS ---- */

static void test_sgemm()
{
    cublasHandle_t blas;
    BLAS(cublasCreate(&blas));
    BLAS(cublasSetStream(blas, stream));
    const int m = 5, n = 4, k = 3;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        int lda = ar + 2, ldb = br + 3, ldc = m + 1;
        std::vector<float> A((size_t)lda * ac, 0), B((size_t)ldb * bc, 0), C0((size_t)ldc * n, NAN);
        for (int j = 0; j < ac; j++)
            for (int i = 0; i < ar; i++) A[i + (size_t)j * lda] = uniform();
        for (int j = 0; j < bc; j++)
            for (int i = 0; i < br; i++) B[i + (size_t)j * ldb] = uniform();
        float *dA = (float *)dev_alloc(A.size() * 4), *dB = (float *)dev_alloc(B.size() * 4),
              *dC = (float *)dev_alloc(C0.size() * 4);
        upload(dA, A.data(), A.size() * 4);
        upload(dB, B.data(), B.size() * 4);
        auto opA = [&](int i, int l) { return ta ? A[l + (size_t)i * lda] : A[i + (size_t)l * lda]; };
        auto opB = [&](int l, int j) { return tb ? B[j + (size_t)l * ldb] : B[l + (size_t)j * ldb]; };
        std::string why, name = std::string("sgemm_") + (ta ? "T" : "N") + (tb ? "T" : "N");
        bool ok = true;
        for (int pass = 0; pass < 2 && ok; pass++) {
            float alpha = pass ? 0.5f : 1.25f, beta = pass ? 0.75f : 0.0f;
            std::vector<float> prior(C0.size(), NAN);
            if (pass)
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++) prior[i + (size_t)j * ldc] = uniform();
            upload(dC, prior.data(), prior.size() * 4);   /* NaN in the gaps, and everywhere in pass 0 */
            BLAS(cublasSgemm(blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, dA,
                             lda, dB, ldb, &beta, dC, ldc));
            CK(cudaStreamSynchronize(stream));
            std::vector<float> C(C0.size());
            download(C.data(), dC, C.size() * 4);
            std::vector<double> got, ref;
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double s = 0;
                    for (int l = 0; l < k; l++) s += (double)opA(i, l) * opB(l, j);
                    got.push_back(C[i + (size_t)j * ldc]);
                    ref.push_back(alpha * s + (pass ? beta * prior[i + (size_t)j * ldc] : 0.0));
                }
            /* three products of values below 1, summed in fp32: a few 1e-8 apart from double */
            ok = close(got, ref, 1e-6, 1e-6, &why);
            for (int j = 0; j < n && ok; j++)
                if (!std::isnan(C[m + (size_t)j * ldc])) ok = false, why = "the row past m was written";
        }
        report(name.c_str(), ok, why);
        for (float *b : {dA, dB, dC}) CK(cudaFree(b));
    }

    /* bad leading dimensions and sizes */
    float one = 1, zero = 0, *d = (float *)dev_alloc(4096);
    bool inv = cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 3, d, 4, &zero, d + 512, 4) ==
                   CUBLAS_STATUS_INVALID_VALUE &&
               cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, 4, 4, 6, &one, d, 5, d, 6, &zero, d + 512, 4) ==
                   CUBLAS_STATUS_INVALID_VALUE &&   /* A^T stored 6 x 4: lda >= 6 */
               cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, 4, 4, 4, &one, d, 4, d, 3, &zero, d + 512, 4) ==
                   CUBLAS_STATUS_INVALID_VALUE &&   /* B^T stored 4 x 4 */
               cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &zero, d + 512, 3) ==
                   CUBLAS_STATUS_INVALID_VALUE &&
               cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, d, 4, d, 4, &zero, d + 512, 4) ==
                   CUBLAS_STATUS_INVALID_VALUE &&
               cublasSgemm(blas, (cublasOperation_t)7, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &zero, d + 512, 4) ==
                   CUBLAS_STATUS_INVALID_VALUE &&
               cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &zero, d + 512, 4) ==
                   CUBLAS_STATUS_NOT_INITIALIZED &&
               cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 0, 4, 4, &one, nullptr, 1, nullptr, 4, &zero, nullptr, 1) ==
                   CUBLAS_STATUS_SUCCESS;
    report("sgemm_invalid_value", inv);

    /* alpha 0: A and B are not read (NULL is fine), C = beta C */
    std::vector<float> c4(16, 2.0f), back(16);
    upload(d, c4.data(), 64);
    float three = 3;
    BLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &zero, nullptr, 4, nullptr, 4, &three, d, 4));
    CK(cudaStreamSynchronize(stream));
    download(back.data(), d, 64);
    report("sgemm_alpha_zero_reads_no_a_b", back[0] == 6 && back[15] == 6);

    /* tf32 mode rounds A and B; pedantic does not */
    {
        const int s = 16;
        std::vector<float> A(s * s), B(s * s), C(s * s);
        for (float &f : A) f = uniform();
        for (float &f : B) f = uniform();
        float *dA = (float *)dev_alloc(s * s * 4), *dB = (float *)dev_alloc(s * s * 4), *dC = (float *)dev_alloc(s * s * 4);
        upload(dA, A.data(), s * s * 4);
        upload(dB, B.data(), s * s * 4);
        std::vector<double> r32, rtf;
        for (int j = 0; j < s; j++)
            for (int i = 0; i < s; i++) {
                double a = 0, b = 0;
                for (int l = 0; l < s; l++) {
                    a += (double)A[i + l * s] * B[l + j * s];
                    b += (double)tf32(A[i + l * s]) * tf32(B[l + j * s]);
                }
                r32.push_back(a), rtf.push_back(b);
            }
        auto run_mode = [&](cublasMath_t mode) {
            BLAS(cublasSetMathMode(blas, mode));
            BLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, s, s, s, &one, dA, s, dB, s, &zero, dC, s));
            CK(cudaStreamSynchronize(stream));
            download(C.data(), dC, s * s * 4);
            return std::vector<double>(C.begin(), C.end());
        };
        std::string why;
        std::vector<double> g = run_mode(CUBLAS_TF32_TENSOR_OP_MATH);
        /* 16 products in fp32: ~1e-6; tf32 inputs move them by ~1e-3, far outside that */
        bool ok = close(g, rtf, 1e-5, 1e-5, &why) && !close(g, r32, 1e-5, 1e-5, &why);
        cublasMath_t back_mode;
        BLAS(cublasGetMathMode(blas, &back_mode));
        ok = ok && back_mode == CUBLAS_TF32_TENSOR_OP_MATH;
        report("sgemm_tf32_rounds_inputs", ok, why);
        g = run_mode(CUBLAS_PEDANTIC_MATH);
        report("sgemm_pedantic_is_fp32", close(g, r32, 1e-5, 1e-5, &why), why);
        report("sgemm_bad_math_mode", cublasSetMathMode(blas, (cublasMath_t)77) == CUBLAS_STATUS_INVALID_VALUE);
        for (float *b : {dA, dB, dC}) CK(cudaFree(b));
    }

    /* the workspace is cuBLAS's: a GEMM writes over it; cublasSetStream gives it back */
    {
        const size_t wsb = 1 << 16;
        void *ws = dev_alloc(wsb);
        CK(cudaMemset(ws, 0, wsb));
        BLAS(cublasSetWorkspace(blas, ws, wsb));
        BLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d + 16, 4, &zero, d + 512, 4));
        CK(cudaStreamSynchronize(stream));
        uint32_t w0 = 0;
        download(&w0, ws, 4);
        bool used = w0 == 0xffc0ffeeu;
        CK(cudaMemset(ws, 0, wsb));
        BLAS(cublasSetStream(blas, stream));
        BLAS(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d + 16, 4, &zero, d + 512, 4));
        CK(cudaStreamSynchronize(stream));
        download(&w0, ws, 4);
        bool released = w0 == 0;
        bool misaligned = cublasSetWorkspace(blas, (char *)ws + 16, 1024) == CUBLAS_STATUS_INVALID_VALUE;
        report("sgemm_workspace_used_and_reset_by_set_stream", used && released && misaligned);
        CK(cudaFree(ws));
    }
    report("cublas_status_names",
           !strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") &&
               !strcmp(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS") &&
               strlen(cublasGetStatusString(CUBLAS_STATUS_EXECUTION_FAILED)) > 0);
    CK(cudaFree(d));
    BLAS(cublasDestroy(blas));
}

/* ---- the cases run in a child: NAME (with DS_EMU_FAULT or DS_EMU_SCHED set by the parent);
 * exit 0 when its own checks hold, printing what it saw ---- */

static int child(const char *name)
{
    std::vector<conv_case> cs = cases();
    conv_case c = cs[0];
    descs d = make_descs(c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
    problem p = make_problem(c, CUDNN_DATA_FLOAT, nullptr);
    void *ws = dev_alloc(1 << 20);
    std::vector<entry> list;
    if (!strcmp(name, "exec_fail_fwd_1")) {   /* cudnn_exec_fail=fwd:1 */
        DNN(algos(FWD, d, false, &list));
        bool listed = list[0].algo == 1 && list[0].status == CUDNN_STATUS_SUCCESS;
        size_t need;
        bool sized = ws_size(FWD, d, 1, &need) == CUDNN_STATUS_SUCCESS;
        cudnnStatus_t st1 = run_op(FWD, d, 1, p.x_, p.w_, p.y_, ws, 1 << 20, 1, 0);
        std::string msg = last_message();
        cudnnStatus_t st0 = run_op(FWD, d, 0, p.x_, p.w_, p.y_, ws, 1 << 20, 1, 0);
        cudnnStatus_t sb = run_op(BWD_DATA, d, 1, p.w_, p.dy_, p.dx_, ws, 1 << 20, 1, 0);
        CK(cudaStreamSynchronize(stream));
        printf("%d %d %s %s %s: %s\n", listed, sized, cudnnGetErrorString(st1), cudnnGetErrorString(st0),
               cudnnGetErrorString(sb), msg.c_str());
        return listed && sized && st1 == CUDNN_STATUS_NOT_SUPPORTED && st0 == CUDNN_STATUS_SUCCESS &&
                       sb == CUDNN_STATUS_SUCCESS && msg.find("cudnn_exec_fail") != std::string::npos
                   ? 0
                   : 3;
    }
    if (!strcmp(name, "exec_fail_bwd_filter_all")) {   /* cudnn_exec_fail=bwd_filter:*:EXECUTION_FAILED */
        DNN(algos(BWD_FILTER, d, true, &list));
        int listed = 0;
        for (const entry &e : list) listed += e.status == CUDNN_STATUS_SUCCESS;
        CK(cudaMemset(p.dw_, 0, c.w.extent() * 4));
        CK(cudaMemset(ws, 0, 1 << 20));
        bool all = true;
        for (int a : {0, 1, 3, 5, 6, 2})
            all = all && run_op(BWD_FILTER, d, a, p.x_, p.dy_, p.dw_, ws, 1 << 20, 1, 0) == CUDNN_STATUS_EXECUTION_FAILED;
        CK(cudaStreamSynchronize(stream));
        std::vector<float> dw(c.w.extent());
        download(dw.data(), p.dw_, dw.size() * 4);
        bool untouched = std::all_of(dw.begin(), dw.end(), [](float f) { return f == 0; });
        uint32_t w0;
        download(&w0, ws, 4);   /* ALGO_1's workspace was written before its failure */
        printf("listed %d, all failed %d, dw untouched %d, ws %08x\n", listed, all, untouched, w0);
        return listed == 6 && all && untouched && w0 == 0xffc0ffeeu ? 0 : 3;
    }
    if (!strcmp(name, "no_deterministic")) {
        bool none = true;
        for (int op = 0; op < 3; op++)
            for (bool find : {false, true}) {
                DNN(algos(op, d, find, &list));
                for (const entry &e : list) none = none && e.det == CUDNN_NON_DETERMINISTIC;
            }
        printf("none deterministic: %d\n", none);
        return none ? 0 : 3;
    }
    if (!strcmp(name, "ws_huge")) {   /* cudnn_ws_huge */
        bool get = true, find = true;
        for (int op = 0; op < 3; op++) {
            DNN(algos(op, d, false, &list));
            for (const entry &e : list)
                get = get && e.memory == (size_t)1 << 40 &&
                      (e.status == CUDNN_STATUS_SUCCESS || e.status == CUDNN_STATUS_NOT_SUPPORTED);
            DNN(algos(op, d, true, &list));
            for (const entry &e : list)
                find = find && e.status != CUDNN_STATUS_SUCCESS;
        }
        size_t need = 0;
        DNN(ws_size(FWD, d, 0, &need));
        cudnnStatus_t st = run_op(FWD, d, 0, p.x_, p.w_, p.y_, ws, 1 << 20, 1, 0);
        printf("get %d find %d need %zu run %s\n", get, find, need, cudnnGetErrorString(st));
        return get && find && need == (size_t)1 << 40 && st == CUDNN_STATUS_BAD_PARAM ? 0 : 3;
    }
    if (!strcmp(name, "ws_huge_one")) {   /* cudnn_ws_huge=fwd:1 */
        DNN(algos(FWD, d, true, &list));
        bool ok = true;
        for (const entry &e : list) {
            bool huge = e.algo == 1;
            ok = ok && (e.memory == (size_t)1 << 40) == huge &&
                 (!huge || e.status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);
        }
        DNN(algos(BWD_DATA, d, false, &list));
        for (const entry &e : list) ok = ok && e.memory < (size_t)1 << 40;
        printf("only fwd algo 1 huge: %d\n", ok);
        return ok ? 0 : 3;
    }
    if (!strcmp(name, "no_bf16")) {
        descs bf = make_descs(c, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH);
        bool none = true;
        for (int op = 0; op < 3; op++) {
            DNN(algos(op, bf, false, &list));
            for (const entry &e : list) none = none && e.status == CUDNN_STATUS_NOT_SUPPORTED;
        }
        size_t need;
        cudnnStatus_t st = ws_size(FWD, bf, 0, &need);
        DNN(algos(FWD, d, false, &list));
        printf("bf16 refused %d, size %s, fp32 first %s\n", none, cudnnGetErrorString(st),
               cudnnGetErrorString(list[0].status));
        return none && st == CUDNN_STATUS_NOT_SUPPORTED && list[0].status == CUDNN_STATUS_SUCCESS ? 0 : 3;
    }
    if (!strcmp(name, "bad_fault")) {   /* a malformed switch stops at first use */
        DNN(algos(FWD, d, false, &list));
        return 0;
    }
    if (!strcmp(name, "descriptor_copied")) {   /* DS_EMU_SCHED=lazy: the op runs at the synchronisation */
        CK(cudaMemset(p.y_, 0xff, c.y.extent() * 4));
        DNN(run_op(FWD, d, 0, p.x_, p.w_, p.y_, nullptr, 0, 1, 0));
        DNN(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, 3, 7, 6));
        DNN(cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, 1, 4, 5, 4));
        DNN(cudnnSetConvolution2dDescriptor(d.conv, 0, 0, 1, 1, 1, 1, CUDNN_CONVOLUTION, CUDNN_DATA_FLOAT));
        DNN(cudnnSetConvolutionMathType(d.conv, CUDNN_TENSOR_OP_MATH));
        DNN(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, 4, 3, 3, 3));
        CK(cudaStreamSynchronize(stream));
        std::vector<double> got = download_as(p.y_, c.y.extent(), CUDNN_DATA_FLOAT);
        std::string why;
        bool ok = close(got, p.y_ref, 1e-5, 1e-5, &why);
        printf("%s\n", ok ? "as described at the call" : why.c_str());
        return ok ? 0 : 3;
    }
    /* defects: each ends the process */
    if (!strcmp(name, "strided_extent_past_end")) {
        cudnnTensorDescriptor_t xs;
        DNN(cudnnCreateTensorDescriptor(&xs));
        /* the packed NCHW extent, read with a row pitch of 7 */
        DNN(cudnnSetTensor4dDescriptorEx(xs, CUDNN_DATA_FLOAT, 2, 3, 7, 6, 3 * 7 * 7, 7 * 7, 7, 1));
        descs e = d;
        e.x = xs;
        run_op(FWD, e, 0, p.x_, p.w_, p.y_, nullptr, 0, 1, 0);
        return 0;
    }
    if (!strcmp(name, "workspace_past_end")) {
        void *small = dev_alloc(256);
        run_op(FWD, d, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, p.x_, p.w_, p.y_, small, 1 << 20, 1, 0);
        return 0;
    }
    if (!strcmp(name, "alpha_in_device_memory")) {
        float *a = (float *)dev_alloc(4), zero = 0;
        cudnnConvolutionForward(dnn, a, d.x, p.x_, d.w, p.w_, d.conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr,
                                0, &zero, d.y, p.y_);
        return 0;
    }
    if (!strcmp(name, "output_overlaps_input")) {
        cudnnTensorDescriptor_t y3;   /* a y the size of x, at x */
        DNN(cudnnCreateTensorDescriptor(&y3));
        DNN(cudnnSetTensor4dDescriptor(y3, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 2, 3, 7, 6));
        cudnnFilterDescriptor_t w3;
        DNN(cudnnCreateFilterDescriptor(&w3));
        DNN(cudnnSetFilter4dDescriptor(w3, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 3, 3, 3, 3));
        descs e = {d.x, y3, w3, d.conv};
        run_op(FWD, e, 0, p.x_, p.w_, p.x_, nullptr, 0, 1, 0);
        return 0;
    }
    if (!strcmp(name, "destroyed_descriptor")) {
        DNN(cudnnDestroyTensorDescriptor(d.y));
        run_op(FWD, d, 0, p.x_, p.w_, p.y_, nullptr, 0, 1, 0);
        return 0;
    }
    if (!strcmp(name, "host_pointer_as_tensor")) {
        static float hx[2 * 3 * 7 * 6];
        run_op(FWD, d, 0, hx, p.w_, p.y_, nullptr, 0, 1, 0);
        return 0;
    }
    if (!strcmp(name, "gemm_lda_past_end")) {
        cublasHandle_t blas;
        BLAS(cublasCreate(&blas));
        BLAS(cublasSetStream(blas, stream));
        float one = 1, zero = 0, *a = (float *)dev_alloc(16 * 4), *b = (float *)dev_alloc(16 * 4),
              *cc = (float *)dev_alloc(16 * 4);
        cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 5, b, 4, &zero, cc, 4);   /* A: 5*3+4 = 19 */
        return 0;
    }
    if (!strcmp(name, "gemm_c_overlaps_a")) {
        cublasHandle_t blas;
        BLAS(cublasCreate(&blas));
        float one = 1, zero = 0, *a = (float *)dev_alloc(64 * 4);
        cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a + 32, 4, &zero, a + 8, 4);
        return 0;
    }
    return 2;
}

/* Runs this program as a child with `env` (NAME=VALUE or NULL) on case `name`: its exit
 * status (128 + signal when killed), its stdout and stderr in *out. */
static int spawn(const char *self, const char *env, const char *name, std::string *out)
{
    char path[] = "/tmp/ds-emu-libs-test.XXXXXX";
    int fd = mkstemp(path);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        if (env) putenv((char *)env);
        execl(self, self, "--child", name, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    out->clear();
    char buf[4096];
    ssize_t k;
    lseek(fd, 0, SEEK_SET);
    while ((k = read(fd, buf, sizeof buf)) > 0) out->append(buf, k);
    close(fd);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void expect_child(const char *self, const char *label, const char *env, const char *name)
{
    std::string out;
    int rc = spawn(self, env, name, &out);
    report(label, rc == 0, "exit " + std::to_string(rc) + ": " + out);
}

static void expect_defect(const char *self, const char *env, const char *name, const char *text)
{
    std::string out;
    int rc = spawn(self, env, name, &out);
    bool ok = rc != 0 && out.find("ds-emu: defect:") != std::string::npos && out.find(text) != std::string::npos;
    report((std::string("defect_") + name).c_str(), ok, "exit " + std::to_string(rc) + ": " + out);
}

int main(int argc, char **argv)
{
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    DNN(cudnnCreate(&dnn));
    DNN(cudnnSetStream(dnn, stream));
    if (argc >= 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    const char *self = "/proc/self/exe";
    char exe[4096];
    ssize_t n = readlink(self, exe, sizeof exe - 1);
    if (n > 0) exe[n] = 0, self = exe;

    cudaStream_t got;
    DNN(cudnnGetStream(dnn, &got));
    report("cudnn_stream", got == stream);
    test_conv_fp32();
    test_conv_tf32();
    test_conv_bf16();
    test_bf16_rounding();
    test_algorithm_lists();
    test_bad_params();
    test_workspace_scribbled();
    test_nondeterminism();
    test_sgemm();

    expect_child(self, "fault_exec_fail_not_supported", "DS_EMU_FAULT=cudnn_exec_fail=fwd:1", "exec_fail_fwd_1");
    expect_child(self, "fault_exec_fail_execution_failed",
                 "DS_EMU_FAULT=cudnn_exec_fail=bwd_filter:*:EXECUTION_FAILED", "exec_fail_bwd_filter_all");
    expect_child(self, "fault_no_deterministic", "DS_EMU_FAULT=cudnn_no_deterministic", "no_deterministic");
    expect_child(self, "fault_ws_huge", "DS_EMU_FAULT=cudnn_ws_huge", "ws_huge");
    expect_child(self, "fault_ws_huge_one_algorithm", "DS_EMU_FAULT=oom=1000,cudnn_ws_huge=fwd:1", "ws_huge_one");
    expect_child(self, "fault_no_bf16", "DS_EMU_FAULT=cudnn_no_bf16", "no_bf16");
    {
        std::string out;
        int rc = spawn(self, "DS_EMU_FAULT=cudnn_exec_fail=sideways:1", "bad_fault", &out);
        report("fault_malformed_refused", rc == 2 && out.find("cudnn_exec_fail") != std::string::npos, out);
    }
    expect_child(self, "descriptor_copied_at_the_call", "DS_EMU_SCHED=lazy=2000", "descriptor_copied");

    expect_defect(self, NULL, "strided_extent_past_end", "past its end");
    expect_defect(self, NULL, "workspace_past_end", "workSpace");
    expect_defect(self, NULL, "alpha_in_device_memory", "scaling factors on the host");
    expect_defect(self, NULL, "output_overlaps_input", "overlaps");
    expect_defect(self, NULL, "destroyed_descriptor", "not a live tensor descriptor");
    expect_defect(self, NULL, "host_pointer_as_tensor", "not device memory");
    expect_defect(self, NULL, "gemm_lda_past_end", "past its end");
    expect_defect(self, NULL, "gemm_c_overlaps_a", "overlaps");

    DNN(cudnnDestroy(dnn));
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
