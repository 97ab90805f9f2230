/* cpu_conv_bf16: the CPU convolutions under --precision bf16. Activations (NHWC) and weights
 * ([K, R, S, C]) come in the storage their descriptor names: bf16 ones are the operands as
 * they are, float32 ones are rounded to bf16 as they are read (the weights as they are packed,
 * activations in one pass into the workspace or chunk by chunk); the sums are float32 by
 * cpu_bf16.h's rule, so every kernel set gives the same bits (the VDPBF16PS kernels and their
 * emulations), and a bf16 result is those float32 sums rounded once (through a float32 tile
 * in the thread's slot). dw is always float32.
 *
 * The products are those of cpu_conv.c with bf16 operands, whose reduction runs in pairs:
 *   - Forward, windows of more than one pixel on rows of 14 or more: implicit GEMM. One
 *     image at a time is padded into the thread's slot with its channels padded to an even
 *     count cp (the stem's 3 become 4, a zero), so a window row of every pixel is s*cp
 *     contiguous bf16 of whole pairs, pixels stride*cp apart; the window rows are the
 *     segments of ds_bgemm_seg. A 1x1 stride-1 convolution multiplies the rounded input
 *     itself; the others gather the receptive fields of a chunk of pixels (im2col) first.
 *   - Backward-data of a stride-1 convolution is the forward of the flipped, transposed
 *     weights over dout; strided ones multiply dout's rows by the weights and scatter the
 *     float32 columns back (col2im), one image per thread.
 *   - Backward-weight sums over output pixels, which pair up: dout^T (k, pixels) by the
 *     input's window rows with two pixels' elements side by side (image by image, the
 *     output rows as segments; 1x1 convolutions in chunks of pixels), into per-group
 *     float32 partials summed in group order (as cpu_conv.c).
 * Chunks, groups and paths depend on the shape alone, so the results are bitwise the same
 * for any thread count on any CPU. */
#include "cpu_conv.h"
#include "cpu_bf16.h"

#include <omp.h>
#include <string.h>

static long even(long x) { return (x + 1) & ~1L; }
static long round32(long x) { return (x + 31) / 32 * 32; }  /* bf16 elements: 64 bytes */

/* Columns of packed weights per pair row: k plus a cache line's worth from 128 on, so that
 * pair rows do not fall in a fraction of L1's sets (cpu_conv.c's wt_ld, for the same reason). */
static long pack_ld(int k) { return 2 * ds_conv_row_ld(k); }

static int is_pointwise(const ds_conv_desc *d) { return d->r == 1 && d->s == 1 && d->stride == 1 && d->pad == 0; }

static long in_count(const ds_conv_desc *d) { return (long)d->n * d->h * d->w * d->c; }
static long out_count(const ds_conv_desc *d) { return (long)d->n * d->p * d->q * d->k; }

/* Element i of an activation of storage t. */
static const void *elem(const void *x, long i, ds_dtype t) { return (const char *)x + i * (long)ds_dtype_size(t); }

/* dst = n elements of src (storage t) as bf16: rounded, or copied. */
static void to16(ds_bf16 *dst, const void *src, size_t n, ds_dtype t)
{
    if (t == DS_BF16) memcpy(dst, src, n * sizeof *dst);
    else ds_bf16_round_n(dst, src, n);
}

/* The bf16 of float32 or bf16 element i. */
static ds_bf16 value16(const void *x, long i, ds_dtype t)
{
    return t == DS_BF16 ? ((const ds_bf16 *)x)[i] : ds_bf16_round(((const float *)x)[i]);
}

/* The whole of an operand of storage t as bf16: itself, or rounded into dst (count elements,
 * split across the threads). */
static const ds_bf16 *all16(ds_bf16 *dst, const void *src, long count, ds_dtype t)
{
    if (t == DS_BF16) return src;
    const long block = 1L << 16, blocks = (count + block - 1) / block;
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
    for (long b = 0; b < blocks; b++)
        ds_bf16_round_n(dst + b * block, (const float *)src + b * block,
                        (size_t)(count - b * block < block ? count - b * block : block));
    return dst;
}

/* rows x cols float32 sums at f (rows ldf apart) stored into dst (storage t, rows ldd apart):
 * copied, or rounded once. */
static void store_rows(void *dst, long ldd, const float *f, long ldf, long rows, long cols, ds_dtype t)
{
    if (ldd == cols && ldf == cols) {  /* contiguous (few channels, or all of them): one pass */
        ldd = ldf = cols *= rows;
        rows = 1;
    }
    for (long i = 0; i < rows; i++) {
        if (t == DS_BF16) ds_bf16_round_n((ds_bf16 *)dst + i * ldd, f + i * ldf, (size_t)cols);
        else memcpy((float *)dst + i * ldd, f + i * ldf, (size_t)cols * sizeof *f);
    }
}

/* ---- forward (and stride-1 backward-data) ---- */

static int implicit(const ds_conv_desc *d) { return !(d->r == 1 && d->s == 1) && d->q >= 14; }
/* 1x1 stride 1 with whole pairs: the rounded input is the product's A as it is. */
static int direct(const ds_conv_desc *d) { return is_pointwise(d) && d->c % 2 == 0; }
static long rsc_p(const ds_conv_desc *d) { return (long)d->r * d->s * even(d->c); }

/* A bf16 output is summed into a float32 tile first: chunks of at most OUT_ROWS pixels,
 * OUT_COLS output channels at a time (implicit: OUT_TILE floats, 64 channels of whole output
 * rows), so the tile is still in L2 when it is rounded. */
#define OUT_ROWS 512
#define OUT_COLS 256
#define OUT_TILE 16384
static int out16(const ds_conv_desc *d) { return d->out_t == DS_BF16; }
static long out_cols(const ds_conv_desc *d) { return d->k < OUT_COLS ? d->k : OUT_COLS; }
static long tile_rows(const ds_conv_desc *d) { return d->q >= OUT_TILE / 64 ? 1 : OUT_TILE / 64 / d->q; }
static long tile_floats(const ds_conv_desc *d) { return tile_rows(d) * d->q * 64; }

/* Pixels per chunk: about 384 KiB of bf16 columns, at least 64 (256 with many output
 * channels, which every chunk streams), at most OUT_ROWS for a bf16 output; the slots are
 * sized for this most. */
static long fwd_cap(const ds_conv_desc *d)
{
    const long m = (long)d->n * d->p * d->q, least = d->k >= 256 ? 256 : 64;
    long rows = 196608 / rsc_p(d) > least ? 196608 / rsc_p(d) : least;
    if (out16(d) && rows > OUT_ROWS) rows = OUT_ROWS;
    return ds_round16(rows < m ? rows : m > 0 ? m : 1);
}

/* The chunks a forward takes: at most fwd_cap, as many as whole rounds of the threads. The
 * thread count may differ from the planning's; each output element is one product over the
 * whole reduction, so the chunking never changes the sums. */
static long fwd_rows(const ds_conv_desc *d)
{
    const long m = (long)d->n * d->p * d->q, cap = fwd_cap(d);
    const long threads = ds_cpu_conv_threads(), chunks = (m + cap - 1) / cap;
    const long rounds = (chunks + threads - 1) / threads, bal = ds_round16((m + rounds * threads - 1) / (rounds * threads));
    return bal < cap ? bal : cap;
}

static long fwd_weights(const ds_conv_desc *d) { return rsc_p(d) / 2 * pack_ld(d->k); }

/* The padded image (implicit), before its bf16 row and float32 tile. */
static long padded_size(const ds_conv_desc *d)
{
    return round32((long)(d->h + 2 * d->pad) * (d->w + 2 * d->pad) * even(d->c) + (long)d->s * even(d->c));
}

/* A slot: the padded image and a bf16 row of the input (implicit), or a chunk's columns;
 * then a bf16 output's float32 tile. */
static long fwd_slot(const ds_conv_desc *d)
{
    if (implicit(d))
        return padded_size(d) + round32((long)d->w * d->c) + (out16(d) ? round32(2 * tile_floats(d)) : 0);
    return round32(fwd_cap(d) * rsc_p(d)) + (out16(d) ? round32(2 * fwd_cap(d) * out_cols(d)) : 0);
}

/* Whether the forward product reads the whole input as bf16 first (in16, or the input itself
 * when it is bf16): the gathered windows, which read every element r*s times. */
static int fwd_reads_all(const ds_conv_desc *d) { return !implicit(d) && !direct(d); }

/* B (r*s*cp, k) pair-packed: B((r, s, cc), j) = w[j, r, s, cc], zero for a padding channel;
 * flipped (the backward-data product, d its transposed convolution): w[cc, R-1-r, S-1-s, j]
 * of the original weights [d->c][R][S][d->k]. */
static void pack_weights(ds_bf16 *dst, const void *w, const ds_conv_desc *d, int flipped)
{
    const int R = d->r, S = d->s, C = d->c, K = d->k;
    const long cp = even(C), ld = pack_ld(K), pairs = rsc_p(d) / 2;
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
    for (long t = 0; t < pairs; t++)
        for (int e = 0; e < 2; e++) {
            const long p = 2 * t + e, r = p / (S * cp), s = p / cp % S, cc = p % cp;
            ds_bf16 *row = dst + t * ld + e;
            for (int j = 0; j < K; j++)
                row[2 * j] = cc >= C  ? 0
                             : flipped ? value16(w, ((cc * R + (R - 1 - r)) * S + (S - 1 - s)) * K + j, d->w_t)
                                       : value16(w, ((j * R + r) * S + s) * C + cc, d->w_t);
        }
}

/* n pixels of c channels to cp (one more, a zero, when c is odd). */
static void copy_pixels(ds_bf16 *dst, const ds_bf16 *src, long n, int c)
{
    if (c % 2 == 0) {
        memcpy(dst, src, (size_t)(n * c) * sizeof *dst);
        return;
    }
    for (long x = 0; x < n; x++) {
        memcpy(dst + x * (c + 1), src + x * c, (size_t)c * sizeof *dst);
        dst[x * (c + 1) + c] = 0;
    }
}

/* dst [h + 2 pad, w + 2 pad, cp] (then s*cp zeros) = one image (storage d->in_t) as bf16, with
 * a zero border; tmp holds a row when c is odd. */
static void pad_image(ds_bf16 *dst, const void *img, const ds_conv_desc *d, ds_bf16 *tmp)
{
    const long cp = even(d->c), wp = d->w + 2 * d->pad, hp = d->h + 2 * d->pad;
    memset(dst, 0, (size_t)(d->pad * wp * cp) * sizeof *dst);
    for (int y = 0; y < d->h; y++) {
        ds_bf16 *row = dst + (y + d->pad) * wp * cp;
        memset(row, 0, (size_t)(d->pad * cp) * sizeof *dst);
        const void *src = elem(img, (long)y * d->w * d->c, d->in_t);
        if (cp == d->c) {
            to16(row + d->pad * cp, src, (size_t)d->w * d->c, d->in_t);
        } else {
            to16(tmp, src, (size_t)d->w * d->c, d->in_t);
            copy_pixels(row + d->pad * cp, tmp, d->w, d->c);
        }
        memset(row + (d->pad + d->w) * cp, 0, (size_t)(d->pad * cp) * sizeof *dst);
    }
    memset(dst + (d->pad + d->h) * wp * cp, 0, (size_t)((hp - d->pad - d->h) * wp * cp + d->s * cp) * sizeof *dst);
}

/* col (rows, r*s*cp) = the receptive fields of pixels m0 .. m0+rows-1 of the rounded input;
 * zero over the padding and the padding channels. */
static void im2col(ds_bf16 *col, const ds_bf16 *in, const ds_conv_desc *d, long m0, long rows)
{
    const long pq = (long)d->p * d->q, cp = even(d->c);
    for (long i = 0; i < rows; i++) {
        const long m = m0 + i, n = m / pq, rem = m % pq;
        const int p = (int)(rem / d->q), q = (int)(rem % d->q);
        ds_bf16 *dst = col + i * rsc_p(d);
        const ds_bf16 *img = in + n * d->h * d->w * d->c;
        for (int r = 0; r < d->r; r++)
            for (int s = 0; s < d->s; s++, dst += cp) {
                const int y = p * d->stride - d->pad + r, x = q * d->stride - d->pad + s;
                if (y < 0 || y >= d->h || x < 0 || x >= d->w)
                    memset(dst, 0, (size_t)cp * sizeof *dst);
                else
                    copy_pixels(dst, img + ((long)y * d->w + x) * d->c, 1, d->c);
            }
    }
}

/* out = conv(in, weights packed by pack_weights) for d's shape (storages d->in_t, d->out_t);
 * in16 is the input as bf16 when fwd_reads_all(d); slots fwd_slot(d) apart. */
static void fwd_packed(void *out, const void *in, const ds_bf16 *in16, const ds_bf16 *wp, const ds_conv_desc *d,
                       ds_bf16 *slots)
{
    const long ld = pack_ld(d->k), cp = even(d->c), slot = fwd_slot(d);
    if (implicit(d)) {
        const long wpc = (long)(d->w + 2 * d->pad) * cp, sc = (long)d->s * cp, hwc = (long)d->h * d->w * d->c;
        const long tmp = padded_size(d), pb = out16(d) ? tile_rows(d) : d->p;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
        for (int n = 0; n < d->n; n++) {
            ds_bf16 *src = slots + omp_get_thread_num() * slot;
            float *tile = (float *)(src + tmp + round32((long)d->w * d->c));
            pad_image(src, elem(in, n * hwc, d->in_t), d, src + tmp);
            // Output rows in blocks of pb (all of them for a float32 output, written in place),
            // 64 channels at a time: a bf16 output's block is summed in the tile, then rounded.
            for (int p0 = 0; p0 < d->p; p0 += pb) {
                const int p1 = p0 + pb < d->p ? p0 + pb : d->p;
                for (int k0 = 0; k0 < d->k; k0 += 64) {
                    const int kb = d->k - k0 < 64 ? d->k - k0 : 64;
                    const long first = ((long)n * d->p + p0) * d->q;  /* the block's first pixel */
                    float *o = out16(d) ? tile : (float *)out + first * d->k + k0;
                    const long ldo = out16(d) ? kb : d->k;
                    for (int p = p0; p < p1; p++)
                        ds_bgemm_seg(d->q, kb, d->r, sc, src + (long)p * d->stride * wpc, (long)d->stride * cp, wpc,
                                     wp + 2 * k0, ld, sc / 2 * ld, o + (long)(p - p0) * d->q * ldo, ldo, 0);
                    if (out16(d))
                        store_rows((ds_bf16 *)out + first * d->k + k0, d->k, tile, kb, (long)(p1 - p0) * d->q, kb,
                                   DS_BF16);
                }
            }
        }
        return;
    }
    const long m = (long)d->n * d->p * d->q, rows = fwd_rows(d), chunks = (m + rows - 1) / rows, kd = rsc_p(d);
    const long cols = out16(d) ? out_cols(d) : d->k;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (long ch = 0; ch < chunks; ch++) {
        const long m0 = ch * rows, mr = m - m0 < rows ? m - m0 : rows;
        ds_bf16 *col = slots + omp_get_thread_num() * slot;
        float *tile = (float *)(col + round32(fwd_cap(d) * kd));
        const ds_bf16 *a = col;
        if (direct(d) && d->in_t == DS_BF16)  /* the input's rows are the product's A */
            a = (const ds_bf16 *)in + m0 * d->c;
        else if (direct(d))  /* the chunk's rows rounded where the product reads them, in L2 */
            ds_bf16_round_n(col, (const float *)in + m0 * d->c, (size_t)(mr * d->c));
        else
            im2col(col, in16, d, m0, mr);
        // A float32 output is written in place; a bf16 one OUT_COLS channels at a time.
        for (long k0 = 0; k0 < d->k; k0 += cols) {
            const int kb = (int)(d->k - k0 < cols ? d->k - k0 : cols);
            if (!out16(d)) {
                ds_bgemm_seg(mr, kb, 1, kd, a, kd, 0, wp + 2 * k0, ld, 0, (float *)out + m0 * d->k + k0, d->k, 0);
                continue;
            }
            ds_bgemm_seg(mr, kb, 1, kd, a, kd, 0, wp + 2 * k0, ld, 0, tile, kb, 0);
            store_rows((ds_bf16 *)out + m0 * d->k + k0, d->k, tile, kb, mr, kb, DS_BF16);
        }
    }
}

/* ---- strided backward-data ---- */

static long bwd_rows(const ds_conv_desc *d)
{
    const long rsc = (long)d->r * d->s * d->c, pq = (long)d->p * d->q;
    long rows = 98304 / rsc > 64 ? 98304 / rsc : 64;
    return rows < pq ? rows : pq > 0 ? pq : 1;
}

/* A slot: dout's rows padded to pairs when k is odd [rows, kp], then their float32 columns
 * [rows, rsc]; for a bf16 din, the image's float32 sums [h, w, c]. */
static long bwd_slot(const ds_conv_desc *d)
{
    return round32(bwd_rows(d) * even(d->k)) + 2 * round32(bwd_rows(d) * (long)d->r * d->s * d->c) +
           (d->in_t == DS_BF16 ? 2 * round32((long)d->h * d->w * d->c) : 0);
}

static void bwd_data_strided(void *din, const ds_bf16 *g16, const void *w, const ds_conv_desc *d, ds_bf16 *wp,
                             ds_bf16 *slots)
{
    const long rsc = (long)d->r * d->s * d->c, kp = even(d->k), ld = 2 * rsc, pq = (long)d->p * d->q,
               hwc = (long)d->h * d->w * d->c, rows = bwd_rows(d), slot = bwd_slot(d);
    if (d->w_t == DS_BF16)  /* B (k, rsc) = w */
        for (long t = 0; t < (d->k + 1) / 2; t++)
            ds_bf16_interleave(wp + t * ld, (const ds_bf16 *)w + 2 * t * rsc,
                               2 * t + 1 < d->k ? (const ds_bf16 *)w + (2 * t + 1) * rsc : NULL, (size_t)rsc);
    else
        ds_bf16_pack_pairs(wp, ld, w, rsc, 1, d->k, (int)rsc);
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int n = 0; n < d->n; n++) {
        ds_bf16 *a = slots + omp_get_thread_num() * slot;
        float *col = (float *)(a + round32(rows * kp));
        // The image's sums: din itself, or float32 ones rounded into a bf16 din at the end.
        float *img = d->in_t == DS_BF16 ? (float *)(a + round32(rows * kp) + 2 * round32(rows * rsc))
                                        : (float *)din + n * hwc;
        memset(img, 0, (size_t)hwc * sizeof *img);
        for (long m0 = n * pq; m0 < (n + 1) * pq; m0 += rows) {
            const long mr = (n + 1) * pq - m0 < rows ? (n + 1) * pq - m0 : rows;
            const ds_bf16 *g = g16 + m0 * d->k;
            if (kp != d->k) {
                copy_pixels(a, g, mr, d->k);
                g = a;
            }
            // col (mr, rsc) = dout (mr, k) * w (k, rsc)
            ds_bgemm_seg(mr, (int)rsc, 1, kp, g, kp, 0, wp, ld, 0, col, rsc, 0);
            ds_cpu_col2im_add(img, col, d, m0 - n * pq, mr);  /* pixels of image n: img is image 0 */
        }
        if (d->in_t == DS_BF16) ds_bf16_round_n((ds_bf16 *)din + n * hwc, img, (size_t)hwc);
    }
}

/* ---- backward-weight ---- */

#define GROUPS 16
#define GROUP_FLOATS (8L << 20)

/* Windows take the implicit product, image by image; 1x1 convolutions chunks of pixels. */
static int bww_implicit(const ds_conv_desc *d) { return !(d->r == 1 && d->s == 1); }

/* 1x1: pixels per chunk (even), about 384 KiB of packed inputs, at least 64. */
static long bww_rows(const ds_conv_desc *d)
{
    const long m = (long)d->n * d->p * d->q;
    long rows = 196608 / d->c > 64 ? 196608 / d->c : 64;
    rows = rows < m ? rows : m > 0 ? m : 1;
    return even(rows);
}

static long bww_chunks(const ds_conv_desc *d)
{
    const long m = (long)d->n * d->p * d->q, rows = bww_rows(d);
    return (m + rows - 1) / rows;
}

static int bww_groups(const ds_conv_desc *d)
{
    const long krsc = ds_round16((long)d->k * d->r * d->s * d->c), chunks = bww_implicit(d) ? d->n : bww_chunks(d);
    long g = chunks < GROUPS ? chunks : GROUPS;
    while (g > 1 && g * krsc > GROUP_FLOATS) g /= 2;
    return (int)g;
}

/* a (k, cols), rows ld apart = rows [0, mr) of src (rows of k) transposed, zero in the
 * columns past mr; in blocks of 32 x 32 so reads and writes both stay in L1. */
static void transpose(ds_bf16 *a, long ld, long cols, const ds_bf16 *src, int k, long mr)
{
    for (long i0 = 0; i0 < mr; i0 += 32)
        for (int j0 = 0; j0 < k; j0 += 32) {
            const long i1 = i0 + 32 < mr ? i0 + 32 : mr;
            const int j1 = j0 + 32 < k ? j0 + 32 : k;
            for (int j = j0; j < j1; j++)
                for (long i = i0; i < i1; i++) a[j * ld + i] = src[i * k + j];
        }
    for (int j = 0; j < k; j++)
        for (long i = mr; i < cols; i++) a[j * ld + i] = 0;
}

/* 1x1: the narrower of dout (k) and the input (c) is transposed (pairs run along the pixels,
 * so one operand must have its pixels contiguous), the other pair-packed. */
static int bww_transpose_input(const ds_conv_desc *d) { return d->c < d->k; }

/* 1x1 slot: the chunk's rows rounded, dout's [rows, k] and the inputs' [rows, c]; the
 * transposed operand; the pair-packed one. */
static long bww_slot(const ds_conv_desc *d)
{
    const long rows = bww_rows(d), wide = d->k > d->c ? d->k : d->c;
    return round32((long)d->k * rows) + round32(rows * (long)d->c) + round32(rows * wide) + round32(rows / 2 * pack_ld((int)wide));
}

/* Implicit backward-weight of a convolution with a window (no im2col): for image n and window
 * row r, pg[r] (k, s*c) += dout[n]^T (k, pixels) * window rows (pixels, s*c), the output rows
 * being the segments of the reduction and the pixels of a row its pairs (q padded to even).
 * The window rows come from z, the input's rows in pair-packed form: for input row y (padded
 * coordinates) and pixel pair (2t, 2t+1), the s*c window elements of both pixels side by side,
 * so that output row p's window row r is z's row p*stride + r. */
static long qe(const ds_conv_desc *d) { return even(d->q); }
static long z_rows(const ds_conv_desc *d) { return (long)(d->p - 1) * d->stride + d->r; }
static long implicit_bww_slot(const ds_conv_desc *d)
{
    return round32((long)d->k * d->p * qe(d)) + round32(z_rows(d) * qe(d) * d->s * d->c);
}

static void z_image(ds_bf16 *z, const ds_bf16 *img, const ds_conv_desc *d)
{
    const long sc = (long)d->s * d->c, pairs = qe(d) / 2;
    for (long y = 0; y < z_rows(d); y++) {
        const long yy = y - d->pad;
        const int row_in = yy >= 0 && yy < d->h;
        for (long t = 0; t < pairs; t++) {
            ds_bf16 *row = z + (y * pairs + t) * 2 * sc;
            const long x0 = 2 * t * d->stride - d->pad, x1 = x0 + d->stride;
            // Both windows inside the image: each one contiguous run of s*c.
            if (row_in && x0 >= 0 && x1 + d->s <= d->w && 2 * t + 1 < d->q) {
                ds_bf16_interleave(row, img + (yy * d->w + x0) * d->c, img + (yy * d->w + x1) * d->c, (size_t)sc);
                continue;
            }
            for (int s = 0; s < d->s; s++) {
                const ds_bf16 *src[2] = {NULL, NULL};
                for (int e = 0; e < 2; e++) {
                    const long x = (e ? x1 : x0) + s;
                    if (2 * t + e < d->q && row_in && x >= 0 && x < d->w) src[e] = img + (yy * d->w + x) * d->c;
                }
                ds_bf16_interleave(row + 2L * s * d->c, src[0], src[1], (size_t)d->c);
            }
        }
    }
}

static void bwd_weight_implicit(float *part, int groups, long part_stride, const ds_bf16 *g16, const ds_bf16 *in16,
                                const ds_conv_desc *d, ds_bf16 *slots, long slot)
{
    const long sc = (long)d->s * d->c, rsc = d->r * sc, Q = qe(d), pq = (long)d->p * d->q,
               hwc = (long)d->h * d->w * d->c, zrow = Q / 2 * 2 * sc;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int g = 0; g < groups; g++) {
        ds_bf16 *a = slots + omp_get_thread_num() * slot, *z = a + round32((long)d->k * d->p * Q);
        float *pg = part + g * part_stride;
        const long n0 = (long)g * d->n / groups, n1 = (long)(g + 1) * d->n / groups;
        for (long n = n0; n < n1; n++) {
            // a (k, p, Q) = dout[n]^T, each output row's pixels padded to Q
            for (int p = 0; p < d->p; p++)
                transpose(a + (long)p * Q, (long)d->p * Q, Q, g16 + (n * pq + (long)p * d->q) * d->k, d->k, d->q);
            z_image(z, in16 + n * hwc, d);
            for (int r = 0; r < d->r; r++)
                ds_bgemm_seg(d->k, (int)sc, d->p, Q, a, (long)d->p * Q, Q, z + r * zrow, 2 * sc, d->stride * zrow,
                             pg + r * sc, rsc, n != n0);
        }
    }
}

/* 1x1 convolutions: chunks of pixels, pg (k, c) (+)= dout^T (k, pixels) * inputs (pixels, c),
 * or, when the input is the narrower, pg (c, k) (+)= inputs^T * dout (the partials then
 * transposed: bww_transpose_input), each chunk rounded where the product reads it. */
static void bwd_weight_chunks(float *part, int groups, long part_stride, const void *dout, const void *in,
                              const ds_conv_desc *d, ds_bf16 *slots, long slot)
{
    const long m = (long)d->n * d->p * d->q, pq = (long)d->p * d->q, rows = bww_rows(d), chunks = bww_chunks(d);
    const int pointwise = is_pointwise(d), tin = bww_transpose_input(d);
    const int wa = tin ? d->c : d->k, wb = tin ? d->k : d->c;  /* rows of the product, its columns */
    const long ldb = pack_ld(wb);  /* pair rows not a multiple of 512 bytes apart (pack_ld) */
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int g = 0; g < groups; g++) {
        const long c0 = g * chunks / groups, c1 = (g + 1) * chunks / groups;
        ds_bf16 *gr = slots + omp_get_thread_num() * slot, *xr = gr + round32((long)d->k * rows);
        ds_bf16 *a = xr + round32(rows * (long)d->c), *b = a + round32(rows * (long)(wa > wb ? wa : wb));
        float *pg = part + g * part_stride;
        for (long ch = c0; ch < c1; ch++) {
            const long m0 = ch * rows, mr = m - m0 < rows ? m - m0 : rows, kd = even(mr);
            // The chunk's rows as bf16: bf16 ones where they lie, float32 ones rounded here.
            const ds_bf16 *g = gr, *x = xr;
            if (d->out_t == DS_BF16) g = (const ds_bf16 *)dout + m0 * d->k;
            else ds_bf16_round_n(gr, (const float *)dout + m0 * d->k, (size_t)(mr * d->k));
            if (pointwise && d->in_t == DS_BF16) {
                x = (const ds_bf16 *)in + m0 * d->c;
            } else if (pointwise) {
                ds_bf16_round_n(xr, (const float *)in + m0 * d->c, (size_t)(mr * d->c));
            } else {
                for (long i = 0; i < mr; i++) {  /* the strided pixels' inputs */
                    const long px = m0 + i, n = px / pq, p = px % pq / d->q, q = px % d->q;
                    to16(xr + i * d->c, elem(in, ((n * d->h + p * d->stride) * d->w + q * d->stride) * d->c, d->in_t),
                         (size_t)d->c, d->in_t);
                }
            }
            const ds_bf16 *ta = tin ? x : g, *tb = tin ? g : x;
            transpose(a, kd, kd, ta, wa, mr);
            for (long t = 0; t < kd / 2; t++)  /* b (kd, wb): pixels 2t, 2t+1 side by side */
                ds_bf16_interleave(b + t * ldb, tb + 2 * t * wb, 2 * t + 1 < mr ? tb + (2 * t + 1) * wb : NULL,
                                   (size_t)wb);
            // pg (wa, wb) (+)= a (wa, mr) * b (mr, wb)
            ds_bgemm_seg(wa, wb, 1, kd, a, kd, 0, b, ldb, 0, pg, wb, ch != c0);
        }
    }
}

/* ---- the backend's entries ---- */

/* Workspace (bf16 elements): [weights area][in16][g16][slots]. The weights area holds the
 * packed weights or the float32 partial weight gradients; in16 and g16 the op's input and
 * output gradient rounded, when they are stored float32 (bf16 ones are read where they lie). */
typedef struct {
    long weights, in16, g16, slot;
} ws_plan;

static ws_plan plan(const ds_conv_desc *d)
{
    ds_conv_desc t;
    const long rsc = (long)d->r * d->s * d->c;
    ws_plan w = {fwd_weights(d), d->in_t == DS_F32 ? round32(in_count(d)) : 0,
                 d->out_t == DS_F32 ? round32(out_count(d)) : 0, fwd_slot(d)};
    if (!d->no_dx) {
        if (ds_cpu_conv_flipped(d, &t)) {
            if (fwd_weights(&t) > w.weights) w.weights = fwd_weights(&t);
            if (fwd_slot(&t) > w.slot) w.slot = fwd_slot(&t);
        } else {
            if (even(d->k) * rsc > w.weights) w.weights = even(d->k) * rsc;
            if (bwd_slot(d) > w.slot) w.slot = bwd_slot(d);
        }
    }
    const long parts = 2L * bww_groups(d) * ds_round16((long)d->k * rsc);  /* float32 partials */
    if (parts > w.weights) w.weights = parts;
    const long bs = bww_implicit(d) ? implicit_bww_slot(d) : bww_slot(d);
    if (bs > w.slot) w.slot = bs;
    w.weights = round32(w.weights);
    return w;
}

size_t ds_cpu_conv_workspace_bf16(const ds_conv_desc *d)
{
    ws_plan w = plan(d);
    return (size_t)(w.weights + w.in16 + w.g16 + ds_cpu_conv_slots() * w.slot) * sizeof(ds_bf16);
}

void ds_cpu_conv_fwd_bf16(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws)
{
    ws_plan p = plan(d);
    ds_bf16 *wp = ws, *in16 = wp + p.weights, *slots = in16 + p.in16 + p.g16;
    pack_weights(wp, w, d, 0);
    const ds_bf16 *x16 = fwd_reads_all(d) ? all16(in16, in, in_count(d), d->in_t) : NULL;
    fwd_packed(out, in, x16, wp, d, slots);
}

void ds_cpu_conv_bwd_data_bf16(void *din, const void *dout, const void *w, const ds_conv_desc *d, void *ws)
{
    ws_plan p = plan(d);
    ds_bf16 *wp = ws, *g16 = wp + p.weights + p.in16, *slots = g16 + p.g16;
    ds_conv_desc t;
    if (!ds_cpu_conv_flipped(d, &t)) {
        bwd_data_strided(din, all16(g16, dout, out_count(d), d->out_t), w, d, wp, slots);
        return;
    }
    pack_weights(wp, w, &t, 1);
    const ds_bf16 *dy16 = fwd_reads_all(&t) ? all16(g16, dout, out_count(d), d->out_t) : NULL;
    fwd_packed(din, dout, dy16, wp, &t, slots);
}

void ds_cpu_conv_bwd_weight_bf16(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws)
{
    ws_plan p = plan(d);
    ds_bf16 *in16 = (ds_bf16 *)ws + p.weights, *g16 = in16 + p.in16, *slots = g16 + p.g16;
    const long rsc = (long)d->r * d->s * d->c, part_stride = ds_round16((long)d->k * rsc);
    const int groups = bww_groups(d);
    float *part = ws;
    if ((long)d->n * d->p * d->q == 0) return;
    if (bww_implicit(d))
        bwd_weight_implicit(part, groups, part_stride, all16(g16, dout, out_count(d), d->out_t),
                            all16(in16, in, in_count(d), d->in_t), d, slots, p.slot);
    else
        bwd_weight_chunks(part, groups, part_stride, dout, in, d, slots, p.slot);
    ds_cpu_conv_sum_groups(dw, part, groups, part_stride, d->k, rsc, !bww_implicit(d) && bww_transpose_input(d));
}
