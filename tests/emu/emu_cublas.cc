/* emu_cublas: the cuBLAS of the emulated device (emu.h): the handle and single-precision
 * GEMM, computed on the CPU. Every entry point has the signature of the installed
 * cublas_api.h, under the names cublas_v2.h maps the unsuffixed ones to (cublasCreate is
 * cublasCreate_v2, ...).
 *
 * Emulated: cublasCreate_v2, cublasDestroy_v2 (which synchronises the device, as cuBLAS
 * documents), cublasGetVersion_v2, cublasSetStream_v2 and cublasGetStream_v2,
 * cublasSetWorkspace_v2, cublasSetMathMode and cublasGetMathMode, cublasSetPointerMode_v2
 * and cublasGetPointerMode_v2, cublasSgemm_v2, cublasGetStatusName, cublasGetStatusString.
 *
 * cublasSgemm_v2 is BLAS's: column-major, C (m x n) = alpha op(A) op(B) + beta C, op(A) m x k
 * and op(B) k x n (CUBLAS_OP_C is CUBLAS_OP_T for real matrices). Products accumulate in
 * float in one fixed order; with a workspace and beta != 0 the two halves of k are added
 * into C one after the other (split-K: C = (beta C + alpha lo) + alpha hi). Math modes: DEFAULT and PEDANTIC compute in fp32 (DEFAULT never
 * lowers SGEMM's precision), TF32_TENSOR_OP rounds A and B to tf32 (10 mantissa bits,
 * nearest even), the deprecated TENSOR_OP computes SGEMM as CUBLAS_COMPUTE_32F_FAST_16F
 * does (A and B converted to fp16, range included), the fp32 emulations compute in fp32; the
 * DISALLOW_REDUCED_PRECISION_REDUCTION bit is accepted and changes nothing here. Pointer mode
 * host (the default): alpha and beta are read when the call is made; device: when the GEMM
 * runs. beta == 0 does not read C (fresh device memory is NaN); alpha == 0 or k == 0 does not
 * read A or B, as BLAS specifies.
 *
 * Checked, with cuBLAS's status: a NULL handle (NOT_INITIALIZED); an unknown transpose or
 * math mode, m, n or k negative, lda < max(1, rows of A as stored) and likewise ldb and ldc,
 * NULL alpha or beta, a workspace not aligned to 256 bytes or NULL with a size
 * (INVALID_VALUE). Defects of the program (emu::defect): a handle never created or
 * destroyed; A, B or C not inside live device memory over the extent the call implies
 * (ld * (cols - 1) + rows elements, only for the matrices the call reads or writes); alpha
 * or beta in device memory under pointer mode host or in host memory under pointer mode
 * device; C overlapping A or B; a workspace not inside live device memory, or overlapping A,
 * B or C. The GEMM runs on the handle's stream. A workspace given with cublasSetWorkspace_v2
 * belongs to cuBLAS until the handle's workspace changes: each GEMM writes a pattern (the
 * 32-bit word 0xffc0ffee, NaN as float) over up to m * n * 4 bytes of it (what a split-K
 * algorithm keeps there), and its range is checked again when the GEMM runs.
 * cublasSetStream_v2 sets the handle's workspace back to cuBLAS's own pool, as cuBLAS
 * documents, so a workspace set before it is no longer used.
 *
 * Not emulated: every other BLAS routine, batched and Ex/Lt interfaces, atomics mode, the
 * logger, NVIDIA_TF32_OVERRIDE, cuBLAS's choice of algorithms and its numerics beyond the
 * rounding of inputs, and its speed. */
#include "emu.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

struct cublasContext {
    cudaStream_t stream = nullptr;
    void *ws = nullptr;          /* the caller's workspace; NULL: cuBLAS's own pool */
    size_t ws_bytes = 0;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
    cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
    int device = 0;              /* current at cublasCreate */
};

namespace {

struct handles {
    std::mutex m;
    std::unordered_set<const void *> live;
};

handles &live_handles()
{
    static handles *h = new handles;   /* never destroyed: streams' workers may outlive main */
    return *h;
}

/* NOT_INITIALIZED for NULL; a defect for a handle that is not live */
cublasStatus_t check_handle(const char *fn, cublasHandle_t h)
{
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    std::lock_guard<std::mutex> lock(live_handles().m);
    if (!live_handles().live.count(h))
        emu::defect("%s: handle %p is not a live cuBLAS handle (never created, or destroyed)", fn, (void *)h);
    std::string what = std::string(fn) + ": the cuBLAS handle";
    emu::check_current(h->device, what.c_str());
    return CUBLAS_STATUS_SUCCESS;
}

float tf32_round(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return f;
    u = (u + 0xfffu + (u >> 13 & 1)) & ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}

enum compute { C_FP32, C_TF32, C_FP16 };

int compute_of(cublasMath_t m)
{
    switch ((int)m & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) {
    case CUBLAS_TF32_TENSOR_OP_MATH: return C_TF32;
    case CUBLAS_TENSOR_OP_MATH: return C_FP16;
    default: return C_FP32;
    }
}

bool known_math(int m)
{
    switch (m & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) {
    case CUBLAS_DEFAULT_MATH: case CUBLAS_TENSOR_OP_MATH: case CUBLAS_PEDANTIC_MATH: case CUBLAS_TF32_TENSOR_OP_MATH:
    case CUBLAS_FP32_EMULATED_BF16X9_MATH: case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH: return true;
    default: return false;
    }
}

float round_input(float v, int c)
{
    if (c == C_TF32) return tf32_round(v);
    if (c == C_FP16) return (float)(_Float16)v;
    return v;
}

bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}

/* Everything a queued GEMM needs, by value. */
struct gemm {
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
    int compute;
    bool device_scalars;
    float alpha, beta;                /* pointer mode host */
    const float *palpha, *pbeta;      /* pointer mode device */
    const float *A, *B;
    float *C;
    void *ws;
    size_t ws_used;
};

void run(const gemm &g)
{
    if (g.ws_used) {
        static const unsigned char pattern[4] = {0xee, 0xff, 0xc0, 0xff};   /* 0xffc0ffee */
        for (size_t i = 0; i < g.ws_used; i++) ((unsigned char *)g.ws)[i] = pattern[i % 4];
    }
    float alpha = g.device_scalars ? *g.palpha : g.alpha, beta = g.device_scalars ? *g.pbeta : g.beta;
    const int m = g.m, n = g.n, k = g.k;
    bool reads = k > 0 && alpha != 0;
    /* op(A) packed by columns (a[l * m + i]); each column of C a sum over l, in order, of
     * op(B)(l, j) times A's column l: four lanes a step, which the compiler's straight-line
     * vectoriser takes at -O2 */
    std::vector<float> a, acc(m);
    if (reads) {
        a.resize((size_t)m * k);
        for (int l = 0; l < k; l++)
            for (int i = 0; i < m; i++) {
                float v = g.ta ? g.A[l + (size_t)i * g.lda] : g.A[i + (size_t)l * g.lda];
                a[(size_t)l * m + i] = round_input(v, g.compute);
            }
    }
    /* split-K: with a workspace and beta != 0, the halves of k add into C one after the
     * other, C = (beta C + alpha lo) + alpha hi, as a split-K epilogue may */
    const int split = g.ws_used && beta != 0 && reads && k >= 2 ? k / 2 : 0;
    std::vector<float> lo(split ? m : 0);
    for (int j = 0; j < n; j++) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int l = 0; reads && l < k; l++) {
            if (split && l == split) {
                lo.swap(acc);
                std::fill(acc.begin(), acc.end(), 0.0f);
            }
            float b = round_input(g.tb ? g.B[j + (size_t)l * g.ldb] : g.B[l + (size_t)j * g.ldb], g.compute);
            float *__restrict s = acc.data();
            const float *__restrict x = &a[(size_t)l * m];
            int i = 0;
            for (; i + 4 <= m; i += 4) {
                s[i] += b * x[i];
                s[i + 1] += b * x[i + 1];
                s[i + 2] += b * x[i + 2];
                s[i + 3] += b * x[i + 3];
            }
            for (; i < m; i++) s[i] += b * x[i];
        }
        for (int i = 0; i < m; i++) {
            float *c = &g.C[i + (size_t)j * g.ldc];
            float v;
            if (split) {
                v = beta * *c + alpha * lo[i];
                v = v + alpha * acc[i];
            } else {
                v = alpha * acc[i];
                if (beta != 0) v += beta * *c;
            }
            *c = v;
        }
    }
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    *handle = new cublasContext;
    (*handle)->device = emu::current_device();
    std::lock_guard<std::mutex> lock(live_handles().m);
    live_handles().live.insert(*handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    {
        std::lock_guard<std::mutex> lock(live_handles().m);
        if (!live_handles().live.erase(handle))
            emu::defect("cublasDestroy_v2: handle %p is not a live cuBLAS handle", (void *)handle);
    }
    emu::sync_all();
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version)
{
    cublasStatus_t st = check_handle("cublasGetVersion_v2", handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
{
    cublasStatus_t st = check_handle("cublasSetStream_v2", handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (emu::stream_device(streamId) != handle->device)
        emu::defect("cublasSetStream_v2: the stream is device %d's, the handle device %d's: its kernels would be "
                    "launched into another device's stream", emu::stream_device(streamId), handle->device);
    handle->stream = streamId;
    handle->ws = nullptr;   /* back to cuBLAS's own pool */
    handle->ws_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId)
{
    cublasStatus_t st = check_handle("cublasGetStream_v2", handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!streamId) return CUBLAS_STATUS_INVALID_VALUE;
    *streamId = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes)
{
    cublasStatus_t st = check_handle("cublasSetWorkspace_v2", handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if ((uintptr_t)workspace % 256 || (!workspace && workspaceSizeInBytes)) return CUBLAS_STATUS_INVALID_VALUE;
    if (workspace && workspaceSizeInBytes) {
        char what[96];
        snprintf(what, sizeof what, "cublasSetWorkspace_v2: workspace (%zu bytes)", workspaceSizeInBytes);
        emu::check_range(workspace, workspaceSizeInBytes, emu::MEM_DEVICE, what);
        emu::check_device(workspace, handle->device, what);
    }
    handle->ws = workspaceSizeInBytes ? workspace : nullptr;
    handle->ws_bytes = workspaceSizeInBytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    cublasStatus_t st = check_handle("cublasSetMathMode", handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!known_math((int)mode)) return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    cublasStatus_t st = check_handle("cublasGetMathMode", handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
{
    cublasStatus_t st = check_handle("cublasSetPointerMode_v2", handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode)
{
    cublasStatus_t st = check_handle("cublasGetPointerMode_v2", handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc)
{
    const char *fn = "cublasSgemm_v2";
    cublasStatus_t st = check_handle(fn, handle);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    auto op_ok = [](cublasOperation_t t) { return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C; };
    if (!op_ok(transa) || !op_ok(transb) || m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    /* A and B as stored: rows x cols */
    int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
    if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;

    gemm g;
    g.ta = ta, g.tb = tb;
    g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldc = ldc;
    g.compute = compute_of(handle->math);
    g.device_scalars = handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    g.palpha = alpha, g.pbeta = beta;
    g.alpha = g.beta = 0;
    bool alpha_device = emu::kind_of(alpha, nullptr, nullptr) == emu::MEM_DEVICE;
    bool beta_device = emu::kind_of(beta, nullptr, nullptr) == emu::MEM_DEVICE;
    if (g.device_scalars) {
        emu::check_range(alpha, sizeof(float), emu::MEM_DEVICE, "cublasSgemm_v2: alpha (pointer mode device)");
        emu::check_range(beta, sizeof(float), emu::MEM_DEVICE, "cublasSgemm_v2: beta (pointer mode device)");
    } else {
        if (alpha_device || beta_device)
            emu::defect("%s: %s %p is device memory under CUBLAS_POINTER_MODE_HOST", fn, alpha_device ? "alpha" : "beta",
                        alpha_device ? (const void *)alpha : (const void *)beta);
        g.alpha = *alpha, g.beta = *beta;
    }
    /* BLAS reads A and B only when alpha != 0 and k > 0 (with device scalars alpha is not
     * known yet: they are checked whenever k > 0) */
    bool reads_ab = k > 0 && (g.device_scalars || g.alpha != 0);
    size_t a_bytes = reads_ab ? ((size_t)lda * (a_cols - 1) + a_rows) * sizeof(float) : 0;
    size_t b_bytes = reads_ab ? ((size_t)ldb * (b_cols - 1) + b_rows) * sizeof(float) : 0;
    size_t c_bytes = ((size_t)ldc * (n - 1) + m) * sizeof(float);
    char what[160];
    if (reads_ab) {
        snprintf(what, sizeof what, "%s: A (%s %d x %d, lda %d)", fn, ta ? "transposed" : "as is", a_rows, a_cols, lda);
        emu::check_range(A, a_bytes, emu::MEM_DEVICE, what);
        emu::check_device(A, handle->device, what);
        snprintf(what, sizeof what, "%s: B (%s %d x %d, ldb %d)", fn, tb ? "transposed" : "as is", b_rows, b_cols, ldb);
        emu::check_range(B, b_bytes, emu::MEM_DEVICE, what);
        emu::check_device(B, handle->device, what);
    }
    snprintf(what, sizeof what, "%s: C (%d x %d, ldc %d)", fn, m, n, ldc);
    emu::check_range(C, c_bytes, emu::MEM_DEVICE, what);
    emu::check_device(C, handle->device, what);
    if (overlaps(C, c_bytes, A, a_bytes) || overlaps(C, c_bytes, B, b_bytes))
        emu::defect("%s: C [%p, +%zu) overlaps %s", fn, (void *)C, c_bytes, overlaps(C, c_bytes, A, a_bytes) ? "A" : "B");
    g.A = A, g.B = B, g.C = C;
    g.ws = handle->ws;
    g.ws_used = handle->ws ? std::min(handle->ws_bytes, (size_t)m * n * sizeof(float)) : 0;
    if (g.ws_used && (overlaps(g.ws, handle->ws_bytes, A, a_bytes) || overlaps(g.ws, handle->ws_bytes, B, b_bytes) ||
                      overlaps(g.ws, handle->ws_bytes, C, c_bytes)))
        emu::defect("%s: the handle's workspace [%p, +%zu) overlaps A, B or C", fn, g.ws, handle->ws_bytes);
    emu::enqueue(handle->stream, fn, [g] { run(g); },
                 {{A, a_bytes}, {B, b_bytes}, {C, c_bytes}, {handle->ws, handle->ws ? handle->ws_bytes : 0},
                  {g.device_scalars ? (const void *)alpha : nullptr, g.device_scalars ? sizeof(float) : 0},
                  {g.device_scalars ? (const void *)beta : nullptr, g.device_scalars ? sizeof(float) : 0}});
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t status)
{
    switch (status) {
#define NAME(s) \
    case s: return #s
        NAME(CUBLAS_STATUS_SUCCESS);
        NAME(CUBLAS_STATUS_NOT_INITIALIZED);
        NAME(CUBLAS_STATUS_ALLOC_FAILED);
        NAME(CUBLAS_STATUS_INVALID_VALUE);
        NAME(CUBLAS_STATUS_ARCH_MISMATCH);
        NAME(CUBLAS_STATUS_MAPPING_ERROR);
        NAME(CUBLAS_STATUS_EXECUTION_FAILED);
        NAME(CUBLAS_STATUS_INTERNAL_ERROR);
        NAME(CUBLAS_STATUS_NOT_SUPPORTED);
        NAME(CUBLAS_STATUS_LICENSE_ERROR);
#undef NAME
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "the functionality requested requires some license";
    }
    return "unknown status";
}

}  // extern "C"
