/* sgemm_small: C (+)= A * B for the skinny, cache-resident products of the CPU convolutions.
 *
 * Debian's OpenBLAS picks its AVX2 kernels on CPUs it does not know and is slow when one
 * side has only 16-64 columns (the channel counts of small ResNets). This is a plain
 * register-blocked AVX-512 kernel without packing: C is walked 64 columns at a time, each
 * (kd, 64) panel of B reused by every row tile, so the panel should fit in L2 (a single
 * reduction longer than 512 is cut into blocks of 256 for that). Without AVX-512 a plain
 * loop computes the same sums.
 *
 * Every element of C is one sum over p = 0..kd-1 in order, whatever m, n and the tiling:
 * results do not depend on how a caller splits the rows across threads. */
#ifndef DS_SGEMM_SMALL_H
#define DS_SGEMM_SMALL_H

/* C (m, n) = A (m, kd) * B (kd, n)  (+= when accumulate)
 * A(i, p) = A[i * sai + p * sap]: row-major A has (sai, sap) = (lda, 1), a transposed
 * column-major one (1, lda); one of sai, sap must be 1. B and C are row-major. */
void ds_sgemm_small(long m, int n, long kd, const float *A, long sai, long sap, const float *B,
                    long ldb, float *C, long ldc, int accumulate);

/* The same product with the reduction cut into nseg segments of kseg: segment g of A starts
 * seg_a floats, and of B seg_b floats, after segment g-1. A convolution's window rows (or
 * its output rows) are such segments of its input, so one tile of C stays in registers
 * across all of them. The sum order is still segment by segment, p in order. */
void ds_sgemm_seg(long m, int n, long nseg, long kseg, const float *A, long sai, long sap, long seg_a,
                  const float *B, long ldb, long seg_b, float *C, long ldc, int accumulate);

/* Tests: 1 makes every product take the plain loops even where AVX-512 is there. */
void ds_sgemm_force_plain(int on);

#endif
