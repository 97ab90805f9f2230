/* cpu_sgemm_avx512: the AVX-512 register tiles of ds_sgemm_seg (see cpu_sgemm_kernels.h).
 *
 * A plain register-blocked kernel without packing: C is walked 64 columns at a time, so
 * each (kd, 64) panel of B is reused by every row tile from L2, and a tile of MR rows by
 * NV 16-wide vectors (MR x NV <= 24 accumulators of the 32 vector registers) keeps its sums
 * in registers across the whole reduction. Compiled for AVX-512F by target attributes; the
 * driver calls it only when cpu_isa says the CPU has it. */
#include "cpu_sgemm_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx2,fma")))

/* Stores one accumulator vector of a tile: column vector j of NV, the last one masked. */
#define TILE_STORE(i, j)                                                             \
    if ((i) < MR && (j) < NV) {                                                      \
        float *cp_ = C + (i) * ldc + 16 * (j);                                       \
        __mmask16 k_ = (j) == NV - 1 ? last : 0xffff;                                \
        __m512 v_ = c##i##_##j;                                                      \
        if (acc) v_ = _mm512_add_ps(v_, _mm512_maskz_loadu_ps(k_, cp_));             \
        _mm512_mask_storeu_ps(cp_, k_, v_);                                          \
    }
#define TILE_ROW(i)                                                                  \
    if ((i) < MR) {                                                                  \
        __m512 av_ = _mm512_set1_ps(a[(i) * sai]);                                   \
        c##i##_0 = _mm512_fmadd_ps(av_, b0, c##i##_0);                               \
        if (NV > 1) c##i##_1 = _mm512_fmadd_ps(av_, b1, c##i##_1);                   \
        if (NV > 2) c##i##_2 = _mm512_fmadd_ps(av_, b2, c##i##_2);                   \
        if (NV > 3) c##i##_3 = _mm512_fmadd_ps(av_, b3, c##i##_3);                   \
    }
#define TILE_DECL(i) __m512 c##i##_0 = z, c##i##_1 = z, c##i##_2 = z, c##i##_3 = z;
#define TILE_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define TILE_STORE_ROW(i) TILE_STORE(i, 0) TILE_STORE(i, 1) TILE_STORE(i, 2) TILE_STORE(i, 3)

/* The operands of one product, as ds_sgemm_seg takes them. */
typedef struct {
    const float *A, *B;
    float *C;
    long kseg, nseg, sai, sap, seg_a, ldb, seg_b, ldc;
    __mmask16 last;  /* columns present in the tile's last vector */
    int acc;
} gemm_args;

/* One MR x (16 NV) tile of C (MR <= 16, NV <= 4), accumulators in named registers; the last
 * of the NV vectors is masked to the columns that exist. MR and NV are compile-time
 * constants at every call, so the unused accumulators and branches vanish. SAI, when not
 * 0, is the row stride of A known at compile time: the MR broadcasts then address A by
 * constant displacements instead of competing for general registers. */
static inline AVX512 __attribute__((always_inline)) void tile(const int MR, const int NV, const long SAI,
                                                              const gemm_args *g, const float *A,
                                                              const float *B, float *C)
{
    const long sai = SAI ? SAI : g->sai, sap = g->sap, ldb = g->ldb, ldc = g->ldc, kseg = g->kseg;
    const __mmask16 last = g->last;
    const int acc = g->acc;
    const __m512 z = _mm512_setzero_ps();
    TILE_ALL(TILE_DECL)
    for (long sg = 0; sg < g->nseg; sg++) {
        const float *as = A + sg * g->seg_a, *bs = B + sg * g->seg_b;
        for (long p = 0; p < kseg; p++) {
            const float *b = bs + p * ldb, *a = as + p * sap;
            __m512 b0 = NV == 1 ? _mm512_maskz_loadu_ps(last, b) : _mm512_loadu_ps(b), b1 = z, b2 = z, b3 = z;
            if (NV > 1) b1 = NV == 2 ? _mm512_maskz_loadu_ps(last, b + 16) : _mm512_loadu_ps(b + 16);
            if (NV > 2) b2 = NV == 3 ? _mm512_maskz_loadu_ps(last, b + 32) : _mm512_loadu_ps(b + 32);
            if (NV > 3) b3 = _mm512_maskz_loadu_ps(last, b + 48);
            TILE_ALL(TILE_ROW)
        }
    }
    TILE_ALL(TILE_STORE_ROW)
}

#define CASE(mr, nv, sai) case mr: tile(mr, nv, sai, g, A, B, C); break;
#define CASES_1(S) CASE(1, 1, S) CASE(2, 1, S) CASE(3, 1, S) CASE(4, 1, S) CASE(5, 1, S) CASE(6, 1, S) \
    CASE(7, 1, S) CASE(8, 1, S) CASE(9, 1, S) CASE(10, 1, S) CASE(11, 1, S) CASE(12, 1, S)            \
    CASE(13, 1, S) CASE(14, 1, S) CASE(15, 1, S) CASE(16, 1, S)
#define CASES_2(S) CASE(1, 2, S) CASE(2, 2, S) CASE(3, 2, S) CASE(4, 2, S) CASE(5, 2, S) CASE(6, 2, S) \
    CASE(7, 2, S) CASE(8, 2, S) CASE(9, 2, S) CASE(10, 2, S) CASE(11, 2, S) CASE(12, 2, S)
#define CASES_3(S) CASE(1, 3, S) CASE(2, 3, S) CASE(3, 3, S) CASE(4, 3, S) CASE(5, 3, S) CASE(6, 3, S) \
    CASE(7, 3, S) CASE(8, 3, S)
#define CASES_4(S) CASE(1, 4, S) CASE(2, 4, S) CASE(3, 4, S) CASE(4, 4, S) CASE(5, 4, S) CASE(6, 4, S)

/* The row tail of a block takes the kernel of its exact height. */
#define DEF_TILES(nv, S, name)                                                                   \
    static AVX512 void name(int mr, const gemm_args *g, const float *A, const float *B, float *C) \
    {                                                                                            \
        switch (mr) { CASES_##nv(S) }                                                            \
    }
DEF_TILES(1, 0, avx512_tile_nv1) DEF_TILES(1, 1, avx512_tile_nv1_unit) DEF_TILES(1, 16, avx512_tile_nv1_wide)
DEF_TILES(2, 0, avx512_tile_nv2) DEF_TILES(2, 1, avx512_tile_nv2_unit) DEF_TILES(2, 32, avx512_tile_nv2_wide)
DEF_TILES(3, 0, avx512_tile_nv3) DEF_TILES(3, 1, avx512_tile_nv3_unit) DEF_TILES(3, 48, avx512_tile_nv3_wide)
DEF_TILES(4, 0, avx512_tile_nv4) DEF_TILES(4, 1, avx512_tile_nv4_unit) DEF_TILES(4, 64, avx512_tile_nv4_wide)

typedef void tile_fn(int, const gemm_args *, const float *, const float *, float *);

AVX512 void ds_sgemm_avx512(long m, int n, long nseg, long kseg, const float *A, long sai, long sap, long seg_a,
                            const float *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    // Tile heights keep MR x NV <= 24 accumulators of the 32 vector registers.
    static const int mr_of[5] = {0, 16, 12, 8, 6};
    // [0]: any row stride of A; [1]: stride 1 (a transposed A); [2]: stride 16 nv, a
    // convolution's input when c = k (the common case in ResNets).
    static tile_fn *const fn_of[3][5] = {{0, avx512_tile_nv1, avx512_tile_nv2, avx512_tile_nv3, avx512_tile_nv4},
                                         {0, avx512_tile_nv1_unit, avx512_tile_nv2_unit, avx512_tile_nv3_unit, avx512_tile_nv4_unit},
                                         {0, avx512_tile_nv1_wide, avx512_tile_nv2_wide, avx512_tile_nv3_wide, avx512_tile_nv4_wide}};
    gemm_args g = {A, B, C, kseg, nseg, sai, sap, seg_a, ldb, seg_b, ldc, 0, accumulate};
    for (int n0 = 0; n0 < n; n0 += 64) {
        int cols = n - n0 < 64 ? n - n0 : 64, nv = (cols + 15) / 16, MR = mr_of[nv];
        g.last = (__mmask16)(0xffffu >> (16 * nv - cols));
        // Tile heights that differ by at most one rather than full tiles and a thin tail: 8
        // rows as 4 + 4, not 6 + 2 (a thin tile has too few accumulators to hide the FMA latency).
        const long tiles = (m + MR - 1) / MR, h = tiles ? m / tiles : 0, taller = tiles ? m % tiles : 0;
        for (long t = 0, i0 = 0; t < tiles; t++) {
            const int mr = (int)(h + (t < taller));
            fn_of[sai == 1 ? 1 : sai == 16 * nv ? 2 : 0][nv](mr, &g, A + i0 * sai, B + n0, C + i0 * ldc + n0);
            i0 += mr;
        }
    }
}

#endif
