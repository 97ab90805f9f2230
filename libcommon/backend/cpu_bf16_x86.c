/* cpu_bf16_x86: the vector kernels of cpu_bf16.h: the rounding on AVX-512F, the products on
 * AVX512-BF16 (VDPBF16PS), and their exact emulations on AVX-512F and AVX2 + FMA.
 *
 * The plan of the float32 kernels (cpu_sgemm_avx512.c): C walked 64 columns at a time, a
 * tile of MR rows by NV vectors keeping its sums in registers across the whole reduction,
 * heights balanced. A vector of B holds the pairs of 16 columns (8 on AVX2) of one pair row;
 * a row of A gives one 32-bit pair per step, broadcast. The emulations take the odd element
 * (the pair's high half, masked) then the even one (shifted up) as two FMAs, with MXCSR's
 * DAZ and FTZ set for the call: bit for bit what VDPBF16PS computes (tests/unit/test_bf16.c
 * checks it on a CPU that has the instruction). */
#include "cpu_bf16.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"

#define BG_CAT_(a, b) a##b
#define BG_CAT(a, b) BG_CAT_(a, b)

/* Rounding to nearest even on 32-bit lanes, the bf16 left in the upper half (the lower half
 * is garbage): NaN quiet, denormals and zeros to signed zero. */
static inline __attribute__((target("avx512f"), always_inline)) __m512i round_hi(__m512i u)
{
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
                  one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x400000),
                  sign = _mm512_set1_epi32((int)0x80000000u);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
    const __mmask16 tiny = _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, inf), _mm512_setzero_si512());
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, quiet));
    return _mm512_mask_mov_epi32(r, tiny, _mm512_and_si512(u, sign));
}

/* 16 float32 rounded (round_hi), as 16 bf16. */
static inline __attribute__((target("avx512f"), always_inline)) __m256i round16(__m512 v)
{
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(round_hi(_mm512_castps_si512(v)), 16));
}

static inline __attribute__((target("avx512f"), always_inline)) __mmask16 head(size_t left)
{
    return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
}

__attribute__((target("avx512f"))) void ds_bf16_round_n_avx512(ds_bf16 *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 k = head(n - i);
        const __m256i h = round16(_mm512_maskz_loadu_ps(k, src + i));
        if (k == 0xffff) {
            _mm256_storeu_si256((__m256i *)(dst + i), h);
        } else {  /* the tail: a masked 16-bit store needs AVX512-BW */
            ds_bf16 tail[16];
            _mm256_storeu_si256((__m256i *)tail, h);
            memcpy(dst + i, tail, (n - i) * sizeof *dst);
        }
    }
}

/* The rounding by the instruction itself (VCVTNEPS2BF16: test_bf16 checks it is the rule). */
__attribute__((target("avx512f,avx512bf16"))) void ds_bf16_round_n_avx512bf16(ds_bf16 *dst, const float *src,
                                                                            size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i, (__m512i)h);
    }
    if (i + 16 <= n) {
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
        i += 16;
    }
    if (i < n) ds_bf16_round_n_avx512(dst + i, src + i, n - i);
}

/* The same rounding on AVX2: 8 lanes, packed to 16 bits with unsigned saturation (the
 * values are below 2^16 once shifted) and the 128-bit halves put back in order. */
__attribute__((target("avx2"))) void ds_bf16_round_n_avx2(ds_bf16 *dst, const float *src, size_t n)
{
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                  one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x400000),
                  sign = _mm256_set1_epi32((int)0x80000000u), zero = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i r2[2];
        for (int h = 0; h < 2; h++) {
            const __m256i u = _mm256_loadu_si256((const __m256i *)(src + i + 8 * h));
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
            const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(u, inf), zero);
            __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
            r = _mm256_blendv_epi8(r, _mm256_or_si256(u, quiet), nan);
            r = _mm256_blendv_epi8(r, _mm256_and_si256(u, sign), tiny);
            r2[h] = _mm256_srli_epi32(r, 16);
        }
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r2[0], r2[1]), 0xd8);
        _mm256_storeu_si256((__m256i *)(dst + i), packed);
    }
    for (; i < n; i++) dst[i] = ds_bf16_round(src[i]);
}

/* dst = a and b interleaved, 16 pairs at a time: each widened to 32-bit lanes, b shifted up. */
__attribute__((target("avx2"))) void ds_bf16_interleave_avx2(ds_bf16 *dst, const ds_bf16 *a, const ds_bf16 *b,
                                                              size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i lo = a ? _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a + i))) : _mm256_setzero_si256();
        const __m256i hi = b ? _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(b + i))), 16)
                             : _mm256_setzero_si256();
        _mm256_storeu_si256((__m256i *)(dst + 2 * i), _mm256_or_si256(lo, hi));
    }
    for (; i < n; i++) {
        dst[2 * i] = a ? a[i] : 0;
        dst[2 * i + 1] = b ? b[i] : 0;
    }
}

/* The same, 16 pairs at a time in 512-bit lanes; the rest by the AVX2 loop. */
__attribute__((target("avx512f,avx2"))) void ds_bf16_interleave_avx512(ds_bf16 *dst, const ds_bf16 *a,
                                                                        const ds_bf16 *b, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i lo = a ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(a + i))) : _mm512_setzero_si512();
        const __m512i hi = b ? _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(b + i))), 16)
                             : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + 2 * i, _mm512_or_si512(lo, hi));
    }
    ds_bf16_interleave_avx2(dst + 2 * i, a ? a + i : NULL, b ? b + i : NULL, n - i);
}

/* A pair of bf16 read as one 32-bit element (the native kernel's broadcast operand). */
typedef int32_t __attribute__((may_alias)) bg_pair;

/* The columns of mask k (its low bits: a tile's columns) of 16 bf16 h, stored at p: a whole
 * vector at once, a tail through a buffer (a masked 16-bit store needs AVX512-BW). */
static inline __attribute__((target("avx512f"), always_inline)) void store16(ds_bf16 *p, __m256i h, __mmask16 k)
{
    if (k == 0xffff) {
        _mm256_storeu_si256((__m256i *)p, h);
        return;
    }
    ds_bf16 tail[16];
    _mm256_storeu_si256((__m256i *)tail, h);
    memcpy(p, tail, (size_t)__builtin_popcount(k) * sizeof *p);
}

/* 16 bf16 at p: the columns of mask k, the others zero; widen16: their float32 values. */
static inline __attribute__((target("avx512f"), always_inline)) __m256i load16(const ds_bf16 *p, __mmask16 k)
{
    if (k == 0xffff) return _mm256_loadu_si256((const __m256i *)p);
    ds_bf16 tail[16] = {0};
    memcpy(tail, p, (size_t)__builtin_popcount(k) * sizeof *p);
    return _mm256_loadu_si256((const __m256i *)tail);
}
static inline __attribute__((target("avx512f"), always_inline)) __m512 widen16(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#define BG_NAME ds_bgemm_avx512bf16
#define BG16_NAME ds_bgemm16_avx512bf16
#define BG_TARGET __attribute__((target("avx512f,avx512bf16,avx2,fma")))
#include "cpu_bf16_avx512.inc"
#undef BG_NAME
#undef BG16_NAME
#undef BG_TARGET

/* ---- the FMA forms: A widened to float32 a block of rows at a time ----
 * A row of A as float32 (each element in its own 32-bit lane) lets a tile broadcast one
 * element by a plain load, where a pair taken apart in the tile costs a move, a mask or shift
 * and a broadcast per half and row: as many operations as the FMAs they feed. So the FMA
 * forms widen a block of A's rows first, a pass of loads and shifts into a buffer that stays
 * in L1, and walk C's columns over it. A step of the reduction (one pair row) takes the odd
 * elements first, then the even ones: B's vectors of that half as float32 (masked, or
 * shifted up), then each row's element of that half, NV FMAs. Each accumulator still takes a
 * pair's odd product, then its even one: VDPBF16PS's order, so the bits are its own. */

/* Floats of a widened block of A: about AW_L1; on the stack up to AW_MAX, on the heap past
 * it (a block has at least a whole tile's rows, however long the reduction). */
#define AW_MAX 12288
#define AW_L1 6144

/* The elements a block of `rows` rows of A spans: from its first row's start to its last
 * row's last segment's end. */
static long span(long rows, long sai, long seg_a, long nseg, long kseg)
{
    return (rows - 1) * sai + (nseg - 1) * seg_a + kseg;
}

/* How A is widened: blocks of `rows` rows (at least `tile`, a multiple of it, about AW_L1
 * floats), each either the span the rows cover, A's layout kept (rows that overlap, as a
 * convolution's pixels in its padded image do, are widened once; rows one after another, in
 * one pass), or each row's segments packed (rows far apart), whichever is less to widen;
 * widened row i at i ldw, segment g at g seg_w. */
typedef struct {
    long rows, ldw, seg_w, floats;
    int spans;
} widening;

static widening widening_of(long m, long nseg, long kseg, long sai, long seg_a, long tile)
{
    const long kd = nseg * kseg;
    long rb = AW_L1 / kd / tile * tile, rs = sai > 0 ? (AW_L1 - span(1, sai, seg_a, nseg, kseg)) / sai + 1 : 0;
    if (rb < tile) rb = tile;
    if (rs < tile) rs = tile;
    widening w = {.spans = sai >= 0 && seg_a >= 0 && span(rs, sai, seg_a, nseg, kseg) <= rs * kd};
    w.rows = w.spans ? rs : rb;
    if (w.rows > m) w.rows = m;
    w.ldw = w.spans ? sai : kd;
    w.seg_w = w.spans ? seg_a : kseg;
    w.floats = w.spans ? span(w.rows, sai, seg_a, nseg, kseg) : w.rows * kd;
    return w;
}

typedef void widen_fn(float *dst, const ds_bf16 *src, long n);

/* `rows` rows of A from a, widened into W as w lays them out. */
static inline __attribute__((always_inline)) void widen_block(widen_fn *widen, const widening *w, float *W,
                                                              const ds_bf16 *a, long rows, long sai, long seg_a,
                                                              long nseg, long kseg)
{
    if (w->spans) {
        widen(W, a, span(rows, sai, seg_a, nseg, kseg));
        return;
    }
    if (seg_a == kseg) {  /* a row's segments one run, as W's are: one pass a row */
        for (long i = 0; i < rows; i++) widen(W + i * w->ldw, a + i * sai, nseg * kseg);
        return;
    }
    for (long i = 0; i < rows; i++)
        for (long g = 0; g < nseg; g++) widen(W + i * w->ldw + g * kseg, a + i * sai + g * seg_a, kseg);
}

/* ---- AVX-512F: tiles of MR rows by NV 16-column vectors (32 registers) ----
 * One half at a time keeps MR x NV accumulators (24 at most) and NV vectors of B in the
 * registers; a row's element comes by an embedded broadcast ({1to16}) of the FMA. */

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

/* B's pair-row half for the columns of vector j (16 pairs): odd elements masked, even ones
 * shifted up. */
static inline AVX512 __attribute__((always_inline)) __m512 b_half512(const ds_bf16 *b, int j, int last_vec,
                                                                     __mmask16 last, int odd)
{
    const __m512i v = last_vec ? _mm512_maskz_loadu_epi32(last, b + 32 * j) : _mm512_loadu_si512(b + 32 * j);
    return _mm512_castsi512_ps(odd ? _mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u))
                                   : _mm512_slli_epi32(v, 16));
}

/* One MR x (16 NV) tile of C over the widened rows W (ldw floats apart, segment g at
 * g seg_w). */
static inline AVX512 __attribute__((always_inline)) void avx512_bf16_tile(const int MR, const int NV, const float *W,
                                                                          long ldw, long seg_w, const ds_bf16 *B,
                                                                          long ldb, long seg_b, long nseg, long kseg,
                                                                          float *C, long ldc, __mmask16 last, int acc,
                                                                          ds_bf16 *D, long ldd, int add)
{
    __m512 c[16][4];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) c[i][j] = _mm512_setzero_ps();
    for (long g = 0; g < nseg; g++) {
        const float *ws = W + g * seg_w;
        const ds_bf16 *bs = B + g * seg_b;
        for (long t = 0; t < kseg / 2; t++) {
            const ds_bf16 *b = bs + t * ldb;
            const float *w = ws + 2 * t;
#pragma GCC unroll 2
            for (int half = 1; half >= 0; half--) {  /* the odd elements, then the even */
                __m512 bv[4];
#pragma GCC unroll 4
                for (int j = 0; j < NV; j++) bv[j] = b_half512(b, j, j == NV - 1, last, half);
#pragma GCC unroll 16
                for (int i = 0; i < MR; i++) {
                    const __m512 av = _mm512_set1_ps(w[i * ldw + half]);
#pragma GCC unroll 4
                    for (int j = 0; j < NV; j++) c[i][j] = _mm512_fmadd_ps(av, bv[j], c[i][j]);
                }
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) {
            const __mmask16 k = j == NV - 1 ? last : 0xffff;
            __m512 v = c[i][j];
            if (acc) v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, C + i * ldc + 16 * j), v);  /* DAZ, FTZ: ftz(daz(C) + S) */
            if (D) {
                ds_bf16 *dp = D + i * ldd + 16 * j;
                __m256i h = round16(v);
                if (add) h = round16(_mm512_add_ps(widen16(load16(dp, k)), widen16(h)));
                store16(dp, h, k);
            } else {
                _mm512_mask_storeu_ps(C + i * ldc + 16 * j, k, v);
            }
        }
}

#define AVX512_CASE(mr, nv) \
    case mr: avx512_bf16_tile(mr, nv, W, ldw, seg_w, B, ldb, seg_b, nseg, kseg, C, ldc, last, acc, D, ldd, add); break;
#define AVX512_TILES(nv, cases)                                                                               \
    static AVX512 void avx512_bf16_nv##nv(int mr, const float *W, long ldw, long seg_w, const ds_bf16 *B,     \
                                          long ldb, long seg_b, long nseg, long kseg, float *C, long ldc,     \
                                          __mmask16 last, int acc, ds_bf16 *D, long ldd, int add)             \
    {                                                                                                         \
        switch (mr) { cases }                                                                                 \
    }
AVX512_TILES(1, AVX512_CASE(1, 1) AVX512_CASE(2, 1) AVX512_CASE(3, 1) AVX512_CASE(4, 1) AVX512_CASE(5, 1)
                AVX512_CASE(6, 1) AVX512_CASE(7, 1) AVX512_CASE(8, 1) AVX512_CASE(9, 1) AVX512_CASE(10, 1)
                AVX512_CASE(11, 1) AVX512_CASE(12, 1) AVX512_CASE(13, 1) AVX512_CASE(14, 1) AVX512_CASE(15, 1)
                AVX512_CASE(16, 1))
AVX512_TILES(2, AVX512_CASE(1, 2) AVX512_CASE(2, 2) AVX512_CASE(3, 2) AVX512_CASE(4, 2) AVX512_CASE(5, 2)
                AVX512_CASE(6, 2) AVX512_CASE(7, 2) AVX512_CASE(8, 2) AVX512_CASE(9, 2) AVX512_CASE(10, 2)
                AVX512_CASE(11, 2) AVX512_CASE(12, 2))
AVX512_TILES(3, AVX512_CASE(1, 3) AVX512_CASE(2, 3) AVX512_CASE(3, 3) AVX512_CASE(4, 3) AVX512_CASE(5, 3)
                AVX512_CASE(6, 3) AVX512_CASE(7, 3) AVX512_CASE(8, 3))
AVX512_TILES(4, AVX512_CASE(1, 4) AVX512_CASE(2, 4) AVX512_CASE(3, 4) AVX512_CASE(4, 4) AVX512_CASE(5, 4)
                AVX512_CASE(6, 4))
#undef AVX512_TILES
#undef AVX512_CASE

/* 16 bf16 as float32. */
static inline AVX512 __attribute__((always_inline)) void avx512_widen16(float *dst, const ds_bf16 *src)
{
    _mm512_storeu_si512(dst, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)src)), 16));
}

/* n bf16 as float32; a tail past the last whole vector is the last 16 elements again (a
 * masked 16-bit load needs AVX512-BW), so a run of 28 takes two vectors, not one and 12
 * scalars. */
static AVX512 void avx512_widen(float *dst, const ds_bf16 *src, long n)
{
    long p = 0;
    for (; p + 16 <= n; p += 16) avx512_widen16(dst + p, src + p);
    if (p < n && n >= 16) avx512_widen16(dst + n - 16, src + n - 16);
    else
        for (; p < n; p++) dst[p] = ds_bf16_value(src[p]);
}

/* Blocks of A's rows widened in turn (widening_of, tiles of 16 rows: a whole tile of any
 * height). In a block, C walked 64 columns at a time in tiles of MR x NV <= 24 accumulators,
 * heights balanced as cpu_sgemm_avx512.c balances them. */
static AVX512 void avx512_bgemm_run(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                                    const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate,
                                    ds_bf16 *D, long ldd, int add)
{
    typedef void tile_fn(int, const float *, long, long, const ds_bf16 *, long, long, long, long, float *, long,
                         __mmask16, int, ds_bf16 *, long, int);
    static tile_fn *const fn_of[5] = {0, avx512_bf16_nv1, avx512_bf16_nv2, avx512_bf16_nv3, avx512_bf16_nv4};
    static const int mr_of[5] = {0, 16, 12, 8, 6};
    if (m <= 0 || n <= 0 || nseg * kseg <= 0) return;
    const widening wd = widening_of(m, nseg, kseg, sai, seg_a, 16);
    float stack[AW_MAX], *W = wd.floats <= AW_MAX ? stack : ds_xmalloc((size_t)wd.floats * sizeof *W);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);  /* FTZ, DAZ: what VDPBF16PS does whatever MXCSR says */
    for (long b0 = 0; b0 < m; b0 += wd.rows) {
        const long rows = m - b0 < wd.rows ? m - b0 : wd.rows;
        widen_block(avx512_widen, &wd, W, A + b0 * sai, rows, sai, seg_a, nseg, kseg);
        for (int n0 = 0; n0 < n; n0 += 64) {
            const int cols = n - n0 < 64 ? n - n0 : 64, nv = (cols + 15) / 16, MR = mr_of[nv];
            const __mmask16 last = (__mmask16)(0xffffu >> (16 * nv - cols));
            const long tiles = (rows + MR - 1) / MR, h = rows / tiles, taller = rows % tiles;
            for (long t = 0, i0 = 0; t < tiles; t++) {
                const int mr = (int)(h + (t < taller));
                fn_of[nv](mr, W + i0 * wd.ldw, wd.ldw, wd.seg_w, B + 2 * n0, ldb, seg_b, nseg, kseg,
                          C ? C + (b0 + i0) * ldc + n0 : NULL, ldc, last, accumulate,
                          D ? D + (b0 + i0) * ldd + n0 : NULL, ldd, add);
                i0 += mr;
            }
        }
    }
    _mm_setcsr(csr);
    if (W != stack) free(W);
}

AVX512 void ds_bgemm_avx512(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                            const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    avx512_bgemm_run(m, n, nseg, kseg, A, sai, seg_a, B, ldb, seg_b, C, ldc, accumulate, NULL, 0, 0);
}

/* The same with the sums rounded as round_n_avx512 rounds them, into D (added to it: add). */
AVX512 void ds_bgemm16_avx512(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                              const ds_bf16 *B, long ldb, long seg_b, const float *C, long ldc, int accumulate,
                              ds_bf16 *D, long ldd, int add)
{
    avx512_bgemm_run(m, n, nseg, kseg, A, sai, seg_a, B, ldb, seg_b, (float *)C, ldc, accumulate, D, ldd, add);
}

/* ---- AVX2 + FMA: tiles of MR rows by NV 8-column vectors (16 registers) ----
 * One half at a time keeps MR x NV accumulators, NV vectors of B and one of A in the
 * registers (6 x 2 at most). */

#define AVX2 __attribute__((target("avx2,fma")))

/* B's pair-row half for the columns of vector j: odd elements masked, even ones shifted up. */
static inline AVX2 __attribute__((always_inline)) __m256 b_half(const ds_bf16 *b, int j, int last_vec, int full,
                                                                __m256i last, int odd)
{
    const __m256i v = last_vec && !full ? _mm256_maskload_epi32((const int *)(b + 16 * j), last)
                                        : _mm256_loadu_si256((const __m256i *)(b + 16 * j));
    return _mm256_castsi256_ps(odd ? _mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u))
                                   : _mm256_slli_epi32(v, 16));
}

/* One MR x (8 NV) tile of C over the widened rows W (ldw floats apart, segment g at
 * g seg_w). */
static inline AVX2 __attribute__((always_inline)) void avx2_bf16_tile(const int MR, const int NV, const int FULL,
                                                                      const float *W, long ldw, long seg_w,
                                                                      const ds_bf16 *B, long ldb, long seg_b,
                                                                      long nseg, long kseg,
                                                                      float *C, long ldc, __m256i last, int acc)
{
    __m256 c[12][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < NV; j++) c[i][j] = _mm256_setzero_ps();
    for (long g = 0; g < nseg; g++) {
        const float *ws = W + g * seg_w;
        const ds_bf16 *bs = B + g * seg_b;
        for (long t = 0; t < kseg / 2; t++) {
            const ds_bf16 *b = bs + t * ldb;
            const float *w = ws + 2 * t;
#pragma GCC unroll 2
            for (int half = 1; half >= 0; half--) {  /* the odd elements, then the even */
                __m256 bv[2];
#pragma GCC unroll 2
                for (int j = 0; j < NV; j++) bv[j] = b_half(b, j, j == NV - 1, FULL, last, half);
#pragma GCC unroll 12
                for (int i = 0; i < MR; i++) {
                    const __m256 av = _mm256_broadcast_ss(w + i * ldw + half);
#pragma GCC unroll 2
                    for (int j = 0; j < NV; j++) c[i][j] = _mm256_fmadd_ps(av, bv[j], c[i][j]);
                }
            }
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < NV; j++) {
            float *cp = C + i * ldc + 8 * j;
            __m256 v = c[i][j];
            if (j == NV - 1 && !FULL) {
                if (acc) v = _mm256_add_ps(_mm256_maskload_ps(cp, last), v);
                _mm256_maskstore_ps(cp, last, v);
            } else {
                if (acc) v = _mm256_add_ps(_mm256_loadu_ps(cp), v);
                _mm256_storeu_ps(cp, v);
            }
        }
}

#define AVX2_CASE(mr, nv, full) \
    case mr: avx2_bf16_tile(mr, nv, full, W, ldw, seg_w, B, ldb, seg_b, nseg, kseg, C, ldc, last, acc); break;
#define AVX2_TILES(name, full)                                                                                      \
    static AVX2 void name(int mr, int nv, const float *W, long ldw, long seg_w, const ds_bf16 *B, long ldb,         \
                          long seg_b, long nseg, long kseg, float *C, long ldc, __m256i last, int acc)              \
    {                                                                                                               \
        if (nv == 1)                                                                                                \
            switch (mr) { AVX2_CASE(1, 1, full) AVX2_CASE(2, 1, full) AVX2_CASE(3, 1, full) AVX2_CASE(4, 1, full)  \
                          AVX2_CASE(5, 1, full) AVX2_CASE(6, 1, full) AVX2_CASE(7, 1, full) AVX2_CASE(8, 1, full)  \
                          AVX2_CASE(9, 1, full) AVX2_CASE(10, 1, full) AVX2_CASE(11, 1, full)                      \
                          AVX2_CASE(12, 1, full) }                                                                  \
        else                                                                                                        \
            switch (mr) { AVX2_CASE(1, 2, full) AVX2_CASE(2, 2, full) AVX2_CASE(3, 2, full) AVX2_CASE(4, 2, full)  \
                          AVX2_CASE(5, 2, full) AVX2_CASE(6, 2, full) }                                             \
    }
AVX2_TILES(avx2_bf16_tiles, 0)
AVX2_TILES(avx2_bf16_tiles_full, 1)
#undef AVX2_TILES
#undef AVX2_CASE

static inline AVX2 __attribute__((always_inline)) void avx2_widen8(float *dst, const ds_bf16 *src)
{
    _mm256_storeu_si256((__m256i *)dst, _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src)), 16));
}

/* n bf16 as float32, a tail as avx512_widen's: the last 8 elements again. */
static AVX2 void avx2_widen(float *dst, const ds_bf16 *src, long n)
{
    long p = 0;
    for (; p + 8 <= n; p += 8) avx2_widen8(dst + p, src + p);
    if (p < n && n >= 8) avx2_widen8(dst + n - 8, src + n - 8);
    else
        for (; p < n; p++) dst[p] = ds_bf16_value(src[p]);
}

/* Blocks of A's rows widened in turn (widening_of, tiles of 12 rows: a whole tile of either
 * height). In a block, C walked 64 columns at a time, each row tile serving the panel's
 * 16-column tiles one after another; heights balanced as cpu_sgemm_avx2.c balances them. */
AVX2 void ds_bgemm_avx2(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                        const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    static const int32_t lane_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    if (m <= 0 || n <= 0 || nseg * kseg <= 0) return;
    const widening wd = widening_of(m, nseg, kseg, sai, seg_a, 12);
    const long ldw = wd.ldw, seg_w = wd.seg_w;
    float stack[AW_MAX], *W = wd.floats <= AW_MAX ? stack : ds_xmalloc((size_t)wd.floats * sizeof *W);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);  /* FTZ, DAZ */
    for (long b0 = 0; b0 < m; b0 += wd.rows) {
        const long rows = m - b0 < wd.rows ? m - b0 : wd.rows;
        widen_block(avx2_widen, &wd, W, A + b0 * sai, rows, sai, seg_a, nseg, kseg);
        for (int n0 = 0; n0 < n; n0 += 64) {
            const int cols = n - n0 < 64 ? n - n0 : 64, MR = cols <= 8 ? 12 : 6;
            const long tiles = (rows + MR - 1) / MR, h = rows / tiles, taller = rows % tiles;
            for (long t = 0, i0 = 0; t < tiles; t++) {
                const int mr = (int)(h + (t < taller));
                for (int j0 = 0; j0 < cols; j0 += 16) {
                    const int w = cols - j0 < 16 ? cols - j0 : 16, nv = (w + 7) / 8;
                    const __m256i last = _mm256_loadu_si256((const __m256i *)(lane_mask + 8 - (w - 8 * (nv - 1))));
                    (w % 8 ? avx2_bf16_tiles : avx2_bf16_tiles_full)(mr, nv, W + i0 * ldw, ldw, seg_w,
                                                                     B + 2 * (n0 + j0), ldb, seg_b, nseg, kseg,
                                                                     C + (b0 + i0) * ldc + n0 + j0, ldc, last,
                                                                     accumulate);
                }
                i0 += mr;
            }
        }
    }
    _mm_setcsr(csr);
    if (W != stack) free(W);
}
#endif
