/* cpu_isa: which instruction set the CPU kernels use, decided once per process.
 *
 * The build targets the architecture's baseline (plain x86-64): no -march=native, so a
 * binary carried to another machine runs there. The hot kernels (GEMM register tiles, the
 * resize passes) are compiled once per instruction set with target attributes, and every
 * module that has such kernels picks its version from the level chosen here:
 *   - DS_CPU_KERNELS=plain|avx2|avx512|avx512bf16|amx in the environment forces one (it must be one
 *     the CPU and the operating system support);
 *   - otherwise the fastest the CPU supports (cpuid, with the OS's XSAVE state checked) of
 *     the exact levels (every level but amx): the highest, but where its vendor's cores were
 *     measured slower on it than on a lower one (ds_cpu_isa_default).
 * Every exact level computes bitwise the same results (backend/cpu_sgemm.h and cpu_bf16.h
 * state the rules), so the level changes speed, never numbers. amx is the one that does not:
 * its bf16 products are AMX's own sums, within a bound of the exact rule's (cpu_bf16.h), so it
 * is used only when asked for (docs/DESIGN.md §7); its fp32 is avx512bf16's. A function compiled for an instruction set carries
 * its name (avx2_tile_nv2, ds_cpu_loops_avx512_sgd, pass_vertical_avx2): the suite checks that no
 * other function of the tools uses an AVX instruction (tests/shell/test_cpu_kernels.sh).
 *
 * Each level is one row of two tables indexed by ds_cpu_isa, never an order to compare:
 *   - what the level is (cpu_isa.c): its names, the CPU features its code uses, whether it is
 *     exact. Code outside the backend asks for a feature (ds_cpu_isa_has), as resize.c does
 *     for its AVX2 passes;
 *   - what it runs (backend/cpu_kernels.c): its GEMM, bf16 and row-loop kernels.
 * The second lives in the backend because it names the backend's functions, and this module
 * is of the base layer (docs/DESIGN.md §1): cli and resize use it, and a program that
 * decodes images must not pull in the training kernels. A new level is an enum entry and a
 * row in each table. */
#ifndef DS_CPU_ISA_H
#define DS_CPU_ISA_H

typedef enum {
    DS_CPU_PLAIN,   /* portable C: any CPU, any architecture */
    DS_CPU_AVX2,    /* x86-64 with AVX2 and FMA (Haswell, Zen 1 and later) */
    DS_CPU_AVX512,  /* x86-64 with AVX-512F (Skylake-SP, Ice Lake, Zen 4 and later) */
    DS_CPU_AVX512BF16, /* AVX-512F with AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4 and later):
                          the avx512 kernels, and VDPBF16PS in the bf16 products */
    DS_CPU_AMX,     /* AVX512-BF16 with AMX-BF16 tiles (Sapphire Rapids and later Xeons), asked for
                       only: the avx512bf16 kernels, and TDPBF16PS in the bf16 products */
    DS_CPU_LEVELS
} ds_cpu_isa;

/* What a level's code needs from the CPU and its OS, one bit each. A level has a set of them
 * (its row in cpu_isa.c), and the CPU supports the level when it has all of them. */
typedef enum {
    DS_CPU_F_AVX2 = 1 << 0,        /* AVX2 and FMA */
    DS_CPU_F_AVX512F = 1 << 1,     /* AVX-512 Foundation */
    DS_CPU_F_AVX512BF16 = 1 << 2,  /* VDPBF16PS, VCVTNEPS2BF16 */
    DS_CPU_F_AMX_BF16 = 1 << 3,    /* AMX tiles with TDPBF16PS, and Linux's grant of their state */
    DS_CPU_F_END = 1 << 4
} ds_cpu_feature;

/* Decides the level (first call only) and returns 0, or -1 with an error naming what is
 * wrong with DS_CPU_KERNELS (an unknown name, or a level this CPU lacks). Tools call it at
 * start-up so that a bad setting is an error message, not a surprise later. */
int ds_cpu_isa_init(void);

/* The level in use. A bad DS_CPU_KERNELS that no one checked with ds_cpu_isa_init ends the
 * process here with the same message (ds_die). */
ds_cpu_isa ds_cpu_isa_get(void);

/* The level used when DS_CPU_KERNELS is unset, for a CPU of this vendor (cpuid's string) with
 * these features (DS_CPU_F_*): the highest exact level it has, but for one its vendor's cores
 * run slower than a lower one (cpu_isa.c's measured table: on Intel's, avx512 before
 * avx512bf16). */
ds_cpu_isa ds_cpu_isa_default(const char *vendor, unsigned features);
/* Whether this CPU (and its OS) can run the level's kernels. For amx this also asks Linux for
 * the tile state (arch_prctl), once for the process: without the grant the first tile
 * instruction would kill it. */
int ds_cpu_isa_supported(ds_cpu_isa isa);

/* Whether the level's results are the exact rules' bits (every level but amx). */
int ds_cpu_isa_exact(ds_cpu_isa isa);

/* Whether the level's code uses every feature of the mask (DS_CPU_F_*): so a module with
 * kernels of its own for one feature (resize.c's AVX2 passes) runs them on every level that
 * has it. */
int ds_cpu_isa_has(ds_cpu_isa isa, unsigned features);

/* "plain", "avx2+fma", "avx512", "avx512+bf16", "avx512+bf16+amx": the words start-up lines use. */
const char *ds_cpu_isa_name(ds_cpu_isa isa);

#endif
