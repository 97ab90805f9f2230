/* cpu_loops: see cpu_loops.h. One source, cpu_loops.inc, compiled here once per level. */
#include "cpu_loops.h"

#include <math.h>
#include <string.h>

#define LOOPS loops_plain
#define LOOPS_TARGET
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET

#if defined(__x86_64__) || defined(__i386__)
#define LOOPS loops_avx2
#define LOOPS_TARGET __attribute__((target("avx2,fma")))
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET

#define LOOPS loops_avx512
#define LOOPS_TARGET __attribute__((target("avx512f,avx2,fma")))
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET
#endif

const ds_cpu_loops *ds_cpu_loops_for(ds_cpu_isa isa)
{
#if defined(__x86_64__) || defined(__i386__)
    if (isa >= DS_CPU_AVX512) return &loops_avx512;  /* avx512bf16: the same loops */
    if (isa == DS_CPU_AVX2) return &loops_avx2;
#endif
    return &loops_plain;
}
