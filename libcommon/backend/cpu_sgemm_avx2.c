/* cpu_sgemm_avx2: the AVX2 + FMA register tiles of ds_sgemm_seg (see cpu_sgemm_kernels.h).
 *
 * The same plan as the AVX-512 kernel with 8-wide vectors and 16 registers: C is walked 64
 * columns at a time, each (kd, 64) panel of B reused from L2 by every row tile; within a
 * panel a tile is MR rows by NV vectors (6 x 16 or 4 x 24 columns: 12 accumulators, NV
 * vectors of B and one broadcast of A in the 16 registers), and a row tile of A, read from
 * L1, serves the panel's column tiles one after another. Column tails are masked loads and
 * stores. Compiled for AVX2 + FMA by target attributes; the driver calls it only when
 * cpu_isa says the CPU has them. */
#include "cpu_sgemm_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <stdint.h>

#define AVX2 __attribute__((target("avx2,fma")))

/* Lanes [8 - cols, 16 - cols) of this give the mask of a vector's first `cols` lanes. */
static const int32_t lane_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

#define TILE_STORE(i, j)                                                             \
    if ((i) < MR && (j) < NV) {                                                      \
        float *cp_ = C + (i) * ldc + 8 * (j);                                        \
        __m256 v_ = c##i##_##j;                                                      \
        if ((j) == NV - 1 && !FULL) {                                                \
            if (acc) v_ = _mm256_add_ps(v_, _mm256_maskload_ps(cp_, last));          \
            _mm256_maskstore_ps(cp_, last, v_);                                      \
        } else {                                                                     \
            if (acc) v_ = _mm256_add_ps(v_, _mm256_loadu_ps(cp_));                   \
            _mm256_storeu_ps(cp_, v_);                                               \
        }                                                                            \
    }
#define TILE_ROW(i)                                                                  \
    if ((i) < MR) {                                                                  \
        __m256 av_ = _mm256_broadcast_ss(a + (i) * sai);                             \
        c##i##_0 = _mm256_fmadd_ps(av_, b0, c##i##_0);                               \
        if (NV > 1) c##i##_1 = _mm256_fmadd_ps(av_, b1, c##i##_1);                   \
        if (NV > 2) c##i##_2 = _mm256_fmadd_ps(av_, b2, c##i##_2);                   \
    }
#define TILE_DECL(i) __m256 c##i##_0 = z, c##i##_1 = z, c##i##_2 = z;
#define TILE_ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define TILE_STORE_ROW(i) TILE_STORE(i, 0) TILE_STORE(i, 1) TILE_STORE(i, 2)

typedef struct {
    long kseg, nseg, sai, sap, seg_a, ldb, seg_b, ldc;
    __m256i last;  /* lanes present in the tile's last vector */
    int acc;
} gemm_args;

/* One MR x (8 NV) tile of C (MR <= 12, NV <= 3), accumulators in named registers, the last
 * vector masked to the columns that exist unless FULL (a masked load costs extra micro-ops
 * on every step, and most tiles are whole vectors). MR, NV, SAI (the row stride of A when
 * known at compile time, else 0) and FULL are constants at every call. */
static inline AVX2 __attribute__((always_inline)) void tile(const int MR, const int NV, const long SAI,
                                                            const int FULL, const gemm_args *g,
                                                            const float *A, const float *B, float *C)
{
    const long sai = SAI ? SAI : g->sai, sap = g->sap, ldb = g->ldb, ldc = g->ldc, kseg = g->kseg;
    const __m256i last = g->last;
    const int acc = g->acc;
    const __m256 z = _mm256_setzero_ps();
    TILE_ALL(TILE_DECL)
    for (long sg = 0; sg < g->nseg; sg++) {
        const float *as = A + sg * g->seg_a, *bs = B + sg * g->seg_b;
        for (long p = 0; p < kseg; p++) {
            const float *b = bs + p * ldb, *a = as + p * sap;
            __m256 b0 = NV == 1 && !FULL ? _mm256_maskload_ps(b, last) : _mm256_loadu_ps(b), b1 = z, b2 = z;
            if (NV > 1) b1 = NV == 2 && !FULL ? _mm256_maskload_ps(b + 8, last) : _mm256_loadu_ps(b + 8);
            if (NV > 2) b2 = !FULL ? _mm256_maskload_ps(b + 16, last) : _mm256_loadu_ps(b + 16);
            TILE_ALL(TILE_ROW)
        }
    }
    TILE_ALL(TILE_STORE_ROW)
}

#define CASE(mr, nv, sai, full) case mr: tile(mr, nv, sai, full, g, A, B, C); break;
#define CASES_1(S, F) CASE(1, 1, S, F) CASE(2, 1, S, F) CASE(3, 1, S, F) CASE(4, 1, S, F) CASE(5, 1, S, F) \
    CASE(6, 1, S, F) CASE(7, 1, S, F) CASE(8, 1, S, F) CASE(9, 1, S, F) CASE(10, 1, S, F) CASE(11, 1, S, F) \
    CASE(12, 1, S, F)
#define CASES_2(S, F) CASE(1, 2, S, F) CASE(2, 2, S, F) CASE(3, 2, S, F) CASE(4, 2, S, F) CASE(5, 2, S, F) \
    CASE(6, 2, S, F)
#define CASES_3(S, F) CASE(1, 3, S, F) CASE(2, 3, S, F) CASE(3, 3, S, F) CASE(4, 3, S, F)

/* The row tail of a block takes the kernel of its exact height. */
#define DEF_TILES(nv, S, F, name)                                                              \
    static AVX2 void name(int mr, const gemm_args *g, const float *A, const float *B, float *C) \
    {                                                                                          \
        switch (mr) { CASES_##nv(S, F) }                                                       \
    }
DEF_TILES(1, 0, 0, avx2_tile_nv1) DEF_TILES(1, 1, 0, avx2_tile_nv1_unit)
DEF_TILES(2, 0, 0, avx2_tile_nv2) DEF_TILES(2, 1, 0, avx2_tile_nv2_unit)
DEF_TILES(3, 0, 0, avx2_tile_nv3) DEF_TILES(3, 1, 0, avx2_tile_nv3_unit)
DEF_TILES(1, 0, 1, avx2_tile_nv1_full) DEF_TILES(1, 1, 1, avx2_tile_nv1_unit_full)
DEF_TILES(2, 0, 1, avx2_tile_nv2_full) DEF_TILES(2, 1, 1, avx2_tile_nv2_unit_full)
DEF_TILES(3, 0, 1, avx2_tile_nv3_full) DEF_TILES(3, 1, 1, avx2_tile_nv3_unit_full)

typedef void tile_fn(int, const gemm_args *, const float *, const float *, float *);

AVX2 void ds_sgemm_avx2(long m, int n, long nseg, long kseg, const float *A, long sai, long sap, long seg_a,
                        const float *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    // Tile heights keep MR x NV <= 12 accumulators of the 16 vector registers.
    static const int mr_of[4] = {0, 12, 6, 4};
    // [full][unit]: [0] the last vector masked, [1] whole; [.][0] any row stride of A,
    // [.][1] stride 1 (a transposed A).
    static tile_fn *const fn_of[2][2][4] = {
        {{0, avx2_tile_nv1, avx2_tile_nv2, avx2_tile_nv3}, {0, avx2_tile_nv1_unit, avx2_tile_nv2_unit, avx2_tile_nv3_unit}},
        {{0, avx2_tile_nv1_full, avx2_tile_nv2_full, avx2_tile_nv3_full}, {0, avx2_tile_nv1_unit_full, avx2_tile_nv2_unit_full, avx2_tile_nv3_unit_full}}};
    gemm_args g = {kseg, nseg, sai, sap, seg_a, ldb, seg_b, ldc, _mm256_setzero_si256(), accumulate};
    for (int n0 = 0; n0 < n; n0 += 64) {
        // The panel's columns in equal tiles of at most 24, whole vectors but the last:
        // 64 as 24 + 24 + 16, 32 as 16 + 16, 40 as 24 + 16.
        const int cols = n - n0 < 64 ? n - n0 : 64, ntiles = (cols + 23) / 24;
        const int width = (cols / ntiles + 7) / 8 * 8;
        // The tallest tile any of them allows sets the row tiling, in heights that differ by
        // at most one (32 rows as 6 6 5 5 5 5, not 6 6 6 6 6 2: a thin tile has too few
        // accumulators to hide the FMA latency).
        const int MR = mr_of[(width + 7) / 8];
        const long tiles = (m + MR - 1) / MR, h = tiles ? m / tiles : 0, taller = tiles ? m % tiles : 0;
        for (long t = 0, i0 = 0; t < tiles; t++) {
            const int mr = (int)(h + (t < taller));
            for (int j0 = 0; j0 < cols; j0 += width) {
                int w = cols - j0 < width ? cols - j0 : width, nv = (w + 7) / 8;
                g.last = _mm256_loadu_si256((const __m256i *)(lane_mask + 8 - (w - 8 * (nv - 1))));
                fn_of[w % 8 == 0][sai == 1][nv](mr, &g, A + i0 * sai, B + n0 + j0, C + i0 * ldc + n0 + j0);
            }
            i0 += mr;
        }
    }
}

#endif
