/* cpu_sgemm: C (+)= A * B for the skinny, cache-resident products of the CPU convolutions
 * and the fully connected layer.
 *
 * Register-blocked kernels without packing, one per instruction set (plain C, AVX2 + FMA,
 * AVX-512; cpu_isa.h chooses): C is walked 64 columns at a time, each (kd, 64) panel of B
 * reused by every row tile, so the panel should fit in L2 (a single reduction longer than
 * 512 is cut into blocks of 256 for that). BLAS cannot stand in: A's and B's rows may
 * overlap (a convolution window's row stride is smaller than its length), which no lda/ldb
 * can express, and a BLAS picks its kernels, and so its rounding, by CPU.
 *
 * The sum rule, the same on every instruction set and for any m, n and tiling, so results
 * are bitwise the same on every CPU and do not depend on how a caller splits the rows
 * across threads: every element of C is
 *     S = fma(A(i, p), B(p, j), S) over segment g, then p, in order, from S = 0;
 *     C = accumulate ? C + S : S
 * except that a single segment longer than 512 is summed in blocks of 256 that way, each
 * block's S added to C in order. */
#ifndef DS_SGEMM_SMALL_H
#define DS_SGEMM_SMALL_H

#include "cpu_isa.h"

/* C (m, n) = A (m, kd) * B (kd, n)  (+= when accumulate)
 * A(i, p) = A[i * sai + p * sap]: row-major A has (sai, sap) = (lda, 1), a transposed
 * column-major one (1, lda). B and C are row-major. */
void ds_sgemm_small(long m, int n, long kd, const float *A, long sai, long sap, const float *B,
                    long ldb, float *C, long ldc, int accumulate);

/* The same product with the reduction cut into nseg segments of kseg: segment g of A starts
 * seg_a floats, and of B seg_b floats, after segment g-1. A convolution's window rows (or
 * its output rows) are such segments of its input, so one tile of C stays in registers
 * across all of them. */
void ds_sgemm_seg(long m, int n, long nseg, long kseg, const float *A, long sai, long sap, long seg_a,
                  const float *B, long ldb, long seg_b, float *C, long ldc, int accumulate);

/* ds_sgemm_seg on the kernels of a given level (one the CPU supports), whatever the
 * process's level: for tests that compare the levels. */
void ds_sgemm_seg_isa(ds_cpu_isa isa, long m, int n, long nseg, long kseg, const float *A, long sai, long sap,
                      long seg_a, const float *B, long ldb, long seg_b, float *C, long ldc, int accumulate);

#endif
