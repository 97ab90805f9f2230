/* cpu_loops: see cpu_loops.h. One source, cpu_loops.inc, compiled here once per instruction
 * set; backend/cpu_kernels.c says which level runs which. */
#include "cpu_loops.h"

#include <math.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <string.h>

/* LOOPS_BN_NV: how many 16-channel vectors bn_sums takes in one slice (cpu_loops.inc). Each
 * keeps four 16-float vectors (two shifts, two sums): NV 1 fills the baseline's 16 xmm
 * registers, NV 2 AVX2's 16 ymm, NV 4 half of AVX-512's 32 zmm (the shifts are only read, so
 * where registers run short they come from L1). */
#define LOOPS ds_cpu_loops_plain
#define LOOPS_TARGET
#define LOOPS_BN_NV 1
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET
#undef LOOPS_BN_NV

#if defined(__x86_64__) || defined(__i386__)
#define LOOPS ds_cpu_loops_avx2
#define LOOPS_TARGET __attribute__((target("avx2,fma")))
#define LOOPS_BN_NV 2
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET
#undef LOOPS_BN_NV

#define LOOPS ds_cpu_loops_avx512
#define LOOPS_TARGET __attribute__((target("avx512f,avx2,fma")))
#define LOOPS_BN_NV 4
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET
#undef LOOPS_BN_NV

/* avx512's loops again, those on bf16 activations rounding with VCVTNEPS2BF16 */
#define LOOPS ds_cpu_loops_avx512bf16
#define LOOPS_TARGET __attribute__((target("avx512f,avx512bf16,avx2,fma")))
#define LOOPS_NATIVE_BF16 1
#define LOOPS_BN_NV 4
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET
#undef LOOPS_BN_NV
#undef LOOPS_NATIVE_BF16
#endif
