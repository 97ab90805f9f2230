/* cpu_bf16: bfloat16 operands for the CPU's products under --precision bf16: the rounding
 * of float32 to bf16, and C (+)= A * B with bf16 A and B and float32 sums.
 *
 * The exact rule, the same bits on every kernel set (plain C, AVX2, AVX-512F, AVX512-BF16):
 * it is what the AVX512-BF16 instructions compute, measured on AMD Zen 5 against Intel's
 * pseudocode and an Intel probe (VDPBF16PS: two float32 FMAs per pair, the odd element
 * first), so the kernels that have those instructions use them and the others emulate them.
 *   - Rounding (VCVTNEPS2BF16): to nearest even; a denormal becomes a zero of its sign; a NaN
 *     stays a NaN (quiet).
 *   - Products: the reduction runs in pairs (p, p + 1), p even. For every element of C,
 *         S = 0;  for each segment g, each pair:  S = ftz(fma(A(i,p+1), B(p+1,j), S));
 *                                                 S = ftz(fma(A(i,p),   B(p,j),   S))
 *         C = accumulate ? ftz(daz(C) + S) : S
 *     where ftz / daz turn a denormal result / input into a zero of its sign (the
 *     instruction computes with DAZ and FTZ whatever MXCSR says). A bf16 x bf16 product is
 *     exact in float32, so each step is one rounding. As ds_sgemm_seg, a single segment
 *     longer than BGEMM_KC_MAX is summed in blocks of BGEMM_KC, each added to C in order.
 * The amx level (asked for only) is not the rule: TDPBF16PS adds a step's 16 pairs of a row
 * (a whole tile row; a segment's last step may be shorter) to the accumulator with an adder of
 * its own (measured on a Xeon: no sequence of float32 operations matches it from 4 products on),
 * denormal inputs and results as zeros, and an accumulating call starts from C. Its results are
 * held within the bound
 *     |C_amx - C_rule| <= (K + 2 ceil(K / 32) + 64) 2^-24 (|C0| + sum |a b|) + K 2^-125
 * (K the products per element, C0 the accumulated C): both sums' rounding over K terms, and per
 * step of 32 products an adder that keeps at least 24 bits below the step's largest term
 * (tests/unit/test_bf16.c: on the hardware, and on a model of the tiles on every CPU).
 * Operand layouts, in bf16 elements:
 *   - A (m, k): row i of segment g at A + i sai + g seg_a, its k elements contiguous (pairs
 *     are 32-bit words). k and seg_a even.
 *   - B (k, n) "pair-packed": pair row t (elements 2t and 2t + 1 of the reduction) at
 *     B + t ldb, holding (B(2t, j), B(2t+1, j)) at 2j, 2j + 1; ldb >= 2n; segment g at
 *     g seg_b. ds_bf16_pack_pairs makes it from a row-major float32 matrix. */
#ifndef DS_CPU_BF16_H
#define DS_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_isa.h"

typedef uint16_t ds_bf16;

#define BGEMM_KC_MAX 1024
#define BGEMM_KC 512

/* A float32's bits, and the float32 of given bits. */
static inline uint32_t ds_float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float ds_bits_float(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* x rounded to bf16 as above; its value back as float32. ds_bf16_from is the same rounding
 * inline, written without branches so that loops over it vectorise. */
ds_bf16 ds_bf16_round(float x);
static inline ds_bf16 ds_bf16_from(float x)
{
    union { float f; uint32_t u; } v = {.f = x};
    const uint32_t u = v.u, nan = (u & 0x7fffffffu) > 0x7f800000u, tiny = (u & 0x7f800000u) == 0;
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
    return (ds_bf16)(nan ? (u >> 16) | 0x40 : tiny ? (u >> 16) & 0x8000 : rounded);
}
static inline float ds_bf16_value(ds_bf16 h)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* Whether a bf16 is > 0 as a float: 0x0001 to 0x7f80, the positive values and +Inf (zeros,
 * negatives and NaNs are not, as float32's `x > 0` says): the ReLU's mask. */
static inline int ds_bf16_positive(ds_bf16 h) { return (uint16_t)(h - 1) < 0x7f80; }

/* dst[i] = round(src[i]) for n elements (the vector kernels where the CPU has them). */
void ds_bf16_round_n(ds_bf16 *dst, const float *src, size_t n);

/* dst[2i] = a[i], dst[2i + 1] = b[i] for n elements (a or b NULL: zeros): a pair row of a
 * pair-packed B made from two rows of bf16. */
void ds_bf16_interleave(ds_bf16 *dst, const ds_bf16 *a, const ds_bf16 *b, size_t n);

/* a[j ld + i] = row[i][j] for i < mr, j < k: rows of k elements transposed. */
void ds_bf16_transpose(ds_bf16 *a, long ld, const ds_bf16 *const *row, long mr, int k);

/* B pair-packed from float32: rows [0, k) of src (row p at src + p sp, column j at j sj), n
 * columns, into dst with pair rows ldb apart; an odd k gets a zero row k. */
void ds_bf16_pack_pairs(ds_bf16 *dst, long ldb, const float *src, long sp, long sj, long k, int n);

/* C (m, n) = A (m, nseg x kseg) * B (+= when accumulate), by the rule above. */
void ds_bgemm_seg(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a, const ds_bf16 *B,
                  long ldb, long seg_b, float *C, long ldc, int accumulate);
/* The same on the kernels of a given level (one the CPU supports): for tests that compare. */
void ds_bgemm_seg_isa(ds_cpu_isa isa, long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                      const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate);

/* D (m, n), rows ldd apart, = A * B by the rule, each element rounded to bf16 as
 * ds_bf16_round_n rounds it: the bits of ds_bgemm_seg into a float32 C, then ds_bf16_round_n;
 * with add, D += that rounded product, each sum rounded (the bits of the add op, cpu_loops'
 * add_bf16, on D and the rounded product). A level whose kernel rounds its sums as it stores
 * them (ds_bgemm16_kernel) writes no float32 C; the others, and a reduction blocked as above,
 * sum in `scratch` (m x n float32, rows n apart) first. */
void ds_bgemm_seg16(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a, const ds_bf16 *B,
                    long ldb, long seg_b, ds_bf16 *D, long ldd, int add, float *scratch);
void ds_bgemm_seg16_isa(ds_cpu_isa isa, long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai,
                        long seg_a, const ds_bf16 *B, long ldb, long seg_b, ds_bf16 *D, long ldd, int add,
                        float *scratch);

/* The per-level kernels (no blocking of their own), which backend/cpu_kernels.c puts in its
 * rows, and the driver over any of them (the tests run it over their model of the AMX tiles).
 * A ds_bgemm16_kernel is the same product with its result, S or (accumulate) C + S, rounded
 * into D instead of stored into C (which it then only reads); with add, that rounded result is
 * added to D's element and the sum rounded again. */
typedef void ds_bgemm_kernel(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                             const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate);
typedef void ds_bgemm16_kernel(long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai, long seg_a,
                               const ds_bf16 *B, long ldb, long seg_b, const float *C, long ldc, int accumulate,
                               ds_bf16 *D, long ldd, int add);
void ds_bgemm_seg_with(ds_bgemm_kernel *kernel, long m, int n, long nseg, long kseg, const ds_bf16 *A, long sai,
                       long seg_a, const ds_bf16 *B, long ldb, long seg_b, float *C, long ldc, int accumulate);
ds_bgemm_kernel ds_bgemm_plain;  /* the rule one fmaf at a time: the reference of the others */
#if defined(__x86_64__) || defined(__i386__)
ds_bgemm_kernel ds_bgemm_avx2, ds_bgemm_avx512, ds_bgemm_avx512bf16;
ds_bgemm16_kernel ds_bgemm16_avx512, ds_bgemm16_avx512bf16;
#endif
#if defined(__x86_64__) && defined(__linux__)
ds_bgemm_kernel ds_bgemm_amx;
#endif
void ds_bf16_round_n_plain(ds_bf16 *dst, const float *src, size_t n);
void ds_bf16_interleave_plain(ds_bf16 *dst, const ds_bf16 *a, const ds_bf16 *b, size_t n);
#if defined(__x86_64__) || defined(__i386__)
void ds_bf16_round_n_avx512(ds_bf16 *dst, const float *src, size_t n);
void ds_bf16_round_n_avx512bf16(ds_bf16 *dst, const float *src, size_t n);
void ds_bf16_round_n_avx2(ds_bf16 *dst, const float *src, size_t n);
void ds_bf16_interleave_avx2(ds_bf16 *dst, const ds_bf16 *a, const ds_bf16 *b, size_t n);
void ds_bf16_interleave_avx512(ds_bf16 *dst, const ds_bf16 *a, const ds_bf16 *b, size_t n);
#endif

#endif
