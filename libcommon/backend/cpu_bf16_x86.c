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
#include <string.h>

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

static inline __attribute__((target("avx512f"), always_inline)) __mmask16 head(size_t left)
{
    return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
}

__attribute__((target("avx512f"))) void ds_bf16_round_n_avx512(ds_bf16 *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 k = head(n - i);
        const __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(round_hi(_mm512_maskz_loadu_epi32(k, src + i)), 16));
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

#define BG_NAME ds_bgemm_avx512
#define BG_TARGET __attribute__((target("avx512f,avx2,fma")))
#define BG_NATIVE 0
#include "cpu_bf16_avx512.inc"
#undef BG_NAME
#undef BG_TARGET
#undef BG_NATIVE

#define BG_NAME ds_bgemm_avx512bf16
#define BG_TARGET __attribute__((target("avx512f,avx512bf16,avx2,fma")))
#define BG_NATIVE 1
#include "cpu_bf16_avx512.inc"
#undef BG_NAME
#undef BG_TARGET
#undef BG_NATIVE

/* ---- AVX2 + FMA: tiles of MR rows by NV 8-column vectors (16 registers) ---- */

#define AVX2 __attribute__((target("avx2,fma")))

static inline AVX2 __attribute__((always_inline)) void avx2_bf16_tile(const int MR, const int NV, const ds_bf16 *A,
                                                                      long sai, long seg_a, const ds_bf16 *B,
                                                                      long ldb, long seg_b, long nseg, long kseg,
                                                                      float *C, long ldc, __m256i last, int acc)
{
    __m256 c[8][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < NV; j++) c[i][j] = _mm256_setzero_ps();
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    for (long g = 0; g < nseg; g++) {
        const ds_bf16 *as = A + g * seg_a, *bs = B + g * seg_b;
        for (long t = 0; t < kseg / 2; t++) {
            const ds_bf16 *b = bs + t * ldb, *a = as + 2 * t;
            __m256 bo[2], be[2];
#pragma GCC unroll 2
            for (int j = 0; j < NV; j++) {
                const __m256i v = j == NV - 1 ? _mm256_maskload_epi32((const int *)(b + 16 * j), last)
                                              : _mm256_loadu_si256((const __m256i *)(b + 16 * j));
                bo[j] = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
                be[j] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            }
#pragma GCC unroll 8
            for (int i = 0; i < MR; i++) {
                uint32_t pair;
                memcpy(&pair, a + i * sai, sizeof pair);
                const __m256 ao = _mm256_castsi256_ps(_mm256_set1_epi32((int)(pair & 0xffff0000u)));
                const __m256 ae = _mm256_castsi256_ps(_mm256_set1_epi32((int)(pair << 16)));
#pragma GCC unroll 2
                for (int j = 0; j < NV; j++) c[i][j] = _mm256_fmadd_ps(ao, bo[j], c[i][j]);
#pragma GCC unroll 2
                for (int j = 0; j < NV; j++) c[i][j] = _mm256_fmadd_ps(ae, be[j], c[i][j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int j = 0; j < NV; j++) {
            float *cp = C + i * ldc + 8 * j;
            __m256 v = c[i][j];
            if (j == NV - 1) {
                if (acc) v = _mm256_add_ps(_mm256_maskload_ps(cp, last), v);
                _mm256_maskstore_ps(cp, last, v);
            } else {
                if (acc) v = _mm256_add_ps(_mm256_loadu_ps(cp), v);
                _mm256_storeu_ps(cp, v);
            }
        }
}

#define AVX2_CASE(mr, nv) \
    case mr: avx2_bf16_tile(mr, nv, A, sai, seg_a, B, ldb, seg_b, nseg, kseg, C, ldc, last, acc); break;
static AVX2 void avx2_bf16_tiles(int mr, int nv, const ds_bf16 *A, long sai, long seg_a, const ds_bf16 *B, long ldb,
                                 long seg_b, long nseg, long kseg, float *C, long ldc, __m256i last, int acc)
{
    if (nv == 1)
        switch (mr) { AVX2_CASE(1, 1) AVX2_CASE(2, 1) AVX2_CASE(3, 1) AVX2_CASE(4, 1) AVX2_CASE(5, 1)
                      AVX2_CASE(6, 1) AVX2_CASE(7, 1) AVX2_CASE(8, 1) }
    else
        switch (mr) { AVX2_CASE(1, 2) AVX2_CASE(2, 2) AVX2_CASE(3, 2) AVX2_CASE(4, 2) AVX2_CASE(5, 2)
                      AVX2_CASE(6, 2) }
}
#undef AVX2_CASE

AVX2 void ds_bgemm_avx2(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                        const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    static const int32_t lane_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);  /* FTZ, DAZ */
    for (int n0 = 0; n0 < n; n0 += 16) {
        const int cols = n - n0 < 16 ? n - n0 : 16, nv = (cols + 7) / 8, MR = nv == 1 ? 8 : 6;
        const __m256i last = _mm256_loadu_si256((const __m256i *)(lane_mask + 8 - (cols - 8 * (nv - 1))));
        const long tiles = (m + MR - 1) / MR, h = tiles ? m / tiles : 0, taller = tiles ? m % tiles : 0;
        for (long t = 0, i0 = 0; t < tiles; t++) {
            const int mr = (int)(h + (t < taller));
            avx2_bf16_tiles(mr, nv, A + i0 * sai, sai, seg_a, B + 2 * n0, ldb, seg_b, nseg, kseg, C + i0 * ldc + n0,
                            ldc, last, accumulate);
            i0 += mr;
        }
    }
    _mm_setcsr(csr);
}
#endif
