/* cpu_conv_bf16: the CPU convolutions under --precision bf16. Activations (NHWC) and weights
 * ([K, R, S, C]) come in the storage their descriptor names: bf16 ones are the operands as
 * they are, float32 ones are rounded to bf16 as they are read (the weights as they are packed,
 * activations in one pass into the workspace or chunk by chunk); the sums are float32 by
 * cpu_bf16.h's rule, so every kernel set gives the same bits (the VDPBF16PS kernels and their
 * emulations), and a bf16 result is those float32 sums rounded once (as the product stores
 * them, or, on a set whose kernel cannot and under conv_fwd_bn's batch norm, through a float32
 * tile in the thread's slot). dw is always float32.
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
 *     output rows as segments; 1x1 convolutions in chunks of pixels), each image's or
 *     chunk's sum added in order into a float32 total: one whose elements the threads
 *     split, or, for a small gradient, one per fixed group of images or chunks, added in
 *     group order.
 * Chunks, groups and paths depend on the shape alone, so the results are bitwise the same
 * for any thread count on any CPU. */
#include "cpu_conv.h"
#include "cpu_bf16.h"
#include "cpu_kernels.h"

#include <omp.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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
/* A bf16 output (else float32). */
static int out16(const ds_conv_desc *d) { return d->out_t == DS_BF16; }

/* A bf16 output with no batch norm after it: the products round their sums into it as they
 * store them (ds_bgemm_seg16, the tile as its scratch); the others sum into the tile (or a
 * float32 output) and output_block finishes them. */
static int rounds_as_stored(const ds_conv_desc *d, const ds_cpu_conv_bn *bn) { return out16(d) && !bn; }

/* A bf16 output's block from its float32 sums f (rows x cols, ldf apart) with conv_fwd_bn's
 * batch norm (cpu_loops' bn_tile_bf16: each sum rounded as ds_bf16_round_n rounds it, then
 * normalised as bn_apply_bf16 normalises it): out (pixel m0, channel k0) and the residual at
 * the same place, rows d->k apart. */
static void store_rows_bn(ds_bf16 *out, long m0, int k0, const float *f, long ldf, long rows, int cols,
                          const ds_conv_desc *d, const ds_cpu_conv_bn *bn)
{
    const ds_cpu_loops *L = ds_cpu_kernels_for(ds_cpu_isa_get())->loops;
    const ds_bf16 *res = bn->residual;
    const long at = m0 * d->k + k0;
    L->bn_tile_bf16(out + at, d->k, f, ldf, res ? res + at : NULL, bn->mean + k0, bn->a + k0,
                    bn->beta + k0, bn->relu, rows, cols);
}

/* A block of the output done (one that is not rounded as stored): rows x cols from pixel m0,
 * channel k0, summed into the tile f (ldf apart) for a bf16 output, in place for a float32
 * one; bn applied when there is one. */
static void output_block(void *out, long m0, int k0, const float *f, long ldf, long rows, int cols,
                         const ds_conv_desc *d, const ds_cpu_conv_bn *bn)
{
    if (!bn) return;
    if (out16(d)) store_rows_bn(out, m0, k0, f, ldf, rows, cols, d, bn);
    else ds_cpu_conv_bn_f32(out, m0, k0, rows, cols, d, bn);
}

/* ---- forward (and stride-1 backward-data) ---- */

static int implicit(const ds_conv_desc *d) { return !(d->r == 1 && d->s == 1) && d->q >= 14; }
/* 1x1 stride 1 with whole pairs: the rounded input is the product's A as it is. */
static int direct(const ds_conv_desc *d) { return is_pointwise(d) && d->c % 2 == 0; }
static long rsc_p(const ds_conv_desc *d) { return (long)d->r * d->s * even(d->c); }

/* A bf16 output goes in chunks of at most OUT_ROWS pixels, OUT_COLS output channels at a time
 * (implicit: OUT_TILE floats, 64 channels of whole output rows), the size of the float32 tile
 * it is summed into where it is not rounded as stored, so the tile is still in L2 when it is
 * rounded or normalised. */
#define OUT_ROWS 512
#define OUT_COLS 256
#define OUT_TILE 16384
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

/* The chunks a forward takes: at most fwd_cap, as many as whole rounds of the threads, all of
 * one size but the last (not rounded to 16 pixels: resnet50's 784 pixels at 7x7 would then go
 * in chunks of 208, 208, 208 and 160, and one thread wait a tenth of the layer for the other).
 * The thread count may differ from the planning's; each output element is one product over
 * the whole reduction, so the chunking never changes the sums. */
static long fwd_rows(const ds_conv_desc *d)
{
    const long m = (long)d->n * d->p * d->q, cap = fwd_cap(d);
    if (m == 0) return 1;  /* no pixels: no chunk, whatever its size */
    const long threads = ds_cpu_conv_threads(), chunks = (m + cap - 1) / cap;
    const long rounds = (chunks + threads - 1) / threads, bal = (m + rounds * threads - 1) / (rounds * threads);
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
    if (d->w_t == DS_BF16 && flipped) {
        /* A pair row is two rows of w side by side (channels cc and cc + 1 of one flipped
         * (r, s), each K long): interleaved. */
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
        for (long t = 0; t < pairs; t++) {
            const long p = 2 * t, r = p / (S * cp), s = p / cp % S, cc = p % cp;
            const ds_bf16 *w16 = w, *src[2];
            for (int e = 0; e < 2; e++)
                src[e] = cc + e >= C ? NULL : w16 + ((cc + e) * R + (R - 1 - r)) * S * (long)K + (S - 1 - s) * (long)K;
            ds_bf16_interleave(dst + t * ld, src[0], src[1], (size_t)K);
        }
        return;
    }
    if (d->w_t == DS_BF16 && C % 2 == 0) {
        /* B's pair (t, j) is pair t of w's row j (r*s*c long): a transpose of 32-bit pairs,
         * a block of 16 pairs (a cache line of each row of w) at a time, 4 x 4 in registers. */
        const char *w8 = w;
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
        for (long t0 = 0; t0 < pairs; t0 += 16) {
            const long t1 = t0 + 16 < pairs ? t0 + 16 : pairs;
            int j = 0;
#if defined(__SSE2__)
            for (; j + 4 <= K; j += 4) {
                long t = t0;
                for (; t + 4 <= t1; t += 4) {
                    __m128i r[4];
                    for (int e = 0; e < 4; e++) r[e] = _mm_loadu_si128((const __m128i *)(w8 + ((j + e) * pairs + t) * 4));
                    const __m128i lo01 = _mm_unpacklo_epi32(r[0], r[1]), hi01 = _mm_unpackhi_epi32(r[0], r[1]),
                                  lo23 = _mm_unpacklo_epi32(r[2], r[3]), hi23 = _mm_unpackhi_epi32(r[2], r[3]);
                    _mm_storeu_si128((__m128i *)(dst + t * ld + 2 * j), _mm_unpacklo_epi64(lo01, lo23));
                    _mm_storeu_si128((__m128i *)(dst + (t + 1) * ld + 2 * j), _mm_unpackhi_epi64(lo01, lo23));
                    _mm_storeu_si128((__m128i *)(dst + (t + 2) * ld + 2 * j), _mm_unpacklo_epi64(hi01, hi23));
                    _mm_storeu_si128((__m128i *)(dst + (t + 3) * ld + 2 * j), _mm_unpackhi_epi64(hi01, hi23));
                }
                for (; t < t1; t++)
                    for (int e = 0; e < 4; e++) memcpy(dst + t * ld + 2 * (j + e), w8 + ((j + e) * pairs + t) * 4, 4);
            }
#endif
            for (; j < K; j++)
                for (long t = t0; t < t1; t++) memcpy(dst + t * ld + 2 * j, w8 + (j * pairs + t) * 4, 4);
        }
        return;
    }
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
 * in16 is the input as bf16 when fwd_reads_all(d); slots fwd_slot(d) apart. add (an output
 * rounded as stored only): out += that result, as the add op would add it. */
static void fwd_packed(void *out, const void *in, const ds_bf16 *in16, const ds_bf16 *wp, const ds_conv_desc *d,
                       ds_bf16 *slots, const ds_cpu_conv_bn *bn, int add)
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
                    for (int p = p0; p < p1; p++) {
                        const ds_bf16 *a = src + (long)p * d->stride * wpc;
                        const long at = (long)(p - p0) * d->q;  /* the row's first pixel in the block */
                        if (rounds_as_stored(d, bn))
                            ds_bgemm_seg16(d->q, kb, d->r, sc, a, (long)d->stride * cp, wpc, wp + 2 * k0, ld,
                                           sc / 2 * ld, (ds_bf16 *)out + (first + at) * d->k + k0, d->k, add,
                                           tile);
                        else
                            ds_bgemm_seg(d->q, kb, d->r, sc, a, (long)d->stride * cp, wpc, wp + 2 * k0, ld,
                                         sc / 2 * ld, o + at * ldo, ldo, 0);
                    }
                    output_block(out, first, k0, tile, kb, (long)(p1 - p0) * d->q, kb, d, bn);
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
            if (rounds_as_stored(d, bn))
                ds_bgemm_seg16(mr, kb, 1, kd, a, kd, 0, wp + 2 * k0, ld, 0, (ds_bf16 *)out + m0 * d->k + k0, d->k,
                               add, tile);
            else if (out16(d))
                ds_bgemm_seg(mr, kb, 1, kd, a, kd, 0, wp + 2 * k0, ld, 0, tile, kb, 0);
            else
                ds_bgemm_seg(mr, kb, 1, kd, a, kd, 0, wp + 2 * k0, ld, 0, (float *)out + m0 * d->k + k0, d->k, 0);
            output_block(out, m0, (int)k0, tile, kb, mr, kb, d, bn);
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

/* ---- backward-weight ----
 * Each element of the gradient is summed over the output pixels in an order fixed by the
 * shape:
 *   - windows (the implicit product): image by image, each image's sum one product per window
 *     row r, T (k, s*c) (+)= dout[n]^T (k, pixels) * window rows (pixels, s*c), its output rows
 *     the segments and a row's pixels the pairs (q padded to even);
 *   - 1x1: chunks of BWW_ROWS pixels, T (k, c) (+)= dout^T (k, chunk) * inputs (chunk, c),
 *     or, when the input is the narrower (bww_transpose_input), T (c, k) (+)= inputs^T * dout,
 *     transposed as it is added to dw.
 * Those images or chunks (units) are summed in order into float32 totals, in one of two
 * splits between the threads, chosen by the shape (bww_groups):
 *   - a gradient of more than BWW_SMALL elements: one total, whose elements the threads
 *     split. The operands of several units (a pack, about BWW_PACK bf16 elements; the
 *     size never changes a sum, ds_cpu_conv_bf16_pack) are laid
 *     out once in the scratch by all the threads; then each thread takes tiles of the total
 *     and walks the pack's units in order, its tile staying in cache;
 *   - a smaller one: the units in BWW_GROUPS fixed groups, a total each; a thread takes whole
 *     groups, one unit's operands at a time in its slot (in L2), and the totals are added in
 *     group order.
 * Either way no sum depends on which thread computes it. */
#define BWW_ROWS 1024
#define BWW_LDA (BWW_ROWS + 32)  /* A's rows in a chunk: not a power of two, which would map the
                                  * transpose's stores, rows 2 KiB apart, to two of L1's sets */
#define BWW_PIECE 128            /* pixels of a chunk a task lays out */
#define BWW_PACK (4L << 20)
#define BWW_SMALL 65536
#define BWW_GROUPS 16

static long bww_pack = BWW_PACK;
long ds_cpu_conv_bf16_pack(long elements)
{
    const long was = bww_pack;
    bww_pack = elements > 0 ? elements : BWW_PACK;
    return was;
}

/* Windows take the implicit product; 1x1 convolutions chunks of pixels. */
static int bww_implicit(const ds_conv_desc *d) { return !(d->r == 1 && d->s == 1); }
static long bww_units(const ds_conv_desc *d)
{
    return bww_implicit(d) ? d->n : ((long)d->n * d->p * d->q + BWW_ROWS - 1) / BWW_ROWS;
}
static int bww_groups(const ds_conv_desc *d)
{
    const long units = bww_units(d);
    if ((long)d->k * d->r * d->s * d->c > BWW_SMALL || units < 2) return 1;
    return units < BWW_GROUPS ? (int)units : BWW_GROUPS;
}

/* Tiles of a total, rows x cols (of cols_all, in `sets` sets: the window rows): rows halved
 * while there are fewer than four tiles per thread, to whole kernel tiles above 48, then
 * columns (64, 32, 16: a kernel's panel or part of one), then rows down to 8. */
static void bww_tiles(long rows_all, long cols_all, long sets, long *rows, long *cols)
{
    const long want = 4L * ds_cpu_conv_threads();
    long h = rows_all, w = 64;
    for (;;) {
        if ((rows_all + h - 1) / h * ((cols_all + w - 1) / w) * sets >= want) break;
        if (h > 48) h = (h / 2 + 5) / 6 * 6;
        else if (w > 16 && cols_all > w / 2) w /= 2;
        else if (h > 8) h = (h / 2 + 1) & ~1L;
        else break;
    }
    *rows = h, *cols = w;
}

/* a (k, cols), rows ld apart = the rows row[0 .. mr) (k elements each) transposed, zero in
 * the columns mr .. cols. */
static void transpose(ds_bf16 *a, long ld, long cols, const ds_bf16 *const *row, int k, long mr)
{
    ds_bf16_transpose(a, ld, row, mr, k);
    for (int j = 0; j < k; j++)
        for (long i = mr; i < cols; i++) a[j * ld + i] = 0;
}

/* -- windows -- */
static long qe(const ds_conv_desc *d) { return even(d->q); }
static long z_rows(const ds_conv_desc *d) { return (long)(d->p - 1) * d->stride + d->r; }
/* An image's window rows z: for input row y (padded coordinates) and pixel pair (2t, 2t+1),
 * the s*c window elements of both pixels side by side, so that output row p's window row r
 * is z's row p*stride + r, rows zrow = q_e * s*c apart. */
static long z_size(const ds_conv_desc *d) { return round32(z_rows(d) * qe(d) * d->s * d->c); }
/* An image's operands: A (k, p, q_e), then its z. A pack: A (k, images, p, q_e), then each
 * image's z. */
static long bww_image(const ds_conv_desc *d) { return round32((long)d->k * d->p * qe(d)) + z_size(d); }
static long bww_images(const ds_conv_desc *d)
{
    const long fit = bww_pack / bww_image(d);
    return fit < 1 ? 1 : fit < d->n ? fit : d->n > 0 ? d->n : 1;
}

/* Row y of image img's z (above). */
static void z_row(ds_bf16 *z, const ds_bf16 *img, const ds_conv_desc *d, long y)
{
    const long sc = (long)d->s * d->c, pairs = qe(d) / 2, yy = y - d->pad;
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

/* Part e of image n's operands (p + z_rows parts): output row e of dout transposed into a's
 * columns from e * q_e (rows sai apart), or, past the p rows, row e - p of its z. */
static void image_part(ds_bf16 *a, long sai, ds_bf16 *z, const ds_bf16 *g16, const ds_bf16 *in16,
                       const ds_conv_desc *d, long n, long e)
{
    if (e < d->p) {
        const ds_bf16 *row[d->q];
        for (long i = 0; i < d->q; i++) row[i] = g16 + ((n * d->p + e) * d->q + i) * d->k;
        transpose(a + e * qe(d), sai, qe(d), row, d->k, d->q);
    } else {
        z_row(z, in16 + n * (long)d->h * d->w * d->c, d, e - d->p);
    }
}

/* Rows [i0, i1) and columns [c0, c1) of window row r of T (k, r*s*c) (+)= one image's
 * product (its A at a, rows sai apart; its z). */
static void image_tile(float *T, const ds_bf16 *a, long sai, const ds_bf16 *z, const ds_conv_desc *d, long i0,
                       long i1, long r, long c0, long c1, int acc)
{
    const long sc = (long)d->s * d->c, zrow = qe(d) * sc;
    ds_bgemm_seg(i1 - i0, (int)(c1 - c0), d->p, qe(d), a + i0 * sai, sai, qe(d), z + r * zrow + 2 * c0, 2 * sc,
                 d->stride * zrow, T + i0 * d->r * sc + r * sc + c0, d->r * sc, acc);
}

static void bwd_weight_implicit(float *T, const ds_bf16 *g16, const ds_bf16 *in16, const ds_conv_desc *d,
                                ds_bf16 *pack)
{
    const long sc = (long)d->s * d->c, parts = d->p + z_rows(d), zs = z_size(d), imgs = bww_images(d),
               sai = imgs * d->p * qe(d);
    long h, tw;
    bww_tiles(d->k, sc, d->r, &h, &tw);
    const long cb = (sc + tw - 1) / tw, tiles = (d->k + h - 1) / h * d->r * cb;
    ds_bf16 *A = pack, *Z = pack + round32(d->k * sai);
#pragma omp parallel num_threads(ds_cpu_conv_threads())
    for (long n0 = 0; n0 < d->n; n0 += imgs) {
        const long ni = d->n - n0 < imgs ? d->n - n0 : imgs;
#pragma omp for schedule(dynamic)
        for (long it = 0; it < ni * parts; it++) {
            const long j = it / parts;
            image_part(A + j * d->p * qe(d), sai, Z + j * zs, g16, in16, d, n0 + j, it % parts);
        }
#pragma omp for schedule(dynamic)
        for (long t = 0; t < tiles; t++) {
            const long i0 = t / (d->r * cb) * h, r = t / cb % d->r, c0 = t % cb * tw;
            for (long j = 0; j < ni; j++)
                image_tile(T, A + j * d->p * qe(d), sai, Z + j * zs, d, i0, i0 + h < d->k ? i0 + h : d->k, r, c0,
                           c0 + tw < sc ? c0 + tw : sc, n0 + j > 0);
        }
    }
}

/* -- 1x1 -- */
/* The narrower of dout (k) and the input (c) is transposed (pairs run along the pixels, so
 * one operand must have its pixels contiguous: A), the other pair-packed (B). */
static int bww_transpose_input(const ds_conv_desc *d) { return d->c < d->k; }
static int bww_wa(const ds_conv_desc *d) { return bww_transpose_input(d) ? d->c : d->k; }
static int bww_wb(const ds_conv_desc *d) { return bww_transpose_input(d) ? d->k : d->c; }
/* A chunk's operands: A (wa, BWW_ROWS), rows BWW_LDA apart, then B's BWW_ROWS / 2 pair rows. */
static long bww_chunk(const ds_conv_desc *d)
{
    return round32((long)bww_wa(d) * BWW_LDA) + round32(BWW_ROWS / 2 * pack_ld(bww_wb(d)));
}
static long bww_chunks(const ds_conv_desc *d)
{
    const long fit = bww_pack / bww_chunk(d), all = bww_units(d);
    return fit < 1 ? 1 : fit < all ? fit : all > 0 ? all : 1;
}
static long chunk_pixels(const ds_conv_desc *d, long ch)
{
    const long m = (long)d->n * d->p * d->q - ch * BWW_ROWS;
    return m < BWW_ROWS ? m : BWW_ROWS;
}

/* The cache lines of n bf16 at each of p and q, asked for ahead of their use. */
static void prefetch_rows(const ds_bf16 *p, const ds_bf16 *q, long n)
{
    for (long j = 0; j < n; j += 32) __builtin_prefetch(p + j), __builtin_prefetch(q + j);
}

/* Output pixel px's row of the input (the strided pixel's, for a stride > 1). */
static const ds_bf16 *bww_in_row(const ds_bf16 *x16, const ds_conv_desc *d, long px)
{
    if (d->stride == 1) return x16 + px * d->c;
    const long pq = (long)d->p * d->q, n = px / pq, p = px % pq / d->q, q = px % d->q;
    return x16 + ((n * d->h + p * d->stride) * d->w + q * d->stride) * d->c;
}

/* Pixels [i0, i0 + BWW_PIECE) of chunk ch into its operands at a: A's columns, B's pair rows. */
static void chunk_part(ds_bf16 *a, const ds_bf16 *g16, const ds_bf16 *x16, const ds_conv_desc *d, long ch, long i0)
{
    const int tin = bww_transpose_input(d), wa = bww_wa(d), wb = bww_wb(d);
    const long mr = chunk_pixels(d, ch), kd = even(mr), px = ch * BWW_ROWS, ldb = pack_ld(wb);
    if (i0 >= kd) return;
    const long i1 = i0 + BWW_PIECE < kd ? i0 + BWW_PIECE : kd;
    ds_bf16 *b = a + round32((long)wa * BWW_LDA);
    const ds_bf16 *ga[BWW_PIECE], *xa[BWW_PIECE];
    for (long i = i0; i < i1; i++) {
        ga[i - i0] = i < mr ? g16 + (px + i) * d->k : NULL;
        xa[i - i0] = i < mr ? bww_in_row(x16, d, px + i) : NULL;
    }
    const ds_bf16 *const *ta = tin ? xa : ga, *const *tb = tin ? ga : xa;
    transpose(a + i0, BWW_LDA, i1 - i0, ta, wa, (mr < i1 ? mr : i1) - i0);
    // The pairs' rows are asked for about 8 KiB ahead (the prefetchers alone left the
    // interleave at half the memory's speed).
    const long ahead = 4096 / wb > 1 ? 4096 / wb : 1, last = (mr < i1 ? mr : i1) - i0;
    for (long t = i0 / 2; t < i1 / 2; t++) {  /* pixels 2t, 2t+1 side by side */
        const long e = 2 * (t + ahead) - i0;
        if (e + 1 < last) prefetch_rows(tb[e], tb[e + 1], wb);
        ds_bf16_interleave(b + t * ldb, tb[2 * t - i0], tb[2 * t + 1 - i0], (size_t)wb);
    }
}

/* Rows [i0, i1) and columns [j0, j1) of T (wa, wb) (+)= chunk ch's product (operands at a). */
static void chunk_tile(float *T, const ds_bf16 *a, const ds_conv_desc *d, long ch, long i0, long i1, long j0,
                       long j1, int acc)
{
    const int wa = bww_wa(d), wb = bww_wb(d);
    const long kd = even(chunk_pixels(d, ch));
    ds_bgemm_seg(i1 - i0, (int)(j1 - j0), 1, kd, a + i0 * BWW_LDA, BWW_LDA, 0,
                 a + round32((long)wa * BWW_LDA) + 2 * j0, pack_ld(wb), 0, T + i0 * wb + j0, wb, acc);
}

static void bwd_weight_chunks(float *T, const ds_bf16 *g16, const ds_bf16 *x16, const ds_conv_desc *d,
                              ds_bf16 *pack)
{
    const long units = bww_units(d), per = bww_chunk(d), chunks = bww_chunks(d);
    const int wa = bww_wa(d), wb = bww_wb(d);
    long h, tw;
    bww_tiles(wa, wb, 1, &h, &tw);
    const long cb = (wb + tw - 1) / tw, tiles = (wa + h - 1) / h * cb;
#pragma omp parallel num_threads(ds_cpu_conv_threads())
    for (long u0 = 0; u0 < units; u0 += chunks) {
        const long nc = units - u0 < chunks ? units - u0 : chunks;
#pragma omp for schedule(dynamic)
        for (long it = 0; it < nc * (BWW_ROWS / BWW_PIECE); it++)
            chunk_part(pack + it / (BWW_ROWS / BWW_PIECE) * per, g16, x16, d, u0 + it / (BWW_ROWS / BWW_PIECE),
                       it % (BWW_ROWS / BWW_PIECE) * BWW_PIECE);
#pragma omp for schedule(dynamic)
        for (long t = 0; t < tiles; t++) {
            const long i0 = t / cb * h, j0 = t % cb * tw;
            for (long ch = 0; ch < nc; ch++)
                chunk_tile(T, pack + ch * per, d, u0 + ch, i0, i0 + h < wa ? i0 + h : wa, j0,
                           j0 + tw < wb ? j0 + tw : wb, u0 + ch > 0);
        }
    }
}

/* -- small gradients: groups -- */
static long bww_unit(const ds_conv_desc *d) { return bww_implicit(d) ? bww_image(d) : bww_chunk(d); }

static void bwd_weight_groups(float *T, long t_stride, int groups, const ds_bf16 *g16, const ds_bf16 *x16,
                              const ds_conv_desc *d, ds_bf16 *slots)
{
    const long units = bww_units(d), slot = bww_unit(d), sai = (long)d->p * qe(d), sc = (long)d->s * d->c;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int g = 0; g < groups; g++) {
        ds_bf16 *a = slots + omp_get_thread_num() * slot;
        float *Tg = T + g * t_stride;
        const long u0 = g * units / groups, u1 = (g + 1) * units / groups;
        for (long u = u0; u < u1; u++) {
            if (bww_implicit(d)) {
                ds_bf16 *z = a + round32((long)d->k * sai);
                for (long e = 0; e < d->p + z_rows(d); e++) image_part(a, sai, z, g16, x16, d, u, e);
                for (int r = 0; r < d->r; r++) image_tile(Tg, a, sai, z, d, 0, d->k, r, 0, sc, u != u0);
            } else {
                for (long i0 = 0; i0 < BWW_ROWS; i0 += BWW_PIECE) chunk_part(a, g16, x16, d, u, i0);
                chunk_tile(Tg, a, d, u, 0, bww_wa(d), 0, bww_wb(d), u != u0);
            }
        }
    }
}

/* The scratch backward-weight takes: a pack (at most bww_pack, or one unit where that is
 * more), or a unit per slot. */
static long bww_scratch(const ds_conv_desc *d)
{
    const long one = bww_unit(d);
    if (bww_groups(d) > 1) return ds_cpu_conv_slots() * one;
    return (one > bww_pack ? one : bww_pack) + 32;
}

/* Workspace (bf16 elements): [weights area][in16][g16][scratch]. The weights area holds the
 * packed weights or backward-weight's float32 total; in16 and g16 the op's input and output
 * gradient rounded, when they are stored float32 (bf16 ones are read where they lie); the
 * scratch the threads' slots, or backward-weight's pack, which they share. */
typedef struct {
    long weights, in16, g16, slot, pack;
} ws_plan;

static ws_plan plan(const ds_conv_desc *d)
{
    ds_conv_desc t;
    const long rsc = (long)d->r * d->s * d->c;
    ws_plan w = {fwd_weights(d), d->in_t == DS_F32 ? round32(in_count(d)) : 0,
                 d->out_t == DS_F32 ? round32(out_count(d)) : 0, fwd_slot(d), bww_scratch(d)};
    if (!d->no_dx) {
        if (ds_cpu_conv_flipped(d, &t)) {
            if (fwd_weights(&t) > w.weights) w.weights = fwd_weights(&t);
            if (fwd_slot(&t) > w.slot) w.slot = fwd_slot(&t);
        } else {
            if (even(d->k) * rsc > w.weights) w.weights = even(d->k) * rsc;
            if (bwd_slot(d) > w.slot) w.slot = bwd_slot(d);
        }
    }
    const long total = 2L * bww_groups(d) * ds_round16((long)d->k * rsc);  /* backward-weight's float32 totals */
    if (total > w.weights) w.weights = total;
    w.weights = round32(w.weights);
    return w;
}

static long scratch(ws_plan w)
{
    const long slots = ds_cpu_conv_slots() * w.slot;
    return slots > w.pack ? slots : w.pack;
}

size_t ds_cpu_conv_workspace_bf16(const ds_conv_desc *d)
{
    ws_plan w = plan(d);
    return (size_t)(w.weights + w.in16 + w.g16 + scratch(w)) * sizeof(ds_bf16);
}

void ds_cpu_conv_fwd_bf16(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws)
{
    ds_cpu_conv_fwd_bn_bf16(out, in, w, d, ws, NULL);
}

void ds_cpu_conv_fwd_bn_bf16(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws,
                             const ds_cpu_conv_bn *bn)
{
    ws_plan p = plan(d);
    ds_bf16 *wp = ws, *in16 = wp + p.weights, *slots = in16 + p.in16 + p.g16;
    pack_weights(wp, w, d, 0);
    const ds_bf16 *x16 = fwd_reads_all(d) ? all16(in16, in, in_count(d), d->in_t) : NULL;
    fwd_packed(out, in, x16, wp, d, slots, bn, 0);
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
    fwd_packed(din, dout, dy16, wp, &t, slots, NULL, 0);
}

int ds_cpu_conv_bwd_data_add_bf16(void *din, const void *dout, const void *w, const ds_conv_desc *d, void *ws)
{
    ds_conv_desc t;
    if (d->in_t != DS_BF16 || !ds_cpu_conv_flipped(d, &t)) return 0;
    ws_plan p = plan(d);
    ds_bf16 *wp = ws, *g16 = wp + p.weights + p.in16, *slots = g16 + p.g16;
    pack_weights(wp, w, &t, 1);
    const ds_bf16 *dy16 = fwd_reads_all(&t) ? all16(g16, dout, out_count(d), d->out_t) : NULL;
    fwd_packed(din, dout, dy16, wp, &t, slots, NULL, 1);
    return 1;
}

void ds_cpu_conv_bwd_weight_bf16(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws)
{
    ws_plan p = plan(d);
    ds_bf16 *in16 = (ds_bf16 *)ws + p.weights, *g16 = in16 + p.in16, *pack = g16 + p.g16;
    const long rsc = (long)d->r * d->s * d->c, t_stride = ds_round16(d->k * rsc);
    const int groups = bww_groups(d);
    float *T = ws;
    if ((long)d->n * d->p * d->q == 0) return;
    const ds_bf16 *x = all16(in16, in, in_count(d), d->in_t), *g = all16(g16, dout, out_count(d), d->out_t);
    if (groups > 1) bwd_weight_groups(T, t_stride, groups, g, x, d, pack);
    else if (bww_implicit(d)) bwd_weight_implicit(T, g, x, d, pack);
    else bwd_weight_chunks(T, g, x, d, pack);
    ds_cpu_conv_sum_groups(dw, T, groups, t_stride, d->k, rsc, !bww_implicit(d) && bww_transpose_input(d));
}
