/* cpu_conv: convolutions on NHWC activations with [K, R, S, C] weights.
 *
 * With M = n*p*q output pixels and RSC = r*s*c, a convolution is the GEMM
 *     out (M, K) = col (M, RSC) * w^T (RSC, K)
 * where row m of col is the receptive field of pixel m. Four ways to run it, by shape:
 *   - Implicit GEMM (windows up to 3x3x256): the input is zero-padded one image at a time
 *     into a per-thread slot that stays in L2; for one output row, window row r of every
 *     pixel is then a contiguous run of s*c floats, pixels stride*c apart, so the product
 *     is ds_sgemm_seg with the window rows as segments: no im2col at all. Backward-data of
 *     a stride-1 layer is the forward of the flipped, transposed weights; backward-weight
 *     turns the same product around, with the output rows as the segments of the reduction.
 *   - Pointwise (1x1 stride 1): the NHWC input already is col (M, C).
 *   - Otherwise im2col on chunks of output pixels small enough to stay in L2, one per
 *     thread, then a GEMM per chunk; strided backward-data scatters each chunk back
 *     (col2im), one image per thread so scatters never overlap.
 *   - 3x3 stride-1 layers (pad 1) of 64 or more channels in and out, outputs 8x8 or more:
 *     Winograd's F(2x2, 3x3) in cpu_winograd.c (ds_cpu_wino_ok, by the shape alone).
 * Every GEMM runs on ds_sgemm_small's register tiles (the CPU's instruction set),
 * single-threaded: the threads come from OpenMP, one chunk, image or group each.
 *
 * Determinism: the chunking and the choice of method depend only on the shape (never on
 * the thread count or the instruction set), and every output element is produced by one
 * GEMM call (forward, backward-data) or by per-group partial sums added in group order
 * (backward-weight), so with ds_sgemm_small's sum rule the results are bitwise the same for
 * any thread count on any CPU.
 */
#include "cpu_conv.h"
#include "log.h"
#include "cpu_kernels.h"
#include "cpu_sgemm.h"

#include <omp.h>
#include <string.h>

#define CONV_MAX_SLOTS 16  /* most threads a convolution uses: one scratch slot each */


/* Scratch slots in a workspace: one per processor (at most CONV_MAX_SLOTS). The processor
 * count is fixed for the process, so a workspace planned early still fits later calls
 * whatever omp_set_num_threads says; more threads than processors would gain nothing. */
int ds_cpu_conv_slots(void)
{
    int p = omp_get_num_procs();
    return p < 1 ? 1 : p < CONV_MAX_SLOTS ? p : CONV_MAX_SLOTS;
}

int ds_cpu_conv_threads(void)
{
    int t = omp_get_max_threads(), s = ds_cpu_conv_slots();
    return t < s ? t : s;
}


/* Row stride of the weight copies the forward (and a stride-1 backward-data) multiplies
 * by, [r*s*c, k] (resnet50's 1024-channel layers ran at half speed with rows 512 bytes
 * apart). */
static long wt_ld(int k) { return ds_conv_row_ld(k); }

/* Largest reduction length for ds_sgemm_small: a 64-column panel of B is then at most
 * 288 KiB and stays in L2 next to the im2col chunk. */
#define SMALL_KD 1152

static int small_rsc(const ds_conv_desc *d) { return (long)d->r * d->s * d->c <= SMALL_KD; }

static int is_pointwise(const ds_conv_desc *d)
{
    return d->r == 1 && d->s == 1 && d->stride == 1 && d->pad == 0;
}

/* Implicit GEMM (no im2col) for convolutions with a window: forward and backward-data walk
 * the output 64 channels at a time, so a (r*s*c, 64) panel of the weights is reused by
 * every row of an image. Up to 3x3x256 the panel stays in L2; at 3x3x512 (1.2 MB) im2col
 * into tall chunks with blocked reductions is faster (measured on resnet50's layer4). */
#define IMPLICIT_KD 2304

static int implicit_ok(const ds_conv_desc *d)
{
    // 1x1 windows: pointwise layers need no im2col anyway, and strided ones with many
    // channels make taller GEMMs by gathering their pixels first.
    if (d->r == 1 && d->s == 1 && (is_pointwise(d) || (long)d->c * d->k > 65536)) return 0;
    return (long)d->r * d->s * d->c <= IMPLICIT_KD;
}


int ds_cpu_conv_flipped(const ds_conv_desc *d, ds_conv_desc *t)
{
    if (d->stride != 1 || d->r != d->s || d->pad > d->r - 1) return 0;
    *t = (ds_conv_desc){.n = d->n, .h = d->p, .w = d->q, .c = d->k, .k = d->c, .r = d->r, .s = d->s,
                        .stride = 1, .pad = d->r - 1 - d->pad, .p = d->h, .q = d->w,
                        .in_t = d->out_t, .out_t = d->in_t, .w_t = d->w_t};
    return 1;
}

/* Pointwise backward-data multiplies by the weights directly. */
static int bwd_data_as_fwd(const ds_conv_desc *d, ds_conv_desc *t)
{
    return !is_pointwise(d) && ds_cpu_conv_flipped(d, t);
}

/* Output pixels per chunk: about 384 KiB of col, so a chunk is still in L2 when the GEMM
 * reads it, but at least 64 rows (256 with many output channels). */
static long chunk_rows(const ds_conv_desc *d)
{
    long m = (long)d->n * d->p * d->q, rsc = (long)d->r * d->s * d->c;
    // Many output channels: every chunk streams all the weights, so take fewer, taller ones.
    long least = d->k >= 256 ? 256 : 64, rows = ds_round16(98304 / rsc > least ? 98304 / rsc : least);
    return rows < m ? rows : m > 0 ? m : 1;
}

static long chunk_count(const ds_conv_desc *d)
{
    long m = (long)d->n * d->p * d->q, rows = chunk_rows(d);
    return (m + rows - 1) / rows;
}

/* Rows per chunk where every output element is one GEMM call over the whole reduction
 * (forward, backward-data), so the chunking does not change the sums: at most chunk_rows,
 * but as many chunks as a whole number of rounds of the threads, equal in size, not rounded
 * up to 16 (resnet50's 784 rows of 7x7 outputs as 4 x 196, not 256 + 256 + 256 + 16 with one
 * thread idle, nor 208 + 208 + 208 + 160). */
static long balanced_rows(const ds_conv_desc *d)
{
    long m = (long)d->n * d->p * d->q, threads = ds_cpu_conv_threads();
    if (m == 0) return 1;  /* no pixels: no chunk, whatever its size */
    long rounds = (chunk_count(d) + threads - 1) / threads, rows = (m + rounds * threads - 1) / (rounds * threads);
    return rows < chunk_rows(d) ? rows : chunk_rows(d);
}

/* Backward-weight through im2col chunks (or the input itself when pointwise): 1 when it
 * takes (rsc, k) register tiles, 0 for big weight gradients (1x1 with many channels, wide
 * windows), which stream too much per such tile and take transposed (k, rsc) tiles, a
 * (mr, 64) block of col in L1 against all of dout's chunk (measured on resnet50's shapes). */
static int bwdw_small(const ds_conv_desc *d)
{
    return small_rsc(d) && !(d->r == 1 && d->s == 1 && (long)d->c * d->k > 65536);
}

/* In that product the operand read across its rows (the input for (rsc, k) tiles of a
 * pointwise layer, dout for (k, rsc) tiles) is copied with rows wt_ld apart when its own
 * rows are 512 bytes or more apart: a tile's broadcasts then walk rows that fall in a
 * fraction of L1's sets (resnet50's 1024-channel layers ran at half speed with AVX2).
 * Returns that row stride, or 0 when no copy is made. */
static long bwdw_copy_ld(const ds_conv_desc *d)
{
    int width = bwdw_small(d) ? (is_pointwise(d) ? d->c : 0) : d->k;
    return width && wt_ld(width) != width ? wt_ld(width) : 0;
}

static long slot_floats(const ds_conv_desc *d)
{
    ds_conv_desc t;
    const long rows = chunk_rows(d), cols = ds_round16(rows * d->r * d->s * d->c);
    long a = cols, b = (is_pointwise(d) ? 0 : cols) + ds_round16(rows * bwdw_copy_ld(d));
    if (b > a) a = b;
    if (bwd_data_as_fwd(d, &t) && ds_round16(chunk_rows(&t) * t.r * t.s * t.c) > a) a = ds_round16(chunk_rows(&t) * t.r * t.s * t.c);
    return a;
}

static int weight_groups(const ds_conv_desc *d)
{
    long krsc = ds_round16((long)d->k * d->r * d->s * d->c), chunks = chunk_count(d);
    long g = chunks < DS_CONV_GROUPS ? chunks : DS_CONV_GROUPS;
    while (g > 1 && g * krsc > DS_CONV_GROUP_FLOATS) g /= 2;
    return (int)g;
}

/* Workspace layout: [weights area: partial weight gradients, or the weights transposed or
 * flipped with rows wt_ld apart] [ds_cpu_conv_slots() slots of im2col scratch]. */
static long weights_area(const ds_conv_desc *d)
{
    ds_conv_desc t;
    long rs = (long)d->r * d->s, a = weight_groups(d) * ds_round16(rs * d->k * d->c), b = ds_round16(rs * d->c * wt_ld(d->k));
    if (b > a) a = b;
    if (bwd_data_as_fwd(d, &t) && ds_round16(rs * t.c * wt_ld(t.k)) > a) a = ds_round16(rs * t.c * wt_ld(t.k));
    if (ds_round16(d->k * wt_ld(rs * d->c)) > a) a = ds_round16(d->k * wt_ld(rs * d->c));  // padded_weights
    return a;
}

/* The weights [k, rsc] with rows wt_ld(rsc) apart (a copy in ws when that differs from rsc),
 * for the backward-data products that multiply by them as they are. */
static const float *padded_weights(const float *w, const ds_conv_desc *d, float *ws, long *ldw)
{
    const long rsc = (long)d->r * d->s * d->c;
    *ldw = wt_ld((int)rsc);
    if (*ldw == rsc) return w;
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
    for (int k = 0; k < d->k; k++) memcpy(ws + k * *ldw, w + k * rsc, (size_t)rsc * sizeof *w);
    return ws;
}

/* Floats of one image's zero-padded copy, which an implicit-GEMM convolution reads (0: the
 * input is read in place), plus a window row of slack: the last window of a row may start
 * its read there. */
static long padded_image_floats(const ds_conv_desc *d)
{
    if (d->pad == 0 || is_pointwise(d)) return 0;
    return ds_round16((long)(d->h + 2 * d->pad) * (d->w + 2 * d->pad) * d->c + (long)d->s * d->c);
}

static long scratch_floats(const ds_conv_desc *d)
{
    ds_conv_desc t;
    long a = slot_floats(d), b = padded_image_floats(d);
    if (b > a) a = b;
    if (bwd_data_as_fwd(d, &t) && padded_image_floats(&t) > a) a = padded_image_floats(&t);
    return ds_cpu_conv_slots() * a;
}

size_t ds_cpu_conv_workspace(const ds_conv_desc *d)
{
    if (d->in_t != DS_F32 || d->out_t != DS_F32 || d->w_t != DS_F32) {
        ds_err("cpu: fp32 convolutions take float32 tensors (given %s input, %s output, %s weights)",
               ds_dtype_name(d->in_t), ds_dtype_name(d->out_t), ds_dtype_name(d->w_t));
        return SIZE_MAX;
    }
    if (ds_cpu_wino_ok(d)) return ds_cpu_wino_workspace(d);
    return (size_t)(weights_area(d) + scratch_floats(d)) * sizeof(float);
}

/* dst [h + 2 pad, w + 2 pad, c] = one image of in [h, w, c] with a border of zeros. The
 * copy is made per image, per thread, so it is still in L2 when the GEMM reads it. */
static const float *pad_image(float *dst, const float *img, const ds_conv_desc *d)
{
    if (d->pad == 0) return img;
    const int wp = d->w + 2 * d->pad;
    const size_t c = d->c, edge = (size_t)d->pad * c * sizeof(float);
    memset(dst, 0, (size_t)d->pad * wp * c * sizeof(float));
    for (int y = 0; y < d->h; y++) {
        float *row = dst + (long)(y + d->pad) * wp * c;
        memset(row, 0, edge);
        memcpy(row + d->pad * c, img + (long)y * d->w * c, (size_t)d->w * c * sizeof(float));
        memset(row + (d->pad + d->w) * c, 0, edge);
    }
    memset(dst + (long)(d->pad + d->h) * wp * c, 0, (size_t)d->pad * wp * c * sizeof(float));
    return dst;
}

/* Implicit GEMM, no im2col: for one output row, the window row r of every pixel is a
 * contiguous run of s*c floats of the padded input, pixel after pixel stride*c apart, so
 *     out row (q, k) = sum over r of in_pad rows (q, s*c) * wt[r] (s*c, k),
 * one ds_sgemm_seg call with the r window rows as segments. wt is [r, s, c, k], rows
 * wt_ld(k) apart. */
static void conv_fwd_implicit(float *out, const float *in, const float *wt, const ds_conv_desc *d,
                              float *scratch, const ds_cpu_conv_bn *bn)
{
    const long ldw = wt_ld(d->k);
    const int wp = d->w + 2 * d->pad;
    const long sc = (long)d->s * d->c, hwc = (long)d->h * d->w * d->c, slot = scratch_floats(d) / ds_cpu_conv_slots();
    // (Measured on resnet50: row by row wins at 14x14 outputs, loses at 7x7 where a row is
    // too short a tile to pay for reloading it.)
    const int by_row = (long)d->r * sc > 1024 && d->q >= 14;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int n = 0; n < d->n; n++) {
        const float *src = pad_image(scratch + omp_get_thread_num() * slot, in + n * hwc, d);
        for (int k0 = 0; k0 < d->k; k0 += 64) {
            const int kb = d->k - k0 < 64 ? d->k - k0 : 64;
            float *o = out + (long)n * d->p * d->q * d->k + k0;
            if (!by_row) {  // all window rows in one call: the tile stays in registers
                for (int p = 0; p < d->p; p++) {
                    ds_sgemm_seg(d->q, kb, d->r, sc, src + (long)p * d->stride * wp * d->c, (long)d->stride * d->c,
                                 1, (long)wp * d->c, wt + k0, ldw, sc * ldw, o + (long)p * d->q * d->k, d->k, 0);
                    if (bn) ds_cpu_conv_bn_f32(out, ((long)n * d->p + p) * d->q, k0, d->q, kb, d, bn);
                }
                continue;
            }
            // Wide windows: one window row at a time over all output rows, so that row's
            // (s*c, 64) weight panel is reused from L2 rather than the whole window's from L3.
            for (int r = 0; r < d->r; r++)
                for (int p = 0; p < d->p; p++)
                    ds_sgemm_seg(d->q, kb, 1, sc, src + ((long)p * d->stride + r) * wp * d->c, (long)d->stride * d->c,
                                 1, 0, wt + r * sc * ldw + k0, ldw, 0, o + (long)p * d->q * d->k, d->k, r > 0);
            if (bn) ds_cpu_conv_bn_f32(out, (long)n * d->p * d->q, k0, (long)d->p * d->q, kb, d, bn);
        }
    }
}

/* col (rows, r*s*c) = the receptive fields of output pixels m0 .. m0+rows-1; zero where
 * the window hangs over the padding. */
static void im2col(float *col, const float *in, const ds_conv_desc *d, long m0, long rows)
{
    const long pq = (long)d->p * d->q, sc = (long)d->s * d->c;
    for (long i = 0; i < rows; i++) {
        long m = m0 + i, n = m / pq, rem = m % pq;
        int p = (int)(rem / d->q), q = (int)(rem % d->q);
        float *dst = col + i * d->r * sc;
        const float *img = in + n * d->h * d->w * d->c;
        int x0 = q * d->stride - d->pad;
        int s_lo = x0 < 0 ? -x0 : 0, s_hi = d->w - x0 < d->s ? d->w - x0 : d->s;
        for (int r = 0; r < d->r; r++, dst += sc) {
            int y = p * d->stride - d->pad + r;
            if (y < 0 || y >= d->h || s_lo >= s_hi) {
                memset(dst, 0, sc * sizeof(float));
                continue;
            }
            memset(dst, 0, (size_t)s_lo * d->c * sizeof(float));
            memcpy(dst + s_lo * d->c, img + ((long)y * d->w + x0 + s_lo) * d->c,
                   (size_t)(s_hi - s_lo) * d->c * sizeof(float));
            memset(dst + s_hi * d->c, 0, (size_t)(d->s - s_hi) * d->c * sizeof(float));
        }
    }
}

/* Rows m0 .. m0+rows-1 of the im2col matrix: the input itself for a pointwise (1x1, stride
 * 1, no padding) convolution, else gathered into this thread's slot. */
static const float *chunk_cols(const float *in, const ds_conv_desc *d, int pointwise, long m0, long rows,
                               float *slots, long slot)
{
    if (pointwise) return in + m0 * d->c;
    float *buf = slots + omp_get_thread_num() * slot;
    im2col(buf, in, d, m0, rows);
    return buf;
}

/* The adjoint of im2col: din += col scattered back to where im2col gathered it from. */
void ds_cpu_col2im_add(float *din, const float *col, const ds_conv_desc *d, long m0, long rows)
{
    const long pq = (long)d->p * d->q, sc = (long)d->s * d->c;
    for (long i = 0; i < rows; i++) {
        long m = m0 + i, n = m / pq, rem = m % pq;
        int p = (int)(rem / d->q), q = (int)(rem % d->q);
        const float *src = col + i * d->r * sc;
        float *img = din + n * d->h * d->w * d->c;
        int x0 = q * d->stride - d->pad;
        int s_lo = x0 < 0 ? -x0 : 0, s_hi = d->w - x0 < d->s ? d->w - x0 : d->s;
        for (int r = 0; r < d->r; r++, src += sc) {
            int y = p * d->stride - d->pad + r;
            if (y < 0 || y >= d->h) continue;
            float *dst = img + ((long)y * d->w + x0) * d->c;
#pragma omp simd
            for (long j = (long)s_lo * d->c; j < (long)s_hi * d->c; j++) dst[j] += src[j];
        }
    }
}

/* The im2col forward: wt is the weights transposed, [rsc, k], rows wt_ld(k) apart. */
static void conv_fwd_slots(float *out, const float *in, const float *wt, const ds_conv_desc *d,
                           float *slots, long slot, const ds_cpu_conv_bn *bn)
{
    const long m = (long)d->n * d->p * d->q, rsc = (long)d->r * d->s * d->c;
    const long rows = balanced_rows(d), chunks = (m + rows - 1) / rows;
    const int pointwise = is_pointwise(d);
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (long ch = 0; ch < chunks; ch++) {
        long m0 = ch * rows, mr = m - m0 < rows ? m - m0 : rows;
        const float *col = chunk_cols(in, d, pointwise, m0, mr, slots, slot);
        // out (mr, k) = col (mr, rsc) * wt (rsc, k)
        ds_sgemm_small(mr, d->k, rsc, col, rsc, 1, wt, wt_ld(d->k), out + m0 * d->k, d->k, 0);
        if (bn) ds_cpu_conv_bn_f32(out, m0, 0, mr, d->k, d, bn);
    }
}

void ds_cpu_conv_bn_f32(float *out, long m0, int k0, long rows, int cols, const ds_conv_desc *d,
                        const ds_cpu_conv_bn *bn)
{
    const ds_cpu_loops *L = ds_cpu_kernels_for(ds_cpu_isa_get())->loops;
    const float *res = bn->residual;
    const long at = m0 * d->k + k0;
    L->bn_tile(out + at, d->k, res ? res + at : NULL, bn->mean + k0, bn->a + k0, bn->beta + k0, bn->relu, rows, cols);
}

void ds_cpu_conv_fwd(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws)
{
    ds_cpu_conv_fwd_bn(out, in, w, d, ws, NULL);
}

void ds_cpu_conv_fwd_bn(void *out_, const void *in_, const void *w_, const ds_conv_desc *d, void *ws,
                        const ds_cpu_conv_bn *bn)
{
    float *out = out_;
    const float *in = in_, *w = w_;
    if (ds_cpu_wino_ok(d)) {
        ds_cpu_wino_fwd(out, in, w, d, ws, bn);
        return;
    }
    const long rsc = (long)d->r * d->s * d->c;
    float *slots = (float *)ws + weights_area(d), *wt = ws;
    const long ldw = wt_ld(d->k);
    // wt [rsc, k] = w^T
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
    for (long j = 0; j < rsc; j++)
        for (int k = 0; k < d->k; k++) wt[j * ldw + k] = w[k * rsc + j];
    if (implicit_ok(d))
        conv_fwd_implicit(out, in, wt, d, slots, bn);
    else
        conv_fwd_slots(out, in, wt, d, slots, slot_floats(d), bn);
}

void ds_cpu_conv_bwd_data(void *din_, const void *dout_, const void *w_, const ds_conv_desc *d, void *ws)
{
    float *din = din_;
    const float *dout = dout_, *w = w_;
    const long m = (long)d->n * d->p * d->q, rsc = (long)d->r * d->s * d->c;
    const long rows = chunk_rows(d), slot = slot_floats(d);
    float *slots = (float *)ws + weights_area(d);
    ds_conv_desc t;

    if (ds_cpu_wino_ok(d)) {
        ds_cpu_wino_bwd_data(din, dout, w, d, ws);
        return;
    }
    if (is_pointwise(d)) {
        const long prows = balanced_rows(d), chunks = (m + prows - 1) / prows;
        long ldw;
        const float *wp = padded_weights(w, d, ws, &ldw);
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
        for (long ch = 0; ch < chunks; ch++) {
            long m0 = ch * prows, mr = m - m0 < prows ? m - m0 : prows;
            // din (mr, c) = dout (mr, k) * w (k, c)
            ds_sgemm_small(mr, d->c, d->k, dout + m0 * d->k, d->k, 1, wp, ldw, din + m0 * d->c, d->c, 0);
        }
        return;
    }

    if (bwd_data_as_fwd(d, &t)) {
        const int R = d->r, S = d->s, C = d->c, K = d->k;
        float *wt = ws;
        // The flipped convolution's weights, transposed for ds_sgemm_small (rows wt_ld(C)
        // apart): wt [r, s, k, c] = w [k, R-1-r, S-1-s, c]
        const long ldw = wt_ld(C);
#pragma omp parallel for collapse(2) schedule(static) num_threads(ds_cpu_conv_threads())
        for (int r = 0; r < R; r++)
            for (int s = 0; s < S; s++)
                for (int k = 0; k < K; k++)
                    memcpy(wt + (((long)r * S + s) * K + k) * ldw,
                           w + (((long)k * R + (R - 1 - r)) * S + (S - 1 - s)) * C, (size_t)C * sizeof(float));
        if (implicit_ok(&t))
            conv_fwd_implicit(din, dout, wt, &t, slots, NULL);
        else
            conv_fwd_slots(din, dout, wt, &t, slots, slot, NULL);
        return;
    }

    // Strided: per-pixel GEMM into col, then scatter. One image per task, so the scatters
    // of different threads never overlap and each image's sum order is fixed.
    const long pq = (long)d->p * d->q, hwc = (long)d->h * d->w * d->c;
    long ldw;
    const float *wp = padded_weights(w, d, ws, &ldw);
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int n = 0; n < d->n; n++) {
        float *col = slots + omp_get_thread_num() * slot;
        memset(din + n * hwc, 0, hwc * sizeof(float));
        for (long m0 = n * pq; m0 < (n + 1) * pq; m0 += rows) {
            long mr = (n + 1) * pq - m0 < rows ? (n + 1) * pq - m0 : rows;
            // col (mr, rsc) = dout (mr, k) * w (k, rsc)
            ds_sgemm_small(mr, (int)rsc, d->k, dout + m0 * d->k, d->k, 1, wp, ldw, col, rsc, 0);
            ds_cpu_col2im_add(din, col, d, m0, mr);
        }
    }
}

/* Adds the weight gradient's group partials to dw: each element's groups summed in group
 * order, then added to dw once, so the result is the same for any thread count (the order
 * the bitwise promise of docs/DESIGN.md §7 rests on, written once). The partials lie
 * part_stride apart, each [k, rsc] or, transposed, [rsc, k]. */
void ds_cpu_conv_sum_groups(float *dw, const float *part, int groups, long part_stride, int k, long rsc, int transposed)
{
    const long krsc = k * rsc;
    // Each element summed over the groups in group order, a block of elements at a time so
    // that the adds run across the block's vector lanes.
    if (!transposed) {
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
        for (long i0 = 0; i0 < krsc; i0 += 256) {
            const long n = krsc - i0 < 256 ? krsc - i0 : 256;
            float s[256];
#pragma omp simd
            for (long i = 0; i < n; i++) s[i] = part[i0 + i];
            for (int g = 1; g < groups; g++) {
                const float *pg = part + g * part_stride + i0;
#pragma omp simd
                for (long i = 0; i < n; i++) s[i] += pg[i];
            }
#pragma omp simd
            for (long i = 0; i < n; i++) dw[i0 + i] += s[i];
        }
        return;
    }
    // Partials [rsc, k], dw [k, rsc]: in tiles of 32 x 32, so that both the reads of every
    // group and the transposed writes stay within a few cache lines and pages.
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
    for (long r0 = 0; r0 < rsc; r0 += 32)
        for (int j0 = 0; j0 < k; j0 += 32) {
            const long r1 = r0 + 32 < rsc ? r0 + 32 : rsc;
            const int j1 = j0 + 32 < k ? j0 + 32 : k, nj = j1 - j0;
            float s[32][32];
            for (long r = r0; r < r1; r++) {
                float *sr = s[r - r0];
                const float *p0 = part + r * k + j0;
#pragma omp simd
                for (int j = 0; j < nj; j++) sr[j] = p0[j];
                for (int g = 1; g < groups; g++) {
                    const float *pg = p0 + g * part_stride;
#pragma omp simd
                    for (int j = 0; j < nj; j++) sr[j] += pg[j];
                }
            }
            for (int j = j0; j < j1; j++)
                for (long r = r0; r < r1; r++) dw[(long)j * rsc + r] += s[r - r0][j - j0];
        }
}

void ds_cpu_conv_bwd_weight(float *dw, const void *dout_, const void *in_, const ds_conv_desc *d, void *ws)
{
    const float *dout = dout_, *in = in_;
    const long m = (long)d->n * d->p * d->q, rsc = (long)d->r * d->s * d->c, krsc = d->k * rsc;
    const long rows = chunk_rows(d), chunks = chunk_count(d), slot = slot_floats(d);
    const long part_stride = ds_round16(krsc);
    const int groups = weight_groups(d), pointwise = is_pointwise(d), small = bwdw_small(d);
    float *part = ws, *slots = (float *)ws + weights_area(d);
    if (m == 0) return;
    if (ds_cpu_wino_ok(d)) {
        ds_cpu_wino_bwd_weight(dw, dout, in, d, ws);
        return;
    }

    // Up to 3x3x256 windows (measured on resnet50; at 3x3x512 im2col chunks are faster).
    if (!pointwise && implicit_ok(d) && rsc <= 2304) {
        // Implicit GEMM as in the forward pass, with the roles turned: for image n and window
        // row r, pg[r] (s*c, k) += in_pad^T (s*c, p*q) * dout[n] (p*q, k), the output rows
        // being the segments of the reduction. With few output channels the transposed
        // product, pg (k, [r] s*c) += dout[n]^T (k, p*q) * in_pad (p*q, s*c), makes wider
        // register tiles (k = 16: 8 x 48 instead of 16 x 16).
        const int wp = d->w + 2 * d->pad;
        const long sc = (long)d->s * d->c, pqk = (long)d->p * d->q * d->k, hwc = (long)d->h * d->w * d->c;
        const long pslot = scratch_floats(d) / ds_cpu_conv_slots();
        const int by_k = d->k < 32 && sc >= 32;
        // Wide windows: 32 output channels at a time, so the image's (p*q, 32) block of dout
        // stays in L1 while the many window rows stream past it.
        const int kcols = rsc > SMALL_KD ? 32 : d->k;
        const int g_rows = groups < d->n ? groups : d->n;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
        for (int g = 0; g < g_rows; g++) {
            float *pg = part + g * part_stride, *buf = slots + omp_get_thread_num() * pslot;
            const long n0 = (long)g * d->n / g_rows, n1 = (long)(g + 1) * d->n / g_rows;
            for (long n = n0; n < n1; n++) {
                const float *src = pad_image(buf, in + n * hwc, d);
                for (int r = 0; r < d->r; r++) {
                    const float *a = src + (long)r * wp * d->c;
                    const long step = (long)d->stride * d->c, row = (long)d->stride * wp * d->c;
                    if (by_k)
                        ds_sgemm_seg(d->k, (int)sc, d->p, d->q, dout + n * pqk, 1, d->k, (long)d->q * d->k, a,
                                     step, row, pg + r * sc, rsc, n != n0);
                    else
                        for (int k0 = 0; k0 < d->k; k0 += kcols)
                            ds_sgemm_seg(sc, d->k - k0 < kcols ? d->k - k0 : kcols, d->p, d->q, a, 1, step, row,
                                         dout + n * pqk + k0, d->k, (long)d->q * d->k, pg + r * sc * d->k + k0,
                                         d->k, n != n0);
                }
            }
        }
        ds_cpu_conv_sum_groups(dw, part, g_rows, part_stride, d->k, rsc, !by_k);
        return;
    }

    const long copy_ld = bwdw_copy_ld(d);
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int g = 0; g < groups; g++) {
        long c0 = g * chunks / groups, c1 = (g + 1) * chunks / groups;
        float *pg = part + g * part_stride;
        // This thread's slot: the im2col chunk, then the copy of the transposed operand.
        float *copy = slots + omp_get_thread_num() * slot + (pointwise ? 0 : ds_round16(rows * rsc));
        for (long ch = c0; ch < c1; ch++) {
            long m0 = ch * rows, mr = m - m0 < rows ? m - m0 : rows;
            const float *col = chunk_cols(in, d, pointwise, m0, mr, slots, slot);
            // the transposed operand: col (rsc, k tiles) or dout ((k, rsc) tiles), rows ld apart
            const float *a = small ? col : dout + m0 * d->k;
            long ld = small ? rsc : d->k;
            if (copy_ld) {
                for (long i = 0; i < mr; i++) memcpy(copy + i * copy_ld, a + i * ld, (size_t)ld * sizeof *a);
                a = copy, ld = copy_ld;
            }
            if (small)  // pg (rsc, k) (+)= col^T (rsc, mr) * dout (mr, k)
                ds_sgemm_small(rsc, d->k, mr, a, 1, ld, dout + m0 * d->k, d->k, pg, d->k, ch != c0);
            else        // pg (k, rsc) (+)= dout^T (k, mr) * col (mr, rsc)
                ds_sgemm_small(d->k, (int)rsc, mr, a, 1, ld, col, rsc, pg, rsc, ch != c0);
        }
    }
    ds_cpu_conv_sum_groups(dw, part, groups, part_stride, d->k, rsc, small);
}
