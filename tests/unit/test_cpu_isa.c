/* The CPU kernel sets as tables (cpu_isa.c: what a level is and needs; backend/cpu_kernels.c:
 * what it runs). Every row compiled on this architecture must be whole, not only the rows of
 * the levels this CPU runs: a row missing a kernel would otherwise fail only on a CPU that has
 * its level, as a jump to NULL. And a level's features decide its support: a CPU that runs a
 * level runs every level whose features are a part of its own. */
#include "../check.h"
#include "cpu_isa.h"
#include "backend/cpu_kernels.h"

#include <string.h>

/* Whether this architecture compiles the level's kernels (cpu_kernels.h: where a row exists). */
static int compiled_here(ds_cpu_isa isa)
{
    switch (isa) {
    case DS_CPU_PLAIN:
        return 1;
#if defined(__x86_64__) || defined(__i386__)
    case DS_CPU_AVX2:
    case DS_CPU_AVX512:
    case DS_CPU_AVX512BF16:
        return 1;
#endif
#if defined(__x86_64__) && defined(__linux__)
    case DS_CPU_AMX:
        return 1;
#endif
    default:
        return 0;
    }
}

static void test_rows_whole(void)
{
    check_begin("every_kernel_row_is_whole");
    for (int l = 0; l < DS_CPU_LEVELS; l++) {
        const ds_cpu_isa isa = (ds_cpu_isa)l;
        CHECK(!ds_cpu_isa_supported(isa) || compiled_here(isa), "%s: supported, but no kernels here",
              ds_cpu_isa_name(isa));
        if (!compiled_here(isa)) continue;
        const ds_cpu_kernels *k = ds_cpu_kernels_for(isa);
        CHECK(k->sgemm && k->bgemm && k->loops && k->bf16_round_n && k->bf16_interleave,
              "%s: a kernel missing (sgemm %d, bgemm %d, loops %d, round %d, interleave %d)", ds_cpu_isa_name(isa),
              !!k->sgemm, !!k->bgemm, !!k->loops, !!k->bf16_round_n, !!k->bf16_interleave);
        if (!k->loops) continue;
        const ds_cpu_loops *L = k->loops;
        CHECK(L->bn_sums && L->bn_apply && L->bn_dx && L->bn_sums_bf16 && L->bn_apply_bf16 && L->bn_dx_bf16 &&
                  L->add_bf16 && L->resized_crop_tile && L->sgd,
              "%s: a row loop missing", ds_cpu_isa_name(isa));
    }
    check_end();
}

/* The features of a level, read back through ds_cpu_isa_has one bit at a time. */
static unsigned features_of(ds_cpu_isa isa)
{
    unsigned f = 0;
    for (unsigned b = 1; b < DS_CPU_F_END; b <<= 1)
        if (ds_cpu_isa_has(isa, b)) f |= b;
    return f;
}

static void test_features(void)
{
    check_begin("features_decide_support");
    CHECK(features_of(DS_CPU_PLAIN) == 0, "plain uses features %#x", features_of(DS_CPU_PLAIN));
    CHECK(ds_cpu_isa_supported(DS_CPU_PLAIN), "plain unsupported");
    CHECK(!ds_cpu_isa_has(DS_CPU_LEVELS, 0) && !ds_cpu_isa_supported(DS_CPU_LEVELS), "a level past the table");
    for (int l = 0; l < DS_CPU_LEVELS; l++) {
        const ds_cpu_isa a = (ds_cpu_isa)l;
        const unsigned fa = features_of(a);
        CHECK(ds_cpu_isa_has(a, fa), "%s: not its own features together", ds_cpu_isa_name(a));
        CHECK(strcmp(ds_cpu_isa_name(a), "unknown"), "level %d has no name", l);
        for (int m = 0; m < DS_CPU_LEVELS; m++) {
            const ds_cpu_isa b = (ds_cpu_isa)m;
            if (m == l) continue;
            CHECK(strcmp(ds_cpu_isa_name(a), ds_cpu_isa_name(b)), "%s: two levels of that name", ds_cpu_isa_name(a));
            CHECK(fa != features_of(b) || ds_cpu_isa_exact(a) != ds_cpu_isa_exact(b),
                  "%s and %s: the same features and exactness", ds_cpu_isa_name(a), ds_cpu_isa_name(b));
            if ((features_of(b) & ~fa) == 0)
                CHECK(!ds_cpu_isa_supported(a) || ds_cpu_isa_supported(b), "%s supported, %s (fewer features) not",
                      ds_cpu_isa_name(a), ds_cpu_isa_name(b));
        }
    }
    check_end();
}

/* The default by vendor and features: the highest exact level, but avx512 before
 * avx512bf16 on Intel's cores (cpu_isa.c's measured table); amx never (not exact). */
static void test_default(void)
{
    check_begin("default_by_vendor_and_features");
    const unsigned f2 = DS_CPU_F_AVX2, f512 = f2 | DS_CPU_F_AVX512F, fbf = f512 | DS_CPU_F_AVX512BF16,
                   famx = fbf | DS_CPU_F_AMX_BF16;
    static const char *const vendors[] = {"AuthenticAMD", "GenuineIntel", ""};
    for (int v = 0; v < 3; v++) {
        const char *who = vendors[v];
        const int intel = !strcmp(who, "GenuineIntel");
        CHECK(ds_cpu_isa_default(who, 0) == DS_CPU_PLAIN, "%s, no features: %s", who,
              ds_cpu_isa_name(ds_cpu_isa_default(who, 0)));
        CHECK(ds_cpu_isa_default(who, f2) == DS_CPU_AVX2, "%s, avx2: %s", who, ds_cpu_isa_name(ds_cpu_isa_default(who, f2)));
        CHECK(ds_cpu_isa_default(who, f512) == DS_CPU_AVX512, "%s, avx512f: %s", who,
              ds_cpu_isa_name(ds_cpu_isa_default(who, f512)));
        const ds_cpu_isa want = intel ? DS_CPU_AVX512 : DS_CPU_AVX512BF16;
        CHECK(ds_cpu_isa_default(who, fbf) == want, "%s, avx512bf16: %s, want %s", who,
              ds_cpu_isa_name(ds_cpu_isa_default(who, fbf)), ds_cpu_isa_name(want));
        CHECK(ds_cpu_isa_default(who, famx) == want, "%s, amx: %s, want %s", who,
              ds_cpu_isa_name(ds_cpu_isa_default(who, famx)), ds_cpu_isa_name(want));
        /* a feature missing below: the level that needs it is not taken */
        CHECK(ds_cpu_isa_default(who, DS_CPU_F_AVX512F) == DS_CPU_PLAIN, "%s, avx512f without avx2: %s", who,
              ds_cpu_isa_name(ds_cpu_isa_default(who, DS_CPU_F_AVX512F)));
    }
    check_end();
}

int main(void)
{
    for (int l = 0; l < DS_CPU_LEVELS; l++)
        printf("  %-16s features %#x, %s, %s\n", ds_cpu_isa_name((ds_cpu_isa)l), features_of((ds_cpu_isa)l),
               ds_cpu_isa_exact((ds_cpu_isa)l) ? "exact" : "not exact",
               ds_cpu_isa_supported((ds_cpu_isa)l) ? "supported here" : "not this CPU");
    test_rows_whole();
    test_features();
    test_default();
    return check_exit();
}
