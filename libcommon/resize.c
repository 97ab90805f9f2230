/* resize: Pillow's BILINEAR resample (Resample.c), re-derived so that our pixels equal
 * Pillow's for the same decoded input.
 *
 * For each output index the filter is centred at in0 + (i + 0.5) * scale in input
 * coordinates; its support is 1 (triangle) times max(scale, 1), so a reduction averages over
 * every input pixel it covers instead of aliasing. Taps are normalised to sum 1 in double,
 * then turned into 22-bit fixed point (32 bits - 8 for the pixel - 2 for headroom) with
 * round-half-away-from-zero; an output is (sum + 2^21) >> 22, clamped to [0, 255].
 * Horizontal pass first (only on the input rows the vertical pass will read), then vertical.
 *
 * Only the requested window of the resized image is computed: every output pixel depends
 * on its own taps alone, so resize-then-crop and computing just the crop are identical. */
#include "image.h"
#include "image_internal.h"

#include "cpu_isa.h"

#include <math.h>
#include <stdarg.h>
#if defined(__x86_64__) || defined(__i386__)
#define RESIZE_AVX2 1
#include <immintrin.h>
/* The vector passes are compiled for AVX2 and run only where cpu_isa allows. */
#define AVX2 __attribute__((target("avx2")))
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

/* The horizontal tap table's stride is a multiple of this: the vector pass takes 5 taps
 * (15 bytes) per load (the zero taps this adds cost the plain pass nothing). */
#if RESIZE_AVX2
#define H_TAP_PAD 5
#else
#define H_TAP_PAD 1
#endif

void ds_resize_scratch_free(ds_resize_scratch *s)
{
    free(s->kx);
    free(s->ky);
    free(s->bx);
    free(s->by);
    free(s->kxv);
    free(s->tmp);
    free(s->w);
    memset(s, 0, sizeof *s);
}

static double triangle(double x)
{
    if (x < 0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Taps for output indices [first, first + count) of an in_size -> out_size resize, stored
 * `stride` apart: ksize taps rounded up to a multiple of `pad`, zeros past each output's own
 * taps, and 8 zero taps of slack after the last output (the vector pass loads 8 at a time).
 * Returns the stride, or -1 when memory runs out. */
static int precompute(ds_resize_scratch *s, int in_size, int out_size, int first, int count, int pad,
                      int32_t **kk, size_t *kk_cap, int **bounds, size_t *b_cap)
{
    /* Pillow's box is float: scale = (float)(in1 - in0) / out_size. */
    double scale = (double)((float)in_size - 0.0f) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    int stride = (ksize + pad - 1) / pad * pad;
    if (ds_scratch_grow((void **)kk, kk_cap, ((size_t)count * stride + 8) * sizeof **kk) ||
        ds_scratch_grow((void **)bounds, b_cap, (size_t)count * 2 * sizeof **bounds) ||
        ds_scratch_grow((void **)&s->w, &s->w_cap, (size_t)ksize * sizeof *s->w))
        return -1;
    double *w = s->w;
    for (int i = 0; i < count; i++) {
        int xx = first + i;
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            w[x] = triangle((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        int32_t *k = *kk + (size_t)i * stride;
        for (int x = 0; x < stride; x++) {
            double v = x < xmax ? (ww != 0.0 ? w[x] / ww : w[x]) : 0.0;
            k[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        (*bounds)[2 * i] = xmin;
        (*bounds)[2 * i + 1] = xmax;
    }
    memset(*kk + (size_t)count * stride, 0, 8 * sizeof **kk);
    return stride;
}

static inline uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The plain passes: the definition. The AVX2 versions below compute the same integers. */

/* out[y, j] = sum_t in[y, bx[j] + t] * kx[j, t], for rows y of `in` (stride in_stride bytes). */
static void pass_horizontal_plain(uint8_t *out, int out_w, int rows, const uint8_t *in, size_t in_stride,
                                  const int32_t *kx, const int *bx, int stride)
{
    for (int y = 0; y < rows; y++) {
        const uint8_t *row = in + (size_t)y * in_stride;
        uint8_t *o = out + (size_t)y * out_w * 3;
        for (int j = 0; j < out_w; j++) {
            const int32_t *k = kx + (size_t)j * stride;
            const uint8_t *p = row + (size_t)bx[2 * j] * 3;
            int n = bx[2 * j + 1];
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int t = 0; t < n; t++) {
                s0 += p[3 * t] * k[t];
                s1 += p[3 * t + 1] * k[t];
                s2 += p[3 * t + 2] * k[t];
            }
            o[3 * j] = clip8(s0), o[3 * j + 1] = clip8(s1), o[3 * j + 2] = clip8(s2);
        }
    }
}

/* out[i, x] = sum_t in[by[i] + t, x] * ky[i, t]; rows of `in` are in_stride bytes apart. */
static void pass_vertical_plain(uint8_t *out, int out_w, int out_h, const uint8_t *in, size_t in_stride,
                                const int32_t *ky, const int *by, int stride)
{
    for (int i = 0; i < out_h; i++) {
        const int32_t *k = ky + (size_t)i * stride;
        const uint8_t *base = in + (size_t)by[2 * i] * in_stride;
        int n = by[2 * i + 1];
        uint8_t *o = out + (size_t)i * out_w * 3;
        for (int x = 0; x < out_w * 3; x++) {
            int32_t acc = 1 << (PRECISION_BITS - 1);
            for (int t = 0; t < n; t++) acc += base[(size_t)t * in_stride + x] * k[t];
            o[x] = clip8(acc);
        }
    }
}

#if RESIZE_AVX2
/* The horizontal pass computes two output pixels (j, j + 1) per step, one per 128-bit half:
 * each half loads 16 bytes at its pixel's first tap, a byte shuffle per tap widens that tap's
 * RGB to int32 lanes [R G B 0], and one 8-lane multiply-add covers the tap for both pixels.
 * A group of five taps (15 bytes) per load; kxv holds the weights to match, per pair of
 * outputs, group and tap, [k_j x4 | k_j+1 x4] (expand_kx). The tap table is padded to a
 * multiple of 5 with zero weights, so the bytes a load reads past an output's last real tap
 * add nothing; an odd last output pairs with itself. */
static int expand_kx(ds_resize_scratch *s, int out_w, int stride)
{
    int groups = stride / 5, pairs = (out_w + 1) / 2;
    if (ds_scratch_grow((void **)&s->kxv, &s->kxv_cap, (size_t)pairs * stride * 8 * sizeof *s->kxv)) return -1;
    for (int q = 0; q < pairs; q++) {
        int j0 = 2 * q, j1 = 2 * q + 1 < out_w ? 2 * q + 1 : 2 * q;
        for (int t = 0; t < groups * 5; t++) {
            int32_t *v = s->kxv + ((size_t)q * stride + t) * 8;
            for (int l = 0; l < 4; l++) {
                v[l] = s->kx[(size_t)j0 * stride + t];
                v[4 + l] = s->kx[(size_t)j1 * stride + t];
            }
        }
    }
    return 0;
}

/* Both pixels' RGB sums plus the rounding half, [R G B 0 | R G B 0], over `taps` taps from
 * the pixels at p0 and p1 with weights kv (8 lanes per tap): whole groups of five taps per
 * load, then the remaining one to four from one more load. */
static inline AVX2 __m256i h_pair_avx2(const uint8_t *p0, const uint8_t *p1, const int32_t *kv, int taps)
{
    const __m256i sh0 = _mm256_setr_epi8(0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, -1, -1, -1, -1,
                                         0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, -1, -1, -1, -1);
    const __m256i three = _mm256_setr_epi8(3, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,
                                           3, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0);
    const __m256i sh1 = _mm256_add_epi8(sh0, three), sh2 = _mm256_add_epi8(sh1, three),
                  sh3 = _mm256_add_epi8(sh2, three), sh4 = _mm256_add_epi8(sh3, three);
    __m256i acc = _mm256_set1_epi32(1 << (PRECISION_BITS - 1)), px;
#define TAP(t, sh)                                                                                              \
    acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_shuffle_epi8(px, sh),                              \
                                                   _mm256_loadu_si256((const __m256i *)(kv + 8 * (t)))))
    for (; taps >= 5; taps -= 5, p0 += 15, p1 += 15, kv += 40) {
        px = _mm256_loadu2_m128i((const __m128i *)p1, (const __m128i *)p0);
        TAP(0, sh0);
        TAP(1, sh1);
        TAP(2, sh2);
        TAP(3, sh3);
        TAP(4, sh4);
    }
    if (taps > 0) {
        px = _mm256_loadu2_m128i((const __m128i *)p1, (const __m128i *)p0);
        TAP(0, sh0);
        if (taps > 1) TAP(1, sh1);
        if (taps > 2) TAP(2, sh2);
        if (taps > 3) TAP(3, sh3);
    }
#undef TAP
    return acc;
}

/* One output pixel's sums from the plain loop, for pixels whose 16-byte loads would run past
 * the end of the input. */
static inline AVX2 __m128i h_pixel_avx2(const uint8_t *p, const int32_t *k, int n)
{
    int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
    for (int t = 0; t < n; t++) {
        s0 += p[3 * t] * k[t];
        s1 += p[3 * t + 1] * k[t];
        s2 += p[3 * t + 2] * k[t];
    }
    return _mm_setr_epi32(s0, s1, s2, 0);
}

/* >> 22, then saturating packs clamp to [0, 255] exactly like clip8; RGB in the low 3 bytes. */
static inline AVX2 int32_t h_bytes_avx2(__m128i sum)
{
    __m128i v = _mm_srai_epi32(sum, PRECISION_BITS);
    v = _mm_packs_epi32(v, v);
    return _mm_cvtsi128_si32(_mm_packus_epi16(v, v));
}

/* Output pairs go in the outer loop and rows in the inner one, in blocks of rows that stay in
 * cache, so a pair's weights are loaded once per block. Pixels are stored as 4 bytes, the
 * 4th overwritten by the next pixel's store (that pair comes later); the row's last pixel is
 * stored as 3. kxv: expand_kx's table for kx. */
#define H_ROW_BLOCK 8
static AVX2 void pass_horizontal_avx2(uint8_t *out, int out_w, int rows, const uint8_t *in, size_t in_stride,
                                 const int32_t *kx, const int32_t *kxv, const int *bx, int stride)
{
    const uint8_t *end = in + (size_t)rows * in_stride;
    size_t out_stride = (size_t)out_w * 3;
    for (int y0 = 0; y0 < rows; y0 += H_ROW_BLOCK) {
        int y1 = y0 + H_ROW_BLOCK < rows ? y0 + H_ROW_BLOCK : rows;
        for (int j = 0; j < out_w; j += 2) {
            int j1 = j + 1 < out_w ? j + 1 : j;
            size_t off0 = (size_t)bx[2 * j] * 3, off1 = (size_t)bx[2 * j1] * 3;
            const int32_t *kv = kxv + (size_t)(j / 2) * stride * 8;
            /* Taps past an output's own have zero weight: the pair needs the longer's. */
            int taps = bx[2 * j + 1] > bx[2 * j1 + 1] ? bx[2 * j + 1] : bx[2 * j1 + 1];
            int groups = (taps + 4) / 5;
            int last = j + 2 >= out_w;
            for (int y = y0; y < y1; y++) {
                const uint8_t *row = in + (size_t)y * in_stride;
                uint8_t *o = out + (size_t)y * out_stride + 3 * (size_t)j;
                __m128i s0, s1;
                if (row + off1 + 15 * groups + 1 <= end) { /* off1 >= off0: bounds grow with j */
                    __m256i sums = h_pair_avx2(row + off0, row + off1, kv, taps);
                    s0 = _mm256_castsi256_si128(sums), s1 = _mm256_extracti128_si256(sums, 1);
                } else {
                    s0 = h_pixel_avx2(row + off0, kx + (size_t)j * stride, bx[2 * j + 1]);
                    s1 = h_pixel_avx2(row + off1, kx + (size_t)j1 * stride, bx[2 * j1 + 1]);
                }
                int32_t w0 = h_bytes_avx2(s0), w1 = h_bytes_avx2(s1);
                if (!last) {
                    memcpy(o, &w0, 4);
                    memcpy(o + 3, &w1, 4);
                } else {
                    if (j1 != j) memcpy(o, &w0, 4), o += 3, w0 = w1;
                    o[0] = (uint8_t)w0, o[1] = (uint8_t)(w0 >> 8), o[2] = (uint8_t)(w0 >> 16);
                }
            }
        }
    }
}

/* 32 output bytes at a time in four accumulators, each tap's weight broadcast once per
 * block; the row's last (out_w * 3) % 32 bytes go through the plain loop. */
static AVX2 void pass_vertical_avx2(uint8_t *out, int out_w, int out_h, const uint8_t *in, size_t in_stride,
                               const int32_t *ky, const int *by, int stride)
{
    const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    /* packs/packus interleave the 128-bit halves; this puts the 32 bytes back in order. */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int len = out_w * 3, vec_len = len & ~31;
    for (int i = 0; i < out_h; i++) {
        const int32_t *k = ky + (size_t)i * stride;
        const uint8_t *base = in + (size_t)by[2 * i] * in_stride;
        int n = by[2 * i + 1];
        uint8_t *o = out + (size_t)i * out_w * 3;
        for (int x = 0; x < vec_len; x += 32) {
            __m256i a0 = half, a1 = half, a2 = half, a3 = half;
            for (int t = 0; t < n; t++) {
                const uint8_t *r = base + (size_t)t * in_stride + x;
                __m256i kt = _mm256_set1_epi32(k[t]);
                a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)r)), kt));
                a1 = _mm256_add_epi32(a1, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + 8))), kt));
                a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + 16))), kt));
                a3 = _mm256_add_epi32(a3, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + 24))), kt));
            }
            /* >> 22, then saturating packs clamp to [0, 255] exactly like clip8. */
            __m256i w01 = _mm256_packs_epi32(_mm256_srai_epi32(a0, PRECISION_BITS), _mm256_srai_epi32(a1, PRECISION_BITS));
            __m256i w23 = _mm256_packs_epi32(_mm256_srai_epi32(a2, PRECISION_BITS), _mm256_srai_epi32(a3, PRECISION_BITS));
            __m256i b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(w01, w23), order);
            _mm256_storeu_si256((__m256i *)(o + x), b);
        }
        for (int x = vec_len; x < len; x++) {
            int32_t acc = 1 << (PRECISION_BITS - 1);
            for (int t = 0; t < n; t++) acc += base[(size_t)t * in_stride + x] * k[t];
            o[x] = clip8(acc);
        }
    }
}
#endif

int ds_resize_bilinear(ds_decoder *d, uint8_t *out, int out_w, int out_h, const uint8_t *in, int in_w, int in_h,
                       const ds_fit_geometry *g, char *reason, size_t cap)
{
    return ds_resize_bilinear_isa(ds_cpu_isa_get(), d, out, out_w, out_h, in, in_w, in_h, g, reason, cap);
}

int ds_resize_bilinear_isa(ds_cpu_isa isa, ds_decoder *d, uint8_t *out, int out_w, int out_h, const uint8_t *in,
                           int in_w, int in_h, const ds_fit_geometry *g, char *reason, size_t cap)
{
#if RESIZE_AVX2
    const int vector = ds_cpu_isa_has(isa, DS_CPU_F_AVX2);
#else
    const int vector = 0;
#endif
    ds_resize_scratch *s = &d->rs;
    if (in_w <= 0 || in_h <= 0 || out_w <= 0 || out_h <= 0 || g->left < 0 || g->top < 0 ||
        g->left + out_w > g->resized_w || g->top + out_h > g->resized_h) {
        if (reason && cap) snprintf(reason, cap, "bad resize geometry");
        return -1;
    }
    size_t in_stride = (size_t)in_w * 3;
    int ksx = 0, ksy = precompute(s, in_h, g->resized_h, g->top, out_h, 1, &s->ky, &s->ky_cap, &s->by, &s->by_cap);
    int need_h = in_w != g->resized_w;
    if (need_h) ksx = precompute(s, in_w, g->resized_w, g->left, out_w, H_TAP_PAD, &s->kx, &s->kx_cap, &s->bx, &s->bx_cap);
    if (ksx < 0 || ksy < 0) goto oom;

    /* Input rows the vertical pass reads: bounds are monotonic in the output index. */
    int y_first = s->by[0], y_last = s->by[2 * (out_h - 1)] + s->by[2 * (out_h - 1) + 1];
    const uint8_t *src;
    size_t src_stride;
    if (need_h) {
        if (ds_scratch_grow((void **)&s->tmp, &s->tmp_cap, (size_t)(y_last - y_first) * out_w * 3)) goto oom;
        const uint8_t *rows = in + (size_t)y_first * in_stride;
        if (!vector)
            pass_horizontal_plain(s->tmp, out_w, y_last - y_first, rows, in_stride, s->kx, s->bx, ksx);
#if RESIZE_AVX2
        else if (expand_kx(s, out_w, ksx))
            goto oom;
        else
            pass_horizontal_avx2(s->tmp, out_w, y_last - y_first, rows, in_stride, s->kx, s->kxv, s->bx, ksx);
#endif
        src = s->tmp, src_stride = (size_t)out_w * 3;
    } else {
        src = in + (size_t)y_first * in_stride + (size_t)g->left * 3, src_stride = in_stride;
    }
    if (in_h == g->resized_h) {
        /* Identity vertically (Pillow skips the pass): copy the window's rows. */
        for (int i = 0; i < out_h; i++)
            memcpy(out + (size_t)i * out_w * 3, src + (size_t)(g->top + i - y_first) * src_stride, (size_t)out_w * 3);
        return 0;
    }
    for (int i = 0; i < out_h; i++) s->by[2 * i] -= y_first;
    if (!vector)
        pass_vertical_plain(out, out_w, out_h, src, src_stride, s->ky, s->by, ksy);
#if RESIZE_AVX2
    else
        pass_vertical_avx2(out, out_w, out_h, src, src_stride, s->ky, s->by, ksy);
#endif
    return 0;
oom:
    if (reason && cap) snprintf(reason, cap, "out of memory resizing %dx%d", in_w, in_h);
    return -1;
}
