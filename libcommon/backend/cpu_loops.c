/* cpu_loops: see cpu_loops.h. One source, cpu_loops.inc, compiled here once per instruction
 * set; backend/cpu_kernels.c says which level runs which. */
#include "cpu_loops.h"

#include <math.h>
#include <string.h>

#define LOOPS ds_cpu_loops_plain
#define LOOPS_TARGET
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET

#if defined(__x86_64__) || defined(__i386__)
#define LOOPS ds_cpu_loops_avx2
#define LOOPS_TARGET __attribute__((target("avx2,fma")))
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET

#define LOOPS ds_cpu_loops_avx512
#define LOOPS_TARGET __attribute__((target("avx512f,avx2,fma")))
#include "cpu_loops.inc"
#undef LOOPS
#undef LOOPS_TARGET
#endif
