/* cpu_sgemm_kernels: the per-instruction-set kernels behind ds_sgemm_seg (cpu_sgemm.c), which
 * backend/cpu_kernels.c puts in its rows; internal to the backend.
 *
 * Each computes, for every element of C (m, n),
 *     S = fma(A(i, p), B(p, j), S) over segment g = 0..nseg-1, then p = 0..kseg-1, from S = 0
 *     C = accumulate ? C + S : S
 * with no blocking of the reduction of its own: the driver has cut long reductions into
 * blocks already, the same way for every level. Only which elements are computed together
 * (the register tile) is the kernel's choice, so every level gives the same bits. */
#ifndef DS_SGEMM_KERNELS_H
#define DS_SGEMM_KERNELS_H

typedef void ds_sgemm_kernel(long m, int n, long nseg, long kseg, const float *A, long sai, long sap,
                             long seg_a, const float *B, long ldb, long seg_b, float *C, long ldc,
                             int accumulate);

ds_sgemm_kernel ds_sgemm_plain;   /* cpu_sgemm.c: one fmaf at a time, the reference of the others */
#if defined(__x86_64__) || defined(__i386__)
ds_sgemm_kernel ds_sgemm_avx2;    /* cpu_sgemm_avx2.c: 8-wide FMA register tiles */
ds_sgemm_kernel ds_sgemm_avx512;  /* cpu_sgemm_avx512.c: 16-wide FMA register tiles */
#endif

#endif
