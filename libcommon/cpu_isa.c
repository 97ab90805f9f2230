/* cpu_isa: see cpu_isa.h. */
#include "cpu_isa.h"

#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* One row per level, in order of preference: the default is the last exact row the CPU
 * supports. A level's kernels are its row in backend/cpu_kernels.c. */
static const struct {
    const char *env;    /* its name in DS_CPU_KERNELS */
    const char *name;   /* as start-up lines and a checkpoint's /kernels say it */
    unsigned features;  /* DS_CPU_F_*: what its code uses */
    int exact;          /* its results are the exact rules' bits */
} sets[DS_CPU_LEVELS] = {
    [DS_CPU_PLAIN] = {"plain", "plain", 0, 1},
    [DS_CPU_AVX2] = {"avx2", "avx2+fma", DS_CPU_F_AVX2, 1},
    [DS_CPU_AVX512] = {"avx512", "avx512", DS_CPU_F_AVX2 | DS_CPU_F_AVX512F, 1},
    [DS_CPU_AVX512BF16] = {"avx512bf16", "avx512+bf16", DS_CPU_F_AVX2 | DS_CPU_F_AVX512F | DS_CPU_F_AVX512BF16, 1},
    [DS_CPU_AMX] = {"amx", "avx512+bf16+amx",
                    DS_CPU_F_AVX2 | DS_CPU_F_AVX512F | DS_CPU_F_AVX512BF16 | DS_CPU_F_AMX_BF16, 0},
};

static int valid(ds_cpu_isa isa) { return isa >= 0 && isa < DS_CPU_LEVELS; }

#if defined(__linux__) && defined(__x86_64__)
/* The tile data state is off for a Linux process until it asks for it (ARCH_REQ_XCOMP_PERM
 * for XFEATURE_XTILEDATA); the grant is the process's, its threads included. libgcc's cpuid
 * probe has already checked that the OS saves the tile state (XCR0 bits 17 and 18). */
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static int amx_granted;
static void ask_for_tiles(void)
{
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    amx_granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
static int amx_usable(void)
{
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return 0;
    pthread_once(&amx_once, ask_for_tiles);
    return amx_granted;
}
#endif

/* Whether this CPU and its OS give one feature. libgcc's cpuid probe also checks XGETBV: a
 * feature counts only when the OS saves its registers. */
static int cpu_has(ds_cpu_feature f)
{
    switch (f) {
#if defined(__x86_64__) || defined(__i386__)
    case DS_CPU_F_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DS_CPU_F_AVX512F:
        return __builtin_cpu_supports("avx512f");
    case DS_CPU_F_AVX512BF16:
        return __builtin_cpu_supports("avx512bf16");
#if defined(__linux__) && defined(__x86_64__)
    case DS_CPU_F_AMX_BF16:
        return amx_usable();
#endif
#endif
    default:
        return 0;
    }
}

int ds_cpu_isa_supported(ds_cpu_isa isa)
{
    if (!valid(isa)) return 0;
    // Lowest bit first, so that the tiles are asked for (amx_usable) only on a CPU that has
    // every other feature of the level.
    for (unsigned f = 1; f < DS_CPU_F_END; f <<= 1)
        if ((sets[isa].features & f) && !cpu_has((ds_cpu_feature)f)) return 0;
    return 1;
}

int ds_cpu_isa_exact(ds_cpu_isa isa) { return valid(isa) && sets[isa].exact; }

int ds_cpu_isa_has(ds_cpu_isa isa, unsigned features)
{
    return valid(isa) && (sets[isa].features & features) == features;
}

const char *ds_cpu_isa_name(ds_cpu_isa isa) { return valid(isa) ? sets[isa].name : "unknown"; }

/* Exact rows a vendor's cores run slower than an exact row below them, measured: the
 * default passes over them there (DS_CPU_KERNELS still asks for them; the bits are the same
 * either way). */
static const struct {
    const char *vendor;  /* cpuid's vendor string */
    ds_cpu_isa slower;
} passed_over[] = {
    /* Emerald Rapids: VDPBF16PS trained ResNet-50 and ResNet-20 in bf16 slower than the
     * avx512 row's FMA form of the same rule (bench/ENGINE.md, Kernel sets by vendor) */
    {"GenuineIntel", DS_CPU_AVX512BF16},
};

static int passed_over_by(const char *vendor, ds_cpu_isa isa)
{
    for (size_t i = 0; i < sizeof passed_over / sizeof *passed_over; i++)
        if (passed_over[i].slower == isa && vendor && !strcmp(vendor, passed_over[i].vendor)) return 1;
    return 0;
}

ds_cpu_isa ds_cpu_isa_default(const char *vendor, unsigned features)
{
    for (int l = DS_CPU_LEVELS - 1; l > 0; l--)
        if (sets[l].exact && (sets[l].features & ~features) == 0 && !passed_over_by(vendor, (ds_cpu_isa)l))
            return (ds_cpu_isa)l;
    return DS_CPU_PLAIN;
}

/* cpuid's vendor string ("GenuineIntel", "AuthenticAMD"), or "" where there is none. */
static void cpu_vendor(char out[13])
{
    memset(out, 0, 13);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    memcpy(out, &b, 4), memcpy(out + 4, &d, 4), memcpy(out + 8, &c, 4);
#endif
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static ds_cpu_isa chosen = DS_CPU_PLAIN;
static char problem[256];  /* why DS_CPU_KERNELS cannot be used; empty when it can */

/* The DS_CPU_KERNELS names, as "plain, avx2" (only_supported: those this CPU runs) or as
 * "plain, avx2 or avx512" (every level): for the error messages. */
static void name_list(char *buf, size_t cap, int only_supported)
{
    buf[0] = 0;
    for (int l = 0; l < DS_CPU_LEVELS; l++)
        if (!only_supported || ds_cpu_isa_supported((ds_cpu_isa)l)) {
            size_t len = strlen(buf);
            const char *sep = !len ? "" : only_supported || l < DS_CPU_LEVELS - 1 ? ", " : " or ";
            snprintf(buf + len, cap - len, "%s%s", sep, sets[l].env);
        }
}

static void decide(void)
{
    /* the exact rows' features only: AMX's would ask Linux for the tiles */
    unsigned features = 0;
    for (unsigned f = 1; f < DS_CPU_F_AMX_BF16; f <<= 1)
        if (cpu_has((ds_cpu_feature)f)) features |= f;
    char vendor[13];
    cpu_vendor(vendor);
    chosen = ds_cpu_isa_default(vendor, features);
    const char *want = getenv("DS_CPU_KERNELS");
    if (!want || !*want) return;
    char have[64], every[64];
    name_list(have, sizeof have, 1);
    for (int l = 0; l < DS_CPU_LEVELS; l++) {
        if (strcmp(want, sets[l].env)) continue;
        if (ds_cpu_isa_supported((ds_cpu_isa)l))
            chosen = (ds_cpu_isa)l;
        else
            snprintf(problem, sizeof problem, "DS_CPU_KERNELS=%s: this CPU cannot run the %s kernels (it can run: %s)",
                     want, sets[l].name, have);
        return;
    }
    name_list(every, sizeof every, 0);
    snprintf(problem, sizeof problem, "DS_CPU_KERNELS=%.40s: unknown kernel set (%s; this CPU can run: %s)", want,
             every, have);
}

int ds_cpu_isa_init(void)
{
    pthread_once(&once, decide);
    return problem[0] ? ds_err("%s", problem) : 0;
}

ds_cpu_isa ds_cpu_isa_get(void)
{
    pthread_once(&once, decide);
    if (problem[0]) ds_die("%s", problem);
    return chosen;
}
