/* cpu_kernels: what each CPU kernel set runs, one row per level of cpu_isa.h.
 *
 * A row names every kernel that differs by instruction set: the float32 and the bf16 GEMM
 * register tiles (behind the drivers of cpu_sgemm.c and cpu_bf16.c, which do the blocking,
 * the same for every level), the row loops of batch norm, SGD and the resized crop, and the
 * bf16 rounding and interleaving. A level that reuses another's kernel names it in its own
 * row (avx512bf16's float32 GEMM is avx512's: there is no bf16 instruction for a float32
 * product), so no code infers one level's kernels from another's place in the enum.
 *
 * The table is the backend's, not cpu_isa's, since it names the backend's functions and
 * cpu_isa is of the base layer (cpu_isa.h). A row exists where its kernels are compiled: the
 * x86 rows on x86, amx on x86-64 Linux; elsewhere those levels are never supported, so never
 * chosen. tests/unit/test_cpu_isa.c checks that every row of this architecture is whole. */
#ifndef DS_CPU_KERNELS_H
#define DS_CPU_KERNELS_H

#include <stddef.h>

#include "cpu_bf16.h"
#include "cpu_isa.h"
#include "cpu_loops.h"
#include "cpu_sgemm_kernels.h"

typedef struct {
    ds_sgemm_kernel *sgemm;  /* cpu_sgemm_kernels.h: C (+)= A B in float32, no blocking */
    ds_bgemm_kernel *bgemm;  /* cpu_bf16.h: C (+)= A B on bf16 operands, no blocking */
    ds_bgemm16_kernel *bgemm16;  /* the same rounded to bf16 as it is stored; NULL: bgemm, then the rounding */
    const ds_cpu_loops *loops;
    void (*bf16_round_n)(ds_bf16 *dst, const float *src, size_t n);  /* ds_bf16_round_n */
    void (*bf16_interleave)(ds_bf16 *dst, const ds_bf16 *a, const ds_bf16 *b, size_t n);  /* ds_bf16_interleave */
} ds_cpu_kernels;

/* The kernels of a level (one the CPU supports). */
const ds_cpu_kernels *ds_cpu_kernels_for(ds_cpu_isa isa);

#endif
