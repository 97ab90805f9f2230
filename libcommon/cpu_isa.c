/* cpu_isa: see cpu_isa.h. */
#include "cpu_isa.h"

#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* The names DS_CPU_KERNELS takes, by level. */
static const char *const env_names[DS_CPU_LEVELS] = {"plain", "avx2", "avx512", "avx512bf16", "amx"};
static const char *const long_names[DS_CPU_LEVELS] = {"plain", "avx2+fma", "avx512", "avx512+bf16",
                                                      "avx512+bf16+amx"};

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

int ds_cpu_isa_supported(ds_cpu_isa isa)
{
    switch (isa) {
    case DS_CPU_PLAIN:
        return 1;
#if defined(__x86_64__) || defined(__i386__)
    // libgcc's cpuid probe also checks XGETBV: a level counts only when the OS saves its
    // registers.
    case DS_CPU_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case DS_CPU_AVX512:
        return __builtin_cpu_supports("avx512f") && ds_cpu_isa_supported(DS_CPU_AVX2);
    case DS_CPU_AVX512BF16:
        return __builtin_cpu_supports("avx512bf16") && ds_cpu_isa_supported(DS_CPU_AVX512);
#if defined(__linux__) && defined(__x86_64__)
    case DS_CPU_AMX:
        return ds_cpu_isa_supported(DS_CPU_AVX512BF16) && amx_usable();
#endif
#endif
    default:
        return 0;
    }
}

int ds_cpu_isa_exact(ds_cpu_isa isa) { return isa != DS_CPU_AMX; }

const char *ds_cpu_isa_name(ds_cpu_isa isa)
{
    return isa >= 0 && isa < DS_CPU_LEVELS ? long_names[isa] : "unknown";
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static ds_cpu_isa chosen = DS_CPU_PLAIN;
static char problem[256];  /* why DS_CPU_KERNELS cannot be used; empty when it can */

/* What this CPU supports, as "plain, avx2": for the error message. */
static void supported_list(char *buf, size_t cap)
{
    buf[0] = 0;
    for (int l = 0; l < DS_CPU_LEVELS; l++)
        if (ds_cpu_isa_supported((ds_cpu_isa)l)) {
            size_t len = strlen(buf);
            snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", env_names[l]);
        }
}

static void decide(void)
{
    for (int l = DS_CPU_LEVELS - 1; l >= 0; l--)
        if (ds_cpu_isa_exact((ds_cpu_isa)l) && ds_cpu_isa_supported((ds_cpu_isa)l)) {
            chosen = (ds_cpu_isa)l;
            break;
        }
    const char *want = getenv("DS_CPU_KERNELS");
    if (!want || !*want) return;
    char have[64];
    supported_list(have, sizeof have);
    for (int l = 0; l < DS_CPU_LEVELS; l++) {
        if (strcmp(want, env_names[l])) continue;
        if (ds_cpu_isa_supported((ds_cpu_isa)l))
            chosen = (ds_cpu_isa)l;
        else
            snprintf(problem, sizeof problem, "DS_CPU_KERNELS=%s: this CPU cannot run the %s kernels (it can run: %s)",
                     want, long_names[l], have);
        return;
    }
    snprintf(problem, sizeof problem, "DS_CPU_KERNELS=%.40s: unknown kernel set (plain, avx2, avx512, avx512bf16 or amx; this CPU can run: %s)",
             want, have);
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
