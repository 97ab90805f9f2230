#include "rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

void ds_philox4x32(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

void ds_rng_init(ds_rng *r, uint64_t seed, uint32_t purpose, uint64_t id)
{
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32);
    r->ctr[0] = 0;
    r->ctr[1] = purpose;
    r->ctr[2] = (uint32_t)id;
    r->ctr[3] = (uint32_t)(id >> 32);
    r->used = 4;
}

uint32_t ds_rng_u32(ds_rng *r)
{
    if (r->used == 4) {
        ds_philox4x32(r->buf, r->ctr, r->key);
        r->ctr[0]++;
        r->used = 0;
    }
    return r->buf[r->used++];
}

uint64_t ds_rng_u64(ds_rng *r)
{
    uint64_t hi = ds_rng_u32(r);
    return hi << 32 | ds_rng_u32(r);
}

uint64_t ds_rng_below(ds_rng *r, uint64_t n)
{
    return ds_rng_u64(r) % n;
}

float ds_rng_float(ds_rng *r)
{
    return (ds_rng_u32(r) >> 8) * (1.0f / 16777216.0f);
}

double ds_rng_double(ds_rng *r)
{
    return (ds_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double ds_rng_normal(ds_rng *r)
{
    double u1 = 1.0 - ds_rng_double(r); /* (0, 1]: log is finite */
    double u2 = ds_rng_double(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void ds_rng_shuffle_u32(ds_rng *r, uint32_t *idx, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)ds_rng_below(r, i);
        uint32_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}

void ds_rng_permutation(ds_rng *r, uint32_t *idx, size_t n)
{
    for (size_t i = 0; i < n; i++) idx[i] = (uint32_t)i;
    ds_rng_shuffle_u32(r, idx, n);
}

uint64_t ds_hash64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}
