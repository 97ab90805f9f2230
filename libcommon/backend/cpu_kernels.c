/* cpu_kernels: see cpu_kernels.h. The interleave has a plain, an AVX2 and an AVX-512
 * version; past avx512 only the bf16 products and rounding have instructions of
 * their own (avx512bf16: VDPBF16PS and VCVTNEPS2BF16; amx: TDPBF16PS), the rest is avx512's. */
#include "cpu_kernels.h"

static const ds_cpu_kernels sets[DS_CPU_LEVELS] = {
    [DS_CPU_PLAIN] = {.sgemm = ds_sgemm_plain,
                      .bgemm = ds_bgemm_plain,
                      .loops = &ds_cpu_loops_plain,
                      .bf16_round_n = ds_bf16_round_n_plain,
                      .bf16_interleave = ds_bf16_interleave_plain},
#if defined(__x86_64__) || defined(__i386__)
    [DS_CPU_AVX2] = {.sgemm = ds_sgemm_avx2,
                     .bgemm = ds_bgemm_avx2,
                     .loops = &ds_cpu_loops_avx2,
                     .bf16_round_n = ds_bf16_round_n_avx2,
                     .bf16_interleave = ds_bf16_interleave_avx2},
    [DS_CPU_AVX512] = {.sgemm = ds_sgemm_avx512,
                       .bgemm = ds_bgemm_avx512,
                       .bgemm16 = ds_bgemm16_avx512,
                       .loops = &ds_cpu_loops_avx512,
                       .bf16_round_n = ds_bf16_round_n_avx512,
                       .bf16_interleave = ds_bf16_interleave_avx512},
    [DS_CPU_AVX512BF16] = {.sgemm = ds_sgemm_avx512,
                           .bgemm = ds_bgemm_avx512bf16,
                           .bgemm16 = ds_bgemm16_avx512bf16,
                           .loops = &ds_cpu_loops_avx512bf16,
                           .bf16_round_n = ds_bf16_round_n_avx512bf16,
                           .bf16_interleave = ds_bf16_interleave_avx512},
#endif
#if defined(__x86_64__) && defined(__linux__)
    [DS_CPU_AMX] = {.sgemm = ds_sgemm_avx512,
                    .bgemm = ds_bgemm_amx,
                    .loops = &ds_cpu_loops_avx512bf16,
                    .bf16_round_n = ds_bf16_round_n_avx512bf16,
                    .bf16_interleave = ds_bf16_interleave_avx512},
#endif
};

const ds_cpu_kernels *ds_cpu_kernels_for(ds_cpu_isa isa) { return &sets[isa]; }
