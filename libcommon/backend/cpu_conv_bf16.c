/* cpu_conv_bf16: the CPU convolutions under --precision bf16. Inputs, outputs and weights
 * stay float32 in memory (NHWC, [K, R, S, C]); each op rounds its two operands to bf16 as
 * it packs them and sums in float32 by cpu_bf16.h's rule, so every kernel set gives the same
 * bits (the VDPBF16PS kernels and their emulations).
 *
 * The products are those of cpu_conv.c with bf16 operands, whose reduction runs in pairs:
 *   - Forward, windows of more than one pixel on rows of 14 or more: implicit GEMM. One
 *     image at a time is padded and rounded into the thread's slot with its channels
 *     padded to an even count cp (the stem's 3 become 4, a zero), so a window row of every
 *     pixel is s*cp contiguous bf16 of whole pairs, pixels stride*cp apart; the window rows
 *     are the segments of ds_bgemm_seg. Otherwise (1x1, small outputs) the receptive fields
 *     of a chunk of pixels are gathered and rounded (im2col) and multiplied in one product.
 *   - Backward-data of a stride-1 convolution is the forward of the flipped, transposed
 *     weights over dout; strided ones multiply dout's rows by the weights and scatter the
 *     float32 columns back (col2im), one image per thread.
 *   - Backward-weight sums over output pixels: per chunk, dout^T (k, pixels) by the chunk's
 *     receptive fields packed in pairs of pixels, into per-group float32 partials summed in
 *     group order (as cpu_conv.c).
 * Chunks, groups and paths depend on the shape alone, so the results are bitwise the same
 * for any thread count on any CPU. */
#include "cpu_conv.h"
#include "cpu_bf16.h"

#include <omp.h>
#include <string.h>

static long even(long x) { return (x + 1) & ~1L; }
static long round32(long x) { return (x + 31) / 32 * 32; }  /* bf16 elements: 64 bytes */
static long round16(long x) { return (x + 15) / 16 * 16; }

/* Columns of packed weights per pair row: k plus a cache line's worth from 128 on, so that
 * pair rows do not fall in a fraction of L1's sets (cpu_conv.c's wt_ld, for the same reason). */
static long pack_ld(int k) { return 2L * (k >= 128 ? k + 16 : k); }

/* Backward-data of a stride-1 convolution is a forward convolution of dout with the
 * weights flipped in space and transposed in channels, padded r-1-pad. */
static int bwd_data_as_fwd(const ds_conv_desc *d, ds_conv_desc *t)
{
    if (d->stride != 1 || d->r != d->s || d->pad > d->r - 1) return 0;
    *t = (ds_conv_desc){.n = d->n, .h = d->p, .w = d->q, .c = d->k, .k = d->c, .r = d->r, .s = d->s,
                        .stride = 1, .pad = d->r - 1 - d->pad, .p = d->h, .q = d->w};
    return 1;
}

/* ---- forward (and stride-1 backward-data) ---- */

static int implicit(const ds_conv_desc *d) { return !(d->r == 1 && d->s == 1) && d->q >= 14; }
static long rsc_p(const ds_conv_desc *d) { return (long)d->r * d->s * even(d->c); }

/* Pixels per gathered chunk: about 384 KiB of bf16 columns, at least 64 (256 with many
 * output channels, which every chunk streams), as many chunks as whole rounds of threads. */
static long fwd_rows(const ds_conv_desc *d)
{
    const long m = (long)d->n * d->p * d->q, least = d->k >= 256 ? 256 : 64;
    long rows = 196608 / rsc_p(d) > least ? 196608 / rsc_p(d) : least;
    rows = rows < m ? rows : m > 0 ? m : 1;
    const long threads = ds_cpu_conv_threads(), chunks = (m + rows - 1) / rows;
    const long rounds = (chunks + threads - 1) / threads, bal = (m + rounds * threads - 1) / (rounds * threads);
    return round16(bal < rows ? bal : rows);
}

static long fwd_weights(const ds_conv_desc *d) { return rsc_p(d) / 2 * pack_ld(d->k); }

static long fwd_slot(const ds_conv_desc *d)
{
    if (implicit(d))
        return round32((long)(d->h + 2 * d->pad) * (d->w + 2 * d->pad) * even(d->c) + (long)d->s * even(d->c));
    return round32(fwd_rows(d) * rsc_p(d));
}

/* B (r*s*cp, k) pair-packed: B((r, s, cc), j) = w[j, r, s, cc], zero for a padding channel;
 * flipped (the backward-data product, d its transposed convolution): w[cc, R-1-r, S-1-s, j]
 * of the original weights [d->c][R][S][d->k]. */
static void pack_weights(ds_bf16 *dst, const float *w, const ds_conv_desc *d, int flipped)
{
    const int R = d->r, S = d->s, C = d->c, K = d->k;
    const long cp = even(C), ld = pack_ld(K), pairs = rsc_p(d) / 2;
#pragma omp parallel for schedule(static) num_threads(ds_cpu_conv_threads())
    for (long t = 0; t < pairs; t++)
        for (int e = 0; e < 2; e++) {
            const long p = 2 * t + e, r = p / (S * cp), s = p / cp % S, cc = p % cp;
            ds_bf16 *row = dst + t * ld + e;
            for (int j = 0; j < K; j++) {
                float v = 0;
                if (cc < C)
                    v = flipped ? w[((cc * R + (R - 1 - r)) * S + (S - 1 - s)) * K + j] : w[((j * R + r) * S + s) * C + cc];
                row[2 * j] = ds_bf16_round(v);
            }
        }
}

/* dst [h + 2 pad, w + 2 pad, cp] (then s*cp zeros) = one image rounded, zero border and
 * padding channels. */
static void pad_image(ds_bf16 *dst, const float *img, const ds_conv_desc *d)
{
    const long cp = even(d->c), wp = d->w + 2 * d->pad, hp = d->h + 2 * d->pad;
    memset(dst, 0, (size_t)(d->pad * wp * cp) * sizeof *dst);
    for (int y = 0; y < d->h; y++) {
        ds_bf16 *row = dst + (y + d->pad) * wp * cp;
        memset(row, 0, (size_t)(d->pad * cp) * sizeof *dst);
        if (cp == d->c)
            ds_bf16_round_n(row + d->pad * cp, img + (long)y * d->w * d->c, (size_t)d->w * d->c);
        else
            for (int x = 0; x < d->w; x++) {
                ds_bf16_round_n(row + (d->pad + x) * cp, img + ((long)y * d->w + x) * d->c, (size_t)d->c);
                row[(d->pad + x) * cp + d->c] = 0;
            }
        memset(row + (d->pad + d->w) * cp, 0, (size_t)(d->pad * cp) * sizeof *dst);
    }
    memset(dst + (d->pad + d->h) * wp * cp, 0, (size_t)((hp - d->pad - d->h) * wp * cp + d->s * cp) * sizeof *dst);
}

/* col (rows, r*s*cp) = the receptive fields of pixels m0 .. m0+rows-1, rounded; zero over the
 * padding and the padding channels. */
static void im2col(ds_bf16 *col, const float *in, const ds_conv_desc *d, long m0, long rows)
{
    const long pq = (long)d->p * d->q, cp = even(d->c);
    for (long i = 0; i < rows; i++) {
        const long m = m0 + i, n = m / pq, rem = m % pq;
        const int p = (int)(rem / d->q), q = (int)(rem % d->q);
        ds_bf16 *dst = col + i * rsc_p(d);
        const float *img = in + n * d->h * d->w * d->c;
        for (int r = 0; r < d->r; r++)
            for (int s = 0; s < d->s; s++, dst += cp) {
                const int y = p * d->stride - d->pad + r, x = q * d->stride - d->pad + s;
                if (y < 0 || y >= d->h || x < 0 || x >= d->w)
                    memset(dst, 0, (size_t)cp * sizeof *dst);
                else
                    ds_bf16_round_n(dst, img + ((long)y * d->w + x) * d->c, (size_t)d->c);
                if (cp != d->c) dst[d->c] = 0;
            }
    }
}

/* out = conv(in, weights packed by pack_weights) for d's shape; slots fwd_slot(d) apart. */
static void fwd_packed(float *out, const float *in, const ds_bf16 *wp, const ds_conv_desc *d, ds_bf16 *slots)
{
    const long ld = pack_ld(d->k), cp = even(d->c), slot = fwd_slot(d);
    if (implicit(d)) {
        const long wpc = (long)(d->w + 2 * d->pad) * cp, sc = (long)d->s * cp, hwc = (long)d->h * d->w * d->c;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
        for (int n = 0; n < d->n; n++) {
            ds_bf16 *src = slots + omp_get_thread_num() * slot;
            pad_image(src, in + n * hwc, d);
            for (int k0 = 0; k0 < d->k; k0 += 64) {
                const int kb = d->k - k0 < 64 ? d->k - k0 : 64;
                float *o = out + (long)n * d->p * d->q * d->k + k0;
                for (int p = 0; p < d->p; p++)
                    ds_bgemm_seg(d->q, kb, d->r, sc, src + (long)p * d->stride * wpc, (long)d->stride * cp, wpc,
                                 wp + 2 * k0, ld, sc / 2 * ld, o + (long)p * d->q * d->k, d->k, 0);
            }
        }
        return;
    }
    const long m = (long)d->n * d->p * d->q, rows = fwd_rows(d), chunks = (m + rows - 1) / rows, kd = rsc_p(d);
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (long ch = 0; ch < chunks; ch++) {
        const long m0 = ch * rows, mr = m - m0 < rows ? m - m0 : rows;
        ds_bf16 *col = slots + omp_get_thread_num() * slot;
        im2col(col, in, d, m0, mr);
        ds_bgemm_seg(mr, d->k, 1, kd, col, kd, 0, wp, ld, 0, out + m0 * d->k, d->k, 0);
    }
}

/* ---- strided backward-data ---- */

static long bwd_rows(const ds_conv_desc *d)
{
    const long rsc = (long)d->r * d->s * d->c, pq = (long)d->p * d->q;
    long rows = 98304 / rsc > 64 ? 98304 / rsc : 64;
    return rows < pq ? rows : pq > 0 ? pq : 1;
}

/* A slot: dout's rows rounded [rows, kp], then their float32 columns [rows, rsc]. */
static long bwd_slot(const ds_conv_desc *d)
{
    return round32(bwd_rows(d) * even(d->k)) + 2 * round32(bwd_rows(d) * (long)d->r * d->s * d->c);
}

static void bwd_data_strided(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws,
                             long weights)
{
    const long rsc = (long)d->r * d->s * d->c, kp = even(d->k), ld = 2 * rsc, pq = (long)d->p * d->q,
               hwc = (long)d->h * d->w * d->c, rows = bwd_rows(d), slot = bwd_slot(d);
    ds_bf16 *wp = ws, *slots = (ds_bf16 *)ws + weights;
    ds_bf16_pack_pairs(wp, ld, w, rsc, 1, d->k, (int)rsc);  /* B (k, rsc) = w */
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int n = 0; n < d->n; n++) {
        ds_bf16 *a = slots + omp_get_thread_num() * slot;
        float *col = (float *)(a + round32(rows * kp));
        memset(din + n * hwc, 0, (size_t)hwc * sizeof *din);
        for (long m0 = n * pq; m0 < (n + 1) * pq; m0 += rows) {
            const long mr = (n + 1) * pq - m0 < rows ? (n + 1) * pq - m0 : rows;
            for (long i = 0; i < mr; i++) {
                ds_bf16_round_n(a + i * kp, dout + (m0 + i) * d->k, (size_t)d->k);
                if (kp != d->k) a[i * kp + d->k] = 0;
            }
            // col (mr, rsc) = dout (mr, k) * w (k, rsc)
            ds_bgemm_seg(mr, (int)rsc, 1, kp, a, kp, 0, wp, ld, 0, col, rsc, 0);
            ds_cpu_col2im_add(din, col, d, m0, mr);
        }
    }
}

/* ---- backward-weight ---- */

#define GROUPS 16
#define GROUP_FLOATS (8L << 20)

/* Pixels per chunk (even): about 384 KiB of packed receptive fields, at least 64. */
static long bww_rows(const ds_conv_desc *d)
{
    const long rsc = (long)d->r * d->s * d->c, m = (long)d->n * d->p * d->q;
    long rows = 196608 / rsc > 64 ? 196608 / rsc : 64;
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
    const long krsc = round16((long)d->k * d->r * d->s * d->c), chunks = bww_chunks(d);
    long g = chunks < GROUPS ? chunks : GROUPS;
    while (g > 1 && g * krsc > GROUP_FLOATS) g /= 2;
    return (int)g;
}

/* A slot: dout^T rounded [k, rows], then the receptive fields packed in pairs of pixels. */
static long bww_slot(const ds_conv_desc *d)
{
    return round32((long)d->k * bww_rows(d)) + round32(bww_rows(d) * (long)d->r * d->s * d->c);
}

/* B (rows, rsc) pair-packed (pair row i/2, lane i%2): the receptive field of pixel m0 + i,
 * rounded; pixels past mr are zero rows. */
static void im2col_pairs(ds_bf16 *dst, const float *in, const ds_conv_desc *d, long m0, long mr, long rows)
{
    const long pq = (long)d->p * d->q, rsc = (long)d->r * d->s * d->c;
    for (long i = 0; i < rows; i++) {
        ds_bf16 *row = dst + i / 2 * 2 * rsc + i % 2;
        if (i >= mr) {
            for (long j = 0; j < rsc; j++) row[2 * j] = 0;
            continue;
        }
        const long m = m0 + i, n = m / pq, rem = m % pq;
        const int p = (int)(rem / d->q), q = (int)(rem % d->q);
        const float *img = in + n * d->h * d->w * d->c;
        for (int r = 0; r < d->r; r++)
            for (int s = 0; s < d->s; s++, row += 2L * d->c) {
                const int y = p * d->stride - d->pad + r, x = q * d->stride - d->pad + s;
                if (y < 0 || y >= d->h || x < 0 || x >= d->w)
                    for (int c = 0; c < d->c; c++) row[2 * c] = 0;
                else
                    for (int c = 0; c < d->c; c++) row[2 * c] = ds_bf16_round(img[((long)y * d->w + x) * d->c + c]);
            }
    }
}

/* ---- the backend's entries ---- */

/* The largest weights area (bf16 elements) and slot of the three ops. */
static void plan(const ds_conv_desc *d, long *weights, long *slot)
{
    ds_conv_desc t;
    const long rsc = (long)d->r * d->s * d->c;
    long w = fwd_weights(d), s = fwd_slot(d);
    if (!d->no_dx) {
        if (bwd_data_as_fwd(d, &t)) {
            if (fwd_weights(&t) > w) w = fwd_weights(&t);
            if (fwd_slot(&t) > s) s = fwd_slot(&t);
        } else {
            if (even(d->k) / 2 * 2 * rsc > w) w = even(d->k) / 2 * 2 * rsc;
            if (bwd_slot(d) > s) s = bwd_slot(d);
        }
    }
    const long parts = 2L * bww_groups(d) * round16((long)d->k * rsc);  /* float32 partials */
    if (parts > w) w = parts;
    if (bww_slot(d) > s) s = bww_slot(d);
    *weights = round32(w);
    *slot = s;
}

size_t ds_cpu_conv_workspace_bf16(const ds_conv_desc *d)
{
    long w, s;
    plan(d, &w, &s);
    return (size_t)(w + ds_cpu_conv_slots() * s) * sizeof(ds_bf16);
}

void ds_cpu_conv_fwd_bf16(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws)
{
    long weights, slot;
    plan(d, &weights, &slot);
    pack_weights(ws, w, d, 0);
    fwd_packed(out, in, ws, d, (ds_bf16 *)ws + weights);
}

void ds_cpu_conv_bwd_data_bf16(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws)
{
    long weights, slot;
    ds_conv_desc t;
    plan(d, &weights, &slot);
    if (!bwd_data_as_fwd(d, &t)) {
        bwd_data_strided(din, dout, w, d, ws, weights);
        return;
    }
    pack_weights(ws, w, &t, 1);
    fwd_packed(din, dout, ws, &t, (ds_bf16 *)ws + weights);
}

void ds_cpu_conv_bwd_weight_bf16(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws)
{
    long weights, slot;
    plan(d, &weights, &slot);
    const long m = (long)d->n * d->p * d->q, rsc = (long)d->r * d->s * d->c, rows = bww_rows(d),
               chunks = bww_chunks(d), part_stride = round16((long)d->k * rsc);
    const int groups = bww_groups(d);
    float *part = ws;
    ds_bf16 *slots = (ds_bf16 *)ws + weights;
    if (m == 0) return;
#pragma omp parallel for schedule(dynamic) num_threads(ds_cpu_conv_threads())
    for (int g = 0; g < groups; g++) {
        const long c0 = g * chunks / groups, c1 = (g + 1) * chunks / groups;
        ds_bf16 *a = slots + omp_get_thread_num() * slot, *b = a + round32((long)d->k * rows);
        float *pg = part + g * part_stride;
        for (long ch = c0; ch < c1; ch++) {
            const long m0 = ch * rows, mr = m - m0 < rows ? m - m0 : rows, kd = even(mr);
            for (int k = 0; k < d->k; k++) {  /* a (k, kd) = dout^T, rounded */
                ds_bf16 *ak = a + (long)k * kd;
                for (long i = 0; i < mr; i++) ak[i] = ds_bf16_round(dout[(m0 + i) * d->k + k]);
                if (kd != mr) ak[mr] = 0;
            }
            im2col_pairs(b, in, d, m0, mr, kd);
            // pg (k, rsc) (+)= dout^T (k, mr) * col (mr, rsc)
            ds_bgemm_seg(d->k, (int)rsc, 1, kd, a, kd, 0, b, 2 * rsc, 0, pg, rsc, ch != c0);
        }
    }
    ds_cpu_conv_sum_groups(dw, part, groups, part_stride, d->k, rsc, 0);
}
