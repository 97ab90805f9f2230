/* rng: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
 *
 * Counter-based: every number is a pure function of (key, counter), so there is no
 * hidden stream state to save, and any rank or thread computes the same value for the
 * same purpose. ds keys Philox by the seed and puts (purpose, id, block) in the counter:
 *     key     = { seed low 32 bits, seed high 32 bits }
 *     counter = { block, purpose, id low 32 bits, id high 32 bits }
 * `id` names what the numbers are for within a purpose (an epoch, a sample, a class name's
 * hash, a tensor index); `block` advances as a stream draws more than 4 words. */
#ifndef DS_RNG_H
#define DS_RNG_H

#include <stddef.h>
#include <stdint.h>

/* Purposes: one per independent use of randomness, so no two uses ever share numbers. */
enum {
    DS_RNG_SPLIT = 1,      /* dsplit: id = hash of the class name */
    DS_RNG_PACK_ORDER = 2, /* dspack: shuffle of the manifest */
    DS_RNG_EPOCH = 3,      /* loader: id = epoch, the sample permutation */
    DS_RNG_AUGMENT = 4,    /* loader: id = epoch << 32 | sample */
    DS_RNG_INIT = 5,       /* model init: id = parameter index */
    DS_RNG_DATA = 6,       /* generators and tests */
};

/* The bare block function: out = Philox4x32-10(ctr, key). */
void ds_philox4x32(uint32_t out[4], const uint32_t ctr[4], const uint32_t key[2]);

typedef struct {
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t buf[4];
    int used;              /* words of buf already handed out */
} ds_rng;

void ds_rng_init(ds_rng *r, uint64_t seed, uint32_t purpose, uint64_t id);
uint32_t ds_rng_u32(ds_rng *r);
uint64_t ds_rng_u64(ds_rng *r);
/* Uniform integer in [0, n), n > 0 (bias below 2^-32 for n < 2^32). */
uint64_t ds_rng_below(ds_rng *r, uint64_t n);
/* Uniform in [0, 1) with 24 (float) or 53 (double) random bits. */
float ds_rng_float(ds_rng *r);
double ds_rng_double(ds_rng *r);
/* Standard normal (Box-Muller on doubles). */
double ds_rng_normal(ds_rng *r);
/* Fisher-Yates shuffle of idx[0..n) in place (the order produced depends only on r). */
void ds_rng_shuffle_u32(ds_rng *r, uint32_t *idx, size_t n);
/* Convenience: idx = a uniformly random permutation of 0..n-1. */
void ds_rng_permutation(ds_rng *r, uint32_t *idx, size_t n);

/* FNV-1a 64-bit hash, for turning a name (class directory) into an id. */
uint64_t ds_hash64(const char *s);

#endif
