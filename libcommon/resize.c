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

#include <math.h>
#include <stdarg.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

void ds_resize_scratch_free(ds_resize_scratch *s)
{
    free(s->kx);
    free(s->ky);
    free(s->bx);
    free(s->by);
    free(s->tmp);
    free(s->w);
    memset(s, 0, sizeof *s);
}

static double triangle(double x)
{
    if (x < 0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Taps for output indices [first, first + count) of an in_size -> out_size resize.
 * Returns ksize (taps stored per output), or -1 when memory runs out. */
static int precompute(ds_resize_scratch *s, int in_size, int out_size, int first, int count, int32_t **kk,
                      size_t *kk_cap, int **bounds, size_t *b_cap)
{
    /* Pillow's box is float: scale = (float)(in1 - in0) / out_size. */
    double scale = (double)((float)in_size - 0.0f) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    if (ds_scratch_grow((void **)kk, kk_cap, (size_t)count * ksize * sizeof **kk) ||
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
        int32_t *k = *kk + (size_t)i * ksize;
        for (int x = 0; x < ksize; x++) {
            double v = x < xmax ? (ww != 0.0 ? w[x] / ww : w[x]) : 0.0;
            k[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        (*bounds)[2 * i] = xmin;
        (*bounds)[2 * i + 1] = xmax;
    }
    return ksize;
}

static inline uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The plain passes: the definition. The AVX2 versions below compute the same integers. */

/* out[y, j] = sum_t in[y, bx[j] + t] * kx[j, t], for rows y of `in` (stride in_stride bytes). */
static void pass_horizontal_plain(uint8_t *out, int out_w, int rows, const uint8_t *in, size_t in_stride,
                                  const int32_t *kx, const int *bx, int ksize)
{
    for (int y = 0; y < rows; y++) {
        const uint8_t *row = in + (size_t)y * in_stride;
        uint8_t *o = out + (size_t)y * out_w * 3;
        for (int j = 0; j < out_w; j++) {
            const int32_t *k = kx + (size_t)j * ksize;
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
                                const int32_t *ky, const int *by, int ksize)
{
    for (int i = 0; i < out_h; i++) {
        const int32_t *k = ky + (size_t)i * ksize;
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

#if defined(__AVX2__)
/* One output pixel per iteration: a tap's RGB (plus the next byte, weighted but discarded)
 * widened to 4 x int32 and multiply-added. The 4-byte load reads one byte past the pixel, so
 * a tap on the input's very last pixel (whose next byte may lie outside the buffer) is
 * assembled from its 3 bytes. The result is stored as 4 bytes too, its 4th overwritten by
 * the next pixel; the row's last pixel is stored as 3. */
static void pass_horizontal(uint8_t *out, int out_w, int rows, const uint8_t *in, size_t in_stride,
                            const int32_t *kx, const int *bx, int ksize, int in_w)
{
    const __m128i half = _mm_set1_epi32(1 << (PRECISION_BITS - 1));
    for (int y = 0; y < rows; y++) {
        const uint8_t *row = in + (size_t)y * in_stride;
        uint8_t *o = out + (size_t)y * out_w * 3;
        int last_row = y == rows - 1;
        for (int j = 0; j < out_w; j++) {
            const int32_t *k = kx + (size_t)j * ksize;
            const uint8_t *p = row + (size_t)bx[2 * j] * 3;
            int n = bx[2 * j + 1];
            int guard = last_row && bx[2 * j] + n == in_w;
            __m128i acc = half;
            for (int t = 0; t < n; t++) {
                int32_t word;
                if (guard && t == n - 1) word = p[3 * t] | p[3 * t + 1] << 8 | p[3 * t + 2] << 16;
                else memcpy(&word, p + 3 * t, 4);
                __m128i px = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(word));
                acc = _mm_add_epi32(acc, _mm_mullo_epi32(px, _mm_set1_epi32(k[t])));
            }
            /* >> 22, then saturating packs clamp to [0, 255] exactly like clip8. */
            __m128i v = _mm_srai_epi32(acc, PRECISION_BITS);
            v = _mm_packs_epi32(v, v);
            v = _mm_packus_epi16(v, v);
            int32_t w4 = _mm_cvtsi128_si32(v);
            if (j + 1 < out_w) {
                memcpy(o + 3 * j, &w4, 4);
            } else {
                o[3 * j] = (uint8_t)w4, o[3 * j + 1] = (uint8_t)(w4 >> 8), o[3 * j + 2] = (uint8_t)(w4 >> 16);
            }
        }
    }
}

/* Eight output bytes at a time, the accumulators kept in a register across the taps; the
 * row's last (out_w * 3) % 8 bytes go through the plain loop. */
static void pass_vertical(uint8_t *out, int out_w, int out_h, const uint8_t *in, size_t in_stride,
                          const int32_t *ky, const int *by, int ksize)
{
    const __m256i half = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
    int len = out_w * 3, vec_len = len & ~7;
    for (int i = 0; i < out_h; i++) {
        const int32_t *k = ky + (size_t)i * ksize;
        const uint8_t *base = in + (size_t)by[2 * i] * in_stride;
        int n = by[2 * i + 1];
        uint8_t *o = out + (size_t)i * out_w * 3;
        for (int x = 0; x < vec_len; x += 8) {
            __m256i acc = half;
            for (int t = 0; t < n; t++) {
                __m128i b = _mm_loadl_epi64((const __m128i *)(base + (size_t)t * in_stride + x));
                acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(b), _mm256_set1_epi32(k[t])));
            }
            /* >> 22, then saturating packs clamp to [0, 255] exactly like clip8. */
            acc = _mm256_srai_epi32(acc, PRECISION_BITS);
            __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
            _mm_storel_epi64((__m128i *)(o + x), _mm_packus_epi16(w16, w16));
        }
        for (int x = vec_len; x < len; x++) {
            int32_t acc = 1 << (PRECISION_BITS - 1);
            for (int t = 0; t < n; t++) acc += base[(size_t)t * in_stride + x] * k[t];
            o[x] = clip8(acc);
        }
    }
}
#else
static void pass_horizontal(uint8_t *out, int out_w, int rows, const uint8_t *in, size_t in_stride,
                            const int32_t *kx, const int *bx, int ksize, int in_w)
{
    pass_horizontal_plain(out, out_w, rows, in, in_stride, kx, bx, ksize);
}

static void pass_vertical(uint8_t *out, int out_w, int out_h, const uint8_t *in, size_t in_stride,
                          const int32_t *ky, const int *by, int ksize)
{
    pass_vertical_plain(out, out_w, out_h, in, in_stride, ky, by, ksize);
}
#endif

/* Whether the plain passes are forced (DS_RESIZE_PLAIN=1 in the environment): lets the
 * tests compare the vector passes against the plain ones on the same input. */
static int use_plain(void)
{
    const char *e = getenv("DS_RESIZE_PLAIN");
    return e && *e == '1';
}

int ds_resize_bilinear(ds_decoder *d, uint8_t *out, int out_w, int out_h, const uint8_t *in, int in_w, int in_h,
                       const ds_fit_geometry *g, char *reason, size_t cap)
{
    ds_resize_scratch *s = &d->rs;
    if (in_w <= 0 || in_h <= 0 || out_w <= 0 || out_h <= 0 || g->left < 0 || g->top < 0 ||
        g->left + out_w > g->resized_w || g->top + out_h > g->resized_h) {
        if (reason && cap) snprintf(reason, cap, "bad resize geometry");
        return -1;
    }
    size_t in_stride = (size_t)in_w * 3;
    int ksx = 0, ksy = precompute(s, in_h, g->resized_h, g->top, out_h, &s->ky, &s->ky_cap, &s->by, &s->by_cap);
    int need_h = in_w != g->resized_w;
    if (need_h) ksx = precompute(s, in_w, g->resized_w, g->left, out_w, &s->kx, &s->kx_cap, &s->bx, &s->bx_cap);
    if (ksx < 0 || ksy < 0) goto oom;

    /* Input rows the vertical pass reads: bounds are monotonic in the output index. */
    int y_first = s->by[0], y_last = s->by[2 * (out_h - 1)] + s->by[2 * (out_h - 1) + 1];
    const uint8_t *src;
    size_t src_stride;
    if (need_h) {
        if (ds_scratch_grow((void **)&s->tmp, &s->tmp_cap, (size_t)(y_last - y_first) * out_w * 3)) goto oom;
        const uint8_t *rows = in + (size_t)y_first * in_stride;
        if (use_plain())
            pass_horizontal_plain(s->tmp, out_w, y_last - y_first, rows, in_stride, s->kx, s->bx, ksx);
        else
            pass_horizontal(s->tmp, out_w, y_last - y_first, rows, in_stride, s->kx, s->bx, ksx, in_w);
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
    if (use_plain())
        pass_vertical_plain(out, out_w, out_h, src, src_stride, s->ky, s->by, ksy);
    else
        pass_vertical(out, out_w, out_h, src, src_stride, s->ky, s->by, ksy);
    return 0;
oom:
    if (reason && cap) snprintf(reason, cap, "out of memory resizing %dx%d", in_w, in_h);
    return -1;
}
