/* cpu_sgemm: see cpu_sgemm.h. The driver and the plain kernel; the vector kernels live
 * in cpu_sgemm_avx2.c and cpu_sgemm_avx512.c. */
#include "cpu_sgemm.h"

#include "cpu_isa.h"
#include "cpu_kernels.h"

#include <math.h>

/* The plain kernel: the same sums as the vector ones, one fmaf at a time, each row's
 * columns in blocks of 64 partial sums. It is what CPUs without AVX2 run, and the
 * reference the vector kernels are tested against bit for bit. */
void ds_sgemm_plain(long m, int n, long nseg, long kseg, const float *A, long sai, long sap, long seg_a, const float *B,
                    long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    for (long i = 0; i < m; i++)
        for (int j0 = 0; j0 < n; j0 += 64) {
            const int nb = n - j0 < 64 ? n - j0 : 64;
            float s[64] = {0}, *c = C + i * ldc + j0;
            for (long sg = 0; sg < nseg; sg++)
                for (long p = 0; p < kseg; p++) {
                    const float a = A[i * sai + sg * seg_a + p * sap], *b = B + sg * seg_b + p * ldb + j0;
                    for (int j = 0; j < nb; j++) s[j] = fmaf(a, b[j], s[j]);
                }
            for (int j = 0; j < nb; j++) c[j] = accumulate ? c[j] + s[j] : s[j];
        }
}

/* Past this reduction length a single segment is cut into blocks of KC, each summed from 0
 * and added to C in order, so that a block's (KC, 64) panel of B stays in L2. The rule is
 * the driver's, the same for every level: it changes the rounding, so no kernel may choose
 * its own. */
#define KC_MAX 512
#define KC 256

void ds_sgemm_seg_isa(ds_cpu_isa isa, long m, int n, long nseg, long kseg, const float *A, long sai, long sap,
                      long seg_a, const float *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    ds_sgemm_kernel *kernel = ds_cpu_kernels_for(isa)->sgemm;
    if (nseg == 1 && kseg > KC_MAX) {
        // 64 columns at a time, so that their (m, 64) block of C stays in L2 across blocks
        for (int n0 = 0; n0 < n; n0 += 64)
            for (long k0 = 0; k0 < kseg; k0 += KC)
                kernel(m, n - n0 < 64 ? n - n0 : 64, 1, kseg - k0 < KC ? kseg - k0 : KC, A + k0 * sap, sai, sap, 0,
                       B + k0 * ldb + n0, ldb, 0, C + n0, ldc, accumulate || k0 > 0);
        return;
    }
    kernel(m, n, nseg, kseg, A, sai, sap, seg_a, B, ldb, seg_b, C, ldc, accumulate);
}

void ds_sgemm_seg(long m, int n, long nseg, long kseg, const float *A, long sai, long sap, long seg_a,
                  const float *B, long ldb, long seg_b, float *C, long ldc, int accumulate)
{
    ds_sgemm_seg_isa(ds_cpu_isa_get(), m, n, nseg, kseg, A, sai, sap, seg_a, B, ldb, seg_b, C, ldc, accumulate);
}

void ds_sgemm_small(long m, int n, long kd, const float *A, long sai, long sap, const float *B,
                    long ldb, float *C, long ldc, int accumulate)
{
    ds_sgemm_seg(m, n, 1, kd, A, sai, sap, 0, B, ldb, 0, C, ldc, accumulate);
}
