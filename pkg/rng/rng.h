/*
 * rng: counter-based random numbers (Philox 4x32-10, Salmon et al., SC'11),
 * keyed by (seed, study, trial, purpose) and addressed by (step, index).
 *
 * Nothing here has hidden state: the value at a given key, step and index is
 * a pure function of them, so a checkpoint needs only the key and the step to
 * restore a stream, any interval can be replayed, and the CUDA backend can
 * produce the same numbers with cuRAND's Philox (curand_init(apf_rng_philox_key
 * (key), step, 4 * block, ...) yields the same 4-word blocks).
 *
 * Layout: the 64-bit Philox key is derived once from the whole tuple
 * (philox_10(counter = (study, trial, purpose, 0), key = seed), first two
 * words); the 128-bit counter of block b at step s is (b lo, b hi, s lo, s hi),
 * which is cuRAND's (offset / 4, subsequence) layout.
 */
#ifndef APF_RNG_H
#define APF_RNG_H

#include <stddef.h>
#include <stdint.h>

/* What a stream is for; distinct purposes never share numbers. */
enum apf_rng_purpose {
	APF_RNG_INIT = 1,      /* parameter initialisation */
	APF_RNG_DROPOUT = 2,   /* dropout masks; step = global step */
	APF_RNG_SHUFFLE = 3,   /* data order; step = epoch */
	APF_RNG_SUBMISSION = 4, /* handed to the submission */
	APF_RNG_CORRUPTION = 5, /* a dataset's fixed corruption (fmnist_unet) */
	APF_RNG_TEST = 99,     /* tests only */
};

typedef struct apf_rng_key {
	uint64_t seed;
	uint32_t study, trial;
	uint32_t purpose;
} apf_rng_key;

/* One Philox 4x32-10 block: out = philox(ctr, key). */
void apf_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
		       uint32_t out[4]);
/* The 64-bit Philox key derived from the whole tuple. */
uint64_t apf_rng_philox_key(const apf_rng_key *k);

/* A cursor over one (key, step) stream; cheap to make, no allocation. */
typedef struct apf_rng {
	uint32_t key[2];
	uint64_t step;
	uint64_t block;   /* next block to draw */
	uint32_t buf[4];
	int avail;        /* words left in buf, taken from buf[4 - avail] */
} apf_rng;

void apf_rng_init(apf_rng *r, const apf_rng_key *k, uint64_t step);
/* Positions the cursor at 32-bit word `index` of the stream. */
void apf_rng_seek(apf_rng *r, uint64_t index);
uint32_t apf_rng_u32(apf_rng *r);
/* Uniform in [0, 1) with 24 random bits. */
float apf_rng_uniform(apf_rng *r);
/* Uniform integer in [0, n), without modulo bias (n > 0). */
uint32_t apf_rng_below(apf_rng *r, uint32_t n);
/* Standard normal (Box-Muller on two uniforms). */
float apf_rng_normal(apf_rng *r);

/* Word `index` of stream (key, step) directly: what a parallel kernel uses. */
uint32_t apf_rng_word(const uint32_t key[2], uint64_t step, uint64_t index);
/* Uniform [0, 1) from one word, the conversion every backend uses. */
static inline float apf_rng_to_uniform(uint32_t w)
{
	return (float)(w >> 8) * (1.0f / 16777216.0f);
}

#endif
