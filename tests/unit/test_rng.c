/* Philox4x32-10 against the published known-answer vectors (Random123's kat_vectors), and
 * the properties ds relies on: streams are pure functions of (seed, purpose, id). */
#include "../check.h"
#include "rng.h"

#include <string.h>

int main(void)
{
    check_begin("philox4x32-10 known answers");
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
         0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
         0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        ds_philox4x32(out, kat[t], kat[t] + 4);
        for (int i = 0; i < 4; i++)
            CHECK(out[i] == kat[t][6 + i], "vector %d word %d: got %08x want %08x", t, i, out[i], kat[t][6 + i]);
    }
    check_end();

    check_begin("rng streams are pure functions of (seed, purpose, id)");
    ds_rng a, b, c;
    ds_rng_init(&a, 42, DS_RNG_EPOCH, 7);
    ds_rng_init(&b, 42, DS_RNG_EPOCH, 7);
    ds_rng_init(&c, 42, DS_RNG_EPOCH, 8);
    int same_c = 0;
    for (int i = 0; i < 100; i++) {
        uint32_t x = ds_rng_u32(&a), y = ds_rng_u32(&b), z = ds_rng_u32(&c);
        CHECK(x == y, "draw %d differs", i);
        same_c += x == z;
    }
    CHECK(same_c < 3, "different ids gave %d equal draws of 100", same_c);
    check_end();

    check_begin("uniform, below and normal have the right moments");
    ds_rng r;
    ds_rng_init(&r, 1, DS_RNG_DATA, 0);
    double s = 0, s2 = 0, ns = 0, ns2 = 0;
    int n = 200000, hist[10] = {0};
    for (int i = 0; i < n; i++) {
        double u = ds_rng_float(&r);
        CHECK(u >= 0 && u < 1, "float out of range: %g", u);
        s += u, s2 += u * u;
        double z = ds_rng_normal(&r);
        ns += z, ns2 += z * z;
        hist[ds_rng_below(&r, 10)]++;
    }
    CHECK(fabs(s / n - 0.5) < 0.005, "uniform mean %g", s / n);
    CHECK(fabs(s2 / n - 1.0 / 3) < 0.005, "uniform E[x^2] %g", s2 / n);
    CHECK(fabs(ns / n) < 0.01, "normal mean %g", ns / n);
    CHECK(fabs(ns2 / n - 1) < 0.02, "normal variance %g", ns2 / n);
    for (int i = 0; i < 10; i++) CHECK(abs(hist[i] - n / 10) < n / 100, "bucket %d has %d", i, hist[i]);
    check_end();

    check_begin("permutation is a permutation and depends on the key");
    uint32_t p[1000], q[1000];
    int seen[1000] = {0};
    ds_rng_init(&r, 5, DS_RNG_EPOCH, 0);
    ds_rng_permutation(&r, p, 1000);
    for (int i = 0; i < 1000; i++) {
        CHECK(p[i] < 1000 && !seen[p[i]], "index %d repeated or out of range", i);
        if (p[i] < 1000) seen[p[i]] = 1;
    }
    ds_rng_init(&r, 5, DS_RNG_EPOCH, 1);
    ds_rng_permutation(&r, q, 1000);
    CHECK(memcmp(p, q, sizeof p) != 0, "epochs 0 and 1 gave the same order");
    check_end();

    check_begin("fnv-1a hash");
    CHECK(ds_hash64("") == 0xcbf29ce484222325ull, "empty");
    CHECK(ds_hash64("a") == 0xaf63dc4c8601ec8cull, "'a' gave %016llx", (unsigned long long)ds_hash64("a"));
    check_end();
    return check_exit();
}
