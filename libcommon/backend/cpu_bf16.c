/* cpu_bf16: see cpu_bf16.h. The rounding, the packing, the driver and the plain kernel; the
 * vector kernels live in cpu_bf16_x86.c. */
#include "cpu_bf16.h"

#include "cpu_kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

/* NaN: quiet; zero and denormals: a zero of the sign; else to nearest even (ds_bf16_from). */
ds_bf16 ds_bf16_round(float x) { return ds_bf16_from(x); }

void ds_bf16_round_n_plain(ds_bf16 *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = ds_bf16_round(src[i]);
}

void ds_bf16_round_n(ds_bf16 *dst, const float *src, size_t n)
{
    ds_cpu_kernels_for(ds_cpu_isa_get())->bf16_round_n(dst, src, n);
}

void ds_bf16_interleave_plain(ds_bf16 *dst, const ds_bf16 *a, const ds_bf16 *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst[2 * i] = a ? a[i] : 0;
        dst[2 * i + 1] = b ? b[i] : 0;
    }
}

void ds_bf16_interleave(ds_bf16 *dst, const ds_bf16 *a, const ds_bf16 *b, size_t n)
{
    ds_cpu_kernels_for(ds_cpu_isa_get())->bf16_interleave(dst, a, b, n);
}

/* 8 x 8 blocks in SSE2 (every x86-64 CPU has it): three rounds of unpacks, 16-, 32- and
 * 64-bit, written out so that the block stays in registers; the edges one element at a time.
 * The rows come from memory that is rarely in cache (a layer's activations or gradients), read
 * 16 bytes of 8 rows at a time, which the hardware's prefetchers do not follow: each block first
 * asks for the rows TRANSPOSE_AHEAD further on. Copies only, so no kernel set can change a bit. */
#define TRANSPOSE_AHEAD 32
#if defined(__SSE2__)
static inline void transpose8x8(ds_bf16 *a, long ld, const ds_bf16 *const *rw, int j0)
{
    const __m128i r0 = _mm_loadu_si128((const __m128i *)(rw[0] + j0)), r1 = _mm_loadu_si128((const __m128i *)(rw[1] + j0)),
                  r2 = _mm_loadu_si128((const __m128i *)(rw[2] + j0)), r3 = _mm_loadu_si128((const __m128i *)(rw[3] + j0)),
                  r4 = _mm_loadu_si128((const __m128i *)(rw[4] + j0)), r5 = _mm_loadu_si128((const __m128i *)(rw[5] + j0)),
                  r6 = _mm_loadu_si128((const __m128i *)(rw[6] + j0)), r7 = _mm_loadu_si128((const __m128i *)(rw[7] + j0));
    /* rows side by side in pairs (16-bit), then fours (32-bit): u0 holds columns 0-1 of rows
     * 0-3, u1 columns 2-3, u2 4-5, u3 6-7; v the same of rows 4-7 */
    const __m128i t0 = _mm_unpacklo_epi16(r0, r1), t1 = _mm_unpackhi_epi16(r0, r1), t2 = _mm_unpacklo_epi16(r2, r3),
                  t3 = _mm_unpackhi_epi16(r2, r3), t4 = _mm_unpacklo_epi16(r4, r5), t5 = _mm_unpackhi_epi16(r4, r5),
                  t6 = _mm_unpacklo_epi16(r6, r7), t7 = _mm_unpackhi_epi16(r6, r7);
    const __m128i u0 = _mm_unpacklo_epi32(t0, t2), u1 = _mm_unpackhi_epi32(t0, t2), u2 = _mm_unpacklo_epi32(t1, t3),
                  u3 = _mm_unpackhi_epi32(t1, t3), v0 = _mm_unpacklo_epi32(t4, t6), v1 = _mm_unpackhi_epi32(t4, t6),
                  v2 = _mm_unpacklo_epi32(t5, t7), v3 = _mm_unpackhi_epi32(t5, t7);
    ds_bf16 *d = a + (long)j0 * ld;
    _mm_storeu_si128((__m128i *)d, _mm_unpacklo_epi64(u0, v0));
    _mm_storeu_si128((__m128i *)(d + ld), _mm_unpackhi_epi64(u0, v0));
    _mm_storeu_si128((__m128i *)(d + 2 * ld), _mm_unpacklo_epi64(u1, v1));
    _mm_storeu_si128((__m128i *)(d + 3 * ld), _mm_unpackhi_epi64(u1, v1));
    _mm_storeu_si128((__m128i *)(d + 4 * ld), _mm_unpacklo_epi64(u2, v2));
    _mm_storeu_si128((__m128i *)(d + 5 * ld), _mm_unpackhi_epi64(u2, v2));
    _mm_storeu_si128((__m128i *)(d + 6 * ld), _mm_unpacklo_epi64(u3, v3));
    _mm_storeu_si128((__m128i *)(d + 7 * ld), _mm_unpackhi_epi64(u3, v3));
}
#endif

void ds_bf16_transpose(ds_bf16 *a, long ld, const ds_bf16 *const *row, long mr, int k)
{
    long i0 = 0;
#if defined(__SSE2__)
    for (; i0 + 8 <= mr; i0 += 8) {
        for (long i = i0 + TRANSPOSE_AHEAD; i < i0 + TRANSPOSE_AHEAD + 8 && i < mr; i++)
            for (int j = 0; j < k; j += 32) _mm_prefetch((const char *)(row[i] + j), _MM_HINT_T0);
        int j0 = 0;
        for (; j0 + 8 <= k; j0 += 8) transpose8x8(a + i0, ld, row + i0, j0);
        for (int j = j0; j < k; j++)
            for (long i = i0; i < i0 + 8; i++) a[j * ld + i] = row[i][j];
    }
#endif
    for (int j = 0; j < k; j++)
        for (long i = i0; i < mr; i++) a[j * ld + i] = row[i][j];
}

void ds_bf16_pack_pairs(ds_bf16 *dst, long ldb, const float *src, long sp, long sj, long k, int n)
{
    for (long t = 0; t < (k + 1) / 2; t++) {
        ds_bf16 *row = dst + t * ldb;
        const float *s0 = src + 2 * t * sp, *s1 = s0 + sp;
        const int odd = 2 * t + 1 < k;
        for (int j = 0; j < n; j++) {
            row[2 * j] = ds_bf16_round(s0[j * sj]);
            row[2 * j + 1] = odd ? ds_bf16_round(s1[j * sj]) : 0;
        }
    }
}

/* A result or input below the normal range as the instructions see it: a zero of its sign. */
static inline float ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* The plain kernel: the rule of cpu_bf16.h one fmaf at a time, each row's columns in blocks
 * of 64 partial sums. The reference the vector kernels are tested against bit for bit. */
void ds_bgemm_plain(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a, const ds_bf16 *B,
                    long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    for (long i = 0; i < m; i++)
        for (int j0 = 0; j0 < n; j0 += 64) {
            const int nb = n - j0 < 64 ? n - j0 : 64;
            float s[64] = {0}, *c = C + i * ldc + j0;
            for (long g = 0; g < nseg; g++)
                for (long t = 0; t < kseg / 2; t++) {
                    const ds_bf16 *a = A + i * sai + g * seg_a + 2 * t, *b = B + g * seg_b + t * ldb + 2 * j0;
                    const float a0 = ds_bf16_value(a[0]), a1 = ds_bf16_value(a[1]);
                    for (int j = 0; j < nb; j++) {
                        s[j] = ftz(fmaf(a1, ds_bf16_value(b[2 * j + 1]), s[j]));
                        s[j] = ftz(fmaf(a0, ds_bf16_value(b[2 * j]), s[j]));
                    }
                }
            for (int j = 0; j < nb; j++) c[j] = accumulate ? ftz(ftz(c[j]) + s[j]) : s[j];
        }
}

void ds_bgemm_seg_with(ds_bgemm_kernel *kernel, long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai,
                       long seg_a, const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    if (nseg == 1 && kseg > BGEMM_KC_MAX) {
        // 64 columns at a time, so that their (m, 64) block of C stays in L2 across blocks
        for (int n0 = 0; n0 < n; n0 += 64)
            for (long k0 = 0; k0 < kseg; k0 += BGEMM_KC)
                kernel(m, n - n0 < 64 ? n - n0 : 64, 1, kseg - k0 < BGEMM_KC ? kseg - k0 : BGEMM_KC, A + k0, sai, 0,
                       B + k0 / 2 * ldb + 2 * n0, ldb, 0, C + n0, ldc, accumulate || k0 > 0);
        return;
    }
    kernel(m, n, nseg, kseg, A, sai, seg_a, B, ldb, seg_b, C, ldc, accumulate);
}

void ds_bgemm_seg_isa(ds_cpu_isa isa, long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                      const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    ds_bgemm_seg_with(ds_cpu_kernels_for(isa)->bgemm, m, n, nseg, kseg, A, sai, seg_a, B, ldb, seg_b, C, ldc, accumulate);
}

void ds_bgemm_seg(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a, const ds_bf16 *B,
                  long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    ds_bgemm_seg_isa(ds_cpu_isa_get(), m, n, nseg, kseg, A, sai, seg_a, B, ldb, seg_b, C, ldc, accumulate);
}

/* ds_bgemm_seg_with's blocks with the last one rounded into D as it is stored; or, on a level
 * whose kernel cannot, the float32 sums in scratch rounded afterwards (and added to D by the
 * level's add loop, a row at a time through a buffer of bf16). */
void ds_bgemm_seg16_isa(ds_cpu_isa isa, long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai,
                        long seg_a, const ds_bf16 *B, long ldb, long seg_b, ds_bf16 *D, long ldd, int add,
                        float *scratch)
{
    const ds_cpu_kernels *k = ds_cpu_kernels_for(isa);
    if (!k->bgemm16) {
        ds_bgemm_seg_with(k->bgemm, m, n, nseg, kseg, A, sai, seg_a, B, ldb, seg_b, scratch, n, 0);
        for (long i = 0; i < m; i++) {
            if (!add) {
                k->bf16_round_n(D + i * ldd, scratch + i * n, (size_t)n);
                continue;
            }
            enum { PIECE = 256 };
            ds_bf16 piece[PIECE];
            for (int j0 = 0; j0 < n; j0 += PIECE) {
                const int nj = n - j0 < PIECE ? n - j0 : PIECE;
                k->bf16_round_n(piece, scratch + i * n + j0, (size_t)nj);
                k->loops->add_bf16(D + i * ldd + j0, piece, 0, (size_t)nj);
            }
        }
        return;
    }
    if (nseg == 1 && kseg > BGEMM_KC_MAX) {
        for (int n0 = 0; n0 < n; n0 += 64) {
            const int nb = n - n0 < 64 ? n - n0 : 64;
            for (long k0 = 0; k0 < kseg; k0 += BGEMM_KC) {
                const long kb = kseg - k0 < BGEMM_KC ? kseg - k0 : BGEMM_KC;
                const ds_bf16 *a = A + k0, *b = B + k0 / 2 * ldb + 2 * n0;
                if (k0 + kb < kseg) k->bgemm(m, nb, 1, kb, a, sai, 0, b, ldb, 0, scratch + n0, n, k0 > 0);
                else k->bgemm16(m, nb, 1, kb, a, sai, 0, b, ldb, 0, scratch + n0, n, 1, D + n0, ldd, add);
            }
        }
        return;
    }
    k->bgemm16(m, n, nseg, kseg, A, sai, seg_a, B, ldb, seg_b, NULL, 0, 0, D, ldd, add);
}

void ds_bgemm_seg16(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a, const ds_bf16 *B,
                    long ldb, long seg_b, ds_bf16 *D, long ldd, int add, float *scratch)
{
    ds_bgemm_seg16_isa(ds_cpu_isa_get(), m, n, nseg, kseg, A, sai, seg_a, B, ldb, seg_b, D, ldd, add, scratch);
}
